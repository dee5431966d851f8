// Eight values of a stored KV-cache row as float, on AVX2/F16C: the one conversion step that
// kvRowsToFloat's AVX2 loop (cpu/attend.cpp) and attendChunk's lone-query walk (which converts
// in registers as it reads, cpu/attend_chunk.cpp) share, so that both give the same floats.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

#include "core/isa.h"
#include "llmc/tensor.h"

namespace llmc {

// The float value of each FP8 E4M3 code (256 entries; cpu/attend.cpp).
const float* e4m3Values();

// Values [d, d + 8) of `row` (kFormat: float16, bfloat16, int8 codes times *scale, or FP8 E4M3
// codes in uint8 times *scale; scale is not read for the 16-bit formats). Exact as kvRowsToFloat
// is: the 16-bit formats widen, the 8-bit ones take one rounded product.
template <DType kFormat>
LLMC_ISA_INLINE LLMC_TARGET_AVX2 __m256 kvLoad8(const void* row, int64_t d, const float* scale) {
  if constexpr (kFormat == DType::kFloat16) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + d)));
  } else if constexpr (kFormat == DType::kBFloat16) {
    const __m256i wide = _mm256_cvtepu16_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + d)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  } else if constexpr (kFormat == DType::kInt8) {
    const __m256i wide = _mm256_cvtepi8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(row) + d)));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(wide), _mm256_broadcast_ss(scale));
  } else {
    static_assert(kFormat == DType::kUInt8, "kvLoad8: a stored KV format");
    const __m256i codes = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(row) + d)));
    return _mm256_mul_ps(_mm256_i32gather_ps(e4m3Values(), codes, 4), _mm256_broadcast_ss(scale));
  }
}

}  // namespace llmc
#endif
