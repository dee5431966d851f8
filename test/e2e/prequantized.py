#!/usr/bin/env python3
"""Pre-quantized ONNX models, as ONNX Runtime's own quantization tools write them, compiled by
llmc and run against references that do not depend on the host (docs/quantization.md):

- quantize_dynamic: DynamicQuantizeLinear + MatMulInteger (int8 weights, uint8 activations),
  against ONNX's reference evaluator;
- quantize_static, QDQ format, per channel: QuantizeLinear / DequantizeLinear around MatMul,
  against ONNX's reference evaluator;
- MatMulNBitsQuantizer: com.microsoft.MatMulNBits, 4-bit blocks of 32, symmetric and with
  zero points, at accuracy_level 0 (float activations; against a numpy float64 implementation
  of the operator's documented semantics) and 4 (lowered onto llmc's int4 kernels, int8
  activations; against a numpy implementation of that documented lowering).

ONNX Runtime only writes the models: its fused integer kernels differ between ISAs (on AVX2
without VNNI, vpmaddubsw saturates u8 x s8 pair sums), so its outputs are printed as a note,
never compared. Every comparison is elementwise against a bound derived from the arithmetic
(see "References and bounds" below), and each bound is checked to reject a 1% scale error.

The float model is a small MLP with seeded random weights, written here (nothing committed).
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


# ---------------------------------------------------------------------------------------------
# References and bounds. Nothing here calls ONNX Runtime: its fused QDQ/integer kernels differ
# between ISAs (AVX2 without VNNI saturates u8 x s8 products in vpmaddubsw; AVX-512 VNNI does
# not), so an ONNX Runtime output is a host-dependent reference. The references are ONNX's
# reference evaluator (numpy, the operators as specified) for the standard operators and numpy
# implementations of com.microsoft.MatMulNBits' documented semantics. Their only host-dependent
# part is the summation order of numpy's float matmul (BLAS), which every bound below covers.
#
# Each bound is elementwise, |llmc - reference| <= bound, derived from the arithmetic:
# - float32 rounding: U = 2^-24 per operation; a sum of n products in any order is within
#   gamma(n) = nU / (1 - nU) of the exact one, relative to the sum of their magnitudes (Higham,
#   Accuracy and Stability of Numerical Algorithms, 3.1); both sides round, so twice that.
# - integer products (MatMulInteger, the int4 x int8 kernels) are exact.
# - a rounding to integers (QuantizeLinear, DynamicQuantizeLinear, activation blocks) gives both
#   sides the same integer unless its argument lies within the float error above of a rounding
#   tie; `steps` counts how far the integer can then move, and that is carried forward as
#   (steps x scale) times the magnitudes it multiplies. On this test's inputs no argument is
#   that close to a tie, so the bounds reduce to a few ulps of the float operations.
# A 1% scale error must fail every bound: checked against the reference scaled by 1.01.
# ---------------------------------------------------------------------------------------------
U = 2.0 ** -24


def gamma(n):
    return n * U / (1 - n * U)


def steps(t, radius, lo=-np.inf, hi=np.inf):
    """How far (in integers) round(t') can be from round(t) for any t' within radius of t."""
    center = np.rint(np.clip(t, lo, hi))
    return np.maximum(np.rint(np.clip(t + radius, lo, hi)) - center, center - np.rint(np.clip(t - radius, lo, hi)))


def f64(a):
    return np.asarray(a, dtype=np.float64)


def reference_run(path, x):
    """ONNX's reference evaluator over the whole graph, every intermediate value returned."""
    from onnx.reference import ReferenceEvaluator
    model = onnx.load(path)
    for opset in model.opset_import:
        # This onnx's evaluator implements QuantizeLinear/DequantizeLinear from opset 19 on; for
        # the int8/uint8/int32 types here opset 13's operators are the same, and MatMul, Add,
        # Mul, Cast, Relu and the dynamic ones have not changed between 17 and 19.
        if opset.domain in ("", "ai.onnx") and opset.version < 19:
            opset.version = 19
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    values.update(ReferenceEvaluator(model).run(None, {"x": x}, intermediate=True))
    return values


def reference_dynamic(path, x):
    """DynamicQuantizeLinear + MatMulInteger (uint8 activations, int8 weights, int32 sums)."""
    v = reference_run(path, x)

    def quantize(a, scale, delta_a):
        # DynamicQuantizeLinear: scale = (max(a, 0) - min(a, 0)) / 255, q = rint(a / scale) + zp.
        # The scale moves with the extremes (their difference by at most 2 max(delta_a)), the
        # argument by delta_a / scale; 2U for the division (or a rounded reciprocal's product).
        rel_scale = 2 * float(delta_a.max()) / (float(scale) * 255) + 2 * U
        t = f64(a) / f64(scale)
        return steps(t, delta_a / f64(scale) + np.abs(t) * (rel_scale + 2 * U)), rel_scale

    def layer(q_in, zp_in, s_in, moved, rel_scale, w, w_scale, w_zp, bias):
        # int32 sum exact; moved integers change it by moved @ |w - w_zp|. Then Cast (exact),
        # Mul by s_in * w_scale (two roundings, either order: 4U), Add bias (2U).
        wq = f64(w) - f64(w_zp)
        acc = (f64(q_in) - f64(zp_in)) @ wq
        scale = f64(s_in) * f64(w_scale)
        h = acc * scale
        delta = (moved @ np.abs(wq)) * scale + np.abs(h) * (rel_scale + 4 * U) + 2 * U * (np.abs(h) + np.abs(f64(bias)))
        return delta

    moved_x, rel_x = quantize(x, v["x_scale"], np.zeros_like(f64(x)))
    delta_h1 = layer(v["x_quantized"], v["x_zero_point"], v["x_scale"], moved_x, rel_x,
                     v["W1_quantized"], v["W1_scale"], v["W1_zero_point"], v["b1"])
    moved_h2, rel_h2 = quantize(v["h2"], v["h2_scale"], delta_h1)  # Relu: 1-Lipschitz
    bound = layer(v["h2_quantized"], v["h2_zero_point"], v["h2_scale"], moved_h2, rel_h2,
                  v["W2_quantized"], v["W2_scale"], v["W2_zero_point"], v["b2"])
    return v["y"], bound, int((moved_x > 0).sum() + (moved_h2 > 0).sum())


def reference_qdq(path, x):
    """QuantizeLinear / DequantizeLinear around float MatMul and Add (uint8 activations, int8
    per-channel weights, int32 biases), as quantize_static writes it: a chain of float
    operations, each re-quantized."""
    v = reference_run(path, x)
    near_ties = 0

    def requantize(name, delta):
        # q = rint(a / scale) + zp (saturated to uint8); DequantizeLinear (q - zp) * scale: one
        # rounding each side (2U). The integer moves only near a tie.
        nonlocal near_ties
        s, zp = f64(v[name + "_scale"]), f64(v[name + "_zero_point"])
        a = v.get(name + "_QuantizeLinear_Input", v.get(name))
        t = f64(a) / s
        moved = steps(t, delta / s + 2 * U * np.abs(t), -zp, 255 - zp)
        near_ties += int((moved > 0).sum())
        deq = f64(v[name + "_DequantizeLinear_Output"] if name != "y" else v["y"])
        return moved * s + 2 * U * np.abs(deq), np.abs(deq)

    def matmul(a_abs, delta_a, w):
        # Any order of float32 sums, both sides: 2 gamma(K + 1) (the +1: the weight's
        # DequantizeLinear rounding), plus the input's deviation through |W|.
        w_abs = np.abs(f64(v[w + "_DequantizeLinear_Output"]))
        return delta_a @ w_abs + 2 * gamma(w_abs.shape[0] + 1) * (a_abs @ w_abs)

    delta_x, x_abs = requantize("x", np.zeros_like(f64(x)))
    delta_h0, h0_abs = requantize("h0", matmul(x_abs, delta_x, "W1"))
    b1 = np.abs(f64(v["b1_DequantizeLinear_Output"]))
    delta_h2, h2_abs = requantize("h2", delta_h0 + 2 * U * (h0_abs + b1))  # Add (Relu folded)
    delta_h3, h3_abs = requantize("h3", matmul(h2_abs, delta_h2, "W2"))
    b2 = np.abs(f64(v["b2_DequantizeLinear_Output"]))
    bound, _ = requantize("y", delta_h3 + 2 * U * (h3_abs + b2))
    return v["y"], bound, near_ties


def nbits_weight(model, node):
    """MatMulNBits' weight as its contrib-op documentation defines it: B [N, blocks, blob] uint8,
    element k of a block in byte k / 2, low nibble first; scales [N * blocks]; zero points packed
    the same way per row (default 2^(bits - 1) = 8). Returns q [N, K], zero [N, blocks],
    scale [N, blocks]."""
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["bits"] == 4 and attrs["block_size"] == 32
    k, n = attrs["K"], attrs["N"]
    b = init[node.input[1]]
    blocks = b.shape[1]
    q = np.stack([b & 15, b >> 4], axis=-1).reshape(n, -1)[:, :k].astype(np.float64)
    scale = f64(init[node.input[2]]).reshape(n, blocks)
    if len(node.input) > 3 and node.input[3]:
        z = init[node.input[3]].reshape(n, -1)
        zero = np.stack([z & 15, z >> 4], axis=-1).reshape(n, -1)[:, :blocks].astype(np.float64)
    else:
        zero = np.full((n, blocks), 8.0)
    return q, zero, scale, init


def reference_nbits_float(path, x):
    """accuracy_level 0: float activations times the dequantized weight (q - zero) * scale, in
    float64 here (exact to ~1e-16); llmc's float32 kernel dequantizes (1 rounding), sums K
    products in its order and adds the bias: gamma(K + 3) of the magnitudes per layer, the first
    layer's deviation carried through |W2| (Relu is 1-Lipschitz)."""
    model = onnx.load(path)
    nodes = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    a, delta, a_abs = f64(x), np.zeros(x.shape), np.abs(f64(x))
    for i, node in enumerate(nodes):
        q, zero, scale, init = nbits_weight(model, node)
        w = (q - np.repeat(zero, 32, axis=1)[:, :q.shape[1]]) * np.repeat(scale, 32, axis=1)[:, :q.shape[1]]
        bias = f64(init[f"b{i + 1}"])
        h = a @ w.T + bias
        delta = delta @ np.abs(w.T) * (1 + gamma(q.shape[1] + 3)) + \
            gamma(q.shape[1] + 3) * (a_abs @ np.abs(w.T) + np.abs(bias))
        a = np.maximum(h, 0) if i + 1 < len(nodes) else h
        a_abs = np.abs(a)
    return a, delta, 0


def reference_nbits_int8(path, x):
    """accuracy_level 4, lowered to llmc's int4 x int8 kernels as docs/quantization.md
    documents them: scales rounded to float16 (the repacked weight's); activations quantized in
    blocks of 32 along K, scale = max|a| / 127 (float32), q = round(a / scale); per block the
    exact integer dot product times both scales, summed over blocks. Float rounding: the scale
    products, the zero-point term (zero x sum of block scale x sum of q) and the sum over the
    K / 32 blocks, gamma(K / 32 + 5) of T = sum over blocks of |scales| x sum |q_a| (|q_w| +
    zero); an activation within that of a rounding tie may round the other way: one step x |w|."""
    model = onnx.load(path)
    nodes = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    a, delta_a, near_ties = f64(x), np.zeros(x.shape), 0
    for i, node in enumerate(nodes):
        q, zero, scale, init = nbits_weight(model, node)
        n, k = q.shape
        blocks = k // 32
        scale16 = scale.astype(np.float16).astype(np.float64)
        wint = q - np.repeat(zero, 32, axis=1)  # exact integers
        w16 = wint * np.repeat(scale16, 32, axis=1)
        ab = a.reshape(len(a), blocks, 32)
        amax = np.abs(ab).max(axis=2)
        a_scale = f64(np.float32(amax) / np.float32(127))
        t = ab / np.where(a_scale > 0, a_scale, 1)[:, :, None]
        qa = np.clip(np.rint(t), -127, 127)
        # The block's scale moves with its max by at most the input's deviation; the argument
        # by delta / scale, and 2U for llmc's multiplication by a rounded reciprocal.
        dmax = delta_a.reshape(len(a), blocks, 32).max(axis=2)
        rel_scale = np.where(amax > 0, dmax / np.where(amax > 0, amax, 1), 0) + 2 * U
        radius = delta_a.reshape(ab.shape) / np.where(a_scale > 0, a_scale, 1)[:, :, None] + \
            np.abs(t) * (rel_scale + 2 * U)[:, :, None]
        moved = steps(t, radius, -127, 127)
        near_ties += int((moved > 0).sum())
        dots = np.einsum("mbk,nbk->mnb", qa, wint.reshape(n, blocks, 32))  # exact
        h = np.einsum("mnb,mb,nb->mn", dots, a_scale, scale16)
        magnitude = np.einsum("mbk,nbk,mb,nb->mn", np.abs(qa), (q + np.repeat(zero, 32, axis=1)).reshape(n, blocks, 32),
                              a_scale, np.abs(scale16))  # symmetric scales can be negative
        flip = (moved * a_scale[:, :, None]).reshape(len(a), k) @ np.abs(w16.T)
        bias = f64(init[f"b{i + 1}"])
        h = h + bias
        delta = flip + (rel_scale.max(axis=1, keepdims=True) + gamma(blocks + 5)) * magnitude + 2 * U * np.abs(h)
        if i + 1 < len(nodes):
            a, delta_a = np.maximum(h, 0), delta
        else:
            return h, delta, near_ties


def reference_for(name):
    if name.startswith("dynamic"):
        return "ONNX reference evaluator", reference_dynamic
    if name.startswith("static QDQ"):
        return "ONNX reference evaluator", reference_qdq
    if "accuracy 0" in name:
        return "numpy MatMulNBits (float64)", reference_nbits_float
    return "numpy int4 x int8 blocks (llmc's documented lowering)", reference_nbits_int8


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
            reference_name, reference = reference_for(name)
            want, bound, near_ties = reference(path, x)
            want = f64(want)
            # The bound must be able to fail: a 1% scale error lies outside it.
            rejected = float(np.mean(np.abs(want * 0.01) > bound))
            check(rejected > 0.5, f"{name}: the bound rejects a 1% scale error ({rejected:.0%} of the outputs "
                                  f"outside it)")
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
            ort_out = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            print(f"note {name}: ONNX Runtime (host-dependent kernels, not compared) differs from the reference "
                  f"by {np.linalg.norm(ort_out - want) / np.linalg.norm(want):.2e} relative L2")
            error = np.abs(f64(got) - want)
            used = float(np.max(np.where(error > 0, error / np.maximum(bound, 1e-300), 0)))
            relative = float(np.linalg.norm(error) / np.linalg.norm(want))
            check(got.shape == want.shape and np.all(error <= bound),
                  f"{name}: llmc vs {reference_name}: max |diff| {error.max():.2e} (relative L2 {relative:.2e}), "
                  f"elementwise within the bound (|bound| / |reference| {np.linalg.norm(bound) / np.linalg.norm(want):.1e}, "
                  f"largest diff / bound {used:.2g}; {near_ties} rounding(s) near a tie)")
            if "MatMulNBits" in name:
                lowered = "accuracy 4" in name
                kernels = subprocess.run([args.llmc, "inspect", engine], capture_output=True, text=True).stdout
                want_kernel = "LlmQuantMatMul" if lowered else "com.microsoft.MatMulNBits"
                check(want_kernel in kernels, f"{name}: the engine runs {want_kernel}")
    print("\nall passed" if not failures else f"\n{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
