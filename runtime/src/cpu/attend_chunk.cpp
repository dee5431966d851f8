// attendChunk (cpu/attend.h): attention of several query rows of one head at once, with AVX-512
// or AVX2/FMA. Three passes per chunk, each blocked for reuse from registers:
// 1. scores, four queries x eight keys per tile on AVX-512 (query pairs interleaved in one
//    512-bit register per eight dimensions, each key slice broadcast against both), two queries x
//    four keys on AVX2 (one 256-bit register per query), one query x eight keys for a lone query
//    (decode) on both; every dot product keeps attendOne's eight partial sums (d mod 8, one
//    fused multiply-add chain each) and its pairwise sum, done for four keys' eight products at
//    once by two permutes and three horizontal adds;
// 2. softmax per query: max, the exponentials (a polynomial, cpu/exp_poly.h), their sum in 16 lanes
//    (two 8-lane registers on AVX2) added in one fixed tree;
// 3. the weighted sum of the values, each output accumulated in key order with fused
//    multiply-adds: on AVX-512 (head_dim a multiple of 16) four queries x up to 64 dimensions or
//    two x up to 128 per tile, in slices of 128; two queries x 32 dimensions per tile over 16
//    rows at a time on AVX2.
// Each step is the same arithmetic in the same order on both levels, so AVX2 and AVX-512 give
// the same bits (test/unit/cpu/isa_test.cpp).
// A lone query over a stored (not float32) cache converts each row in registers as it reads it
// (attendLoneStored) rather than a block at a time into a buffer; both give the same floats.
// For one or two queries, or queries that all see the same positions (a decode step's query
// heads of one KV head), a paged cache's block two ahead is asked for (into L2) while the
// current one is read: 1.5x decode after 2,048 tokens on an AVX-512 EPYC over asking for the
// next one into L1 (docs/kv-cache.md); a prefill chunk asks for nothing ahead (BlockReader).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/isa.h"
#include "cpu/attend.h"
#include "cpu/exp_poly.h"
#include "cpu/kv_load_avx2.h"

namespace llmc {

#if defined(__x86_64__) && defined(__GNUC__)
LLMC_ALLOW_UNDEFINED_VECTORS
namespace {
LLMC_TARGET_BEGIN("avx2,fma,f16c")
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

// The rows of one block as the AVX2 loops read them, eight values at a time: float rows `stride`
// apart (the cache's float32 rows in place, or a block converted into a buffer), or a stored
// block's rows converted in registers (StoredBlock, below). Both give the same floats, so the
// loops over either give the same bits.
struct FloatRows {
  const float* first;
  int64_t stride;
  LLMC_ISA_INLINE __m256 load8(int64_t r, int64_t d) const {
    return _mm256_loadu_ps(first + r * stride + d);
  }
};

// One key's dot product in the same order (row r of `rows`): for the keys left after the tiles.
template <typename Rows>
inline float dotRow(const float* q, const Rows& rows, int64_t r, int64_t head_dim) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t d = 0; d < head_dim; d += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), rows.load8(r, d), acc);
  const __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 h = _mm_hadd_ps(t, t);
  return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}
inline float dot(const float* q, const float* k, int64_t head_dim) {
  return dotRow(q, FloatRows{k, 0}, 0, head_dim);
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
// `rows` rows converted into `buffer` (row_stride = head_dim then). `ahead`: the walks ask for
// the blocks ahead of the one they read (prefetchNextBlock), which pays where a row is read for
// one or two queries (decode) and not where it serves a prefill chunk's: there the rows mostly
// come from cache and the 64 prefetches per block cost more than they save (a 2,048-token
// prefill 9-14% faster without them on the Xeon of 2026-12-05, docs/kv-cache.md).
class BlockReader {
 public:
  BlockReader(const KvRows& kv, int64_t head_dim, bool ahead, std::vector<float>& buffer)
      : kv_(kv), head_dim_(head_dim), ahead_(ahead), buffer_(buffer) {
    if (kv.dtype != DType::kFloat32) buffer.resize(static_cast<size_t>(kv.block_rows * head_dim));
  }
  const KvRows& kv() const { return kv_; }
  // The walk of `blocks` over rows [0, n) is at row j0: asks for the blocks ahead if `ahead`.
  void askAhead(const void* const* blocks, int64_t j0, int64_t n) const {
    if (ahead_) prefetchNextBlock(blocks, kv_, j0, n, head_dim_);
  }
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
  bool ahead_;
  std::vector<float>& buffer_;
};

// Calls tile(block, j0, rows) for each block of the keys holding rows [0, n): its first row (as
// float), the index of that row, and how many of its rows are below n; the next block is
// prefetched.
template <typename Tile>
inline void forEachKeyBlock(const BlockReader& reader, int64_t n, Tile&& tile) {
  const KvRows& kv = reader.kv();
  for (int64_t j0 = 0; j0 < n; j0 += kv.block_rows) {
    reader.askAhead(kv.key_blocks, j0, n);
    const int64_t rows = std::min(kv.block_rows, n - j0);
    tile(reader.rows(kv.key_blocks, j0 / kv.block_rows, rows), j0, rows);
  }
}

// Scores of one query against `count` rows of one block, times `scale`, into s: eight keys per
// tile, each product computed as in scoreTile (the same bits), then dotRow's for the rest.
template <typename Rows>
inline void scoreRows(const float* q, const Rows& rows, int64_t count, int64_t head_dim,
                      float scale, float* s) {
  const __m256 scales = _mm256_set1_ps(scale);
  int64_t j = 0;
  for (; j + 8 <= count; j += 8) {
    // Key i of the eight into acc[i < 4 ? 2i : 2(i - 4) + 1]: sumLanes8 returns them in order.
    __m256 acc[8];
    for (__m256& a : acc) a = _mm256_setzero_ps();
    for (int64_t d = 0; d < head_dim; d += 8) {
      const __m256 a = _mm256_loadu_ps(q + d);
      for (int i = 0; i < 8; ++i) {
        const int at = i < 4 ? 2 * i : 2 * (i - 4) + 1;
        acc[at] = _mm256_fmadd_ps(a, rows.load8(j + i, d), acc[at]);
      }
    }
    _mm256_storeu_ps(s + j, _mm256_mul_ps(sumLanes8(acc), scales));
  }
  for (; j < count; ++j) s[j] = dotRow(q, rows, j, head_dim) * scale;
}

// Scores of one query (decode) against rows [0, n) of the keys, times `scale`, into s.
void scoreOne(const float* q, int64_t n, int64_t head_dim, float scale, const BlockReader& reader,
              float* s) {
  const int64_t stride = reader.kv().row_stride;
  forEachKeyBlock(reader, n, [&](const float* block, int64_t j0, int64_t rows) {
    scoreRows(q, FloatRows{block, stride}, rows, head_dim, scale, s + j0);
  });
}

// The sum of 16 lanes (a: lanes 0-7, b: lanes 8-15) in one fixed tree, the same on both levels:
// a + b lane by lane, then its two halves, then lanes 0 + 2 and 1 + 3, then those two.
inline float sum16(__m256 a, __m256 b) {
  const __m256 t = _mm256_add_ps(b, a);
  const __m128 h = _mm_add_ps(_mm256_extractf128_ps(t, 1), _mm256_castps256_ps128(t));
  const __m128 pairs = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(pairs) + _mm_cvtss_f32(_mm_shuffle_ps(pairs, pairs, 1));
}

// Lanes [0, left) set (left < 8), for the tails of the AVX2 loops.
inline __m256i firstLanes(int64_t left) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// softmaxRow on AVX2: the same maximum, exponentials and division, the sum in the same 16 lanes
// (j mod 16) and tree.
void softmaxRowAvx2(float* s, int64_t n) {
  __m256 top = _mm256_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) top = _mm256_max_ps(top, _mm256_loadu_ps(s + j));
  const __m128 half = _mm_max_ps(_mm256_extractf128_ps(top, 1), _mm256_castps256_ps128(top));
  const __m128 quarter = _mm_max_ps(half, _mm_movehl_ps(half, half));
  float max_score =
      std::max(_mm_cvtss_f32(quarter), _mm_cvtss_f32(_mm_shuffle_ps(quarter, quarter, 1)));
  for (; j < n; ++j) max_score = std::max(max_score, s[j]);
  const __m256 max = _mm256_set1_ps(max_score);
  __m256 sums[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (j = 0; j < n; j += 8) {
    __m256 e;
    if (n - j >= 8) {
      e = expNonPositive8(_mm256_sub_ps(_mm256_loadu_ps(s + j), max));
      _mm256_storeu_ps(s + j, e);
    } else {
      const __m256i m = firstLanes(n - j);
      e = expNonPositive8(_mm256_sub_ps(_mm256_maskload_ps(s + j, m), max));
      _mm256_maskstore_ps(s + j, m, e);
      e = _mm256_and_ps(e, _mm256_castsi256_ps(m));  // the lanes past n add +0
    }
    sums[(j / 8) % 2] = _mm256_add_ps(sums[(j / 8) % 2], e);
  }
  const __m256 total = _mm256_set1_ps(sum16(sums[0], sums[1]));
  for (j = 0; j + 8 <= n; j += 8)
    _mm256_storeu_ps(s + j, _mm256_div_ps(_mm256_loadu_ps(s + j), total));
  if (j < n) {
    const __m256i m = firstLanes(n - j);
    _mm256_maskstore_ps(s + j, m, _mm256_div_ps(_mm256_maskload_ps(s + j, m), total));
  }
}

// Scores of queries q[0] and q[1] against four consecutive keys at k (rows `stride` apart), times
// `scale`, into s[0][at..at + 4) and s[1][at..at + 4): each key load serves both queries, each
// product as scoreTile's (the same bits).
inline void scoreTileAvx2(const float* const* q, const float* k, int64_t stride, int64_t head_dim,
                          __m256 scales, float* const* s, int64_t at) {
  __m256 acc[8];  // acc[2r + i]: query i against key r, so that sumLanes8 returns q0's four first
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (int64_t d = 0; d < head_dim; d += 8) {
    const __m256 q0 = _mm256_loadu_ps(q[0] + d), q1 = _mm256_loadu_ps(q[1] + d);
    for (int r = 0; r < 4; ++r) {
      const __m256 key = _mm256_loadu_ps(k + r * stride + d);
      acc[2 * r] = _mm256_fmadd_ps(q0, key, acc[2 * r]);
      acc[2 * r + 1] = _mm256_fmadd_ps(q1, key, acc[2 * r + 1]);
    }
  }
  const __m256 sums = _mm256_mul_ps(sumLanes8(acc), scales);
  _mm_storeu_ps(s[0] + at, _mm256_castps256_ps128(sums));
  _mm_storeu_ps(s[1] + at, _mm256_extractf128_ps(sums, 1));
}

// Scores of queries q[0] and q[1] against the first `rows` rows of one block of keys (block row j
// is key j0 + j, rows `stride` apart), times `scale`, into s[0] and s[1]: four keys per tile,
// then one at a time.
void scoreBlockAvx2(const float* const* q, const float* block, int64_t stride, int64_t rows,
                    int64_t j0, int64_t head_dim, float scale, float* const* s) {
  const __m256 scales = _mm256_set1_ps(scale);
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4)
    scoreTileAvx2(q, block + j * stride, stride, head_dim, scales, s, j0 + j);
  for (; j < rows; ++j)
    for (int i = 0; i < 2; ++i) s[i][j0 + j] = dot(q[i], block + j * stride, head_dim) * scale;
}

// out[r][d, d + 8 kVectors) += Σ_j p[r][j] row_j over j in [from, to) of one block (row j is
// block's row j - j0), for kRows queries: 16 rows at a time, so that they stay in L1 while
// those dimensions of the outputs are in registers. Each output in j order, with fused
// multiply-adds from the zeros the caller put there: weightedValues' arithmetic.
template <int kRows, int kVectors, typename Rows>
void addRowsSliceAvx2(const float* const* p, const Rows& block, int64_t j0, int64_t from,
                      int64_t to, int64_t d, float* const* out) {
  for (int64_t a = from; a < to; a += 16) {
    const int64_t b = std::min(to, a + 16);
    __m256 acc[kRows][kVectors];
    for (int r = 0; r < kRows; ++r)
      for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm256_loadu_ps(out[r] + d + 8 * v);
    for (int64_t j = a; j < b; ++j) {
      __m256 values[kVectors];
      for (int v = 0; v < kVectors; ++v) values[v] = block.load8(j - j0, d + 8 * v);
      for (int r = 0; r < kRows; ++r) {
        const __m256 weight = _mm256_set1_ps(p[r][j]);
        for (int v = 0; v < kVectors; ++v)
          acc[r][v] = _mm256_fmadd_ps(weight, values[v], acc[r][v]);
      }
    }
    for (int r = 0; r < kRows; ++r)
      for (int v = 0; v < kVectors; ++v) _mm256_storeu_ps(out[r] + d + 8 * v, acc[r][v]);
  }
}

// The same over all of head_dim (a multiple of 8): 32 dimensions at a time, then the 8-24 left;
// for three queries and more 16 at a time (then 8), which keeps their sums in registers.
template <int kRows, typename Rows>
void addRowsAvx2(const float* const* p, const Rows& block, int64_t j0, int64_t from, int64_t to,
                 int64_t head_dim, float* const* out) {
  int64_t d = 0;
  if constexpr (kRows >= 3) {
    for (; d + 16 <= head_dim; d += 16) addRowsSliceAvx2<kRows, 2>(p, block, j0, from, to, d, out);
    if (d < head_dim) addRowsSliceAvx2<kRows, 1>(p, block, j0, from, to, d, out);
    return;
  }
  for (; d + 32 <= head_dim; d += 32) addRowsSliceAvx2<kRows, 4>(p, block, j0, from, to, d, out);
  switch ((head_dim - d) / 8) {
    case 3: addRowsSliceAvx2<kRows, 3>(p, block, j0, from, to, d, out); break;
    case 2: addRowsSliceAvx2<kRows, 2>(p, block, j0, from, to, d, out); break;
    case 1: addRowsSliceAvx2<kRows, 1>(p, block, j0, from, to, d, out); break;
    default: break;
  }
}

// out[r] += the values' rows [from, to) weighted by p[r], for kRows queries, a block at a time.
template <int kRows>
void addValuesAvx2(const float* const* p, const BlockReader& reader, int64_t from, int64_t to,
                   int64_t head_dim, float* const* out) {
  const KvRows& kv = reader.kv();
  for (int64_t j0 = from - from % kv.block_rows; j0 < to; j0 += kv.block_rows) {
    reader.askAhead(kv.value_blocks, j0, to);
    const float* block =
        reader.rows(kv.value_blocks, j0 / kv.block_rows, std::min(kv.block_rows, to - j0));
    addRowsAvx2<kRows>(p, FloatRows{block, kv.row_stride}, j0, std::max(j0, from),
                       std::min(j0 + kv.block_rows, to), head_dim, out);
  }
}

// weightedValues on AVX2: out[r] = Σ_j p[r][j] v_j over j < counts[r] for kRows (1 or 2)
// queries, the rows they share read once for both.
template <int kRows>
void weightedValuesAvx2(const float* const* p, const int64_t* counts, const BlockReader& reader,
                        int64_t head_dim, float* const* out) {
  for (int r = 0; r < kRows; ++r) std::fill(out[r], out[r] + head_dim, 0.0f);
  const int64_t shared = kRows == 1 ? counts[0] : std::min(counts[0], counts[kRows - 1]);
  addValuesAvx2<kRows>(p, reader, 0, shared, head_dim, out);
  if (kRows > 1)
    for (int r = 0; r < kRows; ++r)
      addValuesAvx2<1>(p + r, reader, shared, counts[r], head_dim, out + r);
}

// One block of values (rows [j0, end) of the sequence) added to the outputs of kRows queries:
// the rows below all of their counts for all of them at once, then each query's own rows.
template <int kRows>
void addBlockAvx2(const float* const* p, const int64_t* counts, const FloatRows& block, int64_t j0,
                  int64_t end, int64_t head_dim, float* const* out) {
  const int64_t shared = *std::min_element(counts, counts + kRows);
  if (j0 < shared) addRowsAvx2<kRows>(p, block, j0, j0, std::min(end, shared), head_dim, out);
  if (kRows > 1)
    for (int r = 0; r < kRows; ++r) {
      const int64_t from = std::max(j0, shared), to = std::min(end, counts[r]);
      if (from < to) addRowsAvx2<1>(p + r, block, j0, from, to, head_dim, out + r);
    }
}

// Queries of a chunk added together over the values (addBlockAvx2), four at a time (six ran as
// fast, eight slower: their sums no longer fit in registers).
constexpr int kValueQueries = 4;

// attendChunk on AVX2 (but for a lone query over a stored cache, attendLoneStored): the blocks of
// keys, then of values, in the outer loop and the queries in the inner one, so that a block is
// read (and a stored cache's block converted) once for the whole chunk and then served from L1,
// where the loop over queries outside read every block from L2 again for each pair of queries
// (1.3-1.5x prefill attention over 2,048 positions on the AVX2 EPYC, docs/kv-cache.md). Each
// score and each output is computed as before (scoreTileAvx2's and dotRow's products; each
// output in j order from zero), so the same bits. `s` holds a score row per query.
void attendRowsAvx2(const float* const* queries, const int64_t* counts, int64_t rows,
                    int64_t head_dim, float scale, const BlockReader& reader, int64_t longest,
                    float* const* s, float* const* out) {
  const KvRows& kv = reader.kv();
  const int64_t stride = kv.row_stride;
  for (int64_t j0 = 0; j0 < longest; j0 += kv.block_rows) {
    reader.askAhead(kv.key_blocks, j0, longest);
    const int64_t b = j0 / kv.block_rows;
    const float* block = reader.rows(kv.key_blocks, b, std::min(kv.block_rows, longest - j0));
    int64_t i = 0;
    for (; i + 2 <= rows; i += 2) {
      const int64_t n = std::max(counts[i], counts[i + 1]);
      if (n > j0)
        scoreBlockAvx2(queries + i, block, stride, std::min(kv.block_rows, n - j0), j0, head_dim,
                       scale, s + i);
    }
    if (i < rows && counts[i] > j0)
      scoreRows(queries[i], FloatRows{block, stride}, std::min(kv.block_rows, counts[i] - j0),
                head_dim, scale, s[i] + j0);
  }
  for (int64_t i = 0; i < rows; ++i) {
    softmaxRowAvx2(s[i], counts[i]);
    std::fill(out[i], out[i] + head_dim, 0.0f);
  }
  for (int64_t j0 = 0; j0 < longest; j0 += kv.block_rows) {
    reader.askAhead(kv.value_blocks, j0, longest);
    const int64_t end = std::min(j0 + kv.block_rows, longest);
    const FloatRows block{reader.rows(kv.value_blocks, j0 / kv.block_rows, end - j0), stride};
    int64_t i = 0;
    for (; i + kValueQueries <= rows; i += kValueQueries)
      addBlockAvx2<kValueQueries>(s + i, counts + i, block, j0, end, head_dim, out + i);
    for (; i + 2 <= rows; i += 2)
      addBlockAvx2<2>(s + i, counts + i, block, j0, end, head_dim, out + i);
    if (i < rows) addBlockAvx2<1>(s + i, counts + i, block, j0, end, head_dim, out + i);
  }
}

// A lone query (a decode step's head over its own KV head) against a stored (not float32)
// cache, each row converted in registers as the products use it (kvLoad8: the floats
// kvRowsToFloat gives) instead of a block at a time into a buffer that the products then read
// again: scoreRows' tiles and order, then addRowsAvx2's for one query, over a StoredBlock, so the
// same bits as the converted path. A StoredBlock's row r lies row_stride elements of kFormat
// after row r - 1 and, for the 8-bit formats, its scale scale_offset bytes after the block's first
// row.
template <DType kFormat>
struct StoredBlock {
  const char* first;
  int64_t row_bytes, scale_offset;
  // Bytes per element: the 16-bit formats' 2, the 8-bit ones' 1.
  static constexpr int64_t kElement =
      kFormat == DType::kFloat16 || kFormat == DType::kBFloat16 ? 2 : 1;
  StoredBlock(const KvRows& kv, const void* block)
      : first(static_cast<const char*>(block)),
        row_bytes(kv.row_stride * kElement),
        scale_offset(kv.scale_offset) {}
  LLMC_ISA_INLINE __m256 load8(int64_t r, int64_t d) const {
    // The scale pointer is read only by the 8-bit formats.
    return kvLoad8<kFormat>(first + r * row_bytes, d,
                            reinterpret_cast<const float*>(first + scale_offset) + r);
  }
};

// The lone query's whole attention over a stored cache: scores a block at a time, softmaxRow
// (`softmax`: the level's), then the weighted values a block at a time.
template <DType kFormat>
void attendLoneStored(const float* q, int64_t count, int64_t head_dim, float scale,
                      const BlockReader& reader, void (*softmax)(float*, int64_t), float* scores,
                      float* out) {
  const KvRows& kv = reader.kv();
  for (int64_t j0 = 0; j0 < count; j0 += kv.block_rows) {
    reader.askAhead(kv.key_blocks, j0, count);
    scoreRows(q, StoredBlock<kFormat>(kv, kv.key_blocks[j0 / kv.block_rows]),
              std::min(kv.block_rows, count - j0), head_dim, scale, scores + j0);
  }
  softmax(scores, count);
  std::fill(out, out + head_dim, 0.0f);
  for (int64_t j0 = 0; j0 < count; j0 += kv.block_rows) {
    reader.askAhead(kv.value_blocks, j0, count);
    addRowsAvx2<1>(&scores, StoredBlock<kFormat>(kv, kv.value_blocks[j0 / kv.block_rows]), j0, j0,
                   std::min(count, j0 + kv.block_rows), head_dim, &out);
  }
}

// attendHeads' walk, over Rows (FloatRows for float32 rows in place, else StoredBlock<format>):
// a block's rows of every head, then the next block's, for the scores and again for the values;
// each head's calls those of attendRowsAvx2 or attendLoneStored for its query alone.
template <typename Rows>
void attendHeadsWith(const float* const* q, int64_t count, int64_t heads, int64_t head_dim,
                     float scale, const KvRows* kv, void (*softmax)(float*, int64_t),
                     float* const* s, float* const* out) {
  const int64_t block_rows = kv[0].block_rows;
  auto rows_of = [&](int64_t h, const void* block) {
    if constexpr (std::is_same_v<Rows, FloatRows>)
      return FloatRows{static_cast<const float*>(block), kv[h].row_stride};
    else
      return Rows(kv[h], block);
  };
  for (int64_t j0 = 0; j0 < count; j0 += block_rows)
    for (int64_t h = 0; h < heads; ++h) {
      prefetchNextBlock(kv[h].key_blocks, kv[h], j0, count, head_dim);
      scoreRows(q[h], rows_of(h, kv[h].key_blocks[j0 / block_rows]),
                std::min(block_rows, count - j0), head_dim, scale, s[h] + j0);
    }
  for (int64_t h = 0; h < heads; ++h) {
    softmax(s[h], count);
    std::fill(out[h], out[h] + head_dim, 0.0f);
  }
  for (int64_t j0 = 0; j0 < count; j0 += block_rows)
    for (int64_t h = 0; h < heads; ++h) {
      prefetchNextBlock(kv[h].value_blocks, kv[h], j0, count, head_dim);
      addRowsAvx2<1>(s + h, rows_of(h, kv[h].value_blocks[j0 / block_rows]), j0, j0,
                     std::min(count, j0 + block_rows), head_dim, out + h);
    }
}

float expOneAvx2(float x) { return _mm256_cvtss_f32(expNonPositive8(_mm256_set1_ps(x))); }

LLMC_TARGET_END

LLMC_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
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
  alignas(64) float interleaved[kPairs][2 * kChunkMaxHeadDim];
  const float* pairs[kPairs];
  for (int p = 0; p < kPairs; ++p) {
    for (int64_t d = 0; d < head_dim; d += 8) {
      _mm256_store_ps(interleaved[p] + 2 * d, _mm256_loadu_ps(q[2 * p] + d));
      _mm256_store_ps(interleaved[p] + 2 * d + 8, _mm256_loadu_ps(q[2 * p + 1] + d));
    }
    pairs[p] = interleaved[p];
  }
  forEachKeyBlock(reader, n, [&](const float* block, int64_t j0, int64_t rows) {
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
    const __m512 e = expNonPositive16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), max));
    _mm512_mask_storeu_ps(s + j, m, e);
    sum = _mm512_mask_add_ps(sum, m, sum, e);
  }
  const __m512 total =
      _mm512_set1_ps(sum16(_mm512_castps512_ps256(sum), _mm512_extractf32x8_ps(sum, 1)));
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(s + j, m, _mm512_div_ps(_mm512_maskz_loadu_ps(m, s + j), total));
  }
}

// out[r][dim0, dim0 + 16 kVectors) = Σ_j p[r][j] v_j there, over j < counts[r], for kRows rows:
// the rows share the value loads for the keys they all see, then each finishes its own.
template <int kRows, int kVectors>
void weightedValues(const float* const* p, const int64_t* counts, const BlockReader& reader,
                    int64_t dim0, float* const* out) {
  const KvRows& kv = reader.kv();
  __m512 acc[kRows][kVectors];
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_setzero_ps();
  int64_t shared = counts[0];
  for (int r = 1; r < kRows; ++r) shared = std::min(shared, counts[r]);
  auto add_rows = [&](int r0, int r1, int64_t from, int64_t to) {
    for (int64_t j0 = from - from % kv.block_rows; j0 < to; j0 += kv.block_rows) {
      reader.askAhead(kv.value_blocks, j0, to);
      const float* block = reader.rows(kv.value_blocks, j0 / kv.block_rows,
                                       std::min(kv.block_rows, to - j0));
      for (int64_t j = std::max(j0, from); j < std::min(j0 + kv.block_rows, to); ++j) {
        const float* row = block + (j - j0) * kv.row_stride + dim0;
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
    for (int v = 0; v < kVectors; ++v) _mm512_storeu_ps(out[r] + dim0 + 16 * v, acc[r][v]);
}

// weightedValues over every query, for dimensions [dim0, dim0 + 16 kVectors): four queries a
// tile up to 64 dimensions, two up to 128, so that the tile's sums and a value row's slice stay
// in registers.
template <int kVectors>
void weightedValuesSlice(const float* const* p, const int64_t* counts, int64_t rows,
                         const BlockReader& reader, int64_t dim0, float* const* out) {
  constexpr int kRows = kVectors <= 4 ? 4 : 2;
  int64_t i = 0;
  for (; i + kRows <= rows; i += kRows)
    weightedValues<kRows, kVectors>(p + i, counts + i, reader, dim0, out + i);
  for (; i < rows; ++i) weightedValues<1, kVectors>(p + i, counts + i, reader, dim0, out + i);
}

float expOne(float x) { return _mm512_cvtss_f32(expNonPositive16(_mm512_set1_ps(x))); }
LLMC_TARGET_END

}  // namespace

bool attendChunkSupported(int64_t head_dim) {
  return cpuIsa() >= CpuIsa::kAvx2 && head_dim > 0 && head_dim % 8 == 0 &&
         head_dim <= kChunkMaxHeadDim;
}

void attendChunk(const float* const* queries, const int64_t* counts, int64_t rows, int64_t head_dim,
                 float scale, const KvRows& kv, float* const* out, std::vector<float>& scratch) {
  int64_t longest = 0;
  for (int64_t i = 0; i < rows; ++i) longest = std::max(longest, counts[i]);
  const int64_t stride = (longest + 15) / 16 * 16 + 4;  // + 4: scoreTile stores four at a time
  scratch.resize(static_cast<size_t>(rows * stride));
  thread_local std::vector<float> converted;  // a block of the other dtypes as float
  const BlockReader reader(
      kv, head_dim,
      /*ahead=*/rows <= 2 ||
          std::all_of(counts, counts + rows, [&](int64_t c) { return c == counts[0]; }),
      converted);
  std::vector<float*> scores(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) scores[static_cast<size_t>(i)] = scratch.data() + i * stride;
  const bool wide = cpuIsa() >= CpuIsa::kAvx512;
  // A lone query reads each stored row once, converting it in registers (attendLoneStored): the
  // same bits as converting its block first; AVX2 loops on every level, as the value walks off
  // the 16s take.
  using Lone = void (*)(const float*, int64_t, int64_t, float, const BlockReader&,
                        void (*)(float*, int64_t), float*, float*);
  const Lone lone = kv.dtype == DType::kFloat16    ? attendLoneStored<DType::kFloat16>
                    : kv.dtype == DType::kBFloat16 ? attendLoneStored<DType::kBFloat16>
                    : kv.dtype == DType::kInt8     ? attendLoneStored<DType::kInt8>
                    : kv.dtype == DType::kUInt8    ? attendLoneStored<DType::kUInt8>
                                                   : nullptr;
  if (rows == 1 && lone) {
    lone(queries[0], counts[0], head_dim, scale, reader, wide ? softmaxRow : softmaxRowAvx2,
         scores[0], out[0]);
    return;
  }
  if (!wide) {
    attendRowsAvx2(queries, counts, rows, head_dim, scale, reader, longest, scores.data(), out);
    return;
  }
  std::vector<const float*> p(static_cast<size_t>(rows));
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
  // AVX-512's value tiles take head_dim in slices of up to 128 dimensions (a multiple of 16);
  // head sizes off the 16s take the AVX2 loops (the same bits).
  if (head_dim % 16 != 0) {
    for (i = 0; i + 2 <= rows; i += 2)
      weightedValuesAvx2<2>(p.data() + i, counts + i, reader, head_dim, out + i);
    if (i < rows) weightedValuesAvx2<1>(p.data() + i, counts + i, reader, head_dim, out + i);
    return;
  }
  for (int64_t dim0 = 0; dim0 < head_dim; dim0 += 128) {
    using Slice = void (*)(const float* const*, const int64_t*, int64_t, const BlockReader&,
                           int64_t, float* const*);
    static constexpr Slice kSlices[] = {weightedValuesSlice<1>, weightedValuesSlice<2>,
                                        weightedValuesSlice<3>, weightedValuesSlice<4>,
                                        weightedValuesSlice<5>, weightedValuesSlice<6>,
                                        weightedValuesSlice<7>, weightedValuesSlice<8>};
    const int64_t vectors = std::min<int64_t>(8, (head_dim - dim0) / 16);
    kSlices[vectors - 1](p.data(), counts, rows, reader, dim0, out);
  }
}

bool attendHeadsSupported(int64_t head_dim, DType dtype) {
  return attendChunkSupported(head_dim) && (dtype != DType::kFloat32 || cpuIsa() < CpuIsa::kAvx512);
}

void attendHeads(const float* const* queries, int64_t count, int64_t heads, int64_t head_dim,
                 float scale, const KvRows* kv, float* const* out, std::vector<float>& scratch) {
  const int64_t stride = (count + 15) / 16 * 16;
  scratch.resize(static_cast<size_t>(heads * stride));
  std::vector<float*> scores(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) scores[static_cast<size_t>(h)] = scratch.data() + h * stride;
  using Walk = void (*)(const float* const*, int64_t, int64_t, int64_t, float, const KvRows*,
                        void (*)(float*, int64_t), float* const*, float* const*);
  const DType dtype = kv[0].dtype;
  const Walk walk = dtype == DType::kFloat16    ? attendHeadsWith<StoredBlock<DType::kFloat16>>
                    : dtype == DType::kBFloat16 ? attendHeadsWith<StoredBlock<DType::kBFloat16>>
                    : dtype == DType::kInt8     ? attendHeadsWith<StoredBlock<DType::kInt8>>
                    : dtype == DType::kUInt8    ? attendHeadsWith<StoredBlock<DType::kUInt8>>
                                                : attendHeadsWith<FloatRows>;
  walk(queries, count, heads, head_dim, scale, kv,
       cpuIsa() >= CpuIsa::kAvx512 ? softmaxRow : softmaxRowAvx2, scores.data(), out);
}

float attendExpForTesting(float x) {
  return cpuIsa() >= CpuIsa::kAvx512 ? expOne(x) : expOneAvx2(x);
}
#else
bool attendChunkSupported(int64_t) { return false; }
void attendChunk(const float* const*, const int64_t*, int64_t, int64_t, float, const KvRows&,
                 float* const*, std::vector<float>&) {}
bool attendHeadsSupported(int64_t, DType) { return false; }
void attendHeads(const float* const*, int64_t, int64_t, int64_t, float, const KvRows*,
                 float* const*, std::vector<float>&) {}
float attendExpForTesting(float x) { return x; }
#endif

}  // namespace llmc
