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

// Each block's codes (int16 into q16 for bits 16, else int8 into q8), scale and integer sum:
// in 16 lanes where the CPU has AVX-512 (the same bits), else here.
void quantizeBlocks(const float* x, int64_t k, int bits, int16_t* q16, int8_t* q8, float* scales,
                    int32_t* sums) {
  if (quantDotHasAvx512()) {
    quantizeBlocksAvx512(x, k, bits, q16, q8, scales, sums);
    return;
  }
  const float levels = bits == 16 ? 32767.0f : 127.0f;
  for (int64_t b = 0; b < k / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0;
    for (int64_t i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float scale = amax / levels;
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

// Blocks 2p and 2p+1 of kRows consecutive output channels: `acc[r] += (int32 sums) * scales`,
// lanes 0..3 holding block 2p's partial sums and lanes 4..7 block 2p+1's. The 32 packed bytes of
// the pair hold the first 16 elements of each block in their low nibbles and the last 16 in
// their high nibbles, which is the order of q_pairs: a shift and two masks unpack 64 weights
// with no lane shuffle. Two vpmaddubsw results add in int16 (|sum| <= 2 * 2 * 15 * 127).
template <int kRows>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void int4PairProducts(
    const uint8_t* rows, int64_t row_bytes, int64_t p, const QuantizedActivations& a, __m256* acc) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  const __m256i a0 =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q_pairs.data() + p * 64));
  const __m256i a1 =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q_pairs.data() + p * 64 + 32));
  const __m256 scales = _mm256_loadu_ps(a.pair_scales.data() + p * 8);
  for (int r = 0; r < kRows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(rows + r * row_bytes + p * 32 + kPrefetchBytes),
                 _MM_HINT_T0);
    const __m256i packed =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + r * row_bytes + p * 32));
    const __m256i low = _mm256_and_si256(packed, low_nibbles);
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibbles);
    const __m256i sums =
        _mm256_add_epi16(_mm256_maddubs_epi16(low, a0), _mm256_maddubs_epi16(high, a1));
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(sums, ones)), scales, acc[r]);
  }
}

// Output channels n..n+kRows-1 of a 4-bit weight: each pair of activation blocks is loaded once
// for all of them, and their packed rows are read side by side. Groups of 64 or more: per group
// the weight's scale multiplies the accumulated sums and the zero point comes off once, as in
// int4BlockDot. Groups of 32 (a group per block, two per pair): the pair's two scales (and zero
// points) are spread over the lanes of their blocks, and the zero point comes off per lane
// against a quarter of the block's activation sum.
template <int kRows>
__attribute__((target("avx2,fma,f16c"))) void int4PairTile(const QuantWeight& w, int64_t n,
                                                           const QuantizedActivations& a,
                                                           float* out) {
  const int64_t row_bytes = w.k / 2, pairs = w.k / (2 * kQuantBlock), groups = w.groupsPerRow();
  const int64_t pairs_per_group = w.group / (2 * kQuantBlock);  // 0 for groups of one block
  const bool half_scales = w.traits->scale_dtype == DType::kFloat16;
  const uint8_t* rows = static_cast<const uint8_t*>(w.data) + n * row_bytes;
  const float* group_sums = a.group_sums.data();
  __m256 total[kRows], acc[kRows];
  float correction[kRows];
  for (int r = 0; r < kRows; ++r) {
    total[r] = _mm256_setzero_ps();
    correction[r] = 0;
  }
  if (pairs_per_group > 0) {
    for (int64_t g = 0; g < groups; ++g) {
      for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
      const int64_t end = std::min(pairs, (g + 1) * pairs_per_group);
      for (int64_t p = g * pairs_per_group; p < end; ++p)
        int4PairProducts<kRows>(rows, row_bytes, p, a, acc);
      for (int r = 0; r < kRows; ++r) {
        const float scale = weightScale(w, n + r, g);
        const int zero = w.zeros ? w.zeros[(n + r) * groups + g] : 8;
        total[r] = _mm256_fmadd_ps(acc[r], _mm256_set1_ps(scale), total[r]);
        correction[r] += scale * static_cast<float>(zero) * group_sums[g];
      }
    }
  } else {
    const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    for (int64_t p = 0; p < pairs; ++p) {
      for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
      int4PairProducts<kRows>(rows, row_bytes, p, a, acc);
      const __m256 block_sums = _mm256_loadu_ps(a.pair_block_sums.data() + p * 8);
      for (int r = 0; r < kRows; ++r) {
        const int64_t at = (n + r) * groups + 2 * p;
        __m128 two;
        if (half_scales) {
          uint32_t bits;
          std::memcpy(&bits, static_cast<const uint16_t*>(w.scales) + at, sizeof(bits));
          two = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits)));
        } else {
          int64_t bits;
          std::memcpy(&bits, static_cast<const float*>(w.scales) + at, sizeof(bits));
          two = _mm_castsi128_ps(_mm_cvtsi64_si128(bits));
        }
        const __m256 scales = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(two), spread);
        __m256 zeros = _mm256_set1_ps(8.0f);
        if (w.zeros) {
          uint16_t pair_zeros;
          std::memcpy(&pair_zeros, w.zeros + at, sizeof(pair_zeros));
          zeros = _mm256_cvtepi32_ps(_mm256_permutevar8x32_epi32(
              _mm256_cvtepu8_epi32(_mm_cvtsi32_si128(pair_zeros)), spread));
        }
        total[r] = _mm256_fmadd_ps(_mm256_fnmadd_ps(zeros, block_sums, acc[r]), scales, total[r]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) out[r] = horizontalSum(total[r]) - correction[r];
}

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
    if (channels_per_pass == 4)
      for (; n + 4 <= n1; n += 4) (int8 ? int8Tile<4> : int4PairTile<4>)(w, n, a, out + (n - n0));
    for (; n < n1; ++n) (int8 ? int8Tile<1> : int4PairTile<1>)(w, n, a, out + (n - n0));
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
namespace {

// Channels w_0..w_{kRows-1} (rows of K int8 values, `k` apart) against one activation row, 32
// products per step summed in int32 lanes (no float per block): exact. vpmaddubsw takes |a|
// (once per block for all the channels) times w with a's sign moved onto it; a pair of products
// is at most 2 * 127 * 127, inside int16.
template <int kRows>
__attribute__((target("avx2"))) void int8DotTile(const int8_t* a, const int8_t* w, int64_t k,
                                                 int32_t* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[kRows];
  for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_si256();
  for (int64_t i = 0; i < k; i += kQuantBlock) {
    const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
    const __m256i magnitudes = _mm256_abs_epi8(av);
    for (int r = 0; r < kRows; ++r) {
      const int8_t* wb = w + r * k + i;
      _mm_prefetch(reinterpret_cast<const char*>(wb + kPrefetchBytes), _MM_HINT_T0);
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb));
      const __m256i products = _mm256_maddubs_epi16(magnitudes, _mm256_sign_epi8(wv, av));
      acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(products, ones));
    }
  }
  for (int r = 0; r < kRows; ++r) {
    __m128i sum =
        _mm_add_epi32(_mm256_castsi256_si128(acc[r]), _mm256_extracti128_si256(acc[r], 1));
    sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4e));
    sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xb1));
    out[r] = _mm_cvtsi128_si32(sum);
  }
}

}  // namespace

int32_t dotInt8Avx2(const int8_t* a, const int8_t* w, int64_t k) {
  int32_t out;
  int8DotTile<1>(a, w, k, &out);
  return out;
}

void dotInt8Rows(const int8_t* a, const int8_t* w, int64_t k, int64_t count, int32_t* out,
                 int channels_per_pass) {
  int64_t n = 0;
  if (quantDotHasAvx2()) {
    if (channels_per_pass == 4)
      for (; n + 4 <= count; n += 4) int8DotTile<4>(a, w + n * k, k, out + n);
    for (; n < count; ++n) int8DotTile<1>(a, w + n * k, k, out + n);
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
