// Unit tests for the math family of CPU reference kernels: MatMul, Gemm, Einsum, Softmax,
// LogSoftmax, LayerNormalization and RMSNormalization.
#include <cmath>
#include <limits>

#include "kernel_test_util.h"

namespace llmc::testing {
namespace {

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

// Deterministic, non-trivial values.
std::vector<float> ramp(int64_t n, float scale = 0.37f, float offset = -1.1f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = offset + scale * static_cast<float>((i * 7) % 11);
  return v;
}

void expectNear(const std::vector<float>& actual, const std::vector<float>& expected,
                float tolerance = 1e-5f) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tolerance * (1 + std::fabs(expected[i]))) << "at " << i;
  }
}

TestKernelContext binaryContext(Tensor a, Tensor b) {
  TestKernelContext ctx;
  ctx.inputs.push_back(std::move(a));
  ctx.inputs.push_back(std::move(b));
  return ctx;
}

// --- MatMul ---------------------------------------------------------------------------------

TEST(MathMatMulTest, TwoByTwoDims) {
  TestKernelContext ctx = binaryContext(makeFloat({2, 3}, {1, 2, 3, 4, 5, 6}),
                                        makeFloat({3, 2}, {7, 8, 9, 10, 11, 12}));
  ASSERT_TRUE(ctx.run("MatMul").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{58, 64, 139, 154}));
}

TEST(MathMatMulTest, OneDimensionalOperands) {
  TestKernelContext dot = binaryContext(makeFloat({3}, {1, 2, 3}), makeFloat({3}, {4, 5, 6}));
  ASSERT_TRUE(dot.run("MatMul").ok());
  EXPECT_EQ(dot.outputs[0].shape(), Shape{});
  EXPECT_EQ(values<float>(dot.outputs[0]), (std::vector<float>{32}));

  TestKernelContext row =
      binaryContext(makeFloat({2}, {1, -1}), makeFloat({2, 2, 3}, ramp(12, 1.0f, 0.0f)));
  ASSERT_TRUE(row.run("MatMul").ok());
  EXPECT_EQ(row.outputs[0].shape(), (Shape{2, 3}));

  TestKernelContext column =
      binaryContext(makeFloat({2, 3}, {1, 2, 3, 4, 5, 6}), makeFloat({3}, {1, 0, -1}));
  ASSERT_TRUE(column.run("MatMul").ok());
  EXPECT_EQ(column.outputs[0].shape(), Shape{2});
  EXPECT_EQ(values<float>(column.outputs[0]), (std::vector<float>{-2, -2}));
}

TEST(MathMatMulTest, BatchBroadcasting) {
  // [2, 1, 2, 3] x [3, 3, 2] -> [2, 3, 2, 2]
  const std::vector<float> a = ramp(12), b = ramp(18, 0.21f, 0.4f);
  TestKernelContext ctx = binaryContext(makeFloat({2, 1, 2, 3}, a), makeFloat({3, 3, 2}, b));
  ASSERT_TRUE(ctx.run("MatMul").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 3, 2, 2}));
  std::vector<float> expected;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int m = 0; m < 2; ++m) {
        for (int n = 0; n < 2; ++n) {
          double sum = 0;
          for (int k = 0; k < 3; ++k) sum += a[i * 6 + m * 3 + k] * b[j * 6 + k * 2 + n];
          expected.push_back(static_cast<float>(sum));
        }
      }
    }
  }
  expectNear(values<float>(ctx.outputs[0]), expected);
}

TEST(MathMatMulTest, IntegerAndHalfTypes) {
  TestKernelContext ints =
      binaryContext(makeTensor<int64_t>(DType::kInt64, {1, 2}, {3000000000LL, -2}),
                    makeTensor<int64_t>(DType::kInt64, {2, 1}, {3, 5}));
  ASSERT_TRUE(ints.run("MatMul").ok());
  EXPECT_EQ(values<int64_t>(ints.outputs[0]), (std::vector<int64_t>{8999999990LL}));

  TestKernelContext half =
      binaryContext(makeHalf({1, 2}, {0.5f, 2}), makeHalf({2, 2}, {1, 2, 3, 4}));
  ASSERT_TRUE(half.run("MatMul").ok());
  EXPECT_EQ(half.outputs[0].dtype(), DType::kFloat16);
  EXPECT_EQ(halfValues(half.outputs[0]), (std::vector<float>{6.5f, 9}));
}

TEST(MathMatMulTest, ErrorsAndShapeOnly) {
  TestKernelContext mismatch =
      binaryContext(makeFloat({2, 3}, ramp(6)), makeFloat({2, 3}, ramp(6)));
  EXPECT_EQ(mismatch.run("MatMul").code(), StatusCode::kInvalidArgument);
  TestKernelContext batch =
      binaryContext(makeFloat({2, 1, 1}, ramp(2)), makeFloat({3, 1, 1}, ramp(3)));
  EXPECT_EQ(batch.run("MatMul").code(), StatusCode::kInvalidArgument);
  TestKernelContext types = binaryContext(makeFloat({1}, {1}), makeInt64({1}, {1}));
  EXPECT_EQ(types.run("MatMul").code(), StatusCode::kInvalidArgument);
  TestKernelContext boolean = binaryContext(makeTensor<uint8_t>(DType::kBool, {1}, {1}),
                                            makeTensor<uint8_t>(DType::kBool, {1}, {1}));
  EXPECT_EQ(boolean.run("MatMul").code(), StatusCode::kUnimplemented);

  TestKernelContext shape =
      binaryContext(Tensor::view(DType::kFloat32, {4, 1, 5, 6}, static_cast<void*>(nullptr)),
                    Tensor::view(DType::kFloat32, {3, 6, 2}, static_cast<void*>(nullptr)));
  shape.shape_only = true;
  ASSERT_TRUE(shape.run("MatMul").ok());
  EXPECT_EQ(shape.outputs[0].shape(), (Shape{4, 3, 5, 2}));
}

// --- Gemm -----------------------------------------------------------------------------------

TEST(MathGemmTest, TransposesAlphaBetaAndBroadcastC) {
  // A^T with A stored [3, 2]; B^T with B stored [4, 3]; C is a row [4].
  const std::vector<float> a = ramp(6), b = ramp(12, 0.5f, -0.2f), c = {1, 2, 3, 4};
  TestKernelContext ctx;
  ctx.inputs = {makeFloat({3, 2}, a), makeFloat({4, 3}, b), makeFloat({4}, c)};
  ctx.kernel_params.set("transA", intParam(1));
  ctx.kernel_params.set("transB", intParam(1));
  ctx.kernel_params.set("alpha", floatParam(0.5));
  ctx.kernel_params.set("beta", floatParam(-2.0));
  ASSERT_TRUE(ctx.run("Gemm").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 4}));
  std::vector<float> expected;
  for (int m = 0; m < 2; ++m) {
    for (int n = 0; n < 4; ++n) {
      double sum = 0;
      for (int k = 0; k < 3; ++k) sum += a[k * 2 + m] * b[n * 3 + k];
      expected.push_back(static_cast<float>(0.5 * sum - 2.0 * c[n]));
    }
  }
  expectNear(values<float>(ctx.outputs[0]), expected);
}

TEST(MathGemmTest, ColumnAndScalarCAndNoC) {
  TestKernelContext ctx;
  ctx.inputs = {makeFloat({2, 2}, {1, 2, 3, 4}), makeFloat({2, 2}, {1, 0, 0, 1}),
                makeFloat({2, 1}, {10, 20})};
  ASSERT_TRUE(ctx.run("Gemm").ok());
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{11, 12, 23, 24}));
  ctx.inputs[2] = makeFloat({}, {100});
  ASSERT_TRUE(ctx.run("Gemm").ok());
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{101, 102, 103, 104}));
  ctx.inputs.pop_back();
  ASSERT_TRUE(ctx.run("Gemm").ok());
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{1, 2, 3, 4}));
}

TEST(MathGemmTest, RejectsBadShapes) {
  TestKernelContext ctx;
  ctx.inputs = {makeFloat({2, 2}, ramp(4)), makeFloat({2, 3}, ramp(6)), makeFloat({2}, {1, 2})};
  EXPECT_EQ(ctx.run("Gemm").code(), StatusCode::kInvalidArgument);  // C [2] vs N = 3
  ctx.inputs = {makeFloat({2, 3}, ramp(6)), makeFloat({2, 3}, ramp(6))};
  EXPECT_EQ(ctx.run("Gemm").code(), StatusCode::kInvalidArgument);  // K differs
}

// --- Einsum ---------------------------------------------------------------------------------

TestKernelContext einsumContext(const std::string& equation, std::vector<Tensor> inputs) {
  TestKernelContext ctx;
  for (Tensor& t : inputs) ctx.inputs.push_back(std::move(t));
  ctx.kernel_params.set("equation", stringParam(equation));
  return ctx;
}

TEST(MathEinsumTest, MatMulExplicitAndImplicit) {
  for (const char* equation : {"ij,jk->ik", "ij,jk", " ij , jk -> ik "}) {
    TestKernelContext ctx = einsumContext(equation, {makeFloat({2, 3}, {1, 2, 3, 4, 5, 6}),
                                                     makeFloat({3, 2}, {7, 8, 9, 10, 11, 12})});
    ASSERT_TRUE(ctx.run("Einsum").ok()) << equation;
    EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 2}));
    EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{58, 64, 139, 154}));
  }
}

TEST(MathEinsumTest, TransposeSumAndImplicitOrder) {
  TestKernelContext transpose = einsumContext("ij->ji", {makeFloat({2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(transpose.run("Einsum").ok());
  EXPECT_EQ(transpose.outputs[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(transpose.outputs[0]), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  // Implicit output sorts the labels: "ba" is a transpose too.
  TestKernelContext implicit = einsumContext("ba", {makeFloat({2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(implicit.run("Einsum").ok());
  EXPECT_EQ(values<float>(implicit.outputs[0]), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  TestKernelContext rows = einsumContext("ij->i", {makeFloat({2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(rows.run("Einsum").ok());
  EXPECT_EQ(values<float>(rows.outputs[0]), (std::vector<float>{6, 15}));
  TestKernelContext all = einsumContext("ij->", {makeFloat({2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(all.run("Einsum").ok());
  EXPECT_EQ(all.outputs[0].shape(), Shape{});
  EXPECT_EQ(values<float>(all.outputs[0]), (std::vector<float>{21}));
}

TEST(MathEinsumTest, TraceDiagonalAndOuterProduct) {
  Tensor square = makeFloat({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  TestKernelContext trace = einsumContext("ii", {square});
  ASSERT_TRUE(trace.run("Einsum").ok());
  EXPECT_EQ(values<float>(trace.outputs[0]), (std::vector<float>{15}));
  TestKernelContext diagonal =
      einsumContext("...ii->...i", {makeFloat({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})});
  ASSERT_TRUE(diagonal.run("Einsum").ok());
  EXPECT_EQ(diagonal.outputs[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(diagonal.outputs[0]), (std::vector<float>{1, 4, 5, 8}));
  TestKernelContext outer =
      einsumContext("i,j->ij", {makeFloat({2}, {1, 2}), makeFloat({3}, {1, 10, 100})});
  ASSERT_TRUE(outer.run("Einsum").ok());
  EXPECT_EQ(values<float>(outer.outputs[0]), (std::vector<float>{1, 10, 100, 2, 20, 200}));
}

TEST(MathEinsumTest, EllipsisBroadcastBatchMatMul) {
  // [2, 1, 2, 3] and [4, 3, 2] broadcast over the ellipsis to [2, 4, 2, 2].
  const std::vector<float> a = ramp(12), b = ramp(24, 0.3f, 0.2f);
  TestKernelContext ctx =
      einsumContext("...ij,...jk->...ik", {makeFloat({2, 1, 2, 3}, a), makeFloat({4, 3, 2}, b)});
  ASSERT_TRUE(ctx.run("Einsum").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 4, 2, 2}));
  TestKernelContext reference = binaryContext(makeFloat({2, 1, 2, 3}, a), makeFloat({4, 3, 2}, b));
  ASSERT_TRUE(reference.run("MatMul").ok());
  expectNear(values<float>(ctx.outputs[0]), values<float>(reference.outputs[0]));
}

TEST(MathEinsumTest, IntegersAndThreeOperands) {
  TestKernelContext ctx =
      einsumContext("i,i,i->", {makeTensor<int32_t>(DType::kInt32, {3}, {1, 2, 3}),
                                makeTensor<int32_t>(DType::kInt32, {3}, {4, 5, 6}),
                                makeTensor<int32_t>(DType::kInt32, {3}, {-1, 1, 2})});
  ASSERT_TRUE(ctx.run("Einsum").ok());
  EXPECT_EQ(values<int32_t>(ctx.outputs[0]), (std::vector<int32_t>{-4 + 10 + 36}));
}

TEST(MathEinsumTest, RejectsMalformedEquations) {
  Tensor x = makeFloat({2, 2}, {1, 2, 3, 4});
  for (const char* equation : {"ij,jk->ik", "ijk->i", "ij->k", "ij->ii", "i1->i", "ij..->i"}) {
    TestKernelContext ctx = einsumContext(equation, {x});
    EXPECT_EQ(ctx.run("Einsum").code(), StatusCode::kInvalidArgument) << equation;
  }
  TestKernelContext sizes = einsumContext("ij,ij->ij", {x, makeFloat({2, 3}, ramp(6))});
  EXPECT_EQ(sizes.run("Einsum").code(), StatusCode::kInvalidArgument);
}

TEST(MathEinsumTest, ShapeOnly) {
  TestKernelContext ctx = einsumContext(
      "bij,bjk->bik", {Tensor::view(DType::kFloat32, {5, 2, 3}, static_cast<void*>(nullptr)),
                       Tensor::view(DType::kFloat32, {5, 3, 4}, static_cast<void*>(nullptr))});
  ctx.shape_only = true;
  ASSERT_TRUE(ctx.run("Einsum").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{5, 2, 4}));
}

// --- Softmax / LogSoftmax -------------------------------------------------------------------

TEST(MathSoftmaxTest, DefaultLastAxisAndLargeValues) {
  TestKernelContext ctx;
  ctx.inputs.push_back(makeFloat({2, 3}, {1, 2, 3, 1000, 1000, 1000}));
  ASSERT_TRUE(ctx.run("Softmax").ok());
  const double denominator = 1 + std::exp(1.0) + std::exp(2.0);
  expectNear(values<float>(ctx.outputs[0]),
             {static_cast<float>(1 / denominator), static_cast<float>(std::exp(1.0) / denominator),
              static_cast<float>(std::exp(2.0) / denominator), 1.0f / 3, 1.0f / 3, 1.0f / 3});
  ASSERT_TRUE(ctx.run("LogSoftmax").ok());
  const float log_denominator = static_cast<float>(std::log(denominator));
  expectNear(values<float>(ctx.outputs[0]),
             {-log_denominator, 1 - log_denominator, 2 - log_denominator, -std::log(3.0f),
              -std::log(3.0f), -std::log(3.0f)});
}

TEST(MathSoftmaxTest, AxisZeroOnlyNormalizesThatAxis) {
  TestKernelContext ctx;
  ctx.inputs.push_back(makeFloat({2, 2}, {0, 1, 0, 3}));
  ctx.kernel_params.set("axis", intParam(0));
  ASSERT_TRUE(ctx.run("Softmax").ok());
  const float e2 = static_cast<float>(1 / (1 + std::exp(2.0)));
  expectNear(values<float>(ctx.outputs[0]), {0.5f, e2, 0.5f, 1 - e2});
}

TEST(MathSoftmaxTest, HalfAndErrors) {
  TestKernelContext ctx;
  ctx.inputs.push_back(makeHalf({2}, {0, 0}));
  ASSERT_TRUE(ctx.run("Softmax").ok());
  EXPECT_EQ(halfValues(ctx.outputs[0]), (std::vector<float>{0.5f, 0.5f}));
  ctx.kernel_params.set("axis", intParam(1));
  EXPECT_EQ(ctx.run("Softmax").code(), StatusCode::kInvalidArgument);
  ctx.inputs[0] = makeInt64({2}, {1, 2});
  ctx.kernel_params.set("axis", intParam(0));
  EXPECT_EQ(ctx.run("LogSoftmax").code(), StatusCode::kUnimplemented);
}

// --- LayerNormalization / RMSNormalization --------------------------------------------------

TEST(MathLayerNormTest, AxisOneWithStatistics) {
  // X [2, 2, 3] normalized over the last two dims; Scale and B are [2, 3].
  const std::vector<float> x = ramp(12, 0.8f, -2.0f), scale = ramp(6, 0.3f, 0.5f),
                           bias = ramp(6, -0.2f, 0.1f);
  TestKernelContext ctx;
  ctx.num_outputs = 3;
  ctx.inputs = {makeFloat({2, 2, 3}, x), makeFloat({2, 3}, scale), makeFloat({2, 3}, bias)};
  ctx.kernel_params.set("axis", intParam(1));
  ctx.kernel_params.set("epsilon", floatParam(1e-3));
  ASSERT_TRUE(ctx.run("LayerNormalization").ok());
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(ctx.outputs[1].shape(), (Shape{2, 1, 1}));
  EXPECT_EQ(ctx.outputs[2].dtype(), DType::kFloat32);
  std::vector<float> y, means, inv_stds;
  for (int r = 0; r < 2; ++r) {
    double mean = 0, variance = 0;
    for (int j = 0; j < 6; ++j) mean += x[r * 6 + j] / 6.0;
    for (int j = 0; j < 6; ++j) variance += (x[r * 6 + j] - mean) * (x[r * 6 + j] - mean) / 6.0;
    const double inv_std = 1 / std::sqrt(variance + 1e-3);
    for (int j = 0; j < 6; ++j)
      y.push_back(static_cast<float>((x[r * 6 + j] - mean) * inv_std * scale[j] + bias[j]));
    means.push_back(static_cast<float>(mean));
    inv_stds.push_back(static_cast<float>(inv_std));
  }
  expectNear(values<float>(ctx.outputs[0]), y);
  expectNear(values<float>(ctx.outputs[1]), means);
  expectNear(values<float>(ctx.outputs[2]), inv_stds);
}

TEST(MathLayerNormTest, BroadcastScaleNoBiasHalfInput) {
  // Scale [1] broadcasts over the row; X is float16, the statistics stay float32.
  TestKernelContext ctx;
  ctx.num_outputs = 2;
  ctx.inputs = {makeHalf({2, 2}, {1, 3, -2, 2}), makeHalf({1}, {2})};
  ASSERT_TRUE(ctx.run("LayerNormalization").ok());
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kFloat16);
  EXPECT_EQ(ctx.outputs[1].dtype(), DType::kFloat32);
  EXPECT_EQ(values<float>(ctx.outputs[1]), (std::vector<float>{2, 0}));
  const float one = static_cast<float>(1 / std::sqrt(1 + 1e-5));
  const float two = static_cast<float>(2 / std::sqrt(4 + 1e-5));
  expectNear(halfValues(ctx.outputs[0]), {-2 * one, 2 * one, -2 * two, 2 * two}, 1e-3f);
}

TEST(MathLayerNormTest, RejectsBadScaleAndShapeOnly) {
  TestKernelContext ctx;
  ctx.inputs = {makeFloat({2, 3}, ramp(6)), makeFloat({2}, {1, 1})};
  EXPECT_EQ(ctx.run("LayerNormalization").code(), StatusCode::kInvalidArgument);

  TestKernelContext shape;
  shape.shape_only = true;
  shape.num_outputs = 3;
  shape.inputs = {Tensor::view(DType::kBFloat16, {4, 5, 6}, static_cast<void*>(nullptr)),
                  Tensor::view(DType::kBFloat16, {6}, static_cast<void*>(nullptr))};
  ASSERT_TRUE(shape.run("LayerNormalization").ok());
  EXPECT_EQ(shape.outputs[0].dtype(), DType::kBFloat16);
  EXPECT_EQ(shape.outputs[2].shape(), (Shape{4, 5, 1}));
}

TEST(MathRmsNormTest, LastAxisAndAxisZero) {
  const std::vector<float> x = ramp(6, 0.9f, -2.5f), scale = {0.5f, -1, 2};
  TestKernelContext ctx;
  ctx.inputs = {makeFloat({2, 3}, x), makeFloat({3}, scale)};
  ctx.kernel_params.set("epsilon", floatParam(1e-2));
  ASSERT_TRUE(ctx.run("RMSNormalization").ok());
  std::vector<float> expected;
  for (int r = 0; r < 2; ++r) {
    double mean_square = 0;
    for (int j = 0; j < 3; ++j) mean_square += x[r * 3 + j] * x[r * 3 + j] / 3.0;
    for (int j = 0; j < 3; ++j)
      expected.push_back(
          static_cast<float>(x[r * 3 + j] / std::sqrt(mean_square + 1e-2) * scale[j]));
  }
  expectNear(values<float>(ctx.outputs[0]), expected);

  // axis 0: one row over the whole tensor, scale [2, 3].
  TestKernelContext whole;
  whole.inputs = {makeFloat({2, 3}, x), makeFloat({2, 3}, {1, 1, 1, 2, 2, 2})};
  whole.kernel_params.set("axis", intParam(0));
  ASSERT_TRUE(whole.run("RMSNormalization").ok());
  double mean_square = 0;
  for (float v : x) mean_square += v * v / 6.0;
  const double inv_rms = 1 / std::sqrt(mean_square + 1e-5);
  expected.clear();
  for (int j = 0; j < 6; ++j)
    expected.push_back(static_cast<float>(x[j] * inv_rms * (j < 3 ? 1 : 2)));
  expectNear(values<float>(whole.outputs[0]), expected);
}

TEST(MathRmsNormTest, OutputTakesScaleDtype) {
  TestKernelContext ctx;
  ctx.inputs = {makeHalf({1, 2}, {3, 4}), makeFloat({2}, {1, 1})};
  ASSERT_TRUE(ctx.run("RMSNormalization").ok());
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kFloat32);
  const double rms = std::sqrt(12.5 + 1e-5);
  expectNear(values<float>(ctx.outputs[0]),
             {static_cast<float>(3 / rms), static_cast<float>(4 / rms)});
}

}  // namespace
}  // namespace llmc::testing
