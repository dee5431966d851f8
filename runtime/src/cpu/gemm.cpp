// Float32 products of many rows (prefill): b packed into panels that stay in L2, a tile of sums
// in registers, one kernel per ISA level (AVX2/FMA: 6 rows x 16 columns; AVX-512: 8 x 32).
// Every sum is one fused multiply-add per product in ascending k on both, so the two give the
// same bits. See cpu/gemm.h.
#include "cpu/gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "cpu/columns_avx2.h"
#include "cpu/kept_buffer.h"
#include "cpu/prefetch_ahead.h"

namespace llmc {

#if defined(__x86_64__) && defined(__GNUC__)
namespace {

// A panel is kPanelK rows of b by up to kPanelN columns, stored as strips of `strip` columns,
// each strip kPanelK x strip contiguous (256 KiB: it stays in L2 while every row tile reads it).
constexpr int64_t kPanelK = 256;
constexpr int64_t kPanelN = 256;

// Copies b[k0 .. k0+kc, n0 .. n0+nc] into strips, zero-padding the last strip's columns. Row by
// row, so that b is read in order (it comes from memory; the panel is in cache).
void packPanel(const float* b, int64_t ldb, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
               int64_t strip, float* panel) {
  constexpr int64_t kRowsAhead = 8;  // rows of b asked for ahead: each is a separate run
  for (int64_t k = 0; k < kc; ++k) {
    const float* from = b + (k0 + k) * ldb + n0;
    if (k + kRowsAhead < kc)
      for (int64_t line = 0; line < nc; line += 16)
        __builtin_prefetch(from + kRowsAhead * ldb + line);
    for (int64_t s = 0; s * strip < nc; ++s) {
      const int64_t cols = std::min(strip, nc - s * strip);
      float* to = panel + (s * kPanelK + k) * strip;
      std::memcpy(to, from + s * strip, static_cast<size_t>(cols) * sizeof(float));
      if (cols < strip) std::fill(to + cols, to + strip, 0.0f);
    }
  }
}

// sums[r][0 .. strip) (+)= Σ_{k < kc} a[r * lda + k] * panel_strip[k][..] for r < kRows, k
// ascending; `accumulate` adds to what `sums` holds (an earlier panel of K). Writes `cols`
// columns.
// `ahead`: lines asked for into L2 along the way, one per step of k (cpu/prefetch_ahead.h).
using TileFn = void (*)(const float* a, int64_t lda, const float* strip, int64_t kc, float* sums,
                        int64_t ldc, int64_t cols, bool accumulate, AheadLines ahead);

// The sums live in registers across the loop: an earlier form staged partial strips through a
// stack array, and GCC 12 then kept every accumulator in memory too, storing all twelve on
// each step of k (half of the FMA peak). Loading and storing the rows in place, plainly or
// through the column masks (cpu/columns_avx2.h), keeps them in registers.
template <int kRows>
__attribute__((target("avx2,fma"))) void tileAvx2(const float* a, int64_t lda, const float* strip,
                                                  int64_t kc, float* sums, int64_t ldc,
                                                  int64_t cols, bool accumulate, AheadLines ahead) {
  constexpr int64_t kStrip = 16;
  // Column masks of the two 8-lane halves (a partial strip reads and writes only its columns).
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(cols)), lane);
  const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(cols) - 8), lane);
  const bool full0 = cols >= 8, full1 = cols >= 16;
  __m256 c[kRows][2];
  for (int r = 0; r < kRows; ++r) {
    if (accumulate) {
      c[r][0] = loadColumns(sums + r * ldc, m0, full0);
      c[r][1] = loadColumns(sums + r * ldc + 8, m1, full1);
    } else {
      c[r][0] = c[r][1] = _mm256_setzero_ps();
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    ahead.step(k);
    const __m256 b0 = _mm256_loadu_ps(strip + k * kStrip);
    const __m256 b1 = _mm256_loadu_ps(strip + k * kStrip + 8);
    for (int r = 0; r < kRows; ++r) {
      const __m256 x = _mm256_set1_ps(a[r * lda + k]);
      c[r][0] = _mm256_fmadd_ps(x, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(x, b1, c[r][1]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    storeColumns(sums + r * ldc, m0, full0, c[r][0]);
    storeColumns(sums + r * ldc + 8, m1, full1, c[r][1]);
  }
}

template <int kRows>
__attribute__((target("avx512f"))) void tileAvx512(const float* a, int64_t lda, const float* strip,
                                                   int64_t kc, float* sums, int64_t ldc,
                                                   int64_t cols, bool accumulate,
                                                   AheadLines ahead) {
  constexpr int64_t kStrip = 32;
  // Column masks of the two 16-lane halves (a partial strip writes only its columns).
  const __mmask16 m0 = static_cast<__mmask16>(cols >= 16 ? 0xffff : (1u << cols) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(cols >= 32   ? 0xffff
                                              : cols <= 16 ? 0
                                                           : (1u << (cols - 16)) - 1);
  __m512 c[kRows][2];
  for (int r = 0; r < kRows; ++r) {
    if (accumulate) {
      c[r][0] = _mm512_maskz_loadu_ps(m0, sums + r * ldc);
      c[r][1] = _mm512_maskz_loadu_ps(m1, sums + r * ldc + 16);
    } else {
      c[r][0] = c[r][1] = _mm512_setzero_ps();
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    ahead.step(k);
    const __m512 b0 = _mm512_loadu_ps(strip + k * kStrip);
    const __m512 b1 = _mm512_loadu_ps(strip + k * kStrip + 16);
    for (int r = 0; r < kRows; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * lda + k]);
      c[r][0] = _mm512_fmadd_ps(x, b0, c[r][0]);
      c[r][1] = _mm512_fmadd_ps(x, b1, c[r][1]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    _mm512_mask_storeu_ps(sums + r * ldc, m0, c[r][0]);
    _mm512_mask_storeu_ps(sums + r * ldc + 16, m1, c[r][1]);
  }
}

// One row against kStrips consecutive strips (each K x kStrip floats, `k` of them apart) over
// all of K: sums[0 .. cols) = Σ_k a[k] * strip[k][..], one fused multiply-add per product in
// ascending k (tile<1>'s bits). Decode: kStrips streams read at once keep more of memory's
// bandwidth in flight than one (AVX-512, the 110M Llama, one thread: 54 tokens/s with one strip
// at a time, 56-60 with four, 61-62 with eight, against 56-59 reading the weight in rows).
template <int kStrips>
__attribute__((target("avx512f"))) void vecAvx512(const float* a, const float* strips, int64_t k,
                                                  float* sums, int64_t cols) {
  constexpr int64_t kStrip = 32;
  __m512 c[kStrips][2];
  for (int s = 0; s < kStrips; ++s) c[s][0] = c[s][1] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < k; ++kk) {
    const __m512 x = _mm512_set1_ps(a[kk]);
    for (int s = 0; s < kStrips; ++s) {
      const float* b = strips + (s * k + kk) * kStrip;
      c[s][0] = _mm512_fmadd_ps(x, _mm512_load_ps(b), c[s][0]);
      c[s][1] = _mm512_fmadd_ps(x, _mm512_load_ps(b + 16), c[s][1]);
    }
  }
  for (int s = 0; s < kStrips; ++s)
    for (int h = 0; h < 2; ++h) {
      const int64_t left = cols - s * kStrip - h * 16;
      if (left <= 0) return;
      const __mmask16 m = left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
      _mm512_mask_storeu_ps(sums + s * kStrip + h * 16, m, c[s][h]);
    }
}

template <int kStrips>
__attribute__((target("avx2,fma"))) void vecAvx2(const float* a, const float* strips, int64_t k,
                                                 float* sums, int64_t cols) {
  constexpr int64_t kStrip = 16;
  __m256 c[kStrips][2];
  for (int s = 0; s < kStrips; ++s) c[s][0] = c[s][1] = _mm256_setzero_ps();
  for (int64_t kk = 0; kk < k; ++kk) {
    const __m256 x = _mm256_set1_ps(a[kk]);
    for (int s = 0; s < kStrips; ++s) {
      const float* b = strips + (s * k + kk) * kStrip;
      c[s][0] = _mm256_fmadd_ps(x, _mm256_load_ps(b), c[s][0]);
      c[s][1] = _mm256_fmadd_ps(x, _mm256_load_ps(b + 8), c[s][1]);
    }
  }
  alignas(32) float edge[kStrips * kStrip];
  for (int s = 0; s < kStrips; ++s) {
    _mm256_store_ps(edge + s * kStrip, c[s][0]);
    _mm256_store_ps(edge + s * kStrip + 8, c[s][1]);
  }
  std::memcpy(sums, edge, static_cast<size_t>(std::min<int64_t>(cols, kStrips * kStrip)) * 4);
}

// The kernels of one ISA level: tiles[r] takes r rows (1 .. kMaxRows).
using VecFn = void (*)(const float* a, const float* strips, int64_t k, float* sums, int64_t cols);
struct GemmKernels {
  int64_t strip;
  int max_rows;
  TileFn tiles[13];
  VecFn vec;  // one row x vec_strips strips
  int vec_strips;
};
constexpr GemmKernels kAvx2Kernels = {
    16,
    6,
    {nullptr, tileAvx2<1>, tileAvx2<2>, tileAvx2<3>, tileAvx2<4>, tileAvx2<5>, tileAvx2<6>},
    vecAvx2<4>,  // 8 accumulators of the 16 registers
    4};
constexpr GemmKernels kAvx512Kernels = {
    32,
    12,
    {nullptr, tileAvx512<1>, tileAvx512<2>, tileAvx512<3>, tileAvx512<4>, tileAvx512<5>,
     tileAvx512<6>, tileAvx512<7>, tileAvx512<8>, tileAvx512<9>, tileAvx512<10>, tileAvx512<11>,
     tileAvx512<12>},
    vecAvx512<8>,  // 16 of 32
    8};

const GemmKernels& currentKernels() {
  return cpuIsa() >= CpuIsa::kAvx512 ? kAvx512Kernels : kAvx2Kernels;
}

}  // namespace

bool packedGemmAvailable() { return cpuIsa() >= CpuIsa::kAvx2; }

void packedGemm(const float* a, int64_t rows, int64_t k_size, const float* b, int64_t ldb,
                int64_t n_size, float* sums, int64_t ldc) {
  const GemmKernels& kernels = currentKernels();
  // One panel's buffer per thread, reused: a fresh 256 KiB allocation per call would be mapped
  // and faulted in every time.
  thread_local std::vector<float> panel;
  panel.resize(static_cast<size_t>(kPanelK * kPanelN));
  if (k_size == 0) {
    for (int64_t r = 0; r < rows; ++r) std::fill(sums + r * ldc, sums + r * ldc + n_size, 0.0f);
    return;
  }
  const int64_t strip = kernels.strip;
  for (int64_t n0 = 0; n0 < n_size; n0 += kPanelN) {
    const int64_t nc = std::min(kPanelN, n_size - n0);
    // K in panels, in order: every sum still adds its products in ascending k.
    for (int64_t k0 = 0; k0 < k_size; k0 += kPanelK) {
      const int64_t kc = std::min(kPanelK, k_size - k0);
      packPanel(b, ldb, k0, kc, n0, nc, strip, panel.data());
      // The next panel's part of b comes from memory: its lines are asked for into L2 a few at
      // a time between the tiles of this one, so that packing it reads from cache.
      const bool last_k = k0 + kPanelK >= k_size;
      const int64_t next_k0 = last_k ? 0 : k0 + kPanelK, next_n0 = last_k ? n0 + kPanelN : n0;
      const bool has_next = next_n0 < n_size;
      const int64_t next_kc = std::min(kPanelK, k_size - next_k0);
      const int64_t next_nc = has_next ? std::min(kPanelN, n_size - next_n0) : 0;
      const int64_t lines_per_row = (next_nc + 15) / 16,
                    next_lines = has_next ? next_kc * lines_per_row : 0;
      const int64_t calls =
          (rows + kernels.max_rows - 1) / kernels.max_rows * ((nc + strip - 1) / strip);
      const int64_t per_call = (next_lines + calls - 1) / calls;
      int64_t line = 0;
      // Row tile by row tile, each over every strip of the panel (in L2); the tile's rows of
      // a stay in L1. (Packing a k-major as well measured no faster here: the kernel already
      // runs near the FMA peak, and the copy cost 15% of a 512 x 768 x 768 product.)
      for (int64_t r0 = 0; r0 < rows; r0 += kernels.max_rows) {
        const int64_t tile_rows = std::min<int64_t>(kernels.max_rows, rows - r0);
        for (int64_t s = 0; s * strip < nc; ++s) {
          for (const int64_t end = std::min(next_lines, line + per_call); line < end; ++line)
            __builtin_prefetch(
                b + (next_k0 + line / lines_per_row) * ldb + next_n0 + (line % lines_per_row) * 16,
                0, 2);
          kernels.tiles[tile_rows](a + r0 * k_size + k0, k_size, panel.data() + s * kPanelK * strip,
                                   kc, sums + r0 * ldc + n0 + s * strip, ldc,
                                   std::min(strip, nc - s * strip), k0 > 0, {});
        }
      }
    }
  }
}

int64_t packedGemmStrip() { return packedGemmAvailable() ? currentKernels().strip : 0; }

std::shared_ptr<const FloatStrips> packFloatStrips(const float* b, int64_t ldb, int64_t k,
                                                   int64_t n, ThreadPool* pool) {
  auto strips = std::make_shared<FloatStrips>();
  strips->k = k;
  strips->n = n;
  strips->strip = packedGemmStrip();
  const int64_t strip = strips->strip, count = (n + strip - 1) / strip;
  strips->data = keptBuffer<float>(strips->bytes());
  float* data = strips->data.get();
  // Sixteen strips per task: each row of b is then read in runs of 16 x strip floats.
  constexpr int64_t kStripsPerTask = 16;
  parallelFor(pool, (count + kStripsPerTask - 1) / kStripsPerTask, [&](int64_t task) {
    const int64_t s0 = task * kStripsPerTask, s1 = std::min(count, s0 + kStripsPerTask);
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t s = s0; s < s1; ++s) {
        const int64_t cols = std::min(strip, n - s * strip);
        float* to = data + (s * k + kk) * strip;
        std::memcpy(to, b + kk * ldb + s * strip, static_cast<size_t>(cols) * sizeof(float));
        if (cols < strip) std::fill(to + cols, to + strip, 0.0f);
      }
  });
  return strips;
}

void stripsGemm(const float* a, int64_t rows, const FloatStrips& strips, int64_t n0, int64_t n_size,
                float* sums, int64_t ldc) {
  const GemmKernels& kernels = currentKernels();
  const int64_t k_size = strips.k, strip = strips.strip;
  if (k_size == 0) {
    for (int64_t r = 0; r < rows; ++r) std::fill(sums + r * ldc, sums + r * ldc + n_size, 0.0f);
    return;
  }
  auto strip_at = [&](int64_t column, int64_t k0) {
    return strips.data.get() + ((n0 + column) / strip * k_size + k0) * strip;
  };
  if (rows <= kernels.max_rows) {
    // One row tile (decode, a batch's step): each strip streamed once over all of K; one row
    // reads vec_strips strips at a time.
    int64_t c = 0;
    if (rows == 1)
      for (; c + (kernels.vec_strips - 1) * strip < n_size; c += kernels.vec_strips * strip)
        kernels.vec(a, strip_at(c, 0), k_size, sums + c, n_size - c);
    for (; c < n_size; c += strip)
      kernels.tiles[rows](a, k_size, strip_at(c, 0), k_size, sums + c, ldc,
                          std::min(strip, n_size - c), false, {});
    return;
  }
  // As packedGemm, the panel read in place: K in panels of kPanelK (every sum still adds its
  // products in ascending k), kPanelN columns at a time, row tile by row tile.
  const int64_t strips_total = (strips.n + strip - 1) / strip;
  for (int64_t c0 = 0; c0 < n_size; c0 += kPanelN) {
    const int64_t nc = std::min(kPanelN, n_size - c0);
    for (int64_t k0 = 0; k0 < k_size; k0 += kPanelK) {
      const int64_t kc = std::min(kPanelK, k_size - k0);
      // The next block of the strips (the next panel of K, else the next columns: past n_size
      // those that follow this call's), asked for during this block's tiles: strip s of it by
      // the tiles of strip s of this one, a row tile's share each.
      int64_t next_k0 = k0 + kPanelK, next_c0 = c0;
      if (next_k0 >= k_size) next_k0 = 0, next_c0 = c0 + nc;
      const int64_t next_first = (n0 + next_c0) / strip;
      const int64_t next_strips =
          std::max<int64_t>(0, std::min((nc + strip - 1) / strip, strips_total - next_first));
      const PrefetchAhead ahead(next_strips > 0 ? strip_at(next_c0, next_k0) : strips.data.get(),
                                next_strips, std::min(kPanelK, k_size - next_k0) * strip * 4,
                                k_size * strip * 4,
                                (rows + kernels.max_rows - 1) / kernels.max_rows);
      for (int64_t r0 = 0; r0 < rows; r0 += kernels.max_rows) {
        const int64_t tile_rows = std::min<int64_t>(kernels.max_rows, rows - r0);
        for (int64_t c = c0; c < c0 + nc; c += strip)
          kernels.tiles[tile_rows](a + r0 * k_size + k0, k_size, strip_at(c, k0), kc,
                                   sums + r0 * ldc + c, ldc, std::min(strip, c0 + nc - c), k0 > 0,
                                   ahead.part((c - c0) / strip, r0 / kernels.max_rows));
      }
    }
  }
}
#else
bool packedGemmAvailable() { return false; }
void packedGemm(const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t) {}
int64_t packedGemmStrip() { return 0; }
std::shared_ptr<const FloatStrips> packFloatStrips(const float*, int64_t, int64_t, int64_t,
                                                   ThreadPool*) {
  return nullptr;
}
void stripsGemm(const float*, int64_t, const FloatStrips&, int64_t, int64_t, float*, int64_t) {}
#endif

void floatGemm(const float* a, int64_t rows, int64_t k, const float* b, int64_t n, float* sums,
               ThreadPool* pool) {
  constexpr int64_t kColumns = 128;  // 4 strips of AVX-512 tiles, 8 of AVX2's
  parallelFor(pool, (n + kColumns - 1) / kColumns, [&](int64_t task) {
    const int64_t n0 = task * kColumns, width = std::min(kColumns, n - n0);
    if (packedGemmAvailable()) return packedGemm(a, rows, k, b + n0, n, width, sums + n0, n);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = n0; c < n0 + width; ++c) {
        float sum = 0;
        for (int64_t j = 0; j < k; ++j) sum += a[r * k + j] * b[j * n + c];
        sums[r * n + c] = sum;
      }
  });
}

}  // namespace llmc
