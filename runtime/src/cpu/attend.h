// One query row of attention, shared by LlmAttention (over the KV cache) and LlmSdpa:
// softmax(scale * q·k_j + bias(j)) over j < count, then the weighted sum of value(j) into out
// (v_dim floats). A row whose every key is masked (-inf) gives zeros, not NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace llmc {

// The row operations of attention for the CPU's ISA level (cpu/attend.cpp): dot(a, b, n) = Σ
// a[d] * b[d] over d < n in eight interleaved partial sums (d mod 8) added pairwise at the end,
// the order vector units take; add_scaled(out, p, v, n): out[d] += p * v[d].
struct RowOps {
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*add_scaled)(float* out, float p, const float* v, int64_t n);
};
const RowOps& rowOps();

template <typename KeyFn, typename ValueFn, typename BiasFn>
void attendOne(const float* q, int64_t count, int64_t qk_dim, int64_t v_dim, float scale,
               KeyFn key, ValueFn value, BiasFn bias, std::vector<float>& scores, float* out) {
  const RowOps& ops = rowOps();
  scores.resize(static_cast<size_t>(count));
  float max_score = -INFINITY;
  for (int64_t j = 0; j < count; ++j) {
    scores[j] = ops.dot(q, key(j), qk_dim) * scale + bias(j);
    max_score = std::max(max_score, scores[j]);
  }
  std::fill(out, out + v_dim, 0.0f);
  if (max_score == -INFINITY) return;
  float sum = 0;
  for (int64_t j = 0; j < count; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    sum += scores[j];
  }
  for (int64_t j = 0; j < count; ++j) {
    ops.add_scaled(out, scores[j] / sum, value(j), v_dim);
  }
}

// attendOne without a bias.
inline float noBias(int64_t) { return 0.0f; }

}  // namespace llmc
