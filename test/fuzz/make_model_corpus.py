#!/usr/bin/env python3
"""Writes the seed corpora of the ONNX-importer and engine fuzz targets.

corpus/onnx/*.onnx: tiny models made here with onnx.helper (every storage form of
initializers, external data included, symbolic dims, optional inputs, a shape chain). corpus/engine/*.engine: the same
models compiled by llmc (pass its path), and add_drift.engine: add.engine with a drift
baseline written in through flatc (checksummed as llmc does). Run:
    .venv/bin/python test/fuzz/make_model_corpus.py build/tools/llmc/llmc
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "seed", inputs, outputs, list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8 if opset < 23 else 11
    return m


def seeds():
    f = TensorProto.FLOAT
    yield "add", model([helper.make_node("Add", ["x", "y"], ["z"], name="add")],
                       [helper.make_tensor_value_info("x", f, [2, 3]), helper.make_tensor_value_info("y", f, [3])],
                       [helper.make_tensor_value_info("z", f, [2, 3])])
    yield "softmax_symbolic", model(
        [helper.make_node("Softmax", ["x"], ["t"], name="sm", axis=-1),
         helper.make_node("Transpose", ["t"], ["y"], name="tr", perm=[1, 0])],
        [helper.make_tensor_value_info("x", f, ["batch", 4])], [helper.make_tensor_value_info("y", f, [4, "batch"])])
    yield "clip_optional", model(
        [helper.make_node("Clip", ["x", "", "hi"], ["y"], name="clip")],
        [helper.make_tensor_value_info("x", f, [4]), helper.make_tensor_value_info("hi", f, [])],
        [helper.make_tensor_value_info("y", f, [4])])
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    h = helper.make_tensor("h", TensorProto.FLOAT16, [3], np.array([1, 2, 3], np.float16).view(np.uint16).tolist())
    yield "matmul_initializers", model(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
         helper.make_node("Cast", ["h"], ["hf"], name="cast", to=TensorProto.FLOAT),
         helper.make_node("Add", ["m", "hf"], ["y"], name="add")],
        [helper.make_tensor_value_info("x", f, ["n", 2])], [helper.make_tensor_value_info("y", f, ["n", 3])], [w, h])
    yield "shape_chain", model(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         helper.make_node("Constant", [], ["i"], name="const", value=numpy_helper.from_array(np.array([0], np.int64))),
         helper.make_node("Gather", ["s", "i"], ["b"], name="gather", axis=0),
         helper.make_node("Constant", [], ["rest"], name="rest", value_ints=[-1]),
         helper.make_node("Concat", ["b", "rest"], ["ns"], name="concat", axis=0),
         helper.make_node("Reshape", ["x", "ns"], ["y"], name="reshape")],
        [helper.make_tensor_value_info("x", f, ["batch", 2, 3])], [helper.make_tensor_value_info("y", f, ["batch", 6])])
    # An initializer in an external file: fuzz_onnx_import.cpp writes weights.bin (floats 0..15)
    # next to the model; w is floats 2..7 of it.
    external = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3])
    external.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "weights.bin"), ("offset", "8"), ("length", "24")):
        entry = external.external_data.add()
        entry.key, entry.value = key, value
    yield "external_data", model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        [helper.make_tensor_value_info("x", f, ["n", 2])], [helper.make_tensor_value_info("y", f, ["n", 3])],
        [external])
    yield "reduce_int", model(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="sum", keepdims=0)],
        [helper.make_tensor_value_info("x", TensorProto.INT64, [2, 3])], [helper.make_tensor_value_info("y", TensorProto.INT64, [2])],
        [numpy_helper.from_array(np.array([1], np.int64), "axes")])

    # A micro decoder (opset 23 Attention, learned positions): recognized as a language model,
    # so its engine carries the llm config and the LlmAttention/LlmPositions/LlmLastTokens steps.
    rng = np.random.default_rng(0)
    mats = {n: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), n)
            for n, shape in (("emb", (8, 4)), ("pos", (16, 4)), ("wq", (4, 4)), ("wk", (4, 4)),
                             ("wv", (4, 4)), ("head", (4, 8)))}
    ints = [numpy_helper.from_array(np.array(v, np.int64), n)
            for n, v in (("zero", 0), ("one", 1), ("ax1", [1]))]
    i64 = TensorProto.INT64
    yield "micro_decoder", model(
        [helper.make_node("Gather", ["emb", "input_ids"], ["tok"], name="embed"),
         helper.make_node("Shape", ["input_ids"], ["shape"], name="shape"),
         helper.make_node("Gather", ["shape", "one"], ["len"], name="len", axis=0),
         helper.make_node("Range", ["zero", "len", "one"], ["p"], name="range"),
         helper.make_node("Gather", ["pos", "p"], ["pe"], name="pos_embed"),
         helper.make_node("Add", ["tok", "pe"], ["x"], name="x"),
         *[helper.make_node("MatMul", ["x", "w" + c], [c + "2"], name=c) for c in "qkv"],
         *[helper.make_node("Unsqueeze", [c + "2", "ax1"], [c + "4"], name=c + "_heads") for c in "qkv"],
         helper.make_node("Attention", ["q4", "k4", "v4"], ["a4"], name="attention", is_causal=1),
         helper.make_node("Squeeze", ["a4", "ax1"], ["a"], name="merge"),
         helper.make_node("MatMul", ["a", "head"], ["logits"], name="lm_head")],
        [helper.make_tensor_value_info("input_ids", i64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", f, ["batch", "seq", 8])],
        list(mats.values()) + ints, opset=23)
    # Two products, the first pruned by magnitude and stored sparse under int8 (the second is
    # the output, which stays dense): the engine seed of the sparse weights' checks.
    rng = np.random.default_rng(5)
    yield "sparse_int8", model(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
         helper.make_node("Relu", ["h"], ["r"], name="relu"),
         helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")],
        [helper.make_tensor_value_info("x", f, ["batch", 64])],
        [helper.make_tensor_value_info("y", f, ["batch", 32])],
        [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w1"),
         numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w2")])



def checksum64(data):
    """runtime/src/core/engine_file.cpp's checksum64, in Python."""
    mask = (1 << 64) - 1
    p1, p2, p3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9

    def rotl(x, r):
        return ((x << r) | (x >> (64 - r))) & mask

    lanes = [(p1 + p2) & mask, p2, 0, (-p1) & mask]
    i = 0
    while i + 32 <= len(data):
        for lane in range(4):
            word = struct.unpack_from("<Q", data, i + 8 * lane)[0]
            lanes[lane] = (rotl((lanes[lane] + word * p2) & mask, 31) * p1) & mask
        i += 32
    h = (rotl(lanes[0], 1) + rotl(lanes[1], 7) + rotl(lanes[2], 12) + rotl(lanes[3], 18) + len(data)) & mask
    for byte in data[i:]:
        h = (rotl(h ^ ((byte * p3) & mask), 11) * p1) & mask
    h ^= h >> 33
    h = (h * p2) & mask
    h ^= h >> 29
    h = (h * p3) & mask
    h ^= h >> 32
    return h


def with_drift_baseline(engine_path, out_path):
    """A weightless engine with a drift baseline added to its FlatBuffer by flatc."""
    schema = os.path.join(HERE, "..", "..", "runtime", "schema", "engine.fbs")
    data = open(engine_path, "rb").read()
    header = struct.unpack_from("<8sHHIQQQQQQ", data)
    fb_offset, fb_size, weights_size = header[4], header[5], header[7]
    assert weights_size == 0, "only weightless engines"
    with tempfile.TemporaryDirectory() as work:
        binary = os.path.join(work, "engine.bin")
        open(binary, "wb").write(data[fb_offset:fb_offset + fb_size])
        subprocess.run(["flatc", "--json", "--strict-json", "--raw-binary", "-o", work, schema, "--", binary],
                       check=True)
        tree = json.load(open(os.path.join(work, "engine.json")))
        tree["drift_baseline"] = {
            "entropy": {"edges": [0.5, 1.0, 2.0], "counts": [3, 4, 5, 6]},
            "logprob": {"edges": [-2.0, -0.5], "counts": [6, 6, 6]},
            "tokens": 18, "new_tokens": 4, "source": "seed"}
        json.dump(tree, open(os.path.join(work, "engine.json"), "w"))
        subprocess.run(["flatc", "--binary", "-o", work, schema, os.path.join(work, "engine.json")], check=True)
        flatbuffer = open(os.path.join(work, "engine.engine"), "rb").read()  # the schema's file_extension
    assert checksum64(data[fb_offset:fb_offset + fb_size]) == header[8], "checksum64 differs from llmc's"
    out = struct.pack("<8sHHIQQQQQQ", b"LLMCENG\0", 1, 5, 64, 64, len(flatbuffer), 0, 0,
                      checksum64(flatbuffer), checksum64(b""))
    open(out_path, "wb").write(out + flatbuffer)


COMPILE_FLAGS = {"sparse_int8": ["--prune", "magnitude:0.5", "--quantize", "int8", "--sparse-storage"]}


def main():
    llmc = sys.argv[1] if len(sys.argv) > 1 else None
    onnx_dir = os.path.join(HERE, "corpus", "onnx")
    engine_dir = os.path.join(HERE, "corpus", "engine")
    os.makedirs(onnx_dir, exist_ok=True)
    os.makedirs(engine_dir, exist_ok=True)
    for name, m in seeds():
        if name != "external_data":  # the checker wants weights.bin, which the target writes
            onnx.checker.check_model(m)
        path = os.path.join(onnx_dir, name + ".onnx")
        with open(path, "wb") as out:
            out.write(m.SerializeToString())
        # Engines with weights are >= 64 KiB (the weights section is page aligned); keep the
        # engine corpus to the weightless ones so replays stay fast.
        # The weighted exceptions: the micro decoder, the only seed whose engine has a
        # language-model config, and the sparse int8 product.
        weightless = not m.graph.initializer and not any(n.op_type == "Constant" for n in m.graph.node)
        if llmc and (weightless or name in ("micro_decoder", *COMPILE_FLAGS)):
            subprocess.run([llmc, "compile", path, "-o", os.path.join(engine_dir, name + ".engine"),
                            *COMPILE_FLAGS.get(name, [])], check=True, stdout=subprocess.DEVNULL)
    if llmc:
        with_drift_baseline(os.path.join(engine_dir, "add.engine"), os.path.join(engine_dir, "add_drift.engine"))


if __name__ == "__main__":
    main()
