// The CUDA kernels against the CPU reference kernels on random data, odd and ragged sizes
// included (kernels.h). Every test skips when no GPU is usable.
#include <gtest/gtest.h>

#include "cuda/kernels.h"
#include "cuda_test_util.h"

namespace llmc::testing {
namespace {

using NormTest = CudaTest;

TEST_F(NormTest, MatchesCpuLlmNorm) {
  uint32_t seed = 1;
  for (Shape shape : {Shape{1, 1}, Shape{3, 7}, Shape{5, 64}, Shape{2, 4096}, Shape{17, 1000}})
    for (bool rms : {true, false})
      for (bool with_residual : {false, true}) {
        const int64_t rows = shape[0], width = shape[1];
        Tensor x = randomTensor(shape, seed++), r = randomTensor(shape, seed++);
        Tensor gamma = randomTensor({width}, seed++), beta = randomTensor({width}, seed++);
        KernelParams p;
        p.set("kind", stringParam(rms ? "rms" : "layer"));
        p.set("epsilon", floatParam(1e-5));
        std::optional<Tensor> residual;
        if (with_residual) residual = r;
        Tensor want = runCpuKernel("LlmNorm", {x, residual, gamma, beta}, p, 2, 0);
        DeviceBuffer dx(x), dr(r), dg(gamma), db(beta), dy(rows * width), ds(rows * width);
        cuda::NormParams params;
        params.x = dx.get();
        params.residual = with_residual ? dr.get() : nullptr;
        params.scale = dg.get();
        params.bias = db.get();
        params.y = dy.get();
        params.sum = with_residual ? ds.get() : nullptr;
        params.rows = rows;
        params.width = width;
        params.epsilon = 1e-5f;
        params.rms = rms;
        ASSERT_TRUE(cuda::launchNorm(params, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_LT(relativeL2(dy.toHost(shape), want), 1e-5)
            << (rms ? "rms " : "layer ") << shapeToString(shape) << (with_residual ? " +residual" : "");
        if (with_residual) {
          Tensor sum = runCpuKernel("LlmNorm", {x, residual, gamma, beta}, p, 2, 1);
          EXPECT_LT(relativeL2(ds.toHost(shape), sum), 1e-7);
        }
      }
}

TEST(NormParamsTest, CheckRefusesMissingBuffers) {
  cuda::NormParams params;
  EXPECT_FALSE(params.check().ok());  // needs no GPU
}

using RopeTest = CudaTest;

TEST_F(RopeTest, MatchesCpuLlmRopeTablesAndCaches) {
  const int64_t batch = 2, heads = 3, tokens = 5, head_dim = 16, width = 3 * 16 + 8;
  for (bool token_major : {false, true})
    for (bool tables : {true, false}) {
      Tensor x = token_major ? randomTensor({batch, tokens, width}, 10) : randomTensor({batch, heads, tokens, head_dim}, 11);
      Tensor cos = tables ? randomTensor({1, 1, tokens, head_dim}, 12) : randomTensor({9, head_dim / 2}, 13);
      Tensor sin = tables ? randomTensor({1, 1, tokens, head_dim}, 14) : randomTensor({9, head_dim / 2}, 15);
      Tensor positions = makeInt64({tokens}, {4, 0, 8, 3, 3});
      KernelParams p;
      if (token_major) {
        p.set("num_heads", intParam(heads));
        p.set("head_dim", intParam(head_dim));
      }
      std::optional<Tensor> cpu_positions;
      if (!tables) cpu_positions = positions;
      Tensor want = runCpuKernel("LlmRope", {x, cpu_positions, cos, sin}, p);
      DeviceBuffer dx(x), dc(cos), ds(sin), dp(positions);
      cuda::RopeParams params;
      params.x = dx.get();
      params.positions = tables ? nullptr : dp.as<int64_t>();
      params.cos = dc.get();
      params.sin = ds.get();
      params.batch = batch;
      params.rotated_heads = heads;
      params.tokens = tokens;
      params.head_dim = head_dim;
      params.row_width = token_major ? width : 0;
      params.max_positions = 9;
      ASSERT_TRUE(cuda::launchRope(params, nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LT(relativeL2(dx.toHost(x.shape()), want), 1e-6)
          << (token_major ? "token-major " : "head-major ") << (tables ? "tables" : "caches");
    }
}

TEST(DeviceTest, ProbeSaysWhyWhenThereIsNoGpu) {
  cuda::DeviceInfo info;
  Status status = cuda::probeDevice(&info);
  if (status.ok()) {
    EXPECT_GE(info.sm_major, 8);
    EXPECT_TRUE(cuda::checkTarget(info, "cuda-sm80").ok());
    EXPECT_FALSE(cuda::checkTarget(info, "cpu").ok());
  } else {
    EXPECT_FALSE(status.message().empty());
    EXPECT_TRUE(status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kFailedPrecondition)
        << status.message();
  }
}

}  // namespace
}  // namespace llmc::testing
