#!/usr/bin/env python3
"""The GPU benchmark, run on the lent GPU machine by scripts/gpu-check.sh (PyTorch is there).

llmc's CUDA backend and PyTorch eager on the same weights of bench/gpu/make_llama.py's 1 B
Llama-style model: PyTorch draws the weights (seeded, bf16) under the ONNX initializer names,
saves them as float32 safetensors, `llmc refit` fills the stripped engine that
scripts/gpu-prepare.sh compiled on the build machine, and both run side by side:

- decode tokens/s at batch 1 and 16 after a 512-token prompt (llmc: `llmc bench`, greedy over
  the paged KV cache; batch 16 is continuous batching of 16 requests: its steps that decode
  every request at once, and the whole run with the prompts' prefill);
- prefill time of 512 tokens (llmc: time to first token);
- each as a fraction of its floor: the weight bytes read per decode step at 4.3 TB/s, and the
  prefill's FLOPs at 790 TFLOP/s (H200 HBM bandwidth and dense bf16 peak).

llmc runs the float32 engine with float32, tf32 and bf16 products (`--precision`: bf16 keeps the
products' weights on the GPU as bfloat16); PyTorch runs bf16 and float32, so both comparisons
are in the table. llmc replays its decode steps from CUDA graphs (one per batch bucket); the
bf16 row is repeated with --no-cuda-graphs. Prints one table and writes bench.json under --out.

    python bench/gpu/llama_bench.py --engine gpu-prep/bench/llama1b.engine \\
        --config gpu-prep/bench/config.json --llmc build-gpu/tools/llmc/llmc --work DIR --out DIR
"""
import argparse
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the build machine checks save_safetensors and the refit without PyTorch
    torch = F = None

PROMPT, NEW_TOKENS, REPEAT = 512, 64, 3
LLMC_RUN_TIMEOUT_S = 30
HBM_BYTES_PER_S, PEAK_FLOPS = 4.3e12, 790e12


def draw_weights(cfg, seed=2026):
    """bf16 weights on the GPU, keyed by the ONNX initializer names (norm gains are ones)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    weights = {}
    for name, shape in cfg["weights"].items():
        if name.endswith("norm"):
            weights[name] = torch.ones(shape, dtype=torch.bfloat16, device="cuda")
        else:
            weights[name] = (torch.randn(shape, generator=gen, device="cuda") * 0.02).to(torch.bfloat16)
    return weights


def save_safetensors(weights, path):
    """float32 safetensors (the engine's initializers are float32): header, then the bytes."""
    header, offset = {}, 0
    for name, w in weights.items():
        size = w.numel() * 4
        header[name] = {"dtype": "F32", "shape": list(w.shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for w in weights.values():
            f.write(w.float().cpu().numpy().tobytes())


class TorchLlama:
    """The ONNX graph of make_llama.py in PyTorch: learned positions, RMSNorm, causal MHA, SwiGLU."""

    def __init__(self, weights, cfg, dtype):
        self.w = {k: v.to(dtype) for k, v in weights.items()}
        self.cfg, self.dtype = cfg, dtype
        self.heads = cfg["heads"]
        self.head_dim = cfg["hidden"] // cfg["heads"]
        for l in range(cfg["layers"]):  # one packed QKV product per layer, as llmc does
            p = f"layers.{l}"
            self.w[f"{p}.qkv"] = torch.cat([self.w[f"{p}.{x}_proj"] for x in "qkv"], dim=1)

    def rms(self, x, gain):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).to(self.dtype) * gain

    def forward(self, ids, start, cache):
        with torch.no_grad():
            return self._forward(ids, start, cache)

    def _forward(self, ids, start, cache):
        b, t = ids.shape
        w, hd, h = self.w, self.head_dim, self.heads
        x = w["embed_tokens"][ids] + w["embed_positions"][start:start + t]
        for l in range(self.cfg["layers"]):
            p = f"layers.{l}"
            qkv = self.rms(x, w[f"{p}.input_norm"]) @ w[f"{p}.qkv"]
            q, k, v = (z.view(b, t, h, hd).transpose(1, 2) for z in qkv.split(self.cfg["hidden"], dim=-1))
            ck, cv = cache[l]
            ck[:, :, start:start + t] = k
            cv[:, :, start:start + t] = v
            a = F.scaled_dot_product_attention(q, ck[:, :, :start + t], cv[:, :, :start + t], is_causal=t > 1)
            x = x + a.transpose(1, 2).reshape(b, t, -1) @ w[f"{p}.o_proj"]
            h2 = self.rms(x, w[f"{p}.post_norm"])
            x = x + (F.silu(h2 @ w[f"{p}.gate_proj"]) * (h2 @ w[f"{p}.up_proj"])) @ w[f"{p}.down_proj"]
        return self.rms(x[:, -1:], w["final_norm"]) @ w["lm_head"]

    def new_cache(self, batch):
        shape = (batch, self.heads, PROMPT + NEW_TOKENS, self.head_dim)
        return [(torch.empty(shape, dtype=self.dtype, device="cuda"),
                 torch.empty(shape, dtype=self.dtype, device="cuda")) for _ in range(self.cfg["layers"])]


def time_torch(model, batch):
    """(prefill ms of PROMPT tokens for one row, decode tokens/s at `batch`), medians."""
    vocab = model.cfg["vocab"]
    prefill_ms, decode_tps = [], []
    for r in range(REPEAT + 1):  # run 0 warms up
        ids = torch.randint(0, vocab, (batch, PROMPT), device="cuda", generator=torch.Generator(device="cuda").manual_seed(r))
        cache = model.new_cache(batch)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model.forward(ids, 0, cache)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        token = logits.argmax(-1)
        for step in range(NEW_TOKENS - 1):
            token = model.forward(token, PROMPT + step, cache).argmax(-1)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if r:
            prefill_ms.append((t1 - t0) * 1e3)
            decode_tps.append(batch * (NEW_TOKENS - 1) / (t2 - t1))
    return statistics.median(prefill_ms), statistics.median(decode_tps)


def run_llmc(llmc, engine, *flags):
    command = [llmc, "bench", engine, "--backend", "cuda", "--context", str(PROMPT),
               "--new-tokens", str(NEW_TOKENS), "--repeat", str(REPEAT), "--kv-only", *flags]
    try:  # a hung run costs one row, not the table (gpu-check.sh gives the whole bench 170 s)
        proc = subprocess.run(command, capture_output=True, text=True, timeout=LLMC_RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": [f"timed out after {LLMC_RUN_TIMEOUT_S} s"]}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:]}
    out = {}
    row = re.search(r"paged KV cache\s+([\d.]+) \[.*?\]\s+([\d.]+)", proc.stdout)
    if row:
        out["prefill_ms"], out["decode_tps"] = float(row.group(1)), float(row.group(2))
    batched = re.search(r"requests at once: ([\d.]+)", proc.stdout)
    if batched:
        out["batch_tps"] = float(batched.group(1))
    decode_only = re.search(r"decoded every request at once, median [\d.]+ ms \(([\d.]+) tokens/s\)", proc.stdout)
    if decode_only:
        out["batch_decode_tps"] = float(decode_only.group(1))
    out["raw"] = proc.stdout
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", required=True, help="the stripped engine (gpu-prepare.sh)")
    parser.add_argument("--config", required=True)
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--work", required=True, help="scratch for the weights and the refitted engine")
    parser.add_argument("--out", required=True)
    parser.add_argument("--profile", action="store_true",
                        help="instead of the table: llmc's batch-1 and batch-16 runs (bf16, eager) under "
                             "LLMC_CUDA_PROFILE=1, each kernel's wall time printed")
    args = parser.parse_args()
    cfg = json.load(open(args.config))
    os.makedirs(args.work, exist_ok=True)
    params = cfg["parameters"]
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "parameters": params,
              "prompt": PROMPT, "new_tokens": NEW_TOKENS, "repeat": REPEAT}

    t0 = time.perf_counter()
    weights = draw_weights(cfg)
    st = os.path.join(args.work, "weights.safetensors")
    save_safetensors(weights, st)
    engine = os.path.join(args.work, "llama1b.engine")
    proc = subprocess.run([args.llmc, "refit", args.engine, "--weights", st, "-o", engine],
                          capture_output=True, text=True)
    os.remove(st)
    report["refit_s"] = time.perf_counter() - t0
    if proc.returncode != 0:
        print(f"llama_bench: refit failed: {proc.stderr.strip()}")
        report["refit_error"] = proc.stderr.strip()

    if args.profile:
        if "refit_error" in report:
            return 1
        for batch in (1, 16):
            command = [args.llmc, "bench", engine, "--backend", "cuda", "--context", str(PROMPT), "--new-tokens", "32",
                       "--repeat", "1", "--kv-only", "--precision", "bf16", "--no-cuda-graphs"]
            if batch > 1:
                command += ["--batch", str(batch)]
            try:
                proc = subprocess.run(command, capture_output=True, text=True, timeout=60,
                                      env=dict(os.environ, LLMC_CUDA_PROFILE="1"))
                print(f"== batch {batch}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
            except subprocess.TimeoutExpired:
                print(f"== batch {batch}: timed out")
        os.remove(engine)
        return 0

    rows = []
    if "refit_error" not in report:
        for label, width, flags in (("llmc fp32", 4, ["--precision", "fp32"]),
                                    ("llmc tf32", 4, ["--precision", "tf32"]),
                                    ("llmc bf16", 2, ["--precision", "bf16"]),
                                    ("llmc bf16 no graphs", 2, ["--precision", "bf16", "--no-cuda-graphs"])):
            one = run_llmc(args.llmc, engine, *flags)
            sixteen = run_llmc(args.llmc, engine, "--batch", "16", *flags)
            report[label] = {"batch1": one, "batch16": sixteen}
            rows.append((label, width, one.get("prefill_ms"), one.get("decode_tps"), sixteen.get("batch_decode_tps"),
                         sixteen.get("batch_tps"), one.get("error") or sixteen.get("error")))
            print(f"{label}: {rows[-1][2:]}")  # as it comes, in case the whole bench runs out of time
        os.remove(engine)
    for label, dtype, width in (("torch eager bf16", torch.bfloat16, 2), ("torch eager fp32", torch.float32, 4)):
        model = TorchLlama(weights, cfg, dtype)
        prefill, decode1 = time_torch(model, 1)
        _, decode16 = time_torch(model, 16)
        report[label] = {"prefill_ms": prefill, "decode_tps": decode1, "batch16_tps": decode16}
        rows.append((label, width, prefill, decode1, decode16, None, None))
        print(f"{label}: {rows[-1][2:]}")
        del model
        torch.cuda.empty_cache()

    # Floors: decode reads every weight once per step; prefill is 2 FLOPs per parameter per
    # token plus attention (4 * layers * hidden * PROMPT^2 / 2 for the causal half).
    flops = 2 * params * PROMPT + 2 * cfg["layers"] * cfg["hidden"] * PROMPT * PROMPT
    prefill_floor_ms = flops / PEAK_FLOPS * 1e3
    print(f"\nGPU benchmark: {report['gpu']}, {params / 1e9:.2f} B parameters, prompt {PROMPT}, "
          f"{NEW_TOKENS} new tokens, median of {REPEAT}; llmc decodes through CUDA graphs unless a row says not")
    print(f"{'':18} {'prefill 512 (ms)':>22} {'decode b1 (tok/s)':>24} {'decode b16 (tok/s)':>24} "
          f"{'b16 with prefill':>16}")

    def cell(value, floor, higher_is_better):
        if value is None:
            return "n/a"
        share = floor / value if not higher_is_better else value / floor
        return f"{value:9.1f} ({share:5.1%})"

    for label, width, prefill, decode1, decode16, with_prefill, error in rows:
        step_floor_s = params * width / HBM_BYTES_PER_S
        print(f"{label:18} {cell(prefill, prefill_floor_ms, False):>22} {cell(decode1, 1 / step_floor_s, True):>24} "
              f"{cell(decode16, 16 / step_floor_s, True):>24} "
              f"{'' if with_prefill is None else f'{with_prefill:16.1f}'}" + (f"  error: {error}" if error else ""))
    print("(in parentheses: the fraction of the floor. decode b16: steps that decode all 16 sequences at once; "
          "llmc's through continuous batching, whose whole run, 16 prompts' prefill included, is the last column)")
    report["floors"] = {"prefill_ms": prefill_floor_ms, "hbm_bytes_per_s": HBM_BYTES_PER_S, "peak_flops": PEAK_FLOPS}
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
