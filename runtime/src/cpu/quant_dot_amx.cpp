// The AMX forms of prefill's integer products (cpu/quant_dot.h). A tile register holds up to
// 16 rows of 64 bytes; one TMUL instruction multiplies a 16 x 4k int8 tile of activations by a
// 4k x 16 tile of weights (packed four consecutive K values per 32-bit column, the "VNNI" layout)
// into a 16 x 16 int32 tile: 16 * 16 * 4k multiply-adds, exact.
//
// - int8 weights, int16 activations (`int8`): the AMX has no int16 product, so each activation
//   code c (|c| <= 32767) is split into a signed high byte and an unsigned low byte, c = 256 * h
//   + l, and a block of 32 (one activation scale) takes two products, h x w (tdpbssd) and l x w
//   (tdpbusd), recombined in int32: 256 * Σhw + Σlw = Σcw exactly (|Σhw| <= 128 * 128 * 32), the
//   same integer as every other level's. Each block's sum then leaves the tile for the vector
//   registers: float, times the block's activation scale, added in float per lane (16 output
//   channels per register, one register per row); the channel scale at the end. The float sum
//   over blocks runs in another order than the other levels' (rounding only; the tests bound it).
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
#include "cpu/isa.h"
#include "core/quant.h"
#include "core/scale.h"
#include "cpu/quant_dot.h"

namespace llmc {

namespace {
constexpr int64_t kTileRows = 16;  // rows of a tile; output channels per tile (16 int32 columns)
}  // namespace

void resizeAmxActivations(int64_t rows, int64_t k, AmxActivations* out) {
  const int64_t padded = (rows + kTileRows - 1) / kTileRows * kTileRows, blocks = k / kQuantBlock;
  out->rows = rows;
  out->k = k;
  // Capacity is kept (a caller may reuse one between calls); the padding rows are zeroed.
  auto fit = [](auto& v, int64_t size, int64_t from) {
    if (v.size() < static_cast<size_t>(size)) v.resize(static_cast<size_t>(size));
    std::fill(v.begin() + from, v.begin() + size, 0);
  };
  // The codes' padding rows share their tile with the last real rows: that tile is zeroed whole.
  fit(out->high, padded * k, rows / kTileRows * kTileRows * k);
  fit(out->low, padded * k, rows / kTileRows * kTileRows * k);
  fit(out->scales, padded * blocks, rows * blocks);
}

void setAmxActivationRow(const QuantizedActivations& a, int64_t r, AmxActivations* out) {
  const int64_t k = out->k, blocks = k / kQuantBlock;
  for (int64_t i = 0; i < k; ++i) {
    const int32_t code = a.q16[static_cast<size_t>(i)];
    out->high[amxCodeAt(r, i, k)] = static_cast<int8_t>(code >> 8);  // floor(code / 256)
    out->low[amxCodeAt(r, i, k)] = static_cast<uint8_t>(code & 0xff);
  }
  std::memcpy(out->scales.data() + r * blocks, a.scales.data(),
              static_cast<size_t>(blocks) * sizeof(float));
}

#if defined(__x86_64__) && defined(__GNUC__)
LLMC_ALLOW_UNDEFINED_VECTORS

LLMC_TARGET_BEGIN("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")

namespace {

// The tile configuration (palette 1): tiles 0-3 are 16 x 16 int32 sums, 4-5 activations
// (16 rows x `a_bytes`), 6-7 weights (a_bytes / 4 rows x 16 channels x 4 bytes).
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
  explicit TileScope(int a_bytes) {
    TileConfig config;
    for (int t = 0; t < 4; ++t) {
      config.rows[t] = kTileRows;
      config.colsb[t] = 64;
    }
    for (int t = 4; t < 6; ++t) {
      config.rows[t] = kTileRows;
      config.colsb[t] = static_cast<uint16_t>(a_bytes);
    }
    for (int t = 6; t < 8; ++t) {
      config.rows[t] = static_cast<uint8_t>(a_bytes / 4);
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

// The int8-weight / int16-activation product for one 16-row tile of activations and one slab
// of 16 channels (packed with chunks of kQuantBlock): acc[r] += Σ_blocks float(Σcw) * scale.
// Three stages in flight: block b's products (tiles 0/1 for even blocks, 2/3 for odd ones), block
// b - 1's sums leaving the tiles for a buffer, and block b - 2's buffer scaled into the
// accumulators (read right after the tile store it stalls). GCC's tile intrinsics paste the tile
// number into the instruction: it must be a literal, hence macros rather than templates.
#define LLMC_AMX_INT16_BLOCK(kHigh, kLow, block)                                       \
  do {                                                                                 \
    _tile_zero(kHigh);                                                                 \
    _tile_zero(kLow);                                                                  \
    _tile_loadd(4, a.high.data() + amxCodeAt(m, (block)*kQuantBlock, k), kQuantBlock); \
    _tile_loadd(5, a.low.data() + amxCodeAt(m, (block)*kQuantBlock, k), kQuantBlock);  \
    _tile_loadd(6, slab.base + (block)*kQuantBlock / 4 * slab.stride, slab.stride);    \
    _tile_dpbssd(kHigh, 4, 6);                                                         \
    _tile_dpbusd(kLow, 5, 6);                                                          \
  } while (0)
#define LLMC_AMX_INT16_STORE(kHigh, kLow, buffer) \
  do {                                            \
    _tile_stored(kHigh, (buffer).high, 64);       \
    _tile_stored(kLow, (buffer).low, 64);         \
  } while (0)

struct alignas(64) BlockSums {
  int32_t high[kTileRows * 16];
  int32_t low[kTileRows * 16];
};

// acc[r] += float(256 * high[r] + low[r]) * scales[r * stride], per lane.
inline void scaleBlock(const BlockSums& sums, const float* scales, int64_t stride, __m512* acc) {
#pragma GCC unroll 16
  for (int r = 0; r < kTileRows; ++r) {
    const __m512i sum =
        _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(sums.high + r * 16), 8),
                         _mm512_load_si512(sums.low + r * 16));
    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(scales[r * stride]), acc[r]);
  }
}

void int16Tiles(const QuantWeight& w, int64_t n0, int64_t n1, const AmxActivations& a, float* out,
                int64_t out_stride, const Int8PanelPack* pack) {
  const int64_t k = a.k, blocks = k / kQuantBlock;
  // n advances by 16s from n0: every slab comes from the pack, or none does.
  std::vector<int8_t> scratch(slabInPack(pack, n0) ? 0 : static_cast<size_t>(k * kTileRows));
  BlockSums sums[2];
  TileScope tiles(static_cast<int>(kQuantBlock));
  for (int64_t n = n0; n < n1; n += kTileRows) {
    const int64_t count = std::min(kTileRows, n1 - n);
    const WeightSlab slab =
        weightSlab(static_cast<const int8_t*>(w.data), k, n, n1, pack, scratch.data());
    alignas(64) float channel_scales[16] = {};
    for (int64_t c = 0; c < count; ++c) channel_scales[c] = w.scale(n + c, 0);
    const __m512 channel_scale = _mm512_load_ps(channel_scales);
    const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1);
    for (int64_t m = 0; m < a.rows; m += kTileRows) {
      __m512 acc[kTileRows];
      for (__m512& v : acc) v = _mm512_setzero_ps();
      const float* scales = a.scales.data() + m * blocks;
      LLMC_AMX_INT16_BLOCK(0, 1, 0);
      if (blocks > 1) LLMC_AMX_INT16_BLOCK(2, 3, 1);
      LLMC_AMX_INT16_STORE(0, 1, sums[0]);
      for (int64_t b = 2;; b += 2) {
        if (b < blocks) LLMC_AMX_INT16_BLOCK(0, 1, b);
        if (b - 1 < blocks) LLMC_AMX_INT16_STORE(2, 3, sums[1]);
        scaleBlock(sums[0], scales + b - 2, blocks, acc);
        if (b - 1 >= blocks) break;
        if (b + 1 < blocks) LLMC_AMX_INT16_BLOCK(2, 3, b + 1);
        if (b < blocks) LLMC_AMX_INT16_STORE(0, 1, sums[0]);
        scaleBlock(sums[1], scales + b - 1, blocks, acc);
        if (b >= blocks) break;
      }
      for (int64_t r = 0; r < std::min(kTileRows, a.rows - m); ++r)
        _mm512_mask_storeu_ps(out + (m + r) * out_stride + (n - n0), valid,
                              _mm512_mul_ps(acc[r], channel_scale));
    }
  }
}

// w8a8: rows m.. (kRowTiles tiles of 16) x slabs (kSlabs of 16 channels) of Σ_K a·w in int32.
constexpr int64_t kInt8Chunk = 64;

template <int kRowTiles, int kSlabs>
void int8Tiles(const int8_t* a, int64_t k, int64_t m, const WeightSlab& slab0,
               const WeightSlab& slab1, int32_t* sums /* [32 rows][32 channels] */) {
  _tile_zero(0);
  if (kSlabs > 1) _tile_zero(1);
  if (kRowTiles > 1) _tile_zero(2);
  if (kRowTiles > 1 && kSlabs > 1) _tile_zero(3);
  for (int64_t c = 0; c < k / kInt8Chunk; ++c) {
    _tile_loadd(4, a + m * k + c * kInt8Chunk, k);
    _tile_loadd(6, slab0.base + c * kInt8Chunk / 4 * slab0.stride, slab0.stride);
    _tile_dpbssd(0, 4, 6);
    if (kSlabs > 1) {
      _tile_loadd(7, slab1.base + c * kInt8Chunk / 4 * slab1.stride, slab1.stride);
      _tile_dpbssd(1, 4, 7);
    }
    if (kRowTiles > 1) {
      _tile_loadd(5, a + (m + kTileRows) * k + c * kInt8Chunk, k);
      _tile_dpbssd(2, 5, 6);
      if (kSlabs > 1) _tile_dpbssd(3, 5, 7);
    }
  }
  constexpr int64_t kStride = 32 * sizeof(int32_t);
  _tile_stored(0, sums, kStride);
  if (kSlabs > 1) _tile_stored(1, sums + 16, kStride);
  if (kRowTiles > 1) _tile_stored(2, sums + 16 * 32, kStride);
  if (kRowTiles > 1 && kSlabs > 1) _tile_stored(3, sums + 16 * 32 + 16, kStride);
}

void int8Products(const int8_t* a, int64_t rows, const int8_t* w, int64_t k, int64_t n0, int64_t n1,
                  int32_t* out, int64_t out_stride, const Int8PanelPack* pack) {
  std::vector<int8_t> scratch(slabInPack(pack, n0) ? 0 : static_cast<size_t>(2 * k * kTileRows));
  alignas(64) int32_t sums[32 * 32];
  TileScope tiles(static_cast<int>(kInt8Chunk));
  for (int64_t n = n0; n < n1; n += 2 * kTileRows) {
    const bool two_slabs = n + kTileRows < n1;
    const WeightSlab slab0 = weightSlab(w, k, n, n1, pack, scratch.data());
    const WeightSlab slab1 =
        two_slabs ? weightSlab(w, k, n + kTileRows, n1, pack, scratch.data() + k * kTileRows)
                  : slab0;
    const int64_t channels = std::min(2 * kTileRows, n1 - n);
    for (int64_t m = 0; m < rows; m += 2 * kTileRows) {
      const bool two_tiles = m + kTileRows < rows;
      if (two_tiles && two_slabs)
        int8Tiles<2, 2>(a, k, m, slab0, slab1, sums);
      else if (two_tiles)
        int8Tiles<2, 1>(a, k, m, slab0, slab1, sums);
      else if (two_slabs)
        int8Tiles<1, 2>(a, k, m, slab0, slab1, sums);
      else
        int8Tiles<1, 1>(a, k, m, slab0, slab1, sums);
      for (int64_t r = 0; r < std::min(2 * kTileRows, rows - m); ++r)
        std::memcpy(out + (m + r) * out_stride + (n - n0), sums + r * 32,
                    static_cast<size_t>(channels) * sizeof(int32_t));
    }
  }
}

// quantizeActivations' 16-bit codes of one row, 16 lanes at a time, written as high and low
// bytes (block b's at b * block_stride): per block of 32 the absmax, scale = absmax / 32767, and
// each x * (1 / scale) rounded half away from zero and clamped to ±32767 (NaN to -32767), as
// roundClamped does.
#include "cpu/quant_round_avx512.inc"

void quantizeRowCodes(const float* x, int64_t k, int8_t* high, uint8_t* low, int64_t block_stride,
                      float* scales) {
  for (int64_t b = 0; b < k / kQuantBlock; ++b) {
    __m512i codes[2];
    scales[b] = int16BlockCodes(x + b * kQuantBlock, &codes[0], &codes[1]);
    for (int half_block = 0; half_block < 2; ++half_block) {
      const __m512i code = codes[half_block];
      const int64_t at = b * block_stride + half_block * 16;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(high + at),
                       _mm512_cvtepi32_epi8(_mm512_srai_epi32(code, 8)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(low + at),
                       _mm512_cvtepi32_epi8(_mm512_and_si512(code, _mm512_set1_epi32(0xff))));
    }
  }
}

}  // namespace

LLMC_TARGET_END

bool quantDotHasAmx() { return cpuIsa() >= CpuIsa::kAmx; }

void quantizeAmxRow(const float* x, int64_t r, AmxActivations* out) {
  const int64_t first = amxCodeAt(r, 0, out->k);
  quantizeRowCodes(x, out->k, out->high.data() + first, out->low.data() + first,
                   kTileRows * kQuantBlock, out->scales.data() + r * (out->k / kQuantBlock));
}

void quantDotTileAmx(const QuantWeight& w, int64_t n0, int64_t n1, const AmxActivations& a,
                     float* out, int64_t out_stride, const Int8PanelPack* pack) {
  int16Tiles(w, n0, n1, a, out, out_stride, pack);
}

void dotInt8TileAmx(const int8_t* a, int64_t rows, const int8_t* w, int64_t k, int64_t n0,
                    int64_t n1, int32_t* out, int64_t out_stride, const Int8PanelPack* pack) {
  int8Products(a, rows, w, k, n0, n1, out, out_stride, pack);
}
#else
bool quantDotHasAmx() { return false; }
void quantDotTileAmx(const QuantWeight&, int64_t, int64_t, const AmxActivations&, float*, int64_t,
                     const Int8PanelPack*) {}
void dotInt8TileAmx(const int8_t*, int64_t, const int8_t*, int64_t, int64_t, int64_t, int32_t*,
                    int64_t, const Int8PanelPack*) {}
void quantizeAmxRow(const float*, int64_t, AmxActivations*) {}
#endif

}  // namespace llmc
