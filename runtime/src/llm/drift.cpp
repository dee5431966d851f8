// Output-drift baselines: histograms, PSI, the calibration run and storing a baseline in an
// engine file (see llmc/drift.h).
#include "llmc/drift.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/api_guard.h"
#include "core/engine_file.h"
#include "llmc/batch_generator.h"
#include "llmc/engine_generated.h"

namespace llmc {

size_t DriftHistogram::bin(float value) const {
  return static_cast<size_t>(std::lower_bound(edges.begin(), edges.end(), value) - edges.begin());
}

uint64_t DriftHistogram::total() const {
  return std::accumulate(counts.begin(), counts.end(), uint64_t{0});
}

Status DriftHistogram::fromSamples(std::vector<float> samples, int bins, const std::string& what,
                                   DriftHistogram* out) {
  if (bins < 2 || bins > 1000)
    return invalidArgument(what + ": " + std::to_string(bins) + " bins (2 to 1000 allowed)");
  samples.erase(
      std::remove_if(samples.begin(), samples.end(), [](float v) { return std::isnan(v); }),
      samples.end());
  if (samples.empty()) return invalidArgument(what + ": no samples");
  std::sort(samples.begin(), samples.end());
  DriftHistogram h;
  // Edge k: the value below which k/bins of the samples lie; ties collapse into one edge.
  for (int k = 1; k < bins; ++k) {
    const size_t index = samples.size() * static_cast<size_t>(k) / static_cast<size_t>(bins);
    const float edge = samples[std::min(index, samples.size() - 1)];
    if (!std::isfinite(edge)) continue;
    if (h.edges.empty() || edge > h.edges.back()) h.edges.push_back(edge);
  }
  h.counts.assign(h.edges.size() + 1, 0);
  for (float v : samples) ++h.counts[h.bin(v)];
  *out = std::move(h);
  return okStatus();
}

Status DriftHistogram::check(const std::string& what) const {
  if (counts.size() != edges.size() + 1)
    return dataLoss(what + ": " + std::to_string(counts.size()) + " bins for " +
                    std::to_string(edges.size()) + " edges (needs edges + 1)");
  if (counts.size() > 1000) return dataLoss(what + ": more than 1000 bins");
  for (uint64_t count : counts)  // also keeps total() from overflowing
    if (count > (uint64_t{1} << 48)) return dataLoss(what + ": a bin count is implausibly large");
  for (size_t i = 0; i < edges.size(); ++i) {
    if (!std::isfinite(edges[i]))
      return dataLoss(what + ": edge " + std::to_string(i) + " is not finite");
    if (i > 0 && !(edges[i] > edges[i - 1]))
      return dataLoss(what + ": edges are not strictly ascending at " + std::to_string(i));
  }
  return okStatus();
}

double populationStabilityIndex(std::span<const uint64_t> expected,
                                std::span<const uint64_t> actual) {
  const size_t bins = std::min(expected.size(), actual.size());
  double e_total = 0, a_total = 0;
  for (size_t i = 0; i < bins; ++i) {
    e_total += static_cast<double>(expected[i]);
    a_total += static_cast<double>(actual[i]);
  }
  if (e_total == 0 || a_total == 0) return 0;
  const double smoothing = 0.5;  // tokens added to every bin of both
  double psi = 0;
  for (size_t i = 0; i < bins; ++i) {
    const double e = (static_cast<double>(expected[i]) + smoothing) /
                     (e_total + smoothing * static_cast<double>(bins));
    const double a = (static_cast<double>(actual[i]) + smoothing) /
                     (a_total + smoothing * static_cast<double>(bins));
    psi += (a - e) * std::log(a / e);
  }
  return psi;
}

Status driftPrompts(const Tokenizer& tokenizer, std::string_view text, int64_t max_prompt_tokens,
                    std::vector<std::vector<int32_t>>* prompts) {
  if (max_prompt_tokens < 1)
    return invalidArgument("driftPrompts: max_prompt_tokens must be positive");
  prompts->clear();
  std::vector<int32_t> prompt, joined;
  std::string lines;  // the lines of `prompt`, joined by newlines
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string candidate =
        lines.empty() ? std::string(line) : lines + "\n" + std::string(line);
    LLMC_RETURN_IF_ERROR(tokenizer.encode(candidate, true, &joined));
    if (static_cast<int64_t>(joined.size()) <= max_prompt_tokens) {
      lines = candidate;
      prompt = joined;
      continue;
    }
    if (!prompt.empty()) prompts->push_back(std::move(prompt));
    // The line starts the next prompt (cut to the limit when it alone is too long).
    LLMC_RETURN_IF_ERROR(tokenizer.encode(line, true, &prompt));
    lines = std::string(line);
    if (static_cast<int64_t>(prompt.size()) > max_prompt_tokens) {
      prompt.resize(static_cast<size_t>(max_prompt_tokens));
      prompts->push_back(std::move(prompt));
      prompt.clear();
      lines.clear();
    }
  }
  if (!prompt.empty()) prompts->push_back(std::move(prompt));
  return okStatus();
}

Status computeDriftBaseline(std::shared_ptr<const Engine> engine,
                            std::span<const std::vector<int32_t>> prompts,
                            const DriftCalibration& calibration, const std::string& source,
                            DriftBaseline* out) {
  return guardApi("computeDriftBaseline", [&]() -> Status {
    if (!engine || !engine->llmConfig())
      return failedPrecondition(
          "a drift baseline needs an engine compiled as a language model (see llmc inspect)");
    const LlmConfig& llm = *engine->llmConfig();
    const DriftCalibration& c = calibration;
    if (c.new_tokens < 1 || c.max_tokens < 1 || c.min_prompts < 1)
      return invalidArgument(
          "drift calibration: new tokens, max tokens and min prompts must be "
          "positive");
    const int64_t wanted = (c.max_tokens + c.new_tokens - 1) / c.new_tokens;
    const int64_t used = std::min<int64_t>(static_cast<int64_t>(prompts.size()), wanted);
    if (wanted < c.min_prompts)
      return invalidArgument("drift calibration: " + std::to_string(c.max_tokens) + " tokens of " +
                             std::to_string(c.new_tokens) + " per prompt make " +
                             std::to_string(wanted) + " prompts; a drift baseline needs " +
                             std::to_string(c.min_prompts) + " or more");
    if (used < c.min_prompts)
      return invalidArgument(source + " gives " + std::to_string(prompts.size()) +
                             " prompts; a drift baseline needs " + std::to_string(c.min_prompts) +
                             " or more");

    BatchConfig config;
    config.session = c.session;
    std::unique_ptr<BatchGenerator> batch;
    LLMC_RETURN_IF_ERROR(BatchGenerator::create(engine, config, &batch));
    int64_t longest = 0;
    for (int64_t p = 0; p < used; ++p) {
      const std::vector<int32_t>& prompt = prompts[static_cast<size_t>(p)];
      longest = std::max<int64_t>(longest, static_cast<int64_t>(prompt.size()));
      GenerationOptions options;
      options.max_new_tokens = c.new_tokens;
      options.sampling = c.sampling;
      options.sampling.seed = c.sampling.seed + static_cast<uint64_t>(p);
      options.sampling.model_statistics_tokens = c.new_tokens;
      options.stop_token_ids = c.stop_token_ids.empty() ? llm.eos_token_ids : c.stop_token_ids;
      int64_t id = 0;
      LLMC_RETURN_IF_ERROR(batch->submit(prompt, options, nullptr, &id)
                               .withContext("drift calibration prompt " + std::to_string(p)));
    }
    std::vector<BatchGenerator::Finished> finished;
    while (!batch->idle()) LLMC_RETURN_IF_ERROR(batch->step(&finished));
    // In submission order, so the result does not depend on how the steps batched them.
    std::sort(finished.begin(), finished.end(),
              [](const auto& a, const auto& b) { return a.request_id < b.request_id; });
    std::vector<float> entropies, logprobs;
    for (const BatchGenerator::Finished& f : finished) {
      if (!f.status.ok()) return f.status.withContext("drift calibration");
      entropies.insert(entropies.end(), f.result.entropies.begin(), f.result.entropies.end());
      logprobs.insert(logprobs.end(), f.result.model_logprobs.begin(),
                      f.result.model_logprobs.end());
    }
    DriftBaseline baseline;
    LLMC_RETURN_IF_ERROR(
        DriftHistogram::fromSamples(entropies, c.bins, "drift entropy", &baseline.entropy));
    LLMC_RETURN_IF_ERROR(
        DriftHistogram::fromSamples(logprobs, c.bins, "drift logprob", &baseline.logprob));
    baseline.tokens = baseline.entropy.total();
    baseline.new_tokens = c.new_tokens;
    if (baseline.logprob.total() != baseline.tokens)
      return internalError("drift calibration: the statistics count different tokens");
    const SamplingParams& s = c.sampling;
    char how[256];
    std::snprintf(how, sizeof(how),
                  ": %lld prompts of up to %lld tokens, the first %d new tokens of each (%llu in "
                  "all), temperature %g, top_p %g, top_k %d, seed %llu",
                  static_cast<long long>(used), static_cast<long long>(longest), c.new_tokens,
                  static_cast<unsigned long long>(baseline.tokens), s.temperature, s.top_p, s.top_k,
                  static_cast<unsigned long long>(s.seed));
    baseline.source = source + how;
    *out = std::move(baseline);
    return okStatus();
  });
}

namespace {

std::unique_ptr<fb::DriftHistogramT> toFlatBuffer(const DriftHistogram& h) {
  auto t = std::make_unique<fb::DriftHistogramT>();
  t->edges = h.edges;
  t->counts = h.counts;
  return t;
}

}  // namespace

namespace {

// The engine file with its FlatBuffer's drift baseline replaced by `baseline` (null: none),
// through the generated object API; the weights section is copied as it is.
Status rewriteDriftBaseline(std::span<const uint8_t> engine_bytes, const std::string& what,
                            const DriftBaseline* baseline, std::vector<uint8_t>* out) {
  std::shared_ptr<const Engine> engine;  // verifies everything before it is rewritten
  LLMC_RETURN_IF_ERROR(Engine::loadFromMemory(engine_bytes, what, &engine));
  engine.reset();
  EngineFileHeader header;
  LLMC_RETURN_IF_ERROR(checkEngineHeader(engine_bytes.data(), engine_bytes.size(), what, &header));
  std::unique_ptr<fb::EngineT> def(
      fb::GetEngine(engine_bytes.data() + header.flatbuffer_offset)->UnPack());
  def->drift_baseline.reset();
  if (baseline) {
    def->drift_baseline = std::make_unique<fb::DriftBaselineT>();
    def->drift_baseline->entropy = toFlatBuffer(baseline->entropy);
    def->drift_baseline->logprob = toFlatBuffer(baseline->logprob);
    def->drift_baseline->tokens = baseline->tokens;
    def->drift_baseline->new_tokens = baseline->new_tokens;
    def->drift_baseline->source = baseline->source;
  }
  flatbuffers::FlatBufferBuilder builder;
  fb::FinishEngineBuffer(builder, fb::Engine::Pack(builder, def.get()));
  assembleEngineFile({builder.GetBufferPointer(), builder.GetSize()},
                     engine_bytes.subspan(header.weights_offset, header.weights_size), out);
  return okStatus();
}

}  // namespace

Status setDriftBaseline(std::span<const uint8_t> engine_bytes, const std::string& what,
                        const DriftBaseline& baseline, std::vector<uint8_t>* out) {
  return guardApi("setDriftBaseline", [&]() -> Status {
    LLMC_RETURN_IF_ERROR(baseline.entropy.check("the drift baseline's entropy histogram"));
    LLMC_RETURN_IF_ERROR(baseline.logprob.check("the drift baseline's logprob histogram"));
    if (baseline.tokens == 0 || baseline.entropy.total() != baseline.tokens ||
        baseline.logprob.total() != baseline.tokens)
      return invalidArgument("the drift baseline's histograms must each count its tokens");
    if (baseline.new_tokens < 1)
      return invalidArgument("the drift baseline's new_tokens must be positive");
    return rewriteDriftBaseline(engine_bytes, what, &baseline, out);
  });
}

Status clearDriftBaseline(std::span<const uint8_t> engine_bytes, const std::string& what,
                          std::vector<uint8_t>* out) {
  return guardApi("clearDriftBaseline",
                  [&] { return rewriteDriftBaseline(engine_bytes, what, nullptr, out); });
}

}  // namespace llmc
