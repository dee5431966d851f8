// normRow (cpu/norm_row.h) in the baseline ISA, AVX2 and AVX-512, the same operations in the same
// order at every level.
#include "cpu/norm_row.h"

#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/isa.h"

namespace llmc {

namespace {

// Every form does the same float and double operations per element in the same order, so the
// level never changes a bit; this file is compiled with -ffp-contract=off, since a fused
// multiply-add of the output's product and bias would round once where the baseline rounds
// twice (the squares are exact in double either way). Compiled for the baseline alone, the 25
// norms of the 110M Llama's 64-token prefill took 2.7% of its first token (perf, one thread).
constexpr int64_t kLanes = 8;

// One term of the two sums: s, or (s - mean)² (exact in double).
inline double rowTerm(float v, float mean, bool squares) {
  if (!squares) return double{v};
  const float d = v - mean;
  return static_cast<double>(d) * d;
}

// The partial sums' tail (elements from `i` on, into partial i % 8) and their total in order.
double finishRowSum(double* partial, const float* s, int64_t i, int64_t n, float mean,
                    bool squares) {
  for (; i < n; ++i) partial[i % kLanes] += rowTerm(s[i], mean, squares);
  double total = 0;
  for (int64_t lane = 0; lane < kLanes; ++lane) total += partial[lane];
  return total;
}

double sumScalar(const float* s, int64_t n, float mean, bool squares) {
  double partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t lane = 0; lane < kLanes; ++lane)
      partial[lane] += rowTerm(s[i + lane], mean, squares);
  return finishRowSum(partial, s, i, n, mean, squares);
}

float inverseRms(double squares, int64_t width, float epsilon) {
  return 1.0f / std::sqrt(static_cast<float>(squares / static_cast<double>(width)) + epsilon);
}

void normRowScalar(const float* x, const float* residual, float* sum, int64_t width, bool rms,
                   float epsilon, const float* gamma, const float* beta, float* y) {
  const float* s = x;
  if (residual) {
    for (int64_t i = 0; i < width; ++i) sum[i] = x[i] + residual[i];
    s = sum;
  }
  const float mean =
      rms ? 0.0f
          : static_cast<float>(sumScalar(s, width, 0.0f, false) / static_cast<double>(width));
  const float inv = inverseRms(sumScalar(s, width, mean, true), width, epsilon);
  for (int64_t i = 0; i < width; ++i)
    y[i] = (s[i] - mean) * inv * gamma[i] + (beta ? beta[i] : 0.0f);
}

#if defined(__x86_64__) && defined(__GNUC__)
LLMC_ALLOW_UNDEFINED_VECTORS

// The two sums of a row: Σ s (squares false) or Σ (s - mean)² (true), element i in lane i % 8.
LLMC_TARGET_BEGIN("avx2")
double sumAvx2(const float* s, int64_t n, float mean, bool squares) {
  __m256d low = _mm256_setzero_pd(), high = _mm256_setzero_pd();
  const __m256 m = _mm256_set1_ps(mean);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    __m256 v = _mm256_loadu_ps(s + i);
    if (squares) v = _mm256_sub_ps(v, m);
    const __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    low = _mm256_add_pd(low, squares ? _mm256_mul_pd(a, a) : a);
    high = _mm256_add_pd(high, squares ? _mm256_mul_pd(b, b) : b);
  }
  alignas(32) double partial[kLanes];
  _mm256_store_pd(partial, low);
  _mm256_store_pd(partial + 4, high);
  return finishRowSum(partial, s, i, n, mean, squares);
}

void normRowAvx2(const float* x, const float* residual, float* sum, int64_t width, bool rms,
                 float epsilon, const float* gamma, const float* beta, float* y) {
  const float* s = x;
  int64_t i = 0;
  if (residual) {
    for (; i + 8 <= width; i += 8)
      _mm256_storeu_ps(sum + i,
                       _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(residual + i)));
    for (; i < width; ++i) sum[i] = x[i] + residual[i];
    s = sum;
  }
  const float mean =
      rms ? 0.0f : static_cast<float>(sumAvx2(s, width, 0.0f, false) / static_cast<double>(width));
  const float inv = inverseRms(sumAvx2(s, width, mean, true), width, epsilon);
  const __m256 m = _mm256_set1_ps(mean), scale = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= width; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(s + i), m), scale),
                                   _mm256_loadu_ps(gamma + i));
    _mm256_storeu_ps(y + i,
                     _mm256_add_ps(v, beta ? _mm256_loadu_ps(beta + i) : _mm256_setzero_ps()));
  }
  for (; i < width; ++i) y[i] = (s[i] - mean) * inv * gamma[i] + (beta ? beta[i] : 0.0f);
}
LLMC_TARGET_END

LLMC_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2")
double sumAvx512(const float* s, int64_t n, float mean, bool squares) {
  __m512d acc = _mm512_setzero_pd();
  const __m256 m = _mm256_set1_ps(mean);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    __m256 v = _mm256_loadu_ps(s + i);
    if (squares) v = _mm256_sub_ps(v, m);
    const __m512d d = _mm512_cvtps_pd(v);
    acc = _mm512_add_pd(acc, squares ? _mm512_mul_pd(d, d) : d);
  }
  alignas(64) double partial[kLanes];
  _mm512_store_pd(partial, acc);
  return finishRowSum(partial, s, i, n, mean, squares);
}

void normRowAvx512(const float* x, const float* residual, float* sum, int64_t width, bool rms,
                   float epsilon, const float* gamma, const float* beta, float* y) {
  auto lanes = [width](int64_t i) {
    return width - i >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (width - i)) - 1);
  };
  const float* s = x;
  if (residual) {
    for (int64_t i = 0; i < width; i += 16) {
      const __mmask16 k = lanes(i);
      _mm512_mask_storeu_ps(
          sum + i, k,
          _mm512_add_ps(_mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, residual + i)));
    }
    s = sum;
  }
  const float mean =
      rms ? 0.0f
          : static_cast<float>(sumAvx512(s, width, 0.0f, false) / static_cast<double>(width));
  const float inv = inverseRms(sumAvx512(s, width, mean, true), width, epsilon);
  const __m512 m = _mm512_set1_ps(mean), scale = _mm512_set1_ps(inv);
  for (int64_t i = 0; i < width; i += 16) {
    const __mmask16 k = lanes(i);
    const __m512 v =
        _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), m), scale),
                      _mm512_maskz_loadu_ps(k, gamma + i));
    _mm512_mask_storeu_ps(
        y + i, k,
        _mm512_add_ps(v, beta ? _mm512_maskz_loadu_ps(k, beta + i) : _mm512_setzero_ps()));
  }
}
LLMC_TARGET_END
#endif

}  // namespace

void normRow(const float* x, const float* residual, float* sum, int64_t width, bool rms,
             float epsilon, const float* gamma, const float* beta, float* y) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpuIsa() >= CpuIsa::kAvx512)
    return normRowAvx512(x, residual, sum, width, rms, epsilon, gamma, beta, y);
  if (cpuIsa() >= CpuIsa::kAvx2)
    return normRowAvx2(x, residual, sum, width, rms, epsilon, gamma, beta, y);
#endif
  normRowScalar(x, residual, sum, width, rms, epsilon, gamma, beta, y);
}

}  // namespace llmc
