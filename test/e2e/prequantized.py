#!/usr/bin/env python3
"""Pre-quantized ONNX models, as ONNX Runtime's own quantization tools write them, compiled by
llmc and run against ONNX Runtime on the same inputs (docs/quantization.md):

- quantize_dynamic: DynamicQuantizeLinear + MatMulInteger (int8 weights, uint8 activations);
- quantize_static, QDQ format, per channel: QuantizeLinear / DequantizeLinear around MatMul;
- MatMulNBitsQuantizer: com.microsoft.MatMulNBits, 4-bit blocks of 32, symmetric and with
  zero points, at accuracy_level 0 (the reference kernel, float activations) and 4 (lowered
  onto llmc's int4 kernels, int8 activations).

The float model is a small MLP with seeded random weights, written here (nothing committed).
Integer paths must agree with ONNX Runtime exactly up to float rounding of the final
rescaling (within 1e-5 relative L2); the lowered MatMulNBits within 1e-2.
"""
import argparse
import logging
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def write_float_model(path):
    rng = np.random.default_rng(0)
    weights = {
        "W1": rng.standard_normal((64, 128)).astype(np.float32) * 0.1,
        "b1": rng.standard_normal(128).astype(np.float32) * 0.1,
        "W2": rng.standard_normal((128, 32)).astype(np.float32) * 0.1,
        "b2": rng.standard_normal(32).astype(np.float32) * 0.1,
    }
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h0"], name="fc1"),
             helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]),
             helper.make_node("MatMul", ["h2", "W2"], ["h3"], name="fc2"),
             helper.make_node("Add", ["h3", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what this onnxruntime's quantization tools load
    onnx.save(model, path)


def write_quantized_models(tmp, float_path):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    models = {}
    models["dynamic int8 (MatMulInteger)"] = os.path.join(tmp, "dynamic.onnx")
    quantize_dynamic(float_path, models["dynamic int8 (MatMulInteger)"], weight_type=QuantType.QInt8)

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(2)
            self.batches = iter([{"x": rng.standard_normal((4, 64)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    models["static QDQ per channel"] = os.path.join(tmp, "qdq.onnx")
    quantize_static(float_path, models["static QDQ per channel"], Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True)
    for symmetric in (True, False):
        for accuracy in (0, 4):
            # accuracy_level 4 allows int8 activations: llmc then runs its int4 kernels.
            name = f"MatMulNBits 4-bit g32 {'symmetric' if symmetric else 'zero points'} accuracy {accuracy}"
            quantizer = MatMulNBitsQuantizer(onnx.load(float_path), block_size=32, is_symmetric=symmetric,
                                             accuracy_level=accuracy)
            quantizer.process()
            models[name] = os.path.join(tmp, f"nbits_{symmetric}_{accuracy}.onnx")
            quantizer.model.save_model_to_file(models[name])
    return models


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)  # the quantizers log every weight
    failures = []

    def check(ok, label):
        print(f"{'PASS' if ok else 'FAIL'} {label}", flush=True)
        if not ok:
            failures.append(label)

    with tempfile.TemporaryDirectory(prefix="llmc-prequant-") as tmp:
        float_path = os.path.join(tmp, "mlp.onnx")
        write_float_model(float_path)
        models = write_quantized_models(tmp, float_path)
        x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
        x_path = os.path.join(tmp, "x.npy")
        np.save(x_path, x)
        for name, path in models.items():
            ops = sorted({(n.domain + "." if n.domain else "") + n.op_type for n in onnx.load(path).graph.node})
            want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            engine = path + ".engine"
            proc = subprocess.run([args.llmc, "compile", path, "-o", engine], capture_output=True, text=True)
            check(proc.returncode == 0, f"{name}: compile ({', '.join(ops)}) {proc.stderr.strip()[-300:]}")
            if proc.returncode != 0:
                continue
            out_dir = os.path.join(tmp, "out")
            proc = subprocess.run([args.llmc, "run", engine, "--input", f"x={x_path}", "--output-dir", out_dir],
                                  capture_output=True, text=True)
            check(proc.returncode == 0, f"{name}: run {proc.stderr.strip()[-300:]}")
            if proc.returncode != 0:
                continue
            got = np.load(os.path.join(out_dir, "y.npy"))
            error = float(np.linalg.norm(got - want) / np.linalg.norm(want))
            lowered = "accuracy 4" in name
            # Lowered onto the int4 kernels, both sides quantize the activations to int8, each
            # its own way: within a few 1e-3 (a wrong repacking gives errors of order 1).
            bound = 1e-2 if lowered else 1e-5
            check(got.shape == want.shape and error < bound,
                  f"{name}: |llmc - onnxruntime| / |onnxruntime| = {error:.2e} (max abs {np.abs(got - want).max():.2e}, "
                  f"bound {bound:g})")
            if "MatMulNBits" in name:
                kernels = subprocess.run([args.llmc, "inspect", engine], capture_output=True, text=True).stdout
                want_kernel = "LlmQuantMatMul" if lowered else "com.microsoft.MatMulNBits"
                check(want_kernel in kernels, f"{name}: the engine runs {want_kernel}")
    print("\nall passed" if not failures else f"\n{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
