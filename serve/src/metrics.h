// The monitoring layer's registry: counters, gauges and histograms in Prometheus' text format
// (version 0.0.4), named as vLLM names the same quantities (docs/serving.md lists them).
// Thread-safe: the access threads and the scheduler thread record at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace llmc::serve {

class Metrics {
 public:
  explicit Metrics(std::string model_name);

  // Counters (monotonic; `labels` is the text inside the braces after model_name, e.g.
  // finished_reason="stop", or empty).
  void add(const std::string& name, double value, const std::string& labels = "");
  void set(const std::string& name, double value, const std::string& labels = "");  // gauges
  // Adds a gauge to the registry (the fixed ones are declared by the constructor).
  void declareGauge(const std::string& name, const std::string& help);
  void observe(const std::string& name, double seconds);

  // Every metric in Prometheus' text format.
  std::string render() const;

 private:
  struct Histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bucket (not cumulative); one more for +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  struct Info {
    std::string type;
    std::string help;
  };
  std::string model_name_;
  mutable std::mutex mu_;
  std::map<std::string, std::map<std::string, double>> counters_;
  std::map<std::string, std::map<std::string, double>> gauges_;
  std::map<std::string, Histogram> histograms_;
  std::map<std::string, Info> info_;
};

}  // namespace llmc::serve
