#!/usr/bin/env python3
"""Tests of the conformance harness itself (classification, comparison, result handling).

Needs no llmc: the runner is exercised with tiny stand-in scripts on synthetic node tests.
Run: .venv/bin/python test/onnx/harness_test.py
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import sys
import tempfile
import textwrap
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compare  # noqa: E402
import conformance  # noqa: E402
import scope  # noqa: E402


def _model(nodes, inputs, outputs, opset=17, initializers=(), domain_opsets=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in domain_opsets]
    return helper.make_model(graph, opset_imports=opsets)


def _tensor(name, elem_type=TensorProto.FLOAT, shape=(2,)):
    return helper.make_tensor_value_info(name, elem_type, list(shape))


def _add_model(elem_type=TensorProto.FLOAT, opset=17):
    return _model(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        [_tensor("a", elem_type), _tensor("b", elem_type)],
        [_tensor("c", elem_type)],
        opset=opset,
    )


class ClassifyTest(unittest.TestCase):
    def test_in_scope(self):
        s = scope.classify(_add_model())
        self.assertTrue(s.in_scope)
        self.assertEqual(s.ops, ("Add",))
        self.assertEqual(s.label(), "in")

    def test_op_outside_the_set(self):
        m = _model(
            [helper.make_node("Mod", ["a", "b"], ["m"]), helper.make_node("Add", ["m", "b"], ["c"])],
            [_tensor("a"), _tensor("b")],
            [_tensor("c")],
        )
        s = scope.classify(m)
        self.assertEqual(s.reasons, ("ops Mod",))
        self.assertEqual(s.ops, ("Add", "Mod"))

    def test_other_domain_is_out_even_for_a_known_name(self):
        m = _model(
            [helper.make_node("Add", ["a", "b"], ["c"], domain="com.example")],
            [_tensor("a"), _tensor("b")],
            [_tensor("c")],
            domain_opsets=[("com.example", 1)],
        )
        self.assertEqual(scope.classify(m).reasons, ("ops com.example:Add",))

    def test_opset_bounds(self):
        self.assertEqual(scope.classify(_add_model(opset=12)).reasons, ("opset 12",))
        self.assertTrue(scope.classify(_add_model(opset=13)).in_scope)
        self.assertTrue(scope.classify(_add_model(opset=23)).in_scope)
        self.assertEqual(scope.classify(_add_model(opset=24)).reasons, ("opset 24",))

    def test_graph_dtype(self):
        self.assertEqual(
            scope.classify(_add_model(TensorProto.DOUBLE)).reasons, ("dtype float64",)
        )
        for ok in (TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.INT8, TensorProto.BOOL):
            self.assertTrue(scope.classify(_add_model(ok)).in_scope, ok)

    def test_cast_target_and_constant_dtypes(self):
        cast = _model(
            [helper.make_node("Cast", ["a"], ["c"], to=TensorProto.FLOAT8E4M3FN)],
            [_tensor("a")],
            [helper.make_tensor_value_info("c", TensorProto.UNDEFINED, None)],
        )
        self.assertEqual(scope.classify(cast).reasons, ("dtype float8e4m3fn",))
        const = _model(
            [
                helper.make_node(
                    "Constant", [], ["k"],
                    value=numpy_helper.from_array(np.zeros(2, np.float64)),
                ),
                helper.make_node("Add", ["a", "k"], ["c"]),
            ],
            [_tensor("a")],
            [_tensor("c")],
        )
        self.assertEqual(scope.classify(const).reasons, ("dtype float64",))

    def test_initializer_dtype(self):
        m = _model(
            [helper.make_node("Add", ["a", "w"], ["c"])],
            [_tensor("a")],
            [_tensor("c")],
            initializers=[numpy_helper.from_array(np.zeros(2, np.int16), "w")],
        )
        self.assertEqual(scope.classify(m).reasons, ("dtype int16",))

    def test_sequence_input(self):
        seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
        m = _model(
            [helper.make_node("SequenceAt", ["s", "i"], ["c"])],
            [seq, _tensor("i", TensorProto.INT64, ())],
            [_tensor("c")],
        )
        self.assertEqual(scope.classify(m).reasons, ("ops SequenceAt", "type sequence"))

    def test_subgraph_ops_count(self):
        branch = helper.make_graph(
            [helper.make_node("Neg", ["a"], ["n"])], "b", [], [_tensor("n")]
        )
        m = _model(
            [helper.make_node("If", ["p"], ["c"], then_branch=branch, else_branch=branch)],
            [_tensor("p", TensorProto.BOOL, ()), _tensor("a")],
            [_tensor("c")],
        )
        s = scope.classify(m)
        self.assertEqual(s.ops, ("If", "Neg"))
        self.assertEqual(s.reasons, ("ops If",))

    def test_several_reasons_in_a_fixed_order(self):
        m = _model(
            [helper.make_node("Mod", ["a", "b"], ["c"])],
            [_tensor("a", TensorProto.DOUBLE), _tensor("b", TensorProto.DOUBLE)],
            [_tensor("c", TensorProto.DOUBLE)],
            opset=10,
        )
        self.assertEqual(
            scope.classify(m).label(), "out: ops Mod; opset 10; dtype float64"
        )

    def test_coverage_counts_near_misses(self):
        scopes = [scope.classify(_add_model()), scope.classify(_add_model(opset=7))]
        self.assertEqual(scope.covered_ops(scopes)["Add"], (1, 1))
        self.assertEqual(scope.covered_ops(scopes)["Mul"], (0, 0))

    def test_real_tests(self):
        """Spot checks against the node tests installed on this machine."""
        tests = {t.name: t for t in conformance.discover(conformance.default_test_roots(),
                                                         r"^test_(add|mod_mixed_sign_float64|"
                                                         r"layer_normalization_2d_axis0_expanded)$")}
        if not tests:
            self.skipTest("no ONNX node tests installed")
        self.assertTrue(tests["test_add"].scope.in_scope)
        self.assertIn("ops Mod", tests["test_mod_mixed_sign_float64"].scope.reasons)
        self.assertTrue(tests["test_layer_normalization_2d_axis0_expanded"].scope.in_scope)


def _expected(array, elem_type=None):
    tensor = numpy_helper.from_array(array)
    return compare.Expected(numpy_helper.to_array(tensor), elem_type or tensor.data_type)


class CompareTest(unittest.TestCase):
    R, A = compare.DEFAULT_RTOL, compare.DEFAULT_ATOL

    def check(self, actual, expected):
        return compare.compare(np.asarray(actual), expected, self.R, self.A)

    def test_float_within_and_outside_tolerance(self):
        want = _expected(np.array([1.0, -2.0, 0.0], np.float32))
        self.assertIsNone(self.check(np.array([1.0005, -2.001, 0.0], np.float32), want))
        m = self.check(np.array([1.01, -2.0, 0.0], np.float32), want)
        self.assertIsNotNone(m)
        self.assertAlmostEqual(m.max_abs_err, 0.01, places=5)
        self.assertIn("1/3 elements", m.message)
        # atol 1e-7 around zero is tight, as in the ONNX runner.
        self.assertIsNotNone(self.check(np.array([1.0, -2.0, 1e-6], np.float32), want))

    def test_nan_and_inf(self):
        want = _expected(np.array([np.nan, np.inf, -np.inf, 1.0], np.float32))
        self.assertIsNone(self.check(np.array([np.nan, np.inf, -np.inf, 1.0], np.float32), want))
        self.assertIn("NaN", self.check(np.array([0.0, np.inf, -np.inf, 1.0], np.float32), want).message)
        self.assertIn("NaN", self.check(np.array([np.nan, np.inf, -np.inf, np.nan], np.float32), want).message)
        self.assertIn("infinit", self.check(np.array([np.nan, -np.inf, -np.inf, 1.0], np.float32), want).message)
        self.assertIsNotNone(self.check(np.array([np.nan, 3e38, -np.inf, 1.0], np.float32), want))

    def test_integers_and_bools_are_exact(self):
        want = _expected(np.array([10**12, 5], np.int64))
        self.assertIsNone(self.check(np.array([10**12, 5], np.int64), want))
        m = self.check(np.array([10**12 + 1, 5], np.int64), want)
        self.assertEqual(m.max_abs_err, 1.0)
        want = _expected(np.array([True, False]))
        self.assertIsNone(self.check(np.array([True, False]), want))
        self.assertIsNotNone(self.check(np.array([True, True]), want))

    def test_dtype_and_shape_must_match(self):
        want = _expected(np.zeros((2, 3), np.float32))
        self.assertIn("dtype", self.check(np.zeros((2, 3), np.float64), want).message)
        self.assertIn("shape", self.check(np.zeros((3, 2), np.float32), want).message)
        self.assertIn("shape", self.check(np.zeros((1, 2, 3), np.float32), want).message)
        self.assertIsNone(self.check(np.zeros((0, 3), np.float32), _expected(np.zeros((0, 3), np.float32))))

    def test_float16(self):
        want = _expected(np.array([1.0, 2.0], np.float16))
        self.assertIsNone(self.check(np.array([1.0, 2.0], np.float16), want))
        self.assertIsNotNone(self.check(np.array([1.0, 2.0], np.float32), want))

    def test_bfloat16_from_bits(self):
        tensor = helper.make_tensor("x", TensorProto.BFLOAT16, [2], [1.0, -2.5])
        want = compare.Expected(numpy_helper.to_array(tensor), TensorProto.BFLOAT16)
        bits = np.array([0x3F80, 0xC020], np.uint16)  # 1.0, -2.5
        self.assertIsNone(compare.compare(bits, want, self.R, self.A))
        self.assertIsNone(compare.compare(bits.view("V2"), want, self.R, self.A))
        self.assertIsNotNone(compare.compare(np.array([0x3F80, 0xC040], np.uint16), want, self.R, self.A))
        self.assertIn("bfloat16", compare.compare(np.array([1.0, -2.5], np.float32), want, self.R, self.A).message)

    def test_bfloat16_reference_stored_as_uint16_bits(self):
        # test_cast_FLOAT_to_BFLOAT16 stores its reference as UINT16; the graph says BFLOAT16.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "output_0.pb")
            onnx.save_tensor(numpy_helper.from_array(np.array([0x3F80], np.uint16)), path)
            self.assertEqual(compare.load_expected(path).elem_type, TensorProto.UINT16)
            want = compare.load_expected(path, TensorProto.BFLOAT16)
            self.assertEqual(want.elem_type, TensorProto.BFLOAT16)
            self.assertIsNone(compare.compare(np.array([0x3F80], np.uint16).view("V2"), want, self.R, self.A))

    def test_bfloat16_cast_tests_allow_one_ulp(self):
        rtol, _ = compare.tolerance("test_cast_FLOAT_to_BFLOAT16", "/nonexistent")
        truncated = compare.Expected(np.array([0x3EF5], np.uint16), TensorProto.BFLOAT16)
        rounded_up = np.array([0x3EF6], np.uint16)
        self.assertIsNotNone(compare.compare(rounded_up, truncated, self.R, self.A))
        self.assertIsNone(compare.compare(rounded_up, truncated, rtol, self.A))

    def test_tolerance_from_data_json(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(compare.tolerance("t", d), (1e-3, 1e-7))
            with open(os.path.join(d, "data.json"), "w") as f:
                json.dump({"atol": 1e-4}, f)
            self.assertEqual(compare.tolerance("t", d), (1e-3, 1e-4))


def _write_node_test(root, name, model, inputs, outputs):
    test_dir = os.path.join(root, name)
    data = os.path.join(test_dir, "test_data_set_0")
    os.makedirs(data)
    onnx.save(model, os.path.join(test_dir, "model.onnx"))
    for i, a in enumerate(inputs):
        onnx.save_tensor(numpy_helper.from_array(a), os.path.join(data, f"input_{i}.pb"))
    for i, a in enumerate(outputs):
        onnx.save_tensor(numpy_helper.from_array(a), os.path.join(data, f"output_{i}.pb"))


def _write_script(path, body):
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\n" + textwrap.dedent(body))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


# A stand-in llmc whose behavior is picked by the model path's test name, so one script can
# exercise every result: add correctly, add wrongly, unsupported, error, crash, timeout.
FAKE_LLMC = """
import os, signal, sys, time
import numpy as np, onnx
from onnx import numpy_helper
cmd = sys.argv[1]
if cmd == "compile":
    model, engine = sys.argv[2], sys.argv[4]
    name = os.path.basename(os.path.dirname(model))
    if "unsupported" in name:
        print("llmc compile: error: the model uses 1 operator(s) llmc does not support:", file=sys.stderr)
        print("  (ai.onnx, Mod, opset 17) at node 'n'", file=sys.stderr)
        print("done", file=sys.stderr)
        sys.exit(2)
    if "usage_error" in name:
        print("llmc compile: error: bad option", file=sys.stderr)
        sys.exit(2)
    if "compile_error" in name:
        print("error: something broke", file=sys.stderr)
        print("second line", file=sys.stderr)
        sys.exit(1)
    if "segv" in name:
        os.kill(os.getpid(), signal.SIGSEGV)
    open(engine, "w").write(name)
    sys.exit(0)
engine = sys.argv[2]
name = open(engine).read()
if "hang" in name:
    time.sleep(30)
args = sys.argv[3:]
feeds = {}
out_dir = None
while args:
    flag, value = args[0], args[1]
    args = args[2:]
    if flag == "--input":
        key, path = value.split("=", 1)
        feeds[key] = numpy_helper.to_array(onnx.load_tensor(path))
    elif flag == "--output-dir":
        out_dir = value
if "no_output" in name:
    sys.exit(0)
c = feeds["a"] + feeds["b"]
if "wrong" in name:
    c = c + np.float32(0.5)
np.save(os.path.join(out_dir, "c.npy"), c)
"""


class RunnerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        root = os.path.join(cls._tmp.name, "node")
        a = np.array([1.0, 2.0], np.float32)
        b = np.array([0.5, -1.0], np.float32)
        for name in ("test_good", "test_wrong", "test_unsupported", "test_usage_error", "test_compile_error",
                     "test_segv", "test_hang", "test_no_output"):
            _write_node_test(root, name, _add_model(), [a, b], [a + b])
        _write_node_test(root, "test_out_good", _add_model(opset=7), [a, b], [a + b])
        cls.root = root
        cls.llmc = _write_script(os.path.join(cls._tmp.name, "llmc"), FAKE_LLMC)
        cls._saved_timeout = conformance.STEP_TIMEOUT_S
        conformance.STEP_TIMEOUT_S = 3

    @classmethod
    def tearDownClass(cls):
        conformance.STEP_TIMEOUT_S = cls._saved_timeout
        cls._tmp.cleanup()

    def run_one(self, name):
        [test] = conformance.discover([self.root], f"^{name}$")
        return conformance.run_test(test, self.llmc)

    def test_results(self):
        self.assertEqual(self.run_one("test_good").result, "pass")
        wrong = self.run_one("test_wrong")
        self.assertEqual(wrong.result, "wrong")
        self.assertIn("max abs err 0.5", wrong.detail)
        unsupported = self.run_one("test_unsupported")
        self.assertEqual(unsupported.result, "unsupported")
        self.assertEqual(
            unsupported.detail,
            "compile: llmc compile: error: the model uses 1 operator(s) llmc does not support: "
            "(ai.onnx, Mod, opset 17) at node 'n'",
        )
        usage = self.run_one("test_usage_error")
        self.assertEqual((usage.result, usage.detail), ("error", "compile: exit 2: llmc compile: error: bad option"))
        error = self.run_one("test_compile_error")
        self.assertEqual((error.result, error.detail), ("error", "compile: exit 1: error: something broke"))
        segv = self.run_one("test_segv")
        self.assertEqual(segv.result, "crash")
        self.assertIn("SIGSEGV", segv.detail)
        hang = self.run_one("test_hang")
        self.assertEqual(hang.result, "crash")
        self.assertIn("run: timed out", hang.detail)
        self.assertEqual(self.run_one("test_no_output").result, "error")

    def test_main_report_and_last_line(self):
        out = os.path.join(self._tmp.name, "report", "conformance.md")
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            rc = conformance.main([
                "--llmc", self.llmc, "--out", out, "--keep-going", "--jobs", "2",
                "--test-root", self.root, "--filter", "good|wrong|unsupported",
            ])
        lines = stdout.getvalue().splitlines()
        self.assertEqual(rc, 1)
        self.assertEqual(lines[-1], "1 passed, 2 failed")
        self.assertTrue(any(line.startswith("FAIL test_wrong: wrong") for line in lines))
        self.assertFalse(any("test_out_good" in line for line in lines[:-1] if line.startswith("FAIL")))
        with open(out) as f:
            report = f.read()
        self.assertIn("in-scope pass rate: 33.3% (1/3)", report)
        self.assertIn("out of scope: 1 tests: 1 pass", report)
        self.assertIn("| test_out_good | Add | out: opset 7 | pass |", report)

    def test_main_all_pass_exits_zero(self):
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            rc = conformance.main([
                "--llmc", self.llmc, "--out", os.path.join(self._tmp.name, "ok.md"),
                "--test-root", self.root, "--filter", "^test_(out_)?good$",
            ])
        self.assertEqual(rc, 0)
        self.assertEqual(stdout.getvalue().splitlines()[-1], "1 passed, 0 failed")

    def test_main_fails_when_no_test_ran(self):
        # A missing test root and a filter that selects nothing: 0 passed, 0 failed is a failure.
        for argv in (["--test-root", os.path.join(self._tmp.name, "no-such-dir")],
                     ["--test-root", self.root, "--filter", "^no_such_test$"],
                     ["--test-root", self.root, "--filter", "^test_out_good$"]):  # out of scope only
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                rc = conformance.main(["--llmc", self.llmc, "--out", os.path.join(self._tmp.name, "none.md")] + argv)
            self.assertEqual(rc, 1, argv)
            self.assertEqual(stdout.getvalue().splitlines()[-1], "0 passed, 0 failed")
            self.assertIn("error: no in-scope test ran", stderr.getvalue())

    def test_stops_at_first_failure_without_keep_going(self):
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            rc = conformance.main([
                "--llmc", self.llmc, "--out", os.path.join(self._tmp.name, "stop.md"),
                "--test-root", self.root, "--jobs", "1",
                "--filter", "compile_error|good|no_output|unsupported|wrong",
            ])
        self.assertEqual(rc, 1)
        # Tests start in name order with one job: test_compile_error fails first.
        self.assertEqual(stdout.getvalue().splitlines()[-1], "0 passed, 1 failed")
        with open(os.path.join(self._tmp.name, "stop.md")) as f:
            self.assertIn("not run (stopped at the first in-scope failure): 5 tests", f.read())


if __name__ == "__main__":
    unittest.main()
