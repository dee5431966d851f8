#!/usr/bin/env python3
"""Trains the demo model: a small Llama-style decoder on the King James Bible, on the CPU.

Run with the generation venv (see ../README.md), then regenerate the committed files:
    .venv-gen/bin/python test/models/demo/train.py
    .venv-gen/bin/python test/models/generate.py demo
    .venv-gen/bin/python test/models/make_generation_refs.py demo

The text comes from the Debian package bible-kjv-text (the King James Version, public domain),
read through the `bible` program of the bible-kjv package it depends on:
    apt-get install bible-kjv-text
Nothing of the text is stored. The script trains a byte-level BPE tokenizer (Hugging Face
`tokenizers`, GPT-2 style, vocab 2048) and writes it to tokenizer.json next to this file (it is
committed), then trains a transformers LlamaForCausalLM for a fixed number of steps on two CPU
threads (9.5 minutes on a 2-core machine) and saves it with save_pretrained to
build/demo-train/ at the repository root (git-ignored), where generate.py's build_demo() loads it.

Deterministic: fixed seeds, two torch threads, deterministic algorithms; rerunning on the same
machine and software gives the same tokenizer and the same weights.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kjv import is_held_out, read_chapters  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER_PATH = os.path.join(HERE, "tokenizer.json")
# Keep in step with DEMO_WEIGHTS_DIR in ../generate.py.
DEFAULT_OUT = os.path.join(HERE, "..", "..", "..", "build", "demo-train")

EOT = "<|endoftext|>"  # id 0: BOS, EOS and padding, and the separator between chapters
VOCAB_SIZE = 2048
CONTEXT = 128
BATCH = 32
STEPS = 1200
PEAK_LR = 2e-3
FINAL_LR = 2e-4
WARMUP_STEPS = 100
WEIGHT_DECAY = 0.1
SEED = 1611
THREADS = 2


def train_tokenizer(chapters: list[str]) -> Tokenizer:
    """Byte-level BPE as GPT-2's: no normalizer, ByteLevel pre-tokenizer/decoder, no prefix space."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(chapters, trainer=trainer)
    if tokenizer.token_to_id(EOT) != 0 or tokenizer.get_vocab_size() != VOCAB_SIZE:
        sys.exit("train.py: unexpected tokenizer vocabulary")
    return tokenizer


def token_stream(tokenizer: Tokenizer, chapters: list[str]) -> torch.Tensor:
    """All chapters encoded, each followed by <|endoftext|>, as one int64 tensor."""
    ids: list[int] = []
    for encoding in tokenizer.encode_batch(chapters):
        ids.extend(encoding.ids)
        ids.append(0)
    return torch.tensor(ids, dtype=torch.int64)


def make_model(vocab: int) -> transformers.LlamaForCausalLM:
    config = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=192,
        intermediate_size=448,
        num_hidden_layers=4,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rope_theta=10000.0,
        initializer_range=0.02,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        use_cache=False,
        attn_implementation="eager",
    )
    return transformers.LlamaForCausalLM(config)


def learning_rate(step: int, steps: int) -> float:
    """Linear warmup, then cosine decay from PEAK_LR to FINAL_LR."""
    if step < WARMUP_STEPS:
        return PEAK_LR * (step + 1) / WARMUP_STEPS
    progress = (step - WARMUP_STEPS) / max(1, steps - WARMUP_STEPS)
    return FINAL_LR + 0.5 * (PEAK_LR - FINAL_LR) * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def evaluate(model: torch.nn.Module, stream: torch.Tensor) -> float:
    """Mean loss over the stream cut into consecutive CONTEXT-token windows."""
    model.eval()
    windows = stream[: (len(stream) // CONTEXT) * CONTEXT].view(-1, CONTEXT)
    losses = [model(input_ids=batch, labels=batch).loss.item() for batch in windows.split(BATCH)]
    model.train()
    return sum(losses) / len(losses)


@torch.no_grad()
def sample(model: torch.nn.Module, tokenizer: Tokenizer, prompt: str, new_tokens: int) -> str:
    model.eval()
    ids = torch.tensor([tokenizer.encode(prompt).ids])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new_tokens, pad_token_id=0
    )
    model.train()
    return tokenizer.decode(out[0].tolist())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=STEPS, help=f"optimizer steps (default {STEPS})")
    parser.add_argument(
        "--out", default=DEFAULT_OUT, help="where the weights go (generate.py reads only the default)"
    )
    args = parser.parse_args()

    torch.manual_seed(SEED)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    start = time.time()

    chapters = read_chapters()
    tokenizer = train_tokenizer(chapters)
    tokenizer.save(TOKENIZER_PATH)
    train_chapters = [c for i, c in enumerate(chapters) if not is_held_out(i)]
    valid_chapters = [c for i, c in enumerate(chapters) if is_held_out(i)]
    train_ids = token_stream(tokenizer, train_chapters)
    valid_ids = token_stream(tokenizer, valid_chapters)
    print(
        f"text: {len(chapters)} chapters, {sum(map(len, chapters))} characters; tokenizer: vocab "
        f"{tokenizer.get_vocab_size()}, {len(train_ids)} training and {len(valid_ids)} held-out tokens "
        f"({time.time() - start:.1f} s)",
        flush=True,
    )

    model = make_model(tokenizer.get_vocab_size())
    model.train()
    print(f"model: {sum(p.numel() for p in model.parameters())} parameters (embeddings tied)", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=PEAK_LR,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    batches = torch.Generator().manual_seed(SEED)
    positions = torch.arange(CONTEXT)
    tokens_per_epoch = len(train_ids)
    train_start = time.time()
    running = 0.0
    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.steps)
        offsets = torch.randint(0, len(train_ids) - CONTEXT, (BATCH,), generator=batches)
        batch = train_ids[offsets[:, None] + positions]
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        running += loss.item()
        if (step + 1) % 50 == 0 or step + 1 == args.steps:
            count = 50 if (step + 1) % 50 == 0 else (step + 1) % 50
            print(
                f"step {step + 1:5d}/{args.steps}  loss {running / count:.4f}  "
                f"lr {learning_rate(step, args.steps):.2e}  "
                f"epoch {(step + 1) * BATCH * CONTEXT / tokens_per_epoch:.2f}  {time.time() - train_start:.0f} s",
                flush=True,
            )
            running = 0.0
    train_seconds = time.time() - train_start

    valid_loss = evaluate(model, valid_ids)
    print(
        f"held-out loss {valid_loss:.4f} (perplexity {math.exp(valid_loss):.1f}); "
        f"training took {train_seconds:.0f} s"
    )
    print("sample (greedy):", repr(sample(model, tokenizer, "And God said", 40)))
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out)
    tokenizer.save(os.path.join(args.out, "tokenizer.json"))
    print(f"saved weights to {os.path.normpath(args.out)} and the tokenizer to {TOKENIZER_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
