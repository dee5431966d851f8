// The dot products behind LlmQuantMatMul (cpu/quant_matmul.cpp): activations quantized on the
// fly, the scalar reference dot products and their AVX2/FMA forms (chosen at run time), and the
// 4-bit kernel that runs four output channels per pass. Declared in cpu/quant_dot.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/isa.h"
#include "core/quant.h"
#include "core/scale.h"
#include "cpu/quant_dot.h"

namespace llmc {

namespace {

// std::lround(v) clamped to +-levels (ties away from zero; NaN gives -levels, where lround's
// out-of-range result used to be clamped), without a libm call per element.
inline int32_t roundClamped(float v, float levels) {
  if (!(v >= -levels)) return -static_cast<int32_t>(levels);
  if (v > levels) return static_cast<int32_t>(levels);
  const int32_t truncated = static_cast<int32_t>(v);
  const float fraction = v - static_cast<float>(truncated);  // exact for |v| < 2^23
  return truncated + (fraction >= 0.5f ? 1 : 0) - (fraction <= -0.5f ? 1 : 0);
}

#if defined(__x86_64__) && defined(__GNUC__)
// The largest |x[i]| of 8 * n floats in 8 lanes, NaN dropped as std::max(amax, |x|) drops it
// (maxps returns its second operand where either is NaN).
__attribute__((target("avx2"))) inline __m256 absmaxLanes(const float* x, int64_t n, __m256 amax) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t i = 0; i < n; i += 8)
    amax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), magnitude), amax);
  return amax;
}

__attribute__((target("avx2"))) inline float maxOfLanes(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// roundClamped in 8 lanes: truncated, plus or minus one where the fraction reaches a half (exact:
// |v| < 2^23 wherever the clamp does not decide), then clamped, NaN to -levels (maxps gives its
// second operand for a NaN first), and converted exactly.
__attribute__((target("avx2"))) inline __m256i roundClampedLanes(__m256 v, float levels) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 truncated = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 fraction = _mm256_sub_ps(v, truncated);
  __m256 r = _mm256_add_ps(
      truncated, _mm256_and_ps(_mm256_cmp_ps(fraction, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one));
  r = _mm256_sub_ps(r,
                    _mm256_and_ps(_mm256_cmp_ps(fraction, _mm256_set1_ps(-0.5f), _CMP_LE_OQ), one));
  r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-levels)), _mm256_set1_ps(levels));
  return _mm256_cvtps_epi32(r);
}

// quantizeBlocks' codes, scales and sums on AVX2, bit for bit: the absolute maxima and codes in 8
// lanes, each block's scale by the same scalar functions. Was scalar code: 8% of an 8-bit
// engine's 64-token first token on an AVX2-only EPYC (perf).
__attribute__((target("avx2"))) void quantizeBlocksAvx2(const float* x, int64_t k, int bits,
                                                        int16_t* q16, int8_t* q8, float* scales,
                                                        int32_t* sums) {
  const float levels = bits == 16 ? 32767.0f : 127.0f;
  float row_amax = 0;
  if (bits == 16) {
    row_amax = maxOfLanes(absmaxLanes(x, k / 8 * 8, _mm256_setzero_ps()));
    for (int64_t i = k / 8 * 8; i < k; ++i) row_amax = std::max(row_amax, std::fabs(x[i]));
  }
  for (int64_t b = 0; b < k / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    const float amax = maxOfLanes(absmaxLanes(xb, kQuantBlock, _mm256_setzero_ps()));
    const float scale =
        bits == 16 ? int16BlockScale(row_amax, int16BlockHalvings(amax, row_amax)) : amax / levels;
    const __m256 inverse = _mm256_set1_ps(inverseScale(scale));
    __m256i codes[4], sum = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      codes[j] = roundClampedLanes(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * j), inverse), levels);
      sum = _mm256_add_epi32(sum, codes[j]);
    }
    // packs interleaves its operands' 128-bit halves; the permutes put K's order back.
    const __m256i low = _mm256_permute4x64_epi64(_mm256_packs_epi32(codes[0], codes[1]), 0xd8);
    const __m256i high = _mm256_permute4x64_epi64(_mm256_packs_epi32(codes[2], codes[3]), 0xd8);
    if (bits == 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q16 + b * kQuantBlock), low);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q16 + b * kQuantBlock + 16), high);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q8 + b * kQuantBlock),
                          _mm256_permute4x64_epi64(_mm256_packs_epi16(low, high), 0xd8));
    }
    __m128i total = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    total = _mm_add_epi32(total, _mm_shuffle_epi32(total, 0x4e));
    total = _mm_add_epi32(total, _mm_shuffle_epi32(total, 0xb1));
    scales[b] = scale;
    sums[b] = _mm_cvtsi128_si32(total);
  }
}
#endif

// Each block's codes (int16 into q16 for bits 16, else int8 into q8), scale and integer sum:
// in 16 lanes where the CPU has AVX-512, in 8 on AVX2 (the same bits), else here.
void quantizeBlocks(const float* x, int64_t k, int bits, int16_t* q16, int8_t* q8, float* scales,
                    int32_t* sums) {
  if (quantDotHasAvx512()) {
    quantizeBlocksAvx512(x, k, bits, q16, q8, scales, sums);
    return;
  }
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpuIsa() >= CpuIsa::kAvx2) {
    quantizeBlocksAvx2(x, k, bits, q16, q8, scales, sums);
    return;
  }
#endif
  const float levels = bits == 16 ? 32767.0f : 127.0f;
  float row_amax = 0;
  if (bits == 16)
    for (int64_t i = 0; i < k; ++i) row_amax = std::max(row_amax, std::fabs(x[i]));
  for (int64_t b = 0; b < k / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0;
    for (int64_t i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float scale =
        bits == 16 ? int16BlockScale(row_amax, int16BlockHalvings(amax, row_amax)) : amax / levels;
    const float inverse = inverseScale(scale);
    int32_t sum = 0;
    for (int64_t i = 0; i < kQuantBlock; ++i) {
      const int32_t q = roundClamped(xb[i] * inverse, levels);
      if (bits == 16)
        q16[b * kQuantBlock + i] = static_cast<int16_t>(q);
      else
        q8[b * kQuantBlock + i] = static_cast<int8_t>(q);
      sum += q;
    }
    scales[b] = scale;
    sums[b] = sum;
  }
}

}  // namespace

void quantizeInt16Row(const float* x, int64_t k, int16_t* codes, float* scales) {
  thread_local std::vector<int32_t> sums;
  sums.resize(static_cast<size_t>(k / kQuantBlock));
  quantizeBlocks(x, k, 16, codes, nullptr, scales, sums.data());
}

void quantizeActivations(const float* x, int64_t k, int64_t group, int bits,
                         QuantizedActivations* out) {
  const int64_t blocks = k / kQuantBlock;
  if (bits == 16)
    out->q16.resize(static_cast<size_t>(k));
  else
    out->q.resize(static_cast<size_t>(k));
  out->scales.resize(static_cast<size_t>(blocks));
  out->group_sums.assign(static_cast<size_t>((k + group - 1) / group), 0.0f);
  // The 4-bit kernel's order (quantDotRows) besides: per pair of blocks, the first halves of
  // both, then the second halves, as the packed weight bytes hold them; each block's scale and
  // a quarter of its sum four times (four lanes per block).
  const bool paired = bits != 16 && k % (2 * kQuantBlock) == 0;
  out->q_pairs.resize(paired ? static_cast<size_t>(k) : 0);
  out->pair_scales.resize(paired ? static_cast<size_t>(blocks * 4) : 0);
  out->pair_block_sums.resize(paired ? static_cast<size_t>(blocks * 4) : 0);
  constexpr int64_t kHalf = kQuantBlock / 2;
  thread_local std::vector<int32_t> sums;
  sums.resize(static_cast<size_t>(blocks));
  quantizeBlocks(x, k, bits, out->q16.data(), out->q.data(), out->scales.data(), sums.data());
  for (int64_t b = 0; b < blocks; ++b) {
    const float scale = out->scales[static_cast<size_t>(b)];
    const float block_sum = scale * static_cast<float>(sums[static_cast<size_t>(b)]);
    out->group_sums[static_cast<size_t>(b * kQuantBlock / group)] += block_sum;
    if (!paired) continue;
    // Block b is the first (b even) or second of pair b / 2.
    const int8_t* from = out->q.data() + b * kQuantBlock;
    int8_t* to = out->q_pairs.data() + (b / 2) * 2 * kQuantBlock + (b % 2) * kHalf;
    std::memcpy(to, from, kHalf);
    std::memcpy(to + kQuantBlock, from + kHalf, kHalf);
    for (int64_t lane = 0; lane < 4; ++lane) {
      out->pair_scales[static_cast<size_t>(b * 4 + lane)] = scale;
      out->pair_block_sums[static_cast<size_t>(b * 4 + lane)] = block_sum / 4;
    }
  }
}

int activationBits(const QuantTraits& traits) { return traits.bits == 8 ? 16 : 8; }

namespace {

// Block i's 32 weights of `row` as int8 (zero point subtracted for 4-bit formats).
inline void weightBlock(const QuantWeight& w, int64_t row, int64_t block, int8_t* out) {
  if (w.traits->bits == 8) {
    std::memcpy(out, static_cast<const int8_t*>(w.data) + row * w.k + block * kQuantBlock,
                kQuantBlock);
    return;
  }
  const uint8_t* packed =
      static_cast<const uint8_t*>(w.data) + row * (w.k / 2) + block * (kQuantBlock / 2);
  const int zero = w.zeros ? w.zeros[row * w.groupsPerRow() + block * kQuantBlock / w.group] : 8;
  for (int64_t j = 0; j < kQuantBlock / 2; ++j) {
    out[j] = static_cast<int8_t>((packed[j] & 0x0f) - zero);
    out[j + kQuantBlock / 2] = static_cast<int8_t>((packed[j] >> 4) - zero);
  }
}

}  // namespace

float quantDotScalar(const QuantWeight& w, int64_t row, const QuantizedActivations& a) {
  float sum = 0;
  int8_t wq[kQuantBlock];
  for (int64_t b = 0; b < w.k / kQuantBlock; ++b) {
    weightBlock(w, row, b, wq);
    int32_t dot = 0;
    for (int64_t i = 0; i < kQuantBlock; ++i) {
      const size_t at = static_cast<size_t>(b * kQuantBlock + i);
      dot +=
          (a.q16.empty() ? static_cast<int32_t>(a.q[at]) : static_cast<int32_t>(a.q16[at])) * wq[i];
    }
    sum += static_cast<float>(dot) * a.scales[static_cast<size_t>(b)] *
           w.scale(row, b * kQuantBlock / w.group);
  }
  return sum;
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {

// How far ahead of the packed rows being read the kernels below ask for cache lines. Decode
// streams every weight once; without the hint the 110M model's int4 decode ran about 20% slower
// (measured at 1.5, 3, 6, 12 and 24 KiB ahead: all alike, none at 0).
constexpr int64_t kPrefetchBytes = 4096;

__attribute__((target("avx2,fma,f16c"), always_inline)) inline float horizontalSum(__m256 v) {
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
  sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
  return _mm_cvtss_f32(sum);
}

__attribute__((target("avx2,fma,f16c"), always_inline)) inline float weightScale(
    const QuantWeight& w, int64_t row, int64_t g) {
  const int64_t at = row * w.groupsPerRow() + g;
  return w.traits->scale_dtype == DType::kFloat16
             ? _cvtsh_ss(static_cast<const uint16_t*>(w.scales)[at])
             : static_cast<const float*>(w.scales)[at];
}

LLMC_TARGET_BEGIN("avx2,fma,f16c")
namespace plain {
#define LLMC_QUANT_AVX_VNNI 0
#include "cpu/quant_dot_avx2.inc"
#undef LLMC_QUANT_AVX_VNNI
}  // namespace plain
LLMC_TARGET_END
LLMC_TARGET_BEGIN("avx2,fma,f16c,avxvnni")
namespace vnni {
#define LLMC_QUANT_AVX_VNNI 1
#include "cpu/quant_dot_avx2.inc"
#undef LLMC_QUANT_AVX_VNNI
}  // namespace vnni
LLMC_TARGET_END

// Output channels n..n+kRows-1 of an int8 weight (one scale per channel) with 16-bit
// activations, each block's activations loaded once for all the channels: vpmovsxbw widens 16
// weights, vpmaddwd multiplies and adds pairs into int32 (at most 32 * 32767 * 127 per block).
template <int kRows>
__attribute__((target("avx2,fma,f16c"))) void int8Tile(const QuantWeight& w, int64_t n,
                                                       const QuantizedActivations& a, float* out) {
  const int8_t* rows = static_cast<const int8_t*>(w.data) + n * w.k;
  __m256 acc[kRows];
  for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < w.k / kQuantBlock; ++b) {
    const int16_t* ab = a.q16.data() + b * kQuantBlock;
    const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab));
    const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab + 16));
    const __m256 scale = _mm256_set1_ps(a.scales[static_cast<size_t>(b)]);
    for (int r = 0; r < kRows; ++r) {
      const int8_t* wb = rows + r * w.k + b * kQuantBlock;
      _mm_prefetch(reinterpret_cast<const char*>(wb + kPrefetchBytes), _MM_HINT_T0);
      const __m256i w0 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb)));
      const __m256i w1 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 16)));
      const __m256i sums = _mm256_add_epi32(_mm256_madd_epi16(w0, a0), _mm256_madd_epi16(w1, a1));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) out[r] = horizontalSum(acc[r]) * weightScale(w, n + r, 0);
}

// One output channel of a 4-bit weight, one block per step: the kernel for shapes the pair
// kernel does not take (K not a multiple of 64, groups of 96, ...). Per group g:
// scale_g * (sum over its blocks of ad_b * dot_b), with dot_b an int8 dot product. 4-bit weights
// stay unsigned (0..15), so vpmaddubsw takes them as they are and the zero point comes off once
// per group: sum_b ad_b * sum_i a_i (w_i - z) = sum_b ad_b dot_b - z * group_sum.
__attribute__((target("avx2,fma,f16c"))) float int4BlockDot(const QuantWeight& w, int64_t row,
                                                            const QuantizedActivations& a) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  const int64_t blocks = w.k / kQuantBlock;
  const int64_t blocks_per_group = w.group / kQuantBlock;
  const int64_t groups = w.groupsPerRow();
  const uint8_t* packed_row = static_cast<const uint8_t*>(w.data) + row * (w.k / 2);
  __m256 total = _mm256_setzero_ps();
  float correction = 0;
  for (int64_t g = 0; g < groups; ++g) {
    __m256 acc = _mm256_setzero_ps();
    const int64_t end = std::min(blocks, (g + 1) * blocks_per_group);
    for (int64_t b = g * blocks_per_group; b < end; ++b) {
      const __m256i av =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + b * kQuantBlock));
      const __m128i packed =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed_row + b * (kQuantBlock / 2)));
      // Low nibbles are elements 0..15, high nibbles 16..31.
      const __m256i wv =
          _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), low_nibbles);
      const __m256 dot =
          _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(wv, av), ones));
      acc = _mm256_fmadd_ps(dot, _mm256_set1_ps(a.scales[static_cast<size_t>(b)]), acc);
    }
    const float scale = weightScale(w, row, g);
    total = _mm256_fmadd_ps(acc, _mm256_set1_ps(scale), total);
    const int zero = w.zeros ? w.zeros[row * groups + g] : 8;
    correction += scale * static_cast<float>(zero) * a.group_sums[static_cast<size_t>(g)];
  }
  return horizontalSum(total) - correction;
}

}  // namespace

float quantDotAvx2(const QuantWeight& w, int64_t row, const QuantizedActivations& a) {
  float out;
  if (w.traits->bits == 8) int8Tile<1>(w, row, a, &out);
  else out = int4BlockDot(w, row, a);
  return out;
}

bool quantDotHasAvx2() { return cpuIsa() >= CpuIsa::kAvx2; }

bool quantDotRowsTiled(const QuantWeight& w, const QuantizedActivations& a) {
  if (!quantDotHasAvx2()) return false;
  if (w.traits->bits == 8) return !a.q16.empty();
  return !a.q_pairs.empty() && (w.group == kQuantBlock || w.group % (2 * kQuantBlock) == 0);
}

void quantDotRows(const QuantWeight& w, int64_t n0, int64_t n1, const QuantizedActivations& a,
                  float* out, int channels_per_pass) {
  int64_t n = n0;
  if (quantDotRowsTiled(w, a)) {
    const bool int8 = w.traits->bits == 8;
    // 4-bit pairs with AVX-VNNI where the CPU has it (the same sums, so the same bits).
    const bool avx_vnni = cpuAvxVnni();
    const auto pairs4 = avx_vnni ? vnni::int4PairTile<4> : plain::int4PairTile<4>;
    const auto pairs1 = avx_vnni ? vnni::int4PairTile<1> : plain::int4PairTile<1>;
    if (channels_per_pass == 4)
      for (; n + 4 <= n1; n += 4) (int8 ? int8Tile<4> : pairs4)(w, n, a, out + (n - n0));
    for (; n < n1; ++n) (int8 ? int8Tile<1> : pairs1)(w, n, a, out + (n - n0));
    return;
  }
  const auto dot = quantDotHasAvx2() ? quantDotAvx2 : quantDotScalar;
  for (; n < n1; ++n) out[n - n0] = dot(w, n, a);
}
#else
float quantDotAvx2(const QuantWeight& w, int64_t row, const QuantizedActivations& a) {
  return quantDotScalar(w, row, a);
}
bool quantDotHasAvx2() { return false; }
bool quantDotRowsTiled(const QuantWeight&, const QuantizedActivations&) { return false; }
void quantDotRows(const QuantWeight& w, int64_t n0, int64_t n1, const QuantizedActivations& a,
                  float* out, int) {
  for (int64_t n = n0; n < n1; ++n) out[n - n0] = quantDotScalar(w, n, a);
}
#endif

void quantDotRowBlock(const QuantWeight& w, int64_t n0, int64_t n1, const QuantizedActivations* rows,
                      int64_t row_count, float* out, int64_t out_stride, int channels_per_pass) {
  // One row of 4-bit weights (decode) streams the weight once, in its own layout (the AVX-512
  // tiles unpack each channel ahead of its rows, which pays only when several rows share it).
  const bool streamed = row_count == 1 && w.traits->bits != 8;
  if (streamed && quantDotHasAvx512() && quantDotRowsTiled(w, rows[0])) {
    quantDotInt4StreamAvx512(w, n0, n1, rows[0], out);
    return;
  }
  if (row_count > 0 && !streamed && quantDotHasAvx512() && quantDotRowsTiled(w, rows[0])) {
    quantDotTileAvx512(w, n0, n1, rows, row_count, out, out_stride, channels_per_pass);
    return;
  }
  for (int64_t r = 0; r < row_count; ++r)
    quantDotRows(w, n0, n1, rows[r], out + r * out_stride, channels_per_pass);
}

float quantizeRowPerToken(const float* x, int64_t k, int8_t* q) {
  return quantDotHasAvx512() ? quantizeRowPerTokenAvx512(x, k, q)
                             : quantizeRowPerTokenScalar(x, k, q);
}

float quantizeRowPerTokenScalar(const float* x, int64_t k, int8_t* q) {
  float amax = 0;
  for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 127.0f;
  const float inverse = inverseScale(scale);
  for (int64_t i = 0; i < k; ++i)
    q[i] = static_cast<int8_t>(roundClamped(x[i] * inverse, 127.0f));
  return scale;
}

int32_t dotInt8Scalar(const int8_t* a, const int8_t* w, int64_t k) {
  int32_t sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += static_cast<int32_t>(a[i]) * w[i];
  return sum;
}

#if defined(__x86_64__) && defined(__GNUC__)
int32_t dotInt8Avx2(const int8_t* a, const int8_t* w, int64_t k) {
  int32_t out;
  (cpuAvxVnni() ? vnni::int8DotTile<1> : plain::int8DotTile<1>)(a, w, k, &out);
  return out;
}

void dotInt8Rows(const int8_t* a, const int8_t* w, int64_t k, int64_t count, int32_t* out,
                 int channels_per_pass) {
  int64_t n = 0;
  if (quantDotHasAvx2()) {
    const bool avx_vnni = cpuAvxVnni();
    const auto tile4 = avx_vnni ? vnni::int8DotTile<4> : plain::int8DotTile<4>;
    const auto tile1 = avx_vnni ? vnni::int8DotTile<1> : plain::int8DotTile<1>;
    if (channels_per_pass == 4)
      for (; n + 4 <= count; n += 4) tile4(a, w + n * k, k, out + n);
    for (; n < count; ++n) tile1(a, w + n * k, k, out + n);
  }
  for (; n < count; ++n) out[n] = dotInt8Scalar(a, w + n * k, k);
}
#else
int32_t dotInt8Avx2(const int8_t* a, const int8_t* w, int64_t k) { return dotInt8Scalar(a, w, k); }
void dotInt8Rows(const int8_t* a, const int8_t* w, int64_t k, int64_t count, int32_t* out, int) {
  for (int64_t n = 0; n < count; ++n) out[n] = dotInt8Scalar(a, w + n * k, k);
}
#endif

}  // namespace llmc
