// llmc::BatchGenerator: continuous batching over the paged KV cache. Requests arrive at any
// time; each step() runs ONE engine call holding every running request's next token plus
// chunks of waiting prompts (chunked prefill), samples each request that finished its prompt,
// and retires finished requests, whose KV blocks go back to the pool at once. A request's
// tokens are exactly what Generator::generate would produce for it alone.
//
// Needs an engine compiled as a language model (Engine::llmConfig()). As Generator, it never
// chooses an id that the engine's tokenizer (if it carries one) cannot decode.
//
// Threads: a BatchGenerator is used by one thread at a time (the serving loop calls submit,
// step and the queries; requests from other threads reach it through the caller's own queue).
// Callbacks run on the thread that called step(). BatchGenerators of one Engine on different
// threads run at the same time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "llmc/engine.h"
#include "llmc/generator.h"
#include "llmc/status.h"

namespace llmc {

struct BatchConfig {
  // Tokens one step may compute (decode tokens first, then prompt chunks).
  int32_t max_step_tokens = 256;
  // Requests running at once (admitted ones; the rest wait in arrival order).
  int32_t max_running = 16;
  // KV cache capacity in tokens (0: 4 x the engine's context, at most 1 GiB). A request is
  // admitted when its prompt fits beside the running ones (with a block of headroom for each);
  // when their next tokens do not fit, the newest running requests are preempted: they wait
  // again and recompute their prompt and the tokens so far (their tokens do not change).
  int64_t kv_cache_tokens = 0;
  // kKvCacheAuto (the engine's choice, kvCacheDtypeFor), float32, float16, bfloat16, int8 or
  // uint8 (FP8 E4M3 codes), the 8-bit ones with a float32 scale per token and KV head
  DType kv_cache_dtype = kKvCacheAuto;
  bool kv_cache_prefault = false;  // as GeneratorConfig::kv_cache_prefault
  SessionOptions session;          // the backend the steps run on
};

// The KV cache's state, for monitoring (a server's metrics).
struct BatchStats {
  int64_t kv_blocks = 0;            // the cache's capacity
  int64_t kv_blocks_used = 0;       // held by running requests
  int64_t kv_blocks_cached = 0;     // held by no request, kept for prefix reuse (evictable)
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up in the prefix cache, in total
  int64_t prefix_hit_tokens = 0;    // of those, tokens whose K/V were reused
  int64_t preemptions = 0;          // requests sent back to wait when the cache ran short
};

class BatchGenerator {
 public:
  static Status create(std::shared_ptr<const Engine> engine, const BatchConfig& config,
                       std::unique_ptr<BatchGenerator>* out);
  ~BatchGenerator();

  // Queues a request. Errors (nothing queued): an empty prompt, an id outside the vocabulary,
  // a prompt plus max_new_tokens beyond the context or beyond the whole KV cache, bad
  // sampling options, stop strings (not supported here). `on_token` may return false to
  // cancel the request (it then finishes with kCancelled).
  Status submit(std::span<const int32_t> prompt, const GenerationOptions& options,
                TokenCallback on_token, int64_t* request_id);
  // The same, the callback seeing each token's logprobs too (a streaming server's logprobs).
  Status submit(std::span<const int32_t> prompt, const GenerationOptions& options,
                SampledTokenCallback on_token, int64_t* request_id);
  // The same without a callback.
  Status submit(std::span<const int32_t> prompt, const GenerationOptions& options, std::nullptr_t,
                int64_t* request_id) {
    return submit(prompt, options, SampledTokenCallback(), request_id);
  }

  struct Finished {
    int64_t request_id = 0;
    Status status;  // ok, kCancelled, or the error that ended this request
    GenerationResult result;
  };
  // Ends a waiting or running request at the next step(), before any engine run (even one
  // still in its prompt, whose token callback has not run yet): it is reported in `finished`
  // with kCancelled and its KV blocks are freed. kNotFound when no such request is left.
  Status cancel(int64_t request_id);
  // One scheduling step (one engine run); appends the requests that ended to `finished`.
  // An engine error fails every request in the step (they are reported in `finished`) and
  // leaves the generator usable.
  Status step(std::vector<Finished>* finished);
  bool idle() const;
  size_t numRunning() const;
  size_t numWaiting() const;
  BatchStats stats() const;
  // What the KV cache stores (kKvCacheAuto resolved).
  DType kvCacheDtype() const;

 private:
  BatchGenerator() = default;
  // The bodies of submit() and step(), which run them inside the API's exception boundary.
  Status submitUnguarded(std::span<const int32_t> prompt, const GenerationOptions& options,
                         SampledTokenCallback on_token, int64_t* request_id);
  Status stepUnguarded(std::vector<Finished>* finished);
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace llmc
