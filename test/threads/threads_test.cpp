// The thread pool (core/thread_pool.h) and the property the CPU backend promises with it: a
// kernel's result is the same bits on any number of threads. Every threaded kernel runs on one
// thread and on pools of 2, 3 and 7 (more threads than this machine's cores: tasks then land
// on threads in every order), over shapes that split unevenly into tasks.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>

#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernel_test_util.h"

namespace llmc::testing {
namespace {

TEST(ThreadPoolTest, RunsEveryTaskExactlyOnce) {
  for (int threads : {1, 2, 3, 7}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int64_t tasks : {0, 1, 2, 5, 64, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
      for (int repeat = 0; repeat < 20; ++repeat)
        pool.parallelFor(tasks, [&](int64_t task) { runs[static_cast<size_t>(task)]++; });
      for (int64_t task = 0; task < tasks; ++task)
        ASSERT_EQ(runs[static_cast<size_t>(task)].load(), 20)
            << threads << " threads, " << tasks << " tasks: task " << task;
    }
  }
}

TEST(ThreadPoolTest, UsesItsThreads) {
  // With tasks that wait for each other, two threads must really run at once.
  ThreadPool pool(2);
  std::atomic<int> arrived{0};
  std::atomic<bool> both{false};
  pool.parallelFor(2, [&](int64_t) {
    arrived++;
    for (int spin = 0; spin < 200000000 && arrived.load() < 2; ++spin) std::this_thread::yield();
    if (arrived.load() == 2) both = true;
  });
  EXPECT_TRUE(both.load()) << "the two tasks never ran at the same time";
}

TEST(ThreadPoolTest, NestedCallsAndConcurrentCallersRunSerially) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> inner(64);
  pool.parallelFor(8, [&](int64_t outer) {
    pool.parallelFor(8, [&](int64_t task) { inner[static_cast<size_t>(outer * 8 + task)]++; });
  });
  for (auto& count : inner) EXPECT_EQ(count.load(), 1);

  // Two threads sharing one pool: one gets the workers, the other runs its tasks itself.
  std::atomic<int64_t> sums[2] = {0, 0};
  auto caller = [&](int which) {
    for (int repeat = 0; repeat < 200; ++repeat)
      pool.parallelFor(50, [&](int64_t task) { sums[which] += task; });
  };
  std::thread first(caller, 0), second(caller, 1);
  first.join();
  second.join();
  EXPECT_EQ(sums[0].load(), 200 * 1225);
  EXPECT_EQ(sums[1].load(), 200 * 1225);
}

TEST(ThreadPoolTest, RethrowsATasksExceptionAfterEveryTask) {
  ThreadPool pool(3);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.parallelFor(100,
                                [&](int64_t task) {
                                  ran++;
                                  if (task == 37) throw std::runtime_error("task 37");
                                }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 100);
  // The pool still works.
  std::atomic<int> after{0};
  pool.parallelFor(10, [&](int64_t) { after++; });
  EXPECT_EQ(after.load(), 10);
}

TEST(ThreadPoolTest, DefaultCountIsWithinTheCpusThisProcessMayUse) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_GE(defaultThreadCount(), 1);
  EXPECT_LE(defaultThreadCount(), CPU_COUNT(&set));
}

// setDefaultThreadCount takes a count in [1, kMaxThreads] until the shared pool exists, and
// after that only the pool's own size: the pool is never resized under running kernels.
TEST(ThreadPoolTest, DefaultCountIsSetOnlyBeforeTheSharedPool) {
  EXPECT_FALSE(setDefaultThreadCount(0));
  EXPECT_FALSE(setDefaultThreadCount(kMaxThreads + 1));
  const int before = sharedThreadPool()->threads();
  EXPECT_EQ(before, defaultThreadCount());
  EXPECT_TRUE(setDefaultThreadCount(before));
  EXPECT_FALSE(setDefaultThreadCount(before + 1));
  EXPECT_EQ(defaultThreadCount(), before);
  EXPECT_EQ(sharedThreadPool()->threads(), before);
}

// ---- Kernels: the same bits on every pool ------------------------------------------------

// Runs `kernel` on one thread and on pools of 2, 3 and 7; every output must be bit-identical.
// The pools' runs keep what the kernel derives from its inputs (as weights), the serial one not.
void expectSameOnEveryPool(const std::string& kernel, std::vector<std::optional<Tensor>> inputs,
                           const KernelParams& kernel_params, const std::string& what,
                           size_t num_outputs = 1) {
  TestKernelContext serial;
  serial.inputs = inputs;
  serial.kernel_params = kernel_params;
  serial.num_outputs = num_outputs;
  const Status status = serial.run(kernel);
  ASSERT_TRUE(status.ok()) << what << ": " << status.message();
  for (int threads : {2, 3, 7}) {
    ThreadPool pool(threads);
    TestKernelContext threaded;
    threaded.inputs = inputs;
    threaded.kernel_params = kernel_params;
    threaded.num_outputs = num_outputs;
    threaded.pool = &pool;
    // What a kernel derives from its weights (a quantized weight repacked for the panels) is
    // built on the pool and kept, as an executor keeps it; the serial run repacks per product.
    std::map<std::string, KernelContext::Derived> derived;
    threaded.derived = &derived;
    ASSERT_TRUE(threaded.run(kernel).ok()) << what;
    for (size_t i = 0; i < num_outputs; ++i) {
      const Tensor& want = serial.outputs[i];
      const Tensor& got = threaded.outputs[i];
      ASSERT_EQ(got.shape(), want.shape()) << what;
      ASSERT_EQ(got.dtype(), want.dtype()) << what;
      if (want.dtype() != DType::kFloat32) {
        ASSERT_EQ(std::memcmp(got.data(), want.data(), want.sizeBytes()), 0)
            << what << " on " << threads << " threads: output " << i;
        continue;
      }
      for (int64_t e = 0; e < want.numElements(); ++e)
        ASSERT_EQ(std::memcmp(&got.data<float>()[e], &want.data<float>()[e], sizeof(float)), 0)
            << what << " on " << threads << " threads: output " << i << " element " << e << " is "
            << got.data<float>()[e] << ", on one thread " << want.data<float>()[e];
    }
  }
}

// Shapes: decode (one row), a prefill that is not a multiple of the 64-row blocks or of the
// 4-row tiles, and widths that are not multiples of the 64-column tasks.
const Shape kRowShapes[] = {{1, 1, 96}, {1, 70, 96}, {2, 5, 96}};

TEST(ThreadedKernels, FusedMatMulAndGatedMlp) {
  uint32_t seed = 1;
  for (const Shape& shape : kRowShapes)
    for (int64_t n : {1, 67, 200}) {
      Tensor a = randomFloat(shape, seed++);
      Tensor w = randomFloat({96, n}, seed++), wt = randomFloat({n, 96}, seed++);
      Tensor bias = randomFloat({n}, seed++);
      const std::string what = "[" + std::to_string(shape[1]) + " rows] x " + std::to_string(n);
      expectSameOnEveryPool("LlmFusedMatMul", {a, w, bias},
                            params({{"activation", stringParam("gelu_tanh")}}), "matmul " + what);
      expectSameOnEveryPool("LlmFusedMatMul", {a, wt},
                            params({{"trans_b", intParam(1)}, {"alpha", floatParam(0.5)}}),
                            "transposed matmul " + what);
      Tensor gate_up = randomFloat({96, 2 * n}, seed++);
      expectSameOnEveryPool("LlmGatedMlp", {a, gate_up},
                            params({{"activation", stringParam("silu")}}), "gated mlp " + what);
    }
}

TEST(ThreadedKernels, QuantizedProductsInEveryFormat) {
  uint32_t seed = 100;
  for (const char* format : {"int8", "int4", "int4_zp", "w8a8", "fp8"})
    for (const Shape& shape : kRowShapes)
      for (int64_t n : {33, 200}) {
        const int64_t k = 128;
        const bool per_channel = std::string(format) != "int4" && std::string(format) != "int4_zp";
        const int64_t group = per_channel ? k : 32;
        const QuantTraits& traits = *findQuantTraits(format);
        Tensor w = randomFloat({n, k}, seed++);
        Tensor data, scales, zeros;
        ASSERT_TRUE(quantizeWeight(w, true, traits, group, &data, &scales, &zeros).ok()) << format;
        // The quantizer's output channels split over the pool: the same codes and scales.
        expectSameOnEveryPool(
            "LlmQuantizeWeight", {w},
            params({{"format", stringParam(format)},
                    {"group", intParam(group)},
                    {"trans_b", intParam(1)}}),
            std::string("quantizer ") + format + " [" + std::to_string(n) + ", 128]",
            traits.zero_points ? 3 : 2);
        std::optional<Tensor> zero_points;
        if (traits.zero_points) zero_points = zeros;
        Tensor x = randomFloat({shape[0], shape[1], k}, seed++);
        const std::string what =
            std::string(format) + " [" + std::to_string(shape[1]) + " rows] x " + std::to_string(n);
        expectSameOnEveryPool("LlmQuantMatMul", {x, data, scales, zero_points},
                              params({{"format", stringParam(format)},
                                      {"group", intParam(group)},
                                      {"activation", stringParam("relu")}}),
                              what);
        if (n % 2 == 0)
          expectSameOnEveryPool("LlmQuantMatMul", {x, data, scales, zero_points},
                                params({{"format", stringParam(format)},
                                        {"group", intParam(group)},
                                        {"activation", stringParam("silu")},
                                        {"gated", intParam(1)}}),
                                "gated " + what);
      }
}

TEST(ThreadedKernels, NormsElementwiseAndAttention) {
  uint32_t seed = 200;
  for (const Shape& shape : kRowShapes) {
    Tensor x = randomFloat(shape, seed++), residual = randomFloat(shape, seed++);
    Tensor gamma = randomFloat({96}, seed++), beta = randomFloat({96}, seed++);
    expectSameOnEveryPool("LlmNorm", {x, residual, gamma, beta},
                          params({{"kind", stringParam("layer")}}), "layer norm", 2);
    expectSameOnEveryPool("LlmNorm", {x, residual, gamma}, params({{"kind", stringParam("rms")}}),
                          "rms norm without the sum");
  }
  // Rotary embeddings over 70 tokens (tasks of 16), token-major with a pass-through tail (the
  // V columns of a fused QKV row), and head-major from a position cache.
  {
    Tensor x = randomFloat({1, 70, 3 * 32 + 17}, seed++);
    Tensor cos = randomFloat({1, 70, 1, 16}, seed++), sin = randomFloat({1, 70, 1, 16}, seed++);
    expectSameOnEveryPool("LlmRope", {x, std::nullopt, cos, sin},
                          params({{"num_heads", intParam(3)}, {"head_dim", intParam(32)}}),
                          "rope, token-major, partial");
    Tensor heads = randomFloat({2, 3, 37, 16}, seed++);
    Tensor positions = Tensor::allocate(DType::kInt64, {37});
    for (int64_t t = 0; t < 37; ++t) positions.data<int64_t>()[t] = 36 - t;
    Tensor cache_cos = randomFloat({40, 8}, seed++), cache_sin = randomFloat({40, 8}, seed++);
    expectSameOnEveryPool("LlmRope", {heads, positions, cache_cos, cache_sin}, {},
                          "rope, head-major, positions");
  }
  // 40,000 elements: several tasks of 32 chunks of 256; x * sigmoid(y) + 2 with y broadcast.
  Tensor big = randomFloat({8, 5000}, seed++), row = randomFloat({5000}, seed++);
  expectSameOnEveryPool("LlmElementwise", {big, row},
                        params({{"program", intsParam({23, 1, 0, 2, 0, 2, 0, 3, -1})},
                                {"constants", floatsParam({2.0})}}),
                        "elementwise");
  // Attention without a cache (causal, windowed) and LlmSdpa with a mask, grouped heads.
  for (int64_t window : {0, 5}) {
    Tensor q = randomFloat({2, 4, 19, 16}, seed++), k = randomFloat({2, 2, 19, 16}, seed++);
    Tensor v = randomFloat({2, 2, 19, 16}, seed++);
    expectSameOnEveryPool("LlmAttention", {q, k, v},
                          params({{"scale", floatParam(0.25)}, {"window", intParam(window)}}),
                          "attention, window " + std::to_string(window));
  }
  Tensor q = randomFloat({2, 4, 7, 16}, seed++), k = randomFloat({2, 2, 11, 16}, seed++);
  Tensor v = randomFloat({2, 2, 11, 8}, seed++), mask = randomFloat({7, 11}, seed++);
  expectSameOnEveryPool("LlmSdpa", {q, k, v, mask}, {}, "sdpa");
}

}  // namespace
}  // namespace llmc::testing
