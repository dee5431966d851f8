// exp(x) for x <= 0 as a polynomial, in the same operations at every width: 16 lanes (AVX-512),
// 8 lanes (AVX2/FMA) and one (any CPU), which give the same bits. attendChunk's softmax and the
// sigmoid-based activations (cpu/activation_rows.cpp) use it instead of libm's expf.
//
// 2^n * p(r) with n = round(x / ln 2), r = x - n ln 2 in two steps (Cody and Waite),
// |r| <= ln 2 / 2, and p the degree-7 Taylor polynomial (truncation below 6e-9 relative there):
// within 2 ulp of exp over x <= 0 (test/unit/cpu/isa_test.cpp). x below -104 gives 0, as exp
// does in float32; NaN stays NaN.
#pragma once

#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/isa.h"

namespace llmc {

// One value, the same operations in the same order: std::fma rounds once as the vector fused
// multiply-adds do, nearbyint rounds half to even as the vectors' rounding does, and ldexp
// rounds p * 2^n once as scalef does.
inline float expNonPositiveScalar(float x) {
  if (x < -104.0f) x = -104.0f;  // NaN stays NaN
  const float n = std::nearbyint(x * 1.44269504088896341f);
  float r = std::fma(-n, 0.693359375f, x);
  r = std::fma(-n, -2.12194440e-4f, r);
  float p = 1.0f / 5040;
  p = std::fma(p, r, 1.0f / 720);
  p = std::fma(p, r, 1.0f / 120);
  p = std::fma(p, r, 1.0f / 24);
  p = std::fma(p, r, 1.0f / 6);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  return std::isnan(n) ? n : std::ldexp(p, static_cast<int>(n));
}

#if defined(__x86_64__) && defined(__GNUC__)
LLMC_TARGET_BEGIN("avx2,fma")
// 2^e for integer e in [-126, 127], lane by lane.
inline __m256 powerOfTwo8(__m256i e) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

// p * 2^n takes two exact steps where AVX-512 has scalef: p (in [0.7, 1.42]) times 2^(n >> 1)
// stays normal for n >= -150, so only the second product rounds, once, as scalef does (into the
// subnormals below 2^-126).
inline __m256 expNonPositive8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);  // NaN stays NaN (max returns its second operand)
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // n in [-150, 0] (a NaN x gives a NaN p, whatever these two factors are).
  const __m256i whole = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(whole, 1), rest = _mm256_sub_epi32(whole, half);
  return _mm256_mul_ps(_mm256_mul_ps(p, powerOfTwo8(half)), powerOfTwo8(rest));
}
LLMC_TARGET_END

LLMC_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
inline __m512 expNonPositive16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);  // NaN stays NaN (max returns its second operand)
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}
LLMC_TARGET_END
#endif

}  // namespace llmc
