// Unit tests for the reduction family of CPU reference kernels: Reduce*, ArgMax/ArgMin, TopK
// and CumSum.
#include <cmath>
#include <limits>

#include "kernel_test_util.h"

namespace llmc::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor makeHalf(Shape shape, const std::vector<float>& v) {
  std::vector<Float16> bits;
  for (float f : v) bits.push_back(toFloat16(f));
  return makeTensor(DType::kFloat16, std::move(shape), bits);
}

std::vector<float> halfValues(const Tensor& t) {
  std::vector<float> out;
  for (Float16 h : values<Float16>(t)) out.push_back(toFloat(h));
  return out;
}

// A context for a Reduce* op over `data` with optional `axes`.
TestKernelContext reduceContext(Tensor data, std::optional<std::vector<int64_t>> axes,
                                int64_t keepdims = 1) {
  TestKernelContext ctx;
  ctx.inputs.push_back(std::move(data));
  if (axes) ctx.inputs.push_back(makeInt64({static_cast<int64_t>(axes->size())}, *axes));
  ctx.kernel_params.set("keepdims", intParam(keepdims));
  return ctx;
}

// [2, 3, 4] with values 0..23.
Tensor iota234() {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
  return makeFloat({2, 3, 4}, v);
}

TEST(ReductionReduceTest, SumOverNegativeAxesKeepDims) {
  TestKernelContext ctx = reduceContext(iota234(), std::vector<int64_t>{-1, 0});
  ASSERT_TRUE(ctx.run("ReduceSum").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{1, 3, 1}));
  // Row j sums (4j..4j+3) and (12+4j..12+4j+3).
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{60, 92, 124}));
}

TEST(ReductionReduceTest, SumWithoutKeepDims) {
  TestKernelContext ctx = reduceContext(iota234(), std::vector<int64_t>{1}, /*keepdims=*/0);
  ASSERT_TRUE(ctx.run("ReduceSum").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 4}));
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{12, 15, 18, 21, 48, 51, 54, 57}));
}

TEST(ReductionReduceTest, AbsentAxesReduceEverything) {
  TestKernelContext ctx = reduceContext(iota234(), std::nullopt, /*keepdims=*/0);
  ASSERT_TRUE(ctx.run("ReduceMean").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), Shape{});
  EXPECT_FLOAT_EQ(values<float>(ctx.outputs[0])[0], 11.5f);
}

TEST(ReductionReduceTest, NoopWithEmptyAxes) {
  TestKernelContext ctx = reduceContext(makeFloat({3}, {1, -2, 3}), std::vector<int64_t>{});
  ctx.kernel_params.set("noop_with_empty_axes", intParam(1));
  ASSERT_TRUE(ctx.run("ReduceSum").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), Shape{3});
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{1, -2, 3}));
  // Like the ONNX reference, ReduceSumSquare still squares.
  ASSERT_TRUE(ctx.run("ReduceSumSquare").ok());
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{1, 4, 9}));
  // Without the flag, empty axes reduce everything.
  ctx.kernel_params.set("noop_with_empty_axes", intParam(0));
  ASSERT_TRUE(ctx.run("ReduceSum").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), Shape{1});
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{2}));
}

TEST(ReductionReduceTest, EmptySetIdentities) {
  const std::vector<std::pair<const char*, float>> cases = {
      {"ReduceSum", 0.0f},       {"ReduceProd", 1.0f},    {"ReduceMax", -kInf},
      {"ReduceMin", kInf},       {"ReduceL1", 0.0f},      {"ReduceL2", 0.0f},
      {"ReduceSumSquare", 0.0f}, {"ReduceLogSum", -kInf}, {"ReduceLogSumExp", -kInf}};
  for (const auto& [op, expected] : cases) {
    TestKernelContext ctx = reduceContext(makeFloat({2, 0, 3}, {}), std::vector<int64_t>{1});
    ASSERT_TRUE(ctx.run(op).ok()) << op;
    EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 1, 3})) << op;
    for (float v : values<float>(ctx.outputs[0])) EXPECT_EQ(v, expected) << op;
  }
  TestKernelContext mean = reduceContext(makeFloat({2, 0}, {}), std::vector<int64_t>{1});
  ASSERT_TRUE(mean.run("ReduceMean").ok());
  EXPECT_TRUE(std::isnan(values<float>(mean.outputs[0])[0]));
}

TEST(ReductionReduceTest, EmptySetOfIntegersUsesTypeLimits) {
  TestKernelContext ctx =
      reduceContext(makeTensor<int8_t>(DType::kInt8, {0, 2}, {}), std::vector<int64_t>{0});
  ASSERT_TRUE(ctx.run("ReduceMax").ok());
  EXPECT_EQ(values<int8_t>(ctx.outputs[0]), (std::vector<int8_t>{-128, -128}));
  ASSERT_TRUE(ctx.run("ReduceMin").ok());
  EXPECT_EQ(values<int8_t>(ctx.outputs[0]), (std::vector<int8_t>{127, 127}));
}

TEST(ReductionReduceTest, ZeroSizeKeptAxisGivesEmptyOutput) {
  TestKernelContext ctx = reduceContext(makeFloat({2, 0, 4}, {}), std::vector<int64_t>{2});
  ASSERT_TRUE(ctx.run("ReduceSum").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 0, 1}));
}

TEST(ReductionReduceTest, IntegerMeanTruncatesAndSumWraps) {
  TestKernelContext ctx =
      reduceContext(makeTensor<int32_t>(DType::kInt32, {2, 3}, {1, 2, 4, -1, -2, -4}),
                    std::vector<int64_t>{1}, 0);
  ASSERT_TRUE(ctx.run("ReduceMean").ok());
  EXPECT_EQ(values<int32_t>(ctx.outputs[0]), (std::vector<int32_t>{2, -2}));
  ASSERT_TRUE(ctx.run("ReduceProd").ok());
  EXPECT_EQ(values<int32_t>(ctx.outputs[0]), (std::vector<int32_t>{8, -8}));
  ASSERT_TRUE(ctx.run("ReduceL1").ok());
  EXPECT_EQ(values<int32_t>(ctx.outputs[0]), (std::vector<int32_t>{7, 7}));

  TestKernelContext wrap = reduceContext(makeTensor<uint8_t>(DType::kUInt8, {3}, {200, 100, 1}),
                                         std::vector<int64_t>{0}, 0);
  ASSERT_TRUE(wrap.run("ReduceSum").ok());
  EXPECT_EQ(values<uint8_t>(wrap.outputs[0]), (std::vector<uint8_t>{45}));
}

TEST(ReductionReduceTest, BoolMaxAndMin) {
  TestKernelContext ctx = reduceContext(
      makeTensor<uint8_t>(DType::kBool, {3, 2}, {1, 1, 1, 0, 0, 0}), std::vector<int64_t>{1}, 0);
  ASSERT_TRUE(ctx.run("ReduceMax").ok());
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kBool);
  EXPECT_EQ(values<uint8_t>(ctx.outputs[0]), (std::vector<uint8_t>{1, 1, 0}));
  ASSERT_TRUE(ctx.run("ReduceMin").ok());
  EXPECT_EQ(values<uint8_t>(ctx.outputs[0]), (std::vector<uint8_t>{1, 0, 0}));
  EXPECT_EQ(ctx.run("ReduceSum").code(), StatusCode::kUnimplemented);
}

TEST(ReductionReduceTest, NormsAndLogs) {
  Tensor x = makeFloat({2, 2}, {3, -4, 1, 2});
  TestKernelContext ctx = reduceContext(x, std::vector<int64_t>{1}, 0);
  ASSERT_TRUE(ctx.run("ReduceL1").ok());
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{7, 3}));
  ASSERT_TRUE(ctx.run("ReduceL2").ok());
  EXPECT_FLOAT_EQ(values<float>(ctx.outputs[0])[0], 5.0f);
  EXPECT_FLOAT_EQ(values<float>(ctx.outputs[0])[1], std::sqrt(5.0f));
  ASSERT_TRUE(ctx.run("ReduceSumSquare").ok());
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{25, 5}));
  ASSERT_TRUE(ctx.run("ReduceLogSum").ok());
  EXPECT_FLOAT_EQ(values<float>(ctx.outputs[0])[1], std::log(3.0f));
  ASSERT_TRUE(ctx.run("ReduceLogSumExp").ok());
  EXPECT_FLOAT_EQ(values<float>(ctx.outputs[0])[1],
                  static_cast<float>(std::log(std::exp(1.0) + std::exp(2.0))));
}

TEST(ReductionReduceTest, LogSumExpIsStableForLargeValues) {
  TestKernelContext ctx =
      reduceContext(makeFloat({3}, {1000, 1000, -kInf}), std::vector<int64_t>{0});
  ASSERT_TRUE(ctx.run("ReduceLogSumExp").ok());
  EXPECT_FLOAT_EQ(values<float>(ctx.outputs[0])[0], 1000.0f + std::log(2.0f));
}

TEST(ReductionReduceTest, MaxPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  TestKernelContext ctx = reduceContext(makeFloat({3}, {1, nan, 5}), std::nullopt);
  ASSERT_TRUE(ctx.run("ReduceMax").ok());
  EXPECT_TRUE(std::isnan(values<float>(ctx.outputs[0])[0]));
}

TEST(ReductionReduceTest, HalfTypes) {
  TestKernelContext ctx =
      reduceContext(makeHalf({2, 3}, {0.5f, 1.5f, -2, 4, 8, 16}), std::vector<int64_t>{-1}, 0);
  ASSERT_TRUE(ctx.run("ReduceSum").ok());
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kFloat16);
  EXPECT_EQ(halfValues(ctx.outputs[0]), (std::vector<float>{0, 28}));
  ASSERT_TRUE(ctx.run("ReduceMin").ok());
  EXPECT_EQ(halfValues(ctx.outputs[0]), (std::vector<float>{-2, 4}));
}

TEST(ReductionReduceTest, FloatSumMatchesDoubleClosely) {
  const int n = 100003;
  std::vector<float> v(n);
  double exact = 0;
  for (int i = 0; i < n; ++i) {
    v[i] = 0.1f + static_cast<float>(i % 7) * 1e-3f;
    exact += v[i];
  }
  TestKernelContext ctx = reduceContext(makeFloat({n}, v), std::nullopt, 0);
  ASSERT_TRUE(ctx.run("ReduceSum").ok());
  EXPECT_NEAR(values<float>(ctx.outputs[0])[0], exact, exact * 1e-6);
}

TEST(ReductionReduceTest, RejectsBadAxes) {
  TestKernelContext dup = reduceContext(iota234(), std::vector<int64_t>{1, -2});
  Status status = dup.run("ReduceSum");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("test_node"), std::string::npos);
  TestKernelContext range = reduceContext(iota234(), std::vector<int64_t>{3});
  EXPECT_EQ(range.run("ReduceMax").code(), StatusCode::kInvalidArgument);
}

TEST(ReductionReduceTest, ShapeOnly) {
  TestKernelContext ctx;
  ctx.shape_only = true;
  ctx.inputs.push_back(Tensor::view(DType::kFloat32, {2, 3, 4}, static_cast<void*>(nullptr)));
  ctx.inputs.push_back(makeInt64({1}, {1}));
  ctx.kernel_params.set("keepdims", intParam(0));
  ASSERT_TRUE(ctx.run("ReduceMean").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 4}));
  // Axes not known yet: the shape is not either.
  ctx.inputs[1] = Tensor::view(DType::kInt64, {1}, static_cast<void*>(nullptr));
  EXPECT_EQ(ctx.run("ReduceMean").code(), StatusCode::kUnavailable);
}

// --- ArgMax / ArgMin ------------------------------------------------------------------------

TEST(ReductionArgTest, ArgMaxArgMinWithTies) {
  TestKernelContext ctx;
  ctx.inputs.push_back(makeFloat({2, 4}, {1, 3, 3, 0, 2, 2, -1, -1}));
  ctx.kernel_params.set("axis", intParam(-1));
  ASSERT_TRUE(ctx.run("ArgMax").ok());
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kInt64);
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 1}));
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]), (std::vector<int64_t>{1, 0}));
  ASSERT_TRUE(ctx.run("ArgMin").ok());
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]), (std::vector<int64_t>{3, 2}));
  ctx.kernel_params.set("select_last_index", intParam(1));
  ctx.kernel_params.set("keepdims", intParam(0));
  ASSERT_TRUE(ctx.run("ArgMax").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2}));
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]), (std::vector<int64_t>{2, 1}));
  ASSERT_TRUE(ctx.run("ArgMin").ok());
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]), (std::vector<int64_t>{3, 3}));
}

TEST(ReductionArgTest, DefaultAxisZeroOnIntegers) {
  TestKernelContext ctx;
  ctx.inputs.push_back(makeTensor<int32_t>(DType::kInt32, {3, 2}, {5, -1, 7, -3, 6, 9}));
  ASSERT_TRUE(ctx.run("ArgMax").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{1, 2}));
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]), (std::vector<int64_t>{1, 2}));
}

TEST(ReductionArgTest, RejectsEmptyAxisAndBadDtype) {
  TestKernelContext ctx;
  ctx.inputs.push_back(makeFloat({0, 2}, {}));
  EXPECT_EQ(ctx.run("ArgMax").code(), StatusCode::kInvalidArgument);
  ctx.inputs[0] = makeTensor<uint8_t>(DType::kBool, {2}, {1, 0});
  EXPECT_EQ(ctx.run("ArgMin").code(), StatusCode::kUnimplemented);
}

// --- TopK -----------------------------------------------------------------------------------

TestKernelContext topKContext(Tensor x, int64_t k, int64_t axis, int64_t largest) {
  TestKernelContext ctx;
  ctx.num_outputs = 2;
  ctx.inputs.push_back(std::move(x));
  ctx.inputs.push_back(makeInt64({1}, {k}));
  ctx.kernel_params.set("axis", intParam(axis));
  ctx.kernel_params.set("largest", intParam(largest));
  return ctx;
}

TEST(ReductionTopKTest, LargestWithTiesTakesLowerIndexFirst) {
  TestKernelContext ctx = topKContext(makeFloat({2, 4}, {1, 3, 3, 2, 0, 0, 0, 5}), 3, -1, 1);
  ASSERT_TRUE(ctx.run("TopK").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{3, 3, 2, 5, 0, 0}));
  EXPECT_EQ(values<int64_t>(ctx.outputs[1]), (std::vector<int64_t>{1, 2, 3, 3, 0, 1}));
}

TEST(ReductionTopKTest, SmallestAlongAxisZero) {
  TestKernelContext ctx =
      topKContext(makeTensor<int64_t>(DType::kInt64, {3, 2}, {4, 1, 2, 1, 9, 0}), 2, 0, 0);
  ASSERT_TRUE(ctx.run("TopK").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]), (std::vector<int64_t>{2, 0, 4, 1}));
  EXPECT_EQ(values<int64_t>(ctx.outputs[1]), (std::vector<int64_t>{1, 2, 0, 0}));
}

TEST(ReductionTopKTest, HalfValues) {
  TestKernelContext ctx = topKContext(makeHalf({4}, {0.5f, -1, 2, 0.25f}), 2, 0, 1);
  ASSERT_TRUE(ctx.run("TopK").ok());
  EXPECT_EQ(halfValues(ctx.outputs[0]), (std::vector<float>{2, 0.5f}));
  EXPECT_EQ(values<int64_t>(ctx.outputs[1]), (std::vector<int64_t>{2, 0}));
}

TEST(ReductionTopKTest, KOutOfRangeAndShapeOnly) {
  TestKernelContext bad = topKContext(makeFloat({3}, {1, 2, 3}), 4, 0, 1);
  EXPECT_EQ(bad.run("TopK").code(), StatusCode::kInvalidArgument);
  TestKernelContext zero = topKContext(makeFloat({3}, {1, 2, 3}), 0, 0, 1);
  ASSERT_TRUE(zero.run("TopK").ok());
  EXPECT_EQ(zero.outputs[1].shape(), Shape{0});

  TestKernelContext shape =
      topKContext(Tensor::view(DType::kFloat32, {5, 7}, static_cast<void*>(nullptr)), 3, 1, 1);
  shape.shape_only = true;
  ASSERT_TRUE(shape.run("TopK").ok());
  EXPECT_EQ(shape.outputs[0].shape(), (Shape{5, 3}));
  EXPECT_EQ(shape.outputs[1].dtype(), DType::kInt64);
  shape.inputs[1] = Tensor::view(DType::kInt64, {1}, static_cast<void*>(nullptr));
  EXPECT_EQ(shape.run("TopK").code(), StatusCode::kUnavailable);
}

// --- CumSum ---------------------------------------------------------------------------------

TEST(ReductionCumSumTest, ForwardReverseExclusive) {
  const std::vector<std::tuple<int64_t, int64_t, std::vector<float>>> cases = {
      {0, 0, {1, 3, 6, 4, 9, 15}},
      {1, 0, {0, 1, 3, 0, 4, 9}},
      {0, 1, {6, 5, 3, 15, 11, 6}},
      {1, 1, {5, 3, 0, 11, 6, 0}},
  };
  for (const auto& [exclusive, reverse, expected] : cases) {
    TestKernelContext ctx;
    ctx.inputs.push_back(makeFloat({2, 3}, {1, 2, 3, 4, 5, 6}));
    ctx.inputs.push_back(makeTensor<int32_t>(DType::kInt32, {}, {-1}));
    ctx.kernel_params.set("exclusive", intParam(exclusive));
    ctx.kernel_params.set("reverse", intParam(reverse));
    ASSERT_TRUE(ctx.run("CumSum").ok());
    EXPECT_EQ(values<float>(ctx.outputs[0]), expected) << exclusive << reverse;
  }
}

TEST(ReductionCumSumTest, IntegersAlongAxisZero) {
  TestKernelContext ctx;
  ctx.inputs.push_back(makeTensor<int64_t>(DType::kInt64, {3, 2}, {1, -2, 3, -4, 5, -6}));
  ctx.inputs.push_back(makeInt64({1}, {0}));
  ASSERT_TRUE(ctx.run("CumSum").ok());
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]), (std::vector<int64_t>{1, -2, 4, -6, 9, -12}));
}

TEST(ReductionCumSumTest, RejectsBadAxis) {
  TestKernelContext ctx;
  ctx.inputs.push_back(makeFloat({2}, {1, 2}));
  ctx.inputs.push_back(makeInt64({}, {2}));
  EXPECT_EQ(ctx.run("CumSum").code(), StatusCode::kInvalidArgument);
  ctx.inputs[1] = makeFloat({}, {0});
  EXPECT_EQ(ctx.run("CumSum").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace llmc::testing
