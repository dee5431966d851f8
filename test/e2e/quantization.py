#!/usr/bin/env python3
"""Weight quantization end to end on the demo model (a real trained model, test/models/demo).

Compiles the demo float32 and with `--quantize int8`, `int4` (group 128) and `int4_zp` (group
64); checks the engine sizes against the float engine (int8 <= 0.30x, int4 g128 <= 0.17x) and
the accuracy `llmc eval` reports on the chapters of the King James Bible that training held
out (int8 top-1 agreement >= 99%, int4 g128 perplexity increase <= 5%); checks that a stripped
quantized engine refits byte-identically from the model's initializers; and that in a model
with a product whose K is not a multiple of 32, that product falls back to float32 with a
warning naming its node while the others are quantized; calibration (AWQ against round to
nearest, SmoothQuant's smoothing against none, the cached statistics); and --max-ppl-increase. Prints the
table docs/quantization.md records.
"""
import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "models")
sys.path.insert(0, os.path.join(MODELS, "demo"))
from kjv import is_held_out, read_chapters  # noqa: E402

sys.path.insert(0, HERE)
from refit_test import write_safetensors  # noqa: E402

TOKENIZER = os.path.join(MODELS, "demo", "tokenizer.json")
CALIBRATION = "@calibration"  # replaced by the calibration file's path
MODES = [  # name, flags, max size ratio, check
    ("float32", [], None, None),
    ("int8", ["--quantize", "int8"], 0.30, ("top1_agreement", ">=", 0.99)),
    ("int4 g128", ["--quantize", "int4", "--quant-group", "128"], 0.17, ("perplexity_increase", "<=", 0.05)),
    # AWQ against round to nearest with the LM head and embedding in int8, as AWQ keeps them
    # out of 4 bits (with them in int4 their error dominates and the two are within noise).
    ("int4 g128 h8", ["--quantize", "int4", "--quant-group", "128", "--quant-head", "int8"], None, None),
    ("int4 g128 h8 awq", ["--quantize", "int4", "--quant-group", "128", "--quant-head", "int8", "--awq",
                          "--calib", CALIBRATION, "--tokenizer", TOKENIZER, "--verbose"], None,
     ("perplexity_increase", "<=", 0.05)),
    ("int4_zp g64", ["--quantize", "int4_zp", "--quant-group", "64"], None, None),
    # W8A8 with SmoothQuant's smoothing (alpha 0.5) against none (alpha 0).
    ("w8a8 unsmoothed", ["--quantize", "w8a8", "--smooth-alpha", "0", "--calib", CALIBRATION,
                         "--tokenizer", TOKENIZER], 0.30, None),
    ("w8a8", ["--quantize", "w8a8", "--calib", CALIBRATION, "--tokenizer", TOKENIZER], 0.30,
     ("top1_agreement", ">=", 0.97)),
    # SmoothQuant with each channel's 99th percentile of |x| (over the calibration's row sample)
    # in place of its absmax.
    ("w8a8 p99", ["--quantize", "w8a8", "--smooth-percentile", "0.99", "--calib", CALIBRATION,
                  "--tokenizer", TOKENIZER], 0.30, ("top1_agreement", ">=", 0.97)),
    ("fp8", ["--quantize", "fp8"], 0.30, ("top1_agreement", ">=", 0.93)),
]


def run(command, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, **kwargs)


def write_initializers(model_path, path):
    """The model's float32 initializers as safetensors (what `llmc refit` reads)."""
    model = onnx.load(model_path)
    arrays = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    write_safetensors(path, {name: a for name, a in arrays.items() if a.dtype == np.float32})


def write_calibration(directory, chapters, sanitized):
    """Calibration prompts into DIRECTORY/calibration.txt: the 32 chapters among the first 40
    that training saw, one per line; under sanitizers the first 4 (a calibrated compile of the
    demo took about 50 s there over 32, nearly all of it the calibration runs). Returns the path."""
    path = os.path.join(directory, "calibration.txt")
    seen = [c.replace("\n", " ") for i, c in enumerate(chapters[:40]) if not is_held_out(i)]
    with open(path, "w") as f:
        f.write("\n".join(seen[:4] if sanitized else seen)[:200000])
    return path


def write_bert_files(directory):
    """For test/models/bert_tiny (vocabulary 512): a word-level tokenizer of a few English words
    (CLS/SEP around each sentence), four sentences to evaluate (and an empty line, skipped) and
    five others to calibrate on. Returns the three paths."""
    path = os.path.join(directory, "bert_words.json")
    sentences = os.path.join(directory, "sentences.txt")
    with open(sentences, "w") as f:
        f.write("the cat sat on the mat\na big dog ran in the park\nthe small red cat\n\na blue dog sat\n")
    calibration = os.path.join(directory, "bert_calibration.txt")
    with open(calibration, "w") as f:
        f.write("a red dog sat on a mat\nthe big blue cat ran\nthe dog sat in a small park\n"
                "a cat ran on the mat\nthe red mat\n")
    words = ["the", "a", "cat", "dog", "sat", "ran", "on", "in", "mat", "park", "big", "small", "red", "blue"]
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{w: 10 + 7 * i for i, w in enumerate(words)}}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                           "pair": [], "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                                          "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
        "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}}
    with open(path, "w") as f:
        json.dump(tokenizer, f)
    return path, sentences, calibration


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--windows", type=int, default=0, help="eval windows of 128 tokens (0: all)")
    parser.add_argument("--sanitized", action="store_true",
                        help="an ASan/UBSan build: run the paths (int8, int4, w8a8, fp8, refit, fallback) on 4 "
                             "windows without the accuracy thresholds, which the Release pass checks")
    args = parser.parse_args()
    modes = MODES
    if args.sanitized:
        args.windows = 4
        modes = [(name, flags, ratio, None) for name, flags, ratio, _ in MODES
                 if name in ("float32", "int8", "int4 g128", "w8a8", "fp8")]
    model = os.path.join(MODELS, "demo", "model.onnx")
    failures = []

    def check(ok, label):
        print(f"{'PASS' if ok else 'FAIL'} {label}", flush=True)
        if not ok:
            failures.append(label)

    with tempfile.TemporaryDirectory(prefix="llmc-quant-") as tmp:
        chapters = read_chapters()
        text_path = os.path.join(tmp, "held_out.txt")
        with open(text_path, "w") as f:
            f.write("\n".join(c for i, c in enumerate(chapters) if is_held_out(i)))
        calibration = write_calibration(tmp, chapters, args.sanitized)
        engines, rows = {}, []
        for name, flags, max_ratio, bound in modes:
            engine = os.path.join(tmp, name.replace(" ", "_") + ".engine")
            flags = [calibration if f == CALIBRATION else f for f in flags]
            proc = run([args.llmc, "compile", model, "-o", engine, *flags])
            check(proc.returncode == 0, f"{name}: compile {proc.stderr.strip()[-300:]}")
            if proc.returncode != 0:
                continue
            check("warning" not in proc.stderr, f"{name}: no fallback warnings on the demo ({proc.stderr.strip()[-200:]})")
            if "--awq" in flags:
                # The statistics are cached next to the engine; a second compile reuses them.
                check(os.path.exists(engine + ".calib.safetensors"), f"{name}: calibration statistics cached")
                again = run([args.llmc, "compile", model, "-o", engine, *flags])
                check(again.returncode == 0 and "calibration: reusing" in again.stderr,
                      f"{name}: the second compile reuses the statistics")
            engines[name] = engine
            size = os.path.getsize(engine)
            ratio = size / os.path.getsize(engines["float32"])
            if max_ratio is not None:
                check(ratio <= max_ratio, f"{name}: engine {size} bytes = {ratio:.3f}x float32 (<= {max_ratio})")
            metrics = {}
            if name != "float32":
                proc = run([args.llmc, "eval", engine, "--reference", engines["float32"], "--text", text_path,
                            "--tokenizer", os.path.join(MODELS, "demo", "tokenizer.json"),
                            "--context", "128", "--json", *(["--max-windows", str(args.windows)] if args.windows else [])])
                check(proc.returncode == 0, f"{name}: eval {proc.stderr.strip()}")
                if proc.returncode == 0:
                    metrics = json.loads(proc.stdout)
                    if bound:
                        key, op, limit = bound
                        value = metrics[key]
                        check(value >= limit if op == ">=" else value <= limit, f"{name}: {key} {value:.4f} {op} {limit}")
            rows.append((name, size, ratio, metrics))

        by_name = {name: m for name, _, _, m in rows}
        if by_name.get("int4 g128 h8 awq") and by_name.get("int4 g128 h8"):
            awq, rtn = by_name["int4 g128 h8 awq"], by_name["int4 g128 h8"]
            check(awq["perplexity_increase"] < rtn["perplexity_increase"] and awq["mean_kl"] < rtn["mean_kl"]
                  and awq["top1_agreement"] > rtn["top1_agreement"],
                  f"AWQ beats round to nearest: perplexity +{100 * awq['perplexity_increase']:.2f}% vs "
                  f"+{100 * rtn['perplexity_increase']:.2f}%, KL {awq['mean_kl']:.5f} vs {rtn['mean_kl']:.5f}, "
                  f"top-1 {100 * awq['top1_agreement']:.2f}% vs {100 * rtn['top1_agreement']:.2f}%")
        if "w8a8" in engines and "w8a8 p99" in engines:
            with open(engines["w8a8"], "rb") as a, open(engines["w8a8 p99"], "rb") as b:
                check(a.read() != b.read(), "--smooth-percentile 0.99 changes the smoothing scales")
        if by_name.get("w8a8") and by_name.get("w8a8 unsmoothed"):
            smooth, plain = by_name["w8a8"], by_name["w8a8 unsmoothed"]
            check(smooth["mean_kl"] < plain["mean_kl"] and smooth["top1_agreement"] > plain["top1_agreement"],
                  f"SmoothQuant's smoothing helps w8a8: KL {smooth['mean_kl']:.5f} vs {plain['mean_kl']:.5f}, "
                  f"top-1 {100 * smooth['top1_agreement']:.2f}% vs {100 * plain['top1_agreement']:.2f}%")
        print(f"\n{'mode':18} {'engine bytes':>12} {'x float':>8} {'perplexity':>11} {'ppl +%':>7} {'mean KL':>9} {'top-1':>7}")
        for name, size, ratio, m in rows:
            if m:
                print(f"{name:18} {size:12d} {ratio:8.3f} {m['perplexity']:11.3f} {100 * m['perplexity_increase']:7.2f} "
                      f"{m['mean_kl']:9.5f} {100 * m['top1_agreement']:6.2f}%")
            else:
                print(f"{name:18} {size:12d} {ratio:8.3f}")
        if rows and rows[-1][3]:
            m = rows[-1][3]
            print(f"(reference perplexity {m['reference_perplexity']:.3f} on {m['predictions']} held-out predictions)")

        # The 8-bit KV caches: greedy continuations of held-out verses against the float32
        # cache's (on all 12 held-out chapters, int8 gave 12/12 identical 64-token
        # continuations, fp8 7/12 with the earliest difference at token 14).
        if not args.sanitized and "float32" in engines:
            held = [c for i, c in enumerate(chapters) if is_held_out(i)]
            prompts = [c.split("\n")[0][:300] for c in held][:4]

            @functools.lru_cache(maxsize=None)  # the float32 cache's tokens serve every dtype
            def greedy(prompt, dtype, engine="float32"):
                proc = run([args.llmc, "generate", engines[engine], "--prompt", prompt, "--tokenizer", TOKENIZER,
                            "--max-new-tokens", "48", "--print-ids", "--kv-cache-dtype", dtype])
                if proc.returncode != 0:
                    check(False, f"generate {engine} --kv-cache-dtype {dtype}: {proc.stderr.strip()[-200:]}")
                return proc.stdout.split()

            def first_differences(engine, dtype, reference_dtype):
                firsts = []
                for prompt in prompts:
                    got, want = greedy(prompt, dtype, engine), greedy(prompt, reference_dtype, engine)
                    firsts.append(next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), len(want)))
                return firsts

            for dtype, least in (("int8", 48), ("fp8", 8)):
                firsts = first_differences("float32", dtype, "f32")
                check(min(firsts) >= least, f"KV cache {dtype}: greedy tokens equal float32's for the first "
                                            f"{firsts} of 48 (at least {least} each)")
            # The int8 engine's own choice of cache (auto: float16) against a float32 cache: on the
            # 36 held-out prompts of docs/kv-cache.md, 64 tokens each, identical 36/36.
            if "int8" in engines:
                firsts = first_differences("int8", "auto", "f32")
                check(min(firsts) >= 32, f"int8 engine, its default KV cache: greedy tokens equal a float32 "
                                         f"cache's for the first {firsts} of 48 (at least 32 each)")

        # An encoder (test/models/bert_tiny, random weights, vocabulary 512) in int8 against its
        # float32 engine with llmc eval --sentences, through a word-level tokenizer written
        # here; the float32 engine against itself compares equal.
        bert = os.path.join(MODELS, "bert_tiny", "model.onnx")
        # W8A8 calibrates on other sentences: the calibration feeds input_ids, an attention mask
        # of ones and token_type_ids of zeros, as the tokenizer gives one sentence.
        bert_tokenizer, sentences, bert_calibration = write_bert_files(tmp)
        bert_engines = {}
        for name, flags in (("float32", []), ("int8", ["--quantize", "int8"]),
                            ("w8a8", ["--quantize", "w8a8", "--calib", bert_calibration])):
            bert_engines[name] = os.path.join(tmp, f"bert_{name}.engine")
            proc = run([args.llmc, "compile", bert, "-o", bert_engines[name], "--tokenizer", bert_tokenizer, *flags])
            check(proc.returncode == 0, f"encoder {name}: compile" + ("" if proc.returncode == 0 else proc.stderr[-300:]))
        results = {}
        for name in ("float32", "int8", "w8a8"):
            proc = run([args.llmc, "eval", bert_engines[name], "--reference", bert_engines["float32"],
                        "--sentences", sentences, "--json"])
            check(proc.returncode == 0, f"encoder {name}: eval --sentences {proc.stderr.strip()[-300:]}")
            if proc.returncode == 0:
                results[name] = json.loads(proc.stdout)
        if len(results) == 3:
            same = results["float32"]
            check(same["sentences"] == 4 and same["max_abs_error"] == 0 and same["min_cosine"] > 0.9999999,
                  f"encoder: the float32 engine equals itself ({same})")
            for name in ("int8", "w8a8"):
                r = results[name]
                check(0.999 < r["mean_cosine"] < 1 and r["min_token_cosine"] > 0.99,
                      f"encoder {name}: pooled cosine {r['mean_cosine']:.6f} (min {r['min_cosine']:.6f}), "
                      f"per token min {r['min_token_cosine']:.6f}")

        # --max-ppl-increase: over the limit, an error naming the layers whose float32 version
        # recovers the most, and nothing written; within it, the engine.
        short_text = os.path.join(tmp, "short.txt")
        with open(short_text, "w") as f:
            f.write("\n".join([c for i, c in enumerate(chapters) if is_held_out(i)][:3]))
        strict = os.path.join(tmp, "strict.engine")
        base = [args.llmc, "compile", model, "-o", strict, "--quantize", "int4", "--quant-group", "128",
                "--eval-text", short_text, "--tokenizer", TOKENIZER]
        if not args.sanitized:  # the sensitivity search compiles once per layer: Release only
            proc = run([*base, "--max-ppl-increase", "0.5"])
            check(proc.returncode != 0 and "exceeds --max-ppl-increase 0.5" in proc.stderr
                  and proc.stderr.count("--keep-float /model") >= 3 and not os.path.exists(strict),
                  f"--max-ppl-increase 0.5 fails with the sensitive layers: {proc.stderr.strip()[-600:]}")
        proc = run([*base, "--max-ppl-increase", "5"])
        check(proc.returncode == 0 and "accuracy on" in proc.stderr and os.path.exists(strict),
              f"--max-ppl-increase 5 writes the engine: {proc.stderr.strip()[-300:]}")

        # A stripped quantized engine refits byte-identically from the initializers (the
        # calibrated modes too: their scales are literals of the recipes).
        weights = os.path.join(tmp, "weights.safetensors")
        write_initializers(model, weights)
        for name, flags, _, _ in modes:
            if name not in ("int4 g128", "int4 g128 h8 awq", "w8a8") or name not in engines:
                continue
            flags = [calibration if f == CALIBRATION else f for f in flags]
            stripped = os.path.join(tmp, "stripped.engine")
            refit = os.path.join(tmp, "refit.engine")
            proc = run([args.llmc, "compile", model, "-o", stripped, *flags, "--strip-weights"])
            check(proc.returncode == 0, f"{name}: stripped compile {proc.stderr.strip()[-300:]}")
            proc = run([args.llmc, "refit", stripped, "--weights", weights, "-o", refit])
            check(proc.returncode == 0, f"{name}: refit {proc.stderr.strip()}")
            same = proc.returncode == 0 and open(refit, "rb").read() == open(engines[name], "rb").read()
            check(same, f"{name}: refit of the stripped engine is byte-identical to the quantized compile")

        # A product whose K is not a multiple of 32 stays float32, named in a warning; the
        # others are quantized and the engine runs.
        odd = os.path.join(tmp, "odd.onnx")
        rng = np.random.default_rng(5)
        graph = onnx.helper.make_graph(
            [onnx.helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             onnx.helper.make_node("Relu", ["h"], ["r"], name="relu"),
             onnx.helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")],
            "odd_k",
            [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 64])],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 8])],
            [numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((48, 8)).astype(np.float32), "w2")])
        onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]), odd)
        proc = run([args.llmc, "compile", odd, "-o", os.path.join(tmp, "odd.engine"), "--quantize", "int4",
                    "--quant-group", "64"])
        check(proc.returncode == 0, f"odd K: compile {proc.stderr.strip()}")
        warnings = [line for line in proc.stderr.splitlines() if "warning:" in line]
        check(len(warnings) == 1 and "fc2" in warnings[0] and "48" in warnings[0] and "stays float32" in warnings[0],
              f"odd K: one warning naming fc2: {warnings}")
        inspect = run([args.llmc, "inspect", os.path.join(tmp, "odd.engine")]).stdout
        check("LlmQuantMatMul" in inspect and "LlmFusedMatMul" in inspect, "odd K: fc1 quantized, fc2 float32")
        x = os.path.join(tmp, "x.npy")
        np.save(x, rng.standard_normal((3, 64)).astype(np.float32))
        proc = run([args.llmc, "run", os.path.join(tmp, "odd.engine"), "--input", f"x={x}", "--output-dir", tmp])
        check(proc.returncode == 0, f"odd K: run {proc.stderr.strip()}")

        # A weight holding an inf has no codes: its product stays float32, the warning names the
        # node and the element; the other product is quantized.
        w1 = rng.standard_normal((64, 64)).astype(np.float32)
        w1[3, 7] = np.inf
        graph = onnx.helper.make_graph(
            [onnx.helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             onnx.helper.make_node("MatMul", ["h", "w2"], ["y"], name="fc2")],
            "inf_weight",
            [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 64])],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 8])],
            [numpy_helper.from_array(w1, "w1"),
             numpy_helper.from_array(rng.standard_normal((64, 8)).astype(np.float32), "w2")])
        infinite = os.path.join(tmp, "inf.onnx")
        onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]), infinite)
        proc = run([args.llmc, "compile", infinite, "-o", os.path.join(tmp, "inf.engine"), "--quantize", "int8"])
        warnings = [line for line in proc.stderr.splitlines() if "warning:" in line]
        check(proc.returncode == 0 and len(warnings) == 1 and "fc1" in warnings[0] and "finite" in warnings[0]
              and "inf" in warnings[0] and "stays float32" in warnings[0],
              f"inf weight: one warning naming fc1 and the inf: {warnings} {proc.stderr.strip()[-300:]}")
        inspect = run([args.llmc, "inspect", os.path.join(tmp, "inf.engine")]).stdout
        check("LlmQuantMatMul" in inspect and "LlmFusedMatMul" in inspect, "inf weight: fc2 quantized, fc1 float32")

    print(f"\n{len(failures)} failed" if failures else "\nall passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
