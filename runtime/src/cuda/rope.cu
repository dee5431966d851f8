// llm.rope on the GPU (kernels.h): one thread per rotated pair, in place.
#include "cuda/cuda_status.h"
#include "cuda/kernels.h"

namespace llmc::cuda {
namespace {

constexpr int kRopeThreads = 256;

__global__ void ropeKernel(RopeParams p) {
  const int64_t half = p.head_dim / 2;
  const int64_t pairs = p.batch * p.tokens * p.rotated_heads * half;
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= pairs) return;
  const int64_t i = index % half;
  const int64_t h = index / half % p.rotated_heads;
  const int64_t t = index / (half * p.rotated_heads) % p.tokens;
  const int64_t b = index / (half * p.rotated_heads * p.tokens);
  float* head = p.x + (p.row_width ? (b * p.tokens + t) * p.row_width + h * p.head_dim
                                   : ((b * p.rotated_heads + h) * p.tokens + t) * p.head_dim);
  float* first = p.interleaved ? head + 2 * i : head + i;
  float* second = p.interleaved ? head + 2 * i + 1 : head + i + half;
  const float a = *first, c = *second;
  if (p.positions) {
    const int64_t at = p.positions[t] * half + i;
    *first = a * p.cos[at] - c * p.sin[at];
    *second = c * p.cos[at] + a * p.sin[at];
  } else {
    const int64_t row = ((p.table_batch == 1 ? 0 : b) * p.tokens + t) * p.head_dim;
    *first = a * p.cos[row + i] - c * p.sin[row + i];
    *second = c * p.cos[row + i + half] + a * p.sin[row + i + half];
  }
}

}  // namespace

Status RopeParams::check() const {
  if (!x || !cos || !sin) return invalidArgument("LlmRope (CUDA): x, cos and sin are required");
  if (batch < 0 || tokens < 0 || rotated_heads < 1 || head_dim < 2 || head_dim % 2 != 0)
    return invalidArgument("LlmRope (CUDA): needs heads >= 1 and an even head_dim");
  if (row_width != 0 && row_width < rotated_heads * head_dim)
    return invalidArgument("LlmRope (CUDA): rows of " + std::to_string(row_width) + " do not hold " +
                           std::to_string(rotated_heads) + " heads of " + std::to_string(head_dim));
  if (positions && max_positions < 1) return invalidArgument("LlmRope (CUDA): caches without rows");
  if (!positions && (interleaved || (table_batch != 1 && table_batch != batch)))
    return invalidArgument("LlmRope (CUDA): per-token tables rotate halves, batch 1 or every row");
  return okStatus();
}

Status launchRope(const RopeParams& params, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(params.check());
  const int64_t pairs = params.batch * params.tokens * params.rotated_heads * (params.head_dim / 2);
  if (pairs == 0) return okStatus();
  const int64_t blocks = (pairs + kRopeThreads - 1) / kRopeThreads;
  if (blocks > 0x7fffffff) return invalidArgument("LlmRope (CUDA): too large for one grid");
  ropeKernel<<<static_cast<unsigned>(blocks), kRopeThreads, 0, stream>>>(params);
  return cudaStatus(cudaGetLastError(), "LlmRope (CUDA) launch");
}

}  // namespace llmc::cuda
