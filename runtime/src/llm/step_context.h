// What one language-model step hands its llm kernels: the ragged batch (every sequence's new
// tokens flattened into one [1, tokens] row), each token's position and KV-cache slot, and
// each sequence's block table. Built by LlmRunner, read by LlmAttention and LlmPositions.
#pragma once

#include <cstdint>
#include <vector>

#include "llm/kv_cache.h"

namespace llmc {

struct LlmStepContext {
  KvCache* cache = nullptr;
  // Per token of the step, in input order.
  std::vector<int32_t> token_sequence;  // index into block_tables
  std::vector<int64_t> token_position;  // position in its sequence
  std::vector<KvSlot> token_slot;       // where its K/V goes
  // Per sequence of the step: the blocks holding positions 0, 16, 32, ...
  std::vector<std::vector<int32_t>> block_tables;
  // Per sequence of the step: the index (into the step's tokens) of its last token, whose
  // logits are computed (LlmLastTokens).
  std::vector<int32_t> last_token;
};

}  // namespace llmc
