#!/usr/bin/env python3
"""Regenerates the committed e2e models: torch/transformers -> ONNX plus torch reference outputs.

Run with the generation venv (see README.md):  .venv-gen/bin/python test/models/generate.py [NAME ...]
Deterministic: fixed seeds, one torch thread; rerunning rewrites byte-identical files.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch
import transformers

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


def build_llama_tiny() -> torch.nn.Module:
    """The LlamaForCausalLM behind llama_tiny, with its seeded random weights."""
    return _llama(
        4,
        initializer_range=0.1,
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )


def make_llama_tiny(out_dir: str) -> None:
    vocab = 512
    model = build_llama_tiny()
    export_model(
        out_dir,
        CausalLmLogits(model),
        _lm_input_sets(vocab, [(1, 7), (2, 13), (3, 1)], with_mask=True),
        ["logits"],
        {**LM_AXES, **LOGITS_AXES},
        opset=18,
        description=(
            "transformers LlamaForCausalLM, random weights: hidden 64, 2 layers, 4 query heads sharing "
            "2 KV heads (GQA), RoPE, RMSNorm, SwiGLU, vocab 512; right-padded attention_mask."
        ),
    )


def build_demo() -> torch.nn.Module:
    """The LlamaForCausalLM behind demo, with its seeded random weights."""
    return _llama(
        5,
        initializer_range=0.05,
        vocab_size=512,
        hidden_size=192,
        intermediate_size=448,
        num_hidden_layers=4,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )


def make_demo(out_dir: str) -> None:
    vocab = 512
    model = build_demo()
    sets = _lm_input_sets(vocab, [(1, 16), (2, 9)], with_mask=False)
    export_model(
        out_dir,
        CausalLmLogits(model),
        sets,
        ["logits"],
        {"input_ids": LM_AXES["input_ids"], **LOGITS_AXES},
        opset=18,
        description=(
            "Demo model for scripts/demo.sh: transformers LlamaForCausalLM, random weights: hidden 192, "
            "4 layers, 6 query heads / 2 KV heads, vocab 512; input_ids -> logits."
        ),
        max_bytes=8 << 20,
    )
    np.save(os.path.join(out_dir, "input_ids.npy"), sets[0].inputs["input_ids"])


MODELS = {
    "mlp": make_mlp,
    "bert_tiny": make_bert_tiny,
    "gpt2_tiny": make_gpt2_tiny,
    "llama_tiny": make_llama_tiny,
    "demo": make_demo,
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
