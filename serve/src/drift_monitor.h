// The monitoring layer's output-drift monitor: the same statistics as the engine's drift
// baseline (llmc/drift.h), over the same first tokens of each response, in a sliding window of
// the most recent such tokens, scored
// against the baseline by PSI per statistic. Exported as gauges; a score that crosses the
// threshold logs a warning (and a note when it falls back under).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "llmc/drift.h"
#include "metrics.h"

namespace llmc::serve {

struct DriftOptions {
  int64_t window_tokens = 2048;  // the most recent generated tokens the scores cover
  int64_t min_tokens = 512;      // fewer in the window: no score yet (NaN)
  double threshold = 0.25;       // PSI above it: drift
  // An alert ends once the score falls under threshold * this (hysteresis: a score that
  // hovers at the threshold does not flap).
  double clear_fraction = 0.8;
};

class DriftMonitor {
 public:
  DriftMonitor(const DriftBaseline& baseline, const DriftOptions& options, Metrics* metrics);

  // Adds one response's first baseline.new_tokens generated tokens (tokens whose statistics
  // are NaN are skipped),
  // then rescores and updates the gauges. Thread-safe.
  void add(std::span<const float> entropies, std::span<const float> logprobs);

  struct Scores {
    double entropy = 0;  // NaN while the window holds fewer than min_tokens
    double logprob = 0;
    int64_t window_tokens = 0;
  };
  Scores scores() const;
  // How many first tokens of each response count (the baseline's).
  int32_t newTokens() const { return static_cast<int32_t>(new_tokens_); }

 private:
  struct Statistic {
    const char* name;
    DriftHistogram baseline;
    std::vector<uint64_t> window;  // per bin, over the tokens in window_
    double score = 0;
    bool alert = false;
  };
  void rescore(Statistic* statistic);

  DriftOptions options_;
  size_t new_tokens_;  // counted per response
  Metrics* metrics_;
  mutable std::mutex mu_;
  Statistic entropy_, logprob_;
  std::deque<std::pair<uint16_t, uint16_t>> window_;  // (entropy bin, logprob bin) per token
};

}  // namespace llmc::serve
