"""Fixtures of the Python package's tests (test/python): the llmc CLI to compare against and
engines compiled once per run. The package under test is the one `pip install .` put into the
interpreter running pytest (scripts/test.sh installs it from the Release tree)."""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ROOT / "test" / "models"


def pytest_addoption(parser):
    parser.addoption("--llmc", default=os.environ.get("LLMC_CLI", str(ROOT / "build/tools/llmc/llmc")),
                     help="the llmc CLI the package's results are compared with")


@pytest.fixture(scope="session")
def cli(pytestconfig):
    path = pytestconfig.getoption("--llmc")
    assert os.access(path, os.X_OK), f"no llmc CLI at {path}"
    return path


@pytest.fixture(scope="session")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("llmc-python")


@pytest.fixture(scope="session")
def demo_engine(cli, work):
    """The demo decoder compiled by the CLI from its folder (tokenizer and configs included)."""
    path = work / "demo-cli.engine"
    subprocess.run([cli, "compile", str(MODELS / "demo"), "-o", str(path), "--max-context", "256"],
                   check=True, capture_output=True)
    return path
