// The AMX forms of prefill's integer products (cpu/quant_dot.h). A tile register holds up to
// 16 rows of 64 bytes; one TMUL instruction multiplies a 16 x 4k int8 tile of activations by a
// 4k x 16 tile of weights (packed four consecutive K values per 32-bit column, the "VNNI" layout)
// into a 16 x 16 int32 tile: 16 * 16 * 4k multiply-adds, exact.
//
// - int8 weights, int16 activations (`int8`): the AMX has no int16 product, but the codes of a
//   row are 24-bit integers over one scale (AmxActivations, cpu/quant_dot.h), held in three byte
//   planes: per 64 K values three products, top x w (tdpbssd), mid x w and low x w (tdpbusd),
//   each summed over all of K in its own tile (exact in int32 up to kAmxMaxK), then 65536 * top +
//   256 * mid + low in double (exact: below 2^48) and one rounding to float. The value is the
//   other levels' Σ_blocks float(Σcw) * block scale up to float rounding, summed once instead of
//   per block (the tests bound it). Splitting the codes per block instead (two products per
//   block of 32, each block's sums leaving the tiles to be scaled in vector registers) ran at a
//   quarter of w8a8's tile rate, bounded by the tile stores and the scaling.
// - w8a8 (int8 x int8, one scale per row; K a multiple of 64, else the AVX-512 kernels run): K
//   is summed in the tile itself, 64 per instruction, 2 x 2 tiles of 16 rows x 16 channels
//   sharing each load; the int32 sums leave once, exact.
//
// The weights come in the tile layout (a 16 x 16 transpose of 32-bit elements per 64 K values,
// per 16 output channels): read from the engine's pack, kept by the executor (the VNNI panels'
// Int8PanelPack: a weight tile is a slab of it, its rows a panel's width apart), or else repacked
// per call, each slab serving every row tile of the call from cache.
// Kernels run only where cpuIsa() is kAmx: the CPU has AMX-INT8 and the OS granted this process the
// tile state.
#include <algorithm>
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
constexpr int64_t kTileRows = 16;  // rows of a tile; output channels per tile (16 int32 columns)
}  // namespace

void resizeAmxActivations(int64_t rows, int64_t k, AmxActivations* out) {
  const int64_t padded = (rows + kTileRows - 1) / kTileRows * kTileRows;
  out->rows = rows;
  out->k = k;
  // Capacity is kept (a caller may reuse one between calls); the padding rows are zeroed.
  auto fit = [](auto& v, int64_t size, int64_t from) {
    if (v.size() < static_cast<size_t>(size)) v.resize(static_cast<size_t>(size));
    std::fill(v.begin() + from, v.begin() + size, 0);
  };
  // The codes' padding rows share their tile with the last real rows: that tile is zeroed whole.
  const int64_t last_tile = rows / kTileRows * kTileRows * k;
  fit(out->top, padded * k, last_tile);
  fit(out->mid, padded * k, last_tile);
  fit(out->low, padded * k, last_tile);
  fit(out->row_scales, padded, rows);
}

void setAmxActivationRow(const QuantizedActivations& a, int64_t r, AmxActivations* out) {
  const int64_t k = out->k, blocks = k / kQuantBlock;
  // The unhalved scale is the largest (the block that holds the row's absmax has it); each
  // block's halvings are recovered from its scale (an all-zero row has codes 0 whatever they are).
  // int16BlockScale is that times 2^-halvings.
  const float row_scale = *std::max_element(a.scales.begin(), a.scales.begin() + blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    int halvings = 0;
    while (halvings < kInt16MaxHalvings && row_scale * (1.0f / static_cast<float>(1 << halvings)) !=
                                               a.scales[static_cast<size_t>(b)])
      ++halvings;
    for (int64_t i = b * kQuantBlock; i < (b + 1) * kQuantBlock; ++i) {
      const int32_t code = static_cast<int32_t>(a.q16[static_cast<size_t>(i)]) *
                           (1 << (kInt16MaxHalvings - halvings));
      out->top[amxCodeAt(r, i, k)] = static_cast<int8_t>(code >> 16);  // floor(code / 65536)
      out->mid[amxCodeAt(r, i, k)] = static_cast<uint8_t>((code >> 8) & 0xff);
      out->low[amxCodeAt(r, i, k)] = static_cast<uint8_t>(code & 0xff);
    }
  }
  out->row_scales[r] = row_scale;
}

#if defined(__x86_64__) && defined(__GNUC__)
LLMC_ALLOW_UNDEFINED_VECTORS

LLMC_TARGET_BEGIN("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")

namespace {

// The tile configuration (palette 1): all eight tiles 16 rows x 64 bytes, as int32 sums (16 x
// 16), int8 activations (16 rows x 64 K values) or weights (16 rows of four K values x 16
// channels).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Loads the configuration on this thread, and releases the tiles when the scope ends (a
// thread holding tile state is costlier to switch and keeps the core from deep idle states).
class TileScope {
 public:
  TileScope() {
    TileConfig config;
    for (int t = 0; t < 8; ++t) {
      config.rows[t] = kTileRows;
      config.colsb[t] = 64;
    }
    // GCC 12's _tile_loadconfig tells the compiler that ldtilecfg reads 8 bytes: without this
    // barrier the stores of the shapes (bytes 16-63) could be dropped as dead.
    asm volatile("" : : "r"(&config) : "memory");
    _tile_loadconfig(&config);
  }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

#include "cpu/pack_avx512.inc"

// Channels n0..n0+15 of an int8 weight [N, K] (rows at or past `n_end` as zeros; K a multiple of
// 32) in the weights' tile layout: packed[q][n][j] = W[n0 + n][4q + j] (64 bytes per four K
// values), so that the rows for K values c..c+chunk-1 form one weight tile at packed + 16c, 64
// bytes apart: packInt8Panel's layout with one slab (a 16 x 16 transpose of 32-bit elements in
// registers per 64 K values; at 64 rows a gather per column took 4x the tiles' own time).
void packWeightSlab(const int8_t* w, int64_t k, int64_t n0, int64_t n_end, int8_t* packed) {
  packInt8Panel(w, k, n0, n_end, 1, packed);
  // GCC's tile loads are asm statements that name only the address: the stores above must not
  // move past them.
  asm volatile("" : : : "memory");
}

// The weight tiles of channels n..n+15: `base` holds the rows for K values 4q..4q+3 at base + q *
// stride. From the pack where there is one and n starts one of its slabs (a multiple of 16: the
// pack's panels of 32 channels hold two slabs, 64 bytes each per four K values, or one in a last
// panel of 16 or fewer channels), else repacked into `scratch` (k * 16 bytes).
struct WeightSlab {
  const int8_t* base;
  int64_t stride;
};
bool slabInPack(const Int8PanelPack* pack, int64_t n) { return pack && n % 16 == 0; }
WeightSlab weightSlab(const int8_t* w, int64_t k, int64_t n, int64_t n_end,
                      const Int8PanelPack* pack, int8_t* scratch) {
  if (!slabInPack(pack, n)) {
    packWeightSlab(w, k, n, n_end, scratch);
    return {scratch, 64};
  }
  const int64_t panel = n / 32;
  const int64_t slabs = pack->n - panel * 32 > 16 ? 2 : 1;
  return {pack->codes.get() + panel * k * 32 + (n % 32) / 16 * 64, slabs * 64};
}

// The weights of the pack's channels of this thread's next call (LlmQuantMatMul's tasks are
// claimed in order, so with `ahead` threads the one `ahead` calls on), asked into L2 a few
// lines per 16 x 16 x 64 block while the call computes: a call's first row tile otherwise
// waits on memory for every weight tile. On the 110M Llama's 8-bit 64-token prefill (one
// thread, Sapphire Rapids guest) it took the first token from 31.6-35.0 to 28.9-31.0 ms in
// five alternated pairs.
class PackAhead {
 public:
  PackAhead(const Int8PanelPack* pack, int64_t k, int64_t n0, int64_t n1, int ahead,
            int64_t blocks) {
    if (!slabInPack(pack, n0) || n1 % 32 != 0 || ahead < 1) return;
    const int64_t first = n1 + (ahead - 1) * (n1 - n0);
    if (first % 32 != 0) return;
    const int64_t from = first / 32 * k * 32, pack_end = (pack->n + 31) / 32 * k * 32;
    if (from >= pack_end) return;
    next_ = pack->codes.get() + from;
    end_ = pack->codes.get() + std::min(pack_end, from + (n1 - n0) * k);
    per_block_ = (end_ - next_ + 63) / 64 / std::max<int64_t>(blocks, 1) + 1;
  }
  void step() {
    for (int64_t i = 0; i < per_block_ && next_ < end_; ++i, next_ += 64)
      _mm_prefetch(reinterpret_cast<const char*>(next_), _MM_HINT_T1);
  }

 private:
  const int8_t* next_ = nullptr;
  const int8_t* end_ = nullptr;
  int64_t per_block_ = 0;
};

// The int8-weight / int16-activation product, one 16-row tile of activations by one slab of 16
// channels at a time: tiles 0-2 sum the top, mid and low planes' products over all of K (tiles
// 3-5 their activations, 6 the weights), stored once; then per row 65536 * top + 256 * mid + low
// in double, one rounding to float, times 2^-kInt16MaxHalvings (exact), the row's scale and the
// channel's.
void planeTiles(const QuantWeight& w, int64_t n0, int64_t n1, const AmxActivations& a, float* out,
                int64_t out_stride, const Int8PanelPack* pack, int ahead_calls) {
  const int64_t k = a.k;
  // Slabs in groups of kGroup: a row tile's planes serve the group's slabs from L1 (3 x 16 x K
  // bytes), the group's weights stay in L2 for every row tile.
  constexpr int64_t kGroup = 8;
  // n advances by 16s from n0: every slab comes from the pack, or none does.
  std::vector<int8_t> scratch(slabInPack(pack, n0) ? 0
                                                   : static_cast<size_t>(kGroup * k * kTileRows));
  alignas(64) int32_t sums[3][kTileRows * 16];
  TileScope tiles;
  const __m512d top_weight = _mm512_set1_pd(65536.0), mid_weight = _mm512_set1_pd(256.0);
  const __m512 unshift = _mm512_set1_ps(1.0f / static_cast<float>(1 << kInt16MaxHalvings));
  PackAhead ahead(pack, k, n0, n1, ahead_calls,
                  (a.rows + kTileRows - 1) / kTileRows * ((n1 - n0 + kTileRows - 1) / kTileRows) *
                      (k / kAmxChunk));
  for (int64_t g = n0; g < n1; g += kGroup * kTileRows) {
    const int64_t slabs = std::min(kGroup, (n1 - g + kTileRows - 1) / kTileRows);
    WeightSlab slab[kGroup];
    __m512 channel_scale[kGroup];
    __mmask16 valid[kGroup];
    for (int64_t s = 0; s < slabs; ++s) {
      const int64_t n = g + s * kTileRows, count = std::min(kTileRows, n1 - n);
      slab[s] = weightSlab(static_cast<const int8_t*>(w.data), k, n, n1, pack,
                           scratch.data() + s * k * kTileRows);
      alignas(64) float channel_scales[16] = {};
      for (int64_t c = 0; c < count; ++c) channel_scales[c] = w.scale(n + c, 0);
      channel_scale[s] = _mm512_mul_ps(_mm512_load_ps(channel_scales), unshift);
      valid[s] = static_cast<__mmask16>((1u << count) - 1);
    }
    for (int64_t m = 0; m < a.rows; m += kTileRows) {
      for (int64_t s = 0; s < slabs; ++s) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        for (int64_t c = 0; c < k / kAmxChunk; ++c) {
          const int64_t at = amxCodeAt(m, c * kAmxChunk, k);
          _tile_loadd(3, a.top.data() + at, kAmxChunk);
          _tile_loadd(4, a.mid.data() + at, kAmxChunk);
          _tile_loadd(5, a.low.data() + at, kAmxChunk);
          _tile_loadd(6, slab[s].base + c * kAmxChunk / 4 * slab[s].stride, slab[s].stride);
          _tile_dpbssd(0, 3, 6);
          _tile_dpbusd(1, 4, 6);
          _tile_dpbusd(2, 5, 6);
          ahead.step();
        }
        _tile_stored(0, sums[0], 64);
        _tile_stored(1, sums[1], 64);
        _tile_stored(2, sums[2], 64);
        for (int64_t r = 0; r < std::min(kTileRows, a.rows - m); ++r) {
          __m256 halves[2];
          for (int h = 0; h < 2; ++h) {
            auto plane = [&](int p) {
              return _mm512_cvtepi32_pd(
                  _mm256_load_si256(reinterpret_cast<const __m256i*>(sums[p] + r * 16 + h * 8)));
            };
            halves[h] = _mm512_cvtpd_ps(_mm512_fmadd_pd(
                plane(0), top_weight, _mm512_fmadd_pd(plane(1), mid_weight, plane(2))));
          }
          const __m512 sum = _mm512_insertf32x8(_mm512_castps256_ps512(halves[0]), halves[1], 1);
          _mm512_mask_storeu_ps(
              out + (m + r) * out_stride + (g - n0) + s * kTileRows, valid[s],
              _mm512_mul_ps(_mm512_mul_ps(sum, _mm512_set1_ps(a.row_scales[m + r])),
                            channel_scale[s]));
        }
      }
    }
  }
}

// w8a8: rows m.. (kRowTiles tiles of 16) x slabs (kSlabs of 16 channels) of Σ_K a·w in int32.
template <int kRowTiles, int kSlabs>
void int8Tiles(const int8_t* a, int64_t k, int64_t m, const WeightSlab& slab0,
               const WeightSlab& slab1, int32_t* sums /* [32 rows][32 channels] */,
               PackAhead* ahead) {
  _tile_zero(0);
  if (kSlabs > 1) _tile_zero(1);
  if (kRowTiles > 1) _tile_zero(2);
  if (kRowTiles > 1 && kSlabs > 1) _tile_zero(3);
  for (int64_t c = 0; c < k / kAmxChunk; ++c) {
    _tile_loadd(4, a + m * k + c * kAmxChunk, k);
    _tile_loadd(6, slab0.base + c * kAmxChunk / 4 * slab0.stride, slab0.stride);
    _tile_dpbssd(0, 4, 6);
    if (kSlabs > 1) {
      _tile_loadd(7, slab1.base + c * kAmxChunk / 4 * slab1.stride, slab1.stride);
      _tile_dpbssd(1, 4, 7);
    }
    if (kRowTiles > 1) {
      _tile_loadd(5, a + (m + kTileRows) * k + c * kAmxChunk, k);
      _tile_dpbssd(2, 5, 6);
      if (kSlabs > 1) _tile_dpbssd(3, 5, 7);
    }
    ahead->step();
  }
  constexpr int64_t kStride = 32 * sizeof(int32_t);
  _tile_stored(0, sums, kStride);
  if (kSlabs > 1) _tile_stored(1, sums + 16, kStride);
  if (kRowTiles > 1) _tile_stored(2, sums + 16 * 32, kStride);
  if (kRowTiles > 1 && kSlabs > 1) _tile_stored(3, sums + 16 * 32 + 16, kStride);
}

// The w8a8 products of rows 0..rows-1 with channels n0..n1-1, 2 x 2 tiles at a time; `sink(m,
// n, sums)` takes each block's int32 sums (rows m.., channels n.., [32 rows][32 channels]).
template <typename Sink>
void int8Products(const int8_t* a, int64_t rows, const int8_t* w, int64_t k, int64_t n0, int64_t n1,
                  const Int8PanelPack* pack, int ahead_calls, Sink&& sink) {
  std::vector<int8_t> scratch(slabInPack(pack, n0) ? 0 : static_cast<size_t>(2 * k * kTileRows));
  alignas(64) int32_t sums[32 * 32];
  TileScope tiles;
  PackAhead ahead(pack, k, n0, n1, ahead_calls,
                  (rows + 2 * kTileRows - 1) / (2 * kTileRows) *
                      ((n1 - n0 + 2 * kTileRows - 1) / (2 * kTileRows)) * (k / kAmxChunk));
  for (int64_t n = n0; n < n1; n += 2 * kTileRows) {
    const bool two_slabs = n + kTileRows < n1;
    const WeightSlab slab0 = weightSlab(w, k, n, n1, pack, scratch.data());
    const WeightSlab slab1 =
        two_slabs ? weightSlab(w, k, n + kTileRows, n1, pack, scratch.data() + k * kTileRows)
                  : slab0;
    for (int64_t m = 0; m < rows; m += 2 * kTileRows) {
      const bool two_tiles = m + kTileRows < rows;
      if (two_tiles && two_slabs)
        int8Tiles<2, 2>(a, k, m, slab0, slab1, sums, &ahead);
      else if (two_tiles)
        int8Tiles<2, 1>(a, k, m, slab0, slab1, sums, &ahead);
      else if (two_slabs)
        int8Tiles<1, 2>(a, k, m, slab0, slab1, sums, &ahead);
      else
        int8Tiles<1, 1>(a, k, m, slab0, slab1, sums, &ahead);
      sink(m, n, static_cast<const int32_t*>(sums));
    }
  }
}

void int8Sums(const int8_t* a, int64_t rows, const int8_t* w, int64_t k, int64_t n0, int64_t n1,
              int32_t* out, int64_t out_stride, const Int8PanelPack* pack) {
  int8Products(a, rows, w, k, n0, n1, pack, 1, [&](int64_t m, int64_t n, const int32_t* sums) {
    const int64_t channels = std::min(2 * kTileRows, n1 - n);
    for (int64_t r = 0; r < std::min(2 * kTileRows, rows - m); ++r)
      std::memcpy(out + (m + r) * out_stride + (n - n0), sums + r * 32,
                  static_cast<size_t>(channels) * sizeof(int32_t));
  });
}

// The sums straight to floats in 16 lanes: (float(sum) * row scale) * channel scale, the order
// of the other levels' w8a8 (quantMatMul), so the value is theirs bit for bit.
void int8Scaled(const int8_t* a, int64_t rows, const int8_t* w, int64_t k, int64_t n0, int64_t n1,
                const float* row_scales, const float* channel_scales, float* out,
                int64_t out_stride, const Int8PanelPack* pack, int ahead_calls) {
  int8Products(
      a, rows, w, k, n0, n1, pack, ahead_calls, [&](int64_t m, int64_t n, const int32_t* sums) {
        for (int64_t half = 0; half < 2 && n + half * kTileRows < n1; ++half) {
          const int64_t c0 = n + half * kTileRows, count = std::min(kTileRows, n1 - c0);
          const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1);
          const __m512 channel = _mm512_maskz_loadu_ps(valid, channel_scales + (c0 - n0));
          for (int64_t r = 0; r < std::min(2 * kTileRows, rows - m); ++r) {
            const __m512 sum =
                _mm512_cvtepi32_ps(_mm512_load_si512(sums + r * 32 + half * kTileRows));
            _mm512_mask_storeu_ps(
                out + (m + r) * out_stride + (c0 - n0), valid,
                _mm512_mul_ps(_mm512_mul_ps(sum, _mm512_set1_ps(row_scales[m + r])), channel));
          }
        }
      });
}

// quantizeActivations' 16-bit codes of one row (int16BlockScales), 16 lanes at a time, each
// shifted left by kInt16MaxHalvings less its block's halvings and written as its three bytes at
// amxCodeAt(r, ·); the row's unhalved scale.
#include "cpu/quant_round_avx512.inc"

void quantizeRowPlanes(const float* x, int64_t r, AmxActivations* out) {
  const int64_t k = out->k, blocks = k / kQuantBlock;
  const float row_absmax = rowAbsmax(x, k);
  for (int64_t b0 = 0; b0 < blocks; b0 += 16) {
    const int64_t count = std::min<int64_t>(16, blocks - b0);
    const Int16BlockScales group = int16BlockScales(x + b0 * kQuantBlock, count, row_absmax);
    alignas(64) int32_t shifts[16];
    alignas(64) float inverses[16];
    _mm512_store_si512(shifts,
                       _mm512_sub_epi32(_mm512_set1_epi32(kInt16MaxHalvings), group.halvings));
    _mm512_store_ps(inverses, group.inverses);
    for (int64_t b = b0; b < b0 + count; ++b) {
      __m512i codes[2];
      scaledBlockCodes(x + b * kQuantBlock, _mm512_set1_ps(inverses[b - b0]), 32767.0f, &codes[0],
                       &codes[1]);
      for (int half_block = 0; half_block < 2; ++half_block) {
        const __m512i code = _mm512_sll_epi32(codes[half_block], _mm_cvtsi32_si128(shifts[b - b0]));
        const int64_t at = amxCodeAt(r, b * kQuantBlock + half_block * 16, k);
        // vpmovdb keeps each lane's low byte.
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out->top.data() + at),
                         _mm512_cvtepi32_epi8(_mm512_srai_epi32(code, 16)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out->mid.data() + at),
                         _mm512_cvtepi32_epi8(_mm512_srai_epi32(code, 8)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out->low.data() + at),
                         _mm512_cvtepi32_epi8(code));
      }
    }
  }
  out->row_scales[r] = int16BlockScale(row_absmax, 0);
}

}  // namespace

LLMC_TARGET_END

bool quantDotHasAmx() { return cpuIsa() >= CpuIsa::kAmx; }

void quantizeAmxRow(const float* x, int64_t r, AmxActivations* out) {
  quantizeRowPlanes(x, r, out);
}

void quantDotTileAmx(const QuantWeight& w, int64_t n0, int64_t n1, const AmxActivations& a,
                     float* out, int64_t out_stride, const Int8PanelPack* pack, int ahead) {
  planeTiles(w, n0, n1, a, out, out_stride, pack, ahead);
}

void dotInt8TileAmx(const int8_t* a, int64_t rows, const int8_t* w, int64_t k, int64_t n0,
                    int64_t n1, int32_t* out, int64_t out_stride, const Int8PanelPack* pack) {
  int8Sums(a, rows, w, k, n0, n1, out, out_stride, pack);
}

void quantDotInt8TileAmx(const int8_t* a, int64_t rows, const int8_t* w, int64_t k, int64_t n0,
                         int64_t n1, const float* row_scales, const float* channel_scales,
                         float* out, int64_t out_stride, const Int8PanelPack* pack, int ahead) {
  int8Scaled(a, rows, w, k, n0, n1, row_scales, channel_scales, out, out_stride, pack, ahead);
}
#else
bool quantDotHasAmx() { return false; }
void quantDotTileAmx(const QuantWeight&, int64_t, int64_t, const AmxActivations&, float*, int64_t,
                     const Int8PanelPack*, int) {}
void dotInt8TileAmx(const int8_t*, int64_t, const int8_t*, int64_t, int64_t, int64_t, int32_t*,
                    int64_t, const Int8PanelPack*) {}
void quantDotInt8TileAmx(const int8_t*, int64_t, const int8_t*, int64_t, int64_t, int64_t,
                         const float*, const float*, float*, int64_t, const Int8PanelPack*, int) {}
void quantizeAmxRow(const float*, int64_t, AmxActivations*) {}
#endif

}  // namespace llmc
