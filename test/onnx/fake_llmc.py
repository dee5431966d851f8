#!/usr/bin/env python3
"""A stand-in for the llmc CLI, backed by ONNX Runtime, to check the conformance harness itself.

Implements only what conformance.py calls, with llmc's contract:
  fake_llmc.py compile MODEL.onnx -o ENGINE     (exit 2 + "unsupported" when ORT lacks a kernel)
  fake_llmc.py run ENGINE --input NAME=FILE.pb ... --output-dir DIR   (writes DIR/<output>.npy)
The "engine" is a copy of the model. Run the harness with it through run_fake_llmc.sh.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def _session(model_path: str):
    # ORT 1.22 calls opset 23 unreleased and refuses it unless this is set before import.
    os.environ["ALLOW_RELEASED_ONNX_OPSET_ONLY"] = "0"
    import onnxruntime as ort

    model = onnx.load(model_path)
    # ORT 1.22 reads IR <= 10; the newest node tests are IR 11 with nothing that needs it.
    model.ir_version = min(model.ir_version, 10)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception as e:
        if "domain_version of 23" not in str(e):
            raise
    # Many ops got a version 23 that only widens their types; ORT 1.22 has kernels up to 22.
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version == 23:
            opset.version = 22
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def compile_model(model: str, engine: str) -> int:
    try:
        _session(model)
    except Exception as e:  # ORT raises its own exception types; all we need is the text
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        if any(k in str(e) for k in ("NOT_IMPLEMENTED", "implementation", "No Op registered")):
            print(f"error: unsupported: {message}", file=sys.stderr)
            return 2
        print(f"error: {message}", file=sys.stderr)
        return 1
    shutil.copyfile(model, engine)
    return 0


def run_engine(engine: str, inputs: list[str], output_dir: str) -> int:
    feeds = {}
    for spec in inputs:
        name, _, path = spec.partition("=")
        feeds[name] = numpy_helper.to_array(onnx.load_tensor(path))
    session = _session(engine)
    names = [o.name for o in session.get_outputs()]
    try:
        values = session.run(names, feeds)
    except Exception as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    os.makedirs(output_dir, exist_ok=True)
    for name, value in zip(names, values):
        np.save(os.path.join(output_dir, f"{name}.npy"), np.asarray(value))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile")
    c.add_argument("model")
    c.add_argument("-o", dest="engine", required=True)
    r = sub.add_parser("run")
    r.add_argument("engine")
    r.add_argument("--input", action="append", default=[])
    r.add_argument("--output-dir", required=True)
    args = parser.parse_args()
    if args.command == "compile":
        return compile_model(args.model, args.engine)
    return run_engine(args.engine, args.input, args.output_dir)


if __name__ == "__main__":
    sys.exit(main())
