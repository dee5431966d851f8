// LlmRunner: runs an engine whose attention is llm.attention over the paged KV cache, one
// ragged step at a time. Sequences live in the cache; a step computes any number of tokens
// of any number of sequences (prefill, decode and mixed alike) in one engine run, and
// returns the logits of each sequence's last computed token.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/step_context.h"
#include "llm/kv_cache.h"
#include "llmc/engine.h"
#include "llmc/generator.h"
#include "llmc/session.h"

namespace llmc {

// Row `row` of a [batch, tokens, vocab] logits tensor (rows counted over batch * tokens) as
// float; float32, float16 and bfloat16 logits.
Status copyLogitsRow(const Tensor& logits, int64_t row, std::vector<float>* out);

class LlmRunner {
 public:
  // `kv_cache_tokens`: capacity of the cache in tokens (all sequences together), rounded up
  // to whole blocks; 0 picks 4 x max_context, at most 1 GiB of cache.
  // `kv_dtype`: the storage (GeneratorConfig::kv_cache_dtype; kKvCacheAuto resolved here).
  // `kv_prefault`: the cache's pages written when it is created (KvCacheSpec::prefault).
  static Status create(std::shared_ptr<const Engine> engine, int64_t kv_cache_tokens,
                       std::unique_ptr<LlmRunner>* out, DType kv_dtype = DType::kFloat32,
                       const SessionOptions& session_options = {}, bool kv_prefault = false);

  const LlmConfig& config() const { return *engine_->llmConfig(); }
  KvCache& cache() { return *cache_; }
  const KvCache& cache() const { return *cache_; }

  // Registers sequence `id` holding `tokens`; `*num_cached` leading tokens already have
  // their K/V (a shared prefix), the rest must be computed by step().
  Status addSequence(int64_t id, std::span<const int32_t> tokens, int64_t* num_cached);
  Status appendToken(int64_t id, int32_t token);
  Status fork(int64_t parent, int64_t child) { return cache_->fork(parent, child); }
  // Removes the sequence if it exists (never fails on an unknown id).
  void removeSequence(int64_t id);

  struct Work {
    int64_t id = 0;
    int64_t first = 0;  // first position to compute
    int64_t count = 0;  // tokens to compute; the sequence must hold first + count tokens
  };
  // One engine run over every work item's tokens; `logits[i]` gets the logits of work i's
  // last token. On error the affected sequences' uncommitted tokens stay uncommitted:
  // remove those sequences.
  Status step(const std::vector<Work>& work, std::vector<std::vector<float>>* logits);
  // The same, asking the backend to choose each item's next token where the logits are
  // (`sampling`, step_context.h). When it did, sampling->done is set, sampling->ids and
  // ->logprobs hold the choices and `logits` holds empty rows; otherwise `logits` as above.
  Status step(const std::vector<Work>& work, DeviceSampling* sampling, std::vector<std::vector<float>>* logits);
  // Whether the session's backend chooses tokens where the logits are (step() can sample).
  bool samplesOnDevice() const;
  const Session& session() const { return *session_; }

 private:
  LlmRunner() = default;
  std::shared_ptr<const Engine> engine_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<KvCache> cache_;
  DType ids_dtype_ = DType::kInt64;
  size_t logits_index_ = 0;
  LlmStepContext context_;  // reused across steps
};

}  // namespace llmc
