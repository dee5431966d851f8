// Top-k / top-p sampling on the device (kernels.h). Thresholds are found by bisection on the
// value with block-wide counts and sums, which needs no sort and no scratch memory.
#include <cfloat>

#include "cuda/cuda_status.h"
#include "cuda/block_reduce.cuh"
#include "cuda/kernels.h"

namespace llmc::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void sampleKernel(SampleParams p) {
  __shared__ float fshared[32];
  __shared__ int64_t ishared[32];
  __shared__ float shared_prefix[kThreads];
  const float* row = p.logits + static_cast<int64_t>(blockIdx.x) * p.vocab;
  const float inv_t = 1.0f / p.temperature;
  float local_max = -FLT_MAX, local_min = FLT_MAX;
  for (int64_t j = threadIdx.x; j < p.vocab; j += blockDim.x) {
    local_max = fmaxf(local_max, row[j] * inv_t);
    local_min = fminf(local_min, row[j] * inv_t);
  }
  const float max_logit = blockMax(local_max, fshared);
  const float min_logit = -blockMax(-local_min, fshared);
  // Top-k: the largest threshold t with count(logit >= t) >= k.
  float threshold = min_logit;
  if (p.top_k > 0 && p.top_k < p.vocab) {
    float lo = min_logit, hi = max_logit;
    for (int iteration = 0; iteration < 40; ++iteration) {
      const float mid = 0.5f * (lo + hi);
      int64_t count = 0;
      for (int64_t j = threadIdx.x; j < p.vocab; j += blockDim.x) count += row[j] * inv_t >= mid;
      if (blockSum<int64_t>(count, ishared) >= p.top_k) lo = mid; else hi = mid;
    }
    threshold = lo;
  }
  // Softmax weights of the kept tokens (relative to the max, so they never overflow).
  float local_total = 0.0f;
  for (int64_t j = threadIdx.x; j < p.vocab; j += blockDim.x)
    if (row[j] * inv_t >= threshold) local_total += __expf(row[j] * inv_t - max_logit);
  const float total = blockSum<float>(local_total, fshared);
  // Top-p: the largest threshold t' >= threshold whose kept mass still reaches top_p.
  if (p.top_p < 1.0f) {
    float lo = threshold, hi = max_logit;
    for (int iteration = 0; iteration < 40; ++iteration) {
      const float mid = 0.5f * (lo + hi);
      float mass = 0.0f;
      for (int64_t j = threadIdx.x; j < p.vocab; j += blockDim.x)
        if (row[j] * inv_t >= mid) mass += __expf(row[j] * inv_t - max_logit);
      if (blockSum<float>(mass, fshared) >= p.top_p * total) lo = mid; else hi = mid;
    }
    threshold = lo;
  }
  float kept = 0.0f;
  for (int64_t j = threadIdx.x; j < p.vocab; j += blockDim.x)
    if (row[j] * inv_t >= threshold) kept += __expf(row[j] * inv_t - max_logit);
  const float kept_total = blockSum<float>(kept, fshared);
  // Sample in token order: chunks of blockDim.x tokens, a block-wide prefix sum per chunk.
  const float target = p.uniform[blockIdx.x] * kept_total;
  float carried = 0.0f;
  int32_t chosen = -1, last_kept = 0;
  for (int64_t base = 0; base < p.vocab && chosen < 0; base += blockDim.x) {
    const int64_t j = base + threadIdx.x;
    const bool keep = j < p.vocab && row[j] * inv_t >= threshold;
    shared_prefix[threadIdx.x] = keep ? __expf(row[j] * inv_t - max_logit) : 0.0f;
    __syncthreads();
    for (int stride = 1; stride < blockDim.x; stride *= 2) {  // inclusive scan (Hillis-Steele)
      const float add = threadIdx.x >= stride ? shared_prefix[threadIdx.x - stride] : 0.0f;
      __syncthreads();
      shared_prefix[threadIdx.x] += add;
      __syncthreads();
    }
    const float before = carried + (threadIdx.x > 0 ? shared_prefix[threadIdx.x - 1] : 0.0f);
    const float after = carried + shared_prefix[threadIdx.x];
    __shared__ int32_t chunk_choice, chunk_last;
    if (threadIdx.x == 0) chunk_choice = -1, chunk_last = -1;
    __syncthreads();
    if (keep && before <= target && target < after) atomicMin(reinterpret_cast<unsigned*>(&chunk_choice), static_cast<unsigned>(j));
    if (keep) atomicMax(&chunk_last, static_cast<int32_t>(j));
    __syncthreads();
    if (chunk_choice >= 0) chosen = chunk_choice;
    if (chunk_last >= 0) last_kept = chunk_last;
    carried += shared_prefix[blockDim.x - 1];
    __syncthreads();
  }
  if (threadIdx.x == 0) p.ids[blockIdx.x] = chosen >= 0 ? chosen : last_kept;  // rounding at the end
}

__global__ void tokenLogprobKernel(TokenLogprobParams p) {
  __shared__ float reduce[32];
  const float* row = p.logits + static_cast<int64_t>(blockIdx.x) * p.vocab;
  const float inv_t = p.temperature > 0 ? 1.0f / p.temperature : 1.0f;
  float local_max = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < p.vocab; j += blockDim.x) local_max = fmaxf(local_max, row[j] * inv_t);
  const float max_logit = blockMax(local_max, reduce);
  float local_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < p.vocab; j += blockDim.x) local_sum += expf(row[j] * inv_t - max_logit);
  const float sum = blockSum<float>(local_sum, reduce);
  if (threadIdx.x == 0) {
    const int32_t id = p.ids[blockIdx.x];
    p.logprobs[blockIdx.x] = id >= 0 && id < p.vocab ? row[id] * inv_t - max_logit - logf(sum) : -INFINITY;
  }
}

}  // namespace

Status TokenLogprobParams::check() const {
  if (!logits || !ids || !logprobs) return invalidArgument("token logprob (CUDA): logits, ids and logprobs are required");
  if (rows < 0 || vocab < 1 || rows > 0x7fffffff) return invalidArgument("token logprob (CUDA): bad sizes");
  return okStatus();
}

Status launchTokenLogprob(const TokenLogprobParams& params, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(params.check());
  if (params.rows == 0) return okStatus();
  tokenLogprobKernel<<<static_cast<unsigned>(params.rows), kThreads, 0, stream>>>(params);
  return cudaStatus(cudaGetLastError(), "token logprob (CUDA) launch");
}

Status SampleParams::check() const {
  if (!logits || !uniform || !ids) return invalidArgument("sample (CUDA): logits, uniform and ids are required");
  if (rows < 0 || vocab < 1 || vocab > 0x7fffffff || rows > 0x7fffffff)
    return invalidArgument("sample (CUDA): bad sizes");
  if (!(temperature > 0)) return invalidArgument("sample (CUDA): temperature must be > 0 (0 is greedy: argmax)");
  if (!(top_p > 0 && top_p <= 1)) return invalidArgument("sample (CUDA): top_p must be in (0, 1]");
  return okStatus();
}

Status launchSample(const SampleParams& params, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(params.check());
  if (params.rows == 0) return okStatus();
  sampleKernel<<<static_cast<unsigned>(params.rows), kThreads, 0, stream>>>(params);
  return cudaStatus(cudaGetLastError(), "sample (CUDA) launch");
}

}  // namespace llmc::cuda
