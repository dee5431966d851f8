// The float32 product of many rows by a [K, N] weight (prefill), for the fused matrix kernels
// (cpu/fused.cpp). Decode (one row) streams the weight in cpu/fused.cpp instead.
#pragma once

#include <cstdint>

namespace llmc {

// Whether this CPU runs packedGemm (AVX2 and FMA).
bool packedGemmAvailable();
// sums[r * n_size + n] = Σ_k a[r * k_size + k] * b[k * n_size + n] for r < rows, each sum in
// ascending k (as the reference MatMul adds). b is copied 256 x 256 at a time into a panel of
// 16-column strips that stays in L2, and a 4-row x 16-column tile of sums stays in registers:
// each weight is read from memory once per call, each panel element once per 4 rows.
void packedGemm(const float* a, int64_t rows, int64_t k_size, const float* b, int64_t n_size,
                float* sums);

}  // namespace llmc
