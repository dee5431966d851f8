// Shared pieces of the elementwise kernel family: the numpy-broadcast loop every
// multi-input op uses, and the per-file registration hooks.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/kernel.h"

namespace llmc {

// A loop over a broadcast output in row-major order, reduced to as few dimensions as
// possible: output dims of size 1 are dropped and adjacent dims that every input walks
// contiguously (or broadcasts along) are merged. Equal shapes and scalar operands therefore
// become a single row, so kernels get long inner loops with strides 0 or 1.
class BroadcastLoop {
 public:
  // `output` must be the broadcast of every shape in `inputs` (see broadcastShapes).
  BroadcastLoop(const Shape& output, const std::vector<const Shape*>& inputs);

  // Calls fn(out_offset, in_offsets, count, in_strides) once per innermost row, where
  // in_offsets[k] and in_strides[k] (elements) locate input k's values for the row:
  // element j of the row is output[out_offset + j] = f(input_k[in_offsets[k] + j * in_strides[k]]).
  template <typename Fn>
  void forEachRow(Fn&& fn) const {
    if (num_elements_ == 0) return;
    const size_t num_inputs = strides_.size();
    const size_t rank = dims_.size();
    std::vector<int64_t> offsets(num_inputs, 0);
    std::vector<int64_t> inner_strides(num_inputs, 0);
    for (size_t k = 0; k < num_inputs; ++k) inner_strides[k] = strides_[k][rank - 1];
    const int64_t row = dims_[rank - 1];
    std::vector<int64_t> counter(rank, 0);
    for (int64_t out_offset = 0; out_offset < num_elements_; out_offset += row) {
      fn(out_offset, offsets.data(), row, inner_strides.data());
      // Advance the odometer over the outer dims, adjusting each input's offset.
      for (size_t d = rank - 1; d-- > 0;) {
        ++counter[d];
        for (size_t k = 0; k < num_inputs; ++k) offsets[k] += strides_[k][d];
        if (counter[d] < dims_[d]) break;
        for (size_t k = 0; k < num_inputs; ++k) offsets[k] -= strides_[k][d] * dims_[d];
        counter[d] = 0;
      }
    }
  }

 private:
  std::vector<int64_t> dims_;                  // merged output dims, never empty
  std::vector<std::vector<int64_t>> strides_;  // [input][dim], 0 where broadcast
  int64_t num_elements_ = 0;
};

template <typename T>
constexpr bool kIsInteger = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// Float to integer conversion without undefined behavior: truncates toward zero like a C++
// cast; NaN becomes 0; values beyond int64 saturate; values that fit in int64 but not in I
// wrap modulo 2^bits (what numpy does on x86 for moderate values, e.g. -1.0 -> uint8 255).
template <typename I>
I floatToInteger(double v) {
  static_assert(kIsInteger<I>);
  constexpr double kTwoTo63 = 9223372036854775808.0;
  if (std::isnan(v)) return 0;
  if constexpr (std::is_same_v<I, uint64_t>) {
    if (v >= 2 * kTwoTo63) return UINT64_MAX;
    if (v >= kTwoTo63) return static_cast<uint64_t>(v);
  }
  if (v >= kTwoTo63) return static_cast<I>(INT64_MAX);
  if (v < -kTwoTo63) return static_cast<I>(INT64_MIN);
  return static_cast<I>(static_cast<int64_t>(v));
}

// Broadcasts all of `inputs` together (numpy rules); the error names the node.
Status broadcastAll(const KernelContext& ctx, const std::vector<const Tensor*>& inputs, Shape* out);

// Error for a dtype an op does not support: "node 'X': Op does not support dtype float16".
Status unsupportedDType(const KernelContext& ctx, const char* op, DType dtype);

// One registration function per file of the family.
void registerUnaryKernels(KernelRegistry& registry);
void registerBinaryKernels(KernelRegistry& registry);
void registerVariadicKernels(KernelRegistry& registry);
void registerCastKernels(KernelRegistry& registry);

}  // namespace llmc
