// Engine loading: map the file, then verify before trusting anything in it — header,
// FlatBuffers verifier, every index/offset/size/kernel name, then build the Plan.
#include "llmc/engine.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "core/api_guard.h"
#include "core/engine_file.h"
#include "core/file_io.h"
#include "core/plan.h"
#include "core/symbols.h"
#include "llmc/engine_generated.h"

namespace llmc {

struct Engine::Mapping {
  void* address = nullptr;
  size_t size = 0;
  bool mmapped = false;
  std::vector<uint8_t> copy;  // loadFromMemory
  ~Mapping() {
    if (mmapped && address) munmap(address, size);
  }
  const uint8_t* data() const { return static_cast<const uint8_t*>(address); }
};

namespace {

std::string valueRef(const Plan& plan, int index) {
  return "value " + std::to_string(index) + " ('" + plan.values[static_cast<size_t>(index)].name +
         "')";
}

// A vector of 8-byte elements, copied: FlatBuffers 2.0.8's verifier checks the 4-byte
// alignment of a vector's length, not the 8-byte alignment of its elements, so reading them in
// place could be a misaligned load.
template <typename T>
std::vector<T> copyVector(const flatbuffers::Vector<T>* vector) {
  std::vector<T> out(vector ? vector->size() : 0);
  if (!out.empty()) std::memcpy(out.data(), vector->Data(), out.size() * sizeof(T));
  return out;
}

Status convertParam(const fb::Param* param, const Plan& plan, const std::string& where,
                    KernelParam* out) {
  switch (param->kind()) {
    case fb::ParamKind::Int:
      out->kind = KernelParam::Kind::kInt;
      out->i = param->i();
      break;
    case fb::ParamKind::Float:
      out->kind = KernelParam::Kind::kFloat;
      out->f = param->f();
      break;
    case fb::ParamKind::String:
      out->kind = KernelParam::Kind::kString;
      out->s = param->s() ? param->s()->str() : "";
      break;
    case fb::ParamKind::Ints:
      out->kind = KernelParam::Kind::kInts;
      out->ints = copyVector(param->ints());
      break;
    case fb::ParamKind::Floats:
      out->kind = KernelParam::Kind::kFloats;
      out->floats = copyVector(param->floats());
      break;
    case fb::ParamKind::Tensor: {
      int index = param->tensor();
      if (index < 0 || static_cast<size_t>(index) >= plan.values.size() ||
          plan.values[static_cast<size_t>(index)].kind != PlanValueKind::kWeight) {
        return dataLoss(where + ": parameter '" + param->name()->str() + "' refers to tensor " +
                        std::to_string(index) + ", which is not a weight");
      }
      out->kind = KernelParam::Kind::kTensor;
      out->tensor = plan.values[static_cast<size_t>(index)].weight;
      break;
    }
    default:
      return dataLoss(where + ": parameter '" + param->name()->str() + "' has unknown kind " +
                      std::to_string(static_cast<int>(param->kind())));
  }
  return okStatus();
}

// The language-model config: sane sizes, names that exist, attention layers in range.
Status readLlmConfig(const fb::LlmConfig* llm, const std::string& what, Plan* plan) {
  LlmConfig config;
  config.num_layers = llm->num_layers();
  config.num_heads = llm->num_heads();
  config.num_kv_heads = llm->num_kv_heads();
  config.head_dim = llm->head_dim();
  config.vocab_size = llm->vocab_size();
  config.max_context = llm->max_context();
  config.bos_token_id = llm->bos_token_id();
  if (llm->eos_token_ids())
    config.eos_token_ids.assign(llm->eos_token_ids()->begin(), llm->eos_token_ids()->end());
  config.input_ids = llm->input_ids() ? llm->input_ids()->str() : "";
  config.logits = llm->logits() ? llm->logits()->str() : "";
  const std::string where = what + ": language-model config";
  if (config.num_layers < 1 || config.num_layers > (1 << 16) || config.num_heads < 1 ||
      config.num_heads > (1 << 16) || config.num_kv_heads < 1 ||
      config.num_heads % config.num_kv_heads != 0 || config.head_dim < 1 ||
      config.head_dim > (1 << 16) || config.max_context < 1 ||
      config.max_context > kMaxContextTokens || config.vocab_size < -1 || config.bos_token_id < -1)
    return dataLoss(where + " is implausible (" + std::to_string(config.num_layers) +
                    " layers, " + std::to_string(config.num_heads) + "/" +
                    std::to_string(config.num_kv_heads) + " heads of " +
                    std::to_string(config.head_dim) + ", context " +
                    std::to_string(config.max_context) + ")");
  for (int32_t eos : config.eos_token_ids)
    if (eos < 0 || (config.vocab_size >= 0 && eos >= config.vocab_size))
      return dataLoss(where + ": EOS id " + std::to_string(eos) + " is outside the vocabulary");
  if (plan->input_infos.size() != 1 || plan->input_infos[0].name != config.input_ids ||
      plan->input_infos[0].dims.size() != 2)
    return dataLoss(where + ": the engine's only input must be '" + config.input_ids +
                    "' [batch, tokens]");
  bool logits_found = false;
  for (const TensorInfo& output : plan->output_infos)
    logits_found = logits_found || (output.name == config.logits && output.dims.size() == 3);
  if (!logits_found)
    return dataLoss(where + ": no logits output '" + config.logits + "' [batch, tokens, vocab]");
  config.attention_windows.assign(static_cast<size_t>(config.num_layers), 0);
  for (const PlanStep& step : plan->steps) {
    if (step.kernel_name != "LlmAttention") continue;
    int64_t layer = step.params.getInt("layer", -1);
    if (layer < 0 || layer >= config.num_layers)
      return dataLoss(what + ": attention step '" + step.node + "' has layer " +
                      std::to_string(layer) + ", outside [0, " +
                      std::to_string(config.num_layers) + ")");
    int64_t window = step.params.getInt("window", 0);
    if (window < 0 || window > config.max_context)
      return dataLoss(what + ": attention step '" + step.node + "' has window " +
                      std::to_string(window) + ", outside [0, " +
                      std::to_string(config.max_context) + "]");
    config.attention_windows[static_cast<size_t>(layer)] = window;
  }
  plan->llm = std::move(config);
  return okStatus();
}

// A weight's recipe (format 1.3), checked as it is read: every step well formed, inputs only
// from earlier steps, kernels known to this runtime, literal bytes matching their dtype and dims.
Status readRecipe(const fb::Weight* weight, const Plan& plan, const KernelRegistry& registry,
                  const std::string& where, std::vector<RecipeStep>* recipe) {
  recipe->clear();
  if (!weight->recipe()) return okStatus();
  const auto& steps = *weight->recipe();
  for (flatbuffers::uoffset_t i = 0; i < steps.size(); ++i) {
    const fb::RecipeStep* fb_step = steps.Get(i);
    const std::string at = where + " recipe step " + std::to_string(i);
    RecipeStep step;
    uint64_t elements = 1;
    bool dims_ok = true;
    for (int64_t d : copyVector(fb_step->dims())) {
      dims_ok = dims_ok && d >= 0 &&
                (d == 0 || elements <= (uint64_t{1} << 40) / static_cast<uint64_t>(d));
      if (!dims_ok) break;
      elements *= static_cast<uint64_t>(d);
      step.shape.push_back(d);
    }
    const bool dtype_ok = isValidDType(fb_step->dtype()) && fb_step->dtype() != 0;
    if (dtype_ok) step.dtype = static_cast<DType>(fb_step->dtype());
    switch (fb_step->kind()) {
      case fb::RecipeKind::Source:
        if (!fb_step->source() || fb_step->source()->size() == 0 || !dims_ok || !dtype_ok)
          return dataLoss(at + ": a source without a name, dtype or valid dims");
        step.kind = RecipeStep::Kind::kSource;
        step.source = fb_step->source()->str();
        break;
      case fb::RecipeKind::Literal: {
        const size_t bytes = fb_step->data() ? fb_step->data()->size() : 0;
        if (!dtype_ok || !dims_ok || bytes != elements * dtypeSize(step.dtype))
          return dataLoss(at + ": literal bytes do not match their dtype and dims");
        step.kind = RecipeStep::Kind::kLiteral;
        step.literal = Tensor::allocate(step.dtype, step.shape);  // copied: alignment
        if (bytes) std::memcpy(step.literal.data(), fb_step->data()->data(), bytes);
        break;
      }
      case fb::RecipeKind::Kernel: {
        step.kind = RecipeStep::Kind::kKernel;
        step.kernel = fb_step->kernel() ? registry.find(fb_step->kernel()->str()) : nullptr;
        if (!step.kernel)
          return dataLoss(at + ": unknown kernel '" + (fb_step->kernel() ? fb_step->kernel()->str() : "") + "'");
        if (fb_step->output() < 0) return dataLoss(at + ": negative output index");
        step.output = fb_step->output();
        if (fb_step->inputs())
          for (int32_t input : *fb_step->inputs()) {
            if (input < -1 || input >= static_cast<int32_t>(i))
              return dataLoss(at + ": input " + std::to_string(input) + " is not an earlier step");
            step.inputs.push_back(input);
          }
        if (fb_step->params())
          for (const fb::Param* param : *fb_step->params()) {
            if (param->kind() == fb::ParamKind::Tensor)
              return dataLoss(at + ": tensor parameters are not allowed in recipes");
            KernelParam converted;
            LLMC_RETURN_IF_ERROR(convertParam(param, plan, at, &converted));
            step.params.set(param->name()->str(), std::move(converted));
          }
        break;
      }
      default:
        return dataLoss(at + ": unknown kind " + std::to_string(static_cast<int>(fb_step->kind())));
    }
    recipe->push_back(std::move(step));
  }
  return okStatus();
}

Status convertDriftHistogram(const fb::DriftHistogram* fb_histogram, const std::string& what,
                             DriftHistogram* out) {
  if (!fb_histogram) return dataLoss(what + " is missing");
  const size_t edges = fb_histogram->edges() ? fb_histogram->edges()->size() : 0;
  const size_t counts = fb_histogram->counts() ? fb_histogram->counts()->size() : 0;
  if (edges > 1000 || counts > 1000) return dataLoss(what + ": more than 1000 bins");
  if (edges) out->edges.assign(fb_histogram->edges()->begin(), fb_histogram->edges()->end());
  out->counts = copyVector(fb_histogram->counts());
  return out->check(what);
}

Status convertDriftBaseline(const fb::DriftBaseline& def, const std::string& what,
                            DriftBaseline* out) {
  const std::string at = what + ": drift baseline";
  LLMC_RETURN_IF_ERROR(
      convertDriftHistogram(def.entropy(), at + " entropy histogram", &out->entropy));
  LLMC_RETURN_IF_ERROR(
      convertDriftHistogram(def.logprob(), at + " logprob histogram", &out->logprob));
  out->tokens = def.tokens();
  if (out->tokens == 0 || out->entropy.total() != out->tokens ||
      out->logprob.total() != out->tokens)
    return dataLoss(at + ": its histograms do not each count its " + std::to_string(out->tokens) +
                    " tokens");
  out->new_tokens = def.new_tokens();
  if (out->new_tokens < 1)
    return dataLoss(at + ": counts the first " + std::to_string(out->new_tokens) +
                    " tokens of each response (must be positive)");
  if (def.source()) out->source = def.source()->str();
  return okStatus();
}

Status buildPlan(const uint8_t* file, const EngineFileHeader& header, const std::string& what,
                 const KernelRegistry& registry, Plan* plan) {
  const uint8_t* fb_bytes = file + header.flatbuffer_offset;
  flatbuffers::Verifier verifier(fb_bytes, header.flatbuffer_size);
  if (!fb::EngineBufferHasIdentifier(fb_bytes))
    return dataLoss(what + ": plan section lacks the 'LLMC' identifier");
  if (!fb::VerifyEngineBuffer(verifier))
    return dataLoss(what + ": plan section fails FlatBuffers verification (corrupted)");
  const fb::Engine* def = fb::GetEngine(fb_bytes);
  plan->path = what;
  plan->target = def->target() ? def->target()->str() : "";
  if (!isKnownTarget(plan->target))
    return failedPrecondition(what + ": engine targets '" + plan->target +
                              "', which this runtime does not know (it knows cpu, cuda-sm80, cuda-sm90)");
  plan->format_version =
      std::to_string(header.format_major) + "." + std::to_string(header.format_minor);
  if (const fb::Producer* producer = def->producer()) {
    if (producer->compiler_version()) plan->compiler_version = producer->compiler_version()->str();
    if (producer->source_hash()) plan->source_hash = producer->source_hash()->str();
    if (producer->options()) plan->build_options = producer->options()->str();
  }
  plan->arena_bytes = def->arena_bytes();
  if (def->tokenizer_json()) plan->tokenizer_json = def->tokenizer_json()->str();
  if (def->tokenizer_config()) plan->tokenizer_config_json = def->tokenizer_config()->str();
  if (def->generation_config()) plan->generation_config_json = def->generation_config()->str();
  if (const fb::DriftBaseline* drift = def->drift_baseline())
    LLMC_RETURN_IF_ERROR(convertDriftBaseline(*drift, what, &plan->drift_baseline.emplace()));
  // No engine needs a terabyte of scratch memory; such a number is corruption.
  if (plan->arena_bytes > (uint64_t{1} << 40))
    return dataLoss(what + ": arena of " + std::to_string(plan->arena_bytes) +
                    " bytes is implausible (corrupted?)");
  const uint8_t* weights_base = file + header.weights_offset;

  // Symbols.
  std::set<std::string> symbol_names;
  if (def->symbols()) {
    for (const fb::Symbol* symbol : *def->symbols()) {
      SymbolInfo info{symbol->name()->str(), symbol->min(), symbol->max(),
                      symbol->expression() ? symbol->expression()->str() : std::string()};
      if (info.min < 0 || (info.max >= 0 && info.max < info.min))
        return dataLoss(what + ": symbol '" + info.name + "' has an empty range");
      if (!symbol_names.insert(info.name).second)
        return dataLoss(what + ": symbol '" + info.name + "' is declared twice");
      plan->symbols.push_back(std::move(info));
    }
    // An expression sums other declared symbols that have none themselves (no cycles).
    for (const SymbolInfo& info : plan->symbols) {
      if (info.expression.empty()) continue;
      std::vector<SymbolTerm> terms;
      if (!parseSymbolExpression(info.expression, &terms))
        return dataLoss(what + ": symbol '" + info.name + "' has a malformed expression '" +
                        info.expression + "'");
      for (const SymbolTerm& term : terms) {
        if (term.symbol.empty()) continue;
        auto it = std::find_if(plan->symbols.begin(), plan->symbols.end(),
                               [&](const SymbolInfo& s) { return s.name == term.symbol; });
        if (it == plan->symbols.end() || !it->expression.empty())
          return dataLoss(what + ": symbol '" + info.name + "' = " + info.expression + " names '" +
                          term.symbol + "', which is not a declared symbol without an expression");
      }
    }
  }

  // Slots: inside the arena, aligned.
  if (def->slots()) {
    for (const fb::Slot* slot : *def->slots()) {
      if (slot->offset() % kTensorAlignment || slot->offset() > plan->arena_bytes ||
          slot->size_bytes() > plan->arena_bytes - slot->offset())
        return dataLoss(what + ": arena slot " + std::to_string(plan->slots.size()) +
                        " lies outside the arena");
      plan->slots.push_back({slot->offset(), slot->size_bytes()});
    }
  }

  // Values and weights.
  size_t num_weights = def->weights() ? def->weights()->size() : 0;
  plan->weights.resize(num_weights);
  if (!def->values()) return dataLoss(what + ": plan has no value table");
  for (const fb::Value* value : *def->values()) {
    PlanValue pv;
    pv.name = value->name()->str();
    std::string where = what + ": value '" + pv.name + "'";
    if (!isValidDType(value->dtype()) || value->dtype() == 0)
      return dataLoss(where + " has unknown dtype " + std::to_string(value->dtype()));
    pv.dtype = static_cast<DType>(value->dtype());
    pv.ranked = value->ranked();
    Shape static_shape;
    bool all_static = true;
    if (value->dims()) {
      for (const fb::Dim* dim : *value->dims()) {
        DimInfo info;
        info.size = dim->size();
        if (dim->symbol()) info.symbol = dim->symbol()->str();
        if (info.size < -1) return dataLoss(where + " has a negative dimension");
        if (!info.symbol.empty() && !symbol_names.count(info.symbol))
          return dataLoss(where + " uses undeclared symbol '" + info.symbol + "'");
        all_static = all_static && info.size >= 0;
        static_shape.push_back(info.size);
        pv.dims.push_back(std::move(info));
      }
    }
    if (all_static) {
      int64_t count = 0;
      if (!checkedNumElements(static_shape, &count))
        return dataLoss(where + " has shape " + shapeToString(static_shape) +
                        ", whose size overflows");
    }
    switch (value->kind()) {
      case fb::ValueKind::Input: pv.kind = PlanValueKind::kInput; break;
      case fb::ValueKind::Intermediate: {
        pv.kind = PlanValueKind::kIntermediate;
        int slot = value->slot();
        if (slot < 0 || static_cast<size_t>(slot) >= plan->slots.size())
          return dataLoss(where + " has arena slot " + std::to_string(slot) + " out of range");
        pv.slot = slot;
        break;
      }
      case fb::ValueKind::Weight: {
        pv.kind = PlanValueKind::kWeight;
        int w = value->weight();
        if (w < 0 || static_cast<size_t>(w) >= num_weights)
          return dataLoss(where + " refers to weight " + std::to_string(w) + " out of range");
        if (!all_static) return dataLoss(where + " is a weight with a non-static shape");
        const fb::Weight* weight = def->weights()->Get(static_cast<flatbuffers::uoffset_t>(w));
        uint64_t expected =
            static_cast<uint64_t>(shapeNumElements(static_shape)) * dtypeSize(pv.dtype);
        if (weight->size_bytes() != expected)
          return dataLoss(where + " holds " + std::to_string(weight->size_bytes()) +
                          " bytes, its shape needs " + std::to_string(expected));
        PlanWeight& plan_weight = plan->weights[static_cast<size_t>(w)];
        plan_weight.offset = weight->offset();
        plan_weight.size_bytes = weight->size_bytes();
        plan_weight.value = static_cast<int>(plan->values.size());
        LLMC_RETURN_IF_ERROR(readRecipe(weight, *plan, registry, where, &plan_weight.recipe));
        if (weight->offset() % kTensorAlignment)
          return dataLoss(where + " is not 64-byte aligned in the weights section");
        if (weight->offset() > header.weights_size ||
            weight->size_bytes() > header.weights_size - weight->offset()) {
          // Past the end: stripped (its recipe recomputes it), or a truncated file.
          if (plan_weight.recipe.empty())
            return dataLoss(where + " lies outside the weights section (truncated or corrupted)");
          ++plan->stripped_weights;
          plan->values.push_back(std::move(pv));
          continue;
        }
        pv.weight = Tensor::view(pv.dtype, static_shape, weights_base + weight->offset());
        plan->weight_bytes += weight->size_bytes();
        break;
      }
      default:
        return dataLoss(where + " has unknown kind " +
                        std::to_string(static_cast<int>(value->kind())));
    }
    plan->values.push_back(std::move(pv));
  }

  auto checkIndex = [&](int index, const std::string& where) -> Status {
    if (index < 0 || static_cast<size_t>(index) >= plan->values.size())
      return dataLoss(where + " refers to value " + std::to_string(index) + " out of range");
    return okStatus();
  };

  // Public inputs and outputs.
  if (def->inputs()) {
    for (int index : *def->inputs()) {
      LLMC_RETURN_IF_ERROR(checkIndex(index, what + ": input list"));
      if (plan->values[static_cast<size_t>(index)].kind != PlanValueKind::kInput)
        return dataLoss(what + ": input list names " + valueRef(*plan, index) +
                        ", which is not an input");
      plan->inputs.push_back(index);
    }
  }
  if (!def->outputs() || def->outputs()->size() == 0)
    return dataLoss(what + ": engine has no outputs");
  for (int index : *def->outputs()) {
    LLMC_RETURN_IF_ERROR(checkIndex(index, what + ": output list"));
    plan->outputs.push_back(index);
  }

  // Steps: known kernels, arities, every operand defined before use, each intermediate
  // produced exactly once.
  std::vector<bool> defined(plan->values.size(), false);
  for (size_t i = 0; i < plan->values.size(); ++i)
    defined[i] = plan->values[i].kind != PlanValueKind::kIntermediate;
  std::vector<int> last_use_step(plan->values.size(), -1);
  if (def->steps()) {
    for (const fb::Step* step : *def->steps()) {
      PlanStep ps;
      ps.kernel_name = step->kernel()->str();
      ps.node = step->node() ? step->node()->str() : "";
      std::string where = what + ": step " + std::to_string(plan->steps.size()) + " (" +
                          ps.kernel_name + (ps.node.empty() ? "" : " '" + ps.node + "'") + ")";
      ps.kernel = registry.find(ps.kernel_name);
      if (!ps.kernel)
        return unimplemented(where + ": this runtime has no kernel '" + ps.kernel_name + "'");
      if (step->inputs()) ps.inputs.assign(step->inputs()->begin(), step->inputs()->end());
      if (step->outputs()) ps.outputs.assign(step->outputs()->begin(), step->outputs()->end());
      const KernelDef& kd = *ps.kernel;
      int n_in = static_cast<int>(ps.inputs.size()), n_out = static_cast<int>(ps.outputs.size());
      if (n_in < kd.min_inputs || (kd.max_inputs >= 0 && n_in > kd.max_inputs) ||
          n_out < kd.min_outputs || (kd.max_outputs >= 0 && n_out > kd.max_outputs))
        return dataLoss(where + ": " + std::to_string(n_in) + " inputs and " +
                        std::to_string(n_out) + " outputs do not fit the kernel");
      for (int index : ps.inputs) {
        if (index == -1) continue;
        LLMC_RETURN_IF_ERROR(checkIndex(index, where));
        if (!defined[static_cast<size_t>(index)])
          return dataLoss(where + " reads " + valueRef(*plan, index) +
                          " before any step produces it");
        last_use_step[static_cast<size_t>(index)] = static_cast<int>(plan->steps.size());
      }
      for (int index : ps.outputs) {
        LLMC_RETURN_IF_ERROR(checkIndex(index, where));
        if (plan->values[static_cast<size_t>(index)].kind != PlanValueKind::kIntermediate ||
            defined[static_cast<size_t>(index)])
          return dataLoss(where + " writes " + valueRef(*plan, index) +
                          ", which is not a fresh intermediate");
        defined[static_cast<size_t>(index)] = true;
        last_use_step[static_cast<size_t>(index)] = static_cast<int>(plan->steps.size());
      }
      if (step->params()) {
        for (const fb::Param* param : *step->params()) {
          KernelParam kp;
          LLMC_RETURN_IF_ERROR(convertParam(param, *plan, where, &kp));
          ps.params.set(param->name()->str(), std::move(kp));
        }
      }
      plan->steps.push_back(std::move(ps));
    }
  }
  for (int index : plan->outputs) {
    if (!defined[static_cast<size_t>(index)])
      return dataLoss(what + ": output " + valueRef(*plan, index) + " is never produced");
    last_use_step[static_cast<size_t>(index)] =
        static_cast<int>(plan->steps.size());  // live to the end
  }
  for (size_t v = 0; v < plan->values.size(); ++v) {
    int step = last_use_step[v];
    if (plan->values[v].kind == PlanValueKind::kIntermediate && step >= 0 &&
        static_cast<size_t>(step) < plan->steps.size())
      plan->steps[static_cast<size_t>(step)].last_use.push_back(static_cast<int>(v));
  }

  auto info = [&](int index) {
    const PlanValue& v = plan->values[static_cast<size_t>(index)];
    return TensorInfo{v.name, v.dtype, v.dims};
  };
  for (int index : plan->inputs) plan->input_infos.push_back(info(index));
  for (size_t i = 0; i < plan->outputs.size(); ++i) {
    TensorInfo output = info(plan->outputs[i]);
    if (def->output_names() && i < def->output_names()->size())
      output.name = def->output_names()->Get(static_cast<flatbuffers::uoffset_t>(i))->str();
    plan->output_infos.push_back(std::move(output));
  }
  if (const fb::LlmConfig* llm = def->llm()) LLMC_RETURN_IF_ERROR(readLlmConfig(llm, what, plan));
  return okStatus();
}

Status verifyAndBuild(const uint8_t* data, size_t size, const std::string& what,
                      const LoadOptions& options, Plan* plan) {
  EngineFileHeader header;
  LLMC_RETURN_IF_ERROR(checkEngineHeader(data, size, what, &header));
  if (options.verify_plan_checksum &&
      checksum64(data + header.flatbuffer_offset, header.flatbuffer_size) !=
          header.flatbuffer_checksum)
    return dataLoss(what + ": plan section checksum mismatch (the file is corrupted)");
  if (options.verify_weights_checksum &&
      checksum64(data + header.weights_offset, header.weights_size) != header.weights_checksum)
    return dataLoss(what + ": weights section checksum mismatch (the file is corrupted)");
  return buildPlan(data, header, what, KernelRegistry::cpuReference(), plan);
}

}  // namespace

Engine::Engine() = default;
Engine::~Engine() = default;

Status Engine::load(const std::string& path, std::shared_ptr<const Engine>* out,
                    const LoadOptions& options) {
  return guardApi("Engine::load", [&]() -> Status {
    int fd = -1;
    int64_t size_bytes = -1;
    LLMC_RETURN_IF_ERROR(openFileForReading(path, "engine", &fd, &size_bytes));
    if (size_bytes < 0) {  // a pipe or a device cannot be mapped
      ::close(fd);
      return invalidArgument(describeFile("engine", path) + ": not a regular file");
    }
    auto mapping = std::make_unique<Mapping>();
    mapping->size = static_cast<size_t>(size_bytes);
    if (mapping->size > 0) {
      void* address = ::mmap(nullptr, mapping->size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (address == MAP_FAILED) {
        ::close(fd);
        return internalError(path + ": mmap failed: " + std::strerror(errno));
      }
      mapping->address = address;
      mapping->mmapped = true;
    }
    ::close(fd);
    std::shared_ptr<Engine> engine(new Engine());
    engine->plan_ = std::make_unique<Plan>();
    LLMC_RETURN_IF_ERROR(
        verifyAndBuild(mapping->data(), mapping->size, path, options, engine->plan_.get()));
    engine->mapping_ = std::move(mapping);
    *out = std::move(engine);
    return okStatus();
  });
}

Status Engine::loadFromMemory(std::span<const uint8_t> bytes, const std::string& what,
                              std::shared_ptr<const Engine>* out, const LoadOptions& options) {
  return guardApi("Engine::loadFromMemory", [&]() -> Status {
    auto mapping = std::make_unique<Mapping>();
    // Over-allocate so the weights section keeps its alignment in memory.
    mapping->copy.resize(bytes.size() + kWeightsAlignment);
    uintptr_t base = reinterpret_cast<uintptr_t>(mapping->copy.data());
    size_t shift = (kWeightsAlignment - base % kWeightsAlignment) % kWeightsAlignment;
    if (!bytes.empty()) std::memcpy(mapping->copy.data() + shift, bytes.data(), bytes.size());
    mapping->address = mapping->copy.data() + shift;
    mapping->size = bytes.size();
    std::shared_ptr<Engine> engine(new Engine());
    engine->plan_ = std::make_unique<Plan>();
    LLMC_RETURN_IF_ERROR(
        verifyAndBuild(mapping->data(), mapping->size, what, options, engine->plan_.get()));
    engine->mapping_ = std::move(mapping);
    *out = std::move(engine);
    return okStatus();
  });
}

const std::vector<TensorInfo>& Engine::inputs() const { return plan_->input_infos; }
const std::vector<TensorInfo>& Engine::outputs() const { return plan_->output_infos; }
const std::vector<SymbolInfo>& Engine::symbols() const { return plan_->symbols; }
const std::string& Engine::target() const { return plan_->target; }
size_t Engine::strippedWeights() const { return plan_->stripped_weights; }
std::string Engine::formatVersion() const { return plan_->format_version; }
const std::string& Engine::compilerVersion() const { return plan_->compiler_version; }
const std::string& Engine::sourceHash() const { return plan_->source_hash; }
const std::string& Engine::buildOptions() const { return plan_->build_options; }
uint64_t Engine::weightBytes() const { return plan_->weight_bytes; }
uint64_t Engine::arenaBytes() const { return plan_->arena_bytes; }
size_t Engine::numSteps() const { return plan_->steps.size(); }
const std::string& Engine::stepKernel(size_t i) const { return plan_->steps[i].kernel_name; }
const std::string& Engine::stepNode(size_t i) const { return plan_->steps[i].node; }
const std::string& Engine::path() const { return plan_->path; }
const std::string& Engine::tokenizerJson() const { return plan_->tokenizer_json; }
const std::string& Engine::tokenizerConfigJson() const { return plan_->tokenizer_config_json; }
const std::string& Engine::generationConfigJson() const { return plan_->generation_config_json; }
const DriftBaseline* Engine::driftBaseline() const {
  return plan_->drift_baseline ? &*plan_->drift_baseline : nullptr;
}
const LlmConfig* Engine::llmConfig() const { return plan_->llm ? &*plan_->llm : nullptr; }

}  // namespace llmc
