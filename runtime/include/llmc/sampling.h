// llmc::SamplingParams: how the next token is chosen from a sequence's logits (see
// runtime/src/llm/sampler.h for the exact processing order and the logprob convention).
#pragma once

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace llmc {

struct SamplingParams {
  float temperature = 0;         // 0 = greedy; otherwise > 0 and finite
  int32_t top_k = 0;             // 0 = off; k >= vocab is also off
  float top_p = 1;               // nucleus mass in (0, 1]; 1 = off
  float min_p = 0;               // in [0, 1]; keep tokens with p >= min_p * p_max; 0 = off
  float repetition_penalty = 1;  // > 0; 1 = off; applies to prompt and output tokens
  float presence_penalty = 0;    // subtracted once from each token seen in the output
  float frequency_penalty = 0;   // subtracted once per occurrence in the output
  // (token id, bias) added to the logits; -inf bans the token; repeated ids add up.
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0;         // same seed + same logits -> same tokens, on every platform
  int32_t num_logprobs = 0;  // also return the top-N logprobs, 0 <= N <= vocab
  // Compute SampledToken::entropy and model_logprob for the first this many tokens of the
  // sequence (NaN after them): one more pass over the vocabulary per token. 0: never; -1:
  // every token.
  int32_t model_statistics_tokens = 0;
};

struct SampledToken {
  int32_t id = -1;
  float logprob = 0;  // see the file comment for which distribution
  // The model's own next-token distribution (softmax of the raw logits: temperature 1, before
  // bias, penalties and truncation), whatever the sampling options: its entropy in nats and
  // the chosen token's log-probability under it (the drift monitor's statistics). NaN unless
  // SamplingParams::model_statistics_tokens asked for them, and where the sampler never saw
  // the distribution (tokens sampled on the GPU).
  float entropy = std::numeric_limits<float>::quiet_NaN();
  float model_logprob = std::numeric_limits<float>::quiet_NaN();
  // The num_logprobs most probable tokens, most probable first (ties: lowest id first).
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

}  // namespace llmc
