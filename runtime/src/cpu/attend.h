// One query row of attention, shared by LlmAttention (over the KV cache) and LlmSdpa:
// softmax(cap(scale * q·k_j) + bias(j)) over j < count, then the weighted sum of value(j) into out
// (v_dim floats). A row whose every key is masked (-inf) gives zeros, not NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "llmc/tensor.h"

namespace llmc {

// The row operations of attention for the CPU's ISA level (cpu/attend.cpp): dot(a, b, n) = Σ
// a[d] * b[d] over d < n in eight interleaved partial sums (d mod 8) added pairwise at the end,
// the order vector units take; add_scaled(out, p, v, n): out[d] += p * v[d].
struct RowOps {
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*add_scaled)(float* out, float p, const float* v, int64_t n);
};
const RowOps& rowOps();

// With `softcap` > 0 each scaled score s becomes softcap * tanh(s / softcap) before the bias is
// added (Gemma-2's soft-capping).
template <typename KeyFn, typename ValueFn, typename BiasFn>
void attendOne(const float* q, int64_t count, int64_t qk_dim, int64_t v_dim, float scale, KeyFn key,
               ValueFn value, BiasFn bias, std::vector<float>& scores, float* out,
               float softcap = 0) {
  const RowOps& ops = rowOps();
  scores.resize(static_cast<size_t>(count));
  float max_score = -INFINITY;
  for (int64_t j = 0; j < count; ++j) {
    float s = ops.dot(q, key(j), qk_dim) * scale;
    if (softcap > 0) s = softcap * std::tanh(s / softcap);
    scores[j] = s + bias(j);
    max_score = std::max(max_score, scores[j]);
  }
  std::fill(out, out + v_dim, 0.0f);
  if (max_score == -INFINITY) return;
  float sum = 0;
  for (int64_t j = 0; j < count; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    sum += scores[j];
  }
  for (int64_t j = 0; j < count; ++j) {
    ops.add_scaled(out, scores[j] / sum, value(j), v_dim);
  }
}

// attendOne without a bias.
inline float noBias(int64_t) { return 0.0f; }

// The keys and values one KV head's queries see, in blocks of `block_rows` rows (a paged cache's
// blocks, or one block holding a whole sequence): row j is row j % block_rows of block
// j / block_rows, and rows inside a block are `row_stride` elements apart. Float32 rows are read
// in place; the other storage dtypes of the KV cache (float16, bfloat16, int8, FP8 E4M3 codes in
// uint8) are converted to float a block at a time as they are read (kvRowsToFloat: exact, so the
// result is the one over the same values stored as float32), with row_stride = head_dim and the
// 8-bit formats' float32 row scales `scale_offset` bytes after each block's first row.
struct KvRows {
  const void* const* key_blocks = nullptr;
  const void* const* value_blocks = nullptr;
  int64_t block_rows = 0, row_stride = 0;
  DType dtype = DType::kFloat32;
  int64_t scale_offset = 0;
};

// dst[r * dim + d] = row r (r < count, rows `row_stride` elements apart) of `rows` as float:
// float16 and bfloat16 widened, int8 codes times scales[r], uint8 as FP8 E4M3 codes times
// scales[r] (scales is unused for the others), float32 copied. Every value is the one the scalar
// conversions of core/half.h and core/fp8.h give (a NaN may come back quiet); vectorized for
// AVX2/F16C and AVX-512 by cpuIsa().
void kvRowsToFloat(DType dtype, const void* rows, int64_t row_stride, const float* scales,
                   int64_t count, int64_t dim, float* dst);
// The same through the scalar conversions, whatever the CPU (the tests' reference).
void kvRowsToFloatScalar(DType dtype, const void* rows, int64_t row_stride, const float* scales,
                         int64_t count, int64_t dim, float* dst);

// Several query rows of one head at once (a chunk of a prompt): query i attends to rows
// [0, counts[i]) of `kv` and writes head_dim floats to out[i]. The same softmax as attendOne, with
// the work blocked so that each key and value row is loaded once for several queries:
// scores are dot products of 8 interleaved partial sums added pairwise (as attendOne's), times
// `scale`; the exponentials come from a polynomial (within 2 ulp of exp over the softmax's range,
// x <= 0) instead of libm's, and their sum runs in 16 interleaved partial sums; each output is
// Σ_j p_j v_j accumulated in j order with fused multiply-adds. So a query's result does not
// depend on which rows share its chunk; it can differ from attendOne's in the last bits.
// Only where attendChunkSupported(head_dim) (AVX2/FMA or AVX-512, head_dim a multiple of 8 up
// to kChunkMaxHeadDim); the caller runs attendOne elsewhere. Both levels give the same bits.
inline constexpr int64_t kChunkMaxHeadDim = 256;
bool attendChunkSupported(int64_t head_dim);
void attendChunk(const float* const* queries, const int64_t* counts, int64_t rows, int64_t head_dim,
                 float scale, const KvRows& kv, float* const* out, std::vector<float>& scratch);
// A decode step's attention over several KV heads of one sequence, one query per head: query h
// attends to rows [0, count) of kv[h] and writes head_dim floats to out[h]. The blocks in the
// outer loop and the heads in the inner one, so that one block's rows of all the heads, which lie
// together in the cache, are read in one sweep rather than as a 4 KiB run per head and block.
// Each head's result is attendChunk's for its query alone (the same calls per block, in the same
// order), so the same bits. Only where attendHeadsSupported(head_dim, dtype): attendChunk's
// levels, and for float32 rows AVX2 alone (AVX-512 has its own float32 tiles).
bool attendHeadsSupported(int64_t head_dim, DType dtype);
void attendHeads(const float* const* queries, int64_t count, int64_t heads, int64_t head_dim,
                 float scale, const KvRows* kv, float* const* out, std::vector<float>& scratch);
// attendChunk's exponential of one value (x <= 0), for the test that bounds it over its range;
// only where attendChunkSupported.
float attendExpForTesting(float x);

}  // namespace llmc
