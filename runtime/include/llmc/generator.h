// llmc::Generator: token generation on an engine of a decoder language model.
//
// On an engine compiled as a language model (Engine::llmConfig(), `llmc compile` without
// --as-graph on a recognized decoder) it runs over the paged KV cache: the prompt is
// prefilled once, then each step computes only the new token; beam search forks sequences
// copy-on-write, and a prompt that shares whole blocks with an earlier one reuses their K/V.
// Any other engine runs by full recomputation: every step runs the whole sequence
// (`input_ids` [1, n], with `attention_mask` ones and `position_ids` 0..n-1 when the engine
// has those inputs) and samples from the last position's logits.
//
// Threads: a Generator (its Session, KV cache and prefix cache) is used by one thread at a
// time, every method included. Generators of one Engine on different threads run at the same
// time, and may share one Tokenizer (setTokenizer). The token callback runs on the thread that
// called generate().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "llmc/engine.h"
#include "llmc/sampling.h"
#include "llmc/session.h"
#include "llmc/status.h"
#include "llmc/tokenizer.h"

namespace llmc {

struct GenerationOptions {
  int32_t max_new_tokens = 32;
  SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  // generation ends after emitting one of these
  // Generation ends once the decoded text contains one of these (needs a tokenizer); the
  // result's text is cut before it, its tokens keep the token that completed it.
  std::vector<std::string> stop_strings;
};

enum class FinishReason { kLength, kStopToken, kStopString };

struct BeamSearchOptions {
  int32_t num_beams = 4;
  int32_t max_new_tokens = 32;
  // A finished hypothesis scores sum(logprobs) / (new tokens ^ length_penalty), as
  // transformers does for decoder-only models.
  float length_penalty = 1.0f;
  // true: stop once num_beams hypotheses have finished (transformers' early_stopping=True).
  bool early_stopping = true;
  std::vector<int32_t> stop_token_ids;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // the new tokens (the prompt excluded)
  std::vector<float> logprobs;  // of each chosen token (see sampling.h)
  // Per new token, its step's SamplingParams::num_logprobs most probable tokens and their
  // logprobs, most probable first (empty lists when num_logprobs is 0; beam search leaves it
  // empty).
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
  // Per new token, the model's own distribution: its entropy (nats) and the chosen token's
  // log-probability under it (SampledToken::entropy / model_logprob: NaN beyond
  // SamplingParams::model_statistics_tokens and for tokens sampled on the GPU). Beam search
  // leaves them empty.
  std::vector<float> entropies;
  std::vector<float> model_logprobs;
  std::string text;             // the new tokens decoded, when the generator has a tokenizer
  FinishReason finish_reason = FinishReason::kLength;
  double time_to_first_token_ms = 0;
  double decode_tokens_per_s = 0;  // tokens after the first, per second
  // Prompt tokens whose K/V were taken from the prefix cache rather than computed: the whole
  // blocks an earlier request on this generator left with the same tokens (KV-cache path only;
  // 0 by full recomputation). The prefill computed the prompt's other tokens.
  int64_t prompt_tokens_cached = 0;
};

// Called after each new token; return false to cancel (generate() then returns kCancelled
// with the tokens so far in the result).
using TokenCallback = std::function<bool(int32_t token)>;
// The same, with everything sampled for the token: its logprob, top logprobs and model
// statistics as well (BatchGenerator::submit).
using SampledTokenCallback = std::function<bool(const SampledToken& token)>;

// The KV-cache dtype that stores FP8 E4M3 codes (llmc has no float8 dtype: its codes are uint8).
inline constexpr DType kKvCacheFp8 = DType::kUInt8;

// The KV-cache dtype that lets the engine choose (kvCacheDtypeFor): the default.
inline constexpr DType kKvCacheAuto = DType::kUndefined;

// The KV cache's storage by name: auto, f32, f16, bf16, int8 or fp8 (the CLI's
// --kv-cache-dtype, the Python package's and the C API's kv_cache_dtype); false when unknown.
inline bool kvCacheDtypeFromName(std::string_view name, DType* out) {
  if (name == "auto")
    *out = kKvCacheAuto;
  else if (name == "f32")
    *out = DType::kFloat32;
  else if (name == "f16")
    *out = DType::kFloat16;
  else if (name == "bf16")
    *out = DType::kBFloat16;
  else if (name == "int8")
    *out = DType::kInt8;
  else if (name == "fp8")
    *out = kKvCacheFp8;
  else
    return false;
  return true;
}
inline constexpr const char* kKvCacheDtypeNames = "auto, f32, f16, bf16, int8 or fp8";
// The name kvCacheDtypeFromName() takes for `dtype` ("?" for a dtype no cache stores).
inline const char* kvCacheDtypeName(DType dtype) {
  switch (dtype) {
    case kKvCacheAuto: return "auto";
    case DType::kFloat32: return "f32";
    case DType::kFloat16: return "f16";
    case DType::kBFloat16: return "bf16";
    case DType::kInt8: return "int8";
    case kKvCacheFp8: return "fp8";
    default: return "?";
  }
}

// What kKvCacheAuto stores on the CPU: float16 for an engine whose products run on quantized
// weights (an LlmQuantMatMul step: int8, 4-bit, W8A8, FP8, MatMulNBits lowered onto them; or
// ONNX's MatMulInteger and com.microsoft.MatMulNBits kept as they are), whose outputs already
// carry more error than half-precision keys and values add, and which then read half the bytes
// per token of context (llama.cpp's default cache); float32 for any other engine, so that a
// float32 engine over the cache computes what it computes without one. A backend that keeps
// its own copy of the cache (CUDA: float32 device pools) stores that copy's dtype instead.
DType kvCacheDtypeFor(const Engine& engine);

struct GeneratorConfig {
  // false: full recomputation even on a language-model engine (what `llmc bench` compares
  // the KV cache against).
  bool use_kv_cache = true;
  // KV cache capacity in tokens, all sequences together (0: 4 x the engine's context,
  // at most 1 GiB). A request that needs more fails with kResourceExhausted.
  int64_t kv_cache_tokens = 0;
  // How the cache stores K/V: kKvCacheAuto (the engine's choice, kvCacheDtypeFor), float32,
  // float16/bfloat16 for half the memory, int8 or kKvCacheFp8 (FP8 E4M3 codes) for a quarter
  // plus a float32 scale per token and KV head (attention still computes in float32).
  DType kv_cache_dtype = kKvCacheAuto;
  // true: every page of the cache's host storage is written when the generator is created, so
  // that no request pays a page fault for a block that no earlier request used (what a server
  // wants for steady first-request latency; creation then costs the whole cache's faults, and
  // the cache holds its whole capacity in memory from the start). false: pages are mapped as
  // blocks are first written.
  bool kv_cache_prefault = false;
  // The backend the model's steps run on (Backend::kAuto: the engine's target).
  SessionOptions session;
  // On the CUDA backend over the KV cache, generate() chooses tokens on the GPU (greedy,
  // temperature, top-k, top-p) so that the logits never leave it; options it does not take
  // there (penalties, logit bias, min-p, top logprobs) sample on the host. Same seed, same
  // tokens on the GPU, but not the host sampler's tokens (docs/cuda.md).
  bool sample_on_device = true;
};

class Generator {
 public:
  // Checks that the engine looks like a decoder language model: an integer `input_ids`
  // [batch, seq] input, optional `attention_mask` / `position_ids`, and a float logits output
  // [batch, seq, vocab].
  static Status create(std::shared_ptr<const Engine> engine, std::unique_ptr<Generator>* out);
  static Status create(std::shared_ptr<const Engine> engine, const GeneratorConfig& config,
                       std::unique_ptr<Generator>* out);
  // Whether steps run over the paged KV cache.
  bool usesKvCache() const;
  // What that cache stores (kKvCacheAuto resolved); DType::kUndefined without one.
  DType kvCacheDtype() const;
  ~Generator();

  // Generates after `prompt`. Errors: an empty prompt, a token id outside the vocabulary, a
  // prompt (plus new tokens) longer than the engine's sequence range, bad sampling options.
  // The generator stays usable after any error.
  Status generate(std::span<const int32_t> prompt, const GenerationOptions& options,
                  const TokenCallback& on_token, GenerationResult* result);

  // The tokenizer used for result text and stop strings: the engine's own by default
  // (llmc compile --tokenizer); this replaces it. With a tokenizer, the ids it cannot decode
  // (the logits rows a checkpoint pads beyond its tokenizer's ids) are never chosen: their
  // logits count as -inf, in sampling, in the log-probabilities and in beam search.
  void setTokenizer(std::shared_ptr<const Tokenizer> tokenizer);
  const Tokenizer* tokenizer() const;

  // Beam search (deterministic). `result` gets the best hypothesis; its logprobs are the
  // per-token log-probabilities along it.
  Status beamSearch(std::span<const int32_t> prompt, const BeamSearchOptions& options,
                    GenerationResult* result);

  int64_t vocabSize() const;  // -1 until known (a symbolic vocab dim is learnt on first run)
  int64_t maxSequenceLength() const;  // -1: unbounded
  // Memory its sessions' CPU kernels keep derived from the weights (Session::derivedWeightBytes).
  uint64_t derivedWeightBytes() const;

 private:
  Generator() = default;
  struct State;
  std::unique_ptr<State> state_;
  // The bodies of generate() and beamSearch(), which run them inside the API's exception
  // boundary (runtime/src/core/api_guard.h).
  Status generateUnguarded(std::span<const int32_t> prompt, const GenerationOptions& options,
                           const TokenCallback& on_token, GenerationResult* result);
  Status beamSearchUnguarded(std::span<const int32_t> prompt, const BeamSearchOptions& options,
                             GenerationResult* result);
  Status checkPrompt(std::span<const int32_t> prompt, int32_t max_new_tokens) const;
  // The ids below vocabSize() that the tokenizer cannot decode, which are never chosen (null:
  // none, or no tokenizer); computed once per tokenizer.
  Status excludedIds(std::shared_ptr<const std::vector<int32_t>>* out);
  // Runs the engine on equally long rows; returns each row's last-position logits.
  Status lastLogitsOf(const std::vector<std::vector<int64_t>>& rows,
                      std::vector<std::vector<float>>* logits);
};

}  // namespace llmc
