#!/usr/bin/env python3
"""Regenerates the committed cache exports (<name>_past): Optimum's text-generation-with-past export.

Each <name>_past model is the torch model of generate.py's <name> (same builder, same seed, same
weights), saved with save_pretrained and exported by Optimum's `main_export` the way
`optimum-cli export onnx --task text-generation-with-past` does: inputs input_ids,
attention_mask, position_ids (none for Bloom) and past_key_values.N.key/value, outputs logits and
present.N.key/value. The references are the outputs of the torch model Optimum exported (loaded
back from the saved folder, as Optimum loads it) for a prefill with an empty past, a one-token
decode over a 9-token past and a 4-token chunk over a 5-token past, each cross-checked with
ONNX Runtime.

Run with the generation venv (see README.md; Optimum is installed with --no-deps):
    .venv-gen/bin/python test/models/generate_past.py [NAME ...]
Deterministic: fixed seeds, one torch thread; rerunning rewrites byte-identical files.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import onnx
import torch
import transformers

import families
import generate
from export_util import ATOL, RTOL, InputSet, _check_model, _ort_session, write_input_set

MODELS_DIR = os.path.dirname(os.path.abspath(__file__))

# The decoder families of families.py exported with their cache (issue 16): no full-sequence
# sibling, the family's seeded model is the reference.
FAMILY_MODELS = ["mistral_window", "phi3", "gemma", "gptj", "gpt_neox", "opt", "falcon", "olmo", "granite",
                 "gpt_bigcode", "bloom"]

# name -> (full-sequence model it shares weights with, or None; its builder; opset)
PAST_MODELS = {
    "llama_tiny_past": ("llama_tiny", generate.build_llama_tiny, 18),
    "qwen2_tiny_past": ("qwen2_tiny", generate.build_qwen2_tiny, 18),
    "gpt2_tiny_past": ("gpt2_tiny", generate.build_gpt2_tiny, 18),
    "mistral_tiny_past": ("mistral_tiny", generate.build_mistral_tiny, 18),
    **{f"{family}_tiny_past": (None, functools.partial(families.build, family), 18)
       for family in FAMILY_MODELS},
}

PAST_PREFIX = "past_key_values."


def is_past_model(name: str) -> bool:
    return name in PAST_MODELS


def past_axis(name: str, rank: int) -> int:
    """The past axis of a past input: 2 of [batch, kv_heads, past, head_dim], 1 of GPT-BigCode's
    packed multi-query [batch, past, 2 x head_dim] `past_key_values.N.key_value`."""
    return 1 if name.endswith(".key_value") and rank == 3 else 2


def empty_shape(name: str, dims: list) -> tuple[int, ...]:
    """{past input's dims} -> the shape of its empty past at batch 1 (checked: every axis but the
    batch and the past is a number)."""
    axis = past_axis(name, len(dims))
    if len(dims) not in (3, 4) or (len(dims) == 3) != name.endswith(".key_value"):
        raise RuntimeError(f"{name}: expected [batch, kv_heads, past, head_dim] or [batch, past, 2 x head_dim], got {dims}")
    for d, size in enumerate(dims):
        if d not in (0, axis) and not isinstance(size, int):
            raise RuntimeError(f"{name}: dimension {d} is not a number: {dims}")
    return tuple(1 if d == 0 else 0 if d == axis else size for d, size in enumerate(dims))


def past_layout(model: onnx.ModelProto) -> tuple[str, dict[str, tuple[int, ...]]]:
    """The past-length symbol and {past input: its empty shape at batch 1} of a cache export."""
    symbols, layout = set(), {}
    for value in model.graph.input:
        if not value.name.startswith(PAST_PREFIX):
            continue
        dims = value.type.tensor_type.shape.dim
        axis = past_axis(value.name, len(dims))
        if len(dims) <= axis or not dims[axis].dim_param:
            raise RuntimeError(f"{value.name}: no past-length symbol at axis {axis}: {dims}")
        symbols.add(dims[axis].dim_param)
        layout[value.name] = empty_shape(value.name, [d.dim_param or d.dim_value for d in dims])
    if len(symbols) != 1 or not layout:
        raise RuntimeError(f"expected one past-length symbol over the past inputs, got {symbols}")
    return symbols.pop(), layout


def torch_forward(lm: torch.nn.Module, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Runs the torch model on one input set of a cache export: logits and present.N.key/value.

    The past tensors are cloned into a fresh DynamicCache (the forward pass mutates the cache);
    an empty past is a forward without one."""
    layers = lm.config.num_hidden_layers
    packed = f"{PAST_PREFIX}0.key_value" in inputs  # GPT-BigCode: one tensor per layer
    if packed:
        past = [torch.from_numpy(inputs[f"{PAST_PREFIX}{i}.key_value"]).clone() for i in range(layers)]
        cache = None if past[0].shape[1] == 0 else past
    else:
        past = [
            tuple(torch.from_numpy(inputs[f"{PAST_PREFIX}{i}.{kind}"]).clone() for kind in ("key", "value"))
            for i in range(layers)
        ]
        cache = None if past[0][0].shape[2] == 0 else transformers.DynamicCache.from_legacy_cache(tuple(past))
    # Bloom's forward takes no position ids (its ALiBi bias counts positions from the mask).
    positions = {}
    if "position_ids" in inspect.signature(lm.forward).parameters:
        positions["position_ids"] = torch.from_numpy(inputs["position_ids"])
    with torch.no_grad():
        out = lm(
            input_ids=torch.from_numpy(inputs["input_ids"]),
            attention_mask=torch.from_numpy(inputs["attention_mask"]),
            past_key_values=cache,
            use_cache=True,
            **positions,
        )
    present = out.past_key_values
    if isinstance(present, transformers.DynamicCache):
        present = present.to_legacy_cache()  # GPT-2 returns the legacy tuples when given no cache
    if len(present) != layers:
        raise RuntimeError(f"expected {layers} layers of present key/values, got {len(present)}")
    results = {"logits": out.logits.numpy().copy()}
    if packed:
        for i, key_value in enumerate(present):
            results[f"present.{i}.key_value"] = key_value.numpy().copy()
        return results
    for i, (key, value) in enumerate(present):
        results[f"present.{i}.key"] = key.numpy().copy()
        results[f"present.{i}.value"] = value.numpy().copy()
    return results


def empty_past(layout: dict[str, tuple[int, ...]], batch: int) -> dict[str, np.ndarray]:
    return {name: np.zeros((batch, *shape[1:]), dtype=np.float32) for name, shape in layout.items()}


def _step_inputs(input_ids: np.ndarray, past: dict[str, np.ndarray], past_length: int) -> dict[str, np.ndarray]:
    batch, seq = input_ids.shape
    return {
        "input_ids": input_ids,
        "attention_mask": np.ones((batch, past_length + seq), dtype=np.int64),
        "position_ids": np.broadcast_to(np.arange(past_length, past_length + seq, dtype=np.int64), (batch, seq)).copy(),
        **past,
    }


def _with_past(lm, layout, name: str, ids: np.ndarray, past_length: int) -> tuple[InputSet, np.ndarray]:
    """An input set whose past is torch's cache for ids[:, :past_length] and whose new tokens are
    the rest; with the full ids."""
    past = empty_past(layout, ids.shape[0])
    if past_length:
        prefix = torch_forward(lm, _step_inputs(ids[:, :past_length], past, 0))
        past = {n: prefix["present." + n[len(PAST_PREFIX) :]] for n in layout}
    return InputSet(name, _step_inputs(ids[:, past_length:], past, past_length)), ids


def _input_sets(lm, layout) -> list[tuple[InputSet, np.ndarray]]:
    vocab = lm.config.vocab_size
    return [
        # Seed 100 as generate.py's b1_s7: the same ids, so the same logits as <base>/b1_s7.
        _with_past(lm, layout, "prefill_b1_s7", generate._token_ids(100, 1, 7, vocab), 0),
        _with_past(lm, layout, "decode_b2_p9_s1", generate._token_ids(300, 2, 10, vocab), 9),
        _with_past(lm, layout, "chunk_b1_p5_s4", generate._token_ids(301, 1, 9, vocab), 5),
    ]


def _check_against_full(name: str, lm, input_set: InputSet, full_ids: np.ndarray, logits: np.ndarray) -> None:
    """The cached forward must give the logits of one forward over past + new tokens without a
    cache; the prefill must also give the full-sequence model's stored b1_s7 logits."""
    with torch.no_grad():
        full = lm(input_ids=torch.from_numpy(full_ids), use_cache=False).logits.numpy()
    new = input_set.inputs["input_ids"].shape[1]
    references = {"a forward without cache": full[:, -new:]}
    base = PAST_MODELS[name][0]
    if input_set.name == "prefill_b1_s7" and base is not None:
        references[f"{base}/b1_s7/logits.npy"] = np.load(os.path.join(MODELS_DIR, base, "b1_s7", "logits.npy"))
    for what, reference in references.items():
        if reference.shape != logits.shape or not np.allclose(logits, reference, rtol=RTOL, atol=ATOL):
            raise RuntimeError(f"{name}/{input_set.name}: logits differ from {what}")


def save_full_ids(out_dir: str, entry: dict, full_ids: np.ndarray) -> dict:
    """Stores the whole token sequence of an input set (the tokens its past was computed from,
    then its input_ids) beside it and names it in the set's manifest entry: run_models.py runs a
    recognized engine, which has no past inputs, over it and compares the new tokens' logits."""
    entry["full_input_ids"] = f"{entry['name']}/full_input_ids.npy"
    np.save(os.path.join(out_dir, entry["full_input_ids"]), full_ids)
    return entry


def make_past(name: str) -> dict:
    base, builder, opset = PAST_MODELS[name]
    from optimum.exporters.onnx import main_export  # only needed here; make_generation_refs imports this module
    import optimum.version

    out_dir = os.path.join(MODELS_DIR, name)
    with tempfile.TemporaryDirectory(prefix="llmc-past-") as tmp:
        hf_dir, onnx_dir = os.path.join(tmp, "hf"), os.path.join(tmp, "onnx")
        builder().save_pretrained(hf_dir)
        main_export(
            hf_dir,
            onnx_dir,
            task="text-generation-with-past",
            opset=opset,
            device="cpu",
            no_post_process=True,
            do_validation=False,  # checked below, against torch, within the e2e tolerance
        )
        written = sorted(os.listdir(onnx_dir))
        if any(f not in ("model.onnx", "config.json", "generation_config.json") for f in written):
            raise RuntimeError(f"{name}: unexpected files from the exporter (external data?): {written}")
        model = onnx.load(os.path.join(onnx_dir, "model.onnx"))
        # The torch model Optimum exported, loaded back the same way (its default attention).
        lm = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
    lm.eval()
    attention = lm.config._attn_implementation
    _check_model(model, opset, 1 << 20)
    symbol, layout = past_layout(model)

    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    model_path = os.path.join(out_dir, "model.onnx")
    onnx.save_model(model, model_path)
    session = _ort_session(model_path)
    output_names = [o.name for o in session.get_outputs()]
    input_names = [i.name for i in session.get_inputs()]

    manifest_sets = []
    for input_set, full_ids in _input_sets(lm, layout):
        if "position_ids" not in input_names:  # Bloom's export takes none
            input_set.inputs.pop("position_ids")
        if sorted(input_set.inputs) != sorted(input_names):
            raise RuntimeError(f"{name}: model inputs {input_names}, set {input_set.name} has {list(input_set.inputs)}")
        inputs = {n: input_set.inputs[n] for n in input_names}  # in the model's order
        expected = torch_forward(lm, inputs)
        _check_against_full(name, lm, input_set, full_ids, expected["logits"])
        got = dict(zip(output_names, session.run(output_names, inputs)))
        references = {n: expected[n] for n in output_names}
        entry = write_input_set(out_dir, input_set.name, inputs, references, got)
        manifest_sets.append(save_full_ids(out_dir, entry, full_ids))

    manifest = {
        "description": (
            (f"Cache export of {base}'s torch model (same builder and weights)" if base else
             f"Cache export of {type(lm).__name__} ({lm.config.model_type}, families.py: hidden "
             f"{families.HIDDEN}, {families.LAYERS} layers, {families.HEADS} heads, vocab {families.VOCAB}, "
             f"random seeded weights)")
            + ": Optimum main_export "
            f"task text-generation-with-past, {attention} attention as Optimum loads it; inputs "
            + ", ".join(n for n in input_names if not n.startswith(PAST_PREFIX))
            + f", past_key_values.N.key/value [batch, kv_heads, {symbol}, head_dim]; "
            "outputs logits, present.N.key/value. Sets: prefill over an empty past, one-token decode over a "
            "9-token past, a 4-token chunk over a 5-token past; no padding."
        ),
        "model": "model.onnx",
        "opset": opset,
        "model_bytes": os.path.getsize(model_path),
        "exporter": (
            f"optimum {optimum.version.__version__} main_export(task='text-generation-with-past', "
            f"no_post_process=True), torch {torch.__version__}, transformers {transformers.__version__}"
        ),
        **({"same_weights_as": base} if base else {}),
        "attn_implementation": attention,
        # llmc's dimension symbols default to a minimum of 1; the prefill set passes an empty past.
        "as_graph_flags": ["--dim", f"{symbol}=0:-1"],
        "tolerance": {"rtol": RTOL, "atol": ATOL},
        "expect_llm": True,  # recognized as a decoder LM (run_models.py, run_generation.py check it)
        "input_sets": manifest_sets,
    }
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    return manifest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"models (default: all of {', '.join(PAST_MODELS)})")
    args = parser.parse_args()
    unknown = [n for n in args.names if n not in PAST_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; known: {list(PAST_MODELS)}")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    for name in args.names or PAST_MODELS:
        manifest = make_past(name)
        diffs = {s["name"]: max(s["ort_max_abs_diff"].values()) for s in manifest["input_sets"]}
        print(
            f"generated {name}: {manifest['model_bytes']} bytes, {manifest['attn_implementation']} attention, "
            f"ORT max abs diff {diffs}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
