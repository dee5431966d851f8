// The thread safety the public headers state, exercised from several threads at once; run
// under ThreadSanitizer by scripts/test.sh (build/tsan), where any data race fails the run.
// Shared between threads: an Engine, a Tokenizer (const methods), Tensors that are only read.
// One per thread: Session, Generator, BatchGenerator, StreamDecoder.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "llmc/batch_generator.h"
#include "llmc/engine.h"
#include "llmc/generator.h"
#include "llmc/session.h"
#include "llmc/tokenizer.h"
#include "one_hot_engine.h"

namespace llmc {
namespace {

constexpr int kThreads = 4;

// Runs `body(thread_index)` on kThreads threads at once and joins them.
template <typename Body>
void onThreads(Body body) {
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(body, t);
  for (std::thread& thread : threads) thread.join();
}

std::shared_ptr<const Tokenizer> gpt2Tokenizer() {
  std::filesystem::path path = std::filesystem::path(LLMC_TEST_SOURCE_DIR) / "models" /
                               "tokenizers" / "gpt2_bpe" / "tokenizer.json";
  std::unique_ptr<Tokenizer> tokenizer;
  Status status = Tokenizer::fromFile(path.string(), &tokenizer);
  EXPECT_TRUE(status.ok()) << status.toString();
  return std::shared_ptr<const Tokenizer>(std::move(tokenizer));
}

// One Engine (and its weights) shared by every thread; each thread runs its own Session.
TEST(ThreadSafetyTest, OneEngineSharedBySessionsOnFourThreads) {
  std::shared_ptr<const Engine> engine = testing::oneHotEngine();
  std::vector<int> failures(kThreads, 0);
  onThreads([&](int t) {
    std::unique_ptr<Session> session;
    if (!Session::create(engine, &session).ok()) {
      ++failures[t];
      return;
    }
    for (int run = 0; run < 20; ++run) {
      const int64_t token = (t + run) % testing::kOneHotVocab;
      Tensor ids = Tensor::allocate(DType::kInt64, {1, 2});
      ids.data<int64_t>()[1] = token;
      std::vector<NamedTensor> outputs;
      if (!session->run({{"input_ids", ids}}, &outputs).ok() ||
          outputs[0].tensor.data<float>()[testing::kOneHotVocab + token] != 1.0f)
        ++failures[t];
      // Engine accessors from every thread at once.
      if (engine->inputs().size() != 1 || engine->numSteps() != 1) ++failures[t];
    }
  });
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

// One Engine shared by Generators (KV cache and recomputation) and a BatchGenerator per
// thread, all sharing one Tokenizer for their result text.
TEST(ThreadSafetyTest, GeneratorsOnFourThreadsShareEngineAndTokenizer) {
  std::shared_ptr<const Engine> engine = testing::oneHotEngine(/*as_language_model=*/true);
  std::shared_ptr<const Tokenizer> tokenizer = gpt2Tokenizer();
  ASSERT_TRUE(tokenizer);
  std::vector<std::string> errors(kThreads);
  onThreads([&](int t) {
    GeneratorConfig config;
    config.use_kv_cache = t % 2 == 0;
    std::unique_ptr<Generator> generator;
    Status status = Generator::create(engine, config, &generator);
    if (!status.ok()) {
      errors[t] = status.toString();
      return;
    }
    generator->setTokenizer(tokenizer);
    GenerationOptions options;
    options.max_new_tokens = 6;
    options.stop_strings = {"never appears"};
    for (int request = 0; request < 5; ++request) {
      const int32_t last = static_cast<int32_t>((t + request) % testing::kOneHotVocab);
      GenerationResult result;
      status = generator->generate(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, last}, options,
                                   nullptr, &result);
      if (!status.ok() || result.tokens != std::vector<int32_t>(6, last)) {
        errors[t] = "generate: " + status.toString();
        return;
      }
    }
    std::unique_ptr<BatchGenerator> batch;
    status = BatchGenerator::create(engine, BatchConfig(), &batch);
    GenerationOptions batch_options;
    batch_options.max_new_tokens = 5;
    std::vector<BatchGenerator::Finished> finished;
    int64_t id = 0;
    for (int request = 0; status.ok() && request < 3; ++request)
      status = batch->submit(std::vector<int32_t>{4, 5, t}, batch_options, nullptr, &id);
    for (int i = 0; status.ok() && i < 100 && !batch->idle(); ++i) status = batch->step(&finished);
    if (!status.ok() || finished.size() != 3) {
      errors[t] = "batch: " + status.toString();
      return;
    }
    for (const BatchGenerator::Finished& f : finished)
      if (!f.status.ok() || f.result.tokens != std::vector<int32_t>(5, t))
        errors[t] = "batch request: " + f.status.toString();
  });
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
}

// One Tokenizer encoding and decoding on four threads (its BPE word cache is shared), each
// thread with its own StreamDecoder; every result equals the single-threaded one.
TEST(ThreadSafetyTest, OneTokenizerEncodesAndDecodesOnFourThreads) {
  std::shared_ptr<const Tokenizer> tokenizer = gpt2Tokenizer();
  ASSERT_TRUE(tokenizer);
  std::vector<std::string> texts;
  for (int i = 0; i < 40; ++i)
    texts.push_back("thread safety " + std::to_string(i) + ": caching words like tokenizer, " +
                    "concurrency and sanitizer again and again " + std::to_string(i * 7919));
  std::unique_ptr<Tokenizer> reference;
  // The expected ids, from a separate tokenizer whose cache no thread touches.
  ASSERT_TRUE(Tokenizer::fromFile((std::filesystem::path(LLMC_TEST_SOURCE_DIR) / "models" /
                                   "tokenizers" / "gpt2_bpe" / "tokenizer.json")
                                      .string(),
                                  &reference)
                  .ok());
  std::vector<std::vector<int32_t>> want(texts.size());
  for (size_t i = 0; i < texts.size(); ++i)
    ASSERT_TRUE(reference->encode(texts[i], false, &want[i]).ok());
  std::vector<int> failures(kThreads, 0);
  onThreads([&](int t) {
    for (size_t k = 0; k < texts.size(); ++k) {
      const size_t i = (k + static_cast<size_t>(t) * 7) % texts.size();
      std::vector<int32_t> ids;
      std::string text;
      if (!tokenizer->encode(texts[i], false, &ids).ok() || ids != want[i]) ++failures[t];
      if (!tokenizer->decode(ids, false, &text).ok() || text != texts[i]) ++failures[t];
      std::unique_ptr<Tokenizer::StreamDecoder> stream = tokenizer->streamDecoder(false);
      std::string streamed;
      for (int32_t id : ids)
        if (!stream->step(id, &streamed).ok()) ++failures[t];
      if (!stream->finish(&streamed).ok() || streamed != texts[i]) ++failures[t];
      if (tokenizer->tokenToId(tokenizer->idToToken(ids[0])) != ids[0]) ++failures[t];
    }
  });
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace llmc
