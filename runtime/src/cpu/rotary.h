// Rotary position embedding of one head vector, shared by LlmRope, ONNX Runtime's
// RotaryEmbedding and GroupQueryAttention kernels.
#pragma once

#include <cstdint>

namespace llmc {

// Rotates the first 2 * half values of `x` in place by the angles whose cosines and sines are
// cos_row[0..half) and sin_row[0..half): pairs (x[i], x[i + half]), or (x[2i], x[2i + 1])
// when interleaved, become (a cos - b sin, b cos + a sin).
inline void rotateHead(float* x, const float* cos_row, const float* sin_row, int64_t half,
                       bool interleaved) {
  for (int64_t i = 0; i < half; ++i) {
    float& a = interleaved ? x[2 * i] : x[i];
    float& b = interleaved ? x[2 * i + 1] : x[i + half];
    const float a0 = a, b0 = b;
    a = a0 * cos_row[i] - b0 * sin_row[i];
    b = b0 * cos_row[i] + a0 * sin_row[i];
  }
}

}  // namespace llmc
