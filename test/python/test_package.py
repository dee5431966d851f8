"""The llmc Python package against the llmc CLI and ONNX Runtime: compile, sessions, generation,
streaming, cancellation, the GIL, tokenizer and chat templates, errors."""

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import onnxruntime as ort
import pytest

import llmc
from conftest import MODELS


def load_inputs(model, input_set):
    manifest = json.loads((MODELS / model / "manifest.json").read_text())
    entry = next(s for s in manifest["input_sets"] if s["name"] == input_set)
    return {name: np.load(MODELS / model / rel) for name, rel in entry["inputs"].items()}


# ---- compile -------------------------------------------------------------------------------

def test_compile_folder_equals_cli(demo_engine, work):
    out = work / "demo-py.engine"
    result = llmc.compile(MODELS / "demo", out, max_context=256, progress=False)
    assert out.read_bytes() == demo_engine.read_bytes()
    assert result.llm_layers == 4 and result.steps > 0
    assert result.engine_bytes == out.stat().st_size
    assert "tokenizer.json" in result.from_dir


@pytest.mark.parametrize("options, flags", [
    (dict(dims={"batch": (1, 8)}, quantize="int8", keep_float=["/net/net.3/MatMul"], report=True),
     ["--dim", "batch=1:8", "--quantize", "int8", "--keep-float", "/net/net.3/MatMul", "--report"]),
    (dict(opt_level=0, strip_weights=True), ["--opt-level", "0", "--strip-weights"]),
    (dict(disable_pass=["fuse-norms", "fuse-elementwise"], as_graph=True),
     ["--disable-pass", "fuse-norms", "--disable-pass", "fuse-elementwise", "--as-graph"]),
])
def test_compile_options_equal_cli(cli, work, options, flags):
    model = MODELS / "mlp" / "model.onnx"
    py_out, cli_out = work / "mlp-py.engine", work / "mlp-cli.engine"
    llmc.compile(model, py_out, progress=False, **options)
    subprocess.run([cli, "compile", str(model), "-o", str(cli_out)] + flags, check=True,
                   capture_output=True)
    assert py_out.read_bytes() == cli_out.read_bytes()


def test_compile_errors(work):
    model = MODELS / "mlp" / "model.onnx"
    with pytest.raises(llmc.InvalidArgumentError, match="--quantize takes int8"):
        llmc.compile(model, work / "x.engine", quantize="int9")
    with pytest.raises(llmc.InvalidArgumentError, match="--dim"):
        llmc.compile(model, work / "x.engine", dims={"batch": (-3, 2)})
    with pytest.raises(llmc.NotFoundError):
        llmc.compile(work / "missing.onnx", work / "x.engine")
    with pytest.raises(TypeError, match="unknown option 'quantise'"):
        llmc.compile(model, work / "x.engine", quantise="int8")
    with pytest.raises(TypeError, match="flag"):
        llmc.compile(model, work / "x.engine", awq="yes")
    bad = work / "bad.onnx"
    bad.write_bytes(b"\x08\x07not a model")
    with pytest.raises(llmc.Error) as info:
        llmc.compile(bad, work / "x.engine")
    assert "bad.onnx" in str(info.value)
    assert not (work / "x.engine").exists()


def test_compile_progress(work, capfd):
    stages = []
    llmc.compile(MODELS / "demo", work / "p.engine", progress=stages.append, quantize="int8",
                 prune="magnitude:0.5")
    assert stages[0].startswith("importing") and stages[-1].startswith("writing")
    assert "pass llmc-fuse-norms" in stages and "pass llmc-quantize-weights" in stages
    products = [s for s in stages if s.startswith("quantize int8: product ")]
    assert products and products[-1].startswith(f"quantize int8: product {len(products)}/{len(products)} ")
    assert any(s.startswith("prune: product 1/") for s in stages)
    # Not a terminal: nothing on stderr unless asked.
    capfd.readouterr()
    llmc.compile(MODELS / "mlp" / "model.onnx", work / "q.engine")
    assert "llmc compile" not in capfd.readouterr().err


# ---- Engine and Session --------------------------------------------------------------------

def test_engine_metadata(demo_engine):
    engine = llmc.Engine(demo_engine)
    assert engine.inputs == [llmc.TensorInfo("input_ids", "int64", ["batch", "seq"])]
    assert engine.outputs[0].name == "logits" and engine.outputs[0].shape[2] == 2048
    meta = engine.metadata
    assert meta["format_version"].count(".") == 1 and meta["target"] == "cpu"
    assert meta["compiler_version"] == llmc.__version__
    assert meta["llm"]["num_layers"] == 4 and meta["llm"]["max_context"] == 256
    assert meta["symbols"] == [{"name": "batch", "min": 1, "max": None},
                               {"name": "seq", "min": 1, "max": None}]
    assert engine.tokenizer is not None


def test_symbol_relation_and_its_refusal(work):
    # Dimension names that hide a relation (llama_dims_past: total_seq = seq + past_seq): the
    # engine records it and a run that breaks it raises with the session's message.
    path = work / "dims.engine"
    with pytest.warns(UserWarning, match="dimension 'total_seq' taken as seq \\+ past_seq"):
        llmc.compile(MODELS / "llama_dims_past" / "model.onnx", path, as_graph=True,
                     dims={"past_seq": (0, -1)}, progress=False)
    engine = llmc.Engine(path)
    total = [s for s in engine.metadata["symbols"] if s["name"] == "total_seq"]
    assert total == [{"name": "total_seq", "min": 1, "max": None, "expression": "seq + past_seq"}]
    inputs = load_inputs("llama_dims_past", "chunk_b1_p5_s4")
    outputs = engine.session(threads=1).run(inputs)
    want = np.load(MODELS / "llama_tiny_past" / "chunk_b1_p5_s4" / "logits.npy")
    np.testing.assert_allclose(outputs["logits"], want, rtol=1e-4, atol=1e-5)
    inputs["attention_mask"] = inputs["attention_mask"][:, :-1]
    with pytest.raises(llmc.InvalidArgumentError, match=r"symbol 'total_seq' = 8 .* must equal seq \+ past_seq = 9"):
        engine.session(threads=1).run(inputs)


@pytest.mark.parametrize("model, input_set", [("mlp", "b1"), ("mlp", "b3"), ("demo", "b1_s16"),
                                              ("demo", "b2_s9")])
def test_run_equals_onnxruntime_and_cli(cli, work, model, input_set):
    engine_path = work / f"{model}-run.engine"
    llmc.compile(MODELS / model / "model.onnx", engine_path, progress=False)
    inputs = load_inputs(model, input_set)
    outputs = llmc.Engine(engine_path).session(threads=2).run(inputs)

    reference = ort.InferenceSession(str(MODELS / model / "model.onnx"),
                                     providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in reference.get_outputs()], reference.run(None, inputs)))
    assert list(outputs) == list(want)
    for name, value in outputs.items():
        np.testing.assert_allclose(value, want[name], rtol=1e-4, atol=1e-5)

    # The CLI's outputs on the same engine, bit for bit.
    out_dir = work / f"{model}-{input_set}-cli"
    args = [cli, "run", str(engine_path), "--output-dir", str(out_dir), "--threads", "2"]
    for name, value in inputs.items():
        np.save(work / f"{name}.npy", value)
        args += ["--input", f"{name}={work / (name + '.npy')}"]
    subprocess.run(args, check=True, capture_output=True)
    for name, value in outputs.items():
        assert np.array_equal(value, np.load(out_dir / f"{name}.npy"))


def test_run_zero_copy_and_layouts(work):
    engine_path = work / "mlp-layout.engine"
    llmc.compile(MODELS / "mlp" / "model.onnx", engine_path, progress=False)
    session = llmc.Engine(engine_path).session()
    x = load_inputs("mlp", "b3")["x"]
    out = session.run({"x": x})["probs"]
    # The output is the runtime's own buffer handed over, not a copy numpy owns.
    assert not out.flags.owndata and out.base is not None
    # A Fortran-ordered or strided view runs as its C-ordered copy: the same result.
    fortran = np.asfortranarray(x)
    assert np.array_equal(session.run({"x": fortran})["probs"], out)
    wide = np.zeros((x.shape[0], x.shape[1] * 2), dtype=x.dtype)
    wide[:, ::2] = x
    assert np.array_equal(session.run({"x": wide[:, ::2]})["probs"], out)
    # Anything with __dlpack__ (here a numpy array wrapped by DLPack's protocol) is read.
    class DLPackOnly:
        def __init__(self, a): self.a = a
        def __dlpack__(self, **kw): return self.a.__dlpack__(**kw)
        def __dlpack_device__(self): return self.a.__dlpack_device__()
    assert np.array_equal(session.run({"x": DLPackOnly(x)})["probs"], out)
    # Outputs outlive the session and later runs.
    keep = session.run({"x": x})["probs"]
    session.run({"x": x * 2})
    del session
    assert np.array_equal(keep, out)


def test_run_errors(demo_engine):
    session = llmc.Engine(demo_engine).session()
    ids = load_inputs("demo", "b1_s16")["input_ids"]
    with pytest.raises(llmc.InvalidArgumentError, match="input_ids.*int64"):
        session.run({"input_ids": ids.astype(np.int32)})
    with pytest.raises(llmc.InvalidArgumentError, match="input_ids"):
        session.run({})
    with pytest.raises(llmc.OutOfRangeError):
        session.run({"input_ids": np.zeros((1, 300), dtype=np.int64)})
    with pytest.raises(llmc.InvalidArgumentError, match="backend"):
        llmc.Engine(demo_engine).session(backend="tpu")


def test_corrupted_engine(demo_engine, work):
    data = bytearray(demo_engine.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad = work / "corrupted.engine"
    bad.write_bytes(bytes(data))
    with pytest.raises(llmc.DataLossError, match="corrupted.engine"):
        llmc.Engine(bad)
    with pytest.raises(llmc.NotFoundError):
        llmc.Engine(work / "none.engine")


# ---- Generator -----------------------------------------------------------------------------

def cli_generate(cli, engine, prompt, *flags):
    run = subprocess.run([cli, "generate", str(engine), "--prompt", prompt] + list(flags),
                         check=True, capture_output=True, text=True)
    return run.stdout


@pytest.mark.parametrize("sampling, flags", [
    ({}, []),
    (dict(temperature=0.8, top_k=40, top_p=0.9, seed=7),
     ["--temperature", "0.8", "--top-k", "40", "--top-p", "0.9", "--seed", "7"]),
    (dict(num_beams=3), ["--beam", "3"]),
])
def test_generate_equals_cli(cli, demo_engine, sampling, flags):
    prompt = "And God said"
    result = llmc.Generator(llmc.Engine(demo_engine)).generate(prompt, max_new_tokens=40,
                                                               **sampling)
    assert cli_generate(cli, demo_engine, prompt, "--max-new-tokens", "40", *flags) == \
        prompt + result.text + "\n"
    assert len(result.tokens) > 0 and result.finish_reason in ("length", "stop_token")


def test_optimum_folder_equals_transformers(work):
    """The folder optimum-cli wrote (test/models/optimum_llama): compiled from the folder, the
    package generates transformers' greedy tokens and text (expected.json)."""
    folder = MODELS / "optimum_llama"
    expected = json.loads((folder / "expected.json").read_text())
    llmc.compile(folder, work / "optimum.engine", progress=False)
    generator = llmc.Generator(llmc.Engine(work / "optimum.engine"))
    assert generator.uses_kv_cache
    for entry in expected["greedy"]:
        result = generator.generate(entry["prompt"], max_new_tokens=entry["max_new_tokens"])
        assert result.prompt_tokens == entry["prompt_ids"]
        assert result.tokens == entry["new_tokens"] and result.text == entry["text"]


def test_generate_ids_and_kv_cache_agree(demo_engine):
    engine = llmc.Engine(demo_engine)
    ids = engine.tokenizer.encode("In the beginning")
    cached = llmc.Generator(engine).generate(ids, max_new_tokens=24, stop_token_ids=[])
    full = llmc.Generator(engine, kv_cache=False).generate(ids, max_new_tokens=24,
                                                          stop_token_ids=[])
    assert cached.tokens == full.tokens and len(cached.tokens) == 24
    assert cached.finish_reason == "length"
    assert engine.tokenizer.decode(cached.tokens, skip_special_tokens=True) == cached.text


def _resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGESIZE")


def test_generator_kv_cache_prefault_and_dtype(demo_engine, work):
    """kv_cache_prefault=True writes the cache's pages when the generator is created (a lazy
    cache holds none of them then) and generates the same tokens; kv_cache_dtype is checked,
    and its default is the engine's choice (float32 for the float32 demo, float16 with int8
    weights)."""
    engine = llmc.Engine(demo_engine)
    ids = engine.tokenizer.encode("In the beginning")
    before = _resident_bytes()
    lazy = llmc.Generator(engine, kv_cache_tokens=8192)
    lazy_growth = _resident_bytes() - before
    before = _resident_bytes()
    eager = llmc.Generator(engine, kv_cache_tokens=8192, kv_cache_prefault=True)
    eager_growth = _resident_bytes() - before
    assert eager_growth >= 12 << 20 and lazy_growth < eager_growth / 4, (lazy_growth, eager_growth)
    assert eager.generate(ids, max_new_tokens=16, stop_token_ids=[]).tokens == \
        lazy.generate(ids, max_new_tokens=16, stop_token_ids=[]).tokens
    with pytest.raises(llmc.InvalidArgumentError, match="kv_cache_dtype takes .*got 'f64'"):
        llmc.Generator(engine, kv_cache_dtype="f64")
    assert lazy.kv_cache_dtype == "f32"
    assert llmc.Generator(engine, kv_cache_dtype="bf16").kv_cache_dtype == "bf16"
    assert llmc.Generator(engine, kv_cache=False).kv_cache_dtype is None
    llmc.compile(MODELS / "demo", work / "kv-int8.engine", quantize="int8")
    int8_engine = llmc.Engine(str(work / "kv-int8.engine"))
    assert llmc.Generator(int8_engine).kv_cache_dtype == "f16"
    assert llmc.Generator(int8_engine, kv_cache_dtype="f32").kv_cache_dtype == "f32"


def test_stream(demo_engine):
    generator = llmc.Generator(llmc.Engine(demo_engine))
    whole = generator.generate("The LORD is", max_new_tokens=30, stop_token_ids=[])
    stream = generator.stream("The LORD is", max_new_tokens=30, stop_token_ids=[])
    chunks = list(stream)
    assert [c.token for c in chunks if c.token >= 0] == whole.tokens
    assert "".join(c.text for c in chunks) == whole.text
    assert stream.result.tokens == whole.tokens
    # Leaving the loop early cancels the generation.
    stream = generator.stream("The LORD is", max_new_tokens=200, stop_token_ids=[])
    for i, _ in enumerate(stream):
        if i == 4:
            break
    assert stream.result.finish_reason == "cancelled"
    assert 5 <= len(stream.result.tokens) < 200


def test_stream_error_reaches_consumer(demo_engine):
    generator = llmc.Generator(llmc.Engine(demo_engine))
    with pytest.raises(llmc.OutOfRangeError):
        list(generator.stream([1] * 300, max_new_tokens=4))


def test_on_token_callback(demo_engine):
    generator = llmc.Generator(llmc.Engine(demo_engine))
    seen = []
    result = generator.generate("The LORD is", max_new_tokens=20, stop_token_ids=[],
                                on_token=lambda token, text: seen.append(token) or len(seen) < 6)
    assert result.finish_reason == "cancelled" and result.tokens == seen and len(seen) == 6

    def fail(token, text):
        raise KeyError("from the callback")
    with pytest.raises(KeyError, match="from the callback"):
        generator.generate("The LORD is", max_new_tokens=5, on_token=fail)
    # The generator stays usable after both.
    assert len(generator.generate("The LORD is", max_new_tokens=3, stop_token_ids=[]).tokens) == 3


def test_cancel_from_another_thread(demo_engine):
    # Full recomputation, 220 tokens: long enough to be cancelled in the middle.
    generator = llmc.Generator(llmc.Engine(demo_engine), kv_cache=False)
    assert generator.cancel() is False  # nothing runs
    results = []
    worker = threading.Thread(target=lambda: results.append(
        generator.generate([1, 2, 3], max_new_tokens=220, stop_token_ids=[])))
    worker.start()
    deadline = time.monotonic() + 60
    while not generator.cancel():
        assert worker.is_alive() and time.monotonic() < deadline, "the generation never ran"
        time.sleep(0.001)
    worker.join()
    assert results[0].finish_reason == "cancelled"
    assert len(results[0].tokens) < 220


def longest_pause_during(fn):
    """Runs fn on a thread and returns (fn's seconds, the longest gap between iterations of a
    Python loop on this thread meanwhile): with the GIL held by fn the gap is fn's whole time."""
    done = threading.Event()
    elapsed = []

    def work():
        start = time.perf_counter()
        fn()
        elapsed.append(time.perf_counter() - start)
        done.set()
    worker = threading.Thread(target=work)
    last, longest = time.perf_counter(), 0.0
    worker.start()
    while not done.is_set():
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    worker.join()
    return elapsed[0], longest


def test_gil_released(demo_engine):
    engine = llmc.Engine(demo_engine)
    session = engine.session(threads=1)
    ids = np.tile(np.arange(1, 241, dtype=np.int64), (4, 1))
    session.run({"input_ids": ids})  # warm
    run_seconds, pause = longest_pause_during(lambda: session.run({"input_ids": ids}))
    assert run_seconds > 0.05, f"a run of {run_seconds:.3f} s is too short to tell"
    assert pause < run_seconds / 3, f"Python stalled {pause:.3f} s of a {run_seconds:.3f} s run"

    generator = llmc.Generator(engine, kv_cache=False, threads=1)
    gen_seconds, pause = longest_pause_during(
        lambda: generator.generate([1, 2, 3], max_new_tokens=60, stop_token_ids=[]))
    assert pause < gen_seconds / 3, f"Python stalled {pause:.3f} s of {gen_seconds:.3f} s"


def test_busy_session_is_refused(demo_engine):
    # Two threads on one session: whichever comes second while the other runs is refused
    # (never a race inside the runtime), and the session still works afterwards.
    session = llmc.Engine(demo_engine).session(threads=1)
    ids = np.tile(np.arange(1, 241, dtype=np.int64), (4, 1))
    refused = []
    deadline = time.monotonic() + 30

    def hammer():
        while not refused and time.monotonic() < deadline:
            try:
                session.run({"input_ids": ids})
            except llmc.FailedPreconditionError as e:
                refused.append(str(e))
    workers = [threading.Thread(target=hammer, daemon=True) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert refused and "another thread" in refused[0]
    assert session.run({"input_ids": ids[:1, :4]})["logits"].shape == (1, 4, 2048)


# ---- Tokenizer -----------------------------------------------------------------------------

def test_tokenizer(demo_engine):
    from_file = llmc.Tokenizer(MODELS / "demo" / "tokenizer.json",
                               MODELS / "demo" / "tokenizer_config.json")
    stored = llmc.Engine(demo_engine).tokenizer
    text = "In the beginning God created the heaven and the earth. Ünïcödé ✓"
    ids = from_file.encode(text)
    assert ids == stored.encode(text)
    assert from_file.decode(ids) == text
    assert from_file.vocab_size == 2048
    token = from_file.id_to_token(ids[0])
    assert from_file.token_to_id(token) == ids[0]
    assert from_file.token_to_id("no such token at all") is None


def test_chat_template_equals_jinja2():
    import jinja2
    tokenizer = llmc.Tokenizer(MODELS / "demo" / "tokenizer.json",
                               MODELS / "demo" / "tokenizer_config.json")
    config = json.loads((MODELS / "demo" / "tokenizer_config.json").read_text())
    messages = [{"role": "system", "content": "Answer from the scriptures. "},
                {"role": "user", "content": "Who made the light?"},
                {"role": "assistant", "content": "God."},
                {"role": "user", "content": "When?"}]

    def raise_exception(message):
        raise jinja2.TemplateError(message)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    eos = config["eos_token"]
    eos = eos["content"] if isinstance(eos, dict) else eos
    for add in (True, False):
        want = env.from_string(config["chat_template"]).render(
            messages=messages, add_generation_prompt=add, eos_token=eos)
        assert tokenizer.apply_chat_template(messages, add_generation_prompt=add) == want
    with pytest.raises(llmc.Error, match="roles are"):
        tokenizer.apply_chat_template([{"role": "robot", "content": "x"}])
    bare = llmc.Tokenizer(MODELS / "demo" / "tokenizer.json")
    with pytest.raises(llmc.NotFoundError, match="chat template"):
        bare.apply_chat_template(messages)


def test_package_files():
    import pathlib
    package = pathlib.Path(llmc.__file__).parent
    assert (package / "py.typed").exists()
    stub = (package / "_llmc.pyi").read_text()
    assert "class Engine" in stub and "class Generator" in stub
    assert llmc.has_compiler()
    for name in ("compile", "Engine", "Session", "Generator", "Tokenizer"):
        assert getattr(llmc, name).__doc__, name
