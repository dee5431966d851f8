// Sparse int8 weights (core/sparse.h, cpu/sparse_rows.cpp, LlmSparsifyWeight and the sparse
// path of LlmQuantMatMul): the format by hand; packing and expansion round trips at every ISA
// level the host has over sparsities from 0 to 1 and row lengths off the 8s and 64s; corrupted
// masks found at every level; and the product over a sparse weight bit-identical to the product
// over the same weight dense, for int8 and w8a8, at every level and for row counts that take
// each kernel (decode's rows, prefill's tiles, panels and AMX where the host has them).
#include "core/sparse.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "kernel_test_util.h"

namespace llmc {
namespace {

using testing::intParam;
using testing::makeTensor;
using testing::params;
using testing::randomFloat;
using testing::runKernel;
using testing::stringParam;
using testing::TestKernelContext;
using testing::values;

// n rows of k int8 values, each value zero with probability `sparsity` (never zero otherwise).
std::vector<int8_t> randomSparse(int64_t n, int64_t k, double sparsity, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::uniform_int_distribution<int> value(-127, 126);
  std::vector<int8_t> out(static_cast<size_t>(n * k));
  for (int8_t& v : out) {
    const int x = value(rng);
    v = unit(rng) < sparsity ? 0 : static_cast<int8_t>(x >= 0 ? x + 1 : x);
  }
  return out;
}

int64_t maxNonZeros(const std::vector<int8_t>& dense, int64_t n, int64_t k) {
  int64_t most = 0;
  for (int64_t r = 0; r < n; ++r)
    most = std::max<int64_t>(most,
                             k - std::count(dense.begin() + r * k, dense.begin() + (r + 1) * k, 0));
  return most;
}

struct Packed {
  Tensor packed, mask;
  SparseInt8Rows rows;
};
Packed pack(const std::vector<int8_t>& dense, int64_t n, int64_t k, int64_t stride) {
  Packed p;
  p.packed = Tensor::allocate(DType::kInt8, {n, stride});
  p.mask = Tensor::allocate(DType::kUInt8, {n, (k + 7) / 8});
  EXPECT_TRUE(packSparseInt8Rows(dense.data(), n, k, stride, p.packed.data<int8_t>(),
                                 p.mask.data<uint8_t>())
                  .ok());
  EXPECT_TRUE(makeSparseInt8Rows(p.packed, p.mask, k, &p.rows).ok());
  return p;
}

TEST(SparseInt8Test, FormatByHand) {
  // Row 0 stores columns 1, 3 and 9; row 1 column 0 only (its stride's last byte is padding).
  const std::vector<int8_t> dense = {0,  5, 0, -3, 0, 0, 0, 0, 0, 7,  //
                                     -1, 0, 0, 0,  0, 0, 0, 0, 0, 0};
  Packed p = pack(dense, 2, 10, 3);
  EXPECT_EQ(values<int8_t>(p.packed), (std::vector<int8_t>{5, -3, 7, -1, 0, 0}));
  EXPECT_EQ(values<uint8_t>(p.mask), (std::vector<uint8_t>{0x0a, 0x02, 0x01, 0x00}));
  for (CpuIsa level : cpuIsaLevelsAllowed()) {
    std::vector<int8_t> out(20, 99);
    EXPECT_EQ(expandSparseInt8RowsAt(level, p.rows, 0, 2, out.data()), -1) << cpuIsaName(level);
    EXPECT_EQ(out, dense) << cpuIsaName(level);
  }
  // Too many non-zeros for the stride: refused, naming the row.
  Tensor packed = Tensor::allocate(DType::kInt8, {2, 2}),
         mask = Tensor::allocate(DType::kUInt8, {2, 2});
  const Status s =
      packSparseInt8Rows(dense.data(), 2, 10, 2, packed.data<int8_t>(), mask.data<uint8_t>());
  EXPECT_NE(s.message().find("row 0 has more than 2 non-zeros"), std::string::npos) << s.message();
  // Shapes that do not fit K.
  SparseInt8Rows rows;
  EXPECT_NE(makeSparseInt8Rows(p.packed, p.mask, 17, &rows).message().find("mask"),
            std::string::npos);
  EXPECT_NE(makeSparseInt8Rows(p.packed, p.mask, 2, &rows).message().find("exceeds K"),
            std::string::npos);
  EXPECT_FALSE(makeSparseInt8Rows(p.mask, p.mask, 10, &rows).ok());
}

TEST(SparseInt8Test, RoundTripAtEveryLevelSparsityAndLength) {
  for (int64_t k : {1, 7, 8, 24, 63, 64, 65, 100, 192, 448, 1000})
    for (double sparsity : {0.0, 0.1, 0.5, 0.75, 0.9, 0.99, 1.0})
      for (int64_t padding : {0, 5}) {
        const int64_t n = 6;
        const std::vector<int8_t> dense =
            randomSparse(n, k, sparsity, static_cast<uint32_t>(k * 100 + sparsity * 10));
        const int64_t stride = std::min(k, maxNonZeros(dense, n, k) + padding);
        Packed p = pack(dense, n, k, stride);
        for (CpuIsa level : cpuIsaLevelsAllowed()) {
          SCOPED_TRACE("K " + std::to_string(k) + ", sparsity " + std::to_string(sparsity) +
                       ", stride " + std::to_string(stride) + ", level " + cpuIsaName(level));
          std::vector<int8_t> out(dense.size(), 99);
          ASSERT_EQ(expandSparseInt8RowsAt(level, p.rows, 0, n, out.data()), -1);
          ASSERT_EQ(out, dense);
          // A range of rows, into the start of the buffer.
          std::vector<int8_t> part(static_cast<size_t>(2 * k), 99);
          ASSERT_EQ(expandSparseInt8RowsAt(level, p.rows, 3, 5, part.data()), -1);
          ASSERT_TRUE(std::equal(part.begin(), part.end(), dense.begin() + 3 * k));
        }
      }
}

TEST(SparseInt8Test, CorruptedMaskIsFoundAtEveryLevel) {
  const int64_t n = 4, k = 200;
  const std::vector<int8_t> dense = randomSparse(n, k, 0.5, 7);
  Packed p = pack(dense, n, k, maxNonZeros(dense, n, k));
  // Row 2 gains every column: far more set bits than its stride holds.
  uint8_t* mask = p.mask.data<uint8_t>();
  for (int64_t b = 0; b < k / 8; ++b) mask[2 * (k / 8) + b] = 0xff;
  std::vector<int8_t> reference(dense.size());
  EXPECT_EQ(expandSparseInt8RowsAt(CpuIsa::kScalar, p.rows, 0, n, reference.data()), 2);
  for (CpuIsa level : cpuIsaLevelsAllowed()) {
    std::vector<int8_t> out(dense.size(), 99);
    EXPECT_EQ(expandSparseInt8RowsAt(level, p.rows, 0, n, out.data()), 2) << cpuIsaName(level);
    EXPECT_EQ(out, reference) << cpuIsaName(level);  // the same bytes everywhere, in bounds
    EXPECT_TRUE(std::equal(out.begin(), out.begin() + 2 * k, dense.begin())) << cpuIsaName(level);
  }
}

TEST(SparseInt8Test, SparsifyKernelPacksAndRefuses) {
  const int64_t n = 5, k = 96;
  const std::vector<int8_t> dense = randomSparse(n, k, 0.5, 11);
  const int64_t stride = maxNonZeros(dense, n, k);
  const Tensor w = makeTensor(DType::kInt8, {n, k}, dense);
  Packed p = pack(dense, n, k, stride);
  EXPECT_EQ(values<int8_t>(
                runKernel("LlmSparsifyWeight", {w}, params({{"stride", intParam(stride)}}), 2, 0)),
            values<int8_t>(p.packed));
  EXPECT_EQ(values<uint8_t>(
                runKernel("LlmSparsifyWeight", {w}, params({{"stride", intParam(stride)}}), 2, 1)),
            values<uint8_t>(p.mask));
  TestKernelContext ctx;
  ctx.inputs = {w};
  ctx.num_outputs = 2;
  ctx.kernel_params = params({{"stride", intParam(stride - 1)}});
  EXPECT_NE(ctx.run("LlmSparsifyWeight").message().find("non-zeros"), std::string::npos);
  ctx.kernel_params = params({{"stride", intParam(k + 1)}});
  EXPECT_FALSE(ctx.run("LlmSparsifyWeight").ok());
  ctx.inputs = {randomFloat({n, k}, 3)};
  ctx.kernel_params = params({{"stride", intParam(stride)}});
  EXPECT_FALSE(ctx.run("LlmSparsifyWeight").ok());
}

// The product over the packed weight equals the product over the dense one bit for bit: the
// kernels see the same integers either way.
TEST(SparseInt8Test, QuantMatMulOverSparseEqualsDense) {
  const CpuIsa supported = cpuIsaSupported();
  for (const char* format : {"int8", "w8a8"})
    for (int64_t k : {64, 192, 448})
      for (double sparsity : {0.3, 0.5, 0.9}) {
        const int64_t n = 72;  // past one task of 64 channels, and not a multiple of 16
        const std::vector<int8_t> dense =
            randomSparse(n, k, sparsity, static_cast<uint32_t>(k + sparsity * 100));
        const Tensor data = makeTensor(DType::kInt8, {n, k}, dense);
        Tensor scales = Tensor::allocate(DType::kFloat32, {n, 1});
        for (int64_t c = 0; c < n; ++c) scales.data<float>()[c] = 0.01f * static_cast<float>(c + 1);
        Packed p = pack(dense, n, k, maxNonZeros(dense, n, k));
        for (int64_t rows : {1, 5, 16, 40})
          for (bool gated : {false, true}) {
            const Tensor x = randomFloat({rows, k}, static_cast<uint32_t>(rows));
            KernelParams kp = params({{"format", stringParam(format)}, {"group", intParam(k)}});
            if (gated) kp.set("gated", intParam(1)), kp.set("activation", stringParam("silu"));
            for (CpuIsa level : cpuIsaLevelsAllowed()) {
              SCOPED_TRACE(std::string(format) + " K " + std::to_string(k) + ", sparsity " +
                           std::to_string(sparsity) + ", " + std::to_string(rows) + " rows" +
                           (gated ? ", gated" : "") + ", level " + cpuIsaName(level));
              setCpuIsaCapForTesting(level);
              const Tensor want = runKernel("LlmQuantMatMul", {x, data, scales, std::nullopt}, kp);
              const Tensor got = runKernel(
                  "LlmQuantMatMul",
                  {x, p.packed, scales, std::nullopt, std::nullopt, std::nullopt, p.mask}, kp);
              ASSERT_EQ(values<float>(got), values<float>(want));
            }
            setCpuIsaCapForTesting(supported);
          }
      }
}

TEST(SparseInt8Test, QuantMatMulRefusesBadSparseWeights) {
  const int64_t n = 8, k = 64;
  const std::vector<int8_t> dense = randomSparse(n, k, 0.5, 5);
  Packed p = pack(dense, n, k, maxNonZeros(dense, n, k));
  Tensor scales = Tensor::allocate(DType::kFloat32, {n, 1});
  std::fill(scales.data<float>(), scales.data<float>() + n, 0.5f);
  TestKernelContext ctx;
  ctx.kernel_params = params({{"format", stringParam("int8")}, {"group", intParam(k)}});
  ctx.inputs = {randomFloat({2, k}, 1), p.packed,     scales, std::nullopt,
                std::nullopt,           std::nullopt, p.mask};
  ASSERT_TRUE(ctx.run("LlmQuantMatMul").ok());
  // A mask row with more bits than the stride: an error naming the row, not a read past it.
  std::fill(p.mask.data<uint8_t>() + 3 * (k / 8), p.mask.data<uint8_t>() + 4 * (k / 8),
            uint8_t{0xff});
  ctx.inputs[6] = p.mask;
  for (int64_t rows : {1, 2, 20})  // decode's fused kernel, the expanded tiles, the panels
    for (CpuIsa level : cpuIsaLevelsAllowed()) {
      setCpuIsaCapForTesting(level);
      ctx.inputs[0] = randomFloat({rows, k}, 1);
      const Status corrupted = ctx.run("LlmQuantMatMul");
      EXPECT_NE(corrupted.message().find("row 3"), std::string::npos)
          << rows << " rows, " << cpuIsaName(level) << ": " << corrupted.message();
    }
  setCpuIsaCapForTesting(cpuIsaSupported());
  // A mask of the wrong shape, and a mask on a 4-bit weight.
  ctx.inputs[6] = Tensor::allocate(DType::kUInt8, {n, 4});
  EXPECT_NE(ctx.run("LlmQuantMatMul").message().find("mask"), std::string::npos);
  ctx.inputs[6] = p.mask;
  ctx.kernel_params = params({{"format", stringParam("int4")}, {"group", intParam(32)}});
  EXPECT_NE(ctx.run("LlmQuantMatMul").message().find("int8 and w8a8"), std::string::npos);
}

}  // namespace
}  // namespace llmc
