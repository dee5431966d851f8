// Sparse int8 rows (core/sparse.h): packing, and the expansion back to dense rows per ISA level.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/isa.h"
#include "core/sparse.h"
#include "cpu/quant_dot.h"

namespace llmc {

#if defined(__x86_64__) && defined(__GNUC__)
LLMC_ALLOW_UNDEFINED_VECTORS
#endif

Status makeSparseInt8Rows(const Tensor& packed, const Tensor& mask, int64_t k,
                          SparseInt8Rows* out) {
  if (packed.dtype() != DType::kInt8 || packed.rank() != 2)
    return invalidArgument("sparse weight: packed values must be int8 [N, stride], not " +
                           shapeToString(packed.shape()));
  const int64_t n = packed.dim(0), stride = packed.dim(1);
  if (k <= 0 || stride > k)
    return invalidArgument("sparse weight: stride " + std::to_string(stride) +
                           " exceeds K = " + std::to_string(k));
  if (mask.dtype() != DType::kUInt8 || mask.rank() != 2 || mask.dim(0) != n ||
      mask.dim(1) != (k + 7) / 8)
    return invalidArgument("sparse weight: mask " + shapeToString(mask.shape()) +
                           " is not uint8 [N = " + std::to_string(n) +
                           ", ceil(K / 8) = " + std::to_string((k + 7) / 8) + "]");
  out->packed = packed.data<int8_t>();
  out->mask = mask.data<uint8_t>();
  out->n = n;
  out->k = k;
  out->stride = stride;
  return okStatus();
}

Status packSparseInt8Rows(const int8_t* dense, int64_t n, int64_t k, int64_t stride, int8_t* packed,
                          uint8_t* mask) {
  const int64_t mask_bytes = (k + 7) / 8;
  std::memset(packed, 0, static_cast<size_t>(n * stride));
  std::memset(mask, 0, static_cast<size_t>(n * mask_bytes));
  for (int64_t r = 0; r < n; ++r) {
    int64_t count = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int8_t v = dense[r * k + j];
      if (v == 0) continue;
      if (count == stride)
        return invalidArgument(
            "sparse weight: row " + std::to_string(r) + " has more than " + std::to_string(stride) +
            " non-zeros (the stride the engine stores; new weights must be pruned the same way)");
      packed[r * stride + count++] = v;
      mask[r * mask_bytes + j / 8] |= static_cast<uint8_t>(1u << (j % 8));
    }
  }
  return okStatus();
}

namespace {

// One row; false when its mask sets more than `stride` bits (the values past the stride read
// as zero).
bool expandRowScalar(const SparseInt8Rows& rows, int64_t r, int8_t* out) {
  const int8_t* p = rows.packed + r * rows.stride;
  const uint8_t* m = rows.mask + r * rows.maskBytes();
  int64_t offset = 0;
  bool fits = true;
  for (int64_t j = 0; j < rows.k; ++j) {
    int8_t v = 0;
    if ((m[j / 8] >> (j % 8)) & 1) {
      if (offset < rows.stride)
        v = p[offset++];
      else
        fits = false;
    }
    out[j] = v;
  }
  return fits;
}

#if defined(__x86_64__) && defined(__GNUC__)
// pshufb controls: for mask byte m, lane i takes the next packed byte where bit i is set, zero
// (0x80) elsewhere.
const std::array<uint64_t, 256>& shuffleTable() {
  static const std::array<uint64_t, 256> table = [] {
    std::array<uint64_t, 256> t{};
    for (unsigned m = 0; m < 256; ++m) {
      uint64_t control = 0;
      unsigned next = 0;
      for (unsigned i = 0; i < 8; ++i)
        control |= static_cast<uint64_t>(((m >> i) & 1) ? next++ : 0x80u) << (8 * i);
      t[m] = control;
    }
    return t;
  }();
  return table;
}

// Eight columns per step. False (nothing trusted) when the row's mask overruns its stride.
LLMC_TARGET_AVX2 bool expandRowShuffle(const SparseInt8Rows& rows, int64_t r, int8_t* out) {
  const std::array<uint64_t, 256>& table = shuffleTable();
  const int8_t* p = rows.packed + r * rows.stride;
  const uint8_t* m = rows.mask + r * rows.maskBytes();
  int64_t offset = 0;
  for (int64_t j = 0; j < rows.k; j += 8) {
    const unsigned bits = m[j / 8];
    const int count = std::popcount(bits);
    if (offset + count > rows.stride) return false;
    uint64_t chunk = 0;
    if (offset + 8 <= rows.stride)  // constant sizes: plain loads and stores, no memcpy calls
      std::memcpy(&chunk, p + offset, 8);
    else
      for (int64_t i = 0; i < rows.stride - offset; ++i)
        chunk |= static_cast<uint64_t>(static_cast<uint8_t>(p[offset + i])) << (8 * i);
    const __m128i values = _mm_shuffle_epi8(_mm_cvtsi64_si128(static_cast<long long>(chunk)),
                                            _mm_cvtsi64_si128(static_cast<long long>(table[bits])));
    const uint64_t dense = static_cast<uint64_t>(_mm_cvtsi128_si64(values));
    if (j + 8 <= rows.k)
      std::memcpy(out + j, &dense, 8);
    else
      for (int64_t i = 0; i < rows.k - j; ++i) out[j + i] = static_cast<int8_t>(dense >> (8 * i));
    offset += count;
  }
  return true;
}

#define LLMC_TARGET_VBMI2 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi2,avx2,fma,f16c,popcnt")))

// 64 columns per step: a masked load of the step's stored bytes, vpexpandb into their columns.
LLMC_TARGET_VBMI2 bool expandRowVbmi2(const SparseInt8Rows& rows, int64_t r, int8_t* out) {
  const int8_t* p = rows.packed + r * rows.stride;
  const uint8_t* m = rows.mask + r * rows.maskBytes();
  const int64_t mask_bytes = rows.maskBytes();
  int64_t offset = 0;
  for (int64_t j = 0; j < rows.k; j += 64) {
    uint64_t bits = 0;
    if (j / 8 + 8 <= mask_bytes)
      std::memcpy(&bits, m + j / 8, 8);
    else
      for (int64_t i = 0; i < mask_bytes - j / 8; ++i)
        bits |= static_cast<uint64_t>(m[j / 8 + i]) << (8 * i);
    const int count = std::popcount(bits);
    if (offset + count > rows.stride) return false;
    const __mmask64 take = count == 64 ? ~__mmask64{0} : (__mmask64{1} << count) - 1;
    const __m512i values =
        _mm512_maskz_expand_epi8(bits, _mm512_maskz_loadu_epi8(take, p + offset));
    const int64_t left = rows.k - j;
    if (left >= 64)
      _mm512_storeu_si512(out + j, values);
    else
      _mm512_mask_storeu_epi8(out + j, (__mmask64{1} << left) - 1, values);
    offset += count;
  }
  return true;
}

// The chunk of blocks b and b + 1 (b alone at the end of an odd count): its stored values at
// `*offset` expanded into their lanes; false when they overrun the stride.
LLMC_TARGET_VBMI2 LLMC_ISA_INLINE bool expandChunk(const SparseInt8Rows& w, const int8_t* p,
                                                   const uint8_t* m, int64_t b, int64_t blocks,
                                                   int64_t* offset, __m512i* values) {
  uint64_t bits = 0;
  if (b + 1 < blocks) {
    std::memcpy(&bits, m + b * 4, 8);
  } else {
    uint32_t half_bits = 0;
    std::memcpy(&half_bits, m + b * 4, 4);
    bits = half_bits;
  }
  const int count = std::popcount(bits);
  if (*offset + count > w.stride) return false;
  // A plain load inside the row; a masked one (no read past the tensor) near its end.
  const __m512i stored =
      *offset + 64 <= w.stride
          ? _mm512_loadu_si512(p + *offset)
          : _mm512_maskz_loadu_epi8(count == 64 ? ~__mmask64{0} : (__mmask64{1} << count) - 1,
                                    p + *offset);
  *values = _mm512_maskz_expand_epi8(bits, stored);
  *offset += count;
  return true;
}

// The chunk's blocks against the activation codes, into `acc`.
LLMC_TARGET_VBMI2 LLMC_ISA_INLINE void multiplyChunk(const QuantizedActivations& a, int64_t b,
                                                     int64_t blocks, __m512i values, __m512* acc) {
  for (int64_t half = 0; half < 2 && b + half < blocks; ++half) {
    const __m512i wv = _mm512_cvtepi8_epi16(half ? _mm512_extracti64x4_epi64(values, 1)
                                                 : _mm512_castsi512_si256(values));
    const __m512i av = _mm512_loadu_si512(a.q16.data() + (b + half) * kQuantBlock);
    const __m512 scale = _mm512_set1_ps(a.scales[static_cast<size_t>(b + half)]);
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(av, wv)), scale, *acc);
  }
}

// One channel, its row read in memory order: per 64 columns the stored values expanded into
// their lanes (vpexpandb), then per block of 32 what the AVX-512 int8 tile does with a dense
// block (vpmovsxbw, vpmaddwd with the codes, float, times the block's activation scale), in the
// same order. vpexpandb's latency is long: kChunks chunks of 64 columns are expanded before
// any is multiplied, so that their expansions overlap. False when the mask overruns the stride.
template <int kChunks>
LLMC_TARGET_VBMI2 bool sparseChannelVbmi2(const SparseInt8Rows& w, int64_t n,
                                          const QuantizedActivations& a, float* sum) {
  constexpr int64_t kPrefetchBytes = 4096;  // as the dense decode kernels ask ahead
  const int8_t* p = w.packed + n * w.stride;
  const uint8_t* m = w.mask + n * w.maskBytes();
  const int64_t blocks = w.k / kQuantBlock;
  __m512 acc = _mm512_setzero_ps();
  int64_t offset = 0;
  int64_t b = 0;
  for (; b + 2 * kChunks <= blocks; b += 2 * kChunks) {
    _mm_prefetch(reinterpret_cast<const char*>(p + offset + kPrefetchBytes), _MM_HINT_T0);
    __m512i values[kChunks];
    for (int c = 0; c < kChunks; ++c)
      if (!expandChunk(w, p, m, b + 2 * c, blocks, &offset, &values[c])) return false;
    for (int c = 0; c < kChunks; ++c) multiplyChunk(a, b + 2 * c, blocks, values[c], &acc);
  }
  for (; b < blocks; b += 2) {
    __m512i values;
    if (!expandChunk(w, p, m, b, blocks, &offset, &values)) return false;
    multiplyChunk(a, b, blocks, values, &acc);
  }
  *sum = _mm512_reduce_add_ps(acc);
  return true;
}
#endif

}  // namespace

bool sparseInt8DotFused() {
#if defined(__x86_64__) && defined(__GNUC__)
  return cpuIsa() >= CpuIsa::kAvx512 && cpuFeatures().avx512vbmi2;
#else
  return false;
#endif
}

int64_t sparseInt8DotRows(const SparseInt8Rows& w, const float* scales, int64_t n0, int64_t n1,
                          const QuantizedActivations& a, float* out) {
#if defined(__x86_64__) && defined(__GNUC__)
  for (int64_t n = n0; n < n1; ++n) {
    float sum = 0;
    if (!sparseChannelVbmi2<4>(w, n, a, &sum)) return n;
    out[n - n0] = sum * scales[n];
  }
#else
  (void)w, (void)scales, (void)n0, (void)n1, (void)a, (void)out;
#endif
  return -1;
}

int64_t expandSparseInt8RowsAt(CpuIsa isa, const SparseInt8Rows& rows, int64_t n0, int64_t n1,
                               int8_t* out) {
  int64_t bad = -1;
  for (int64_t r = n0; r < n1; ++r) {
    int8_t* row = out + (r - n0) * rows.k;
    bool fits = false;
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa >= CpuIsa::kAvx512 && cpuFeatures().avx512vbmi2)
      fits = expandRowVbmi2(rows, r, row);
    else if (isa >= CpuIsa::kAvx2)
      fits = expandRowShuffle(rows, r, row);
    else
      fits = expandRowScalar(rows, r, row);
#else
    (void)isa;
    fits = expandRowScalar(rows, r, row);
#endif
    // An overrun row: the scalar loop's bytes at every level, and reported.
    if (!fits && !expandRowScalar(rows, r, row) && bad < 0) bad = r;
  }
  return bad;
}

int64_t expandSparseInt8Rows(const SparseInt8Rows& rows, int64_t n0, int64_t n1, int8_t* out) {
  return expandSparseInt8RowsAt(cpuIsa(), rows, n0, n1, out);
}

}  // namespace llmc
