#!/usr/bin/env python3
"""Decode speed of llmc against ONNX Runtime and llama.cpp on one Llama model, side by side.

The model is a transformers LlamaForCausalLM of about 110 M parameters with seeded random
weights (hidden 768, 12 layers, 12 heads, MLP 2048, vocabulary 16,000, RoPE, RMSNorm, SwiGLU;
not committed), saved with save_pretrained. From that one checkpoint:

- llmc compiles Optimum's text-generation-with-past ONNX export: float32, `--quantize int8`,
  `--quantize int4` with groups of 32 (Q4_0's block) and of 128, and (mode "8-bit w8a8")
  `--quantize w8a8` calibrated on eight random 128-token samples, int8 activations per token
  like ONNX Runtime's dynamic int8 (per tensor there); llmc's KV cache is its default, the
  engine's choice (float32 for the float32 engine, float16 for the quantized ones, llama.cpp's
  default cache); a mode with " kv-f16" or " kv-f32" after it runs that mode's engine with that
  KV cache instead, and one with " kv-prefault" has llmc write its KV cache's pages when the generator is created (the peers
  allocate theirs up front), each compared with the peers' runs of the mode without it;
- ONNX Runtime runs the same export: float32, int8 from `quantize_dynamic` (per channel), 4-bit
  from `MatMulNBitsQuantizer` (symmetric, blocks of 32, accuracy_level 4: int8 activations, as
  llmc and llama.cpp do); decode feeds the present K/V back as the past (as Optimum's
  ORTModelForCausalLM does);
- llama.cpp (through llama-cpp-python) runs the GGUF that its own convert_hf_to_gguf.py writes
  from the checkpoint (F32, Q8_0) and Q4_0 quantized from the F32 GGUF with every tensor Q4_0
  (`pure`, as llmc quantizes the head and the embedding too).

Each side runs the same thread counts (--threads, default 1: ONNX Runtime's intra-op threads,
llama.cpp's n_threads and n_threads_batch, llmc's --threads), the same prompt lengths
(--prompts, default 64) and greedy tokens (--new-tokens, default 32), --runs runs (default 3) after
a warm-up, in alternated rounds
(this VM's speed drifts); the tables give decode tokens/s and time to first token as median
[min, max] over rounds per thread count and prompt length, and llmc's speed over each peer's at
the same bit width (decode: llmc's rate over theirs; first token: their time over llmc's; above
1 llmc is faster). The CPU's model and flags head the output. A check that the three run one
model: the greedy continuation of the float32 runs, compared.

    .venv-gen/bin/python bench/peers.py --llmc build/tools/llmc/llmc --llama-cpp DIR [--rounds 5]
        [--threads 1,2] [--prompts 64,512,2048] [--new-tokens 32] [--runs 3] [--modes float32,8-bit,4-bit]
        [--batch 8] [--work DIR]

--batch N adds N sequences at once at the shortest prompt: llmc's continuous batching (`llmc bench
--batch`) against llama.cpp's parallel sequences in one context, new tokens per second of the
whole run, prefill included.

DIR is a llama.cpp source tree (for convert_hf_to_gguf.py and its gguf-py); bench/README.md says
how to get the one llama-cpp-python was built from.
"""
import argparse
import contextlib
import faulthandler
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

CONFIG = dict(vocab_size=16000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
              num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=4096,
              rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.02)
CHECK_TOKENS = 8
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_ort import llmc_kv_bench, ort_session  # noqa: E402


def make_checkpoint(hf_dir):
    """The random Llama and a SentencePiece tokenizer (the GGUF converter needs one; ids past its
    vocabulary become padding tokens in the GGUF)."""
    import sentencepiece as spm
    import torch
    import transformers

    if os.path.exists(os.path.join(hf_dir, "tokenizer.model")):
        return transformers.LlamaForCausalLM.from_pretrained(hf_dir).num_parameters()

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval()
    model.save_pretrained(hf_dir, safe_serialization=True)
    text = []
    for path in sorted(glob.glob(os.path.join(HERE, "..", "docs", "*.md"))):
        with open(path, encoding="utf-8") as f:
            text.extend(line.strip() for line in f if line.strip())
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_prefix=os.path.join(hf_dir, "tokenizer"),
                                   vocab_size=1000, model_type="bpe", byte_fallback=True, hard_vocab_limit=False,
                                   bos_id=1, eos_id=2, unk_id=0, minloglevel=2)
    return sum(p.numel() for p in model.parameters())


def export_onnx(hf_dir, onnx_dir):
    from optimum.exporters.onnx import main_export

    if os.path.exists(os.path.join(onnx_dir, "model.onnx")):
        return os.path.join(onnx_dir, "model.onnx")
    main_export(hf_dir, onnx_dir, task="text-generation-with-past", opset=18, device="cpu",
                no_post_process=True, do_validation=False)
    return os.path.join(onnx_dir, "model.onnx")


def ort_models(onnx_path, out_dir):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
    import onnx

    int8 = os.path.join(out_dir, "ort_int8.onnx")
    int4 = os.path.join(out_dir, "ort_int4.onnx")
    if os.path.exists(int4):
        return {"float32": onnx_path, "8-bit": int8, "4-bit": int4}
    quantize_dynamic(onnx_path, int8, per_channel=True, weight_type=QuantType.QInt8)
    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True, accuracy_level=4)
    quantizer = MatMulNBitsQuantizer(onnx.load(onnx_path), algo_config=config)
    quantizer.process()
    quantizer.model.save_model_to_file(int4, use_external_data_format=False)
    return {"float32": onnx_path, "8-bit": int8, "4-bit": int4}


def gguf_models(llama_cpp_dir, hf_dir, out_dir):
    import ctypes
    import llama_cpp

    converter = os.path.join(llama_cpp_dir, "convert_hf_to_gguf.py")
    paths = {}
    for name, outtype in (("float32", "f32"), ("8-bit", "q8_0")):
        paths[name] = os.path.join(out_dir, f"model-{outtype}.gguf")
        if os.path.exists(paths[name]):
            continue
        subprocess.run([sys.executable, converter, hf_dir, "--outtype", outtype, "--outfile", paths[name]],
                       check=True, capture_output=True)
    paths["4-bit"] = os.path.join(out_dir, "model-q4_0.gguf")
    if os.path.exists(paths["4-bit"]):
        return paths
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    params.pure = True
    params.nthread = 1
    status = llama_cpp.llama_model_quantize(paths["float32"].encode(), paths["4-bit"].encode(), ctypes.byref(params))
    if status != 0:
        raise RuntimeError(f"llama_model_quantize returned {status}")
    return paths


def calibration_samples(out_dir):
    """Eight seeded samples of 128 random token ids (the weights are random too) for w8a8's
    calibration, as .npy files in a directory (`llmc compile --calib-dir`)."""
    calib_dir = os.path.join(out_dir, "calib")
    os.makedirs(calib_dir, exist_ok=True)
    rng = np.random.default_rng(11)
    for i in range(8):
        np.save(os.path.join(calib_dir, f"sample{i}.npy"), rng.integers(3, 1000, size=128).astype(np.int64))
    return calib_dir


# A mode name ending in KV_F16 or KV_F32 runs its base mode's engine with a float16 or float32 KV
# cache rather than the engine's choice (float16 for the quantized engines, as llama.cpp's
# default; float32 for the float32 engine): the like-for-like comparison of decode at long
# contexts, and the cache llmc's quantized engines stored before 2026-12-07. One
# ending in KV_PREFAULT has llmc write its KV cache's pages when the generator is created, as the
# peers allocate theirs up front, so that no timed run pays the page faults of blocks that no
# earlier run used. Suffixes combine ("8-bit kv-f16 kv-prefault").
KV_F16 = " kv-f16"
KV_F32 = " kv-f32"
KV_PREFAULT = " kv-prefault"
SUFFIX_OPTIONS = {KV_F16: ["--kv-cache-dtype", "f16"], KV_F32: ["--kv-cache-dtype", "f32"],
                  KV_PREFAULT: ["--kv-prefault"]}


def split_mode(mode):
    """(engine mode, `llmc bench`'s extra options) of a mode name with its suffixes."""
    options = []
    found = True
    while found:
        found = False
        for suffix, flags in SUFFIX_OPTIONS.items():
            if mode.endswith(suffix):
                mode, options, found = mode.removesuffix(suffix), flags + options, True
    return mode, options


def bench_options(mode):
    """`llmc bench`'s extra options for a mode."""
    return split_mode(mode)[1]


def llmc_engines(llmc, onnx_path, out_dir, wanted):
    modes = {"float32": [], "8-bit": ["--quantize", "int8"], "4-bit": ["--quantize", "int4", "--quant-group", "32"],
             "4-bit g128": ["--quantize", "int4", "--quant-group", "128"],
             "8-bit w8a8": ["--quantize", "w8a8"]}
    unknown = [name for name in wanted if split_mode(name)[0] not in modes]
    if unknown:
        sys.exit(f"unknown mode(s) {', '.join(unknown)}: the modes are {', '.join(modes)}, each also with"
                 f" '{KV_F16}' or '{KV_F32}' and/or '{KV_PREFAULT}'")
    engines = {}
    for name in wanted:
        base = split_mode(name)[0]
        flags = modes[base]
        if base == "8-bit w8a8":
            flags = flags + ["--calib-dir", calibration_samples(out_dir)]
        path = os.path.join(out_dir, base.replace(" ", "_") + ".engine")
        if path not in engines.values():
            # The checkpoint's 4,096 positions (llmc's default is 2,048).
            subprocess.run([llmc, "compile", onnx_path, "-o", path, "--max-context",
                            str(CONFIG["max_position_embeddings"]), *flags], check=True, capture_output=True)
        engines[name] = path
    return engines


def run_llmc(llmc, engine, prompt_tokens, new_tokens, threads, runs, mode):
    """Median decode tokens/s and time to first token (ms) of `llmc bench` over `runs` runs."""
    ttft, tokens_per_s = llmc_kv_bench(llmc, engine, prompt_tokens, new_tokens, runs, threads,
                                       bench_options(mode))
    return tokens_per_s[0], ttft[0]


def llmc_cold_start(llmc, engine, threads, mode):
    """`llmc bench`'s cold start line: engine load, session creation and the first run's time to
    first token (ms), 64-token prompt."""
    out = subprocess.run([llmc, "bench", engine, "--kv-only", "--context", "64", "--new-tokens", "2", "--repeat",
                          "1", "--threads", str(threads), *bench_options(mode)],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"engine load ([0-9.]+) ms, session ([0-9.]+) ms, first token ([0-9.]+) ms", out)
    return tuple(float(g) for g in m.groups())


class OrtRunner:
    def __init__(self, path, threads):
        self.session = ort_session(path, threads)
        self.past = [i for i in self.session.get_inputs() if i.name.startswith("past_key_values")]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def generate(self, prompt, new_tokens):
        """Greedy tokens, time to first token (s) and decode time (s)."""
        feeds = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32) for i in self.past}
        ids, tokens, start = np.array([prompt], np.int64), [], time.perf_counter()
        first = None
        for step in range(new_tokens):
            length = len(prompt) + step
            feeds["input_ids"] = ids
            feeds["attention_mask"] = np.ones((1, length), np.int64)
            feeds["position_ids"] = np.arange(length - ids.shape[1], length, dtype=np.int64)[None]
            results = dict(zip(self.outputs, self.session.run(self.outputs, feeds)))
            token = int(np.argmax(results["logits"][0, -1]))
            tokens.append(token)
            if first is None:
                first = time.perf_counter()
            for i in self.past:
                feeds[i.name] = results[i.name.replace("past_key_values", "present")]
            ids = np.array([[token]], np.int64)
        return tokens, first - start, time.perf_counter() - first


class LlamaCppRunner:
    def __init__(self, path, threads, context, batch):
        import llama_cpp

        self.llm = llama_cpp.Llama(path, n_ctx=context, n_batch=batch, n_threads=threads,
                                   n_threads_batch=threads, verbose=False)
        self.vocab = self.llm.n_vocab()
        self.last_logits = lambda: np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.llm._ctx.ctx, -1),
                                                         shape=(self.vocab,))

    def generate(self, prompt, new_tokens):
        self.llm.reset()
        tokens, start = [], time.perf_counter()
        first = None
        self.llm.eval(prompt)
        for _ in range(new_tokens):
            token = int(np.argmax(self.last_logits()))
            tokens.append(token)
            if first is None:
                first = time.perf_counter()
            if len(tokens) < new_tokens:
                self.llm.eval([token])
        return tokens, first - start, time.perf_counter() - first


class LlamaCppBatched:
    """`sequences` prompts decoded together in one llama.cpp context (its parallel sequences, as
    llama.cpp's batched example runs them): each prompt prefilled, then one batch per step with
    every sequence's next token; greedy. Measures new tokens per second of the whole run, prefill
    included, as `llmc bench --batch` does for its continuous batching."""

    def __init__(self, path, threads, prompt_length, new_tokens, sequences):
        import llama_cpp

        self.lib, self.sequences = llama_cpp, sequences
        self.model = llama_cpp.llama_model_load_from_file(path.encode(), llama_cpp.llama_model_default_params())
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = sequences * (prompt_length + new_tokens + 8)
        params.n_batch = params.n_ubatch = max(prompt_length, sequences)
        params.n_seq_max = sequences
        params.n_threads = params.n_threads_batch = threads
        self.ctx = llama_cpp.llama_init_from_model(self.model, params)
        self.vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))
        self.batch = llama_cpp.llama_batch_init(max(prompt_length, sequences), 0, 1)

    def _decode(self, items):
        """items: (token, position, sequence, wants logits); returns the argmax of each wanted row."""
        b = self.batch
        b.n_tokens = len(items)
        for i, (token, position, sequence, logits) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, position, 1, int(logits)
            b.seq_id[i][0] = sequence
        if self.lib.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")
        return [int(np.argmax(np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.ctx, i), shape=(self.vocab,))))
                for i, item in enumerate(items) if item[3]]

    def tokens_per_s(self, prompt, new_tokens):
        self.lib.llama_memory_clear(self.lib.llama_get_memory(self.ctx), True)
        start, last = time.perf_counter(), []
        for s in range(self.sequences):
            p = [prompt[0] + 1 + s] + list(prompt[1:])  # distinct prompts: nothing shared
            last += self._decode([(t, i, s, i == len(p) - 1) for i, t in enumerate(p)])
        for step in range(1, new_tokens):
            last = self._decode([(last[s], len(prompt) + step - 1, s, True) for s in range(self.sequences)])
        return self.sequences * new_tokens / (time.perf_counter() - start)


def llmc_batched(llmc, engine, prompt_tokens, new_tokens, threads, sequences, mode):
    """`llmc bench --batch`: new tokens per second of `sequences` requests run together."""
    out = subprocess.run([llmc, "bench", engine, "--kv-only", "--context", str(prompt_tokens), "--new-tokens",
                          str(new_tokens), "--repeat", "1", "--threads", str(threads), "--batch", str(sequences),
                          *bench_options(mode)],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"requests at once: ([0-9.]+)", out).group(1))


def timed(runner, prompt, new_tokens, runs):
    """Median decode tokens/s and time to first token (ms) over `runs` runs after a warm-up."""
    runner.generate(prompt, new_tokens)
    decode, ttft = [], []
    for _ in range(runs):
        _, first, rest = runner.generate(prompt, new_tokens)
        decode.append((new_tokens - 1) / rest)
        ttft.append(first * 1000)
    return statistics.median(decode), statistics.median(ttft)


def summary(values):
    return f"{statistics.median(values):7.1f} [{min(values):6.1f}, {max(values):6.1f}]"


def cpu_line():
    """The CPU's model and the flags that matter for these kernels, from /proc/cpuinfo."""
    model, flags = "unknown CPU", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    wanted = ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_vbmi2",
              "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_int8"]
    return f"{model}; {os.cpu_count()} CPUs; " + " ".join(f for f in wanted if f in flags)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--llama-cpp", required=True, help="llama.cpp source tree (convert_hf_to_gguf.py)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", default="1", help="comma-separated thread counts, e.g. 1,2")
    parser.add_argument("--prompts", default="64", help="comma-separated prompt lengths, e.g. 64,512")
    parser.add_argument("--runs", type=int, default=3, help="measured runs per side and round (after a warm-up)")
    parser.add_argument("--batch", type=int, default=0,
                        help="also N sequences at once (llmc's continuous batching, llama.cpp's parallel sequences)"
                        " at the shortest prompt")
    parser.add_argument("--work", help="directory that keeps the models between runs (default: a temporary one)")
    parser.add_argument("--modes", default="float32,8-bit,4-bit,4-bit g128",
                        help="comma-separated: float32, 8-bit, 4-bit, 4-bit g128, 8-bit w8a8 (compared with the"
                        " peers' 8-bit models: ONNX Runtime's quantize_dynamic quantizes activations to 8 bits too);"
                        f" any of them with '{KV_F16}' or '{KV_F32}' runs llmc with that KV cache rather than the"
                        " engine's choice (float16 for the quantized engines, as llama.cpp's default),"
                        f" and with '{KV_PREFAULT}' has llmc write its KV cache's pages when it is created."
                        " A mode with a suffix is compared with the peers' runs of its base mode, which must be"
                        " listed too")
    args = parser.parse_args()
    faulthandler.enable()  # a crash inside a peer's native code prints where it was
    thread_counts = [int(t) for t in args.threads.split(",")]
    prompt_lengths = [int(p) for p in args.prompts.split(",")]
    context = max(prompt_lengths) + args.new_tokens + 8
    llmc = os.path.abspath(args.llmc)
    print(f"cpu: {cpu_line()}", flush=True)
    with contextlib.ExitStack() as stack:
        # --work keeps the checkpoint and every converted model for the next run (each step is
        # skipped when its output is there; llmc's engines are always compiled again).
        tmp = args.work or stack.enter_context(tempfile.TemporaryDirectory(prefix="llmc-peers-"))
        os.makedirs(tmp, exist_ok=True)
        hf_dir, onnx_dir = os.path.join(tmp, "hf"), os.path.join(tmp, "onnx")
        params = make_checkpoint(hf_dir)
        print(f"checkpoint: LlamaForCausalLM, {params / 1e6:.1f} M parameters", flush=True)
        onnx_path = export_onnx(hf_dir, onnx_dir)
        engines = llmc_engines(llmc, onnx_path, tmp, args.modes.split(","))
        ort_paths = ort_models(onnx_path, tmp)
        gguf_paths = gguf_models(args.llama_cpp, hf_dir, tmp)
        print("\nmodel files (MiB):")
        for name in engines:
            sizes = [engines[name], ort_paths.get(name), gguf_paths.get(name)]
            print(f"  {name:17}" + "".join(f"{os.path.getsize(p) / 2**20:10.1f}" if p else f"{'':>10}" for p in sizes)
                  + "   (llmc, ONNX Runtime, llama.cpp)")

        rng = np.random.default_rng(3)
        prompts = {n: [int(t) for t in rng.integers(3, 1000, size=n)] for n in prompt_lengths}
        load_ms = {}  # (side, mode) -> ms to load the model and be ready to run, one thread

        def loaded(side, name, threads, make):
            start = time.perf_counter()
            runner = make()
            if threads == thread_counts[0]:
                load_ms[(side, name)] = (time.perf_counter() - start) * 1000
            return runner

        # The peers run each base mode once ("float32" for "float32 kv-f16", "8-bit" for "8-bit w8a8").
        bases = {name.split(" ")[0] for name in engines}
        ort_runners = {(name, t): loaded("ONNX Runtime", name, t, lambda p=path, t=t: OrtRunner(p, t))
                       for name, path in ort_paths.items() if name in bases for t in thread_counts}
        gguf_runners = {(name, t): loaded("llama.cpp", name, t,
                                          lambda p=path, t=t: LlamaCppRunner(p, t, context, max(prompt_lengths)))
                        for name, path in gguf_paths.items() if name in bases for t in thread_counts}
        print(f"\ncold start, {thread_counts[0]} thread(s): load until ready to run (ms); llmc: engine load + "
              "session, and the first run's time to first token (64-token prompt)")
        for name in engines:
            engine_ms, session_ms, first_ms = llmc_cold_start(llmc, engines[name], thread_counts[0], name)
            peers = "".join(f"   {side} {load_ms[(side, name)]:.0f}" for side in ("ONNX Runtime", "llama.cpp")
                            if (side, name) in load_ms)
            print(f"  {name:17} llmc {engine_ms:.1f} + {session_ms:.1f}, first token {first_ms:.0f}{peers}")
        if "float32" in engines:
            check = prompts[prompt_lengths[0]]
            ort_tokens = ort_runners[("float32", thread_counts[0])].generate(check, CHECK_TOKENS)[0]
            gguf_tokens = gguf_runners[("float32", thread_counts[0])].generate(check, CHECK_TOKENS)[0]
            same = sum(a == b for a, b in zip(ort_tokens, gguf_tokens))
            print(f"\nfloat32 greedy tokens, ONNX Runtime {ort_tokens}, llama.cpp {gguf_tokens}: "
                  f"{same}/{CHECK_TOKENS} agree")

        results = {}  # (side, mode, threads, prompt) -> ([decode tok/s], [ttft ms])
        batched = {}  # (mode, threads) -> ([llmc tok/s], [llama.cpp tok/s])
        batch_runners = {}
        if args.batch:
            batch_runners = {(name, t): LlamaCppBatched(path, t, min(prompt_lengths), args.new_tokens, args.batch)
                             for name, path in gguf_paths.items() if name in bases for t in thread_counts}
            for runner in batch_runners.values():  # warm-up
                runner.tokens_per_s(prompts[min(prompt_lengths)], 4)
        for _ in range(args.rounds):
            for threads in thread_counts:
                for length in prompt_lengths:
                    prompt = prompts[length]
                    for name in engines:
                        sides = [("llmc", lambda n=name: run_llmc(llmc, engines[n], length, args.new_tokens, threads,
                                                                  args.runs, n))]
                        if (name, threads) in ort_runners:
                            sides.append(("ONNX Runtime", lambda n=name: timed(ort_runners[(n, threads)], prompt,
                                                                               args.new_tokens, args.runs)))
                        if (name, threads) in gguf_runners:
                            sides.append(("llama.cpp", lambda n=name: timed(gguf_runners[(n, threads)], prompt,
                                                                            args.new_tokens, args.runs)))
                        for side, measure in sides:
                            decode, ttft = measure()
                            entry = results.setdefault((side, name, threads, length), ([], []))
                            entry[0].append(decode)
                            entry[1].append(ttft)
                if args.batch:
                    length = min(prompt_lengths)
                    for name in engines:
                        rates = batched.setdefault((name, threads), ([], []))
                        rates[0].append(llmc_batched(llmc, engines[name], length, args.new_tokens, threads, args.batch,
                                                     name))
                        if (name, threads) in batch_runners:
                            rates[1].append(batch_runners[(name, threads)].tokens_per_s(prompts[length],
                                                                                      args.new_tokens))

        for threads in thread_counts:
            for length in prompt_lengths:
                for what, index, unit in (("decode", 0, "tokens/s"), ("time to first token", 1, "ms")):
                    print(f"\n{what} ({unit}), median [min, max] over {args.rounds} rounds: {threads} thread"
                          f"{'s' if threads > 1 else ''}, {length}-token prompt, {args.new_tokens} new tokens")
                    print(f"{'mode':17} {'llmc':>24} {'ONNX Runtime':>24} {'llama.cpp':>24} {'vs ORT':>8} {'vs llama.cpp':>13}")
                    for name in engines:
                        row = f"{name:17}"
                        for side in ("llmc", "ONNX Runtime", "llama.cpp"):
                            key = (side, name, threads, length)
                            row += f" {summary(results[key][index]):>24}" if key in results else f" {'':>24}"
                        ours = statistics.median(results[("llmc", name, threads, length)][index])
                        for side, width in (("ONNX Runtime", 8), ("llama.cpp", 13)):
                            key = (side, name, threads, length)
                            if key not in results:
                                key = (side, name.split(" ")[0], threads, length)
                            theirs = statistics.median(results[key][index]) if key in results else None
                            # Speed-up of llmc: a rate ratio for decode, a time ratio inverted for TTFT.
                            ratio = (ours / theirs if index == 0 else theirs / ours) if theirs else None
                            row += f" {ratio:>{width - 1}.2f}x" if ratio else f" {'':>{width}}"
                        print(row)
        if args.batch:
            print(f"\n{args.batch} sequences at once ({min(prompt_lengths)}-token prompts, {args.new_tokens} new tokens "
                  f"each): new tokens/s of the whole run, prefill included, median [min, max] over {args.rounds} rounds")
            print(f"{'mode':17} {'threads':>7} {'llmc':>24} {'llama.cpp':>24} {'vs llama.cpp':>13}")
            for name in engines:
                for threads in thread_counts:
                    ours, theirs = batched[(name, threads)]
                    # (A mode with a suffix against its base mode's peer run, as in the tables above.)
                    theirs = theirs or batched.get((name.split(" ")[0], threads), ([], []))[1]
                    ratio = statistics.median(ours) / statistics.median(theirs) if theirs else None
                    print(f"{name:17} {threads:>7} {summary(ours):>24} {summary(theirs) if theirs else '':>24}"
                          + (f" {ratio:>12.2f}x" if ratio else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
