#include "metrics.h"

#include <cmath>
#include <cstdio>

namespace llmc::serve {

namespace {

// Latency buckets in seconds, from 1 ms to 2 minutes.
const std::vector<double> kLatencyBuckets = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06,
                                             0.08,  0.1,    0.25,  0.5,  0.75, 1.0,  2.5,
                                             5.0,   7.5,    10.0,  20.0, 40.0, 80.0, 120.0};

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char text[64];
  std::snprintf(text, sizeof(text), "%.17g", v);
  return text;
}

}  // namespace

Metrics::Metrics(std::string model_name) : model_name_(std::move(model_name)) {
  const struct {
    const char* name;
    const char* type;
    const char* help;
  } kMetrics[] = {
      {"vllm:num_requests_running", "gauge", "Requests in the batch being decoded or prefilled."},
      {"vllm:num_requests_waiting", "gauge", "Requests queued, not yet admitted to the batch."},
      {"vllm:kv_cache_usage_perc", "gauge", "Fraction of the KV cache's blocks in use (0 to 1)."},
      {"vllm:prompt_tokens_total", "counter", "Prompt tokens of the requests admitted."},
      {"vllm:generation_tokens_total", "counter", "Tokens generated."},
      {"vllm:prefix_cache_queries_total", "counter",
       "Prompt tokens looked up in the prefix cache."},
      {"vllm:prefix_cache_hits_total", "counter",
       "Prompt tokens whose K/V came from the prefix cache."},
      {"vllm:num_preemptions_total", "counter",
       "Sequences preempted when the KV cache ran short (recomputed later)."},
      {"vllm:request_success_total", "counter",
       "Requests that finished, by finish reason (stop, length, cancelled)."},
      {"llmc:request_errors_total", "counter", "Requests answered with an error, by HTTP status."},
      {"llmc:http_connections", "gauge", "Open HTTP connections."},
      {"vllm:time_to_first_token_seconds", "histogram",
       "From the request's arrival to its first token."},
      {"vllm:inter_token_latency_seconds", "histogram",
       "Between consecutive tokens of one sequence."},
      {"vllm:e2e_request_latency_seconds", "histogram",
       "From the request's arrival to its last token."},
      {"vllm:request_queue_time_seconds", "histogram",
       "From the request's arrival to its admission to the batch."},
  };
  for (const auto& m : kMetrics) {
    info_[m.name] = Info{m.type, m.help};
    std::string type = m.type;
    if (type == "gauge") gauges_[m.name][""] = 0;
    if (type == "histogram") {
      Histogram& h = histograms_[m.name];
      h.bounds = kLatencyBuckets;
      h.counts.assign(h.bounds.size() + 1, 0);
    }
    if (type == "counter") counters_[m.name];
  }
}

void Metrics::add(const std::string& name, double value, const std::string& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  counters_[name][labels] += value;
}

void Metrics::set(const std::string& name, double value, const std::string& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  gauges_[name][labels] = value;
}

void Metrics::declareGauge(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> lock(mu_);
  info_[name] = Info{"gauge", help};
  gauges_[name];
}

void Metrics::observe(const std::string& name, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = histograms_.find(name);
  if (it == histograms_.end()) return;
  Histogram& h = it->second;
  size_t bucket = 0;
  while (bucket < h.bounds.size() && seconds > h.bounds[bucket]) ++bucket;
  ++h.counts[bucket];
  h.sum += seconds;
  ++h.count;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string model = "model_name=\"" + model_name_ + "\"";
  auto labelled = [&](const std::string& extra) {
    return "{" + model + (extra.empty() ? "" : "," + extra) + "}";
  };
  std::string out;
  for (const auto& [name, info] : info_) {
    out += "# HELP " + name + " " + info.help + "\n# TYPE " + name + " " + info.type + "\n";
    const std::string& type = info.type;
    if (type == "gauge") {
      for (const auto& [labels, value] : gauges_.at(name))
        out += name + labelled(labels) + " " + number(value) + "\n";
    } else if (type == "counter") {
      const auto& series = counters_.at(name);
      if (series.empty()) out += name + labelled("") + " 0\n";
      for (const auto& [labels, value] : series)
        out += name + labelled(labels) + " " + number(value) + "\n";
    } else {
      const Histogram& h = histograms_.at(name);
      uint64_t cumulative = 0;
      for (size_t i = 0; i <= h.bounds.size(); ++i) {
        cumulative += h.counts[i];
        double bound = i < h.bounds.size() ? h.bounds[i] : INFINITY;
        out += name + "_bucket" + labelled("le=\"" + number(bound) + "\"") + " " +
               std::to_string(cumulative) + "\n";
      }
      out += name + "_sum" + labelled("") + " " + number(h.sum) + "\n";
      out += name + "_count" + labelled("") + " " + std::to_string(h.count) + "\n";
    }
  }
  return out;
}

}  // namespace llmc::serve
