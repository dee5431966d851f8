#!/usr/bin/env python3
"""CPU decode speed of the weight-quantized engines against float32 (docs/quantization.md).

Generates a Llama-style model of about 110 M parameters with random weights
(bench/gpu/make_llama.py --size 100m; not committed), compiles it float32, `--quantize int8`
`--quantize int4` (group 128) and `--quantize w8a8` (calibrated on random token ids), and runs `llmc bench --kv-only` on each in alternated rounds
(this VM's speed drifts; alternating spreads the drift over all modes). Prints decode tokens/s
and time to first token as median [min, max] over the rounds, and each mode's speed-up over
float32. Decode here reads every weight once per token: it is bound by memory, where the
quantized formats read 4x (int8) and about 7x (int4) fewer bytes.

    .venv/bin/python bench/quant.py --llmc build/tools/llmc/llmc [--rounds 5]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_ort import llmc_kv_bench  # noqa: E402
from peers import cpu_line  # noqa: E402
CALIB_DIR = "@calib"  # replaced by a directory of random input_ids samples
MODES = [("float32", []), ("int8", ["--quantize", "int8"]), ("int4 g128", ["--quantize", "int4", "--quant-group", "128"]),
         ("w8a8", ["--quantize", "w8a8", "--calib-dir", CALIB_DIR])]


def bench_modes(args, modes, baseline="float32"):
    """Compiles the random 110M Llama in each of `modes` (name, compile flags; CALIB_DIR is
    replaced by random input_ids samples), runs `llmc bench --kv-only` on each in alternated
    rounds and prints decode tokens/s, the engine size (what one decode step reads), and
    the speed-up over `baseline`."""
    if args.only:
        modes = [m for m in modes if m[0] in args.only or m[0] == baseline]
        if len(modes) != len(set(args.only) | {baseline}):
            sys.exit(f"--only: unknown mode among {args.only}")
    print(cpu_line(), f"threads: {args.threads}", flush=True)
    with tempfile.TemporaryDirectory(prefix="llmc-quant-bench-") as tmp:
        subprocess.run([sys.executable, os.path.join(HERE, "gpu", "make_llama.py"), "--out", tmp, "--size", "100m"],
                       check=True)
        calib = os.path.join(tmp, "calib")
        os.makedirs(calib)
        rng = np.random.default_rng(7)
        for i in range(4):  # random tokens: this model's weights are random too
            np.save(os.path.join(calib, f"{i}.npy"), rng.integers(0, 16000, size=(1, 64), dtype=np.int64))
        engines = {}
        for name, flags in modes:
            flags = [calib if f == CALIB_DIR else f for f in flags]
            engine = os.path.join(tmp, name.replace(" ", "_").replace(":", "_") + ".engine")
            subprocess.run([args.llmc, "compile", os.path.join(tmp, "model.onnx"), "-o", engine, *flags],
                           check=True, capture_output=True)
            engines[name] = engine
            print(f"{name:20} engine {os.path.getsize(engine) / 2**20:8.1f} MiB", flush=True)
        decode = {name: [] for name, _ in modes}
        ttft = {name: [] for name, _ in modes}
        for _ in range(args.rounds):
            for name, _ in modes:
                first, tokens_per_s = llmc_kv_bench(args.llmc, engines[name], args.context, args.new_tokens, 3,
                                                    threads=args.threads)
                ttft[name].append(first[0])
                decode[name].append(tokens_per_s[0])
        base = statistics.median(decode[baseline])
        print(f"\n{'mode':20} {'MiB':>7} {'decode tok/s median [min, max]':>34} {'vs ' + baseline:>12} "
              f"{'TTFT ms (' + str(args.context) + ' tokens)':>24}")
        for name, _ in modes:
            d, t = decode[name], ttft[name]
            print(f"{name:20} {os.path.getsize(engines[name]) / 2**20:7.1f} {statistics.median(d):14.1f} "
                  f"[{min(d):7.1f}, {max(d):7.1f}] {statistics.median(d) / base:11.2f}x "
                  f"{statistics.median(t):12.1f} [{min(t):.1f}, {max(t):.1f}]")
    return 0


def arguments(description):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", nargs="+", metavar="MODE",
                        help="run these modes (by name) and the baseline only")
    return parser.parse_args()


def main():
    return bench_modes(arguments(__doc__.splitlines()[0]), MODES)


if __name__ == "__main__":
    sys.exit(main())
