// Float32 products of many rows (prefill) with AVX2/FMA: b packed into panels that stay in L2,
// a 4 x 16 tile of sums in registers. See cpu/gemm.h.
#include "cpu/gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace llmc {

#if defined(__x86_64__) && defined(__GNUC__)
namespace {

// A panel is kPanelK rows of b by kPanelN columns, stored as strips of kStrip columns, each
// strip kPanelK x kStrip contiguous (256 KiB: it stays in L2 while every row block reads it).
constexpr int64_t kPanelK = 256;
constexpr int64_t kPanelN = 256;
constexpr int64_t kStrip = 16;
constexpr int kTileRows = 4;

// Copies b[k0 .. k0+kc, n0 .. n0+nc] into strips, zero-padding the last strip's columns. Row by
// row, so that b is read in order (it comes from memory; the panel is in cache).
void packPanel(const float* b, int64_t ldb, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
               float* panel) {
  constexpr int64_t kRowsAhead = 8;  // rows of b asked for ahead: each is a separate 1 KiB run
  for (int64_t k = 0; k < kc; ++k) {
    const float* from = b + (k0 + k) * ldb + n0;
    if (k + kRowsAhead < kc)
      for (int64_t line = 0; line < nc; line += 16)
        __builtin_prefetch(from + kRowsAhead * ldb + line);
    for (int64_t s = 0; s * kStrip < nc; ++s) {
      const int64_t cols = std::min(kStrip, nc - s * kStrip);
      float* to = panel + (s * kPanelK + k) * kStrip;
      std::memcpy(to, from + s * kStrip, static_cast<size_t>(cols) * sizeof(float));
      if (cols < kStrip) std::fill(to + cols, to + kStrip, 0.0f);
    }
  }
}

// sums[r][0 .. 16) (+)= Σ_{k < kc} a[r * lda + k] * strip[k][..] for r < kRows, k ascending;
// `accumulate` adds to what `sums` holds (an earlier panel of K). Writes `cols` columns.
template <int kRows>
__attribute__((target("avx2,fma"))) void tile(const float* a, int64_t lda, const float* strip,
                                              int64_t kc, float* sums, int64_t ldc, int64_t cols,
                                              bool accumulate) {
  __m256 c[kRows][2];
  float edge[kRows][kStrip];
  for (int r = 0; r < kRows; ++r) {
    if (!accumulate) {
      c[r][0] = c[r][1] = _mm256_setzero_ps();
    } else if (cols == kStrip) {
      c[r][0] = _mm256_loadu_ps(sums + r * ldc);
      c[r][1] = _mm256_loadu_ps(sums + r * ldc + 8);
    } else {
      std::fill(edge[r], edge[r] + kStrip, 0.0f);
      std::memcpy(edge[r], sums + r * ldc, static_cast<size_t>(cols) * sizeof(float));
      c[r][0] = _mm256_loadu_ps(edge[r]);
      c[r][1] = _mm256_loadu_ps(edge[r] + 8);
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(strip + k * kStrip);
    const __m256 b1 = _mm256_loadu_ps(strip + k * kStrip + 8);
    for (int r = 0; r < kRows; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r * lda + k);
      c[r][0] = _mm256_fmadd_ps(x, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(x, b1, c[r][1]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    if (cols == kStrip) {
      _mm256_storeu_ps(sums + r * ldc, c[r][0]);
      _mm256_storeu_ps(sums + r * ldc + 8, c[r][1]);
    } else {
      _mm256_storeu_ps(edge[r], c[r][0]);
      _mm256_storeu_ps(edge[r] + 8, c[r][1]);
      std::memcpy(sums + r * ldc, edge[r], static_cast<size_t>(cols) * sizeof(float));
    }
  }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t,
                        bool);
constexpr TileFn kTiles[kTileRows + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>};

}  // namespace

bool packedGemmAvailable() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

void packedGemm(const float* a, int64_t rows, int64_t k_size, const float* b, int64_t ldb,
                int64_t n_size, float* sums, int64_t ldc) {
  // One panel's buffer per thread, reused: a fresh 256 KiB allocation per call would be mapped
  // and faulted in every time.
  thread_local std::vector<float> panel;
  panel.resize(static_cast<size_t>(kPanelK * kPanelN));
  if (k_size == 0) {
    for (int64_t r = 0; r < rows; ++r) std::fill(sums + r * ldc, sums + r * ldc + n_size, 0.0f);
    return;
  }
  for (int64_t n0 = 0; n0 < n_size; n0 += kPanelN) {
    const int64_t nc = std::min(kPanelN, n_size - n0);
    // K in panels, in order: every sum still adds its products in ascending k.
    for (int64_t k0 = 0; k0 < k_size; k0 += kPanelK) {
      const int64_t kc = std::min(kPanelK, k_size - k0);
      packPanel(b, ldb, k0, kc, n0, nc, panel.data());
      for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
        const int64_t tile_rows = std::min<int64_t>(kTileRows, rows - r0);
        for (int64_t s = 0; s * kStrip < nc; ++s)
          kTiles[tile_rows](a + r0 * k_size + k0, k_size, panel.data() + s * kPanelK * kStrip, kc,
                            sums + r0 * ldc + n0 + s * kStrip, ldc,
                            std::min(kStrip, nc - s * kStrip), k0 > 0);
      }
    }
  }
}
#else
bool packedGemmAvailable() { return false; }
void packedGemm(const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t) {}
#endif

}  // namespace llmc
