// The AVX-512 forms of the quantized products (cpu/quant_dot.h): tiles of up to 4 activation
// rows x 4 output channels, so that in prefill each weight block is loaded and unpacked once for
// four rows and each activation block once for four channels (the AVX2 kernels share only the
// activations). Per block the integer dot products are exact, as in the scalar reference; the
// float sums over blocks run in 16 lanes and so differ from AVX2's 8 in rounding only
// (test/unit/cpu/quant_test.cpp bounds every level against the scalar dot products).
//
// - int8 weights, int16 activations: vpmovsxbw widens a block of 32 weights into one register,
//   vpmaddwd gives 16 int32 pair sums (|sum| <= 2 * 32767 * 127), then float and the block's
//   activation scale; the channel's scale at the end.
// - 4-bit weights, int8 activations, over pairs of blocks: the 32 packed bytes of a pair become
//   64 unsigned nibbles in one register (low nibbles in the lower half, high in the upper: the
//   order of QuantizedActivations::q_pairs), and vpdpbusd (AVX-512 VNNI) or vpmaddubsw +
//   vpmaddwd (without) sums 4 products per int32 lane; lanes 0-3 and 8-11 hold block 2p, 4-7
//   and 12-15 block 2p + 1, each lane scaled by its block's activation and weight scales. The
//   zero point (8 for the symmetric formats) comes off once per group against the group's
//   activation sum, so groups of 32 and groups that are a multiple of 64 take the same loop.
// - 4-bit weights in decode (one row): no unpacking ahead; each channel's packed row is read
//   64 bytes (four blocks) at a time, low and high nibbles against the row's codes laid out in
//   that order, vpdpbusd (or vpmaddubsw + vpmaddwd) into one int32 lane group per block, the
//   lanes scaled per block; one channel after the other in memory order, as the weight lies.
// - Panels, for prefill (kInt16PanelMinRows or kInt8PanelMinRows rows or more) of int8 weights: 32
//   output channels are repacked into the lanes of two registers (int8 pairs widened to int16 as
//   they load, for int16 activations; int8 quads for w8a8), once per session for an engine's
//   weight (the packs of cpu/quant_dot.h) or per call, and each step multiplies one broadcast
//   32-bit group of a row's codes into both: vpdpwssd (or vpmaddwd + vpaddd without VNNI) over
//   6 rows, per block of 32 into float with the block's scale; w8a8 (VNNI only) vpdpbusd over 8
//   rows and all of K in int32, on the codes plus 128 (unsigned), less 128 Σw per channel. No
//   horizontal sums: each lane is one channel's own.
//
// The kernels are written once (quant_dot_avx512.inc) and compiled under two target pragmas.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/isa.h"
#include "core/quant.h"
#include "core/scale.h"
#include "core/thread_pool.h"
#include "cpu/kept_buffer.h"
#include "cpu/prefetch_ahead.h"
#include "cpu/quant_dot.h"

namespace llmc {

#if defined(__x86_64__) && defined(__GNUC__)
LLMC_ALLOW_UNDEFINED_VECTORS
namespace {

// As in the AVX2 kernels: decode streams every weight once, and asks for lines this far ahead.
constexpr int64_t kPrefetchBytes = 4096;

LLMC_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
// w8a8's per-token codes in 16 lanes (quantizeRowPerToken's contract, bit for bit): absmax over
// the row with NaN dropped, scale = absmax / 127, each x * (1 / scale) rounded half away from
// zero and clamped to ±127 (NaN to -127), as roundClamped does.
#include "cpu/quant_round_avx512.inc"

float perTokenAvx512(const float* x, int64_t k, int8_t* q) {
  __m512 amax_lanes = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 m = k - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (k - i)) - 1);
    amax_lanes = _mm512_max_ps(amax_lanes, absOrZero(_mm512_maskz_loadu_ps(m, x + i)));
  }
  const float scale = _mm512_reduce_max_ps(amax_lanes) / 127.0f;
  const __m512 inverse = _mm512_set1_ps(inverseScale(scale));
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 m = k - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (k - i)) - 1);
    const __m512i code =
        roundClampedLanes(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inverse), 127.0f);
    _mm_mask_storeu_epi8(q + i, m, _mm512_cvtepi32_epi8(code));
  }
  return scale;
}

// quantizeActivations' codes of a whole row (16 or 8 bits), per block: codes, scale (int8: absmax /
// 127; int16: int16BlockScale) and, where `sums` is given, the integer sum of the codes.
void activationCodesAvx512(const float* x, int64_t k, int bits, int16_t* q16, int8_t* q8,
                           float* scales, int32_t* sums) {
  const int64_t blocks = k / kQuantBlock;
  const float row_absmax = bits == 16 ? rowAbsmax(x, k) : 0.0f;
  alignas(64) float inverses[16];
  for (int64_t b = 0; b < blocks; ++b) {
    if (bits == 16 && b % 16 == 0) {
      const int64_t count = std::min<int64_t>(16, blocks - b);
      const Int16BlockScales group = int16BlockScales(x + b * kQuantBlock, count, row_absmax);
      _mm512_mask_storeu_ps(scales + b, static_cast<__mmask16>((1u << count) - 1), group.scales);
      _mm512_store_ps(inverses, group.inverses);
    }
    __m512i first, second;
    if (bits == 16)
      scaledBlockCodes(x + b * kQuantBlock, _mm512_set1_ps(inverses[b % 16]), 32767.0f, &first,
                       &second);
    else
      scales[b] = int8BlockCodes(x + b * kQuantBlock, &first, &second);
    if (sums) sums[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(first, second));
    if (bits == 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q16 + b * kQuantBlock),
                          _mm512_cvtepi32_epi16(first));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q16 + b * kQuantBlock + 16),
                          _mm512_cvtepi32_epi16(second));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q8 + b * kQuantBlock),
                       _mm512_cvtepi32_epi8(first));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q8 + b * kQuantBlock + 16),
                       _mm512_cvtepi32_epi8(second));
    }
  }
}

#include "cpu/pack_avx512.inc"

// The scale of group g of output channel `row`, converted from float16 where stored so.
inline float weightScaleAt(const QuantWeight& w, int64_t row, int64_t g) {
  const int64_t at = row * w.groupsPerRow() + g;
  return w.traits->scale_dtype == DType::kFloat16
             ? _cvtsh_ss(static_cast<const uint16_t*>(w.scales)[at])
             : static_cast<const float*>(w.scales)[at];
}

// A 64-byte aligned buffer that grows on demand (what it held is not kept).
template <typename T>
class AlignedBuffer {
 public:
  void reserve(size_t count) {
    if (count <= capacity_) return;
    data_.reset(static_cast<T*>(std::aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64)));
    if (!data_) throw std::bad_alloc();
    capacity_ = count;
  }
  T* data() { return data_.get(); }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t capacity_ = 0;
};

// One panel of an int8 weight for int16Panel: channels n..n + 16 * slabs - 1 (zeros at or past
// n_end) repacked into `codes` (packInt16Panel) and their scales into `scales` (16 * slabs, zeros
// past n_end).
void int16PanelSetup(const QuantWeight& w, int64_t n, int64_t n_end, int slabs, int8_t* codes,
                     float* scales) {
  packInt16Panel(static_cast<const int8_t*>(w.data), w.k, n, n_end, slabs, codes);
  for (int64_t c = 0; c < 16 * slabs; ++c)
    scales[c] = n + c < n_end ? weightScaleAt(w, n + c, 0) : 0.0f;
}

// One panel of a 4-bit weight for int4Panel: channels n..n + 16 * slabs - 1 (zeros at or past
// n_end) repacked into `codes` (packInt4Panel), and per group their float scales and scale x
// zero point ([groups][16 * slabs], zeros past n_end).
void int4PanelSetup(const QuantWeight& w, int64_t n, int64_t n_end, int slabs, uint8_t* codes,
                    float* scales, float* zeros) {
  packInt4Panel(static_cast<const uint8_t*>(w.data), w.k, n, n_end, slabs, codes);
  int4PanelScales(w, n, n_end, slabs, scales, zeros);
}

namespace bw {
#define LLMC_QUANT_VNNI 0
#include "cpu/quant_dot_avx512.inc"
#undef LLMC_QUANT_VNNI
}  // namespace bw
LLMC_TARGET_END
LLMC_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
namespace vnni {
#define LLMC_QUANT_VNNI 1
#include "cpu/quant_dot_avx512.inc"
#undef LLMC_QUANT_VNNI
}  // namespace vnni
LLMC_TARGET_END

}  // namespace

bool quantDotHasAvx512() { return cpuIsa() >= CpuIsa::kAvx512; }

size_t Int4PanelPack::bytes() const {
  return static_cast<size_t>((n + 31) / 32 * k * 16) +
         (scales.size() + zeros.size()) * sizeof(float);
}

float quantizeRowPerTokenAvx512(const float* x, int64_t k, int8_t* q) {
  return perTokenAvx512(x, k, q);
}

void quantizeInt16RowAvx512(const float* x, int64_t k, int16_t* codes, float* scales) {
  activationCodesAvx512(x, k, 16, codes, nullptr, scales, nullptr);
}

void quantizeBlocksAvx512(const float* x, int64_t k, int bits, int16_t* q16, int8_t* q8,
                          float* scales, int32_t* sums) {
  activationCodesAvx512(x, k, bits, q16, q8, scales, sums);
}

void quantDotPanelAvx512(const QuantWeight& w, int64_t n0, int64_t n1, const int16_t* codes,
                         const float* scales, int64_t rows, float* out, int64_t out_stride,
                         const Int16PanelPack* pack) {
  (cpuIsa() >= CpuIsa::kAvx512Vnni ? vnni::int16PanelProducts : bw::int16PanelProducts)(
      w, n0, n1, codes, scales, rows, out, out_stride, pack);
}

size_t Int16PanelPack::bytes() const {
  return static_cast<size_t>((n + 31) / 32 * k * 32) + scales.size() * sizeof(float);
}

std::shared_ptr<const Int16PanelPack> packInt16Panels(const QuantWeight& w, ThreadPool* pool) {
  auto pack = std::make_shared<Int16PanelPack>();
  pack->n = w.n;
  pack->k = w.k;
  const int64_t panels = (w.n + 31) / 32;
  pack->codes = keptBuffer<int8_t>(static_cast<size_t>(panels * w.k * 32));
  int8_t* codes = pack->codes.get();
  pack->scales.assign(static_cast<size_t>(panels * 32), 0.0f);
  parallelFor(pool, panels, [&](int64_t p) {
    (quantDotHasAvx512() ? int16PanelSetup : int16PanelSetupPortable)(
        w, 32 * p, w.n, w.n - 32 * p > 16 ? 2 : 1, codes + p * w.k * 32,
        pack->scales.data() + p * 32);
  });
  return pack;
}

void quantDotInt4PanelAvx512(const QuantWeight& w, int64_t n0, int64_t n1,
                             const QuantizedActivations* rows, int64_t row_count, float* out,
                             int64_t out_stride, const Int4PanelPack* pack) {
  (cpuIsa() >= CpuIsa::kAvx512Vnni ? vnni::int4PanelProducts : bw::int4PanelProducts)(
      w, n0, n1, rows, row_count, out, out_stride, pack);
}

std::shared_ptr<const Int4PanelPack> packInt4Panels(const QuantWeight& w, ThreadPool* pool) {
  auto pack = std::make_shared<Int4PanelPack>();
  pack->n = w.n;
  pack->k = w.k;
  pack->groups = w.groupsPerRow();
  const int64_t panels = (w.n + 31) / 32;
  pack->codes = keptBuffer<uint8_t>(static_cast<size_t>(panels * w.k * 16));
  uint8_t* codes = pack->codes.get();
  pack->scales.resize(static_cast<size_t>(panels * pack->groups * 32));
  pack->zeros.resize(pack->scales.size());
  parallelFor(pool, panels, [&](int64_t p) {
    const int64_t n = 32 * p;
    (quantDotHasAvx512() ? int4PanelSetup : int4PanelSetupPortable)(
        w, n, w.n, w.n - n > 16 ? 2 : 1, codes + n * w.k / 2,
        pack->scales.data() + p * pack->groups * 32, pack->zeros.data() + p * pack->groups * 32);
  });
  return pack;
}

bool quantDotHasVnniPanel() { return cpuIsa() >= CpuIsa::kAvx512Vnni; }

void dotInt8PanelVnni(const uint8_t* biased, int64_t rows, const int8_t* w, int64_t k, int64_t n0,
                      int64_t n1, int32_t* out, int64_t out_stride, const Int8PanelPack* pack) {
  vnni::int8PanelProducts(biased, rows, w, k, n0, n1, out, out_stride, pack);
}

size_t Int8PanelPack::bytes() const {
  return static_cast<size_t>((n + 31) / 32 * k * 32) + bias.size() * sizeof(int32_t);
}

std::shared_ptr<const Int8PanelPack> packInt8PanelsVnni(const int8_t* w, int64_t n, int64_t k,
                                                        ThreadPool* pool) {
  return packInt8PanelsWith(w, n, k, pool, vnni::int8PanelSetup);
}

void quantDotInt4StreamAvx512(const QuantWeight& w, int64_t n0, int64_t n1,
                              const QuantizedActivations& a, float* out) {
  (cpuIsa() >= CpuIsa::kAvx512Vnni ? vnni::int4StreamRow : bw::int4StreamRow)(w, n0, n1, a, out);
}

void quantDotTileAvx512(const QuantWeight& w, int64_t n0, int64_t n1,
                        const QuantizedActivations* rows, int64_t row_count, float* out,
                        int64_t out_stride, int channels_per_pass) {
  const bool vnni = cpuIsa() >= CpuIsa::kAvx512Vnni;
  int64_t n = n0;
  if (channels_per_pass == 4)
    (vnni ? vnni::channelTiles<4> : bw::channelTiles<4>)(w, n, n1, rows, row_count, out, out_stride,
                                                         &n);
  (vnni ? vnni::channelTiles<1> : bw::channelTiles<1>)(w, n, n1, rows, row_count, out + (n - n0),
                                                       out_stride, &n);
}
#else
bool quantDotHasAvx512() { return false; }
size_t Int4PanelPack::bytes() const { return 0; }
bool quantDotHasVnniPanel() { return false; }
void quantDotInt4PanelAvx512(const QuantWeight&, int64_t, int64_t, const QuantizedActivations*,
                             int64_t, float*, int64_t, const Int4PanelPack*) {}
std::shared_ptr<const Int4PanelPack> packInt4Panels(const QuantWeight&, ThreadPool*) {
  return nullptr;
}
void quantizeInt16RowAvx512(const float*, int64_t, int16_t*, float*) {}
void quantizeBlocksAvx512(const float*, int64_t, int, int16_t*, int8_t*, float*, int32_t*) {}
void quantDotPanelAvx512(const QuantWeight&, int64_t, int64_t, const int16_t*, const float*,
                         int64_t, float*, int64_t, const Int16PanelPack*) {}
size_t Int16PanelPack::bytes() const { return 0; }
std::shared_ptr<const Int16PanelPack> packInt16Panels(const QuantWeight&, ThreadPool*) {
  return nullptr;
}
void dotInt8PanelVnni(const uint8_t*, int64_t, const int8_t*, int64_t, int64_t, int64_t, int32_t*,
                      int64_t, const Int8PanelPack*) {}
size_t Int8PanelPack::bytes() const { return 0; }
std::shared_ptr<const Int8PanelPack> packInt8PanelsVnni(const int8_t*, int64_t, int64_t,
                                                        ThreadPool*) {
  return nullptr;
}
float quantizeRowPerTokenAvx512(const float* x, int64_t k, int8_t* q) {
  return quantizeRowPerTokenScalar(x, k, q);
}
void quantDotInt4StreamAvx512(const QuantWeight&, int64_t, int64_t, const QuantizedActivations&,
                              float*) {}
void quantDotTileAvx512(const QuantWeight&, int64_t, int64_t, const QuantizedActivations*, int64_t,
                        float*, int64_t, int) {}
#endif

}  // namespace llmc
