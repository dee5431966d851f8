// One query row of attention, shared by LlmAttention (over the KV cache) and LlmSdpa:
// softmax(scale * q·k_j + bias(j)) over j < count, then the weighted sum of value(j) into out
// (v_dim floats). A row whose every key is masked (-inf) gives zeros, not NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace llmc {

template <typename KeyFn, typename ValueFn, typename BiasFn>
void attendOne(const float* q, int64_t count, int64_t qk_dim, int64_t v_dim, float scale,
               KeyFn key, ValueFn value, BiasFn bias, std::vector<float>& scores, float* out) {
  scores.resize(static_cast<size_t>(count));
  float max_score = -INFINITY;
  for (int64_t j = 0; j < count; ++j) {
    const float* k = key(j);
    float dot = 0;
    for (int64_t d = 0; d < qk_dim; ++d) dot += q[d] * k[d];
    scores[j] = dot * scale + bias(j);
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
    const float* v = value(j);
    const float p = scores[j] / sum;
    for (int64_t d = 0; d < v_dim; ++d) out[d] += p * v[d];
  }
}

// attendOne without a bias.
inline float noBias(int64_t) { return 0.0f; }

}  // namespace llmc
