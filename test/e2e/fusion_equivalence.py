#!/usr/bin/env python3
"""Fusion equivalence: every model in test/models compiled with the fusion passes and at
--opt-level 0 gives the same outputs on random inputs (`llmc verify`), once with every pass and
once per pass alone (all the others disabled, but for the passes whose output it matches), as
the graph and, for decoders, as the language model over the KV cache.

A pass-alone configuration counts only where the pass fired (`llmc compile --report` with the
same flags, whose engine `llmc verify --engine` then checks): elsewhere it is reported as not
exercised and not verified. Exit 1 when any
comparison is beyond tolerance, or when some pass fires alone on no model (its equivalence
would then never have been checked)."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")
PASSES = ["fuse-norms", "fuse-matmul", "fuse-gated-mlp", "fuse-rope", "fuse-attention", "fuse-qkv",
          "fuse-elementwise", "share-shapes"]
# Passes that match what other passes produce, so never fire without them: fuse-gated-mlp pairs
# llm.fused_matmul ops; fuse-qkv packs the products (llm.fused_matmul) of an llm.sdpa or
# llm.attention whose q and k may go through llm.rope.
PREREQUISITES = {"fuse-gated-mlp": ["fuse-matmul"], "fuse-qkv": ["fuse-matmul", "fuse-attention", "fuse-rope"]}
# `llmc compile --report`: one line per (pass, pattern) that fired, with its count.
# The context of the engines that check one pass alone over the KV cache (they are verified up
# to 64 tokens; every test model's context is at least that).
ALONE_CONTEXT = 64
# Under sanitizers every pass together is verified over the KV cache up to this many tokens (the
# Release run: the decoder's whole context, up to 2,048 decode steps that ASan makes the longest
# part of this test).
SANITIZED_LENGTH = 256
REPORT_LINE = re.compile(r"^  (\S+)\s+(\S+)\s+x(\d+)$")


def fired_passes(llmc: str, model: str, flags: list[str], engine: str) -> tuple[set[str] | None, str]:
    """The fusion passes that fired compiling `model` with `flags` (None and the log when the
    compile failed)."""
    result = subprocess.run([llmc, "compile", model, "-o", engine, "--report"] + flags,
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        return None, f"exit {result.returncode}\n{result.stdout}{result.stderr}"
    fired = set()
    for line in result.stdout.splitlines():
        match = REPORT_LINE.match(line)
        if match and match.group(1) in PASSES and int(match.group(3)) > 0:
            fired.add(match.group(1))
    return fired, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    parser.add_argument("--sanitized", action="store_true",
                        help="under sanitizers: every pass together on every model (decoders over the "
                             f"KV cache up to {SANITIZED_LENGTH} tokens), each pass alone only until it "
                             "has been checked once in each mode (the Release run checks each pass "
                             "alone on every model, and every pass together over the whole context)")
    args = parser.parse_args()
    models = args.model or sorted(
        d for d in os.listdir(MODELS_DIR) if os.path.isfile(os.path.join(MODELS_DIR, d, "manifest.json")))
    failures, checks, passed, not_exercised = [], 0, 0, 0
    exercised = {p: [] for p in PASSES}  # pass -> model/mode where it fired alone
    with tempfile.TemporaryDirectory(prefix="llmc-fusion-") as tmp:
        engine = os.path.join(tmp, "report.engine")
        for name in models:
            with open(os.path.join(MODELS_DIR, name, "manifest.json")) as f:
                manifest = json.load(f)
            model = os.path.join(MODELS_DIR, name, manifest.get("model", "model.onnx"))
            common = manifest.get("compile_flags", [])
            modes = [("graph", ["--as-graph"] + manifest.get("as_graph_flags", [])), ("default", [])]
            # The 9 MB demo model: every pass together only (its compiles dominate the run time).
            configs = [("all", None, [])]
            if name != "demo":
                for p in PASSES:
                    kept = [p] + PREREQUISITES.get(p, [])
                    label = p if len(kept) == 1 else f"{p}(+{','.join(kept[1:])})"
                    configs.append((label, p, [flag for other in PASSES if other not in kept
                                               for flag in ("--disable-pass", other)]))
            for mode, mode_flags in modes:
                for config, alone, config_flags in configs:
                    flags = common + mode_flags + config_flags
                    label = f"{name}/{mode}/{config}"
                    if alone and args.sanitized and any(e.endswith(f"/{mode}") for e in exercised[alone]):
                        continue  # checked alone in this mode already (see --sanitized)
                    if mode == "default" and alone:
                        # Each pass alone is verified up to 64 tokens (below), so its engine needs
                        # no more context than that: bounding it keeps the mask proof (evaluated at
                        # the whole context, 2048 by default) from being most of this test's time.
                        # Every pass together keeps the default context.
                        flags = flags + ["--max-context", str(ALONE_CONTEXT)]
                    # Under sanitizers a decoder's every-pass engine is verified up to
                    # SANITIZED_LENGTH tokens (or its context, if shorter).
                    bounded = (args.sanitized and not alone and mode == "default"
                               and manifest.get("expect_llm"))
                    if alone or bounded:
                        fired, log = fired_passes(args.llmc, model, flags, engine)
                        if fired is None:
                            checks += 1
                            failures.append(f"{label}: llmc compile --report failed: {log}")
                            print(f"FAIL {label}: compile --report")
                            continue
                        if alone and alone not in fired:
                            not_exercised += 1
                            print(f"--   {label}: not exercised ({alone} did not fire)")
                            continue
                        if alone:
                            exercised[alone].append(f"{name}/{mode}")
                    command = [args.llmc, "verify", model] + flags + ["--seed", "7"]
                    if mode == "default" and manifest.get("expect_llm") and alone:
                        # Every pass together is verified over the decoder's whole context (llmc
                        # verify's default); each pass alone up to 64 tokens, which keeps the ASan
                        # run short.
                        command += ["--length", str(ALONE_CONTEXT)]
                    if bounded:
                        info = json.loads(subprocess.run([args.llmc, "inspect", engine, "--json"],
                                                         capture_output=True, text=True, check=True).stdout)
                        context = (info.get("llm") or {}).get("max_context", SANITIZED_LENGTH)
                        command += ["--length", str(min(SANITIZED_LENGTH, context))]
                    if alone or bounded:  # the engine compiled above: verify compiles only the reference
                        command += ["--engine", engine]
                    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
                    checks += 1
                    if result.returncode != 0:
                        failures.append(f"{label}: exit {result.returncode}\n{result.stdout}{result.stderr}")
                        print(f"FAIL {label}")
                    else:
                        passed += 1
                        worst = [line for line in result.stdout.splitlines()
                                 if line.startswith(("steps:", "reference:"))]
                        print(f"ok   {label}: {worst[0] if worst else ''}")
    if not args.model:  # a subset of the models need not exercise every pass
        for p in PASSES:
            if exercised[p]:
                print(f"{p}: fired alone on {len(exercised[p])}: {', '.join(exercised[p])}")
            else:
                failures.append(f"{p} fired alone on no model: its equivalence was never checked")
    for failure in failures:
        print(failure, file=sys.stderr)
    print(f"{passed} of {checks} equivalence checks passed, "
          f"{not_exercised} pass-alone configurations not exercised")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
