#!/usr/bin/env python3
"""ONNX backend node-test conformance for llmc: compile and run every node test, compare.

Usage: conformance.py --llmc build/tools/llmc/llmc [--out build/conformance.md]
       [--filter REGEX] [--jobs N] [--keep-going] [--in-scope-only] [--list-only]

Each test is classified first (scope.py); out-of-scope tests are run and reported but never
fail the harness. The last line printed is `N passed, N failed` over in-scope tests, and the
exit code is 1 when any in-scope test failed or when no in-scope test ran at all (no node
tests found, or a filter that selects none): a run that checked nothing does not pass. See
README.md.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import onnx

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compare  # noqa: E402
import scope  # noqa: E402

# Newer tests (from the installed onnx package) come first: on a name clash they win.
TEST_ROOTS = (
    os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node"),
    "/usr/share/libonnx-testdata/data/node",
)
# How the report names those folders (it is committed as docs/conformance.md).
ROOT_LABELS = {TEST_ROOTS[0]: "<onnx package node tests>", TEST_ROOTS[1]: "<libonnx-testdata>"}


def _scrub(text: str) -> str:
    """Drops machine paths from a detail: test roots become labels, temp folders vanish."""
    for root, label in ROOT_LABELS.items():
        text = text.replace(root, label)
    return re.sub(r"/tmp/llmc-[^/\s]+/", "", text)

STEP_TIMEOUT_S = 60

RESULTS = ("pass", "wrong", "unsupported", "error", "crash")


def default_test_roots() -> list[str]:
    """The pip onnx package's node tests (wherever onnx is installed), then Debian's."""
    pip_root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    roots = [pip_root] + [r for r in TEST_ROOTS if os.path.realpath(r) != os.path.realpath(pip_root)]
    return [r for r in roots if os.path.isdir(r)]


@dataclasses.dataclass(frozen=True)
class NodeTest:
    name: str
    dir: str
    scope: scope.Scope
    inputs: tuple[str, ...]  # graph inputs that are not initializers, in order
    outputs: tuple[str, ...]
    tensor_outputs: tuple[bool, ...]  # per output: a plain tensor (we can compare it)
    output_elem_types: tuple[int, ...]  # per output: declared TensorProto.DataType or 0


@dataclasses.dataclass(frozen=True)
class Result:
    test: NodeTest
    result: str  # one of RESULTS
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.test.scope.in_scope and self.result != "pass"


def discover(roots: list[str], name_filter: str | None) -> list[NodeTest]:
    pattern = re.compile(name_filter) if name_filter else None
    dirs: dict[str, str] = {}
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "*", "model.onnx"))):
            test_dir = os.path.dirname(path)
            name = os.path.basename(test_dir)
            if pattern and not pattern.search(name):
                continue
            dirs.setdefault(name, test_dir)

    tests = []
    for name in sorted(dirs):
        model = onnx.load(os.path.join(dirs[name], "model.onnx"), load_external_data=False)
        initializers = {t.name for t in model.graph.initializer}
        tests.append(
            NodeTest(
                name=name,
                dir=dirs[name],
                scope=scope.classify(model),
                inputs=tuple(i.name for i in model.graph.input if i.name not in initializers),
                outputs=tuple(o.name for o in model.graph.output),
                tensor_outputs=tuple(compare.graph_output_is_tensor(o) for o in model.graph.output),
                output_elem_types=tuple(compare.declared_elem_type(o) for o in model.graph.output),
            )
        )
    return tests


DETAIL_MAX_CHARS = 300


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    # A Python traceback (a tool or wrapper script) says what went wrong on its last line.
    return _clip(lines[-1] if lines[0].startswith("Traceback") else lines[0])


def _clip(text: str) -> str:
    return text if len(text) <= DETAIL_MAX_CHARS else text[: DETAIL_MAX_CHARS - 3] + "..."


_UNSUPPORTED = re.compile(r"unsupported|not support", re.IGNORECASE)


def _unsupported_reason(output: str) -> str | None:
    """The line that says what is unsupported, with the list that follows a trailing colon."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if not _UNSUPPORTED.search(line):
            continue
        reason = line.strip()
        if reason.endswith(":"):
            listed = []
            for more in lines[i + 1 :]:
                if not more.startswith((" ", "\t")) or not more.strip():
                    break
                listed.append(more.strip())
            reason += " " + "; ".join(listed)
        return reason
    return None


def _step(step: str, argv: list[str]) -> tuple[str, str] | None:
    """Runs one llmc command. None on success, else (result, detail)."""
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=STEP_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return "crash", f"{step}: timed out after {STEP_TIMEOUT_S} s"
    except OSError as e:
        return "error", f"{step}: cannot start {argv[0]}: {e.strerror}"
    if proc.returncode == 0:
        return None
    if proc.returncode < 0:
        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = f"signal {-proc.returncode}"
        message = _first_line(proc.stderr)
        return "crash", f"{step}: killed by {sig}" + (f": {message}" if message else "")
    message = _first_line(proc.stderr) or _first_line(proc.stdout)
    if proc.returncode == 2:
        # llmc words it "unsupported", "does not support" or "is not supported".
        reason = _unsupported_reason(proc.stderr + "\n" + proc.stdout)
        if reason:
            return "unsupported", f"{step}: {_clip(reason)}"
    return "error", f"{step}: exit {proc.returncode}: {message}"


def _data_sets(test_dir: str) -> list[str]:
    sets = glob.glob(os.path.join(test_dir, "test_data_set_*"))
    return sorted(sets, key=lambda d: int(d.rsplit("_", 1)[1]) if d.rsplit("_", 1)[1].isdigit() else 0)


def _check_data_set(test: NodeTest, data_set: str, out_dir: str) -> tuple[str, str] | None:
    rtol, atol = compare.tolerance(test.name, test.dir)
    label = os.path.basename(data_set)
    compared = 0
    for k, name in enumerate(test.outputs):
        expected_path = os.path.join(data_set, f"output_{k}.pb")
        if not os.path.exists(expected_path):
            continue
        compared += 1
        if not test.tensor_outputs[k]:
            return "error", f"{label}: output {name} is not a tensor; the harness compares tensors only"
        actual_path = os.path.join(out_dir, f"{name}.npy")
        if not os.path.exists(actual_path):
            return "error", f"{label}: llmc run wrote no {name}.npy"
        try:
            actual = compare.load_actual(actual_path)
        except (ValueError, OSError) as e:
            return "error", f"{label}: cannot read {name}.npy: {e}"
        expected = compare.load_expected(expected_path, test.output_elem_types[k])
        mismatch = compare.compare(actual, expected, rtol, atol)
        if mismatch:
            err = f"max abs err {mismatch.max_abs_err:.3g}; " if mismatch.max_abs_err is not None else ""
            return "wrong", f"{label}, output {name}: {err}{mismatch.message}"
    if not compared:
        return "error", f"harness: {label} has no output_K.pb to compare with"
    return None


def _input_file(test: NodeTest, index: int, path: str, tmp: str) -> str:
    """The input file to give llmc; rewrites the test data's one known quirk.

    The ONNX test data stores bfloat16 inputs as UINT16 tensors holding the bit patterns, while
    the model declares BFLOAT16. llmc checks input dtypes, so relabel those (same bytes).
    """
    model = onnx.load(os.path.join(test.dir, "model.onnx"), load_external_data=False)
    inputs = [v for v in model.graph.input if v.name not in {i.name for i in model.graph.initializer}]
    if index >= len(inputs) or inputs[index].type.tensor_type.elem_type != onnx.TensorProto.BFLOAT16:
        return path
    tensor = onnx.load_tensor(path)
    if tensor.data_type != onnx.TensorProto.UINT16:
        return path
    tensor.data_type = onnx.TensorProto.BFLOAT16
    fixed = os.path.join(tmp, f"input_{index}_bfloat16.pb")
    onnx.save_tensor(tensor, fixed)
    return fixed


def run_test(test: NodeTest, llmc: str) -> Result:
    with tempfile.TemporaryDirectory(prefix=f"llmc-{test.name}-") as tmp:
        engine = os.path.join(tmp, "model.engine")
        failure = _step("compile", [llmc, "compile", os.path.join(test.dir, "model.onnx"), "-o", engine])
        if failure:
            return Result(test, *failure)

        data_sets = _data_sets(test.dir)
        if not data_sets:
            return Result(test, "error", "harness: test has no test_data_set_*")
        for data_set in data_sets:
            out_dir = os.path.join(tmp, "out")
            shutil.rmtree(out_dir, ignore_errors=True)
            os.makedirs(out_dir)
            argv = [llmc, "run", engine]
            input_files = glob.glob(os.path.join(data_set, "input_*.pb"))
            for i, name in enumerate(test.inputs[: len(input_files)]):
                path = _input_file(test, i, os.path.join(data_set, f"input_{i}.pb"), tmp)
                argv += ["--input", f"{name}={path}"]
            argv += ["--output-dir", out_dir]
            failure = _step("run", argv)
            if failure:
                return Result(test, *failure)
            try:
                failure = _check_data_set(test, data_set, out_dir)
            except Exception as e:  # a harness bug must not hide the other tests' results
                failure = "error", f"harness: {type(e).__name__}: {e}"
            if failure:
                return Result(test, *failure)
    return Result(test, "pass", f"{len(data_sets)} data set{'s' if len(data_sets) > 1 else ''}")


def run_all(tests: list[NodeTest], llmc: str, jobs: int, keep_going: bool) -> list[Result]:
    """Runs the tests on `jobs` worker processes, handing out one test per free worker.

    Handing out tests one at a time (rather than queueing them all) is what lets a stop after
    the first in-scope failure leave the remaining tests unstarted.
    """
    results: list[Result] = []
    queue = iter(tests)
    stopping = False
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:

        def start_next(running: set) -> None:
            test = None if stopping else next(queue, None)
            if test is not None:
                running.add(pool.submit(run_test, test, llmc))

        running: set = set()
        for _ in range(jobs):
            start_next(running)
        while running:
            done, running = concurrent.futures.wait(
                running, return_when=concurrent.futures.FIRST_COMPLETED
            )
            for future in done:
                result = future.result()
                results.append(result)
                if result.failed:
                    print(f"FAIL {result.test.name}: {result.result}: {result.detail}", flush=True)
                    if not keep_going and not stopping:
                        stopping = True
                        print("stopping at the first in-scope failure (--keep-going runs them all)")
                start_next(running)
    return sorted(results, key=lambda r: r.test.name)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _counts_line(results: list[Result]) -> str:
    counts = collections.Counter(r.result for r in results)
    return ", ".join(f"{counts[k]} {k}" for k in RESULTS if counts[k]) or "none"


def write_report(path: str, results: list[Result], not_run: int) -> None:
    in_scope = [r for r in results if r.test.scope.in_scope]
    out_scope = [r for r in results if not r.test.scope.in_scope]
    passed = sum(r.result == "pass" for r in in_scope)
    rate = f"{100.0 * passed / len(in_scope):.1f}%" if in_scope else "n/a"
    lines = [
        "# llmc ONNX node-test conformance",
        "",
        f"- in scope: {len(in_scope)} tests: {_counts_line(in_scope)}",
        f"- out of scope: {len(out_scope)} tests: {_counts_line(out_scope)}",
        f"- in-scope pass rate: {rate} ({passed}/{len(in_scope)})",
    ]
    if not_run:
        lines.append(f"- not run (stopped at the first in-scope failure): {not_run} tests")
    lines += ["", "| test | ops | scope | result | detail |", "| --- | --- | --- | --- | --- |"]
    for r in results:
        cells = [r.test.name, ", ".join(r.test.scope.ops), r.test.scope.label(), r.result, _scrub(r.detail)]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def list_only(tests: list[NodeTest]) -> None:
    in_scope = [t for t in tests if t.scope.in_scope]
    out_scope = [t for t in tests if not t.scope.in_scope]
    print(f"{len(tests)} tests: {len(in_scope)} in scope, {len(out_scope)} out of scope")

    # A test can be out for several reasons; each reason kind counts it once.
    by_kind = collections.Counter()
    only_kind = collections.Counter()
    for t in out_scope:
        kinds = {scope.reason_kind(r) for r in t.scope.reasons}
        by_kind.update(kinds)
        if len(kinds) == 1:
            only_kind.update(kinds)
    print("out of scope, by reason (tests; tests out for that reason alone):")
    for kind, n in by_kind.most_common():
        print(f"  {kind:8} {n:5}  {only_kind[kind]:5}")

    missing_ops = collections.Counter()
    for t in out_scope:
        for r in t.scope.reasons:
            if scope.reason_kind(r) == "ops":
                missing_ops.update(r.split(" ", 1)[1].split(", "))
    print("ops that put tests out of scope (most common first):")
    print("  " + ", ".join(f"{op} {n}" for op, n in missing_ops.most_common(40)))

    print("in-scope op coverage (in-scope tests using the op; out-of-scope tests that use only")
    print("in-scope ops, i.e. are out for opset/dtype/type alone):")
    coverage = scope.covered_ops(t.scope for t in tests)
    for op, (n, near) in sorted(coverage.items(), key=lambda kv: (-kv[1][0], kv[0])):
        print(f"  {op:20} {n:4} {near:4}")
    untested = [op for op, (n, _) in coverage.items() if n == 0]
    print(f"in-scope ops with no in-scope test: {', '.join(untested) or 'none'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--llmc", help="path to the llmc binary (required unless --list-only)")
    parser.add_argument("--out", default="build/conformance.md", help="markdown report to write")
    parser.add_argument("--filter", help="only tests whose name matches this regex (re.search)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--keep-going", action="store_true",
                        help="run every test; by default stop after the first in-scope failure")
    parser.add_argument("--in-scope-only", action="store_true",
                        help="skip out-of-scope tests (they are run by default)")
    parser.add_argument("--list-only", action="store_true",
                        help="classify only: per-category counts and in-scope op coverage")
    parser.add_argument("--test-root", action="append",
                        help="node-test directory to use instead of the defaults (repeatable; "
                             "earlier roots win on a name clash)")
    args = parser.parse_args(argv)

    tests = discover(args.test_root or default_test_roots(), args.filter)
    if args.in_scope_only:
        tests = [t for t in tests if t.scope.in_scope]
    if args.list_only:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--list-only | head` is fine
        list_only(tests)
        return 0
    if not args.llmc:
        parser.error("--llmc is required unless --list-only")
    llmc = os.path.abspath(args.llmc)
    if not os.access(llmc, os.X_OK):
        parser.error(f"{args.llmc} is not an executable file")

    results = run_all(tests, llmc, max(1, args.jobs), args.keep_going)
    not_run = len(tests) - len(results)
    write_report(args.out, results, not_run)

    in_scope = [r for r in results if r.test.scope.in_scope]
    out_scope = [r for r in results if not r.test.scope.in_scope]
    passed = sum(r.result == "pass" for r in in_scope)
    failed = len(in_scope) - passed
    print(f"out of scope: {len(out_scope)} tests: {_counts_line(out_scope)}")
    print(f"report: {args.out}")
    if not in_scope:
        roots = args.test_root or default_test_roots()
        print(f"error: no in-scope test ran ({len(tests)} found in {roots or 'no test root'}"
              + (f" matching --filter {args.filter!r}" if args.filter else "") + ")", file=sys.stderr)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not in_scope else 0


if __name__ == "__main__":
    sys.exit(main())
