// Kernels per ISA level (core/cpu_features.h): every level the host supports runs against the
// reference, and the levels whose arithmetic is the same give the same bits. The levels above
// the host's cannot run here; test/isa/emulated_host.py runs these tests on an emulated CPU
// without AVX-512, where the AVX2 kernels are the highest level.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "cpu/attend.h"
#include "cpu/gemm.h"
#include "kernel_test_util.h"

namespace llmc::testing {
namespace {

// Caps the ISA level for one scope.
class IsaCap {
 public:
  explicit IsaCap(CpuIsa cap) { setCpuIsaCapForTesting(cap); }
  ~IsaCap() { setCpuIsaCapForTesting(CpuIsa::kAvx512Vnni); }
};

std::vector<CpuIsa> supportedLevels() {
  std::vector<CpuIsa> levels;
  for (CpuIsa level : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni})
    if (level <= cpuIsaSupported()) levels.push_back(level);
  return levels;
}

TEST(CpuFeaturesTest, LevelsFollowTheFeaturesAndTheCap) {
  const CpuFeatures& f = cpuFeatures();
  const CpuIsa supported = cpuIsaSupported();
  EXPECT_EQ(supported >= CpuIsa::kAvx2, f.avx2 && f.fma && f.f16c);
  EXPECT_EQ(supported >= CpuIsa::kAvx512, f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq);
  EXPECT_EQ(supported >= CpuIsa::kAvx512Vnni, supported >= CpuIsa::kAvx512 && f.avx512vnni);
  // The build's own reading of the CPU agrees (it checks the OS's register state too).
  EXPECT_EQ(f.avx2, __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(f.avx512f, __builtin_cpu_supports("avx512f") != 0);
  for (CpuIsa level : supportedLevels()) {
    IsaCap cap(level);
    EXPECT_EQ(cpuIsa(), level);
    EXPECT_NE(cpuSummary().find(std::string("kernels: ") + cpuIsaName(level)), std::string::npos)
        << cpuSummary();
  }
  {
    IsaCap cap(CpuIsa::kAvx512Vnni);  // a cap above the CPU changes nothing
    EXPECT_EQ(cpuIsa(), supported);
  }
  CpuIsa parsed = CpuIsa::kScalar;
  EXPECT_TRUE(parseCpuIsa("avx512", &parsed));
  EXPECT_EQ(parsed, CpuIsa::kAvx512);
  EXPECT_FALSE(parseCpuIsa("AVX2", &parsed));
  EXPECT_FALSE(parseCpuIsa("sse4", &parsed));
}

// packedGemm on every level against float64: the products of float32 values are exact in
// float64, so the only error is float32's rounding of each fused multiply-add, at most
// K * 2^-24 * Σ|a_k b_k| (a bound that holds for any summation order); AVX2 and AVX-512 add
// each sum in the same order with the same fused operations, so they agree bit for bit.
TEST(IsaKernelsTest, PackedGemmOnEveryLevel) {
  struct Case {
    int64_t rows, k, n;
  };
  // Rows not a multiple of either tile (6, 12), K across panels of 256, N with partial strips.
  for (const Case& c : {Case{13, 300, 70}, Case{4, 256, 16}, Case{37, 513, 257}, Case{1, 1, 1}}) {
    Tensor a = randomFloat({c.rows, c.k}, 1), b = randomFloat({c.k, c.n}, 2);
    std::vector<std::vector<float>> results;
    for (CpuIsa level : supportedLevels()) {
      if (level < CpuIsa::kAvx2) continue;  // packedGemm is an AVX2-and-up kernel
      IsaCap cap(level);
      ASSERT_TRUE(packedGemmAvailable());
      std::vector<float> sums(static_cast<size_t>(c.rows * c.n), NAN);
      packedGemm(a.data<float>(), c.rows, c.k, b.data<float>(), c.n, c.n, sums.data(), c.n);
      for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t n = 0; n < c.n; ++n) {
          double exact = 0, magnitude = 0;
          for (int64_t k = 0; k < c.k; ++k) {
            const double p =
                static_cast<double>(a.data<float>()[r * c.k + k]) * b.data<float>()[k * c.n + n];
            exact += p;
            magnitude += std::fabs(p);
          }
          const double bound = static_cast<double>(c.k) * std::ldexp(1.0, -24) * magnitude;
          ASSERT_LE(std::fabs(sums[static_cast<size_t>(r * c.n + n)] - exact), bound)
              << cpuIsaName(level) << " [" << c.rows << ", " << c.k << "] x [" << c.k << ", " << c.n
              << "] at (" << r << ", " << n << ")";
        }
      results.push_back(std::move(sums));
    }
    for (size_t i = 1; i < results.size(); ++i)
      EXPECT_EQ(
          std::memcmp(results[i].data(), results[0].data(), results[0].size() * sizeof(float)), 0)
          << "level " << i << " differs from AVX2";
  }
  {
    IsaCap cap(CpuIsa::kScalar);
    EXPECT_FALSE(packedGemmAvailable());
  }
}

// Attention's row operations on every level: the dot product in its documented order (eight
// interleaved partial sums added pairwise), within float32's rounding of it on each level.
TEST(IsaKernelsTest, AttentionRowOperationsOnEveryLevel) {
  for (int64_t n : {1, 7, 8, 64, 67, 128}) {
    Tensor a = randomFloat({n}, 3), b = randomFloat({n}, 4);
    double exact = 0, magnitude = 0;
    for (int64_t d = 0; d < n; ++d) {
      exact += static_cast<double>(a.data<float>()[d]) * b.data<float>()[d];
      magnitude += std::fabs(static_cast<double>(a.data<float>()[d]) * b.data<float>()[d]);
    }
    for (CpuIsa level : supportedLevels()) {
      IsaCap cap(level);
      const RowOps& ops = rowOps();
      const float dot = ops.dot(a.data<float>(), b.data<float>(), n);
      EXPECT_LE(std::fabs(dot - exact), static_cast<double>(n) * std::ldexp(1.0, -24) * magnitude)
          << cpuIsaName(level) << " n = " << n;
      std::vector<float> out(static_cast<size_t>(n), 1.0f);
      ops.add_scaled(out.data(), 0.5f, b.data<float>(), n);
      for (int64_t d = 0; d < n; ++d)
        EXPECT_NEAR(out[d], 1.0 + 0.5 * b.data<float>()[d],
                    1e-6 * (1 + std::fabs(b.data<float>()[d])))
            << cpuIsaName(level);
    }
  }
}

}  // namespace
}  // namespace llmc::testing
