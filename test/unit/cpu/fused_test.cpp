// The fused kernels (cpu/fused.cpp, and the token-major forms of LlmRope/LlmAttention)
// against the reference kernels they replace, on random data, odd shapes included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "core/cpu_features.h"
#include "kernel_test_util.h"

namespace llmc::testing {
namespace {


// Max |a - b| / (1 + |b|) over all elements; shapes must match.
double relativeError(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double worst = 0;
  for (int64_t i = 0; i < std::min(a.numElements(), b.numElements()); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]) /
                                (1 + std::fabs(static_cast<double>(b.data<float>()[i]))));
  return worst;
}

double activation(const std::string& name, double x) {
  if (name == "relu") return x > 0 ? x : 0;
  if (name == "gelu_erf") return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  if (name == "gelu_tanh") return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  if (name == "silu") return x / (1 + std::exp(-x));
  if (name == "sigmoid") return 1 / (1 + std::exp(-x));
  if (name == "tanh") return std::tanh(x);
  return x;
}

struct MatMulCase {
  Shape a;
  int64_t n;
};

TEST(FusedMatMulTest, MatchesMatMulBiasActivation) {
  // The last two take the packed path (4 rows or more): row tiles with a remainder, K and N
  // past one 256 x 256 panel with partial strips.
  const MatMulCase cases[] = {{{1, 7}, 3},    {{5, 1, 17}, 9},  {{2, 3, 33}, 65},
                              {{4, 16}, 1},   {{70, 300}, 300}, {{2, 3, 520}, 37}};
  uint32_t seed = 1;
  for (const MatMulCase& c : cases)
    for (const std::string act : {"none", "relu", "gelu_erf", "gelu_tanh", "silu", "sigmoid", "tanh"})
      for (int trans = 0; trans < 2; ++trans) {
        const int64_t k = c.a.back();
        Tensor a = randomFloat(c.a, seed++);
        Tensor w = randomFloat({k, c.n}, seed++);
        Tensor bias = randomFloat({c.n}, seed++);
        Tensor product = runKernel("MatMul", {a, w});
        Tensor want = Tensor::allocate(DType::kFloat32, product.shape());
        for (int64_t i = 0; i < want.numElements(); ++i) {
          double v = 0.5 * product.data<float>()[i] + bias.data<float>()[i % c.n];
          want.data<float>()[i] = static_cast<float>(activation(act, v));
        }
        Tensor weight = trans ? runKernel("Transpose", {w}) : w;
        KernelParams p = params({{"activation", stringParam(act)}, {"trans_b", intParam(trans)}});
        p.set("alpha", floatParam(0.5));
        Tensor got = runKernel("LlmFusedMatMul", {a, weight, bias}, p);
        EXPECT_LT(relativeError(got, want), 1e-5) << act << " trans_b " << trans << " " << shapeToString(c.a);
      }
}

TEST(FusedMatMulTest, RejectsMismatchedInnerDims) {
  TestKernelContext ctx;
  ctx.inputs = {randomFloat({2, 5}, 1), randomFloat({4, 3}, 2), std::nullopt};
  Status status = ctx.run("LlmFusedMatMul");
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("inner dimensions differ"), std::string::npos);
}

TEST(GatedMlpTest, MatchesTwoProductsAndGate) {
  uint32_t seed = 100;
  for (Shape shape : {Shape{1, 1, 8}, Shape{3, 5, 13}, Shape{7, 16}})
    for (const std::string act : {"silu", "gelu_tanh", "gelu_erf", "relu"}) {
      const int64_t k = shape.back(), f = 11;
      Tensor x = randomFloat(shape, seed++);
      Tensor wg = randomFloat({k, f}, seed++), wu = randomFloat({k, f}, seed++);
      Tensor w = Tensor::allocate(DType::kFloat32, {k, 2 * f});
      for (int64_t r = 0; r < k; ++r)
        for (int64_t c = 0; c < f; ++c) {
          w.data<float>()[r * 2 * f + c] = wg.data<float>()[r * f + c];
          w.data<float>()[r * 2 * f + f + c] = wu.data<float>()[r * f + c];
        }
      Tensor g = runKernel("MatMul", {x, wg}), u = runKernel("MatMul", {x, wu});
      Tensor want = Tensor::allocate(DType::kFloat32, g.shape());
      for (int64_t i = 0; i < want.numElements(); ++i)
        want.data<float>()[i] = static_cast<float>(activation(act, g.data<float>()[i]) * u.data<float>()[i]);
      Tensor got = runKernel("LlmGatedMlp", {x, w}, params({{"activation", stringParam(act)}}));
      EXPECT_LT(relativeError(got, want), 1e-5) << act << " " << shapeToString(shape);
    }
}

TEST(NormTest, LayerMatchesLayerNormalizationAndReturnsTheSum) {
  uint32_t seed = 200;
  for (Shape shape : {Shape{1, 1}, Shape{3, 7}, Shape{2, 5, 64}, Shape{4, 33}}) {
    const int64_t width = shape.back();
    Tensor x = randomFloat(shape, seed++), r = randomFloat(shape, seed++);
    Tensor gamma = randomFloat({width}, seed++), beta = randomFloat({width}, seed++);
    Tensor sum = runKernel("Add", {x, r});
    KernelParams ln;
    ln.set("axis", intParam(-1));
    ln.set("epsilon", floatParam(1e-5));
    Tensor want = runKernel("LayerNormalization", {sum, gamma, beta}, ln);
    KernelParams p = params({{"kind", stringParam("layer")}});
    p.set("epsilon", floatParam(1e-5));
    EXPECT_LT(relativeError(runKernel("LlmNorm", {x, r, gamma, beta}, p, 2, 0), want), 1e-5);
    EXPECT_EQ(values<float>(runKernel("LlmNorm", {x, r, gamma, beta}, p, 2, 1)), values<float>(sum));
  }
}

// The grouped form (per-head q/k norms on packed rows): each group of the first C columns is
// exactly the plain norm of that group alone with its slice of the weights (the same loops, so
// the same bits), and the columns past C are copied.
TEST(NormTest, GroupedIsThePlainNormOfEachGroup) {
  uint32_t seed = 350;
  const int64_t group = 8;
  for (const char* kind : {"rms", "layer"})
    for (bool with_bias : {false, true})
      for (int64_t groups : {1, 3, 5}) {
        const int64_t rows = 19, width = 5 * group + 3;  // 3 columns after the last full group
        const int64_t columns = groups * group;
        Tensor x = randomFloat({1, rows, width}, seed++);
        Tensor gamma = randomFloat({columns}, seed++), beta = randomFloat({columns}, seed++);
        KernelParams plain = params({{"kind", stringParam(kind)}});
        plain.set("epsilon", floatParam(1e-6));
        KernelParams grouped = plain;
        grouped.set("group", intParam(group));
        Tensor got = runKernel(
            "LlmNorm",
            {x, std::nullopt, gamma, with_bias ? std::optional<Tensor>(beta) : std::nullopt},
            grouped);
        ASSERT_EQ(got.shape(), x.shape());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t g = 0; g < groups; ++g) {
            auto slice = [&](const float* from) {
              Tensor t = Tensor::allocate(DType::kFloat32, {group});
              std::memcpy(t.data<float>(), from, group * sizeof(float));
              return t;
            };
            Tensor one =
                runKernel("LlmNorm",
                          {slice(x.data<float>() + r * width + g * group), std::nullopt,
                           slice(gamma.data<float>() + g * group),
                           with_bias ? std::optional<Tensor>(slice(beta.data<float>() + g * group))
                                     : std::nullopt},
                          plain);
            for (int64_t i = 0; i < group; ++i)
              ASSERT_EQ(got.data<float>()[r * width + g * group + i], one.data<float>()[i])
                  << kind << " row " << r << " group " << g;
          }
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = columns; c < width; ++c)
            ASSERT_EQ(got.data<float>()[r * width + c], x.data<float>()[r * width + c]) << c;
      }
  // A residual, a scale that is not whole groups, or one wider than the rows: refused.
  Tensor x = randomFloat({2, 16}, 360);
  KernelParams p = params({{"kind", stringParam("rms")}, {"group", intParam(8)}});
  for (auto [residual, scale_width] :
       {std::pair{true, 8}, std::pair{false, 12}, std::pair{false, 24}}) {
    TestKernelContext ctx;
    ctx.inputs = {x, residual ? std::optional<Tensor>(x) : std::nullopt,
                  randomFloat({scale_width}, 361), std::nullopt};
    ctx.kernel_params = p;
    EXPECT_FALSE(ctx.run("LlmNorm").ok()) << residual << " " << scale_width;
  }
}

// Every ISA level the host has gives the baseline loops' bits (cpu/norm_row.cpp): rms and
// layer, with and without a residual (its sum an output or not) and a bias, at widths around
// the 8- and 16-lane steps, with values far apart in magnitude so that the order of the double
// sums and every float rounding shows.
TEST(NormTest, EveryLevelGivesTheBaselineBits) {
  uint32_t seed = 400;
  for (const char* kind : {"rms", "layer"})
    for (int64_t width : {1, 7, 8, 9, 15, 16, 17, 31, 33, 200, 771})
      for (int variant = 0; variant < 4; ++variant) {
        const bool with_residual = variant & 1, with_bias = variant & 2;
        Tensor x = randomFloat({3, width}, seed++), r = randomFloat({3, width}, seed++);
        Tensor gamma = randomFloat({width}, seed++), beta = randomFloat({width}, seed++);
        for (int64_t i = 0; i < x.numElements(); i += 5) x.data<float>()[i] *= 1e4f;
        for (int64_t i = 1; i < x.numElements(); i += 7) x.data<float>()[i] *= 1e-4f;
        KernelParams p = params({{"kind", stringParam(kind)}});
        p.set("epsilon", floatParam(1e-6));
        const std::vector<std::optional<Tensor>> inputs = {
            x, with_residual ? std::optional<Tensor>(r) : std::nullopt, gamma,
            with_bias ? std::optional<Tensor>(beta) : std::nullopt};
        auto run = [&](CpuIsa level, int outputs, int which) {
          setCpuIsaCapForTesting(level);
          Tensor t = runKernel("LlmNorm", inputs, p, outputs, which);
          setCpuIsaCapForTesting(kCpuIsaTop);
          return t;
        };
        for (int outputs : {1, 2}) {
          if (outputs == 2 && !with_residual) continue;
          for (int which = 0; which < outputs; ++which) {
            const Tensor want = run(CpuIsa::kScalar, outputs, which);
            for (CpuIsa level : cpuIsaLevelsAllowed()) {
              const Tensor got = run(level, outputs, which);
              ASSERT_EQ(std::memcmp(got.data<float>(), want.data<float>(),
                                    static_cast<size_t>(want.numElements()) * sizeof(float)),
                        0)
                  << cpuIsaName(level) << " " << kind << " width " << width << " variant "
                  << variant << " output " << which << " of " << outputs;
            }
          }
        }
      }
}

TEST(NormTest, RmsMatchesFormula) {
  uint32_t seed = 300;
  for (Shape shape : {Shape{1, 3}, Shape{5, 16}, Shape{2, 3, 129}}) {
    const int64_t width = shape.back();
    Tensor x = randomFloat(shape, seed++), gamma = randomFloat({width}, seed++);
    Tensor want = Tensor::allocate(DType::kFloat32, x.shape());
    for (int64_t row = 0; row < x.numElements() / width; ++row) {
      double squares = 0;
      for (int64_t i = 0; i < width; ++i) squares += std::pow(x.data<float>()[row * width + i], 2);
      double inv = 1 / std::sqrt(squares / width + 1e-6);
      for (int64_t i = 0; i < width; ++i)
        want.data<float>()[row * width + i] = static_cast<float>(x.data<float>()[row * width + i] * inv * gamma.data<float>()[i]);
    }
    KernelParams p = params({{"kind", stringParam("rms")}});
    p.set("epsilon", floatParam(1e-6));
    EXPECT_LT(relativeError(runKernel("LlmNorm", {x, std::nullopt, gamma, std::nullopt}, p), want), 1e-5);
  }
}

TEST(ElementwiseTest, ProgramMatchesReferenceKernels) {
  // tanh((a * b) + 3) - c, with b broadcasting along rows and c along a middle axis.
  Tensor a = randomFloat({2, 3, 5}, 400), b = randomFloat({5}, 401), c = randomFloat({2, 1, 5}, 402);
  Tensor three = makeFloat({}, {3.0f});
  Tensor want = runKernel("Sub", {runKernel("Tanh", {runKernel("Add", {runKernel("Mul", {a, b}), three})}), c});
  KernelParams p;
  p.set("program", intsParam({2, 0, 1, 0, 3, -1, 21, 4, 0, 1, 5, 2}));
  p.set("constants", floatsParam({3.0}));
  EXPECT_LT(relativeError(runKernel("LlmElementwise", {a, b, c}, p), want), 1e-6);
  // A result larger than one chunk, with a broadcast column.
  Tensor x = randomFloat({37, 19}, 403), col = randomFloat({37, 1}, 404);
  Tensor want2 = runKernel("Sigmoid", {runKernel("Div", {x, col})});
  KernelParams q;
  q.set("program", intsParam({3, 0, 1, 23, 2, 0}));
  q.set("constants", floatsParam({}));
  EXPECT_LT(relativeError(runKernel("LlmElementwise", {x, col}, q), want2), 1e-6);
}

TEST(ElementwiseTest, RejectsOperandsOutOfRange) {
  TestKernelContext ctx;
  ctx.inputs = {randomFloat({4}, 1)};
  ctx.kernel_params.set("program", intsParam({0, 0, 3}));
  ctx.kernel_params.set("constants", floatsParam({}));
  EXPECT_FALSE(ctx.run("LlmElementwise").ok());
}

// [b, H, s, D] -> [b, s, H * D + extra] rows (the extra columns pass through untouched).
Tensor toTokenMajor(const Tensor& x, int64_t extra, uint32_t seed) {
  const int64_t b = x.dim(0), h = x.dim(1), s = x.dim(2), d = x.dim(3), width = h * d + extra;
  Tensor rows = randomFloat({b, s, width}, seed);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < h; ++j)
      for (int64_t t = 0; t < s; ++t)
        for (int64_t e = 0; e < d; ++e)
          rows.data<float>()[(i * s + t) * width + j * d + e] = x.data<float>()[((i * h + j) * s + t) * d + e];
  return rows;
}

// [q | k | v] heads side by side per token, as one packed QKV product lays them out.
Tensor packQkv(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t b = q.dim(0), s = q.dim(2), d = q.dim(3), heads = q.dim(1), kv_heads = k.dim(1);
  Tensor qr = toTokenMajor(q, 0, 1), kr = toTokenMajor(k, 0, 2), vr = toTokenMajor(v, 0, 3);
  const int64_t width = (heads + 2 * kv_heads) * d;
  Tensor packed = Tensor::allocate(DType::kFloat32, {b, s, width});
  for (int64_t row = 0; row < b * s; ++row) {
    float* dst = packed.data<float>() + row * width;
    std::copy_n(qr.data<float>() + row * heads * d, heads * d, dst);
    std::copy_n(kr.data<float>() + row * kv_heads * d, kv_heads * d, dst + heads * d);
    std::copy_n(vr.data<float>() + row * kv_heads * d, kv_heads * d, dst + (heads + kv_heads) * d);
  }
  return packed;
}

TEST(RopeTest, TablesMatchFormulaAndTokenMajorMatchesHeadMajor) {
  const int64_t b = 2, h = 3, s = 5, d = 8;
  Tensor x = randomFloat({b, h, s, d}, 500);
  Tensor cos = randomFloat({1, 1, s, d}, 501), sin = randomFloat({1, 1, s, d}, 502);
  Tensor want = Tensor::allocate(DType::kFloat32, x.shape());
  for (int64_t r = 0; r < b * h; ++r)
    for (int64_t t = 0; t < s; ++t)
      for (int64_t i = 0; i < d; ++i) {
        const float* v = x.data<float>() + (r * s + t) * d;
        float rotated = i < d / 2 ? -v[i + d / 2] : v[i - d / 2];
        want.data<float>()[(r * s + t) * d + i] = v[i] * cos.data<float>()[t * d + i] + rotated * sin.data<float>()[t * d + i];
      }
  Tensor head_major = runKernel("LlmRope", {x, std::nullopt, cos, sin});
  EXPECT_LT(relativeError(head_major, want), 1e-6);
  Tensor rows = toTokenMajor(x, 5, 503);
  Tensor got = runKernel("LlmRope", {rows, std::nullopt, cos, sin},
                         params({{"num_heads", intParam(h)}, {"head_dim", intParam(d)}}));
  Tensor want_rows = toTokenMajor(want, 5, 503);
  EXPECT_LT(relativeError(got, want_rows), 1e-6);
}

// Partial rotary (GPT-NeoX, Phi-2, StableLM): tables of R < head_dim values rotate the first R
// values of each head in halves of R / 2 and pass the rest through bit for bit; in both layouts,
// with per-batch tables. Tables wider than the head, or of an odd width, are refused.
TEST(RopeTest, PartialTablesRotateTheFirstValuesOnly) {
  const int64_t b = 2, h = 3, s = 5, d = 16;
  for (int64_t rotary : {2, 4, 10, 16}) {
    SCOPED_TRACE("rotary " + std::to_string(rotary));
    Tensor x = randomFloat({b, h, s, d}, 510);
    Tensor cos = randomFloat({b, 1, s, rotary}, 511), sin = randomFloat({b, 1, s, rotary}, 512);
    Tensor want = Tensor::allocate(DType::kFloat32, x.shape());
    const int64_t half = rotary / 2;
    for (int64_t r = 0; r < b * h; ++r)
      for (int64_t t = 0; t < s; ++t) {
        const float* v = x.data<float>() + (r * s + t) * d;
        const int64_t row = ((r / h) * s + t) * rotary;
        for (int64_t i = 0; i < d; ++i) {
          float& out = want.data<float>()[(r * s + t) * d + i];
          if (i >= rotary) {
            out = v[i];
            continue;
          }
          const float rotated = i < half ? -v[i + half] : v[i - half];
          out = v[i] * cos.data<float>()[row + i] + rotated * sin.data<float>()[row + i];
        }
      }
    Tensor head_major = runKernel("LlmRope", {x, std::nullopt, cos, sin});
    EXPECT_LT(relativeError(head_major, want), 1e-6);
    for (int64_t i = 0; i < x.numElements(); ++i)
      if (i % d >= rotary) {
        ASSERT_EQ(head_major.data<float>()[i], x.data<float>()[i]) << i;
      }
    Tensor rows = toTokenMajor(x, 5, 513);
    Tensor got = runKernel("LlmRope", {rows, std::nullopt, cos, sin},
                           params({{"num_heads", intParam(h)}, {"head_dim", intParam(d)}}));
    EXPECT_LT(relativeError(got, toTokenMajor(want, 5, 513)), 1e-6);
  }
  Tensor x = randomFloat({1, 2, 3, 8}, 520);
  for (int64_t width : {10, 5}) {
    Tensor table = randomFloat({1, 1, 3, width}, 521);
    TestKernelContext ctx;
    ctx.inputs = {x, std::nullopt, table, table};
    EXPECT_FALSE(ctx.run("LlmRope").ok()) << "tables of " << width << " for heads of 8";
  }
}

// GPT-J's interleaved rotary from per-token tables: x * cos + rotate_every_two(x) * sin on the
// first R values of each head (each value by its own table entry), the rest copied; the same
// bits on x [b, s, h, D] with [b, s, 1, R] tables (token_axis 1), on its transpose
// [b, h, s, D] with [b, 1, s, R] tables, and on the token-major rows with either table layout.
TEST(LlmRopeTest, InterleavedTablesInEveryLayout) {
  const int64_t b = 2, s = 5, h = 3, d = 8, r = 6;
  Tensor x = randomFloat({b, s, h, d}, 530);
  Tensor cos = randomFloat({b, s, 1, r}, 531), sin = randomFloat({b, s, 1, r}, 532);
  Tensor want = Tensor::allocate(DType::kFloat32, x.shape());
  for (int64_t i = 0; i < x.numElements(); ++i) {
    const int64_t e = i % d, row = i / (h * d);  // row = batch * s + token
    const float* v = x.data<float>() + i - e;
    float& out = want.data<float>()[i];
    if (e >= r) {
      out = v[e];
      continue;
    }
    const float rotated = e % 2 == 0 ? -v[e + 1] : v[e - 1];
    out = v[e] * cos.data<float>()[row * r + e] + rotated * sin.data<float>()[row * r + e];
  }
  KernelParams interleaved = params({{"interleaved", intParam(1)}});
  KernelParams axis1 = interleaved;
  axis1.set("token_axis", intParam(1));
  Tensor got = runKernel("LlmRope", {x, std::nullopt, cos, sin}, axis1);
  EXPECT_LT(relativeError(got, want), 1e-6);
  // Head-major: x and the result transposed, the tables [b, 1, s, r] (the same memory).
  KernelParams perm = params({});
  perm.set("perm", intsParam({0, 2, 1, 3}));
  Tensor heads = runKernel("Transpose", {x}, perm);
  Tensor head_tables[2];
  for (int i = 0; i < 2; ++i) {
    head_tables[i] = Tensor::allocate(DType::kFloat32, {b, 1, s, r});
    std::memcpy(head_tables[i].data<float>(), (i ? sin : cos).data<float>(),
                b * s * r * sizeof(float));
  }
  Tensor head_major =
      runKernel("LlmRope", {heads, std::nullopt, head_tables[0], head_tables[1]}, interleaved);
  EXPECT_EQ(values<float>(runKernel("Transpose", {head_major}, perm)), values<float>(got));
  // Token-major rows [b, s, h * d + 4] (4 more columns pass through) with either table layout.
  KernelParams rows = interleaved;
  rows.set("num_heads", intParam(h));
  rows.set("head_dim", intParam(d));
  Tensor packed = toTokenMajor(heads, 4, 533);
  for (const Tensor* tables : {&cos, &head_tables[0]}) {
    const Tensor& sin_tables = tables == &cos ? sin : head_tables[1];
    Tensor y = runKernel("LlmRope", {packed, std::nullopt, *tables, sin_tables}, rows);
    EXPECT_EQ(values<float>(y), values<float>(toTokenMajor(head_major, 4, 533)));
  }
  // token_axis 1 needs tables [b, s, 1, r]; token_axis 3 is refused.
  TestKernelContext bad;
  bad.inputs = {x, std::nullopt, head_tables[0], head_tables[1]};
  bad.kernel_params = axis1;
  EXPECT_FALSE(bad.run("LlmRope").ok());
  KernelParams three = interleaved;
  three.set("token_axis", intParam(3));
  TestKernelContext wrong_axis;
  wrong_axis.inputs = {x, std::nullopt, cos, sin};
  wrong_axis.kernel_params = three;
  EXPECT_FALSE(wrong_axis.run("LlmRope").ok());
}

TEST(LlmAttentionTest, TokenMajorPackedMatchesHeadMajor) {
  const int64_t b = 2, heads = 4, kv_heads = 2, s = 6, d = 8;
  Tensor q = randomFloat({b, heads, s, d}, 600), k = randomFloat({b, kv_heads, s, d}, 601),
         v = randomFloat({b, kv_heads, s, d}, 602);
  KernelParams p = params({{"layer", intParam(0)}});
  p.set("scale", floatParam(0.3));
  Tensor want = runKernel("LlmAttention", {q, k, v}, p);
  Tensor packed = packQkv(q, k, v);
  KernelParams tm = p;
  tm.set("num_heads", intParam(heads));
  tm.set("num_kv_heads", intParam(kv_heads));
  tm.set("head_dim", intParam(d));
  tm.set("k_column", intParam(heads * d));
  tm.set("v_column", intParam((heads + kv_heads) * d));
  Tensor got = runKernel("LlmAttention", {packed, packed, packed}, tm);
  EXPECT_LT(relativeError(got, toTokenMajor(want, 0, 4)), 1e-6);
}

// Causal (or windowed) attention of [b, heads, s, d] q over [b, kv_heads, s, d] k and v in
// double: softmax over keys j of score(h, j, scale * q·k_j), then the weighted sum of v.
template <typename ScoreFn>
Tensor referenceAttention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                          int64_t window, ScoreFn score) {
  const int64_t b = q.dim(0), heads = q.dim(1), s = q.dim(2), d = q.dim(3);
  const int64_t group = heads / k.dim(1);
  auto row = [&](const Tensor& t, int64_t bb, int64_t h, int64_t i) {
    return t.data<float>() + ((bb * t.dim(1) + h) * s + i) * d;
  };
  Tensor want = Tensor::allocate(DType::kFloat32, q.shape());
  for (int64_t bb = 0; bb < b; ++bb)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < s; ++i) {
        const int64_t first = window ? std::max<int64_t>(0, i - window + 1) : 0;
        std::vector<double> scores;
        double top = -INFINITY, sum = 0;
        for (int64_t j = first; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e)
            dot += double(row(q, bb, h, i)[e]) * row(k, bb, h / group, j)[e];
          scores.push_back(score(h, j, dot * scale));
          top = std::max(top, scores.back());
        }
        for (double& x : scores) sum += (x = std::exp(x - top));
        float* out = want.data<float>() + ((bb * heads + h) * s + i) * d;
        for (int64_t e = 0; e < d; ++e) {
          double acc = 0;
          for (int64_t j = first; j <= i; ++j)
            acc += scores[j - first] / sum * row(v, bb, h / group, j)[e];
          out[e] = static_cast<float>(acc);
        }
      }
  return want;
}

// Soft-capped scores (Gemma-2): softmax(c * tanh(scale * q·k / c)) over the causal (or
// windowed) keys, against a plain loop; head_dim 64 is one the chunked AVX-512 path takes
// without a cap, so a cap it dropped would show.
TEST(LlmAttentionTest, SoftcapMatchesReference) {
  const int64_t b = 2, heads = 4, kv_heads = 2, s = 9, d = 64;
  Tensor q = randomFloat({b, heads, s, d}, 610), k = randomFloat({b, kv_heads, s, d}, 611),
         v = randomFloat({b, kv_heads, s, d}, 612);
  const float scale = 0.9f, cap = 2.5f;
  for (int64_t window : {0, 3}) {
    KernelParams p = params({{"layer", intParam(0)}});
    p.set("scale", floatParam(scale));
    p.set("softcap", floatParam(cap));
    if (window) p.set("window", intParam(window));
    Tensor got = runKernel("LlmAttention", {q, k, v}, p);
    double largest = 0;  // the largest scaled score: the cap must have mattered
    Tensor want = referenceAttention(q, k, v, scale, window, [&](int64_t, int64_t, double x) {
      largest = std::max(largest, std::fabs(x));
      return cap * std::tanh(x / cap);
    });
    EXPECT_GT(largest, 2 * cap) << "the test's scores never reach the cap";
    EXPECT_LT(relativeError(got, want), 1e-5) << "window " << window;
  }
  for (double bad : {-1.0, double(INFINITY)}) {
    KernelParams p = params({{"layer", intParam(0)}});
    p.set("softcap", floatParam(bad));
    TestKernelContext ctx;
    ctx.inputs = {q, k, v};
    ctx.kernel_params = p;
    EXPECT_FALSE(ctx.run("LlmAttention").ok()) << "softcap " << bad;
  }
}

}  // namespace
}  // namespace llmc::testing

namespace llmc::testing {
namespace {

TEST(SdpaTest, MatchesOnnxAttentionWithMask) {
  struct Case {
    Shape q, kv, mask;
  };
  const Case cases[] = {{{2, 4, 5, 8}, {2, 4, 7, 8}, {2, 1, 1, 7}},
                        {{1, 2, 1, 16}, {1, 2, 3, 16}, {}},
                        {{3, 3, 9, 4}, {3, 3, 9, 4}, {9, 9}}};
  uint32_t seed = 700;
  for (const Case& c : cases) {
    Tensor q = randomFloat(c.q, seed++), k = randomFloat(c.kv, seed++), v = randomFloat(c.kv, seed++);
    std::optional<Tensor> mask;
    if (!c.mask.empty()) mask = randomFloat(c.mask, seed++);
    KernelParams p;
    p.set("scale", floatParam(0.3));
    Tensor want = runKernel("Attention", {q, k, v, mask}, p);
    Tensor got = runKernel("LlmSdpa", {q, k, v, mask}, p);
    EXPECT_LT(relativeError(got, want), 1e-5) << shapeToString(c.q);
  }
}

}  // namespace
}  // namespace llmc::testing

namespace llmc::testing {
namespace {

TEST(SdpaTest, TokenMajorPackedMatchesHeadMajor) {
  const int64_t b = 2, heads = 4, kv_heads = 2, s = 7, d = 8;
  Tensor q = randomFloat({b, heads, s, d}, 800), k = randomFloat({b, kv_heads, s, d}, 801),
         v = randomFloat({b, kv_heads, s, d}, 802), mask = randomFloat({b, 1, 1, s}, 803);
  KernelParams p;
  p.set("scale", floatParam(0.25));
  Tensor want = runKernel("LlmSdpa", {q, k, v, mask}, p);
  Tensor packed = packQkv(q, k, v);
  p.set("num_heads", intParam(heads));
  p.set("num_kv_heads", intParam(kv_heads));
  p.set("head_dim", intParam(d));
  p.set("k_column", intParam(heads * d));
  p.set("v_column", intParam((heads + kv_heads) * d));
  Tensor got = runKernel("LlmSdpa", {packed, packed, packed, mask}, p);
  EXPECT_LT(relativeError(got, toTokenMajor(want, 0, 4)), 1e-6);
}

// ALiBi (Bloom): softmax(scale * q·k_j + slope_h * j) over the causal (or windowed) keys,
// against a plain loop; head_dim 64 is one the chunked AVX-512 path takes without a bias, so
// a bias it dropped would show. Slopes large enough that the bias moves the result.
TEST(LlmAttentionTest, AlibiMatchesReference) {
  const int64_t b = 2, heads = 4, kv_heads = 2, s = 11, d = 64;
  Tensor q = randomFloat({b, heads, s, d}, 620), k = randomFloat({b, kv_heads, s, d}, 621),
         v = randomFloat({b, kv_heads, s, d}, 622);
  const float scale = 0.125f;
  const std::vector<double> slopes = {0.5, 0.25, -0.125, 0.0625};
  for (int64_t window : {0, 4}) {
    KernelParams p = params({{"layer", intParam(0)}});
    p.set("scale", floatParam(scale));
    p.set("alibi_slopes", floatsParam(slopes));
    if (window) p.set("window", intParam(window));
    Tensor got = runKernel("LlmAttention", {q, k, v}, p);
    KernelParams plain = params({{"layer", intParam(0)}});
    plain.set("scale", floatParam(scale));
    if (window) plain.set("window", intParam(window));
    Tensor without = runKernel("LlmAttention", {q, k, v}, plain);
    Tensor want = referenceAttention(q, k, v, scale, window, [&](int64_t h, int64_t j, double x) {
      return x + slopes[h] * double(j);
    });
    EXPECT_LT(relativeError(got, want), 1e-5) << "window " << window;
    EXPECT_GT(relativeError(without, want), 1e-2) << "the slopes do not change the result";
  }
  for (const std::vector<double>& bad :
       {std::vector<double>{0.5, 0.25}, std::vector<double>{0.5, 0.25, double(NAN), 0.1}}) {
    KernelParams p = params({{"layer", intParam(0)}});
    p.set("alibi_slopes", floatsParam(bad));
    TestKernelContext ctx;
    ctx.inputs = {q, k, v};
    ctx.kernel_params = p;
    EXPECT_FALSE(ctx.run("LlmAttention").ok()) << bad.size() << " slopes";
  }
}

// LlmMoe against a plain loop: softmax routing, the top 2 of 4 experts (renormalized or not),
// silu(x·W1) * (x·W3) · W2 of each chosen expert, weighted, summed in expert order; rows of a
// [2, 5, H] input, some of which every expert sees. Bad shapes and top_k are refused.
TEST(LlmMoeTest, MatchesReference) {
  const int64_t hidden = 16, experts = 4, ffn = 24, top_k = 2;
  Tensor x = randomFloat({2, 5, hidden}, 700), router = randomFloat({hidden, experts}, 701),
         w1 = randomFloat({experts, hidden, ffn}, 702),
         w3 = randomFloat({experts, hidden, ffn}, 703),
         w2 = randomFloat({experts, ffn, hidden}, 704);
  for (int normalize : {1, 0}) {
    KernelParams p = params({{"top_k", intParam(top_k)},
                             {"activation", stringParam("silu")},
                             {"normalize", intParam(normalize)}});
    Tensor got = runKernel("LlmMoe", {x, router, w1, w3, w2}, p);
    ASSERT_EQ(got.shape(), x.shape());
    Tensor want = Tensor::allocate(DType::kFloat32, x.shape());
    const float* xd = x.data<float>();
    std::vector<int> used(experts, 0);
    for (int64_t r = 0; r < 10; ++r) {
      const float* row = xd + r * hidden;
      std::vector<double> probs(experts);
      double top = -INFINITY, sum = 0;
      for (int64_t e = 0; e < experts; ++e) {
        double l = 0;
        for (int64_t h = 0; h < hidden; ++h)
          l += double(row[h]) * router.data<float>()[h * experts + e];
        probs[e] = l;
        top = std::max(top, l);
      }
      for (double& v : probs) sum += (v = std::exp(v - top));
      for (double& v : probs) v /= sum;
      std::vector<int64_t> order = {0, 1, 2, 3};
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return probs[a] > probs[b]; });
      const double total = probs[order[0]] + probs[order[1]];
      std::vector<double> out(hidden, 0.0);
      for (int64_t e = 0; e < experts; ++e) {
        const auto pick = std::find(order.begin(), order.begin() + top_k, e);
        if (pick == order.begin() + top_k) continue;
        ++used[e];
        const double weight = normalize ? probs[e] / total : probs[e];
        std::vector<double> h(ffn);
        for (int64_t f = 0; f < ffn; ++f) {
          double g = 0, u = 0;
          for (int64_t k = 0; k < hidden; ++k) {
            g += double(row[k]) * w1.data<float>()[(e * hidden + k) * ffn + f];
            u += double(row[k]) * w3.data<float>()[(e * hidden + k) * ffn + f];
          }
          h[f] = g / (1 + std::exp(-g)) * u;
        }
        for (int64_t k = 0; k < hidden; ++k) {
          double y = 0;
          for (int64_t f = 0; f < ffn; ++f)
            y += h[f] * w2.data<float>()[(e * ffn + f) * hidden + k];
          out[k] += weight * y;
        }
      }
      for (int64_t k = 0; k < hidden; ++k)
        want.data<float>()[r * hidden + k] = static_cast<float>(out[k]);
    }
    EXPECT_LT(relativeError(got, want), 1e-5) << "normalize " << normalize;
    for (int64_t e = 0; e < experts; ++e)
      EXPECT_GT(used[e], 0) << "expert " << e << " never chosen";
  }
  for (int64_t bad_k : {0, 5}) {
    TestKernelContext ctx;
    ctx.inputs = {x, router, w1, w3, w2};
    ctx.kernel_params = params({{"top_k", intParam(bad_k)}, {"activation", stringParam("silu")}});
    EXPECT_FALSE(ctx.run("LlmMoe").ok()) << "top_k " << bad_k;
  }
  TestKernelContext ctx;
  ctx.inputs = {x, router, w1, w3, randomFloat({experts, hidden, ffn}, 705)};
  ctx.kernel_params = params({{"top_k", intParam(2)}, {"activation", stringParam("silu")}});
  EXPECT_FALSE(ctx.run("LlmMoe").ok()) << "w_down of the wrong shape";
}

}  // namespace
}  // namespace llmc::testing
