// The token sampler: see sampler.h for the processing order and the logprob convention.
#include "llm/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

namespace llmc {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Cumulative mass within this of top_p counts as reaching it, so that a boundary that is exact
// in real arithmetic (0.5 + 0.25 == 0.75) is not missed by float rounding of exp().
constexpr double kTopPSlack = 1e-6;

// Smallest chunk top-p sorts at a time: real distributions put most mass in few tokens.
constexpr size_t kTopPFirstChunk = 64;

uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// A total order on token ids: logit descending, then id ascending. Using it for every sort makes
// truncation and top_logprobs deterministic when logits tie.
auto byLogitDescending(const std::vector<float>& logits) {
  return [&logits](int32_t a, int32_t b) {
    const float va = logits[static_cast<size_t>(a)];
    const float vb = logits[static_cast<size_t>(b)];
    return va > vb || (va == vb && a < b);
  };
}

// exp() in float, summed by the callers in double: the float exp is several times faster over a
// 150k vocab and its 1-ulp error is far below what a logprob or a top-p boundary can resolve.
double expWeight(float logit) { return static_cast<double>(std::exp(logit)); }

// exp(x) for x <= 0 from float multiplies and adds alone (2^n p(r), n = round(x / ln 2) by the
// 1.5 x 2^23 rounding, r = x - n ln 2 in two steps, p of degree 7: within a few ulp of exp), so
// the same bits on every CPU and in however many lanes the compiler gives the loop (this file
// is compiled with -ffp-contract=off). Below -87 (exp < 1.7e-38, nothing beside the largest
// weight, 1) it gives 0. cpu/exp_poly.h's exp, the same polynomial, rounds with fused
// multiply-adds to match its AVX2 and AVX-512 forms, which a plain loop on the baseline ISA has
// not; and it is the CPU backend's.
float expNonPositive(float x) {
  const float clamped = x >= -87.0f ? x : -87.0f;  // -inf too
  const float n = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = clamped - n * 0.693359375f;  // n * 0.693359375 is exact
  r = r - n * -2.12194440e-4f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float power = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x >= -87.0f ? p * power : 0.0f;
}

// Σ exp(x) over the processed logits (all <= 0), in double: the weights computed into a buffer
// (a loop of float operations alone, which the compiler vectorizes), then summed as eight
// interleaved partial sums (element i in sum i % 8) added in a fixed order. A libm exp per
// element with one chain of adds took 180 us a token over a 16,000-token vocab and 1.4 ms over
// 128,256 (a greedy decode step of the 110M Llama at 8 bits takes about 8 ms).
double sumOfWeights(const float* x, size_t n) {
  thread_local std::vector<float> scratch;  // the calling thread's, for any sampler it runs
  if (scratch.size() < n) scratch.resize(n);
  float* w = scratch.data();
  for (size_t i = 0; i < n; ++i) w[i] = expNonPositive(x[i]);
  constexpr size_t kLanes = 8;
  double partial[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t lane = 0; lane < kLanes; ++lane) partial[lane] += static_cast<double>(w[i + lane]);
  for (; i < n; ++i) partial[i % kLanes] += static_cast<double>(w[i]);
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}

// Entropy (nats) and log normalizer of softmax(logits); -inf logits carry no mass. The caller
// has checked that no logit is NaN or +inf.
struct ModelStatistics {
  double entropy = 0;
  float max_logit = 0;
  double log_normalizer = 0;  // of the logits shifted by max_logit
};
ModelStatistics modelStatistics(const std::vector<float>& logits) {
  float max_logit = -kInf;
  for (float logit : logits) max_logit = std::max(max_logit, logit);
  if (max_logit == -kInf) return {NAN, 0, NAN};  // every token masked: sample() refuses it below
  // H = log Z - sum(w * x) / Z over x = logit - max, w = exp(x), Z = sum(w).
  double normalizer = 0, weighted = 0;
  for (float logit : logits) {
    if (logit == -kInf) continue;
    const float shifted = logit - max_logit;  // -inf when the range passes FLT_MAX: no mass
    const double w = expWeight(shifted);
    if (w == 0) continue;
    normalizer += w;
    weighted += w * shifted;
  }
  const double log_z = std::log(normalizer);
  return {std::max(0.0, log_z - weighted / normalizer), max_logit, log_z};
}

std::string fieldError(const char* field, const std::string& what) {
  return std::string("sampling params: ") + field + " " + what;
}

}  // namespace

Xoshiro256::Xoshiro256(uint64_t seed) {
  uint64_t sm = seed;
  for (uint64_t& word : state_) word = splitmix64(&sm);
}

uint64_t Xoshiro256::next() {
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

double Xoshiro256::nextDouble() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

Status validate(const SamplingParams& params, int32_t vocab_size) {
  if (vocab_size <= 0) {
    return invalidArgument("sampling params: vocab size must be positive, got " +
                           std::to_string(vocab_size));
  }
  if (!std::isfinite(params.temperature) || params.temperature < 0) {
    return invalidArgument(fieldError(
        "temperature", "must be finite and >= 0, got " + std::to_string(params.temperature)));
  }
  if (params.top_k < 0) {
    return invalidArgument(
        fieldError("top_k", "must be >= 0 (0 = off), got " + std::to_string(params.top_k)));
  }
  if (!(params.top_p > 0 && params.top_p <= 1)) {
    return invalidArgument(
        fieldError("top_p", "must be in (0, 1], got " + std::to_string(params.top_p)));
  }
  if (!(params.min_p >= 0 && params.min_p <= 1)) {
    return invalidArgument(
        fieldError("min_p", "must be in [0, 1], got " + std::to_string(params.min_p)));
  }
  if (!std::isfinite(params.repetition_penalty) || params.repetition_penalty <= 0) {
    return invalidArgument(
        fieldError("repetition_penalty",
                   "must be finite and > 0, got " + std::to_string(params.repetition_penalty)));
  }
  if (!std::isfinite(params.presence_penalty)) {
    return invalidArgument(fieldError("presence_penalty", "must be finite"));
  }
  if (!std::isfinite(params.frequency_penalty)) {
    return invalidArgument(fieldError("frequency_penalty", "must be finite"));
  }
  for (size_t i = 0; i < params.logit_bias.size(); ++i) {
    const auto& [id, bias] = params.logit_bias[i];
    if (id < 0 || id >= vocab_size) {
      return invalidArgument(fieldError("logit_bias", "entry " + std::to_string(i) + ": token id " +
                                                          std::to_string(id) + " is outside [0, " +
                                                          std::to_string(vocab_size) + ")"));
    }
    if (std::isnan(bias) || bias == kInf) {
      return invalidArgument(fieldError(
          "logit_bias", "entry " + std::to_string(i) + " (token " + std::to_string(id) +
                            "): bias must be finite or -inf, got " + std::to_string(bias)));
    }
  }
  if (params.model_statistics_tokens < -1) {
    return invalidArgument(
        fieldError("model_statistics_tokens",
                   "must be >= -1, got " + std::to_string(params.model_statistics_tokens)));
  }
  if (params.num_logprobs < 0 || params.num_logprobs > vocab_size) {
    return invalidArgument(fieldError("num_logprobs", "must be in [0, " +
                                                          std::to_string(vocab_size) + "], got " +
                                                          std::to_string(params.num_logprobs)));
  }
  return okStatus();
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size)
    : params_(params),
      vocab_size_(vocab_size),
      rng_(params.seed),
      output_counts_(static_cast<size_t>(vocab_size), 0),
      seen_(static_cast<size_t>(vocab_size), 0),
      processed_(static_cast<size_t>(vocab_size)) {
  if (params.temperature > 0) {
    candidates_.resize(static_cast<size_t>(vocab_size));
    weights_.resize(static_cast<size_t>(vocab_size));
  }
  if (params.num_logprobs > 0) logprob_order_.resize(static_cast<size_t>(vocab_size));
}

Status undecodableIds(const Tokenizer* tokenizer, int64_t vocab,
                      std::shared_ptr<const std::vector<int32_t>>* out) {
  out->reset();
  if (!tokenizer || vocab <= 0) return okStatus();
  auto ids = std::make_shared<std::vector<int32_t>>();
  LLMC_RETURN_IF_ERROR(tokenizer->unknownIds(static_cast<int32_t>(vocab), ids.get()));
  if (static_cast<int64_t>(ids->size()) == vocab)
    return invalidArgument("the tokenizer decodes none of the model's " + std::to_string(vocab) +
                           " token ids");
  if (!ids->empty()) *out = std::move(ids);
  return okStatus();
}

Status Sampler::create(const SamplingParams& params, int32_t vocab_size,
                       std::span<const int32_t> prompt_tokens, std::unique_ptr<Sampler>* out,
                       std::shared_ptr<const std::vector<int32_t>> excluded) {
  if (out == nullptr) return invalidArgument("Sampler::create: null output pointer");
  LLMC_RETURN_IF_ERROR(validate(params, vocab_size));
  if (excluded)
    for (int32_t id : *excluded)
      if (id < 0 || id >= vocab_size)
        return invalidArgument("Sampler::create: excluded id " + std::to_string(id) +
                               " is outside [0, " + std::to_string(vocab_size) + ")");
  for (size_t i = 0; i < prompt_tokens.size(); ++i) {
    if (prompt_tokens[i] < 0 || prompt_tokens[i] >= vocab_size) {
      return invalidArgument("Sampler::create: prompt token " + std::to_string(i) + " is id " +
                             std::to_string(prompt_tokens[i]) + ", outside [0, " +
                             std::to_string(vocab_size) + ")");
    }
  }
  std::unique_ptr<Sampler> sampler(new Sampler(params, vocab_size));
  if (excluded && !excluded->empty()) sampler->excluded_ = std::move(excluded);
  for (int32_t id : prompt_tokens) {
    if (!sampler->seen_[static_cast<size_t>(id)]) {
      sampler->seen_[static_cast<size_t>(id)] = 1;
      sampler->seen_ids_.push_back(id);
    }
  }
  *out = std::move(sampler);
  return okStatus();
}

void Sampler::applyBiasAndPenalties() {
  for (const auto& [id, bias] : params_.logit_bias) processed_[static_cast<size_t>(id)] += bias;
  if (excluded_)
    for (int32_t id : *excluded_) processed_[static_cast<size_t>(id)] = -kInf;

  const float repetition = params_.repetition_penalty;
  const float presence = params_.presence_penalty;
  const float frequency = params_.frequency_penalty;
  if (repetition == 1 && presence == 0 && frequency == 0) return;
  for (int32_t id : seen_ids_) {
    float& logit = processed_[static_cast<size_t>(id)];
    if (repetition != 1) logit = logit > 0 ? logit / repetition : logit * repetition;
    const int32_t count = output_counts_[static_cast<size_t>(id)];
    if (count > 0) logit -= presence + static_cast<float>(count) * frequency;
  }
}

void Sampler::sortLeading(size_t sorted, size_t want, size_t count) {
  if (want <= sorted) return;
  const auto better = byLogitDescending(processed_);
  auto first = candidates_.begin() + static_cast<std::ptrdiff_t>(sorted);
  auto middle = candidates_.begin() + static_cast<std::ptrdiff_t>(want);
  auto last = candidates_.begin() + static_cast<std::ptrdiff_t>(count);
  if (middle < last) std::nth_element(first, middle, last, better);
  std::sort(first, middle, better);
}

size_t Sampler::truncate(size_t count) {
  size_t sorted = 0;  // candidates_[0, sorted) are the best, in descending order

  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < count) {
    sortLeading(0, static_cast<size_t>(params_.top_k), count);
    count = sorted = static_cast<size_t>(params_.top_k);
  }

  if (params_.top_p < 1 && count > 1) {
    // Logits are shifted so the max is 0: every weight is in (0, 1] and the total is >= 1.
    double total = 0;
    for (size_t i = 0; i < count; ++i) {
      total += expWeight(processed_[static_cast<size_t>(candidates_[i])]);
    }
    const double target = (static_cast<double>(params_.top_p) - kTopPSlack) * total;
    double cumulative = 0;
    size_t kept = 0;
    size_t chunk = kTopPFirstChunk;
    while (kept < count && (kept == 0 || cumulative < target)) {
      if (kept == sorted) {
        // Sort the next chunk only when the walk reaches it: O(V) per chunk, not O(V log V).
        sortLeading(sorted, std::min(count, sorted + chunk), count);
        sorted = std::min(count, sorted + chunk);
        chunk *= 2;
      }
      cumulative += expWeight(processed_[static_cast<size_t>(candidates_[kept])]);
      ++kept;
    }
    count = kept;
  }

  if (params_.min_p > 0) {
    // p / p_max = exp(logit - max_logit) and the max logit is 0 after the shift.
    const double min_ratio = params_.min_p;
    size_t kept = 0;
    for (size_t i = 0; i < count; ++i) {
      const int32_t id = candidates_[i];
      if (std::exp(static_cast<double>(processed_[static_cast<size_t>(id)])) >= min_ratio) {
        candidates_[kept++] = id;
      }
    }
    count = kept;
  }
  return count;
}

void Sampler::recordToken(int32_t id) {
  const size_t index = static_cast<size_t>(id);
  ++output_counts_[index];
  if (!seen_[index]) {
    seen_[index] = 1;
    seen_ids_.push_back(id);
  }
}

Status Sampler::sample(std::span<const float> logits, SampledToken* out) {
  if (out == nullptr) return invalidArgument("Sampler::sample: null output pointer");
  if (logits.size() != static_cast<size_t>(vocab_size_)) {
    return invalidArgument("Sampler::sample: got " + std::to_string(logits.size()) +
                           " logits for a vocab of " + std::to_string(vocab_size_));
  }
  const size_t vocab = logits.size();
  // Copied with one flag for NaN or +inf (a loop the compiler vectorizes), the index found after.
  const float* given = logits.data();
  float* copy = processed_.data();
  int32_t bad = 0;
  for (size_t i = 0; i < vocab; ++i) {
    copy[i] = given[i];
    bad |= given[i] < kInf ? 0 : 1;
  }
  if (bad)
    for (size_t i = 0; i < vocab; ++i)
      if (!(logits[i] < kInf))
        return invalidArgument("Sampler::sample: logit at index " + std::to_string(i) + " is " +
                               (std::isnan(logits[i]) ? "NaN" : "+inf"));
  // The raw distribution's statistics, before anything below changes processed_.
  const int32_t wanted = params_.model_statistics_tokens;
  const bool statistics = wanted == -1 || sampled_ < wanted;
  const ModelStatistics raw = statistics ? modelStatistics(processed_) : ModelStatistics{};

  applyBiasAndPenalties();

  // Max with ties to the lowest id: the greedy answer, and the shift for exp(). The maximum
  // first (exact, so the order of the comparisons does not matter and the compiler keeps them in
  // vector lanes; a NaN that penalties made is passed over, as before), then its first index.
  float lane_max[8];
  for (float& m : lane_max) m = -kInf;
  size_t at = 0;
  for (; at + 8 <= vocab; at += 8)
    for (size_t lane = 0; lane < 8; ++lane)
      lane_max[lane] = copy[at + lane] > lane_max[lane] ? copy[at + lane] : lane_max[lane];
  for (; at < vocab; ++at) lane_max[0] = copy[at] > lane_max[0] ? copy[at] : lane_max[0];
  float max_logit = lane_max[0];
  for (float m : lane_max) max_logit = m > max_logit ? m : max_logit;
  size_t argmax = 0;
  while (argmax < vocab && copy[argmax] != max_logit) ++argmax;
  if (argmax == vocab) argmax = 0;  // nothing but NaN: refused below as masked
  if (max_logit == kInf) {
    return invalidArgument("Sampler::sample: logit at index " + std::to_string(argmax) +
                           " overflowed to +inf after logit bias and penalties");
  }
  if (max_logit == -kInf) {
    return invalidArgument(
        "Sampler::sample: every token is masked (all logits are -inf after logit bias, "
        "penalties and the ids the tokenizer cannot decode)");
  }

  // Shift so the max is 0 (exp() cannot overflow, and (x - max) / T cannot reach +inf), then
  // apply temperature. Log-softmax is unchanged by the shift.
  const bool greedy = params_.temperature == 0;
  const float temperature = greedy ? 1.0f : params_.temperature;
  for (size_t i = 0; i < vocab; ++i) processed_[i] = (processed_[i] - max_logit) / temperature;
  const double log_normalizer = std::log(sumOfWeights(processed_.data(), vocab));
  auto logprobOf = [&](size_t id) {
    return static_cast<float>(static_cast<double>(processed_[id]) - log_normalizer);
  };

  size_t chosen = argmax;
  if (!greedy) {
    size_t count = 0;
    for (size_t i = 0; i < vocab; ++i) {
      if (processed_[i] != -kInf) candidates_[count++] = static_cast<int32_t>(i);
    }
    count = truncate(count);
    double total = 0;
    for (size_t i = 0; i < count; ++i) {
      weights_[i] = expWeight(processed_[static_cast<size_t>(candidates_[i])]);
      total += weights_[i];
    }
    // truncate() always keeps the argmax (weight 1), so total >= 1.
    const double threshold = rng_.nextDouble() * total;
    double cumulative = 0;
    chosen = static_cast<size_t>(candidates_[count - 1]);
    for (size_t i = 0; i < count; ++i) {
      cumulative += weights_[i];
      if (threshold < cumulative) {
        chosen = static_cast<size_t>(candidates_[i]);
        break;
      }
    }
  }

  out->id = static_cast<int32_t>(chosen);
  out->logprob = logprobOf(chosen);
  out->entropy = statistics ? static_cast<float>(raw.entropy) : NAN;
  out->model_logprob =
      statistics ? static_cast<float>(static_cast<double>(logits[chosen] - raw.max_logit) -
                                      raw.log_normalizer)
                 : NAN;
  ++sampled_;
  out->top_logprobs.clear();
  if (params_.num_logprobs > 0) {
    std::vector<int32_t>& order = logprob_order_;
    std::iota(order.begin(), order.end(), 0);
    const auto top = order.begin() + params_.num_logprobs;
    std::partial_sort(order.begin(), top, order.end(), byLogitDescending(processed_));
    out->top_logprobs.reserve(static_cast<size_t>(params_.num_logprobs));
    for (auto it = order.begin(); it != top; ++it) {
      out->top_logprobs.emplace_back(*it, logprobOf(static_cast<size_t>(*it)));
    }
  }

  recordToken(out->id);
  return okStatus();
}

}  // namespace llmc
