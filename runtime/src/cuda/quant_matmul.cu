// llm.quant_matmul and llm.quant_gather on the GPU (kernels.h), over core/quant.h's layouts.
//
// fp8 quantizes the activations to E4M3 under one scale and multiplies codes: with a warp per
// output channel like the others, or on FP8 tensor cores through cuBLASLt for more rows where
// the GPU has them.
//
// Decode (at most kQuantMatVecRows rows): one warp per output channel; lane l takes blocks
// l, l + 32, ... of 32 weights along K (16 packed bytes for 4-bit, 32 for 8-bit: one or two
// 16-byte loads, coalesced across the warp), unpacks them with the group's scale and zero point
// and multiplies them with every row's activations, so the weight is read from memory once for
// all rows. w8a8 rows are quantized per token first (as the CPU kernel: round half away from
// zero, clamp to +-127) and multiplied in int32 with dp4a. Prefill (more rows, weight-only):
// slices of the weight are dequantized into scratch and multiplied through cuBLASLt.
#include <cuda_fp16.h>

#include <algorithm>

#include "core/fp8.h"
#include "core/quant.h"
#include "core/scale.h"
#include "cuda/activation.cuh"
#include "cuda/block_reduce.cuh"
#include "cuda/cuda_status.h"
#include "cuda/kernels.h"

namespace llmc::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 256;
constexpr size_t kDequantSliceBytes = size_t{64} << 20;  // the prefill path's weight slice

struct Format {
  int bits;
  bool f16_scales;
  bool per_token;
  bool e4m3;
};

Format formatOf(const QuantTraits& traits) {
  return {traits.bits, traits.scale_dtype == DType::kFloat16, traits.per_token_activations, traits.e4m3};
}

__device__ inline float loadScale(const void* scales, bool f16, int64_t at) {
  return f16 ? __half2float(static_cast<const __half*>(scales)[at]) : static_cast<const float*>(scales)[at];
}

// The 32 weights of block b of row n, dequantized.
__device__ inline void dequantBlock(const void* data, const void* scales, const uint8_t* zeros, Format f,
                                    int64_t n, int64_t k, int64_t group, int64_t b, float* w) {
  const int64_t groups = (k + group - 1) / group;
  const int64_t g = b * 32 / group;
  const float scale = loadScale(scales, f.f16_scales, n * groups + g);
  if (f.bits == 4) {
    const uint4 packed = *reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(data) + n * (k / 2) + b * 16);
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&packed);
    const int zero = zeros ? zeros[n * groups + g] : 8;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      w[j] = static_cast<float>((bytes[j] & 0x0f) - zero) * scale;
      w[j + 16] = static_cast<float>((bytes[j] >> 4) - zero) * scale;
    }
  } else {
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const int8_t*>(data) + n * k + b * 32);
    const uint4 lo = src[0], hi = src[1];
    const int8_t* a = reinterpret_cast<const int8_t*>(&lo);
    const int8_t* c = reinterpret_cast<const int8_t*>(&hi);
    if (f.e4m3) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        w[j] = e4m3ToFloat(static_cast<uint8_t>(a[j])) * scale;
        w[j + 16] = e4m3ToFloat(static_cast<uint8_t>(c[j])) * scale;
      }
      return;
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      w[j] = static_cast<float>(a[j]) * scale;
      w[j + 16] = static_cast<float>(c[j]) * scale;
    }
  }
}

// h[r, n] = x[r] · dequantized row n, for rows r0 .. r0 + kQuantMatVecRows (blockIdx.y).
__global__ void quantMatVecKernel(const float* x, const void* data, const void* scales, const uint8_t* zeros,
                                  Format f, int64_t rows, int64_t n_size, int64_t k, int64_t group, float* h) {
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kQuantMatVecRows;
  if (n >= n_size) return;
  const int64_t count = min(kQuantMatVecRows, rows - r0);
  float acc[kQuantMatVecRows] = {};
  for (int64_t b = lane; b < k / 32; b += 32) {
    float w[32];
    dequantBlock(data, scales, zeros, f, n, k, group, b, w);
#pragma unroll
    for (int r = 0; r < kQuantMatVecRows; ++r) {
      if (r >= count) break;
      const float4* xr = reinterpret_cast<const float4*>(x + (r0 + r) * k + b * 32);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float4 v = xr[j];
        acc[r] += v.x * w[4 * j] + v.y * w[4 * j + 1] + v.z * w[4 * j + 2] + v.w * w[4 * j + 3];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kQuantMatVecRows; ++r) {
    if (r >= count) break;
    float v = acc[r];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) h[(r0 + r) * n_size + n] = v;
  }
}

// Element i of an activation row with the product's input scales (AWQ / SmoothQuant) applied.
__device__ inline float scaledAt(const float* row, const float* input_scales, int64_t i) {
  return input_scales ? row[i] * input_scales[i] : row[i];
}

// w8a8: q[r] = round(x[r] * s / scale_r), scale_r = max |x[r] * s| / 127 (one block per row).
__global__ void quantizeRowsKernel(const float* x, const float* input_scales, int64_t k, int8_t* q,
                                   float* row_scales) {
  __shared__ float reduce[32];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * k;
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x)
    amax = fmaxf(amax, fabsf(scaledAt(row, input_scales, i)));
  amax = blockMax(amax, reduce);
  const float scale = amax / 127.0f;
  const float inverse = inverseScale(scale);
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
    const float v = scaledAt(row, input_scales, i);
    q[static_cast<int64_t>(blockIdx.x) * k + i] = static_cast<int8_t>(fminf(fmaxf(roundf(v * inverse), -127.0f), 127.0f));
  }
  if (threadIdx.x == 0) row_scales[blockIdx.x] = scale;
}

// w8a8: h[r, n] = (sum_i q[r, i] w[n, i]) * row_scale[r] * scale[n], int32 sums (dp4a).
__global__ void int8MatVecKernel(const int8_t* q, const float* row_scales, const int8_t* w, const float* scales,
                                 int64_t rows, int64_t n_size, int64_t k, float* h) {
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kQuantMatVecRows;
  if (n >= n_size) return;
  const int64_t count = min(kQuantMatVecRows, rows - r0);
  int acc[kQuantMatVecRows] = {};
  for (int64_t b = lane; b < k / 32; b += 32) {
    const int4* wb = reinterpret_cast<const int4*>(w + n * k + b * 32);
    const int4 w0 = wb[0], w1 = wb[1];
    const int wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
    for (int r = 0; r < kQuantMatVecRows; ++r) {
      if (r >= count) break;
      const int4* qb = reinterpret_cast<const int4*>(q + (r0 + r) * k + b * 32);
      const int4 q0 = qb[0], q1 = qb[1];
      const int qv[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[r] = __dp4a(qv[j], wv[j], acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < kQuantMatVecRows; ++r) {
    if (r >= count) break;
    int v = acc[r];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) h[(r0 + r) * n_size + n] = static_cast<float>(v) * row_scales[r0 + r] * scales[n];
  }
}

// fp8: the largest |x * s| of each row (one block per row), then every row's E4M3 codes under
// one scale, amax / 448, which block 0 also writes to *a_scale.
__global__ void rowAbsMaxKernel(const float* x, const float* input_scales, int64_t k, float* row_max) {
  __shared__ float reduce[32];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * k;
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x)
    amax = fmaxf(amax, fabsf(scaledAt(row, input_scales, i)));
  amax = blockMax(amax, reduce);
  if (threadIdx.x == 0) row_max[blockIdx.x] = amax;
}

__global__ void quantizeE4M3Kernel(const float* x, const float* input_scales, int64_t rows, int64_t k,
                                   const float* row_max, uint8_t* q, float* a_scale) {
  __shared__ float reduce[32];
  float amax = 0.0f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) amax = fmaxf(amax, row_max[r]);
  amax = blockMax(amax, reduce);
  const float scale = amax / kE4M3Max;
  const float inverse = inverseScale(scale);
  const float* row = x + static_cast<int64_t>(blockIdx.x) * k;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
    const float v = scaledAt(row, input_scales, i);
    q[static_cast<int64_t>(blockIdx.x) * k + i] = floatToE4M3(v * inverse);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *a_scale = scale;
}

// fp8: h[r, n] = (sum_i dec(q[r, i]) dec(w[n, i])) * a_scale * scale[n]: the products of two
// E4M3 values are exact in float32, as on the CPU and in the tensor cores.
__global__ void fp8MatVecKernel(const uint8_t* q, const float* a_scale, const uint8_t* w, const float* scales,
                                int64_t rows, int64_t n_size, int64_t k, float* h) {
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kQuantMatVecRows;
  if (n >= n_size) return;
  const int64_t count = min(kQuantMatVecRows, rows - r0);
  float acc[kQuantMatVecRows] = {};
  for (int64_t b = lane; b < k / 32; b += 32) {
    const uint4* wb = reinterpret_cast<const uint4*>(w + n * k + b * 32);
    const uint4 w0 = wb[0], w1 = wb[1];
    const uint8_t* w0b = reinterpret_cast<const uint8_t*>(&w0);
    const uint8_t* w1b = reinterpret_cast<const uint8_t*>(&w1);
    float wf[32];
#pragma unroll
    for (int j = 0; j < 16; ++j) wf[j] = e4m3ToFloat(w0b[j]), wf[j + 16] = e4m3ToFloat(w1b[j]);
#pragma unroll
    for (int r = 0; r < kQuantMatVecRows; ++r) {
      if (r >= count) break;
      const uint4* qb = reinterpret_cast<const uint4*>(q + (r0 + r) * k + b * 32);
      const uint4 q0 = qb[0], q1 = qb[1];
      const uint8_t* q0b = reinterpret_cast<const uint8_t*>(&q0);
      const uint8_t* q1b = reinterpret_cast<const uint8_t*>(&q1);
#pragma unroll
      for (int j = 0; j < 16; ++j) acc[r] += e4m3ToFloat(q0b[j]) * wf[j] + e4m3ToFloat(q1b[j]) * wf[j + 16];
    }
  }
#pragma unroll
  for (int r = 0; r < kQuantMatVecRows; ++r) {
    if (r >= count) break;
    float v = acc[r];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) h[(r0 + r) * n_size + n] = v * *a_scale * scales[n];
  }
}

// Rows n0 .. n0 + count of the weight, dequantized to float32 [count, k].
__global__ void dequantRowsKernel(const void* data, const void* scales, const uint8_t* zeros, Format f, int64_t n0,
                                  int64_t count, int64_t k, int64_t group, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // one block of 32
  const int64_t blocks = k / 32;
  if (i >= count * blocks) return;
  const int64_t row = i / blocks, b = i % blocks;
  float w[32];
  dequantBlock(data, scales, zeros, f, n0 + row, k, group, b, w);
  float4* dst = reinterpret_cast<float4*>(out + row * k + b * 32);
#pragma unroll
  for (int j = 0; j < 8; ++j) dst[j] = make_float4(w[4 * j], w[4 * j + 1], w[4 * j + 2], w[4 * j + 3]);
}

__global__ void scaleColumnsKernel(const float* x, const float* s, int64_t rows, int64_t k, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * k) out[i] = x[i] * s[i % k];
}

// y = act(alpha * h + bias), or gated: y[r, f] = act(h[r, f]) * h[r, F + f].
// (column_scales: per output channel factors h still needs, the FP8 tensor-core path's weight
// scales; null otherwise.)
__global__ void quantEpilogueKernel(const float* h, const float* column_scales, const float* bias, int64_t rows,
                                    int64_t n_size, float alpha, Act act, bool gated, float* y) {
  const int64_t out_n = gated ? n_size / 2 : n_size;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * out_n) return;
  const int64_t r = i / out_n, c = i % out_n;
  const float* hr = h + r * n_size;
  auto at = [&](int64_t column) { return column_scales ? hr[column] * column_scales[column] : hr[column]; };
  y[i] = gated ? activate(act, at(c)) * at(out_n + c) : activate(act, alpha * at(c) + (bias ? bias[c] : 0.0f));
}

__global__ void quantGatherKernel(QuantGatherParams p, Format f) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // one block of 32
  const int64_t blocks = p.width / 32;
  if (i >= p.tokens * blocks) return;
  const int64_t t = i / blocks, b = i % blocks;
  float w[32];
  dequantBlock(p.data, p.scales, p.zeros, f, p.ids[t], p.width, p.group, b, w);
  float4* dst = reinterpret_cast<float4*>(p.y + t * p.width + b * 32);
#pragma unroll
  for (int j = 0; j < 8; ++j) dst[j] = make_float4(w[4 * j], w[4 * j + 1], w[4 * j + 2], w[4 * j + 3]);
}

Status gridFor(int64_t count, int threads, const char* what, unsigned* out) {
  const int64_t blocks = (count + threads - 1) / threads;
  if (blocks > 0x7fffffff) return invalidArgument(std::string(what) + ": too large for one grid");
  *out = static_cast<unsigned>(std::max<int64_t>(blocks, 1));
  return okStatus();
}

// Weight-only formats dequantize slices for cuBLASLt beyond kQuantMatVecRows rows; fp8 multiplies
// its codes there on FP8 tensor cores (sm_89 and later) and otherwise keeps the row loop.
bool prefillPath(const QuantMatMulParams& p) {
  return !p.traits->per_token_activations && !p.traits->e4m3 && p.rows > kQuantMatVecRows;
}
bool fp8TensorCorePath(const QuantMatMulParams& p) {
  return p.traits->e4m3 && p.fp8_tensor_cores && p.rows > kQuantMatVecRows;
}

// Scratch: h [rows, n] floats, then the scaled activations [rows, k] (weight-only with input
// scales) or the int8 rows and their scales (w8a8), then the prefill path's weight slice.
struct ScratchLayout {
  size_t h = 0, scaled = 0, q = 0, row_scales = 0, slice = 0, total = 0;
  int64_t slice_rows = 0;
};

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

ScratchLayout scratchLayout(const QuantMatMulParams& p) {
  ScratchLayout l;
  const size_t rows = static_cast<size_t>(p.rows), n = static_cast<size_t>(p.n), k = static_cast<size_t>(p.k);
  size_t at = align256(rows * n * sizeof(float));
  if (p.traits->per_token_activations || p.traits->e4m3) {
    l.q = at;
    at += align256(rows * k);
    l.row_scales = at;  // fp8: the row maxima, then the activation scale
    at += align256((rows + 1) * sizeof(float));
  } else if (p.input_scales) {
    l.scaled = at;
    at += align256(rows * k * sizeof(float));
  }
  if (prefillPath(p)) {
    // Whole multiples of 64 rows, so that every slice's columns of h start 256-byte aligned.
    const int64_t fit = static_cast<int64_t>(kDequantSliceBytes / (k * sizeof(float))) / 64 * 64;
    l.slice_rows = std::min<int64_t>(p.n, std::max<int64_t>(64, fit));
    l.slice = at;
    at += align256(static_cast<size_t>(l.slice_rows) * k * sizeof(float));
  }
  l.total = at;
  return l;
}

}  // namespace

Status QuantMatMulParams::check() const {
  if (!traits) return invalidArgument("LlmQuantMatMul (CUDA): no format");
  if (!x || !data || !scales || !y) return invalidArgument("LlmQuantMatMul (CUDA): x, data, scales and y are required");
  if (rows < 0 || n < 1 || k < 1) return invalidArgument("LlmQuantMatMul (CUDA): needs n, k >= 1");
  LLMC_RETURN_IF_ERROR(checkQuantGroup(*traits, k, group));
  if (traits->zero_points != (zeros != nullptr))
    return invalidArgument(std::string("LlmQuantMatMul (CUDA): ") + traits->name +
                           (traits->zero_points ? " needs" : " takes no") + " zero points");
  if (actFromName(activation) == Act::kUnknown)
    return invalidArgument(std::string("LlmQuantMatMul (CUDA): unknown activation '") + (activation ? activation : "(null)") + "'");
  if (gated && (n % 2 != 0 || bias)) return invalidArgument("LlmQuantMatMul (CUDA): a gated product has 2F outputs and no bias");
  if (traits->per_token_activations && traits->bits != 8) return invalidArgument("LlmQuantMatMul (CUDA): per-token activations need 8-bit weights");
  if (rows > kQuantMatVecRows && (prefillPath(*this) || fp8TensorCorePath(*this)) && !handle)
    return invalidArgument("LlmQuantMatMul (CUDA): more than " + std::to_string(kQuantMatVecRows) +
                           " rows go through cuBLASLt, which needs a handle");
  if (scratch_bytes < quantMatMulScratchBytes(*this))
    return invalidArgument("LlmQuantMatMul (CUDA): scratch of " + std::to_string(scratch_bytes) + " bytes, needs " +
                           std::to_string(quantMatMulScratchBytes(*this)));
  if (!scratch) return invalidArgument("LlmQuantMatMul (CUDA): no scratch");
  return okStatus();
}

size_t quantMatMulScratchBytes(const QuantMatMulParams& params) {
  return params.traits && params.k > 0 ? scratchLayout(params).total : 0;
}

Status launchQuantMatMul(const QuantMatMulParams& p, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(p.check());
  if (p.rows == 0) return okStatus();
  const ScratchLayout l = scratchLayout(p);
  auto* base = static_cast<std::byte*>(p.scratch);
  float* h = reinterpret_cast<float*>(base + l.h);
  const Format f = formatOf(*p.traits);
  const int64_t row_chunks = (p.rows + kQuantMatVecRows - 1) / kQuantMatVecRows;
  if (row_chunks > 65535) return invalidArgument("LlmQuantMatMul (CUDA): too many rows for one grid");
  unsigned grid_x = 0;
  LLMC_RETURN_IF_ERROR(gridFor(p.n, kWarpsPerBlock, "LlmQuantMatMul (CUDA)", &grid_x));
  const float* column_scales = nullptr;
  if (p.traits->e4m3) {
    auto* q = reinterpret_cast<uint8_t*>(base + l.q);
    auto* row_max = reinterpret_cast<float*>(base + l.row_scales);
    float* a_scale = row_max + p.rows;
    if (p.rows > 0x7fffffff) return invalidArgument("LlmQuantMatMul (CUDA): too many rows");
    rowAbsMaxKernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p.x, p.input_scales, p.k, row_max);
    LLMC_RETURN_IF_ERROR(cudaStatus(cudaGetLastError(), "LlmQuantMatMul (CUDA): rowAbsMax launch"));
    quantizeE4M3Kernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p.x, p.input_scales, p.rows, p.k, row_max,
                                                                                   q, a_scale);
    LLMC_RETURN_IF_ERROR(cudaStatus(cudaGetLastError(), "LlmQuantMatMul (CUDA): quantizeE4M3 launch"));
    bool done = false;
    if (fp8TensorCorePath(p)) {
      MatMulParams mm;
      mm.handle = p.handle;
      mm.a = q;
      mm.b = p.data;
      mm.input_dtype = DType::kUndefined;  // E4M3 codes (mm.e4m3)
      mm.e4m3 = true;
      mm.a_scale = a_scale;
      mm.trans_b = true;
      mm.y = h;
      mm.m = p.rows, mm.n = p.n, mm.k = p.k;
      mm.workspace = p.workspace;
      mm.workspace_bytes = p.workspace_bytes;
      mm.algo_cache = p.algo_cache;
      // No FP8 algorithm for this shape: the row loop below instead.
      done = launchMatMul(mm, stream).ok();
      if (done) column_scales = static_cast<const float*>(p.scales);
    }
    if (!done) {
      fp8MatVecKernel<<<dim3(grid_x, static_cast<unsigned>(row_chunks)), kThreads, 0, stream>>>(
          q, a_scale, static_cast<const uint8_t*>(p.data), static_cast<const float*>(p.scales), p.rows, p.n, p.k, h);
      LLMC_RETURN_IF_ERROR(cudaStatus(cudaGetLastError(), "LlmQuantMatMul (CUDA): fp8MatVec launch"));
    }
  } else if (p.traits->per_token_activations) {
    auto* q = reinterpret_cast<int8_t*>(base + l.q);
    auto* row_scales = reinterpret_cast<float*>(base + l.row_scales);
    if (p.rows > 0x7fffffff) return invalidArgument("LlmQuantMatMul (CUDA): too many rows");
    quantizeRowsKernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p.x, p.input_scales, p.k, q, row_scales);
    LLMC_RETURN_IF_ERROR(cudaStatus(cudaGetLastError(), "LlmQuantMatMul (CUDA): quantizeRows launch"));
    int8MatVecKernel<<<dim3(grid_x, static_cast<unsigned>(row_chunks)), kThreads, 0, stream>>>(
        q, row_scales, static_cast<const int8_t*>(p.data), static_cast<const float*>(p.scales), p.rows, p.n, p.k, h);
    LLMC_RETURN_IF_ERROR(cudaStatus(cudaGetLastError(), "LlmQuantMatMul (CUDA): int8MatVec launch"));
  } else {
    const float* x = p.x;
    if (p.input_scales) {
      auto* scaled = reinterpret_cast<float*>(base + l.scaled);
      unsigned grid = 0;
      LLMC_RETURN_IF_ERROR(gridFor(p.rows * p.k, kThreads, "LlmQuantMatMul (CUDA)", &grid));
      scaleColumnsKernel<<<grid, kThreads, 0, stream>>>(p.x, p.input_scales, p.rows, p.k, scaled);
      LLMC_RETURN_IF_ERROR(cudaStatus(cudaGetLastError(), "LlmQuantMatMul (CUDA): scaleColumns launch"));
      x = scaled;
    }
    if (!prefillPath(p)) {
      quantMatVecKernel<<<dim3(grid_x, static_cast<unsigned>(row_chunks)), kThreads, 0, stream>>>(
          x, p.data, p.scales, p.zeros, f, p.rows, p.n, p.k, p.group, h);
      LLMC_RETURN_IF_ERROR(cudaStatus(cudaGetLastError(), "LlmQuantMatMul (CUDA): quantMatVec launch"));
    } else {
      auto* slice = reinterpret_cast<float*>(base + l.slice);
      for (int64_t n0 = 0; n0 < p.n; n0 += l.slice_rows) {
        const int64_t count = std::min(l.slice_rows, p.n - n0);
        unsigned grid = 0;
        LLMC_RETURN_IF_ERROR(gridFor(count * (p.k / 32), kThreads, "LlmQuantMatMul (CUDA)", &grid));
        dequantRowsKernel<<<grid, kThreads, 0, stream>>>(p.data, p.scales, p.zeros, f, n0, count, p.k, p.group, slice);
        LLMC_RETURN_IF_ERROR(cudaStatus(cudaGetLastError(), "LlmQuantMatMul (CUDA): dequantRows launch"));
        MatMulParams mm;
        mm.handle = p.handle;
        mm.a = x;
        mm.b = slice;
        mm.trans_b = true;
        mm.y = h + n0;
        mm.ldy = p.n;
        mm.m = p.rows, mm.n = count, mm.k = p.k;
        mm.allow_tf32 = p.allow_tf32;
        mm.workspace = p.workspace;
        mm.workspace_bytes = p.workspace_bytes;
        mm.algo_cache = p.algo_cache;
        LLMC_RETURN_IF_ERROR(launchMatMul(mm, stream));
      }
    }
  }
  const int64_t out_n = p.gated ? p.n / 2 : p.n;
  unsigned grid = 0;
  LLMC_RETURN_IF_ERROR(gridFor(p.rows * out_n, kThreads, "LlmQuantMatMul (CUDA)", &grid));
  quantEpilogueKernel<<<grid, kThreads, 0, stream>>>(h, column_scales, p.bias, p.rows, p.n, p.alpha,
                                                      actFromName(p.activation), p.gated, p.y);
  return cudaStatus(cudaGetLastError(), "LlmQuantMatMul (CUDA): epilogue launch");
}

Status QuantGatherParams::check() const {
  if (!traits) return invalidArgument("LlmQuantGather (CUDA): no format");
  if (!data || !scales || !ids || !y) return invalidArgument("LlmQuantGather (CUDA): data, scales, ids and y are required");
  if (vocab < 1 || tokens < 0) return invalidArgument("LlmQuantGather (CUDA): bad sizes");
  LLMC_RETURN_IF_ERROR(checkQuantGroup(*traits, width, group));
  if (traits->zero_points != (zeros != nullptr))
    return invalidArgument(std::string("LlmQuantGather (CUDA): ") + traits->name +
                           (traits->zero_points ? " needs" : " takes no") + " zero points");
  return okStatus();
}

Status launchQuantGather(const QuantGatherParams& p, cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(p.check());
  if (p.tokens == 0) return okStatus();
  unsigned grid = 0;
  LLMC_RETURN_IF_ERROR(gridFor(p.tokens * (p.width / 32), kThreads, "LlmQuantGather (CUDA)", &grid));
  quantGatherKernel<<<grid, kThreads, 0, stream>>>(p, formatOf(*p.traits));
  return cudaStatus(cudaGetLastError(), "LlmQuantGather (CUDA) launch");
}

}  // namespace llmc::cuda
