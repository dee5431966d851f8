// Reading and writing tensors as files: NumPy .npy and ONNX TensorProto (.pb), the formats
// of test inputs, reference outputs and the ONNX backend tests. Every input is untrusted.
// The functions keep no state: they may run on several threads at once (on different files
// and output tensors).
#pragma once

#include <cstddef>
#include <string>

#include "llmc/status.h"
#include "llmc/tensor.h"

namespace llmc {

// NumPy .npy, format versions 1.0, 2.0 and 3.0, little-endian. Fortran-order arrays are
// read and reordered to row-major; writing is always row-major.
//
// dtype mapping ("descr" in the header): float16 '<f2', float32 '<f4', float64 '<f8',
// int8 '|i1', int16 '<i2', int32 '<i4', int64 '<i8', uint8 '|u1', uint16 '<u2',
// uint32 '<u4', uint64 '<u8', bool '|b1'. NumPy has no bfloat16 type code; bfloat16 is
// written as '<V2' (what np.save writes for an ml_dtypes.bfloat16 array), and '<V2' or
// '|V2' is read back as bfloat16. Big-endian and structured dtypes are unimplemented.
//
// `what` names the input in error messages (usually the file name). The result owns its
// bytes and is 64-byte aligned.
Status parseNpy(const void* data, size_t size_bytes, const std::string& what, Tensor* out);
Status readNpy(const std::string& path, Tensor* out);
Status writeNpy(const std::string& path, const Tensor& tensor);

// A serialized onnx.TensorProto, decoded by a small wire-format reader (the runtime does not
// link protobuf). Reads dims, data_type, name, raw_data and the typed fields float_data,
// int32_data (which also holds bool, int8, uint8, int16, uint16, float16 and bfloat16),
// int64_data, double_data and uint64_data, packed or not. string tensors, segments and
// external data are unimplemented. `name` may be null.
Status parseTensorProto(const void* data, size_t size_bytes, const std::string& what, Tensor* out,
                        std::string* name);
// Writes dims, data_type, name (when not empty) and raw_data.
Status writeTensorProto(const std::string& path, const Tensor& tensor, const std::string& name);

// Dispatches on the extension: ".npy" or ".pb"; anything else is an invalid argument.
Status readTensorFile(const std::string& path, Tensor* out);

}  // namespace llmc
