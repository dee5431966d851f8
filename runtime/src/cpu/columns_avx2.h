// Loads and stores of the first columns of 8 lanes (float or int32) of an AVX2 register tile's
// row. AMD's Zen cores run vmaskmovps as a store in microcode, tens of micro-ops (Zen 3: the int8
// panels at 25 G multiply-adds/s with a masked store per row and block, docs/cpu.md), so 8 full
// lanes are read and written plainly and only a partial 8 through the mask.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

namespace llmc {

__attribute__((target("avx2"))) inline __m256 loadColumns(const float* p, __m256i mask, bool full) {
  return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask);
}

__attribute__((target("avx2"))) inline void storeColumns(float* p, __m256i mask, bool full,
                                                         __m256 v) {
  if (full)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, mask, v);
}

__attribute__((target("avx2"))) inline void storeColumns(int32_t* p, __m256i mask, bool full,
                                                         __m256i v) {
  if (full)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  else
    _mm256_maskstore_epi32(reinterpret_cast<int*>(p), mask, v);
}

}  // namespace llmc

#endif
