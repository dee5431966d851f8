// Attention on the GPU (kernels.h): KV-cache append and cache-free attention with a mask
// (llm.sdpa, through attendRow). Causal attention over the paged cache is flash_attention.cu.
#include "cuda/cuda_status.h"
#include "cuda/attend_row.cuh"
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

__global__ void sdpaKernel(SdpaParams p) {
  extern __shared__ float scores[];  // [keys]
  __shared__ float reduce[32];
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = h / (p.heads / p.kv_heads);
  const float* q = p.q + ((b * p.heads + h) * p.queries + i) * p.head_dim;
  const float* k = p.k + (b * p.kv_heads + kvh) * p.keys * p.head_dim;
  const float* v = p.v + (b * p.kv_heads + kvh) * p.keys * p.head_dim;
  const float* mask = p.mask ? p.mask + b * p.mask_strides[0] + h * p.mask_strides[1] + i * p.mask_strides[2]
                             : nullptr;
  attendRow(
      q, p.keys, p.head_dim, p.scale, [&](int64_t j) { return k + j * p.head_dim; },
      [&](int64_t j) { return v + j * p.head_dim; },
      [&](int64_t j) { return mask ? mask[j * p.mask_strides[3]] : 0.0f; }, scores, reduce,
      p.out + ((b * p.heads + h) * p.queries + i) * p.head_dim);
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
  if (max_context < 1) return invalidArgument("paged attention (CUDA): max_context must be at least 1");
  if (max_context > kv.max_blocks * kv.block_size)
    return invalidArgument("paged attention (CUDA): the context exceeds the block tables");
  return okStatus();
}

Status SdpaParams::check() const {
  if (!q || !k || !v || !out) return invalidArgument("LlmSdpa (CUDA): q, k, v and out are required");
  if (batch < 0 || queries < 0 || heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || head_dim < 1 || keys < 1)
    return invalidArgument("LlmSdpa (CUDA): bad sizes");
  if (keys > maxPagedAttentionContext())
    return unimplemented("LlmSdpa (CUDA): " + std::to_string(keys) + " keys; this kernel holds at most " +
                         std::to_string(maxPagedAttentionContext()));
  if (queries > 0x7fffffff || heads > 65535 || batch > 65535)
    return invalidArgument("LlmSdpa (CUDA): too large for one grid");
  return okStatus();
}

Status launchSdpa(const SdpaParams& params, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(params.check());
  if (params.batch == 0 || params.queries == 0) return okStatus();
  const size_t shared = static_cast<size_t>(params.keys) * sizeof(float);
  if (shared > 48 * 1024)
    LLMC_RETURN_IF_ERROR(cudaStatus(cudaFuncSetAttribute(sdpaKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                         static_cast<int>(shared)),
                                    "LlmSdpa (CUDA): cudaFuncSetAttribute"));
  dim3 grid(static_cast<unsigned>(params.queries), static_cast<unsigned>(params.heads),
            static_cast<unsigned>(params.batch));
  sdpaKernel<<<grid, kThreads, shared, stream>>>(params);
  return cudaStatus(cudaGetLastError(), "LlmSdpa (CUDA) launch");
}

}  // namespace llmc::cuda
