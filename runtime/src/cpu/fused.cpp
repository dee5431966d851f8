// CPU kernels of the fused llm ops: LlmFusedMatMul (matrix product + bias + activation),
// LlmGatedMlp, LlmMoe (a mixture of experts), LlmNorm (RMS / layer norm with the residual add) and
// LlmElementwise (a chain of elementwise ops in one pass). Float32; each replaces several reference
// kernels and as many round trips through memory, and is tested against them
// (test/unit/cpu/fused_test.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/isa.h"
#include "core/kernel.h"
#include "core/thread_pool.h"
#include "cpu/attend.h"
#include "cpu/epilogue.h"
#include "cpu/gemm.h"
#include "cpu/head_layout.h"
#include "cpu/norm_row.h"

namespace llmc {
namespace {

// Rows of a·b: acc[r * ldc + n] = sum_k a[r][k] * b(k, n) for r < rows, n < n_size, ascending
// k like the reference MatMul; b(k, n) is b[k * ldb + n], or b[n * ldb + k] when trans_b. Every
// sum is computed the same way whatever the block's rows and columns, so products split over
// threads by rows and columns give the same bits (test/threads/threads_test.cpp).
//
// Prefill: the weights do not fit in cache, so each is read once per block of kRowBlock rows
// (once per 256 tokens; packedGemm packs each panel of it once per block), in tiles of
// kColumnTile columns whose four weight rows stay in L1 while every row of the block uses them
// where the CPU lacks AVX2. Decode (one row) streams the weight, sixteen rows of it at a time
// with AVX2 or AVX-512 (matVec below).
constexpr int64_t kRowBlock = 256;
constexpr int64_t kColumnTile = 512;
// Columns per task of a threaded product: one task reads kTaskColumns x K weights (192 KiB at
// K = 768 in decode), few enough tasks that claiming one costs nothing next to it, enough that
// two to eight threads share a 768-wide product evenly.
constexpr int64_t kTaskColumns = 64;
// Up to this many rows (a batch's decode step) the AVX-512 product streams the weight as decode
// does (matVecRowsAvx512), and the threads take one column range each.
constexpr int64_t kMatVecMaxRows = 8;

LLMC_ISA_INLINE void matMulRowBlockBody(const float* a, int64_t rows, int64_t k_size,
                                        const float* b, int64_t ldb, int64_t n_size, bool trans_b,
                                        float* acc, int64_t ldc) {
  if (trans_b) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t n = 0; n < n_size; ++n) {
        const float* a_row = a + r * k_size;
        const float* b_row = b + n * ldb;
        float sum = 0;
        for (int64_t k = 0; k < k_size; ++k) sum += a_row[k] * b_row[k];
        acc[r * ldc + n] = sum;
      }
    return;
  }
  if (rows >= 4 && packedGemmAvailable())
    return packedGemm(a, rows, k_size, b, ldb, n_size, acc, ldc);
  for (int64_t r = 0; r < rows; ++r) std::fill(acc + r * ldc, acc + r * ldc + n_size, 0.0f);
  // One row (decode) streams the weight in order; several (on CPUs without AVX2) go over it in
  // column tiles.
  const int64_t tile = rows >= 4 ? kColumnTile : n_size;
  for (int64_t n0 = 0; n0 < n_size; n0 += tile) {
    const int64_t width = std::min(tile, n_size - n0);
    // Four rows of b per pass over acc: each element still adds its products in ascending k,
    // with a quarter of the loads and stores of acc.
    int64_t k = 0;
    for (; k + 4 <= k_size; k += 4) {
      const float* __restrict b0 = b + k * ldb + n0;
      const float* __restrict b1 = b0 + ldb;
      const float* __restrict b2 = b1 + ldb;
      const float* __restrict b3 = b2 + ldb;
      for (int64_t r = 0; r < rows; ++r) {
        const float* a_row = a + r * k_size + k;
        const float a0 = a_row[0], a1 = a_row[1], a2 = a_row[2], a3 = a_row[3];
        float* __restrict acc_row = acc + r * ldc + n0;
        for (int64_t n = 0; n < width; ++n) {
          float sum = acc_row[n];
          sum += a0 * b0[n];
          sum += a1 * b1[n];
          sum += a2 * b2[n];
          sum += a3 * b3[n];
          acc_row[n] = sum;
        }
      }
    }
    for (; k < k_size; ++k) {
      const float* __restrict b_row = b + k * ldb + n0;
      for (int64_t r = 0; r < rows; ++r) {
        const float a_value = a[r * k_size + k];
        float* __restrict acc_row = acc + r * ldc + n0;
        for (int64_t n = 0; n < width; ++n) acc_row[n] += a_value * b_row[n];
      }
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// Decode (one row, b not transposed): acc[n] = Σ_k a[k] b[k][n] in passes of kMatVecRows rows of
// b over acc, one fused multiply-add per product in ascending k (so the bits of
// matMulRowBlockBody's passes of four). Sixteen rows streamed at once took float32 decode of the
// 110M Llama from 41-44 to 50-53 tokens/s on one thread and 60-68 to 76-77 on two (AVX-512
// EPYC; its AVX2 kernels, LLMC_CPU_ISA=avx2: 44 to 54-55); 8 rows gave 47-49, 32 gave 38-39, one
// row per pass 36-37, and four with the next pass's lines asked for ahead 38.
constexpr int kMatVecRows = 16;

// acc[0 .. width) += a[i] * rows_b[i * ldb + ...] for i < kRows, in order.
template <int kRows>
LLMC_TARGET_AVX512_WIDE void matVecPassAvx512(const float* a, const float* rows_b, int64_t ldb,
                                              int64_t width, float* acc) {
  __m512 av[kRows];
  for (int i = 0; i < kRows; ++i) av[i] = _mm512_set1_ps(a[i]);
  for (int64_t n = 0; n < width; n += 16) {
    const __mmask16 m = width - n >= 16 ? 0xffff : static_cast<__mmask16>((1u << (width - n)) - 1);
    __m512 sum = _mm512_maskz_loadu_ps(m, acc + n);
    for (int i = 0; i < kRows; ++i)
      sum = _mm512_fmadd_ps(av[i], _mm512_maskz_loadu_ps(m, rows_b + i * ldb + n), sum);
    _mm512_mask_storeu_ps(acc + n, m, sum);
  }
}

template <int kRows>
LLMC_TARGET_AVX2 void matVecPassAvx2(const float* a, const float* rows_b, int64_t ldb,
                                     int64_t width, float* acc) {
  const int64_t whole = width / 8 * 8;
  __m256 av[kRows];
  for (int i = 0; i < kRows; ++i) av[i] = _mm256_set1_ps(a[i]);
  for (int64_t n = 0; n < whole; n += 8) {
    __m256 sum = _mm256_loadu_ps(acc + n);
    for (int i = 0; i < kRows; ++i)
      sum = _mm256_fmadd_ps(av[i], _mm256_loadu_ps(rows_b + i * ldb + n), sum);
    _mm256_storeu_ps(acc + n, sum);
  }
  for (int64_t n = whole; n < width; ++n)
    for (int i = 0; i < kRows; ++i) acc[n] = std::fma(a[i], rows_b[i * ldb + n], acc[n]);
}

// Two to kMatVecMaxRows rows (a batch's decode step) on AVX-512: each pass loads kRows vectors
// of b once and runs every row of a over them, the same fused multiply-adds in ascending k per
// output (the bits of the one-row pass and of packedGemm). The weight is streamed once per step
// as in decode, where packedGemm would copy it into panels for a handful of rows: the 110M
// Llama's float32 step of 8 sequences went from 49.5-49.9 to 37.3-37.5 ms, of 4 from 40-40.5 to
// 24.8-25.1 ms (one thread, AVX-512 EPYC).
template <int kRows>
LLMC_TARGET_AVX512_WIDE void matVecRowsPassAvx512(const float* a, int64_t lda, int64_t rows,
                                                  const float* rows_b, int64_t ldb, int64_t width,
                                                  float* acc, int64_t ldc) {
  for (int64_t n = 0; n < width; n += 16) {
    const __mmask16 m = width - n >= 16 ? 0xffff : static_cast<__mmask16>((1u << (width - n)) - 1);
    __m512 bv[kRows];
    for (int i = 0; i < kRows; ++i) bv[i] = _mm512_maskz_loadu_ps(m, rows_b + i * ldb + n);
    for (int64_t r = 0; r < rows; ++r) {
      __m512 sum = _mm512_maskz_loadu_ps(m, acc + r * ldc + n);
      for (int i = 0; i < kRows; ++i)
        sum = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + i]), bv[i], sum);
      _mm512_mask_storeu_ps(acc + r * ldc + n, m, sum);
    }
  }
}

LLMC_TARGET_AVX512_WIDE void matVecRowsAvx512(const float* a, int64_t rows, int64_t k_size,
                                              const float* b, int64_t ldb, int64_t width,
                                              float* acc, int64_t ldc) {
  for (int64_t r = 0; r < rows; ++r) std::fill(acc + r * ldc, acc + r * ldc + width, 0.0f);
  int64_t k = 0;
  for (; k + kMatVecRows <= k_size; k += kMatVecRows)
    matVecRowsPassAvx512<kMatVecRows>(a + k, k_size, rows, b + k * ldb, ldb, width, acc, ldc);
  for (; k < k_size; ++k)
    matVecRowsPassAvx512<1>(a + k, k_size, rows, b + k * ldb, ldb, width, acc, ldc);
}

template <void (*kPass)(const float*, const float*, int64_t, int64_t, float*),
          void (*kOne)(const float*, const float*, int64_t, int64_t, float*)>
void matVec(const float* a, int64_t k_size, const float* b, int64_t ldb, int64_t width,
            float* acc) {
  std::fill(acc, acc + width, 0.0f);
  int64_t k = 0;
  for (; k + kMatVecRows <= k_size; k += kMatVecRows) kPass(a + k, b + k * ldb, ldb, width, acc);
  for (; k < k_size; ++k) kOne(a + k, b + k * ldb, ldb, width, acc);
}
constexpr auto matVecAvx512 = matVec<matVecPassAvx512<kMatVecRows>, matVecPassAvx512<1>>;
constexpr auto matVecAvx2 = matVec<matVecPassAvx2<kMatVecRows>, matVecPassAvx2<1>>;
#endif

LLMC_TARGET_AVX2 void matMulRowBlockAvx2(const float* a, int64_t rows, int64_t k_size,
                                         const float* b, int64_t ldb, int64_t n_size, bool trans_b,
                                         float* acc, int64_t ldc) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (rows == 1 && !trans_b) return matVecAvx2(a, k_size, b, ldb, n_size, acc);
#endif
  matMulRowBlockBody(a, rows, k_size, b, ldb, n_size, trans_b, acc, ldc);
}
LLMC_TARGET_AVX512_WIDE void matMulRowBlockAvx512(const float* a, int64_t rows, int64_t k_size,
                                                  const float* b, int64_t ldb, int64_t n_size,
                                                  bool trans_b, float* acc, int64_t ldc) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (rows == 1 && !trans_b) return matVecAvx512(a, k_size, b, ldb, n_size, acc);
  if (rows <= kMatVecMaxRows && !trans_b)
    return matVecRowsAvx512(a, rows, k_size, b, ldb, n_size, acc, ldc);
#endif
  matMulRowBlockBody(a, rows, k_size, b, ldb, n_size, trans_b, acc, ldc);
}
void matMulRowBlockBaseline(const float* a, int64_t rows, int64_t k_size, const float* b,
                            int64_t ldb, int64_t n_size, bool trans_b, float* acc, int64_t ldc) {
  matMulRowBlockBody(a, rows, k_size, b, ldb, n_size, trans_b, acc, ldc);
}
// With `strips` (b's columns from strips_n0 on, kept by the executor: packFloatStrips) the
// product reads them instead of b: the same bits on every path.
void matMulRowBlock(const float* a, int64_t rows, int64_t k_size, const float* b, int64_t ldb,
                    int64_t n_size, bool trans_b, float* acc, int64_t ldc,
                    const FloatStrips* strips = nullptr, int64_t strips_n0 = 0) {
  if (strips && !trans_b && strips->strip == packedGemmStrip() && strips->k == k_size)
    return stripsGemm(a, rows, *strips, strips_n0, n_size, acc, ldc);
  (cpuIsa() >= CpuIsa::kAvx512 ? matMulRowBlockAvx512
   : cpuIsa() >= CpuIsa::kAvx2
       ? matMulRowBlockAvx2
       : matMulRowBlockBaseline)(a, rows, k_size, b, ldb, n_size, trans_b, acc, ldc);
}

// Calls task(row0, rows, n0, columns) for every block of up to kRowBlock rows and kTaskColumns
// columns of a [rows x n_size] result, spread over the pool.
// Decode (up to kMatVecMaxRows rows, a [K, N] weight streamed from memory) takes one column range
// per thread instead: each of the weight's rows is then read in runs of N / threads floats rather
// than of kTaskColumns, which the hardware prefetchers follow (on one thread the whole weight in
// order: a 110M float32 Llama decoded 31 tokens/s on one thread against 16.3 with 64-column
// tasks). Each sum is the same whichever columns a task covers.
template <typename Task>
void forEachBlock(ThreadPool* pool, int64_t rows, int64_t n_size, Task&& task) {
  int64_t task_columns = kTaskColumns;
  if (rows <= kMatVecMaxRows) {
    const int64_t threads = pool ? pool->threads() : 1;
    task_columns = std::max(kTaskColumns, ((n_size + threads - 1) / threads + kTaskColumns - 1) /
                                              kTaskColumns * kTaskColumns);
  }
  const int64_t row_blocks = (rows + kRowBlock - 1) / kRowBlock;
  const int64_t column_blocks = (n_size + task_columns - 1) / task_columns;
  parallelFor(pool, row_blocks * column_blocks, [&](int64_t i) {
    const int64_t row0 = (i / column_blocks) * kRowBlock, n0 = (i % column_blocks) * task_columns;
    task(row0, std::min(kRowBlock, rows - row0), n0, std::min(task_columns, n_size - n0));
  });
}

Status checkFloat32(const KernelContext& ctx, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t && t->dtype() != DType::kFloat32)
      return kernelError(ctx, std::string("fused kernels compute float32, got ") +
                                  dtypeName(t->dtype()));
  return okStatus();
}

// The float32 weight of input `input` ([K, ldb] from b, columns [0, n)) as strips for this CPU's
// tiles, kept by the executor for the session (SessionOptions::prepack_weights), or null: not
// an engine weight, packing off, or no packedGemm on this CPU. `part` names which columns.
std::shared_ptr<const FloatStrips> keptStrips(const KernelContext& ctx, size_t input,
                                              const std::string& part, const float* b, int64_t ldb,
                                              int64_t k, int64_t n) {
  const int64_t strip = packedGemmStrip();
  if (strip == 0 || k == 0 || n == 0) return nullptr;
  const std::shared_ptr<const void> kept =
      ctx.derivedFromWeights({input}, "f32-strips-" + std::to_string(strip) + part, [&] {
        std::shared_ptr<const FloatStrips> made = packFloatStrips(b, ldb, k, n, ctx.threadPool());
        return KernelContext::Derived{made, made ? made->bytes() : 0};
      });
  return std::static_pointer_cast<const FloatStrips>(kept);
}

Status fusedMatMul(KernelContext& ctx) {
  const Tensor* a = ctx.input(0);
  const Tensor* b = ctx.input(1);
  const Tensor* bias = ctx.input(2);
  if (!a || !b || a->rank() < 1 || b->rank() != 2)
    return kernelError(ctx, "LlmFusedMatMul needs a [..., K] and a 2-D weight");
  LLMC_RETURN_IF_ERROR(checkFloat32(ctx, {a, b, bias}));
  const bool trans_b = ctx.params().getInt("trans_b", 0) != 0;
  const int64_t k_size = a->dim(a->rank() - 1);
  const int64_t n_size = trans_b ? b->dim(0) : b->dim(1);
  if ((trans_b ? b->dim(1) : b->dim(0)) != k_size)
    return kernelError(ctx, "inner dimensions differ: " + shapeToString(a->shape()) + " x " +
                                shapeToString(b->shape()) + (trans_b ? "ᵀ" : ""));
  if (bias && bias->numElements() != n_size)
    return kernelError(ctx, "bias " + shapeToString(bias->shape()) + " does not have " +
                                std::to_string(n_size) + " values");
  const Activation activation = activationFromName(ctx.params().getString("activation", ""));
  if (activation == Activation::kUnknown) return kernelError(ctx, "unknown activation");
  Shape out_shape = a->shape();
  out_shape.back() = n_size;
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, out_shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  const float alpha = static_cast<float>(ctx.params().getFloat("alpha", 1.0));
  const int64_t rows = k_size == 0 ? out->numElements() / std::max<int64_t>(n_size, 1)
                                   : a->numElements() / k_size;
  const float* bias_data = bias ? bias->data<float>() : nullptr;
  const float* x = a->data<float>();
  const float* w = b->data<float>();
  float* y = out->data<float>();
  const std::shared_ptr<const FloatStrips> strips =
      trans_b ? nullptr : keptStrips(ctx, 1, "", w, n_size, k_size, n_size);
  forEachBlock(ctx.threadPool(), rows, n_size,
               [&](int64_t row0, int64_t count, int64_t n0, int64_t columns) {
                 float* acc = y + row0 * n_size + n0;
                 matMulRowBlock(x + row0 * k_size, count, k_size,
                                trans_b ? w + n0 * k_size : w + n0, trans_b ? k_size : n_size,
                                columns, trans_b, acc, n_size, strips.get(), n0);
                 for (int64_t r = 0; r < count; ++r)
                   applyEpilogue(acc + r * n_size, 1, columns, alpha,
                                 bias_data ? bias_data + n0 : nullptr, activation);
               });
  return okStatus();
}

Status gatedMlp(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* w = ctx.input(1);
  if (!x || !w || x->rank() < 1 || w->rank() != 2 || w->dim(1) % 2 != 0 ||
      w->dim(0) != x->dim(x->rank() - 1))
    return kernelError(ctx, "LlmGatedMlp needs x [..., K] and w [K, 2F], got " +
                                (x ? shapeToString(x->shape()) : std::string("none")) + " and " +
                                (w ? shapeToString(w->shape()) : std::string("none")));
  LLMC_RETURN_IF_ERROR(checkFloat32(ctx, {x, w}));
  const Activation activation = activationFromName(ctx.params().getString("activation", ""));
  if (activation == Activation::kUnknown || activation == Activation::kNone)
    return kernelError(ctx, "unknown gate activation");
  const int64_t k_size = w->dim(0), width = w->dim(1), f_size = width / 2;
  Shape out_shape = x->shape();
  out_shape.back() = f_size;
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, out_shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  const int64_t rows = out->numElements() / std::max<int64_t>(f_size, 1);
  const float* xd = x->data<float>();
  const float* wd = w->data<float>();
  float* y = out->data<float>();
  const std::shared_ptr<const FloatStrips> gate_strips =
      keptStrips(ctx, 1, "gate", wd, width, k_size, f_size);
  const std::shared_ptr<const FloatStrips> up_strips =
      keptStrips(ctx, 1, "up", wd + f_size, width, k_size, f_size);
  // A task computes its columns of the gate and of the up projection, then their product.
  forEachBlock(ctx.threadPool(), rows, f_size,
               [&](int64_t row0, int64_t count, int64_t f0, int64_t columns) {
                 thread_local std::vector<float> gate, up;
                 gate.resize(static_cast<size_t>(count * columns));
                 up.resize(gate.size());
                 matMulRowBlock(xd + row0 * k_size, count, k_size, wd + f0, width, columns, false,
                                gate.data(), columns, gate_strips.get(), f0);
                 matMulRowBlock(xd + row0 * k_size, count, k_size, wd + f_size + f0, width, columns,
                                false, up.data(), columns, up_strips.get(), f0);
                 for (int64_t r = 0; r < count; ++r)
                   gatedRow(activation, gate.data() + r * columns, up.data() + r * columns,
                            y + (row0 + r) * f_size + f0, columns);
               });
  return okStatus();
}

// y = x · w for `rows` rows of x [rows, k] and w [k, n] (row-major), spread over the pool.
void matMulRows(ThreadPool* pool, const float* x, int64_t rows, int64_t k, const float* w,
                int64_t n, float* y) {
  forEachBlock(pool, rows, n, [&](int64_t row0, int64_t count, int64_t n0, int64_t columns) {
    matMulRowBlock(x + row0 * k, count, k, w + n0, n, columns, false, y + row0 * n + n0, n);
  });
}

// LlmMoe: a mixture-of-experts MLP (Mixtral's sparse block). Each row of x [..., H] is routed
// by softmax(x · router) [E] to its top_k experts (ties to the lower index, as TopK), whose
// weights are those probabilities (renormalized to sum 1 when `normalize`); the row's result
// is the sum, in expert order, of weight * (act(x · w_gate[e]) * (x · w_up[e])) · w_down[e]
// over its experts. Only the selected experts are computed, each on the rows that chose it.
Status moe(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* router = ctx.input(1);
  const Tensor* w_gate = ctx.input(2);
  const Tensor* w_up = ctx.input(3);
  const Tensor* w_down = ctx.input(4);
  if (!x || !router || !w_gate || !w_up || !w_down || x->rank() < 1 || router->rank() != 2 ||
      w_gate->rank() != 3 || w_up->shape() != w_gate->shape() || w_down->rank() != 3)
    return kernelError(ctx,
                       "LlmMoe needs x [..., H], router [H, E], w_gate and w_up [E, H, F] "
                       "and w_down [E, F, H]");
  LLMC_RETURN_IF_ERROR(checkFloat32(ctx, {x, router, w_gate, w_up, w_down}));
  const int64_t hidden = x->dim(x->rank() - 1), experts = router->dim(1), ffn = w_gate->dim(2);
  if (router->dim(0) != hidden || w_gate->dim(0) != experts || w_gate->dim(1) != hidden ||
      w_down->shape() != Shape{experts, ffn, hidden})
    return kernelError(ctx, "LlmMoe: x " + shapeToString(x->shape()) + ", router " +
                                shapeToString(router->shape()) + ", w_gate " +
                                shapeToString(w_gate->shape()) + ", w_down " +
                                shapeToString(w_down->shape()) + " do not fit");
  const int64_t top_k = ctx.params().getInt("top_k", 0);
  if (top_k < 1 || top_k > experts)
    return kernelError(
        ctx, "top_k " + std::to_string(top_k) + " is not in [1, " + std::to_string(experts) + "]");
  const Activation activation = activationFromName(ctx.params().getString("activation", ""));
  if (activation == Activation::kUnknown || activation == Activation::kNone)
    return kernelError(ctx, "unknown expert activation");
  const bool normalize = ctx.params().getInt("normalize", 1) != 0;
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, x->shape(), &out));
  if (ctx.shapeOnly()) return okStatus();
  const int64_t rows = x->numElements() / std::max<int64_t>(hidden, 1);
  const float* xd = x->data<float>();
  float* y = out->data<float>();
  std::fill(y, y + out->numElements(), 0.0f);
  // 1. Routing: probabilities (the Softmax kernel's arithmetic), the top_k, their weights.
  std::vector<float> logits(static_cast<size_t>(rows * experts));
  matMulRows(ctx.threadPool(), xd, rows, hidden, router->data<float>(), experts, logits.data());
  std::vector<std::vector<std::pair<int64_t, float>>> chosen(static_cast<size_t>(experts));
  std::vector<int64_t> order(static_cast<size_t>(experts));
  std::vector<float> probs(static_cast<size_t>(experts));
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = &logits[static_cast<size_t>(r * experts)];
    double top = -INFINITY, sum = 0;
    for (int64_t e = 0; e < experts; ++e) top = std::max(top, static_cast<double>(l[e]));
    for (int64_t e = 0; e < experts; ++e) sum += std::exp(static_cast<double>(l[e]) - top);
    for (int64_t e = 0; e < experts; ++e)
      probs[e] = static_cast<float>(std::exp(static_cast<double>(l[e]) - top) / sum);
    for (int64_t e = 0; e < experts; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int64_t a, int64_t b) {
      return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
    });
    float total = 0;
    for (int64_t k = 0; k < top_k; ++k) total += probs[order[k]];
    for (int64_t k = 0; k < top_k; ++k) {
      const float p = probs[order[k]];
      chosen[static_cast<size_t>(order[k])].push_back({r, normalize ? p / total : p});
    }
  }
  // 2. Each expert on the rows that chose it, added in expert order.
  std::vector<float> in, gate, up, result;
  for (int64_t e = 0; e < experts; ++e) {
    const auto& picks = chosen[static_cast<size_t>(e)];
    const int64_t count = static_cast<int64_t>(picks.size());
    if (count == 0) continue;
    in.resize(static_cast<size_t>(count * hidden));
    for (int64_t i = 0; i < count; ++i)
      std::copy(xd + picks[i].first * hidden, xd + (picks[i].first + 1) * hidden,
                in.begin() + i * hidden);
    gate.resize(static_cast<size_t>(count * ffn));
    up.resize(gate.size());
    result.resize(in.size());
    matMulRows(ctx.threadPool(), in.data(), count, hidden, w_gate->data<float>() + e * hidden * ffn,
               ffn, gate.data());
    matMulRows(ctx.threadPool(), in.data(), count, hidden, w_up->data<float>() + e * hidden * ffn,
               ffn, up.data());
    gatedRow(activation, gate.data(), up.data(), gate.data(), static_cast<int64_t>(gate.size()));
    matMulRows(ctx.threadPool(), gate.data(), count, ffn, w_down->data<float>() + e * ffn * hidden,
               hidden, result.data());
    for (int64_t i = 0; i < count; ++i) {
      float* row = y + picks[i].first * hidden;
      const float weight = picks[i].second;
      for (int64_t h = 0; h < hidden; ++h) row[h] += result[i * hidden + h] * weight;
    }
  }
  return okStatus();
}

Status norm(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* residual = ctx.input(1);
  const Tensor* scale = ctx.input(2);
  const Tensor* bias = ctx.input(3);
  if (!x || !scale || x->rank() < 1) return kernelError(ctx, "LlmNorm needs x and scale");
  LLMC_RETURN_IF_ERROR(checkFloat32(ctx, {x, residual, scale, bias}));
  const int64_t row_width = x->dim(x->rank() - 1);
  // Grouped (per-head) form: the first scale->numElements() columns of each row in segments of
  // `group`, each normalized on its own; the rest of the row copied.
  const int64_t group = ctx.params().getInt("group", 0);
  const int64_t width = group > 0 ? group : row_width;
  const int64_t normalized = group > 0 ? scale->numElements() : row_width;
  if (group < 0 || (group > 0 && (residual || normalized % group != 0 || normalized > row_width)))
    return kernelError(ctx, "a grouped norm (group " + std::to_string(group) +
                                ") takes no residual and a scale of whole groups within the " +
                                std::to_string(row_width) + " columns, got " +
                                std::to_string(normalized));
  if (residual && residual->shape() != x->shape())
    return kernelError(ctx, "residual " + shapeToString(residual->shape()) + " differs from x " +
                                shapeToString(x->shape()));
  if (scale->numElements() != normalized || (bias && bias->numElements() != normalized))
    return kernelError(ctx, "scale/bias must have " + std::to_string(normalized) + " values");
  const std::string kind = ctx.params().getString("kind", "");
  if (kind != "rms" && kind != "layer") return kernelError(ctx, "norm kind must be rms or layer");
  const bool rms = kind == "rms";
  Tensor* out = nullptr;
  Tensor* sum = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, x->shape(), &out));
  if (residual && ctx.numOutputs() > 1)
    LLMC_RETURN_IF_ERROR(ctx.allocateOutput(1, DType::kFloat32, x->shape(), &sum));
  if (ctx.shapeOnly()) return okStatus();
  const float epsilon = static_cast<float>(ctx.params().getFloat("epsilon", 1e-5));
  // A grouped norm's rows are its segments: segment r of row r / groups at column
  // (r % groups) * width; an ungrouped norm has one segment per row.
  const int64_t groups = group > 0 ? normalized / group : 1;
  const int64_t rows = row_width == 0 ? 0 : x->numElements() / row_width * groups;
  auto segment = [&](int64_t r) { return r / groups * row_width + r % groups * width; };
  // Columns past the groups are copied.
  if (group > 0 && normalized < row_width)
    for (int64_t r = 0; r < x->numElements() / row_width; ++r)
      std::memcpy(out->data<float>() + r * row_width + normalized,
                  x->data<float>() + r * row_width + normalized,
                  static_cast<size_t>(row_width - normalized) * sizeof(float));
  // Rows are independent: tasks of kNormRows rows (a decode step's one row runs alone).
  constexpr int64_t kNormRows = 16;
  parallelFor(ctx.threadPool(), (rows + kNormRows - 1) / kNormRows, [&](int64_t task) {
    std::vector<float> row_sum(residual && !sum ? static_cast<size_t>(width) : 0);
    for (int64_t r = task * kNormRows; r < std::min(rows, (task + 1) * kNormRows); ++r) {
      const float* gamma = scale->data<float>() + r % groups * width;
      const float* beta = bias ? bias->data<float>() + r % groups * width : nullptr;
      const float* rr = residual ? residual->data<float>() + r * width : nullptr;
      float* sr = sum ? sum->data<float>() + r * width : row_sum.data();
      normRow(x->data<float>() + segment(r), rr, sr, width, rms, epsilon, gamma, beta,
              out->data<float>() + segment(r));
    }
  });
  return okStatus();
}

// --- LlmElementwise ----------------------------------------------------------------------

// Opcodes of llm.elementwise (LLMOps.td): binary 0..6, unary 16..27. Each applies to a whole
// chunk with the opcode switch outside the element loop, so the loops vectorize.
void applyBinary(int64_t opcode, const float* __restrict x, const float* __restrict y,
                 float* __restrict out, int64_t len) {
  switch (opcode) {
    case 0: for (int64_t e = 0; e < len; ++e) out[e] = x[e] + y[e]; break;
    case 1: for (int64_t e = 0; e < len; ++e) out[e] = x[e] - y[e]; break;
    case 2: for (int64_t e = 0; e < len; ++e) out[e] = x[e] * y[e]; break;
    case 3: for (int64_t e = 0; e < len; ++e) out[e] = x[e] / y[e]; break;
    case 4: for (int64_t e = 0; e < len; ++e) out[e] = std::pow(x[e], y[e]); break;
    case 5:
      for (int64_t e = 0; e < len; ++e)
        out[e] = std::isnan(x[e]) || std::isnan(y[e]) ? NAN : std::max(x[e], y[e]);
      break;
    default:
      for (int64_t e = 0; e < len; ++e)
        out[e] = std::isnan(x[e]) || std::isnan(y[e]) ? NAN : std::min(x[e], y[e]);
  }
}

void applyUnary(int64_t opcode, const float* __restrict x, float* __restrict out, int64_t len) {
  switch (opcode) {
    case 16: for (int64_t e = 0; e < len; ++e) out[e] = -x[e]; break;
    case 17: for (int64_t e = 0; e < len; ++e) out[e] = std::exp(x[e]); break;
    case 18: for (int64_t e = 0; e < len; ++e) out[e] = std::log(x[e]); break;
    case 19: for (int64_t e = 0; e < len; ++e) out[e] = std::sqrt(x[e]); break;
    case 20: for (int64_t e = 0; e < len; ++e) out[e] = 1.0f / x[e]; break;
    case 21: for (int64_t e = 0; e < len; ++e) out[e] = std::tanh(x[e]); break;
    case 22: for (int64_t e = 0; e < len; ++e) out[e] = std::erf(x[e]); break;
    case 23: for (int64_t e = 0; e < len; ++e) out[e] = sigmoid(x[e]); break;
    case 24: for (int64_t e = 0; e < len; ++e) out[e] = x[e] > 0 ? x[e] : 0.0f; break;
    case 25: for (int64_t e = 0; e < len; ++e) out[e] = std::fabs(x[e]); break;
    case 26: for (int64_t e = 0; e < len; ++e) out[e] = std::sin(x[e]); break;
    default: for (int64_t e = 0; e < len; ++e) out[e] = std::cos(x[e]);
  }
}

// How one input is read at a flat output index: contiguous, one scalar, repeating its
// elements every `period` (a suffix of the output shape), or generally through strides.
struct InputReader {
  enum class Kind { kFull, kScalar, kSuffix, kStrided } kind = Kind::kFull;
  const float* data = nullptr;
  int64_t period = 1;
  std::vector<int64_t> strides;  // per output dim, 0 where broadcast (kStrided)
};

Status elementwise(KernelContext& ctx) {
  const std::vector<int64_t> program = ctx.params().getInts("program");
  const std::vector<double> constants = ctx.params().getFloats("constants");
  const int64_t inputs = static_cast<int64_t>(ctx.numInputs());
  if (program.empty() || program.size() % 3 != 0)
    return kernelError(ctx, "LlmElementwise has no program");
  Shape shape;
  for (int64_t i = 0; i < inputs; ++i) {
    const Tensor* t = ctx.input(static_cast<size_t>(i));
    if (!t) return kernelError(ctx, "LlmElementwise input " + std::to_string(i) + " is absent");
    LLMC_RETURN_IF_ERROR(checkFloat32(ctx, {t}));
    Shape next;
    LLMC_RETURN_IF_ERROR(broadcastShapes(shape, t->shape(), ctx.nodeName(), &next));
    shape = next;
  }
  int64_t registers = inputs;
  for (size_t i = 0; i < program.size(); i += 3, ++registers) {
    const int64_t opcode = program[i];
    if (!((opcode >= 0 && opcode <= 6) || (opcode >= 16 && opcode <= 27)))
      return kernelError(ctx, "unknown elementwise opcode " + std::to_string(opcode));
    for (size_t j = 1; j <= 2; ++j)
      if (program[i + j] >= registers || program[i + j] < -static_cast<int64_t>(constants.size()))
        return kernelError(ctx, "elementwise operand out of range");
  }
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  const int64_t total = out->numElements();
  const std::vector<int64_t> out_strides = stridesOf(shape);
  std::vector<InputReader> readers(static_cast<size_t>(inputs));
  for (int64_t i = 0; i < inputs; ++i) {
    const Tensor* t = ctx.input(static_cast<size_t>(i));
    InputReader& reader = readers[static_cast<size_t>(i)];
    reader.data = t->data<float>();
    Shape padded(shape.size() - t->shape().size(), 1);
    padded.insert(padded.end(), t->shape().begin(), t->shape().end());
    if (t->numElements() == total) {
      reader.kind = InputReader::Kind::kFull;
    } else if (t->numElements() == 1) {
      reader.kind = InputReader::Kind::kScalar;
    } else {
      size_t first = 0;  // leading broadcast dims; the rest must match the output
      while (first < padded.size() && padded[first] == 1 && shape[first] != 1) ++first;
      bool suffix = true;
      for (size_t d = first; d < padded.size(); ++d) suffix = suffix && padded[d] == shape[d];
      if (suffix) {
        reader.kind = InputReader::Kind::kSuffix;
        reader.period = t->numElements();
      } else {
        reader.kind = InputReader::Kind::kStrided;
        LLMC_RETURN_IF_ERROR(broadcastStrides(ctx, "input", t->shape(), shape, &reader.strides));
      }
    }
  }
  constexpr int64_t kChunk = 256;
  // Tasks of kTaskChunks chunks, each with its own registers; small tensors run in one task.
  constexpr int64_t kTaskChunks = 32;
  // Registers: inputs, then one per instruction, then one per immediate (filled once).
  const int64_t constant_base = registers;
  float* y = out->data<float>();
  const int64_t chunks = (total + kChunk - 1) / kChunk;
  parallelFor(ctx.threadPool(), (chunks + kTaskChunks - 1) / kTaskChunks, [&](int64_t task) {
    std::vector<float> regs(static_cast<size_t>((registers + constants.size()) * kChunk));
    for (size_t j = 0; j < constants.size(); ++j)
      std::fill_n(&regs[static_cast<size_t>((constant_base + j) * kChunk)], kChunk,
                  static_cast<float>(constants[j]));
    auto reg = [&](int64_t operand) {
      const int64_t index = operand < 0 ? constant_base + (-1 - operand) : operand;
      return &regs[static_cast<size_t>(index * kChunk)];
    };
    const int64_t end = std::min(total, (task + 1) * kTaskChunks * kChunk);
    for (int64_t base = task * kTaskChunks * kChunk; base < end; base += kChunk) {
      const int64_t len = std::min(kChunk, total - base);
      for (int64_t i = 0; i < inputs; ++i) {
        const InputReader& reader = readers[static_cast<size_t>(i)];
        float* dst = reg(i);
        switch (reader.kind) {
          case InputReader::Kind::kFull:
            std::memcpy(dst, reader.data + base, static_cast<size_t>(len) * sizeof(float));
            break;
          case InputReader::Kind::kScalar: std::fill(dst, dst + len, reader.data[0]); break;
          case InputReader::Kind::kSuffix: {
            int64_t offset = base % reader.period;
            for (int64_t e = 0; e < len; ++e) {
              dst[e] = reader.data[offset];
              if (++offset == reader.period) offset = 0;
            }
            break;
          }
          case InputReader::Kind::kStrided:
            for (int64_t e = 0; e < len; ++e) {
              int64_t flat = base + e, offset = 0;
              for (size_t d = 0; d < shape.size(); ++d) {
                offset += (flat / out_strides[d]) * reader.strides[d];
                flat %= out_strides[d];
              }
              dst[e] = reader.data[offset];
            }
            break;
        }
      }
      int64_t target = inputs;
      for (size_t i = 0; i < program.size(); i += 3, ++target) {
        const int64_t opcode = program[i];
        if (opcode < 16)
          applyBinary(opcode, reg(program[i + 1]), reg(program[i + 2]), reg(target), len);
        else
          applyUnary(opcode, reg(program[i + 1]), reg(target), len);
      }
      std::memcpy(y + base, &regs[static_cast<size_t>((registers - 1) * kChunk)],
                  static_cast<size_t>(len) * sizeof(float));
    }
  });
  return okStatus();
}

// --- LlmSdpa ------------------------------------------------------------------------------

Status sdpa(KernelContext& ctx) {
  const Tensor* q = ctx.input(0);
  const Tensor* k = ctx.input(1);
  const Tensor* v = ctx.input(2);
  const Tensor* mask = ctx.input(3);
  if (!q || !k || !v) return kernelError(ctx, "LlmSdpa needs q, k and v");
  LLMC_RETURN_IF_ERROR(checkFloat32(ctx, {q, k, v, mask}));
  const bool token_major = ctx.params().getInt("num_heads", 0) > 0;
  int64_t batch = 0, heads = 0, seq = 0, head_dim = 0, kv_heads = 0, keys = 0, v_dim = 0;
  HeadLayout q_layout, k_layout, v_layout, out_layout;
  Shape out_shape;
  if (token_major) {
    heads = ctx.params().getInt("num_heads", 0);
    kv_heads = ctx.params().getInt("num_kv_heads", 0);
    head_dim = v_dim = ctx.params().getInt("head_dim", 0);
    if (q->rank() != 3 || k->rank() != 3 || v->rank() != 3 || kv_heads < 1 || head_dim < 1 ||
        heads % kv_heads != 0)
      return kernelError(ctx, "token-major q, k, v must be [batch, tokens, width], got " +
                                  shapeToString(q->shape()) + ", " + shapeToString(k->shape()) +
                                  ", " + shapeToString(v->shape()));
    batch = q->dim(0), seq = q->dim(1), keys = k->dim(1);
    LLMC_RETURN_IF_ERROR(tokenMajorLayouts(ctx, q, k, v, heads, kv_heads, head_dim, seq, keys,
                                           &q_layout, &k_layout, &v_layout));
    out_shape = {batch, seq, heads * head_dim};
    out_layout = HeadLayout::tokenMajor(seq, heads * head_dim, head_dim, 0);
  } else {
    if (q->rank() != 4 || k->rank() != 4 || v->rank() != 4)
      return kernelError(ctx, "LlmSdpa needs q, k and v of [batch, heads, tokens, head_dim]");
    batch = q->dim(0), heads = q->dim(1), seq = q->dim(2), head_dim = q->dim(3);
    kv_heads = k->dim(1), keys = k->dim(2), v_dim = v->dim(3);
    if (k->dim(0) != batch || v->dim(0) != batch || kv_heads < 1 || heads % kv_heads != 0 ||
        v->dim(1) != kv_heads || k->dim(3) != head_dim || v->dim(2) != keys)
      return kernelError(ctx, "q " + shapeToString(q->shape()) + ", k " +
                                  shapeToString(k->shape()) + " and v " +
                                  shapeToString(v->shape()) + " do not fit");
    q_layout = HeadLayout::headMajor(heads, seq, head_dim);
    k_layout = HeadLayout::headMajor(kv_heads, keys, head_dim);
    v_layout = HeadLayout::headMajor(kv_heads, keys, v_dim);
    out_layout = HeadLayout::headMajor(heads, seq, v_dim);
    out_shape = {batch, heads, seq, v_dim};
  }
  // The mask's strides over [batch, heads, tokens, keys] (0 where it broadcasts).
  std::vector<int64_t> mask_strides(4, 0);
  if (mask) {
    if (mask->rank() < 2 || mask->rank() > 4)
      return kernelError(ctx, "the mask must have rank 2 to 4, got " + shapeToString(mask->shape()));
    LLMC_RETURN_IF_ERROR(broadcastStrides(ctx, "mask", mask->shape(), {batch, heads, seq, keys}, &mask_strides));
  }
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, out_shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  const float scale = static_cast<float>(
      ctx.params().getFloat("scale", 1.0 / std::sqrt(static_cast<double>(head_dim))));
  const int64_t group = heads / kv_heads;
  // One task per (batch row, head): each query row's result is the same on any thread.
  parallelFor(ctx.threadPool(), batch * heads, [&](int64_t task) {
    const int64_t b = task / heads, h = task % heads;
    std::vector<float> scores(static_cast<size_t>(keys));
    const int64_t kvh = h / group;
    for (int64_t i = 0; i < seq; ++i) {
      const float* qi = q->data<float>() + q_layout.at(b, h, i);
      const float* bias = mask ? mask->data<float>() + b * mask_strides[0] + h * mask_strides[1] +
                                     i * mask_strides[2]
                               : nullptr;
      attendOne(
          qi, keys, head_dim, v_dim, scale,
          [&](int64_t j) { return k->data<float>() + k_layout.at(b, kvh, j); },
          [&](int64_t j) { return v->data<float>() + v_layout.at(b, kvh, j); },
          [&](int64_t j) { return bias ? bias[j * mask_strides[3]] : 0.0f; }, scores,
          out->data<float>() + out_layout.at(b, h, i));
    }
  });
  return okStatus();
}

}  // namespace

void registerFusedKernels(KernelRegistry& registry) {
  registry.add({"LlmSdpa", 3, 4, 1, 1, sdpa});
  registry.add({"LlmFusedMatMul", 2, 3, 1, 1, fusedMatMul});
  registry.add({"LlmGatedMlp", 2, 2, 1, 1, gatedMlp});
  registry.add({"LlmMoe", 5, 5, 1, 1, moe});
  registry.add({"LlmNorm", 3, 4, 1, 2, norm});
  registry.add({"LlmElementwise", 1, -1, 1, 1, elementwise});
}

}  // namespace llmc
