// The float32 product of many rows by a [K, N] weight (prefill), for the fused matrix kernels
// (cpu/fused.cpp). Decode (one row) streams the weight in cpu/fused.cpp instead.
#pragma once

#include <cstdint>

namespace llmc {

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

}  // namespace llmc
