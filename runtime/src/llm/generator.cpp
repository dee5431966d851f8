// Generator by full recomputation: each step runs the engine on the whole sequence and
// samples from the last position's logits.
#include "llmc/generator.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/half.h"
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
};

namespace {

bool isIntegerDType(DType d) { return d == DType::kInt64 || d == DType::kInt32; }

Tensor makeIds(DType dtype, const std::vector<int64_t>& values) {
  Tensor t = Tensor::allocate(dtype, {1, static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kInt64)
      t.data<int64_t>()[i] = values[i];
    else
      t.data<int32_t>()[i] = static_cast<int32_t>(values[i]);
  }
  return t;
}

// The last position's logits as float.
Status lastLogits(const Tensor& logits, std::vector<float>* out) {
  if (logits.rank() != 3 || logits.dim(0) != 1 || logits.dim(1) < 1)
    return invalidArgument("logits have shape " + shapeToString(logits.shape()) +
                           ", expected [1, seq, vocab]");
  int64_t vocab = logits.dim(2);
  int64_t offset = (logits.dim(1) - 1) * vocab;
  out->resize(static_cast<size_t>(vocab));
  switch (logits.dtype()) {
    case DType::kFloat32:
      std::memcpy(out->data(), logits.data<float>() + offset, vocab * sizeof(float));
      break;
    case DType::kFloat16:
      for (int64_t i = 0; i < vocab; ++i) (*out)[i] = toFloat(logits.data<Float16>()[offset + i]);
      break;
    case DType::kBFloat16:
      for (int64_t i = 0; i < vocab; ++i) (*out)[i] = toFloat(logits.data<BFloat16>()[offset + i]);
      break;
    default:
      return invalidArgument(std::string("logits of dtype ") + dtypeName(logits.dtype()) +
                             " are not supported");
  }
  return okStatus();
}

}  // namespace

Generator::~Generator() = default;

Status Generator::create(std::shared_ptr<const Engine> engine, std::unique_ptr<Generator>* out) {
  if (!engine) return invalidArgument("Generator::create: null engine");
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
  LLMC_RETURN_IF_ERROR(Session::create(engine, &state->session));
  state->engine = std::move(engine);
  std::unique_ptr<Generator> generator(new Generator());
  generator->state_ = std::move(state);
  *out = std::move(generator);
  return okStatus();
}

int64_t Generator::vocabSize() const { return state_->vocab; }
int64_t Generator::maxSequenceLength() const { return state_->max_length; }

Status Generator::generate(std::span<const int32_t> prompt, const GenerationOptions& options,
                           const TokenCallback& on_token, GenerationResult* result) {
  State& s = *state_;
  *result = GenerationResult();
  if (prompt.empty()) return invalidArgument("the prompt is empty");
  if (options.max_new_tokens < 0) return invalidArgument("max_new_tokens must not be negative");
  int64_t total = static_cast<int64_t>(prompt.size()) + options.max_new_tokens;
  if (s.max_length >= 0 && total > s.max_length)
    return outOfRange("the prompt (" + std::to_string(prompt.size()) + " tokens) plus " +
                      std::to_string(options.max_new_tokens) +
                      " new tokens exceeds the engine's context of " +
                      std::to_string(s.max_length) + " tokens");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || (s.vocab >= 0 && prompt[i] >= s.vocab))
      return invalidArgument("prompt token " + std::to_string(i) + " is id " +
                             std::to_string(prompt[i]) + ", outside the vocabulary [0, " +
                             std::to_string(s.vocab) + ")");
  }

  std::vector<int64_t> sequence(prompt.begin(), prompt.end());
  std::unique_ptr<Sampler> sampler;
  std::vector<float> logits;
  std::vector<NamedTensor> inputs, outputs;
  auto start = std::chrono::steady_clock::now();
  auto first_token_time = start;
  for (int32_t step = 0; step < options.max_new_tokens; ++step) {
    inputs.clear();
    inputs.push_back({s.input_ids_name, makeIds(s.input_ids_dtype, sequence)});
    if (!s.attention_mask_name.empty())
      inputs.push_back({s.attention_mask_name,
                        makeIds(s.attention_mask_dtype, std::vector<int64_t>(sequence.size(), 1))});
    if (!s.position_ids_name.empty()) {
      std::vector<int64_t> positions(sequence.size());
      for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>(i);
      inputs.push_back({s.position_ids_name, makeIds(s.position_ids_dtype, positions)});
    }
    LLMC_RETURN_IF_ERROR(s.session->run(inputs, &outputs));
    LLMC_RETURN_IF_ERROR(lastLogits(outputs[s.logits_index].tensor, &logits));
    if (!sampler) {
      s.vocab = static_cast<int64_t>(logits.size());
      for (size_t i = 0; i < prompt.size(); ++i)
        if (prompt[i] >= s.vocab)
          return invalidArgument("prompt token " + std::to_string(i) + " is id " +
                                 std::to_string(prompt[i]) + ", outside the vocabulary [0, " +
                                 std::to_string(s.vocab) + ")");
      LLMC_RETURN_IF_ERROR(
          Sampler::create(options.sampling, static_cast<int32_t>(s.vocab), prompt, &sampler));
    }
    SampledToken token;
    LLMC_RETURN_IF_ERROR(sampler->sample(logits, &token));
    if (step == 0) first_token_time = std::chrono::steady_clock::now();
    sequence.push_back(token.id);
    result->tokens.push_back(token.id);
    result->logprobs.push_back(token.logprob);
    if (on_token && !on_token(token.id)) return cancelled("generation cancelled by the caller");
    if (std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(), token.id) !=
        options.stop_token_ids.end()) {
      result->finish_reason = FinishReason::kStopToken;
      break;
    }
  }
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

}  // namespace llmc
