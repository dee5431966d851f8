#!/usr/bin/env python3
"""Writes tokenizer_1000.json: the demo's tokenizer cut to its first 1,000 ids.

The demo model has 2,048 logits rows; with this tokenizer 1,048 of them are ids that no text
shows, as in checkpoints whose embedding is padded beyond the tokenizer (Qwen2: 151,936 rows for
151,665 ids). test/e2e/kv_generation_test.cpp checks that generation never chooses them.
Byte-level BPE numbers each merge's result after the 257 base ids in merge order, so keeping the
ids below 1,000 keeps the base bytes and the first 743 merges, and every kept merge's parts.
    python3 test/models/demo/make_small_tokenizer.py
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
KEEP = 1000

with open(os.path.join(HERE, "tokenizer.json"), encoding="utf-8") as f:
    tokenizer = json.load(f)
model = tokenizer["model"]
vocab = {token: i for token, i in model["vocab"].items() if i < KEEP}
merges = [m for m in model["merges"] if "".join(m) in vocab]
for left, right in merges:
    assert left in vocab and right in vocab, (left, right)
assert all(t["id"] < KEEP for t in tokenizer["added_tokens"])
model["vocab"] = vocab
model["merges"] = merges
with open(os.path.join(HERE, "tokenizer_1000.json"), "w", encoding="utf-8") as f:
    json.dump(tokenizer, f, ensure_ascii=False, separators=(",", ":"))
    f.write("\n")
print(f"tokenizer_1000.json: {len(vocab)} ids, {len(merges)} merges")
