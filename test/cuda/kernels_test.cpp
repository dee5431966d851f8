// The CUDA kernels against the CPU reference kernels on random data, odd and ragged sizes
// included (kernels.h). Every test skips when no GPU is usable.
#include "cuda/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <tuple>

#include "core/half.h"
#include "cuda/cublas_status.h"
#include "cuda/cublaslt_api.h"
#include "cuda/flash_attention.h"
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
        Tensor x = randomFloat(shape, seed++), r = randomFloat(shape, seed++);
        Tensor gamma = randomFloat({width}, seed++), beta = randomFloat({width}, seed++);
        KernelParams p;
        p.set("kind", stringParam(rms ? "rms" : "layer"));
        p.set("epsilon", floatParam(1e-5));
        std::optional<Tensor> residual;
        if (with_residual) residual = r;
        Tensor want = runKernel("LlmNorm", {x, residual, gamma, beta}, p, 2, 0);
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
          Tensor sum = runKernel("LlmNorm", {x, residual, gamma, beta}, p, 2, 1);
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
      Tensor x = token_major ? randomFloat({batch, tokens, width}, 10) : randomFloat({batch, heads, tokens, head_dim}, 11);
      Tensor cos = tables ? randomFloat({1, 1, tokens, head_dim}, 12) : randomFloat({9, head_dim / 2}, 13);
      Tensor sin = tables ? randomFloat({1, 1, tokens, head_dim}, 14) : randomFloat({9, head_dim / 2}, 15);
      Tensor positions = makeInt64({tokens}, {4, 0, 8, 3, 3});
      KernelParams p;
      if (token_major) {
        p.set("num_heads", intParam(heads));
        p.set("head_dim", intParam(head_dim));
      }
      std::optional<Tensor> cpu_positions;
      if (!tables) cpu_positions = positions;
      Tensor want = runKernel("LlmRope", {x, cpu_positions, cos, sin}, p);
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

// cuBLASLt is loaded on first use (cuda/cublaslt_api.h), which needs no GPU: where the CUDA
// backend is built, the library it was built against loads with every entry point, and a failed
// call's status reads as cuBLASLt names it.
TEST(CublasLtLoaderTest, LoadsEveryEntryPoint) {
  const cuda::CublasLt* lt = nullptr;
  const Status status = cuda::loadCublasLt(&lt);
  ASSERT_TRUE(status.ok()) << status.message();
  for (const void* entry :
       {reinterpret_cast<const void*>(lt->create), reinterpret_cast<const void*>(lt->destroy),
        reinterpret_cast<const void*>(lt->statusName),
        reinterpret_cast<const void*>(lt->statusString),
        reinterpret_cast<const void*>(lt->matmulDescCreate),
        reinterpret_cast<const void*>(lt->matmulDescDestroy),
        reinterpret_cast<const void*>(lt->matmulDescSetAttribute),
        reinterpret_cast<const void*>(lt->matrixLayoutCreate),
        reinterpret_cast<const void*>(lt->matrixLayoutDestroy),
        reinterpret_cast<const void*>(lt->preferenceCreate),
        reinterpret_cast<const void*>(lt->preferenceDestroy),
        reinterpret_cast<const void*>(lt->preferenceSetAttribute),
        reinterpret_cast<const void*>(lt->algoGetHeuristic),
        reinterpret_cast<const void*>(lt->matmul)})
    EXPECT_NE(entry, nullptr);
  EXPECT_EQ(std::string(lt->statusName(CUBLAS_STATUS_SUCCESS)), "CUBLAS_STATUS_SUCCESS");
  const Status invalid = cuda::cublasStatus(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul");
  EXPECT_EQ(invalid.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(invalid.message().find("cublasLtMatmul: CUBLAS_STATUS_INVALID_VALUE ("),
            std::string::npos)
      << invalid.message();
  const cuda::CublasLt* again = nullptr;
  ASSERT_TRUE(cuda::loadCublasLt(&again).ok());
  EXPECT_EQ(again, lt);
}

class MatMulTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    const cuda::CublasLt* lt = nullptr;
    ASSERT_TRUE(cuda::loadCublasLt(&lt).ok());
    ASSERT_EQ(lt->create(&handle_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaMalloc(&workspace_, cuda::matMulWorkspaceBytes()), cudaSuccess);
  }
  void TearDown() override {
    if (handle_) cuda::cublasLt().destroy(handle_);
    if (workspace_) cudaFree(workspace_);
  }
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
};

TEST_F(MatMulTest, MatchesCpuLlmFusedMatMul) {
  struct Case {
    int64_t m, k, n;
  };
  uint32_t seed = 100;
  for (Case c : {Case{1, 64, 256}, Case{7, 33, 65}, Case{128, 256, 512}, Case{3, 1, 1}})
    for (const char* act : {"none", "relu", "gelu_erf", "gelu_tanh", "silu", "sigmoid", "tanh"})
      for (bool trans_b : {false, true})
        for (bool with_bias : {true, false}) {
          Tensor a = randomFloat({c.m, c.k}, seed++);
          Tensor b = trans_b ? randomFloat({c.n, c.k}, seed++) : randomFloat({c.k, c.n}, seed++);
          Tensor bias = randomFloat({c.n}, seed++);
          KernelParams p;
          p.set("activation", stringParam(act));
          p.set("trans_b", intParam(trans_b));
          p.set("alpha", floatParam(0.5));
          std::optional<Tensor> cpu_bias;
          if (with_bias) cpu_bias = bias;
          Tensor want = runKernel("LlmFusedMatMul", {a, b, cpu_bias}, p);
          DeviceBuffer da(a), db(b), dbias(bias), dy(c.m * c.n);
          cuda::MatMulParams params;
          params.handle = handle_;
          params.a = da.get();
          params.b = db.get();
          params.bias = with_bias ? dbias.get() : nullptr;
          params.y = dy.get();
          params.m = c.m;
          params.n = c.n;
          params.k = c.k;
          params.trans_b = trans_b;
          params.alpha = 0.5f;
          params.activation = act;
          params.workspace = workspace_;
          params.workspace_bytes = cuda::matMulWorkspaceBytes();
          Status status = cuda::launchMatMul(params, nullptr);
          ASSERT_TRUE(status.ok()) << status.message();
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          EXPECT_LT(relativeL2(dy.toHost({c.m, c.n}), want), 1e-5)
              << act << " m=" << c.m << " k=" << c.k << " n=" << c.n << " trans_b=" << trans_b
              << " bias=" << with_bias;
        }
}

// bfloat16 and float16 operands (the --precision bf16/fp16 path): the activations rounded on the
// device (launchConvert), the weight rounded on the host; the CPU multiplies the same rounded
// values in float32, so only the summation order differs.
TEST_F(MatMulTest, HalfOperandsMatchCpuOnRoundedValues) {
  uint32_t seed = 900;
  for (DType dtype : {DType::kBFloat16, DType::kFloat16})
    for (bool trans_b : {false, true}) {
      const int64_t m = 6, k = 72, n = 40;
      Tensor a = randomFloat({m, k}, seed++);
      Tensor b = trans_b ? randomFloat({n, k}, seed++) : randomFloat({k, n}, seed++);
      Tensor b_half = Tensor::allocate(dtype, b.shape());
      auto round = [&](float v, int64_t i, Tensor* out) {
        if (dtype == DType::kBFloat16) {
          if (out) out->data<BFloat16>()[i] = toBFloat16(v);
          return toFloat(toBFloat16(v));
        }
        if (out) out->data<Float16>()[i] = toFloat16(v);
        return toFloat(toFloat16(v));
      };
      Tensor a_rounded = a.clone(), b_rounded = b.clone();
      for (int64_t i = 0; i < a.numElements(); ++i) a_rounded.data<float>()[i] = round(a.data<float>()[i], i, nullptr);
      for (int64_t i = 0; i < b.numElements(); ++i) b_rounded.data<float>()[i] = round(b.data<float>()[i], i, &b_half);
      KernelParams p;
      p.set("trans_b", intParam(trans_b));
      Tensor want = runKernel("LlmFusedMatMul", {a_rounded, b_rounded}, p);
      DeviceBuffer da(a), db(b_half), dy(m * n), da_half(m * k);  // m * k floats hold m * k halves
      cuda::ConvertParams convert;
      convert.x = da.get();
      convert.y = da_half.get();
      convert.count = m * k;
      convert.dtype = dtype;
      ASSERT_TRUE(cuda::launchConvert(convert, nullptr).ok());
      cuda::MatMulParams params;
      params.handle = handle_;
      params.a = da_half.get();
      params.b = db.as<void>();
      params.input_dtype = dtype;
      params.y = dy.get();
      params.m = m, params.n = n, params.k = k;
      params.trans_b = trans_b;
      params.workspace = workspace_;
      params.workspace_bytes = cuda::matMulWorkspaceBytes();
      Status status = cuda::launchMatMul(params, nullptr);
      ASSERT_TRUE(status.ok()) << status.message();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LT(relativeL2(dy.toHost({m, n}), want), 1e-5) << dtypeName(dtype) << " trans_b=" << trans_b;
    }
}

using SoftmaxGpuTest = CudaTest;

TEST_F(SoftmaxGpuTest, MatchesCpuSoftmaxAndLogSoftmax) {
  uint32_t seed = 950;
  for (Shape shape : {Shape{1, 1}, Shape{3, 7}, Shape{2, 5, 1000}, Shape{4, 32000}})
    for (bool log : {false, true}) {
      Tensor x = randomFloat(shape, seed++);
      for (int64_t i = 0; i < x.numElements(); i += 3) x.data<float>()[i] *= 20.0f;  // large logits
      Tensor want = runKernel(log ? "LogSoftmax" : "Softmax", {x});
      const int64_t width = shape.back();
      DeviceBuffer dx(x), dy(x.numElements());
      cuda::SoftmaxParams p;
      p.x = dx.get();
      p.y = dy.get();
      p.width = width;
      p.rows = x.numElements() / width;
      p.log = log;
      ASSERT_TRUE(cuda::launchSoftmax(p, nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LT(relativeL2(dy.toHost(shape), want), 1e-5) << (log ? "log " : "") << shapeToString(shape);
    }
}

using GateTest = CudaTest;

TEST_F(GateTest, GatedActivationMatchesCpuLlmGatedMlp) {
  const int64_t rows = 9, k = 24, f = 37;
  Tensor x = randomFloat({rows, k}, 200), w = randomFloat({k, 2 * f}, 201);
  KernelParams p;
  p.set("activation", stringParam("silu"));
  Tensor want = runKernel("LlmGatedMlp", {x, w}, p);
  Tensor h = runKernel("MatMul", {x, w}, {});
  DeviceBuffer dh(h), dy(rows * f);
  cuda::ActivationParams params;
  params.y = dy.get();
  params.gate_up = dh.get();
  params.rows = rows;
  params.width = f;
  params.activation = "silu";
  ASSERT_TRUE(cuda::launchActivation(params, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LT(relativeL2(dy.toHost({rows, f}), want), 1e-5);
}

using EmbeddingTest = CudaTest;

TEST_F(EmbeddingTest, MatchesCpuGather) {
  Tensor table = randomFloat({50, 33}, 300);
  Tensor ids = makeInt64({2, 3}, {0, 49, 7, 7, 12, 1});
  Tensor want = runKernel("Gather", {table, ids}, {});
  DeviceBuffer dt(table), di(ids), dy(6 * 33);
  cuda::EmbeddingParams params;
  params.table = dt.get();
  params.ids = di.as<int64_t>();
  params.y = dy.get();
  params.vocab = 50;
  params.tokens = 6;
  params.width = 33;
  ASSERT_TRUE(cuda::launchEmbedding(params, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(relativeL2(dy.toHost({2, 3, 33}), want), 0.0);
}

using ArgmaxTest = CudaTest;

TEST_F(ArgmaxTest, PicksTheFirstMaximumOfEachRow) {
  const int64_t rows = 5, vocab = 32003;
  Tensor logits = randomFloat({rows, vocab}, 400);
  logits.data<float>()[2 * vocab + 17] = 100.0f;  // a tie in row 2: index 17 wins over 20000
  logits.data<float>()[2 * vocab + 20000] = 100.0f;
  std::vector<int32_t> want(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data<float>() + r * vocab;
    want[r] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
  }
  DeviceBuffer dl(logits), di(rows);
  cuda::ArgmaxParams params;
  params.logits = dl.get();
  params.ids = di.as<int32_t>();
  params.rows = rows;
  params.vocab = vocab;
  ASSERT_TRUE(cuda::launchArgmax(params, nullptr).ok());
  std::vector<int32_t> got(rows);
  ASSERT_EQ(cudaMemcpy(got.data(), di.get(), rows * sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, want);
}

TEST_F(MatMulTest, AlgorithmCacheAsksOncePerShape) {
  cuda::MatMulAlgoCache cache;
  Tensor a = randomFloat({4, 16}, 1100), b = randomFloat({16, 8}, 1101);
  KernelParams p;
  p.set("activation", stringParam("none"));
  Tensor want = runKernel("LlmFusedMatMul", {a, b, std::nullopt}, p);
  DeviceBuffer da(a), db(b), dy(32);
  cuda::MatMulParams params;
  params.handle = handle_;
  params.a = da.get();
  params.b = db.get();
  params.y = dy.get();
  params.m = 4;
  params.n = 8;
  params.k = 16;
  params.workspace = workspace_;
  params.workspace_bytes = cuda::matMulWorkspaceBytes();
  params.algo_cache = &cache;
  for (int run = 0; run < 3; ++run) ASSERT_TRUE(cuda::launchMatMul(params, nullptr).ok());
  EXPECT_EQ(cache.size(), 1u);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LT(relativeL2(dy.toHost({4, 8}), want), 1e-5);
}

TEST(MatMulAlgoCacheTest, FindsWhatWasInsertedByShape) {  // needs no GPU
  cuda::MatMulAlgoCache cache;
  cublasLtMatmulAlgo_t first{}, second{};
  first.data[0] = 11;
  second.data[0] = 22;
  cache.insert({8, 4, 16, 4, 0}, first);
  cache.insert({1, 4, 16, 4, 2}, second);
  cache.insert({8, 4, 16, 4, 0}, second);  // replaces
  ASSERT_NE(cache.find({1, 4, 16, 4, 2}), nullptr);
  EXPECT_EQ(cache.find({1, 4, 16, 4, 2})->data[0], 22u);
  EXPECT_EQ(cache.find({8, 4, 16, 4, 0})->data[0], 22u);
  EXPECT_EQ(cache.find({8, 4, 16, 4, 1}), nullptr);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(KernelParamsTest, ChecksRefuseBadInputWithoutAGpu) {
  cuda::MatMulParams matmul;
  EXPECT_FALSE(matmul.check().ok());
  cuda::ActivationParams activation;
  float y = 0;
  activation.y = &y;
  activation.activation = "swish2";
  EXPECT_NE(activation.check().message().find("unknown activation 'swish2'"), std::string::npos);
  cuda::EmbeddingParams embedding;
  EXPECT_FALSE(embedding.check().ok());
  cuda::ArgmaxParams argmax;
  EXPECT_FALSE(argmax.check().ok());
}


using PagedAttentionTest = CudaTest;

// KV append, then attention: two sequences prefilled in one ragged step, their blocks scattered
// through the pool, GQA (4 query heads over 2 KV heads): equal to the CPU LlmAttention over each
// whole sequence (test/cuda/flash_attention_test.cpp covers the attention kernel's cases).
TEST_F(PagedAttentionTest, RaggedStepMatchesCpuCausalAttention) {
  const int64_t heads = 4, kv_heads = 2, d = 8, block_size = 4, num_blocks = 8, layers = 2;
  const std::vector<int64_t> lengths = {9, 20};
  const std::vector<std::vector<int32_t>> tables = {{5, 2, 7}, {0, 3, 6, 1, 4}};
  const int64_t max_blocks = 5;
  std::vector<int32_t> token_sequence, token_position, token_block, token_offset, flat_tables;
  for (size_t s = 0; s < lengths.size(); ++s) {
    for (int64_t p = 0; p < lengths[s]; ++p) {
      token_sequence.push_back(static_cast<int32_t>(s));
      token_position.push_back(static_cast<int32_t>(p));
      token_block.push_back(tables[s][static_cast<size_t>(p / block_size)]);
      token_offset.push_back(static_cast<int32_t>(p % block_size));
    }
    std::vector<int32_t> row = tables[s];
    row.resize(max_blocks, 0);
    flat_tables.insert(flat_tables.end(), row.begin(), row.end());
  }
  const int64_t tokens = static_cast<int64_t>(token_sequence.size());
  // Head-major per sequence for the CPU, token-major rows for the GPU.
  std::vector<Tensor> want_rows;
  Tensor q_rows = Tensor::allocate(DType::kFloat32, {tokens, heads * d});
  Tensor k_rows = Tensor::allocate(DType::kFloat32, {tokens, kv_heads * d});
  Tensor v_rows = Tensor::allocate(DType::kFloat32, {tokens, kv_heads * d});
  Tensor want = Tensor::allocate(DType::kFloat32, {tokens, heads * d});
  int64_t first = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int64_t len = lengths[s];
    Tensor q = randomFloat({1, heads, len, d}, 500 + s), k = randomFloat({1, kv_heads, len, d}, 600 + s),
           v = randomFloat({1, kv_heads, len, d}, 700 + s);
    KernelParams p;
    p.set("layer", intParam(1));
    p.set("scale", floatParam(0.35));
    Tensor out = runKernel("LlmAttention", {q, k, v}, p);
    auto scatter = [&](const Tensor& head_major, Tensor& rows, int64_t n_heads) {
      for (int64_t h = 0; h < n_heads; ++h)
        for (int64_t t = 0; t < len; ++t)
          for (int64_t e = 0; e < d; ++e)
            rows.data<float>()[(first + t) * n_heads * d + h * d + e] = head_major.data<float>()[(h * len + t) * d + e];
    };
    scatter(q, q_rows, heads);
    scatter(k, k_rows, kv_heads);
    scatter(v, v_rows, kv_heads);
    scatter(out, want, heads);
    first += len;
  }
  const int64_t pool = num_blocks * layers * kv_heads * block_size * d;
  DeviceBuffer keys(pool), values(pool), dq(q_rows), dk(k_rows), dv(v_rows), dout(tokens * heads * d);
  auto ints = [](const std::vector<int32_t>& v) { return makeTensor(DType::kInt32, {static_cast<int64_t>(v.size())}, v); };
  DeviceBuffer dseq(ints(token_sequence)), dpos(ints(token_position)), dblock(ints(token_block)),
      doff(ints(token_offset)), dtables(ints(flat_tables));
  cuda::PagedKvParams kv;
  kv.key_cache = keys.get();
  kv.value_cache = values.get();
  kv.num_layers = layers;
  kv.layer = 1;
  kv.kv_heads = kv_heads;
  kv.head_dim = d;
  kv.block_size = block_size;
  kv.token_sequence = dseq.as<int32_t>();
  kv.token_position = dpos.as<int32_t>();
  kv.token_block = dblock.as<int32_t>();
  kv.token_offset = doff.as<int32_t>();
  kv.block_tables = dtables.as<int32_t>();
  kv.tokens = tokens;
  kv.sequences = 2;
  kv.max_blocks = max_blocks;
  cuda::KvAppendParams append;
  append.kv = kv;
  append.k = dk.get();
  append.v = dv.get();
  append.k_width = append.v_width = kv_heads * d;
  ASSERT_TRUE(cuda::launchKvAppend(append, nullptr).ok());
  cuda::PagedAttentionParams attention;
  attention.kv = kv;
  attention.q = dq.get();
  attention.out = dout.get();
  attention.q_width = heads * d;
  attention.heads = heads;
  attention.max_context = 20;
  attention.scale = 0.35f;
  ASSERT_EQ(cuda::flashAttentionScratchBytes(attention), 0u);
  Status status = cuda::launchFlashAttention(attention, nullptr, 0, nullptr);
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LT(relativeL2(dout.toHost({tokens, heads * d}), want), 1e-5);
}

using ElementwiseTest = CudaTest;

// tanh((a * b) + 3) - c with b broadcasting along rows and c along the middle axis, as the
// CPU LlmElementwise test.
TEST_F(ElementwiseTest, MatchesCpuLlmElementwise) {
  Tensor a = randomFloat({2, 3, 5}, 900), b = randomFloat({5}, 901), c = randomFloat({2, 1, 5}, 902);
  const std::vector<int64_t> program = {2, 0, 1, 0, 3, -1, 21, 4, 0, 1, 5, 2};
  KernelParams p;
  p.set("program", intsParam(program));
  p.set("constants", floatsParam({3.0}));
  Tensor want = runKernel("LlmElementwise", {a, b, c}, p);
  DeviceBuffer da(a), db(b), dc(c), dy(30);
  cuda::ElementwiseParams params;
  params.inputs[0] = da.get();
  params.inputs[1] = db.get();
  params.inputs[2] = dc.get();
  params.num_inputs = 3;
  params.rank = 3;
  const int64_t shape[3] = {2, 3, 5};
  const int64_t strides[3][3] = {{15, 5, 1}, {0, 0, 1}, {5, 0, 1}};
  for (int d = 0; d < 3; ++d) {
    params.shape[d] = shape[d];
    for (int i = 0; i < 3; ++i) params.strides[i][d] = strides[i][d];
  }
  for (size_t i = 0; i < program.size(); ++i) params.program[i] = program[i];
  params.program_length = static_cast<int>(program.size() / 3);
  params.constants[0] = 3.0f;
  params.num_constants = 1;
  params.y = dy.get();
  ASSERT_TRUE(cuda::launchElementwise(params, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LT(relativeL2(dy.toHost({2, 3, 5}), want), 1e-6);
}

using SdpaGpuTest = CudaTest;

TEST_F(SdpaGpuTest, MatchesCpuLlmSdpaWithPaddingMask) {
  const int64_t b = 2, heads = 4, kv_heads = 2, queries = 7, keys = 7, d = 16;
  Tensor q = randomFloat({b, heads, queries, d}, 1000), k = randomFloat({b, kv_heads, keys, d}, 1001),
         v = randomFloat({b, kv_heads, keys, d}, 1002), mask = randomFloat({b, 1, 1, keys}, 1003);
  KernelParams p;
  p.set("scale", floatParam(0.25));
  Tensor want = runKernel("LlmSdpa", {q, k, v, mask}, p);
  DeviceBuffer dq(q), dk(k), dv(v), dm(mask), dout(b * heads * queries * d);
  cuda::SdpaParams params;
  params.q = dq.get();
  params.k = dk.get();
  params.v = dv.get();
  params.mask = dm.get();
  params.mask_strides[0] = keys;  // [b, 1, 1, keys]
  params.mask_strides[3] = 1;
  params.out = dout.get();
  params.batch = b;
  params.heads = heads;
  params.kv_heads = kv_heads;
  params.queries = queries;
  params.keys = keys;
  params.head_dim = d;
  params.scale = 0.25f;
  ASSERT_TRUE(cuda::launchSdpa(params, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LT(relativeL2(dout.toHost({b, heads, queries, d}), want), 1e-5);
}

TEST(ElementwiseParamsTest, RefusesOperandsOutOfRange) {
  cuda::ElementwiseParams params;
  float x = 0;
  params.inputs[0] = &x;
  params.num_inputs = 1;
  params.y = &x;
  params.program[0] = 0;
  params.program[1] = 0;
  params.program[2] = 1;  // register 1 does not exist yet
  params.program_length = 1;
  EXPECT_FALSE(params.check().ok());
}


using SampleTest = CudaTest;

// For u at the middle of each kept token's share of the cumulative probability (token order),
// the device picks exactly that token; the kept set is top-k then top-p, computed here in
// double with a sort.
TEST_F(SampleTest, TopKTopPPicksTheTokenWhoseShareHoldsU) {
  const int64_t vocab = 1000;
  Tensor logits = randomFloat({1, vocab}, 1200);
  for (auto [top_k, top_p, temperature] : {std::tuple<int64_t, float, float>{0, 1.0f, 1.0f},
                                           {40, 1.0f, 0.7f}, {0, 0.9f, 1.0f}, {50, 0.8f, 1.3f}}) {
    std::vector<double> scaled(vocab);
    for (int64_t j = 0; j < vocab; ++j) scaled[j] = logits.data<float>()[j] / temperature;
    std::vector<int64_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scaled[a] > scaled[b]; });
    const double max_logit = scaled[order[0]];
    const int64_t k = top_k > 0 ? std::min(top_k, vocab) : vocab;
    double total = 0;
    for (int64_t i = 0; i < k; ++i) total += std::exp(scaled[order[i]] - max_logit);
    std::vector<bool> kept(vocab, false);
    double mass = 0;
    for (int64_t i = 0; i < k; ++i) {
      kept[order[i]] = true;
      mass += std::exp(scaled[order[i]] - max_logit);
      if (mass >= top_p * total) break;
    }
    double kept_total = 0;
    for (int64_t j = 0; j < vocab; ++j) if (kept[j]) kept_total += std::exp(scaled[j] - max_logit);
    std::vector<float> us;
    std::vector<int32_t> want;
    double cumulative = 0;
    for (int64_t j = 0; j < vocab && us.size() < 64; ++j) {
      if (!kept[j]) continue;
      const double share = std::exp(scaled[j] - max_logit);
      if (share / kept_total > 1e-3) {
        us.push_back(static_cast<float>((cumulative + share / 2) / kept_total));
        want.push_back(static_cast<int32_t>(j));
      }
      cumulative += share;
    }
    const int64_t rows = static_cast<int64_t>(us.size());
    Tensor batch = Tensor::allocate(DType::kFloat32, {rows, vocab});
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(logits.data<float>(), vocab, batch.data<float>() + r * vocab);
    DeviceBuffer dl(batch), du(makeFloat({rows}, us)), di(rows);
    cuda::SampleParams params;
    params.logits = dl.get();
    params.uniform = du.get();
    params.ids = di.as<int32_t>();
    params.rows = rows;
    params.vocab = vocab;
    params.temperature = temperature;
    params.top_k = top_k;
    params.top_p = top_p;
    ASSERT_TRUE(cuda::launchSample(params, nullptr).ok());
    std::vector<int32_t> got(static_cast<size_t>(rows));
    ASSERT_EQ(cudaMemcpy(got.data(), di.get(), rows * sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(got, want) << "top_k " << top_k << " top_p " << top_p << " temperature " << temperature;
  }
}

TEST(SampleParamsTest, RefusesGreedyAndBadTopP) {
  cuda::SampleParams params;
  float x = 0;
  int32_t id = 0;
  params.logits = params.uniform = &x;
  params.ids = &id;
  params.vocab = 10;
  params.temperature = 0;
  EXPECT_NE(params.check().message().find("temperature must be > 0"), std::string::npos);
  params.temperature = 1;
  params.top_p = 0;
  EXPECT_NE(params.check().message().find("top_p"), std::string::npos);
}

}  // namespace
}  // namespace llmc::testing
