// ONNX Softmax and LogSoftmax over the last axis on the GPU (kernels.h): one block per row,
// the row's max and sum of exponentials by block-wide reductions in float.
#include <cfloat>

#include "cuda/block_reduce.cuh"
#include "cuda/cuda_status.h"
#include "cuda/kernels.h"

namespace llmc::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void softmaxKernel(SoftmaxParams p) {
  __shared__ float shared[32];
  const float* x = p.x + static_cast<int64_t>(blockIdx.x) * p.width;
  float* y = p.y + static_cast<int64_t>(blockIdx.x) * p.width;
  float local_max = -FLT_MAX;
  for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x) local_max = fmaxf(local_max, x[i]);
  const float max_value = blockMax(local_max, shared);
  float local_sum = 0.0f;
  for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x) local_sum += expf(x[i] - max_value);
  const float sum = blockSum(local_sum, shared);
  if (p.log) {
    const float log_sum = logf(sum);
    for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x) y[i] = x[i] - max_value - log_sum;
  } else {
    const float inverse = 1.0f / sum;
    for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x) y[i] = expf(x[i] - max_value) * inverse;
  }
}

}  // namespace

Status SoftmaxParams::check() const {
  if (!x || !y) return invalidArgument("Softmax (CUDA): x and y are required");
  if (rows < 0 || width < 1 || rows > 0x7fffffff) return invalidArgument("Softmax (CUDA): bad sizes");
  return okStatus();
}

Status launchSoftmax(const SoftmaxParams& params, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(params.check());
  if (params.rows == 0) return okStatus();
  softmaxKernel<<<static_cast<unsigned>(params.rows), kThreads, 0, stream>>>(params);
  return cudaStatus(cudaGetLastError(), params.log ? "LogSoftmax (CUDA) launch" : "Softmax (CUDA) launch");
}

}  // namespace llmc::cuda
