#!/usr/bin/env python3
"""Refit: `llmc compile --strip-weights` then `llmc refit` from a safetensors file of the model's
initializers gives the engine a normal compile gives, byte for byte; refit from other weights
gives the engine of the model with those weights (same weights section; the plan differs only in
the recorded source-model hash) and the same outputs; a stripped engine refuses to run; bad
weight files fail clearly."""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")
DTYPES = {np.float32: "F32", np.float16: "F16", np.float64: "F64", np.int64: "I64", np.int32: "I32",
          np.int8: "I8", np.uint8: "U8", np.bool_: "BOOL"}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": DTYPES[array.dtype.type], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def sections(data):
    """(plan bytes, weights bytes) of an engine file (64-byte header: magic, versions, offsets)."""
    _, _, _, _, fb_off, fb_size, w_off, w_size, _, _ = struct.unpack("<8sHHIQQQQQQ", data[:64])
    return data[fb_off:fb_off + fb_size], data[w_off:w_off + w_size]


class Checker:
    def __init__(self, llmc, work):
        self.llmc, self.work, self.failures, self.count = llmc, work, [], 0

    def path(self, name):
        return os.path.join(self.work, name)

    def run(self, *args):
        return subprocess.run([self.llmc, *args], capture_output=True, text=True, timeout=600)

    def expect(self, ok, label, detail=""):
        self.count += 1
        print(("ok   " if ok else "FAIL ") + label + (f": {detail}" if detail and not ok else ""))
        if not ok:
            self.failures.append(label)

    def compile(self, model, out, flags):
        result = self.run("compile", model, "-o", self.path(out), *flags)
        if result.returncode != 0:
            raise RuntimeError(f"compile {model} {flags}: {result.stderr}")
        return open(self.path(out), "rb").read()

    def refit(self, engine, weights, out):
        return self.run("refit", self.path(engine), "--weights", self.path(weights), "-o", self.path(out))

    def check_model(self, name):
        with open(os.path.join(MODELS_DIR, name, "manifest.json")) as f:
            manifest = json.load(f)
        model = os.path.join(MODELS_DIR, name, manifest.get("model", "model.onnx"))
        flags = manifest.get("compile_flags", [])
        proto = onnx.load(model)
        initializers = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
        write_safetensors(self.path("same.safetensors"), initializers)
        normal = self.compile(model, "normal.engine", flags)
        stripped = self.compile(model, "stripped.engine", flags + ["--strip-weights"])
        result = self.refit("stripped.engine", "same.safetensors", "refit.engine")
        self.expect(result.returncode == 0 and open(self.path("refit.engine"), "rb").read() == normal,
                    f"{name}: refit of the stripped engine is byte-identical to a normal compile "
                    f"({len(stripped)} -> {len(normal)} bytes)", result.stderr)
        result = self.refit("normal.engine", "same.safetensors", "again.engine")
        self.expect(result.returncode == 0 and open(self.path("again.engine"), "rb").read() == normal,
                    f"{name}: refit of a normal engine with its own weights changes nothing", result.stderr)
        # Other weights: every float tensor scaled and perturbed.
        rng = np.random.default_rng(0)
        other = {k: (v * 1.5 + rng.standard_normal(v.shape).astype(np.float32) * 0.01
                     if v.dtype == np.float32 and v.size > 1 else v) for k, v in initializers.items()}
        for init in proto.graph.initializer:
            init.CopyFrom(numpy_helper.from_array(other[init.name], init.name))
        onnx.save(proto, self.path("other.onnx"))
        write_safetensors(self.path("other.safetensors"), other)
        other_normal = self.compile(self.path("other.onnx"), "other_normal.engine", flags)
        result = self.refit("stripped.engine", "other.safetensors", "other_refit.engine")
        refit_bytes = open(self.path("other_refit.engine"), "rb").read() if result.returncode == 0 else b""
        plan_a, weights_a = sections(other_normal)
        plan_b, weights_b = sections(refit_bytes) if refit_bytes else (b"", b"")
        differing = sum(1 for x, y in zip(plan_a, plan_b) if x != y) + abs(len(plan_a) - len(plan_b))
        self.expect(result.returncode == 0 and weights_a == weights_b and differing <= 16,
                    f"{name}: refit from other weights equals compiling the model with them "
                    f"(weights section identical, {differing} plan bytes differ: the source hash)", result.stderr)
        return stripped

    def check_errors(self):
        inspect = self.run("inspect", self.path("stripped.engine"))
        self.expect(inspect.returncode == 0 and "weights stripped" in inspect.stdout,
                    "inspect shows a stripped engine", inspect.stdout + inspect.stderr)
        model = onnx.load(os.path.join(MODELS_DIR, "mlp", "model.onnx"))
        tensors = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        self.compile(os.path.join(MODELS_DIR, "mlp", "model.onnx"), "mlp_stripped.engine", ["--strip-weights"])
        x = self.path("x.npy")
        inputs = model.graph.input[0]
        np.save(x, np.ones([d.dim_value or 2 for d in inputs.type.tensor_type.shape.dim], np.float32))
        result = self.run("run", self.path("mlp_stripped.engine"), "--input", f"{inputs.name}={x}")
        self.expect(result.returncode == 2 and "were stripped" in result.stderr and "llmc refit" in result.stderr,
                    "a stripped engine refuses to run and says how to refit it", result.stderr)
        missing = dict(tensors)
        dropped = sorted(missing)[0]
        del missing[dropped]
        write_safetensors(self.path("missing.safetensors"), missing)
        result = self.refit("mlp_stripped.engine", "missing.safetensors", "bad.engine")
        self.expect(result.returncode == 2 and f"needs initializer '{dropped}'" in result.stderr
                    and not os.path.exists(self.path("bad.engine")),
                    "a missing initializer is named, and nothing is written", result.stderr)
        wrong = dict(tensors)
        name = next(k for k, v in wrong.items() if v.ndim == 2)
        wrong[name] = np.zeros((3, 3), np.float32)
        write_safetensors(self.path("wrong.safetensors"), wrong)
        result = self.refit("mlp_stripped.engine", "wrong.safetensors", "bad.engine")
        self.expect(result.returncode == 2 and f"initializer '{name}' is float32[3, 3]" in result.stderr,
                    "a wrong shape names the initializer and both shapes", result.stderr)
        with open(self.path("missing.safetensors"), "rb") as f:
            data = f.read()
        with open(self.path("truncated.safetensors"), "wb") as f:
            f.write(data[: len(data) // 2])
        result = self.refit("mlp_stripped.engine", "truncated.safetensors", "bad.engine")
        self.expect(result.returncode == 2 and "truncated.safetensors" in result.stderr,
                    "a truncated weights file fails with its name", result.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--model", action="append", default=[])
    args = parser.parse_args()
    models = args.model or ["mlp", "bert_tiny", "gpt2_tiny", "llama_tiny", "qwen2_tiny", "genai_llama_tiny",
                            "attention23_tiny", "llama_tiny_past", "phi3_tiny_past", "gpt_neox_tiny_past", "falcon_tiny_past", "qwen3_tiny",
                            "bloom_tiny_past", "opt_tiny", "mixtral_tiny"]
    with tempfile.TemporaryDirectory(prefix="llmc-refit-") as work:
        checker = Checker(args.llmc, work)
        for name in models:
            checker.check_model(name)
        checker.check_errors()
        print(f"{checker.count - len(checker.failures)} of {checker.count} refit checks passed")
        return 1 if checker.failures else 0


if __name__ == "__main__":
    sys.exit(main())
