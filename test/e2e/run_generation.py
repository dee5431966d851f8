#!/usr/bin/env python3
"""Greedy and beam-search generation through `llmc generate` against transformers' generate().

For each test/models/<name>/generation.json (made by test/models/make_generation_refs.py):
compile the model, generate 32 tokens greedily after each stored prompt (and beam search), and
require the exact token ids transformers produced: over the paged KV cache and by full
recomputation (--no-kv-cache) when the model's manifest says llmc recognizes it as a decoder
(`expect_llm`), by full recomputation otherwise. Recognition other than the manifest's fails.
Also checks the generator's errors: a prompt longer than the context, a token id outside the
vocabulary, an unsupported option.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--model", action="append", default=[])
    args = parser.parse_args()
    llmc = os.path.abspath(args.llmc)
    names = args.model or sorted(d for d in os.listdir(MODELS_DIR)
                                 if os.path.exists(os.path.join(MODELS_DIR, d, "generation.json")))
    passed = failed = 0

    def report(ok, label, detail=""):
        nonlocal passed, failed
        passed += ok
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {label}" + (f": {detail}" if detail else ""), flush=True)

    with tempfile.TemporaryDirectory(prefix="llmc-gen-") as tmp:
        for name in names:
            model_dir = os.path.join(MODELS_DIR, name)
            with open(os.path.join(model_dir, "generation.json")) as f:
                refs = json.load(f)
            engine = os.path.join(tmp, name + ".engine")
            with open(os.path.join(model_dir, "manifest.json")) as f:
                manifest = json.load(f)
            # The manifest's compile_flags go with the compile (an export's true sequence bound).
            proc = run([llmc, "compile", os.path.join(model_dir, "model.onnx"), "-o", engine,
                        *manifest.get("compile_flags", [])])
            if proc.returncode != 0:
                report(False, f"{name}/compile", proc.stderr.strip())
                continue
            # Over the KV cache when llmc recognizes the model, then by full recomputation. The
            # manifest says whether it must: a decoder that stopped being recognized would
            # otherwise pass by recomputation alone.
            expect_llm = manifest.get("expect_llm")
            is_llm = json.loads(run([llmc, "inspect", engine, "--json"]).stdout).get("llm") is not None
            if not isinstance(expect_llm, bool):
                report(False, f"{name}/recognition", "the manifest has no boolean expect_llm")
            else:
                report(is_llm == expect_llm, f"{name}/recognition",
                       ("recognized" if is_llm else "not recognized") + " as a decoder language model"
                       + ("" if is_llm == expect_llm else f", but the manifest's expect_llm is {str(expect_llm).lower()}: "
                          + proc.stderr.strip()))
            modes = [("kv-cache", []), ("full", ["--no-kv-cache"])] if is_llm else [("full", [])]
            for mode, mode_flags in modes:
                for case in refs["greedy"]:
                    prompt, want = case["prompt"], case["new_tokens"]
                    proc = run([llmc, "generate", engine, "--prompt-ids", ",".join(map(str, prompt)),
                                "--max-new-tokens", str(len(want)), "--print-ids", *mode_flags])
                    label = f"{name}/{mode}/greedy prompt of {len(prompt)}"
                    if proc.returncode != 0:
                        report(False, label, proc.stderr.strip())
                        continue
                    got = [int(t) for t in proc.stdout.split()]
                    same = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
                    ok = got == want
                    report(ok, label, f"{len(got)} tokens equal the reference's" if ok else
                           f"first difference at new token {same}: got {got[same:same + 4]}, want {want[same:same + 4]}")
                for case in refs.get("beam", []):
                    prompt, want = case["prompt"], case["new_tokens"]
                    proc = run([llmc, "generate", engine, "--prompt-ids", ",".join(map(str, prompt)),
                                "--max-new-tokens", str(len(want)), "--beam", str(case["num_beams"]),
                                "--length-penalty", str(case["length_penalty"]), "--print-ids", *mode_flags])
                    label = f"{name}/{mode}/beam {case['num_beams']} prompt of {len(prompt)}"
                    if proc.returncode != 0:
                        report(False, label, proc.stderr.strip())
                        continue
                    got = [int(t) for t in proc.stdout.split()]
                    report(got == want, label, f"best of {case['num_beams']} beams equals the reference's" if got == want
                           else f"got {got}, want {want}")
        # Errors: each is one line on stderr and exit code 2.
        name = names[0] if names else None
        if name:
            model = os.path.join(MODELS_DIR, name, "model.onnx")
            short = os.path.join(tmp, "short.engine")
            seq_symbol = json.load(open(os.path.join(MODELS_DIR, name, "generation.json"))).get("seq_symbol", "seq")
            proc = run([llmc, "compile", model, "-o", short, "--dim", f"{seq_symbol}=1:16"])
            if proc.returncode == 0:
                cases = [
                    ("prompt longer than the context", ["--prompt-ids", ",".join(["5"] * 10), "--max-new-tokens", "10"],
                     "exceeds the engine's context of 16 tokens"),
                    ("token id outside the vocabulary", ["--prompt-ids", "5,999999", "--max-new-tokens", "1"],
                     "outside the vocabulary"),
                    ("zero beams", ["--prompt-ids", "5", "--beam", "0"], "--beam takes an integer in [1, 2147483647], got '0'"),
                    ("bad sampling option", ["--prompt-ids", "5", "--max-new-tokens", "1", "--top-p", "0"], "top_p"),
                ]
                for label, extra, message in cases:
                    proc = run([llmc, "generate", short, *extra])
                    lines = proc.stderr.strip().splitlines()
                    ok = proc.returncode == 2 and len(lines) == 1 and message in proc.stderr
                    report(ok, f"{name}/error: {label}", proc.stderr.strip())
            else:
                report(False, f"{name}/compile --dim", proc.stderr.strip())

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
