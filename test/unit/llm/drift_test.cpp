// Output-drift statistics: the sampler's entropy and model logprob against a long-double
// reference over random, extreme and masked logits (and unchanged by every sampling option);
// quantile histograms (ties, boundaries, NaN); PSI (zero, hand-computed, non-negative, growing
// with the shift); the calibration run on the one-hot language model; storing a baseline in an
// engine file and refusing corrupted ones at load.
#include "llmc/drift.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/engine_file.h"
#include "llm/sampler.h"
#include "llmc/engine_generated.h"
#include "llmc/refit.h"
#include "one_hot_engine.h"
#include "status_test_util.h"

namespace llmc {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Entropy (nats) and log-probabilities of softmax(logits) in long double.
struct Reference {
  long double entropy = 0;
  std::vector<long double> logprob;
};
Reference reference(const std::vector<float>& logits) {
  long double max_logit = -INFINITY;
  for (float l : logits) max_logit = std::max<long double>(max_logit, l);
  long double z = 0;
  for (float l : logits)
    if (l != kNegInf) z += std::exp(static_cast<long double>(l) - max_logit);
  Reference r;
  for (float l : logits) {
    const long double lp =
        l == kNegInf ? -INFINITY : static_cast<long double>(l) - max_logit - std::log(z);
    r.logprob.push_back(lp);
    if (l != kNegInf) r.entropy -= std::exp(lp) * lp;
  }
  return r;
}

void expectStatistics(const std::vector<float>& logits, SamplingParams params) {
  params.model_statistics_tokens = -1;
  std::unique_ptr<Sampler> sampler;
  ASSERT_OK(Sampler::create(params, static_cast<int32_t>(logits.size()), {}, &sampler));
  SampledToken token;
  ASSERT_OK(sampler->sample(logits, &token));
  const Reference r = reference(logits);
  // float32 logits, float exp, double sums: a few ulps of the largest term.
  EXPECT_NEAR(token.entropy, static_cast<double>(r.entropy), 1e-5 * std::max(1.0L, r.entropy));
  const long double want = r.logprob[static_cast<size_t>(token.id)];
  EXPECT_NEAR(token.model_logprob, static_cast<double>(want),
              1e-5 * std::max(1.0L, std::fabs(want)));
}

TEST(DriftStatistics, EntropyAndModelLogprobMatchTheReference) {
  std::mt19937 rng(7);
  for (int vocab : {1, 2, 10, 1000, 50000}) {
    for (float scale : {0.0f, 0.01f, 1.0f, 10.0f, 1000.0f}) {
      std::normal_distribution<float> normal(0, scale);
      std::vector<float> logits(static_cast<size_t>(vocab));
      for (float& l : logits) l = normal(rng) + 1e4f * (scale == 1000.0f);  // also far from 0
      SamplingParams greedy;
      expectStatistics(logits, greedy);
      SamplingParams sampled;
      sampled.temperature = 0.7f;
      sampled.top_k = 5;
      sampled.seed = static_cast<uint64_t>(vocab);
      expectStatistics(logits, sampled);
    }
  }
}

TEST(DriftStatistics, EdgeDistributions) {
  // Uniform: log V. One certain token: 0. Masked tokens carry no mass.
  std::unique_ptr<Sampler> sampler;
  SampledToken token;
  SamplingParams every;
  every.model_statistics_tokens = -1;
  ASSERT_OK(Sampler::create(every, 1024, {}, &sampler));
  ASSERT_OK(sampler->sample(std::vector<float>(1024, 3.0f), &token));
  EXPECT_NEAR(token.entropy, std::log(1024.0), 1e-6);
  EXPECT_NEAR(token.model_logprob, -std::log(1024.0), 1e-6);
  std::vector<float> certain(1024, kNegInf);
  certain[17] = 5;
  ASSERT_OK(sampler->sample(certain, &token));
  EXPECT_EQ(token.id, 17);
  EXPECT_EQ(token.entropy, 0.0f);
  EXPECT_EQ(token.model_logprob, 0.0f);
  // A range past FLT_MAX: the far token has no mass (no NaN from 0 x -inf).
  std::vector<float> wide = {3e38f, -3e38f, 3e38f};
  std::unique_ptr<Sampler> three;
  ASSERT_OK(Sampler::create(every, 3, {}, &three));
  ASSERT_OK(three->sample(wide, &token));
  EXPECT_NEAR(token.entropy, std::log(2.0), 1e-6);
  EXPECT_NEAR(token.model_logprob, -std::log(2.0), 1e-6);
  std::vector<float> half(1024, kNegInf);
  half[3] = half[900] = -1e30f;
  ASSERT_OK(sampler->sample(half, &token));
  EXPECT_NEAR(token.entropy, std::log(2.0), 1e-6);
  EXPECT_NEAR(token.model_logprob, -std::log(2.0), 1e-6);
}

TEST(DriftStatistics, SamplingOptionsDoNotChangeThem) {
  // Bias, penalties, temperature and truncation change the token chosen, never the model's
  // distribution: the statistics of a given token stay the raw softmax's.
  std::vector<float> logits = {2.0f, 1.0f, 0.5f, -1.0f, 3.0f, 0.0f};
  const Reference r = reference(logits);
  SamplingParams p;
  p.temperature = 1.3f;
  p.top_p = 0.9f;
  p.min_p = 0.01f;
  p.repetition_penalty = 1.5f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.logit_bias = {{1, 4.0f}, {4, -100.0f}};
  p.model_statistics_tokens = 50;
  std::unique_ptr<Sampler> sampler;
  ASSERT_OK(Sampler::create(p, 6, std::vector<int32_t>{0, 1, 2}, &sampler));
  for (int i = 0; i < 50; ++i) {
    SampledToken token;
    ASSERT_OK(sampler->sample(logits, &token));
    EXPECT_NEAR(token.entropy, static_cast<double>(r.entropy), 1e-6);
    EXPECT_NEAR(token.model_logprob, static_cast<double>(r.logprob[static_cast<size_t>(token.id)]),
                1e-6);
  }
}

TEST(DriftStatistics, OnlyTheTokensAskedFor) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  for (int32_t wanted : {0, 1, 3}) {
    SamplingParams p;
    p.model_statistics_tokens = wanted;
    std::unique_ptr<Sampler> sampler;
    ASSERT_OK(Sampler::create(p, 3, {}, &sampler));
    for (int32_t i = 0; i < 5; ++i) {
      SampledToken token;
      ASSERT_OK(sampler->sample(logits, &token));
      EXPECT_EQ(std::isnan(token.entropy), i >= wanted) << wanted << " " << i;
      EXPECT_EQ(std::isnan(token.model_logprob), i >= wanted) << wanted << " " << i;
    }
  }
  SamplingParams bad;
  bad.model_statistics_tokens = -2;
  std::unique_ptr<Sampler> sampler;
  EXPECT_EQ(Sampler::create(bad, 3, {}, &sampler).code(), StatusCode::kInvalidArgument);
}

TEST(DriftHistogram, QuantileBinsAndBoundaries) {
  std::vector<float> samples;
  for (int i = 1; i <= 100; ++i) samples.push_back(static_cast<float>(i));
  samples.push_back(NAN);  // skipped
  DriftHistogram h;
  ASSERT_OK(DriftHistogram::fromSamples(samples, 10, "test", &h));
  ASSERT_EQ(h.edges.size(), 9u);
  EXPECT_EQ(h.edges.front(), 11.0f);  // the 10th percentile: 10 values below it
  EXPECT_EQ(h.edges.back(), 91.0f);
  EXPECT_EQ(h.total(), 100u);
  EXPECT_EQ(h.counts.front(), 11u);  // (-inf, 11] holds 1..11
  EXPECT_EQ(h.bin(11.0f), 0u);       // a value on an edge goes below it
  EXPECT_EQ(h.bin(11.5f), 1u);
  EXPECT_EQ(h.bin(-1e30f), 0u);
  EXPECT_EQ(h.bin(1e30f), 9u);
  EXPECT_EQ(h.bin(kNegInf), 0u);
  EXPECT_EQ(h.bin(std::numeric_limits<float>::infinity()), 9u);
  ASSERT_OK(h.check("test"));

  // Ties collapse edges: half the samples at 0 leave fewer bins, all counted.
  std::vector<float> tied(50, 0.0f);
  for (int i = 0; i < 50; ++i) tied.push_back(static_cast<float>(i + 1));
  ASSERT_OK(DriftHistogram::fromSamples(tied, 10, "test", &h));
  EXPECT_EQ(h.edges.front(), 0.0f);
  EXPECT_EQ(h.counts.front(), 50u);
  EXPECT_LT(h.edges.size(), 9u);
  EXPECT_EQ(h.total(), 100u);
  ASSERT_OK(h.check("test"));
  // One value: one edge, everything in the first bin.
  ASSERT_OK(DriftHistogram::fromSamples(std::vector<float>(20, 2.5f), 10, "test", &h));
  EXPECT_EQ(h.edges, std::vector<float>{2.5f});
  EXPECT_EQ(h.counts, (std::vector<uint64_t>{20, 0}));

  EXPECT_EQ(DriftHistogram::fromSamples({NAN, NAN}, 10, "test", &h).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DriftHistogram::fromSamples({1.0f}, 1, "test", &h).code(),
            StatusCode::kInvalidArgument);
}

TEST(DriftHistogram, CheckRefusesCorruption) {
  DriftHistogram h{{1.0f, 2.0f}, {1, 2, 3}};
  ASSERT_OK(h.check("h"));
  EXPECT_EQ(DriftHistogram({{2.0f, 1.0f}, {1, 2, 3}}).check("h").code(), StatusCode::kDataLoss);
  EXPECT_EQ(DriftHistogram({{1.0f, 1.0f}, {1, 2, 3}}).check("h").code(), StatusCode::kDataLoss);
  EXPECT_EQ(DriftHistogram({{1.0f, NAN}, {1, 2, 3}}).check("h").code(), StatusCode::kDataLoss);
  EXPECT_EQ(DriftHistogram({{1.0f, INFINITY}, {1, 2, 3}}).check("h").code(), StatusCode::kDataLoss);
  EXPECT_EQ(DriftHistogram({{1.0f, 2.0f}, {1, 2}}).check("h").code(), StatusCode::kDataLoss);
  EXPECT_EQ(DriftHistogram({{1.0f}, {~uint64_t{0}, 2}}).check("h").code(), StatusCode::kDataLoss);
  EXPECT_NE(
      DriftHistogram({{2.0f, 1.0f}, {1, 2, 3}}).check("the entropy").message().find("the entropy"),
      std::string::npos);
}

TEST(DriftPsi, ValuesAndProperties) {
  const std::vector<uint64_t> base = {25, 25, 25, 25};
  EXPECT_EQ(populationStabilityIndex(base, base), 0.0);
  EXPECT_NEAR(populationStabilityIndex(base, std::vector<uint64_t>{50, 50, 50, 50}), 0.0, 1e-15);
  EXPECT_EQ(populationStabilityIndex(base, std::vector<uint64_t>{0, 0, 0, 0}), 0.0);
  // By hand, with half a token added to every bin of both: e = 25.5/102, a = (x + 0.5)/102.
  const std::vector<uint64_t> shifted = {40, 30, 20, 10};
  double want = 0;
  for (uint64_t x : shifted) {
    const double e = 25.5 / 102, a = (static_cast<double>(x) + 0.5) / 102;
    want += (a - e) * std::log(a / e);
  }
  EXPECT_NEAR(populationStabilityIndex(base, shifted), want, 1e-15);
  // An empty bin gives a large finite score, not infinity.
  const double extreme = populationStabilityIndex(base, std::vector<uint64_t>{100, 0, 0, 0});
  EXPECT_TRUE(std::isfinite(extreme));
  EXPECT_GT(extreme, 2.0);
  // Non-negative, and growing as mass moves further from the baseline.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint64_t> a(10), b(10);
    for (size_t i = 0; i < 10; ++i) a[i] = rng() % 100, b[i] = rng() % 100;
    EXPECT_GE(populationStabilityIndex(a, b), 0.0);
  }
  double previous = 0;
  for (uint64_t moved = 1; moved <= 25; ++moved) {
    const double psi =
        populationStabilityIndex(base, std::vector<uint64_t>{25 + moved, 25, 25, 25 - moved});
    EXPECT_GT(psi, previous);
    previous = psi;
  }
}

DriftBaseline smallBaseline() {
  DriftBaseline b;
  b.entropy = {{0.5f, 1.0f}, {3, 4, 5}};
  b.logprob = {{-2.0f}, {6, 6}};
  b.tokens = 12;
  b.new_tokens = 4;
  b.source = "unit test";
  return b;
}

TEST(DriftBaselineFile, StoredLoadedAndReplaced) {
  const std::vector<uint8_t> file = testing::oneHotEngineFile(true);
  std::vector<uint8_t> with;
  ASSERT_OK(setDriftBaseline(file, "one_hot.engine", smallBaseline(), &with));
  std::shared_ptr<const Engine> engine;
  ASSERT_OK(Engine::loadFromMemory(with, "with", &engine));
  ASSERT_NE(engine->driftBaseline(), nullptr);
  const DriftBaseline& got = *engine->driftBaseline();
  EXPECT_EQ(got.entropy.edges, smallBaseline().entropy.edges);
  EXPECT_EQ(got.entropy.counts, smallBaseline().entropy.counts);
  EXPECT_EQ(got.logprob.edges, smallBaseline().logprob.edges);
  EXPECT_EQ(got.logprob.counts, smallBaseline().logprob.counts);
  EXPECT_EQ(got.tokens, 12u);
  EXPECT_EQ(got.new_tokens, 4);
  EXPECT_EQ(got.source, "unit test");
  ASSERT_NE(engine->llmConfig(), nullptr);  // everything else kept
  EXPECT_EQ(engine->numSteps(), testing::oneHotEngine(true)->numSteps());
  EXPECT_EQ(testing::oneHotEngine(true)->driftBaseline(), nullptr);

  DriftBaseline second = smallBaseline();
  second.source = "second";
  std::vector<uint8_t> replaced;
  ASSERT_OK(setDriftBaseline(with, "with", second, &replaced));
  ASSERT_OK(Engine::loadFromMemory(replaced, "replaced", &engine));
  EXPECT_EQ(engine->driftBaseline()->source, "second");

  // Refit drops it (it describes the old weights' outputs), and so can clearDriftBaseline.
  std::vector<uint8_t> refit, cleared;
  ASSERT_OK(refitEngine(with, "with", {}, &refit));
  ASSERT_OK(Engine::loadFromMemory(refit, "refit", &engine));
  EXPECT_EQ(engine->driftBaseline(), nullptr);
  EXPECT_EQ(engine->numSteps(), testing::oneHotEngine(true)->numSteps());
  ASSERT_OK(clearDriftBaseline(with, "with", &cleared));
  ASSERT_OK(Engine::loadFromMemory(cleared, "cleared", &engine));
  EXPECT_EQ(engine->driftBaseline(), nullptr);

  DriftBaseline bad = smallBaseline();
  bad.tokens = 13;  // the histograms count 12
  EXPECT_EQ(setDriftBaseline(file, "f", bad, &replaced).code(), StatusCode::kInvalidArgument);
  bad = smallBaseline();
  bad.entropy.edges = {1.0f, 0.5f};
  EXPECT_EQ(setDriftBaseline(file, "f", bad, &replaced).code(), StatusCode::kDataLoss);
  std::vector<uint8_t> truncated(file.begin(), file.begin() + 100);
  EXPECT_FALSE(setDriftBaseline(truncated, "f", smallBaseline(), &replaced).ok());
}

// An engine file whose baseline `edit` corrupted (written past setDriftBaseline's checks).
template <typename Edit>
Status loadCorrupted(Edit edit) {
  std::vector<uint8_t> with;
  Status status = setDriftBaseline(testing::oneHotEngineFile(true), "e", smallBaseline(), &with);
  if (!status.ok()) return status;
  EngineFileHeader header;
  LLMC_RETURN_IF_ERROR(checkEngineHeader(with.data(), with.size(), "e", &header));
  std::unique_ptr<fb::EngineT> def(fb::GetEngine(with.data() + header.flatbuffer_offset)->UnPack());
  edit(*def->drift_baseline);
  flatbuffers::FlatBufferBuilder builder;
  fb::FinishEngineBuffer(builder, fb::Engine::Pack(builder, def.get()));
  std::vector<uint8_t> file;
  assembleEngineFile(
      {builder.GetBufferPointer(), builder.GetSize()},
      std::span<const uint8_t>(with).subspan(header.weights_offset, header.weights_size), &file);
  std::shared_ptr<const Engine> engine;
  return Engine::loadFromMemory(file, "corrupted.engine", &engine);
}

TEST(DriftBaselineFile, CorruptedBaselinesAreRefusedAtLoad) {
  ASSERT_OK(loadCorrupted([](fb::DriftBaselineT&) {}));
  for (auto edit : std::vector<void (*)(fb::DriftBaselineT&)>{
           [](fb::DriftBaselineT& b) {
             b.entropy->edges = {1.0f, 0.5f};
           },
           [](fb::DriftBaselineT& b) { b.logprob->edges = {NAN}; },
           [](fb::DriftBaselineT& b) { b.entropy->counts.push_back(1); },
           [](fb::DriftBaselineT& b) { b.tokens = 11; },
           [](fb::DriftBaselineT& b) { b.tokens = 0; },
           [](fb::DriftBaselineT& b) { b.new_tokens = 0; },
           [](fb::DriftBaselineT& b) { b.logprob.reset(); },
           [](fb::DriftBaselineT& b) {
             b.entropy->counts = {~uint64_t{0} - 5, 9, 8};
           },
       }) {
    Status status = loadCorrupted(edit);
    EXPECT_EQ(status.code(), StatusCode::kDataLoss) << status.toString();
    EXPECT_NE(status.message().find("corrupted.engine: drift baseline"), std::string::npos)
        << status.toString();
  }
}

TEST(DriftCalibrationRun, OneHotLanguageModel) {
  // The one-hot model puts e / (e + 9) on the last token and 1 / (e + 9) on each other: every
  // greedy token has the same entropy and logprob.
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < 70; ++i) prompts.push_back({i % 9 + 1, (i * 7) % 9 + 1});
  DriftCalibration c;
  c.sampling.temperature = 0;
  c.new_tokens = 3;
  c.stop_token_ids = {0};  // never produced: greedy repeats the prompt's last token (1..9)
  c.session.backend = Backend::kCpu;
  DriftBaseline b;
  ASSERT_OK(computeDriftBaseline(testing::oneHotEngine(true), prompts, c, "prompts", &b));
  EXPECT_EQ(b.tokens, 210u);
  EXPECT_EQ(b.new_tokens, 3);
  const double e = std::exp(1.0), z = e + 9;
  const double entropy = std::log(z) - e / z;
  ASSERT_EQ(b.entropy.edges.size(), 1u);
  EXPECT_NEAR(b.entropy.edges[0], entropy, 1e-5);
  EXPECT_EQ(b.entropy.counts[0], 210u);
  ASSERT_EQ(b.logprob.edges.size(), 1u);
  EXPECT_NEAR(b.logprob.edges[0], 1 - std::log(z), 1e-5);
  EXPECT_NE(b.source.find("prompts: 70 prompts of up to 2 tokens, the first 3 new tokens"),
            std::string::npos)
      << b.source;

  // max_tokens limits the prompts used; too few prompts is an error naming the source.
  c.max_tokens = 64 * 3;
  ASSERT_OK(computeDriftBaseline(testing::oneHotEngine(true), prompts, c, "prompts", &b));
  EXPECT_EQ(b.tokens, 192u);
  c.max_tokens = 4096;
  prompts.resize(63);
  Status status = computeDriftBaseline(testing::oneHotEngine(true), prompts, c, "short.txt", &b);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("short.txt gives 63 prompts"), std::string::npos)
      << status.toString();
  EXPECT_EQ(computeDriftBaseline(testing::oneHotEngine(false), prompts, c, "p", &b).code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace llmc
