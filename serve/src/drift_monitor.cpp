#include "drift_monitor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace llmc::serve {

DriftMonitor::DriftMonitor(const DriftBaseline& baseline, const DriftOptions& options,
                           Metrics* metrics)
    : options_(options),
      new_tokens_(static_cast<size_t>(baseline.new_tokens)),
      metrics_(metrics),
      entropy_{"entropy", baseline.entropy, std::vector<uint64_t>(baseline.entropy.counts.size())},
      logprob_{"logprob", baseline.logprob, std::vector<uint64_t>(baseline.logprob.counts.size())} {
  metrics_->declareGauge("llmc:drift_psi",
                         "Population stability index of the recent tokens' statistic against "
                         "the engine's drift baseline (NaN until the window has enough tokens).");
  metrics_->declareGauge("llmc:drift_alert",
                         "1 while the statistic's drift score is above the threshold.");
  metrics_->declareGauge("llmc:drift_window_tokens", "Generated tokens in the drift window.");
  metrics_->declareGauge("llmc:drift_threshold", "The drift score above which drift is reported.");
  metrics_->set("llmc:drift_threshold", options_.threshold);
  metrics_->set("llmc:drift_window_tokens", 0);
  for (Statistic* s : {&entropy_, &logprob_}) {
    s->score = std::numeric_limits<double>::quiet_NaN();
    const std::string label = std::string("statistic=\"") + s->name + "\"";
    metrics_->set("llmc:drift_psi", s->score, label);
    metrics_->set("llmc:drift_alert", 0, label);
  }
}

void DriftMonitor::add(std::span<const float> entropies, std::span<const float> logprobs) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = std::min({entropies.size(), logprobs.size(), new_tokens_});
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(entropies[i]) || std::isnan(logprobs[i])) continue;
    const auto e = static_cast<uint16_t>(entropy_.baseline.bin(entropies[i]));
    const auto l = static_cast<uint16_t>(logprob_.baseline.bin(logprobs[i]));
    ++entropy_.window[e];
    ++logprob_.window[l];
    window_.emplace_back(e, l);
    if (static_cast<int64_t>(window_.size()) > options_.window_tokens) {
      --entropy_.window[window_.front().first];
      --logprob_.window[window_.front().second];
      window_.pop_front();
    }
  }
  rescore(&entropy_);
  rescore(&logprob_);
  metrics_->set("llmc:drift_window_tokens", static_cast<double>(window_.size()));
}

void DriftMonitor::rescore(Statistic* s) {
  const bool enough = static_cast<int64_t>(window_.size()) >= options_.min_tokens;
  s->score = enough ? populationStabilityIndex(s->baseline.counts, s->window)
                    : std::numeric_limits<double>::quiet_NaN();
  const bool alert = enough && (s->alert ? s->score >= options_.threshold * options_.clear_fraction
                                         : s->score > options_.threshold);
  if (alert && !s->alert)
    std::fprintf(stderr,
                 "llmc serve: warning: output drift: %s PSI %.3f over the last %zu tokens "
                 "exceeds the threshold %.3f\n",
                 s->name, s->score, window_.size(), options_.threshold);
  if (!alert && s->alert)
    std::fprintf(stderr,
                 "llmc serve: output drift: %s PSI %.3f over the last %zu tokens is back under "
                 "%.3f (%g x the threshold)\n",
                 s->name, s->score, window_.size(), options_.threshold * options_.clear_fraction,
                 options_.clear_fraction);
  s->alert = alert;
  const std::string label = std::string("statistic=\"") + s->name + "\"";
  metrics_->set("llmc:drift_psi", s->score, label);
  metrics_->set("llmc:drift_alert", alert ? 1 : 0, label);
}

DriftMonitor::Scores DriftMonitor::scores() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {entropy_.score, logprob_.score, static_cast<int64_t>(window_.size())};
}

}  // namespace llmc::serve
