// llmc bench: time to first token and decode speed of a language-model engine, over the
// paged KV cache and by full recomputation, side by side in one run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "cli.h"
#include "core/cpu_features.h"
#include "core/kv_storage.h"
#include "core/thread_pool.h"
#include "llmc/batch_generator.h"
#include "llmc/engine.h"
#include "llmc/generator.h"

namespace llmc::cli {

namespace {

struct Summary {
  double median = 0, low = 0, high = 0;
};

Summary summarize(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  Summary s;
  if (values.empty()) return s;
  size_t n = values.size();
  s.median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  s.low = values.front();
  s.high = values.back();
  return s;
}

struct Measured {
  std::vector<double> ttft_ms, decode_tps;
  // The cold start: creating the generator (its session, KV cache, plan) and the warm-up run's
  // time to first token, the first pass over the engine's mapped weights.
  double create_ms = 0, cold_ttft_ms = 0;
  uint64_t derived_bytes = 0;  // the weights repacked for the CPU's kernels (prepack_weights)
  DType kv_dtype = DType::kUndefined;  // what the KV cache stored (--kv-cache-dtype auto resolved)
};

// How the generators store their KV cache (--kv-cache-dtype, --kv-prefault).
struct KvChoice {
  DType dtype = kKvCacheAuto;
  bool prefault = false;
};

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

Status measure(std::shared_ptr<const Engine> engine, const SessionOptions& session, bool kv_cache,
               const KvChoice& kv, const std::vector<int32_t>& prompt, int32_t new_tokens,
               int repeat, Measured* out) {
  GeneratorConfig config;
  config.use_kv_cache = kv_cache;
  config.kv_cache_dtype = kv.dtype;
  config.kv_cache_prefault = kv.prefault;
  config.session = session;
  std::unique_ptr<Generator> generator;
  const auto start = std::chrono::steady_clock::now();
  LLMC_RETURN_IF_ERROR(Generator::create(engine, config, &generator));
  out->create_ms = millisecondsSince(start);
  out->kv_dtype = generator->kvCacheDtype();
  if (kv_cache && !generator->usesKvCache())
    return invalidArgument(engine->path() +
                           ": not a language-model engine (no KV cache); compile it without "
                           "--as-graph from a decoder model llmc recognizes");
  GenerationOptions options;
  options.max_new_tokens = new_tokens;  // greedy, no stop ids: always the full count
  for (int r = 0; r <= repeat; ++r) {  // run 0 warms up
    // A different first token each run, so the prefix cache never hides the prefill.
    std::vector<int32_t> p = prompt;
    p[0] = static_cast<int32_t>((prompt[0] + r) % std::max<int64_t>(generator->vocabSize(), 1));
    GenerationResult result;
    LLMC_RETURN_IF_ERROR(generator->generate(p, options, nullptr, &result));
    if (r == 0) {
      out->cold_ttft_ms = result.time_to_first_token_ms;
      continue;
    }
    out->ttft_ms.push_back(result.time_to_first_token_ms);
    out->decode_tps.push_back(result.decode_tokens_per_s);
  }
  out->derived_bytes = generator->derivedWeightBytes();
  return okStatus();
}

// Aggregate decode throughput of `requests` concurrent requests through continuous batching
// (new tokens of all requests per second of the whole run, prefill included). One generator
// serves every round, as a server's does, so round 0 also warms what a long-lived generator
// keeps (the arena, cuBLASLt's choices, the CUDA graphs of each batch bucket). Its KV cache
// holds every request at once (BatchConfig's default, at most 1 GiB, would preempt and
// recompute at large widths); `stats` reports the steps of the timed rounds.
struct BatchedRun {
  std::vector<double> tps;
  int64_t steps = 0, decode_only_steps = 0, preemptions = 0;
  double decode_only_ms = 0;  // the median time of a step with no prompt tokens
  int32_t max_step_tokens = 0;
  int64_t kv_cache_tokens = 0;
};

Status measureBatched(std::shared_ptr<const Engine> engine, const SessionOptions& session,
                      const KvChoice& kv, const std::vector<int32_t>& prompt, int32_t new_tokens,
                      int requests, int repeat, BatchedRun* out) {
  BatchConfig config;
  config.max_running = requests;
  config.kv_cache_dtype = kv.dtype;
  config.kv_cache_prefault = kv.prefault;
  config.session = session;
  const int64_t block = 16;  // headroom: a block per request beyond its tokens
  config.kv_cache_tokens = static_cast<int64_t>(requests) *
                           (static_cast<int64_t>(prompt.size()) + new_tokens + 2 * block);
  out->max_step_tokens = config.max_step_tokens;
  out->kv_cache_tokens = config.kv_cache_tokens;
  std::unique_ptr<BatchGenerator> batch;
  LLMC_RETURN_IF_ERROR(BatchGenerator::create(engine, config, &batch));
  GenerationOptions options;
  options.max_new_tokens = new_tokens;
  std::vector<double> decode_only_ms;
  const int64_t preempted_before = batch->stats().preemptions;
  for (int r = 0; r <= repeat; ++r) {  // round 0 warms up
    auto start = std::chrono::steady_clock::now();
    std::vector<char> sampled(static_cast<size_t>(requests), 0);  // past its prompt
    int started = 0;
    for (int i = 0; i < requests; ++i) {
      // A different first token for every request of every round: no prefix-cache hits.
      std::vector<int32_t> p = prompt;
      p[0] = static_cast<int32_t>((prompt[0] + 1 + r * requests + i) %
                                  std::max<int64_t>(engine->llmConfig()->vocab_size, 2));
      int64_t id = 0;
      TokenCallback first = [&sampled, &started, i](int32_t) {
        if (!sampled[static_cast<size_t>(i)]) sampled[static_cast<size_t>(i)] = 1, ++started;
        return true;
      };
      LLMC_RETURN_IF_ERROR(batch->submit(p, options, std::move(first), &id));
    }
    size_t tokens = 0;
    while (!batch->idle()) {
      // Every request admitted and past its prompt: the step computes one token for each.
      const bool decode_only = started == requests;
      std::vector<BatchGenerator::Finished> finished;
      const auto step_start = std::chrono::steady_clock::now();
      LLMC_RETURN_IF_ERROR(batch->step(&finished));
      const double step_ms = millisecondsSince(step_start);
      if (r > 0) {
        ++out->steps;
        if (decode_only) decode_only_ms.push_back(step_ms);
      }
      for (const auto& f : finished) {
        LLMC_RETURN_IF_ERROR(f.status);
        tokens += f.result.tokens.size();
      }
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r > 0 && seconds > 0) out->tps.push_back(tokens / seconds);
  }
  out->decode_only_steps = static_cast<int64_t>(decode_only_ms.size());
  if (!decode_only_ms.empty()) out->decode_only_ms = summarize(decode_only_ms).median;
  out->preemptions = batch->stats().preemptions - preempted_before;
  return okStatus();
}

}  // namespace

int runBench(const std::vector<std::string>& args) {
  std::string engine_path;
  int64_t context = 256, new_tokens = 32, repeat = 5;
  bool skip_full = false;
  int64_t batch_requests = 0;
  SessionOptions session_options;
  KvChoice kv_choice;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    Status value;
    if (arg == "--context") {
      value = intOption(args, &i, 1, kMaxContextTokens, &context);
    } else if (arg == "--new-tokens") {
      value = intOption(args, &i, 2, kMaxContextTokens, &new_tokens);
    } else if (arg == "--repeat") {
      value = intOption(args, &i, 1, kInt32Max, &repeat);
    } else if (arg == "--batch") {
      value = intOption(args, &i, 1, 256, &batch_requests);
    } else if (arg == "--kv-cache-dtype") {
      value = kvCacheDtypeOption(args, &i, &kv_choice.dtype);
    } else if (arg == "--kv-prefault") {
      kv_choice.prefault = true;
    } else if (arg == "--kv-only") {
      skip_full = true;
    } else if (std::string flag_error; parseSessionFlag(args, &i, &session_options, &flag_error)) {
      if (!flag_error.empty()) return usageError("bench", flag_error);
    } else if (!arg.empty() && arg[0] == '-') {
      return usageError("bench", "unknown option '" + arg + "'");
    } else if (engine_path.empty()) {
      engine_path = arg;
    } else {
      return usageError("bench", "more than one engine given");
    }
    if (!value.ok()) return usageError("bench", value);
  }
  if (engine_path.empty()) return usageError("bench", "no engine given");
  std::shared_ptr<const Engine> engine;
  const auto load_start = std::chrono::steady_clock::now();
  Status status = Engine::load(engine_path, &engine);
  if (!status.ok()) return reportError("bench", status);
  const double load_ms = millisecondsSince(load_start);
  const LlmConfig* llm = engine->llmConfig();
  if (!llm)
    return reportError("bench", invalidArgument(engine_path +
                                                ": not a language-model engine (compiled with "
                                                "--as-graph, or the model was not recognized)"));
  if (context + new_tokens > llm->max_context)
    return usageError("bench", "--context " + std::to_string(context) + " plus " +
                                   std::to_string(new_tokens) +
                                   " new tokens exceeds the engine's context of " +
                                   std::to_string(llm->max_context));
  // A fixed pseudo-random prompt of `context` tokens.
  std::mt19937 rng(1234);
  int64_t vocab = llm->vocab_size > 0 ? llm->vocab_size : 2;
  std::vector<int32_t> prompt(static_cast<size_t>(context));
  for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));

  Measured kv, full;
  status = measure(engine, session_options, true, kv_choice, prompt,
                   static_cast<int32_t>(new_tokens), static_cast<int>(repeat), &kv);
  if (status.ok() && !skip_full)
    status = measure(engine, session_options, false, kv_choice, prompt,
                     static_cast<int32_t>(new_tokens), static_cast<int>(repeat), &full);
  BatchedRun batched;
  if (status.ok() && batch_requests > 0)
    status =
        measureBatched(engine, session_options, kv_choice, prompt, static_cast<int32_t>(new_tokens),
                       static_cast<int>(batch_requests), static_cast<int>(repeat), &batched);
  if (!status.ok()) return reportError("bench", status);

  const int threads = session_options.threads > 0 ? session_options.threads : defaultThreadCount();
  std::printf("cpu: %s; %d thread%s\n", cpuSummary().c_str(), threads, threads == 1 ? "" : "s");
  std::printf("engine %s: %d layers, %d/%d heads of %d, vocab %lld\n", engine_path.c_str(),
              llm->num_layers, llm->num_heads, llm->num_kv_heads, llm->head_dim,
              static_cast<long long>(llm->vocab_size));
  std::printf(
      "prompt %lld tokens, %lld new tokens (greedy), %lld runs after one warm-up; KV "
      "cache %s%s%s; median [min, max]\n",
      static_cast<long long>(context), static_cast<long long>(new_tokens),
      static_cast<long long>(repeat), kvCacheDtypeName(kv.kv_dtype),
      kv_choice.dtype == kKvCacheAuto ? " (the engine's choice)" : "",
      kv_choice.prefault ? ", its pages written when created (--kv-prefault)" : "");
  std::printf("%-20s %28s %30s\n", "mode", "time to first token (ms)", "decode (tokens/s)");
  auto row = [](const char* name, const Measured& m) {
    Summary t = summarize(m.ttft_ms), d = summarize(m.decode_tps);
    std::printf("%-20s %10.2f [%7.2f, %7.2f] %10.1f [%8.1f, %8.1f]\n", name, t.median, t.low,
                t.high, d.median, d.low, d.high);
  };
  row("paged KV cache", kv);
  std::printf("cold start: engine load %.1f ms, session %.1f ms, first token %.1f ms (the warm-up "
              "run, paged KV cache)\n",
              load_ms, kv.create_ms, kv.cold_ttft_ms);
  if (kv.derived_bytes > 0)
    std::printf(
        "weights repacked for this CPU's kernels and kept (--no-prepack: per product): "
        "%.1f MiB\n",
        static_cast<double>(kv.derived_bytes) / (1 << 20));
  if (!skip_full) {
    row("full recomputation", full);
    double speedup = summarize(kv.decode_tps).median / summarize(full.decode_tps).median;
    std::printf("decode speed-up of the KV cache: %.1fx\n", speedup);
  }
  if (batch_requests > 0) {
    Summary b = summarize(batched.tps);
    // The same requests one after another: each takes TTFT + (n - 1) / decode rate.
    double one = summarize(kv.ttft_ms).median / 1000.0 +
                 (new_tokens - 1) / std::max(summarize(kv.decode_tps).median, 1e-9);
    std::printf("continuous batching, %lld requests at once: %.1f [%.1f, %.1f] new tokens/s in "
                "all, prefill included (one after another: %.1f)\n",
                static_cast<long long>(batch_requests), b.median, b.low, b.high,
                new_tokens / one);
    std::printf(
        "  %lld steps in %lld rounds (at most %d tokens a step; KV cache of %lld tokens, "
        "%lld preemptions); %lld steps decoded every request at once, median %.2f ms "
        "(%.1f tokens/s)\n",
        static_cast<long long>(batched.steps), static_cast<long long>(repeat),
        batched.max_step_tokens, static_cast<long long>(batched.kv_cache_tokens),
        static_cast<long long>(batched.preemptions),
        static_cast<long long>(batched.decode_only_steps), batched.decode_only_ms,
        batched.decode_only_ms > 0
            ? 1000.0 * static_cast<double>(batch_requests) / batched.decode_only_ms
            : 0.0);
  }
  return kExitOk;
}

}  // namespace llmc::cli
