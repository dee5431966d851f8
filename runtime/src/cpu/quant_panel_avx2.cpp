// The integer panels on AVX2 (cpu/quant_dot.h) for CPUs without AVX-512: the AVX-512 panels'
// packs and per-output arithmetic in 8 lanes, so their bits (docs/cpu.md, "AVX2 panels").
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/isa.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "cpu/columns_avx2.h"
#include "cpu/kept_buffer.h"
#include "cpu/quant_dot.h"

namespace llmc {

namespace {

// One slab's codes as the int16 panels want them, from pair q0 of K on: `rows` the slab's 16
// channels' rows of codes (k apart; rows at or past `count` read as zeros), `to` pair q's 32
// bytes (channels 0-15, two codes each) at q * pair_stride.
void int16SlabCodes(const int8_t* rows, int64_t k, int count, int8_t* to, int64_t pair_stride,
                    int64_t q0) {
  for (int64_t q = q0; q < k / 2; ++q)
    for (int c = 0; c < 16; ++c)
      for (int j = 0; j < 2; ++j)
        to[q * pair_stride + 2 * c + j] = c < count ? rows[c * k + 2 * q + j] : int8_t{0};
}

#if defined(__x86_64__) && defined(__GNUC__)
LLMC_TARGET_BEGIN("avx2")

// int16SlabCodes eight pairs at a time: rows c and c + 8 in the two lanes of one register, then
// an 8 x 8 transpose of 16-bit elements in each lane, so that result j is pair j's 32 bytes
// (channels 0-7, then 8-15); the pairs past the last eight through int16SlabCodes itself.
void int16SlabCodesAvx2(const int8_t* rows, int64_t k, int count, int8_t* to, int64_t pair_stride) {
  const int64_t pairs = k / 2;
  int64_t q = 0;
  for (; q + 8 <= pairs; q += 8) {
    __m256i r[8];
    for (int c = 0; c < 8; ++c) {
      const auto load = [&](int row) {
        return row < count
                   ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + row * k + 2 * q))
                   : _mm_setzero_si128();
      };
      r[c] = _mm256_set_m128i(load(c + 8), load(c));
    }
    __m256i t[8], u[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i) {  // rows 4i..4i + 3: u[4i + m] holds pairs 2m and 2m + 1
      u[4 * i] = _mm256_unpacklo_epi32(t[4 * i], t[4 * i + 2]);
      u[4 * i + 1] = _mm256_unpackhi_epi32(t[4 * i], t[4 * i + 2]);
      u[4 * i + 2] = _mm256_unpacklo_epi32(t[4 * i + 1], t[4 * i + 3]);
      u[4 * i + 3] = _mm256_unpackhi_epi32(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int m = 0; m < 4; ++m) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + (q + 2 * m) * pair_stride),
                          _mm256_unpacklo_epi64(u[m], u[4 + m]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + (q + 2 * m + 1) * pair_stride),
                          _mm256_unpackhi_epi64(u[m], u[4 + m]));
    }
  }
  int16SlabCodes(rows, k, count, to, pair_stride, q);
}

// One block's 16 bytes of a channel's 4-bit codes (element i's nibble: byte i low for i < 16,
// byte i - 16 high) as the pack's four dwords, step pair t's at t: byte j of dword t is element
// 8t + j | element 8t + 4 + j << 4.
inline __m128i int4BlockDwords(__m128i bytes) {
  const __m128i nibble = _mm_set1_epi8(0x0f);
  const __m128i low = _mm_shuffle_epi32(_mm_and_si128(bytes, nibble), _MM_SHUFFLE(3, 1, 2, 0));
  const __m128i high =
      _mm_shuffle_epi32(_mm_and_si128(_mm_srli_epi16(bytes, 4), nibble), _MM_SHUFFLE(3, 1, 2, 0));
  // Elements 0-3, 8-11, 16-19, 24-27 under 4-7, 12-15, 20-23, 28-31 (codes below 16, so the
  // 16-bit shift keeps each in its byte).
  return _mm_or_si128(_mm_unpacklo_epi64(low, high),
                      _mm_slli_epi16(_mm_unpackhi_epi64(low, high), 4));
}

// int4PanelSetupPortable's codes for slab s: four channels at a time, their blocks' dwords
// transposed so that each store is the four channels' 16 bytes of one step pair.
void int4SlabCodesAvx2(const uint8_t* bytes, int64_t k, int64_t n, int64_t n_end, int slabs, int s,
                       uint8_t* packed) {
  const int64_t blocks = k / kQuantBlock;
  for (int c = 0; c < 16; c += 4) {
    const int64_t channel = n + 16 * s + c;
    for (int64_t b = 0; b < blocks; ++b) {
      __m128i v[4];
      for (int i = 0; i < 4; ++i)
        v[i] = channel + i < n_end
                   ? int4BlockDwords(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
                         bytes + (channel + i) * (k / 2) + b * (kQuantBlock / 2))))
                   : _mm_setzero_si128();
      const __m128i a0 = _mm_unpacklo_epi32(v[0], v[1]), a1 = _mm_unpackhi_epi32(v[0], v[1]);
      const __m128i a2 = _mm_unpacklo_epi32(v[2], v[3]), a3 = _mm_unpackhi_epi32(v[2], v[3]);
      const __m128i steps[4] = {_mm_unpacklo_epi64(a0, a2), _mm_unpackhi_epi64(a0, a2),
                                _mm_unpacklo_epi64(a1, a3), _mm_unpackhi_epi64(a1, a3)};
      for (int t = 0; t < kQuantBlock / 8; ++t)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(
                             packed + ((b * (kQuantBlock / 8) + t) * slabs + s) * 64 + 4 * c),
                         steps[t]);
    }
  }
}

LLMC_TARGET_END
constexpr bool kAvx2Setups = true;
#else
constexpr bool kAvx2Setups = false;
void int16SlabCodesAvx2(const int8_t*, int64_t, int, int8_t*, int64_t) {}
void int4SlabCodesAvx2(const uint8_t*, int64_t, int64_t, int64_t, int, int, uint8_t*) {}
#endif

}  // namespace

// The setups run on every level the panels take (and on the scalar one in tests): the codes by
// the AVX2 loops above where the CPU runs them (the first product of an engine's weights packs
// them all: 6-10% of a cold first token on the AVX2 EPYC of 2026-12-07 with the loops below).
void int16PanelSetupPortable(const QuantWeight& w, int64_t n, int64_t n_end, int slabs,
                             int8_t* packed, float* scales) {
  const int8_t* codes = static_cast<const int8_t*>(w.data);
  const bool avx2 = kAvx2Setups && cpuIsa() >= CpuIsa::kAvx2;
  for (int s = 0; s < slabs; ++s) {
    const int64_t first = n + 16 * s;
    const int count = static_cast<int>(std::clamp<int64_t>(n_end - first, 0, 16));
    const int8_t* rows = count > 0 ? codes + first * w.k : codes;
    if (avx2)
      int16SlabCodesAvx2(rows, w.k, count, packed + s * 32, slabs * 32);
    else
      int16SlabCodes(rows, w.k, count, packed + s * 32, slabs * 32, 0);
    for (int c = 0; c < 16; ++c) scales[16 * s + c] = c < count ? w.scale(first + c, 0) : 0.0f;
  }
}

void int4PanelSetupPortable(const QuantWeight& w, int64_t n, int64_t n_end, int slabs,
                            uint8_t* packed, float* scales, float* zeros) {
  const uint8_t* bytes = static_cast<const uint8_t*>(w.data);
  const int64_t blocks = w.k / kQuantBlock;
  const bool avx2 = kAvx2Setups && cpuIsa() >= CpuIsa::kAvx2;
  for (int s = 0; s < slabs; ++s) {
    if (avx2) {
      int4SlabCodesAvx2(bytes, w.k, n, n_end, slabs, s, packed);
      continue;
    }
    for (int c = 0; c < 16; ++c) {
      const int64_t channel = n + 16 * s + c;
      for (int64_t b = 0; b < blocks; ++b) {
        // The block's 32 codes in K order: its 16 bytes' low nibbles hold elements 0..15 and
        // their high nibbles 16..31.
        uint8_t codes[kQuantBlock] = {};
        if (channel < n_end) {
          const uint8_t* from = bytes + channel * (w.k / 2) + b * (kQuantBlock / 2);
          for (int i = 0; i < kQuantBlock / 2; ++i) {
            codes[i] = from[i] & 0x0f;
            codes[i + kQuantBlock / 2] = from[i] >> 4;
          }
        }
        // Per step pair t (8 K values) the channel's 4 bytes: step 2t's codes low, 2t + 1's high.
        for (int t = 0; t < kQuantBlock / 8; ++t) {
          uint8_t* to = packed + ((b * (kQuantBlock / 8) + t) * slabs + s) * 64 + 4 * c;
          for (int j = 0; j < 4; ++j)
            to[j] = static_cast<uint8_t>(codes[8 * t + j] | codes[8 * t + 4 + j] << 4);
        }
      }
    }
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

void int8PanelSetupPortable(const int8_t* w, int64_t k, int64_t n, int64_t n_end, int slabs,
                            int8_t* packed, int32_t* bias) {
  for (int s = 0; s < slabs; ++s)
    for (int c = 0; c < 16; ++c) {
      const int64_t channel = n + 16 * s + c;
      int32_t sum = 0;
      for (int64_t q = 0; q < k / 4; ++q)
        for (int j = 0; j < 4; ++j) {
          const int8_t code = channel < n_end ? w[channel * k + 4 * q + j] : int8_t{0};
          packed[(q * slabs + s) * 64 + 4 * c + j] = code;
          sum += code;
        }
      bias[16 * s + c] = 128 * sum;
    }
}

std::shared_ptr<const Int8PanelPack> packInt8PanelsPortable(const int8_t* w, int64_t n, int64_t k,
                                                            ThreadPool* pool) {
  return packInt8PanelsWith(w, n, k, pool, int8PanelSetupPortable);
}

std::shared_ptr<const Int8PanelPack> packInt8PanelsWith(const int8_t* w, int64_t n, int64_t k,
                                                        ThreadPool* pool, Int8PanelSetup setup) {
  auto pack = std::make_shared<Int8PanelPack>();
  pack->n = n;
  pack->k = k;
  const int64_t panels = (n + 31) / 32;
  pack->codes = keptBuffer<int8_t>(static_cast<size_t>(panels * k * 32));
  int8_t* codes = pack->codes.get();
  pack->bias.assign(static_cast<size_t>(panels * 32), 0);
  parallelFor(pool, panels, [&](int64_t p) {
    setup(w, k, 32 * p, n, n - 32 * p > 16 ? 2 : 1, codes + p * k * 32, pack->bias.data() + p * 32);
  });
  return pack;
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {

// The 32 bits at p (two int16 codes), for a broadcast.
inline int32_t load32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// A tile is 4 rows x 16 channels (one slab of a pack): its eight int32 sums, the two weight
// registers, the rows' broadcast codes and the temporaries take AVX2's sixteen registers (at 5
// and 6 rows GCC 12 spilled sums on every step), so the float sums of the blocks wait in the
// output rows, in L1, read and written once per block.
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

LLMC_TARGET_BEGIN("avx2,fma")
namespace plain {
#define LLMC_QUANT_AVX_VNNI 0
#include "cpu/quant_panel_avx2.inc"
#undef LLMC_QUANT_AVX_VNNI
}  // namespace plain
LLMC_TARGET_END
LLMC_TARGET_BEGIN("avx2,fma,avxvnni")
namespace vnni {
#define LLMC_QUANT_AVX_VNNI 1
#include "cpu/quant_panel_avx2.inc"
#undef LLMC_QUANT_AVX_VNNI
}  // namespace vnni
LLMC_TARGET_END

}  // namespace

bool quantDotHasAvx2Panels() { return cpuIsa() >= CpuIsa::kAvx2; }
bool quantDotHasAvxVnniPanel() { return cpuIsa() >= CpuIsa::kAvx2 && cpuAvxVnni(); }

// w8a8's tiles take 6 rows: twelve int32 sums, two weight registers and a broadcast, of sixteen.
constexpr int kInt8RowsPerTile = 6;

void dotInt8PanelAvxVnni(const uint8_t* biased, int64_t rows, const int8_t* w, int64_t k,
                         int64_t n0, int64_t n1, int32_t* out, int64_t out_stride,
                         const Int8PanelPack* pack) {
  using Fn = void (*)(const int8_t*, int64_t, int64_t, const uint8_t*, const int32_t*, int,
                      int32_t*, int64_t);
  static constexpr Fn kTiles[kInt8RowsPerTile] = {vnni::int8PanelAvx2<1>, vnni::int8PanelAvx2<2>,
                                                  vnni::int8PanelAvx2<3>, vnni::int8PanelAvx2<4>,
                                                  vnni::int8PanelAvx2<5>, vnni::int8PanelAvx2<6>};
  // Without a pack (or off its panels), each panel repacked into the calling thread's buffer.
  if (pack && n0 % 32 != 0) pack = nullptr;
  thread_local std::vector<int8_t> packed_scratch;
  if (!pack && packed_scratch.size() < static_cast<size_t>(k * 32))
    packed_scratch.resize(static_cast<size_t>(k * 32));
  for (int64_t n = n0; n < n1; n += 32) {
    const int64_t count = std::min<int64_t>(32, n1 - n);
    const int slabs = count > 16 ? 2 : 1;
    const int8_t* packed;
    int32_t bias[32] = {};
    if (pack) {
      packed = pack->codes.get() + (n / 32) * k * 32;
      std::memcpy(bias, pack->bias.data() + n, sizeof(int32_t) * 16 * slabs);
    } else {
      int8PanelSetupPortable(w, k, n, n1, slabs, packed_scratch.data(), bias);
      packed = packed_scratch.data();
    }
    for (int s = 0; s < slabs; ++s) {
      const int cols = static_cast<int>(std::min<int64_t>(16, count - 16 * s));
      for (int64_t r = 0; r < rows; r += kInt8RowsPerTile)
        kTiles[std::min<int64_t>(kInt8RowsPerTile, rows - r) - 1](
            packed + s * 64, slabs * 64, k, biased + r * k, bias + 16 * s, cols,
            out + r * out_stride + (n - n0) + 16 * s, out_stride);
    }
  }
}

void quantDotPanelAvx2(const QuantWeight& w, int64_t n0, int64_t n1, const int16_t* codes,
                       const float* scales, int64_t rows, float* out, int64_t out_stride,
                       const Int16PanelPack* pack) {
  using Fn = void (*)(const int8_t*, int64_t, int64_t, int64_t, int64_t, const int16_t*,
                      const float*, const float*, int, float*, int64_t);
  static constexpr Fn kPlain[kRowsPerTile] = {plain::int16PanelAvx2<1>, plain::int16PanelAvx2<2>,
                                              plain::int16PanelAvx2<3>, plain::int16PanelAvx2<4>};
  static constexpr Fn kVnni[kRowsPerTile] = {vnni::int16PanelAvx2<1>, vnni::int16PanelAvx2<2>,
                                             vnni::int16PanelAvx2<3>, vnni::int16PanelAvx2<4>};
  const Fn* tiles = cpuAvxVnni() ? kVnni : kPlain;
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
                  tiles[tile_rows - 1](packed + s * 32, slabs * 32, k, b0, b1, codes + r * k,
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
  static constexpr Fn kPlain[kRowsPerTile] = {plain::int4PanelAvx2<1>, plain::int4PanelAvx2<2>,
                                              plain::int4PanelAvx2<3>, plain::int4PanelAvx2<4>};
  static constexpr Fn kVnni[kRowsPerTile] = {vnni::int4PanelAvx2<1>, vnni::int4PanelAvx2<2>,
                                             vnni::int4PanelAvx2<3>, vnni::int4PanelAvx2<4>};
  const Fn* tiles = cpuAvxVnni() ? kVnni : kPlain;
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
                  tiles[tile_rows - 1](codes + s * 64, slabs * 64, k, b0, b1, w.group, rows + r,
                                        scales + 16 * s, zeros + 16 * s, slabs * 16, cols,
                                        out + r * out_stride + (n - n0) + 16 * s, out_stride);
                });
  }
}

#else

bool quantDotHasAvx2Panels() { return false; }
bool quantDotHasAvxVnniPanel() { return false; }
void dotInt8PanelAvxVnni(const uint8_t*, int64_t, const int8_t*, int64_t, int64_t, int64_t,
                         int32_t*, int64_t, const Int8PanelPack*) {}
void quantDotPanelAvx2(const QuantWeight&, int64_t, int64_t, const int16_t*, const float*, int64_t,
                       float*, int64_t, const Int16PanelPack*) {}
void quantDotInt4PanelAvx2(const QuantWeight&, int64_t, int64_t, const QuantizedActivations*,
                           int64_t, float*, int64_t, const Int4PanelPack*) {}

#endif

}  // namespace llmc
