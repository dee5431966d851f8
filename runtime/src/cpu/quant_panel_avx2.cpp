// The int16 panels on AVX2 (cpu/quant_dot.h): prefill's products of int8 weights with int16
// activation codes, output channels in the lanes, for CPUs without AVX-512. The AVX-512 panels'
// pack and arithmetic (cpu/quant_dot_avx512.inc), in 8 lanes: per (row, channel) the exact
// integer sum of each block of 32, one fused multiply-add by the row's block scale into a float
// sum, times the channel's scale after the last block, so the two levels give the same bits.
// With 16 registers of 256 bits a tile is 4 rows x 16 channels (one slab of the pack): its eight
// int32 sums, the two widened weight registers, the rows' broadcast codes and vpmaddwd's
// temporaries take them all (at 5 and 6 rows GCC 12 spilled sums on every step), so the float
// sums live in the output rows, in L1, read and written once per block.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "cpu/kept_buffer.h"
#include "cpu/quant_dot.h"

namespace llmc {

void int16PanelSetupPortable(const QuantWeight& w, int64_t n, int64_t n_end, int slabs,
                             int8_t* packed, float* scales) {
  const int8_t* codes = static_cast<const int8_t*>(w.data);
  const int64_t pairs = w.k / 2;
  for (int s = 0; s < slabs; ++s)
    for (int c = 0; c < 16; ++c) {
      const int64_t channel = n + 16 * s + c;
      int8_t* to = packed + s * 32 + 2 * c;
      if (channel >= n_end) {
        for (int64_t q = 0; q < pairs; ++q) to[q * slabs * 32] = to[q * slabs * 32 + 1] = 0;
        scales[16 * s + c] = 0.0f;
        continue;
      }
      const int8_t* row = codes + channel * w.k;
      for (int64_t q = 0; q < pairs; ++q) {
        to[q * slabs * 32] = row[2 * q];
        to[q * slabs * 32 + 1] = row[2 * q + 1];
      }
      scales[16 * s + c] = w.scale(channel, 0);
    }
}

void int4PanelSetupPortable(const QuantWeight& w, int64_t n, int64_t n_end, int slabs,
                            uint8_t* packed, float* scales, float* zeros) {
  const uint8_t* bytes = static_cast<const uint8_t*>(w.data);
  // Code k of a row: in each block of 32, the low nibbles of its 16 bytes hold elements 0..15
  // and the high nibbles 16..31.
  auto code = [&](const uint8_t* row, int64_t k) -> uint8_t {
    const uint8_t byte = row[k / kQuantBlock * (kQuantBlock / 2) + k % (kQuantBlock / 2)];
    return k % kQuantBlock < kQuantBlock / 2 ? byte & 0x0f : byte >> 4;
  };
  for (int s = 0; s < slabs; ++s)
    for (int c = 0; c < 16; ++c) {
      const int64_t channel = n + 16 * s + c;
      const uint8_t* row = channel < n_end ? bytes + channel * (w.k / 2) : nullptr;
      for (int64_t t = 0; t < w.k / 8; ++t)
        for (int j = 0; j < 4; ++j)
          packed[(t * slabs + s) * 64 + 4 * c + j] =
              row ? static_cast<uint8_t>(code(row, 8 * t + j) | code(row, 8 * t + 4 + j) << 4) : 0;
    }
  int4PanelScales(w, n, n_end, slabs, scales, zeros);
}

void int4PanelScales(const QuantWeight& w, int64_t n, int64_t n_end, int slabs, float* scales,
                     float* zeros) {
  const int64_t groups = w.groupsPerRow();
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < 16 * slabs; ++c) {
      const size_t at = static_cast<size_t>(g * slabs * 16 + c);
      const int64_t channel = n + c;
      if (channel >= n_end) {
        scales[at] = zeros[at] = 0.0f;
        continue;
      }
      const float scale = w.scale(channel, g);
      scales[at] = scale;
      zeros[at] = scale * (w.zeros ? w.zeros[channel * groups + g] : 8);
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {

// The 32 bits at p (two int16 codes), for a broadcast.
inline int32_t load32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Rows x the 16 channels of one slab over blocks [b0, b1) of K. `slab` is the slab's first pair
// (16 channels x 2 int8 codes, 32 bytes), `pair_stride` bytes from one pair of K to the next;
// codes [rows, k] from row 0, scales [rows, blocks]; out holds the float sums of the blocks
// before b0 (b0 > 0) and gets them through b1, times `channel_scales` after the last block.
// `cols` (1..16) of the 16 channels are written.
template <int kRows>
__attribute__((target("avx2,fma"))) void int16PanelAvx2(const int8_t* slab, int64_t pair_stride,
                                                        int64_t k, int64_t b0, int64_t b1,
                                                        const int16_t* codes, const float* scales,
                                                        const float* channel_scales, int cols,
                                                        float* out, int64_t out_stride) {
  const int64_t blocks = k / kQuantBlock;
  for (int64_t b = b0; b < b1; ++b) {
    __m256i sums[kRows][2];
    for (int r = 0; r < kRows; ++r) sums[r][0] = sums[r][1] = _mm256_setzero_si256();
    const int8_t* wb = slab + b * (kQuantBlock / 2) * pair_stride;
    const int16_t* ab = codes + b * kQuantBlock;
#pragma GCC unroll 4
    for (int q = 0; q < kQuantBlock / 2; ++q) {
      const int8_t* wq = wb + q * pair_stride;
      const __m256i w0 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wq)));
      const __m256i w1 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wq + 16)));
      for (int r = 0; r < kRows; ++r) {
        const __m256i av = _mm256_set1_epi32(load32(ab + r * k + 2 * q));
        sums[r][0] = _mm256_add_epi32(sums[r][0], _mm256_madd_epi16(av, w0));
        sums[r][1] = _mm256_add_epi32(sums[r][1], _mm256_madd_epi16(av, w1));
      }
    }
    // The column masks are made here, not kept across the loop: the twelve sums and the loop's
    // three registers take all sixteen.
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), lane);
    const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols - 8), lane);
    const bool last = b == blocks - 1;
    for (int r = 0; r < kRows; ++r) {
      const __m256 scale = _mm256_set1_ps(scales[r * blocks + b]);
      float* row = out + r * out_stride;
      for (int h = 0; h < 2; ++h) {
        const __m256i mask = h == 0 ? m0 : m1;
        const __m256 before = b == 0 ? _mm256_setzero_ps() : _mm256_maskload_ps(row + 8 * h, mask);
        __m256 sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[r][h]), scale, before);
        if (last) sum = _mm256_mul_ps(sum, _mm256_loadu_ps(channel_scales + 8 * h));
        _mm256_maskstore_ps(row + 8 * h, mask, sum);
      }
    }
  }
}

// 4-bit weights: rows x the 16 channels of one slab over blocks [b0, b1) of K, the AVX-512
// 4-bit panels' arithmetic (cpu/quant_dot_avx512.inc) in 8 lanes. `slab` is the slab's first
// 64 bytes (16 channels x 4 bytes, each byte the codes of two steps), `step_stride` bytes from
// one pair of steps (8 K values) to the next; scales and zeros the slab's first, `group_stride`
// floats from one group to the next. Per block the int32 sums of the row's int8 codes with the
// unsigned codes (vpmaddubsw + vpmaddwd), then a fused multiply-add by the channels' group scale
// times the row's block scale; after K's last block the zero points' term per group.
template <int kRows>
__attribute__((target("avx2,fma"))) void int4PanelAvx2(const uint8_t* slab, int64_t step_stride,
                                                       int64_t k, int64_t b0, int64_t b1,
                                                       int64_t group, const QuantizedActivations* a,
                                                       const float* scales, const float* zeros,
                                                       int64_t group_stride, int cols, float* out,
                                                       int64_t out_stride) {
  const int64_t blocks = k / kQuantBlock, groups = (k + group - 1) / group;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  for (int64_t b = b0; b < b1; ++b) {
    // A block's products summed in int16 lanes, then once into int32: each lane adds 8 of
    // vpmaddubsw's pairs, 16 products of at most 15 x 127, |sum| <= 30,480, so neither the
    // pairs saturate nor the 16-bit sums wrap, and the block's integer is exact.
    __m256i pairs[kRows][2];
    for (int r = 0; r < kRows; ++r) pairs[r][0] = pairs[r][1] = _mm256_setzero_si256();
    const uint8_t* wb = slab + b * (kQuantBlock / 8) * step_stride;
    // One step (4 K values) per pass, its codes the low nibbles of the pair's bytes (even steps)
    // or the high ones: with both halves in one pass GCC 12 added the two steps' products
    // together first and spilled the sums.
#pragma GCC unroll 1
    for (int q = 0; q < kQuantBlock / 4; ++q) {
      const __m128i shift = _mm_cvtsi32_si128(4 * (q % 2));
      __m256i wv[2];
      for (int h = 0; h < 2; ++h) {
        const __m256i both = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(wb + (q / 2) * step_stride + 32 * h));
        wv[h] = _mm256_and_si256(_mm256_srl_epi16(both, shift), nibble);
      }
      for (int r = 0; r < kRows; ++r) {
        const __m256i av = _mm256_set1_epi32(load32(a[r].q.data() + b * kQuantBlock + 4 * q));
        for (int h = 0; h < 2; ++h)
          pairs[r][h] = _mm256_add_epi16(pairs[r][h], _mm256_maddubs_epi16(wv[h], av));
      }
    }
    __m256i sums[kRows][2];
    for (int r = 0; r < kRows; ++r)
      for (int h = 0; h < 2; ++h) sums[r][h] = _mm256_madd_epi16(pairs[r][h], ones);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m[2] = {_mm256_cmpgt_epi32(_mm256_set1_epi32(cols), lane),
                          _mm256_cmpgt_epi32(_mm256_set1_epi32(cols - 8), lane)};
    const float* group_scales = scales + (b * kQuantBlock / group) * group_stride;
    for (int r = 0; r < kRows; ++r) {
      const __m256 scale = _mm256_set1_ps(a[r].scales[static_cast<size_t>(b)]);
      float* row = out + r * out_stride;
      for (int h = 0; h < 2; ++h) {
        const __m256 before = b == 0 ? _mm256_setzero_ps() : _mm256_maskload_ps(row + 8 * h, m[h]);
        const __m256 ws = _mm256_loadu_ps(group_scales + 8 * h);
        _mm256_maskstore_ps(
            row + 8 * h, m[h],
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[r][h]), _mm256_mul_ps(ws, scale), before));
      }
    }
    if (b != blocks - 1) continue;
    for (int r = 0; r < kRows; ++r) {
      float* row = out + r * out_stride;
      for (int h = 0; h < 2; ++h) {
        __m256 sum = _mm256_maskload_ps(row + 8 * h, m[h]);
        for (int64_t g = 0; g < groups; ++g)
          sum = _mm256_fnmadd_ps(_mm256_loadu_ps(zeros + g * group_stride + 8 * h),
                                 _mm256_set1_ps(a[r].group_sums[static_cast<size_t>(g)]), sum);
        _mm256_maskstore_ps(row + 8 * h, m[h], sum);
      }
    }
  }
}

constexpr int kRowsPerTile = 4;
// Blocks of K per pass over the rows, as the AVX-512 panels: the slab's part stays in L1.
constexpr int64_t kChunkBlocks = 12;

// A panel of `count` channels (1 or 2 slabs) over `rows` rows, in the order the tiles run:
// chunks of K, then slabs, then tiles of rows; fn(b0, b1, slab, its columns, first row, rows).
template <typename Fn>
void forEachTile(int64_t blocks, int slabs, int64_t count, int64_t rows, Fn&& fn) {
  for (int64_t b0 = 0; b0 < blocks; b0 += kChunkBlocks) {
    const int64_t b1 = std::min(blocks, b0 + kChunkBlocks);
    for (int s = 0; s < slabs; ++s) {
      const int cols = static_cast<int>(std::min<int64_t>(16, count - 16 * s));
      for (int64_t r = 0; r < rows; r += kRowsPerTile)
        fn(b0, b1, s, cols, r, std::min<int64_t>(kRowsPerTile, rows - r));
    }
  }
}

}  // namespace

bool quantDotHasAvx2Panels() { return cpuIsa() >= CpuIsa::kAvx2; }

void quantDotPanelAvx2(const QuantWeight& w, int64_t n0, int64_t n1, const int16_t* codes,
                       const float* scales, int64_t rows, float* out, int64_t out_stride,
                       const Int16PanelPack* pack) {
  using Fn = void (*)(const int8_t*, int64_t, int64_t, int64_t, int64_t, const int16_t*,
                      const float*, const float*, int, float*, int64_t);
  static constexpr Fn kTiles[kRowsPerTile] = {int16PanelAvx2<1>, int16PanelAvx2<2>,
                                              int16PanelAvx2<3>, int16PanelAvx2<4>};
  const int64_t k = w.k, blocks = k / kQuantBlock;
  // Without a pack (or off its panels), each panel repacked into the calling thread's buffer.
  if (pack && n0 % 32 != 0) pack = nullptr;
  thread_local std::vector<int8_t> packed_scratch;
  if (!pack && packed_scratch.size() < static_cast<size_t>(k * 32))
    packed_scratch.resize(static_cast<size_t>(k * 32));
  for (int64_t n = n0; n < n1; n += 32) {
    const int64_t count = std::min<int64_t>(32, n1 - n);
    const int slabs = count > 16 ? 2 : 1;
    const int8_t* packed;
    float channel_scales[32] = {};
    if (pack) {
      packed = pack->codes.get() + (n / 32) * k * 32;
      std::memcpy(channel_scales, pack->scales.data() + n, sizeof(float) * 16 * slabs);
    } else {
      int16PanelSetupPortable(w, n, n1, slabs, packed_scratch.data(), channel_scales);
      packed = packed_scratch.data();
    }
    forEachTile(blocks, slabs, count, rows,
                [&](int64_t b0, int64_t b1, int s, int cols, int64_t r, int64_t tile_rows) {
                  kTiles[tile_rows - 1](packed + s * 32, slabs * 32, k, b0, b1, codes + r * k,
                                        scales + r * blocks, channel_scales + 16 * s, cols,
                                        out + r * out_stride + (n - n0) + 16 * s, out_stride);
                });
  }
}

void quantDotInt4PanelAvx2(const QuantWeight& w, int64_t n0, int64_t n1,
                           const QuantizedActivations* rows, int64_t row_count, float* out,
                           int64_t out_stride, const Int4PanelPack* pack) {
  using Fn = void (*)(const uint8_t*, int64_t, int64_t, int64_t, int64_t, int64_t,
                      const QuantizedActivations*, const float*, const float*, int64_t, int, float*,
                      int64_t);
  static constexpr Fn kTiles[kRowsPerTile] = {int4PanelAvx2<1>, int4PanelAvx2<2>, int4PanelAvx2<3>,
                                              int4PanelAvx2<4>};
  const int64_t k = w.k, blocks = k / kQuantBlock, groups = w.groupsPerRow();
  // Without a pack (or off its panels), each panel repacked into the calling thread's buffers.
  if (pack && n0 % 32 != 0) pack = nullptr;
  thread_local std::vector<uint8_t> packed_scratch;
  thread_local std::vector<float> scales_scratch, zeros_scratch;
  if (!pack) {
    packed_scratch.resize(static_cast<size_t>(k * 16));
    scales_scratch.resize(static_cast<size_t>(groups * 32));
    zeros_scratch.resize(scales_scratch.size());
  }
  for (int64_t n = n0; n < n1; n += 32) {
    const int64_t count = std::min<int64_t>(32, n1 - n);
    const int slabs = count > 16 ? 2 : 1;
    const uint8_t* codes;
    const float *scales, *zeros;
    if (pack) {
      codes = pack->codes.get() + (n / 32) * k * 16;
      scales = pack->scales.data() + (n / 32) * groups * 32;
      zeros = pack->zeros.data() + (n / 32) * groups * 32;
    } else {
      int4PanelSetupPortable(w, n, n1, slabs, packed_scratch.data(), scales_scratch.data(),
                             zeros_scratch.data());
      codes = packed_scratch.data();
      scales = scales_scratch.data();
      zeros = zeros_scratch.data();
    }
    forEachTile(blocks, slabs, count, row_count,
                [&](int64_t b0, int64_t b1, int s, int cols, int64_t r, int64_t tile_rows) {
                  kTiles[tile_rows - 1](codes + s * 64, slabs * 64, k, b0, b1, w.group, rows + r,
                                        scales + 16 * s, zeros + 16 * s, slabs * 16, cols,
                                        out + r * out_stride + (n - n0) + 16 * s, out_stride);
                });
  }
}

#else

bool quantDotHasAvx2Panels() { return false; }
void quantDotPanelAvx2(const QuantWeight&, int64_t, int64_t, const int16_t*, const float*, int64_t,
                       float*, int64_t, const Int16PanelPack*) {}

#endif

}  // namespace llmc
