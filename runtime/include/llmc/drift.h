// Output-drift statistics: what a language-model engine's outputs look like on calibration text
// (a baseline stored in the engine), and the population stability index (PSI) that compares a
// server's recent outputs with it. The statistics, per generated token, are the entropy of the
// model's next-token distribution and the chosen token's log-probability under it
// (SampledToken::entropy / model_logprob), over the first `new_tokens` tokens of each response:
// the tokens where the prompt's influence is strongest (a small model soon writes what it
// always writes, whatever it was asked; docs/serving.md has the measurements). Each is kept as
// a histogram whose bins the baseline's quantiles chose, so that every bin holds about the same
// share of the baseline.
//
//   PSI = sum over bins of (a - e) * ln(a / e)
//
// with e and a the baseline's and the window's shares of each bin, both smoothed by half a
// token per bin so that an empty bin gives a large finite term, not infinity. PSI is 0 for
// identical shares; the customary reading is < 0.1 no shift, 0.1-0.25 moderate, > 0.25 a
// significant shift. Between two samples of n1 and n2 tokens from one distribution over B bins
// its expected value is about (B - 1) * (1/n1 + 1/n2).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "llmc/engine.h"
#include "llmc/sampling.h"
#include "llmc/session.h"
#include "llmc/status.h"
#include "llmc/tokenizer.h"

namespace llmc {

struct DriftHistogram {
  // Strictly ascending and finite; bin i holds the values in (edges[i-1], edges[i]], bin 0
  // everything <= edges[0] and the last bin everything above the last edge.
  std::vector<float> edges;
  std::vector<uint64_t> counts;  // edges.size() + 1 bins

  size_t bin(float value) const;  // value must not be NaN
  uint64_t total() const;
  // Bins at the quantiles of `samples` (at most `bins`; fewer where quantiles tie), with the
  // samples' own counts. NaN samples are skipped; kInvalidArgument when none is left.
  static Status fromSamples(std::vector<float> samples, int bins, const std::string& what,
                            DriftHistogram* out);
  // kDataLoss naming `what` unless the edges and counts are as described above.
  Status check(const std::string& what) const;
};

// PSI of `actual` against `expected` (the same bins; see the file comment). 0 when either is
// empty.
double populationStabilityIndex(std::span<const uint64_t> expected,
                                std::span<const uint64_t> actual);

struct DriftBaseline {
  DriftHistogram entropy;  // nats
  DriftHistogram logprob;  // of the chosen token
  uint64_t tokens = 0;     // generated tokens behind each histogram
  int32_t new_tokens = 0;  // the first this many tokens of each response are counted
  std::string source;      // what it was computed on and how, for people
};

// Calibration prompts from a text as a server would see them: consecutive whole lines, as many
// as fit in `max_prompt_tokens` (a line longer than that is cut to its first tokens), each
// prompt encoded on its own with the tokenizer's special tokens (as llmc serve encodes a
// prompt). Empty lines are skipped.
Status driftPrompts(const Tokenizer& tokenizer, std::string_view text, int64_t max_prompt_tokens,
                    std::vector<std::vector<int32_t>>* prompts);

// How computeDriftBaseline generates from the calibration prompts.
struct DriftCalibration {
  int32_t new_tokens = 4;     // generated per prompt (fewer where an EOS ends it)
  int64_t max_tokens = 4096;  // generated in all, at most (the text may give fewer prompts)
  int32_t min_prompts = 64;   // fewer prompts: an error
  int bins = 10;
  SamplingParams sampling;              // seeded per prompt (seed + prompt index): reproducible
  std::vector<int32_t> stop_token_ids;  // empty: the engine's EOS ids
  SessionOptions session;
};

// Runs the engine (a language model: Engine::llmConfig()) on the prompts in order, as a server
// would on such requests, and histograms every generated token. `source` describes the text
// for DriftBaseline::source.
Status computeDriftBaseline(std::shared_ptr<const Engine> engine,
                            std::span<const std::vector<int32_t>> prompts,
                            const DriftCalibration& calibration, const std::string& source,
                            DriftBaseline* out);

// The engine file `engine` (bytes; `what` names it in errors) with `baseline` stored in it
// (replacing any earlier one). Everything else, weights included, is unchanged.
Status setDriftBaseline(std::span<const uint8_t> engine, const std::string& what,
                        const DriftBaseline& baseline, std::vector<uint8_t>* out);
// The same with the baseline removed (llmc refit: a baseline of other weights is stale).
Status clearDriftBaseline(std::span<const uint8_t> engine, const std::string& what,
                          std::vector<uint8_t>* out);

}  // namespace llmc
