#!/usr/bin/env python3
"""Writes <name>/generation.json: reference tokens from transformers' own generate() for the LMs.

Run with the generation venv (see README.md):
    .venv-gen/bin/python test/models/make_generation_refs.py [NAME ...]

For each causal LM it rebuilds the torch model from generate.py's definitions and first proves it
is the committed one: ONNX Runtime on the committed model.onnx, the rebuilt torch model and the
stored logits.npy must agree within 1e-4 on every stored input set. It then records greedy
decoding (3 prompts, batch 1) and, for the first prompt, beam search (best sequence only). It also
checks that the committed ONNX graph accepts the full generated length and that a full-recompute
greedy loop on ONNX Runtime (argmax of the last position each step) reproduces the greedy tokens.
A cache export (<name>_past, generate_past.py) is the same torch model as <name>, so it gets the
same references; its stored input sets carry their past, the full-sequence runs get an empty past,
and greedy decoding is also replayed on ONNX Runtime one token at a time over the exported cache.
Nothing but generation.json is written. Deterministic: fixed seeds, one torch thread.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys

import numpy as np
import onnxruntime as ort
import torch
import transformers

import families
import generate
import generate_past
from export_util import _ort_session

MODELS_DIR = os.path.dirname(os.path.abspath(__file__))

BUILDERS = {
    "gpt2_tiny": generate.build_gpt2_tiny,
    "llama_tiny": generate.build_llama_tiny,
    "qwen2_tiny": generate.build_qwen2_tiny,
    "mistral_tiny": generate.build_mistral_tiny,
    "demo": generate.build_demo,
    **{f"{family}_tiny": functools.partial(families.build, family) for family in generate.FULL_SEQUENCE_FAMILIES},
    "gemma2_tiny": functools.partial(families.build, "gemma2"),
    "opt_tiny": functools.partial(families.build, "opt"),
    "mixtral_tiny": generate.build_mixtral_tiny,
    # The cache exports (generate_past.py) of the same torch models: the same references.
    **{name: builder for name, (_, builder, _) in generate_past.PAST_MODELS.items()},
}

VERIFY_ATOL = 1e-4  # rebuilt torch vs committed ONNX (via ONNX Runtime) vs stored logits.npy
PROMPT_LENGTHS = (1, 7, 20)
GREEDY_NEW_TOKENS = 32
BEAM_NEW_TOKENS = 16
NUM_BEAMS = 4
LENGTH_PENALTY = 1.0
PAD_TOKEN_ID = 0  # only needs to be a valid id: batch 1, attention_mask all ones, so never used
PROMPT_SEED = 7000  # prompt i of a model is drawn with seed PROMPT_SEED + i


class GenerationCheckError(RuntimeError):
    pass


# A model with no position table or rotary length (Bloom's ALiBi) is run up to this many tokens.
UNBOUNDED_CONTEXT = 2048


def _context_length(config) -> int:
    for key in ("n_positions", "max_position_embeddings"):
        if getattr(config, key, None) is not None:
            return int(getattr(config, key))
    if getattr(config, "model_type", "") == "bloom":  # ALiBi: positions are not bounded
        return UNBOUNDED_CONTEXT
    raise GenerationCheckError(f"{type(config).__name__} has no context length")


def _special_ids(config) -> set[int]:
    ids = set()
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = getattr(config, key, None)
        if value is None:
            continue
        ids.update(value if isinstance(value, list) else [value])
    return ids


def _torch_logits(lm: torch.nn.Module, inputs: dict[str, np.ndarray]) -> np.ndarray:
    if any(k.startswith(generate_past.PAST_PREFIX) for k in inputs):
        return generate_past.torch_forward(lm, inputs)["logits"]
    wrapper = generate.CausalLmLogits(lm)
    with torch.no_grad():
        return wrapper(*(torch.from_numpy(v) for v in inputs.values())).numpy()


def _max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        raise GenerationCheckError(f"shape mismatch {a.shape} vs {b.shape}")
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def _verify_committed(name: str, lm: torch.nn.Module, session: ort.InferenceSession) -> list[str]:
    """Raises unless the rebuilt model, ONNX Runtime on model.onnx and logits.npy all agree."""
    model_dir = os.path.join(MODELS_DIR, name)
    with open(os.path.join(model_dir, "manifest.json")) as f:
        manifest = json.load(f)
    lines = []
    for input_set in manifest["input_sets"]:
        inputs = {k: np.load(os.path.join(model_dir, p)) for k, p in input_set["inputs"].items()}
        stored = np.load(os.path.join(model_dir, input_set["outputs"]["logits"]))
        (ort_logits,) = session.run(["logits"], inputs)
        torch_logits = _torch_logits(lm, inputs)
        diffs = {
            "torch-vs-ort": _max_abs_diff(torch_logits, ort_logits),
            "torch-vs-stored": _max_abs_diff(torch_logits, stored),
        }
        bad = {k: v for k, v in diffs.items() if not v <= VERIFY_ATOL}
        if bad:
            raise GenerationCheckError(
                f"{name}/{input_set['name']}: rebuilt torch model is not the committed one: max abs diffs {bad} "
                f"> {VERIFY_ATOL} (generate.py changed, or model.onnx was regenerated differently)"
            )
        lines.append(f"  verified {input_set['name']}: " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    return lines


def _prompts(vocab: int, special: set[int]) -> list[list[int]]:
    allowed = np.array([i for i in range(vocab) if i not in special], dtype=np.int64)
    return [
        np.random.default_rng(PROMPT_SEED + index).choice(allowed, size=length).tolist()
        for index, length in enumerate(PROMPT_LENGTHS)
    ]


def _generate(lm: torch.nn.Module, prompt: list[int], new_tokens: int, **kwargs) -> list[int]:
    input_ids = torch.tensor([prompt], dtype=torch.int64)
    with torch.no_grad():
        out = lm.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=False,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=PAD_TOKEN_ID,
            eos_token_id=None,
            use_cache=False,  # full recomputation each step, as llmc's loop does
            **kwargs,
        )
    tokens = out[0].tolist()
    if tokens[: len(prompt)] != prompt or len(tokens) != len(prompt) + new_tokens:
        raise GenerationCheckError(
            f"generate() returned {len(tokens)} tokens for a {len(prompt)}-token prompt, expected "
            f"{len(prompt) + new_tokens} starting with the prompt"
        )
    return tokens[len(prompt) :]


def _past_layout(session: ort.InferenceSession) -> dict[str, tuple[int, ...]]:
    """{past input: its empty shape at batch 1} of a cache export; empty for a full-sequence model."""
    return {
        i.name: generate_past.empty_shape(i.name, i.shape)
        for i in session.get_inputs()
        if i.name.startswith(generate_past.PAST_PREFIX)
    }


def _ort_inputs(session: ort.InferenceSession, ids: list[int]) -> dict[str, np.ndarray]:
    """The whole sequence in one run (a cache export gets an empty past and positions 0..n-1)."""
    array = np.array([ids], dtype=np.int64)
    names = {i.name for i in session.get_inputs()}
    inputs = {"input_ids": array}
    if "attention_mask" in names:
        inputs["attention_mask"] = np.ones_like(array)
    if "position_ids" in names:
        inputs["position_ids"] = np.arange(len(ids), dtype=np.int64)[None, :]
    inputs.update(generate_past.empty_past(_past_layout(session), 1))
    return inputs


def _check_greedy_on_ort_cache(
    name: str, session: ort.InferenceSession, prompt: list[int], new_tokens: list[int]
) -> None:
    """For a cache export: prefill the prompt over an empty past, then feed one greedy token at a
    time with the present key/values as the next past; each step's argmax must be the next token."""
    layout = _past_layout(session)
    outputs = [o.name for o in session.get_outputs()]
    past, length, step_ids, got = generate_past.empty_past(layout, 1), 0, prompt, []
    for _ in new_tokens:
        ids = np.array([step_ids], dtype=np.int64)
        inputs = {
            "input_ids": ids,
            "attention_mask": np.ones((1, length + ids.shape[1]), dtype=np.int64),
            "position_ids": np.arange(length, length + ids.shape[1], dtype=np.int64)[None, :],
            **past,
        }
        names = {i.name for i in session.get_inputs()}
        inputs = {n: v for n, v in inputs.items() if n in names}  # Bloom's export takes no position_ids
        results = dict(zip(outputs, session.run(outputs, inputs)))
        got.append(int(results["logits"][0, -1].argmax()))
        past = {n: results["present." + n[len(generate_past.PAST_PREFIX) :]] for n in layout}
        length += ids.shape[1]
        step_ids = [got[-1]]
    if got != new_tokens:
        first = next(i for i, (a, b) in enumerate(zip(got, new_tokens)) if a != b)
        raise GenerationCheckError(
            f"{name}: ORT greedy over the exported cache diverges from generate() at step {first}: {got} vs {new_tokens}"
        )


def _check_greedy_on_ort(
    name: str, lm: torch.nn.Module, session: ort.InferenceSession, prompt: list[int], new_tokens: list[int]
) -> tuple[float, float]:
    """Runs the full sequence through ONNX Runtime: the graph must accept its length, match torch,
    and its argmax at each step's last position must be the greedy token. Returns (max abs diff
    vs torch, smallest top-1/top-2 logit gap over the steps)."""
    full = prompt + new_tokens
    inputs = _ort_inputs(session, full)
    (ort_logits,) = session.run(["logits"], inputs)
    diff = _max_abs_diff(ort_logits, _torch_logits(lm, inputs))
    if not diff <= VERIFY_ATOL:
        raise GenerationCheckError(f"{name}: ORT differs from torch by {diff} at seq {len(full)}")
    # Step t predicts from positions [0, len(prompt) + t); causal masking makes position
    # len(prompt) + t - 1 of the full run equal to the last position of that prefix run.
    steps = ort_logits[0, len(prompt) - 1 : len(full) - 1]
    argmax = steps.argmax(axis=-1).tolist()
    if argmax != new_tokens:
        first = next(i for i, (a, b) in enumerate(zip(argmax, new_tokens)) if a != b)
        raise GenerationCheckError(
            f"{name}: ORT full-recompute greedy diverges from generate() at step {first}: {argmax} vs {new_tokens}"
        )
    top2 = np.sort(steps, axis=-1)[:, -2:]
    return diff, float(np.min(top2[:, 1] - top2[:, 0]))


def _dump(document: dict) -> str:
    """JSON with indent 2, but lists of ints on one line."""
    text = json.dumps(document, indent=2)
    out, i = [], 0
    while i < len(text):
        if text[i] == "[":
            end = text.index("]", i)
            inner = text[i + 1 : end]
            if inner.strip() and all(part.strip().lstrip("-").isdigit() for part in inner.split(",")):
                out.append("[" + ", ".join(part.strip() for part in inner.split(",")) + "]")
                i = end + 1
                continue
        out.append(text[i])
        i += 1
    return "".join(out) + "\n"


def make_refs(name: str) -> list[str]:
    lm = BUILDERS[name]()
    lm.eval()
    session = _ort_session(os.path.join(MODELS_DIR, name, "model.onnx"))
    summary = [f"{name}:"] + _verify_committed(name, lm, session)

    config = lm.config
    context = _context_length(config)
    special = _special_ids(config)
    prompts = _prompts(config.vocab_size, special)
    greedy_new = min(GREEDY_NEW_TOKENS, context - max(PROMPT_LENGTHS))
    beam_new = min(BEAM_NEW_TOKENS, context - len(prompts[0]))
    if greedy_new < 1:
        raise GenerationCheckError(f"{name}: context {context} is too short for a {max(PROMPT_LENGTHS)}-token prompt")
    notes = []
    if greedy_new != GREEDY_NEW_TOKENS:
        notes.append(f"context {context}: greedy max_new_tokens reduced from {GREEDY_NEW_TOKENS} to {greedy_new}")
    if beam_new != BEAM_NEW_TOKENS:
        notes.append(f"context {context}: beam max_new_tokens reduced from {BEAM_NEW_TOKENS} to {beam_new}")

    greedy = []
    for prompt in prompts:
        new_tokens = _generate(lm, prompt, greedy_new, num_beams=1)
        diff, gap = _check_greedy_on_ort(name, lm, session, prompt, new_tokens)
        if _past_layout(session):
            _check_greedy_on_ort_cache(name, session, prompt, new_tokens)
        summary.append(
            f"  greedy prompt len {len(prompt):2d} -> {len(new_tokens)} new (seq {len(prompt) + len(new_tokens)}): "
            f"ORT agrees (max abs diff {diff:.2e}, smallest top-1/top-2 gap {gap:.3g})"
            + (", also over the exported cache" if _past_layout(session) else "")
            + f"; first new {new_tokens[:8]}"
        )
        greedy.append({"prompt": prompt, "max_new_tokens": greedy_new, "new_tokens": new_tokens})

    beam_tokens = _generate(
        lm, prompts[0], beam_new, num_beams=NUM_BEAMS, length_penalty=LENGTH_PENALTY, early_stopping=True,
        num_return_sequences=1,
    )
    beam = [
        {
            "prompt": prompts[0],
            "num_beams": NUM_BEAMS,
            "length_penalty": LENGTH_PENALTY,
            "early_stopping": True,
            "max_new_tokens": beam_new,
            "new_tokens": beam_tokens,
        }
    ]
    summary.append(f"  beam {NUM_BEAMS} prompt len {len(prompts[0])} -> {beam_tokens}")
    summary += [f"  NOTE {n}" for n in notes]

    document = {
        "description": (
            f"Reference tokens from transformers generate() on the torch model behind model.onnx (verified "
            f"against it), batch 1, attention_mask all ones, eos disabled (eos_token_id=None, min_new_tokens = "
            f"max_new_tokens), use_cache=False. Prompts: seed {PROMPT_SEED}+i, ids drawn from the vocab "
            f"without special ids {sorted(special)}. Context length {context}."
        ),
        "context_length": context,
        "greedy": greedy,
        "beam": beam,
        "notes": notes,
        "made_with": {
            "script": "test/models/make_generation_refs.py",
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "onnxruntime": ort.__version__,
            "numpy": np.__version__,
            "pad_token_id": PAD_TOKEN_ID,
        },
    }
    # The sequence symbol of input_ids, which run_generation.py bounds with --dim for its error
    # checks; recorded only where it is not generate.py's "seq" (Optimum's is "sequence_length").
    seq_symbol = next(i.shape[1] for i in session.get_inputs() if i.name == "input_ids")
    if seq_symbol != "seq":
        document["seq_symbol"] = seq_symbol
    with open(os.path.join(MODELS_DIR, name, "generation.json"), "w") as f:
        f.write(_dump(document))
    summary.append(f"  wrote {name}/generation.json")
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"models (default: all of {', '.join(BUILDERS)})")
    args = parser.parse_args()
    unknown = [n for n in args.names if n not in BUILDERS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; known: {list(BUILDERS)}")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    for name in args.names or BUILDERS:
        try:
            print("\n".join(make_refs(name)), flush=True)
        except GenerationCheckError as error:
            print(f"FAILED {name}: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
