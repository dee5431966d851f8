// The token sampler: turns one sequence's raw logits into the next token id, with penalties,
// logit bias, temperature, top-k / top-p / min-p truncation and a seeded, portable PRNG.
//
// Processing order for each token (the HF / vLLM order):
//   1. logit bias            logit += bias[id]                 (-inf bans a token)
//      excluded ids          logit = -inf   (ids the tokenizer cannot decode, see create)
//   2. repetition penalty    logit > 0 ? logit / r : logit * r  for ids seen in prompt + output
//      presence penalty      logit -= presence                  for ids seen in the output
//      frequency penalty     logit -= count * frequency         count = times seen in the output
//   3. temperature == 0:     argmax, ties go to the lowest id (no random draw is consumed)
//   4. temperature           logit /= temperature
//   5. top-k                 keep the k largest (ties at the boundary go to the lowest ids)
//   6. top-p                 keep the smallest most-probable prefix whose mass >= top_p,
//                            probabilities renormalized over what top-k kept
//   7. min-p                 keep p >= min_p * p_max
//   8. draw one token from the kept set, proportional to exp(logit): a uniform u in [0, 1)
//      times the kept weights' total, against their running sum in id order
//
// exp() is the sampler's own (float multiplies and adds: the same bits on every CPU, 0 below
// e^-87 of the maximum); top-k and top-p find the kept prefix's end without sorting the
// vocabulary (sampler.cpp), so a token costs a few passes over the vocabulary whatever the
// truncation.
//
// Logprobs (SampledToken::logprob and top_logprobs) are the log-softmax over the whole vocab
// of the logits after steps 1, 2 and 4 (temperature 1 when greedy), before any truncation:
// the vLLM "processed logprobs" convention. Truncation therefore never changes a logprob.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "llmc/sampling.h"
#include "llmc/status.h"
#include "llmc/tokenizer.h"

namespace llmc {

// Checks every field against the vocab size; kInvalidArgument naming the field otherwise.
Status validate(const SamplingParams& params, int32_t vocab_size);

// xoshiro256** (Blackman & Vigna, 2018) seeded by splitmix64: small, fast and bit-identical on
// every platform, unlike std:: distributions whose output varies between standard libraries.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t next();
  // Uniform in [0, 1) with 53 random bits.
  double nextDouble();

 private:
  uint64_t state_[4];
};

// The ids in [0, vocab) that `tokenizer` cannot decode, for Sampler::create's `excluded`: the
// logits rows a checkpoint pads its embedding with beyond the tokenizer's ids (to a multiple of 64
// or 128: Qwen2's 151,936 rows for 151,665 ids), whose sampling would end the text with an error.
// Null when every id decodes or there is no tokenizer; an error when none does.
Status undecodableIds(const Tokenizer* tokenizer, int64_t vocab,
                      std::shared_ptr<const std::vector<int32_t>>* out);

// Steps 5-7's result over one token: an id is kept when its (|x|'s bits, id), x its processed
// logit (<= 0 after the shift), is at most (last_magnitude, last_id) -- the order x descending,
// then id ascending -- and its weight exp(x) is at least min_weight.
struct Truncation {
  uint32_t last_magnitude = UINT32_MAX;
  uint32_t last_id = UINT32_MAX;
  float min_weight = 0;
};

// Steps 5-7 as the sampler takes them, over processed logits `x` (the maximum 0, -inf for a
// masked id) and their weights `w` = exp(x); exposed for the tests.
Truncation truncation(const SamplingParams& params, std::span<const float> x,
                      std::span<const float> w);

// One per sequence: holds the RNG state and the token counts the penalties need.
// Not thread-safe; sample() reuses scratch buffers so it allocates nothing per token
// beyond SampledToken::top_logprobs.
class Sampler {
 public:
  // Validates `params`, and that every prompt token is in [0, vocab_size). `excluded` (may be
  // null; ascending ids in [0, vocab_size)) are never chosen: the logits rows a model has beyond
  // its tokenizer's vocabulary, which no text can show (Tokenizer::unknownIds).
  static Status create(const SamplingParams& params, int32_t vocab_size,
                       std::span<const int32_t> prompt_tokens, std::unique_ptr<Sampler>* out,
                       std::shared_ptr<const std::vector<int32_t>> excluded = nullptr);

  // Picks the next token from raw logits [vocab_size] and records it for the penalties.
  // Errors: wrong length, a NaN or +inf logit (named by index), a logit that overflows to
  // +inf after bias / penalties, or every token masked to -inf.
  Status sample(std::span<const float> logits, SampledToken* out);

  const SamplingParams& params() const { return params_; }
  int32_t vocabSize() const { return vocab_size_; }

 private:
  Sampler(const SamplingParams& params, int32_t vocab_size);

  // Steps 1 and 2 on processed_.
  void applyBiasAndPenalties();
  void recordToken(int32_t id);

  SamplingParams params_;
  int32_t vocab_size_ = 0;
  std::shared_ptr<const std::vector<int32_t>> excluded_;  // may be null
  int64_t sampled_ = 0;  // tokens sampled so far
  Xoshiro256 rng_;

  std::vector<int32_t> output_counts_;  // [vocab] times each id was sampled
  std::vector<uint8_t> seen_;           // [vocab] 1 if the id is in the prompt or output
  std::vector<int32_t> seen_ids_;       // the ids with seen_ == 1, so penalties are O(seen)

  // Scratch reused across tokens (the weights, truncation's and top_logprobs' are per thread,
  // sampler.cpp).
  std::vector<float> processed_;  // [vocab] logits after each step
};

}  // namespace llmc
