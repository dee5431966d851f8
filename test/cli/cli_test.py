#!/usr/bin/env python3
"""Command-line contract of llmc: exit codes and one clear error line for bad input.

Covers malformed ONNX files (truncated, not ONNX, wrong types, missing initializers,
unsupported operators), corrupted engines (truncated, flipped bytes, wrong version, wrong
magic), bad options and inputs, and reproducible builds. Models are built here with onnx's
helper API, so the test needs no fixtures.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LLMC = None


def run(*args):
    proc = subprocess.run([LLMC, *args], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def simple_model(opset=17):
    """y = softmax(x @ W + b) with a dynamic batch."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal((3,)).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
        helper.make_node("Add", ["xw", "b"], ["logits"], name="add"),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "simple",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def micro_decoder(causal=1, positions=64, output="logits"):
    """A one-layer decoder with the opset-23 Attention op: input_ids -> logits (vocab 8)."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
             for name, shape in (("emb", (8, 4)), ("pos", (positions, 4)), ("wq", (4, 4)),
                                 ("wk", (4, 4)), ("wv", (4, 4)), ("head", (4, 8)))]
    inits += [numpy_helper.from_array(np.array(v, np.int64), n)
              for n, v in (("zero", 0), ("one", 1), ("ax1", [1]))]
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["tok"], name="embed"),
        helper.make_node("Shape", ["input_ids"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "one"], ["len"], name="len", axis=0),
        helper.make_node("Range", ["zero", "len", "one"], ["p"], name="range"),
        helper.make_node("Gather", ["pos", "p"], ["pe"], name="pos_embed"),
        helper.make_node("Add", ["tok", "pe"], ["x"], name="x"),
        *[helper.make_node("MatMul", ["x", "w" + c], [c + "2"], name=c) for c in "qkv"],
        *[helper.make_node("Unsqueeze", [c + "2", "ax1"], [c + "4"], name=c + "_heads") for c in "qkv"],
        helper.make_node("Attention", ["q4", "k4", "v4"], ["a4"], name="attention", is_causal=causal),
        helper.make_node("Squeeze", ["a4", "ax1"], ["a"], name="merge"),
        helper.make_node("MatMul", ["a", "head"], [output], name="lm_head"),
    ]
    graph = helper.make_graph(
        nodes, "micro_decoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["batch", "seq", 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


class CliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="llmc-cli-")
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def save(self, model, name="model.onnx"):
        path = self.path(name)
        onnx.save(model, path)
        return path

    def compile_ok(self, model_path, engine_name="model.engine", *extra):
        engine = self.path(engine_name)
        code, out, err = run("compile", model_path, "-o", engine, *extra)
        self.assertEqual(code, 0, err)
        return engine

    def assert_one_error(self, code, err, expected_code, *fragments):
        self.assertEqual(code, expected_code, err)
        lines = [line for line in err.splitlines() if line.strip()]
        self.assertGreaterEqual(len(lines), 1)
        self.assertIn("error:", lines[0])
        for fragment in fragments:
            self.assertIn(fragment, err)

    # --- usage -------------------------------------------------------------------------
    def test_usage_errors_exit_2(self):
        for args in [(), ("frobnicate",), ("compile",), ("compile", "m.onnx"), ("run",), ("inspect",),
                     ("compile", "m.onnx", "-o", "x", "--dim", "batch"), ("run", "e", "--input", "novalue")]:
            code, _, err = run(*args)
            self.assertEqual(code, 2, f"{args}: {err}")
            self.assertTrue(err.strip(), args)

    # --- malformed ONNX ----------------------------------------------------------------
    def test_missing_file(self):
        code, _, err = run("compile", self.path("absent.onnx"), "-o", self.path("e"))
        self.assert_one_error(code, err, 2, "absent.onnx", "cannot open")

    def test_truncated_model(self):
        data = simple_model().SerializeToString()
        path = self.path("truncated.onnx")
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
        code, _, err = run("compile", path, "-o", self.path("e"))
        self.assert_one_error(code, err, 2, "not a valid ONNX model")
        self.assertFalse(os.path.exists(self.path("e")), "a failed compile must not leave an engine")

    def test_not_onnx(self):
        path = self.path("text.onnx")
        with open(path, "w") as f:
            f.write("this is not a protobuf\n" * 10)
        code, _, err = run("compile", path, "-o", self.path("e"))
        self.assert_one_error(code, err, 2, "not a valid ONNX model")

    def test_missing_initializer(self):
        model = simple_model()
        del model.graph.initializer[1]  # "b"
        code, _, err = run("compile", self.save(model), "-o", self.path("e"))
        self.assert_one_error(code, err, 2, "node 'add'", "'b'")

    def test_initializer_size_mismatch(self):
        model = simple_model()
        model.graph.initializer[0].dims[:] = [5, 3]
        code, _, err = run("compile", self.save(model), "-o", self.path("e"))
        self.assert_one_error(code, err, 2, "'W'", "15 elements")

    def test_wrong_types(self):
        model = simple_model()
        model.graph.input[0].type.tensor_type.elem_type = TensorProto.STRING
        code, _, err = run("compile", self.save(model), "-o", self.path("e"))
        self.assert_one_error(code, err, 2, "'x'", "element type 8")

    def test_incompatible_shapes(self):
        model = simple_model()
        model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 5
        code, _, err = run("compile", self.save(model), "-o", self.path("e"))
        self.assert_one_error(code, err, 2, "node 'matmul'")

    def test_dimension_relation_from_the_graph(self):
        # Names that hide a relation (torch.onnx dynamic_axes: past, seq, total named apart):
        # the graph holds only when total = past + seq. llmc finds it, says so, records it in the
        # engine, and refuses inputs that break it; a mismatch no relation explains is an error.
        nodes = [helper.make_node("Concat", ["past", "new"], ["all"], name="concat", axis=1),
                 helper.make_node("Add", ["all", "mask"], ["y"], name="add_mask")]
        graph = helper.make_graph(
            nodes, "related",
            [helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", "past"]),
             helper.make_tensor_value_info("new", TensorProto.FLOAT, ["batch", "seq"]),
             helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "total"])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "total"])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        engine = self.path("related.engine")
        code, _, err = run("compile", self.save(model), "-o", engine, "--dim", "past=0:-1")
        self.assertEqual(code, 0, err)
        self.assertIn("dimension 'total' taken as past + seq: node 'add_mask' holds only then", err)
        code, out, err = run("inspect", engine, "--json")
        self.assertEqual(code, 0, err)
        total = [s for s in json.loads(out)["symbols"] if s["name"] == "total"]
        self.assertEqual(total, [{"name": "total", "min": 1, "max": None, "expression": "past + seq"}])
        rng = np.random.default_rng(3)
        feeds = {"past": rng.standard_normal((2, 3)).astype(np.float32),
                 "new": rng.standard_normal((2, 2)).astype(np.float32),
                 "mask": rng.standard_normal((2, 5)).astype(np.float32)}
        args = []
        for name, value in feeds.items():
            np.save(self.path(name + ".npy"), value)
            args += ["--input", f"{name}={self.path(name + '.npy')}"]
        code, _, err = run("run", engine, *args, "--output-dir", self.path("out"))
        self.assertEqual(code, 0, err)
        np.testing.assert_allclose(np.load(self.path("out/y.npy")),
                                   np.concatenate([feeds["past"], feeds["new"]], 1) + feeds["mask"], rtol=1e-6)
        np.save(self.path("mask.npy"), feeds["mask"][:, :4])
        code, _, err = run("run", engine, *args, "--output-dir", self.path("out"))
        self.assert_one_error(code, err, 2, "symbol 'total' = 4 (from mask dim 1) must equal past + seq = 5")
        # A symbol the graph forces to a size: batch = 3.
        model.graph.input[2].type.tensor_type.shape.dim[0].dim_value = 3
        code, _, err = run("compile", self.save(model, "batch3.onnx"), "-o", self.path("e"))
        self.assertEqual(code, 0, err)
        self.assertIn("dimension 'batch' taken as 3: node 'add_mask'", err)
        # A static mismatch beside the symbols: no relation makes it hold.
        model.graph.input[2].type.tensor_type.shape.dim[0].dim_param = "batch"
        model.graph.input[1].type.tensor_type.shape.dim[0].dim_value = 3
        model.graph.input[2].type.tensor_type.shape.dim[0].dim_value = 4
        code, _, err = run("compile", self.save(model, "unrelated.onnx"), "-o", self.path("e"))
        self.assert_one_error(code, err, 2, "node 'add_mask'", "[3, 8] and [4, 7] do not broadcast",
                              "for every size tried")

    def test_unsupported_ops_listed_at_once(self):
        nodes = [
            helper.make_node("NonMaxSuppression", ["x", "x"], ["a"], name="nms"),
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Custom", ["r"], ["c"], name="custom1", domain="com.example"),
            helper.make_node("Custom", ["c"], ["y"], name="custom2", domain="com.example"),
        ]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.example", 1)])
        code, _, err = run("compile", self.save(model), "-o", self.path("e"))
        self.assert_one_error(code, err, 2, "(ai.onnx, NonMaxSuppression, opset 17) at node 'nms'",
                              "(com.example, Custom, opset 1) at nodes 'custom1', 'custom2'")

    def test_external_data(self):
        model = simple_model()
        path = self.path("external.onnx")
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="external.bin", size_threshold=0)
        self.assertTrue(os.path.exists(self.path("external.bin")))
        engine = self.compile_ok(path, "external.engine")
        reference = self.compile_ok(self.save(simple_model(), "inline.onnx"), "inline.engine")
        x = self.path("x.npy")
        np.save(x, np.ones((2, 4), np.float32))
        outputs = []
        for e in (engine, reference):
            out_dir = self.path(os.path.basename(e) + ".out")
            code, _, err = run("run", e, "--input", f"x={x}", "--output-dir", out_dir)
            self.assertEqual(code, 0, err)
            outputs.append(np.load(os.path.join(out_dir, "y.npy")))
        np.testing.assert_array_equal(outputs[0], outputs[1])
        # A missing data file, and a location escaping the model's folder, are errors.
        os.rename(self.path("external.bin"), self.path("moved.bin"))
        code, _, err = run("compile", path, "-o", self.path("e"))
        self.assert_one_error(code, err, 2, "external.bin")
        model = onnx.load(path, load_external_data=False)
        for tensor in model.graph.initializer:
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = "../escape.bin"
        code, _, err = run("compile", self.save(model, "escape.onnx"), "-o", self.path("e"))
        self.assert_one_error(code, err, 2, "must be a relative path inside the model's directory")

    def test_typed_and_half_initializers(self):
        # float16 via int32_data, bfloat16 via raw bytes, int64 via int64_data.
        half = helper.make_tensor("h", TensorProto.FLOAT16, [3], [0.5, -2.0, 65504])  # stored in int32_data
        assert len(half.int32_data) == 3 and not half.raw_data
        bf16_bits = (np.array([1.5, -3.0, 0.25], np.float32).view(np.uint32) >> 16).astype(np.uint16)
        bf16 = helper.make_tensor("b", TensorProto.BFLOAT16, [3], bf16_bits.tobytes(), raw=True)
        ints = helper.make_tensor("i", TensorProto.INT64, [3], [1, 2, 3])
        nodes = [
            helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT, name="cast_h"),
            helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT, name="cast_b"),
            helper.make_node("Cast", ["i"], ["if"], to=TensorProto.FLOAT, name="cast_i"),
            helper.make_node("Sum", ["x", "hf", "bf", "if"], ["y"], name="sum"),
        ]
        graph = helper.make_graph(nodes, "typed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], [half, bf16, ints])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        engine = self.compile_ok(self.save(model, "typed.onnx"), "typed.engine")
        x = self.path("x.npy")
        np.save(x, np.zeros(3, np.float32))
        code, _, err = run("run", engine, "--input", f"x={x}", "--output-dir", self.path("typed_out"))
        self.assertEqual(code, 0, err)
        np.testing.assert_array_equal(np.load(self.path("typed_out/y.npy")),
                                      np.array([0.5 + 1.5 + 1, -2.0 - 3.0 + 2, 65504 + 0.25 + 3], np.float32))

    def test_recognition_failures_said_once_per_reason(self):
        # Past the mask proof's limit every layer is refused for the same reason: one line names
        # the first and the last node and how many, instead of a line per layer.
        model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "llama_tiny", "model.onnx")
        code, _, err = run("compile", model, "-o", self.path("past_limit.engine"), "--max-context", "16385")
        self.assertEqual(code, 0, err)
        lines = [line.strip() for line in err.splitlines() if "self_attn/Softmax" in line]
        self.assertEqual(lines, ["attention at 2 nodes ('/model/model/layers.0/self_attn/Softmax' .. "
                                 "'/model/model/layers.1/self_attn/Softmax'): proving the mask at a context of "
                                 "16385 tokens is over the proof's limit of 16384 (compile with a smaller "
                                 "--max-context)"], err)
        self.assertIn("warning: not recognized as a decoder language model", err)
        # At the limit it is recognized.
        code, out, err = run("compile", model, "-o", self.path("at_limit.engine"), "--max-context", "16384")
        self.assertEqual(code, 0, err)
        self.assertNotIn("not recognized", err)

    def test_tokenizer_in_engine(self):
        tokenizer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "tokenizers",
                                 "gpt2_bpe", "tokenizer.json")
        model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "gpt2_tiny", "model.onnx")
        engine = self.path("tok.engine")
        code, _, err = run("compile", model, "-o", engine, "--tokenizer", tokenizer)
        self.assertEqual(code, 0, err)
        # The tokenizer has more ids than the model's 512 logits: said at compile time, and a
        # prompt that encodes to one of them is refused when it runs.
        self.assertIn("warning: " + tokenizer + ": the tokenizer has 3000 ids, the model's logits 512: "
                      "a prompt with an id of 512 or more is refused when generating", err)
        code, out, err = run("generate", engine, "--prompt", "In the beginning", "--max-new-tokens", "2")
        self.assert_one_error(code, err, 2, "outside the vocabulary [0, 512)")
        self.assertEqual(out, "")
        code, out, err = run("inspect", engine, "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["tokenizer_bytes"], os.path.getsize(tokenizer))
        # Text out through the engine's own tokenizer, ids out with --print-ids.
        code, out, err = run("generate", engine, "--prompt", "Hi", "--max-new-tokens", "4")
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith("Hi"), out)
        code, out, err = run("generate", engine, "--prompt", "Hi", "--max-new-tokens", "4", "--print-ids")
        self.assertEqual(code, 0, err)
        self.assertEqual(len(out.split()), 4, out)
        # Stop strings: the text ends right before the first occurrence.
        code, out, err = run("generate", engine, "--prompt", "Hi", "--max-new-tokens", "12")
        self.assertEqual(code, 0, err)
        generated = out.rstrip("\n")[len("Hi"):]
        stop = generated[3:5]
        self.assertEqual(len(stop), 2, generated)
        code, out, err = run("generate", engine, "--prompt", "Hi", "--max-new-tokens", "12", "--stop", stop)
        self.assertEqual(code, 0, err)
        self.assertEqual(out.rstrip("\n"), "Hi" + generated[:generated.find(stop)])
        # An engine without a tokenizer refuses a text prompt; a bad tokenizer.json fails compile.
        plain = self.compile_ok(model, "plain.engine")
        code, _, err = run("generate", plain, "--prompt", "Hi")
        self.assert_one_error(code, err, 2, "needs a tokenizer")
        code, _, err = run("generate", plain, "--prompt-ids", "1", "--stop", "x")
        self.assert_one_error(code, err, 2, "--stop needs a tokenizer")
        bad = self.write("bad_tokenizer.json", b'{"model": {"type": "Unigram", "vocab": []}}')
        code, _, err = run("compile", model, "-o", self.path("e"), "--tokenizer", bad)
        self.assert_one_error(code, err, 2, "bad_tokenizer.json")

    def test_compile_folder(self):
        """`llmc compile DIR` on the folder an exporter writes: the same engine as naming each file,
        so `llmc generate --prompt` needs nothing else; errors and warnings name the file."""
        demo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "demo")
        folder = self.path("export")
        os.makedirs(folder)
        for name in ("model.onnx", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            shutil.copy(os.path.join(demo, name), folder)
        eos = json.load(open(os.path.join(demo, "generation_config.json")))["eos_token_id"]
        config = {"vocab_size": 12345, "bos_token_id": 1, "eos_token_id": 2, "max_position_embeddings": 96}
        self.write("export/config.json", json.dumps(config).encode())
        engine = self.path("folder.engine")
        code, out, err = run("compile", folder, "-o", engine)
        self.assertEqual(code, 0, err)
        self.assertIn("from " + folder + ": model.onnx, tokenizer.json, tokenizer_config.json, "
                      "generation_config.json, config.json", out)
        # config.json's vocabulary is not the model's: a warning naming the file.
        self.assertIn("config.json: vocab_size 12345, the model's logits", err)
        # generation_config.json's EOS wins over config.json's; BOS from config.json; the context
        # from max_position_embeddings: the engine equals the explicit compile byte for byte.
        explicit = self.compile_ok(os.path.join(demo, "model.onnx"), "explicit.engine",
                                   "--tokenizer", os.path.join(demo, "tokenizer.json"),
                                   "--tokenizer-config", os.path.join(demo, "tokenizer_config.json"),
                                   "--generation-config", os.path.join(demo, "generation_config.json"),
                                   "--eos-id", str(eos), "--bos-id", "1", "--max-context", "96")
        self.assertEqual(open(engine, "rb").read(), open(explicit, "rb").read())
        code, out, err = run("generate", engine, "--prompt", "And God said", "--max-new-tokens", "6")
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith("And God said") and len(out) > len("And God said\n"), out)
        # Options given win over the folder's files.
        code, out, err = run("compile", folder, "-o", self.path("e.engine"), "--eos-id", "3", "--max-context", "32")
        self.assertEqual(code, 0, err)
        code, out, _ = run("inspect", self.path("e.engine"), "--json")
        self.assertEqual(json.loads(out)["llm"]["eos_token_ids"], [3], out)
        self.assertEqual(json.loads(out)["llm"]["max_context"], 32, out)

        # Errors: exit 2, one message naming the folder or the file, nothing written.
        def refused(folder, *fragments):
            out_path = self.path("refused.engine")
            code, _, err = run("compile", folder, "-o", out_path)
            self.assert_one_error(code, err, 2, *fragments)
            self.assertFalse(os.path.exists(out_path))
        empty = self.path("empty")
        os.makedirs(empty)
        refused(empty, "no .onnx model in the folder")
        two = self.path("two")
        os.makedirs(two)
        for name in ("decoder_model.onnx", "decoder_with_past_model.onnx"):
            shutil.copy(os.path.join(demo, "model.onnx"), os.path.join(two, name))
        refused(two, "several models (decoder_model.onnx, decoder_with_past_model.onnx)")
        self.write("export/generation_config.json", b'{"eos_token_id": [0, 999999]}')
        refused(folder, "generation_config.json: eos_token_id 999999 is not in the vocabulary")
        self.write("export/generation_config.json", b'{"eos_token_id": "x"}')
        refused(folder, "generation_config.json: eos_token_id", "is not a token id")
        self.write("export/generation_config.json", b'{"eos_token_id": 0}')
        self.write("export/config.json", b'{"vocab_size": ')
        refused(folder, "config.json: not a JSON object")
        os.remove(os.path.join(folder, "config.json"))
        big = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "tokenizers", "gpt2_bpe",
                           "tokenizer.json")
        shutil.copy(big, os.path.join(folder, "tokenizer.json"))
        refused(folder, "tokenizer.json: the tokenizer has 3000 ids, the model's logits 2048", "does not belong")
        # No tokenizer: compiles, with a warning that says what that means.
        os.remove(os.path.join(folder, "tokenizer.json"))
        code, _, err = run("compile", folder, "-o", self.path("untokenized.engine"))
        self.assertEqual(code, 0, err)
        self.assertIn("no tokenizer.json: the engine carries no tokenizer", err)

    def test_opset_out_of_range(self):
        code, _, err = run("compile", self.save(simple_model(opset=11)), "-o", self.path("e"))
        self.assert_one_error(code, err, 2, "opset 11")

    def test_bad_dim_option(self):
        code, _, err = run("compile", self.save(simple_model()), "-o", self.path("e"), "--dim", "seq=1:8")
        self.assert_one_error(code, err, 2, "no dimension named 'seq'", "batch")

    # --- engines -----------------------------------------------------------------------
    def engine_bytes(self):
        engine = self.compile_ok(self.save(simple_model()))
        with open(engine, "rb") as f:
            return engine, bytearray(f.read())

    def run_engine(self, engine_path):
        x = self.path("x.npy")
        np.save(x, np.ones((2, 4), np.float32))
        return run("run", engine_path, "--input", f"x={x}", "--output-dir", self.path("out"))

    def write(self, name, data):
        path = self.path(name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_run_and_inspect(self):
        engine = self.compile_ok(self.save(simple_model()), "ok.engine", "--dim", "batch=1:8")
        code, out, err = self.run_engine(engine)
        self.assertEqual(code, 0, err)
        y = np.load(self.path("out/y.npy"))
        self.assertEqual(y.shape, (2, 3))
        np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-6)
        code, _, err = run("run", engine, "--input", f"x={self.path('x.npy')}", "--output-dir", self.path("pb"),
                           "--output-format", "pb")
        self.assertEqual(code, 0, err)
        np.testing.assert_array_equal(numpy_helper.to_array(onnx.load_tensor(self.path("pb/y.pb"))), y)
        code, out, err = run("inspect", engine, "--json")
        self.assertEqual(code, 0, err)
        doc = json.loads(out)
        self.assertEqual(doc["target"], "cpu")
        self.assertEqual(doc["inputs"][0]["shape"], ["batch", 4])
        self.assertEqual(doc["symbols"], [{"name": "batch", "min": 1, "max": 8}])
        self.assertEqual([s["kernel"] for s in doc["steps"]], ["LlmFusedMatMul", "Softmax"])
        self.assertGreater(doc["arena_bytes"], 0)
        code, out, err = run("inspect", engine)
        self.assertEqual(code, 0, err)
        self.assertIn("x: float32 [batch, 4]", out)

    def test_cpu_isa_cap_in_the_cpu_line(self):
        # LLMC_CPU_ISA caps the kernels' level and the CPU line says so; avx_vnni is the avx2 level
        # with AVX-VNNI where the CPU has it, avx2 that level alone; an unknown value is ignored,
        # with the names it could have been.
        engine = self.compile_ok(self.save(simple_model()), "isa.engine")
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
        if "avx2" not in flags:
            self.skipTest("this CPU has no AVX2")

        def cpu_line(value):
            proc = subprocess.run([LLMC, "inspect", engine], capture_output=True, text=True, timeout=120,
                                  env={**os.environ, "LLMC_CPU_ISA": value})
            self.assertEqual(proc.returncode, 0, proc.stderr)
            return next(line for line in proc.stdout.splitlines() if "kernels: " in line)
        self.assertIn("kernels: avx2 (LLMC_CPU_ISA=avx2)", cpu_line("avx2"))
        with_vnni = " with avx_vnni" if "avx_vnni" in flags else ""
        self.assertIn(f"kernels: avx2{with_vnni} (LLMC_CPU_ISA=avx_vnni)", cpu_line("avx_vnni"))
        self.assertIn("kernels: scalar (LLMC_CPU_ISA=scalar)", cpu_line("scalar"))
        self.assertIn("(LLMC_CPU_ISA='AVX2' ignored: scalar, avx2, avx_vnni, avx512, avx512_vnni or amx)",
                      cpu_line("AVX2"))

    def test_opt_level_disable_pass_and_report(self):
        model = self.save(simple_model())
        kernels = {}
        for name, flags in [("o0", ["--opt-level", "0"]), ("nomm", ["--disable-pass", "fuse-matmul"]),
                            ("full", [])]:
            engine = self.compile_ok(model, f"{name}.engine", *flags)
            code, out, err = run("inspect", engine, "--json")
            self.assertEqual(code, 0, err)
            kernels[name] = [s["kernel"] for s in json.loads(out)["steps"]]
        self.assertEqual(kernels["o0"], ["MatMul", "Add", "Softmax"])
        self.assertEqual(kernels["nomm"], ["MatMul", "Add", "Softmax"])
        self.assertEqual(kernels["full"], ["LlmFusedMatMul", "Softmax"])
        code, out, err = run("compile", model, "-o", self.path("r.engine"), "--report")
        self.assertEqual(code, 0, err)
        self.assertIn("fusions: 1 fired", out)
        self.assertRegex(out, r"fired\s+fuse-matmul matmul\+bias: ")
        code, _, err = run("compile", model, "-o", self.path("bad.engine"), "--disable-pass", "fuse-everything")
        self.assertEqual(code, 2)
        self.assertIn("not a fusion pass (they are: fuse-norms", err)
        self.assertFalse(os.path.exists(self.path("bad.engine")))
        code, _, err = run("compile", model, "-o", self.path("bad.engine"), "--opt-level", "3")
        self.assertEqual(code, 2)
        self.assertIn("--opt-level takes an integer in [0, 1], got '3'", err)

    def test_cuda_target(self):
        model = self.save(simple_model())
        engine = self.compile_ok(model, "gpu.engine", "--target", "cuda-sm90")
        code, out, err = run("inspect", engine)
        self.assertEqual(code, 0, err)
        self.assertIn("target:   cuda-sm90", out)
        # Without a usable GPU the CUDA backend refuses with the reason: this runtime built
        # without CUDA (exit 2), or the CUDA build on a machine without driver or GPU (exit 1).
        code, _, err = self.run_engine(engine)
        if code == 0:
            self.skipTest("a GPU is present: the refusal cannot be shown here")
        self.assertIn(code, (1, 2), err)
        self.assertTrue("built without CUDA" in err or "NVIDIA" in err or "GPU" in err, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        # The plan is the same for every target: the CPU backend runs it, with the CPU
        # engine's outputs.
        cpu_engine = self.compile_ok(model, "cpu.engine")
        x = self.path("x.npy")
        np.save(x, np.ones((2, 4), np.float32))
        outs = []
        for path, name in ((engine, "gpu"), (cpu_engine, "cpu")):
            code, _, err = run("run", path, "--backend", "cpu", "--input", f"x={x}",
                               "--output-dir", self.path(name))
            self.assertEqual(code, 0, err)
            outs.append(np.load(self.path(name + "/y.npy")))
        np.testing.assert_array_equal(outs[0], outs[1])
        code, _, err = run("run", engine, "--backend", "gpu", "--input", f"x={x}")
        self.assertEqual(code, 2)
        self.assertIn("--backend takes auto, cpu or cuda, got 'gpu'", err)
        code, _, err = run("compile", model, "-o", self.path("tpu.engine"), "--target", "tpu")
        self.assertEqual(code, 2)
        self.assertIn("unknown target 'tpu' (targets: cpu, cuda-sm80, cuda-sm90)", err)

    def test_reproducible(self):
        model = self.save(simple_model())
        a = self.compile_ok(model, "a.engine")
        b = self.compile_ok(model, "b.engine")
        with open(a, "rb") as fa, open(b, "rb") as fb:
            self.assertEqual(fa.read(), fb.read())

    def test_truncated_engine(self):
        _, data = self.engine_bytes()
        for cut in (0, 10, 64, 200, len(data) - 1):
            path = self.write(f"cut{cut}.engine", data[:cut])
            code, _, err = self.run_engine(path)
            self.assertEqual(code, 2, f"cut at {cut}: {err}")
            self.assertIn("error:", err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)

    def test_flipped_bytes(self):
        _, data = self.engine_bytes()
        # Every byte of the header and plan, and a sample of the weights.
        positions = list(range(0, min(len(data), 4096), 7)) + list(range(65536, len(data), 3))
        for pos in positions:
            corrupted = bytearray(data)
            corrupted[pos] ^= 0x5A
            path = self.write("flip.engine", corrupted)
            code, _, err = self.run_engine(path)
            if code == 0:
                continue  # a flip in padding is harmless
            self.assertEqual(code, 2, f"flip at {pos}: {err}")
            self.assertEqual(len(err.strip().splitlines()), 1, f"flip at {pos}: {err}")

    def test_wrong_version(self):
        _, data = self.engine_bytes()
        newer = bytearray(data)
        struct.pack_into("<HH", newer, 8, 2, 0)
        code, _, err = self.run_engine(self.write("v2.engine", newer))
        self.assert_one_error(code, err, 2, "engine format 2.0 cannot be read")
        newer_minor = bytearray(data)
        struct.pack_into("<H", newer_minor, 10, 9)
        code, _, err = self.run_engine(self.write("v1_9.engine", newer_minor))
        self.assert_one_error(code, err, 2, "engine format 1.9")
        older_minor = bytearray(data)  # the version rule: an older minor of the same major loads
        struct.pack_into("<H", older_minor, 10, 0)
        code, _, err = self.run_engine(self.write("v1_0.engine", older_minor))
        self.assertEqual(code, 0, err)

    def test_wrong_magic(self):
        _, data = self.engine_bytes()
        data[0:4] = b"GGUF"
        code, _, err = run("inspect", self.write("magic.engine", data))
        self.assert_one_error(code, err, 2, "not an llmc engine")

    # --- run-time inputs ---------------------------------------------------------------
    def test_bad_inputs(self):
        engine = self.compile_ok(self.save(simple_model()), "in.engine", "--dim", "batch=1:4")
        cases = {
            "wrong dtype": (np.ones((2, 4), np.int64), "must be float32"),
            "wrong rank": (np.ones((4,), np.float32), "must have rank 2"),
            "wrong static dim": (np.ones((2, 5), np.float32), "dim 1 must be 4"),
            "batch over max": (np.ones((9, 4), np.float32), "outside its declared range [1, 4]"),
        }
        for label, (value, message) in cases.items():
            x = self.path("bad.npy")
            np.save(x, value)
            code, _, err = run("run", engine, "--input", f"x={x}")
            self.assert_one_error(code, err, 2, message)
        code, _, err = run("run", engine)
        self.assert_one_error(code, err, 2, "input 'x' is missing")
        x = self.path("ok.npy")
        np.save(x, np.ones((1, 4), np.float32))
        code, _, err = run("run", engine, "--input", f"z={x}")
        self.assert_one_error(code, err, 2, "no input named 'z'")
        bad = self.write("garbage.npy", b"\x93NUMPY garbage")
        code, _, err = run("run", engine, "--input", f"x={bad}")
        self.assert_one_error(code, err, 2, "garbage.npy")


    # --- language models -----------------------------------------------------------------
    def test_calibration_feeds_only_token_inputs(self):
        # Calibration makes the inputs of a tokenized sequence; a model with any other input
        # (here a float 'x') is refused by name, and nothing is written.
        samples = self.path("calib")
        os.mkdir(samples)
        np.save(os.path.join(samples, "0.npy"), np.array([[1, 2, 3]], dtype=np.int64))
        engine = self.path("w8a8.engine")
        code, out, err = run("compile", self.save(simple_model()), "-o", engine, "--quantize", "w8a8",
                             "--calib-dir", samples)
        self.assert_one_error(code, err, 2, "token_type_ids", "the model also has 'x'")
        self.assertFalse(os.path.exists(engine))

    def test_threads(self):
        # --threads N is the process's thread count for everything compile and verify run
        # (calibration, quantization, engines); the engine is the same bytes at any count. A
        # count out of [0, 256] is refused by name, before anything is written.
        model = self.save(micro_decoder())
        engines = []
        for threads in ("1", "2", "0"):
            engine = self.path(f"t{threads}.engine")
            code, _, err = run("compile", model, "-o", engine, "--threads", threads, "-v")
            self.assertEqual(code, 0, err)
            if threads != "0":
                want = f"{threads} thread{'s' if threads != '1' else ''} for calibration"
                self.assertIn(want, err)
            with open(engine, "rb") as f:
                engines.append(f.read())
        self.assertEqual(engines[0], engines[1])
        self.assertEqual(engines[0], engines[2])
        for bad in ("257", "-1", "two"):
            code, _, err = run("compile", model, "-o", self.path("bad.engine"), "--threads", bad)
            self.assert_one_error(code, err, 2, "--threads")
            self.assertFalse(os.path.exists(self.path("bad.engine")))
        code, _, err = run("verify", model, "--threads", "1", "--length", "6")
        self.assertEqual(code, 0, err)
        code, _, err = run("verify", model, "--threads", "x")
        self.assert_one_error(code, err, 2, "--threads")

    def test_language_model_recognition(self):
        model = self.save(micro_decoder())
        code, out, err = run("compile", model, "-o", self.path("lm.engine"))
        self.assertEqual(code, 0, err)
        self.assertIn("decoder language model: 1 attention layers over the paged KV cache", out)
        info = json.loads(run("inspect", self.path("lm.engine"), "--json")[1])
        self.assertEqual(info["llm"]["num_layers"], 1)
        self.assertEqual(info["llm"]["max_context"], 64)  # the learned position table's rows
        self.assertEqual([t["name"] for t in info["inputs"]], ["input_ids"])
        graph = self.compile_ok(model, "graph.engine", "--as-graph")
        self.assertIsNone(json.loads(run("inspect", graph, "--json")[1])["llm"])
        # Not a decoder: compiles as exported, with a warning that says why.
        code, out, err = run("compile", self.save(micro_decoder(causal=0), "bidi.onnx"), "-o",
                             self.path("bidi.engine"))
        self.assertEqual(code, 0, err)
        self.assertIn("not recognized as a decoder language model", err)
        self.assertIn("node 'attention'", err)
        self.assertIn("bidirectional", err)
        # An encoder (its output is not logits) is a graph anyway: no warning, a note with -v.
        encoder = self.save(micro_decoder(causal=0, output="last_hidden_state"), "encoder.onnx")
        code, out, err = run("compile", encoder, "-o", self.path("encoder.engine"))
        self.assertEqual(code, 0, err)
        self.assertNotIn("decoder language model", err)
        code, out, err = run("compile", encoder, "-o", self.path("encoder.engine"), "--verbose")
        self.assertEqual(code, 0, err)
        self.assertIn("note: compiled as a graph, not as a decoder language model", err)
        self.assertIn("bidirectional", err)

    def test_compile_progress(self):
        """Progress on a terminal (one line rewritten in place, cleared at the end), a line per
        stage with --verbose, nothing when stderr is a file or a pipe."""
        import pty
        model = self.save(micro_decoder())
        args = ["compile", model, "-o", self.path("progress.engine"), "--quantize", "int8"]
        code, out, err = run(*args)
        self.assertEqual(code, 0, err)
        self.assertNotIn("llmc compile [", err)
        code, out, err = run(*args, "--verbose")
        self.assertEqual(code, 0, err)
        for stage in ("] importing ", "] pass llmc-fuse-norms\n", "] pass llmc-quantize-weights\n",
                      "] quantize int8: product 1/", "] writing "):
            self.assertIn(stage, err)
        primary, secondary = pty.openpty()
        proc = subprocess.Popen([LLMC, *args], stdout=subprocess.PIPE, stderr=secondary)
        os.close(secondary)
        seen = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        os.close(primary)
        proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 0, seen)
        text = seen.decode()
        self.assertIn("\r\x1b[Kllmc compile [", text)
        self.assertIn("] pass llmc-quantize-weights", text)
        self.assertIn("] quantize int8: product ", text)
        # One line, rewritten (no scrolling), then cleared before the warnings are printed.
        last_clear = text.rindex("\r\x1b[K")
        self.assertNotIn("\n", text[:last_clear])
        self.assertNotIn("llmc compile [", text[last_clear:])
        self.assertIn("warning: ", text[last_clear:])

    def test_language_model_options(self):
        model = self.save(micro_decoder())
        for extra, expected_code, message in [
            (("--max-context", "0"), 2, "--max-context takes an integer in [1, 16777216], got '0'"),
            (("--max-context", "100"), 2, "exceeds the model's 64 positions"),
            (("--eos-id", "99"), 2, "--eos-id 99 is outside the vocabulary [0, 8)"),
            (("--bos-id", "x"), 2, "--bos-id takes an integer in [0, 2147483647], got 'x'"),
        ]:
            code, _, err = run("compile", model, "-o", self.path("lm.engine"), *extra)
            self.assert_one_error(code, err, expected_code, message)
        engine = self.compile_ok(model, "lm.engine", "--eos-id", "3", "--max-context", "40")
        info = json.loads(run("inspect", engine, "--json")[1])
        self.assertEqual(info["llm"]["eos_token_ids"], [3])
        self.assertEqual(info["llm"]["max_context"], 40)

    def test_generation_errors(self):
        engine = self.compile_ok(self.save(micro_decoder()), "lm.engine")
        # 10 + 20 tokens need 2 blocks of 16; the cache has 1.
        code, _, err = run("generate", engine, "--prompt-ids", ",".join(["1"] * 10),
                           "--max-new-tokens", "20", "--kv-cache-tokens", "16", "--print-ids")
        self.assert_one_error(code, err, 1, "KV cache full")
        code, _, err = run("generate", engine, "--prompt-ids", ",".join(["1"] * 60),
                           "--max-new-tokens", "10")
        self.assert_one_error(code, err, 2, "exceeds the engine's context of 64 tokens")
        code, out, err = run("generate", engine, "--prompt-ids", "1,2,3", "--max-new-tokens", "5",
                             "--print-ids")
        self.assertEqual(code, 0, err)
        self.assertEqual(len(out.split()), 5)
        self.assertIn("(paged KV cache)", err)
        code, _, err = run("bench", self.compile_ok(self.save(micro_decoder()), "g.engine", "--as-graph"))
        self.assert_one_error(code, err, 2, "not a language-model engine")
        code, _, err = run("generate", engine, "--prompt-ids", "1,2", "--kv-cache-dtype", "int4")
        self.assert_one_error(code, err, 2, "--kv-cache-dtype takes auto, f32, f16, bf16, int8 or fp8")
        code, out, err = run("generate", engine, "--prompt-ids", "1,2,3", "--max-new-tokens", "4",
                             "--kv-cache-dtype", "bf16", "--print-ids")
        self.assertEqual(code, 0, err)
        self.assertEqual(len(out.split()), 4)
        # A cache whose pages are written when it is created gives the same tokens.
        code, lazy, err = run("generate", engine, "--prompt-ids", "1,2,3", "--max-new-tokens", "5", "--print-ids")
        self.assertEqual(code, 0, err)
        code, eager, err = run("generate", engine, "--prompt-ids", "1,2,3", "--max-new-tokens", "5", "--print-ids",
                               "--kv-prefault")
        self.assertEqual(code, 0, err)
        self.assertEqual(eager, lazy)
        code, out, err = run("bench", engine, "--context", "8", "--new-tokens", "2", "--repeat", "1", "--kv-only",
                             "--kv-prefault")
        self.assertEqual(code, 0, err)
        self.assertIn("its pages written when created (--kv-prefault)", out)
        code, _, err = run("bench", engine, "--context", "60")
        self.assert_one_error(code, err, 2, "exceeds the engine's context of 64")

    def test_drift_baseline_refusals(self):
        # --drift-text runs the engine: each impossible combination is one error, nothing written.
        model = self.save(micro_decoder())
        tokenizer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "tokenizers",
                                 "gpt2_bpe", "tokenizer.json")
        # Lines of about 40 tokens: each is one prompt (at most 60 tokens in a context of 64).
        text = self.write("text.txt", "\n".join(f"line {i}: " + "and it was so " * 10 for i in range(100)).encode())
        short = self.write("short.txt", "\n".join(f"line {i}: " + "and it was so " * 10 for i in range(63)).encode())
        out = self.path("d.engine")
        cases = [
            (("--drift-text", text, "--strip-weights"), 2, "--drift-text runs the engine"),
            (("--drift-text", text, "--as-graph"), 2, "--drift-text needs a decoder language model"),
            (("--drift-text", text), 2, "no engine carries a tokenizer"),
            # gpt2's ids are outside the micro decoder's vocabulary of 8.
            (("--drift-text", text, "--tokenizer", tokenizer), 2, "drift calibration prompt 0"),
            (("--drift-text", short, "--tokenizer", tokenizer), 2, "short.txt gives 63 prompts; a drift baseline needs 64"),
            (("--drift-text", text, "--drift-new-tokens", "64"), 2, "leaves no room for a prompt"),
            (("--drift-text", text, "--drift-new-tokens", "0"), 2, "--drift-new-tokens"),
            (("--drift-text", text, "--drift-tokens", "10"), 2, "--drift-tokens"),
        ]
        for extra, status, fragment in cases:
            code, _, err = run("compile", model, "-o", out, *extra)
            self.assert_one_error(code, err, status, fragment)
            self.assertFalse(os.path.exists(out), extra)


    # --- file arguments ----------------------------------------------------------------
    def test_directory_and_missing_file_arguments(self):
        # Every file argument is read by one reader: a directory, a missing file or an
        # unreadable one is one error naming the option and the path (exit 2), never an abort.
        model = self.save(micro_decoder())
        engine = self.compile_ok(model, "lm.engine")
        tokenizer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "tokenizers",
                                 "gpt2_bpe", "tokenizer.json")
        folder = self.path("folder")
        os.mkdir(folder)
        np.save(os.path.join(folder, "0.npy"), np.array([[1, 2, 3]], np.int64))
        os.mkdir(self.path("folder/1.npy"))  # a calibration sample that is a directory
        absent = self.path("absent.bin")
        weights = self.write("w.safetensors", b"")
        os.mkdir(self.path("folder.npy"))
        for path, fragment in ((folder, "is a directory"), (absent, "No such file")):
            tensor = os.path.splitext(path)[0] + ".npy"  # tensor files are known by their extension
            cases = [
                (("compile", path, "-o", self.path("e")), "model"),
                (("compile", model, "-o", self.path("e"), "--tokenizer", path), "--tokenizer"),
                (("compile", model, "-o", self.path("e"), "--quantize", "w8a8", "--tokenizer", tokenizer,
                  "--calib", path), "--calib"),
                (("compile", model, "-o", self.path("e"), "--quantize", "int8", "--max-ppl-increase", "5",
                  "--tokenizer", tokenizer, "--eval-text", path), "--eval-text"),
                (("compile", model, "-o", self.path("e"), "--tokenizer", tokenizer, "--drift-text", path),
                 "--drift-text"),
                (("verify", path), "model"),
                (("verify", model, "--tokenizer", path), "--tokenizer"),
                (("verify", model, "--input", f"input_ids={tensor}"), "--input input_ids"),
                (("refit", engine, "--weights", path, "-o", self.path("r.engine")), "--weights"),
                (("refit", path, "--weights", weights, "-o", self.path("r.engine")), "engine"),
                (("eval", engine, "--reference", engine, "--text", path, "--tokenizer", tokenizer), "--text"),
                (("eval", engine, "--reference", engine, "--sentences", path, "--tokenizer", tokenizer),
                 "--sentences"),
                (("eval", engine, "--reference", engine, "--text", model, "--tokenizer", path), "--tokenizer"),
                (("eval", engine, "--reference", path, "--text", model), "--reference"),
                (("run", engine, "--input", f"input_ids={tensor}"), "--input input_ids"),
                (("run", path, "--input", f"input_ids={path}"), "engine"),
                (("generate", engine, "--prompt", "Hi", "--tokenizer", path), "--tokenizer"),
                (("generate", path, "--prompt-ids", "1"), "engine"),
                (("bench", path), "engine"),
                (("inspect", path), "engine"),
            ]
            if path == folder:  # a folder is a model folder to compile (test_compile_folder)
                cases = cases[1:]
            for args, option in cases:
                code, out, err = run(*args)
                self.assert_one_error(code, err, 2, tensor if "--input" in option else path, option, fragment)
                self.assertNotIn("tokens", out, args)
        code, _, err = run("compile", folder, "-o", self.path("e"))
        self.assert_one_error(code, err, 2, folder, "no .onnx model in the folder")
        # --calib-dir takes a directory: a file is refused, and so is a sample that is a folder.
        code, _, err = run("compile", model, "-o", self.path("e"), "--quantize", "w8a8", "--calib-dir", tokenizer)
        self.assert_one_error(code, err, 2, "--calib-dir", "is not a directory")
        code, _, err = run("compile", model, "-o", self.path("e"), "--quantize", "w8a8", "--calib-dir", folder)
        self.assert_one_error(code, err, 2, "1.npy", "is a directory")
        self.assertFalse(os.path.exists(self.path("e")))

    def test_unreadable_file_argument(self):
        if os.geteuid() == 0:
            self.skipTest("root reads every file: permissions cannot be shown here")
        model = self.save(simple_model())
        os.chmod(model, 0)
        code, _, err = run("compile", model, "-o", self.path("e"))
        self.assert_one_error(code, err, 2, model, "Permission denied")

    # --- option values -----------------------------------------------------------------
    def test_integer_options_are_strict(self):
        # Integers are decimal digits with an optional sign, within the option's range; anything
        # else is refused by name, with the text given (exit 2). Parsing comes before any file is
        # read, so the files need not exist.
        model, engine = self.path("m.onnx"), self.path("e.engine")
        options = {
            ("compile", model, "-o", engine): ["--max-context", "--bos-id", "--eos-id", "--opt-level",
                                               "--quant-group"],
            ("verify", model): ["--seed", "--max-context", "--opt-level"],
            ("generate", engine, "--prompt-ids", "1"): ["--max-new-tokens", "--top-k", "--seed", "--stop-id",
                                                        "--beam", "--kv-cache-tokens"],
            ("bench", engine): ["--context", "--new-tokens", "--repeat", "--batch"],
            ("eval", engine, "--reference", engine, "--text", model): ["--context", "--max-windows"],
            ("run", engine): ["--repeat"],
        }
        bad = ["2.9", "0x10", "inf", "nan", "99999999999", "1e12", "", " 3", "3 ", "3x", "--", "+-3",
               "-99999999999999999999", "1" * 30]
        for command, flags in options.items():
            for flag in flags:
                for text in bad:
                    if text == "99999999999" and flag in ("--seed", "--kv-cache-tokens", "--max-windows") \
                            and command[0] != "verify":
                        continue  # 64-bit options
                    code, out, err = run(*command, flag, text)
                    self.assert_one_error(code, err, 2, flag, f"'{text}'")
        for args in [("compile", model, "-o", engine, "--dim", "batch=1:2.5"),
                     ("compile", model, "-o", engine, "--dim", "batch=0x1:8"),
                     ("generate", engine, "--prompt-ids", "1,2.9"),
                     ("generate", engine, "--prompt-ids", "1,0x10")]:
            code, _, err = run(*args)
            self.assert_one_error(code, err, 2, args[-2])
        # Each option's own range, with the bounds in the message.
        for args, fragment in [(("generate", engine, "--prompt-ids", "1", "--max-new-tokens", "-1"), "[0, "),
                               (("generate", engine, "--prompt-ids", "1", "--top-k", "3000000000"), "2147483647]"),
                               (("generate", engine, "--prompt-ids", "1", "--beam", "0"), "[1, "),
                               (("bench", engine, "--batch", "257"), "[1, 256]"),
                               (("run", engine, "--repeat", "0"), "[1, "),
                               (("verify", model, "--seed", "4294967296"), "4294967295]")]:
            code, _, err = run(*args)
            self.assert_one_error(code, err, 2, args[-2], f"'{args[-1]}'", fragment)
        # Valid integers, a sign included, still work.
        lm = self.compile_ok(self.save(micro_decoder(), "lm.onnx"), "lm.engine", "--max-context", "+40")
        self.assertEqual(json.loads(run("inspect", lm, "--json")[1])["llm"]["max_context"], 40)
        code, out, err = run("generate", lm, "--prompt-ids", "1,2", "--max-new-tokens", "3", "--print-ids",
                             "--top-k", "+2", "--seed", "7")
        self.assertEqual(code, 0, err)
        self.assertEqual(len(out.split()), 3, out)

    def test_float_options_are_strict(self):
        model, engine = self.path("m.onnx"), self.path("e.engine")
        options = {
            ("compile", model, "-o", engine, "--quantize", "w8a8"): ["--smooth-alpha", "--smooth-percentile"],
            ("compile", model, "-o", engine, "--quantize", "int8"): ["--max-ppl-increase"],
            ("verify", model): ["--rtol", "--atol"],
            ("generate", engine, "--prompt-ids", "1"): ["--temperature", "--top-p", "--min-p",
                                                        "--repetition-penalty", "--length-penalty"],
        }
        for command, flags in options.items():
            for flag in flags:
                for text in ["nan", "inf", "-inf", "0.5x", "", "0x1p-1", " 0.5", "1e999"]:
                    code, _, err = run(*command, flag, text)
                    self.assert_one_error(code, err, 2, flag, f"'{text}'")

    # --- limits the engine declares ------------------------------------------------------
    def test_runtime_enforces_the_engine_context(self):
        # The learned position table has 64 rows; the engine declares a context of 40. A plain
        # run of 50 tokens is refused by the runtime, naming the input, dimension, value and limit.
        engine = self.compile_ok(self.save(micro_decoder()), "lm.engine", "--max-context", "40")
        ids = self.path("ids.npy")
        np.save(ids, np.ones((1, 50), np.int64))
        code, _, err = run("run", engine, "--input", f"input_ids={ids}")
        self.assert_one_error(code, err, 2, "'input_ids'", "dim 1", "50", "context of 40")
        np.save(ids, np.ones((1, 40), np.int64))
        code, _, err = run("run", engine, "--input", f"input_ids={ids}")
        self.assertEqual(code, 0, err)


def main():
    global LLMC
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    args, rest = parser.parse_known_args()
    LLMC = os.path.abspath(args.llmc)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
