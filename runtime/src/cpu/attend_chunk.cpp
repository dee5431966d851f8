// attendChunk (cpu/attend.h): attention of several query rows of one head at once, with AVX-512.
// Three passes per chunk, each blocked for reuse from registers:
// 1. scores, four queries x eight keys per tile (one query x eight keys for a lone query, as in
//    decode): queries interleaved in pairs in one 512-bit register per eight dimensions, each key
//    slice broadcast against both; every dot product keeps attendOne's eight partial sums (d mod
//    8, one fused multiply-add chain each) and its pairwise sum, done for four keys' eight
//    products at once by two permutes and three horizontal adds;
// 2. softmax per query: max, the exponentials (a polynomial, below), their sum in 16 lanes;
// 3. the weighted sum of the values, four queries (two for head_dim 128) per tile: each value
//    row is loaded once for them, each output accumulated in key order.
// A paged cache's block two ahead is asked for (into L2) while the current one is read: 1.5x
// decode after 2,048 tokens on an AVX-512 EPYC over asking for the next one into L1
// (docs/kv-cache.md).
#include <algorithm>
#include <cstdint>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "cpu/isa.h"
#include "cpu/attend.h"

namespace llmc {

#if defined(__x86_64__) && defined(__GNUC__)
LLMC_ALLOW_UNDEFINED_VECTORS
LLMC_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
namespace {

// exp(x) for x <= 0 (and NaN): 2^n * p(r) with n = round(x / ln 2), r = x - n ln 2 in two steps
// (Cody and Waite), |r| <= ln 2 / 2, and p the degree-7 Taylor polynomial (truncation below
// 6e-9 relative there). x below -104 gives 0, as exp does in float32.
inline __m512 expNonPositive(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);  // NaN stays NaN (max returns its second operand)
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// The sums of eight 8-lane accumulators, each ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)) as attendOne's
// dot products add their lanes, returned in the order a[0], a[2], a[4], a[6], a[1], a[3], a[5],
// a[7].
inline __m256 sumLanes8(const __m256* a) {
  __m256 s[4];
  for (int i = 0; i < 4; ++i)  // [l_k + l_{k+4} of a[2i] | of a[2i+1]], k < 4
    s[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x20),
                         _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x31));
  return _mm256_hadd_ps(_mm256_hadd_ps(s[0], s[1]), _mm256_hadd_ps(s[2], s[3]));
}

// One key's dot product in the same order: for the keys left after the tiles.
inline float dot(const float* q, const float* k, int64_t head_dim) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t d = 0; d < head_dim; d += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), acc);
  const __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 h = _mm_hadd_ps(t, t);
  return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

// The rows of the block kPrefetchBlocks after the one at j0 (if it holds any of rows [0, n)),
// asked for ahead into L2 (at j0 = 0 the blocks before it too): a paged cache's blocks lie
// apart in memory, where the hardware's prefetchers do not follow.
constexpr int64_t kPrefetchBlocks = 2;
inline void prefetchBlock(const void* const* blocks, const KvRows& kv, int64_t at, int64_t n,
                          int64_t head_dim) {
  if (at >= n) return;
  const auto* block = static_cast<const char*>(blocks[at / kv.block_rows]);
  const int64_t rows = std::min(kv.block_rows, n - at);
  const int64_t element = static_cast<int64_t>(dtypeSize(kv.dtype));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t byte = 0; byte < head_dim * element; byte += 64)
      _mm_prefetch(block + (r * kv.row_stride) * element + byte, _MM_HINT_T1);
  // The 8-bit formats' row scales, which lie apart from the rows: not asked for, each block's
  // first scale missed the cache and held up its conversion.
  if (kv.dtype == DType::kInt8 || kv.dtype == DType::kUInt8)
    for (int64_t byte = 0; byte < rows * static_cast<int64_t>(sizeof(float)); byte += 64)
      _mm_prefetch(block + kv.scale_offset + byte, _MM_HINT_T1);
}
inline void prefetchNextBlock(const void* const* blocks, const KvRows& kv, int64_t j0, int64_t n,
                              int64_t head_dim) {
  if (j0 == 0)  // the start: the blocks up to the prefetch distance
    for (int64_t b = 1; b < kPrefetchBlocks; ++b)
      prefetchBlock(blocks, kv, b * kv.block_rows, n, head_dim);
  prefetchBlock(blocks, kv, j0 + kPrefetchBlocks * kv.block_rows, n, head_dim);
}

// Block b of `blocks` (keys or values) as float rows: in place for float32, else its first
// `rows` rows converted into `buffer` (row_stride = head_dim then).
class BlockReader {
 public:
  BlockReader(const KvRows& kv, int64_t head_dim, std::vector<float>& buffer)
      : kv_(kv), head_dim_(head_dim), buffer_(buffer) {
    if (kv.dtype != DType::kFloat32) buffer.resize(static_cast<size_t>(kv.block_rows * head_dim));
  }
  const KvRows& kv() const { return kv_; }
  const float* rows(const void* const* blocks, int64_t b, int64_t rows) const {
    const void* block = blocks[b];
    if (kv_.dtype == DType::kFloat32) return static_cast<const float*>(block);
    const auto* scales =
        reinterpret_cast<const float*>(static_cast<const char*>(block) + kv_.scale_offset);
    kvRowsToFloat(kv_.dtype, block, kv_.row_stride, scales, rows, head_dim_, buffer_.data());
    return buffer_.data();
  }

 private:
  const KvRows& kv_;
  int64_t head_dim_;
  std::vector<float>& buffer_;
};

// Calls tile(block, j0, rows) for each block of the keys holding rows [0, n): its first row (as
// float), the index of that row, and how many of its rows are below n; the next block is
// prefetched.
template <typename Tile>
inline void forEachKeyBlock(const BlockReader& reader, int64_t n, int64_t head_dim, Tile&& tile) {
  const KvRows& kv = reader.kv();
  for (int64_t j0 = 0; j0 < n; j0 += kv.block_rows) {
    prefetchNextBlock(kv.key_blocks, kv, j0, n, head_dim);
    const int64_t rows = std::min(kv.block_rows, n - j0);
    tile(reader.rows(kv.key_blocks, j0 / kv.block_rows, rows), j0, rows);
  }
}

// Scores of kPairs query pairs against kKeys (4 or 8) consecutive keys at k (rows `stride`
// apart), times `scale`, into s[2p][0..kKeys) and s[2p + 1][0..kKeys). pairs[p] holds pair p's
// two queries interleaved per eight dimensions ([q0[d..d+7] | q1[d..d+7]]), so one 512-bit
// fused multiply-add takes a key's eight dimensions (broadcast to both halves) against both
// queries: each lane keeps attendOne's partial sum (d mod 8) for its query, and the halves go
// through sumLanes8 as attendOne's 8-lane accumulators do. Each key load serves every pair.
template <int kPairs, int kKeys>
inline void scoreTile(const float* const* pairs, const float* k, int64_t stride, int64_t head_dim,
                      __m256 scales, float* const* s, int64_t at) {
  __m512 acc[kPairs][kKeys];
  for (int p = 0; p < kPairs; ++p)
    for (int r = 0; r < kKeys; ++r) acc[p][r] = _mm512_setzero_ps();
  for (int64_t d = 0; d < head_dim; d += 8) {
    __m512 queries[kPairs];
    for (int p = 0; p < kPairs; ++p) queries[p] = _mm512_load_ps(pairs[p] + 2 * d);
    for (int r = 0; r < kKeys; ++r) {
      const __m512 key = _mm512_broadcast_f32x8(_mm256_loadu_ps(k + r * stride + d));
      for (int p = 0; p < kPairs; ++p) acc[p][r] = _mm512_fmadd_ps(queries[p], key, acc[p][r]);
    }
  }
  for (int p = 0; p < kPairs; ++p)
    for (int group = 0; group < kKeys / 4; ++group) {
      // acc8[2r + q]: query q against key r of the four, so that sumLanes8 returns q0·k0..k3
      // then q1·k0..k3.
      __m256 acc8[8];
      for (int r = 0; r < 4; ++r) {
        acc8[2 * r] = _mm512_castps512_ps256(acc[p][4 * group + r]);
        acc8[2 * r + 1] = _mm512_extractf32x8_ps(acc[p][4 * group + r], 1);
      }
      const __m256 sums = _mm256_mul_ps(sumLanes8(acc8), scales);
      _mm_storeu_ps(s[2 * p] + at + 4 * group, _mm256_castps256_ps128(sums));
      _mm_storeu_ps(s[2 * p + 1] + at + 4 * group, _mm256_extractf128_ps(sums, 1));
    }
}

// Scores of the 2 * kPairs queries q[0..) against rows [0, n) of the keys, times `scale`, into
// s[0..): eight keys per tile, then four, then one at a time.
template <int kPairs>
void scoreQueries(const float* const* q, int64_t n, int64_t head_dim, float scale,
                  const BlockReader& reader, float* const* s) {
  const KvRows& kv = reader.kv();
  const __m256 scales = _mm256_set1_ps(scale);
  alignas(64) float interleaved[kPairs][2 * 128];  // head_dim is 64 or 128 (attendChunkSupported)
  const float* pairs[kPairs];
  for (int p = 0; p < kPairs; ++p) {
    for (int64_t d = 0; d < head_dim; d += 8) {
      _mm256_store_ps(interleaved[p] + 2 * d, _mm256_loadu_ps(q[2 * p] + d));
      _mm256_store_ps(interleaved[p] + 2 * d + 8, _mm256_loadu_ps(q[2 * p + 1] + d));
    }
    pairs[p] = interleaved[p];
  }
  forEachKeyBlock(reader, n, head_dim, [&](const float* block, int64_t j0, int64_t rows) {
    int64_t j = 0;
    for (; j + 8 <= rows; j += 8)
      scoreTile<kPairs, 8>(pairs, block + j * kv.row_stride, kv.row_stride, head_dim, scales, s,
                           j0 + j);
    for (; j + 4 <= rows; j += 4)
      scoreTile<kPairs, 4>(pairs, block + j * kv.row_stride, kv.row_stride, head_dim, scales, s,
                           j0 + j);
    for (; j < rows; ++j)
      for (int i = 0; i < 2 * kPairs; ++i)
        s[i][j0 + j] = dot(q[i], block + j * kv.row_stride, head_dim) * scale;
  });
}

// Scores of one query (decode) against rows [0, n) of the keys, times `scale`, into s: eight
// keys per tile, each product computed as in scoreTile (the same bits).
void scoreOne(const float* q, int64_t n, int64_t head_dim, float scale,
              const BlockReader& reader, float* s) {
  const KvRows& kv = reader.kv();
  const __m256 scales = _mm256_set1_ps(scale);
  forEachKeyBlock(reader, n, head_dim, [&](const float* block, int64_t j0, int64_t rows) {
    int64_t j = 0;
    for (; j + 8 <= rows; j += 8) {
      // Key i of the eight into acc[i < 4 ? 2i : 2(i - 4) + 1]: sumLanes8 returns them in order.
      __m256 acc[8];
      for (__m256& a : acc) a = _mm256_setzero_ps();
      const float* k = block + j * kv.row_stride;
      for (int64_t d = 0; d < head_dim; d += 8) {
        const __m256 a = _mm256_loadu_ps(q + d);
        for (int i = 0; i < 8; ++i) {
          const int at = i < 4 ? 2 * i : 2 * (i - 4) + 1;
          acc[at] = _mm256_fmadd_ps(a, _mm256_loadu_ps(k + i * kv.row_stride + d), acc[at]);
        }
      }
      _mm256_storeu_ps(s + j0 + j, _mm256_mul_ps(sumLanes8(acc), scales));
    }
    for (; j < rows; ++j) s[j0 + j] = dot(q, block + j * kv.row_stride, head_dim) * scale;
  });
}

// s[j] = exp(s[j] - max) / Σ exp over j < n.
void softmaxRow(float* s, int64_t n) {
  __m512 top = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - j)) - 1);
    top = _mm512_mask_max_ps(top, m, top, _mm512_maskz_loadu_ps(m, s + j));
  }
  const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(top));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 e = expNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), max));
    _mm512_mask_storeu_ps(s + j, m, e);
    sum = _mm512_mask_add_ps(sum, m, sum, e);
  }
  const __m512 total = _mm512_set1_ps(_mm512_reduce_add_ps(sum));
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(s + j, m, _mm512_div_ps(_mm512_maskz_loadu_ps(m, s + j), total));
  }
}

// out[r] = Σ_j p[r][j] v_j over j < counts[r], for kRows rows, head_dim = 16 * kVectors: the
// rows share the value loads for the keys they all see, then each finishes its own.
template <int kRows, int kVectors>
void weightedValues(const float* const* p, const int64_t* counts, const BlockReader& reader,
                    float* const* out) {
  const KvRows& kv = reader.kv();
  __m512 acc[kRows][kVectors];
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_setzero_ps();
  int64_t shared = counts[0];
  for (int r = 1; r < kRows; ++r) shared = std::min(shared, counts[r]);
  auto add_rows = [&](int r0, int r1, int64_t from, int64_t to) {
    for (int64_t j0 = from - from % kv.block_rows; j0 < to; j0 += kv.block_rows) {
      prefetchNextBlock(kv.value_blocks, kv, j0, to, 16 * kVectors);
      const float* block = reader.rows(kv.value_blocks, j0 / kv.block_rows,
                                       std::min(kv.block_rows, to - j0));
      for (int64_t j = std::max(j0, from); j < std::min(j0 + kv.block_rows, to); ++j) {
        const float* row = block + (j - j0) * kv.row_stride;
        __m512 values[kVectors];
        for (int v = 0; v < kVectors; ++v) values[v] = _mm512_loadu_ps(row + 16 * v);
        for (int r = r0; r < r1; ++r) {
          const __m512 weight = _mm512_set1_ps(p[r][j]);
          for (int v = 0; v < kVectors; ++v)
            acc[r][v] = _mm512_fmadd_ps(weight, values[v], acc[r][v]);
        }
      }
    }
  };
  add_rows(0, kRows, 0, shared);
  for (int r = 0; r < kRows; ++r) add_rows(r, r + 1, shared, counts[r]);
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVectors; ++v) _mm512_storeu_ps(out[r] + 16 * v, acc[r][v]);
}

float expOne(float x) { return _mm512_cvtss_f32(expNonPositive(_mm512_set1_ps(x))); }

}  // namespace
LLMC_TARGET_END

bool attendChunkSupported(int64_t head_dim) {
  return cpuIsa() >= CpuIsa::kAvx512 && (head_dim == 64 || head_dim == 128);
}

void attendChunk(const float* const* queries, const int64_t* counts, int64_t rows, int64_t head_dim,
                 float scale, const KvRows& kv, float* const* out, std::vector<float>& scratch) {
  int64_t longest = 0;
  for (int64_t i = 0; i < rows; ++i) longest = std::max(longest, counts[i]);
  const int64_t stride = (longest + 15) / 16 * 16 + 4;  // + 4: scoreTile stores four at a time
  scratch.resize(static_cast<size_t>(rows * stride));
  std::vector<const float*> p(static_cast<size_t>(rows));
  thread_local std::vector<float> converted;  // a block of the other dtypes as float
  const BlockReader reader(kv, head_dim, converted);
  std::vector<float*> scores(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) scores[static_cast<size_t>(i)] = scratch.data() + i * stride;
  int64_t i = 0;
  for (; i + 4 <= rows; i += 4)
    scoreQueries<2>(queries + i, *std::max_element(counts + i, counts + i + 4), head_dim, scale,
                    reader, scores.data() + i);
  for (; i + 2 <= rows; i += 2)
    scoreQueries<1>(queries + i, std::max(counts[i], counts[i + 1]), head_dim, scale, reader,
                    scores.data() + i);
  if (i < rows)
    scoreOne(queries[i], counts[i], head_dim, scale, reader, scratch.data() + i * stride);
  for (int64_t i = 0; i < rows; ++i) {
    softmaxRow(scratch.data() + i * stride, counts[i]);
    p[static_cast<size_t>(i)] = scratch.data() + i * stride;
  }
  const int tile = head_dim == 64 ? 4 : 2;
  for (i = 0; i + tile <= rows; i += tile) {
    if (head_dim == 64)
      weightedValues<4, 4>(p.data() + i, counts + i, reader, out + i);
    else
      weightedValues<2, 8>(p.data() + i, counts + i, reader, out + i);
  }
  for (; i < rows; ++i) {
    if (head_dim == 64)
      weightedValues<1, 4>(p.data() + i, counts + i, reader, out + i);
    else
      weightedValues<1, 8>(p.data() + i, counts + i, reader, out + i);
  }
}

float attendExpForTesting(float x) { return expOne(x); }
#else
bool attendChunkSupported(int64_t) { return false; }
void attendChunk(const float* const*, const int64_t*, int64_t, int64_t, float, const KvRows&,
                 float* const*, std::vector<float>&) {}
float attendExpForTesting(float x) { return x; }
#endif

}  // namespace llmc
