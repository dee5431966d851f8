#!/usr/bin/env python3
"""Regenerates the committed e2e models: torch/transformers -> ONNX plus torch reference outputs.

Run with the generation venv (see README.md):  .venv-gen/bin/python test/models/generate.py [NAME ...]
Deterministic: fixed seeds, one torch thread; rerunning rewrites byte-identical files.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

import numpy as np
import tokenizers
import torch
import transformers

import families
from export_util import InputSet, export_model

MODELS_DIR = os.path.dirname(os.path.abspath(__file__))


def _token_ids(seed: int, batch: int, seq: int, vocab: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, size=(batch, seq), dtype=np.int64)


def _right_padded_mask(batch: int, seq: int) -> np.ndarray:
    """All ones except that the last row is padded after 2/3 of its tokens (when batch > 1)."""
    mask = np.ones((batch, seq), dtype=np.int64)
    if batch > 1:
        mask[-1, (2 * seq) // 3 :] = 0
    return mask


def _lm_input_sets(vocab: int, sizes: list[tuple[int, int]], with_mask: bool) -> list[InputSet]:
    sets = []
    for index, (batch, seq) in enumerate(sizes):
        inputs = {"input_ids": _token_ids(100 + index, batch, seq, vocab)}
        if with_mask:
            inputs["attention_mask"] = _right_padded_mask(batch, seq)
        sets.append(InputSet(f"b{batch}_s{seq}", inputs))
    return sets


LM_AXES = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
LOGITS_AXES = {"logits": {0: "batch", 1: "seq"}}


class Mlp(torch.nn.Module):
    """Linear -> GELU -> LayerNorm -> Linear -> Softmax over features."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.act = torch.nn.GELU()
        self.norm = torch.nn.LayerNorm(64)
        self.fc2 = torch.nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc2(self.norm(self.act(self.fc1(x)))), dim=-1)


class BertOutputs(torch.nn.Module):
    """Returns BertModel's outputs as a plain tuple so they get fixed ONNX names."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.last_hidden_state, out.pooler_output


class CausalLmLogits(torch.nn.Module):
    """Returns only the logits of a *ForCausalLM model, without a KV cache."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask=None):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def make_mlp(out_dir: str) -> None:
    torch.manual_seed(1)
    rng = np.random.default_rng(11)
    sets = [InputSet(f"b{b}", {"x": rng.standard_normal((b, 32), dtype=np.float32)}) for b in (1, 3)]
    export_model(
        out_dir,
        Mlp(),
        sets,
        ["probs"],
        {"x": {0: "batch"}, "probs": {0: "batch"}},
        opset=17,
        description="torch.nn MLP: Linear(32,64) GELU(erf) LayerNorm(64) Linear(64,16) Softmax; dynamic batch.",
        expect_llm=False,
    )


def make_bert_tiny(out_dir: str) -> None:
    torch.manual_seed(2)
    config = transformers.BertConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
        type_vocab_size=2,
        initializer_range=0.1,
        attn_implementation="eager",
    )
    model = BertOutputs(transformers.BertModel(config))
    sets = []
    for index, (batch, seq) in enumerate([(1, 7), (2, 13)]):
        rng = np.random.default_rng(200 + index)
        sets.append(
            InputSet(
                f"b{batch}_s{seq}",
                {
                    "input_ids": _token_ids(100 + index, batch, seq, config.vocab_size),
                    "attention_mask": _right_padded_mask(batch, seq),
                    "token_type_ids": rng.integers(0, 2, size=(batch, seq), dtype=np.int64),
                },
            )
        )
    axes = {name: {0: "batch", 1: "seq"} for name in ("input_ids", "attention_mask", "token_type_ids")}
    axes["last_hidden_state"] = {0: "batch", 1: "seq"}
    axes["pooler_output"] = {0: "batch"}
    export_model(
        out_dir,
        model,
        sets,
        ["last_hidden_state", "pooler_output"],
        axes,
        opset=17,
        description="transformers BertModel, random weights: hidden 64, 2 layers, 4 heads, vocab 512, eager attention.",
        # 64 learned positions bound the sequence; with the bound llmc infers static shapes.
        compile_flags=["--dim", "seq=1:64"],
        expect_llm=False,  # an encoder: no causal attention, no logits
    )


def build_gpt2_tiny() -> torch.nn.Module:
    """The GPT2LMHeadModel behind gpt2_tiny, with its seeded random weights."""
    torch.manual_seed(3)
    config = transformers.GPT2Config(
        vocab_size=512,
        n_positions=64,
        n_embd=64,
        n_layer=2,
        n_head=4,
        initializer_range=0.1,
        use_cache=False,
        attn_implementation="eager",
    )
    return transformers.GPT2LMHeadModel(config)


def make_gpt2_tiny(out_dir: str) -> None:
    lm = build_gpt2_tiny()
    model = CausalLmLogits(lm)
    export_model(
        out_dir,
        model,
        _lm_input_sets(lm.config.vocab_size, [(1, 7), (2, 13), (3, 1)], with_mask=False),
        ["logits"],
        {"input_ids": LM_AXES["input_ids"], **LOGITS_AXES},
        opset=17,
        description="transformers GPT2LMHeadModel, random weights: n_embd 64, 2 layers, 4 heads, vocab 512, tied lm_head.",
        expect_llm=True,
    )


def _llama(seed: int, initializer_range: float, **sizes) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        initializer_range=initializer_range,
        rope_theta=10000.0,
        use_cache=False,
        tie_word_embeddings=False,
        attn_implementation="eager",
        **sizes,
    )
    return transformers.LlamaForCausalLM(config)


# The sizes llama_tiny, qwen2_tiny and mistral_tiny share.
TINY_LM_SIZES = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)


def _make_tiny_lm(out_dir: str, model: torch.nn.Module, description: str,
                  expect_llm: bool = True, expect_refusal: str | None = None) -> None:
    """Exports one of the tiny decoders: input sets b1_s7, b2_s13 (right-padded), b3_s1."""
    export_model(
        out_dir,
        CausalLmLogits(model),
        _lm_input_sets(model.config.vocab_size, [(1, 7), (2, 13), (3, 1)], with_mask=True),
        ["logits"],
        {**LM_AXES, **LOGITS_AXES},
        opset=18,
        description=description,
        expect_llm=expect_llm,
        expect_refusal=expect_refusal,
    )


def build_llama_tiny() -> torch.nn.Module:
    """The LlamaForCausalLM behind llama_tiny, with its seeded random weights."""
    return _llama(4, initializer_range=0.1, **TINY_LM_SIZES)


def make_llama_tiny(out_dir: str) -> None:
    _make_tiny_lm(
        out_dir,
        build_llama_tiny(),
        "transformers LlamaForCausalLM, random weights: hidden 64, 2 layers, 4 query heads sharing "
        "2 KV heads (GQA), RoPE, RMSNorm, SwiGLU, vocab 512; right-padded attention_mask.",
    )


def build_qwen2_tiny() -> torch.nn.Module:
    """The Qwen2ForCausalLM behind qwen2_tiny (llama_tiny's sizes; biases on q/k/v), seeded."""
    torch.manual_seed(5)
    config = transformers.Qwen2Config(
        **TINY_LM_SIZES,
        initializer_range=0.1,
        rope_theta=10000.0,
        # Qwen2's defaults, as in released Qwen2 configs: attention does not use the window, but
        # transformers still folds it into the causal mask (a term that never fires below 4096).
        use_sliding_window=False,
        sliding_window=4096,
        tie_word_embeddings=False,
        use_cache=False,
        attn_implementation="eager",
    )
    return transformers.Qwen2ForCausalLM(config)


def make_qwen2_tiny(out_dir: str) -> None:
    _make_tiny_lm(
        out_dir,
        build_qwen2_tiny(),
        "transformers Qwen2ForCausalLM, random weights: hidden 64, 2 layers, 4 query heads sharing "
        "2 KV heads (GQA), biases on q/k/v, RoPE, RMSNorm, SwiGLU, vocab 512; right-padded attention_mask.",
    )


def build_mistral_tiny() -> torch.nn.Module:
    """The MistralForCausalLM behind mistral_tiny (llama_tiny's sizes; no sliding window), seeded."""
    torch.manual_seed(6)
    config = transformers.MistralConfig(
        **TINY_LM_SIZES,
        initializer_range=0.1,
        rope_theta=10000.0,
        sliding_window=None,
        tie_word_embeddings=False,
        use_cache=False,
        attn_implementation="eager",
    )
    return transformers.MistralForCausalLM(config)


def make_mistral_tiny(out_dir: str) -> None:
    _make_tiny_lm(
        out_dir,
        build_mistral_tiny(),
        "transformers MistralForCausalLM, random weights: hidden 64, 2 layers, 4 query heads sharing "
        "2 KV heads (GQA), no sliding window, RoPE, RMSNorm, SwiGLU, vocab 512; right-padded attention_mask.",
    )


# Where test/models/demo/train.py saves the trained demo weights (git-ignored); keep in step with
# DEFAULT_OUT there.
DEMO_WEIGHTS_DIR = os.path.join(MODELS_DIR, "..", "..", "build", "demo-train")
DEMO_TOKENIZER = os.path.join(MODELS_DIR, "demo", "tokenizer.json")
# The demo prompt (input_ids.npy, input set b1_s16) and the rows of b2_s9: the first tokens of
# verses, in the demo tokenizer.
DEMO_PROMPT = (
    "And God said unto Moses, I AM THAT I AM: and he said, Thus shalt thou say unto the children of "
    "Israel, I AM hath sent me unto you."
)
DEMO_BATCH_TEXTS = (
    "In the beginning God created the heaven and the earth.",
    "The LORD is my shepherd; I shall not want.",
)


def build_demo() -> torch.nn.Module:
    """The LlamaForCausalLM behind demo: the weights test/models/demo/train.py trained."""
    config_path = os.path.join(DEMO_WEIGHTS_DIR, "config.json")
    if not os.path.exists(config_path):
        sys.exit(
            f"demo: no trained weights in {os.path.normpath(DEMO_WEIGHTS_DIR)}; "
            "run .venv-gen/bin/python test/models/demo/train.py first"
        )
    with open(os.path.join(DEMO_WEIGHTS_DIR, "tokenizer.json"), "rb") as f, open(DEMO_TOKENIZER, "rb") as g:
        if f.read() != g.read():
            sys.exit(
                "demo: test/models/demo/tokenizer.json is not the tokenizer the weights were trained with; "
                "rerun test/models/demo/train.py"
            )
    return transformers.LlamaForCausalLM.from_pretrained(
        DEMO_WEIGHTS_DIR, attn_implementation="eager", use_cache=False, torch_dtype=torch.float32
    )


def _demo_ids(text: str, length: int) -> np.ndarray:
    """The first `length` tokens of `text` in the demo tokenizer, as int64."""
    ids = tokenizers.Tokenizer.from_file(DEMO_TOKENIZER).encode(text).ids
    if len(ids) < length:
        raise RuntimeError(f"demo: {text!r} is only {len(ids)} tokens, fewer than {length}")
    return np.array(ids[:length], dtype=np.int64)


def make_demo(out_dir: str) -> None:
    model = build_demo()
    prompt = _demo_ids(DEMO_PROMPT, 16)[None, :]
    batch = np.stack([_demo_ids(text, 9) for text in DEMO_BATCH_TEXTS])
    sets = [InputSet("b1_s16", {"input_ids": prompt}), InputSet("b2_s9", {"input_ids": batch})]
    params = sum(p.numel() for p in model.parameters())
    export_model(
        out_dir,
        CausalLmLogits(model),
        sets,
        ["logits"],
        {"input_ids": LM_AXES["input_ids"], **LOGITS_AXES},
        opset=18,
        description=(
            "Demo model for scripts/demo.sh: transformers LlamaForCausalLM trained by demo/train.py on the "
            f"King James Bible ({params} parameters): hidden 192, 4 layers, 6 query heads / 2 KV heads, "
            f"SwiGLU {model.config.intermediate_size}, tied embeddings, byte-level BPE vocab "
            f"{model.config.vocab_size} (demo/tokenizer.json); input_ids -> logits. Inputs are verse openings."
        ),
        max_bytes=10_000_000,
        expect_llm=True,
    )
    np.save(os.path.join(out_dir, "input_ids.npy"), prompt)


# Decoder families Optimum 1.25.3 does not export (docs/models.md): exported here as users do
# then, by torch.onnx without a cache, from families.py's seeded models.
FULL_SEQUENCE_FAMILIES = ["qwen3", "stablelm"]


def make_family_tiny(family: str, out_dir: str,
                     why: str = "Optimum 1.25.3 refuses the architecture") -> None:
    model = families.build(family)
    _make_tiny_lm(
        out_dir,
        model,
        f"transformers {type(model).__name__} ({family}; families.py: hidden {families.HIDDEN}, "
        f"{families.LAYERS} layers, {families.HEADS} heads, vocab {families.VOCAB}), random seeded "
        f"weights; exported by torch.onnx without a cache ({why}); right-padded attention_mask.",
    )


# transformers 4.51's Gemma-2 slices each sliding-window layer's mask to max(seq, window)
# columns, and torch.onnx's trace keeps whichever side won: traced on fewer tokens than the
# window, the export freezes the window's width and computes sequences of at most `window`
# tokens (ONNX Runtime fails to broadcast beyond, and llmc refuses its mask past that length
# unless --dim bounds the sequence); traced on more, the width follows the sequence and the
# export is right at every length. families.py's window is 8, so it is traced on 64 tokens.
# (Gemma-2's own window is 4096: a short trace limits its export to 4096 tokens.)
GEMMA2_TRACE_LENGTH = 64


def make_gemma2_tiny(out_dir: str) -> None:
    model = families.build("gemma2")
    sizes = [(1, GEMMA2_TRACE_LENGTH), (2, 13), (3, 1)]
    export_model(
        out_dir,
        CausalLmLogits(model),
        _lm_input_sets(model.config.vocab_size, sizes, with_mask=True),
        ["logits"],
        {**LM_AXES, **LOGITS_AXES},
        opset=18,
        description=(
            f"transformers Gemma2ForCausalLM (families.py: hidden {families.HIDDEN}, {families.LAYERS} "
            f"layers, {families.HEADS} heads sharing {families.KV_HEADS} KV heads, sliding window 8 on "
            "even layers, attention soft-capping 5 and final logit soft-capping 3, small enough to "
            "matter at these sizes), random seeded weights; exported by torch.onnx without a cache "
            f"(Optimum 1.25.3 refuses the architecture), traced on {GEMMA2_TRACE_LENGTH} tokens, "
            "more than the window (generate.py says why); right-padded attention_mask."
        ),
        expect_llm=True,
    )


# Mixtral (families.py) with experts' MLP 48 wide, so that the export stays under 1 MB: its
# routing (TopK over a router softmax, NonZero per expert) runs as a graph, by full recomputation.
MIXTRAL_SIZES = dict(intermediate_size=48)


def build_mixtral_tiny() -> torch.nn.Module:
    return families.build("mixtral", **MIXTRAL_SIZES)


def make_mixtral_tiny(out_dir: str) -> None:
    _make_tiny_lm(
        out_dir,
        build_mixtral_tiny(),
        f"transformers MixtralForCausalLM (families.py: hidden {families.HIDDEN}, {families.LAYERS} "
        f"layers, {families.HEADS} heads sharing {families.KV_HEADS} KV heads, 4 experts of MLP "
        f"{MIXTRAL_SIZES['intermediate_size']}, 2 per token), random seeded weights; exported by "
        "torch.onnx without a cache (Optimum 1.25.3 refuses the architecture); its expert routing "
        "(TopK, OneHot, NonZero, ScatterElements per expert) becomes one llm.moe per layer; "
        "right-padded attention_mask.",
    )


MODELS = {
    "mlp": make_mlp,
    "bert_tiny": make_bert_tiny,
    "gpt2_tiny": make_gpt2_tiny,
    "llama_tiny": make_llama_tiny,
    "qwen2_tiny": make_qwen2_tiny,
    "mistral_tiny": make_mistral_tiny,
    "demo": make_demo,
    **{f"{family}_tiny": functools.partial(make_family_tiny, family) for family in FULL_SEQUENCE_FAMILIES},
    "gemma2_tiny": make_gemma2_tiny,
    "mixtral_tiny": make_mixtral_tiny,
    # OPT as a user who skips Optimum exports it: with no position_ids input, its learned
    # positions come from the attention mask inside the graph (cumsum(mask) * mask - 1).
    "opt_tiny": functools.partial(
        make_family_tiny, "opt",
        why="as a user who skips Optimum does; OPT then computes its learned positions from "
            "attention_mask inside the graph, cumsum(mask) * mask - 1"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", help=f"models to regenerate (default: all of {', '.join(MODELS)})")
    args = parser.parse_args()
    unknown = [name for name in args.names if name not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; known: {list(MODELS)}")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name in args.names or MODELS:
        MODELS[name](os.path.join(MODELS_DIR, name))
        print(f"generated {name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
