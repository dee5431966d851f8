#!/usr/bin/env python3
"""Masks a decoder builds for itself, and what llmc does with each (docs/llm.md, "Masks").

Tiny decoders are assembled here with onnx.helper, their attention masks built from
Shape/Range/comparisons the way transformers' exports build them; references come from ONNX's
own reference evaluator (onnx.reference), which nobody here wrote.

- sliding window (each query sees its own and the W - 1 keys before it, W = 12: wider than
  any length the old mask check probed): must be recognized with `window` W, and its logits
  at lengths well past W, and greedy generation over the paged KV cache up to 3.5 W tokens,
  must equal the reference;
- the same window written with the opset-23 Attention op and a boolean mask;
- plain causal: recognized without a window;
- a prefix-LM mask (the first P tokens see each other both ways) and a mask whose window is
  counted from the end of the sequence (keys j > n - W): neither causal nor a fixed window;
  both must be refused, naming the node, and the engine must still equal the reference
  (it runs the graph as exported).
- `llmc verify` passes on every recognized engine at lengths 1, 2, 3, around the window, and
  up to the context, and fails, placing the first mismatch at position W, when the causal
  engine is checked against the windowed graph and the other way round.
- soft-capped scores (Gemma-2: c * tanh(scores / c), then the window mask): recognized with
  the window and checked as the window case, with a cap small enough to change the logits; the
  same Tanh applied after the mask is added (it would not mask) is refused, naming the node.
- an ALiBi bias (slope_h times the key's position, added to the scaled scores before the causal
  mask, with slopes large enough to change the logits): recognized, its logits and greedy tokens
  over the KV cache equal the reference's; a bias quadratic in the key position is refused,
  naming the Add and saying it is not ALiBi's. Bloom's own export (heads merged into the batch
  axis) is the committed bloom_tiny_past.
- positions computed from an attention_mask input (transformers' cumsum(mask) * mask - 1):
  recognized (the mask input leaves the engine) and checked as the causal case; positions that
  are not the tokens' (2 x (cumsum - 1)) are refused, naming the node.
- ONNX Runtime's GroupQueryAttention with local_window_size (the GenAI test decoder with a
  window set): recognized with the matching window, verified, and equal to ONNX Runtime.
- a mask written by ScatterND over the identity grid (transformers 4.4x-4.5x): the grid proven
  from how it is built (a note under --verbose); with its last two coordinates exchanged,
  refused; a box smaller than its data (the unwritten column kept); and sliced per layer to
  the keys' length with every other layer narrowing its slice to the window (one prover for
  masks that share their computation): recognized with each layer's own window.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from checks import Checks

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")

VOCAB, HIDDEN, HEADS, LAYERS, POSITIONS = 128, 32, 4, 2, 96
HEAD = HIDDEN // HEADS
WINDOW = 12
PREFIX = 4
SOFTCAP = 1.5  # scores reach several times this at these weights: the cap changes the logits
SLOPES = [0.5, 0.25, 0.125, 0.0625]  # ALiBi's, one per head: large enough to change the logits


def build(mask_kind: str, use_attention_op: bool = False, softcap: str | None = None) -> onnx.ModelProto:
    """softcap: None; "capped": SOFTCAP * tanh(scores / SOFTCAP) before the mask is added
    (Gemma-2's soft-capping); "mask_inside": the mask added inside the Tanh; "alibi": SLOPES[h]
    times the key position added to the scaled scores before the mask; "alibi_quadratic": the
    same with the key position squared (not ALiBi); "mask_positions": the position ids computed
    from an attention_mask input, cumsum(mask) * mask - 1; "mask_positions_doubled": twice
    those (not the tokens' positions); "scatter": the mask written into a fully masked
    [1, 1, n, n] buffer by ScatterND over the index grid built from Ranges (transformers 4.4x's
    exports); "scatter_swapped": the same with the grid's last two coordinates exchanged (a
    transposed write); "scatter_partial": the mask's first n - 1 columns written by ScatterND
    over the mask itself (a box smaller than the data); "per_layer": the scatter's mask sliced
    by each layer to its keys' length (transformers' mask[:, :, :, :k_len], one value per
    layer), and the odd layers' slice narrowed to the window (layers whose masks share most of
    their computation and differ)."""
    rng = np.random.default_rng(1412)
    inits, nodes = [], []

    def weight(name, *shape, scale=0.3):
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
    const("two", 2)
    const("window", WINDOW)
    const("prefix", PREFIX)
    const("heads_shape", [0, 0, HEADS, HEAD])
    const("hidden_shape", [0, 0, HIDDEN])
    const("axis0", [0])
    const("axis1", [1])
    const("float_zero", 0.0, np.float32)
    const("float_min", np.finfo(np.float32).min, np.float32)
    const("scale", 1.0 / np.sqrt(HEAD), np.float32)
    const("softcap", SOFTCAP, np.float32)
    const("slopes", np.array(SLOPES).reshape(HEADS, 1, 1), np.float32)
    const("axes01", [0, 1])
    const("axes01_ones", [1, 1])
    const("axis_last", [-1])
    const("zero_1d", [0])
    const("unit_4d", [1, 1, 1, 1])
    const("rows_4d", [1, 1, -1, 1])
    const("cols_4d", [1, 1, 1, -1])
    const("float_min_4d", np.full((1, 1, 1, 1), np.finfo(np.float32).min), np.float32)
    inits.append(numpy_helper.from_array(np.ones(HIDDEN, np.float32), "norm_gain"))

    tok = node("Gather", ["embed", "input_ids"], "tok")
    seq = node("Gather", [node("Shape", ["input_ids"], "ids_shape"), "one"], "seq_len", axis=0)
    pos = node("Range", ["zero", seq, "one"], "pos")
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])]
    table_pos = pos
    if softcap in ("mask_positions", "mask_positions_doubled"):
        inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]))
        counted = node("Mul", [node("CumSum", ["attention_mask", "one"], "pos/cumsum"), "attention_mask"],
                       "pos/counted")
        table_pos = node("Sub", [counted, "one"], "pos/ids")
        if softcap == "mask_positions_doubled":
            table_pos = node("Add", [table_pos, table_pos], "pos/doubled")
    x = node("Add", [tok, node("Gather", ["positions", table_pos], "pos_embed")], "x0")
    # The mask, as transformers builds it: key index j against query index i.
    q_pos = node("Unsqueeze", [pos, "axis1"], "mask/q_pos")  # [n, 1]
    k_pos = node("Unsqueeze", [pos, "axis0"], "mask/k_pos")  # [1, n]
    causal = node("LessOrEqual", [k_pos, q_pos], "mask/causal")
    if mask_kind == "causal":
        allowed = causal
    elif mask_kind == "window":
        in_window = node("Greater", [k_pos, node("Sub", [q_pos, "window"], "mask/i_minus_w")], "mask/in_window")
        allowed = node("And", [causal, in_window], "mask/allowed")
    elif mask_kind == "prefix_lm":
        both_prefix = node("And", [node("Less", [k_pos, "prefix"], "mask/k_prefix"),
                                   node("Less", [q_pos, "prefix"], "mask/q_prefix")], "mask/both_prefix")
        allowed = node("Or", [causal, both_prefix], "mask/allowed")
    elif mask_kind == "from_end":
        # Keys in the last W positions of the whole sequence: depends on the length.
        start = node("Sub", [seq, "window"], "mask/n_minus_w")
        allowed = node("And", [causal, node("Greater", [k_pos, start], "mask/in_tail")], "mask/allowed")
    else:
        raise ValueError(mask_kind)
    if use_attention_op:
        mask = allowed  # boolean: True where attention is allowed
    else:
        mask = node("Where", [allowed, "float_zero", "float_min"], "mask/bias")
    if softcap in ("scatter", "scatter_swapped", "per_layer", "scatter_partial"):
        bias = node("Unsqueeze", [mask, "axes01"], "mask/bias_4d")  # [1, 1, n, n]
        shape = node("Shape", [bias], "mask/shape_4d")
        full = node("Expand", ["float_min_4d", shape], "mask/full")
        updates, keys = bias, pos
        if softcap == "scatter_partial":
            # The mask's first n - 1 columns written over the mask itself: a box smaller than
            # the data, whose last column survives.
            full = bias
            n_minus_1 = node("Sub", [seq, "one"], "mask/n_minus_1")
            ends = node("Unsqueeze", [n_minus_1, "axis0"], "mask/n_minus_1_1d")
            updates = node("Slice", [bias, "zero_1d", ends, "axis_last"], "mask/updates")
            # The box's shape from the sizes (a Shape of the sliced mask has no rule).
            shape = node("Concat", ["axes01_ones", node("Unsqueeze", [seq, "axis0"], "mask/n_1d"), ends],
                         "mask/shape_updates", axis=0)
            keys = node("Range", ["zero", n_minus_1, "one"], "mask/keys")

        def coordinate(name, source, target):  # [1, 1, n, n, 1]: the index along one axis
            grid = node("Expand", [node("Reshape", [source, target], f"mask/{name}_r"), shape], f"mask/{name}_e")
            return node("Unsqueeze", [grid, "axis_last"], f"mask/{name}")

        b, h = coordinate("b", "zero_1d", "unit_4d"), coordinate("h", "zero_1d", "unit_4d")
        i, j = coordinate("i", pos, "rows_4d"), coordinate("j", keys, "cols_4d")
        grid = node("Concat", [b, h, j, i] if softcap == "scatter_swapped" else [b, h, i, j], "mask/grid", axis=-1)
        mask = node("ScatterND", [full, grid, updates], "mask/scatter")

    for layer in range(LAYERS):
        p = f"layer{layer}"
        h = node("RMSNormalization", [x, "norm_gain"], f"{p}/norm1", axis=-1, epsilon=1e-5) \
            if use_attention_op else node("LayerNormalization", [x, "norm_gain"], f"{p}/norm1", axis=-1)
        heads = {}
        for part in "qkv":
            proj = node("MatMul", [h, weight(f"{p}/w{part}", HIDDEN, HIDDEN)], f"{p}/{part}")
            split = node("Reshape", [proj, "heads_shape"], f"{p}/{part}_heads")
            heads[part] = node("Transpose", [split], f"{p}/{part}_bhsd", perm=[0, 2, 1, 3])
        if use_attention_op:
            attn = node("Attention", [heads["q"], heads["k"], heads["v"], mask], f"{p}/attention")
        else:
            kt = node("Transpose", [heads["k"]], f"{p}/k_t", perm=[0, 1, 3, 2])
            scores = node("Mul", [node("MatMul", [heads["q"], kt], f"{p}/qk"), "scale"], f"{p}/scaled")

            def cap(x):
                shrunk = node("Div", [x, "softcap"], f"{p}/cap_div")
                return node("Mul", [node("Tanh", [shrunk], f"{p}/cap_tanh"), "softcap"], f"{p}/capped")

            if softcap == "capped":
                scores = cap(scores)
            layer_mask = mask
            if softcap == "per_layer":
                k_len = node("Unsqueeze", [node("Gather", [node("Shape", [heads["k"]], f"{p}/k_shape"), "two"],
                                                f"{p}/k_len", axis=0), "axis0"], f"{p}/k_len_1d")
                layer_mask = node("Slice", [mask, "zero_1d", k_len, "axis_last"], f"{p}/mask")
                if layer % 2:
                    in_window = node("Greater", [k_pos, node("Sub", [q_pos, "window"], f"{p}/i_minus_w")],
                                     f"{p}/in_window")
                    layer_mask = node("Where", [in_window, layer_mask, "float_min"], f"{p}/window_mask")
            if softcap in ("alibi", "alibi_quadratic"):
                keys = node("Cast", [k_pos], f"{p}/alibi_keys", to=TensorProto.FLOAT)  # [1, n]
                if softcap == "alibi_quadratic":
                    keys = node("Mul", [keys, keys], f"{p}/alibi_keys_squared")
                bias = node("Mul", ["slopes", keys], f"{p}/alibi_bias")  # [heads, 1, n]
                scores = node("Add", [scores, bias], f"{p}/alibi")
            masked = node("Add", [scores, layer_mask], f"{p}/masked")
            if softcap == "mask_inside":
                masked = cap(masked)
            probs = node("Softmax", [masked], f"{p}/softmax", axis=-1)
            attn = node("MatMul", [probs, heads["v"]], f"{p}/pv")
        merged = node("Transpose", [attn], f"{p}/attn_bshd", perm=[0, 2, 1, 3])
        flat = node("Reshape", [merged, "hidden_shape"], f"{p}/attn_flat")
        x = node("Add", [x, node("MatMul", [flat, weight(f"{p}/wo", HIDDEN, HIDDEN)], f"{p}/o")], f"{p}/residual")
    nodes.append(helper.make_node("MatMul", [x, weight("lm_head", HIDDEN, VOCAB)], ["logits"], name="lm_head"))
    graph = helper.make_graph(
        nodes, f"{mask_kind}_decoder",
        inputs,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", VOCAB])],
        inits)
    opset = 23 if use_attention_op else 18
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="llmc test/e2e/mask_proof.py")
    if not use_attention_op:
        model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def gqa_local_window(llmc, tmp, check, local_window=5):
    """ONNX Runtime's GroupQueryAttention with local_window_size L (the GenAI builder's form of
    Mistral's and Phi-3's windows: a token sees itself and the L keys before it): the GenAI-style
    test decoder with L set on every layer must be recognized with window L + 1, pass `llmc
    verify` past the window, and give ONNX Runtime's logits for the windowed graph."""
    import onnxruntime as ort
    model = onnx.load(os.path.join(MODELS_DIR, "genai_llama_tiny", "model.onnx"))
    layers = 0
    for node in model.graph.node:
        if node.op_type == "GroupQueryAttention":
            layers += 1
            kept = [a for a in node.attribute if a.name != "local_window_size"]
            del node.attribute[:]
            node.attribute.extend(kept + [helper.make_attribute("local_window_size", local_window)])
    path = os.path.join(tmp, "gqa_window.onnx")
    onnx.save(model, path)
    engine = os.path.join(tmp, "gqa_window.engine")
    label = f"GroupQueryAttention local_window_size {local_window}"
    proc = run([llmc, "compile", path, "-o", engine])
    info = json.loads(run([llmc, "inspect", engine, "--json"]).stdout) if proc.returncode == 0 else {}
    windows = (info.get("llm") or {}).get("attention_windows")
    check(windows == [local_window + 1] * layers, f"{label}: recognized with window {local_window + 1}",
          f"attention windows {windows}; {proc.stderr.strip()}")
    proc = run([llmc, "verify", path, "--length", "40"])
    check(proc.returncode == 0 and "logits, length 13" in proc.stdout, f"{label}: llmc verify up to 40 tokens",
          "" if proc.returncode == 0 else proc.stdout + proc.stderr)
    # ONNX Runtime on the windowed graph (an empty past) against the recognized engine.
    seq = 24
    ids = np.random.default_rng(5).integers(0, 64, size=(1, seq), dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones((1, seq), np.int64)}
    for i in model.graph.input:
        if i.name.startswith("past_key_values"):
            dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
            feeds[i.name] = np.zeros((1, dims[1], 0, dims[3]), np.float32)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = session.run(["logits"], feeds)[0]
    ids_path, out_dir = os.path.join(tmp, "gqa_ids.npy"), os.path.join(tmp, "gqa_out")
    np.save(ids_path, ids)
    proc = run([llmc, "run", engine, "--input", f"input_ids={ids_path}", "--output-dir", out_dir])
    got = np.load(os.path.join(out_dir, "logits.npy")) if proc.returncode == 0 else None
    ok = got is not None and got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-4)
    check(ok, f"{label}: logits at {seq} tokens equal ONNX Runtime's",
          proc.stderr.strip() if got is None else f"max abs error {float(np.max(np.abs(got - want))):.3g}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    args = parser.parse_args()
    check = Checks()

    # (mask, opset-23 Attention, the window it must be recognized with (or one per layer) or
    # None: refused, soft-capping of the scores or another variant of build()).
    cases = [("window", False, WINDOW, None), ("window", True, WINDOW, None), ("causal", False, 0, None),
             ("prefix_lm", False, None, None), ("from_end", False, None, None),
             ("window", False, WINDOW, "capped"), ("causal", False, None, "mask_inside"),
             ("causal", False, 0, "alibi"), ("causal", False, None, "alibi_quadratic"),
             ("causal", False, 0, "mask_positions"), ("causal", False, None, "mask_positions_doubled"),
             ("causal", False, 0, "scatter"), ("causal", False, None, "scatter_swapped"),
             ("causal", False, [0, WINDOW], "per_layer"), ("causal", False, 0, "scatter_partial")]
    engines = {}  # (kind, opset-23 Attention) -> the recognized engine
    with tempfile.TemporaryDirectory(prefix="llmc-mask-") as tmp:
        for kind, attention_op, window, softcap in cases:
            label = kind + (" (opset-23 Attention)" if attention_op else "") + \
                (f" ({softcap})" if softcap else "")
            model = build(kind, attention_op, softcap)
            path = os.path.join(tmp, f"{kind}_{attention_op}_{softcap}.onnx")
            onnx.save(model, path)
            engine = path.replace(".onnx", ".engine")
            verbose = ["--verbose"] if softcap in ("scatter", "per_layer", "scatter_partial") else []
            proc = run([args.llmc, "compile", path, "-o", engine, "--max-context", str(POSITIONS), *verbose])
            if proc.returncode != 0:
                check(False, f"{label}: compile", proc.stderr.strip())
                continue
            info = json.loads(run([args.llmc, "inspect", engine, "--json"]).stdout)
            recognized = info.get("llm") is not None
            if window is None:
                # Refused: recognition fails, naming the attention node and why.
                want = {("prefix_lm", None): "neither causal nor a sliding window", ("from_end", None): "mask/in_tail",
                        ("causal", "mask_inside"): "'layer0/cap_tanh' soft-caps the scores after the mask is added",
                        ("causal", "alibi_quadratic"): "'layer0/alibi' adds a second bias to the scores, which "
                                                       "is not ALiBi's",
                        ("causal", "mask_positions_doubled"): "'pos/doubled' is computed from the attention "
                                                              "mask and is not the tokens' positions",
                        # Not the identity grid by its construction, so evaluated, and refused there.
                        ("causal", "scatter_swapped"): "'mask/scatter' (ScatterND) writes element 1 away "
                                                       "from its own position"}[(kind, softcap)]
                names_node = "layer0/softmax" in proc.stderr or softcap == "mask_positions_doubled"
                check(not recognized and "warning: not recognized" in proc.stderr and want in proc.stderr
                      and names_node, f"{label}: refused, naming the node",
                      proc.stderr.strip().replace("\n", " | "))
            else:
                windows = info["llm"]["attention_windows"] if recognized else None
                want = window if isinstance(window, list) else [window] * LAYERS
                check(recognized and windows == want, f"{label}: recognized with windows {want}",
                      f"attention windows {windows}; {proc.stderr.strip()}")
                if softcap in ("scatter", "per_layer", "scatter_partial"):
                    # Its index grid proven from how it is built: never evaluated at the context.
                    check("note: mask proof: node 'mask/scatter' (ScatterND) writes at the origin: its "
                          "index grid proven from how it is built" in proc.stderr,
                          f"{label}: the grid proven from its construction", proc.stderr.strip())
            # Logits at lengths past the window, against the reference.
            reference = ReferenceEvaluator(model)
            rng = np.random.default_rng(7)
            for batch, seq in ((1, 5), (1, 3 * WINDOW), (2, 2 * WINDOW + 5)):
                ids = rng.integers(0, VOCAB, size=(batch, seq), dtype=np.int64)
                feeds = {"input_ids": ids}
                if len(model.graph.input) > 1:
                    feeds["attention_mask"] = np.ones_like(ids)
                (want,) = reference.run(None, feeds)
                ids_path = os.path.join(tmp, "input_ids.npy")
                mask_path = os.path.join(tmp, "attention_mask.npy")
                out_dir = os.path.join(tmp, "out")
                np.save(ids_path, ids)
                np.save(mask_path, np.ones_like(ids))
                # A recognized engine takes input_ids alone; the graph as exported, the mask too.
                engine_inputs = [i["name"] for i in info.get("inputs", [])]
                mask_flag = ["--input", f"attention_mask={mask_path}"] if "attention_mask" in engine_inputs else []
                proc = run([args.llmc, "run", engine, "--input", f"input_ids={ids_path}", *mask_flag,
                            "--output-dir", out_dir])
                if proc.returncode != 0:
                    check(False, f"{label}: logits b{batch} s{seq}", proc.stderr.strip())
                    continue
                got = np.load(os.path.join(out_dir, "logits.npy"))
                err = float(np.max(np.abs(got - want)))
                if softcap in ("capped", "alibi") and seq == 3 * WINDOW:
                    # The cap or bias must matter, or an engine that dropped it would pass.
                    (plain,) = ReferenceEvaluator(build(kind, attention_op)).run(None, {"input_ids": ids})
                    effect = float(np.max(np.abs(plain - want)))
                    check(effect > 1e-2, f"{label}: it changes the logits", f"by up to {effect:.3g}")
                check(got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-4),
                      f"{label}: logits b{batch} s{seq}", f"max abs error {err:.3g}")
            # llmc verify: the engine against the graph as exported at every length it checks,
            # past the window and up to the context.
            if window is not None:
                proc = run([args.llmc, "verify", path, "--max-context", str(POSITIONS)])
                lengths = [line.split()[2] for line in proc.stdout.splitlines() if line.startswith("logits, length")]
                want_lengths = sorted({1, 2, 3, POSITIONS // 2, POSITIONS} |
                                      ({WINDOW - 1, WINDOW, WINDOW + 1, 2 * WINDOW + 1} if window else set()))
                check(proc.returncode == 0 and "OK: within tolerance" in proc.stdout
                      and lengths == [str(n) for n in want_lengths],
                      f"{label}: llmc verify at lengths {want_lengths}",
                      f"exit {proc.returncode}, lengths {lengths}\n{proc.stdout}{proc.stderr}")
                if not softcap:
                    engines[(kind, attention_op)] = engine
            # Greedy generation over the KV cache (decode steps past the window).
            if window is not None:
                prompt = [int(t) for t in np.random.default_rng(3).integers(0, VOCAB, size=WINDOW // 2)]
                tokens = list(prompt)
                new = int(3.5 * WINDOW)
                for _ in range(new):
                    step = {"input_ids": np.array([tokens], np.int64)}
                    if len(model.graph.input) > 1:
                        step["attention_mask"] = np.ones_like(step["input_ids"])
                    (logits,) = reference.run(None, step)
                    tokens.append(int(np.argmax(logits[0, -1])))
                proc = run([args.llmc, "generate", engine, "--prompt-ids", ",".join(map(str, prompt)),
                            "--max-new-tokens", str(new), "--print-ids"])
                got = [int(t) for t in proc.stdout.split()] if proc.returncode == 0 else None
                check(got == tokens[len(prompt):], f"{label}: greedy {new} tokens over the KV cache",
                      proc.stderr.strip() if got is None else
                      f"first difference at {next((i for i, (a, b) in enumerate(zip(got, tokens[len(prompt):])) if a != b), None)}")
        # verify must fail where the engine does not run the graph: the causal engine (same
        # weights) against the windowed graph, and the windowed engine against the causal graph.
        # Both agree up to position W - 1 and differ from position W on, which is where verify
        # must place the first mismatch (the old check, at 3 tokens, said OK).
        for graph, other in (("window", "causal"), ("causal", "window")):
            if (other, False) not in engines:
                check(False, f"verify {graph} graph with the {other} engine", "no engine to verify")
                continue
            path = os.path.join(tmp, f"{graph}_False_None.onnx")
            proc = run([args.llmc, "verify", path, "--engine", engines[(other, False)]])
            first = sorted({int(line.split()[-1]) for line in proc.stdout.splitlines()
                            if line.startswith("  first mismatch at position")})
            check(proc.returncode == 1 and "FAILED" in proc.stdout and first[:1] == [WINDOW],
                  f"verify {graph} graph with the {other} engine: fails from position {WINDOW}",
                  f"exit {proc.returncode}, first mismatches {first}" +
                  ("" if proc.returncode == 1 and first[:1] == [WINDOW] else f"\n{proc.stdout}{proc.stderr}"))
        gqa_local_window(args.llmc, tmp, check)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
