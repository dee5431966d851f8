// Block-wide reductions shared by the CUDA kernels: every thread of a block (a multiple of 32
// threads, at most 1024) calls blockReduce and gets the result. `shared` holds 32 values of T
// and is free again when it returns.
#pragma once

#include <cfloat>

namespace llmc::cuda {

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename T, typename Op>
__device__ T blockReduce(T value, T* shared, Op op, T identity) {
  for (int offset = 16; offset > 0; offset /= 2) value = op(value, __shfl_down_sync(0xffffffffu, value, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : identity;
    for (int offset = 16; offset > 0; offset /= 2) value = op(value, __shfl_down_sync(0xffffffffu, value, offset));
    if (lane == 0) shared[0] = value;
  }
  __syncthreads();
  const T result = shared[0];
  __syncthreads();
  return result;
}

template <typename T>
__device__ T blockSum(T value, T* shared) { return blockReduce(value, shared, SumOp(), T(0)); }
__device__ inline float blockMax(float value, float* shared) {
  return blockReduce(value, shared, MaxOp(), -FLT_MAX);
}

}  // namespace llmc::cuda
