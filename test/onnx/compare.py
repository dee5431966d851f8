"""Compares llmc's outputs with an ONNX node test's expected outputs.

The rule is the ONNX backend test runner's (onnx/backend/test/runner): same dtype, same shape,
then np.testing.assert_allclose semantics with the test's rtol/atol (1e-3/1e-7 unless the
test directory has a data.json that overrides them). Two deliberate differences: integer
outputs must match exactly (the runner would let rtol excuse large-integer differences), and
shapes must be equal rather than merely broadcast-equal.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-7

# Per-test tolerances on top of the data.json mechanism, for tests whose reference outputs are
# known to be tighter than any reasonable float32 implementation can meet. Every entry needs a
# comment saying why. Keyed by test name: (rtol, atol).
TOLERANCE_OVERRIDES: dict[str, tuple[float, float]] = {
    # The reference bfloat16 values are float32 truncated to their high 16 bits
    # (onnx/backend/test/case/node/cast.py); round-to-nearest-even, which the Cast spec's
    # "rounded to the target mantissa width" and every fast implementation use, differs by up
    # to one bfloat16 ulp, 2^-7 relative.
    "test_cast_FLOAT_to_BFLOAT16": (2.0**-7, DEFAULT_ATOL),
    "test_castlike_FLOAT_to_BFLOAT16": (2.0**-7, DEFAULT_ATOL),
    "test_castlike_FLOAT_to_BFLOAT16_expanded": (2.0**-7, DEFAULT_ATOL),
}


def tolerance(test_name: str, test_dir: str) -> tuple[float, float]:
    """(rtol, atol) for a test, chosen the way the ONNX runner chooses them."""
    rtol, atol = DEFAULT_RTOL, DEFAULT_ATOL
    data_json = os.path.join(test_dir, "data.json")
    if os.path.exists(data_json):
        with open(data_json) as f:
            data = json.load(f)
        rtol, atol = data.get("rtol", rtol), data.get("atol", atol)
    return TOLERANCE_OVERRIDES.get(test_name, (rtol, atol))


@dataclasses.dataclass(frozen=True)
class Expected:
    array: np.ndarray
    elem_type: int  # TensorProto.DataType of the reference


def load_expected(path: str, declared_elem_type: int = TensorProto.UNDEFINED) -> Expected:
    """Reads output_K.pb. Raises ValueError for anything that is not a plain tensor.

    `declared_elem_type` is the graph output's type. Some tests store bfloat16 references as
    UINT16 tensors of the raw bits while the graph says BFLOAT16; the graph wins.
    """
    tensor = TensorProto()
    with open(path, "rb") as f:
        tensor.ParseFromString(f.read())
    if tensor.data_type == TensorProto.UNDEFINED:
        raise ValueError(f"{path} is not a TensorProto (a sequence or optional output?)")
    elem_type = tensor.data_type
    if declared_elem_type == TensorProto.BFLOAT16 and elem_type == TensorProto.UINT16:
        elem_type = TensorProto.BFLOAT16
    return Expected(numpy_helper.to_array(tensor), elem_type)


def _bfloat16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _as_comparable(actual: np.ndarray, expected: Expected) -> tuple[np.ndarray, np.ndarray]:
    """Both sides as arrays of one numpy dtype, or raises ValueError on a dtype mismatch."""
    want = expected.array
    if expected.elem_type == TensorProto.BFLOAT16:
        # numpy has no bfloat16: onnx hands us the raw bits as uint16, and an .npy file holds
        # either those bits (uint16) or an opaque 2-byte type (ml_dtypes saves '<V2').
        if actual.dtype.itemsize != 2 or actual.dtype.kind not in "uV":
            raise ValueError(f"dtype {actual.dtype}, expected bfloat16")
        bits = actual.view(np.uint16)
        return _bfloat16_bits_to_float32(bits), _bfloat16_bits_to_float32(want.view(np.uint16))
    if actual.dtype != want.dtype:
        raise ValueError(f"dtype {actual.dtype}, expected {want.dtype}")
    return actual, want


@dataclasses.dataclass(frozen=True)
class Mismatch:
    message: str
    max_abs_err: float | None = None


def compare(actual: np.ndarray, expected: Expected, rtol: float, atol: float) -> Mismatch | None:
    """None when `actual` matches; otherwise what differs."""
    try:
        got, want = _as_comparable(actual, expected)
    except ValueError as e:
        return Mismatch(str(e))
    if got.shape != want.shape:
        return Mismatch(f"shape {got.shape}, expected {want.shape}")
    if got.size == 0:
        return None

    if got.dtype.kind in "biu":
        differs = got != want
        if not differs.any():
            return None
        err = np.abs(got.astype(np.float64) - want.astype(np.float64))
        return Mismatch(f"{int(differs.sum())}/{got.size} elements differ", float(err.max()))

    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    nan_got, nan_want = np.isnan(got64), np.isnan(want64)
    if (nan_got != nan_want).any():
        count = int((nan_got != nan_want).sum())
        return Mismatch(f"NaN at {count} positions where the reference differs")
    finite = np.isfinite(want64) & np.isfinite(got64)
    infinite = ~finite & ~nan_want
    if (got64[infinite] != want64[infinite]).any():
        return Mismatch("infinities differ from the reference")
    err = np.abs(got64[finite] - want64[finite])
    bad = err > atol + rtol * np.abs(want64[finite])
    if not bad.any():
        return None
    return Mismatch(
        f"{int(bad.sum())}/{got.size} elements outside rtol={rtol:g} atol={atol:g}",
        float(err.max()),
    )


def load_actual(path: str) -> np.ndarray:
    # allow_pickle stays off: the file comes from the program under test.
    actual = np.load(path, allow_pickle=False)
    if actual.dtype.kind == "V" and actual.dtype.itemsize == 2:
        # llmc writes bfloat16 as a 2-byte void type; the ONNX test data stores bfloat16
        # tensors as their uint16 bit patterns, so compare bit patterns.
        actual = actual.view(np.uint16)
    return actual


def graph_output_is_tensor(value: onnx.ValueInfoProto) -> bool:
    return value.type.WhichOneof("value") in ("tensor_type", None)


def declared_elem_type(value: onnx.ValueInfoProto) -> int:
    """The graph output's tensor element type, UNDEFINED when it has none."""
    if value.type.WhichOneof("value") != "tensor_type":
        return TensorProto.UNDEFINED
    return value.type.tensor_type.elem_type
