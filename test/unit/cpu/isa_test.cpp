// Kernels per ISA level (core/cpu_features.h): every level the host supports runs against the
// reference, and the levels whose arithmetic is the same give the same bits. The levels above
// the host's cannot run here; test/isa/emulated_host.py runs these tests on an emulated CPU
// without AVX-512, where the AVX2 kernels are the highest level.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "core/cpu_features.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "cpu/attend.h"
#include "cpu/epilogue.h"
#include "cpu/gemm.h"
#include "kernel_test_util.h"

namespace llmc::testing {
namespace {

// Caps the ISA level for one scope.
class IsaCap {
 public:
  explicit IsaCap(CpuIsa cap) { setCpuIsaCapForTesting(cap); }
  ~IsaCap() { setCpuIsaCapForTesting(kCpuIsaTop); }
};

// Every element of `got` [rows, n] within float32's rounding of its sum, K * 2^-24 * Σ|a_k b_k|,
// of the float64 product a [rows, k] x b [k, n] (the products of float32 values are exact in
// float64, and the bound holds for any summation order); the first element beyond it fails.
void expectWithinSumRounding(const float* a, const float* b, int64_t rows, int64_t k, int64_t n,
                             const float* got, CpuIsa level) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double exact = 0, magnitude = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double p = static_cast<double>(a[r * k + j]) * b[j * n + c];
        exact += p;
        magnitude += std::fabs(p);
      }
      ASSERT_LE(std::fabs(got[r * n + c] - exact),
                static_cast<double>(k) * std::ldexp(1.0, -24) * magnitude)
          << cpuIsaName(level) << " [" << rows << ", " << k << "] x [" << k << ", " << n << "] at ("
          << r << ", " << c << ")";
    }
}

// The levels of attendChunk's two forms that the host supports: AVX2 and AVX-512 (the levels
// above AVX-512 run its AVX-512 form).
// One element of a cache row as `dtype` stores it at `at`: x in the float formats, any code (FP8's
// NaNs aside) in the 8-bit ones.
void storeCacheElement(DType dtype, float x, uint8_t* at, std::mt19937& rng) {
  if (dtype == DType::kFloat32) {
    std::memcpy(at, &x, 4);
  } else if (dtype == DType::kFloat16) {
    const Float16 h = toFloat16(x);
    std::memcpy(at, &h, 2);
  } else if (dtype == DType::kBFloat16) {
    const BFloat16 h = toBFloat16(x);
    std::memcpy(at, &h, 2);
  } else {
    *at = static_cast<uint8_t>(rng());
    if (dtype == DType::kUInt8 && (*at & 0x7f) == 0x7f) *at = 0;
  }
}

std::vector<CpuIsa> chunkLevels() {
  std::vector<CpuIsa> levels;
  for (CpuIsa level : cpuIsaLevelsAllowed())
    if (level == CpuIsa::kAvx2 || level == CpuIsa::kAvx512) levels.push_back(level);
  return levels;
}

// AVX-VNNI is used at the avx2 level and above where the CPU has it, not below, and not when a
// test turns it off; the CPU line says so at the avx2 level.
TEST(CpuFeaturesTest, AvxVnniFollowsTheCpuAndTheSwitch) {
  if (std::getenv("LLMC_CPU_ISA")) GTEST_SKIP() << "LLMC_CPU_ISA is set";
  const bool has = cpuFeatures().avxvnni;
  EXPECT_EQ(cpuAvxVnni(), has);
  {
    IsaCap cap(CpuIsa::kScalar);
    EXPECT_FALSE(cpuAvxVnni());
  }
  if (cpuIsaSupported() >= CpuIsa::kAvx2) {
    IsaCap cap(CpuIsa::kAvx2);
    EXPECT_EQ(cpuAvxVnni(), has);
    EXPECT_EQ(cpuSummary().find("kernels: avx2 with avx_vnni") != std::string::npos, has)
        << cpuSummary();
    setAvxVnniForTesting(false);
    EXPECT_FALSE(cpuAvxVnni());
    EXPECT_EQ(cpuSummary().find("with avx_vnni"), std::string::npos) << cpuSummary();
    setAvxVnniForTesting(true);
  }
}

TEST(CpuFeaturesTest, LevelsFollowTheFeaturesAndTheCap) {
  const CpuFeatures& f = cpuFeatures();
  const CpuIsa supported = cpuIsaSupported();
  EXPECT_EQ(supported >= CpuIsa::kAvx2, f.avx2 && f.fma && f.f16c);
  EXPECT_EQ(supported >= CpuIsa::kAvx512, f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq);
  EXPECT_EQ(supported >= CpuIsa::kAvx512Vnni, supported >= CpuIsa::kAvx512 && f.avx512vnni);
  EXPECT_EQ(supported >= CpuIsa::kAmx, supported >= CpuIsa::kAvx512Vnni && f.amx_int8);
  // The build's own reading of the CPU agrees (it checks the OS's register state too).
  EXPECT_EQ(f.avx2, __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(f.avx512f, __builtin_cpu_supports("avx512f") != 0);
  for (CpuIsa level : cpuIsaLevelsAllowed()) {
    IsaCap cap(level);
    EXPECT_EQ(cpuIsa(), level);
    EXPECT_NE(cpuSummary().find(std::string("kernels: ") + cpuIsaName(level)), std::string::npos)
        << cpuSummary();
  }
  {
    IsaCap cap(kCpuIsaTop);  // a cap above the CPU (and LLMC_CPU_ISA's) changes nothing
    EXPECT_EQ(cpuIsa(), cpuIsaLevelsAllowed().back());
  }
  CpuIsa parsed = CpuIsa::kScalar;
  EXPECT_TRUE(parseCpuIsa("avx512", &parsed));
  EXPECT_EQ(parsed, CpuIsa::kAvx512);
  EXPECT_TRUE(parseCpuIsa("amx", &parsed));
  EXPECT_EQ(parsed, CpuIsa::kAmx);
  EXPECT_FALSE(parseCpuIsa("AVX2", &parsed));
  EXPECT_FALSE(parseCpuIsa("sse4", &parsed));
}

// packedGemm on every level against float64 (expectWithinSumRounding); AVX2 and AVX-512 add
// each sum in the same order with the same fused operations, so they agree bit for bit.
TEST(IsaKernelsTest, PackedGemmOnEveryLevel) {
  struct Case {
    int64_t rows, k, n;
  };
  // Rows not a multiple of either tile (6, 12), K across panels of 256, N with partial strips:
  // the last strip's first 8 lanes partial (70, 257), full with the next 8 partial (29), full.
  for (const Case& c :
       {Case{13, 300, 70}, Case{4, 256, 16}, Case{37, 513, 257}, Case{1, 1, 1}, Case{7, 300, 29}}) {
    Tensor a = randomFloat({c.rows, c.k}, 1), b = randomFloat({c.k, c.n}, 2);
    std::vector<std::vector<float>> results;
    for (CpuIsa level : cpuIsaLevelsAllowed()) {
      if (level < CpuIsa::kAvx2) continue;  // packedGemm is an AVX2-and-up kernel
      IsaCap cap(level);
      ASSERT_TRUE(packedGemmAvailable());
      std::vector<float> sums(static_cast<size_t>(c.rows * c.n), NAN);
      packedGemm(a.data<float>(), c.rows, c.k, b.data<float>(), c.n, c.n, sums.data(), c.n);
      expectWithinSumRounding(a.data<float>(), b.data<float>(), c.rows, c.k, c.n, sums.data(),
                              level);
      if (HasFatalFailure()) return;
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

// floatGemm (the compiler's statistics) on every level, the scalar one included, on one thread
// and on three: within the same bound of the float64 product, and the same bits for any
// thread count (its column ranges are packedGemm's calls, or independent sums).
TEST(IsaKernelsTest, FloatGemmOnEveryLevelAndThreadCount) {
  ThreadPool pool(3);
  for (const auto& [rows, k, n] :
       {std::tuple<int64_t, int64_t, int64_t>{13, 300, 70}, {64, 37, 300}, {1, 1, 1}}) {
    Tensor a = randomFloat({rows, k}, 3), b = randomFloat({k, n}, 4);
    for (CpuIsa level : cpuIsaLevelsAllowed()) {
      IsaCap cap(level);
      std::vector<float> one(static_cast<size_t>(rows * n), NAN), three(one);
      floatGemm(a.data<float>(), rows, k, b.data<float>(), n, one.data(), nullptr);
      floatGemm(a.data<float>(), rows, k, b.data<float>(), n, three.data(), &pool);
      EXPECT_EQ(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)), 0)
          << cpuIsaName(level);
      expectWithinSumRounding(a.data<float>(), b.data<float>(), rows, k, n, one.data(), level);
      if (HasFatalFailure()) return;
    }
  }
}

// The float32 products over a weight kept as strips (as an executor keeps an engine's) give the
// bits of reading the weight itself, on every level with packedGemm, for decode (one row: the
// strips read eight or four at a time, and the ones left), a batch's step (2-12 rows: one row
// tile), prefill (13 and 40 rows: panels of K, K = 300 crossing one), the gated MLP's two halves,
// widths off the strips and the 64-column tasks, and K = 1; each strip set built once.
TEST(IsaKernelsTest, KeptStripsGiveTheBitsOfTheWeight) {
  for (CpuIsa level : cpuIsaLevelsAllowed()) {
    if (level < CpuIsa::kAvx2) continue;
    IsaCap cap(level);
    for (const auto& [rows, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 300, 70},
                                     {1, 64, 2048},
                                     {1, 1, 1},
                                     {1, 96, 257},
                                     {1, 300, 300},
                                     {2, 7, 33},
                                     {5, 37, 70},
                                     {8, 768, 257},
                                     {12, 96, 100},
                                     {13, 300, 200},
                                     {40, 96, 67}}) {
      SCOPED_TRACE(std::string(cpuIsaName(level)) + " [" + std::to_string(rows) + ", " +
                   std::to_string(k) + "] x [" + std::to_string(k) + ", " + std::to_string(n) +
                   "]");
      Tensor a = randomFloat({rows, k}, 5), b = randomFloat({k, n}, 6),
             gate_up = randomFloat({k, 2 * n}, 7);
      for (const auto& [kernel, weight] :
           {std::pair<const char*, const Tensor*>{"LlmFusedMatMul", &b},
            {"LlmGatedMlp", &gate_up}}) {
        const KernelParams p = std::string(kernel) == "LlmGatedMlp"
                                   ? params({{"activation", stringParam("silu")}})
                                   : KernelParams{};
        const Tensor want = runKernel(kernel, {a, *weight}, p);
        std::map<std::string, KernelContext::Derived> derived;
        std::map<std::string, int> builds;
        for (int run = 0; run < 2; ++run) {
          TestKernelContext ctx;
          ctx.inputs = {a, *weight};
          ctx.kernel_params = p;
          ctx.derived = &derived;
          ctx.builds = &builds;
          ASSERT_TRUE(ctx.run(kernel).ok());
          ASSERT_EQ(0, std::memcmp(ctx.outputs[0].data(), want.data(), want.sizeBytes()))
              << kernel << ", run " << run;
        }
        EXPECT_EQ(builds.size(), std::string(kernel) == "LlmGatedMlp" ? 2u : 1u) << kernel;
        for (const auto& [key, count] : builds) EXPECT_EQ(count, 1) << key;
      }
    }
  }
}

// Decode's and small batches' float32 products (LlmFusedMatMul of 1-8 rows: each weight row
// streamed once, sixteen of it per pass over the sums on AVX2 and AVX-512, and on AVX-512 every
// row of a batch of up to 8 over each pass) on every level, within float32's rounding of the sum;
// the AVX-512 copy gives the AVX2 copy's bits (for 4-8 rows AVX2's packedGemm), each sum taking
// the same fused multiply-adds in the same order.
TEST(IsaKernelsTest, DecodeProductsOnEveryLevel) {
  for (const auto& [rows, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 300, 70},
                                   {2, 7, 33},
                                   {3, 768, 257},
                                   {1, 1, 1},
                                   {1, 64, 2048},
                                   {5, 37, 70},
                                   {8, 768, 257}}) {
    Tensor a = randomFloat({rows, k}, 3), b = randomFloat({k, n}, 4);
    std::vector<Tensor> results;
    std::vector<CpuIsa> levels;
    for (CpuIsa level : cpuIsaLevelsAllowed()) {
      IsaCap cap(level);
      Tensor got = runKernel("LlmFusedMatMul", {a, b});
      expectWithinSumRounding(a.data<float>(), b.data<float>(), rows, k, n, got.data<float>(),
                              level);
      if (HasFatalFailure()) return;
      results.push_back(std::move(got));
      levels.push_back(level);
    }
    for (size_t i = 0; i < results.size(); ++i) {
      if (levels[i] <= CpuIsa::kAvx2) continue;
      EXPECT_EQ(std::memcmp(results[i].data<float>(), results[1].data<float>(),
                            static_cast<size_t>(rows * n) * sizeof(float)),
                0)
          << cpuIsaName(levels[i]) << " differs from avx2, [" << rows << ", " << k << "] x [" << k
          << ", " << n << "]";
    }
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
    for (CpuIsa level : cpuIsaLevelsAllowed()) {
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

// attendChunk's exponential against exp in double over its whole domain, x in [-104, 0] (every
// fifth float of it: some 2e8 values) and at the edges: within 2 units in the last place of
// float32 where the result is normal, within 2 of the smallest subnormal below that, 0 past
// -104, NaN for NaN; on every level the host runs it at, each giving the first level's bits.
TEST(IsaKernelsTest, ChunkExponentialWithinTwoUlpOverItsRange) {
  const std::vector<CpuIsa> levels = chunkLevels();
  if (levels.empty()) GTEST_SKIP() << "attendChunk needs AVX2";
  const uint32_t lowest = 0xC2D00000u;  // -104.0f
  double worst = 0;
  float worst_at = 0;
  int64_t disagreements = 0;
  float disagrees_at = 0;
  auto check = [&](float x) {
    setCpuIsaCapForTesting(levels[0]);
    const float got = attendExpForTesting(x);
    for (size_t l = 1; l < levels.size(); ++l) {
      setCpuIsaCapForTesting(levels[l]);
      const float other = attendExpForTesting(x);
      if (std::memcmp(&got, &other, sizeof(got)) != 0 && !(std::isnan(got) && std::isnan(other)))
        ++disagreements, disagrees_at = x;
    }
    const double want = std::exp(static_cast<double>(x));
    const double ulp = want < std::ldexp(1.0, -126)
                           ? std::ldexp(1.0, -149)
                           : std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
    const double error = std::fabs(got - want) / ulp;
    if (!(error <= worst)) worst = error, worst_at = x;
  };
  for (uint32_t bits = 0x80000000u; bits <= lowest; bits += 5) {
    float x;
    std::memcpy(&x, &bits, sizeof(x));
    check(x);
  }
  for (float x :
       {0.0f, -0.0f, -104.0f, -87.33f, -88.0f, -103.9f, -1e-30f, -0.34657359f, -0.34657362f})
    check(x);
  setCpuIsaCapForTesting(kCpuIsaTop);
  EXPECT_LE(worst, 2.0) << "at x = " << worst_at;
  EXPECT_EQ(disagreements, 0) << "levels disagree, e.g. at x = " << disagrees_at;
  for (CpuIsa level : levels) {
    IsaCap cap(level);
    EXPECT_EQ(attendExpForTesting(-104.5f), 0.0f) << cpuIsaName(level);
    EXPECT_EQ(attendExpForTesting(-INFINITY), 0.0f) << cpuIsaName(level);
    EXPECT_TRUE(std::isnan(attendExpForTesting(std::nanf("")))) << cpuIsaName(level);
  }
}

// The activations with a vector form (cpu/epilogue.h: silu, sigmoid, gelu_tanh) over float32:
// every 389th bit pattern of all 2^32 (11 million values, both signs, subnormals, infinities and
// NaNs among them) in rows of 1 to 37 values (tails of every length). On every level the host
// runs, activateRow and gatedRow give activate()'s bits (so one value's result never depends on
// the level or on where its row starts). Against the functions in double, for finite inputs:
// sigmoid within 3 ulp where the result is normal, within 3 of the smallest subnormal below;
// silu within 4 ulp down to 2^-118 and within 2^-140 below (where e^v is subnormal or has
// underflowed: |v| x 2^-149 per unit of e^v's error); gelu_tanh within 4 (|z| + 1) ulp, z its
// sigmoid's argument, whose float32 rounding the sigmoid carries through.
TEST(IsaKernelsTest, ActivationsGiveTheScalarBitsAndStayNearDouble) {
  const std::vector<CpuIsa> levels = cpuIsaLevelsAllowed();
  const Activation activations[] = {Activation::kSilu, Activation::kSigmoid, Activation::kGeluTanh};
  std::vector<float> x, up;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 389) {
    const uint32_t b = static_cast<uint32_t>(bits);
    float v;
    std::memcpy(&v, &b, sizeof v);
    x.push_back(v);
  }
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, std::nanf(""), -88.7f, -103.97f, -104.0f,
                  -110.0f, 88.7f, 1e-30f, -1e-30f})
    x.push_back(v);
  up.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) up[i] = 0.5f + static_cast<float>(i % 7);
  auto same = [](float a, float b) {
    return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
  };
  for (Activation act : activations) {
    SCOPED_TRACE("activation " + std::to_string(static_cast<int>(act)));
    std::vector<float> want(x.size()), got(x.size()), gated(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = activate(act, x[i]);
    for (CpuIsa level : levels) {
      IsaCap cap(level);
      got = x;
      for (size_t i = 0, len = 1; i < x.size(); i += len, len = len % 37 + 1) {
        const int64_t n = static_cast<int64_t>(std::min(len, x.size() - i));
        activateRow(act, got.data() + i, n);
        gatedRow(act, x.data() + i, up.data() + i, gated.data() + i, n);
      }
      int64_t differ = 0, gated_differ = 0;
      float differ_at = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!same(got[i], want[i])) ++differ, differ_at = x[i];
        if (!same(gated[i], want[i] * up[i])) ++gated_differ;
      }
      EXPECT_EQ(differ, 0) << cpuIsaName(level) << ", e.g. at " << differ_at;
      EXPECT_EQ(gated_differ, 0) << cpuIsaName(level);
    }
    double worst = 0;
    float worst_at = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float v = x[i];
      if (!std::isfinite(v)) continue;
      const double d = v;
      const double sig = 1.0 / (1.0 + std::exp(-d));
      double exact = 0, slack = 0, floor = std::ldexp(1.0, -126), below = std::ldexp(1.0, -149);
      switch (act) {
        case Activation::kSigmoid: exact = sig, slack = 3; break;
        case Activation::kSilu: exact = d * sig, slack = 4, floor = std::ldexp(1.0, -118),
                                below = std::ldexp(1.0, -142); break;
        default: {
          const double z = 1.5957691216057308 * (d + 0.044715 * d * d * d);
          exact = d / (1.0 + std::exp(-z)), slack = 4 * (std::fabs(z) + 1);
        }
      }
      const double magnitude = std::fabs(exact);
      const double ulp =
          magnitude < floor ? below
                            : std::ldexp(1.0, std::ilogb(static_cast<float>(magnitude)) - 23);
      const double error = std::fabs(want[i] - exact) / ulp / slack;
      if (!(error <= worst)) worst = error, worst_at = v;
    }
    EXPECT_LE(worst, 1.0) << "at " << worst_at;
  }
  // At the infinities: sigmoid 1 and 0; silu and gelu_tanh of +inf are +inf, of -inf NaN
  // (-inf x 0, as PyTorch's silu gives).
  EXPECT_EQ(activate(Activation::kSigmoid, INFINITY), 1.0f);
  EXPECT_EQ(activate(Activation::kSigmoid, -INFINITY), 0.0f);
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
    EXPECT_EQ(activate(act, INFINITY), INFINITY);
    EXPECT_TRUE(std::isnan(activate(act, -INFINITY)));
    EXPECT_TRUE(std::isnan(activate(act, std::nanf(""))));
  }
}

// attendChunk against softmax attention in double, for head sizes from 8 to 256 (the AVX-512 value
// tiles of 64 and 128, the AVX2 loops' 32-dimension slices and the 8-24 left after them), keys in
// blocks of 16 and of 5 (tiles of eight and four keys crossing nothing, and remainders), rows
// inside a block one head_dim apart or spread (a token-major tensor), chunks of 1 to 33 queries
// with counts that rise, repeat and fall (every query finishes its own rows after the shared ones).
// The bound: float32's rounding of the scores, carried through exp, plus that of the weighted sum.
// Every level the host runs it at gives the first level's bits, and each query alone the bits it
// gets in the chunk.
TEST(IsaKernelsTest, ChunkedAttentionAgainstDouble) {
  const std::vector<CpuIsa> levels = chunkLevels();
  if (levels.empty()) GTEST_SKIP() << "attendChunk needs AVX2";
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t head_dim : {8, 32, 64, 80, 96, 128, 256})
    for (int64_t block_rows : {16, 5})
      for (int64_t spread : {1, 3})
        for (int64_t rows : {1, 2, 7, 33}) {
          SCOPED_TRACE("head_dim " + std::to_string(head_dim) + ", blocks of " +
                       std::to_string(block_rows) + ", stride x" + std::to_string(spread) + ", " +
                       std::to_string(rows) + " queries");
          std::vector<int64_t> counts(static_cast<size_t>(rows));
          for (int64_t i = 0; i < rows; ++i) counts[i] = i % 5 == 4 ? 3 : 40 + i;  // mostly rising
          const int64_t longest = *std::max_element(counts.begin(), counts.end());
          const int64_t blocks = (longest + block_rows - 1) / block_rows,
                        stride = head_dim * spread;
          std::vector<float> keys(static_cast<size_t>(blocks * block_rows * stride)),
              values(keys.size());
          for (float& x : keys) x = normal(rng);
          for (float& x : values) x = normal(rng);
          std::vector<const void*> key_blocks, value_blocks;
          for (int64_t b = 0; b < blocks; ++b) {
            key_blocks.push_back(keys.data() + b * block_rows * stride);
            value_blocks.push_back(values.data() + b * block_rows * stride);
          }
          auto key = [&](int64_t j) {
            return keys.data() + (j / block_rows * block_rows + j % block_rows) * stride;
          };
          auto value = [&](int64_t j) {
            return values.data() + (j / block_rows * block_rows + j % block_rows) * stride;
          };
          std::vector<float> q(static_cast<size_t>(rows * head_dim)), out(q.size(), -7.0f);
          for (float& x : q) x = normal(rng);
          std::vector<const float*> queries;
          std::vector<float*> outs;
          for (int64_t i = 0; i < rows; ++i) {
            queries.push_back(q.data() + i * head_dim);
            outs.push_back(out.data() + i * head_dim);
          }
          const float scale = 0.125f;
          std::vector<float> scratch, first;
          for (CpuIsa level : levels) {
            IsaCap cap(level);
            std::fill(out.begin(), out.end(), -7.0f);
            attendChunk(queries.data(), counts.data(), rows, head_dim, scale,
                        KvRows{key_blocks.data(), value_blocks.data(), block_rows, stride},
                        outs.data(), scratch);
            if (first.empty())
              first = out;
            else
              EXPECT_EQ(0, std::memcmp(first.data(), out.data(), out.size() * sizeof(float)))
                  << cpuIsaName(level) << " against " << cpuIsaName(levels[0]);
            // Each query alone gives the bits it gets in the chunk (LlmAttention puts a KV
            // head's query heads in one chunk, or not, by how many fit).
            std::vector<float> alone(static_cast<size_t>(head_dim));
            float* alone_out = alone.data();
            for (int64_t i = 0; i < rows; ++i) {
              attendChunk(&queries[i], &counts[i], 1, head_dim, scale,
                          KvRows{key_blocks.data(), value_blocks.data(), block_rows, stride},
                          &alone_out, scratch);
              EXPECT_EQ(0, std::memcmp(alone.data(), outs[i], alone.size() * sizeof(float)))
                  << cpuIsaName(level) << ": query " << i << " alone";
            }
          }
          for (int64_t i = 0; i < rows; ++i) {
            std::vector<double> scores(static_cast<size_t>(counts[i]));
            double max = -INFINITY, score_error = 0;
            for (int64_t j = 0; j < counts[i]; ++j) {
              double dot = 0, magnitude = 0;
              for (int64_t d = 0; d < head_dim; ++d) {
                dot += static_cast<double>(queries[i][d]) * key(j)[d];
                magnitude += std::fabs(static_cast<double>(queries[i][d]) * key(j)[d]);
              }
              scores[j] = dot * scale;
              score_error =
                  std::max(score_error, (head_dim + 2) * std::ldexp(1.0, -24) * magnitude * scale);
              max = std::max(max, scores[j]);
            }
            double sum = 0;
            for (double& s : scores) sum += (s = std::exp(s - max));
            for (int64_t d = 0; d < head_dim; ++d) {
              double want = 0, magnitude = 0;
              for (int64_t j = 0; j < counts[i]; ++j) {
                want += scores[j] / sum * value(j)[d];
                magnitude += scores[j] / sum * std::fabs(value(j)[d]);
              }
              // A score off by e moves each weight by a factor within exp(+-2e); then float32's
              // exp, sum and division (a few ulp), and the weighted sum (counts[i] roundings).
              const double bound = magnitude * (std::expm1(2 * score_error) + 1e-6 +
                                                (counts[i] + 2) * std::ldexp(1.0, -24));
              EXPECT_NEAR(outs[i][d], want, bound) << "query " << i << " element " << d;
            }
          }
        }
}

// The conversion of stored KV rows to float, over every code of every 16- and 8-bit format and
// float32 specials, with row scales from zero to large and a row length (67) that leaves a tail
// after the vectors: each ISA level gives the scalar conversion's bits (NaN for NaN).
TEST(IsaKernelsTest, KvRowsToFloatEveryCodeEveryLevel) {
  constexpr int64_t kDim = 67;
  const std::vector<float> row_scales = {0.0f, 1.0f, 0.0078125f, 3.5e-3f, 1e-30f, 12345.678f};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kInt8, DType::kUInt8,
                      DType::kFloat32}) {
    SCOPED_TRACE(dtypeName(dtype));
    const size_t element = dtypeSize(dtype);
    const int64_t codes = element == 1 ? 256 : element == 2 ? 65536 : 4096;
    const int64_t count = (codes + kDim - 1) / kDim;
    std::vector<uint8_t> rows(static_cast<size_t>(count * kDim) * element);
    std::mt19937 rng(11);
    for (int64_t i = 0; i < count * kDim; ++i) {
      uint32_t code = static_cast<uint32_t>(i % codes);
      if (element == 4) code = i < 8 ? std::vector<uint32_t>{0x7f800000u, 0xff800000u, 0x7fc00001u,
                                                             0x00000001u, 0x80000000u, 0x3f800000u,
                                                             0x7f7fffffu, 0x00800000u}[i]
                                     : static_cast<uint32_t>(rng());
      std::memcpy(rows.data() + i * element, &code, element);  // little-endian: the low bytes
    }
    std::vector<float> scales(static_cast<size_t>(count));
    for (int64_t r = 0; r < count; ++r) scales[r] = row_scales[r % row_scales.size()];
    std::vector<float> want(static_cast<size_t>(count * kDim));
    kvRowsToFloatScalar(dtype, rows.data(), kDim, scales.data(), count, kDim, want.data());
    for (CpuIsa level : cpuIsaLevelsAllowed()) {
      IsaCap cap(level);
      std::vector<float> got(want.size(), -1.0f);
      kvRowsToFloat(dtype, rows.data(), kDim, scales.data(), count, kDim, got.data());
      for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(want[i])) {
          EXPECT_TRUE(std::isnan(got[i])) << "level " << static_cast<int>(level) << " value " << i;
          continue;
        }
        uint32_t a, b;
        std::memcpy(&a, &got[i], 4);
        std::memcpy(&b, &want[i], 4);
        ASSERT_EQ(a, b) << "level " << static_cast<int>(level) << " value " << i;
      }
    }
  }
}

// attendChunk over stored codes (float16, bfloat16, int8 and FP8 with row scales after each
// block's codes), converted a block at a time as it reads them, gives the bits it gives over the
// same values converted to float32 beforehand: what lets the paged cache convert in either place.
// On every level the host runs it at.
TEST(IsaKernelsTest, ChunkedAttentionOverStoredCodes) {
  const std::vector<CpuIsa> levels = chunkLevels();
  if (levels.empty()) GTEST_SKIP() << "attendChunk needs AVX2";
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kInt8, DType::kUInt8})
    for (int64_t head_dim : {32, 64, 80, 128})
      for (int64_t block_rows : {16, 5})
        for (int64_t rows : {1, 2, 7}) {
          SCOPED_TRACE(std::string(dtypeName(dtype)) + ", head_dim " + std::to_string(head_dim) +
                       ", blocks of " + std::to_string(block_rows) + ", " +
                       std::to_string(rows) + " queries");
          const size_t element = dtypeSize(dtype);
          const int64_t longest = 37 + rows, blocks = (longest + block_rows - 1) / block_rows;
          const int64_t code_bytes = block_rows * head_dim * static_cast<int64_t>(element);
          const int64_t block_bytes = code_bytes + block_rows * 4;  // codes, then row scales
          std::vector<uint8_t> keys(static_cast<size_t>(blocks * block_bytes)),
              values(keys.size());
          for (std::vector<uint8_t>* store : {&keys, &values})
            for (int64_t b = 0; b < blocks; ++b)
              for (int64_t r = 0; r < block_rows; ++r) {
                uint8_t* row = store->data() + b * block_bytes;
                const float scale = 0.01f + 0.001f * static_cast<float>(r);
                std::memcpy(row + code_bytes + r * 4, &scale, 4);
                for (int64_t d = 0; d < head_dim; ++d) {
                  const float x = normal(rng);
                  storeCacheElement(dtype, x,
                                    row + (r * head_dim + d) * static_cast<int64_t>(element), rng);
                }
              }
          std::vector<float> float_keys(static_cast<size_t>(blocks * block_rows * head_dim)),
              float_values(float_keys.size());
          std::vector<const void*> code_k, code_v, float_k, float_v;
          for (int64_t b = 0; b < blocks; ++b) {
            const uint8_t* kb = keys.data() + b * block_bytes;
            const uint8_t* vb = values.data() + b * block_bytes;
            float* fk = float_keys.data() + b * block_rows * head_dim;
            float* fv = float_values.data() + b * block_rows * head_dim;
            kvRowsToFloatScalar(dtype, kb, head_dim, reinterpret_cast<const float*>(kb + code_bytes),
                                block_rows, head_dim, fk);
            kvRowsToFloatScalar(dtype, vb, head_dim, reinterpret_cast<const float*>(vb + code_bytes),
                                block_rows, head_dim, fv);
            code_k.push_back(kb);
            code_v.push_back(vb);
            float_k.push_back(fk);
            float_v.push_back(fv);
          }
          std::vector<float> q(static_cast<size_t>(rows * head_dim));
          for (float& x : q) x = normal(rng);
          std::vector<int64_t> counts(static_cast<size_t>(rows));
          for (int64_t i = 0; i < rows; ++i) counts[i] = longest - (i % 3) * 7;
          std::vector<float> from_codes(q.size(), -7.0f), from_floats(q.size(), 7.0f);
          std::vector<const float*> queries;
          std::vector<float*> out_codes, out_floats;
          for (int64_t i = 0; i < rows; ++i) {
            queries.push_back(q.data() + i * head_dim);
            out_codes.push_back(from_codes.data() + i * head_dim);
            out_floats.push_back(from_floats.data() + i * head_dim);
          }
          KvRows stored{code_k.data(), code_v.data(), block_rows, head_dim};
          stored.dtype = dtype;
          stored.scale_offset = code_bytes;
          std::vector<float> scratch;
          for (CpuIsa level : levels) {
            IsaCap cap(level);
            std::fill(from_codes.begin(), from_codes.end(), -7.0f);
            std::fill(from_floats.begin(), from_floats.end(), 7.0f);
            attendChunk(queries.data(), counts.data(), rows, head_dim, 0.125f, stored,
                        out_codes.data(), scratch);
            attendChunk(queries.data(), counts.data(), rows, head_dim, 0.125f,
                        KvRows{float_k.data(), float_v.data(), block_rows, head_dim},
                        out_floats.data(), scratch);
            EXPECT_EQ(0, std::memcmp(from_codes.data(), from_floats.data(),
                                     from_codes.size() * sizeof(float)))
                << cpuIsaName(level);
          }
        }
}

// attendHeads walks a block of every head before the next block; each head's output must be the
// bits of attendChunk for that head's query alone, for every cache format, head size, block size
// (a partial last block included) and number of heads, at every level where it runs. The heads'
// rows lie as a cache layer's do: head after head in each block, the 8-bit formats' row scales
// after all of the layer's codes.
TEST(IsaKernelsTest, AttendHeadsMatchesAttendChunkPerHead) {
  const std::vector<CpuIsa> levels = chunkLevels();
  if (levels.empty()) GTEST_SKIP() << "attendChunk needs AVX2";
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType dtype :
       {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt8, DType::kUInt8})
    for (int64_t head_dim : {32, 64, 80, 128})
      for (int64_t block_rows : {16, 5})
        for (int64_t heads : {1, 3})
          for (int64_t count : {1, 16, 37}) {
            SCOPED_TRACE(std::string(dtypeName(dtype)) + ", head_dim " + std::to_string(head_dim) +
                         ", blocks of " + std::to_string(block_rows) + ", " +
                         std::to_string(heads) + " heads, " + std::to_string(count) + " positions");
            const int64_t element = static_cast<int64_t>(dtypeSize(dtype));
            const bool scaled = dtype == DType::kInt8 || dtype == DType::kUInt8;
            const int64_t blocks = (count + block_rows - 1) / block_rows;
            const int64_t head_bytes = block_rows * head_dim * element;
            const int64_t codes = heads * head_bytes;
            const int64_t block_bytes = codes + (scaled ? heads * block_rows * 4 : 0);
            std::vector<uint8_t> keys(static_cast<size_t>(blocks * block_bytes)),
                values(keys.size());
            for (std::vector<uint8_t>* store : {&keys, &values})
              for (int64_t b = 0; b < blocks; ++b) {
                uint8_t* block = store->data() + b * block_bytes;
                for (int64_t row = 0; row < heads * block_rows; ++row) {
                  if (scaled) {
                    const float scale = 0.01f + 0.001f * static_cast<float>(row % 7);
                    std::memcpy(block + codes + row * 4, &scale, 4);
                  }
                  for (int64_t d = 0; d < head_dim; ++d) {
                    const float x = normal(rng);
                    storeCacheElement(dtype, x, block + (row * head_dim + d) * element, rng);
                  }
                }
              }
            std::vector<const void*> pointers(static_cast<size_t>(2 * heads * blocks));
            std::vector<KvRows> rows(static_cast<size_t>(heads));
            std::vector<float> q(static_cast<size_t>(heads * head_dim));
            for (float& x : q) x = normal(rng);
            std::vector<const float*> queries;
            std::vector<float> together(q.size()), alone(q.size());
            std::vector<float*> out_together, out_alone;
            for (int64_t h = 0; h < heads; ++h) {
              const void** k = &pointers[static_cast<size_t>(2 * h * blocks)];
              const void** v = k + blocks;
              for (int64_t b = 0; b < blocks; ++b) {
                k[b] = keys.data() + b * block_bytes + h * head_bytes;
                v[b] = values.data() + b * block_bytes + h * head_bytes;
              }
              KvRows& r = rows[static_cast<size_t>(h)];
              r = KvRows{k, v, block_rows, head_dim};
              r.dtype = dtype;
              r.scale_offset = codes + h * block_rows * 4 - h * head_bytes;
              queries.push_back(q.data() + h * head_dim);
              out_together.push_back(together.data() + h * head_dim);
              out_alone.push_back(alone.data() + h * head_dim);
            }
            std::vector<float> scratch;
            int tested = 0;
            for (CpuIsa level : levels) {
              IsaCap cap(level);
              // AVX2 runs every format; AVX-512 the stored ones (its float32 tiles are its own).
              ASSERT_EQ(attendHeadsSupported(head_dim, dtype),
                        level == CpuIsa::kAvx2 || dtype != DType::kFloat32)
                  << cpuIsaName(level);
              if (!attendHeadsSupported(head_dim, dtype)) continue;
              std::fill(together.begin(), together.end(), -7.0f);
              std::fill(alone.begin(), alone.end(), 7.0f);
              attendHeads(queries.data(), count, heads, head_dim, 0.125f, rows.data(),
                          out_together.data(), scratch);
              for (int64_t h = 0; h < heads; ++h)
                attendChunk(&queries[static_cast<size_t>(h)], &count, 1, head_dim, 0.125f,
                            rows[static_cast<size_t>(h)], &out_alone[static_cast<size_t>(h)],
                            scratch);
              EXPECT_EQ(0,
                        std::memcmp(together.data(), alone.data(), together.size() * sizeof(float)))
                  << cpuIsaName(level);
              ++tested;
            }
            EXPECT_GT(tested, 0);
          }
}

}  // namespace
}  // namespace llmc::testing
