// Weight quantization formats (docs/quantization.md): one traits table indexed by an
// append-only enum, the round-to-nearest quantizer the compiler (and `llmc refit`) runs, and
// the dequantizer that is the oracle of the quantized kernels' tests.
//
// A quantized weight is the matrix [N, K] of a product's output channels (row n holds output
// n along K, whatever layout the float weight had) in three tensors: `data` (int8 [N, K], or
// uint8 [N, K / 2] for 4-bit), `scales` ([N, K / group]) and, for the formats with zero points,
// `zeros` (uint8 [N, K / group]); the last group of a row is shorter when the group does not divide
// K (K / group above rounds up). 4-bit values are packed per block of 32 along K the way the
// kernel unpacks them with two instructions: byte j of a block holds element j in its low
// nibble and element j + 16 in its high nibble.
#pragma once

#include <cstdint>
#include <string>

#include "core/half.h"
#include "llmc/status.h"
#include "llmc/tensor.h"

namespace llmc {

class ThreadPool;

// Append-only: the engine records formats by name, tests and tables by this value.
enum class QuantFormat : uint8_t {
  kInt8 = 0,    // symmetric int8, one float32 scale per output channel (group = K)
  kInt4 = 1,    // symmetric 4-bit (-8..7), one float16 scale per group along K
  kInt4Zp = 2,  // asymmetric 4-bit (0..15) with a uint8 zero point per group, float16 scale
  kW8A8 = 3,    // int8's weights, with activations quantized to int8 per token (SmoothQuant)
  kFp8 = 4,     // E4M3 weights (core/fp8.h), float32 scale per output channel; activations E4M3
                // with one scale per product call (per tensor)
};

struct QuantTraits {
  QuantFormat format;
  const char* name;  // as in llm.quant_matmul's `format` and `--quantize`
  int bits;
  bool zero_points;
  DType data_dtype;   // kInt8 or kUInt8 (two 4-bit values per byte)
  DType scale_dtype;  // kFloat32 or kFloat16
  bool per_token_activations;  // w8a8: one int8 scale per activation row, int32 accumulation over K
  bool e4m3;                   // fp8: data are E4M3 codes, activations E4M3 with a per-tensor scale
};

// Activations are quantized to int8 in blocks of this many values; K and 4-bit groups are
// multiples of it.
constexpr int64_t kQuantBlock = 32;

const QuantTraits& quantTraits(QuantFormat format);
// Null for an unknown name.
const QuantTraits* findQuantTraits(const std::string& name);

// A quantized weight's tensors, checked against each other by makeQuantWeight().
struct QuantWeight {
  const QuantTraits* traits = nullptr;
  int64_t n = 0, k = 0, group = 0;
  const void* data = nullptr;
  const void* scales = nullptr;
  const uint8_t* zeros = nullptr;  // null unless traits->zero_points

  // Bytes of one output channel's data.
  int64_t rowBytes() const { return traits->bits == 8 ? k : k / 2; }
  int64_t groupsPerRow() const { return (k + group - 1) / group; }
  // Inline: the kernels' epilogues ask for it once per output channel (decode's per row and
  // channel), where a call was 0.8-1.8% of a quantized prefill's profile.
  float scale(int64_t row, int64_t g) const {
    const int64_t at = row * groupsPerRow() + g;
    return traits->scale_dtype == DType::kFloat16 ? toFloat(static_cast<const Float16*>(scales)[at])
                                                  : static_cast<const float*>(scales)[at];
  }
};

// Checks dtypes and shapes of `data`, `scales`, `zeros` for `traits`, K = `k` and `group`, and
// fills `out` (which borrows the tensors). The message says which tensor does not fit.
Status makeQuantWeight(const QuantTraits& traits, int64_t k, int64_t group, const Tensor& data,
                       const Tensor& scales, const Tensor* zeros, QuantWeight* out);

// The group sizes a format allows for K (a multiple of kQuantBlock): 8-bit formats use K itself; 4-bit
// formats any multiple of kQuantBlock (the last group of a row may be shorter).
Status checkQuantGroup(const QuantTraits& traits, int64_t k, int64_t group);

// Round-to-nearest quantization of a float32 weight (symmetric formats pick, per group, the
// scale between 0.8x and 1x of the absmax one with the least squared error): `w` is [K, N] (a
// product's right operand) or, with `transposed`, [N, K]. Outputs are allocated. A weight with an
// inf or NaN is refused (the message says where). Output channels are split over `pool` (may be
// null); the result does not depend on it. `importance` (optional, [K]): weights of the symmetric
// formats' clip search per input channel, e.g. the mean square of the activations each channel
// multiplies (activation-aware).
Status quantizeWeight(const Tensor& w, bool transposed, const QuantTraits& traits, int64_t group,
                      Tensor* data, Tensor* scales, Tensor* zeros,
                      const float* importance = nullptr, ThreadPool* pool = nullptr);

// Output channel `row` of `weight` as float32 [K]: the oracle of the quantized kernels.
void dequantizeRow(const QuantWeight& weight, int64_t row, float* out);

}  // namespace llmc
