// The float32 product of many rows by a [K, N] weight (prefill), for the fused matrix kernels
// (cpu/fused.cpp). Decode (one row) streams the weight in cpu/fused.cpp instead.
#pragma once

#include <cstdint>
#include <memory>

namespace llmc {

class ThreadPool;

// Whether this CPU runs packedGemm (AVX2 and FMA).
bool packedGemmAvailable();
// sums[r * ldc + n] = Σ_k a[r * k_size + k] * b[k * ldb + n] for r < rows and n < n_size, each
// sum in ascending k (as the reference MatMul adds), one fused multiply-add per product: a sum
// does not depend on how many rows or columns one call covers, so callers split the columns
// and rows over threads and get the same bits. b is copied 256 x 256 at a time into a panel of
// strips that stays in L2, and a tile of sums stays in registers (AVX2: 6 rows x 16 columns,
// AVX-512: 12 x 32): each weight is read from memory once per call, each panel element once per
// tile of rows.
void packedGemm(const float* a, int64_t rows, int64_t k_size, const float* b, int64_t ldb,
                int64_t n_size, float* sums, int64_t ldc);

// sums [rows, n] = a [rows, k] x b [k, n] (b's rows n apart), column ranges split over `pool`
// (may be null): packedGemm where the CPU has it, else each sum in float32 in ascending k. For
// the compiler's statistics (calibration's XᵀX, AWQ's search), not the kernels.
void floatGemm(const float* a, int64_t rows, int64_t k, const float* b, int64_t n, float* sums,
               ThreadPool* pool);

// A [K, N] weight repacked once into the layout packedGemm copies it into per call, for a whole
// session (an engine's weight, kept by the executor): strips of packedGemmStrip() columns, each
// K x strip floats contiguous, strips in column order, the last zero-padded. Read in order it
// is one stream per column range, for decode as for prefill.
struct FloatStrips {
  int64_t k = 0, n = 0, strip = 0;
  std::shared_ptr<float> data;  // 64-byte aligned
  size_t bytes() const { return static_cast<size_t>((n + strip - 1) / strip * strip * k) * 4; }
};
// The strip width of this CPU's packedGemm tiles: 32 (AVX-512), 16 (AVX2), 0 (no packedGemm).
int64_t packedGemmStrip();
// b [K, N] (rows ldb apart) as strips of packedGemmStrip() columns, on `pool` (may be null).
std::shared_ptr<const FloatStrips> packFloatStrips(const float* b, int64_t ldb, int64_t k,
                                                   int64_t n, ThreadPool* pool);
// sums[r * ldc + c] = Σ_k a[r * K + k] * b[k][n0 + c] for r < rows and c < n_size, read from
// `strips` (n0 a multiple of its strip, which must be packedGemmStrip()): packedGemm's tiles with
// the panel copy gone, so packedGemm's bits for any number of rows (one row: the decode loops'
// too, one fused multiply-add per product in ascending k).
void stripsGemm(const float* a, int64_t rows, const FloatStrips& strips, int64_t n0, int64_t n_size,
                float* sums, int64_t ldc);

}  // namespace llmc
