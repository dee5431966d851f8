// The sampler's time per token (llm/sampler.h) over a 16,000- and a 128,256-id vocabulary
// (the 110M Llama's and Llama 3's), greedy, with each truncation and with top_logprobs, on logits
// drawn from normal distributions whose spread sets how wide the top-p nucleus is: N(0, 1) keeps
// most of the vocabulary at top-p 0.95, N(0, 5) a few hundred ids.
//
//   build/bench/llmc_sampler_bench [--rounds N]
//
// Prints the CPU and its flags first; each figure is the median [min, max] of N rounds of ten
// tokens, in microseconds per token, one thread.
#include "llm/sampler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/cpu_features.h"

int main(int argc, char** argv) {
  int rounds = 21;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: llmc_sampler_bench [--rounds N]\n");
      return 2;
    }
  }
  using namespace llmc;
  std::printf("cpu: %s\n\n", cpuSummary().c_str());
  struct Mode {
    const char* name;
    float temperature, top_p, min_p;
    int32_t top_k, num_logprobs = 0;
  };
  const Mode modes[] = {{"greedy", 0, 1, 0, 0},
                        {"T 1", 1, 1, 0, 0},
                        {"T 0.8, top-k 50", 0.8f, 1, 0, 50},
                        {"T 0.8, top-p 0.95", 0.8f, 0.95f, 0, 0},
                        {"T 0.8, min-p 0.05", 0.8f, 1, 0.05f, 0},
                        {"T 1, top_logprobs 20", 1, 1, 0, 0, 20}};
  std::printf("| vocab | logits | sampling | us per token |\n|---|---|---|---|\n");
  for (int32_t vocab : {16000, 128256})
    for (float spread : {1.0f, 3.0f, 5.0f}) {
      std::mt19937 rng(1);
      std::normal_distribution<float> normal(0, spread);
      std::vector<float> logits(static_cast<size_t>(vocab));
      for (float& x : logits) x = normal(rng);
      for (const Mode& mode : modes) {
        SamplingParams params;
        params.temperature = mode.temperature;
        params.top_k = mode.top_k;
        params.top_p = mode.top_p;
        params.min_p = mode.min_p;
        params.num_logprobs = mode.num_logprobs;
        std::unique_ptr<Sampler> sampler;
        const std::vector<int32_t> prompt = {1, 2, 3};
        if (!Sampler::create(params, vocab, prompt, &sampler).ok()) return 1;
        std::vector<double> times;
        SampledToken token;
        for (int r = 0; r < rounds; ++r) {
          const auto start = std::chrono::steady_clock::now();
          for (int i = 0; i < 10; ++i)
            if (!sampler->sample(logits, &token).ok()) return 1;
          times.push_back(
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                  .count() /
              10);
        }
        std::sort(times.begin(), times.end());
        std::printf("| %d | N(0, %.0f) | %s | %.1f [%.1f, %.1f] |\n", vocab, spread, mode.name,
                    times[times.size() / 2], times.front(), times.back());
      }
    }
  return 0;
}
