// BatchGenerator: continuous batching with chunked prefill over LlmRunner (see
// batch_generator.h). Admission is optimistic: a request joins when its context (and one
// more token for every running request) fits in the blocks available now. When the running
// requests' next tokens would not fit, the newest are preempted: their blocks go back (full
// ones stay in the prefix index) and they wait at the head of the queue to recompute their
// prompt plus what they generated, which usually finds most of it still cached.
#include "llmc/batch_generator.h"

#include <algorithm>
#include <chrono>
#include <deque>

#include "core/api_guard.h"
#include "llm/llm_runner.h"
#include "llm/sampler.h"

namespace llmc {

namespace {
using Clock = std::chrono::steady_clock;
}

struct BatchGenerator::State {
  struct Request {
    int64_t id = 0;
    std::vector<int32_t> prompt;
    // What admission puts in the cache and prefills: the prompt, plus the tokens generated
    // before a preemption (recomputed; sampling goes on from the sampler's state).
    std::vector<int32_t> context;
    GenerationOptions options;
    SampledTokenCallback on_token;
    std::unique_ptr<Sampler> sampler;
    int64_t computed = 0;  // tokens whose K/V are in the cache (context, then generated)
    bool admitted_once = false;
    bool cancelled = false;  // cancel(): ends at the next step
    GenerationResult result;
    Clock::time_point start, first_token;
  };
  std::shared_ptr<const Engine> engine;
  BatchConfig config;
  std::unique_ptr<LlmRunner> runner;
  std::deque<std::unique_ptr<Request>> waiting;
  std::vector<std::unique_ptr<Request>> running;
  int64_t next_id = 1;
  int64_t preemptions = 0;
  // The ids the engine's tokenizer cannot decode, never sampled (null: none, or no tokenizer).
  std::shared_ptr<const std::vector<int32_t>> excluded;

  int64_t blocksFor(int64_t tokens) const {
    int64_t block = runner->cache().spec().block_size;
    return (tokens + block - 1) / block;
  }

  // Blocks the request's next token may need (0 before it is in the cache).
  int64_t nextTokenBlocks(const Request& r) const {
    int64_t blocks = 0;
    if (!runner->cache().hasSequence(r.id) ||
        !runner->cache().blocksNeededToAppend(r.id, 1, &blocks).ok())
      return 0;
    return blocks;
  }
  // Back to the head of the queue, its blocks freed, to recompute its context later.
  void preempt(std::vector<std::unique_ptr<Request>>::iterator it) {
    Request& r = **it;
    runner->removeSequence(r.id);
    r.context = r.prompt;
    r.context.insert(r.context.end(), r.result.tokens.begin(), r.result.tokens.end());
    r.computed = 0;
    ++preemptions;
    waiting.push_front(std::move(*it));
    running.erase(it);
  }

  void finish(Request& r, Status status, std::vector<Finished>* finished) {
    runner->removeSequence(r.id);
    auto end = Clock::now();
    if (!r.result.tokens.empty()) {
      r.result.time_to_first_token_ms =
          std::chrono::duration<double, std::milli>(r.first_token - r.start).count();
      double seconds = std::chrono::duration<double>(end - r.first_token).count();
      if (r.result.tokens.size() > 1 && seconds > 0)
        r.result.decode_tokens_per_s = (r.result.tokens.size() - 1) / seconds;
    }
    finished->push_back({r.id, std::move(status), std::move(r.result)});
  }
};

BatchGenerator::~BatchGenerator() = default;

Status BatchGenerator::create(std::shared_ptr<const Engine> engine, const BatchConfig& config,
                              std::unique_ptr<BatchGenerator>* out) {
  return guardApi("BatchGenerator::create", [&]() -> Status {
    if (!engine || !engine->llmConfig())
      return invalidArgument("BatchGenerator needs an engine compiled as a language model");
    if (config.max_step_tokens < 1 || config.max_running < 1 || config.kv_cache_tokens < 0)
      return invalidArgument("BatchConfig: max_step_tokens and max_running must be at least 1");
    std::unique_ptr<BatchGenerator> generator(new BatchGenerator());
    generator->state_ = std::make_unique<State>();
    State& s = *generator->state_;
    s.engine = engine;
    s.config = config;
    LLMC_RETURN_IF_ERROR(LlmRunner::create(engine, config.kv_cache_tokens, &s.runner,
                                           config.kv_cache_dtype, config.session,
                                           config.kv_cache_prefault));
    if (!engine->tokenizerJson().empty()) {
      std::unique_ptr<Tokenizer> tokenizer;
      LLMC_RETURN_IF_ERROR(Tokenizer::fromJson(engine->tokenizerJson(), &tokenizer)
                               .withContext("BatchGenerator: the engine's tokenizer"));
      LLMC_RETURN_IF_ERROR(
          undecodableIds(tokenizer.get(), engine->llmConfig()->vocab_size, &s.excluded));
    }
    *out = std::move(generator);
    return okStatus();
  });
}

bool BatchGenerator::idle() const { return state_->waiting.empty() && state_->running.empty(); }
size_t BatchGenerator::numRunning() const { return state_->running.size(); }
size_t BatchGenerator::numWaiting() const { return state_->waiting.size(); }

DType BatchGenerator::kvCacheDtype() const { return state_->runner->cache().spec().dtype; }

BatchStats BatchGenerator::stats() const {
  KvCacheStats kv = state_->runner->cache().stats();
  BatchStats stats;
  stats.kv_blocks = kv.num_blocks;
  stats.kv_blocks_used = kv.used_blocks;
  stats.kv_blocks_cached = kv.cached_blocks;
  stats.prefix_query_tokens = kv.prefix_query_tokens;
  stats.prefix_hit_tokens = kv.prefix_hit_tokens;
  stats.preemptions = state_->preemptions;
  return stats;
}

Status BatchGenerator::submit(std::span<const int32_t> prompt, const GenerationOptions& options,
                              TokenCallback on_token, int64_t* request_id) {
  return guardApi("BatchGenerator::submit", [&] {
    SampledTokenCallback sampled;
    if (on_token)
      sampled = [on_token = std::move(on_token)](const SampledToken& token) {
        return on_token(token.id);
      };
    return submitUnguarded(prompt, options, std::move(sampled), request_id);
  });
}

Status BatchGenerator::submit(std::span<const int32_t> prompt, const GenerationOptions& options,
                              SampledTokenCallback on_token, int64_t* request_id) {
  return guardApi("BatchGenerator::submit", [&] {
    return submitUnguarded(prompt, options, std::move(on_token), request_id);
  });
}

Status BatchGenerator::submitUnguarded(std::span<const int32_t> prompt,
                                       const GenerationOptions& options,
                                       SampledTokenCallback on_token, int64_t* request_id) {
  State& s = *state_;
  const LlmConfig& config = s.runner->config();
  if (prompt.empty()) return invalidArgument("the prompt is empty");
  if (options.max_new_tokens < 1) return invalidArgument("max_new_tokens must be at least 1");
  if (!options.stop_strings.empty())
    return invalidArgument("stop strings are not supported by BatchGenerator (use stop ids)");
  int64_t total = static_cast<int64_t>(prompt.size()) + options.max_new_tokens;
  if (total > config.max_context)
    return outOfRange("the prompt (" + std::to_string(prompt.size()) + " tokens) plus " +
                      std::to_string(options.max_new_tokens) +
                      " new tokens exceeds the engine's context of " +
                      std::to_string(config.max_context) + " tokens");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || (config.vocab_size >= 0 && prompt[i] >= config.vocab_size))
      return invalidArgument("prompt token " + std::to_string(i) + " is id " +
                             std::to_string(prompt[i]) + ", outside the vocabulary [0, " +
                             std::to_string(config.vocab_size) + ")");
  auto request = std::make_unique<State::Request>();
  // Alone in the cache it must be able to finish: preemption then always lets the oldest run.
  if (s.blocksFor(total) > s.runner->cache().spec().num_blocks)
    return resourceExhausted("KV cache full: the request needs " +
                             std::to_string(s.blocksFor(total)) + " blocks, the cache has " +
                             std::to_string(s.runner->cache().spec().num_blocks));
  LLMC_RETURN_IF_ERROR(Sampler::create(options.sampling, static_cast<int32_t>(config.vocab_size),
                                       prompt, &request->sampler, s.excluded));
  request->id = s.next_id++;
  request->prompt.assign(prompt.begin(), prompt.end());
  request->context = request->prompt;
  request->options = options;
  request->on_token = std::move(on_token);
  request->start = Clock::now();
  *request_id = request->id;
  s.waiting.push_back(std::move(request));
  return okStatus();
}

Status BatchGenerator::step(std::vector<Finished>* finished) {
  return guardApi("BatchGenerator::step", [&] { return stepUnguarded(finished); });
}

Status BatchGenerator::cancel(int64_t request_id) {
  return guardApi("BatchGenerator::cancel", [&]() -> Status {
    auto mark = [&](auto& requests) {
      for (auto& r : requests)
        if (r->id == request_id) return r->cancelled = true;
      return false;
    };
    if (mark(state_->running) || mark(state_->waiting)) return okStatus();
    return notFound("BatchGenerator::cancel: no request " + std::to_string(request_id) +
                    " is waiting or running");
  });
}

Status BatchGenerator::stepUnguarded(std::vector<Finished>* finished) {
  State& s = *state_;
  // Cancelled requests leave first, with no engine run (their blocks go back now).
  const Status cancel_status(StatusCode::kCancelled, "cancelled");
  for (auto it = s.waiting.begin(); it != s.waiting.end();) {
    if (!(*it)->cancelled) {
      ++it;
      continue;
    }
    s.finish(**it, cancel_status, finished);  // holds no blocks (its timings, if preempted)
    it = s.waiting.erase(it);
  }
  for (auto it = s.running.begin(); it != s.running.end();) {
    if (!(*it)->cancelled) {
      ++it;
      continue;
    }
    s.finish(**it, cancel_status, finished);
    it = s.running.erase(it);
  }
  // Room for every running request's next token, or the newest make way (the oldest always
  // fits: submit() checked that a request alone does).
  const KvCache& cache = s.runner->cache();
  for (;;) {
    int64_t needed = 0;
    for (const auto& r : s.running) needed += s.nextTokenBlocks(*r);
    if (needed <= cache.numAvailableBlocks() || s.running.size() <= 1) break;
    s.preempt(std::max_element(s.running.begin(), s.running.end(),
                               [](const auto& a, const auto& b) { return a->id < b->id; }));
  }
  // Admit waiting requests, in order, while the context fits beside one more token for each
  // running request. Admission puts the context in the cache (reusing cached prefix blocks).
  while (!s.waiting.empty() && static_cast<int32_t>(s.running.size()) < s.config.max_running) {
    State::Request& r = *s.waiting.front();
    const int64_t headroom = static_cast<int64_t>(s.running.size());
    if (s.blocksFor(static_cast<int64_t>(r.context.size()) + 1) + headroom >
            cache.numAvailableBlocks() &&
        !s.running.empty())
      break;
    int64_t cached = 0;
    Status added = s.runner->addSequence(r.id, r.context, &cached);
    if (!added.ok()) {
      if (added.code() == StatusCode::kResourceExhausted && !s.running.empty()) break;
      finished->push_back({r.id, added, std::move(r.result)});  // holds no blocks
      s.waiting.pop_front();
      continue;
    }
    r.computed = cached;
    if (!r.admitted_once) r.result.prompt_tokens_cached = cached;
    r.admitted_once = true;
    s.running.push_back(std::move(s.waiting.front()));
    s.waiting.pop_front();
  }
  if (s.running.empty()) return okStatus();

  // Decode tokens first (one per request past its prompt), then prompt chunks.
  std::vector<LlmRunner::Work> work;
  std::vector<State::Request*> owners;
  int64_t budget = s.config.max_step_tokens;
  for (auto& r : s.running) {
    if (r->computed < static_cast<int64_t>(r->context.size()) || budget < 1) continue;
    work.push_back({r->id, r->computed, 1});
    owners.push_back(r.get());
    --budget;
  }
  for (auto& r : s.running) {
    if (budget < 1) break;
    if (r->computed >= static_cast<int64_t>(r->context.size())) continue;
    int64_t count =
        std::min<int64_t>(budget, static_cast<int64_t>(r->context.size()) - r->computed);
    work.push_back({r->id, r->computed, count});
    owners.push_back(r.get());
    budget -= count;
  }
  if (work.empty()) return okStatus();

  std::vector<std::vector<float>> logits;
  Status status = s.runner->step(work, &logits);
  if (!status.ok()) {
    // Every request in this step is lost (its cache state is unknown); the rest go on.
    for (State::Request* owner : owners) {
      auto it = std::find_if(s.running.begin(), s.running.end(),
                             [&](const auto& r) { return r.get() == owner; });
      s.finish(**it, status, finished);
      s.running.erase(it);
    }
    return okStatus();
  }
  std::vector<State::Request*> done;
  std::vector<Status> done_status;
  for (size_t w = 0; w < work.size(); ++w) {
    State::Request& r = *owners[w];
    r.computed = work[w].first + work[w].count;
    if (r.computed < static_cast<int64_t>(r.context.size())) continue;  // context not done yet
    SampledToken token;
    Status sampled = r.sampler->sample(logits[w], &token);
    if (!sampled.ok()) {
      done.push_back(&r);
      done_status.push_back(sampled);
      continue;
    }
    if (r.result.tokens.empty()) r.first_token = Clock::now();
    r.result.tokens.push_back(token.id);
    r.result.logprobs.push_back(token.logprob);
    r.result.entropies.push_back(token.entropy);
    r.result.model_logprobs.push_back(token.model_logprob);
    bool keep_going = true;
    Status called =
        r.on_token ? callUserCode("the token callback", [&] { keep_going = r.on_token(token); })
                   : okStatus();
    r.result.top_logprobs.push_back(std::move(token.top_logprobs));
    bool stop_requested = !called.ok() || !keep_going;
    bool stop = std::find(r.options.stop_token_ids.begin(), r.options.stop_token_ids.end(),
                          token.id) != r.options.stop_token_ids.end();
    if (stop_requested) {
      done.push_back(&r);
      done_status.push_back(called.ok() ? cancelled("request cancelled by its callback") : called);
    } else if (stop || static_cast<int32_t>(r.result.tokens.size()) >= r.options.max_new_tokens) {
      r.result.finish_reason = stop ? FinishReason::kStopToken : FinishReason::kLength;
      done.push_back(&r);
      done_status.push_back(okStatus());
    } else {
      Status appended = s.runner->appendToken(r.id, token.id);
      if (!appended.ok()) {
        done.push_back(&r);
        done_status.push_back(appended);
      }
    }
  }
  for (size_t i = 0; i < done.size(); ++i) {
    auto it = std::find_if(s.running.begin(), s.running.end(),
                           [&](const auto& r) { return r.get() == done[i]; });
    s.finish(**it, done_status[i], finished);
    s.running.erase(it);
  }
  return okStatus();
}

}  // namespace llmc
