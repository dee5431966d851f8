// Activation epilogues, the gated-MLP gate, embedding rows and greedy argmax (kernels.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cstring>

#include "cuda/activation.cuh"
#include "cuda/cuda_status.h"
#include "cuda/kernels.h"

namespace llmc::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void activationKernel(ActivationParams p, Act act) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.rows * p.width) return;
  if (p.gate_up) {
    const int64_t r = i / p.width, f = i % p.width;
    const float* h = p.gate_up + r * 2 * p.width;
    p.y[i] = activate(act, h[f]) * h[p.width + f];
  } else {
    p.y[i] = activate(act, p.y[i]);
  }
}

__global__ void convertKernel(const float* x, void* y, int64_t count, bool bf16) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  if (bf16) static_cast<__nv_bfloat16*>(y)[i] = __float2bfloat16_rn(x[i]);
  else static_cast<__half*>(y)[i] = __float2half_rn(x[i]);
}

__global__ void embeddingKernel(EmbeddingParams p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.tokens * p.width) return;
  const int64_t t = i / p.width, c = i % p.width;
  p.y[i] = p.table[p.ids[t] * p.width + c];
}

// One block per row: each thread scans a strided slice, then the block reduces (value, index)
// keeping the lowest index among equal maxima. NaN never wins.
__global__ void argmaxKernel(ArgmaxParams p) {
  __shared__ float best_value[kThreads];
  __shared__ int64_t best_index[kThreads];
  const float* row = p.logits + static_cast<int64_t>(blockIdx.x) * p.vocab;
  float value = -FLT_MAX;
  int64_t index = p.vocab;  // "none yet": loses to any real index
  for (int64_t j = threadIdx.x; j < p.vocab; j += blockDim.x) {
    const float v = row[j];
    if (v > value || (v == value && j < index)) {
      value = v;
      index = j;
    }
  }
  best_value[threadIdx.x] = value;
  best_index[threadIdx.x] = index;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float v = best_value[threadIdx.x + stride];
      const int64_t j = best_index[threadIdx.x + stride];
      if (v > best_value[threadIdx.x] || (v == best_value[threadIdx.x] && j < best_index[threadIdx.x])) {
        best_value[threadIdx.x] = v;
        best_index[threadIdx.x] = j;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) p.ids[blockIdx.x] = static_cast<int32_t>(best_index[0] < p.vocab ? best_index[0] : 0);
}

Status gridFor(int64_t count, const char* what, unsigned* blocks) {
  const int64_t n = (count + kThreads - 1) / kThreads;
  if (n > 0x7fffffff) return invalidArgument(std::string(what) + ": too large for one grid");
  *blocks = static_cast<unsigned>(n);
  return okStatus();
}

}  // namespace

Status ActivationParams::check() const {
  if (!y) return invalidArgument("activation (CUDA): y is required");
  if (rows < 0 || width < 0) return invalidArgument("activation (CUDA): negative size");
  if (actFromName(activation) == Act::kUnknown)
    return invalidArgument(std::string("activation (CUDA): unknown activation '") + (activation ? activation : "(null)") + "'");
  return okStatus();
}

Status launchActivation(const ActivationParams& params, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(params.check());
  const int64_t count = params.rows * params.width;
  if (count == 0 || (actFromName(params.activation) == Act::kNone && !params.gate_up)) return okStatus();
  unsigned blocks = 0;
  LLMC_RETURN_IF_ERROR(gridFor(count, "activation (CUDA)", &blocks));
  activationKernel<<<blocks, kThreads, 0, stream>>>(params, actFromName(params.activation));
  return cudaStatus(cudaGetLastError(), "activation (CUDA) launch");
}

Status ConvertParams::check() const {
  if (count < 0 || (count > 0 && (!x || !y))) return invalidArgument("convert (CUDA): x and y are required");
  if (dtype != DType::kBFloat16 && dtype != DType::kFloat16)
    return invalidArgument("convert (CUDA): the target type is bfloat16 or float16");
  if ((count + kThreads - 1) / kThreads > 0x7fffffff) return invalidArgument("convert (CUDA): too large for one grid");
  return okStatus();
}

Status launchConvert(const ConvertParams& params, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(params.check());
  if (params.count == 0) return okStatus();
  convertKernel<<<static_cast<unsigned>((params.count + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      params.x, params.y, params.count, params.dtype == DType::kBFloat16);
  return cudaStatus(cudaGetLastError(), "convert (CUDA) launch");
}

Status EmbeddingParams::check() const {
  if (!table || !ids || !y) return invalidArgument("embedding (CUDA): table, ids and y are required");
  if (vocab < 1 || tokens < 0 || width < 1) return invalidArgument("embedding (CUDA): bad sizes");
  return okStatus();
}

Status launchEmbedding(const EmbeddingParams& params, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(params.check());
  if (params.tokens == 0) return okStatus();
  unsigned blocks = 0;
  LLMC_RETURN_IF_ERROR(gridFor(params.tokens * params.width, "embedding (CUDA)", &blocks));
  embeddingKernel<<<blocks, kThreads, 0, stream>>>(params);
  return cudaStatus(cudaGetLastError(), "embedding (CUDA) launch");
}

Status ArgmaxParams::check() const {
  if (!logits || !ids) return invalidArgument("argmax (CUDA): logits and ids are required");
  if (rows < 0 || vocab < 1 || vocab > 0x7fffffff) return invalidArgument("argmax (CUDA): bad sizes");
  if (rows > 0x7fffffff) return invalidArgument("argmax (CUDA): too many rows for one grid");
  return okStatus();
}

Status launchArgmax(const ArgmaxParams& params, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(params.check());
  if (params.rows == 0) return okStatus();
  argmaxKernel<<<static_cast<unsigned>(params.rows), kThreads, 0, stream>>>(params);
  return cudaStatus(cudaGetLastError(), "argmax (CUDA) launch");
}

}  // namespace llmc::cuda
