// Generator tests on a hand-built engine: logits = OneHot(input_ids, depth 10), so greedy
// decoding always repeats the last token. Exercises stop tokens, cancellation, limits and
// that the generator stays usable after an error.
#include "llmc/generator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "llmc/engine.h"
#include "llmc/session.h"
#include "one_hot_engine.h"

namespace llmc {
namespace {

constexpr int64_t kVocab = testing::kOneHotVocab;
constexpr int64_t kMaxSeq = testing::kOneHotMaxSeq;
using testing::oneHotEngine;

// A session's step observer (what calibration collects statistics with) sees every step's
// node, kernel and tensors; the CUDA backend refuses one.
TEST(SessionObserverTest, SeesEveryStepWithItsTensors) {
  std::shared_ptr<const Engine> engine = oneHotEngine();
  int calls = 0;
  SessionOptions options;
  options.backend = Backend::kCpu;
  options.observer = [&](const StepObservation& step) {
    ++calls;
    EXPECT_EQ(step.node, "one_hot");
    EXPECT_EQ(step.kernel, "OneHot");
    ASSERT_EQ(step.inputs.size(), 3u);
    ASSERT_EQ(step.outputs.size(), 1u);
    EXPECT_EQ(step.inputs[0]->data<int64_t>()[1], 4);
    EXPECT_EQ(step.outputs[0]->shape(), (Shape{1, 2, kVocab}));
    EXPECT_EQ(step.outputs[0]->data<float>()[kVocab + 4], 1.0f);
  };
  std::unique_ptr<Session> session;
  ASSERT_TRUE(Session::create(engine, options, &session).ok());
  Tensor ids = Tensor::allocate(DType::kInt64, {1, 2});
  ids.data<int64_t>()[0] = 3;
  ids.data<int64_t>()[1] = 4;
  std::vector<NamedTensor> outputs;
  ASSERT_TRUE(session->run({{"input_ids", ids}}, &outputs).ok());
  EXPECT_EQ(calls, 1);
  options.backend = Backend::kCuda;
  Status status = Session::create(engine, options, &session);
  EXPECT_FALSE(status.ok());
  // Built without CUDA, its absence is the reason given (test/unit/core/backend_test.cpp checks
  // the observer refusal on a registered backend either way).
#ifdef LLMC_HAVE_CUDA
  const char* reason = "backend does not run step observers";
#else
  const char* reason = "built without CUDA";
#endif
  EXPECT_NE(status.message().find(reason), std::string::npos) << status.message();
}

TEST(SessionOptionsTest, HalfGpuWeightsAreRefusedOnTheCpu) {
  SessionOptions options;
  options.backend = Backend::kCpu;
  options.gpu_weight_dtype = DType::kBFloat16;
  std::unique_ptr<Session> session;
  Status status = Session::create(oneHotEngine(), options, &session);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("weights are a GPU backend option"), std::string::npos)
      << status.message();
  options.gpu_weight_dtype = DType::kInt8;
  EXPECT_NE(Session::create(oneHotEngine(), options, &session).message().find("float32, bfloat16 or float16"),
            std::string::npos);
}

TEST(GeneratorTest, GreedyRepeatsTheLastTokenAndStopsOnStopId) {
  std::unique_ptr<Generator> generator;
  ASSERT_TRUE(Generator::create(oneHotEngine(), &generator).ok());
  EXPECT_EQ(generator->maxSequenceLength(), kMaxSeq);
  GenerationOptions options;
  options.max_new_tokens = 5;
  GenerationResult result;
  std::vector<int32_t> prompt{1, 2, 7};
  ASSERT_TRUE(generator->generate(prompt, options, nullptr, &result).ok());
  EXPECT_EQ(result.tokens, (std::vector<int32_t>{7, 7, 7, 7, 7}));
  EXPECT_EQ(result.finish_reason, FinishReason::kLength);
  options.stop_token_ids = {7};
  ASSERT_TRUE(generator->generate(prompt, options, nullptr, &result).ok());
  EXPECT_EQ(result.tokens, (std::vector<int32_t>{7}));
  EXPECT_EQ(result.finish_reason, FinishReason::kStopToken);
}

TEST(GeneratorTest, CancellationKeepsTokensAndLeavesTheGeneratorUsable) {
  std::unique_ptr<Generator> generator;
  ASSERT_TRUE(Generator::create(oneHotEngine(), &generator).ok());
  GenerationOptions options;
  options.max_new_tokens = 10;
  GenerationResult result;
  int seen = 0;
  Status status = generator->generate(
      std::vector<int32_t>{3}, options, [&](int32_t) { return ++seen < 3; }, &result);
  EXPECT_EQ(status.code(), StatusCode::kCancelled);
  EXPECT_EQ(result.tokens.size(), 3u);
  ASSERT_TRUE(generator->generate(std::vector<int32_t>{4}, options, nullptr, &result).ok());
  EXPECT_EQ(result.tokens.size(), 10u);
}

TEST(GeneratorTest, LimitsAreClearErrors) {
  std::unique_ptr<Generator> generator;
  ASSERT_TRUE(Generator::create(oneHotEngine(), &generator).ok());
  GenerationOptions options;
  GenerationResult result;
  options.max_new_tokens = 10;
  std::vector<int32_t> long_prompt(60, 1);
  Status status = generator->generate(long_prompt, options, nullptr, &result);
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
  EXPECT_NE(status.message().find("context of 64 tokens"), std::string::npos) << status.message();
  status = generator->generate(std::vector<int32_t>{1, kVocab}, options, nullptr, &result);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("outside the vocabulary [0, 10)"), std::string::npos)
      << status.message();
  EXPECT_EQ(generator->generate(std::vector<int32_t>{}, options, nullptr, &result).code(),
            StatusCode::kInvalidArgument);
  options.sampling.temperature = -1;
  EXPECT_EQ(generator->generate(std::vector<int32_t>{1}, options, nullptr, &result).code(),
            StatusCode::kInvalidArgument);
  options.sampling.temperature = 0;
  EXPECT_TRUE(generator->generate(std::vector<int32_t>{1}, options, nullptr, &result).ok());
}

TEST(GeneratorTest, SamplingIsReproducibleBySeed) {
  std::unique_ptr<Generator> generator;
  ASSERT_TRUE(Generator::create(oneHotEngine(), &generator).ok());
  GenerationOptions options;
  options.max_new_tokens = 20;
  options.sampling.temperature = 5.0f;  // flat enough to draw other tokens
  options.sampling.seed = 42;
  GenerationResult a, b, c;
  ASSERT_TRUE(generator->generate(std::vector<int32_t>{1}, options, nullptr, &a).ok());
  ASSERT_TRUE(generator->generate(std::vector<int32_t>{1}, options, nullptr, &b).ok());
  options.sampling.seed = 43;
  ASSERT_TRUE(generator->generate(std::vector<int32_t>{1}, options, nullptr, &c).ok());
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NE(a.tokens, c.tokens);
}

TEST(GeneratorTest, BeamSearchFindsTheMostLikelySequenceAndHonorsStopIds) {
  std::unique_ptr<Generator> generator;
  ASSERT_TRUE(Generator::create(oneHotEngine(), &generator).ok());
  BeamSearchOptions options;
  options.num_beams = 3;
  options.max_new_tokens = 4;
  GenerationResult result;
  ASSERT_TRUE(generator->beamSearch(std::vector<int32_t>{5, 2}, options, &result).ok());
  EXPECT_EQ(result.tokens, (std::vector<int32_t>{2, 2, 2, 2}));
  ASSERT_EQ(result.logprobs.size(), 4u);
  // log-softmax of a one-hot row of 10: the hot entry is 1 - log(e + 9).
  EXPECT_NEAR(result.logprobs[0], 1.0 - std::log(std::exp(1.0) + 9.0), 1e-5);
  options.stop_token_ids = {2};
  ASSERT_TRUE(generator->beamSearch(std::vector<int32_t>{5, 2}, options, &result).ok());
  EXPECT_EQ(result.tokens, (std::vector<int32_t>{2}));
  EXPECT_EQ(result.finish_reason, FinishReason::kStopToken);
  options.num_beams = 0;
  EXPECT_EQ(generator->beamSearch(std::vector<int32_t>{1}, options, &result).code(),
            StatusCode::kInvalidArgument);
}

TEST(GeneratorTest, StopStringsCutTheText) {
  std::unique_ptr<Generator> generator;
  ASSERT_TRUE(Generator::create(oneHotEngine(), &generator).ok());
  std::unique_ptr<Tokenizer> tokenizer;
  Status status = Tokenizer::fromJson(
      R"({"model": {"type": "WordLevel", "unk_token": "a",
                    "vocab": {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4, "f": 5, "g": 6, "h": 7, "i": 8, "j": 9}},
          "pre_tokenizer": {"type": "WhitespaceSplit"}})",
      &tokenizer);
  ASSERT_TRUE(status.ok()) << status.toString();
  GenerationOptions options;
  options.max_new_tokens = 6;
  options.stop_strings = {"c"};
  GenerationResult result;
  // Without a tokenizer stop strings are refused.
  EXPECT_EQ(generator->generate(std::vector<int32_t>{2}, options, nullptr, &result).code(),
            StatusCode::kInvalidArgument);
  generator->setTokenizer(std::move(tokenizer));
  ASSERT_TRUE(generator->generate(std::vector<int32_t>{1}, options, nullptr, &result).ok());
  EXPECT_EQ(result.finish_reason, FinishReason::kLength);  // "b" repeated never contains "c"
  EXPECT_EQ(result.tokens.size(), 6u);
  EXPECT_NE(result.text.find('b'), std::string::npos) << result.text;
  ASSERT_TRUE(generator->generate(std::vector<int32_t>{2}, options, nullptr, &result).ok());
  EXPECT_EQ(result.finish_reason, FinishReason::kStopString);
  EXPECT_EQ(result.tokens.size(), 1u);
  EXPECT_EQ(result.text, "");
}

}  // namespace
}  // namespace llmc
