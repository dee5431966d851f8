#!/usr/bin/env python3
"""llmc's kernels for ONNX Runtime's contrib operators against ONNX Runtime itself.

For each case a one-node model is built with onnx.helper (SimplifiedLayerNormalization,
com.microsoft SkipSimplifiedLayerNormalization, GroupQueryAttention in several forms,
RotaryEmbedding), run with ONNX Runtime on random inputs (the reference), then compiled with
`llmc compile --as-graph` and run with `llmc run`; every output must match at rtol 1e-4 /
atol 1e-5. Prints one line per case and `N passed, N failed`.

  ort_contrib_ops.py --llmc build/tools/llmc/llmc
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

F = TensorProto.FLOAT


def model(node, inputs, outputs):
    graph = helper.make_graph([node], "case", inputs, outputs)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def tensor(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def rotary_caches(rng, positions, half):
    angles = rng.uniform(0, 3, size=(positions, half)).astype(np.float32)
    return np.cos(angles), np.sin(angles)


def cases(rng):
    # RMS norm, and residual add + RMS norm (its sum output too).
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    g = rng.standard_normal(8).astype(np.float32)
    yield "SimplifiedLayerNormalization", model(
        helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"], axis=-1, epsilon=1e-5),
        [tensor("x", F, [2, 5, 8]), tensor("g", F, [8])], [tensor("y", F, [2, 5, 8])]), {"x": x, "g": g}
    skip = rng.standard_normal((2, 5, 8)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    yield "SkipSimplifiedLayerNormalization", model(
        helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "g", "bias"],
                         ["y", "", "", "sum"], domain="com.microsoft", epsilon=1e-6),
        [tensor(n, F, s) for n, s in (("x", [2, 5, 8]), ("skip", [2, 5, 8]), ("g", [8]), ("bias", [8]))],
        [tensor("y", F, [2, 5, 8]), tensor("sum", F, [2, 5, 8])]), {"x": x, "skip": skip, "g": g, "bias": bias}

    # GroupQueryAttention: 4 query heads over 2 KV heads of 8, packed or separate Q/K/V, with
    # and without rotary: a prefill over an empty past, a chunk and a decode over a past of 6.
    heads, kv_heads, head = 4, 2, 16  # ONNX Runtime wants head sizes that are multiples of 16 with rotary
    cos, sin = rotary_caches(rng, 32, head // 2)
    # local_window_size 2 (sliding window: each token sees itself and the 2 keys before it)
    # over a prefill of 5, a chunk of 3 and a decode step past a past of 6.
    for packed, rotary, window in ((True, 0, -1), (True, 1, -1), (False, 0, -1), (False, 1, -1),
                                   (True, 1, 2), (False, 0, 2), (True, 0, 0)):
        # (ONNX Runtime takes a multi-token chunk over a past only at batch 1.)
        for past_len, seq, batch in ((0, 5, 2), (6, 3, 1), (6, 1, 2)):
            total = past_len + seq
            feeds = {}
            if packed:
                feeds["query"] = rng.standard_normal((batch, seq, (heads + 2 * kv_heads) * head)).astype(np.float32)
                names = ["query", "", ""]
            else:
                feeds["query"] = rng.standard_normal((batch, seq, heads * head)).astype(np.float32)
                feeds["key"] = rng.standard_normal((batch, seq, kv_heads * head)).astype(np.float32)
                feeds["value"] = rng.standard_normal((batch, seq, kv_heads * head)).astype(np.float32)
                names = ["query", "key", "value"]
            feeds["past_key"] = rng.standard_normal((batch, kv_heads, past_len, head)).astype(np.float32)
            feeds["past_value"] = rng.standard_normal((batch, kv_heads, past_len, head)).astype(np.float32)
            feeds["seqlens_k"] = np.full((batch,), total - 1, np.int32)
            feeds["total_sequence_length"] = np.array([total], np.int32)
            names += ["past_key", "past_value", "seqlens_k", "total_sequence_length"]
            if rotary:
                feeds["cos_cache"], feeds["sin_cache"] = cos, sin
                names += ["cos_cache", "sin_cache"]
            node = helper.make_node("GroupQueryAttention", names, ["out", "present_key", "present_value"],
                                    domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads,
                                    do_rotary=rotary, scale=0.3,
                                    **({"local_window_size": window} if window != -1 else {}))
            inputs = [tensor(n, TensorProto.INT32 if n in ("seqlens_k", "total_sequence_length") else F,
                             list(feeds[n].shape)) for n in names if n]
            outputs = [tensor("out", F, [batch, seq, heads * head]),
                       tensor("present_key", F, [batch, kv_heads, total, head]),
                       tensor("present_value", F, [batch, kv_heads, total, head])]
            label = (f"GroupQueryAttention {'packed' if packed else 'separate'} "
                     f"{'rotary ' if rotary else ''}{f'local_window_size {window} ' if window != -1 else ''}"
                     f"batch {batch}, past {past_len} + {seq}")
            yield label, model(node, inputs, outputs), feeds

    # RotaryEmbedding, 3-D with position ids and 4-D with an offset, interleaved or not.
    for interleaved in (0, 1):
        x3 = rng.standard_normal((2, 4, 2 * head)).astype(np.float32)
        pos = np.array([[3, 4, 5, 6], [0, 1, 2, 3]], np.int64)
        yield f"RotaryEmbedding 3-D interleaved={interleaved}", model(
            helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft",
                             interleaved=interleaved, num_heads=2),
            [tensor("x", F, [2, 4, 2 * head]), tensor("pos", TensorProto.INT64, [2, 4]),
             tensor("cos", F, [32, head // 2]), tensor("sin", F, [32, head // 2])],
            [tensor("y", F, [2, 4, 2 * head])]), {"x": x3, "pos": pos, "cos": cos, "sin": sin}
    x4 = rng.standard_normal((1, 2, 4, head)).astype(np.float32)
    yield "RotaryEmbedding 4-D offset", model(
        helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft"),
        [tensor("x", F, [1, 2, 4, head]), tensor("pos", TensorProto.INT64, [1]),
         tensor("cos", F, [32, head // 2]), tensor("sin", F, [32, head // 2])],
        [tensor("y", F, [1, 2, 4, head])]), {"x": x4, "pos": np.array([5], np.int64), "cos": cos, "sin": sin}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    args = parser.parse_args()
    llmc = os.path.abspath(args.llmc)
    rng = np.random.default_rng(2024)
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="llmc-ortops-") as tmp:
        for index, (label, m, feeds) in enumerate(cases(rng)):
            path = os.path.join(tmp, f"case{index}.onnx")
            onnx.save(m, path)
            session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            names = [o.name for o in session.get_outputs()]
            want = dict(zip(names, session.run(names, feeds)))
            engine = os.path.join(tmp, f"case{index}.engine")
            command = [llmc, "compile", path, "-o", engine, "--as-graph"]
            proc = subprocess.run(command, capture_output=True, text=True)
            out_dir = os.path.join(tmp, f"out{index}")
            if proc.returncode == 0:
                command = [llmc, "run", engine, "--output-dir", out_dir]
                for name, value in feeds.items():
                    np.save(os.path.join(tmp, f"{index}_{name}.npy"), value)
                    command += ["--input", f"{name}={os.path.join(tmp, f'{index}_{name}.npy')}"]
                proc = subprocess.run(command, capture_output=True, text=True)
            if proc.returncode != 0:
                failed += 1
                print(f"FAIL {label}: {proc.stderr.strip()}")
                continue
            errors, ok = [], True
            for name in names:
                got = np.load(os.path.join(out_dir, f"{name}.npy"))
                same = got.shape == want[name].shape and np.allclose(got, want[name], rtol=1e-4, atol=1e-5)
                ok = ok and same
                errors.append(f"{name} max_abs {np.abs(got - want[name]).max() if got.shape == want[name].shape else 'shape'}")
            passed += ok
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'} {label}: {'; '.join(errors)}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
