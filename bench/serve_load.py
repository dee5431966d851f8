#!/usr/bin/env python3
"""Load and fault test of `llmc serve`, on 127.0.0.1 only.

Phases, one server per model:
  1. Poisson arrivals at each --rates for --duration seconds: streaming completions through the
     `openai` package's async client, each with a random prompt of --prompt-tokens and
     --max-tokens new tokens. Per request: time to first token (TTFT), inter-token latencies
     (ITL), end-to-end latency; per rate: request throughput, output tokens/s and goodput
     (requests/s that met --slo-ttft and --slo-itl), as vLLM's serving benchmark defines them.
     In the same run, at every rate: clients that disconnect mid-stream, malformed JSON,
     oversized bodies, and a burst of more requests than the queue takes (those must be
     answered 429). Every well-formed request must succeed (or, in the burst, get a 429).
  2. Continuous batching against one request at a time: the same --batch-requests requests sent
     all at once, then one after another; output tokens/s of each.
  3. Prefix caching: requests that share a --system-tokens system prompt, against requests of
     the same length that share nothing; TTFT and prefilled tokens (prompt tokens minus prefix
     cache hits, from /metrics).
  4. Decode while long prompts arrive, at each --step-budgets value of --max-step-tokens: the
     inter-token latency of running streams (prefill is chunked to the step's budget, decode
     tokens go first).
Server RSS at the start and the end, preemptions, and /health afterwards. --kv-cache-tokens
shrinks the server's KV cache so that the load phase runs short of blocks (preemption).

  .venv/bin/python bench/serve_load.py --llmc build/tools/llmc/llmc --model demo
  .venv-gen/bin/python bench/serve_load.py --llmc build/tools/llmc/llmc --model llama110m --work DIR

`demo` is the bundled 1.8M-parameter decoder (context 256); `llama110m` is bench/peers.py's
random 110M Llama (context 4096) exported by Optimum, compiled at 8 bits (needs torch,
transformers, optimum and sentencepiece: .venv-gen). Prints the CPU and one table per phase."""
import argparse
import asyncio
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
DEMO = os.path.join(ROOT, "test", "models", "demo")
sys.path.insert(0, HERE)
import peers  # noqa: E402  (the 110M checkpoint, its export, cpu_line)


def prepare(model, llmc, work):
    """(engine, vocabulary size, context)."""
    engine = os.path.join(work, f"{model}.engine")
    if model == "demo":
        if not os.path.exists(engine):
            subprocess.run([llmc, "compile", os.path.join(DEMO, "model.onnx"), "-o", engine, "--tokenizer",
                            os.path.join(DEMO, "tokenizer.json"), "--max-context", "256", "--eos-id", "0"],
                           check=True, capture_output=True)
        return engine, 2048, 256
    if os.path.exists(engine):
        return engine, 1000, 4096
    hf_dir = os.path.join(work, "hf")
    os.makedirs(hf_dir, exist_ok=True)
    peers.make_checkpoint(hf_dir)
    tokenizer_json = os.path.join(hf_dir, "tokenizer.json")
    if not os.path.exists(tokenizer_json):
        import transformers
        transformers.LlamaTokenizerFast(vocab_file=os.path.join(hf_dir, "tokenizer.model")).save_pretrained(hf_dir)
        # The random model emits any of its 16,000 ids; the tokenizer knows 1,000. The rest
        # decode as visible placeholders (added tokens), so that every token has text.
        with open(tokenizer_json) as f:
            tok = json.load(f)
        known = max(t["id"] for t in tok["added_tokens"]) + 1
        known = max(known, len(tok["model"]["vocab"]))
        for i in range(known, peers.CONFIG["vocab_size"]):
            tok["added_tokens"].append({"id": i, "content": f"<x{i}>", "single_word": False, "lstrip": False,
                                        "rstrip": False, "normalized": False, "special": False})
        with open(tokenizer_json, "w") as f:
            json.dump(tok, f)
    onnx = peers.export_onnx(hf_dir, os.path.join(work, "onnx"))
    if not os.path.exists(engine):
        subprocess.run([llmc, "compile", onnx, "-o", engine, "--quantize", "int8", "--tokenizer", tokenizer_json,
                        "--max-context", "4096", "--eos-id", "2"], check=True, capture_output=True)
    return engine, 1000, 4096  # ids past the tokenizer's 1,000 are padding rows


class Server:
    def __init__(self, llmc, engine, flags):
        self.proc = subprocess.Popen([llmc, "serve", engine, "--port", "0", *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        match = re.search(r":(\d+)$", line.strip())
        if not match:
            raise RuntimeError(f"llmc serve did not start: {line!r} {self.proc.stderr.read()}")
        self.port = int(match.group(1))
        self.base = f"http://127.0.0.1:{self.port}"
        for _ in range(600):
            if self.http("GET", "/health")[0] == 200:
                break
            time.sleep(0.05)

    def http(self, method, path, body=None, raw=None, timeout=60):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {"Content-Type": "application/json"}
        conn.request(method, path, body=raw if raw is not None else (json.dumps(body) if body is not None else None),
                     headers=headers)
        response = conn.getresponse()
        data = response.read()
        conn.close()
        return response.status, data

    def metrics(self):
        _, text = self.http("GET", "/metrics")
        values = {}
        for line in text.decode().splitlines():
            if line.startswith("#"):
                continue
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
        return values

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        return self.proc.returncode


def metric(values, name, labels=""):
    return sum(v for k, v in values.items() if k.startswith(name + "{") and labels in k)


def async_client(server, args):
    """openai's async client on the server; `model_name` is the served model's id."""
    import openai
    client = openai.AsyncOpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=600)
    client.model_name = os.path.splitext(os.path.basename(args.engine_path))[0]
    return client


async def stream_one(client, prompt, max_tokens):
    """One streaming completion: (ok, ttft, itls, e2e, tokens, error)."""
    start = time.perf_counter()
    first, last, itls, tokens = None, None, [], 0
    try:
        stream = await client.completions.create(model=client.model_name, prompt=prompt, max_tokens=max_tokens,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True},
                                                 extra_body={"ignore_eos": True})
        usage = None
        async for chunk in stream:
            now = time.perf_counter()
            if chunk.usage:
                usage = chunk.usage
            if chunk.choices and chunk.choices[0].text:
                if first is None:
                    first = now
                elif last is not None:
                    itls.append(now - last)
                last = now
        tokens = usage.completion_tokens if usage else 0
        ok = tokens == max_tokens
        return ok, (first or time.perf_counter()) - start, itls, time.perf_counter() - start, tokens, \
            None if ok else f"{tokens} tokens"
    except Exception as e:  # noqa: BLE001: every failure is counted and reported
        return False, 0, [], time.perf_counter() - start, tokens, f"{type(e).__name__}: {e}"


async def raw_fault(port, payload, read_first=False, read_all=False):
    """Sends raw bytes; returns the status line's code ('closed', 'reset' or 'timeout' when
    there is none)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
    except ConnectionError:
        pass  # the server may answer and close before it has read everything (413)
    try:
        line = await asyncio.wait_for(reader.readline(), 30)
        if read_first:
            await asyncio.wait_for(reader.read(200), 30)  # some of the stream, then hang up
        if read_all:  # the whole response (Content-Length)
            length = 0
            while True:
                header = await asyncio.wait_for(reader.readline(), 600)
                if header.lower().startswith(b"content-length:"):
                    length = int(header.split(b":")[1])
                if header in (b"\r\n", b""):
                    break
            await asyncio.wait_for(reader.readexactly(length), 600)
        code = line.split()[1].decode() if len(line.split()) > 1 else "closed"
    except asyncio.TimeoutError:
        code = "timeout"
    except ConnectionError:
        code = "reset"
    writer.close()
    return code


def http_request(body, path="/v1/completions"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


async def faults(port, vocab, prompt_tokens):
    """One of each fault; returns [(fault, expected, got)]."""
    rng = random.Random(5)
    prompt = [rng.randrange(1, vocab) for _ in range(prompt_tokens)]
    results = []
    code = await raw_fault(port, http_request({"prompt": prompt, "max_tokens": 64, "stream": True,
                                               "ignore_eos": True}), read_first=True)
    results.append(("disconnect mid-stream", "200", code))
    code = await raw_fault(port, http_request(b'{"prompt": [1, 2'))
    results.append(("malformed JSON", "400", code))
    code = await raw_fault(port, http_request(json.dumps({"prompt": "x" * (2 << 20)}).encode()))
    results.append(("oversized body", "413", code))
    code = await raw_fault(port, b"GARBAGE\r\n\r\n")
    results.append(("malformed HTTP", "400", code))
    return results


async def run_rate(server, client, rate, duration, prompt_tokens, max_tokens, vocab, burst, seed):
    rng = random.Random(seed)
    tasks, start = [], time.perf_counter()
    fault_task = asyncio.create_task(faults(server.port, vocab, prompt_tokens))
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t > duration:
            break
        await asyncio.sleep(max(0.0, start + t - time.perf_counter()))
        prompt = [rng.randrange(1, vocab) for _ in range(prompt_tokens)]
        tasks.append(asyncio.create_task(stream_one(client, prompt, max_tokens)))
        if len(tasks) == 3:  # a burst past the queue, once per rate: each its own connection
            payload = http_request({"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                                    "temperature": 0})
            burst_tasks = [asyncio.create_task(raw_fault(server.port, payload, read_all=True))
                           for _ in range(burst)]
    results = await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    burst_results = await asyncio.gather(*burst_tasks) if tasks and len(tasks) >= 3 else []
    fault_results = await fault_task
    return results, elapsed, burst_results, fault_results


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


async def load_phase(args, server, vocab):
    client = async_client(server, args)
    print(f"\n## Poisson arrivals, {args.duration:.0f} s per rate, prompt {args.prompt_tokens} tokens, "
          f"{args.max_tokens} new tokens, streaming; SLO: TTFT <= {args.slo_ttft * 1000:.0f} ms, "
          f"mean ITL <= {args.slo_itl * 1000:.0f} ms\n")
    print("| rate (req/s) | requests | failed | 429 | req/s | output tok/s | goodput (req/s) | TTFT median [p99] ms "
          "| ITL median [p99] ms | e2e median [p99] s | burst: 200 / 429 / other | faults | RSS after, MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    all_ok = True
    for i, rate in enumerate(args.rates):
        results, elapsed, burst, fault_results = await run_rate(
            server, client, rate, args.duration, args.prompt_tokens, args.max_tokens, vocab, args.burst, 100 + i)
        ok = [r for r in results if r[0]]
        # A Poisson request that meets the burst's full queue is answered 429: the right answer
        # under overload, counted apart from failures.
        rejected = [r for r in results if not r[0] and r[5] and "429" in r[5]]
        failed = [r for r in results if not r[0] and r not in rejected]
        ttft = [r[1] for r in ok]
        itl = [x for r in ok for x in r[2]]
        e2e = [r[3] for r in ok]
        tokens = sum(r[4] for r in ok)
        good = [r for r in ok if r[1] <= args.slo_ttft and (not r[2] or statistics.mean(r[2]) <= args.slo_itl)]
        codes = [int(c) if c.isdigit() else c for c in burst]
        burst_other = [c for c in codes if c not in (200, 429)]
        fault_ok = all(got == want for _, want, got in fault_results)
        all_ok = all_ok and not failed and not burst_other and fault_ok
        print(f"| {rate:g} | {len(results)} | {len(failed)} | {len(rejected)} | {len(ok) / elapsed:.2f} | {tokens / elapsed:.1f} | "
              f"{len(good) / elapsed:.2f} | {statistics.median(ttft) * 1000 if ttft else float('nan'):.0f} "
              f"[{pct(ttft, 99) * 1000:.0f}] | {statistics.median(itl) * 1000 if itl else float('nan'):.1f} "
              f"[{pct(itl, 99) * 1000:.1f}] | {statistics.median(e2e) if e2e else float('nan'):.2f} [{pct(e2e, 99):.2f}] | "
              f"{codes.count(200)} / {codes.count(429)} / {len(burst_other)} | "
              f"{'all as expected' if fault_ok else fault_results} | {server.rss_mib():.0f} |")
        for r in failed[:3]:
            print(f"  failed: {r[5]}")
    await client.close()
    return all_ok


async def batching_phase(args, server, vocab):
    client = async_client(server, args)
    rng = random.Random(7)
    prompts = [[rng.randrange(1, vocab) for _ in range(args.prompt_tokens)] for _ in range(args.batch_requests)]
    start = time.perf_counter()
    together = await asyncio.gather(*(stream_one(client, p, args.max_tokens) for p in prompts))
    t_together = time.perf_counter() - start
    start = time.perf_counter()
    alone = [await stream_one(client, p, args.max_tokens) for p in prompts]
    t_alone = time.perf_counter() - start
    tokens = sum(r[4] for r in together)
    print(f"\n## Continuous batching: {args.batch_requests} requests of {args.prompt_tokens} + {args.max_tokens} tokens\n")
    print("| sent | wall s | output tok/s | failed |\n|---|---|---|---|")
    print(f"| all at once | {t_together:.2f} | {tokens / t_together:.1f} | {sum(not r[0] for r in together)} |")
    print(f"| one at a time | {t_alone:.2f} | {sum(r[4] for r in alone) / t_alone:.1f} | {sum(not r[0] for r in alone)} |")
    print(f"\nbatched over sequential: {t_alone / t_together:.2f}x")
    await client.close()
    return all(r[0] for r in together + alone)


async def prefix_phase(args, server, vocab):
    client = async_client(server, args)
    rng = random.Random(11)
    system = [rng.randrange(1, vocab) for _ in range(args.system_tokens)]
    results = {}
    for kind in ("unshared", "shared"):
        before = server.metrics()
        ttfts = []
        for i in range(args.prefix_requests):
            head = system if kind == "shared" else [rng.randrange(1, vocab) for _ in range(args.system_tokens)]
            prompt = head + [rng.randrange(1, vocab) for _ in range(32)]
            # One new token, not streamed: the request's time is its time to first token.
            start = time.perf_counter()
            status, _ = server.http("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 1,
                                                                "temperature": 0, "ignore_eos": True})
            ttfts.append(time.perf_counter() - start)
            if status != 200:
                raise RuntimeError(f"prefix phase: status {status}")
        after = server.metrics()
        prompt_tokens = metric(after, "vllm:prompt_tokens_total") - metric(before, "vllm:prompt_tokens_total")
        hits = metric(after, "vllm:prefix_cache_hits_total") - metric(before, "vllm:prefix_cache_hits_total")
        results[kind] = (statistics.median(ttfts[1:]), prompt_tokens, prompt_tokens - hits)
    print(f"\n## Prefix caching: {args.prefix_requests} requests, one after another, of a {args.system_tokens}-token "
          f"system prompt + 32 tokens, 1 new token each (raw HTTP, not streamed: the time is TTFT)\n")
    print("| system prompt | TTFT median (2nd request on) ms | prompt tokens | prefilled tokens |\n|---|---|---|---|")
    for kind, (ttft, prompt_tokens, prefilled) in results.items():
        print(f"| {kind} | {ttft * 1000:.1f} | {prompt_tokens:.0f} | {prefilled:.0f} |")
    saving = 1 - results["shared"][2] / results["unshared"][2]
    print(f"\nprefilled tokens saved: {saving * 100:.0f}%; TTFT {results['unshared'][0] / results['shared'][0]:.2f}x faster")
    await client.close()


async def raw_stream(port, prompt, max_tokens):
    """A streaming completion over a raw connection: the gaps between its events (s) and
    whether it completed. (The openai client's own per-chunk work adds jitter to ITL; this
    phase measures the server.)"""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(http_request({"prompt": prompt, "max_tokens": max_tokens, "stream": True, "temperature": 0,
                               "ignore_eos": True}))
    await writer.drain()
    last, gaps, done = None, [], False
    while True:
        line = await asyncio.wait_for(reader.readline(), 600)
        if not line:
            break
        if line.startswith(b"data: [DONE]"):
            done = True
            break
        if line.startswith(b"data: "):
            now = time.perf_counter()
            if last is not None:
                gaps.append(now - last)
            last = now
    writer.close()
    return gaps, done


async def interference_once(args, server, vocab):
    rng = random.Random(13)
    decoders = [asyncio.create_task(raw_stream(server.port, [rng.randrange(1, vocab) for _ in range(16)],
                                               args.interference_decode_tokens)) for _ in range(4)]
    await asyncio.sleep(1.0)
    long_prompts = []
    for _ in range(3):
        prompt = [rng.randrange(1, vocab) for _ in range(args.long_prompt_tokens)]
        long_prompts.append(asyncio.create_task(raw_fault(server.port, http_request(
            {"prompt": prompt, "max_tokens": 1, "temperature": 0}), read_all=True)))
        await asyncio.sleep(0.5)
    results = await asyncio.gather(*decoders)
    codes = await asyncio.gather(*long_prompts)
    itl = [x for gaps, _ in results for x in gaps]
    return itl, all(done for _, done in results) and all(c == "200" for c in codes)


def interference_phase(args, llmc, engine, vocab):
    """Decode streams while long prompts arrive, at two per-step token budgets."""
    print(f"\n## Decode while long prompts arrive: 4 streams of {args.interference_decode_tokens} tokens, "
          f"3 prompts of {args.long_prompt_tokens} tokens arriving 0.5 s apart\n")
    print("| --max-step-tokens | ITL median ms | ITL p99 ms | ITL max ms |\n|---|---|---|---|")
    ok = True
    for budget in args.step_budgets:
        server = Server(llmc, engine, ["--max-step-tokens", str(budget), "--threads", str(args.threads)])
        try:
            itl, good = asyncio.run(interference_once(args, server, vocab))
        finally:
            server.stop()
        ok = ok and good
        print(f"| {budget} | {statistics.median(itl) * 1000:.1f} | {pct(itl, 99) * 1000:.1f} | {max(itl) * 1000:.1f} |")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--model", choices=["demo", "llama110m"], default="demo")
    parser.add_argument("--work", help="keeps the engine between runs (default: a temporary directory)")
    parser.add_argument("--rates", type=float, nargs="+", default=[2, 4, 8])
    parser.add_argument("--duration", type=float, default=30)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--burst", type=int, default=40, help="requests sent at once past the queue")
    parser.add_argument("--max-queue", type=int, default=16)
    parser.add_argument("--slo-ttft", type=float, default=1.0)
    parser.add_argument("--slo-itl", type=float, default=0.1)
    parser.add_argument("--batch-requests", type=int, default=16)
    parser.add_argument("--system-tokens", type=int, default=512)
    parser.add_argument("--prefix-requests", type=int, default=8)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--kv-cache-tokens", type=int, default=0, help="the server's KV cache (0: its default)")
    parser.add_argument("--step-budgets", type=int, nargs="*", default=[256, 4096],
                        help="--max-step-tokens values for the interference phase (none: skip it)")
    parser.add_argument("--long-prompt-tokens", type=int, default=2000)
    parser.add_argument("--interference-decode-tokens", type=int, default=128)
    parser.add_argument("--only-interference", action="store_true", help="run phase 4 alone")
    args = parser.parse_args()
    print(f"CPU: {peers.cpu_line()}")
    with tempfile.TemporaryDirectory(prefix="llmc-serve-load-") as tmp:
        work = args.work or tmp
        os.makedirs(work, exist_ok=True)
        engine, vocab, context = prepare(args.model, args.llmc, work)
        args.engine_path = engine
        if args.only_interference:
            return 0 if interference_phase(args, args.llmc, engine, vocab) else 1
        if args.model == "demo":
            args.system_tokens = min(args.system_tokens, context - 64)
        flags = ["--max-queue", str(args.max_queue), "--threads", str(args.threads), "--max-running", "16"]
        if args.kv_cache_tokens:
            flags += ["--kv-cache-tokens", str(args.kv_cache_tokens)]
        server = Server(args.llmc, engine, flags)
        print(f"model: {args.model} ({engine}), llmc serve pid {server.proc.pid}")
        rss_start = server.rss_mib()
        try:
            ok = asyncio.run(load_phase(args, server, vocab))
            rss_load = server.rss_mib()
            ok = asyncio.run(batching_phase(args, server, vocab)) and ok
            asyncio.run(prefix_phase(args, server, vocab))
            healthy = server.http("GET", "/health")[0] == 200
            rss_end = server.rss_mib()
            m = server.metrics()
            print(f"\nRSS: {rss_start:.0f} MiB at start, {rss_load:.0f} after the load phase, {rss_end:.0f} at the end; "
                  f"healthy afterwards: {healthy}; requests finished: "
                  f"stop {metric(m, 'vllm:request_success_total', 'stop'):.0f}, "
                  f"length {metric(m, 'vllm:request_success_total', 'length'):.0f}, "
                  f"cancelled {metric(m, 'vllm:request_success_total', 'cancelled'):.0f}; "
                  f"preemptions {metric(m, 'vllm:num_preemptions_total'):.0f}; "
                  f"errors by status: {json.dumps({k.split('status=')[1].strip('}').strip(chr(34)): v for k, v in m.items() if k.startswith('llmc:request_errors_total{')})}")
        finally:
            code = server.stop()
        print(f"SIGTERM: exit {code}")
        if args.step_budgets and args.long_prompt_tokens + 1 <= context:
            ok = interference_phase(args, args.llmc, engine, vocab) and ok
        return 0 if ok and healthy and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
