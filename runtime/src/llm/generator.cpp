// Generator: over the paged KV cache (LlmRunner) on language-model engines, else by full
// recomputation (each step runs the engine on the whole sequence).
#include "llmc/generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/api_guard.h"
#include "llm/llm_runner.h"
#include "llm/sampler.h"
#include "llmc/session.h"

namespace llmc {

struct Generator::State {
  std::shared_ptr<const Engine> engine;
  std::unique_ptr<Session> session;
  std::string input_ids_name;
  DType input_ids_dtype = DType::kInt64;
  std::string attention_mask_name;
  DType attention_mask_dtype = DType::kInt64;
  std::string position_ids_name;
  DType position_ids_dtype = DType::kInt64;
  size_t logits_index = 0;
  int64_t vocab = -1;
  int64_t max_length = -1;
  bool dynamic_batch = false;  // input_ids' batch dim is symbolic: beams run in one batch
  std::shared_ptr<const Tokenizer> tokenizer;
  // The ids below `vocab` that the tokenizer cannot decode (never sampled), for `excluded_vocab`;
  // null before the first request after a tokenizer change, and without a tokenizer.
  std::shared_ptr<const std::vector<int32_t>> excluded;
  int64_t excluded_vocab = -1;
  std::unique_ptr<LlmRunner> runner;  // set: steps run over the KV cache
  int64_t next_sequence_id = 1;
  bool sample_on_device = true;
};

namespace {

bool isIntegerDType(DType d) { return d == DType::kInt64 || d == DType::kInt32; }

// What the device sampler does (temperature, top-k, top-p): no penalties, bias, min-p or top
// logprobs, which need the host sampler's state or the whole distribution.
bool sampleableOnDevice(const SamplingParams& p) {
  return p.repetition_penalty == 1 && p.presence_penalty == 0 && p.frequency_penalty == 0 &&
         p.logit_bias.empty() && p.min_p == 0 && p.num_logprobs == 0 &&
         p.model_statistics_tokens == 0;
}

// A [rows, length] id tensor; `value(row, column)` gives each element.
template <typename Fn>
Tensor makeIds(DType dtype, size_t rows, size_t length, Fn value) {
  Tensor t = Tensor::allocate(dtype, {static_cast<int64_t>(rows), static_cast<int64_t>(length)});
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < length; ++c) {
      int64_t v = value(r, c);
      if (dtype == DType::kInt64)
        t.data<int64_t>()[r * length + c] = v;
      else
        t.data<int32_t>()[r * length + c] = static_cast<int32_t>(v);
    }
  }
  return t;
}

// Row `row`'s last-position logits as float.
Status lastLogits(const Tensor& logits, int64_t row, std::vector<float>* out) {
  if (logits.rank() != 3 || logits.dim(0) <= row || logits.dim(1) < 1)
    return invalidArgument("logits have shape " + shapeToString(logits.shape()) +
                           ", expected [batch, seq, vocab]");
  return copyLogitsRow(logits, row * logits.dim(1) + logits.dim(1) - 1, out);
}

// Removes the KV-cache sequences of one request when it ends, however it ends.
struct SequenceGuard {
  explicit SequenceGuard(LlmRunner* runner) : runner(runner) {}
  ~SequenceGuard() {
    if (runner)
      for (int64_t id : ids) runner->removeSequence(id);
  }
  LlmRunner* runner;
  std::vector<int64_t> ids;
};

}  // namespace

Generator::~Generator() = default;

Status Generator::create(std::shared_ptr<const Engine> engine, std::unique_ptr<Generator>* out) {
  return create(std::move(engine), GeneratorConfig(), out);
}

bool Generator::usesKvCache() const { return state_->runner != nullptr; }

DType Generator::kvCacheDtype() const {
  return state_->runner ? state_->runner->cache().spec().dtype : DType::kUndefined;
}

DType kvCacheDtypeFor(const Engine& engine) {
  for (size_t i = 0; i < engine.numSteps(); ++i) {
    const std::string& kernel = engine.stepKernel(i);
    if (kernel == "LlmQuantMatMul" || kernel == "MatMulInteger" ||
        kernel == "com.microsoft.MatMulNBits")
      return DType::kFloat16;
  }
  return DType::kFloat32;
}

uint64_t Generator::derivedWeightBytes() const {
  return (state_->session ? state_->session->derivedWeightBytes() : 0) +
         (state_->runner ? state_->runner->session().derivedWeightBytes() : 0);
}

Status Generator::create(std::shared_ptr<const Engine> engine, const GeneratorConfig& config,
                         std::unique_ptr<Generator>* out) {
  return guardApi("Generator::create", [&]() -> Status {
    if (!engine) return invalidArgument("Generator::create: null engine");
    if (config.kv_cache_tokens < 0) return invalidArgument("kv_cache_tokens must not be negative");
    auto state = std::make_unique<State>();
    const std::string& what = engine->path();
    for (const TensorInfo& input : engine->inputs()) {
      std::string* name = nullptr;
      DType* dtype = nullptr;
      if (input.name == "input_ids") {
        name = &state->input_ids_name;
        dtype = &state->input_ids_dtype;
      } else if (input.name == "attention_mask") {
        name = &state->attention_mask_name;
        dtype = &state->attention_mask_dtype;
      } else if (input.name == "position_ids") {
        name = &state->position_ids_name;
        dtype = &state->position_ids_dtype;
      } else {
        return invalidArgument(what + ": the generator does not know how to feed input '" +
                               input.name +
                               "' (it feeds input_ids, attention_mask and position_ids)");
      }
      if (input.dims.size() != 2 || !isIntegerDType(input.dtype))
        return invalidArgument(what + ": input '" + input.name +
                               "' must be int32 or int64 [batch, seq]");
      *name = input.name;
      *dtype = input.dtype;
      if (input.name == "input_ids") {
        state->dynamic_batch = input.dims[0].size < 0;
        const DimInfo& seq = input.dims[1];
        if (seq.size >= 0) {
          state->max_length = seq.size;
        } else {
          for (const SymbolInfo& symbol : engine->symbols())
            if (symbol.name == seq.symbol) state->max_length = symbol.max;
        }
      }
    }
    if (state->input_ids_name.empty())
      return invalidArgument(what + ": the engine has no 'input_ids' input");
    bool found = false;
    for (size_t i = 0; i < engine->outputs().size(); ++i) {
      const TensorInfo& output = engine->outputs()[i];
      if (output.dims.size() == 3 && isFloatDType(output.dtype) &&
          (output.name == "logits" || !found)) {
        state->logits_index = i;
        state->vocab = output.dims[2].size;
        found = true;
      }
    }
    if (!found)
      return invalidArgument(what + ": the engine has no float logits output [batch, seq, vocab]");
    if (const LlmConfig* llm = engine->llmConfig()) {
      state->max_length = llm->max_context;
      state->vocab = llm->vocab_size;
      if (config.use_kv_cache)
        LLMC_RETURN_IF_ERROR(LlmRunner::create(engine, config.kv_cache_tokens, &state->runner,
                                               config.kv_cache_dtype, config.session,
                                               config.kv_cache_prefault));
    }
    // Full recomputation runs its own session; the KV-cache path runs the runner's.
    if (!state->runner)
      LLMC_RETURN_IF_ERROR(Session::create(engine, config.session, &state->session));
    state->sample_on_device = config.sample_on_device;
    if (!engine->tokenizerJson().empty()) {
      std::unique_ptr<Tokenizer> tokenizer;
      LLMC_RETURN_IF_ERROR(Tokenizer::fromJson(engine->tokenizerJson(), &tokenizer)
                               .withContext(what + ": tokenizer"));
      state->tokenizer = std::move(tokenizer);
    }
    state->engine = std::move(engine);
    std::unique_ptr<Generator> generator(new Generator());
    generator->state_ = std::move(state);
    *out = std::move(generator);
    return okStatus();
  });
}

void Generator::setTokenizer(std::shared_ptr<const Tokenizer> tokenizer) {
  state_->tokenizer = std::move(tokenizer);
  state_->excluded.reset();
  state_->excluded_vocab = -1;
}

Status Generator::excludedIds(std::shared_ptr<const std::vector<int32_t>>* out) {
  State& s = *state_;
  if (s.excluded_vocab != s.vocab) {
    LLMC_RETURN_IF_ERROR(undecodableIds(s.tokenizer.get(), s.vocab, &s.excluded));
    s.excluded_vocab = s.vocab;
  }
  *out = s.excluded;
  return okStatus();
}
const Tokenizer* Generator::tokenizer() const { return state_->tokenizer.get(); }

int64_t Generator::vocabSize() const { return state_->vocab; }
int64_t Generator::maxSequenceLength() const { return state_->max_length; }

Status Generator::checkPrompt(std::span<const int32_t> prompt, int32_t max_new_tokens) const {
  const State& s = *state_;
  if (prompt.empty()) return invalidArgument("the prompt is empty");
  if (max_new_tokens < 0) return invalidArgument("max_new_tokens must not be negative");
  int64_t total = static_cast<int64_t>(prompt.size()) + max_new_tokens;
  if (s.max_length >= 0 && total > s.max_length)
    return outOfRange("the prompt (" + std::to_string(prompt.size()) + " tokens) plus " +
                      std::to_string(max_new_tokens) +
                      " new tokens exceeds the engine's context of " +
                      std::to_string(s.max_length) + " tokens");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || (s.vocab >= 0 && prompt[i] >= s.vocab))
      return invalidArgument("prompt token " + std::to_string(i) + " is id " +
                             std::to_string(prompt[i]) + ", outside the vocabulary [0, " +
                             std::to_string(s.vocab) + ")");
  }
  return okStatus();
}

Status Generator::lastLogitsOf(const std::vector<std::vector<int64_t>>& rows,
                               std::vector<std::vector<float>>* logits) {
  State& s = *state_;
  logits->assign(rows.size(), {});
  size_t batch = s.dynamic_batch ? rows.size() : 1;
  std::vector<NamedTensor> inputs, outputs;
  for (size_t first = 0; first < rows.size(); first += batch) {
    size_t length = rows[first].size();
    inputs.clear();
    inputs.push_back(
        {s.input_ids_name, makeIds(s.input_ids_dtype, batch, length,
                                   [&](size_t r, size_t c) { return rows[first + r][c]; })});
    if (!s.attention_mask_name.empty())
      inputs.push_back({s.attention_mask_name, makeIds(s.attention_mask_dtype, batch, length,
                                                       [](size_t, size_t) { return int64_t{1}; })});
    if (!s.position_ids_name.empty())
      inputs.push_back(
          {s.position_ids_name, makeIds(s.position_ids_dtype, batch, length,
                                        [](size_t, size_t c) { return static_cast<int64_t>(c); })});
    LLMC_RETURN_IF_ERROR(s.session->run(inputs, &outputs));
    for (size_t r = 0; r < batch; ++r)
      LLMC_RETURN_IF_ERROR(lastLogits(outputs[s.logits_index].tensor, static_cast<int64_t>(r),
                                      &(*logits)[first + r]));
  }
  if (!rows.empty()) s.vocab = static_cast<int64_t>((*logits)[0].size());
  return okStatus();
}

Status Generator::generate(std::span<const int32_t> prompt, const GenerationOptions& options,
                           const TokenCallback& on_token, GenerationResult* result) {
  return guardApi("Generator::generate",
                  [&] { return generateUnguarded(prompt, options, on_token, result); });
}

Status Generator::generateUnguarded(std::span<const int32_t> prompt,
                                    const GenerationOptions& options, const TokenCallback& on_token,
                                    GenerationResult* result) {
  State& s = *state_;
  *result = GenerationResult();
  LLMC_RETURN_IF_ERROR(checkPrompt(prompt, options.max_new_tokens));
  if (!options.stop_strings.empty() && !s.tokenizer)
    return invalidArgument("stop strings need a tokenizer (llmc compile --tokenizer)");
  for (const std::string& stop : options.stop_strings)
    if (stop.empty()) return invalidArgument("a stop string is empty");
  std::unique_ptr<Tokenizer::StreamDecoder> decoder;
  if (s.tokenizer) {
    decoder = s.tokenizer->streamDecoder(/*skip_special_tokens=*/true);
    if (!decoder) return resourceExhausted("Generator::generate: out of memory");
  }
  std::vector<std::vector<int64_t>> rows(1, std::vector<int64_t>(prompt.begin(), prompt.end()));
  std::unique_ptr<Sampler> sampler;
  std::vector<std::vector<float>> logits;
  auto start = std::chrono::steady_clock::now();
  auto first_token_time = start;
  // On the KV-cache path this request holds one sequence in the cache until it returns.
  SequenceGuard guard(s.runner.get());
  int64_t sequence = -1;
  // Tokens chosen on the GPU when the backend and the options allow it; a step the backend
  // could not sample (its logits ended on the host) falls back to the host sampler.
  std::unique_ptr<DeviceSampling> device;
  std::unique_ptr<Xoshiro256> device_rng;
  std::shared_ptr<const std::vector<int32_t>> excluded;  // the KV-cache path knows the vocab now
  if (s.runner) LLMC_RETURN_IF_ERROR(excludedIds(&excluded));
  // The device sampler draws over the ids below a limit: excluded ids that are the vocabulary's
  // tail (a padded embedding) stay there, others (gaps) keep the choice on the host.
  const bool excluded_tail =
      !excluded || excluded->front() == s.vocab - static_cast<int64_t>(excluded->size());
  if (s.runner && s.sample_on_device && s.runner->samplesOnDevice() &&
      sampleableOnDevice(options.sampling) && excluded_tail) {
    device = std::make_unique<DeviceSampling>();
    if (excluded) device->vocab_limit = excluded->front();
    device->temperature = options.sampling.temperature;
    device->top_k = options.sampling.top_k;
    device->top_p = options.sampling.top_p;
    device_rng = std::make_unique<Xoshiro256>(options.sampling.seed);
  }
  auto next_logits = [&](int32_t step) -> Status {
    if (!s.runner) return lastLogitsOf(rows, &logits);
    if (device && device->temperature > 0) device->uniform.assign(1, static_cast<float>(device_rng->nextDouble()));
    if (step == 0) {
      sequence = s.next_sequence_id++;
      std::vector<int32_t> tokens(prompt.begin(), prompt.end());
      int64_t cached = 0;
      guard.ids.push_back(sequence);  // first: a failed push_back must not leak the sequence
      LLMC_RETURN_IF_ERROR(s.runner->addSequence(sequence, tokens, &cached));
      result->prompt_tokens_cached = cached;
      return s.runner->step({{sequence, cached, static_cast<int64_t>(tokens.size()) - cached}},
                            device.get(), &logits);
    }
    LLMC_RETURN_IF_ERROR(s.runner->appendToken(sequence, static_cast<int32_t>(rows[0].back())));
    return s.runner->step({{sequence, static_cast<int64_t>(rows[0].size()) - 1, 1}}, device.get(), &logits);
  };
  for (int32_t step = 0; step < options.max_new_tokens; ++step) {
    LLMC_RETURN_IF_ERROR(next_logits(step));
    if (!sampler) {
      LLMC_RETURN_IF_ERROR(
          checkPrompt(prompt, options.max_new_tokens));  // now that the vocab is known
      LLMC_RETURN_IF_ERROR(excludedIds(&excluded));
      LLMC_RETURN_IF_ERROR(Sampler::create(options.sampling, static_cast<int32_t>(s.vocab), prompt,
                                           &sampler, excluded));
    }
    SampledToken token;
    if (device && device->done) {
      token.id = device->ids[0];
      token.logprob = device->logprobs[0];
      const int64_t limit = device->vocab_limit > 0 ? device->vocab_limit : s.vocab;
      if (token.id < 0 || token.id >= limit)
        return internalError("the device sampler chose token " + std::to_string(token.id) +
                             " outside [0, " + std::to_string(limit) + ")");
    } else {
      LLMC_RETURN_IF_ERROR(sampler->sample(logits[0], &token));
    }
    if (step == 0) first_token_time = std::chrono::steady_clock::now();
    rows[0].push_back(token.id);
    result->tokens.push_back(token.id);
    result->logprobs.push_back(token.logprob);
    result->entropies.push_back(token.entropy);
    result->model_logprobs.push_back(token.model_logprob);
    result->top_logprobs.push_back(std::move(token.top_logprobs));
    if (decoder) {
      LLMC_RETURN_IF_ERROR(decoder->step(token.id, &result->text));
      size_t cut = std::string::npos;
      for (const std::string& stop : options.stop_strings)
        cut = std::min(cut, result->text.find(stop));
      if (cut != std::string::npos) {
        result->text.resize(cut);
        result->finish_reason = FinishReason::kStopString;
        if (on_token)
          LLMC_RETURN_IF_ERROR(callUserCode("the token callback", [&] { on_token(token.id); }));
        break;
      }
    }
    bool keep_going = true;
    if (on_token)
      LLMC_RETURN_IF_ERROR(
          callUserCode("the token callback", [&] { keep_going = on_token(token.id); }));
    if (!keep_going) return cancelled("generation cancelled by the caller");
    if (std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(), token.id) !=
        options.stop_token_ids.end()) {
      result->finish_reason = FinishReason::kStopToken;
      break;
    }
  }
  if (decoder && result->finish_reason != FinishReason::kStopString)
    LLMC_RETURN_IF_ERROR(decoder->finish(&result->text));
  auto end = std::chrono::steady_clock::now();
  if (!result->tokens.empty()) {
    result->time_to_first_token_ms =
        std::chrono::duration<double, std::milli>(first_token_time - start).count();
    double decode_s = std::chrono::duration<double>(end - first_token_time).count();
    if (result->tokens.size() > 1 && decode_s > 0)
      result->decode_tokens_per_s = (result->tokens.size() - 1) / decode_s;
  }
  return okStatus();
}

namespace {
struct Hypothesis {
  int64_t sequence = -1;  // its KV-cache sequence (KV-cache path)
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  double sum_logprob = 0;
  double score = 0;
};

void logSoftmax(std::vector<float>& logits) {
  float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v - max_logit));
  float log_sum = static_cast<float>(std::log(sum)) + max_logit;
  for (float& v : logits) v -= log_sum;
}
}  // namespace

Status Generator::beamSearch(std::span<const int32_t> prompt, const BeamSearchOptions& options,
                             GenerationResult* result) {
  return guardApi("Generator::beamSearch",
                  [&] { return beamSearchUnguarded(prompt, options, result); });
}

Status Generator::beamSearchUnguarded(std::span<const int32_t> prompt,
                                      const BeamSearchOptions& options, GenerationResult* result) {
  *result = GenerationResult();
  if (options.num_beams < 1) return invalidArgument("num_beams must be at least 1");
  LLMC_RETURN_IF_ERROR(checkPrompt(prompt, options.max_new_tokens));
  auto score_of = [&](const Hypothesis& h) {
    double length = std::max<size_t>(h.tokens.size(), 1);
    return h.sum_logprob / std::pow(length, static_cast<double>(options.length_penalty));
  };
  auto is_stop = [&](int32_t id) {
    return std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(), id) !=
           options.stop_token_ids.end();
  };
  size_t num_beams = static_cast<size_t>(options.num_beams);
  std::vector<Hypothesis> beams(1), finished;
  std::vector<std::vector<float>> logits;
  std::shared_ptr<const std::vector<int32_t>> excluded;
  auto start = std::chrono::steady_clock::now();
  State& s = *state_;
  SequenceGuard guard(s.runner.get());  // every sequence this search creates
  for (int32_t step = 0; step < options.max_new_tokens; ++step) {
    if (!s.runner) {
      std::vector<std::vector<int64_t>> rows;
      for (const Hypothesis& beam : beams) {
        rows.emplace_back(prompt.begin(), prompt.end());
        rows.back().insert(rows.back().end(), beam.tokens.begin(), beam.tokens.end());
      }
      LLMC_RETURN_IF_ERROR(lastLogitsOf(rows, &logits));
    } else if (step == 0) {
      beams[0].sequence = s.next_sequence_id++;
      std::vector<int32_t> tokens(prompt.begin(), prompt.end());
      int64_t cached = 0;
      guard.ids.push_back(beams[0].sequence);
      LLMC_RETURN_IF_ERROR(s.runner->addSequence(beams[0].sequence, tokens, &cached));
      result->prompt_tokens_cached = cached;
      LLMC_RETURN_IF_ERROR(s.runner->step(
          {{beams[0].sequence, cached, static_cast<int64_t>(tokens.size()) - cached}}, &logits));
    } else {
      // Every beam's newest token in one ragged step.
      std::vector<LlmRunner::Work> work;
      for (const Hypothesis& beam : beams)
        work.push_back({beam.sequence,
                        static_cast<int64_t>(prompt.size() + beam.tokens.size()) - 1, 1});
      LLMC_RETURN_IF_ERROR(s.runner->step(work, &logits));
    }
    if (step == 0) {
      LLMC_RETURN_IF_ERROR(checkPrompt(prompt, options.max_new_tokens));
      LLMC_RETURN_IF_ERROR(excludedIds(&excluded));
    }
    if (excluded)  // ids no text shows are never extensions
      for (std::vector<float>& row : logits)
        for (int32_t id : *excluded)
          if (static_cast<size_t>(id) < row.size()) row[static_cast<size_t>(id)] = -INFINITY;
    // The 2 * num_beams best (beam, token) extensions, best first; ties: lower beam, lower id.
    struct Candidate {
      double sum;
      size_t beam;
      int32_t token;
      float logprob;
    };
    std::vector<Candidate> candidates;
    for (size_t b = 0; b < beams.size(); ++b) {
      logSoftmax(logits[b]);
      for (size_t t = 0; t < logits[b].size(); ++t)
        if (logits[b][t] != -INFINITY)
          candidates.push_back(
              {beams[b].sum_logprob + logits[b][t], b, static_cast<int32_t>(t), logits[b][t]});
    }
    size_t keep = std::min(candidates.size(), 2 * num_beams);
    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(keep),
                      candidates.end(), [](const Candidate& a, const Candidate& b) {
                        if (a.sum != b.sum) return a.sum > b.sum;
                        if (a.beam != b.beam) return a.beam < b.beam;
                        return a.token < b.token;
                      });
    std::vector<Hypothesis> next;
    for (size_t rank = 0; rank < keep && next.size() < num_beams; ++rank) {
      const Candidate& c = candidates[rank];
      Hypothesis h = beams[c.beam];
      h.tokens.push_back(c.token);
      h.logprobs.push_back(c.logprob);
      h.sum_logprob = c.sum;
      if (is_stop(c.token)) {
        if (rank < num_beams) {  // as transformers: only top-ranked stops finish a hypothesis
          h.score = score_of(h);
          finished.push_back(std::move(h));
        }
        continue;
      }
      next.push_back(std::move(h));
    }
    if (s.runner) {
      // Each surviving hypothesis continues a copy-on-write fork of its parent's sequence;
      // the parents go.
      for (size_t i = 0; i < next.size(); ++i) {
        int64_t parent = next[i].sequence;
        int64_t child = s.next_sequence_id++;
        guard.ids.push_back(child);
        LLMC_RETURN_IF_ERROR(s.runner->fork(parent, child));
        LLMC_RETURN_IF_ERROR(s.runner->appendToken(child, next[i].tokens.back()));
        next[i].sequence = child;
      }
      for (const Hypothesis& beam : beams) s.runner->removeSequence(beam.sequence);
    }
    beams = std::move(next);
    if (options.early_stopping && finished.size() >= num_beams) break;
    if (beams.empty()) break;
  }
  for (Hypothesis& beam : beams) {
    beam.score = score_of(beam);
    finished.push_back(std::move(beam));
  }
  if (finished.empty()) return internalError("beam search produced no hypothesis");
  const Hypothesis* best = &finished[0];
  for (const Hypothesis& h : finished)
    if (h.score > best->score) best = &h;
  result->tokens = best->tokens;
  result->logprobs = best->logprobs;
  if (s.tokenizer)
    LLMC_RETURN_IF_ERROR(
        s.tokenizer->decode(result->tokens, /*skip_special_tokens=*/true, &result->text));
  result->finish_reason = !best->tokens.empty() && is_stop(best->tokens.back())
                              ? FinishReason::kStopToken
                              : FinishReason::kLength;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (seconds > 0) result->decode_tokens_per_s = result->tokens.size() / seconds;
  return okStatus();
}

}  // namespace llmc
