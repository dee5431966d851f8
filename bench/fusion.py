#!/usr/bin/env python3
"""Fusion benchmark: kernels executed and run time at --opt-level 0 and 1, side by side in one run.

For each model (default: the tiny Llama, GPT-2 and BERT of test/models), compiles the engine
llmc builds by default at both levels and reports
  - steps (kernels executed per run) and, for decoders, kernels per decoder layer;
  - the latency of one full-sequence `llmc run` (batch 1, --seq tokens) at both levels and
    ONNX Runtime's on the same model and inputs (1 thread each, rounds alternated);
  - for decoders, time to first token and decode tokens/s over the KV cache (`llmc bench`).
Figures are medians of per-round medians with [min, max] over the rounds. Not a test: no
time is asserted. Run:
    .venv/bin/python bench/fusion.py --llmc build/tools/llmc/llmc [--model NAME] [--rounds 5]
"""
import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_ort import llmc_kv_bench, llmc_median_ms as llmc_ms, ort_median_ms as ort_ms, ort_session  # noqa: E402

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models")
LAYER = re.compile(r"(?:layers|layer|h|blocks)[./_](\d+)[./]")


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def kernels(llmc, engine):
    info = json.loads(run([llmc, "inspect", engine, "--json"]))
    per_layer = collections.Counter()
    for step in info["steps"]:
        m = LAYER.search(step.get("node", ""))
        if m:
            per_layer[int(m.group(1))] += 1
    return info, len(info["steps"]), per_layer


def decode(llmc, engine, context, new_tokens, runs):
    ttft, tokens_per_s = llmc_kv_bench(llmc, engine, context, new_tokens, runs)
    return [*ttft, *tokens_per_s]


def fmt(values, unit="ms"):
    return f"{statistics.median(values):.3f} [{min(values):.3f}, {max(values):.3f}] {unit}"


def inputs_for(session, engine_info, seq, vocab, tmp, name):
    """Random token ids (batch 1, `seq` tokens), a mask of ones, zero token types."""
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in session.get_inputs():
        if "mask" in inp.name:
            feeds[inp.name] = np.ones((1, seq), np.int64)
        elif "type" in inp.name:
            feeds[inp.name] = np.zeros((1, seq), np.int64)
        else:
            feeds[inp.name] = rng.integers(0, vocab, size=(1, seq), dtype=np.int64)
    files = {}
    wanted = {t["name"] for t in engine_info["inputs"]}
    for key, value in feeds.items():
        if key in wanted:
            files[key] = os.path.join(tmp, f"{name}.{key}.npy")
            np.save(files[key], value)
    return feeds, files


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--model", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seq", type=int, default=32)
    args = parser.parse_args()
    names = args.model or ["llama_tiny", "gpt2_tiny", "bert_tiny"]
    print(f"onnxruntime {ort.__version__}, 1 thread each; batch 1, {args.seq} tokens; medians of "
          f"per-round medians [min, max] over {args.rounds} rounds of {args.repeat} runs\n")
    rows = []
    with tempfile.TemporaryDirectory(prefix="llmc-fusion-") as tmp:
        for name in names:
            model_dir = os.path.join(MODELS_DIR, name)
            manifest = json.load(open(os.path.join(model_dir, "manifest.json")))
            model = os.path.join(model_dir, manifest.get("model", "model.onnx"))
            flags = manifest.get("compile_flags", [])
            engines, infos, counts = {}, {}, {}
            for level in ("0", "1"):
                engines[level] = os.path.join(tmp, f"{name}.o{level}.engine")
                run([args.llmc, "compile", model, "-o", engines[level], "--opt-level", level] + flags)
                infos[level], total, per_layer = kernels(args.llmc, engines[level])
                counts[level] = (total, per_layer)
            session = ort_session(model)
            vocab = (infos["1"].get("llm") or {}).get("vocab_size", 0) or 512
            feeds, files = inputs_for(session, infos["1"], args.seq, vocab, tmp, name)
            for level in ("0", "1"):
                llmc_ms(args.llmc, engines[level], files, 3)  # warm up
            ort_ms(session, feeds, 3)
            times = {"0": [], "1": [], "ort": []}
            for _ in range(args.rounds):
                for level in ("0", "1"):
                    times[level].append(llmc_ms(args.llmc, engines[level], files, args.repeat))
                times["ort"].append(ort_ms(session, feeds, args.repeat))
            row = {"model": name, "counts": counts, "times": times}
            if infos["1"].get("llm"):
                row["decode"] = {level: [] for level in ("0", "1")}
                for _ in range(max(1, args.rounds // 2)):
                    for level in ("0", "1"):
                        row["decode"][level].append(decode(args.llmc, engines[level], args.seq, 32, 5))
            rows.append(row)
            print(f"done {name}", file=sys.stderr, flush=True)

    print("| model | level | steps | kernels per layer | full-sequence run | vs level 0 | vs ONNX Runtime |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        ort_median = statistics.median(row["times"]["ort"])
        base = statistics.median(row["times"]["0"])
        for level in ("0", "1"):
            total, per_layer = row["counts"][level]
            layers = ", ".join(str(per_layer[k]) for k in sorted(per_layer)) or "-"
            median = statistics.median(row["times"][level])
            print(f"| {row['model']} | {level} | {total} | {layers} | {fmt(row['times'][level])} | "
                  f"{base / median:.2f}x | {median / ort_median:.2f} |")
        print(f"| {row['model']} | ONNX Runtime | | | {fmt(row['times']['ort'])} | | 1.00 |")
    decoders = [row for row in rows if "decode" in row]
    if decoders:
        print("\n| model | level | time to first token | decode tokens/s | decode vs level 0 |")
        print("|---|---|---|---|---|")
        for row in decoders:
            base = statistics.median(r[3] for r in row["decode"]["0"])
            for level in ("0", "1"):
                ttft = [r[0] for r in row["decode"][level]]
                tps = [r[3] for r in row["decode"][level]]
                print(f"| {row['model']} | {level} | {fmt(ttft)} | {fmt(tps, 'tok/s')} | "
                      f"{statistics.median(tps) / base:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
