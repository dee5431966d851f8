// The backend registry (core/backend.h): the built-in backends are found by kind and by engine
// target, a backend absent from the build is refused with its reason, and a Session runs on
// whatever is registered for its kind — core calls the registered factory and executor and
// nothing else, which is what lets a new backend be a folder plus one registration line.
#include "core/backend.h"

#include <gtest/gtest.h>

#include <string>

#include "llmc/session.h"
#include "one_hot_engine.h"

namespace llmc {
namespace {

TEST(BackendRegistryTest, FindsTheBuiltInBackendsByKindAndTarget) {
  const BackendInfo* cpu = findBackend(Backend::kCpu);
  ASSERT_NE(cpu, nullptr);
  EXPECT_STREQ(cpu->name, "cpu");
  EXPECT_NE(cpu->create, nullptr);
  EXPECT_TRUE(cpu->step_observer);
  EXPECT_FALSE(cpu->samples_on_device);
  EXPECT_EQ(backendForTarget("cpu"), cpu);

  const BackendInfo* cuda = findBackend(Backend::kCuda);
  ASSERT_NE(cuda, nullptr);  // built in, or known with the reason it is not
  EXPECT_EQ(backendForTarget("cuda-sm90"), cuda);
  EXPECT_EQ(backendForTarget("cuda-sm80"), cuda);
#ifdef LLMC_HAVE_CUDA
  EXPECT_NE(cuda->create, nullptr);
  EXPECT_TRUE(cuda->samples_on_device);
  EXPECT_EQ(cuda->device_kv_dtype, DType::kFloat32);
#else
  EXPECT_EQ(cuda->create, nullptr);
  EXPECT_NE(std::string(cuda->unavailable).find("built without CUDA"), std::string::npos);
#endif
  EXPECT_EQ(backendForTarget("cuda-"), nullptr);
  EXPECT_EQ(backendForTarget("cudax"), nullptr);
  EXPECT_EQ(backendForTarget("tpu"), nullptr);
  EXPECT_EQ(findBackend(Backend::kAuto), nullptr);
}

// A stand-in executor: every run returns one tensor holding how many runs it has seen.
class CountingExecutor final : public BackendExecutor {
 public:
  Status run(std::vector<Tensor>&, LlmStepContext*, std::vector<NamedTensor>* outputs) override {
    Tensor count = Tensor::allocate(DType::kFloat32, {1});
    count.data<float>()[0] = static_cast<float>(++runs_);
    outputs->assign(1, {"count", count});
    return okStatus();
  }
  uint64_t arenaBytes() const override { return 1234; }
  Session::StepCounts lastRun() const override { return {7, 0, false}; }
  int threads() const override { return 3; }

 private:
  int runs_ = 0;
};

Status createCounting(std::shared_ptr<const Engine>, const SessionOptions&,
                      std::unique_ptr<BackendExecutor>* out) {
  *out = std::make_unique<CountingExecutor>();
  return okStatus();
}

TEST(BackendRegistryTest, SessionsRunOnWhateverIsRegistered) {
  const BackendInfo saved = *findBackend(Backend::kCuda);
  BackendInfo fake;
  fake.kind = Backend::kCuda;
  fake.name = "counting";
  fake.target = "cuda-";
  fake.create = createCounting;
  registerBackend(fake);

  std::unique_ptr<Session> session;
  SessionOptions options;
  options.backend = Backend::kCuda;
  Status status = Session::create(testing::oneHotEngine(), options, &session);
  ASSERT_TRUE(status.ok()) << status.toString();
  EXPECT_EQ(session->backend(), Backend::kCuda);
  EXPECT_EQ(session->arenaBytes(), 1234u);
  EXPECT_EQ(session->threads(), 3);
  Tensor ids = Tensor::allocate(DType::kInt64, {1, 2});
  ids.data<int64_t>()[0] = ids.data<int64_t>()[1] = 1;
  std::vector<NamedTensor> outputs;
  for (int run = 1; run <= 2; ++run) {
    ASSERT_TRUE(session->run({{"input_ids", ids}}, &outputs).ok());
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_EQ(outputs[0].tensor.data<float>()[0], static_cast<float>(run));
  }
  EXPECT_EQ(session->lastRunSteps().device, 7);

  // Capabilities are the registered ones: this backend takes no step observer.
  options.observer = [](const StepObservation&) {};
  std::unique_ptr<Session> observed;
  status = Session::create(testing::oneHotEngine(), options, &observed);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("counting backend does not run step observers"),
            std::string::npos)
      << status.message();

  registerBackend(saved);
  EXPECT_STREQ(findBackend(Backend::kCuda)->name, "cuda");
}

TEST(BackendRegistryTest, ABackendMissingFromTheBuildIsRefusedWithItsReason) {
  const BackendInfo saved = *findBackend(Backend::kCuda);
  BackendInfo absent = saved;
  absent.create = nullptr;
  absent.unavailable = "this runtime was built without it (a test)";
  registerBackend(absent);
  std::unique_ptr<Session> session;
  SessionOptions options;
  options.backend = Backend::kCuda;
  Status status = Session::create(testing::oneHotEngine(), options, &session);
  registerBackend(saved);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("the cuda backend is not in this runtime: this runtime was "
                                  "built without it (a test)"),
            std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace llmc
