#!/usr/bin/env python3
"""A model folder exactly as `optimum-cli export onnx --task text-generation-with-past` wrote it
(test/models/optimum_llama, made by make_optimum_folder.py): `llmc compile DIR` must take the
model, tokenizer and configs from it, recognize the decoder onto the KV cache, and
`llmc generate ENGINE --prompt TEXT` must print the prompt followed by the text transformers'
greedy generation wrote (expected.json), for every prompt; full recomputation
(--no-kv-cache) must write the same. The folder's files are then made inconsistent one at a time
(a tokenizer larger than the model's vocabulary, an EOS id outside it, a broken config): each is
an error or warning naming the file.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "optimum_llama")


def run(*args):
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    args = parser.parse_args()
    expected = json.load(open(os.path.join(FOLDER, "expected.json")))
    failures = []
    with tempfile.TemporaryDirectory(prefix="llmc-optimum-") as tmp:
        engine = os.path.join(tmp, "model.engine")
        code, out, err = run(args.llmc, "compile", FOLDER, "-o", engine)
        if code != 0:
            sys.exit(f"FAIL: llmc compile {FOLDER}: exit {code}\n{err}")
        print(out.strip())
        for needed in ("decoder language model: 2 attention layers", "tokenizer.json",
                       "tokenizer_config.json", "generation_config.json"):
            if needed not in out:
                failures.append(f"compile output lacks {needed!r}:\n{out}")
        compared = 0
        for entry in expected["greedy"]:
            want = entry["prompt"] + entry["text"] + "\n"
            for extra in ([], ["--no-kv-cache"]):
                code, out, err = run(args.llmc, "generate", engine, "--prompt", entry["prompt"],
                                     "--max-new-tokens", str(entry["max_new_tokens"]), *extra)
                label = f"generate {entry['prompt']!r} {' '.join(extra)}"
                if code != 0:
                    failures.append(f"{label}: exit {code}: {err}")
                elif out != want:
                    failures.append(f"{label}:\n  llmc:         {out!r}\n  transformers: {want!r}")
                else:
                    compared += 1
                    print(f"ok   {label}: {entry['text']!r}")
                if "paged KV cache" not in err and not extra:
                    failures.append(f"{label}: not over the KV cache: {err}")

        # Inconsistent folders: one broken file each, named in the message.
        def broken(index, name, edit):
            folder = os.path.join(tmp, f"broken-{index}")
            shutil.copytree(FOLDER, folder)
            path = os.path.join(folder, name)
            edit(path)
            return folder

        def set_json(key, value):
            def edit(path):
                data = json.load(open(path))
                data[key] = value
                json.dump(data, open(path, "w"))
            return edit

        cases = [
            ("generation_config.json", set_json("eos_token_id", 5000), 2,
             "generation_config.json"),
            ("config.json", lambda p: open(p, "w").write("{not json"), 2, "config.json"),
            ("config.json", set_json("vocab_size", 4096), 0, "config.json"),
        ]
        for index, (name, edit, want_code, message) in enumerate(cases):
            folder = broken(index, name, edit)
            code, out, err = run(args.llmc, "compile", folder, "-o", os.path.join(tmp, "b.engine"))
            ok = code == want_code and message in err and (want_code != 0 or "warning" in err)
            print(f"{'ok  ' if ok else 'FAIL'} {name} made inconsistent: exit {code}: "
                  f"{err.strip().splitlines()[-1] if err.strip() else ''}")
            if not ok:
                failures.append(f"{name}: want exit {want_code} naming {message!r}, got {code}: {err}")
    if compared != 2 * len(expected["greedy"]):
        failures.append(f"compared {compared} generations of {2 * len(expected['greedy'])}")
    if failures:
        print("\n".join(f"FAIL: {f}" for f in failures))
        sys.exit(1)
    print(f"optimum folder: {compared} generations equal transformers' greedy text")


if __name__ == "__main__":
    main()
