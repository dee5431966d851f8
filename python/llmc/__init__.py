"""llmc: an ahead-of-time compiler and lean runtime for transformer and LLM inference.

    import llmc
    llmc.compile("model.onnx", "model.engine", quantize="int4")   # = llmc compile ...
    engine = llmc.Engine("model.engine")
    outputs = engine.session(threads=4).run({"input_ids": ids})   # numpy arrays
    print(llmc.Generator(engine).generate("Once upon a time", max_new_tokens=32).text)

docs/python.md is the whole account.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Optional, Sequence, Union

import numpy as np

from . import _llmc
from .errors import (CancelledError, DataLossError, Error, FailedPreconditionError,
                     InternalError, InvalidArgumentError, NotFoundError, OutOfRangeError,
                     ResourceExhaustedError, UnavailableError, UnimplementedError)

__version__ = "0.1.0"

__all__ = [
    "compile", "has_compiler", "CompileResult", "Engine", "TensorInfo", "Session", "Tokenizer",
    "Generator", "GenerationResult", "StreamChunk", "Stream", "Error", "InvalidArgumentError",
    "NotFoundError", "OutOfRangeError", "UnimplementedError", "DataLossError",
    "FailedPreconditionError", "ResourceExhaustedError", "InternalError", "UnavailableError",
    "CancelledError",
]

PathLike = Union[str, "os.PathLike[str]"]


def has_compiler() -> bool:
    """Whether this build has the compiler (MLIR/LLVM); without it llmc.compile raises."""
    return bool(_llmc.has_compiler())


# ---- compile -------------------------------------------------------------------------------

# Every `llmc compile` option (docs/cli.md), by keyword: value options take a value, flags
# take True, repeatable options take a list (or one value).
_VALUE_OPTIONS = {
    "target": "--target", "tokenizer": "--tokenizer", "tokenizer_config": "--tokenizer-config",
    "generation_config": "--generation-config", "max_context": "--max-context",
    "bos_id": "--bos-id", "opt_level": "--opt-level", "quantize": "--quantize",
    "quant_group": "--quant-group", "quant_head": "--quant-head", "calib": "--calib",
    "calib_dir": "--calib-dir", "smooth_alpha": "--smooth-alpha",
    "smooth_percentile": "--smooth-percentile", "max_ppl_increase": "--max-ppl-increase",
    "eval_text": "--eval-text", "prune": "--prune", "dump_ir_after": "--dump-ir-after",
    "drift_text": "--drift-text", "drift_tokens": "--drift-tokens",
    "drift_new_tokens": "--drift-new-tokens",
}
_FLAG_OPTIONS = {
    "as_graph": "--as-graph", "awq": "--awq", "sparse_storage": "--sparse-storage",
    "strip_weights": "--strip-weights", "report": "--report", "verbose": "--verbose",
}
_LIST_OPTIONS = {
    "eos_id": "--eos-id", "disable_pass": "--disable-pass", "keep_float": "--keep-float",
    "keep_dense": "--keep-dense",
}


@dataclass
class CompileResult:
    """What llmc.compile wrote (the numbers `llmc compile` prints)."""
    output: str
    model: str
    steps: int
    weight_bytes: int
    arena_bytes: int
    engine_bytes: int
    llm_layers: int  # attention layers over the paged KV cache; 0: runs as a plain graph
    warnings: list
    notes: list
    from_dir: str  # "DIR: model.onnx, tokenizer.json, ..." when compiled from a model folder
    seconds: float
    # Every fusion that fired and every near miss: (fired, pass, pattern, nodes, reason).
    fusions: list = field(repr=False, default_factory=list)


def _compile_args(model: PathLike, output: PathLike, options: Mapping[str, Any]) -> list:
    args = [os.fspath(model), "-o", os.fspath(output)]
    for key, value in options.items():
        if value is None or value is False:
            continue
        if key == "dims":
            for name, bounds in dict(value).items():
                lo, hi = bounds
                args += ["--dim", f"{name}={int(lo)}:{int(hi)}"]
        elif key in _FLAG_OPTIONS:
            if value is not True:
                raise TypeError(f"llmc.compile: {key} is a flag: True or False, got {value!r}")
            args.append(_FLAG_OPTIONS[key])
        elif key in _VALUE_OPTIONS:
            if value is True:
                raise TypeError(f"llmc.compile: {key} takes a value, got True")
            args += [_VALUE_OPTIONS[key], os.fspath(value) if isinstance(value, os.PathLike)
                     else str(value)]
        elif key in _LIST_OPTIONS:
            values = [value] if isinstance(value, (str, int, os.PathLike)) else list(value)
            for item in values:
                args += [_LIST_OPTIONS[key], str(item)]
        else:
            known = sorted(["dims"] + list(_VALUE_OPTIONS) + list(_FLAG_OPTIONS) +
                           list(_LIST_OPTIONS))
            raise TypeError(f"llmc.compile: unknown option {key!r} (options: {', '.join(known)})")
    return args


class _TerminalProgress:
    """One line on a terminal, rewritten in place: elapsed time, stage, pass, the product being
    quantized or pruned; cleared when the compile ends."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.start, self.shown = stream, time.monotonic(), False

    def __call__(self, stage: str) -> None:
        self.stream.write(f"\r\033[Kllmc compile [{time.monotonic() - self.start:6.1f} s] "
                          f"{stage[:160]}")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()


def _terminal_progress() -> Optional[_TerminalProgress]:
    stream = sys.stderr
    if stream is None or not hasattr(stream, "isatty") or not stream.isatty():
        return None
    return _TerminalProgress(stream)


def compile(model: PathLike, output: PathLike, *,
            progress: Union[None, bool, Callable[[str], None]] = None,
            **options: Any) -> CompileResult:
    """Compiles an ONNX model (a file, or a folder as Optimum or save_pretrained export it) into
    an engine file: exactly `llmc compile MODEL -o OUTPUT` with the options given by keyword
    (``quantize="int4"`` is ``--quantize int4``, ``keep_float=["lm_head"]`` repeats
    ``--keep-float``, ``dims={"batch": (1, 8)}`` is ``--dim batch=1:8``, ``as_graph=True`` is
    ``--as-graph``). The GIL is released while it runs.

    progress: None shows progress when stderr is a terminal (one line rewritten in place: the
    elapsed time, the stage, the pass, the product being quantized or pruned) and nothing
    otherwise; True also a line per stage elsewhere; False never; a callable receives each
    stage's description. Warnings are returned (and issued as Python warnings).
    Raises InvalidArgumentError / UnimplementedError for problems with the model or options
    (the message names nodes, files and options), other llmc.Error subclasses otherwise.
    """
    if not _llmc.has_compiler():
        raise UnimplementedError(
            "this llmc package was built without the compiler (MLIR/LLVM 19 were not found "
            "when it was built; scripts/setup.sh installs them); compile with the llmc CLI", 4)
    args = _compile_args(model, output, options)
    if progress is None:
        progress = _terminal_progress()
    elif progress is False:
        progress = None
    elif progress is True:  # on a terminal as above, else a line per stage
        progress = _terminal_progress() or (lambda stage: print(f"llmc compile: {stage}",
                                                                file=sys.stderr))
    try:
        raw = _llmc.compile_args(args, progress)
    finally:
        if isinstance(progress, _TerminalProgress):
            progress.clear()
    result = CompileResult(**raw)
    if result.warnings:
        import warnings
        for message in result.warnings:
            warnings.warn(f"llmc.compile: {message}", stacklevel=2)
    return result


# ---- Engine and Session --------------------------------------------------------------------

class TensorInfo(NamedTuple):
    name: str
    dtype: str  # numpy's name: "float32", "int64", "bool", ... ("bfloat16" too)
    shape: list  # per dimension: an int when fixed, the symbol's name when symbolic, else None


class Engine:
    """A loaded, verified engine file (mapped, weights never copied). Immutable and safe to
    share between threads; sessions and generators made from it share its weights."""

    def __init__(self, path: PathLike, *, verify_weights: bool = True) -> None:
        self._engine = _llmc.Engine.load(os.fspath(path), verify_weights)

    @property
    def path(self) -> str:
        return self._engine.path

    @property
    def inputs(self) -> list:
        """The engine's inputs as TensorInfo (name, dtype, shape)."""
        return [TensorInfo(*info) for info in self._engine.inputs]

    @property
    def outputs(self) -> list:
        return [TensorInfo(*info) for info in self._engine.outputs]

    @property
    def metadata(self) -> dict:
        """Format and compiler versions, target, build options, sizes, dimension symbols and,
        for a decoder language model, its configuration under "llm"."""
        return self._engine.metadata

    @property
    def tokenizer(self) -> Optional["Tokenizer"]:
        """The tokenizer stored by `llmc compile --tokenizer` (and its chat template), or None."""
        if not self._engine.metadata["has_tokenizer"]:
            return None
        return Tokenizer._wrap(self._engine.tokenizer())

    def session(self, *, threads: int = 0, backend: str = "auto") -> "Session":
        """A session to run the engine: threads 0 uses every physical core this process may use;
        backend "auto" (the engine's target), "cpu" or "cuda"."""
        return Session(self, threads=threads, backend=backend)

    def generator(self, **config: Any) -> "Generator":
        return Generator(self, **config)

    def __repr__(self) -> str:
        return f"llmc.Engine({self.path!r})"


def _as_input(name: str, value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value if value.flags.c_contiguous else np.ascontiguousarray(value)
    if hasattr(value, "__dlpack__"):
        return value
    return np.asarray(value)


class Session:
    """An execution context of an engine (its arena). One call at a time: use one session per
    thread (a second thread calling run on a busy session gets FailedPreconditionError)."""

    def __init__(self, engine: Engine, *, threads: int = 0, backend: str = "auto") -> None:
        self.engine = engine
        self._session = _llmc.Session.create(engine._engine, backend, threads)

    @property
    def backend(self) -> str:
        return self._session.backend

    @property
    def threads(self) -> int:
        return self._session.threads

    def run(self, feeds: Mapping[str, Any],
            output_names: Optional[Sequence[str]] = None) -> dict:
        """Runs the engine on ``feeds`` (name -> numpy array, or anything with ``__dlpack__``
        on the CPU, e.g. a torch tensor) and returns {output name: numpy array} in the engine's
        order. Inputs of the engine's dtype in C order are read in place (other layouts are
        copied once); outputs are numpy arrays over the runtime's own buffers (no copy). The
        GIL is released while the engine runs."""
        pairs = [(name, _as_input(name, value)) for name, value in feeds.items()]
        outputs = self._session.run(pairs)
        if output_names is None:
            return outputs
        missing = [n for n in output_names if n not in outputs]
        if missing:
            raise NotFoundError(f"Session.run: no output named {', '.join(missing)} (outputs: "
                                f"{', '.join(outputs)})", 2)
        return {n: outputs[n] for n in output_names}


# ---- Tokenizer -----------------------------------------------------------------------------

class Tokenizer:
    """A Hugging Face tokenizer.json (the same ids and text as the `tokenizers` library), with
    the chat template of a tokenizer_config.json when given."""

    def __init__(self, path: PathLike, config: Optional[PathLike] = None) -> None:
        with open(path, encoding="utf-8") as f:
            json = f.read()
        config_json = ""
        if config is not None:
            with open(config, encoding="utf-8") as f:
                config_json = f.read()
        self._tokenizer = _llmc.Tokenizer.from_json(json, config_json)

    @classmethod
    def from_json(cls, json: str, config_json: str = "") -> "Tokenizer":
        return cls._wrap(_llmc.Tokenizer.from_json(json, config_json))

    @classmethod
    def _wrap(cls, native: Any) -> "Tokenizer":
        self = cls.__new__(cls)
        self._tokenizer = native
        return self

    def encode(self, text: str, add_special_tokens: bool = True) -> list:
        return self._tokenizer.encode(text, add_special_tokens)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens).decode("utf-8", "replace")

    def token_to_id(self, token: str) -> Optional[int]:
        return self._tokenizer.token_to_id(token)

    def id_to_token(self, id: int) -> Optional[str]:
        return self._tokenizer.id_to_token(id)

    def is_special(self, id: int) -> bool:
        return self._tokenizer.is_special(id)

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.vocab_size

    @property
    def bos_id(self) -> Optional[int]:
        return self._tokenizer.bos_id

    @property
    def eos_id(self) -> Optional[int]:
        return self._tokenizer.eos_id

    @property
    def chat_template(self) -> Optional[str]:
        return self._tokenizer.chat_template

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]],
                            add_generation_prompt: bool = True, **variables: Any) -> str:
        """Renders the chat template (as transformers' apply_chat_template(tokenize=False));
        ``variables`` add template variables (tools=..., enable_thinking=...)."""
        return self._tokenizer.apply_chat_template(list(messages), add_generation_prompt,
                                                   variables or None)


# ---- Generator -----------------------------------------------------------------------------

@dataclass
class GenerationResult:
    tokens: list  # the new tokens (the prompt excluded)
    text: str  # the new tokens decoded ("" without a tokenizer)
    logprobs: list  # of each chosen token
    top_logprobs: list  # per token, [(id, logprob), ...] when logprobs=N was asked
    finish_reason: str  # "length", "stop_token", "stop_string" or "cancelled"
    time_to_first_token_ms: float
    decode_tokens_per_s: float
    prompt_tokens_cached: int  # prompt tokens whose K/V came from the prefix cache
    prompt_tokens: list = field(default_factory=list)


class StreamChunk(NamedTuple):
    token: int  # the new token (-1: text held back until the end, e.g. an incomplete character)
    text: str  # the text this token completes ("" until a multi-byte character is whole)


class Stream:
    """Iterates over a generation's tokens as they are made (Generator.stream). After the last
    chunk ``result`` holds the GenerationResult; closing the stream early (break, close())
    cancels the generation."""

    _DONE = object()

    def __init__(self, generator: "Generator", prompt: Any, options: dict) -> None:
        self.result: Optional[GenerationResult] = None
        self._queue: "queue.Queue[Any]" = queue.Queue()
        self._stop = threading.Event()
        self._error: Optional[BaseException] = None

        def on_token(token: int, text: str) -> bool:
            self._queue.put(StreamChunk(token, text))
            return not self._stop.is_set()

        def work() -> None:
            try:
                self.result = generator.generate(prompt, on_token=on_token, **options)
            except BaseException as e:  # re-raised in the consumer's thread
                self._error = e
            finally:
                self._queue.put(self._DONE)

        self._thread = threading.Thread(target=work, name="llmc-generate", daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[StreamChunk]:
        try:
            while True:
                item = self._queue.get()
                if item is self._DONE:
                    break
                yield item
        finally:
            self.close()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Cancels the generation if it still runs and waits for it to end."""
        self._stop.set()
        self._thread.join()


class Generator:
    """Token generation on a decoder language model's engine: over the paged KV cache when the
    compiler recognized the model (engine.metadata["llm"]), else by full recomputation.
    One generation at a time per generator; Generator.cancel() may be called from any thread."""

    def __init__(self, engine: Engine, *, threads: int = 0, backend: str = "auto",
                 kv_cache: bool = True, kv_cache_tokens: int = 0,
                 kv_cache_dtype: str = "auto", kv_cache_prefault: bool = False) -> None:
        self.engine = engine
        self._generator = _llmc.Generator.create(engine._engine, backend, threads, kv_cache,
                                                 kv_cache_tokens, kv_cache_dtype,
                                                 kv_cache_prefault)
        self._tokenizer = engine.tokenizer

    @property
    def tokenizer(self) -> Optional[Tokenizer]:
        return self._tokenizer

    @property
    def uses_kv_cache(self) -> bool:
        return self._generator.uses_kv_cache

    @property
    def kv_cache_dtype(self) -> Optional[str]:
        """What the KV cache stores ("auto" resolved: "f16" for an engine with quantized weights,
        "f32" otherwise); None without a cache."""
        return self._generator.kv_cache_dtype

    def _prompt_ids(self, prompt: Union[str, Sequence[int]]) -> list:
        if isinstance(prompt, str):
            if self._tokenizer is None:
                raise InvalidArgumentError(
                    "a text prompt needs a tokenizer: this engine has none (llmc compile "
                    "--tokenizer); pass token ids", 1)
            return self._tokenizer.encode(prompt, add_special_tokens=True)
        return [int(i) for i in prompt]

    def generate(self, prompt: Union[str, Sequence[int]], *, max_new_tokens: int = 32,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                 min_p: float = 0.0, repetition_penalty: float = 1.0,
                 presence_penalty: float = 0.0, frequency_penalty: float = 0.0, seed: int = 0,
                 logprobs: int = 0, logit_bias: Optional[Mapping[int, float]] = None,
                 stop: Union[None, str, Sequence[str]] = None,
                 stop_token_ids: Optional[Sequence[int]] = None, num_beams: int = 0,
                 length_penalty: float = 1.0, early_stopping: bool = True,
                 on_token: Optional[Callable[[int, str], Optional[bool]]] = None
                 ) -> GenerationResult:
        """Generates after ``prompt`` (text, encoded with the engine's tokenizer and its special
        tokens as `llmc generate --prompt` does, or token ids). temperature 0 is greedy;
        stop_token_ids None stops at the tokenizer's EOS (else the engine's EOS ids), [] never;
        num_beams > 0 runs beam search. ``on_token(id, text)`` is called for each token (text:
        what it completes of the output); returning False cancels. The GIL is released while
        the model runs."""
        ids = self._prompt_ids(prompt)
        if isinstance(stop, str):
            stop = [stop]
        callback = None
        if on_token is not None:
            def callback(token: int, text: bytes) -> Optional[bool]:
                return on_token(token, text.decode("utf-8", "replace"))
        raw = self._generator.generate(
            ids, max_new_tokens, temperature, top_k, top_p, min_p, repetition_penalty,
            presence_penalty, frequency_penalty, seed, logprobs,
            [(int(k), float(v)) for k, v in (logit_bias or {}).items()], list(stop or []),
            None if stop_token_ids is None else [int(i) for i in stop_token_ids], callback,
            num_beams, length_penalty, early_stopping)
        raw["text"] = raw["text"].decode("utf-8", "replace")
        return GenerationResult(prompt_tokens=ids, **raw)

    def stream(self, prompt: Union[str, Sequence[int]], **options: Any) -> Stream:
        """generate() as an iterator of StreamChunk(token, text), the model running on a
        thread of its own; ``stream.result`` holds the GenerationResult at the end."""
        if "on_token" in options:
            raise TypeError("Generator.stream: on_token is the stream's own")
        return Stream(self, prompt, options)

    def cancel(self) -> bool:
        """Cancels the generation running now (from any thread): it returns the tokens so far
        with finish_reason "cancelled". False when none was running."""
        return self._generator.cancel()
