// llm.elementwise on the GPU (kernels.h).
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

}  // namespace llmc::cuda
