// Unit tests of the tensor_ops CPU reference kernels (shape and data movement ops): ONNX edge
// semantics, several dtypes, shape-only evaluation and errors on bad model input.
#include <cstdint>
#include <limits>
#include <numeric>

#include "kernel_test_util.h"

namespace llmc::testing {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

KernelParam tensorParam(Tensor value) {
  KernelParam param;
  param.kind = KernelParam::Kind::kTensor;
  param.tensor = std::move(value);
  return param;
}

// 0, 1, 2, ... as float32 of `shape`.
Tensor iota(Shape shape) {
  if (shapeNumElements(shape) == 0) return Tensor::allocate(DType::kFloat32, std::move(shape));
  std::vector<float> v(static_cast<size_t>(shapeNumElements(shape)));
  std::iota(v.begin(), v.end(), 0.0f);
  return makeFloat(std::move(shape), v);
}

Tensor makeInt32(Shape shape, const std::vector<int32_t>& v) {
  return makeTensor(DType::kInt32, std::move(shape), v);
}

// A tensor with a shape and no data, as in shape-only evaluation.
Tensor noData(DType dtype, Shape shape) {
  return Tensor::view(dtype, std::move(shape), static_cast<void*>(nullptr));
}

// Runs `kernel` and expects success.
void runOk(TestKernelContext& ctx, const std::string& kernel) {
  Status status = ctx.run(kernel);
  ASSERT_TRUE(status.ok()) << status.toString();
}

// Runs `kernel` and expects kInvalidArgument whose message contains `fragment`.
void runFails(TestKernelContext& ctx, const std::string& kernel, const std::string& fragment) {
  Status status = ctx.run(kernel);
  ASSERT_EQ(status.code(), StatusCode::kInvalidArgument) << status.toString();
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("test_node"), std::string::npos) << status.message();
}

// --- Transpose -----------------------------------------------------------------------------

TEST(TensorOpsTransposeTest, PermutesThreeDims) {
  TestKernelContext ctx;
  ctx.inputs = {iota({2, 3, 4})};
  ctx.kernel_params.set("perm", intsParam({1, 2, 0}));
  runOk(ctx, "Transpose");
  ASSERT_EQ(ctx.outputs[0].shape(), (Shape{3, 4, 2}));
  std::vector<float> out = values<float>(ctx.outputs[0]);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(out[(j * 4 + k) * 2 + i], (i * 3 + j) * 4 + k);
}

TEST(TensorOpsTransposeTest, DefaultReversesDimsForInt8) {
  TestKernelContext ctx;
  ctx.inputs = {makeTensor<int8_t>(DType::kInt8, {2, 3}, {1, 2, 3, 4, 5, 6})};
  runOk(ctx, "Transpose");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(values<int8_t>(ctx.outputs[0]), (std::vector<int8_t>{1, 4, 2, 5, 3, 6}));
}

TEST(TensorOpsTransposeTest, KeepsHalfBitPatterns) {
  TestKernelContext ctx;
  ctx.inputs = {makeTensor<uint16_t>(DType::kFloat16, {2, 2}, {0x3c00, 0x7e00, 0x8001, 0xfc00})};
  ctx.kernel_params.set("perm", intsParam({1, 0}));
  runOk(ctx, "Transpose");
  EXPECT_EQ(values<uint16_t>(ctx.outputs[0]),
            (std::vector<uint16_t>{0x3c00, 0x8001, 0x7e00, 0xfc00}));
}

TEST(TensorOpsTransposeTest, RejectsNonPermutation) {
  TestKernelContext ctx;
  ctx.inputs = {iota({2, 3})};
  ctx.kernel_params.set("perm", intsParam({1, 1}));
  runFails(ctx, "Transpose", "not a permutation");
}

// --- Reshape, Flatten, Squeeze, Unsqueeze ---------------------------------------------------

TEST(TensorOpsReshapeTest, CopiesZeroAndInfersMinusOne) {
  TestKernelContext ctx;
  ctx.inputs = {iota({2, 3, 4}), makeInt64({3}, {0, -1, 2})};
  runOk(ctx, "Reshape");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 6, 2}));
  EXPECT_EQ(values<float>(ctx.outputs[0]), values<float>(iota({24})));
}

TEST(TensorOpsReshapeTest, AllowZeroKeepsZeroDims) {
  TestKernelContext ctx;
  ctx.inputs = {iota({0, 3}), makeInt64({2}, {3, 0})};
  ctx.kernel_params.set("allowzero", intParam(1));
  runOk(ctx, "Reshape");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{3, 0}));
}

TEST(TensorOpsReshapeTest, RejectsBadShapes) {
  TestKernelContext two_inferred;
  two_inferred.inputs = {iota({2, 3}), makeInt64({2}, {-1, -1})};
  runFails(two_inferred, "Reshape", "more than one -1");

  TestKernelContext mismatch;
  mismatch.inputs = {iota({2, 3}), makeInt64({2}, {4, 2})};
  runFails(mismatch, "Reshape", "cannot reshape");

  TestKernelContext not_divisible;
  not_divisible.inputs = {iota({2, 3}), makeInt64({2}, {4, -1})};
  runFails(not_divisible, "Reshape", "cannot be inferred");

  TestKernelContext zero_and_inferred;
  zero_and_inferred.inputs = {iota({0, 3}), makeInt64({2}, {0, -1})};
  zero_and_inferred.kernel_params.set("allowzero", intParam(1));
  runFails(zero_and_inferred, "Reshape", "allowzero");
}

TEST(TensorOpsReshapeTest, ShapeOnly) {
  TestKernelContext known;
  known.shape_only = true;
  known.inputs = {noData(DType::kBFloat16, {4, 6}), makeInt32({2}, {-1, 3})};
  runOk(known, "Reshape");
  EXPECT_EQ(known.outputs[0].shape(), (Shape{8, 3}));
  EXPECT_EQ(known.outputs[0].dtype(), DType::kBFloat16);

  TestKernelContext unknown;
  unknown.shape_only = true;
  unknown.inputs = {noData(DType::kFloat32, {4, 6}), noData(DType::kInt64, {2})};
  EXPECT_EQ(unknown.run("Reshape").code(), StatusCode::kUnavailable);
}

TEST(TensorOpsFlattenTest, Axes) {
  TestKernelContext zero;
  zero.inputs = {iota({2, 3, 4})};
  zero.kernel_params.set("axis", intParam(0));
  runOk(zero, "Flatten");
  EXPECT_EQ(zero.outputs[0].shape(), (Shape{1, 24}));

  TestKernelContext negative;
  negative.inputs = {iota({2, 3, 4})};
  negative.kernel_params.set("axis", intParam(-1));
  runOk(negative, "Flatten");
  EXPECT_EQ(negative.outputs[0].shape(), (Shape{6, 4}));
  EXPECT_EQ(values<float>(negative.outputs[0]), values<float>(iota({24})));

  TestKernelContext bad;
  bad.inputs = {iota({2, 3})};
  bad.kernel_params.set("axis", intParam(3));
  runFails(bad, "Flatten", "out of range");
}

TEST(TensorOpsSqueezeTest, AllOnesWithoutAxes) {
  TestKernelContext ctx;
  ctx.inputs = {iota({1, 3, 1, 2})};
  runOk(ctx, "Squeeze");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{3, 2}));
}

TEST(TensorOpsSqueezeTest, NegativeAxesAndErrors) {
  TestKernelContext ctx;
  ctx.inputs = {iota({1, 3, 1, 2}), makeInt64({1}, {-2})};
  runOk(ctx, "Squeeze");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{1, 3, 2}));

  TestKernelContext not_one;
  not_one.inputs = {iota({1, 3}), makeInt64({1}, {1})};
  runFails(not_one, "Squeeze", "not 1");

  TestKernelContext out_of_range;
  out_of_range.inputs = {iota({1, 3}), makeInt64({1}, {2})};
  runFails(out_of_range, "Squeeze", "out of range");
}

TEST(TensorOpsUnsqueezeTest, UnsortedAndNegativeAxes) {
  TestKernelContext ctx;
  ctx.inputs = {iota({3, 4}), makeInt64({3}, {4, 0, -3})};
  runOk(ctx, "Unsqueeze");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{1, 3, 1, 4, 1}));
  EXPECT_EQ(values<float>(ctx.outputs[0]), values<float>(iota({12})));

  TestKernelContext duplicate;
  duplicate.inputs = {iota({3}), makeInt64({2}, {0, -3})};
  runFails(duplicate, "Unsqueeze", "twice");
}

// --- Concat, Split --------------------------------------------------------------------------

TEST(TensorOpsConcatTest, NegativeAxisThreeInputsInt32) {
  TestKernelContext ctx;
  ctx.inputs = {makeInt32({2, 1}, {1, 2}), Tensor::allocate(DType::kInt32, {2, 0}),
                makeInt32({2, 2}, {3, 4, 5, 6})};
  ctx.kernel_params.set("axis", intParam(-1));
  runOk(ctx, "Concat");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int32_t>(ctx.outputs[0]), (std::vector<int32_t>{1, 3, 4, 2, 5, 6}));
}

TEST(TensorOpsConcatTest, RejectsMismatch) {
  TestKernelContext ctx;
  ctx.inputs = {iota({2, 3}), iota({3, 3})};
  ctx.kernel_params.set("axis", intParam(1));
  runFails(ctx, "Concat", "does not match");
}

TEST(TensorOpsSplitTest, SizesFromInput) {
  TestKernelContext ctx;
  ctx.num_outputs = 3;
  ctx.inputs = {iota({2, 5}), makeInt64({3}, {2, 0, 3})};
  ctx.kernel_params.set("axis", intParam(-1));
  runOk(ctx, "Split");
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{0, 1, 5, 6}));
  EXPECT_EQ(ctx.outputs[1].shape(), (Shape{2, 0}));
  EXPECT_EQ(values<float>(ctx.outputs[2]), (std::vector<float>{2, 3, 4, 7, 8, 9}));
}

TEST(TensorOpsSplitTest, NumOutputsUnevenLastChunk) {
  TestKernelContext ctx;
  ctx.num_outputs = 3;
  ctx.inputs = {iota({7})};
  ctx.kernel_params.set("num_outputs", intParam(3));
  runOk(ctx, "Split");
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(values<float>(ctx.outputs[1]), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(values<float>(ctx.outputs[2]), (std::vector<float>{6}));
}

TEST(TensorOpsSplitTest, RejectsBadSizes) {
  TestKernelContext ctx;
  ctx.num_outputs = 2;
  ctx.inputs = {iota({5}), makeInt64({2}, {2, 2})};
  runFails(ctx, "Split", "do not split");
}

// --- Slice -----------------------------------------------------------------------------------

TEST(TensorOpsSliceTest, ClampsAndSteps) {
  TestKernelContext ctx;
  ctx.inputs = {iota({3, 10}), makeInt64({2}, {1, -100}), makeInt64({2}, {kInt64Max, 1000}),
                std::nullopt, makeInt64({2}, {1, 3})};
  runOk(ctx, "Slice");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 4}));
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{10, 13, 16, 19, 20, 23, 26, 29}));
}

TEST(TensorOpsSliceTest, NegativeStepToInt64Min) {
  TestKernelContext ctx;
  ctx.inputs = {iota({2, 5}), makeInt64({1}, {-1}), makeInt64({1}, {kInt64Min}),
                makeInt64({1}, {-1}), makeInt64({1}, {-2})};
  runOk(ctx, "Slice");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{4, 2, 0, 9, 7, 5}));
}

TEST(TensorOpsSliceTest, NegativeStepStartPastEnd) {
  TestKernelContext ctx;
  ctx.inputs = {iota({6}), makeInt64({1}, {kInt64Max}), makeInt64({1}, {2}), std::nullopt,
                makeInt64({1}, {-3})};
  runOk(ctx, "Slice");
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{5}));
}

// ONNX clamps a negative-step start to [0, dim - 1], so a start before the beginning still
// takes element 0 (as onnxruntime does; numpy-style slicing would be empty).
TEST(TensorOpsSliceTest, NegativeStepStartBeforeBeginning) {
  TestKernelContext ctx;
  ctx.inputs = {iota({4}), makeInt64({1}, {-10}), makeInt64({1}, {kInt64Min}), std::nullopt,
                makeInt64({1}, {-1})};
  runOk(ctx, "Slice");
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{0}));
}

TEST(TensorOpsSliceTest, EmptyResultAndErrors) {
  TestKernelContext empty;
  empty.inputs = {iota({4}), makeInt64({1}, {3}), makeInt64({1}, {1})};
  runOk(empty, "Slice");
  EXPECT_EQ(empty.outputs[0].shape(), (Shape{0}));

  TestKernelContext zero_step;
  zero_step.inputs = {iota({4}), makeInt64({1}, {0}), makeInt64({1}, {2}), std::nullopt,
                      makeInt64({1}, {0})};
  runFails(zero_step, "Slice", "step is 0");

  TestKernelContext repeated_axis;
  repeated_axis.inputs = {iota({4, 4}), makeInt64({2}, {0, 0}), makeInt64({2}, {2, 2}),
                          makeInt64({2}, {1, -1})};
  runFails(repeated_axis, "Slice", "repeats");
}

// --- Gather family ---------------------------------------------------------------------------

TEST(TensorOpsGatherTest, AxisOneNegativeIndices) {
  TestKernelContext ctx;
  ctx.inputs = {iota({2, 4}), makeInt64({2, 2}, {-1, 0, 2, -4})};
  ctx.kernel_params.set("axis", intParam(1));
  runOk(ctx, "Gather");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{3, 0, 2, 0, 7, 4, 6, 4}));
}

TEST(TensorOpsGatherTest, ScalarIndexOnBool) {
  TestKernelContext ctx;
  ctx.inputs = {makeTensor<uint8_t>(DType::kBool, {3, 2}, {1, 0, 0, 1, 1, 1}), makeInt32({}, {1})};
  runOk(ctx, "Gather");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2}));
  EXPECT_EQ(values<uint8_t>(ctx.outputs[0]), (std::vector<uint8_t>{0, 1}));
}

TEST(TensorOpsGatherTest, RejectsOutOfRangeIndex) {
  TestKernelContext ctx;
  ctx.inputs = {iota({3, 2}), makeInt64({2}, {0, 3})};
  runFails(ctx, "Gather", "index 3 is out of range [-3, 2]");
}

TEST(TensorOpsGatherTest, ShapeOnlyNeedsNoIndices) {
  TestKernelContext ctx;
  ctx.shape_only = true;
  ctx.inputs = {noData(DType::kFloat16, {5, 7}), noData(DType::kInt64, {2, 3})};
  ctx.kernel_params.set("axis", intParam(-1));
  runOk(ctx, "Gather");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{5, 2, 3}));
}

TEST(TensorOpsGatherElementsTest, AxisOne) {
  TestKernelContext ctx;
  ctx.inputs = {iota({3, 3}), makeInt64({2, 2}, {2, -3, 1, 1})};
  ctx.kernel_params.set("axis", intParam(1));
  runOk(ctx, "GatherElements");
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{2, 0, 4, 4}));

  TestKernelContext bad;
  bad.inputs = {iota({3, 3}), makeInt64({1, 1}, {-4})};
  bad.kernel_params.set("axis", intParam(1));
  runFails(bad, "GatherElements", "index -4");
}

TEST(TensorOpsGatherNDTest, BatchDims) {
  TestKernelContext ctx;
  ctx.inputs = {iota({2, 2, 2}), makeInt64({2, 1, 1}, {1, 0})};
  ctx.kernel_params.set("batch_dims", intParam(1));
  runOk(ctx, "GatherND");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{2, 3, 4, 5}));

  TestKernelContext full;
  full.inputs = {iota({2, 3}), makeInt64({2, 2}, {1, -1, 0, 1})};
  runOk(full, "GatherND");
  EXPECT_EQ(values<float>(full.outputs[0]), (std::vector<float>{5, 1}));

  TestKernelContext bad;
  bad.inputs = {iota({2, 3}), makeInt64({1, 2}, {2, 0})};
  runFails(bad, "GatherND", "index 2");
}

// --- Scatter family --------------------------------------------------------------------------

TEST(TensorOpsScatterNDTest, AddWithDuplicatesAndSlices) {
  TestKernelContext ctx;
  ctx.inputs = {iota({3, 2}), makeInt64({3, 1}, {0, -1, 0}),
                makeFloat({3, 2}, {10, 20, 30, 40, 100, 200})};
  ctx.kernel_params.set("reduction", stringParam("add"));
  runOk(ctx, "ScatterND");
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{110, 221, 2, 3, 34, 45}));
}

TEST(TensorOpsScatterNDTest, NoneAndMaxOnInt64) {
  TestKernelContext none;
  none.inputs = {makeInt64({4}, {1, 2, 3, 4}), makeInt64({2, 1}, {3, 1}), makeInt64({2}, {9, 8})};
  runOk(none, "ScatterND");
  EXPECT_EQ(values<int64_t>(none.outputs[0]), (std::vector<int64_t>{1, 8, 3, 9}));

  TestKernelContext max;
  max.inputs = {makeInt64({4}, {1, 2, 3, 4}), makeInt64({2, 1}, {3, 1}), makeInt64({2}, {0, 8})};
  max.kernel_params.set("reduction", stringParam("max"));
  runOk(max, "ScatterND");
  EXPECT_EQ(values<int64_t>(max.outputs[0]), (std::vector<int64_t>{1, 8, 3, 4}));
}

TEST(TensorOpsScatterNDTest, RejectsBadInput) {
  TestKernelContext index;
  index.inputs = {iota({4}), makeInt64({1, 1}, {4}), makeFloat({1}, {1})};
  runFails(index, "ScatterND", "index 4");

  TestKernelContext updates;
  updates.inputs = {iota({4}), makeInt64({1, 1}, {0}), makeFloat({2}, {1, 2})};
  runFails(updates, "ScatterND", "updates must be");

  TestKernelContext reduction;
  reduction.inputs = {iota({4}), makeInt64({1, 1}, {0}), makeFloat({1}, {1})};
  reduction.kernel_params.set("reduction", stringParam("avg"));
  runFails(reduction, "ScatterND", "unknown reduction");
}

TEST(TensorOpsScatterElementsTest, MulOnFloat16AlongAxisOne) {
  auto half = [](std::vector<float> v) {
    std::vector<Float16> bits;
    for (float f : v) bits.push_back(toFloat16(f));
    return bits;
  };
  TestKernelContext ctx;
  ctx.inputs = {makeTensor(DType::kFloat16, {2, 3}, half({1, 2, 3, 4, 5, 6})),
                makeInt64({2, 2}, {-1, -1, 0, 2}),
                makeTensor(DType::kFloat16, {2, 2}, half({2, 0.5, 3, 10}))};
  ctx.kernel_params.set("axis", intParam(1));
  ctx.kernel_params.set("reduction", stringParam("mul"));
  runOk(ctx, "ScatterElements");
  std::vector<float> out;
  for (Float16 h : values<Float16>(ctx.outputs[0])) out.push_back(toFloat(h));
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 12, 5, 60}));
}

TEST(TensorOpsScatterElementsTest, NoneAndErrors) {
  TestKernelContext ctx;
  ctx.inputs = {iota({3, 2}), makeInt32({1, 2}, {2, 0}), makeFloat({1, 2}, {-1, -2})};
  runOk(ctx, "ScatterElements");
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{0, -2, 2, 3, -1, 5}));

  TestKernelContext bad;
  bad.inputs = {iota({3, 2}), makeInt32({1, 2}, {2, -4}), makeFloat({1, 2}, {-1, -2})};
  runFails(bad, "ScatterElements", "index -4");
}

// --- Expand, Tile, Pad -----------------------------------------------------------------------

TEST(TensorOpsExpandTest, BroadcastsBothWays) {
  TestKernelContext ctx;
  ctx.inputs = {makeInt32({3, 1}, {1, 2, 3}), makeInt64({3}, {2, 1, 2})};
  runOk(ctx, "Expand");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values<int32_t>(ctx.outputs[0]),
            (std::vector<int32_t>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));

  TestKernelContext bad;
  bad.inputs = {iota({3}), makeInt64({1}, {2})};
  runFails(bad, "Expand", "do not broadcast");
}

TEST(TensorOpsTileTest, RepeatsEachDim) {
  TestKernelContext ctx;
  ctx.inputs = {iota({2, 2}), makeInt64({2}, {2, 3})};
  runOk(ctx, "Tile");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{4, 6}));
  std::vector<float> out = values<float>(ctx.outputs[0]);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(out[i * 6 + j], (i % 2) * 2 + j % 2);

  TestKernelContext bad;
  bad.inputs = {iota({2, 2}), makeInt64({1}, {2})};
  runFails(bad, "Tile", "entries");
}

TEST(TensorOpsPadTest, ConstantWithValueAndCrop) {
  TestKernelContext ctx;
  ctx.inputs = {iota({2, 3}), makeInt64({4}, {1, -1, 0, 1}), makeFloat({}, {9})};
  runOk(ctx, "Pad");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{3, 3}));
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{9, 9, 9, 1, 2, 9, 4, 5, 9}));
}

TEST(TensorOpsPadTest, ReflectEdgeWrapOnOneAxis) {
  const std::vector<std::pair<std::string, std::vector<float>>> cases = {
      {"reflect", {2, 1, 0, 1, 2, 1, 0}},
      {"edge", {0, 0, 0, 1, 2, 2, 2}},
      {"wrap", {1, 2, 0, 1, 2, 0, 1}},
  };
  for (const auto& [mode, expected] : cases) {
    TestKernelContext ctx;
    ctx.inputs = {iota({1, 3}), makeInt64({2}, {2, 2}), std::nullopt, makeInt64({1}, {-1})};
    ctx.kernel_params.set("mode", stringParam(mode));
    runOk(ctx, "Pad");
    EXPECT_EQ(values<float>(ctx.outputs[0]), expected) << mode;
  }
}

TEST(TensorOpsPadTest, ReflectBeyondDimAndErrors) {
  TestKernelContext ctx;
  ctx.inputs = {makeTensor<uint8_t>(DType::kUInt8, {3}, {1, 2, 3}), makeInt64({2}, {5, 0})};
  ctx.kernel_params.set("mode", stringParam("reflect"));
  runOk(ctx, "Pad");
  EXPECT_EQ(values<uint8_t>(ctx.outputs[0]), (std::vector<uint8_t>{2, 1, 2, 3, 2, 1, 2, 3}));

  TestKernelContext count;
  count.inputs = {iota({2, 3}), makeInt64({2}, {1, 1})};
  runFails(count, "Pad", "twice as many");

  TestKernelContext crop;
  crop.inputs = {iota({2, 3}), makeInt64({4}, {0, -4, 0, 0})};
  runFails(crop, "Pad", "crop");

  TestKernelContext dtype;
  dtype.inputs = {iota({2}), makeInt64({2}, {1, 1}), makeInt64({}, {1})};
  runFails(dtype, "Pad", "constant_value");
}

// --- Shape, Size, ConstantOfShape, Range -----------------------------------------------------

TEST(TensorOpsShapeTest, StartEndClamped) {
  TestKernelContext ctx;
  ctx.inputs = {iota({2, 3, 4, 5})};
  ctx.kernel_params.set("start", intParam(-3));
  ctx.kernel_params.set("end", intParam(100));
  runOk(ctx, "Shape");
  EXPECT_EQ(values<int64_t>(ctx.outputs[0]), (std::vector<int64_t>{3, 4, 5}));

  TestKernelContext empty;
  empty.inputs = {iota({2, 3})};
  empty.kernel_params.set("start", intParam(2));
  empty.kernel_params.set("end", intParam(1));
  runOk(empty, "Shape");
  EXPECT_EQ(empty.outputs[0].shape(), (Shape{0}));
}

TEST(TensorOpsShapeTest, ShapeOnlyAndSize) {
  TestKernelContext shape;
  shape.shape_only = true;
  shape.inputs = {noData(DType::kFloat32, {2, 3, 4})};
  runOk(shape, "Shape");
  EXPECT_EQ(shape.outputs[0].shape(), (Shape{3}));
  EXPECT_EQ(shape.outputs[0].dtype(), DType::kInt64);

  TestKernelContext size;
  size.inputs = {iota({2, 3, 4})};
  runOk(size, "Size");
  EXPECT_EQ(size.outputs[0].shape(), Shape{});
  EXPECT_EQ(values<int64_t>(size.outputs[0]), (std::vector<int64_t>{24}));
}

TEST(TensorOpsConstantOfShapeTest, ValueAndDefault) {
  TestKernelContext ctx;
  ctx.inputs = {makeInt64({2}, {2, 3})};
  ctx.kernel_params.set("value", tensorParam(makeInt32({1}, {-7})));
  runOk(ctx, "ConstantOfShape");
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kInt32);
  EXPECT_EQ(values<int32_t>(ctx.outputs[0]), std::vector<int32_t>(6, -7));

  TestKernelContext scalar;
  scalar.inputs = {Tensor::allocate(DType::kInt64, {0})};
  runOk(scalar, "ConstantOfShape");
  EXPECT_EQ(scalar.outputs[0].shape(), Shape{});
  EXPECT_EQ(scalar.outputs[0].dtype(), DType::kFloat32);
  EXPECT_EQ(values<float>(scalar.outputs[0]), (std::vector<float>{0}));

  TestKernelContext bad;
  bad.inputs = {makeInt64({2}, {2, -1})};
  runFails(bad, "ConstantOfShape", "negative dim");
}

TEST(TensorOpsRangeTest, IntegerAndFloat) {
  TestKernelContext ints;
  ints.inputs = {makeInt32({}, {10}), makeInt32({}, {3}), makeInt32({}, {-3})};
  runOk(ints, "Range");
  EXPECT_EQ(values<int32_t>(ints.outputs[0]), (std::vector<int32_t>{10, 7, 4}));

  TestKernelContext floats;
  floats.inputs = {makeFloat({}, {1}), makeFloat({}, {2}), makeFloat({}, {0.3f})};
  runOk(floats, "Range");
  ASSERT_EQ(floats.outputs[0].shape(), (Shape{4}));
  EXPECT_FLOAT_EQ(values<float>(floats.outputs[0])[3], 1.9f);

  TestKernelContext empty;
  empty.inputs = {makeInt64({}, {5}), makeInt64({}, {1}), makeInt64({}, {2})};
  runOk(empty, "Range");
  EXPECT_EQ(empty.outputs[0].shape(), (Shape{0}));
}

TEST(TensorOpsRangeTest, ErrorsAndShapeOnly) {
  TestKernelContext zero;
  zero.inputs = {makeInt64({}, {0}), makeInt64({}, {5}), makeInt64({}, {0})};
  runFails(zero, "Range", "delta");

  TestKernelContext mixed;
  mixed.inputs = {makeInt64({}, {0}), makeInt32({}, {5}), makeInt64({}, {1})};
  runFails(mixed, "Range", "differ in dtype");

  TestKernelContext unknown;
  unknown.shape_only = true;
  unknown.inputs = {makeFloat({}, {0}), noData(DType::kFloat32, {}), makeFloat({}, {1})};
  EXPECT_EQ(unknown.run("Range").code(), StatusCode::kUnavailable);
}

// --- Identity, Dropout, Trilu, OneHot --------------------------------------------------------

TEST(TensorOpsIdentityTest, CopiesBFloat16) {
  TestKernelContext ctx;
  ctx.inputs = {makeTensor<uint16_t>(DType::kBFloat16, {3}, {0x3f80, 0xc000, 0x7fc0})};
  runOk(ctx, "Identity");
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kBFloat16);
  EXPECT_EQ(values<uint16_t>(ctx.outputs[0]), (std::vector<uint16_t>{0x3f80, 0xc000, 0x7fc0}));
}

TEST(TensorOpsDropoutTest, InferenceIsIdentityWithTrueMask) {
  TestKernelContext ctx;
  ctx.num_outputs = 2;
  ctx.inputs = {iota({2, 2}), makeFloat({}, {0.9f})};
  runOk(ctx, "Dropout");
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(ctx.outputs[1].dtype(), DType::kBool);
  EXPECT_EQ(values<uint8_t>(ctx.outputs[1]), std::vector<uint8_t>(4, 1));
}

TEST(TensorOpsDropoutTest, TrainingDropsAndScales) {
  TestKernelContext ctx;
  ctx.num_outputs = 2;
  ctx.inputs = {makeFloat({64}, std::vector<float>(64, 1.0f)), makeFloat({}, {0.75f}),
                makeTensor<uint8_t>(DType::kBool, {}, {1})};
  runOk(ctx, "Dropout");
  std::vector<float> out = values<float>(ctx.outputs[0]);
  std::vector<uint8_t> mask = values<uint8_t>(ctx.outputs[1]);
  int kept = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i], mask[i] ? 4.0f : 0.0f);
    kept += mask[i];
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 40);
}

TEST(TensorOpsTriluTest, UpperAndLowerBatched) {
  TestKernelContext upper;
  upper.inputs = {iota({2, 2, 3}), makeInt64({}, {1})};
  runOk(upper, "Trilu");
  EXPECT_EQ(values<float>(upper.outputs[0]),
            (std::vector<float>{0, 1, 2, 0, 0, 5, 0, 7, 8, 0, 0, 11}));

  TestKernelContext lower;
  lower.inputs = {makeInt64({3, 2}, {1, 2, 3, 4, 5, 6}), makeInt64({}, {-1})};
  lower.kernel_params.set("upper", intParam(0));
  runOk(lower, "Trilu");
  EXPECT_EQ(values<int64_t>(lower.outputs[0]), (std::vector<int64_t>{0, 0, 3, 0, 5, 6}));

  TestKernelContext bad;
  bad.inputs = {iota({3})};
  runFails(bad, "Trilu", "rank >= 2");
}

TEST(TensorOpsOneHotTest, AxisZeroNegativeAndOutOfRangeIndices) {
  TestKernelContext ctx;
  ctx.inputs = {makeInt64({3}, {1, -1, 7}), makeFloat({}, {3.0f}), makeInt32({2}, {-5, 5})};
  ctx.kernel_params.set("axis", intParam(0));
  runOk(ctx, "OneHot");
  EXPECT_EQ(ctx.outputs[0].shape(), (Shape{3, 3}));
  EXPECT_EQ(ctx.outputs[0].dtype(), DType::kInt32);
  EXPECT_EQ(values<int32_t>(ctx.outputs[0]),
            (std::vector<int32_t>{-5, -5, -5, 5, -5, -5, -5, 5, -5}));
}

TEST(TensorOpsOneHotTest, DefaultAxisFloatIndicesAndErrors) {
  TestKernelContext ctx;
  ctx.inputs = {makeFloat({2}, {0.0f, 2.7f}), makeInt64({1}, {4}), makeFloat({2}, {0, 1})};
  runOk(ctx, "OneHot");
  EXPECT_EQ(values<float>(ctx.outputs[0]), (std::vector<float>{1, 0, 0, 0, 0, 0, 1, 0}));

  TestKernelContext depth;
  depth.inputs = {makeInt64({1}, {0}), makeInt64({}, {0}), makeFloat({2}, {0, 1})};
  runFails(depth, "OneHot", "depth");

  TestKernelContext unknown;
  unknown.shape_only = true;
  unknown.inputs = {noData(DType::kInt64, {2}), noData(DType::kInt64, {}),
                    noData(DType::kFloat32, {2})};
  EXPECT_EQ(unknown.run("OneHot").code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace llmc::testing

namespace llmc::testing {
namespace {

// NonZero: [rank, count] indices in row-major order; -0 is zero and NaN is not (as ONNX
// Runtime and numpy count them); an all-zero input gives [rank, 0]; bool and int inputs.
TEST(TensorOpsNonZeroTest, RowMajorIndicesOfEveryDType) {
  Tensor x = makeTensor<float>(DType::kFloat32, {2, 3}, {0.0f, 1.5f, -0.0f, NAN, 0.0f, -2.0f});
  EXPECT_EQ(values<int64_t>(runKernel("NonZero", {x})), (std::vector<int64_t>{0, 1, 1, 1, 0, 2}));
  EXPECT_EQ(runKernel("NonZero", {x}).shape(), (Shape{2, 3}));
  Tensor none = makeTensor<int64_t>(DType::kInt64, {4}, {0, 0, 0, 0});
  EXPECT_EQ(runKernel("NonZero", {none}).shape(), (Shape{1, 0}));
  Tensor mask = makeTensor<uint8_t>(DType::kBool, {2, 2}, {1, 0, 0, 1});
  EXPECT_EQ(values<int64_t>(runKernel("NonZero", {mask})), (std::vector<int64_t>{0, 1, 0, 1}));
  Tensor scalar = makeTensor<int32_t>(DType::kInt32, {}, {7});
  EXPECT_EQ(runKernel("NonZero", {scalar}).shape(), (Shape{1, 1}));  // as ONNX Runtime
  TestKernelContext unknown;  // no data at compile time: the shape is left to run time
  unknown.shape_only = true;
  unknown.inputs = {noData(DType::kFloat32, {2, 3})};
  EXPECT_EQ(unknown.run("NonZero").code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace llmc::testing
