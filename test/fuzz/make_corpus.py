#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets: small, valid (and a few unsupported) inputs
from which the replay tests' mutations and libFuzzer start.

Run: .venv/bin/python test/fuzz/make_corpus.py   (needs numpy and onnx)
Seeds are tiny on purpose: mutations of a small input reach every branch of a header
parser faster than those of a big one. The cli_files engine seed is corpus/engine/add.engine
(make_model_corpus.py), when it exists.
"""
import json
import os
import struct

import numpy as np
import onnx
from onnx import helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def write(corpus, name, data):
    directory = os.path.join(HERE, "corpus", corpus)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


def npy(array, version=None):
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version, allow_pickle=False)
    return buffer.getvalue()


def npy_corpus():
    write("npy", "float32_2x3.npy", npy(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5))
    write("npy", "float16_scalar.npy", npy(np.array(1.5, dtype=np.float16)))
    write("npy", "bool_4.npy", npy(np.array([True, False, False, True])))
    write("npy", "int64_empty.npy", npy(np.zeros((0, 2), dtype=np.int64)))
    write("npy", "int32_fortran.npy", npy(np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))))
    write("npy", "uint8_v2.npy", npy(np.arange(3, dtype=np.uint8), version=(2, 0)))
    write("npy", "int16_v3.npy", npy(np.arange(3, dtype=np.int16).reshape(1, 3, 1), version=(3, 0)))
    write("npy", "bfloat16_v2.npy", npy(np.array([0x3F80, 0xBF00], dtype="<u2").view("V2")))
    write("npy", "big_endian.npy", npy(np.arange(2, dtype=">u4")))


def unpacked_float_tensor():
    """A float tensor with dims and float_data unpacked, which python protobuf never writes."""
    out = bytearray()
    out += b"\x08\x02"  # dims: 2
    out += b"\x10\x01"  # data_type: FLOAT
    for value in (1.0, -2.5):
        out += b"\x25" + struct.pack("<f", value)  # float_data, wire type 5
    out += b"\x42\x01u"  # name: "u"
    return bytes(out)


def tensor_proto_corpus():
    def pb(tensor):
        return tensor.SerializeToString()

    write("tensor_proto", "float_raw.pb", pb(numpy_helper.from_array(
        np.arange(6, dtype=np.float32).reshape(2, 3), name="x")))
    write("tensor_proto", "float_data.pb", pb(helper.make_tensor(
        "f", onnx.TensorProto.FLOAT, [3], [0.5, -1.0, 2.0])))
    write("tensor_proto", "float_unpacked.pb", unpacked_float_tensor())
    write("tensor_proto", "int8_int32_data.pb", pb(helper.make_tensor(
        "i8", onnx.TensorProto.INT8, [2, 2], [-128, -1, 0, 127])))
    write("tensor_proto", "float16_int32_data.pb", pb(helper.make_tensor(
        "h", onnx.TensorProto.FLOAT16, [2], [1.0, -0.5])))
    write("tensor_proto", "bool_int32_data.pb", pb(helper.make_tensor(
        "b", onnx.TensorProto.BOOL, [3], [True, False, True])))
    write("tensor_proto", "int64_data.pb", pb(helper.make_tensor(
        "i64", onnx.TensorProto.INT64, [2], [-(2**40), 7])))
    write("tensor_proto", "double_data.pb", pb(helper.make_tensor(
        "d", onnx.TensorProto.DOUBLE, [2], [0.25, -8.0])))
    write("tensor_proto", "uint32_uint64_data.pb", pb(helper.make_tensor(
        "u32", onnx.TensorProto.UINT32, [2], [4294967295, 1])))
    scalar = numpy_helper.from_array(np.array(3, dtype=np.int32), name="s")
    scalar.doc_string = "a scalar"
    write("tensor_proto", "int32_scalar_doc.pb", pb(scalar))
    external = numpy_helper.from_array(np.arange(2, dtype=np.float32), name="e")
    onnx.external_data_helper.set_external_data(external, location="w.bin")
    external.ClearField("raw_data")
    external.data_location = onnx.TensorProto.EXTERNAL
    write("tensor_proto", "external.pb", pb(external))


def tokenizer_text_corpus():
    """Text for the built-in tokenizers of fuzz_tokenizers.h: scripts, specials, bad UTF-8."""
    write("tokenizer_text", "text_code.txt", b"def f(x):\n    return x ** 2  # the thing\n")
    write("tokenizer_text", "text_mixed.txt",
          "Hello <|eot|> world, it's 12345 héllo 中文 🤖\r\n\t  <mask> ab.".encode())
    write("tokenizer_text", "specials.txt", b"<s>[CLS] the</s>[SEP] STOP <unk> <0x41>")
    write("tokenizer_text", "accents_digits.txt", "Café naïve 1|2,3! ÅNGSTRÖM ﬁ ①".encode())
    write("tokenizer_text", "invalid_utf8.txt", b"ok \xc3( \xe2\x82 \xf0\x9f\x98 \xff end")
    write("tokenizer_text", "spaces.txt", "   leading  and\u00a0trailing \n\n\r ".encode())


# fuzz_cli_files.cpp: the first byte picks the reader (its enum Reader, kReaders of them) and,
# divided by kReaders, the built-in tokenizer (0 byte-level BPE, 1 SentencePiece BPE,
# 2 WordPiece, 3 WordLevel) where the reader needs one.
CLI_READERS = ["input_npy", "input_pb", "engine", "tokenizer", "sentences", "text", "options",
               "calib_prompts", "calib_npy", "calib_stats", "refit_weights"]


def cli(name, reader, contents, tokenizer=0):
    selector = CLI_READERS.index(reader) + len(CLI_READERS) * tokenizer
    write("cli_files", name, bytes([selector]) + contents)


def cli_files_corpus():
    cli("input_float32.npy", "input_npy", npy(np.arange(6, dtype=np.float32).reshape(2, 3)))
    cli("input_int64.pb", "input_pb", numpy_helper.from_array(
        np.array([[1, 2, 3]], np.int64), name="input_ids").SerializeToString())
    engine = os.path.join(HERE, "corpus", "engine", "add.engine")
    if os.path.exists(engine):
        with open(engine, "rb") as f:
            cli("add.engine", "engine", f.read())
    tokenizer = {"model": {"type": "WordLevel", "unk_token": "<unk>", "vocab": {"<unk>": 0, "a": 1}},
                 "pre_tokenizer": {"type": "Whitespace"}, "added_tokens": []}
    cli("tokenizer.json", "tokenizer", json.dumps(tokenizer).encode())
    cli("sentences_bpe.txt", "sentences", "Hello world\r\n\nthe thing 中文\n".encode())
    cli("sentences_wordpiece.txt", "sentences", b"ab a.\nba\n", tokenizer=2)
    cli("text_sentencepiece.txt", "text", "the café 中 a".encode(), tokenizer=1)
    cli("options_int.txt", "options", b"9223372036854775807")
    cli("options_float.txt", "options", b"2.5e-1")
    cli("options_signed.txt", "options", b"-0")
    cli("calib_prompts_bpe.txt", "calib_prompts", b"the thing\n  \t\nHello world\n")
    cli("calib_prompts_wordlevel.txt", "calib_prompts", b"hello, world 12\n", tokenizer=3)
    cli("calib_ids_int64.npy", "calib_npy", npy(np.array([[1, 2, 3, 4, 5]], np.int64)))
    cli("calib_ids_int32.npy", "calib_npy", npy(np.array([7, 8], np.int32)))
    # What writeCalibrationStats (compiler/pipeline/Calibration.cpp) writes for one product.
    key = np.frombuffer(b"0123456789abcdef", np.uint8)
    cli("calib_stats.safetensors", "calib_stats", safetensors({
        "llmc.calibration_key": ("U8", key),
        "mm/absmax": ("F32", np.array([1.0, 2.0], np.float32)),
        "mm/mean_abs": ("F32", np.array([0.5, 1.0], np.float32)),
        "mm/mean_sq": ("F32", np.array([0.75, 1.375], np.float32)),
        "mm/samples": ("F32", np.array([[1.0, -2.0], [0.5, 0.25], [-1.0, 0.0]], np.float32)),
        "mm/gram": ("F32", np.array([[2.25, -1.875], [-1.875, 4.0625]], np.float32)),
        "mm/rows_seen": ("I64", np.array([3], np.int64))}))
    # The initializers of the refit model in fuzz_cli_files.cpp: w [2, 3] and b [3].
    cli("refit_weights.safetensors", "refit_weights", safetensors({
        "w": ("F32", np.arange(6, dtype=np.float32).reshape(2, 3)), "b": ("F32", np.ones(3, np.float32))}))
    cli("refit_wrong_shape.safetensors", "refit_weights", safetensors({
        "w": ("F32", np.arange(6, dtype=np.float32).reshape(3, 2)), "b": ("F16", np.ones(3, np.float16))}))


# fuzz_openai_request.cpp: the first byte picks the parser (0 completions, 1 chat completions,
# 2 tokenizer_config.json, 3 generation_config.json); the JSON follows.
def openai_request_corpus():
    def request(name, selector, body):
        write("openai_request", name, bytes([selector]) + json.dumps(body).encode())
    request("completion_text.json", 0, {"model": "fuzz", "prompt": "Hello world", "max_tokens": 8,
                                        "temperature": 0.7, "top_p": 0.9, "stop": ["wor", "\n"], "n": 2})
    request("completion_ids.json", 0, {"prompt": [[1, 2, 3], [4, 5]], "logprobs": 2, "seed": 7,
                                       "stream": True, "stream_options": {"include_usage": True},
                                       "logit_bias": {"5": -100}, "stop_token_ids": [3]})
    request("chat.json", 1, {"messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi \u00e9"}],
                             "max_completion_tokens": 4, "logprobs": True, "top_logprobs": 3})
    request("tokenizer_config.json", 2, {"bos_token": "<s>", "eos_token": {"content": "</s>"},
                                         "chat_template": "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"})
    request("generation_config.json", 3, {"temperature": 0.6, "top_p": 0.9, "eos_token_id": [1, 2]})


def main():
    openai_request_corpus()
    npy_corpus()
    tensor_proto_corpus()
    safetensors_corpus()
    tokenizer_text_corpus()
    cli_files_corpus()



def safetensors(tensors, metadata=None):
    """A safetensors file: 8-byte little-endian header length, JSON header, then the data."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, array) in tensors.items():
        data = array.tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def safetensors_corpus():
    write("safetensors", "two_tensors.safetensors", safetensors(
        {"w": ("F32", np.arange(6, dtype=np.float32).reshape(2, 3)), "ids": ("I64", np.arange(4, dtype=np.int64))},
        {"format": "pt"}))
    write("safetensors", "half_types.safetensors", safetensors(
        {"h": ("F16", np.ones(3, np.float16)), "b": ("BF16", np.ones(2, np.uint16)), "flag": ("BOOL", np.array([1, 0], np.uint8))}))
    write("safetensors", "scalar_and_empty.safetensors", safetensors(
        {"s": ("F32", np.array(2.5, np.float32)), "e": ("F32", np.zeros((0, 4), np.float32))}))
    bad = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 999]}}).encode().ljust(60)
    write("safetensors", "bad_offsets.safetensors", struct.pack("<Q", 60) + bad + b"\0" * 16)

if __name__ == "__main__":
    main()
