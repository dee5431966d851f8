// One row of LlmNorm (cpu/fused.cpp): the same bits at every ISA level, in 16 or 8 lanes where
// the CPU has AVX-512 or AVX2.
#pragma once

#include <cstdint>

namespace llmc {

// s = x, or x + residual written to `sum` (a row of scratch where the sum is not an output);
// then y = (s - mean) * inv * gamma + beta (+ 0 without beta), mean 0 for an RMS norm, inv = 1 /
// sqrt(float(Σ (s - mean)² / width) + epsilon). The mean and the squares are summed in double as
// eight interleaved partial sums (element i in partial i % 8) added in order at the end: one
// chain of dependent adds held a 512-token prefill's norms to about 4 cycles an element.
void normRow(const float* x, const float* residual, float* sum, int64_t width, bool rms,
             float epsilon, const float* gamma, const float* beta, float* y);

}  // namespace llmc
