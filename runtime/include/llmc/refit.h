// Refit: fill an engine's weights from new values of the source model's initializers, as
// TensorRT's refitter does. Each weight computed from initializers carries its recipe in the
// engine (the runtime kernels the compiler applied: transposes, concatenations from fusion,
// reshapes, scalings), so refit recomputes it exactly as a fresh compile of the same weights
// would: the output is byte-identical to compiling the model with those initializers.
// The functions keep no state: they may run on several threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "llmc/status.h"
#include "llmc/tensor.h"

namespace llmc {

// The tensors of a safetensors file (views into `bytes`, which must outlive them; copies where
// the data is not aligned to its element size). The file is
// untrusted: every offset, size, dtype and shape is checked; errors name the file and tensor.
Status parseSafetensors(std::span<const uint8_t> bytes, const std::string& what,
                        std::map<std::string, Tensor>* tensors);

// Rebuilds `engine` (a normal or --strip-weights engine) with the initializers in `weights`
// (by ONNX initializer name; each must have the dtype and shape the engine recorded).
// Writes the new engine's bytes to `out`.
Status refitEngine(std::span<const uint8_t> engine, const std::string& what,
                   const std::map<std::string, Tensor>& weights, std::vector<uint8_t>* out);

}  // namespace llmc
