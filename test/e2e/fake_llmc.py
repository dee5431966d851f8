#!/usr/bin/env python3
"""A stand-in for the llmc CLI backed by ONNX Runtime, to check run_models.py itself.

Implements the two forms run_models.py calls, with llmc's exit codes (1 runtime, 2 bad input):
  fake_llmc.py compile MODEL.onnx -o OUT.engine            (the "engine" is a copy of the model)
  fake_llmc.py run OUT.engine --input NAME=FILE.npy ... --output-dir DIR   (writes DIR/<output>.npy)
Use it as `run_models.py --llmc test/e2e/fake_llmc.py`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

import numpy as np


def _session(path: str):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def compile_model(model: str, engine: str) -> int:
    if not os.path.isfile(model):
        print(f"error: {model}: no such file", file=sys.stderr)
        return 2
    try:
        _session(model)
    except Exception as e:  # ORT raises its own exception types; the message is all we need
        print(f"error: {model}: {e}", file=sys.stderr)
        return 2
    shutil.copyfile(model, engine)
    return 0


def run_engine(engine: str, input_specs: list[str], output_dir: str) -> int:
    feeds = {}
    for spec in input_specs:
        name, sep, path = spec.partition("=")
        if not sep or not name:
            print(f"error: --input {spec!r}: expected NAME=FILE.npy", file=sys.stderr)
            return 2
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            print(f"error: --input {name}: {e}", file=sys.stderr)
            return 2
    try:
        session = _session(engine)
        names = [o.name for o in session.get_outputs()]
        values = session.run(names, feeds)
    except Exception as e:
        print(f"error: {engine}: {e}", file=sys.stderr)
        return 1
    os.makedirs(output_dir, exist_ok=True)
    for name, value in zip(names, values):
        np.save(os.path.join(output_dir, f"{name}.npy"), np.asarray(value))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    compile_parser = commands.add_parser("compile")
    compile_parser.add_argument("model")
    compile_parser.add_argument("-o", dest="engine", required=True)
    run_parser = commands.add_parser("run")
    run_parser.add_argument("engine")
    run_parser.add_argument("--input", action="append", default=[])
    run_parser.add_argument("--output-dir", required=True)
    args = parser.parse_args()  # exits 2 on bad usage, as llmc does
    if args.command == "compile":
        return compile_model(args.model, args.engine)
    return run_engine(args.engine, args.input, args.output_dir)


if __name__ == "__main__":
    sys.exit(main())
