// Tests for the CPU reference elementwise kernels: the broadcast loop, unary, binary,
// variadic ops and Cast.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/elementwise_common.h"
#include "kernel_test_util.h"

namespace llmc::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor makeBool(Shape shape, const std::vector<uint8_t>& v) {
  Tensor t = Tensor::allocate(DType::kBool, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i] != 0;
  return t;
}
std::vector<uint8_t> boolValues(const Tensor& t) {
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < t.numElements(); ++i) out.push_back(t.data<bool>()[i] ? 1 : 0);
  return out;
}
template <typename Half>
Tensor makeHalf(DType dtype, Shape shape, const std::vector<float>& v) {
  std::vector<Half> bits;
  for (float f : v) bits.push_back(store<Half>(f));
  return makeTensor(dtype, std::move(shape), bits);
}
template <typename Half>
std::vector<float> halfValues(const Tensor& t) {
  std::vector<float> out;
  for (Half h : values<Half>(t)) out.push_back(load(h));
  return out;
}

// Runs `op` on `inputs` (nullopt = absent) and returns the status; outputs stay in ctx.
Status runOp(TestKernelContext& ctx, const std::string& op,
             std::vector<std::optional<Tensor>> inputs) {
  ctx.inputs = std::move(inputs);
  return ctx.run(op);
}

void expectFloats(const std::vector<float>& expected, const std::vector<float>& actual,
                  float tolerance = 1e-6f) {
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(actual[i])) << "at " << i;
    } else if (std::isinf(expected[i])) {
      EXPECT_EQ(expected[i], actual[i]) << "at " << i;
    } else {
      EXPECT_NEAR(expected[i], actual[i], tolerance * (1 + std::fabs(expected[i]))) << "at " << i;
    }
  }
}

// --- BroadcastLoop ---------------------------------------------------------------------------

// The flat index into an input of `in_shape` for output index `out_index` of `out_shape`,
// computed the slow obvious way.
int64_t naiveBroadcastIndex(const Shape& out_shape, const Shape& in_shape, int64_t out_index) {
  std::vector<int64_t> coords(out_shape.size());
  for (size_t d = out_shape.size(); d-- > 0;) {
    coords[d] = out_index % out_shape[d];
    out_index /= out_shape[d];
  }
  int64_t index = 0;
  const size_t lead = out_shape.size() - in_shape.size();
  for (size_t d = 0; d < in_shape.size(); ++d)
    index = index * in_shape[d] + (in_shape[d] == 1 ? 0 : coords[lead + d]);
  return index;
}

TEST(ElementwiseBroadcastTest, LoopVisitsEveryOutputWithTheRightInputs) {
  const std::vector<std::vector<Shape>> cases = {
      {{2, 3, 4}, {2, 3, 4}},
      {{2, 3, 4}, {}},
      {{2, 1, 4}, {3, 1}},
      {{1}, {5, 1, 1, 7}},
      {{4, 1, 3, 1, 5}, {1, 2, 1}},
      {{3, 1}, {1, 3}, {3, 3}},
      {{1, 1, 1}, {1}},
      {{2, 0, 3}, {3}},
      {{6, 1, 1, 2}, {1, 5, 7, 1}, {7, 2}},
  };
  for (const auto& shapes : cases) {
    Shape out;
    for (const Shape& s : shapes) ASSERT_TRUE(broadcastShapes(out, s, "n", &out).ok());
    std::vector<const Shape*> pointers;
    for (const Shape& s : shapes) pointers.push_back(&s);
    BroadcastLoop loop(out, pointers);
    std::vector<int> visits(static_cast<size_t>(shapeNumElements(out)), 0);
    loop.forEachRow(
        [&](int64_t out_offset, const int64_t* offsets, int64_t count, const int64_t* strides) {
          for (int64_t j = 0; j < count; ++j) {
            ++visits[out_offset + j];
            for (size_t k = 0; k < shapes.size(); ++k) {
              EXPECT_EQ(offsets[k] + j * strides[k],
                        naiveBroadcastIndex(out, shapes[k], out_offset + j))
                  << "output " << shapeToString(out) << " input " << k;
            }
          }
        });
    for (int v : visits) EXPECT_EQ(v, 1) << shapeToString(out);
  }
}

TEST(ElementwiseBroadcastTest, EqualShapesAndScalarsBecomeOneRow) {
  Shape a = {4, 5, 6}, scalar = {};
  int rows = 0;
  BroadcastLoop({4, 5, 6}, {&a, &scalar})
      .forEachRow([&](int64_t, const int64_t*, int64_t count, const int64_t* strides) {
        ++rows;
        EXPECT_EQ(count, 120);
        EXPECT_EQ(strides[0], 1);
        EXPECT_EQ(strides[1], 0);
      });
  EXPECT_EQ(rows, 1);
}

TEST(ElementwiseBroadcastTest, AddMatchesNaiveOnRandomShapes) {
  std::mt19937 rng(7);
  const std::vector<std::pair<Shape, Shape>> cases = {{{3, 1, 5}, {4, 1}},
                                                      {{7}, {2, 3, 1}},
                                                      {{1, 9}, {9, 1}},
                                                      {{2, 3, 4, 5}, {3, 1, 5}},
                                                      {{}, {11}}};
  for (const auto& [sa, sb] : cases) {
    std::uniform_real_distribution<float> dist(-10, 10);
    std::vector<float> va(static_cast<size_t>(shapeNumElements(sa))),
        vb(static_cast<size_t>(shapeNumElements(sb)));
    for (float& v : va) v = dist(rng);
    for (float& v : vb) v = dist(rng);
    TestKernelContext ctx;
    ASSERT_TRUE(runOp(ctx, "Sub", {makeFloat(sa, va), makeFloat(sb, vb)}).ok());
    Shape out;
    ASSERT_TRUE(broadcastShapes(sa, sb, "n", &out).ok());
    ASSERT_EQ(ctx.outputs[0].shape(), out);
    std::vector<float> got = values<float>(ctx.outputs[0]);
    for (int64_t i = 0; i < shapeNumElements(out); ++i) {
      EXPECT_EQ(got[i], va[naiveBroadcastIndex(out, sa, i)] - vb[naiveBroadcastIndex(out, sb, i)]);
    }
  }
}

// --- unary -----------------------------------------------------------------------------------

std::vector<float> runUnaryFloat(const std::string& op, const std::vector<float>& x,
                                 KernelParams params = {}) {
  TestKernelContext ctx;
  ctx.kernel_params = std::move(params);
  Status status = runOp(ctx, op, {makeFloat({static_cast<int64_t>(x.size())}, x)});
  EXPECT_TRUE(status.ok()) << op << ": " << status.toString();
  if (!status.ok()) return {};
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kFloat32);
  return values<float>(ctx.outputs[0]);
}

TEST(ElementwiseUnaryTest, MathFunctions) {
  const std::vector<float> x = {-2.5f, -0.5f, 0.0f, 0.75f, 3.0f};
  struct Case {
    const char* op;
    double (*reference)(double);
  };
  for (const Case& c : std::vector<Case>{
           {"Exp", [](double v) { return std::exp(v); }},
           {"Erf", [](double v) { return std::erf(v); }},
           {"Tanh", [](double v) { return std::tanh(v); }},
           {"Sin", [](double v) { return std::sin(v); }},
           {"Cos", [](double v) { return std::cos(v); }},
           {"Atan", [](double v) { return std::atan(v); }},
           {"Sinh", [](double v) { return std::sinh(v); }},
           {"Neg", [](double v) { return -v; }},
           {"Abs", [](double v) { return std::fabs(v); }},
           {"Floor", [](double v) { return std::floor(v); }},
           {"Ceil", [](double v) { return std::ceil(v); }},
           {"Relu", [](double v) { return v > 0 ? v : 0.0; }},
           {"Sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }},
           {"Softplus", [](double v) { return std::log(1 + std::exp(v)); }},
           {"HardSwish", [](double v) { return v * std::fmax(0, std::fmin(1, v / 6 + 0.5)); }},
       }) {
    std::vector<float> expected;
    for (float v : x) expected.push_back(static_cast<float>(c.reference(v)));
    SCOPED_TRACE(c.op);
    expectFloats(expected, runUnaryFloat(c.op, x));
  }
  expectFloats({2, 0.5f, kNaN}, runUnaryFloat("Sqrt", {4, 0.25f, -1}));
  expectFloats({0.5f, -4, kInf}, runUnaryFloat("Reciprocal", {2, -0.25f, 0}));
  expectFloats({0, 1, -kInf, kNaN}, runUnaryFloat("Log", {1, std::exp(1.0f), 0, -1}));
}

TEST(ElementwiseUnaryTest, RoundIsHalfToEven) {
  expectFloats({0, 2, 2, -0.0f, -2, 3, -4, 1},
               runUnaryFloat("Round", {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 2.6f, -3.5f, 1.2f}));
}

TEST(ElementwiseUnaryTest, ActivationsWithAttributes) {
  // Defaults.
  expectFloats({-0.02f, 3}, runUnaryFloat("LeakyRelu", {-2, 3}));
  expectFloats({std::expm1(-1.0f), 2}, runUnaryFloat("Elu", {-1, 2}));
  expectFloats({0, 0.3f, 0.5f, 1}, runUnaryFloat("HardSigmoid", {-3, -1, 0, 3}));
  expectFloats({0, 0, 2}, runUnaryFloat("ThresholdedRelu", {-1, 1, 2}));
  expectFloats({1.0507010221f * 1.6732631921f * std::expm1(-1.0f), 1.0507010221f * 2},
               runUnaryFloat("Selu", {-1, 2}));
  // Explicit attributes.
  KernelParams leaky;
  leaky.set("alpha", floatParam(0.5));
  expectFloats({-1, 3}, runUnaryFloat("LeakyRelu", {-2, 3}, leaky));
  KernelParams hard;
  hard.set("alpha", floatParam(0.5));
  hard.set("beta", floatParam(0.25));
  expectFloats({0, 0.75f, 1}, runUnaryFloat("HardSigmoid", {-1, 1, 2}, hard));
  KernelParams celu;
  celu.set("alpha", floatParam(2.0));
  expectFloats({2 * std::expm1(-0.5f), 3}, runUnaryFloat("Celu", {-1, 3}, celu));
}

TEST(ElementwiseUnaryTest, GeluExactAndTanh) {
  const std::vector<float> x = {-3, -1, 0, 0.5f, 2};
  std::vector<float> exact, approximate;
  for (float v : x) {
    exact.push_back(0.5f * v * (1 + std::erf(v / std::sqrt(2.0f))));
    approximate.push_back(
        0.5f * v * (1 + std::tanh(std::sqrt(2 / 3.14159265f) * (v + 0.044715f * v * v * v))));
  }
  expectFloats(exact, runUnaryFloat("Gelu", x));
  KernelParams tanh_mode;
  tanh_mode.set("approximate", stringParam("tanh"));
  expectFloats(approximate, runUnaryFloat("Gelu", x, tanh_mode));

  TestKernelContext ctx;
  ctx.kernel_params.set("approximate", stringParam("fast"));
  Status status = runOp(ctx, "Gelu", {makeFloat({1}, {1})});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("test_node"), std::string::npos) << status.message();
}

TEST(ElementwiseUnaryTest, SigmoidAndSoftplusStayFiniteForLargeInputs) {
  expectFloats({0, 0.5f, 1}, runUnaryFloat("Sigmoid", {-1000, 0, 1000}));
  expectFloats({0, 1000}, runUnaryFloat("Softplus", {-1000, 1000}));
}

TEST(ElementwiseUnaryTest, IntegerAbsNegSignRelu) {
  TestKernelContext ctx;
  ASSERT_TRUE(runOp(ctx, "Abs", {makeTensor<int8_t>(DType::kInt8, {3}, {-7, 0, 5})}).ok());
  EXPECT_EQ(values<int8_t>(ctx.outputs[0]), (std::vector<int8_t>{7, 0, 5}));
  ASSERT_TRUE(runOp(ctx, "Neg", {makeInt64({2}, {-4, 9000000000LL})}).ok());
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]), (std::vector<int64_t>{4, -9000000000LL}));
  ASSERT_TRUE(runOp(ctx, "Sign", {makeTensor<int32_t>(DType::kInt32, {3}, {-3, 0, 8})}).ok());
  EXPECT_EQ(values<int32_t>(ctx.outputs[0]), (std::vector<int32_t>{-1, 0, 1}));
  ASSERT_TRUE(runOp(ctx, "Relu", {makeTensor<int32_t>(DType::kInt32, {3}, {-3, 0, 8})}).ok());
  EXPECT_EQ(values<int32_t>(ctx.outputs[0]), (std::vector<int32_t>{0, 0, 8}));
  ASSERT_TRUE(runOp(ctx, "Abs", {makeTensor<uint8_t>(DType::kUInt8, {2}, {200, 3})}).ok());
  EXPECT_EQ(values<uint8_t>(ctx.outputs[0]), (std::vector<uint8_t>{200, 3}));
  expectFloats({-1, 0, 1, kNaN}, runUnaryFloat("Sign", {-0.5f, 0, 7, kNaN}));
}

TEST(ElementwiseUnaryTest, PredicatesAndNot) {
  const std::vector<float> x = {kInf, -kInf, kNaN, 1};
  TestKernelContext ctx;
  ASSERT_TRUE(runOp(ctx, "IsNaN", {makeFloat({4}, x)}).ok());
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kBool);
  EXPECT_EQ(boolValues(ctx.outputs[0]), (std::vector<uint8_t>{0, 0, 1, 0}));
  ASSERT_TRUE(runOp(ctx, "IsInf", {makeFloat({4}, x)}).ok());
  EXPECT_EQ(boolValues(ctx.outputs[0]), (std::vector<uint8_t>{1, 1, 0, 0}));
  ctx.kernel_params.set("detect_positive", intParam(0));
  ASSERT_TRUE(runOp(ctx, "IsInf", {makeFloat({4}, x)}).ok());
  EXPECT_EQ(boolValues(ctx.outputs[0]), (std::vector<uint8_t>{0, 1, 0, 0}));

  TestKernelContext not_ctx;
  ASSERT_TRUE(runOp(not_ctx, "Not", {makeBool({3}, {1, 0, 1})}).ok());
  EXPECT_EQ(boolValues(not_ctx.outputs[0]), (std::vector<uint8_t>{0, 1, 0}));
  ASSERT_TRUE(
      runOp(not_ctx, "BitwiseNot", {makeTensor<uint8_t>(DType::kUInt8, {2}, {0x0f, 0})}).ok());
  EXPECT_EQ(values<uint8_t>(not_ctx.outputs[0]), (std::vector<uint8_t>{0xf0, 0xff}));
}

TEST(ElementwiseUnaryTest, HalfTypesComputeInFloatAndRoundOnce) {
  const std::vector<float> x = {-1.5f, 0.25f, 2.0f, 10.0f};
  TestKernelContext ctx;
  ASSERT_TRUE(runOp(ctx, "Exp", {makeHalf<Float16>(DType::kFloat16, {2, 2}, x)}).ok());
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kFloat16);
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 2}));
  std::vector<float> expected;
  for (float v : x) expected.push_back(load(store<Float16>(std::exp(v))));
  EXPECT_EQ(halfValues<Float16>(ctx.outputs[0]), expected);

  ASSERT_TRUE(runOp(ctx, "Tanh", {makeHalf<BFloat16>(DType::kBFloat16, {4}, x)}).ok());
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kBFloat16);
  expected.clear();
  for (float v : x) expected.push_back(load(store<BFloat16>(std::tanh(v))));
  EXPECT_EQ(halfValues<BFloat16>(ctx.outputs[0]), expected);

  ASSERT_TRUE(runOp(ctx, "Sqrt", {makeTensor<double>(DType::kFloat64, {2}, {2.0, 9.0})}).ok());
  EXPECT_EQ(values<double>(ctx.outputs[0]), (std::vector<double>{std::sqrt(2.0), 3.0}));
}

TEST(ElementwiseUnaryTest, RejectsUnsupportedDTypes) {
  TestKernelContext ctx;
  EXPECT_EQ(runOp(ctx, "Sqrt", {makeTensor<int32_t>(DType::kInt32, {1}, {4})}).code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(runOp(ctx, "Not", {makeFloat({1}, {1})}).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(runOp(ctx, "Abs", {makeBool({1}, {1})}).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(runOp(ctx, "BitwiseNot", {makeFloat({1}, {1})}).code(), StatusCode::kUnimplemented);
}

TEST(ElementwiseUnaryTest, ShapeOnlyNeedsNoData) {
  TestKernelContext ctx;
  ctx.shape_only = true;
  ASSERT_TRUE(
      runOp(ctx, "IsNaN", {Tensor::view(DType::kFloat16, {3, 5}, static_cast<void*>(nullptr))})
          .ok());
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kBool);
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{3, 5}));
}

// --- binary ----------------------------------------------------------------------------------

TEST(ElementwiseBinaryTest, ArithmeticWithBroadcasting) {
  TestKernelContext ctx;
  // [2, 3] (op) [3]
  ASSERT_TRUE(
      runOp(ctx, "Add", {makeFloat({2, 3}, {1, 2, 3, 4, 5, 6}), makeFloat({3}, {10, 20, 30})})
          .ok());
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  // [2, 1] (op) [1, 3]
  ASSERT_TRUE(runOp(ctx, "Mul", {makeFloat({2, 1}, {2, 3}), makeFloat({1, 3}, {1, 10, 100})}).ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{2, 20, 200, 3, 30, 300}));
  // scalar (op) [4]
  ASSERT_TRUE(runOp(ctx, "Sub", {makeFloat({}, {1}), makeFloat({4}, {1, 2, 3, 4})}).ok());
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{0, -1, -2, -3}));
  ASSERT_TRUE(runOp(ctx, "Div", {makeFloat({3}, {1, -6, 1}), makeFloat({}, {0.5f})}).ok());
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{2, -12, 2}));
}

TEST(ElementwiseBinaryTest, IntegerArithmetic) {
  TestKernelContext ctx;
  ASSERT_TRUE(runOp(ctx, "Div",
                    {makeTensor<int32_t>(DType::kInt32, {5}, {7, -7, 7, -7, 5}),
                     makeTensor<int32_t>(DType::kInt32, {5}, {2, 2, -2, -2, 0})})
                  .ok());
  EXPECT_EQ(values<int32_t>(ctx.outputs[0]), (std::vector<int32_t>{3, -3, -3, 3, 0}));
  ASSERT_TRUE(runOp(ctx, "Add",
                    {makeTensor<uint8_t>(DType::kUInt8, {2}, {250, 1}),
                     makeTensor<uint8_t>(DType::kUInt8, {}, {10})})
                  .ok());
  EXPECT_EQ(values<uint8_t>(ctx.outputs[0]), (std::vector<uint8_t>{4, 11}));  // wraps
  ASSERT_TRUE(runOp(ctx, "Mul", {makeInt64({2}, {3000000000LL, -2}), makeInt64({1}, {3})}).ok());
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]), (std::vector<int64_t>{9000000000LL, -6}));
}

TEST(ElementwiseBinaryTest, ModFollowsTheFmodAttribute) {
  TestKernelContext ctx;
  auto a = makeTensor<int32_t>(DType::kInt32, {4}, {7, -7, 7, -7});
  auto b = makeTensor<int32_t>(DType::kInt32, {4}, {3, 3, -3, -3});
  ASSERT_TRUE(runOp(ctx, "Mod", {a, b}).ok());
  EXPECT_EQ(values<int32_t>(ctx.outputs[0]),
            (std::vector<int32_t>{1, 2, -2, -1}));  // divisor's sign
  ctx.kernel_params.set("fmod", intParam(1));
  ASSERT_TRUE(runOp(ctx, "Mod", {a, b}).ok());
  EXPECT_EQ(values<int32_t>(ctx.outputs[0]),
            (std::vector<int32_t>{1, -1, 1, -1}));  // dividend's sign
  ASSERT_TRUE(runOp(ctx, "Mod", {makeFloat({2}, {5.5f, -5.5f}), makeFloat({}, {2})}).ok());
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{1.5f, -1.5f}));
  TestKernelContext float_without_fmod;
  EXPECT_EQ(runOp(float_without_fmod, "Mod", {makeFloat({1}, {1}), makeFloat({1}, {1})}).code(),
            StatusCode::kInvalidArgument);
}

TEST(ElementwiseBinaryTest, PowMixesDTypes) {
  TestKernelContext ctx;
  ASSERT_TRUE(runOp(ctx, "Pow", {makeFloat({3}, {2, 4, -2}), makeInt64({3}, {3, -1, 2})}).ok());
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kFloat32);
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{8, 0.25f, 4}));
  ASSERT_TRUE(runOp(ctx, "Pow", {makeFloat({2}, {4, 9}), makeFloat({}, {0.5f})}).ok());
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{2, 3}));
  // Integer base: exact, even past 2^53.
  ASSERT_TRUE(runOp(ctx, "Pow", {makeInt64({3}, {3, 2, -1}), makeInt64({3}, {39, 3, 5})}).ok());
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kInt64);
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]), (std::vector<int64_t>{4052555153018976267LL, 8, -1}));
  ASSERT_TRUE(
      runOp(ctx, "Pow",
            {makeTensor<int32_t>(DType::kInt32, {3}, {2, 1, 9}), makeFloat({3}, {-1, -2, 0.5f})})
          .ok());
  EXPECT_EQ(values<int32_t>(ctx.outputs[0]), (std::vector<int32_t>{0, 1, 3}));
}

TEST(ElementwiseBinaryTest, ComparisonsProduceBool) {
  auto a = makeFloat({2, 2}, {1, 2, 3, kNaN});
  auto b = makeFloat({2}, {2, 2});
  const std::vector<std::pair<const char*, std::vector<uint8_t>>> cases = {
      {"Equal", {0, 1, 0, 0}},   {"Less", {1, 0, 0, 0}},           {"LessOrEqual", {1, 1, 0, 0}},
      {"Greater", {0, 0, 1, 0}}, {"GreaterOrEqual", {0, 1, 1, 0}},
  };
  for (const auto& [op, expected] : cases) {
    TestKernelContext ctx;
    ASSERT_TRUE(runOp(ctx, op, {a, b}).ok()) << op;
    EXPECT_EQ(ctx.outputs[0].dtype(), DType::kBool);
    EXPECT_EQ(boolValues(ctx.outputs[0]), expected) << op;
  }
  TestKernelContext ctx;
  ASSERT_TRUE(runOp(ctx, "Equal", {makeBool({3}, {1, 0, 1}), makeBool({}, {1})}).ok());
  EXPECT_EQ(boolValues(ctx.outputs[0]), (std::vector<uint8_t>{1, 0, 1}));
  ASSERT_TRUE(runOp(ctx, "Less", {makeInt64({2}, {-5, 5}), makeInt64({1}, {0})}).ok());
  EXPECT_EQ(boolValues(ctx.outputs[0]), (std::vector<uint8_t>{1, 0}));
  ASSERT_TRUE(runOp(ctx, "Greater",
                    {makeHalf<BFloat16>(DType::kBFloat16, {2}, {1.5f, -1}),
                     makeHalf<BFloat16>(DType::kBFloat16, {2}, {1, 1})})
                  .ok());
  EXPECT_EQ(boolValues(ctx.outputs[0]), (std::vector<uint8_t>{1, 0}));
}

TEST(ElementwiseBinaryTest, LogicalAndBitwise) {
  auto a = makeBool({2, 2}, {0, 0, 1, 1});
  auto b = makeBool({2}, {0, 1});
  const std::vector<std::pair<const char*, std::vector<uint8_t>>> cases = {
      {"And", {0, 0, 0, 1}}, {"Or", {0, 1, 1, 1}}, {"Xor", {0, 1, 1, 0}}};
  for (const auto& [op, expected] : cases) {
    TestKernelContext ctx;
    ASSERT_TRUE(runOp(ctx, op, {a, b}).ok()) << op;
    EXPECT_EQ(boolValues(ctx.outputs[0]), expected) << op;
  }
  TestKernelContext ctx;
  auto x = makeTensor<int16_t>(DType::kInt16, {2}, {0x0ff0, -1});
  auto y = makeTensor<int16_t>(DType::kInt16, {}, {0x3c3c});
  ASSERT_TRUE(runOp(ctx, "BitwiseAnd", {x, y}).ok());
  EXPECT_EQ(values<int16_t>(ctx.outputs[0]), (std::vector<int16_t>{0x0c30, 0x3c3c}));
  ASSERT_TRUE(runOp(ctx, "BitwiseOr", {x, y}).ok());
  EXPECT_EQ(values<int16_t>(ctx.outputs[0]), (std::vector<int16_t>{0x3ffc, -1}));
  ASSERT_TRUE(runOp(ctx, "BitwiseXor", {x, y}).ok());
  EXPECT_EQ(values<int16_t>(ctx.outputs[0]),
            (std::vector<int16_t>{0x33cc, static_cast<int16_t>(~0x3c3c)}));
  EXPECT_EQ(runOp(ctx, "And", {makeFloat({1}, {1}), makeFloat({1}, {1})}).code(),
            StatusCode::kUnimplemented);
}

TEST(ElementwiseBinaryTest, PReluBroadcastsTheSlope) {
  TestKernelContext ctx;
  ASSERT_TRUE(
      runOp(ctx, "PRelu", {makeFloat({2, 2}, {-1, 2, -3, 4}), makeFloat({2}, {0.5f, 0.25f})}).ok());
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{-0.5f, 2, -1.5f, 4}));
}

TEST(ElementwiseBinaryTest, HalfAndDoubleArithmetic) {
  TestKernelContext ctx;
  ASSERT_TRUE(runOp(ctx, "Add",
                    {makeHalf<Float16>(DType::kFloat16, {2}, {1.5f, 1024}),
                     makeHalf<Float16>(DType::kFloat16, {2}, {0.25f, 0.25f})})
                  .ok());
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kFloat16);
  EXPECT_EQ(halfValues<Float16>(ctx.outputs[0]),
            (std::vector<float>{1.75f, 1024}));  // 1024.25 rounds
  ASSERT_TRUE(runOp(ctx, "Div",
                    {makeTensor<double>(DType::kFloat64, {1}, {1.0}),
                     makeTensor<double>(DType::kFloat64, {1}, {3.0})})
                  .ok());
  EXPECT_EQ(values<double>(ctx.outputs[0])[0], 1.0 / 3.0);
}

TEST(ElementwiseBinaryTest, Errors) {
  TestKernelContext ctx;
  Status mismatch =
      runOp(ctx, "Add", {makeFloat({2, 3}, std::vector<float>(6)), makeFloat({2}, {1, 2})});
  EXPECT_EQ(mismatch.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.message().find("test_node"), std::string::npos);
  EXPECT_EQ(runOp(ctx, "Add", {makeFloat({1}, {1}), makeInt64({1}, {1})}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(runOp(ctx, "Add", {makeFloat({1}, {1}), std::nullopt}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(runOp(ctx, "Add", {makeBool({1}, {1}), makeBool({1}, {1})}).code(),
            StatusCode::kUnimplemented);
}

TEST(ElementwiseBinaryTest, ShapeOnly) {
  TestKernelContext ctx;
  ctx.shape_only = true;
  auto a = Tensor::view(DType::kInt64, {4, 1, 3}, static_cast<void*>(nullptr));
  auto b = Tensor::view(DType::kInt64, {5, 1}, static_cast<void*>(nullptr));
  ASSERT_TRUE(runOp(ctx, "Less", {a, b}).ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{4, 5, 3}));
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kBool);
  ASSERT_TRUE(
      runOp(ctx, "Pow", {Tensor::view(DType::kFloat32, {2}, static_cast<void*>(nullptr)), b}).ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{5, 2}));
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kFloat32);
}

// --- variadic, Where, Clip -------------------------------------------------------------------

TEST(ElementwiseVariadicTest, MinMaxSumMean) {
  auto a = makeFloat({2, 2}, {1, 5, 3, 8});
  auto b = makeFloat({2}, {4, 2});
  auto c = makeFloat({}, {3});
  const std::vector<std::pair<const char*, std::vector<float>>> cases = {
      {"Min", {1, 2, 3, 2}},
      {"Max", {4, 5, 4, 8}},
      {"Sum", {8, 10, 10, 13}},
      {"Mean", {8.0f / 3, 10.0f / 3, 10.0f / 3, 13.0f / 3}}};
  for (const auto& [op, expected] : cases) {
    TestKernelContext ctx;
    ASSERT_TRUE(runOp(ctx, op, {a, b, c}).ok()) << op;
    EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 2}));
    expectFloats(expected, values<float>(ctx.outputs[0]));
  }
  TestKernelContext single;
  ASSERT_TRUE(runOp(single, "Max", {b}).ok());
  EXPECT_EQ(values<float>(single.outputs[0]), (std::vector<float>{4, 2}));
}

TEST(ElementwiseVariadicTest, MinMaxPropagateNaNAndWorkOnIntegers) {
  TestKernelContext ctx;
  ASSERT_TRUE(runOp(ctx, "Min", {makeFloat({2}, {kNaN, 1}), makeFloat({2}, {0, kNaN})}).ok());
  EXPECT_TRUE(std::isnan(values<float>(ctx.outputs[0])[0]));
  EXPECT_TRUE(std::isnan(values<float>(ctx.outputs[0])[1]));
  ASSERT_TRUE(
      runOp(ctx, "Max", {makeInt64({3}, {-5, 9000000000LL, 0}), makeInt64({1}, {-1})}).ok());
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]), (std::vector<int64_t>{-1, 9000000000LL, 0}));
  ASSERT_TRUE(runOp(ctx, "Min",
                    {makeTensor<uint8_t>(DType::kUInt8, {2}, {7, 200}),
                     makeTensor<uint8_t>(DType::kUInt8, {2, 1}, {100, 3})})
                  .ok());
  EXPECT_EQ(values<uint8_t>(ctx.outputs[0]), (std::vector<uint8_t>{7, 100, 3, 3}));
  ASSERT_TRUE(runOp(ctx, "Sum",
                    {makeHalf<Float16>(DType::kFloat16, {2}, {1, 2}),
                     makeHalf<Float16>(DType::kFloat16, {2}, {0.5f, 0.25f})})
                  .ok());
  EXPECT_EQ(halfValues<Float16>(ctx.outputs[0]), (std::vector<float>{1.5f, 2.25f}));
  EXPECT_EQ(runOp(ctx, "Sum", {makeFloat({1}, {1}), makeInt64({1}, {1})}).code(),
            StatusCode::kInvalidArgument);
}

TEST(ElementwiseVariadicTest, WhereBroadcastsAllThree) {
  TestKernelContext ctx;
  // condition [2, 1], x [3], y scalar -> [2, 3]
  ASSERT_TRUE(runOp(ctx, "Where",
                    {makeBool({2, 1}, {1, 0}), makeInt64({3}, {1, 2, 3}), makeInt64({}, {-1})})
                  .ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]), (std::vector<int64_t>{1, 2, 3, -1, -1, -1}));
  ASSERT_TRUE(runOp(ctx, "Where",
                    {makeBool({3}, {0, 1, 0}), makeHalf<BFloat16>(DType::kBFloat16, {2, 1}, {1, 2}),
                     makeHalf<BFloat16>(DType::kBFloat16, {3}, {7, 8, 9})})
                  .ok());
  EXPECT_EQ(halfValues<BFloat16>(ctx.outputs[0]), (std::vector<float>{7, 1, 9, 7, 2, 9}));
  ASSERT_TRUE(
      runOp(ctx, "Where", {makeBool({2}, {1, 0}), makeBool({2}, {0, 0}), makeBool({2}, {1, 1})})
          .ok());
  EXPECT_EQ(boolValues(ctx.outputs[0]), (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(
      runOp(ctx, "Where", {makeFloat({1}, {1}), makeFloat({1}, {1}), makeFloat({1}, {1})}).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      runOp(ctx, "Where", {makeBool({2}, {1, 0}), makeFloat({3}, {1, 2, 3}), makeFloat({1}, {1})})
          .code(),
      StatusCode::kInvalidArgument);
}

TEST(ElementwiseVariadicTest, ClipWithOptionalBounds) {
  auto x = makeFloat({5}, {-3, -1, 0, 2, kNaN});
  TestKernelContext ctx;
  ASSERT_TRUE(runOp(ctx, "Clip", {x}).ok());
  expectFloats({-3, -1, 0, 2, kNaN}, values<float>(ctx.outputs[0]));
  ASSERT_TRUE(
      runOp(ctx, "Clip", {makeFloat({2}, {-kInf, kInf}), std::nullopt, makeFloat({}, {1})}).ok());
  expectFloats({-kInf, 1}, values<float>(ctx.outputs[0]));
  ASSERT_TRUE(runOp(ctx, "Clip", {x, makeFloat({}, {-1.5f}), std::nullopt}).ok());
  expectFloats({-1.5f, -1, 0, 2, kNaN}, values<float>(ctx.outputs[0]));
  ASSERT_TRUE(runOp(ctx, "Clip", {x, std::nullopt, makeFloat({}, {1})}).ok());
  expectFloats({-3, -1, 0, 1, kNaN}, values<float>(ctx.outputs[0]));
  ASSERT_TRUE(runOp(ctx, "Clip", {x, makeFloat({}, {-0.5f}), makeFloat({}, {0.5f})}).ok());
  expectFloats({-0.5f, -0.5f, 0, 0.5f, kNaN}, values<float>(ctx.outputs[0]));
  // min > max: everything becomes max.
  ASSERT_TRUE(runOp(ctx, "Clip", {x, makeFloat({}, {2}), makeFloat({}, {1})}).ok());
  expectFloats({1, 1, 1, 1, kNaN}, values<float>(ctx.outputs[0]));
  ASSERT_TRUE(runOp(ctx, "Clip",
                    {makeInt64({3}, {-9000000000LL, 5, 9000000000LL}),
                     makeInt64({}, {-8000000001LL}), makeInt64({}, {8000000001LL})})
                  .ok());
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]),
            (std::vector<int64_t>{-8000000001LL, 5, 8000000001LL}));
  EXPECT_EQ(runOp(ctx, "Clip", {x, makeFloat({2}, {0, 1})}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(runOp(ctx, "Clip", {x, makeInt64({}, {0})}).code(), StatusCode::kInvalidArgument);
}

// --- Cast ------------------------------------------------------------------------------------

Status runCast(TestKernelContext& ctx, const Tensor& x, DType to) {
  ctx.kernel_params.set("to", intParam(static_cast<int64_t>(to)));
  return runOp(ctx, "Cast", {x});
}

TEST(ElementwiseCastTest, FloatToIntegerTruncatesTowardZero) {
  auto x = makeFloat({6}, {2.7f, -2.7f, -0.5f, 1e20f, kNaN, 127.9f});
  TestKernelContext ctx;
  ASSERT_TRUE(runCast(ctx, x, DType::kInt64).ok());
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kInt64);
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]),
            (std::vector<int64_t>{2, -2, 0, std::numeric_limits<int64_t>::max(), 0, 127}));
  ASSERT_TRUE(runCast(ctx, makeFloat({3}, {-1, 255.5f, 3}), DType::kUInt8).ok());
  EXPECT_EQ(values<uint8_t>(ctx.outputs[0]), (std::vector<uint8_t>{255, 255, 3}));
  ASSERT_TRUE(
      runCast(ctx, makeHalf<Float16>(DType::kFloat16, {2}, {-3.5f, 100}), DType::kInt8).ok());
  EXPECT_EQ(values<int8_t>(ctx.outputs[0]), (std::vector<int8_t>{-3, 100}));
}

TEST(ElementwiseCastTest, BoolConversions) {
  TestKernelContext ctx;
  ASSERT_TRUE(runCast(ctx, makeFloat({4}, {0, -0.0f, 0.1f, kNaN}), DType::kBool).ok());
  EXPECT_EQ(boolValues(ctx.outputs[0]), (std::vector<uint8_t>{0, 0, 1, 1}));
  ASSERT_TRUE(runCast(ctx, makeInt64({2}, {0, -7}), DType::kBool).ok());
  EXPECT_EQ(boolValues(ctx.outputs[0]), (std::vector<uint8_t>{0, 1}));
  ASSERT_TRUE(runCast(ctx, makeBool({2}, {1, 0}), DType::kFloat32).ok());
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{1, 0}));
  ASSERT_TRUE(runCast(ctx, makeBool({2}, {1, 0}), DType::kBFloat16).ok());
  EXPECT_EQ(halfValues<BFloat16>(ctx.outputs[0]), (std::vector<float>{1, 0}));
}

TEST(ElementwiseCastTest, HalfTypesAndWidening) {
  TestKernelContext ctx;
  // 1 + 2^-11 is halfway between two float16 values: rounds to even (1.0).
  ASSERT_TRUE(runCast(ctx, makeFloat({3}, {1.00048828125f, 65504, 1e6f}), DType::kFloat16).ok());
  EXPECT_EQ(halfValues<Float16>(ctx.outputs[0]), (std::vector<float>{1, 65504, kInf}));
  Tensor half = ctx.outputs[0];
  TestKernelContext back;
  ASSERT_TRUE(runCast(back, half, DType::kBFloat16).ok());
  EXPECT_EQ(halfValues<BFloat16>(back.outputs[0]), (std::vector<float>{1, 65536, kInf}));
  ASSERT_TRUE(runCast(back, makeInt64({2}, {-3, 16777217}), DType::kFloat64).ok());
  EXPECT_EQ(values<double>(back.outputs[0]), (std::vector<double>{-3, 16777217}));
  ASSERT_TRUE(
      runCast(back, makeTensor<int32_t>(DType::kInt32, {2}, {-1, 300}), DType::kUInt8).ok());
  EXPECT_EQ(values<uint8_t>(back.outputs[0]), (std::vector<uint8_t>{255, 44}));
  ASSERT_TRUE(runCast(back, makeFloat({2}, {1, 2}), DType::kFloat32).ok());
  EXPECT_EQ(values<float>(back.outputs[0]), (std::vector<float>{1, 2}));
}

TEST(ElementwiseCastTest, CastLikeTakesTheSecondInputsDType) {
  TestKernelContext ctx;
  ASSERT_TRUE(runOp(ctx, "CastLike", {makeFloat({2}, {1.9f, -1.9f}), makeInt64({1}, {0})}).ok());
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kInt64);
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]), (std::vector<int64_t>{1, -1}));
}

TEST(ElementwiseCastTest, ErrorsAndShapeOnly) {
  TestKernelContext ctx;
  EXPECT_EQ(runOp(ctx, "Cast", {makeFloat({1}, {1})}).code(),
            StatusCode::kInvalidArgument);                                     // no 'to'
  EXPECT_EQ(runCast(ctx, makeFloat({1}, {1}), static_cast<DType>(17)).code(),  // float8e4m3fn
            StatusCode::kUnimplemented);
  ctx.kernel_params.set("to", intParam(8));  // string
  EXPECT_EQ(runOp(ctx, "Cast", {makeFloat({1}, {1})}).code(), StatusCode::kUnimplemented);

  TestKernelContext shape_only;
  shape_only.shape_only = true;
  ASSERT_TRUE(runCast(shape_only,
                      Tensor::view(DType::kFloat32, {2, 7}, static_cast<void*>(nullptr)),
                      DType::kFloat16)
                  .ok());
  EXPECT_EQ(shape_only.outputs[0].dtype(), DType::kFloat16);
  EXPECT_EQ(shape_only.outputs[0].shape(), (Shape{2, 7}));
}

}  // namespace
}  // namespace llmc::testing
