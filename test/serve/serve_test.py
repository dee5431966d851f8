#!/usr/bin/env python3
"""`llmc serve` end to end: the demo decoder served on 127.0.0.1, driven with the `openai`
package (streaming and not) and with raw HTTP for the errors.

Checks: greedy completions equal transformers' greedy tokens (test/models/demo/generation.json,
compared as text through the server's own /detokenize); streamed deltas add up to the
non-streamed text and end with `data: [DONE]`; n, seeds, stop strings, logprobs, usage; every
error answered with OpenAI's error JSON and its status (400, 401, 404, 405, 413, 429); chat
completions equal to the conversation rendered by jinja2 and completed greedily, streamed and
not, logprobs, the engine's generation defaults, template errors, --chat-template;
a client that disconnects mid-stream cancels its request (read back from /metrics); SIGTERM
stops the server with exit 0. Exit 1 on any failure."""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import openai

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DEMO = os.path.join(ROOT, "test", "models", "demo")
KEY = "test-key-5f1c"

failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


class Server:
    def __init__(self, llmc, engine, *flags):
        self.proc = subprocess.Popen([llmc, "serve", engine, "--port", "0", *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        match = re.search(r"listening on http://[\d.]+:(\d+)", line)
        if not match:
            raise RuntimeError(f"no listening line: {line!r} {self.proc.stderr.read()}")
        self.port = int(match.group(1))
        deadline = time.time() + 60
        while time.time() < deadline:
            status, _ = self.request("GET", "/health")
            if status == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("the server never became healthy")

    def request(self, method, path, body=None, headers=None, raw=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        all_headers = {"Authorization": f"Bearer {KEY}"}
        all_headers.update(headers or {})
        if body is not None and raw is None:
            raw = json.dumps(body)
            all_headers["Content-Type"] = "application/json"
        conn.request(method, path, body=raw, headers=all_headers)
        response = conn.getresponse()
        data = response.read()
        conn.close()
        self.last_headers = dict(response.getheaders())
        return response.status, data

    def metric(self, name, labels=""):
        _, text = self.request("GET", "/metrics")
        for line in text.decode().splitlines():
            if line.startswith(name + "{") and labels in line:
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        return self.proc.returncode, out, err


def is_error_json(data, status):
    try:
        body = json.loads(data)
    except ValueError:
        return False
    error = body.get("error", {})
    return isinstance(error.get("message"), str) and error.get("code") == status and "type" in error


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--llmc", required=True)
    args = parser.parse_args()

    with open(os.path.join(DEMO, "generation.json")) as f:
        reference = json.load(f)
    with tempfile.TemporaryDirectory(prefix="llmc-serve-") as tmp:
        engine = os.path.join(tmp, "demo.engine")
        plain = os.path.join(tmp, "plain.engine")  # without the chat and generation configs
        common = [os.path.join(DEMO, "model.onnx"), "--tokenizer", os.path.join(DEMO, "tokenizer.json"),
                  "--max-context", "256", "--eos-id", "0"]
        subprocess.run([args.llmc, "compile", *common, "-o", engine,
                        "--tokenizer-config", os.path.join(DEMO, "tokenizer_config.json"),
                        "--generation-config", os.path.join(DEMO, "generation_config.json")],
                       check=True, capture_output=True)
        subprocess.run([args.llmc, "compile", *common, "-o", plain], check=True, capture_output=True)
        server = Server(args.llmc, engine, "--api-key", KEY, "--max-body-bytes", "65536",
                        "--max-prompt-tokens", "200", "--max-running", "4", "--max-queue", "3")
        base = f"http://127.0.0.1:{server.port}/v1"
        client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0)
        try:
            run_checks(server, client, reference)
        finally:
            code, out, err = server.stop()
        check(code == 0 and "stopped" in out, f"SIGTERM: exit {code}, {out.strip()!r} {err.strip()[-300:]!r}")
        # The engine without a chat template: chat is refused; --chat-template supplies one.
        server = Server(args.llmc, plain)
        try:
            status, data = server.request("POST", "/v1/chat/completions",
                                          {"messages": [{"role": "user", "content": "hi"}]})
            check(status == 400 and b"no chat template" in data, f"chat without a template: {status} {data[:100]!r}")
        finally:
            server.stop()
        template_file = os.path.join(tmp, "other.jinja")
        with open(template_file, "w") as f:
            f.write("{% if tools %}{{ raise_exception('tools: ' ~ tools | tojson) }}{% endif %}"
                    "{% for m in messages %}<{{ m.role }}> {{ m.content }}\n{% endfor %}")
        server = Server(args.llmc, plain, "--chat-template", template_file, "--write-timeout", "0.1",
                        "--read-timeout", "1")
        try:
            run_connection_checks(server)
            chat = chat_text(server, [{"role": "user", "content": "And God said"}], max_tokens=8)
            expected = completion_of(server, jinja_render(open(template_file).read(),
                                                          [{"role": "user", "content": "And God said"}]), 8)
            check(chat == expected, f"--chat-template replaces the template: {chat!r}")
            # The template sees the request's objects with their keys in the order sent (a tool's
            # parameters are printed in it), as transformers' templates see Python dicts.
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from chat_templates import TOOLS
            status, data = server.request("POST", "/v1/chat/completions",
                                          {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS})
            message = json.loads(data)["error"]["message"] if status == 400 else data[:200]
            check(status == 400 and message.endswith("tools: " + json.dumps(TOOLS, ensure_ascii=False)),
                  f"tools reach the template in the order sent: {status} {message!r}")
        finally:
            server.stop()
        # A KV cache of 128 tokens and six 50-token requests at once: the newest are preempted
        # and recompute, and each answer is what the request gets alone.
        server = Server(args.llmc, plain, "--kv-cache-tokens", "128", "--max-running", "8")
        try:
            run_preemption_checks(server)
        finally:
            code, _, _ = server.stop()
        check(code == 0, "the preempting server stops with exit 0")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    print(f"{'FAILED' if failures else 'passed'}: {len(failures)} failure(s)")
    return 1 if failures else 0


def jinja_render(template, messages, add_generation_prompt=True):
    """The conversation as transformers renders it (chat_templates.py checks llmc's renderer
    against the same environment on real templates)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from chat_templates import environment
    return environment().from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                      eos_token="<|endoftext|>", bos_token=None, unk_token=None)


def completion_of(server, text, max_tokens):
    """Greedy completion of `text` tokenized without special tokens, as chat prompts are."""
    _, data = server.request("POST", "/tokenize", {"prompt": text, "add_special_tokens": False})
    ids = json.loads(data)["tokens"]
    _, data = server.request("POST", "/v1/completions", {"prompt": ids, "max_tokens": max_tokens, "temperature": 0,
                                                          "ignore_eos": True})
    return json.loads(data)["choices"][0]["text"]


def chat_text(server, messages, max_tokens):
    status, data = server.request("POST", "/v1/chat/completions", {"messages": messages, "max_tokens": max_tokens,
                                                                   "temperature": 0, "ignore_eos": True})
    if status != 200:
        return f"status {status}: {data[:200]!r}"
    return json.loads(data)["choices"][0]["message"]["content"]


def raw_exchange(port, payload, responses=1, timeout=10):
    """Sends `payload` on one connection and reads `responses` complete responses (by
    Content-Length or until the chunked body's end); returns them and the socket."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(payload)
    data = b""
    out = []
    while len(out) < responses:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
        while True:
            head_end = data.find(b"\r\n\r\n")
            if head_end < 0:
                break
            head = data[:head_end].decode()
            match = re.search(r"content-length: (\d+)", head, re.I)
            if match:
                end = head_end + 4 + int(match.group(1))
            else:
                end = data.find(b"\r\n0\r\n\r\n", head_end)
                end = -1 if end < 0 else end + 7
            if end < 0 or len(data) < end:
                break
            out.append(data[:end])
            data = data[end:]
    return out, s


def post(body):
    data = json.dumps(body).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
            str(len(data)).encode() + b"\r\n\r\n" + data)


def run_preemption_checks(server):
    prompts = ["And God said", "In the beginning", "The LORD is my shepherd", "And Moses spake",
               "Blessed are the meek", "And it came to pass"]

    def complete(prompt):
        status, data = server.request("POST", "/v1/completions",
                                      {"prompt": prompt, "max_tokens": 40, "temperature": 0, "ignore_eos": True})
        return json.loads(data)["choices"][0]["text"] if status == 200 else f"status {status}"

    together = [None] * len(prompts)
    threads = [threading.Thread(target=lambda i=i: together.__setitem__(i, complete(prompts[i])))
               for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    preempted = server.metric("vllm:num_preemptions_total")
    alone = [complete(p) for p in prompts]
    check(preempted > 0, f"a full KV cache preempts ({preempted:.0f} preemptions)")
    check(together == alone and all(not t.startswith("status") for t in together),
          "preempted requests answer what they answer alone")
    # The gauges follow the scheduler's last step, which may end after the last response.
    deadline = time.time() + 10
    while time.time() < deadline and (server.metric("vllm:num_requests_running") != 0 or
                                      server.metric("vllm:kv_cache_usage_perc") != 0):
        time.sleep(0.05)
    check(server.metric("vllm:num_requests_running") == 0 and server.metric("vllm:kv_cache_usage_perc") == 0,
          "nothing left running, no block held")


def run_connection_checks(server):
    """On a server with --write-timeout 0.1 --read-timeout 1."""
    # A stream longer than the write timeout is not cut (each write has its own timeout).
    responses, s = raw_exchange(server.port, post({"prompt": "And God said", "max_tokens": 250, "stream": True,
                                                   "temperature": 0, "ignore_eos": True,
                                                   "stream_options": {"include_usage": True}}), timeout=30)
    s.close()
    text = responses[0].decode() if responses else ""
    check('"completion_tokens":250' in text and "data: [DONE]" in text,
          f"a stream longer than --write-timeout completes ({len(text)} bytes)")
    # Two pipelined requests on one connection: both answered, in order.
    responses, s = raw_exchange(server.port, post({"prompt": "And", "max_tokens": 3, "temperature": 0}) +
                                post({"prompt": "God", "max_tokens": 4, "temperature": 0}), responses=2)
    check(len(responses) == 2 and all(r.startswith(b"HTTP/1.1 200") for r in responses) and
          b'"completion_tokens":3' in responses[0] and b'"completion_tokens":4' in responses[1],
          f"pipelined requests: {len(responses)} answered in order")
    # An idle keep-alive connection is closed after the read timeout.
    s.settimeout(5)
    start = time.time()
    try:
        closed = s.recv(1) == b""
    except (socket.timeout, ConnectionError):
        closed = False
    s.close()
    check(closed and time.time() - start < 4, f"idle keep-alive closed after --read-timeout ({time.time() - start:.1f} s)")


def run_chat_checks(server, client):
    with open(os.path.join(DEMO, "tokenizer_config.json")) as f:
        template = json.load(f)["chat_template"]
    conversation = [{"role": "system", "content": "The words of the book."},
                    {"role": "user", "content": "Who created the heaven and the earth?"},
                    {"role": "assistant", "content": "God."},
                    {"role": "user", "content": "And what was upon the face of the deep?"}]
    expected = completion_of(server, jinja_render(template, conversation), 24)
    result = client.chat.completions.create(model="demo", messages=conversation, max_tokens=24, temperature=0,
                                            extra_body={"ignore_eos": True})
    choice = result.choices[0]
    check(choice.message.role == "assistant" and choice.message.content == expected and
          choice.finish_reason == "length" and result.object == "chat.completion",
          f"chat = the template rendered by jinja2, completed greedily ({choice.message.content[:40]!r})")
    stream = client.chat.completions.create(model="demo", messages=conversation, max_tokens=24, temperature=0,
                                            stream=True, extra_body={"ignore_eos": True})
    roles, text, reasons = [], "", []
    for chunk in stream:
        for c in chunk.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            text += c.delta.content or ""
            if c.finish_reason:
                reasons.append(c.finish_reason)
    check(roles == ["assistant"] and text == expected and reasons == ["length"],
          f"streamed chat: role first, same text ({reasons})")
    lp = client.chat.completions.create(model="demo", messages=conversation, max_tokens=4, temperature=0,
                                        logprobs=True, top_logprobs=2)
    content = lp.choices[0].logprobs.content
    check(len(content) == 4 and all(len(t.top_logprobs) == 2 and abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4
                                    and bytes(t.bytes).decode("utf-8", "replace") == t.token for t in content),
          "chat logprobs: tokens, bytes, two alternatives, greedy = most probable")
    # Streamed, the chunks' logprobs add up to the same list (sampled with a seed, so that the
    # chosen tokens are not always the most probable).
    for sampling in ({"temperature": 0}, {"temperature": 1.0, "seed": 11}):
        once = client.chat.completions.create(model="demo", messages=conversation, max_tokens=12, logprobs=True,
                                              top_logprobs=2, **sampling)
        streamed = []
        for chunk in client.chat.completions.create(model="demo", messages=conversation, max_tokens=12,
                                                    logprobs=True, top_logprobs=2, stream=True, **sampling):
            for c in chunk.choices:
                if c.logprobs:
                    streamed += c.logprobs.content
        check([t.model_dump() for t in streamed] == [t.model_dump() for t in once.choices[0].logprobs.content] and
              len(streamed) == once.usage.completion_tokens,
              f"streamed chat logprobs equal the non-streamed ones ({sampling}, {len(streamed)} tokens)")
    # The engine's generation_config.json (temperature 0.7, top_k 20) fills unset fields.
    unset = client.chat.completions.create(model="demo", messages=conversation, max_tokens=16, seed=5)
    explicit = client.chat.completions.create(model="demo", messages=conversation, max_tokens=16, seed=5,
                                              temperature=0.7, extra_body={"top_k": 20})
    other = client.chat.completions.create(model="demo", messages=conversation, max_tokens=16, seed=5,
                                           temperature=1.0)
    check(unset.choices[0].message.content == explicit.choices[0].message.content and
          unset.choices[0].message.content != other.choices[0].message.content,
          "unset sampling fields take the engine's generation config")
    status, data = server.request("POST", "/v1/chat/completions",
                                  {"messages": [{"role": "tool", "content": "x"}]})
    check(status == 400 and b"roles are system, user and assistant" in data and is_error_json(data, 400),
          f"the template's raise_exception becomes a 400: {data[:120]!r}")
    status, data = server.request("POST", "/v1/chat/completions",
                                  {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})
    check(status == 400 and is_error_json(data, 400), f"non-text content parts: {status}")
    status, data = server.request("POST", "/v1/chat/completions", {"messages": []})
    check(status == 400 and is_error_json(data, 400), "empty messages: 400")
    status, data = server.request("POST", "/v1/chat/completions",
                                  {"messages": [{"role": "user", "content": [{"type": 1}]}]})
    check(status == 400 and is_error_json(data, 400), f"a content part whose type is not a string: {status}")


def run_checks(server, client, reference):
    run_chat_checks(server, client)
    models = client.models.list()
    check([m.id for m in models.data] == ["demo"], f"/v1/models lists the engine: {[m.id for m in models.data]}")

    # Greedy against transformers' tokens (eos off there: ignore_eos here).
    for case in reference["greedy"][:3]:
        status, data = server.request("POST", "/detokenize", {"tokens": case["new_tokens"]})
        expected = json.loads(data)["prompt"]
        result = client.completions.create(model="demo", prompt=case["prompt"], max_tokens=case["max_new_tokens"],
                                           temperature=0, extra_body={"ignore_eos": True})
        choice = result.choices[0]
        check(choice.text == expected and choice.finish_reason == "length",
              f"greedy completion of {len(case['prompt'])} prompt tokens equals transformers' "
              f"({choice.finish_reason}, {choice.text[:40]!r})")
        check(result.usage.prompt_tokens == len(case["prompt"]) and
              result.usage.completion_tokens == case["max_new_tokens"],
              f"usage {result.usage.prompt_tokens} + {result.usage.completion_tokens}")
        # The same streamed.
        stream = client.completions.create(model="demo", prompt=case["prompt"], max_tokens=case["max_new_tokens"],
                                           temperature=0, stream=True, stream_options={"include_usage": True},
                                           extra_body={"ignore_eos": True})
        text, reasons, usage = "", [], None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for c in chunk.choices:
                text += c.text
                if c.finish_reason:
                    reasons.append(c.finish_reason)
        check(text == expected and reasons == ["length"] and usage and
              usage.completion_tokens == case["max_new_tokens"],
              f"streamed deltas add up to the same text ({reasons}, usage {usage})")

    # Raw SSE framing: events then data: [DONE].
    status, data = server.request("POST", "/v1/completions",
                                  {"prompt": "In the beginning", "max_tokens": 5, "stream": True, "temperature": 0})
    events = [e for e in data.decode().split("\n\n") if e]
    check(status == 200 and events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events),
          f"SSE framing: {len(events)} events ending with [DONE]")

    # Text prompt, n choices and seeds.
    a = client.completions.create(model="demo", prompt="And God said", max_tokens=12, n=3, temperature=1.0, seed=11)
    b = client.completions.create(model="demo", prompt="And God said", max_tokens=12, n=3, temperature=1.0, seed=11)
    check(len(a.choices) == 3 and [c.index for c in a.choices] == [0, 1, 2], "n=3 gives three choices")
    check([c.text for c in a.choices] == [c.text for c in b.choices], "the same seed gives the same choices")
    check(len({c.text for c in a.choices}) > 1, "the choices of one request differ (a seed each)")
    # A batch of prompts.
    batch = client.completions.create(model="demo", prompt=["And God said", "In the beginning"], max_tokens=4,
                                      temperature=0)
    check(len(batch.choices) == 2, "a batch of two prompts gives two choices")

    # Stop strings: cut before the first one.
    full = client.completions.create(model="demo", prompt="And the LORD spake unto Moses", max_tokens=40,
                                     temperature=0, extra_body={"ignore_eos": True}).choices[0].text
    stop = full[len(full) // 2:len(full) // 2 + 3]
    cut = full[:full.find(stop)]
    stopped = client.completions.create(model="demo", prompt="And the LORD spake unto Moses", max_tokens=40,
                                        temperature=0, stop=[stop], extra_body={"ignore_eos": True})
    check(stopped.choices[0].text == cut and stopped.choices[0].finish_reason == "stop",
          f"stop string {stop!r}: text {stopped.choices[0].text!r} ({stopped.choices[0].finish_reason})")
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="demo", prompt="And the LORD spake unto Moses", max_tokens=40, temperature=0, stop=[stop],
        stream=True, extra_body={"ignore_eos": True}) if c.choices)
    check(streamed == cut, f"stop string when streaming: {streamed!r}")

    # Logprobs: the top alternatives include the chosen token; greedy chooses the most probable.
    lp = client.completions.create(model="demo", prompt="And God said", max_tokens=5, temperature=0, logprobs=3)
    logprobs = lp.choices[0].logprobs
    check(logprobs is not None and len(logprobs.tokens) == 5 and len(logprobs.top_logprobs) == 5 and
          all(len(t) <= 3 for t in logprobs.top_logprobs) and
          all(abs(max(t.values()) - v) < 1e-4 for t, v in zip(logprobs.top_logprobs, logprobs.token_logprobs)),
          "logprobs: five tokens, greedy picks the most probable")
    # Streamed, the chunks' logprobs add up to the same lists, text offsets included; with a
    # stop string, both end at the token that completed it.
    for extra in ({"temperature": 0}, {"temperature": 1.0, "seed": 3}, {"temperature": 0, "stop": [stop]}):
        request = dict(model="demo", prompt="And the LORD spake unto Moses", max_tokens=40, logprobs=2,
                       extra_body={"ignore_eos": True}, **extra)
        once = client.completions.create(**request).choices[0]
        lists = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        text = ""
        for chunk in client.completions.create(stream=True, **request):
            for c in chunk.choices:
                text += c.text
                if c.logprobs:
                    for key in lists:
                        lists[key] += getattr(c.logprobs, key)
        want = {key: getattr(once.logprobs, key) for key in lists}
        check(lists == want and text == once.text and len(lists["tokens"]) > 0,
              f"streamed logprobs equal the non-streamed ones ({extra}, {len(lists['tokens'])} tokens)")

    # Tokenize / detokenize.
    status, data = server.request("POST", "/tokenize", {"prompt": "In the beginning God created"})
    tokens = json.loads(data)["tokens"]
    status2, data2 = server.request("POST", "/detokenize", {"tokens": tokens})
    check(status == 200 and status2 == 200 and json.loads(data2)["prompt"].endswith("In the beginning God created"),
          f"tokenize/detokenize round trip ({len(tokens)} tokens)")

    # Errors: status and OpenAI's error JSON.
    def expect(status_wanted, method, path, body=None, raw=None, headers=None, what=""):
        status, data = server.request(method, path, body, headers=headers, raw=raw)
        check(status == status_wanted and is_error_json(data, status_wanted),
              f"{what}: {status} {data[:120]!r}")

    expect(401, "POST", "/v1/completions", {"prompt": "x"}, headers={"Authorization": "Bearer wrong"},
           what="wrong API key")
    expect(401, "GET", "/v1/models", headers={"Authorization": ""}, what="no API key")
    expect(404, "GET", "/v2/nothing", what="unknown route")
    expect(404, "POST", "/v1/completions", {"model": "gpt-4", "prompt": "x"}, what="unknown model")
    expect(405, "GET", "/v1/completions", what="GET on completions")
    expect(400, "POST", "/v1/completions", raw="{not json", headers={"Content-Type": "application/json"},
           what="malformed JSON")
    expect(400, "POST", "/v1/completions", {"prompt": "x", "temperature": -1}, what="negative temperature")
    expect(400, "POST", "/v1/completions", {"prompt": "x", "max_tokens": "ten"}, what="max_tokens not an integer")
    expect(400, "POST", "/v1/completions", {"prompt": [5, 99999]}, what="a token id outside the vocabulary")
    expect(400, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 300}, what="max_tokens past the context")
    expect(400, "POST", "/v1/completions", {"prompt": list(range(1, 150)), "max_tokens": 120},
           what="prompt + max_tokens past the context")
    expect(400, "POST", "/v1/completions", {"prompt": "x", "n": 100}, what="n over the limit")
    expect(400, "POST", "/v1/completions", {"prompt": "x", "n": 4}, what="prompts x n over the queue")
    expect(400, "POST", "/v1/completions", raw='{"prompt": ' + "[" * 30000 + "]" * 30000 + "}",
           headers={"Content-Type": "application/json"}, what="JSON nested 30,000 deep")
    expect(400, "POST", "/v1/completions", {"prompt": "x", "logit_bias": {"abc": 1}}, what="bad logit_bias key")
    expect(413, "POST", "/v1/completions", {"prompt": list(range(1, 230)), "max_tokens": 1},
           what="prompt over --max-prompt-tokens")
    expect(413, "POST", "/v1/completions", raw=json.dumps({"prompt": "x" * 70000}),
           headers={"Content-Type": "application/json"}, what="body over --max-body-bytes")
    try:
        client.completions.create(model="demo", prompt="x", temperature=-3)
        check(False, "the openai client sees a 400 as BadRequestError")
    except openai.BadRequestError as e:
        check(e.status_code == 400, "the openai client sees a 400 as BadRequestError")
    # Malformed HTTP on a raw socket: a 400, and the server lives on.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"NOT A REQUEST\r\n\r\n")
        reply = s.recv(4096)
    check(reply.startswith(b"HTTP/1.1 400"), f"malformed HTTP: {reply[:40]!r}")

    # A client that disconnects mid-stream: its request is cancelled.
    cancelled_before = server.metric("vllm:request_success_total", 'finished_reason="cancelled"')
    body = json.dumps({"prompt": "And God said", "max_tokens": 200, "stream": True, "temperature": 0,
                       "ignore_eos": True}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
                  b"\r\n\r\n" + body)
        first = s.recv(4096)
    deadline = time.time() + 10
    while time.time() < deadline and server.metric("vllm:request_success_total",
                                                     'finished_reason="cancelled"') <= cancelled_before:
        time.sleep(0.05)
    check(b"200 OK" in first and server.metric("vllm:request_success_total", 'finished_reason="cancelled"')
          == cancelled_before + 1, "a client gone mid-stream cancels its request")
    time.sleep(0.2)
    check(server.metric("vllm:num_requests_running") == 0, "no request left running")

    # Over the queue: 429 with Retry-After, and the rest complete.
    results = []

    def one():
        results.append(server.request("POST", "/v1/completions",
                                      {"prompt": "And God said", "max_tokens": 100, "temperature": 0,
                                       "ignore_eos": True}))
    threads = [threading.Thread(target=one) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted(status for status, _ in results)
    check(statuses.count(429) > 0 and statuses.count(200) + statuses.count(429) == 16 and
          all(is_error_json(d, 429) for s, d in results if s == 429),
          f"16 at once over a queue of 3: {statuses.count(200)} done, {statuses.count(429)} answered 429")

    # Metrics: vLLM's names, and counts that add up.
    _, text = server.request("GET", "/metrics")
    text = text.decode()
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total",
                 "vllm:prefix_cache_hits_total", "vllm:time_to_first_token_seconds_bucket",
                 "vllm:inter_token_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_count",
                 "vllm:request_queue_time_seconds_sum", "vllm:request_success_total", "llmc:request_errors_total"]:
        check(name in text, f"/metrics has {name}")
    check(server.metric("vllm:prefix_cache_hits_total") > 0, "repeated prompts hit the prefix cache")
    status, _ = server.request("GET", "/health")
    check(status == 200, "healthy after the faults")


if __name__ == "__main__":
    sys.exit(main())
