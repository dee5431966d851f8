// KV-cache append and causal attention over the paged cache (kernels.h).
#include <cfloat>

#include "cuda/cuda_status.h"
#include "cuda/kernels.h"

namespace llmc::cuda {
namespace {

constexpr int kThreads = 128;

__device__ size_t slotOffset(const PagedKvParams& kv, int64_t block, int64_t head, int64_t offset) {
  const int64_t block_elements = kv.kv_heads * kv.block_size * kv.head_dim;
  return static_cast<size_t>((block * kv.num_layers + kv.layer) * block_elements +
                             (head * kv.block_size + offset) * kv.head_dim);
}

__global__ void kvAppendKernel(KvAppendParams p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_token = p.kv.kv_heads * p.kv.head_dim;
  if (i >= p.kv.tokens * per_token) return;
  const int64_t t = i / per_token, h = i % per_token / p.kv.head_dim, d = i % p.kv.head_dim;
  const size_t at = slotOffset(p.kv, p.kv.token_block[t], h, p.kv.token_offset[t]) + d;
  p.kv.key_cache[at] = p.k[t * p.k_width + p.k_column + h * p.kv.head_dim + d];
  p.kv.value_cache[at] = p.v[t * p.v_width + p.v_column + h * p.kv.head_dim + d];
}

__device__ float blockReduce(float value, float* shared, bool is_max) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_down_sync(0xffffffffu, value, offset);
    value = is_max ? fmaxf(value, other) : value + other;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < blockDim.x / 32 ? shared[lane] : (is_max ? -FLT_MAX : 0.0f);
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other = __shfl_down_sync(0xffffffffu, value, offset);
      value = is_max ? fmaxf(value, other) : value + other;
    }
    if (lane == 0) shared[0] = value;
  }
  __syncthreads();
  const float result = shared[0];
  __syncthreads();
  return result;
}

__global__ void pagedAttentionKernel(PagedAttentionParams p) {
  extern __shared__ float scores[];  // [max_context]
  __shared__ float reduce[32];
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const PagedKvParams& kv = p.kv;
  const int64_t kvh = h / (p.heads / kv.kv_heads);
  const int32_t* table = kv.block_tables + static_cast<int64_t>(kv.token_sequence[t]) * kv.max_blocks;
  const int64_t count = kv.token_position[t] + 1;
  const float* q = p.q + t * p.q_width + p.q_column + h * kv.head_dim;
  float local_max = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const float* k = kv.key_cache + slotOffset(kv, table[j / kv.block_size], kvh, j % kv.block_size);
    float dot = 0.0f;
    for (int64_t d = 0; d < kv.head_dim; ++d) dot += q[d] * k[d];
    scores[j] = dot * p.scale;
    local_max = fmaxf(local_max, scores[j]);
  }
  const float max_score = blockReduce(local_max, reduce, true);
  float local_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    scores[j] = expf(scores[j] - max_score);
    local_sum += scores[j];
  }
  const float inv = 1.0f / blockReduce(local_sum, reduce, false);
  float* out = p.out + (t * p.heads + h) * kv.head_dim;
  for (int64_t d = threadIdx.x; d < kv.head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < count; ++j)
      acc += scores[j] * kv.value_cache[slotOffset(kv, table[j / kv.block_size], kvh, j % kv.block_size) + d];
    out[d] = acc * inv;
  }
}

}  // namespace

Status PagedKvParams::check() const {
  if (!key_cache || !value_cache || !token_sequence || !token_position || !token_block ||
      !token_offset || !block_tables)
    return invalidArgument("paged KV (CUDA): caches, per-token slots and block tables are required");
  if (num_layers < 1 || layer < 0 || layer >= num_layers || kv_heads < 1 || head_dim < 1 ||
      block_size < 1 || tokens < 0 || sequences < 1 || max_blocks < 1)
    return invalidArgument("paged KV (CUDA): bad cache geometry");
  return okStatus();
}

Status KvAppendParams::check() const {
  LLMC_RETURN_IF_ERROR(kv.check());
  if (!k || !v) return invalidArgument("KV append (CUDA): k and v are required");
  if (k_column < 0 || v_column < 0 || k_column + kv.kv_heads * kv.head_dim > k_width ||
      v_column + kv.kv_heads * kv.head_dim > v_width)
    return invalidArgument("KV append (CUDA): the KV heads do not fit the rows");
  return okStatus();
}

Status launchKvAppend(const KvAppendParams& params, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(params.check());
  const int64_t count = params.kv.tokens * params.kv.kv_heads * params.kv.head_dim;
  if (count == 0) return okStatus();
  const int64_t blocks = (count + 255) / 256;
  if (blocks > 0x7fffffff) return invalidArgument("KV append (CUDA): too large for one grid");
  kvAppendKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(params);
  return cudaStatus(cudaGetLastError(), "KV append (CUDA) launch");
}

Status PagedAttentionParams::check() const {
  LLMC_RETURN_IF_ERROR(kv.check());
  if (!q || !out) return invalidArgument("paged attention (CUDA): q and out are required");
  if (heads < 1 || heads % kv.kv_heads != 0)
    return invalidArgument("paged attention (CUDA): heads must be a multiple of the KV heads");
  if (q_column < 0 || q_column + heads * kv.head_dim > q_width)
    return invalidArgument("paged attention (CUDA): the query heads do not fit the rows");
  if (max_context < 1 || max_context > maxPagedAttentionContext())
    return unimplemented("paged attention (CUDA): a context of " + std::to_string(max_context) +
                         " positions; this kernel holds at most " +
                         std::to_string(maxPagedAttentionContext()));
  if (max_context > kv.max_blocks * kv.block_size)
    return invalidArgument("paged attention (CUDA): the context exceeds the block tables");
  return okStatus();
}

Status launchPagedAttention(const PagedAttentionParams& params, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(params.check());
  if (params.kv.tokens == 0) return okStatus();
  if (params.kv.tokens > 0x7fffffff || params.heads > 65535)
    return invalidArgument("paged attention (CUDA): too many tokens or heads for one grid");
  const size_t shared = static_cast<size_t>(params.max_context) * sizeof(float);
  if (shared > 48 * 1024)
    LLMC_RETURN_IF_ERROR(cudaStatus(
        cudaFuncSetAttribute(pagedAttentionKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(shared)),
        "paged attention (CUDA): cudaFuncSetAttribute"));
  dim3 grid(static_cast<unsigned>(params.kv.tokens), static_cast<unsigned>(params.heads));
  pagedAttentionKernel<<<grid, kThreads, shared, stream>>>(params);
  return cudaStatus(cudaGetLastError(), "paged attention (CUDA) launch");
}

}  // namespace llmc::cuda
