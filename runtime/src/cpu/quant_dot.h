// The dot products of LlmQuantMatMul (cpu/quant_matmul.cpp), exposed for the tests that pin the
// AVX2 path to the scalar one.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/quant.h"
#include "core/sparse.h"
#include "cpu/cache_line_vector.h"

namespace llmc {

class ThreadPool;

// One row of activations quantized to integers: int8 (`q`) for 4-bit weights, int16 (`q16`) for
// int8 weights (int8 x int8 cost the demo model 0.3 points of top-1 agreement); one float scale
// per block of kQuantBlock (int8: absmax / 127; int16: int16BlockScale), round to nearest, and
// per weight group the sum of scale * Σq over its blocks (what a zero point multiplies).
struct QuantizedActivations {
  std::vector<int8_t> q;
  std::vector<int16_t> q16;
  std::vector<float> scales;
  std::vector<float> group_sums;
  // For 4-bit weights and K a multiple of 64, q in the order of the pair kernel (quantDotRows):
  // per pair of blocks, the first 16 values of each, then the last 16 of each; and each block's
  // scale and a quarter of its sum (scale * Σq) four times ([s_2p x4, s_2p+1 x4]).
  std::vector<int8_t> q_pairs;
  std::vector<float> pair_scales;
  std::vector<float> pair_block_sums;
};
void quantizeActivations(const float* x, int64_t k, int64_t group, int bits,
                         QuantizedActivations* out);

// int16 codes' block scales: the row's absmax / 32767 halved e times, e the most (up to
// kInt16MaxHalvings) with block_absmax * 2^e <= row_absmax. Each block's codes keep at least
// half of the 16 bits' range (one more bit lost than at its own absmax / 32767; a block below
// 1/256 of its row's absmax reaches 2^23 * its absmax / the row's), and the scales of a row
// differ by powers of two only, so that a row's codes shifted left by kInt16MaxHalvings - e are
// 24-bit integers over one scale (the AMX tiles sum all of K at once that way;
// cpu/quant_dot_amx.cpp). On the demo model top-1 agreement stayed 99.2% and KL divergence
// 1.42e-4 (docs/quantization.md). Every level computes the same floats here.
constexpr int kInt16MaxHalvings = 8;
inline int int16BlockHalvings(float block_absmax, float row_absmax) {
  // A row with an infinity has an infinite scale whatever the halvings: none, so that each
  // block's scale still tells its halvings (setAmxActivationRow).
  if (row_absmax == INFINITY) return 0;
  int e = 0;
  // Doubling is exact (or overflows to infinity, which is never <= a finite row absmax).
  for (float m = block_absmax * 2.0f; e < kInt16MaxHalvings && m <= row_absmax; m *= 2.0f) ++e;
  return e;
}
inline float int16BlockScale(float row_absmax, int halvings) {
  return row_absmax / 32767.0f * (1.0f / static_cast<float>(1 << halvings));
}
// The activation bits a weight format's kernel uses: 16 for int8 weights, 8 for 4-bit.
int activationBits(const QuantTraits& traits);
// Σ over the blocks of output channel `row`: dot(a.q, wq) * a.scales[block] * weight scale, with
// each block's dot product exact in integers.
float quantDotScalar(const QuantWeight& w, int64_t row, const QuantizedActivations& a);
// The same with AVX2/FMA (summed in another order); only where quantDotHasAvx2().
float quantDotAvx2(const QuantWeight& w, int64_t row, const QuantizedActivations& a);
bool quantDotHasAvx2();
// out[i] = dot for output channels n0 + i, i < n1 - n0. With AVX2, int8 weights and 4-bit
// weights whose K is a multiple of 64 and whose groups are 32 or a multiple of 64 take the
// tiled kernels (quantDotRowsTiled says so; 4-bit ones over pairs of blocks), which run
// `channels_per_pass` (4 or 1) channels per pass; everything else takes one quantDotAvx2 (or
// quantDotScalar) per channel. Four per pass share each activation load, which pays when many
// rows of activations reuse the weights from cache (prefill); one per pass reads the weight in
// memory order, which is what a single row (decode) is bound by (channelsPerPass below).
void quantDotRows(const QuantWeight& w, int64_t n0, int64_t n1, const QuantizedActivations& a,
                  float* out, int channels_per_pass);
bool quantDotRowsTiled(const QuantWeight& w, const QuantizedActivations& a);

// Several rows of activations at once (prefill): out[r * out_stride + i] = the dot product of
// rows[r] with output channel n0 + i, for r < row_count and i < n1 - n0. Where the CPU has
// AVX-512 (quantDotHasAvx512) and the weight takes the tiled kernels, tiles of up to
// kQuantTileRows rows x `channels_per_pass` channels share each weight load and unpack across
// the rows (cpu/quant_dot_avx512.cpp), except one row of a 4-bit weight (decode), which takes
// quantDotInt4StreamAvx512 below; elsewhere quantDotRows for each row.
constexpr int64_t kQuantTileRows = 4;
void quantDotRowBlock(const QuantWeight& w, int64_t n0, int64_t n1,
                      const QuantizedActivations* rows, int64_t row_count, float* out,
                      int64_t out_stride, int channels_per_pass);
bool quantDotHasAvx512();
// The AVX-512 tiles themselves; only where quantDotHasAvx512() and quantDotRowsTiled().
void quantDotTileAvx512(const QuantWeight& w, int64_t n0, int64_t n1,
                        const QuantizedActivations* rows, int64_t row_count, float* out,
                        int64_t out_stride, int channels_per_pass);

// w8a8: a row of activations as int8 with one scale (absmax / 127), and exact int32 dot
// products over K (K <= kMaxPerTokenK keeps the sum inside int32).
constexpr int64_t kMaxPerTokenK = 65536;
float quantizeRowPerToken(const float* x, int64_t k, int8_t* q);
// The reference loop, and the AVX-512 one (the same codes and scale, bit for bit; only where
// quantDotHasAvx512()); quantizeRowPerToken takes the one the level allows.
float quantizeRowPerTokenScalar(const float* x, int64_t k, int8_t* q);
float quantizeRowPerTokenAvx512(const float* x, int64_t k, int8_t* q);
int32_t dotInt8Scalar(const int8_t* a, const int8_t* w, int64_t k);
int32_t dotInt8Avx2(const int8_t* a, const int8_t* w, int64_t k);
// out[i] = dot(a, w + i * k) for i < count: with AVX2 `channels_per_pass` (4 or 1) channels per
// pass, four sharing each activation load (exact, as dotInt8Avx2); the scalar loop elsewhere.
void dotInt8Rows(const int8_t* a, const int8_t* w, int64_t k, int64_t count, int32_t* out,
                 int channels_per_pass);

// Decode's product of one row with a 4-bit weight (where quantDotRowsTiled): the weight read in
// its own layout, 64 packed bytes (four blocks) per load, vpdpbusd (AVX-512 VNNI) or vpmaddubsw
// + vpmaddwd into int32 lanes per block, each lane times its block's activation and weight
// scales, the zero points' term per group: quantDotScalar's integers, summed in float in another
// order. Only where quantDotHasAvx512().
void quantDotInt4StreamAvx512(const QuantWeight& w, int64_t n0, int64_t n1,
                              const QuantizedActivations& a, float* out);

// AVX-512 panels (cpu/quant_dot_avx512.cpp): prefill's products of int8 weights with the output
// channels in the registers' lanes, where enough rows share the weights to pay for repacking
// them (fewer take the tiles above, or dotInt8Rows for w8a8): each call repacks 32 channels at a
// time into the layout of vpdpwssd (int16 pairs) or vpdpbusd (int8 quads), then runs up to 6 or 8
// rows against them at once. The thresholds are where the panels overtook the tiles in
// llmc_kernel_bench (768 x 768, AVX-512 VNNI; the plain AVX-512 level takes the same thresholds,
// not measured apart): int16 116 against 94 G multiply-adds/s at 16 rows, 77 against 92 at 8; w8a8
// 116 against 79 at 8 rows, 65 against 78 at 4.
constexpr int64_t kInt16PanelMinRows = 16;
constexpr int64_t kInt8PanelMinRows = 8;
// quantizeActivations(x, k, ·, 16, ·)'s int16 codes and per-block scales, bit for bit, in 16
// lanes; only where quantDotHasAvx512().
void quantizeInt16RowAvx512(const float* x, int64_t k, int16_t* codes, float* scales);
// Per block of x (k a multiple of kQuantBlock): quantizeActivations' codes into q16 (bits 16)
// or q8 (bits 8), its scale and the integer sum of its codes, bit for bit, in 16 lanes; what
// quantizeActivations runs where quantDotHasAvx512().
void quantizeBlocksAvx512(const float* x, int64_t k, int bits, int16_t* q16, int8_t* q8,
                          float* scales, int32_t* sums);
// out[r * out_stride + i] = the product of row r (codes [rows, k], scales [rows, k /
// kQuantBlock]) with output channel n0 + i of an int8 weight: per block the exact integer dot
// product times the block's scale, added in float (one fused multiply-add per block), times the
// channel's scale at the end; quantDotScalar's value within float32's rounding. Only where
// quantDotHasAvx512().
// An int8 weight repacked once for these panels (as Int4PanelPack below): per 32 channels the
// codes in pairs (k * 32 bytes, panel p at p * k * 32) and the channels' scales.
struct Int16PanelPack {
  int64_t n = 0, k = 0;
  std::shared_ptr<int8_t> codes;  // 64-byte aligned
  std::vector<float> scales;      // [panels * 32]
  size_t bytes() const;
};
// The pack, the same bytes at every level (built with AVX-512 transposes where the CPU has them).
std::shared_ptr<const Int16PanelPack> packInt16Panels(const QuantWeight& w, ThreadPool* pool);
// One panel of it: channels n..n + 16 * slabs - 1 (zeros at or past n_end) into `packed`,
// packed[(q * slabs + s) * 32 + 2c + j] = W[n + 16s + c][2q + j], and their scales (zeros past
// n_end), without AVX-512 instructions.
void int16PanelSetupPortable(const QuantWeight& w, int64_t n, int64_t n_end, int slabs,
                             int8_t* packed, float* scales);
// With `pack` (of w; n0 a multiple of 32) the products read it instead of repacking: the same
// bits.
void quantDotPanelAvx512(const QuantWeight& w, int64_t n0, int64_t n1, const int16_t* codes,
                         const float* scales, int64_t rows, float* out, int64_t out_stride,
                         const Int16PanelPack* pack = nullptr);
// quantizeActivations(x, k, ·, 16, ·)'s int16 codes and per-block scales, bit for bit, at any
// level (quantizeInt16RowAvx512 where the CPU has AVX-512).
void quantizeInt16Row(const float* x, int64_t k, int16_t* codes, float* scales);
// The same panels on AVX2 (cpu/quant_panel_avx2.cpp) for CPUs without AVX-512: the same pack
// and per output the same operations in the same order, so the AVX-512 panels' bits; tiles of
// 4 rows x 16 channels, the float sums in `out` between blocks. Where quantDotHasAvx2Panels().
bool quantDotHasAvx2Panels();
// Without AVX-512 the panels take an engine's int8 weights (their pack kept) from 2 rows: in
// llmc_kernel_bench on the AVX2 EPYC (Zen 3) of 2026-12-07, 768 x 768 with the pack kept, they
// ran at 40-61 G multiply-adds/s from 2 to 512 rows against the row tiles' 21-37 (at 2 rows 40-47
// against 27, at 8 rows 39-55 against 23-30). A sparse weight takes them from as many rows (its
// product has the dense weight's bits), each call repacking its expanded rows.
constexpr int64_t kAvx2Int16PanelMinRows = 2;
void quantDotPanelAvx2(const QuantWeight& w, int64_t n0, int64_t n1, const int16_t* codes,
                       const float* scales, int64_t rows, float* out, int64_t out_stride,
                       const Int16PanelPack* pack = nullptr);
// 4-bit weights (K a multiple of 64) from kInt4PanelMinRows rows: out[r * out_stride + i] = the
// product of rows[r] (quantizeActivations' 8-bit codes, block scales and group sums) with output
// channel n0 + i, the channels repacked 32 at a time into unsigned codes in vpdpbusd's layout
// (vpmaddubsw + vpmaddwd without VNNI): per block the exact integer dot product of the codes
// times the block's and the group's scales, added in float, less the zero points' term per group
// as the register tiles subtract it; quantDotScalar's value within float32's rounding. Only where
// quantDotHasAvx512().
constexpr int64_t kInt4PanelMinRows = 4;
// The AVX2 4-bit panels take the same threshold. At 2 rows llmc_kernel_bench has them ahead of
// the row tiles (AVX2 EPYC, 2026-12-07, 768 x 768: 40-43 against 28 G multiply-adds/s), but
// two sequences decoding at once ran slower with them (the 110M Llama's 4-bit engine, `llmc
// bench --batch 2`, one thread, 5 rounds alternated: 125-131 against 141-150 new tokens/s):
// two rows are bound by the bytes read, and the pack's float scales and zero points make it
// a third larger than the weight's codes and half-precision scales.
// A 4-bit weight repacked once for those panels (an engine's weight, kept by the executor: at 8
// rows repacking per call cost as much as the products): per 32 output channels, the codes in
// the panels' order two to a byte (k * 16 bytes; k * 8 for a last panel of 16 channels or
// fewer), and per group the channels' float scales and scale x zero point (32 each).
struct Int4PanelPack {
  int64_t n = 0, k = 0, groups = 0;
  std::shared_ptr<uint8_t> codes;    // 64-byte aligned; panel p at p * k * 16
  std::vector<float> scales, zeros;  // panel p at p * groups * 32
  size_t bytes() const;
};
// The pack of `w` (K a multiple of 64), its panels in parallel on `pool` (may be null): the
// same bytes at every level (built with AVX-512 transposes where the CPU has them).
std::shared_ptr<const Int4PanelPack> packInt4Panels(const QuantWeight& w, ThreadPool* pool);
// One panel of it (channels n..n + 16 * slabs - 1, zeros at or past n_end) without AVX-512
// instructions: the codes into `packed`, per group the scales and scale x zero point.
void int4PanelSetupPortable(const QuantWeight& w, int64_t n, int64_t n_end, int slabs,
                            uint8_t* packed, float* scales, float* zeros);
// Its per-group scales and scale x zero point alone (both setups' second half).
void int4PanelScales(const QuantWeight& w, int64_t n, int64_t n_end, int slabs, float* scales,
                     float* zeros);
// With `pack` (of w; n0 a multiple of 32) the products read it instead of repacking: the same
// bits.
void quantDotInt4PanelAvx512(const QuantWeight& w, int64_t n0, int64_t n1,
                             const QuantizedActivations* rows, int64_t row_count, float* out,
                             int64_t out_stride, const Int4PanelPack* pack = nullptr);
// The same panels on AVX2 (cpu/quant_panel_avx2.cpp): tiles of 4 rows x 16 channels, vpmaddubsw +
// vpmaddwd, the float sums in `out` between blocks; per output the AVX-512 panels' operations in
// their order, so their bits. Where quantDotHasAvx2Panels().
void quantDotInt4PanelAvx2(const QuantWeight& w, int64_t n0, int64_t n1,
                           const QuantizedActivations* rows, int64_t row_count, float* out,
                           int64_t out_stride, const Int4PanelPack* pack = nullptr);
// w8a8 with AVX-512 VNNI: out[r * out_stride + i] = Σ_K a[r] w[n0 + i], exact, where `biased`
// holds the activation codes plus 128 (a ^ 0x80 as bytes: vpdpbusd multiplies unsigned by
// signed; 128 Σw comes off per channel). Only where quantDotHasVnniPanel().
bool quantDotHasVnniPanel();
// A w8a8 weight [N, K] repacked once for those panels (as Int4PanelPack): per 32 channels the
// codes in vpdpbusd's order (k * 32 bytes, panel p at p * k * 32) and 128 Σ_K w per channel.
struct Int8PanelPack {
  int64_t n = 0, k = 0;
  std::shared_ptr<int8_t> codes;  // 64-byte aligned
  std::vector<int32_t> bias;      // [panels * 32]
  size_t bytes() const;
};
std::shared_ptr<const Int8PanelPack> packInt8PanelsVnni(const int8_t* w, int64_t n, int64_t k,
                                                        ThreadPool* pool);
// With `pack` (of w; n0 a multiple of 32) the products read it instead of repacking: the same
// sums.
void dotInt8PanelVnni(const uint8_t* biased, int64_t rows, const int8_t* w, int64_t k, int64_t n0,
                      int64_t n1, int32_t* out, int64_t out_stride,
                      const Int8PanelPack* pack = nullptr);
// The same panels on AVX2 with AVX-VNNI (cpu/quant_panel_avx2.cpp: tiles of 6 rows x 16
// channels, vpdpbusd on 256 bits) over the same pack, exact; where quantDotHasAvxVnniPanel().
// From 16 rows: llmc_kernel_bench (768 x 768, repacking per call, Sapphire Rapids under the avx2
// cap) 70-74 against 56 G multiply-adds/s for dotInt8Rows (with AVX-VNNI) at 16 rows, 42-45
// against 57 at 8.
constexpr int64_t kAvxVnniInt8PanelMinRows = 16;
// The pack made without AVX-512 (packInt8PanelsVnni's bytes), and one panel of it.
bool quantDotHasAvxVnniPanel();
void int8PanelSetupPortable(const int8_t* w, int64_t k, int64_t n, int64_t n_end, int slabs,
                            int8_t* packed, int32_t* bias);
std::shared_ptr<const Int8PanelPack> packInt8PanelsPortable(const int8_t* w, int64_t n, int64_t k,
                                                            ThreadPool* pool);
// Either pack: every panel of 32 channels by `setup` (int8PanelSetupPortable's contract), in
// parallel on `pool` (may be null).
using Int8PanelSetup = void (*)(const int8_t* w, int64_t k, int64_t n, int64_t n_end, int slabs,
                                int8_t* packed, int32_t* bias);
std::shared_ptr<const Int8PanelPack> packInt8PanelsWith(const int8_t* w, int64_t n, int64_t k,
                                                        ThreadPool* pool, Int8PanelSetup setup);
void dotInt8PanelAvxVnni(const uint8_t* biased, int64_t rows, const int8_t* w, int64_t k,
                         int64_t n0, int64_t n1, int32_t* out, int64_t out_stride,
                         const Int8PanelPack* pack = nullptr);

// AMX (cpu/quant_dot_amx.cpp): prefill's integer products in 16-row x 16-channel tiles, where
// cpuIsa() is kAmx and at least kAmxMinRows rows share the weights (fewer take the AVX-512
// tiles above). With `pack` (packInt8PanelsVnni of the weight) the tiles read the weight from it
// where n0 is a multiple of 16, else they repack it per call: the same results.
constexpr int64_t kAmxMinRows = 8;
// w8a8 from 4 rows: from the kept pack its tiles ran 128 G multiply-adds/s at 4 rows x 768 x 768
// against the AVX-512 VNNI panels' 41.5 (llmc_kernel_bench, Sapphire Rapids, 2026-12-06); int8
// weights' codes at 4 rows ran 28 against the AVX-512 tiles' 31 (three byte planes, 2026-12-06; the
// split codes before them 26), so they keep 8; at 8 rows 53 against 32.
constexpr int64_t kAmxInt8MinRows = 4;
bool quantDotHasAmx();

// int8 weights' int16 activation codes for the tiles, a row over one scale: code c of a block
// halved e times (int16BlockHalvings) is c * 2^(kInt16MaxHalvings - e) over the row's absmax /
// 32767 / 2^kInt16MaxHalvings, a 24-bit integer (|c'| < 2^23) held in three byte planes, c' =
// 65536 * top + 256 * mid + low (top signed, the others unsigned), rows padded to 16 with the
// padding zero, in the tiles' order (amxCodeAt); and per row its absmax / 32767 (the scale of
// its blocks that are not halved).
struct AmxActivations {
  int64_t rows = 0, k = 0;
  CacheLineVector<int8_t> top;
  CacheLineVector<uint8_t> mid, low;
  std::vector<float> row_scales;
};
// K values per tile row (64 bytes), the depth the tiles sum in one instruction.
constexpr int64_t kAmxChunk = 64;
// The tiles take K a multiple of kAmxChunk and at most kAmxMaxK: each byte plane's sums are exact
// in int32 up to there (|Σ low * w| <= 255 * 127 * K < 2^31).
constexpr int64_t kAmxMaxK = 65536;
inline bool amxTakesK(int64_t k) { return k % kAmxChunk == 0 && k <= kAmxMaxK; }
// Where row r's code for K index i sits in each plane: one tile of 16 rows x kAmxChunk (1 KiB
// contiguous) after another, the chunks of a row tile in order, so that the tiles read whole
// cache lines in memory order.
inline int64_t amxCodeAt(int64_t r, int64_t i, int64_t k) {
  return ((r / 16 * (k / kAmxChunk) + i / kAmxChunk) * 16 + r % 16) * kAmxChunk + i % kAmxChunk;
}
// Sizes `out` for rows x k (amxTakesK; keeping any larger capacity) and zeroes the padding rows;
// rows 0..rows-1 are left to be set.
void resizeAmxActivations(int64_t rows, int64_t k, AmxActivations* out);
// Row r from its quantizeActivations(..., 16 bits, ...) form.
void setAmxActivationRow(const QuantizedActivations& row, int64_t r, AmxActivations* out);
// Row r quantized from x (K floats) straight into the planes: the same codes and scales as
// quantizeActivations then setAmxActivationRow, in 16 lanes. Only where quantDotHasAmx().
void quantizeAmxRow(const float* x, int64_t r, AmxActivations* out);
// out[r * out_stride + i] = the product of row r (r < a.rows) with output channel n0 + i of an
// int8 weight (i < n1 - n0): quantDotScalar's value with its integers summed over all of K at
// once (exact), then one rounding to float and the row's and the channel's scales. Only where
// quantDotHasAmx(). With a pack, the weights of the call `ahead` calls on (channels n1 + (ahead -
// 1) * (n1 - n0) on: this thread's next task where `ahead` threads claim tasks in turn) are asked
// into L2 while this one computes.
void quantDotTileAmx(const QuantWeight& w, int64_t n0, int64_t n1, const AmxActivations& a,
                     float* out, int64_t out_stride, const Int8PanelPack* pack = nullptr,
                     int ahead = 1);
// w8a8: out[r * out_stride + i] = Σ_K a[r] w[n0 + i], exact, for r < rows; `a` is int8 [rows
// padded to 16 (zeros), k], k a multiple of 64. Only where quantDotHasAmx().
void dotInt8TileAmx(const int8_t* a, int64_t rows, const int8_t* w, int64_t k, int64_t n0,
                    int64_t n1, int32_t* out, int64_t out_stride,
                    const Int8PanelPack* pack = nullptr);
// w8a8 as quantMatMul outputs it: out[r * out_stride + i] = (float(Σ_K a[r] w[n0 + i]) *
// row_scales[r]) * channel_scales[i], the sums leaving the tiles straight into the floats;
// `ahead` as quantDotTileAmx's.
void quantDotInt8TileAmx(const int8_t* a, int64_t rows, const int8_t* w, int64_t k, int64_t n0,
                         int64_t n1, const float* row_scales, const float* channel_scales,
                         float* out, int64_t out_stride, const Int8PanelPack* pack = nullptr,
                         int ahead = 1);

// Decode over a sparse int8 weight (core/sparse.h) with the weight read once in its compact
// form: out[i] = the product of one row of int16 activation codes (quantizeActivations, 16 bits)
// with output channel n0 + i, each 64 columns' stored values expanded into a register (AVX-512
// VBMI2 vpexpandb) and multiplied as the AVX-512 int8 tiles multiply a dense weight, so the
// value is theirs bit for bit. `scales` are the channels' float32 scales. Only where
// sparseInt8DotFused(): the AVX-512 level on a CPU with VBMI2; elsewhere the rows are expanded
// into a buffer for the dense kernels. Returns the first channel whose mask overruns its stride
// (its output is not written), or -1.
bool sparseInt8DotFused();
int64_t sparseInt8DotRows(const SparseInt8Rows& w, const float* scales, int64_t n0, int64_t n1,
                          const QuantizedActivations& a, float* out);

// The channels per pass of the integer products for `rows` rows of activations. One row
// (decode) reads each weight once and is bound by memory: on one 2-core Zen 4 VM four
// interleaved weight rows streamed at half the rate of one (int8 decode of a 110M Llama 89-95
// against 174-180 tokens/s), while in prefill one per pass took the time to first token from
// about 190 to 240-310 ms (docs/quantization.md, Speed).
inline int channelsPerPass(int64_t rows) { return rows == 1 ? 1 : 4; }

}  // namespace llmc
