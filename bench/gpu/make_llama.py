#!/usr/bin/env python3
"""Writes the GPU benchmark's Llama-style decoder as ONNX (opset 23, built with onnx.helper).

Pre-norm layers with RMSNormalization, causal multi-head attention (ONNX `Attention`), a SwiGLU
MLP and an untied LM head. Two differences from Llama, both cheap next to the products this
benchmark is about: positions are a learned table added to the token embeddings (Llama rotates
q and k), and every query head has its own KV head (ONNX 1.18 defines grouped-query `Attention`
as pairing query head h with KV head h mod kv_heads, not Llama's h // group, and llmc refuses
to guess which one a model means).
Weights are seeded random numbers; the benchmark strips them (`llmc compile --strip-weights`)
and refits the engine on the GPU machine from the weights PyTorch creates there, keyed by the
initializer names this script gives (`config.json` lists them with their shapes).

    .venv/bin/python bench/gpu/make_llama.py --out DIR [--size 1b|tiny]

Writes DIR/model.onnx (+ model.onnx.data, external, for sizes over 2 GB) and DIR/config.json.
"""
import argparse
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SIZES = {
    # About 1.2 B parameters: Llama-3.2-1B's widths (all heads with their own K/V) and a
    # 32,000-token vocabulary.
    "1b": dict(vocab=32000, hidden=2048, layers=16, heads=32, kv_heads=32, mlp=8192, positions=2048),
    # About 110 M parameters: the CPU decode benchmark of the quantized formats (bench/quant.py).
    "100m": dict(vocab=16000, hidden=768, layers=12, heads=12, kv_heads=12, mlp=2048, positions=1024),
    # For checking this script and the recognition on the CPU.
    "tiny": dict(vocab=256, hidden=64, layers=2, heads=4, kv_heads=4, mlp=128, positions=128),
}


def build(cfg, data_file=None, seed=2026):
    """The model; with `data_file` (an open binary file named model.onnx.data beside the model)
    every weight goes there as it is drawn, so a 1 B model never sits in memory twice."""
    rng = np.random.default_rng(seed)
    hidden, heads, kv_heads = cfg["hidden"], cfg["heads"], cfg["kv_heads"]
    head = hidden // heads
    inits, nodes, weights = [], [], {}

    def weight(name, *shape, scale=0.02, ones=False):
        data = np.ones(shape, np.float32) if ones else (rng.standard_normal(shape, np.float32) * scale)
        weights[name] = list(shape)
        if data_file is None:
            inits.append(numpy_helper.from_array(data, name))
            return name
        tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape)
        tensor.data_location = TensorProto.EXTERNAL
        offset = data_file.tell()
        data_file.write(data.tobytes())
        for key, value in (("location", "model.onnx.data"), ("offset", str(offset)),
                           ("length", str(data.nbytes))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        inits.append(tensor)
        return name

    def const(name, values):
        inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    weight("embed_tokens", cfg["vocab"], hidden)
    weight("embed_positions", cfg["positions"], hidden)
    const("zero", 0)
    const("one", 1)
    const("q_shape", [0, 0, heads, head])
    const("kv_shape", [0, 0, kv_heads, head])
    const("hidden_shape", [0, 0, hidden])

    tok = node("Gather", ["embed_tokens", "input_ids"], "tok")
    seq = node("Gather", [node("Shape", ["input_ids"], "ids_shape"), "one"], "seq_len", axis=0)
    pos = node("Gather", ["embed_positions", node("Range", ["zero", seq, "one"], "pos")], "pos_embed")
    x = node("Add", [tok, pos], "x0")
    for layer in range(cfg["layers"]):
        p = f"layers.{layer}"
        h = node("RMSNormalization", [x, weight(f"{p}.input_norm", hidden, ones=True)], f"{p}/norm1",
                 axis=-1, epsilon=1e-5)
        parts = {}
        for part, n_heads, shape in (("q", heads, "q_shape"), ("k", kv_heads, "kv_shape"), ("v", kv_heads, "kv_shape")):
            proj = node("MatMul", [h, weight(f"{p}.{part}_proj", hidden, n_heads * head)], f"{p}/{part}")
            split = node("Reshape", [proj, shape], f"{p}/{part}_heads")
            parts[part] = node("Transpose", [split], f"{p}/{part}_bhsd", perm=[0, 2, 1, 3])
        attn = node("Attention", [parts["q"], parts["k"], parts["v"]], f"{p}/attention", is_causal=1)
        merged = node("Transpose", [attn], f"{p}/attn_bshd", perm=[0, 2, 1, 3])
        flat = node("Reshape", [merged, "hidden_shape"], f"{p}/attn_flat")
        x = node("Add", [x, node("MatMul", [flat, weight(f"{p}.o_proj", hidden, hidden)], f"{p}/o")], f"{p}/residual1")
        h2 = node("RMSNormalization", [x, weight(f"{p}.post_norm", hidden, ones=True)], f"{p}/norm2",
                  axis=-1, epsilon=1e-5)
        gate = node("MatMul", [h2, weight(f"{p}.gate_proj", hidden, cfg["mlp"])], f"{p}/gate")
        silu = node("Mul", [gate, node("Sigmoid", [gate], f"{p}/sigmoid")], f"{p}/silu")
        up = node("MatMul", [h2, weight(f"{p}.up_proj", hidden, cfg["mlp"])], f"{p}/up")
        act = node("Mul", [silu, up], f"{p}/swiglu")
        x = node("Add", [x, node("MatMul", [act, weight(f"{p}.down_proj", cfg["mlp"], hidden)], f"{p}/down")],
                 f"{p}/residual2")
    final = node("RMSNormalization", [x, weight("final_norm", hidden, ones=True)], "final_norm_out",
                 axis=-1, epsilon=1e-5)
    nodes.append(helper.make_node("MatMul", [final, weight("lm_head", hidden, cfg["vocab"])], ["logits"],
                                  name="lm_head"))
    graph = helper.make_graph(
        nodes, "llama_bench",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", cfg["vocab"]])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)],
                              producer_name="llmc bench/gpu/make_llama.py")
    return model, weights


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", choices=sorted(SIZES), default="1b")
    args = parser.parse_args()
    cfg = SIZES[args.size]
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "model.onnx")
    if args.size != "1b":
        model, weights = build(cfg)
    else:
        with open(os.path.join(args.out, "model.onnx.data"), "wb") as data_file:
            model, weights = build(cfg, data_file)
    onnx.save_model(model, path)
    params = sum(int(np.prod(s)) for s in weights.values())
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump({"size": args.size, **cfg, "parameters": params, "weights": weights}, f, indent=1)
    print(f"make_llama: {args.size}: {params / 1e9:.3f} B parameters -> {path}")


if __name__ == "__main__":
    main()
