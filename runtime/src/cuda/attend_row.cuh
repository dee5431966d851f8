// One query row of attention by a whole block, shared by the paged (decoder) and the
// cache-free (encoder) attention kernels: softmax(scale * q·k_j + bias(j)) over j < count,
// then the weighted sum of the v_j into out (head_dim floats). `scores` is count floats of
// shared memory. A row whose every key is masked (-inf) gives zeros, as the CPU kernels do.
#pragma once

#include "cuda/block_reduce.cuh"

namespace llmc::cuda {

template <typename KeyFn, typename ValueFn, typename BiasFn>
__device__ void attendRow(const float* q, int64_t count, int64_t head_dim, float scale, KeyFn key,
                          ValueFn value, BiasFn bias, float* scores, float* reduce, float* out) {
  float local_max = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const float* k = key(j);
    float dot = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) dot += q[d] * k[d];
    scores[j] = dot * scale + bias(j);
    local_max = fmaxf(local_max, scores[j]);
  }
  const float max_score = blockMax(local_max, reduce);
  if (max_score == -INFINITY) {
    for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) out[d] = 0.0f;
    return;
  }
  float local_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    scores[j] = expf(scores[j] - max_score);
    local_sum += scores[j];
  }
  const float inv = 1.0f / blockSum(local_sum, reduce);
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < count; ++j) acc += scores[j] * value(j)[d];
    out[d] = acc * inv;
  }
}

}  // namespace llmc::cuda
