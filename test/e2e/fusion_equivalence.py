#!/usr/bin/env python3
"""Fusion equivalence: every model in test/models compiled with the fusion passes and at
--opt-level 0 gives the same outputs on random inputs (`llmc verify`), once with every pass and
once per pass alone (all the others disabled), as the graph and, for decoders, as the language
model over the KV cache. Exit 1 when any comparison is beyond tolerance."""
import argparse
import json
import os
import subprocess
import sys

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")
PASSES = ["fuse-norms", "fuse-matmul", "fuse-gated-mlp", "fuse-rope", "fuse-attention", "fuse-qkv",
          "fuse-elementwise"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    args = parser.parse_args()
    models = args.model or sorted(
        d for d in os.listdir(MODELS_DIR) if os.path.isfile(os.path.join(MODELS_DIR, d, "manifest.json")))
    failures, checks = [], 0
    for name in models:
        with open(os.path.join(MODELS_DIR, name, "manifest.json")) as f:
            manifest = json.load(f)
        model = os.path.join(MODELS_DIR, name, manifest.get("model", "model.onnx"))
        common = manifest.get("compile_flags", [])
        modes = [("graph", ["--as-graph"] + manifest.get("as_graph_flags", [])), ("default", [])]
        # The 9 MB demo model: every pass together only (its compiles dominate the run time).
        configs = [("all", [])] + ([] if name == "demo" else [
            (p, [flag for other in PASSES if other != p for flag in ("--disable-pass", other)]) for p in PASSES])
        for mode, mode_flags in modes:
            for config, config_flags in configs:
                command = [args.llmc, "verify", model] + common + mode_flags + config_flags + ["--seed", "7"]
                result = subprocess.run(command, capture_output=True, text=True, timeout=600)
                checks += 1
                label = f"{name}/{mode}/{config}"
                if result.returncode != 0:
                    failures.append(f"{label}: exit {result.returncode}\n{result.stdout}{result.stderr}")
                    print(f"FAIL {label}")
                else:
                    worst = [line for line in result.stdout.splitlines() if line.startswith("steps:")]
                    print(f"ok   {label}: {worst[0] if worst else ''}")
    for failure in failures:
        print(failure, file=sys.stderr)
    print(f"{checks - len(failures)} of {checks} equivalence checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
