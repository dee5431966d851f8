// Generation over the paged KV cache on a real compiled decoder (the engine paths are the
// arguments; ctest compiles test/models/demo for them): the KV-cache path must produce exactly
// the tokens of full recomputation, greedy and beam search, and a full cache, an oversized
// prompt, an unknown token id and a cancelled request must each fail clearly and leave the
// generator usable.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "llmc/batch_generator.h"
#include "llmc/engine.h"
#include "llmc/generator.h"

namespace llmc {
namespace {

std::string g_engine_path;
std::string g_int8_engine_path;  // the demo with --quantize int8

std::shared_ptr<const Engine> loadEngine() {
  std::shared_ptr<const Engine> engine;
  Status status = Engine::load(g_engine_path, &engine);
  EXPECT_TRUE(status.ok()) << status.message();
  return engine;
}

std::unique_ptr<Generator> makeGenerator(std::shared_ptr<const Engine> engine, bool kv,
                                         int64_t kv_tokens = 0,
                                         DType kv_dtype = DType::kFloat32) {
  GeneratorConfig config;
  config.kv_cache_dtype = kv_dtype;
  config.use_kv_cache = kv;
  config.kv_cache_tokens = kv_tokens;
  std::unique_ptr<Generator> generator;
  Status status = Generator::create(std::move(engine), config, &generator);
  EXPECT_TRUE(status.ok()) << status.message();
  return generator;
}

std::vector<int32_t> promptOf(size_t length, int32_t seed) {
  std::vector<int32_t> prompt;
  for (size_t i = 0; i < length; ++i)
    prompt.push_back(static_cast<int32_t>((seed * 31 + i * 17) % 500 + 3));
  return prompt;
}

std::vector<int32_t> greedy(Generator& g, const std::vector<int32_t>& prompt, int32_t n) {
  GenerationOptions options;
  options.max_new_tokens = n;
  GenerationResult result;
  Status status = g.generate(prompt, options, nullptr, &result);
  EXPECT_TRUE(status.ok()) << status.message();
  return result.tokens;
}

TEST(KvGeneration, EngineIsALanguageModel) {
  auto engine = loadEngine();
  ASSERT_NE(engine->llmConfig(), nullptr) << "compile without --as-graph";
  EXPECT_TRUE(makeGenerator(engine, true)->usesKvCache());
  EXPECT_FALSE(makeGenerator(engine, false)->usesKvCache());
}

TEST(KvGeneration, GreedyEqualsFullRecomputation) {
  auto engine = loadEngine();
  auto kv = makeGenerator(engine, true);
  auto full = makeGenerator(engine, false);
  // Prompts across block boundaries (16), including exactly one block.
  for (size_t length : {1u, 15u, 16u, 17u, 40u}) {
    auto prompt = promptOf(length, static_cast<int32_t>(length));
    EXPECT_EQ(greedy(*kv, prompt, 24), greedy(*full, prompt, 24)) << "prompt of " << length;
  }
}

TEST(KvGeneration, Float16AndInt8CachesKeepTheGreedyTokens) {
  auto engine = loadEngine();
  auto f32 = makeGenerator(engine, true);
  auto f16 = makeGenerator(engine, true, 0, DType::kFloat16);
  auto int8 = makeGenerator(engine, true, 0, DType::kInt8);
  for (size_t length : {5u, 30u}) {
    auto prompt = promptOf(length, static_cast<int32_t>(70 + length));
    EXPECT_EQ(greedy(*f16, prompt, 16), greedy(*f32, prompt, 16)) << "prompt of " << length;
    EXPECT_EQ(greedy(*int8, prompt, 16), greedy(*f32, prompt, 16)) << "int8 cache, prompt of " << length;
  }
  GeneratorConfig bad;
  bad.kv_cache_dtype = DType::kInt32;
  std::unique_ptr<Generator> generator;
  EXPECT_EQ(Generator::create(engine, bad, &generator).code(), StatusCode::kInvalidArgument);
}

GenerationResult greedyResult(Generator& g, const std::vector<int32_t>& prompt, int32_t n) {
  GenerationOptions options;
  options.max_new_tokens = n;
  GenerationResult result;
  Status status = g.generate(prompt, options, nullptr, &result);
  EXPECT_TRUE(status.ok()) << status.message();
  return result;
}

// Blocks of 16 tokens: a 40-token prompt seen before gives its first two blocks (32 tokens)
// from the prefix cache; the third is partly new, and a prompt's last token is always computed.
TEST(KvGeneration, SharedPrefixIsReusedAndGivesTheSameTokens) {
  auto engine = loadEngine();
  auto kv = makeGenerator(engine, true);
  auto full = makeGenerator(engine, false);
  auto prompt = promptOf(40, 3);
  GenerationResult first = greedyResult(*kv, prompt, 16);
  EXPECT_EQ(first.prompt_tokens_cached, 0) << "nothing was cached before the first request";
  GenerationResult second = greedyResult(*kv, prompt, 16);
  EXPECT_EQ(second.prompt_tokens_cached, 32) << "two full blocks come from the prefix cache";
  EXPECT_EQ(first.tokens, second.tokens);
  auto longer = prompt;
  longer.push_back(7);
  GenerationResult extended = greedyResult(*kv, longer, 8);
  EXPECT_EQ(extended.prompt_tokens_cached, 32);
  EXPECT_EQ(extended.tokens, greedy(*full, longer, 8));
  // A prompt that differs in its first token shares no block.
  auto other = prompt;
  other[0] = other[0] == 5 ? 6 : 5;
  EXPECT_EQ(greedyResult(*kv, other, 4).prompt_tokens_cached, 0);
  // Beam search starts from the same cache; full recomputation never reports cached tokens.
  BeamSearchOptions beam;
  beam.num_beams = 2;
  beam.max_new_tokens = 4;
  GenerationResult beamed;
  ASSERT_TRUE(kv->beamSearch(prompt, beam, &beamed).ok());
  EXPECT_EQ(beamed.prompt_tokens_cached, 32);
  EXPECT_EQ(greedyResult(*full, prompt, 4).prompt_tokens_cached, 0);
}

TEST(KvGeneration, BeamSearchEqualsFullRecomputation) {
  auto engine = loadEngine();
  for (int32_t beams : {2, 4}) {
    BeamSearchOptions options;
    options.num_beams = beams;
    options.max_new_tokens = 12;
    GenerationResult a, b;
    auto prompt = promptOf(9, beams);
    ASSERT_TRUE(makeGenerator(engine, true)->beamSearch(prompt, options, &a).ok());
    ASSERT_TRUE(makeGenerator(engine, false)->beamSearch(prompt, options, &b).ok());
    EXPECT_EQ(a.tokens, b.tokens) << beams << " beams";
  }
}

TEST(KvGeneration, ErrorsLeaveTheGeneratorUsable) {
  auto engine = loadEngine();
  // 3 blocks of 16: a 20-token prompt plus 40 new tokens cannot fit.
  auto kv = makeGenerator(engine, true, 48);
  auto prompt = promptOf(20, 5);
  auto reference = greedy(*makeGenerator(engine, false), prompt, 10);
  GenerationOptions options;
  options.max_new_tokens = 40;
  GenerationResult result;
  Status status = kv->generate(prompt, options, nullptr, &result);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.message();
  EXPECT_NE(status.message().find("KV cache full"), std::string::npos) << status.message();
  EXPECT_EQ(greedy(*kv, prompt, 10), reference);  // the failed request freed its blocks

  options.max_new_tokens = 4;
  std::vector<int32_t> too_long(static_cast<size_t>(engine->llmConfig()->max_context), 5);
  status = kv->generate(too_long, options, nullptr, &result);
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange) << status.message();
  std::vector<int32_t> unknown = {4, 1 << 20};
  status = kv->generate(unknown, options, nullptr, &result);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();

  int seen = 0;
  options.max_new_tokens = 10;
  status = kv->generate(prompt, options, [&](int32_t) { return ++seen < 3; }, &result);
  EXPECT_EQ(status.code(), StatusCode::kCancelled) << status.message();
  EXPECT_EQ(result.tokens.size(), 3u);
  EXPECT_EQ(greedy(*kv, prompt, 10), reference);
}

// Runs every request to the end; results by request id.
std::map<int64_t, BatchGenerator::Finished> drain(BatchGenerator& batch) {
  std::map<int64_t, BatchGenerator::Finished> results;
  int steps = 0;
  while (!batch.idle() && ++steps < 10000) {
    std::vector<BatchGenerator::Finished> finished;
    Status status = batch.step(&finished);
    EXPECT_TRUE(status.ok()) << status.message();
    for (auto& f : finished) results[f.request_id] = std::move(f);
  }
  return results;
}

// Submits every request, runs the batch until idle, and expects each request's tokens and
// logprobs to be what `alone` generates for it by itself.
void expectEachAsAlone(BatchGenerator& batch, Generator& alone,
                       const std::vector<std::vector<int32_t>>& prompts,
                       const std::vector<GenerationOptions>& options, const std::string& what) {
  std::map<int64_t, size_t> index_of;
  for (size_t i = 0; i < prompts.size(); ++i) {
    int64_t id = 0;
    ASSERT_TRUE(batch.submit(prompts[i], options[i], nullptr, &id).ok());
    index_of[id] = i;
  }
  auto results = drain(batch);
  ASSERT_EQ(results.size(), prompts.size());
  for (auto& [id, finished] : results) {
    size_t i = index_of[id];
    ASSERT_TRUE(finished.status.ok()) << finished.status.message();
    GenerationResult want;
    ASSERT_TRUE(alone.generate(prompts[i], options[i], nullptr, &want).ok());
    EXPECT_EQ(finished.result.tokens, want.tokens) << "request " << i << ", " << what;
    EXPECT_EQ(finished.result.logprobs, want.logprobs) << "request " << i << ", " << what;
  }
}

TEST(ContinuousBatching, EachRequestGetsWhatItWouldGetAlone) {
  auto engine = loadEngine();
  auto alone = makeGenerator(engine, true);
  BatchConfig config;
  config.max_step_tokens = 12;  // prompts prefill in chunks, mixed with other requests' decode
  config.max_running = 3;       // the rest wait and join as others finish
  std::unique_ptr<BatchGenerator> batch;
  ASSERT_TRUE(BatchGenerator::create(engine, config, &batch).ok());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerationOptions> options;
  for (size_t i = 0; i < 6; ++i) {
    prompts.push_back(promptOf(3 + 9 * i, static_cast<int32_t>(40 + i)));
    GenerationOptions o;
    o.max_new_tokens = static_cast<int32_t>(6 + 3 * i);
    if (i % 2) {  // sampled requests: the same seed gives the same tokens in a batch
      o.sampling.temperature = 0.9f;
      o.sampling.top_k = 40;
      o.sampling.seed = 100 + i;
    }
    options.push_back(o);
  }
  expectEachAsAlone(*batch, *alone, prompts, options, "chunked");
}

TEST(ContinuousBatching, CancellationAndAdmissionByCacheSpace) {
  auto engine = loadEngine();
  BatchConfig config;
  config.kv_cache_tokens = 64;  // 4 blocks: room for one 40-token request at a time
  std::unique_ptr<BatchGenerator> batch;
  ASSERT_TRUE(BatchGenerator::create(engine, config, &batch).ok());
  GenerationOptions options;
  options.max_new_tokens = 20;
  int64_t a = 0, b = 0, c = 0;
  int seen = 0;
  ASSERT_TRUE(batch->submit(promptOf(20, 1), options, [&](int32_t) { return ++seen < 4; }, &a).ok());
  ASSERT_TRUE(batch->submit(promptOf(20, 2), options, nullptr, &b).ok());
  std::vector<BatchGenerator::Finished> finished;
  ASSERT_TRUE(batch->step(&finished).ok());
  EXPECT_EQ(batch->numRunning(), 1u);  // b waits for a's blocks
  EXPECT_EQ(batch->numWaiting(), 1u);
  auto results = drain(*batch);
  EXPECT_EQ(results[a].status.code(), StatusCode::kCancelled);
  EXPECT_EQ(results[a].result.tokens.size(), 4u);
  ASSERT_TRUE(results[b].status.ok()) << results[b].status.message();
  EXPECT_EQ(results[b].result.tokens, greedy(*makeGenerator(engine, false), promptOf(20, 2), 20));
  // A request that can never fit is refused up front.
  options.max_new_tokens = 60;
  EXPECT_EQ(batch->submit(promptOf(20, 3), options, nullptr, &c).code(),
            StatusCode::kResourceExhausted);
}

// A cache too small for every running request's growth: the newest are preempted and
// recompute later, and every request still gets exactly its tokens alone (greedy and seeded).
TEST(ContinuousBatching, PreemptionRecomputesWithoutChangingTokens) {
  auto engine = loadEngine();
  auto alone = makeGenerator(engine, true);
  for (int32_t step_tokens : {256, 7}) {
    BatchConfig config;
    config.kv_cache_tokens = 96;  // 6 blocks of 16: one 60-token request needs 4
    config.max_step_tokens = step_tokens;
    std::unique_ptr<BatchGenerator> batch;
    ASSERT_TRUE(BatchGenerator::create(engine, config, &batch).ok());
    std::vector<std::vector<int32_t>> prompts;
    std::vector<GenerationOptions> options;
    for (size_t i = 0; i < 4; ++i) {
      prompts.push_back(promptOf(20, static_cast<int32_t>(60 + i)));
      GenerationOptions o;
      o.max_new_tokens = 40;
      if (i % 2) {
        o.sampling.temperature = 0.8f;
        o.sampling.repetition_penalty = 1.2f;  // sampler state that must survive a preemption
        o.sampling.seed = 7 + i;
      }
      options.push_back(o);
    }
    expectEachAsAlone(*batch, *alone, prompts, options,
                      "max_step_tokens " + std::to_string(step_tokens));
    EXPECT_GT(batch->stats().preemptions, 0) << "max_step_tokens " << step_tokens;
    EXPECT_EQ(batch->stats().kv_blocks_used, 0);
  }
}

// cancel() ends a waiting request and a running one still in its prompt (no token yet)
// before any engine run, frees their blocks, and leaves the others' tokens unchanged.
TEST(ContinuousBatching, CancelBeforeTheFirstToken) {
  auto engine = loadEngine();
  BatchConfig config;
  config.kv_cache_tokens = 64;  // room for one 40-token request at a time
  config.max_step_tokens = 8;   // a 20-token prompt takes three steps
  std::unique_ptr<BatchGenerator> batch;
  ASSERT_TRUE(BatchGenerator::create(engine, config, &batch).ok());
  GenerationOptions options;
  options.max_new_tokens = 20;
  int64_t a = 0, b = 0, c = 0;
  int a_tokens = 0;
  ASSERT_TRUE(batch
                  ->submit(
                      promptOf(20, 1), options, [&](int32_t) { return ++a_tokens > 0; }, &a)
                  .ok());
  ASSERT_TRUE(batch->submit(promptOf(20, 2), options, nullptr, &b).ok());
  ASSERT_TRUE(batch->submit(promptOf(20, 3), options, nullptr, &c).ok());
  std::vector<BatchGenerator::Finished> finished;
  ASSERT_TRUE(batch->step(&finished).ok());  // a: 8 of its 20 prompt tokens
  EXPECT_EQ(batch->numRunning(), 1u);
  EXPECT_EQ(batch->numWaiting(), 2u);
  ASSERT_TRUE(batch->cancel(a).ok());  // running, in its prompt
  ASSERT_TRUE(batch->cancel(b).ok());  // waiting
  EXPECT_EQ(batch->cancel(12345).code(), StatusCode::kNotFound);
  auto results = drain(*batch);
  EXPECT_EQ(a_tokens, 0);
  EXPECT_EQ(results[a].status.code(), StatusCode::kCancelled);
  EXPECT_TRUE(results[a].result.tokens.empty());
  EXPECT_EQ(results[b].status.code(), StatusCode::kCancelled);
  ASSERT_TRUE(results[c].status.ok()) << results[c].status.message();
  EXPECT_EQ(results[c].result.tokens, greedy(*makeGenerator(engine, false), promptOf(20, 3), 20));
  EXPECT_EQ(batch->stats().kv_blocks_used, 0);
}

// A request whose prompt an earlier one on the same batch generator left in the cache
// prefills only the rest.
TEST(ContinuousBatching, SharedPrefixIsReused) {
  auto engine = loadEngine();
  std::unique_ptr<BatchGenerator> batch;
  ASSERT_TRUE(BatchGenerator::create(engine, BatchConfig(), &batch).ok());
  GenerationOptions options;
  options.max_new_tokens = 6;
  const auto prompt = promptOf(40, 9);
  int64_t first = 0, second = 0;
  ASSERT_TRUE(batch->submit(prompt, options, nullptr, &first).ok());
  auto results = drain(*batch);
  ASSERT_TRUE(results[first].status.ok()) << results[first].status.message();
  EXPECT_EQ(results[first].result.prompt_tokens_cached, 0);
  ASSERT_TRUE(batch->submit(prompt, options, nullptr, &second).ok());
  results = drain(*batch);
  ASSERT_TRUE(results[second].status.ok()) << results[second].status.message();
  EXPECT_EQ(results[second].result.prompt_tokens_cached, 32);
  EXPECT_EQ(results[second].result.tokens, greedy(*makeGenerator(engine, false), prompt, 6));
}

// The demo compiled with its tokenizer cut to 1,000 ids (test/models/demo/tokenizer_1000.json)
// beside its 2,048 logits rows, as checkpoints pad their embeddings beyond their tokenizers: the
// other ids are never chosen. Excluding them must equal a logit bias of -inf on each, on the
// engine without the tokenizer, token for token and log-probability for log-probability.
constexpr int32_t kSmallVocab = 1000;
std::string g_small_tokenizer_engine_path;

std::vector<GenerationOptions> sampledOptions(size_t count, bool bias_the_rest) {
  std::vector<GenerationOptions> options;
  for (size_t i = 0; i < count; ++i) {
    GenerationOptions o;
    o.max_new_tokens = 32;
    o.sampling.temperature = 1.5f;  // hot: the plain engine picks ids >= 1,000 often
    o.sampling.seed = 7 + i;
    if (bias_the_rest)
      for (int32_t id = kSmallVocab; id < 2048; ++id)
        o.sampling.logit_bias.push_back({id, -INFINITY});
    options.push_back(o);
  }
  return options;
}

TEST(SmallTokenizer, IdsTheTokenizerCannotDecodeAreNeverChosen) {
  auto plain_engine = loadEngine();
  std::shared_ptr<const Engine> small_engine;
  ASSERT_TRUE(Engine::load(g_small_tokenizer_engine_path, &small_engine).ok());
  ASSERT_EQ(small_engine->llmConfig()->vocab_size, 2048);
  auto plain = makeGenerator(plain_engine, true);
  auto small = makeGenerator(small_engine, true);
  auto small_full = makeGenerator(small_engine, false);
  ASSERT_NE(small->tokenizer(), nullptr);
  ASSERT_EQ(small->tokenizer()->vocabSize(), kSmallVocab);
  const auto unbiased = sampledOptions(4, false), biased = sampledOptions(4, true);
  bool plain_went_beyond = false;
  for (size_t i = 0; i < unbiased.size(); ++i) {
    auto prompt = promptOf(9 + 5 * i, static_cast<int32_t>(i));
    GenerationResult free_result, small_result, biased_result;
    ASSERT_TRUE(plain->generate(prompt, unbiased[i], nullptr, &free_result).ok());
    for (int32_t id : free_result.tokens) plain_went_beyond |= id >= kSmallVocab;
    Status status = small->generate(prompt, unbiased[i], nullptr, &small_result);
    ASSERT_TRUE(status.ok()) << status.message();
    for (int32_t id : small_result.tokens) EXPECT_LT(id, kSmallVocab) << "request " << i;
    EXPECT_FALSE(small_result.text.empty());
    ASSERT_TRUE(plain->generate(prompt, biased[i], nullptr, &biased_result).ok());
    EXPECT_EQ(small_result.tokens, biased_result.tokens) << "request " << i;
    EXPECT_EQ(small_result.logprobs, biased_result.logprobs) << "request " << i;
    // Full recomputation's greedy tokens over the cut vocabulary are the KV path's.
    EXPECT_EQ(greedy(*small_full, prompt, 12), greedy(*small, prompt, 12));
    BeamSearchOptions beams;
    beams.num_beams = 3;
    beams.max_new_tokens = 8;
    status = small->beamSearch(prompt, beams, &small_result);
    ASSERT_TRUE(status.ok()) << status.message();
    for (int32_t id : small_result.tokens) EXPECT_LT(id, kSmallVocab);
  }
  EXPECT_TRUE(plain_went_beyond) << "the test never reached an id beyond the tokenizer";

  // Continuous batching excludes the same ids (the engine's tokenizer): each request as alone.
  BatchConfig config;
  config.max_step_tokens = 16;
  config.max_running = 2;
  std::unique_ptr<BatchGenerator> batch;
  ASSERT_TRUE(BatchGenerator::create(small_engine, config, &batch).ok());
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < unbiased.size(); ++i)
    prompts.push_back(promptOf(5 + 7 * i, static_cast<int32_t>(20 + i)));
  expectEachAsAlone(*batch, *small, prompts, unbiased, "small tokenizer");
}

// The default cache is the engine's choice: float32 for a float32 engine (so that the cache
// path computes what recomputation does), float16 for one with quantized weights; an explicit
// dtype is kept either way.
TEST(KvCacheDtype, AutoIsTheEnginesChoice) {
  for (const char* name : {"auto", "f32", "f16", "bf16", "int8", "fp8"}) {
    DType dtype = DType::kInt32;
    ASSERT_TRUE(kvCacheDtypeFromName(name, &dtype)) << name;
    EXPECT_STREQ(kvCacheDtypeName(dtype), name);
  }
  DType unknown = DType::kInt32;
  EXPECT_FALSE(kvCacheDtypeFromName("f64", &unknown));
  EXPECT_EQ(unknown, DType::kInt32);
  EXPECT_EQ(GeneratorConfig{}.kv_cache_dtype, kKvCacheAuto);
  EXPECT_EQ(BatchConfig{}.kv_cache_dtype, kKvCacheAuto);

  auto float_engine = loadEngine();
  EXPECT_EQ(kvCacheDtypeFor(*float_engine), DType::kFloat32);
  EXPECT_EQ(makeGenerator(float_engine, true, 0, kKvCacheAuto)->kvCacheDtype(), DType::kFloat32);
  EXPECT_EQ(makeGenerator(float_engine, true, 0, DType::kBFloat16)->kvCacheDtype(),
            DType::kBFloat16);
  EXPECT_EQ(makeGenerator(float_engine, false, 0, kKvCacheAuto)->kvCacheDtype(), DType::kUndefined);

  std::shared_ptr<const Engine> int8_engine;
  ASSERT_TRUE(Engine::load(g_int8_engine_path, &int8_engine).ok());
  EXPECT_EQ(kvCacheDtypeFor(*int8_engine), DType::kFloat16);
  auto automatic = makeGenerator(int8_engine, true, 0, kKvCacheAuto);
  auto f16 = makeGenerator(int8_engine, true, 0, DType::kFloat16);
  auto f32 = makeGenerator(int8_engine, true, 0, DType::kFloat32);
  EXPECT_EQ(automatic->kvCacheDtype(), DType::kFloat16);
  EXPECT_EQ(f32->kvCacheDtype(), DType::kFloat32);
  // What the cache stores shows in the logprobs: bit for bit float16's, not float32's.
  bool differs_from_f32 = false;
  for (size_t length : {7u, 40u}) {
    auto prompt = promptOf(length, static_cast<int32_t>(90 + length));
    GenerationResult a = greedyResult(*automatic, prompt, 12);
    GenerationResult b = greedyResult(*f16, prompt, 12);
    GenerationResult c = greedyResult(*f32, prompt, 12);
    EXPECT_EQ(a.tokens, b.tokens) << "prompt of " << length;
    EXPECT_EQ(a.logprobs, b.logprobs) << "prompt of " << length;
    differs_from_f32 |= a.logprobs != c.logprobs;
  }
  EXPECT_TRUE(differs_from_f32) << "a float16 cache gave float32's logprobs bit for bit";

  BatchConfig config;
  std::unique_ptr<BatchGenerator> batch;
  ASSERT_TRUE(BatchGenerator::create(int8_engine, config, &batch).ok());
  EXPECT_EQ(batch->kvCacheDtype(), DType::kFloat16);
  config.kv_cache_dtype = DType::kFloat32;
  ASSERT_TRUE(BatchGenerator::create(int8_engine, config, &batch).ok());
  EXPECT_EQ(batch->kvCacheDtype(), DType::kFloat32);
  ASSERT_TRUE(BatchGenerator::create(float_engine, BatchConfig{}, &batch).ok());
  EXPECT_EQ(batch->kvCacheDtype(), DType::kFloat32);
}

}  // namespace
}  // namespace llmc

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 4) {
    std::fprintf(stderr,
                 "usage: %s ENGINE SMALL_TOKENIZER_ENGINE INT8_ENGINE (the demo compiled by llmc, "
                 "without and with test/models/demo/tokenizer_1000.json, and with --quantize "
                 "int8)\n",
                 argv[0]);
    return 2;
  }
  llmc::g_engine_path = argv[1];
  llmc::g_small_tokenizer_engine_path = argv[2];
  llmc::g_int8_engine_path = argv[3];
  return RUN_ALL_TESTS();
}
