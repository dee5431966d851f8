#!/usr/bin/env python3
"""Writes test/models/attention23_tiny: a tiny decoder built with ONNX's own opset-23 ops.

No exporter writes the opset-23 `Attention` operator yet (torch 2.6's exporter decomposes
attention), so this model is assembled with `onnx.helper`: token and learned position
embeddings, two pre-norm layers (RMSNormalization, Q/K/V projections reshaped to
[batch, heads, seq, head], `Attention`, output projection, a GELU MLP), a final norm and an LM
head. Layer 0 uses `is_causal=1`; layer 1 passes a float causal mask built from the sequence
length (ConstantOfShape + Trilu), so both ways of saying "causal" are exercised. Weights are
seeded random numbers.

The references come from ONNX's own reference implementation (`onnx.reference`), which nobody
here wrote: the logits of every input set, and greedy generation (each step evaluates the
whole sequence) for three prompts. Run with the project venv:

    .venv/bin/python test/models/make_attention23.py
"""
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

NAME = "attention23_tiny"
VOCAB, HIDDEN, HEADS, LAYERS, MLP, POSITIONS = 256, 32, 4, 2, 64, 64
HEAD = HIDDEN // HEADS
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), NAME)


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(2311)
    inits, nodes = [], []

    def weight(name, *shape, scale=0.2):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    weight("embed", VOCAB, HIDDEN)
    weight("positions", POSITIONS, HIDDEN)
    const("zero", 0)
    const("one", 1)
    const("heads_shape", [0, 0, HEADS, HEAD])
    const("hidden_shape", [0, 0, HIDDEN])
    const("axis0", [0])
    inits.append(numpy_helper.from_array(np.ones(HIDDEN, np.float32), "norm_gain"))

    tok = node("Gather", ["embed", "input_ids"], "tok")
    shape = node("Shape", ["input_ids"], "ids_shape")
    seq = node("Gather", [shape, "one"], "seq_len", axis=0)
    pos = node("Range", ["zero", seq, "one"], "pos")
    pe = node("Gather", ["positions", pos], "pos_embed")
    x = node("Add", [tok, pe], "x0")
    # Layer 1's mask: 0 on and below the diagonal, -inf above.
    seq1 = node("Unsqueeze", [seq, "axis0"], "seq_1d")
    square = node("Concat", [seq1, seq1], "mask_shape", axis=0)
    full = node("ConstantOfShape", [square], "mask_full",
                value=numpy_helper.from_array(np.array([-np.inf], np.float32)))
    mask = node("Trilu", [full, "one"], "causal_mask", upper=1)

    for layer in range(LAYERS):
        p = f"layer{layer}"
        h = node("RMSNormalization", [x, "norm_gain"], f"{p}/norm1", axis=-1, epsilon=1e-5)
        heads = {}
        for part in "qkv":
            proj = node("MatMul", [h, weight(f"{p}/w{part}", HIDDEN, HIDDEN)], f"{p}/{part}")
            split = node("Reshape", [proj, "heads_shape"], f"{p}/{part}_heads")
            heads[part] = node("Transpose", [split], f"{p}/{part}_bhsd", perm=[0, 2, 1, 3])
        if layer == 0:
            attn = node("Attention", [heads["q"], heads["k"], heads["v"]], f"{p}/attention", is_causal=1)
        else:
            attn = node("Attention", [heads["q"], heads["k"], heads["v"], mask], f"{p}/attention")
        merged = node("Transpose", [attn], f"{p}/attn_bshd", perm=[0, 2, 1, 3])
        flat = node("Reshape", [merged, "hidden_shape"], f"{p}/attn_flat")
        out = node("MatMul", [flat, weight(f"{p}/wo", HIDDEN, HIDDEN)], f"{p}/o")
        x = node("Add", [x, out], f"{p}/residual1")
        h2 = node("RMSNormalization", [x, "norm_gain"], f"{p}/norm2", axis=-1, epsilon=1e-5)
        up = node("MatMul", [h2, weight(f"{p}/w1", HIDDEN, MLP)], f"{p}/up")
        act = node("Gelu", [up], f"{p}/gelu")
        down = node("MatMul", [act, weight(f"{p}/w2", MLP, HIDDEN)], f"{p}/down")
        x = node("Add", [x, down], f"{p}/residual2")
    final = node("RMSNormalization", [x, "norm_gain"], "final_norm", axis=-1, epsilon=1e-5)
    nodes.append(helper.make_node("MatMul", [final, weight("lm_head", HIDDEN, VOCAB)], ["logits"],
                                  name="lm_head"))
    graph = helper.make_graph(
        nodes, NAME,
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", VOCAB])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)],
                              producer_name="llmc test/models/make_attention23.py")
    onnx.checker.check_model(model, full_check=True)
    return model


def main() -> None:
    model = build()
    os.makedirs(OUT_DIR, exist_ok=True)
    onnx.save(model, os.path.join(OUT_DIR, "model.onnx"))
    reference = ReferenceEvaluator(model)
    rng = np.random.default_rng(11)
    sets = []
    for batch, seq in ((1, 7), (2, 12), (3, 1)):
        name = f"b{batch}_s{seq}"
        os.makedirs(os.path.join(OUT_DIR, name), exist_ok=True)
        ids = rng.integers(0, VOCAB, size=(batch, seq), dtype=np.int64)
        (logits,) = reference.run(None, {"input_ids": ids})
        np.save(os.path.join(OUT_DIR, name, "input_ids.npy"), ids)
        np.save(os.path.join(OUT_DIR, name, "logits.npy"), logits.astype(np.float32))
        sets.append({"name": name, "inputs": {"input_ids": f"{name}/input_ids.npy"},
                     "outputs": {"logits": f"{name}/logits.npy"}})
    manifest = {
        "description": "Tiny decoder built from ONNX opset-23 ops (Attention with is_causal and "
                       "with a float causal mask, RMSNormalization, learned positions); random "
                       "weights; references from onnx.reference.",
        "model": "model.onnx",
        "opset": 23,
        "model_bytes": os.path.getsize(os.path.join(OUT_DIR, "model.onnx")),
        "exporter": f"onnx {onnx.__version__} helper (test/models/make_attention23.py)",
        "tolerance": {"rtol": 1e-4, "atol": 1e-5},
        "expect_llm": True,  # recognized as a decoder LM (run_models.py, run_generation.py check it)
        "input_sets": sets,
    }
    with open(os.path.join(OUT_DIR, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    greedy = []
    for i, length in enumerate((1, 5, 12)):
        prompt = [int(t) for t in np.random.default_rng(500 + i).integers(0, VOCAB, size=length)]
        tokens = list(prompt)
        for _ in range(32):
            (logits,) = reference.run(None, {"input_ids": np.array([tokens], np.int64)})
            tokens.append(int(np.argmax(logits[0, -1])))
        greedy.append({"prompt": prompt, "max_new_tokens": 32, "new_tokens": tokens[length:]})
    refs = {
        "description": "Greedy tokens from onnx.reference, each step evaluating the whole "
                       "sequence (argmax of the last position's logits).",
        "context_length": POSITIONS,
        "greedy": greedy,
        "made_with": f"onnx {onnx.__version__}, numpy {np.__version__}",
    }
    with open(os.path.join(OUT_DIR, "generation.json"), "w") as f:
        json.dump(refs, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT_DIR}: {manifest['model_bytes']} bytes")


if __name__ == "__main__":
    main()
