// activateRow and gatedRow (cpu/epilogue.h): silu, sigmoid and gelu_tanh in 16 lanes (AVX-512)
// or 8 (AVX2/FMA), the operations of activate() in its order lane by lane, so every level gives
// its bits; the row's tail runs masked rather than through the scalar loop, so an element's
// result does not depend on where a task's columns start. The gated MLP's act(gate) * up was a
// libm expf per element: 5% of a float32 prefill of the 110M Llama and 12% of a w8a8 one.
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/isa.h"
#include "cpu/epilogue.h"
#include "cpu/exp_poly.h"

namespace llmc {

namespace {

// The scalar loops (CPUs without AVX2, and activations without a vector form).
void activateScalar(Activation activation, float* row, int64_t n) {
  for (int64_t i = 0; i < n; ++i) row[i] = activate(activation, row[i]);
}
void gatedScalar(Activation activation, const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = activate(activation, gate[i]) * up[i];
}

#if defined(__x86_64__) && defined(__GNUC__)
LLMC_ALLOW_UNDEFINED_VECTORS
LLMC_TARGET_BEGIN("avx2,fma")
inline __m256 sigmoid8(__m256 z) {
  const __m256 e = expNonPositive8(_mm256_or_ps(z, _mm256_set1_ps(-0.0f)));  // of -|z|
  // z >= 0 (ordered: a NaN z takes e, NaN).
  const __m256 top =
      _mm256_blendv_ps(e, _mm256_set1_ps(1.0f), _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_GE_OQ));
  return _mm256_div_ps(top, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

template <Activation kAct>
inline __m256 activate8(__m256 v) {
  if constexpr (kAct == Activation::kSigmoid) return sigmoid8(v);
  if constexpr (kAct == Activation::kSilu) return _mm256_mul_ps(v, sigmoid8(v));
  // geluTanhArgument's operations.
  const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
  const __m256 z = _mm256_mul_ps(_mm256_fmadd_ps(_mm256_set1_ps(0.044715f), cube, v),
                                 _mm256_set1_ps(1.5957691216057308f));
  return _mm256_mul_ps(v, sigmoid8(z));
}

inline __m256i firstLanes8(int64_t left) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// y = act(x) (* up, when gated), 8 at a time, the tail masked.
template <Activation kAct, bool kGated>
void rowAvx2(const float* x, const float* up, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 a = activate8<kAct>(_mm256_loadu_ps(x + i));
    if constexpr (kGated) a = _mm256_mul_ps(a, _mm256_loadu_ps(up + i));
    _mm256_storeu_ps(y + i, a);
  }
  if (i == n) return;
  const __m256i m = firstLanes8(n - i);
  __m256 a = activate8<kAct>(_mm256_maskload_ps(x + i, m));
  if constexpr (kGated) a = _mm256_mul_ps(a, _mm256_maskload_ps(up + i, m));
  _mm256_maskstore_ps(y + i, m, a);
}
LLMC_TARGET_END

LLMC_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
inline __m512 sigmoid16(__m512 z) {
  const __m512 e = expNonPositive16(_mm512_or_ps(z, _mm512_set1_ps(-0.0f)));  // of -|z|
  const __mmask16 non_negative = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GE_OQ);
  const __m512 top = _mm512_mask_blend_ps(non_negative, e, _mm512_set1_ps(1.0f));
  return _mm512_div_ps(top, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

template <Activation kAct>
inline __m512 activate16(__m512 v) {
  if constexpr (kAct == Activation::kSigmoid) return sigmoid16(v);
  if constexpr (kAct == Activation::kSilu) return _mm512_mul_ps(v, sigmoid16(v));
  const __m512 cube = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
  const __m512 z = _mm512_mul_ps(_mm512_fmadd_ps(_mm512_set1_ps(0.044715f), cube, v),
                                 _mm512_set1_ps(1.5957691216057308f));
  return _mm512_mul_ps(v, sigmoid16(z));
}

template <Activation kAct, bool kGated>
void rowAvx512(const float* x, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 a = activate16<kAct>(_mm512_maskz_loadu_ps(m, x + i));
    if constexpr (kGated) a = _mm512_mul_ps(a, _mm512_maskz_loadu_ps(m, up + i));
    _mm512_mask_storeu_ps(y + i, m, a);
  }
}
LLMC_TARGET_END

template <bool kGated>
bool rowVector(Activation activation, const float* x, const float* up, float* y, int64_t n) {
  using Fn = void (*)(const float*, const float*, float*, int64_t);
  const bool wide = cpuIsa() >= CpuIsa::kAvx512;
  if (!wide && cpuIsa() < CpuIsa::kAvx2) return false;
  Fn fn = nullptr;
  switch (activation) {
    case Activation::kSilu:
      fn = wide ? rowAvx512<Activation::kSilu, kGated> : rowAvx2<Activation::kSilu, kGated>;
      break;
    case Activation::kSigmoid:
      fn = wide ? rowAvx512<Activation::kSigmoid, kGated> : rowAvx2<Activation::kSigmoid, kGated>;
      break;
    case Activation::kGeluTanh:
      fn = wide ? rowAvx512<Activation::kGeluTanh, kGated> : rowAvx2<Activation::kGeluTanh, kGated>;
      break;
    default: return false;
  }
  fn(x, up, y, n);
  return true;
}
#else
template <bool kGated>
bool rowVector(Activation, const float*, const float*, float*, int64_t) {
  return false;
}
#endif

}  // namespace

bool vectorActivation(Activation activation) {
  return activation == Activation::kSilu || activation == Activation::kSigmoid ||
         activation == Activation::kGeluTanh;
}

void activateRow(Activation activation, float* row, int64_t n) {
  if (!rowVector<false>(activation, row, nullptr, row, n)) activateScalar(activation, row, n);
}

void gatedRow(Activation activation, const float* gate, const float* up, float* y, int64_t n) {
  if (!rowVector<true>(activation, gate, up, y, n)) gatedScalar(activation, gate, up, y, n);
}

}  // namespace llmc
