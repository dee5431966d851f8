// Weight quantization (core/quant.h, cpu/quant_matmul.cpp): the quantizer's error bounds per
// format; LlmQuantMatMul against integer arithmetic (exact integer sums, float32's rounding
// bound for the scale products and epilogues: a 0.2% scale error fails) and against the float
// product of the dequantized weight; the AVX2 dot products against the scalar ones; and the
// errors for weights that do not fit.
#include "core/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>

#include "core/cpu_features.h"
#include "core/fp8.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "cpu/quant_dot.h"
#include "kernel_test_util.h"

namespace llmc::testing {
namespace {

struct Quantized {
  Tensor data, scales, zeros;
  QuantWeight weight;
};

Quantized quantize(const Tensor& w, bool transposed, const char* format, int64_t group) {
  Quantized q;
  const QuantTraits& traits = *findQuantTraits(format);
  const int64_t k = transposed ? w.dim(1) : w.dim(0);
  EXPECT_TRUE(quantizeWeight(w, transposed, traits, group, &q.data, &q.scales, &q.zeros).ok());
  EXPECT_TRUE(
      makeQuantWeight(traits, k, group, q.data, q.scales, traits.zero_points ? &q.zeros : nullptr, &q.weight).ok());
  return q;
}

// The oracle: x · Wᵀ with W dequantized, in double.
Tensor dequantizedProduct(const Tensor& x, const QuantWeight& w) {
  const int64_t rows = x.numElements() / w.k;
  Tensor y = Tensor::allocate(DType::kFloat32, {rows, w.n});
  std::vector<float> row(static_cast<size_t>(w.k));
  for (int64_t n = 0; n < w.n; ++n) {
    dequantizeRow(w, n, row.data());
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t i = 0; i < w.k; ++i) sum += static_cast<double>(x.data<float>()[r * w.k + i]) * row[i];
      y.data<float>()[r * w.n + n] = static_cast<float>(sum);
    }
  }
  return y;
}

double relativeL2(const float* a, const float* b, int64_t count) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < count; ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// ---- Exact references ------------------------------------------------------------------
// The integer paths are compared with integer arithmetic, the float steps around them at
// float32's rounding bound: a 1% error in any scale is hundreds of times the bound (the tests
// check that too), where a relative L2 tolerance of 1-2% could not see it.

constexpr double kUnitRoundoff = 1.0 / (1 << 24);  // float32's unit roundoff, 2^-24
// gamma(m) = m u / (1 - m u): the relative error bound of m float32 roundings in sequence, and
// of any order of summing m + 1 terms (relative to the sum of their magnitudes).
double gamma(int64_t m) { return m * kUnitRoundoff / (1 - m * kUnitRoundoff); }

// x quantized to integers within +-levels under `scale` as the kernels' contract states:
// x times the scale's float reciprocal (0 for a zero or subnormal scale), rounded to nearest
// with ties away from zero, clamped. Written from the contract, not from quant_dot.cpp.
int32_t contractCode(float x, float scale, float levels) {
  const float inverse = std::fabs(scale) >= FLT_MIN ? 1.0f / scale : 0.0f;
  return static_cast<int32_t>(std::clamp(std::round(x * inverse), -levels, levels));
}

// A product's exact value and the bound within which the kernel's float32 result must lie.
struct Exact {
  double value = 0;
  double bound = 0;
};

// The block formats (int8 with 16-bit activations, int4, int4_zp): each block of kQuantBlock
// activations gets a scale (int8 codes: absmax / 127; int16: the row's absmax / 32767 halved
// as the block allows, int16BlockScale's rule written out again) and codes per contractCode;
// each weight's integer code
// c = q - zero comes from its dequantized value (pinned to the original weights by
// DequantizedWeightsAreWithinHalfAStep). The exact product of row r and channel n is
// sum_b s_a(b) s_w(n, b) sum_i a_i c_i, with the integer sums exact in int64. The kernel
// rounds each block term (float(dot), two products), sums the blocks, and for zero points
// subtracts the zero point's share as a separate sum: 2B + 8 roundings at most, relative to
// the magnitudes sum_b |s_a s_w| sum_i |a_i| (|c_i| + zero).
std::vector<Exact> integerReference(const Tensor& x, const QuantWeight& w) {
  const float levels = activationBits(*w.traits) == 16 ? 32767.0f : 127.0f;
  const int64_t k = w.k, rows = x.numElements() / k, blocks = k / kQuantBlock;
  std::vector<int64_t> codes(static_cast<size_t>(w.n * k));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t n = 0; n < w.n; ++n) {
    dequantizeRow(w, n, row.data());
    for (int64_t i = 0; i < k; ++i) {
      const float scale = w.scale(n, i / w.group);
      codes[static_cast<size_t>(n * k + i)] =
          scale == 0 ? 0 : std::llround(static_cast<double>(row[static_cast<size_t>(i)]) / scale);
    }
  }
  std::vector<Exact> out(static_cast<size_t>(rows * w.n));
  std::vector<int32_t> a(static_cast<size_t>(k));
  std::vector<float> a_scale(static_cast<size_t>(blocks));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data<float>() + r * k;
    float row_amax = 0;
    for (int64_t i = 0; i < k; ++i) row_amax = std::max(row_amax, std::fabs(xr[i]));
    for (int64_t b = 0; b < blocks; ++b) {
      float amax = 0;
      for (int64_t i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(xr[b * kQuantBlock + i]));
      // int16 codes: the row's absmax / 32767 halved while the block's absmax, doubled, still
      // fits under the row's (at most 8 times).
      int halvings = 0;
      while (levels == 32767.0f && halvings < 8 && std::isfinite(row_amax) &&
             std::ldexp(amax, halvings + 1) <= row_amax)
        ++halvings;
      const float scale =
          levels == 32767.0f ? row_amax / levels * std::ldexp(1.0f, -halvings) : amax / levels;
      a_scale[static_cast<size_t>(b)] = scale;
      for (int64_t i = 0; i < kQuantBlock; ++i)
        a[static_cast<size_t>(b * kQuantBlock + i)] =
            contractCode(xr[b * kQuantBlock + i], scale, levels);
    }
    for (int64_t n = 0; n < w.n; ++n) {
      double value = 0, magnitude = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t g = b * kQuantBlock / w.group;
        const double zero = w.zeros ? w.zeros[n * w.groupsPerRow() + g] : 0;
        int64_t dot = 0;
        double size = 0;
        for (int64_t i = b * kQuantBlock; i < (b + 1) * kQuantBlock; ++i) {
          const int64_t c = codes[static_cast<size_t>(n * k + i)];
          dot += a[static_cast<size_t>(i)] * c;
          size += std::abs(a[static_cast<size_t>(i)]) * (std::abs(static_cast<double>(c)) + zero);
        }
        const double scale = static_cast<double>(a_scale[static_cast<size_t>(b)]) * w.scale(n, g);
        value += scale * static_cast<double>(dot);
        magnitude += std::fabs(scale) * size;
      }
      out[static_cast<size_t>(r * w.n + n)] = {value, gamma(2 * blocks + 8) * magnitude + 1e-30};
    }
  }
  return out;
}

// Counts the elements of `got` outside their bounds (and reports the first few), and checks
// the comparison can fail: a 1% error of the value must exceed the bound for all but one in
// 50 of the elements, plus one (the rest are sums that cancel to near zero, whose bound follows the
// magnitudes of their terms).
// (`sensitive` false skips that check: an activation's flat regions take any error to ~0.)
void expectWithinBounds(const Tensor& got, const std::vector<Exact>& want, const std::string& what,
                        bool sensitive = true) {
  ASSERT_EQ(got.numElements(), static_cast<int64_t>(want.size())) << what;
  int64_t beyond = 0, insensitive = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double error = std::fabs(got.data<float>()[i] - want[i].value);
    if (error > want[i].bound && ++beyond <= 3)
      ADD_FAILURE() << what << " element " << i << ": " << got.data<float>()[i] << " vs exact "
                    << want[i].value << ", error " << error << " > bound " << want[i].bound;
    if (0.01 * std::fabs(want[i].value) <= want[i].bound) ++insensitive;
  }
  EXPECT_EQ(beyond, 0) << what << ": elements beyond the rounding bound";
  if (sensitive) {
    EXPECT_LE(insensitive, 1 + static_cast<int64_t>(want.size()) / 50)
        << what << ": " << insensitive << " of " << want.size() << " elements' bounds would hide a 1% error";
  }
}

class QuantFormatTest : public ::testing::TestWithParam<std::tuple<const char*, int64_t>> {};

// Round to nearest: every dequantized value is within half a step of the original clamped to
// the group's representable range (the quantizer may clip a group's largest values to refine
// the step for the rest), and zero stays exactly zero (padding and pruned weights).
TEST_P(QuantFormatTest, DequantizedWeightsAreWithinHalfAStep) {
  const auto [format, group_param] = GetParam();
  const int64_t k = 224, n = 19;  // 224 = 128 + 96: a shorter last group for g128 and g64
  const int64_t group = std::string(format) == "int8" ? k : group_param;
  Tensor w = randomFloat({k, n}, 11);
  w.data<float>()[5 * n + 3] = 0.0f;
  Quantized q = quantize(w, false, format, group);
  const bool eight = std::string(format) == "int8";
  std::vector<float> row(static_cast<size_t>(k));
  int64_t clipped = 0;
  for (int64_t r = 0; r < n; ++r) {
    dequantizeRow(q.weight, r, row.data());
    for (int64_t i = 0; i < k; ++i) {
      const int64_t g = i / group;
      const float scale = q.weight.scale(r, g);
      const float zero = q.weight.zeros ? q.weight.zeros[r * q.weight.groupsPerRow() + g] : 0.0f;
      const float a = (eight ? -127.0f : q.weight.zeros ? -zero : -8.0f) * scale;
      const float b = (eight ? 127.0f : q.weight.zeros ? 15.0f - zero : 7.0f) * scale;
      const float original = w.data<float>()[i * n + r];
      const float target = std::clamp(original, std::min(a, b), std::max(a, b));
      clipped += target != original;
      EXPECT_LE(std::fabs(row[i] - target), 0.5f * std::fabs(scale) * 1.001f + 1e-7f)
          << format << " row " << r << " element " << i;
    }
  }
  EXPECT_LT(clipped, n * k / 20) << "clipping is for the few largest values";
  dequantizeRow(q.weight, 3, row.data());
  EXPECT_EQ(row[5], 0.0f);
}

// quantizeWeight's contract (core/quant.h) written out one value at a time, std::lround's ties
// away from zero: the scale, zero point and dequantized value of every weight of `w` [N, K].
struct ContractQuantization {
  std::vector<float> scales, values;
  std::vector<int> zeros;
};
ContractQuantization contractQuantization(const Tensor& w, const char* format, int64_t group,
                                          const float* importance) {
  const QuantTraits& traits = *findQuantTraits(format);
  const int64_t n = w.dim(0), k = w.dim(1), groups = (k + group - 1) / group;
  auto stored = [&](float s) {
    return traits.scale_dtype == DType::kFloat16 ? toFloat(toFloat16(s)) : s;
  };
  auto inverse = [](float s) { return std::fabs(s) >= FLT_MIN ? 1.0f / s : 0.0f; };
  ContractQuantization out;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const float* x = w.data<float>() + r * k + g * group;
      const int64_t length = std::min(group, k - g * group);
      float amax = 0, extreme = 0, lo = 0, hi = 0;
      for (int64_t i = 0; i < length; ++i) {
        if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), extreme = x[i];
        lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
      }
      float scale = 0;
      long zero = 0, low = -8, high = 7;
      if (traits.bits == 8) {
        scale = stored(amax / 127.0f), low = -127, high = 127;
      } else if (traits.zero_points) {
        scale = stored((hi - lo) / 15.0f);
        zero = scale > 0 ? std::clamp(std::lround(-lo / scale), 0L, 15L) : 0;
        low = -zero, high = 15 - zero;
      } else {
        float best = INFINITY;
        for (int step = 0; step <= 20; ++step) {
          const float candidate =
              stored(extreme / -8.0f * (1.0f - 0.01f * static_cast<float>(step)));
          float error = 0;
          for (int64_t i = 0; i < length; ++i) {
            const float q =
                static_cast<float>(std::clamp(std::lround(x[i] * inverse(candidate)), -8L, 7L));
            error += (x[i] - q * candidate) * (x[i] - q * candidate) *
                     (importance ? importance[g * group + i] : 1.0f);
          }
          if (error < best) best = error, scale = candidate;
        }
      }
      out.scales.push_back(scale);
      out.zeros.push_back(static_cast<int>(zero));
      for (int64_t i = 0; i < length; ++i)
        out.values.push_back(
            static_cast<float>(std::clamp(std::lround(x[i] * inverse(scale)), low, high)) * scale);
    }
  return out;
}

// The quantizer gives its contract's scales, zero points and codes bit for bit, ties included
// (the first row's groups hold halves of their step), at every level the host has and on any
// number of threads, with and without the clip search's importance.
TEST_P(QuantFormatTest, QuantizerFollowsItsContractOnEveryLevelAndThreadCount) {
  const auto [format, group_param] = GetParam();
  const int64_t k = 224, n = 37;
  const int64_t group = std::string(format) == "int8" ? k : group_param;
  const QuantTraits& traits = *findQuantTraits(format);
  Tensor w = randomFloat({n, k}, 31);
  std::mt19937 rng(5);
  for (int64_t i = 0; i < k; ++i)  // steps of 1 at the absmax scale: x.5 are ties
    w.data<float>()[i] = i % group == 0
                             ? (traits.bits == 8     ? 127.0f
                                : traits.zero_points ? 7.5f
                                                     : -8.0f)
                             : static_cast<float>(static_cast<int>(rng() % 31) - 15) * 0.5f;
  w.data<float>()[1] = -7.5f;  // int4_zp: the range [-7.5, 7.5] gives a scale of exactly 1
  std::vector<float> importance(static_cast<size_t>(k));
  for (float& v : importance) v = static_cast<float>(rng() % 1000 + 1) / 100.0f;
  ThreadPool pool(3);
  for (const float* weights :
       {static_cast<const float*>(nullptr), static_cast<const float*>(importance.data())}) {
    const ContractQuantization want = contractQuantization(w, format, group, weights);
    std::optional<Quantized> first;
    for (CpuIsa level : cpuIsaLevelsAllowed())
      for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
        setCpuIsaCapForTesting(level);
        Quantized q;
        ASSERT_TRUE(
            quantizeWeight(w, true, traits, group, &q.data, &q.scales, &q.zeros, weights, threads)
                .ok());
        setCpuIsaCapForTesting(kCpuIsaTop);
        ASSERT_TRUE(makeQuantWeight(traits, k, group, q.data, q.scales,
                                    traits.zero_points ? &q.zeros : nullptr, &q.weight)
                        .ok());
        const std::string where = std::string(format) + " level " + cpuIsaName(level) +
                                  (threads ? ", 3 threads" : ", 1 thread") +
                                  (weights ? ", importance" : "");
        std::vector<float> row(static_cast<size_t>(k));
        size_t at = 0;
        for (int64_t r = 0; r < n; ++r) {
          dequantizeRow(q.weight, r, row.data());
          for (int64_t g = 0; g < q.weight.groupsPerRow(); ++g) {
            const size_t index = static_cast<size_t>(r * q.weight.groupsPerRow() + g);
            ASSERT_EQ(q.weight.scale(r, g), want.scales[index])
                << where << " row " << r << " group " << g;
            if (q.weight.zeros) {
              ASSERT_EQ(q.weight.zeros[index], want.zeros[index])
                  << where << " row " << r << " group " << g;
            }
          }
          for (int64_t i = 0; i < k; ++i, ++at)
            ASSERT_EQ(row[i], want.values[at]) << where << " row " << r << " element " << i;
        }
        if (!first) {
          first = std::move(q);
          continue;
        }
        EXPECT_EQ(std::memcmp(q.data.data(), first->data.data(), q.data.sizeBytes()), 0) << where;
      }
  }
}

TEST(QuantizeWeightTest, RefusesNonFiniteWeights) {
  for (float bad : {INFINITY, -INFINITY, std::nanf("")}) {
    Tensor w = randomFloat({4, 64}, 3);
    w.data<float>()[2 * 64 + 5] = bad;
    Tensor data, scales, zeros;
    const Status status =
        quantizeWeight(w, true, quantTraits(QuantFormat::kInt4), 32, &data, &scales, &zeros);
    ASSERT_FALSE(status.ok()) << bad;
    EXPECT_NE(status.message().find("at [2, 5] of [4, 64]"), std::string::npos) << status.message();
  }
}

// The kernel against the oracle: only the activations' int8 rounding separates them.
TEST_P(QuantFormatTest, MatMulMatchesTheDequantizedProduct) {
  const auto [format, group_param] = GetParam();
  // 192 with groups of 128: the last group of each row is shorter (64).
  for (const auto& [rows, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 128, 33}, {5, 384, 64}, {3, 64, 7}, {2, 192, 5}}) {
    const int64_t group = std::string(format) == "int8" ? k : group_param;
    Tensor w = randomFloat({n, k}, 21), x = randomFloat({rows, k}, 22);
    Quantized q = quantize(w, true, format, group);
    std::optional<Tensor> zeros;
    if (q.weight.zeros) zeros = q.zeros;
    Tensor got = runKernel("LlmQuantMatMul", {x, q.data, q.scales, zeros},
                           params({{"format", stringParam(format)}, {"group", intParam(group)}}));
    Tensor want = dequantizedProduct(x, q.weight);
    ASSERT_EQ(got.shape(), (Shape{rows, n}));
    EXPECT_LT(relativeL2(got.data<float>(), want.data<float>(), got.numElements()), 1e-2)
        << format << " [" << rows << ", " << k << "] x [" << k << ", " << n << "]";
  }
}

// The kernel against integer arithmetic: exact up to float32's rounding of the scale products,
// on every path (tiled AVX2 channels, the pair kernel, single channels, prefill rows: the
// AVX-512 register tiles, the AVX-512 panels (int8 weights from kInt16PanelMinRows rows, 4-bit
// ones from kInt4PanelMinRows) and, from
// kAmxMinRows rows, the AMX tiles, where K is a multiple of 64 (8 x 96 takes the AVX-512 register
// tiles there)) at every level the host has.
TEST_P(QuantFormatTest, MatMulEqualsTheIntegerReference) {
  const auto [format, group_param] = GetParam();
  for (CpuIsa level : cpuIsaLevelsAllowed())
    for (const auto& [rows, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 128, 33},
                                     {5, 384, 64},
                                     {3, 64, 7},
                                     {2, 192, 5},
                                     {1, 512, 19},
                                     {4, 448, 17},
                                     {8, 96, 17},
                                     {37, 256, 40}}) {
      setCpuIsaCapForTesting(level);
      const int64_t group = std::string(format) == "int8" ? k : std::min(group_param, k);
      Tensor w = randomFloat({n, k}, 23), x = randomFloat({rows, k}, 24);
      x.data<float>()[0] = 0.0f;  // a zero and a large value in the first block
      x.data<float>()[1] = 40.0f;
      Quantized q = quantize(w, true, format, group);
      std::optional<Tensor> zeros;
      if (q.weight.zeros) zeros = q.zeros;
      Tensor got = runKernel("LlmQuantMatMul", {x, q.data, q.scales, zeros},
                             params({{"format", stringParam(format)}, {"group", intParam(group)}}));
      setCpuIsaCapForTesting(kCpuIsaTop);
      expectWithinBounds(got, integerReference(x, q.weight),
                         std::string(format) + " [" + std::to_string(rows) + ", " +
                             std::to_string(k) + "] x [" + std::to_string(k) + ", " +
                             std::to_string(n) + "] group " + std::to_string(group) + ", level " +
                             cpuIsaName(level));
    }
}

// Bias, alpha and the activation epilogue, and the gated form, on the quantized product.
// 4 rows take the register tiles (int8 weights; 4-bit ones the AVX-512 panels); 9 the AMX tiles
// where the host has them; 17 those or the AVX-512 panels.
TEST_P(QuantFormatTest, EpilogueAndGatedForm) {
  const auto [format, group_param] = GetParam();
  for (const int64_t rows : {4, 9, 17}) {
    SCOPED_TRACE(std::to_string(rows) + " rows");
    const int64_t k = 128, f = 24;
    const int64_t group = std::string(format) == "int8" ? k : group_param;
    Tensor w = randomFloat({k, 2 * f}, 31), x = randomFloat({rows, k}, 32),
           bias = randomFloat({2 * f}, 33);
    Quantized q = quantize(w, false, format, group);
    std::optional<Tensor> zeros;
    if (q.weight.zeros) zeros = q.zeros;
    // The epilogue on the exact product, at the rounding bound: the product's own bound carried
    // through the activation (|silu'| <= 1.1, |gelu'| <= 1.13), plus float32 rounding of the
    // epilogue's few operations (the transcendental ones to a few ulps).
    std::vector<Exact> h = integerReference(x, q.weight);
    Tensor plain = runKernel("LlmQuantMatMul", {x, q.data, q.scales, zeros, bias},
                             params({{"format", stringParam(format)},
                                     {"group", intParam(group)},
                                     {"activation", stringParam("silu")},
                                     {"alpha", floatParam(0.5)}}));
    Tensor gated = runKernel("LlmQuantMatMul", {x, q.data, q.scales, zeros},
                             params({{"format", stringParam(format)},
                                     {"group", intParam(group)},
                                     {"activation", stringParam("gelu_erf")},
                                     {"gated", intParam(1)}}));
    ASSERT_EQ(gated.shape(), (Shape{rows, f}));
    std::vector<Exact> want_plain, want_gated;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < 2 * f; ++c) {
        const Exact& e = h[static_cast<size_t>(r * 2 * f + c)];
        const double b = bias.data<float>()[c];
        const double v = 0.5 * e.value + b;
        const double y = v / (1 + std::exp(-v));
        const double v_bound = 0.5 * e.bound + gamma(2) * (0.5 * std::fabs(e.value) + std::fabs(b));
        want_plain.push_back({y, 1.1 * v_bound + gamma(8) * (std::fabs(y) + std::fabs(v))});
      }
      for (int64_t c = 0; c < f; ++c) {
        const Exact& g = h[static_cast<size_t>(r * 2 * f + c)];
        const Exact& u = h[static_cast<size_t>(r * 2 * f + f + c)];
        const double gelu = 0.5 * g.value * (1 + std::erf(g.value / std::sqrt(2.0)));
        const double y = gelu * u.value;
        want_gated.push_back({y, 1.13 * g.bound * std::fabs(u.value) + std::fabs(gelu) * u.bound +
                                     g.bound * u.bound +
                                     gamma(8) * (std::fabs(y) + std::fabs(g.value * u.value))});
      }
    }
    expectWithinBounds(plain, want_plain, std::string(format) + " + bias, alpha, silu", false);
    expectWithinBounds(gated, want_gated, std::string(format) + " gated gelu", false);
  }
}

// The AVX2 dot products compute what the scalar ones do (up to float summation order).
TEST_P(QuantFormatTest, Avx2DotEqualsScalarDot) {
  if (!quantDotHasAvx2()) GTEST_SKIP() << "this CPU has no AVX2/FMA";
  const auto [format, group_param] = GetParam();
  const int64_t k = 512, n = 9;
  const int64_t group = std::string(format) == "int8" ? k : group_param;
  Tensor w = randomFloat({n, k}, 41), x = randomFloat({1, k}, 42);
  Quantized q = quantize(w, true, format, group);
  QuantizedActivations a;
  quantizeActivations(x.data<float>(), k, group, activationBits(*q.weight.traits), &a);
  for (int64_t r = 0; r < n; ++r) {
    const float scalar = quantDotScalar(q.weight, r, a);
    // The 4-bit path takes the zero point off per group: a difference of larger sums.
    EXPECT_NEAR(quantDotAvx2(q.weight, r, a), scalar, 1e-3 * (1 + std::fabs(scalar)));
  }
}

// Activations round to nearest with ties away from zero (std::lround) and stay within +-127.
TEST(QuantizeActivationsTest, RoundsTiesAwayFromZero) {
  std::vector<float> x(64, 0.0f);
  // Block 0: absmax 127 makes the scale exactly 1, so these are the values to round.
  const float values[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 126.5f, -126.49f, 0.49999997f, 3.0f};
  const int8_t want[] = {127, 3, -3, 1, -1, 127, -126, 0, 3};
  for (size_t i = 0; i < std::size(values); ++i) x[i] = values[i];
  x[32] = std::nanf("");  // block 1 holds a NaN: it is skipped by absmax, its code is -127
  x[33] = 1.0f;
  QuantizedActivations a;
  quantizeActivations(x.data(), 64, 64, 8, &a);
  ASSERT_EQ(a.scales[0], 1.0f);
  for (size_t i = 0; i < std::size(values); ++i) EXPECT_EQ(a.q[i], want[i]) << values[i];
  EXPECT_EQ(a.q[32], -127);
  EXPECT_EQ(a.q[33], 127);
  int8_t row[3];
  const float scale = quantizeRowPerToken(std::vector<float>{254.0f, 5.0f, -3.0f}.data(), 3, row);
  EXPECT_EQ(scale, 2.0f);
  EXPECT_EQ(row[0], 127);
  EXPECT_EQ(row[1], 3);   // 2.5 -> 3
  EXPECT_EQ(row[2], -2);  // -1.5 -> -2
}

// The tiled kernels (four output channels per pass; 4-bit ones over pairs of blocks) compute
// what the scalar dot products do, for channel counts that leave a remainder and for K and
// groups the pair kernel does not take (those fall back to one dot product per channel).
TEST(QuantDotRowsTest, EqualsScalarDotsForEveryShape) {
  struct Case {
    const char* format;
    int64_t k, group;
    bool tiled;  // where the CPU has AVX2
  };
  const Case cases[] = {{"int8", 512, 512, true},    {"int4", 512, 32, true},     {"int4", 512, 128, true},
                        {"int4", 448, 128, true},    {"int4_zp", 512, 64, true},  {"int4_zp", 320, 256, true},
                        {"int4_zp", 256, 32, true},  {"int4", 576, 96, false},    {"int4", 544, 32, false},
                        {"int4_zp", 96, 32, false}};
  const int64_t n = 11;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.format) + " K " + std::to_string(c.k) + " group " + std::to_string(c.group));
    Tensor w = randomFloat({n, c.k}, 51), x = randomFloat({1, c.k}, 52);
    Quantized q = quantize(w, true, c.format, c.group);
    QuantizedActivations a;
    quantizeActivations(x.data<float>(), c.k, c.group, activationBits(*q.weight.traits), &a);
    EXPECT_EQ(quantDotRowsTiled(q.weight, a), c.tiled && quantDotHasAvx2());
    // Channels 1..10 (two tiles of four and two single ones, or ten single ones) into
    // out[1..10]; the rest untouched.
    for (int per_pass : {4, 1}) {
      std::vector<float> out(static_cast<size_t>(n + 1), -1.0f);
      quantDotRows(q.weight, 1, n, a, out.data() + 1, per_pass);
      EXPECT_EQ(out[0], -1.0f);
      EXPECT_EQ(out[static_cast<size_t>(n)], -1.0f);
      for (int64_t r = 1; r < n; ++r) {
        const float scalar = quantDotScalar(q.weight, r, a);
        EXPECT_NEAR(out[static_cast<size_t>(r)], scalar, 1e-3 * (1 + std::fabs(scalar)))
            << "channel " << r << ", " << per_pass << " per pass";
      }
    }
  }
}

// Rows of activations at a time (prefill's path), on every ISA level the host supports: the
// AVX-512 tiles (up to 4 rows x 4 channels, remainders of both), decode's streamed 4-bit row
// (one row) and the per-row kernels below them compute the scalar dot products up to float
// summation order. The bound is float32's for some 40 roundings over the magnitudes the kernels
// add: |x| times |w| plus, for 4-bit formats, the zero point's term, which the AVX-512 tiles take
// off per lane.
TEST(QuantDotRowsTest, RowBlocksOnEveryLevelEqualScalarDots) {
  struct Case {
    const char* format;
    int64_t k, group;
  };
  // K of an odd number of pairs (448, 320, 192) ends decode's 4-bit loads of four blocks on a
  // half; groups of 64 change within one, and 320's second group of 256 is cut short.
  const Case cases[] = {{"int8", 512, 512},  {"int4", 512, 32},    {"int4", 512, 128},
                        {"int4", 448, 128},  {"int4_zp", 512, 64}, {"int4_zp", 256, 32},
                        {"int4", 576, 96},   {"int4_zp", 320, 64}, {"int4", 320, 256},
                        {"int4_zp", 192, 32}};
  const int64_t n = 11, rows = 7;
  const CpuIsa supported = cpuIsaSupported();
  for (const Case& c : cases) {
    Tensor w = randomFloat({n, c.k}, 53), x = randomFloat({rows, c.k}, 54);
    Quantized q = quantize(w, true, c.format, c.group);
    std::vector<QuantizedActivations> a(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      quantizeActivations(x.data<float>() + r * c.k, c.k, c.group, activationBits(*q.weight.traits), &a[r]);
    // The reference and each output's bound.
    std::vector<float> want(static_cast<size_t>(rows * n)), bound(want.size()), wrow(static_cast<size_t>(c.k));
    for (int64_t ch = 0; ch < n; ++ch) {
      dequantizeRow(q.weight, ch, wrow.data());
      for (int64_t r = 0; r < rows; ++r) {
        const QuantizedActivations& ar = a[static_cast<size_t>(r)];
        double magnitude = 0;
        for (int64_t i = 0; i < c.k; ++i) {
          const int64_t g = i / c.group;
          const double code = ar.q16.empty() ? ar.q[i] : ar.q16[i];
          const double zero = q.weight.traits->bits == 8 ? 0 : q.weight.zeros ? q.weight.zeros[ch * q.weight.groupsPerRow() + g] : 8;
          magnitude += std::fabs(code * ar.scales[i / kQuantBlock]) *
                       (std::fabs(wrow[i]) + zero * std::fabs(q.weight.scale(ch, g)));
        }
        want[r * n + ch] = quantDotScalar(q.weight, ch, ar);
        bound[r * n + ch] = static_cast<float>(1e-5 * magnitude + 1e-30);
      }
    }
    for (CpuIsa level : kCpuIsaLevels) {
      if (level > supported) continue;
      setCpuIsaCapForTesting(level);
      for (int64_t row_count : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{7}})
        for (int per_pass : {4, 1}) {
          SCOPED_TRACE(std::string(c.format) + " K " + std::to_string(c.k) + " group " + std::to_string(c.group) +
                       ", level " + cpuIsaName(level) + ", " + std::to_string(row_count) + " rows, " +
                       std::to_string(per_pass) + " per pass");
          // Channels 1..10 of rows 0..row_count-1 into a [rows, n + 1] block; the rest untouched.
          const int64_t stride = n + 1;
          std::vector<float> out(static_cast<size_t>(rows * stride), -1.0f);
          quantDotRowBlock(q.weight, 1, n, a.data(), row_count, out.data() + 1, stride, per_pass);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t ch = 0; ch <= n; ++ch) {
              const float got = out[static_cast<size_t>(r * stride + ch)];
              if (r >= row_count || ch == 0 || ch == n) {
                EXPECT_EQ(got, -1.0f) << "row " << r << " column " << ch << " was written";
                continue;
              }
              EXPECT_NEAR(got, want[r * n + ch], bound[r * n + ch]) << "row " << r << " channel " << ch;
            }
        }
    }
    setCpuIsaCapForTesting(supported);
  }
}

// Decode's 4-bit pair tiles at the avx2 level give the same bits with AVX-VNNI (two vpdpbusd)
// as without (vpmaddubsw, vpaddw, vpmaddwd): the same int32 sums per pair of blocks.
TEST(QuantDotRowsTest, Avx2PairTilesGiveTheSameBitsWithAvxVnni) {
  if (cpuIsaSupported() < CpuIsa::kAvx2) GTEST_SKIP() << "this CPU has no AVX2";
  setCpuIsaCapForTesting(CpuIsa::kAvx2);
  if (!cpuAvxVnni()) {
    setCpuIsaCapForTesting(kCpuIsaTop);
    GTEST_SKIP() << "this CPU (or LLMC_CPU_ISA) has no AVX-VNNI";
  }
  for (const auto& [format, k, group] : {std::tuple<const char*, int64_t, int64_t>{"int4", 512, 32},
                                         {"int4", 448, 128},
                                         {"int4_zp", 320, 64},
                                         {"int4_zp", 192, 32}}) {
    SCOPED_TRACE(std::string(format) + " K " + std::to_string(k) + " group " +
                 std::to_string(group));
    const int64_t n = 13;
    Tensor w = randomFloat({n, k}, 57), x = randomFloat({1, k}, 58);
    Quantized q = quantize(w, true, format, group);
    QuantizedActivations a;
    quantizeActivations(x.data<float>(), k, group, 8, &a);
    for (int per_pass : {4, 1}) {
      std::vector<float> with(static_cast<size_t>(n)), without(with.size());
      setAvxVnniForTesting(true);
      quantDotRows(q.weight, 0, n, a, with.data(), per_pass);
      setAvxVnniForTesting(false);
      quantDotRows(q.weight, 0, n, a, without.data(), per_pass);
      setAvxVnniForTesting(true);
      EXPECT_EQ(0, std::memcmp(with.data(), without.data(), with.size() * sizeof(float)))
          << per_pass << " channels a pass";
    }
  }
  setCpuIsaCapForTesting(kCpuIsaTop);
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantFormatTest,
                         ::testing::Values(std::make_tuple("int8", int64_t{0}), std::make_tuple("int4", int64_t{32}),
                                           std::make_tuple("int4", int64_t{128}), std::make_tuple("int4_zp", int64_t{64})),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_g" + std::to_string(std::get<1>(info.param));
                         });

// w8a8: int8 weights times activations quantized per token, exact in int32, and the
// activation-aware / smoothing input scales (x * s per channel).
TEST(W8A8Test, MatchesTheDequantizedProductAndTakesInputScales) {
  const int64_t rows = 3, k = 160, n = 21;
  Tensor w = randomFloat({n, k}, 81), x = randomFloat({rows, k}, 82), s = randomFloat({k}, 83);
  for (int64_t j = 0; j < k; ++j) s.data<float>()[j] = 0.5f + std::fabs(s.data<float>()[j]);
  Quantized q = quantize(w, true, "w8a8", k);
  KernelParams p = params({{"format", stringParam("w8a8")}, {"group", intParam(k)}});
  Tensor got = runKernel("LlmQuantMatMul", {x, q.data, q.scales}, p);
  Tensor want = dequantizedProduct(x, q.weight);
  EXPECT_LT(relativeL2(got.data<float>(), want.data<float>(), got.numElements()), 2e-2);
  // With input scales the kernel computes (x * s) · Wᵀ.
  Tensor xs = x.clone();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) xs.data<float>()[r * k + j] *= s.data<float>()[j];
  Tensor scaled = runKernel("LlmQuantMatMul", {x, q.data, q.scales, std::nullopt, std::nullopt, s}, p);
  Tensor want_scaled = dequantizedProduct(xs, q.weight);
  EXPECT_LT(relativeL2(scaled.data<float>(), want_scaled.data<float>(), scaled.numElements()), 2e-2);
  // The 4-bit kernels take input scales the same way.
  Quantized q4 = quantize(w, true, "int4", 32);
  Tensor got4 = runKernel("LlmQuantMatMul", {x, q4.data, q4.scales, std::nullopt, std::nullopt, s},
                          params({{"format", stringParam("int4")}, {"group", intParam(32)}}));
  Tensor want4 = dequantizedProduct(xs, q4.weight);
  EXPECT_LT(relativeL2(got4.data<float>(), want4.data<float>(), got4.numElements()), 1e-2);
}

// w8a8 against integer arithmetic: per-token codes (scale absmax / 127 over the row, after
// the input scales' float product), exact int32 sums, then float(sum) * s_a * s_w: 3 roundings.
// At every level the host has: 4 rows take dotInt8Rows; 37 rows of K = 192 the AMX tiles where
// the host has them, the AVX-512 VNNI panels elsewhere; 9 rows of K = 160 (not a multiple of 64)
// the panels on AMX hosts too.
TEST(W8A8Test, EqualsTheIntegerReference) {
  for (CpuIsa level : cpuIsaLevelsAllowed())
    for (const auto& [rows, k, n] :
         {std::tuple<int64_t, int64_t, int64_t>{4, 160, 21}, {37, 192, 40}, {9, 160, 21}}) {
      SCOPED_TRACE(std::string("level ") + cpuIsaName(level) + ", " + std::to_string(rows) +
                   " rows");
      Tensor w = randomFloat({n, k}, 84), x = randomFloat({rows, k}, 85), s = randomFloat({k}, 86);
      for (int64_t j = 0; j < k; ++j) s.data<float>()[j] = 0.5f + std::fabs(s.data<float>()[j]);
      Quantized q = quantize(w, true, "w8a8", k);
      const int8_t* wq = q.data.data<int8_t>();
      for (bool with_scales : {false, true}) {
        std::vector<Exact> want(static_cast<size_t>(rows * n));
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<float> row(static_cast<size_t>(k));
          for (int64_t j = 0; j < k; ++j)
            row[j] = with_scales ? x.data<float>()[r * k + j] * s.data<float>()[j]
                                 : x.data<float>()[r * k + j];
          float amax = 0;
          for (float v : row) amax = std::max(amax, std::fabs(v));
          const float a_scale = amax / 127.0f;
          for (int64_t c = 0; c < n; ++c) {
            int64_t dot = 0;
            for (int64_t j = 0; j < k; ++j)
              dot += contractCode(row[j], a_scale, 127.0f) * int64_t{wq[c * k + j]};
            const double value = static_cast<double>(dot) * a_scale * q.weight.scale(c, 0);
            want[static_cast<size_t>(r * n + c)] = {value, gamma(3) * std::fabs(value) + 1e-30};
          }
        }
        std::vector<std::optional<Tensor>> inputs = {x, q.data, q.scales};
        if (with_scales) inputs.insert(inputs.end(), {std::nullopt, std::nullopt, s});
        setCpuIsaCapForTesting(level);
        Tensor got = runKernel("LlmQuantMatMul", inputs,
                               params({{"format", stringParam("w8a8")}, {"group", intParam(k)}}));
        setCpuIsaCapForTesting(kCpuIsaTop);
        expectWithinBounds(got, want, with_scales ? "w8a8 with input scales" : "w8a8");
      }
    }
}

// Prefill's product kernels of int8 weights (the AMX tiles, the AVX-512 panels) against the
// scalar reference, each through the same checks below.

// Rows of floats whose int16 codes cover ties, clamping, zeros, infinities, NaN, subnormal
// blocks and blocks halved 0 to 8 times (int16BlockHalvings): 3 rows of K = 256.
std::vector<float> awkwardRows(int64_t k) {
  std::mt19937 rng(95);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(3 * k));
  for (float& v : x) v = normal(rng) * 3;
  float* row = x.data();
  row[0] = 32767.0f, row[1] = -0.5f, row[2] = 2.5f, row[3] = -32767.0f;  // block 0: ties at scale 1
  row[4] = 32766.5f, row[5] = -32766.5f, row[6] = 16383.5f;              // ties next to the clamp
  for (int64_t i = 32; i < 64; ++i) row[i] = 0;                          // block 1: all zero
  row[64] = NAN;                                                         // block 2: NaN first
  for (int64_t i = 128; i < 160; ++i) row[i] = 1e-42f * static_cast<float>(i - 140);  // subnormal
  for (int64_t i = 160; i < 192; ++i) row[i] = (i % 2 ? 0.5f : -1.5f) * 1e-3f;        // ties again
  row[192] = 32767.0f / 256, row[193] = -32767.0f / 257;  // block 6: 8 halvings, a code of 32767
  row += k;
  row[64] = INFINITY;  // row 1, block 2: inf, NaN
  row[65] = NAN;
  row[66] = -INFINITY;
  row += k;
  // Row 2: one block at each power of two below the row's absmax, 1 to 8 halvings and past.
  for (int64_t b = 1; b < k / kQuantBlock; ++b)
    for (int64_t i = 0; i < kQuantBlock; ++i)
      row[b * kQuantBlock + i] = std::ldexp(row[b * kQuantBlock + i], -static_cast<int>(b) - 3);
  row[0] = 100.0f;
  return x;
}

// quantizeActivations at every level the host has gives the scalar loop's codes, scales, sums and
// pair layout bit for bit (the AVX2 and AVX-512 quantizers), for both code widths, on rows with
// ties, zeros, infinities, NaN and subnormals.
TEST(QuantizeActivationsTest, EveryLevelGivesTheScalarBits) {
  // One group of 16 blocks and less, one and a part, two and a part (the quantizers take
  // the blocks' scales 16 at a time).
  for (const int64_t k : {int64_t{32 * 8}, int64_t{32 * 17}, int64_t{32 * 40}}) {
    const std::vector<float> x = awkwardRows(k);
    const auto same = [](const auto& a, const auto& b) {
      return a.size() == b.size() &&
             (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
    };
    for (int bits : {8, 16})
      for (int64_t r = 0; r < 3; ++r) {
        setCpuIsaCapForTesting(CpuIsa::kScalar);
        QuantizedActivations want;
        quantizeActivations(x.data() + r * k, k, 64, bits, &want);
        for (CpuIsa level : cpuIsaLevelsAllowed()) {
          SCOPED_TRACE(std::string(cpuIsaName(level)) + ", " + std::to_string(bits) +
                       " bits, row " + std::to_string(r));
          setCpuIsaCapForTesting(level);
          QuantizedActivations got;
          quantizeActivations(x.data() + r * k, k, 64, bits, &got);
          EXPECT_TRUE(same(got.q, want.q));
          EXPECT_TRUE(same(got.q16, want.q16));
          EXPECT_TRUE(same(got.scales, want.scales));
          EXPECT_TRUE(same(got.group_sums, want.group_sums));
          EXPECT_TRUE(same(got.q_pairs, want.q_pairs));
          EXPECT_TRUE(same(got.pair_scales, want.pair_scales));
          EXPECT_TRUE(same(got.pair_block_sums, want.pair_block_sums));
        }
      }
    setCpuIsaCapForTesting(kCpuIsaTop);
  }
}

// An int16-activation product kernel: out[r * stride + i] for rows x channels [n0, n1) of w,
// the rows quantized from x ([rows, K] floats) by the kernel's own quantizer.
using Int16Kernel = std::function<void(const QuantWeight& w, int64_t n0, int64_t n1, const float* x,
                                       int64_t rows, float* out, int64_t stride)>;

// Per block the integer sums are the scalar ones; the float sums within the rounding bound;
// rows and channels outside the ranges untouched.
void expectInt16ProductsMatchScalarDots(const Int16Kernel& kernel,
                                        std::initializer_list<std::pair<int64_t, int64_t>> shapes) {
  for (const auto& [rows, k] : shapes) {
    const int64_t n = 37;
    Tensor w = randomFloat({n, k}, 96), x = randomFloat({rows, k}, 97);
    x.data<float>()[0] = 1e4f;  // codes at ±32767 next to small ones
    Quantized q = quantize(w, true, "int8", k);
    std::vector<QuantizedActivations> a(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      quantizeActivations(x.data<float>() + r * k, k, k, 16, &a[r]);
    const int64_t stride = n + 1;
    std::vector<float> out(static_cast<size_t>((rows + 1) * stride), -1.0f);
    kernel(q.weight, 1, n - 1, x.data<float>(), rows, out.data() + 1, stride);
    for (int64_t r = 0; r <= rows; ++r)
      for (int64_t c = 0; c <= n; ++c) {
        const float got = out[static_cast<size_t>(r * stride + c)];
        if (r == rows || c == 0 || c >= n - 1) {  // outside the rows and channels asked for
          EXPECT_EQ(got, -1.0f) << "row " << r << " column " << c << " was written";
          continue;
        }
        double magnitude = 0;
        for (int64_t i = 0; i < k; ++i)
          magnitude += std::fabs(a[r].q16[i] * a[r].scales[i / kQuantBlock] * q.weight.scale(c, 0) *
                                 q.data.data<int8_t>()[c * k + i]);
        EXPECT_NEAR(got, quantDotScalar(q.weight, c, a[r]),
                    gamma(2 * k / kQuantBlock + 8) * magnitude + 1e-30)
            << rows << " rows, K " << k << ", row " << r << " channel " << c;
      }
  }
}

// An int8 weight over codes `wq` [n, k] and channel scales `scales`, both borrowed.
QuantWeight int8Weight(const std::vector<int8_t>& wq, const std::vector<float>& scales, int64_t n,
                       int64_t k) {
  QuantWeight w;
  w.traits = &quantTraits(QuantFormat::kInt8);
  w.n = n, w.k = k, w.group = k, w.data = wq.data(), w.scales = scales.data();
  return w;
}

// Where every float operation is exact, the results are the integers: activation scales of
// 2^-10 (each block holds one code of 32767, against a weight of 1), the other codes within
// ±1023, weight scales of 1, three blocks (four where the kernel needs K a multiple of 64: every
// partial sum an integer times 2^-10 below 2^24 of them). A block sum off by one fails here, where
// the rounding bound above would hide it.
void expectInt16ProductsExactWhereFloatIs(const Int16Kernel& kernel, int64_t rows, int64_t k = 96) {
  const int64_t n = 19, blocks = k / kQuantBlock;
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> code(-1023, 1023), weight(-127, 127);
  std::vector<float> x(static_cast<size_t>(rows * k));
  std::vector<int32_t> codes(x.size());
  for (int64_t i = 0; i < rows * k; ++i) {
    codes[i] = i % kQuantBlock == 0 ? 32767 : code(rng);
    x[i] = std::ldexp(static_cast<float>(codes[i]), -10);
  }
  std::vector<int8_t> wq(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n * k; ++i)
    wq[i] = static_cast<int8_t>(i % kQuantBlock == 0 ? 1 : weight(rng));
  const std::vector<float> w_scales(static_cast<size_t>(n), 1.0f);
  const QuantWeight w = int8Weight(wq, w_scales, n, k);
  std::vector<float> out(static_cast<size_t>(rows * n));
  kernel(w, 0, n, x.data(), rows, out.data(), n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) {
      int64_t dot = 0;
      for (int64_t i = 0; i < k; ++i) dot += int64_t{codes[r * k + i]} * wq[c * k + i];
      ASSERT_EQ(out[r * n + c], std::ldexp(static_cast<float>(dot), -10))
          << "row " << r << " channel " << c << " (" << blocks << " blocks)";
    }
}

// A w8a8 product kernel: out[r * stride + i] = Σ_K a[r] w[n0 + i] for int8 rows a ([rows, k]).
// Codes plus 128 as unsigned bytes (a ^ 0x80), what the w8a8 panels take (vpdpbusd multiplies
// unsigned by signed).
std::vector<uint8_t> biasedCodes(const int8_t* a, size_t count) {
  std::vector<uint8_t> biased(count);
  for (size_t i = 0; i < count; ++i) biased[i] = static_cast<uint8_t>(a[i] ^ 0x80);
  return biased;
}

using Int8Kernel = std::function<void(const int8_t* a, int64_t rows, const int8_t* w, int64_t k,
                                      int64_t n0, int64_t n1, int32_t* out, int64_t stride)>;

// The int32 sums are exact, with the extremes (-127 x -127 and -127 x -128 over all of K), for
// row and channel counts on and off the kernels' blocking. Codes are within +-127 (per-token
// quantization's range); weights take the whole int8 range, -128 included (the kernels'
// contract, though llmc's quantizer writes +-127 at most: dotInt8Rows once gave -128 |a| for a
// negative a against it).
void expectInt8ProductsExact(const Int8Kernel& kernel,
                             std::initializer_list<std::pair<int64_t, int64_t>> shapes) {
  std::mt19937 rng(98);
  std::uniform_int_distribution<int> value(-127, 127), weight(-128, 127);
  for (const auto& [rows, k] : shapes) {
    const int64_t n = 53;
    std::vector<int8_t> a(static_cast<size_t>(rows * k)), w(static_cast<size_t>(n * k));
    for (int8_t& v : a) v = static_cast<int8_t>(value(rng));
    for (int8_t& v : w) v = static_cast<int8_t>(weight(rng));
    for (int64_t i = 0; i < k; ++i) {
      a[i] = w[k + i] = -127;  // row 0 x channel 1: K * 127^2
      w[2 * k + i] = -128;     // row 0 x channel 2: K * 127 * 128
    }
    const int64_t stride = n + 2;
    std::vector<int32_t> out(static_cast<size_t>((rows + 1) * stride), -1);
    kernel(a.data(), rows, w.data(), k, 1, n, out.data() + 1, stride);
    for (int64_t r = 0; r <= rows; ++r)
      for (int64_t c = 0; c < stride; ++c) {
        const int32_t got = out[static_cast<size_t>(r * stride + c)];
        if (r == rows || c == 0 || c > n - 1) {
          EXPECT_EQ(got, -1) << "row " << r << " column " << c << " was written";
          continue;
        }
        ASSERT_EQ(got, dotInt8Scalar(a.data() + r * k, w.data() + c * k, k))
            << rows << " rows, K " << k << ", row " << r << " channel " << c;
      }
    EXPECT_EQ(out[1], 127 * 127 * k);  // row 0, channel 1
    EXPECT_EQ(out[2], 127 * 128 * k);  // row 0, channel 2
  }
}

// dotInt8Rows (w8a8 below the panels' rows: decode) at every level, with AVX-VNNI and without
// (where the CPU has it), four channels a pass and one.
TEST(W8A8Test, RowTilesAreExact) {
  for (CpuIsa level : cpuIsaLevelsAllowed())
    for (int per_pass : {4, 1})
      for (bool avx_vnni : {true, false}) {
        SCOPED_TRACE(std::string("level ") + cpuIsaName(level) + ", " + std::to_string(per_pass) +
                     " channels a pass" + (avx_vnni ? "" : ", AVX-VNNI off"));
        setCpuIsaCapForTesting(level);
        setAvxVnniForTesting(avx_vnni);
        expectInt8ProductsExact(
            [per_pass](const int8_t* a, int64_t rows, const int8_t* w, int64_t k, int64_t n0,
                       int64_t n1, int32_t* out, int64_t stride) {
              for (int64_t r = 0; r < rows; ++r)
                dotInt8Rows(a + r * k, w + n0 * k, k, n1 - n0, out + r * stride, per_pass);
            },
            {{1, 32}, {3, 96}, {2, 4096}});
        setAvxVnniForTesting(true);
        setCpuIsaCapForTesting(kCpuIsaTop);
      }
}

// The AMX tiles (cpu/quant_dot_amx.cpp). Where the host has no AMX they cannot run: the tests
// say so and skip (test/isa/emulated_host.py runs without it too).
class AmxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!quantDotHasAmx())
      GTEST_SKIP() << "this CPU (or its OS, or LLMC_CPU_ISA) gives no AMX-INT8";
  }
  static void int16Tiles(const QuantWeight& w, int64_t n0, int64_t n1, const float* x, int64_t rows,
                         float* out, int64_t stride) {
    AmxActivations codes;
    resizeAmxActivations(rows, w.k, &codes);
    for (int64_t r = 0; r < rows; ++r) quantizeAmxRow(x + r * w.k, r, &codes);
    quantDotTileAmx(w, n0, n1, codes, out, stride);
  }
  // The tiles read rows in sixteens: the padding rows zero.
  static std::vector<int8_t> padded(const int8_t* a, int64_t rows, int64_t k) {
    std::vector<int8_t> rows16(static_cast<size_t>((rows + 15) / 16 * 16 * k), 0);
    std::copy(a, a + rows * k, rows16.begin());
    return rows16;
  }
  static void int8Tiles(const int8_t* a, int64_t rows, const int8_t* w, int64_t k, int64_t n0,
                        int64_t n1, int32_t* out, int64_t stride) {
    dotInt8TileAmx(padded(a, rows, k).data(), rows, w, k, n0, n1, out, stride);
  }
  // The same through the engine's kept pack (packInt8PanelsVnni: its panels of 32 and a shorter
  // last one, of 5 channels in one slab for the int16 products' N of 37 and of 21 in two for
  // w8a8's 53): channels 0-15 from a call at channel 0, the rest from one at channel 16 (a
  // panel's second slab first, then slabs that straddle panels), those asked for copied out. The
  // calls are handed zeroed weight codes beside the pack: only the pack's codes give the sums.
  template <typename T, typename Run>
  static void fromPack(int64_t rows, int64_t n0, int64_t n1, T* out, int64_t stride, Run run) {
    std::vector<T> all(static_cast<size_t>(rows * n1));
    run(int64_t{0}, int64_t{16}, all.data(), n1);
    run(int64_t{16}, n1, all.data() + 16, n1);
    for (int64_t r = 0; r < rows; ++r)
      std::copy(all.begin() + r * n1 + n0, all.begin() + (r + 1) * n1, out + r * stride);
  }
  static void int16TilesPacked(const QuantWeight& w, int64_t n0, int64_t n1, const float* x,
                               int64_t rows, float* out, int64_t stride) {
    const auto pack = packInt8PanelsVnni(static_cast<const int8_t*>(w.data), w.n, w.k, nullptr);
    AmxActivations codes;
    resizeAmxActivations(rows, w.k, &codes);
    for (int64_t r = 0; r < rows; ++r) quantizeAmxRow(x + r * w.k, r, &codes);
    const std::vector<int8_t> zeros(static_cast<size_t>(w.n * w.k), 0);
    QuantWeight zeroed = w;
    zeroed.data = zeros.data();
    fromPack(rows, n0, n1, out, stride, [&](int64_t first, int64_t end, float* to, int64_t width) {
      quantDotTileAmx(zeroed, first, end, codes, to, width, pack.get());
    });
  }
  static void int8TilesPacked(const int8_t* a, int64_t rows, const int8_t* w, int64_t k, int64_t n0,
                              int64_t n1, int32_t* out, int64_t stride) {
    const auto pack = packInt8PanelsVnni(w, n1, k, nullptr);
    const std::vector<int8_t> a16 = padded(a, rows, k), zeros(static_cast<size_t>(n1 * k), 0);
    fromPack(rows, n0, n1, out, stride,
             [&](int64_t first, int64_t end, int32_t* to, int64_t width) {
               dotInt8TileAmx(a16.data(), rows, zeros.data(), k, first, end, to, width, pack.get());
             });
  }
};

// The planes hold quantizeActivations' codes bit for bit, each shifted left by
// kInt16MaxHalvings less its block's halvings (65536 * top + 256 * mid + low), with the row's
// unhalved scale; every block's scale is that scale halved as int16BlockHalvings says.
TEST_F(AmxTest, QuantizedRowsAreTheReferenceCodes) {
  // One group of 16 blocks and less, one and a part, two and a part (the quantizers take
  // the blocks' scales 16 at a time).
  for (const int64_t k : {int64_t{32 * 8}, int64_t{32 * 17}, int64_t{32 * 40}}) {
    const std::vector<float> x = awkwardRows(k);
    AmxActivations got, want;
    resizeAmxActivations(3, k, &got);
    resizeAmxActivations(3, k, &want);
    for (int64_t r = 0; r < 3; ++r) {
      QuantizedActivations a;
      quantizeActivations(x.data() + r * k, k, k, 16, &a);
      setAmxActivationRow(a, r, &want);
      quantizeAmxRow(x.data() + r * k, r, &got);
      float row_absmax = 0;
      for (int64_t i = 0; i < k; ++i) row_absmax = std::max(row_absmax, std::fabs(x[r * k + i]));
      for (int64_t b = 0; b < k / kQuantBlock; ++b) {
        float block_absmax = 0;
        for (int64_t i = b * kQuantBlock; i < (b + 1) * kQuantBlock; ++i)
          block_absmax = std::max(block_absmax, std::fabs(x[r * k + i]));
        const int halvings = int16BlockHalvings(block_absmax, row_absmax);
        ASSERT_EQ(a.scales[b], int16BlockScale(row_absmax, halvings)) << r << " " << b;
        for (int64_t i = b * kQuantBlock; i < (b + 1) * kQuantBlock; ++i) {
          const int64_t at = amxCodeAt(r, i, k);
          ASSERT_EQ(65536 * want.top[at] + 256 * want.mid[at] + want.low[at],
                    a.q16[i] * (1 << (kInt16MaxHalvings - halvings)))
              << r << " " << i;
        }
      }
      EXPECT_EQ(want.row_scales[r], int16BlockScale(row_absmax, 0));
    }
    EXPECT_EQ(got.top, want.top);
    EXPECT_EQ(got.mid, want.mid);
    EXPECT_EQ(got.low, want.low);
    ASSERT_EQ(got.row_scales.size(), want.row_scales.size());
    for (size_t i = 0; i < got.row_scales.size(); ++i)
      EXPECT_EQ(std::memcmp(&got.row_scales[i], &want.row_scales[i], sizeof(float)), 0) << i;
  }
}

// The halvings keep each block's codes in the upper half of the 16 bits' range (up to
// kInt16MaxHalvings), over every power of two a block's absmax may sit below its row's, and
// across binades of the row's absmax (the doubling is exact there).
TEST(QuantizeActivationsTest, Int16BlockHalvingsUseTheRange) {
  for (int row_exponent : {-120, -60, -1, 0, 1, 20, 100, 126})
    for (int below = 0; below <= 40; ++below)
      for (float mantissa : {1.0f, 1.25f, 1.5f, 1.999f}) {
        const float row_absmax = std::ldexp(1.5f, row_exponent);
        const float block_absmax = std::ldexp(mantissa, row_exponent - below);
        if (block_absmax > row_absmax) continue;
        const int e = int16BlockHalvings(block_absmax, row_absmax);
        ASSERT_GE(e, 0);
        ASSERT_LE(e, kInt16MaxHalvings);
        ASSERT_LE(std::ldexp(block_absmax, e), row_absmax) << row_exponent << " " << below;
        if (e < kInt16MaxHalvings) {
          ASSERT_GT(std::ldexp(block_absmax, e + 1), row_absmax) << row_exponent << " " << below;
        }
        // The block's largest code: at least half the range where it was not capped.
        const float scale = int16BlockScale(row_absmax, e);
        if (scale >= FLT_MIN && e < kInt16MaxHalvings) {
          ASSERT_GE(block_absmax / scale, 16383.0f) << row_exponent << " " << below;
        }
      }
  // At each boundary, a block exactly the row's absmax / 2^j and the floats either side of it,
  // against the definition read as a loop that doubles until it passes the row's absmax.
  auto doublings = [](float block_absmax, float row_absmax) {
    int e = 0;
    for (double m = double{block_absmax} * 2; e < kInt16MaxHalvings && m <= row_absmax; m *= 2) ++e;
    return e;
  };
  for (int row_exponent : {-140, -126, -1, 0, 100, 127})
    for (int j = 0; j <= kInt16MaxHalvings + 2; ++j) {
      const float row_absmax = std::ldexp(1.5f, row_exponent);
      const float at = std::ldexp(1.5f, row_exponent - j);
      for (float block_absmax : {at, std::nextafter(at, 0.0f), std::nextafter(at, INFINITY)}) {
        if (block_absmax > row_absmax) continue;
        EXPECT_EQ(int16BlockHalvings(block_absmax, row_absmax), doublings(block_absmax, row_absmax))
            << block_absmax << " in a row of " << row_absmax;
      }
    }
  EXPECT_EQ(int16BlockHalvings(FLT_MAX, FLT_MAX), 0);
  EXPECT_EQ(int16BlockHalvings(0.0f, 0.0f), kInt16MaxHalvings);
  EXPECT_EQ(int16BlockHalvings(1.0f, INFINITY), 0);
  EXPECT_EQ(int16BlockHalvings(INFINITY, INFINITY), 0);
}

TEST_F(AmxTest, Int16TilesMatchTheScalarDots) {
  expectInt16ProductsMatchScalarDots(int16Tiles, {{1, 64}, {16, 128}, {17, 768}, {45, 64}});
}

TEST_F(AmxTest, Int16TilesAreExactWhereFloatIs) {
  expectInt16ProductsExactWhereFloatIs(int16Tiles, 21, 128);
}

// At the largest K the tiles take (kAmxMaxK), each plane's int32 sums at their extremes: rows
// whose codes (after the halvings' shift) all have a low byte of 255 and a mid byte of 127,
// and rows of -32767 * 256, whose top byte is -128, against channels of all +127 and all -127
// (and random ones). Each output is the exact sum rounded once, then two scale products: within
// 4 ulps of the value summed in double from the reference codes. An int32 sum that wrapped would
// be off by 2^32 times the scales.
TEST_F(AmxTest, Int16TilesAreExactAtTheirLargestK) {
  const int64_t k = kAmxMaxK, rows = 16, n = 16;
  std::vector<float> x(static_cast<size_t>(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i)
      x[r * k + i] = r % 2 == 0 ? (i == 0 ? 32767.0f : 32767.0f / 256) : -32767.0f;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> weight(-127, 127);
  std::vector<int8_t> wq(static_cast<size_t>(n * k));
  for (int64_t c = 0; c < n; ++c)
    for (int64_t i = 0; i < k; ++i)
      wq[c * k + i] = static_cast<int8_t>(c == 0 ? 127 : c == 1 ? -127 : weight(rng));
  const std::vector<float> w_scales(static_cast<size_t>(n), 1.0f);
  const QuantWeight w = int8Weight(wq, w_scales, n, k);
  std::vector<float> out(static_cast<size_t>(rows * n));
  int16Tiles(w, 0, n, x.data(), rows, out.data(), n);
  for (int64_t r = 0; r < rows; ++r) {
    QuantizedActivations a;
    quantizeActivations(x.data() + r * k, k, k, 16, &a);
    if (r == 0) {  // the low-plane extreme: codes 32767 at 2^8 halvings, low byte 255
      ASSERT_EQ(a.q16[kQuantBlock], 32767);
      ASSERT_EQ(a.scales[1] * 256, a.scales[0]);
    }
    for (int64_t c = 0; c < n; ++c) {
      double exact = 0;
      for (int64_t b = 0; b < k / kQuantBlock; ++b) {
        int64_t dot = 0;
        for (int64_t i = b * kQuantBlock; i < (b + 1) * kQuantBlock; ++i)
          dot += int64_t{a.q16[i]} * wq[c * k + i];
        exact += static_cast<double>(a.scales[b]) * static_cast<double>(dot);
      }
      ASSERT_NEAR(out[r * n + c], exact, std::fabs(exact) * std::ldexp(4.0, -24))
          << "row " << r << " channel " << c;
    }
  }
}

TEST_F(AmxTest, Int8TilesAreExact) {
  expectInt8ProductsExact(int8Tiles, {{1, 64}, {16, 192}, {17, 64}, {50, 4096}});
}

TEST_F(AmxTest, TilesReadTheKeptPack) {
  expectInt16ProductsMatchScalarDots(int16TilesPacked, {{1, 64}, {16, 128}, {17, 768}, {45, 64}});
  expectInt8ProductsExact(int8TilesPacked, {{1, 64}, {16, 192}, {17, 64}, {50, 4096}});
}

// w8a8's sums scaled as they leave the tiles: (float(Σ) * row scale) * channel scale, bit for bit
// the value quantMatMul's other levels give; channels 1..52 of 53 (a partial last slab), rows
// below, at and past two tiles, from the weight and from the kept pack; nothing outside written.
TEST_F(AmxTest, Int8ScaledTilesAreTheScaledSums) {
  std::mt19937 rng(41);
  std::uniform_int_distribution<int> value(-127, 127);
  std::uniform_real_distribution<float> scale(1e-4f, 2.0f);
  for (const auto& [rows, k] : {std::pair<int64_t, int64_t>{1, 64}, {17, 192}, {50, 128}})
    for (bool kept_pack : {false, true}) {
      SCOPED_TRACE(std::to_string(rows) + " rows, K " + std::to_string(k) +
                   (kept_pack ? ", kept pack" : ""));
      const int64_t n = 53, stride = n + 2;
      std::vector<int8_t> a(static_cast<size_t>(rows * k)), w(static_cast<size_t>(n * k));
      for (int8_t& v : a) v = static_cast<int8_t>(value(rng));
      for (int8_t& v : w) v = static_cast<int8_t>(value(rng));
      std::vector<float> row_scales(static_cast<size_t>(rows)), channel_scales(n - 1);
      for (float& v : row_scales) v = scale(rng);
      for (float& v : channel_scales) v = scale(rng);
      const std::vector<int8_t> a16 = padded(a.data(), rows, k);
      const auto pack = kept_pack ? packInt8PanelsVnni(w.data(), n, k, nullptr) : nullptr;
      std::vector<float> out(static_cast<size_t>((rows + 1) * stride), -1.0f);
      quantDotInt8TileAmx(a16.data(), rows, w.data(), k, 1, n, row_scales.data(),
                          channel_scales.data(), out.data() + 1, stride, pack.get());
      for (int64_t r = 0; r <= rows; ++r)
        for (int64_t c = 0; c < stride; ++c) {
          const float got = out[static_cast<size_t>(r * stride + c)];
          if (r == rows || c == 0 || c > n - 1) {
            EXPECT_EQ(got, -1.0f) << "row " << r << " column " << c << " was written";
            continue;
          }
          const float sum =
              static_cast<float>(dotInt8Scalar(a.data() + r * k, w.data() + c * k, k));
          ASSERT_EQ(got, sum * row_scales[r] * channel_scales[c - 1])
              << "row " << r << " channel " << c;
        }
    }
}

// A 4-bit panel kernel (quantDotInt4PanelAvx512's signature).
using Int4PanelKernel =
    std::function<void(const QuantWeight&, int64_t, int64_t, const QuantizedActivations*, int64_t,
                       float*, int64_t, const Int4PanelPack*)>;

// Against quantDotScalar for each 4-bit format (groups of 32, 128 with a shorter last one, and
// 64 with zero points): rows below, at and past the row tiles, K in one chunk of 12 blocks, two
// (768) and three with a partial last one (832); channels [1, 36) of 37 (a panel of 32 and one
// of 3); rows and channels outside the ranges untouched.
void expectInt4PanelsMatchScalarDots(const Int4PanelKernel& kernel) {
  for (const auto& [format, group_param] :
       {std::pair<const char*, int64_t>{"int4", 32}, {"int4", 128}, {"int4_zp", 64}})
    for (const auto& [rows, k] :
         {std::pair<int64_t, int64_t>{1, 64}, {4, 128}, {6, 768}, {7, 832}, {13, 192}}) {
      SCOPED_TRACE(std::string(format) + " group " + std::to_string(group_param) + ", " +
                   std::to_string(rows) + " rows, K " + std::to_string(k));
      const int64_t n = 37, group = std::min(group_param, k);
      Tensor w = randomFloat({n, k}, 98), x = randomFloat({rows, k}, 99);
      x.data<float>()[0] = 40.0f;  // codes at ±127 next to small ones
      Quantized q = quantize(w, true, format, group);
      std::vector<QuantizedActivations> a(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r)
        quantizeActivations(x.data<float>() + r * k, k, group, 8, &a[r]);
      const int64_t stride = n + 1;
      std::vector<float> out(static_cast<size_t>((rows + 1) * stride), -1.0f);
      kernel(q.weight, 1, n - 1, a.data(), rows, out.data() + 1, stride, nullptr);
      for (int64_t r = 0; r <= rows; ++r)
        for (int64_t c = 0; c <= n; ++c) {
          const float got = out[static_cast<size_t>(r * stride + c)];
          if (r == rows || c == 0 || c >= n - 1) {
            EXPECT_EQ(got, -1.0f) << "row " << r << " column " << c << " was written";
            continue;
          }
          // Every product's size, the unsigned code and the zero point each at most 15.
          double magnitude = 0;
          for (int64_t i = 0; i < k; ++i)
            magnitude +=
                std::fabs(a[r].q[i] * a[r].scales[i / kQuantBlock] * q.weight.scale(c, i / group)) *
                30;
          EXPECT_NEAR(got, quantDotScalar(q.weight, c, a[r]),
                      gamma(2 * k / kQuantBlock + 2 * k / group + 8) * magnitude + 1e-30)
              << "row " << r << " channel " << c;
        }
    }
}

// With the pack (of 37 and 70 channels, each format) the bits of repacking per call, for channel
// ranges from and off the first panel; the products read the pack.
void expectInt4PackGivesTheRepackedBits(const Int4PanelKernel& kernel) {
  for (const auto& [format, group] :
       {std::pair<const char*, int64_t>{"int4", 32}, {"int4", 128}, {"int4_zp", 64}})
    for (int64_t n : {37, 70}) {
      SCOPED_TRACE(std::string(format) + " group " + std::to_string(group) + ", N " +
                   std::to_string(n));
      const int64_t rows = 7, k = 256;
      Tensor w = randomFloat({n, k}, 61), x = randomFloat({rows, k}, 62);
      Quantized q = quantize(w, true, format, group);
      std::vector<QuantizedActivations> a(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r)
        quantizeActivations(x.data<float>() + r * k, k, group, 8, &a[r]);
      const std::shared_ptr<const Int4PanelPack> pack = packInt4Panels(q.weight, nullptr);
      ASSERT_TRUE(pack);
      EXPECT_EQ(pack->bytes(), static_cast<size_t>((n + 31) / 32 * k * 16 +
                                                   (n + 31) / 32 * (k / group) * 32 * 2 * 4));
      for (const auto& [n0, n1] : {std::pair<int64_t, int64_t>{0, n}, {32, n}, {0, 32}}) {
        std::vector<float> repacked(static_cast<size_t>(rows * n), -1.0f), packed = repacked;
        kernel(q.weight, n0, n1, a.data(), rows, repacked.data() + n0, n, nullptr);
        kernel(q.weight, n0, n1, a.data(), rows, packed.data() + n0, n, pack.get());
        EXPECT_EQ(0, std::memcmp(repacked.data(), packed.data(), repacked.size() * 4))
            << "channels [" << n0 << ", " << n1 << ")";
        EXPECT_EQ(repacked[static_cast<size_t>(rows * n - 1)] == -1.0f, n1 < n);
      }
      // The products read the pack: with its scales zeroed every output is zero.
      Int4PanelPack zeroed = *pack;
      std::fill(zeroed.scales.begin(), zeroed.scales.end(), 0.0f);
      std::fill(zeroed.zeros.begin(), zeroed.zeros.end(), 0.0f);
      std::vector<float> out(static_cast<size_t>(rows * n), -1.0f);
      kernel(q.weight, 0, n, a.data(), rows, out.data(), n, &zeroed);
      EXPECT_EQ(std::count(out.begin(), out.end(), 0.0f), rows * n);
    }
}

// The AVX-512 panels (cpu/quant_dot_avx512.inc), at each AVX-512 level the host has: the int16
// products with and without VNNI, w8a8 with it.
class PanelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!quantDotHasAvx512()) GTEST_SKIP() << "this CPU (or LLMC_CPU_ISA) has no AVX-512";
  }
  void TearDown() override { setCpuIsaCapForTesting(kCpuIsaTop); }
  static std::vector<CpuIsa> levels() {
    std::vector<CpuIsa> out;
    for (CpuIsa level : cpuIsaLevelsAllowed())
      if (level == CpuIsa::kAvx512 || level == CpuIsa::kAvx512Vnni) out.push_back(level);
    return out;
  }
  static void int16Panels(const QuantWeight& w, int64_t n0, int64_t n1, const float* x,
                          int64_t rows, float* out, int64_t stride) {
    const int64_t blocks = w.k / kQuantBlock;
    std::vector<int16_t> codes(static_cast<size_t>(rows * w.k));
    std::vector<float> scales(static_cast<size_t>(rows * blocks));
    for (int64_t r = 0; r < rows; ++r)
      quantizeInt16RowAvx512(x + r * w.k, w.k, codes.data() + r * w.k, scales.data() + r * blocks);
    quantDotPanelAvx512(w, n0, n1, codes.data(), scales.data(), rows, out, stride);
  }
  static void int8Panels(const int8_t* a, int64_t rows, const int8_t* w, int64_t k, int64_t n0,
                         int64_t n1, int32_t* out, int64_t stride) {
    dotInt8PanelVnni(biasedCodes(a, static_cast<size_t>(rows * k)).data(), rows, w, k, n0, n1, out,
                     stride);
  }
};

// quantizeActivations' int16 codes and scales, bit for bit.
TEST_F(PanelTest, Int16CodesAreTheReference) {
  // One group of 16 blocks and less, one and a part, two and a part (the quantizers take
  // the blocks' scales 16 at a time).
  for (const int64_t k : {int64_t{32 * 8}, int64_t{32 * 17}, int64_t{32 * 40}}) {
    const std::vector<float> x = awkwardRows(k);
    for (int64_t r = 0; r < 3; ++r) {
      QuantizedActivations want;  // the scalar loop's
      setCpuIsaCapForTesting(CpuIsa::kScalar);
      quantizeActivations(x.data() + r * k, k, k, 16, &want);
      setCpuIsaCapForTesting(kCpuIsaTop);
      std::vector<int16_t> codes(static_cast<size_t>(k));
      std::vector<float> scales(static_cast<size_t>(k / kQuantBlock));
      quantizeInt16RowAvx512(x.data() + r * k, k, codes.data(), scales.data());
      EXPECT_EQ(codes, want.q16) << "row " << r;
      for (size_t i = 0; i < scales.size(); ++i)
        EXPECT_EQ(std::memcmp(&scales[i], &want.scales[i], sizeof(float)), 0) << r << " " << i;
    }
  }
}

// Row counts below, at and past the 6-row blocks; K in one chunk of 12 blocks, two (768) and
// three with a partial last one (800); channel ranges of 35 (a panel of 32 and one of 3) and, in
// the exact test, 19 (two slabs, the second of 3).
TEST_F(PanelTest, Int16PanelsMatchTheScalarDots) {
  for (CpuIsa level : levels()) {
    SCOPED_TRACE(cpuIsaName(level));
    setCpuIsaCapForTesting(level);
    expectInt16ProductsMatchScalarDots(
        int16Panels, {{1, 32}, {4, 96}, {6, 64}, {7, 768}, {13, 160}, {45, 64}, {8, 800}});
  }
}

TEST_F(PanelTest, Int16PanelsAreExactWhereFloatIs) {
  for (CpuIsa level : levels()) {
    SCOPED_TRACE(cpuIsaName(level));
    setCpuIsaCapForTesting(level);
    expectInt16ProductsExactWhereFloatIs(int16Panels, 21);
  }
}

// The 4-bit panels against quantDotScalar (expectInt4PanelsMatchScalarDots).
TEST_F(PanelTest, Int4PanelsMatchTheScalarDots) {
  for (CpuIsa level : levels()) {
    SCOPED_TRACE(cpuIsaName(level));
    setCpuIsaCapForTesting(level);
    expectInt4PanelsMatchScalarDots(quantDotInt4PanelAvx512);
  }
}

// A 4-bit weight packed once (what the executor keeps for an engine's weight) gives the bits of
// repacking per call, over all channels and over task ranges that start on a panel (N = 37:
// panels of 32 and 5; 70: 32, 32 and 6, the last of one slab), for each format and level.
TEST_F(PanelTest, Int4PackGivesTheRepackedBits) {
  for (CpuIsa level : levels()) {
    SCOPED_TRACE(cpuIsaName(level));
    setCpuIsaCapForTesting(level);
    expectInt4PackGivesTheRepackedBits(quantDotInt4PanelAvx512);
  }
}

// An int8 weight packed once for the int16 panels gives the bits of repacking per call (N = 37
// and 70, as for 4-bit), on each level; the products read the pack's scales.
TEST_F(PanelTest, Int16PackGivesTheRepackedBits) {
  for (CpuIsa level : levels())
    for (int64_t n : {37, 70}) {
      SCOPED_TRACE(std::string(cpuIsaName(level)) + ", N " + std::to_string(n));
      setCpuIsaCapForTesting(level);
      const int64_t rows = 17, k = 192, blocks = k / kQuantBlock;
      Tensor w = randomFloat({n, k}, 63), x = randomFloat({rows, k}, 64);
      Quantized q = quantize(w, true, "int8", k);
      std::vector<int16_t> codes(static_cast<size_t>(rows * k));
      std::vector<float> scales(static_cast<size_t>(rows * blocks));
      for (int64_t r = 0; r < rows; ++r)
        quantizeInt16RowAvx512(x.data<float>() + r * k, k, codes.data() + r * k,
                               scales.data() + r * blocks);
      const std::shared_ptr<const Int16PanelPack> pack = packInt16Panels(q.weight, nullptr);
      ASSERT_TRUE(pack);
      EXPECT_EQ(pack->bytes(), static_cast<size_t>((n + 31) / 32 * (k * 32 + 32 * 4)));
      for (const auto& [n0, n1] : {std::pair<int64_t, int64_t>{0, n}, {32, n}, {0, 32}}) {
        std::vector<float> repacked(static_cast<size_t>(rows * n), -1.0f), packed = repacked;
        quantDotPanelAvx512(q.weight, n0, n1, codes.data(), scales.data(), rows,
                            repacked.data() + n0, n);
        quantDotPanelAvx512(q.weight, n0, n1, codes.data(), scales.data(), rows, packed.data() + n0,
                            n, pack.get());
        EXPECT_EQ(0, std::memcmp(repacked.data(), packed.data(), repacked.size() * 4))
            << "channels [" << n0 << ", " << n1 << ")";
        EXPECT_EQ(repacked[static_cast<size_t>(rows * n - 1)] == -1.0f, n1 < n);
      }
      Int16PanelPack zeroed = *pack;
      std::fill(zeroed.scales.begin(), zeroed.scales.end(), 0.0f);
      std::vector<float> out(static_cast<size_t>(rows * n), -1.0f);
      quantDotPanelAvx512(q.weight, 0, n, codes.data(), scales.data(), rows, out.data(), n,
                          &zeroed);
      EXPECT_EQ(std::count(out.begin(), out.end(), 0.0f), rows * n);
    }
}

// The AVX2 panels (cpu/quant_panel_avx2.cpp) at the avx2 level, with and (where the CPU has it)
// without AVX-VNNI: against the scalar dots, exact where float is, the pack's bits against
// repacking per call, the portable pack's bytes against the AVX-512 one's and, where the host
// has AVX-512, the AVX-512 panels' bits.
class Avx2PanelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cpuIsaSupported() < CpuIsa::kAvx2) GTEST_SKIP() << "this CPU has no AVX2";
    setCpuIsaCapForTesting(CpuIsa::kAvx2);
    ASSERT_TRUE(quantDotHasAvx2Panels());
  }
  void TearDown() override {
    setCpuIsaCapForTesting(kCpuIsaTop);
    setAvxVnniForTesting(true);
  }
  // fn() with AVX2 alone and, where the CPU has it, with AVX-VNNI.
  template <typename Fn>
  static void eachVariant(Fn&& fn) {
    for (bool vnni : {false, true}) {
      setAvxVnniForTesting(vnni);
      if (vnni && !cpuAvxVnni()) continue;  // no AVX-VNNI here (or LLMC_CPU_ISA=avx2)
      SCOPED_TRACE(vnni ? "avx2 with avx_vnni" : "avx2");
      ASSERT_FALSE(!vnni && cpuAvxVnni()) << "the switch turns AVX-VNNI off";
      fn();
    }
  }
  // codes [rows, k] and scales [rows, k / kQuantBlock] of x through quantizeInt16Row.
  static void codesOf(const float* x, int64_t rows, int64_t k, std::vector<int16_t>* codes,
                      std::vector<float>* scales) {
    const int64_t blocks = k / kQuantBlock;
    codes->assign(static_cast<size_t>(rows * k), 0);
    scales->assign(static_cast<size_t>(rows * blocks), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      quantizeInt16Row(x + r * k, k, codes->data() + r * k, scales->data() + r * blocks);
  }
  static void int16Panels(const QuantWeight& w, int64_t n0, int64_t n1, const float* x,
                          int64_t rows, float* out, int64_t stride) {
    std::vector<int16_t> codes;
    std::vector<float> scales;
    codesOf(x, rows, w.k, &codes, &scales);
    quantDotPanelAvx2(w, n0, n1, codes.data(), scales.data(), rows, out, stride);
  }
  static void expectAvx2Int16PackBits();
  static void expectAvx2Int4PanelsGiveTheAvx512Bits();
  static void int8Panels(const int8_t* a, int64_t rows, const int8_t* w, int64_t k, int64_t n0,
                         int64_t n1, int32_t* out, int64_t stride) {
    dotInt8PanelAvxVnni(biasedCodes(a, static_cast<size_t>(rows * k)).data(), rows, w, k, n0, n1,
                        out, stride);
  }
};

// quantizeInt16Row at the avx2 level is quantizeActivations' codes and scales, bit for bit.
TEST_F(Avx2PanelTest, Int16CodesAreTheReference) {
  // One group of 16 blocks and less, one and a part, two and a part (the quantizers take
  // the blocks' scales 16 at a time).
  for (const int64_t k : {int64_t{32 * 8}, int64_t{32 * 17}, int64_t{32 * 40}}) {
    const std::vector<float> x = awkwardRows(k);
    std::vector<int16_t> codes;
    std::vector<float> scales;
    codesOf(x.data(), 3, k, &codes, &scales);
    for (int64_t r = 0; r < 3; ++r) {
      QuantizedActivations want;
      quantizeActivations(x.data() + r * k, k, k, 16, &want);
      EXPECT_TRUE(std::equal(want.q16.begin(), want.q16.end(), codes.begin() + r * k)) << r;
      EXPECT_EQ(0, std::memcmp(want.scales.data(), scales.data() + r * (k / kQuantBlock),
                               want.scales.size() * sizeof(float)))
          << r;
    }
  }
}

// Rows below, at and past the 4-row tiles; K in one chunk of 12 blocks, two (768) and three with
// a partial last one (800); channels [1, 36) of 37: a panel of 32 (two slabs) and one of 3.
TEST_F(Avx2PanelTest, Int16PanelsMatchTheScalarDots) {
  eachVariant([] {
    expectInt16ProductsMatchScalarDots(
        int16Panels, {{1, 32}, {3, 96}, {4, 64}, {7, 768}, {13, 160}, {45, 64}, {8, 800}});
  });
}

// Every width of a panel's last slab, 1 to 32 channels: the full 8-lane halves are stored
// plainly and the partial ones through their masks (cpu/columns_avx2.h), so every width writes
// its channels and nothing past them.
TEST_F(Avx2PanelTest, PanelsWriteEveryWidthAndNothingPast) {
  eachVariant([] {
    const int64_t rows = 5, k = 64, n = 34;
    Tensor w = randomFloat({n, k}, 90), x = randomFloat({rows, k}, 91);
    for (const char* format : {"int8", "int4"}) {
      const bool int8 = std::string(format) == "int8";
      Quantized q = quantize(w, true, format, int8 ? k : 32);
      std::vector<QuantizedActivations> a(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r)
        quantizeActivations(x.data<float>() + r * k, k, int8 ? k : 32, int8 ? 16 : 8, &a[r]);
      for (int64_t width = 1; width <= 32; ++width) {
        SCOPED_TRACE(std::string(format) + ", " + std::to_string(width) + " channels");
        const int64_t stride = n;
        std::vector<float> out(static_cast<size_t>(rows * stride), -1.0f);
        if (int8)
          int16Panels(q.weight, 1, 1 + width, x.data<float>(), rows, out.data() + 1, stride);
        else
          quantDotInt4PanelAvx2(q.weight, 1, 1 + width, a.data(), rows, out.data() + 1, stride,
                                nullptr);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < n; ++c) {
            const float got = out[static_cast<size_t>(r * stride + c)];
            if (c == 0 || c > width) {
              ASSERT_EQ(got, -1.0f) << "row " << r << " column " << c << " was written";
              continue;
            }
            const float want = quantDotScalar(q.weight, c, a[static_cast<size_t>(r)]);
            ASSERT_NEAR(got, want, 1e-4f * (1.0f + std::fabs(want)))
                << "row " << r << " channel " << c;
          }
      }
    }
  });
}

TEST_F(Avx2PanelTest, Int16PanelsAreExactWhereFloatIs) {
  eachVariant([] {
    for (int64_t rows : {1, 4, 5, 21}) {
      SCOPED_TRACE(std::to_string(rows) + " rows");
      expectInt16ProductsExactWhereFloatIs(int16Panels, rows);
    }
  });
}

TEST_F(Avx2PanelTest, PackGivesTheRepackedBitsAndTheAvx512Bits) {
  eachVariant([] { expectAvx2Int16PackBits(); });
}

// w8a8 on AVX2 with AVX-VNNI: exact int32 sums for rows on and off the 6-row tiles, K off the
// 64s and up to 4,096, the extremes at w8a8's longest K; the portable pack is the AVX-512 one's
// bytes (where the host has AVX-512 VNNI) and gives the sums of repacking per call.
TEST_F(Avx2PanelTest, Int8PanelsAreExactWithAvxVnni) {
  if (!cpuAvxVnni()) GTEST_SKIP() << "this CPU (or LLMC_CPU_ISA) has no AVX-VNNI";
  ASSERT_TRUE(quantDotHasAvxVnniPanel());
  expectInt8ProductsExact(int8Panels, {{1, 32}, {6, 64}, {7, 160}, {8, 96}, {13, 4096}, {50, 224}});
  const int64_t k = kMaxPerTokenK;
  std::vector<int8_t> a(static_cast<size_t>(2 * k)), w(static_cast<size_t>(2 * k));
  for (int64_t i = 0; i < k; ++i) {
    a[i] = 127, a[k + i] = -127;
    w[i] = -128, w[k + i] = 127;
  }
  std::vector<int32_t> out(4, 0);
  int8Panels(a.data(), 2, w.data(), k, 0, 2, out.data(), 2);
  EXPECT_EQ(out,
            (std::vector<int32_t>{-127 * 128 * k, 127 * 127 * k, 127 * 128 * k, -127 * 127 * k}));

  std::mt19937 rng(19);
  std::uniform_int_distribution<int> value(-128, 127);
  for (int64_t n : {53, 70}) {
    const int64_t rows = 9, pack_k = 96;
    std::vector<int8_t> codes(static_cast<size_t>(rows * pack_k)),
        weights(static_cast<size_t>(n * pack_k));
    for (int8_t& v : codes) v = static_cast<int8_t>(std::max(-127, value(rng)));
    for (int8_t& v : weights) v = static_cast<int8_t>(value(rng));
    const std::shared_ptr<const Int8PanelPack> pack =
        packInt8PanelsPortable(weights.data(), n, pack_k, nullptr);
    ASSERT_TRUE(pack);
    if (cpuIsaSupported() >= CpuIsa::kAvx512Vnni) {
      setCpuIsaCapForTesting(kCpuIsaTop);
      const std::shared_ptr<const Int8PanelPack> wide =
          packInt8PanelsVnni(weights.data(), n, pack_k, nullptr);
      setCpuIsaCapForTesting(CpuIsa::kAvx2);
      EXPECT_EQ(0, std::memcmp(pack->codes.get(), wide->codes.get(),
                               static_cast<size_t>((n + 31) / 32 * pack_k * 32)));
      EXPECT_EQ(pack->bias, wide->bias);
    }
    const std::vector<uint8_t> biased = biasedCodes(codes.data(), codes.size());
    for (const auto& [n0, n1] : {std::pair<int64_t, int64_t>{0, n}, {32, n}, {0, 32}}) {
      std::vector<int32_t> kept(static_cast<size_t>(rows * n), -1), repacked = kept;
      dotInt8PanelAvxVnni(biased.data(), rows, weights.data(), pack_k, n0, n1, kept.data() + n0, n,
                          pack.get());
      dotInt8PanelAvxVnni(biased.data(), rows, weights.data(), pack_k, n0, n1, repacked.data() + n0,
                          n);
      EXPECT_EQ(kept, repacked) << "N " << n << ", channels [" << n0 << ", " << n1 << ")";
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = n0; c < n1; ++c)
          ASSERT_EQ(kept[static_cast<size_t>(r * n + c)],
                    dotInt8Scalar(codes.data() + r * pack_k, weights.data() + c * pack_k, pack_k));
    }
  }
}

TEST_F(Avx2PanelTest, Int4PanelsMatchTheScalarDots) {
  eachVariant([] { expectInt4PanelsMatchScalarDots(quantDotInt4PanelAvx2); });
}

TEST_F(Avx2PanelTest, Int4PackGivesTheRepackedBits) {
  eachVariant([] { expectInt4PackGivesTheRepackedBits(quantDotInt4PanelAvx2); });
}

TEST_F(Avx2PanelTest, Int4PanelsGiveTheAvx512Bits) {
  if (cpuIsaSupported() < CpuIsa::kAvx512) GTEST_SKIP() << "this CPU has no AVX-512";
  eachVariant([] { expectAvx2Int4PanelsGiveTheAvx512Bits(); });
}

// The portable setups' bytes are the packs' layouts (cpu/quant_dot.h), written out here byte by
// byte, on the levels that run them (avx2 takes the transposes, scalar the loops): int16 pairs
// for K of 416 and of 40 (four pairs past the transposes' eights; the quantizer's K is a multiple
// of 32, so that weight is read as 40 of its 64 columns), 4-bit step pairs for K of 128; N = 37
// and 70, so panels of two full slabs and of 5 and 6 channels, whose missing channels are zeros.
TEST(PortablePanelSetupTest, BytesAreThePacksLayout) {
  for (CpuIsa level : cpuIsaLevelsAllowed()) {
    if (level > CpuIsa::kAvx2) continue;
    SCOPED_TRACE(cpuIsaName(level));
    setCpuIsaCapForTesting(level);
    for (int64_t n : {37, 70}) {
      SCOPED_TRACE("N " + std::to_string(n));
      Quantized int8 = quantize(randomFloat({n, 416}, 71), true, "int8", 416);
      Quantized narrow = quantize(randomFloat({n, 64}, 72), true, "int8", 64);
      QuantWeight short_k = narrow.weight;
      short_k.k = 40;  // its bytes read as rows of 40 codes, each with its own scale
      for (const QuantWeight& w : {int8.weight, short_k}) {
        const int64_t k = w.k, pairs = k / 2;
        const auto* codes = static_cast<const int8_t*>(w.data);
        for (int64_t p = 0; p < n; p += 32) {
          const int slabs = n - p > 16 ? 2 : 1;
          std::vector<int8_t> packed(static_cast<size_t>(pairs * slabs * 32), 0x5a);
          std::vector<float> scales(32, -1.0f);
          int16PanelSetupPortable(w, p, n, slabs, packed.data(), scales.data());
          int wrong = 0;
          for (int64_t q = 0; q < pairs; ++q)
            for (int s = 0; s < slabs; ++s)
              for (int c = 0; c < 16; ++c)
                for (int j = 0; j < 2; ++j) {
                  const int64_t channel = p + 16 * s + c;
                  const int8_t want = channel < n ? codes[channel * k + 2 * q + j] : int8_t{0};
                  wrong += packed[static_cast<size_t>((q * slabs + s) * 32 + 2 * c + j)] != want;
                }
          EXPECT_EQ(wrong, 0) << "K " << k << ", panel at " << p;
          for (int c = 0; c < 16 * slabs; ++c)
            EXPECT_EQ(scales[static_cast<size_t>(c)], p + c < n ? w.scale(p + c, 0) : 0.0f);
        }
      }
      Quantized int4 = quantize(randomFloat({n, 128}, 73), true, "int4", 32);
      const QuantWeight& w = int4.weight;
      const int64_t k = w.k, blocks = k / kQuantBlock, groups = w.groupsPerRow();
      const auto* bytes = static_cast<const uint8_t*>(w.data);
      for (int64_t p = 0; p < n; p += 32) {
        const int slabs = n - p > 16 ? 2 : 1;
        std::vector<uint8_t> packed(static_cast<size_t>(k * slabs * 8), 0x5a);
        std::vector<float> scales(static_cast<size_t>(groups * slabs * 16), -1.0f), zeros = scales;
        int4PanelSetupPortable(w, p, n, slabs, packed.data(), scales.data(), zeros.data());
        int wrong = 0;
        for (int64_t b = 0; b < blocks; ++b)
          for (int t = 0; t < kQuantBlock / 8; ++t)
            for (int s = 0; s < slabs; ++s)
              for (int c = 0; c < 16; ++c)
                for (int j = 0; j < 4; ++j) {
                  const int64_t channel = p + 16 * s + c;
                  // Element i of block b: byte i's low nibble (i < 16) or byte i - 16's high one.
                  const auto element = [&](int i) {
                    const uint8_t byte = bytes[channel * (k / 2) + b * 16 + i % 16];
                    return i < 16 ? byte & 0x0f : byte >> 4;
                  };
                  const int want =
                      channel < n ? element(8 * t + j) | element(8 * t + 4 + j) << 4 : 0;
                  wrong +=
                      packed[static_cast<size_t>(((b * 4 + t) * slabs + s) * 64 + 4 * c + j)] !=
                      want;
                }
        EXPECT_EQ(wrong, 0) << "4-bit, panel at " << p;
        for (int64_t g = 0; g < groups; ++g)
          for (int c = 0; c < 16 * slabs; ++c)
            EXPECT_EQ(scales[static_cast<size_t>(g * slabs * 16 + c)],
                      p + c < n ? w.scale(p + c, g) : 0.0f);
      }
    }
  }
  setCpuIsaCapForTesting(kCpuIsaTop);
}

void Avx2PanelTest::expectAvx2Int16PackBits() {
  for (int64_t n : {37, 70}) {
    SCOPED_TRACE("N " + std::to_string(n));
    const int64_t rows = 17, k = 416;
    Tensor w = randomFloat({n, k}, 65), x = randomFloat({rows, k}, 66);
    Quantized q = quantize(w, true, "int8", k);
    std::vector<int16_t> codes;
    std::vector<float> scales;
    codesOf(x.data<float>(), rows, k, &codes, &scales);
    const std::shared_ptr<const Int16PanelPack> pack = packInt16Panels(q.weight, nullptr);
    ASSERT_TRUE(pack);
    EXPECT_EQ(pack->bytes(), static_cast<size_t>((n + 31) / 32 * (k * 32 + 32 * 4)));
    std::vector<float> whole;
    for (const auto& [n0, n1] : {std::pair<int64_t, int64_t>{0, n}, {32, n}, {0, 32}}) {
      std::vector<float> repacked(static_cast<size_t>(rows * n), -1.0f), packed = repacked;
      quantDotPanelAvx2(q.weight, n0, n1, codes.data(), scales.data(), rows, repacked.data() + n0,
                        n);
      quantDotPanelAvx2(q.weight, n0, n1, codes.data(), scales.data(), rows, packed.data() + n0, n,
                        pack.get());
      EXPECT_EQ(0, std::memcmp(repacked.data(), packed.data(), repacked.size() * 4))
          << "channels [" << n0 << ", " << n1 << ")";
      EXPECT_EQ(repacked[static_cast<size_t>(rows * n - 1)] == -1.0f, n1 < n);
      if (n1 - n0 == n) whole = packed;
    }
    if (cpuIsaSupported() < CpuIsa::kAvx512) continue;
    setCpuIsaCapForTesting(kCpuIsaTop);
    const std::shared_ptr<const Int16PanelPack> wide = packInt16Panels(q.weight, nullptr);
    ASSERT_TRUE(wide);
    EXPECT_EQ(0, std::memcmp(wide->codes.get(), pack->codes.get(),
                             static_cast<size_t>((n + 31) / 32 * k * 32)))
        << "the AVX2 pack holds the AVX-512 pack's bytes";
    EXPECT_EQ(wide->scales, pack->scales);
    std::vector<float> out(static_cast<size_t>(rows * n), -1.0f);
    quantDotPanelAvx512(q.weight, 0, n, codes.data(), scales.data(), rows, out.data(), n,
                        wide.get());
    EXPECT_EQ(0, std::memcmp(out.data(), whole.data(), out.size() * 4))
        << "the AVX2 panels give the AVX-512 panels' bits";
    setCpuIsaCapForTesting(CpuIsa::kAvx2);
  }
}

// The portable 4-bit pack holds the AVX-512 pack's bytes and the AVX2 panels give the AVX-512
// panels' bits, for each format.
void Avx2PanelTest::expectAvx2Int4PanelsGiveTheAvx512Bits() {
  for (const auto& [format, group] :
       {std::pair<const char*, int64_t>{"int4", 32}, {"int4", 128}, {"int4_zp", 64}}) {
    SCOPED_TRACE(std::string(format) + " group " + std::to_string(group));
    const int64_t rows = 11, k = 896, n = 70;
    Tensor w = randomFloat({n, k}, 67), x = randomFloat({rows, k}, 68);
    Quantized q = quantize(w, true, format, group);
    std::vector<QuantizedActivations> a(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      quantizeActivations(x.data<float>() + r * k, k, group, 8, &a[r]);
    setCpuIsaCapForTesting(CpuIsa::kAvx2);
    const std::shared_ptr<const Int4PanelPack> pack = packInt4Panels(q.weight, nullptr);
    std::vector<float> narrow(static_cast<size_t>(rows * n)), wide = narrow;
    quantDotInt4PanelAvx2(q.weight, 0, n, a.data(), rows, narrow.data(), n, pack.get());
    setCpuIsaCapForTesting(kCpuIsaTop);
    const std::shared_ptr<const Int4PanelPack> wide_pack = packInt4Panels(q.weight, nullptr);
    ASSERT_TRUE(pack && wide_pack);
    EXPECT_EQ(0, std::memcmp(pack->codes.get(), wide_pack->codes.get(),
                             static_cast<size_t>((n + 31) / 32 * k * 16 - k * 8)));
    EXPECT_EQ(pack->scales, wide_pack->scales);
    EXPECT_EQ(pack->zeros, wide_pack->zeros);
    quantDotInt4PanelAvx512(q.weight, 0, n, a.data(), rows, wide.data(), n, wide_pack.get());
    EXPECT_EQ(0, std::memcmp(narrow.data(), wide.data(), wide.size() * 4));
    setCpuIsaCapForTesting(CpuIsa::kAvx2);
  }
}

// LlmQuantMatMul with its weights kept repacked (as an executor keeps an engine's) gives the bits
// of repacking per product, on a first run that builds the pack and a second that reuses it,
// for every format that has panels (K = 256, N = 70: three panels, the last of 6 channels;
// 17 rows: every panel kernel, or the AMX tiles). Where the host has them each pack is built
// exactly once.
TEST(QuantMatMulTest, KeptPacksGiveTheBitsOfRepackingPerProduct) {
  for (const auto& [format, group] : {std::pair<const char*, int64_t>{"int8", 256},
                                      {"int4", 32},
                                      {"int4_zp", 64},
                                      {"w8a8", 256}}) {
    SCOPED_TRACE(format);
    const int64_t rows = 17, k = 256, n = 70;
    Tensor w = randomFloat({n, k}, 71), x = randomFloat({rows, k}, 72);
    Quantized q = quantize(w, true, format, group);
    std::optional<Tensor> zeros;
    if (q.weight.zeros) zeros = q.zeros;
    const KernelParams p = params({{"format", stringParam(format)}, {"group", intParam(group)}});
    const Tensor want = runKernel("LlmQuantMatMul", {x, q.data, q.scales, zeros}, p);
    std::map<std::string, KernelContext::Derived> derived;
    std::map<std::string, int> builds;
    for (int run = 0; run < 2; ++run) {
      TestKernelContext ctx;
      ctx.inputs = {x, q.data, q.scales, zeros};
      ctx.kernel_params = p;
      ctx.derived = &derived;
      ctx.builds = &builds;
      ASSERT_TRUE(ctx.run("LlmQuantMatMul").ok());
      ASSERT_EQ(0, std::memcmp(ctx.outputs[0].data(), want.data(), want.sizeBytes()))
          << "run " << run;
    }
    const bool four_bit = std::string(format).rfind("int4", 0) == 0;
    // The AMX tiles read a pack too (17 rows, K a multiple of 64).
    const bool panels =
        four_bit ? quantDotHasAvx512() || quantDotHasAvx2Panels()
                 : quantDotHasAmx() || (std::string(format) == "w8a8"
                                            ? quantDotHasVnniPanel() || quantDotHasAvxVnniPanel()
                                            : quantDotHasAvx512() || quantDotHasAvx2Panels());
    EXPECT_EQ(builds.size(), panels ? 1u : 0u);
    for (const auto& [key, count] : builds) EXPECT_EQ(count, 1) << key;
    for (const auto& [key, entry] : derived)
      EXPECT_GT(entry.bytes, static_cast<size_t>(n * k / 2)) << key;
  }
}

// A w8a8 weight packed once gives the exact sums of repacking per call, over all channels and
// over task ranges that start on a panel (N = 53: panels of 32 and 21; 70: 32, 32 and 6), K off
// the 64s; the products read the pack's bias (zeroed, each sum keeps 128 Σw).
TEST_F(PanelTest, Int8PackGivesTheExactSums) {
  if (!quantDotHasVnniPanel()) GTEST_SKIP() << "this CPU (or LLMC_CPU_ISA) has no AVX-512 VNNI";
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> value(-127, 127);
  for (int64_t n : {53, 70}) {
    const int64_t rows = 9, k = 96;
    std::vector<int8_t> a(static_cast<size_t>(rows * k)), w(static_cast<size_t>(n * k));
    for (int8_t& v : a) v = static_cast<int8_t>(value(rng));
    for (int8_t& v : w) v = static_cast<int8_t>(value(rng));
    const std::vector<uint8_t> biased = biasedCodes(a.data(), a.size());
    const std::shared_ptr<const Int8PanelPack> pack = packInt8PanelsVnni(w.data(), n, k, nullptr);
    ASSERT_TRUE(pack);
    EXPECT_EQ(pack->bytes(), static_cast<size_t>((n + 31) / 32 * (k * 32 + 32 * 4)));
    for (const auto& [n0, n1] : {std::pair<int64_t, int64_t>{0, n}, {32, n}, {0, 32}}) {
      std::vector<int32_t> out(static_cast<size_t>(rows * n), -1);
      dotInt8PanelVnni(biased.data(), rows, w.data(), k, n0, n1, out.data() + n0, n, pack.get());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < n; ++c)
          ASSERT_EQ(out[static_cast<size_t>(r * n + c)],
                    c < n0 || c >= n1 ? -1 : dotInt8Scalar(a.data() + r * k, w.data() + c * k, k))
              << "N " << n << ", channels [" << n0 << ", " << n1 << "), row " << r << " channel "
              << c;
    }
    Int8PanelPack zeroed = *pack;
    std::fill(zeroed.bias.begin(), zeroed.bias.end(), 0);
    std::vector<int32_t> out(static_cast<size_t>(rows * n));
    dotInt8PanelVnni(biased.data(), rows, w.data(), k, 0, n, out.data(), n, &zeroed);
    for (int64_t c = 0; c < n; ++c) {
      int32_t sum_w = 0;
      for (int64_t i = 0; i < k; ++i) sum_w += w[static_cast<size_t>(c * k + i)];
      EXPECT_EQ(out[static_cast<size_t>(c)],
                dotInt8Scalar(a.data(), w.data() + c * k, k) + 128 * sum_w)
          << "channel " << c;
    }
  }
}

// K off the 64s (a last chunk of 32), up to 4,096 with the extremes; rows past the 8-row blocks.
TEST_F(PanelTest, Int8PanelsAreExact) {
  if (!quantDotHasVnniPanel()) GTEST_SKIP() << "this CPU (or LLMC_CPU_ISA) has no AVX-512 VNNI";
  expectInt8ProductsExact(int8Panels, {{1, 32}, {8, 160}, {9, 64}, {17, 96}, {50, 4096}});
}

// The biased sums at their largest: codes of +127 (255 once biased) against weights of -128 (a
// prequantized model's int8 may hold it) over w8a8's longest K, and the opposite signs.
TEST_F(PanelTest, Int8PanelsAreExactAtTheLongestK) {
  if (!quantDotHasVnniPanel()) GTEST_SKIP() << "this CPU (or LLMC_CPU_ISA) has no AVX-512 VNNI";
  const int64_t k = kMaxPerTokenK, n = 2;
  std::vector<int8_t> a(static_cast<size_t>(2 * k)), w(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < k; ++i) {
    a[i] = 127, a[k + i] = -127;
    w[i] = -128, w[k + i] = 127;
  }
  std::vector<int32_t> out(4, 0);
  int8Panels(a.data(), 2, w.data(), k, 0, n, out.data(), n);
  EXPECT_EQ(out[0], -127 * 128 * k);
  EXPECT_EQ(out[1], 127 * 127 * k);
  EXPECT_EQ(out[2], 127 * 128 * k);
  EXPECT_EQ(out[3], -127 * 127 * k);
}

// The AVX-512 per-token quantizer gives the reference loop's codes and scale bit for bit, over
// ties, clamping, zeros, infinities, NaN, subnormal scales and lengths off the 16 lanes.
TEST(W8A8Test, Avx512PerTokenCodesAreTheReference) {
  if (!quantDotHasAvx512()) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(93);
  std::normal_distribution<float> normal;
  auto same = [](const std::vector<float>& x, const char* what) {
    const int64_t k = static_cast<int64_t>(x.size());
    std::vector<int8_t> want(x.size() + 1, 7), got(x.size() + 1, 7);
    const float want_scale = quantizeRowPerTokenScalar(x.data(), k, want.data());
    const float got_scale = quantizeRowPerTokenAvx512(x.data(), k, got.data());
    EXPECT_EQ(std::memcmp(&want_scale, &got_scale, sizeof(float)), 0) << what;
    EXPECT_EQ(got, want) << what;  // the byte after the row untouched too
  };
  for (int64_t k : {1, 15, 16, 33, 160}) {
    std::vector<float> x(static_cast<size_t>(k));
    for (float& v : x) v = normal(rng);
    same(x, "normal");
    x[0] = 127.0f;  // scale 1: the others' halves are ties
    for (int64_t i = 1; i < k; ++i) x[i] = (i % 2 ? 0.5f : -2.5f) + static_cast<float>(i % 7);
    same(x, "ties");
    for (float& v : x) v = 1e-42f * normal(rng);
    same(x, "subnormal scale");
    std::fill(x.begin(), x.end(), 0.0f);
    same(x, "zeros");
    x[k / 2] = INFINITY;
    same(x, "infinity");
    x[k - 1] = NAN;
    same(x, "NaN");
  }
}

TEST(W8A8Test, Avx2DotIsExact) {
  if (!quantDotHasAvx2()) GTEST_SKIP() << "this CPU has no AVX2";
  std::mt19937 rng(91);
  std::uniform_int_distribution<int> value(-127, 127);
  for (int64_t k : {32, 96, 4096}) {
    std::vector<int8_t> a(static_cast<size_t>(k)), w(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) a[i] = static_cast<int8_t>(value(rng)), w[i] = static_cast<int8_t>(value(rng));
    a[0] = 127, w[0] = -127;  // the extremes
    EXPECT_EQ(dotInt8Avx2(a.data(), w.data(), k), dotInt8Scalar(a.data(), w.data(), k)) << k;
  }
}

// The four-channel form is exact too, for channel counts with a remainder, with the extremes
// (-127 times -127 in both products of a pair) and zero activations.
TEST(W8A8Test, RowsOfDotsAreExact) {
  std::mt19937 rng(92);
  std::uniform_int_distribution<int> value(-127, 127);
  for (int64_t count : {1, 4, 7}) {
    const int64_t k = 96;
    std::vector<int8_t> a(static_cast<size_t>(k)), w(static_cast<size_t>(k * count));
    for (int8_t& v : a) v = static_cast<int8_t>(value(rng));
    for (int8_t& v : w) v = static_cast<int8_t>(value(rng));
    a[0] = a[1] = -127, w[0] = w[1] = -127, a[2] = 0;
    for (int per_pass : {4, 1}) {
      std::vector<int32_t> got(static_cast<size_t>(count + 1), -1);
      dotInt8Rows(a.data(), w.data(), k, count, got.data(), per_pass);
      for (int64_t n = 0; n < count; ++n)
        EXPECT_EQ(got[static_cast<size_t>(n)], dotInt8Scalar(a.data(), w.data() + n * k, k))
            << count << " " << n << ", " << per_pass << " per pass";
      EXPECT_EQ(got[static_cast<size_t>(count)], -1);
    }
  }
}

// LlmQuantGather returns the dequantized rows, negative ids counting from the end.
TEST(QuantGatherTest, ReturnsDequantizedRows) {
  Tensor table = randomFloat({10, 96}, 71);
  Quantized q = quantize(table, true, "int4", 64);
  Tensor ids = makeInt64({2, 2}, {3, 0, -1, 9});
  Tensor got = runKernel("LlmQuantGather", {ids, q.data, q.scales},
                         params({{"format", stringParam("int4")}, {"group", intParam(64)}}));
  ASSERT_EQ(got.shape(), (Shape{2, 2, 96}));
  std::vector<float> row(96);
  const int64_t rows[] = {3, 0, 9, 9};
  for (int i = 0; i < 4; ++i) {
    dequantizeRow(q.weight, rows[i], row.data());
    for (int64_t c = 0; c < 96; ++c) ASSERT_EQ(got.data<float>()[i * 96 + c], row[c]) << i;
  }
  TestKernelContext ctx;
  ctx.inputs = {makeInt64({1}, {10}), q.data, q.scales};
  ctx.kernel_params = params({{"format", stringParam("int4")}, {"group", intParam(64)}});
  EXPECT_NE(ctx.run("LlmQuantGather").message().find("outside the table's 10 rows"), std::string::npos);
}

// E4M3 as NVIDIA's SATFINITE conversion: every code decodes and encodes back to itself,
// rounding is to nearest even, values beyond 448 saturate, NaN stays NaN.
TEST(Fp8Test, E4M3RoundTripsEveryCodeAndRoundsToNearestEven) {
  for (int code = 0; code < 256; ++code) {
    const float v = e4m3ToFloat(static_cast<uint8_t>(code));
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << code;
      EXPECT_EQ(floatToE4M3(v) & 0x7f, 0x7f);
      continue;
    }
    EXPECT_EQ(floatToE4M3(v), code) << "code " << code << " value " << v;
  }
  EXPECT_EQ(e4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(e4m3ToFloat(0x38), 1.0f);
  EXPECT_EQ(e4m3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(floatToE4M3(1000.0f), 0x7e);
  EXPECT_EQ(floatToE4M3(-460.0f), 0xfe);
  EXPECT_EQ(floatToE4M3(1.0625f), 0x38);   // halfway between 1 and 1.125: even mantissa (1)
  EXPECT_EQ(floatToE4M3(1.1875f), 0x3a);   // halfway between 1.125 and 1.25: even (1.25)
  EXPECT_EQ(floatToE4M3(std::ldexp(1.5f, -9)), 0x02);  // subnormal tie to even
  EXPECT_EQ(floatToE4M3(0.0151f), 0x08);   // rounds up into the smallest normal, 2^-6
}

// fp8 products: the kernel equals the product of the dequantized weight with the activations
// rounded to E4M3 under one scale (the GPU's FP8 tensor cores compute the same), and stays
// within E4M3's precision of the float product.
TEST(Fp8Test, MatMulMatchesTheE4M3RoundedProduct) {
  const int64_t k = 96, n = 21, rows = 5;
  Tensor w = randomFloat({n, k}, 31), x = randomFloat({rows, k}, 32), bias = randomFloat({n}, 33);
  Quantized q = quantize(w, true, "fp8", k);
  float amax = 0;
  for (int64_t i = 0; i < rows * k; ++i) amax = std::max(amax, std::fabs(x.data<float>()[i]));
  const float a_scale = amax / 448.0f;
  Tensor xr = Tensor::allocate(DType::kFloat32, {rows, k});
  for (int64_t i = 0; i < rows * k; ++i)
    xr.data<float>()[i] = e4m3ToFloat(floatToE4M3(x.data<float>()[i] / a_scale)) * a_scale;
  Tensor want = dequantizedProduct(xr, q.weight);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) want.data<float>()[r * n + c] = 0.5f * want.data<float>()[r * n + c] + bias.data<float>()[c];
  KernelParams p = params({{"format", stringParam("fp8")}, {"group", intParam(k)}, {"alpha", floatParam(0.5)}});
  Tensor got = runKernel("LlmQuantMatMul", {x, q.data, q.scales, std::nullopt, bias}, p);
  // At the rounding bound: each product of two E4M3 values is exact in float32, so only the
  // float sum of K products (K - 1 roundings), the two scales, alpha and the bias round.
  std::vector<Exact> bounded(static_cast<size_t>(rows * n));
  const float inverse = 1.0f / a_scale;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0, magnitude = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double product = static_cast<double>(e4m3ToFloat(floatToE4M3(x.data<float>()[r * k + i] * inverse))) *
                               e4m3ToFloat(q.data.data<uint8_t>()[c * k + i]);
        sum += product;
        magnitude += std::fabs(product);
      }
      const double scales = static_cast<double>(a_scale) * q.weight.scale(c, 0);
      const double value = 0.5 * sum * scales + bias.data<float>()[c];
      bounded[static_cast<size_t>(r * n + c)] = {
          value, gamma(k + 3) * 0.5 * magnitude * std::fabs(scales) + gamma(1) * std::fabs(value) + 1e-30};
    }
  expectWithinBounds(got, bounded, "fp8");
  // Against the float product: E4M3 keeps 3 mantissa bits (relative step 1/16 at most).
  Tensor exact = Tensor::allocate(DType::kFloat32, {rows, n});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0;
      for (int64_t i = 0; i < k; ++i) sum += static_cast<double>(x.data<float>()[r * k + i]) * w.data<float>()[c * k + i];
      exact.data<float>()[r * n + c] = static_cast<float>(0.5 * sum + bias.data<float>()[c]);
    }
  const double error = relativeL2(got.data<float>(), exact.data<float>(), rows * n);
  EXPECT_LT(error, 0.06);
  EXPECT_GT(error, 1e-4);  // it did quantize
  // Gather (an fp8 embedding table): the dequantized rows.
  Tensor ids = makeInt64({2}, {20, -21});
  Tensor rows_out = runKernel("LlmQuantGather", {ids, q.data, q.scales}, params({{"format", stringParam("fp8")}, {"group", intParam(k)}}));
  std::vector<float> row(static_cast<size_t>(k));
  dequantizeRow(q.weight, 20, row.data());
  for (int64_t i = 0; i < k; ++i) EXPECT_EQ(rows_out.data<float>()[i], row[static_cast<size_t>(i)]);
  dequantizeRow(q.weight, 0, row.data());
  for (int64_t i = 0; i < k; ++i) EXPECT_EQ(rows_out.data<float>()[k + i], row[static_cast<size_t>(i)]);
}

// ONNX's quantization operators (cpu/quant_onnx.cpp; ONNX's node tests and ONNX Runtime's
// outputs cover the rest): rounding half to even, the all-zero input of DynamicQuantizeLinear,
// and MatMulNBits' refusals.
TEST(OnnxQuantTest, QuantizeLinearRoundsHalfToEvenAndSaturates) {
  Tensor x = makeTensor(DType::kFloat32, {6}, std::vector<float>{0.5f, 1.5f, 2.5f, -0.5f, -300.0f, 1000.0f});
  Tensor scale = makeTensor(DType::kFloat32, {}, std::vector<float>{1.0f});
  Tensor zero = makeTensor(DType::kInt8, {}, std::vector<int8_t>{0});
  EXPECT_EQ(values<int8_t>(runKernel("QuantizeLinear", {x, scale, zero})), (std::vector<int8_t>{0, 2, 2, 0, -128, 127}));
  Tensor q = runKernel("QuantizeLinear", {x, scale});  // no zero point: uint8
  EXPECT_EQ(q.dtype(), DType::kUInt8);
  EXPECT_EQ(values<uint8_t>(q), (std::vector<uint8_t>{0, 2, 2, 0, 0, 255}));
}

TEST(OnnxQuantTest, DynamicQuantizeLinearOfZerosIsZeroWithScaleOne) {
  Tensor x = makeTensor(DType::kFloat32, {3}, std::vector<float>{0, 0, 0});
  EXPECT_EQ(values<uint8_t>(runKernel("DynamicQuantizeLinear", {x}, {}, 3, 0)), (std::vector<uint8_t>{0, 0, 0}));
  EXPECT_EQ(values<float>(runKernel("DynamicQuantizeLinear", {x}, {}, 3, 1)), (std::vector<float>{1}));  // as ONNX Runtime
  Tensor y = makeTensor(DType::kFloat32, {3}, std::vector<float>{-1.0f, 0.0f, 2.0f});
  // scale 3 / 255, zero point round(255 / 3) = 85: -1 -> 0, 0 -> 85, 2 -> 255
  EXPECT_EQ(values<uint8_t>(runKernel("DynamicQuantizeLinear", {y}, {}, 3, 0)), (std::vector<uint8_t>{0, 85, 255}));
}

TEST(OnnxQuantTest, MatMulNBitsRefusesWhatItCannotRead) {
  TestKernelContext ctx;
  ctx.inputs = {randomFloat({2, 64}, 1), Tensor::allocate(DType::kUInt8, {4, 2, 16}), randomFloat({8}, 2)};
  ctx.kernel_params = params({{"K", intParam(64)}, {"N", intParam(4)}, {"bits", intParam(4)}, {"block_size", intParam(24)}});
  EXPECT_NE(ctx.run("com.microsoft.MatMulNBits").message().find("power of 2"), std::string::npos);
  ctx.kernel_params = params({{"K", intParam(64)}, {"N", intParam(4)}, {"bits", intParam(3)}, {"block_size", intParam(32)}});
  EXPECT_NE(ctx.run("com.microsoft.MatMulNBits").message().find("bits must be"), std::string::npos);
  ctx.kernel_params = params({{"K", intParam(64)}, {"N", intParam(5)}, {"bits", intParam(4)}, {"block_size", intParam(32)}});
  EXPECT_NE(ctx.run("com.microsoft.MatMulNBits").message().find("B must be uint8"), std::string::npos);
}

// LlmRepackNBits (the compiler's lowering of MatMulNBits): the repacked int4 / int4_zp weight
// dequantizes to MatMulNBits' own values, (q - zero) * scale, with the scale rounded to float16.
TEST(OnnxQuantTest, RepackNBitsDequantizesToMatMulNBitsValues) {
  const int64_t n = 3, k = 96, block = 64, blocks = 2;  // a shorter last block (32 of 64)
  std::mt19937 rng(5);
  Tensor b = Tensor::allocate(DType::kUInt8, {n, blocks, block / 2});
  for (int64_t i = 0; i < b.numElements(); ++i) b.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  Tensor scales = randomFloat({n * blocks}, 6);
  Tensor zeros = Tensor::allocate(DType::kUInt8, {n * 1});  // ceil(2 blocks * 4 bits / 8) = 1 byte per row
  for (int64_t i = 0; i < zeros.numElements(); ++i) zeros.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  for (bool with_zeros : {false, true}) {
    KernelParams p = params({{"K", intParam(k)}, {"N", intParam(n)}, {"block_size", intParam(block)}});
    std::optional<Tensor> z;
    if (with_zeros) z = zeros;
    const size_t outputs = with_zeros ? 3 : 2;
    Tensor data = runKernel("LlmRepackNBits", {b, scales, z}, p, outputs, 0);
    Tensor s = runKernel("LlmRepackNBits", {b, scales, z}, p, outputs, 1);
    Tensor zz = with_zeros ? runKernel("LlmRepackNBits", {b, scales, z}, p, outputs, 2) : Tensor();
    const QuantTraits& traits = *findQuantTraits(with_zeros ? "int4_zp" : "int4");
    QuantWeight w;
    ASSERT_TRUE(makeQuantWeight(traits, k, block, data, s, with_zeros ? &zz : nullptr, &w).ok());
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < n; ++r) {
      dequantizeRow(w, r, row.data());
      for (int64_t i = 0; i < k; ++i) {
        const int64_t blk = i / block, j = i % block;
        const uint8_t cell = b.data<uint8_t>()[(r * blocks + blk) * (block / 2) + j / 2];
        const int q = j % 2 == 0 ? cell & 0x0f : cell >> 4;
        const uint8_t zcell = zeros.data<uint8_t>()[r];
        const int zero = with_zeros ? (blk % 2 == 0 ? zcell & 0x0f : zcell >> 4) : 8;
        const float scale = toFloat(toFloat16(scales.data<float>()[r * blocks + blk]));
        EXPECT_EQ(row[static_cast<size_t>(i)], static_cast<float>(q - zero) * scale) << "row " << r << " element " << i;
      }
    }
  }
}

// LlmQuantizeWeight is the compiler's quantizer: its outputs are quantizeWeight's.
TEST(QuantizeWeightKernelTest, MatchesQuantizeWeightAndRefusesBadGroups) {
  Tensor w = randomFloat({64, 10}, 51);
  Quantized q = quantize(w, false, "int4_zp", 32);
  KernelParams p = params({{"format", stringParam("int4_zp")}, {"group", intParam(32)}});
  EXPECT_EQ(values<uint8_t>(runKernel("LlmQuantizeWeight", {w}, p, 3, 0)), values<uint8_t>(q.data));
  EXPECT_EQ(values<uint16_t>(runKernel("LlmQuantizeWeight", {w}, p, 3, 1)), values<uint16_t>(q.scales));
  EXPECT_EQ(values<uint8_t>(runKernel("LlmQuantizeWeight", {w}, p, 3, 2)), values<uint8_t>(q.zeros));

  TestKernelContext ctx;
  ctx.inputs = {randomFloat({48, 10}, 52)};  // K = 48 is not a multiple of 32
  ctx.kernel_params = params({{"format", stringParam("int4")}, {"group", intParam(32)}});
  ctx.num_outputs = 2;
  Status status = ctx.run("LlmQuantizeWeight");
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("multiple of 32"), std::string::npos) << status.message();
  ctx.inputs = {randomFloat({64, 10}, 53)};
  ctx.kernel_params = params({{"format", stringParam("int8")}, {"group", intParam(32)}});
  EXPECT_NE(ctx.run("LlmQuantizeWeight").message().find("one scale per output channel"), std::string::npos);
  // One output at a time, as `llmc refit` replays a recipe step.
  EXPECT_EQ(values<uint8_t>(runKernel("LlmQuantizeWeight", {w}, p, 1, 0)), values<uint8_t>(q.data));
}

// Tensors that do not fit their format are refused with what does not fit.
TEST(QuantMatMulTest, RefusesMismatchedTensors) {
  Tensor w = randomFloat({10, 64}, 61), x = randomFloat({2, 64}, 62);
  Quantized q = quantize(w, true, "int4", 32);
  TestKernelContext ctx;
  ctx.inputs = {randomFloat({2, 96}, 63), q.data, q.scales};  // K 96 vs the weight's 64
  ctx.kernel_params = params({{"format", stringParam("int4")}, {"group", intParam(32)}});
  Status status = ctx.run("LlmQuantMatMul");
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("does not hold K = 96"), std::string::npos) << status.message();
  ctx.inputs = {x, q.data, q.scales};
  ctx.kernel_params = params({{"format", stringParam("int4_zp")}, {"group", intParam(32)}});
  EXPECT_NE(ctx.run("LlmQuantMatMul").message().find("needs zero points"), std::string::npos);
  ctx.kernel_params = params({{"format", stringParam("int3")}});
  EXPECT_NE(ctx.run("LlmQuantMatMul").message().find("unknown quantization format 'int3'"), std::string::npos);
}

}  // namespace
}  // namespace llmc::testing
