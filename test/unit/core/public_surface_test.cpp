// The public headers keep llmc's internal types internal (checked at compile time: an Engine's
// Plan, Session::State and the Session run of a language-model step are not reachable from
// user code; the runtime reaches them through InternalAccess), and Tensor copies share
// storage while clone() copies.
#include <gtest/gtest.h>

#include <vector>

#include "core/internal_access.h"
#include "core/plan.h"
#include "llmc/engine.h"
#include "llmc/session.h"
#include "llmc/tensor.h"
#include "one_hot_engine.h"

namespace llmc {
namespace {

// Each concept is checked from outside the classes, as user code would see them.
template <typename T>
concept ExposesPlan = requires(const T& engine) {
  engine.plan();
};
template <typename T>
concept ExposesState = requires {
  typename T::State;
};
template <typename T>
concept ExposesStepRun = requires(T& session, const std::vector<NamedTensor>& inputs,
                                  std::vector<NamedTensor>* outputs, LlmStepContext* step) {
  session.run(inputs, outputs, step);
};
template <typename T>
concept ExposesRunStep = requires(T& session, const std::vector<NamedTensor>& inputs,
                                  std::vector<NamedTensor>* outputs, LlmStepContext* step) {
  session.runStep(inputs, outputs, step);
};

static_assert(!ExposesPlan<Engine>, "Engine::plan() is internal (InternalAccess::plan)");
static_assert(!ExposesState<Session>, "Session::State is internal");
static_assert(!ExposesStepRun<Session> && !ExposesRunStep<Session>,
              "the language-model step run is internal (InternalAccess::runStep)");

TEST(PublicSurfaceTest, InternalAccessReachesThePlanAndTheStepRun) {
  std::shared_ptr<const Engine> engine = testing::oneHotEngine();
  const Plan& plan = InternalAccess::plan(*engine);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].kernel_name, "OneHot");
  std::unique_ptr<Session> session;
  ASSERT_TRUE(Session::create(engine, &session).ok());
  Tensor ids = Tensor::allocate(DType::kInt64, {1, 1});
  ids.data<int64_t>()[0] = 7;
  std::vector<NamedTensor> outputs;
  ASSERT_TRUE(InternalAccess::runStep(*session, {{"input_ids", ids}}, &outputs, nullptr).ok());
  EXPECT_EQ(outputs[0].tensor.data<float>()[7], 1.0f);
}

TEST(TensorTest, CopiesShareStorageCloneCopies) {
  Tensor owner = Tensor::allocate(DType::kFloat32, {2, 2});
  Tensor copy = owner;  // a second handle
  EXPECT_EQ(copy.data(), owner.data());
  copy.data<float>()[3] = 5.0f;
  EXPECT_EQ(owner.data<float>()[3], 5.0f);

  Tensor deep = owner.clone();
  EXPECT_NE(deep.data(), owner.data());
  EXPECT_TRUE(deep.ownsData());
  deep.data<float>()[3] = 7.0f;
  EXPECT_EQ(owner.data<float>()[3], 5.0f);

  // Storage lives as long as its last copy.
  const void* bytes = owner.data();
  owner = Tensor();
  EXPECT_EQ(copy.data(), bytes);
  EXPECT_EQ(copy.data<float>()[3], 5.0f);

  // A view's copies borrow the same memory; its clone owns its own.
  float values[2] = {1.0f, 2.0f};
  Tensor view = Tensor::view(DType::kFloat32, {2}, values);
  Tensor view_copy = view;
  EXPECT_FALSE(view_copy.ownsData());
  EXPECT_EQ(view_copy.data(), static_cast<void*>(values));
  Tensor owned = view.clone();
  EXPECT_TRUE(owned.ownsData());
  values[1] = 9.0f;
  EXPECT_EQ(view_copy.data<float>()[1], 9.0f);
  EXPECT_EQ(owned.data<float>()[1], 2.0f);
}

}  // namespace
}  // namespace llmc
