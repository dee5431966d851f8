// llm.elementwise and llm.sdpa on the GPU (kernels.h).
#include <cfloat>

#include "cuda/cuda_status.h"
#include "cuda/kernels.h"

namespace llmc::cuda {
namespace {

__device__ float applyOp(int64_t opcode, float a, float b) {
  switch (opcode) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return powf(a, b);
    case 5: return isnan(a) || isnan(b) ? NAN : fmaxf(a, b);
    case 6: return isnan(a) || isnan(b) ? NAN : fminf(a, b);
    case 16: return -a;
    case 17: return expf(a);
    case 18: return logf(a);
    case 19: return sqrtf(a);
    case 20: return 1.0f / a;
    case 21: return tanhf(a);
    case 22: return erff(a);
    case 23: return 1.0f / (1.0f + expf(-a));
    case 24: return a > 0.0f ? a : 0.0f;
    case 25: return fabsf(a);
    case 26: return sinf(a);
    default: return cosf(a);
  }
}

__global__ void elementwiseKernel(ElementwiseParams p, int64_t total) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= total) return;
  float registers[kMaxElementwiseInputs + kMaxElementwiseProgram];
  int64_t remaining = index, coords[kMaxElementwiseRank];
  for (int d = p.rank - 1; d >= 0; --d) {
    coords[d] = remaining % p.shape[d];
    remaining /= p.shape[d];
  }
  for (int i = 0; i < p.num_inputs; ++i) {
    int64_t offset = 0;
    for (int d = 0; d < p.rank; ++d) offset += coords[d] * p.strides[i][d];
    registers[i] = p.inputs[i][offset];
  }
  auto operand = [&](int64_t r) { return r < 0 ? p.constants[-1 - r] : registers[r]; };
  for (int i = 0; i < p.program_length; ++i)
    registers[p.num_inputs + i] = applyOp(p.program[3 * i], operand(p.program[3 * i + 1]),
                                          operand(p.program[3 * i + 2]));
  p.y[index] = registers[p.num_inputs + p.program_length - 1];
}

constexpr int kSdpaThreads = 128;

__device__ float reduceBlock(float value, float* shared, bool is_max) {
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
  float local_max = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < p.keys; j += blockDim.x) {
    float dot = 0.0f;
    for (int64_t d = 0; d < p.head_dim; ++d) dot += q[d] * k[j * p.head_dim + d];
    scores[j] = dot * p.scale + (mask ? mask[j * p.mask_strides[3]] : 0.0f);
    local_max = fmaxf(local_max, scores[j]);
  }
  const float max_score = reduceBlock(local_max, reduce, true);
  float* out = p.out + ((b * p.heads + h) * p.queries + i) * p.head_dim;
  if (max_score == -INFINITY) {  // every key masked: zeros, as the CPU kernel
    for (int64_t d = threadIdx.x; d < p.head_dim; d += blockDim.x) out[d] = 0.0f;
    return;
  }
  float local_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < p.keys; j += blockDim.x) {
    scores[j] = expf(scores[j] - max_score);
    local_sum += scores[j];
  }
  const float inv = 1.0f / reduceBlock(local_sum, reduce, false);
  for (int64_t d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < p.keys; ++j) acc += scores[j] * v[j * p.head_dim + d];
    out[d] = acc * inv;
  }
}

}  // namespace

Status ElementwiseParams::check() const {
  if (!y || num_inputs < 1 || num_inputs > kMaxElementwiseInputs || rank < 0 ||
      rank > kMaxElementwiseRank || program_length < 1 || program_length > kMaxElementwiseProgram ||
      num_constants < 0 || num_constants > kMaxElementwiseProgram)
    return invalidArgument("LlmElementwise (CUDA): bad program or sizes");
  for (int i = 0; i < num_inputs; ++i)
    if (!inputs[i]) return invalidArgument("LlmElementwise (CUDA): input " + std::to_string(i) + " is null");
  for (int i = 0; i < program_length; ++i) {
    const int64_t opcode = program[3 * i];
    if (!((opcode >= 0 && opcode <= 6) || (opcode >= 16 && opcode <= 27)))
      return invalidArgument("LlmElementwise (CUDA): unknown opcode " + std::to_string(opcode));
    for (int j = 1; j <= 2; ++j)
      if (program[3 * i + j] >= num_inputs + i || program[3 * i + j] < -num_constants)
        return invalidArgument("LlmElementwise (CUDA): instruction " + std::to_string(i) +
                               " reads an operand out of range");
  }
  return okStatus();
}

Status launchElementwise(const ElementwiseParams& params, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(params.check());
  int64_t total = 1;
  for (int d = 0; d < params.rank; ++d) total *= params.shape[d];
  if (total == 0) return okStatus();
  const int64_t blocks = (total + 255) / 256;
  if (blocks > 0x7fffffff) return invalidArgument("LlmElementwise (CUDA): too large for one grid");
  elementwiseKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(params, total);
  return cudaStatus(cudaGetLastError(), "LlmElementwise (CUDA) launch");
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
  sdpaKernel<<<grid, kSdpaThreads, shared, stream>>>(params);
  return cudaStatus(cudaGetLastError(), "LlmSdpa (CUDA) launch");
}

}  // namespace llmc::cuda
