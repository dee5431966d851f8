// llm.norm on the GPU (kernels.h): one block per row, block-wide reductions in float.
#include "cuda/cuda_status.h"
#include "cuda/block_reduce.cuh"
#include "cuda/kernels.h"

namespace llmc::cuda {
namespace {

constexpr int kNormThreads = 256;

__global__ void normKernel(NormParams p) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float* x = p.x + row * p.width;
  const float* r = p.residual ? p.residual + row * p.width : nullptr;
  float* sum = p.sum ? p.sum + row * p.width : nullptr;
  float mean = 0.0f;
  if (!p.rms) {
    float partial = 0.0f;
    for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x) partial += x[i] + (r ? r[i] : 0.0f);
    mean = blockSum(partial, shared) / static_cast<float>(p.width);
  }
  float squares = 0.0f;
  for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x) {
    const float s = x[i] + (r ? r[i] : 0.0f);
    if (sum) sum[i] = s;
    squares += (s - mean) * (s - mean);
  }
  const float inv = rsqrtf(blockSum(squares, shared) / static_cast<float>(p.width) + p.epsilon);
  float* y = p.y + row * p.width;
  for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x) {
    const float s = x[i] + (r ? r[i] : 0.0f);
    y[i] = (s - mean) * inv * p.scale[i] + (p.bias ? p.bias[i] : 0.0f);
  }
}

}  // namespace

Status NormParams::check() const {
  if (!x || !scale || !y) return invalidArgument("LlmNorm (CUDA): x, scale and y are required");
  if (rows < 0 || width < 1) return invalidArgument("LlmNorm (CUDA): needs rows >= 0 and width >= 1");
  if (rows > 0x7fffffff) return invalidArgument("LlmNorm (CUDA): more rows than one grid holds");
  if (!(epsilon >= 0)) return invalidArgument("LlmNorm (CUDA): epsilon must not be negative");
  return okStatus();
}

Status launchNorm(const NormParams& params, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(params.check());
  if (params.rows == 0) return okStatus();
  normKernel<<<static_cast<unsigned>(params.rows), kNormThreads, 0, stream>>>(params);
  return cudaStatus(cudaGetLastError(), "LlmNorm (CUDA) launch");
}

}  // namespace llmc::cuda
