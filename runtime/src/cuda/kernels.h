// The CUDA backend's own kernels, each with a Params struct that documents its shapes, a
// check() that validates them, and a launcher on a stream (STYLE.md §14). Device pointers;
// float32. Tested against the CPU reference kernels in test/cuda/ (skipped without a GPU).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "llmc/status.h"

namespace llmc::cuda {

// llm.norm: s = x + residual; y = RMS or layer normalization of s over each row, * scale
// (+ bias). One block per row.
struct NormParams {
  const float* x = nullptr;         // [rows, width]
  const float* residual = nullptr;  // [rows, width] or null
  const float* scale = nullptr;     // [width]
  const float* bias = nullptr;      // [width] or null
  float* y = nullptr;               // [rows, width]
  float* sum = nullptr;             // [rows, width] or null: x + residual, for the residual stream
  int64_t rows = 0, width = 0;
  float epsilon = 1e-5f;
  bool rms = true;  // false: layer normalization (subtracts the mean)
  Status check() const;
};
Status launchNorm(const NormParams& params, cudaStream_t stream);

// llm.rope, in place: rotates the first `rotated_heads` heads of each token by its position.
struct RopeParams {
  float* x = nullptr;  // head-major [batch, rotated_heads, tokens, head_dim] (row_width 0), or
                       // token-major rows [batch, tokens, row_width]
  const int64_t* positions = nullptr;  // [tokens], each < max_positions (checked by the caller), with cos/sin caches [max_positions, head_dim/2];
                                       // null: per-token tables [table_batch, tokens, head_dim]
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t batch = 0, rotated_heads = 0, tokens = 0, head_dim = 0;
  int64_t row_width = 0;      // token-major row width (0: head-major)
  int64_t max_positions = 0;  // rows of the caches (positions form)
  int64_t table_batch = 1;    // 1 or batch (tables form)
  bool interleaved = false;   // pairs (2i, 2i+1) instead of halves (positions form only)
  Status check() const;
};
Status launchRope(const RopeParams& params, cudaStream_t stream);

}  // namespace llmc::cuda
