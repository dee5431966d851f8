#!/usr/bin/env python3
"""Writes the tiny .npy and .pb files that tensor_io_test.cpp reads, with numpy and onnx
themselves, so that the C++ readers are tested against what real producers write.

Run from anywhere: .venv/bin/python test/unit/core/data/make_tensor_io_fixtures.py
The values are the ones tensor_io_test.cpp expects; change both together.
"""
import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tensor_io")

# dtype name (as llmc::dtypeName prints it) -> numpy dtype. Values: arange(-3, 3) for signed
# types, arange(6) for unsigned ones, arange(-3, 3) * 0.5 for floats; shape (2, 3).
NUMPY_DTYPES = {
    "float16": np.float16, "float32": np.float32, "float64": np.float64,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
}


def values(dtype):
    if np.issubdtype(dtype, np.floating):
        return (np.arange(-3, 3) * 0.5).astype(dtype).reshape(2, 3)
    if np.issubdtype(dtype, np.unsignedinteger):
        return np.arange(6).astype(dtype).reshape(2, 3)
    return np.arange(-3, 3).astype(dtype).reshape(2, 3)


BOOLS = np.array([[True, False, True], [True, False, False]])


def save_npy(name, array, version=None):
    with open(os.path.join(OUT, name), "wb") as f:
        np.lib.format.write_array(f, array, version=version, allow_pickle=False)


def save_pb(name, tensor):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(tensor.SerializeToString())


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, dtype in NUMPY_DTYPES.items():
        save_npy(f"{name}.npy", values(dtype))
        save_pb(f"{name}_raw.pb", numpy_helper.from_array(values(dtype), name=f"x_{name}"))
        # The typed-field form (float_data, int32_data, ...), packed as protobuf writes it.
        onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        save_pb(f"{name}_typed.pb",
                helper.make_tensor(f"t_{name}", onnx_type, [2, 3], values(dtype).flatten().tolist()))
    save_npy("bool.npy", BOOLS)
    save_pb("bool_raw.pb", numpy_helper.from_array(BOOLS, name="x_bool"))
    save_pb("bool_typed.pb",
            helper.make_tensor("t_bool", onnx.TensorProto.BOOL, [2, 3], BOOLS.flatten().tolist()))
    # bfloat16 bit patterns of -1.5, -1, -0.5, 0, 0.5, 1: numpy has no bfloat16, so a 2-byte
    # void array stands in ('|V2'); onnx converts the float values to the same patterns and
    # stores them in int32_data.
    bf16_bits = np.array([0xBFC0, 0xBF80, 0xBF00, 0x0000, 0x3F00, 0x3F80], dtype="<u2")
    save_npy("bfloat16.npy", bf16_bits.view("V2").reshape(2, 3))
    save_pb("bfloat16_typed.pb",
            helper.make_tensor("t_bfloat16", onnx.TensorProto.BFLOAT16, [2, 3],
                               [-1.5, -1.0, -0.5, 0.0, 0.5, 1.0], raw=False))
    # Layout and format variants: all hold arange(24) as int32 of shape (2, 3, 4).
    grid = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    save_npy("fortran_order.npy", np.asfortranarray(grid))
    save_npy("version2.npy", grid, version=(2, 0))
    save_npy("version3.npy", grid, version=(3, 0))
    save_npy("scalar.npy", np.array(3.5, dtype=np.float32))
    save_npy("empty.npy", np.zeros((0, 3), dtype=np.float32))
    save_npy("big_endian.npy", grid.astype(">i4"))
    save_npy("complex.npy", np.zeros(2, dtype=np.complex64))
    save_pb("scalar.pb", numpy_helper.from_array(np.array(3.5, dtype=np.float32), name="s"))
    save_pb("string.pb", helper.make_tensor("s", onnx.TensorProto.STRING, [2], [b"a", b"b"]))
    external = numpy_helper.from_array(grid, name="ext")
    onnx.external_data_helper.set_external_data(external, location="weights.bin")
    external.ClearField("raw_data")
    external.data_location = onnx.TensorProto.EXTERNAL
    save_pb("external.pb", external)


if __name__ == "__main__":
    main()
