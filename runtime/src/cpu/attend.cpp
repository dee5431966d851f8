// The row operations of attendOne (cpu/attend.h), built for AVX2/FMA and the baseline and
// chosen by cpuIsa() once per attendOne call.
#include "cpu/attend.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/fp8.h"
#include "core/half.h"
#include "core/isa.h"
#include "cpu/kv_load_avx2.h"

namespace llmc {

const float* e4m3Values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = e4m3ToFloat(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}

namespace {

LLMC_ISA_INLINE float dotRowBody(const float* a, const float* b, int64_t n) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += a[d + l] * b[d + l];
  for (int l = 0; d < n; ++d, ++l) lanes[l] += a[d] * b[d];
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) +
         ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

LLMC_ISA_INLINE void addScaledRowBody(float* __restrict out, float p, const float* __restrict v,
                                      int64_t n) {
  for (int64_t d = 0; d < n; ++d) out[d] += p * v[d];
}

LLMC_TARGET_AVX2 float dotRowAvx2(const float* a, const float* b, int64_t n) {
  return dotRowBody(a, b, n);
}
float dotRowBaseline(const float* a, const float* b, int64_t n) { return dotRowBody(a, b, n); }
LLMC_TARGET_AVX2 void addScaledRowAvx2(float* out, float p, const float* v, int64_t n) {
  addScaledRowBody(out, p, v, n);
}
void addScaledRowBaseline(float* out, float p, const float* v, int64_t n) {
  addScaledRowBody(out, p, v, n);
}

void rowToFloatScalar(DType dtype, const void* row, float scale, int64_t dim, float* dst) {
  switch (dtype) {
    case DType::kFloat16:
      for (int64_t d = 0; d < dim; ++d) dst[d] = toFloat(static_cast<const Float16*>(row)[d]);
      break;
    case DType::kBFloat16:
      for (int64_t d = 0; d < dim; ++d) dst[d] = toFloat(static_cast<const BFloat16*>(row)[d]);
      break;
    case DType::kInt8:
      for (int64_t d = 0; d < dim; ++d)
        dst[d] = static_cast<float>(static_cast<const int8_t*>(row)[d]) * scale;
      break;
    case DType::kUInt8: {
      const float* table = e4m3Values();
      for (int64_t d = 0; d < dim; ++d) dst[d] = table[static_cast<const uint8_t*>(row)[d]] * scale;
      break;
    }
    default:
      std::memcpy(dst, row, static_cast<size_t>(dim) * sizeof(float));
  }
}

#if defined(__x86_64__)
// Eight values at a time (kvLoad8); the tail (dim % 8) through the scalar loop.
template <DType kFormat>
LLMC_ISA_INLINE LLMC_TARGET_AVX2 void rowToFloatAvx2As(const void* row, float scale, int64_t dim,
                                                       float* dst) {
  for (int64_t d = 0; d + 8 <= dim; d += 8)
    _mm256_storeu_ps(dst + d, kvLoad8<kFormat>(row, d, &scale));
}
LLMC_TARGET_AVX2 LLMC_ISA_INLINE void rowToFloatAvx2(DType dtype, const void* row, float scale,
                                                     int64_t dim, float* dst) {
  const int64_t whole = dim / 8 * 8;
  switch (dtype) {
    case DType::kFloat16: rowToFloatAvx2As<DType::kFloat16>(row, scale, whole, dst); break;
    case DType::kBFloat16: rowToFloatAvx2As<DType::kBFloat16>(row, scale, whole, dst); break;
    case DType::kInt8: rowToFloatAvx2As<DType::kInt8>(row, scale, whole, dst); break;
    case DType::kUInt8: rowToFloatAvx2As<DType::kUInt8>(row, scale, whole, dst); break;
    default: std::memcpy(dst, row, static_cast<size_t>(whole) * sizeof(float));
  }
  if (whole < dim) {
    rowToFloatScalar(dtype, static_cast<const uint8_t*>(row) + whole * dtypeSize(dtype), scale,
                     dim - whole, dst + whole);
  }
}

// `count` rows with the row conversion inlined, as rowsToFloatAvx512 (below) for the same reason.
LLMC_TARGET_AVX2 void rowsToFloatAvx2(DType dtype, const void* rows, int64_t row_stride,
                                      const float* scales, int64_t count, int64_t dim, float* dst) {
  const bool scaled = dtype == DType::kInt8 || dtype == DType::kUInt8;
  const size_t row_bytes = static_cast<size_t>(row_stride) * dtypeSize(dtype);
  for (int64_t r = 0; r < count; ++r)
    rowToFloatAvx2(dtype, static_cast<const uint8_t*>(rows) + r * row_bytes,
                   scaled ? scales[r] : 1.0f, dim, dst + r * dim);
}

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 conversions start from _mm512_undefined_*(), which -Wuninitialized reports.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// Sixteen values at a time (the 16-bit formats and int8; FP8 through the AVX2 gather), the
// tail through the scalar loop. What attendChunk converts each block of a stored cache with.
#define LLMC_ATTEND_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
LLMC_ATTEND_AVX512 LLMC_ISA_INLINE void rowToFloatAvx512(DType dtype, const void* row, float scale,
                                                         int64_t dim, float* dst) {
  const int64_t whole = dim / 16 * 16;
  const auto* h = static_cast<const uint16_t*>(row);
  switch (dtype) {
    case DType::kFloat16:
      for (int64_t d = 0; d < whole; d += 16)
        _mm512_storeu_ps(dst + d, _mm512_cvtph_ps(_mm256_loadu_si256(
                                      reinterpret_cast<const __m256i*>(h + d))));
      break;
    case DType::kBFloat16:
      for (int64_t d = 0; d < whole; d += 16)
        _mm512_storeu_ps(dst + d, _mm512_castsi512_ps(_mm512_slli_epi32(
                                      _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                          reinterpret_cast<const __m256i*>(h + d))),
                                      16)));
      break;
    case DType::kInt8: {
      const auto* c = static_cast<const int8_t*>(row);
      const __m512 scales = _mm512_set1_ps(scale);
      for (int64_t d = 0; d < whole; d += 16)
        _mm512_storeu_ps(dst + d, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + d)))),
                                                scales));
      break;
    }
    default:
      rowToFloatAvx2(dtype, row, scale, dim, dst);
      return;
  }
  if (whole < dim)
    rowToFloatScalar(dtype, static_cast<const uint8_t*>(row) + whole * dtypeSize(dtype), scale,
                     dim - whole, dst + whole);
}
// `count` rows with the row conversion inlined: a call per row was most of what an int8 cache's
// decode spent reading it (with its row scales' prefetch, docs/kv-cache.md).
LLMC_ATTEND_AVX512 void rowsToFloatAvx512(DType dtype, const void* rows, int64_t row_stride,
                                          const float* scales, int64_t count, int64_t dim,
                                          float* dst) {
  const bool scaled = dtype == DType::kInt8 || dtype == DType::kUInt8;
  const size_t row_bytes = static_cast<size_t>(row_stride) * dtypeSize(dtype);
  for (int64_t r = 0; r < count; ++r)
    rowToFloatAvx512(dtype, static_cast<const uint8_t*>(rows) + r * row_bytes,
                     scaled ? scales[r] : 1.0f, dim, dst + r * dim);
}
#undef LLMC_ATTEND_AVX512
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

template <typename Row>
void rowsToFloat(Row convert, DType dtype, const void* rows, int64_t row_stride,
                 const float* scales, int64_t count, int64_t dim, float* dst) {
  const bool scaled = dtype == DType::kInt8 || dtype == DType::kUInt8;
  const size_t row_bytes = static_cast<size_t>(row_stride) * dtypeSize(dtype);
  for (int64_t r = 0; r < count; ++r)
    convert(dtype, static_cast<const uint8_t*>(rows) + r * row_bytes, scaled ? scales[r] : 1.0f,
            dim, dst + r * dim);
}

}  // namespace

void kvRowsToFloatScalar(DType dtype, const void* rows, int64_t row_stride, const float* scales,
                         int64_t count, int64_t dim, float* dst) {
  rowsToFloat(rowToFloatScalar, dtype, rows, row_stride, scales, count, dim, dst);
}

void kvRowsToFloat(DType dtype, const void* rows, int64_t row_stride, const float* scales,
                   int64_t count, int64_t dim, float* dst) {
#if defined(__x86_64__)
  if (cpuIsa() >= CpuIsa::kAvx512) {
    rowsToFloatAvx512(dtype, rows, row_stride, scales, count, dim, dst);
    return;
  }
  if (cpuIsa() >= CpuIsa::kAvx2) {
    rowsToFloatAvx2(dtype, rows, row_stride, scales, count, dim, dst);
    return;
  }
#endif
  kvRowsToFloatScalar(dtype, rows, row_stride, scales, count, dim, dst);
}

const RowOps& rowOps() {
  static const RowOps avx2{dotRowAvx2, addScaledRowAvx2};
  static const RowOps baseline{dotRowBaseline, addScaledRowBaseline};
  return cpuIsa() >= CpuIsa::kAvx2 ? avx2 : baseline;
}

}  // namespace llmc
