// Sparse storage of int8 weights (docs/pruning.md, docs/engine-format.md): a pruned weight's
// rows [N, K] as a bitmask of the stored columns and the stored values packed in column order,
// so that a product reads (stride + K / 8) bytes per row instead of K.
//
// - `mask`: uint8 [N, ceil(K / 8)]; bit j % 8 (least significant first) of byte j / 8 of row n
//   says column j of row n is stored. Bits past K are zero.
// - `packed`: int8 [N, stride]; row n holds its stored values in column order, then zeros up to
//   `stride`. Every row has the same stride, so rows start at n * stride and split among threads
//   as dense ones do; the compiler chooses the stride as the pruned rows' kept count (every row
//   keeps the same number), or the largest number of non-zeros in a row.
//
// The kernels expand the rows they are about to use into a small dense buffer (L1 or L2) and run
// the dense kernels on it: decode then reads the weight's compact bytes from memory once, and
// every dense kernel (AVX2, AVX-512, AMX, w8a8) takes sparse weights unchanged.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"
#include "llmc/status.h"
#include "llmc/tensor.h"

namespace llmc {

struct SparseInt8Rows {
  const int8_t* packed = nullptr;
  const uint8_t* mask = nullptr;
  int64_t n = 0, k = 0, stride = 0;

  int64_t maskBytes() const { return (k + 7) / 8; }
};

// Checks `packed` (int8 [N, stride], stride <= K) and `mask` (uint8 [N, ceil(K / 8)]) against
// each other and K, and fills `out` (which borrows them). The message names the tensor at fault.
Status makeSparseInt8Rows(const Tensor& packed, const Tensor& mask, int64_t k, SparseInt8Rows* out);

// Packs the dense rows `dense` [n, k]: every non-zero value is stored, zeros are not. Fails,
// naming the row, when a row has more than `stride` non-zeros. `packed` is [n, stride], `mask`
// [n, ceil(k / 8)].
Status packSparseInt8Rows(const int8_t* dense, int64_t n, int64_t k, int64_t stride, int8_t* packed,
                          uint8_t* mask);

// Rows [n0, n1) as dense int8 [n1 - n0, K] into `out`, at the ISA level (scalar, SSSE3 shuffles
// from AVX2 up, vpexpandb where the CPU has AVX-512 VBMI2): the same bytes at every level.
// Returns the first row in [n0, n1) whose mask sets more than `stride` bits (a corrupted weight;
// that row is expanded as far as its stride allows), or -1.
int64_t expandSparseInt8Rows(const SparseInt8Rows& rows, int64_t n0, int64_t n1, int8_t* out);
// The same at a given level (tests; a level above the CPU's must not be asked for).
int64_t expandSparseInt8RowsAt(CpuIsa isa, const SparseInt8Rows& rows, int64_t n0, int64_t n1,
                               int8_t* out);

// With --sparse-storage, the compiler stores a pruned weight sparse where
// (stride + ceil(K / 8)) <= kSparseMaxBytesShare * K (40% sparsity and more): above it the
// engine would shrink by less than a quarter. Decode speed is no reason on the CPUs measured:
// sparse decoded at 0.81-0.94x dense at 40-70% (docs/pruning.md, bench/prune.py), so the
// compiler keeps pruned weights dense unless asked.
constexpr double kSparseMaxBytesShare = 0.75;

}  // namespace llmc
