// No exception crosses the public API (runtime/include/llmc): an exception thrown by user code
// (token callbacks, step observers) comes back as a kCancelled Status saying what threw, and
// every allocation a public call makes may fail and come back as kResourceExhausted. After
// either, the object is still usable. Allocation failures are injected by the test binary's
// own operator new (fail_allocation.h), one allocation at a time, at every allocation a call
// makes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "fail_allocation.h"
#include "llmc/batch_generator.h"
#include "llmc/engine.h"
#include "llmc/generator.h"
#include "llmc/session.h"
#include "llmc/tensor.h"
#include "llmc/tensor_io.h"
#include "llmc/tokenizer.h"
#include "one_hot_engine.h"

namespace llmc {
namespace {

using testing::FailNthAllocation;
using testing::oneHotEngine;

std::string tokenizerJson() {
  std::filesystem::path path = std::filesystem::path(LLMC_TEST_SOURCE_DIR) / "models" /
                               "tokenizers" / "gpt2_bpe" / "tokenizer.json";
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs `call` with its 1st, 2nd, 3rd ... allocation failing until a run makes fewer
// allocations than that. Each run must return ok or kResourceExhausted and never throw; after
// each, `still_usable` checks (with no failure armed) that the object works as before.
template <typename Call, typename Check>
void failEachAllocation(const std::string& label, Call call, Check still_usable) {
  constexpr int64_t kLimit = 50000;
  for (int64_t n = 1; n <= kLimit; ++n) {
    Status status;
    bool fired = false;
    try {
      FailNthAllocation failure(n);
      status = call();
      fired = failure.fired();
    } catch (const std::exception& e) {
      FAIL() << label << ": allocation " << n
             << " failed and an exception crossed the API: " << e.what();
    }
    if (!fired) {
      EXPECT_TRUE(status.ok()) << label << ": " << status.toString();
      EXPECT_GT(n, 1) << label << ": the call allocated nothing";
      std::printf("%s: each of its %lld allocations failed in turn\n", label.c_str(),
                  static_cast<long long>(n - 1));
      return;
    }
    if (!status.ok()) {
      ASSERT_EQ(status.code(), StatusCode::kResourceExhausted)
          << label << ": allocation " << n << ": " << status.toString();
      ASSERT_TRUE(contains(status.message(), "out of memory") ||
                  contains(status.message(), "cannot allocate"))
          << label << ": allocation " << n << ": " << status.toString();
    }
    still_usable();
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << label << ": not usable after allocation " << n << " failed";
      return;
    }
  }
  ADD_FAILURE() << label << ": more than " << kLimit << " allocations";
}

// --- User code that throws -------------------------------------------------------------------

class GeneratorCallbackTest : public ::testing::TestWithParam<bool> {};  // param: KV cache

TEST_P(GeneratorCallbackTest, ThrowingTokenCallbackIsAStatusAndTheGeneratorStaysUsable) {
  std::unique_ptr<Generator> generator;
  ASSERT_TRUE(Generator::create(oneHotEngine(/*as_language_model=*/GetParam()), &generator).ok());
  ASSERT_EQ(generator->usesKvCache(), GetParam());
  GenerationOptions options;
  options.max_new_tokens = 5;
  GenerationResult result;
  int calls = 0;
  Status status = generator->generate(
      std::vector<int32_t>{1, 2, 3}, options,
      [&](int32_t) -> bool {
        if (++calls == 2) throw std::runtime_error("boom from the callback");
        return true;
      },
      &result);
  EXPECT_EQ(status.code(), StatusCode::kCancelled) << status.toString();
  EXPECT_TRUE(contains(status.message(), "the token callback threw: boom from the callback"))
      << status.message();
  EXPECT_EQ(result.tokens, (std::vector<int32_t>{3, 3}));  // generation stopped there

  // Not a std::exception either.
  status = generator->generate(
      std::vector<int32_t>{4}, options, [](int32_t) -> bool { throw 42; }, &result);
  EXPECT_EQ(status.code(), StatusCode::kCancelled);
  EXPECT_TRUE(contains(status.message(), "not a std::exception")) << status.message();

  ASSERT_TRUE(generator->generate(std::vector<int32_t>{1, 2, 3}, options, nullptr, &result).ok());
  EXPECT_EQ(result.tokens, (std::vector<int32_t>{3, 3, 3, 3, 3}));
}

INSTANTIATE_TEST_SUITE_P(Paths, GeneratorCallbackTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "KvCache" : "Recompute"; });

TEST(BatchGeneratorCallbackTest, SampledTokenCallbackSeesWhatTheResultHolds) {
  std::unique_ptr<BatchGenerator> batch;
  ASSERT_TRUE(BatchGenerator::create(oneHotEngine(true), BatchConfig(), &batch).ok());
  GenerationOptions options;
  options.max_new_tokens = 5;
  options.sampling.temperature = 1.0f;
  options.sampling.seed = 9;
  options.sampling.num_logprobs = 3;
  options.sampling.model_statistics_tokens = 2;
  std::vector<SampledToken> seen;
  int64_t id = 0, throwing = 0;
  ASSERT_TRUE(batch
                  ->submit(
                      std::vector<int32_t>{4}, options,
                      [&](const SampledToken& token) {
                        seen.push_back(token);
                        return true;
                      },
                      &id)
                  .ok());
  ASSERT_TRUE(batch
                  ->submit(
                      std::vector<int32_t>{5}, options,
                      [](const SampledToken&) -> bool { throw std::runtime_error("sampled boom"); },
                      &throwing)
                  .ok());
  std::vector<BatchGenerator::Finished> finished;
  for (int i = 0; i < 20 && !batch->idle(); ++i) ASSERT_TRUE(batch->step(&finished).ok());
  ASSERT_EQ(finished.size(), 2u);
  for (const BatchGenerator::Finished& f : finished) {
    if (f.request_id == throwing) {
      EXPECT_EQ(f.status.code(), StatusCode::kCancelled);
      EXPECT_TRUE(contains(f.status.message(), "the token callback threw: sampled boom"));
      continue;
    }
    ASSERT_TRUE(f.status.ok()) << f.status.toString();
    ASSERT_EQ(seen.size(), f.result.tokens.size());
    for (size_t t = 0; t < seen.size(); ++t) {
      EXPECT_EQ(seen[t].id, f.result.tokens[t]);
      EXPECT_EQ(seen[t].logprob, f.result.logprobs[t]);
      EXPECT_EQ(seen[t].top_logprobs, f.result.top_logprobs[t]);
      EXPECT_EQ(seen[t].top_logprobs.size(), 3u);
      EXPECT_EQ(std::isnan(seen[t].entropy), t >= 2);  // statistics for the first two only
      if (t < 2) {
        EXPECT_EQ(seen[t].entropy, f.result.entropies[t]);
      }
    }
  }
}

TEST(BatchGeneratorCallbackTest, ThrowingCallbackEndsOnlyItsRequest) {
  std::unique_ptr<BatchGenerator> batch;
  ASSERT_TRUE(BatchGenerator::create(oneHotEngine(true), BatchConfig(), &batch).ok());
  GenerationOptions options;
  options.max_new_tokens = 4;
  int64_t throwing = 0, quiet = 0;
  ASSERT_TRUE(batch
                  ->submit(
                      std::vector<int32_t>{5}, options,
                      [](int32_t) -> bool { throw std::runtime_error("request boom"); }, &throwing)
                  .ok());
  ASSERT_TRUE(batch->submit(std::vector<int32_t>{6, 7}, options, nullptr, &quiet).ok());
  std::vector<BatchGenerator::Finished> finished;
  for (int i = 0; i < 20 && !batch->idle(); ++i) ASSERT_TRUE(batch->step(&finished).ok());
  ASSERT_TRUE(batch->idle());
  ASSERT_EQ(finished.size(), 2u);
  for (const BatchGenerator::Finished& f : finished) {
    if (f.request_id == throwing) {
      EXPECT_EQ(f.status.code(), StatusCode::kCancelled);
      EXPECT_TRUE(contains(f.status.message(), "the token callback threw: request boom"))
          << f.status.message();
      EXPECT_EQ(f.result.tokens, (std::vector<int32_t>{5}));
    } else {
      EXPECT_TRUE(f.status.ok()) << f.status.toString();
      EXPECT_EQ(f.result.tokens, (std::vector<int32_t>{7, 7, 7, 7}));
    }
  }
  // Still serving.
  finished.clear();
  int64_t again = 0;
  ASSERT_TRUE(batch->submit(std::vector<int32_t>{2}, options, nullptr, &again).ok());
  for (int i = 0; i < 20 && !batch->idle(); ++i) ASSERT_TRUE(batch->step(&finished).ok());
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_TRUE(finished[0].status.ok());
  EXPECT_EQ(finished[0].result.tokens, (std::vector<int32_t>{2, 2, 2, 2}));
}

TEST(SessionObserverExceptionTest, ThrowingObserverIsAStatusAndTheSessionStaysUsable) {
  bool throw_next = true;
  SessionOptions options;
  options.backend = Backend::kCpu;
  options.observer = [&](const StepObservation&) {
    if (throw_next) {
      throw_next = false;
      throw std::logic_error("observer boom");
    }
  };
  std::unique_ptr<Session> session;
  ASSERT_TRUE(Session::create(oneHotEngine(), options, &session).ok());
  Tensor ids = Tensor::allocate(DType::kInt64, {1, 2});
  ids.data<int64_t>()[1] = 4;
  std::vector<NamedTensor> outputs;
  Status status = session->run({{"input_ids", ids}}, &outputs);
  EXPECT_EQ(status.code(), StatusCode::kCancelled);
  EXPECT_TRUE(contains(status.message(), "the step observer threw: observer boom"))
      << status.message();
  EXPECT_TRUE(contains(status.message(), "one_hot")) << status.message();  // the node
  ASSERT_TRUE(session->run({{"input_ids", ids}}, &outputs).ok());
  EXPECT_EQ(outputs[0].tensor.data<float>()[testing::kOneHotVocab + 4], 1.0f);
}

// --- Allocation failures ---------------------------------------------------------------------

TEST(AllocationFailureTest, SessionRun) {
  std::unique_ptr<Session> session;
  ASSERT_TRUE(Session::create(oneHotEngine(), &session).ok());
  Tensor ids = Tensor::allocate(DType::kInt64, {1, 3});
  ids.data<int64_t>()[2] = 6;
  const std::vector<NamedTensor> inputs{{"input_ids", ids}};
  std::vector<NamedTensor> outputs;
  failEachAllocation(
      "Session::run", [&] { return session->run(inputs, &outputs); },
      [&] {
        std::vector<NamedTensor> fresh;
        ASSERT_TRUE(session->run({{"input_ids", ids}}, &fresh).ok());
        EXPECT_EQ(fresh[0].tensor.data<float>()[2 * testing::kOneHotVocab + 6], 1.0f);
      });
}

TEST(AllocationFailureTest, EngineAndSessionCreation) {
  std::shared_ptr<const Engine> engine = oneHotEngine();
  std::unique_ptr<Session> session;
  failEachAllocation(
      "Session::create", [&] { return Session::create(engine, &session); }, [] {});
  std::shared_ptr<const Engine> language_model = oneHotEngine(true);
  const GeneratorConfig generator_config;
  std::unique_ptr<Generator> generator;
  failEachAllocation(
      "Generator::create",
      [&] { return Generator::create(language_model, generator_config, &generator); }, [] {});
  const BatchConfig batch_config;
  std::unique_ptr<BatchGenerator> batch;
  failEachAllocation(
      "BatchGenerator::create",
      [&] { return BatchGenerator::create(language_model, batch_config, &batch); }, [] {});
}

class GeneratorAllocationTest : public ::testing::TestWithParam<bool> {};  // param: KV cache

TEST_P(GeneratorAllocationTest, GenerateAndBeamSearch) {
  std::unique_ptr<Generator> generator;
  ASSERT_TRUE(Generator::create(oneHotEngine(GetParam()), &generator).ok());
  std::shared_ptr<Tokenizer> tokenizer;
  {
    std::unique_ptr<Tokenizer> loaded;
    ASSERT_TRUE(Tokenizer::fromJson(tokenizerJson(), &loaded).ok());
    tokenizer = std::move(loaded);
  }
  generator->setTokenizer(tokenizer);  // result text and stop strings allocate too
  GenerationOptions options;
  options.max_new_tokens = 4;
  options.sampling.temperature = 0.7f;
  options.sampling.top_k = 5;
  options.sampling.num_logprobs = 2;
  options.stop_strings = {"never appears"};
  std::vector<int32_t> prompt{1, 2, 3, 4, 5, 6, 7, 8, 9, 3, 4, 5, 6, 7, 8, 9, 2};
  GenerationResult want;
  ASSERT_TRUE(generator->generate(prompt, options, nullptr, &want).ok());
  int callbacks = 0;
  GenerationResult result;
  failEachAllocation(
      "Generator::generate",
      [&] {
        return generator->generate(
            prompt, options, [&](int32_t) { return ++callbacks > 0; }, &result);
      },
      [&] {
        GenerationResult again;
        Status status = generator->generate(prompt, options, nullptr, &again);
        ASSERT_TRUE(status.ok()) << status.toString();
        EXPECT_EQ(again.tokens, want.tokens);
        EXPECT_EQ(again.text, want.text);
      });
  BeamSearchOptions beam;
  beam.num_beams = 2;
  beam.max_new_tokens = 3;
  GenerationResult best;
  ASSERT_TRUE(generator->beamSearch(prompt, beam, &best).ok());
  failEachAllocation(
      "Generator::beamSearch", [&] { return generator->beamSearch(prompt, beam, &result); },
      [&] {
        GenerationResult again;
        Status status = generator->beamSearch(prompt, beam, &again);
        ASSERT_TRUE(status.ok()) << status.toString();
        EXPECT_EQ(again.tokens, best.tokens);
      });
}

INSTANTIATE_TEST_SUITE_P(Paths, GeneratorAllocationTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "KvCache" : "Recompute"; });

TEST(AllocationFailureTest, BatchGeneratorSubmitAndStep) {
  std::unique_ptr<BatchGenerator> batch;
  ASSERT_TRUE(BatchGenerator::create(oneHotEngine(true), BatchConfig(), &batch).ok());
  GenerationOptions options;
  options.max_new_tokens = 3;
  std::vector<int32_t> prompt{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3};
  // Serves one request to the end (or until a call fails); `finished` gets what ended.
  std::vector<BatchGenerator::Finished> finished;
  auto serve = [&] {
    int64_t id = 0;
    Status status = batch->submit(
        prompt, options, [](int32_t) { return true; }, &id);
    for (int i = 0; status.ok() && i < 50 && !batch->idle(); ++i) status = batch->step(&finished);
    return status;
  };
  failEachAllocation("BatchGenerator", serve, [&] {
    // A request that ended ended ok (with the tokens it has alone) or out of memory.
    for (const BatchGenerator::Finished& f : finished) {
      if (f.status.ok()) {
        EXPECT_EQ(f.result.tokens, (std::vector<int32_t>{3, 3, 3}));
      } else {
        EXPECT_EQ(f.status.code(), StatusCode::kResourceExhausted) << f.status.toString();
      }
    }
    // A step that failed may leave its request queued or running: drain it, then serve.
    finished.clear();
    for (int i = 0; i < 50 && !batch->idle(); ++i) ASSERT_TRUE(batch->step(&finished).ok());
    ASSERT_TRUE(batch->idle());
    finished.clear();
    ASSERT_TRUE(serve().ok());
    EXPECT_TRUE(batch->idle());
    ASSERT_EQ(finished.size(), 1u);
    EXPECT_TRUE(finished[0].status.ok()) << finished[0].status.toString();
    EXPECT_EQ(finished[0].result.tokens, (std::vector<int32_t>{3, 3, 3}));
    finished.clear();
  });
}

TEST(AllocationFailureTest, Tokenizer) {
  // Loading: a small BPE tokenizer.json (GPT-2's takes ~1e5 allocations to load).
  const std::string small_json = R"({
    "added_tokens": [{"id": 5, "content": "<eos>", "special": true}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "c": 3, "abc": 4},
              "merges": ["a b", "ab c"]},
    "decoder": {"type": "ByteLevel"}})";
  std::unique_ptr<Tokenizer> tokenizer;
  failEachAllocation(
      "Tokenizer::fromJson", [&] { return Tokenizer::fromJson(small_json, &tokenizer); },
      [&] {
        std::unique_ptr<Tokenizer> again;
        ASSERT_TRUE(Tokenizer::fromJson(small_json, &again).ok());
        std::vector<int32_t> ids;
        ASSERT_TRUE(again->encode("abcab", false, &ids).ok());
        EXPECT_EQ(ids, (std::vector<int32_t>{4, 2}));
      });
  ASSERT_TRUE(Tokenizer::fromJson(tokenizerJson(), &tokenizer).ok());
  const std::string text = "Hello, world! Allocation failures are Statuses, 123 times.";
  std::vector<int32_t> want;
  ASSERT_TRUE(tokenizer->encode(text, true, &want).ok());
  std::vector<int32_t> ids;
  failEachAllocation(
      "Tokenizer::encode", [&] { return tokenizer->encode(text, true, &ids); },
      [&] {
        std::vector<int32_t> again;
        ASSERT_TRUE(tokenizer->encode(text, true, &again).ok());
        EXPECT_EQ(again, want);
      });
  std::string decoded;
  failEachAllocation(
      "Tokenizer::decode", [&] { return tokenizer->decode(want, false, &decoded); },
      [&] {
        std::string again;
        ASSERT_TRUE(tokenizer->decode(want, false, &again).ok());
        EXPECT_EQ(again, text);
      });
}

TEST(AllocationFailureTest, TensorFiles) {
  Tensor tensor = Tensor::allocate(DType::kFloat32, {2, 3});
  for (int i = 0; i < 6; ++i) tensor.data<float>()[i] = static_cast<float>(i);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("llmc_api_test_" + std::to_string(::getpid()) + ".npy"))
                               .string();
  ASSERT_TRUE(writeNpy(path, tensor).ok());
  Tensor read;
  failEachAllocation(
      "readNpy", [&] { return readNpy(path, &read); },
      [&] {
        Tensor again;
        ASSERT_TRUE(readNpy(path, &again).ok());
        EXPECT_EQ(again.data<float>()[5], 5.0f);
      });
  failEachAllocation(
      "writeNpy", [&] { return writeNpy(path, tensor); }, [] {});
  std::filesystem::remove(path);
  Tensor copy;
  failEachAllocation(
      "Tensor::clone", [&] { return tensor.clone(&copy); },
      [&] {
        Tensor again;
        ASSERT_TRUE(tensor.clone(&again).ok());
        EXPECT_NE(again.data(), tensor.data());
        EXPECT_EQ(again.data<float>()[4], 4.0f);
      });
}

TEST(TensorAllocateTest, StatusFormRefusesImpossibleShapes) {
  Tensor t;
  EXPECT_EQ(Tensor::allocate(DType::kFloat32, {-1, 4}, &t).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::allocate(DType::kFloat32, {int64_t{1} << 40, int64_t{1} << 40}, &t).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(Tensor::allocate(DType::kInt32, {2, 2}, &t).ok());
  EXPECT_EQ(t.shape(), (Shape{2, 2}));
  EXPECT_EQ(t.data<int32_t>()[3], 0);
}

}  // namespace
}  // namespace llmc
