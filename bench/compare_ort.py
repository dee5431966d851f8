#!/usr/bin/env python3
"""Side-by-side latency of llmc and ONNX Runtime on the same models, in one run.

For each model in test/models/ (or --model NAME), compiles it with llmc, then alternates
rounds of `llmc run --repeat R` and R ONNX Runtime runs on the same inputs, and reports
medians with their spread and the ratio llmc / ORT. Both sides use one thread (ORT's
intra_op_num_threads=1; llmc's --threads 1). Not a test: no time
is asserted. Run:
    .venv/bin/python bench/compare_ort.py --llmc build/tools/llmc/llmc [--model NAME] [--rounds 5]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "models")


def llmc_median_ms(llmc, engine, inputs, repeat, threads=1):
    argv = [llmc, "run", engine, "--repeat", str(repeat), "--threads", str(threads)]
    for name, path in inputs.items():
        argv += ["--input", f"{name}={path}"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    m = re.search(r"median ([0-9.]+) ms", out)
    return float(m.group(1))


def llmc_kv_bench(llmc, engine, context, new_tokens, repeat, threads=1, extra=()):
    """`llmc bench --kv-only` on `threads` threads (and `extra` options): time to first token (ms)
    and decode tokens/s, each as (median, min, max) over `repeat` runs."""
    out = subprocess.run([llmc, "bench", engine, "--kv-only", "--context", str(context), "--new-tokens",
                          str(new_tokens), "--repeat", str(repeat), "--threads", str(threads), *extra],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"paged KV cache\s+([0-9.]+) \[\s*([0-9.]+),\s*([0-9.]+)\]\s+([0-9.]+) \[\s*([0-9.]+),\s*([0-9.]+)\]",
                  out)
    values = [float(g) for g in m.groups()]
    return tuple(values[:3]), tuple(values[3:])


def ort_median_ms(session, feeds, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def ort_session(model, threads=1):
    """ONNX Runtime on `threads` intra-op threads (one by default, as llmc runs here with
    --threads 1)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def spread(values):
    return f"{statistics.median(values):8.3f} ms [{min(values):.3f}, {max(values):.3f}]"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--model", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    names = args.model or sorted(d for d in os.listdir(MODELS_DIR)
                                 if os.path.exists(os.path.join(MODELS_DIR, d, "manifest.json")))
    print(f"onnxruntime {ort.__version__}, 1 thread each; medians of per-round medians "
          f"[min, max over {args.rounds} rounds of {args.repeat} runs]")
    print(f"{'model / input set':28} {'llmc':>30} {'onnxruntime':>30} {'llmc/ORT':>9}")
    with tempfile.TemporaryDirectory(prefix="llmc-bench-") as tmp:
        for name in names:
            model_dir = os.path.join(MODELS_DIR, name)
            manifest = json.load(open(os.path.join(model_dir, "manifest.json")))
            model = os.path.join(model_dir, manifest.get("model", "model.onnx"))
            engine = os.path.join(tmp, name + ".engine")
            subprocess.run([args.llmc, "compile", model, "-o", engine], check=True, capture_output=True)
            session = ort_session(model)
            for input_set in manifest["input_sets"]:
                inputs = {k: os.path.join(model_dir, v) for k, v in input_set["inputs"].items()}
                feeds = {k: np.load(v) for k, v in inputs.items()}
                ort_median_ms(session, feeds, 3)  # warm up both
                llmc_median_ms(args.llmc, engine, inputs, 3)
                ours, theirs = [], []
                for _ in range(args.rounds):
                    ours.append(llmc_median_ms(args.llmc, engine, inputs, args.repeat))
                    theirs.append(ort_median_ms(session, feeds, args.repeat))
                ratio = statistics.median(ours) / statistics.median(theirs)
                print(f"{name + ' / ' + input_set['name']:28} {spread(ours):>30} {spread(theirs):>30} {ratio:9.2f}",
                      flush=True)


if __name__ == "__main__":
    sys.exit(main())
