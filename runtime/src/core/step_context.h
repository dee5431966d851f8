// What one language-model step hands a backend and its llm kernels: the ragged batch (every
// sequence's new tokens flattened into one [1, tokens] row), each token's position and KV-cache
// slot, each sequence's block table, and the cache's storage. Built by the language-model layer
// (llm/llm_runner.cpp), read by LlmAttention and LlmPositions and by device backends; core owns
// the type so that a backend needs nothing from llm/.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kv_storage.h"

namespace llmc {

// Token choice on the device, so that the logits never leave it (the CUDA backend; the CPU
// backend ignores the request and returns the logits). LlmRunner sets it for its caller; the
// executor reads it at the end of a run.
struct DeviceSampling {
  size_t logits_output = 0;    // the logits' index among the engine's outputs
  float temperature = 0;       // 0: greedy (argmax, lowest id among ties)
  int64_t top_k = 0;           // 0: off
  float top_p = 1;             // (0, 1]; 1: off
  std::vector<float> uniform;  // per work item, in [0, 1): the draw (unused when greedy)
  // > 0: only ids below it are chosen, as if the logits past it were -inf (the rows a model pads
  // beyond its tokenizer's ids, llm/sampler.h's undecodableIds).
  int64_t vocab_limit = 0;
  // Filled by a backend that sampled: per work item, the token and its log-probability (the
  // log-softmax of logits / temperature, temperature 1 when greedy, as the host sampler's).
  bool done = false;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
};

struct LlmStepContext {
  KvStorage* cache = nullptr;  // the paged KV cache's blocks (a KvCache, llm/kv_cache.h)
  // Per token of the step, in input order.
  std::vector<int32_t> token_sequence;  // index into block_tables
  std::vector<int64_t> token_position;  // position in its sequence
  std::vector<KvSlot> token_slot;       // where its K/V goes
  // Per sequence of the step: the blocks holding positions 0, 16, 32, ...
  std::vector<std::vector<int32_t>> block_tables;
  // Per sequence of the step: the index (into the step's tokens) of its last token, whose
  // logits are computed (LlmLastTokens).
  std::vector<int32_t> last_token;
  DeviceSampling* sampling = nullptr;  // optional: choose the tokens where the logits are
};

}  // namespace llmc
