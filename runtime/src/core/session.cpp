// Session: binds inputs, resolves symbolic dimensions, checks the engine's limits, and hands
// the run to the session's backend (core/backend.h), chosen by SessionOptions::backend or the
// engine's target.
#include "llmc/session.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <new>

#include "core/api_guard.h"
#include "core/backend.h"
#include "core/internal_access.h"
#include "core/plan.h"
#include "core/step_context.h"
#include "core/symbols.h"
#include "core/thread_pool.h"

namespace llmc {

namespace {
// The context a language-model engine declares, for every caller (llmc run, Generator,
// BatchGenerator, the C++ API): a plain run holds one sequence per row of input_ids
// [batch, seq]; a step over the KV cache holds the tokens of several sequences, each at its
// own position.
Status checkContext(const LlmConfig& llm, const std::vector<NamedTensor>& inputs,
                    const LlmStepContext* llm_step) {
  const std::string limit =
      "the engine's context of " + std::to_string(llm.max_context) + " tokens";
  if (llm_step) {
    for (size_t t = 0; t < llm_step->token_position.size(); ++t)
      if (llm_step->token_position[t] >= llm.max_context)
        return outOfRange("token " + std::to_string(t) + " of the step is at position " +
                          std::to_string(llm_step->token_position[t]) +
                          " of its sequence, beyond " + limit);
    return okStatus();
  }
  for (const NamedTensor& input : inputs) {
    if (input.name != llm.input_ids || input.tensor.rank() < 2) continue;
    const int64_t tokens = input.tensor.dim(1);
    if (tokens > llm.max_context)
      return outOfRange("input '" + input.name + "' dim 1 is " + std::to_string(tokens) +
                        " tokens, which exceeds " + limit);
  }
  return okStatus();
}

}  // namespace

struct Session::State {
  const BackendInfo* backend = nullptr;
  std::unique_ptr<BackendExecutor> executor;
};

Session::~Session() = default;

Status Session::create(std::shared_ptr<const Engine> engine, std::unique_ptr<Session>* out) {
  return create(std::move(engine), SessionOptions(), out);
}

Status Session::create(std::shared_ptr<const Engine> engine, const SessionOptions& options,
                       std::unique_ptr<Session>* out) {
  return guardApi("Session::create", [&]() -> Status {
    if (!engine) return invalidArgument("Session::create: null engine");
    const Plan& plan = InternalAccess::plan(*engine);
    if (plan.stripped_weights > 0)
      return failedPrecondition(plan.path + ": " + std::to_string(plan.stripped_weights) +
                                " weights were stripped (--strip-weights); fill them with "
                                "`llmc refit ENGINE --weights FILE.safetensors -o OUT.engine`");
    const BackendInfo* backend = nullptr;
    if (options.backend == Backend::kAuto) {
      backend = backendForTarget(engine->target());
      if (!backend)
        return failedPrecondition(plan.path + ": engine targets '" + engine->target() +
                                  "', which no backend of this runtime runs; run it on the CPU "
                                  "backend (llmc run --backend cpu) or compile with --target cpu");
    } else {
      backend = findBackend(options.backend);
      if (!backend) return failedPrecondition(plan.path + ": no such backend in this runtime");
    }
    if (!backend->create)
      return failedPrecondition(plan.path + ": the " + backend->name + " backend" +
                                (options.backend == Backend::kAuto
                                     ? " (engine target '" + engine->target() + "')"
                                     : std::string()) +
                                " is not in this runtime: " + backend->unavailable +
                                (options.backend == Backend::kAuto
                                     ? "; run it on the CPU backend (llmc run --backend cpu) or "
                                       "compile with --target cpu"
                                     : ""));
    if (options.threads < 0 || options.threads > kMaxThreads)
      return invalidArgument(plan.path + ": threads must be 0 (every core) to " +
                             std::to_string(kMaxThreads) + ", got " +
                             std::to_string(options.threads));
    if (options.observer && !backend->step_observer)
      return invalidArgument(plan.path + ": the " + backend->name +
                             " backend does not run step observers (the cpu backend does)");
    if (options.gpu_weight_dtype != DType::kFloat32 &&
        options.gpu_weight_dtype != DType::kBFloat16 && options.gpu_weight_dtype != DType::kFloat16)
      return invalidArgument(plan.path + ": GPU weights are float32, bfloat16 or float16, not " +
                             dtypeName(options.gpu_weight_dtype));
    if (options.gpu_weight_dtype != DType::kFloat32 && !backend->half_weights)
      return invalidArgument(plan.path + ": " + dtypeName(options.gpu_weight_dtype) +
                             " weights are a GPU backend option; this session runs on the " +
                             backend->name + " backend");
    std::unique_ptr<Session> session(new Session());
    session->state_ = std::make_unique<State>();
    session->state_->backend = backend;
    LLMC_RETURN_IF_ERROR(
        backend->create(engine, options, &session->state_->executor).withContext(plan.path));
    session->engine_ = std::move(engine);
    *out = std::move(session);
    return okStatus();
  });
}

uint64_t Session::arenaBytes() const { return state_->executor->arenaBytes(); }
uint64_t Session::derivedWeightBytes() const { return state_->executor->derivedWeightBytes(); }

Backend Session::backend() const { return state_->backend->kind; }

const BackendInfo& InternalAccess::backend(const Session& session) {
  return *session.state_->backend;
}

int Session::threads() const { return state_->executor->threads(); }

Session::StepCounts Session::lastRunSteps() const { return state_->executor->lastRun(); }

Status Session::run(const std::vector<NamedTensor>& inputs, std::vector<NamedTensor>* outputs) {
  return guardApi("Session::run", [&] { return runStep(inputs, outputs, nullptr); });
}

Status Session::runStep(const std::vector<NamedTensor>& inputs, std::vector<NamedTensor>* outputs,
                        LlmStepContext* llm_step) {
  const Plan& plan = InternalAccess::plan(*engine_);
  const std::string& what = plan.path;
  std::vector<Tensor> values(plan.values.size());
  for (size_t i = 0; i < plan.values.size(); ++i)
    if (plan.values[i].kind == PlanValueKind::kWeight) values[i] = plan.values[i].weight;

  // Bind inputs by name and resolve symbols.
  std::map<std::string, int> input_by_name;
  for (int index : plan.inputs) input_by_name[plan.values[static_cast<size_t>(index)].name] = index;
  std::map<std::string, int64_t> symbol_values;
  std::map<std::string, std::string> symbol_source;
  std::vector<bool> bound(plan.values.size(), false);
  for (const NamedTensor& input : inputs) {
    auto it = input_by_name.find(input.name);
    if (it == input_by_name.end()) {
      std::string known;
      for (const auto& [name, index] : input_by_name) known += (known.empty() ? "" : ", ") + name;
      return invalidArgument(what + ": no input named '" + input.name + "' (inputs: " + known +
                             ")");
    }
    size_t index = static_cast<size_t>(it->second);
    if (bound[index]) return invalidArgument(what + ": input '" + input.name + "' is given twice");
    const PlanValue& value = plan.values[index];
    const Tensor& t = input.tensor;
    if (t.dtype() != value.dtype)
      return invalidArgument(what + ": input '" + input.name + "' must be " +
                             dtypeName(value.dtype) + ", got " + dtypeName(t.dtype()));
    if (t.shape().size() != value.dims.size())
      return invalidArgument(what + ": input '" + input.name + "' must have rank " +
                             std::to_string(value.dims.size()) + ", got shape " +
                             shapeToString(t.shape()));
    if (!t.hasData()) return invalidArgument(what + ": input '" + input.name + "' has no data");
    for (size_t d = 0; d < value.dims.size(); ++d) {
      const DimInfo& dim = value.dims[d];
      int64_t actual = t.shape()[d];
      if (dim.size >= 0 && dim.size != actual)
        return invalidArgument(what + ": input '" + input.name + "' dim " + std::to_string(d) +
                               " must be " + std::to_string(dim.size) + ", got " +
                               std::to_string(actual));
      if (dim.symbol.empty()) continue;
      auto [sym, inserted] = symbol_values.emplace(dim.symbol, actual);
      if (inserted) {
        symbol_source[dim.symbol] = input.name + " dim " + std::to_string(d);
      } else if (sym->second != actual) {
        return invalidArgument(what + ": symbol '" + dim.symbol + "' is " +
                               std::to_string(sym->second) + " in " + symbol_source[dim.symbol] +
                               " but " + std::to_string(actual) + " in input '" + input.name +
                               "' dim " + std::to_string(d));
      }
    }
    values[index] = Tensor::view(t.dtype(), t.shape(), t.data());
    bound[index] = true;
  }
  for (int index : plan.inputs) {
    if (!bound[static_cast<size_t>(index)])
      return invalidArgument(what + ": input '" + plan.values[static_cast<size_t>(index)].name +
                             "' is missing");
  }
  for (const SymbolInfo& symbol : plan.symbols) {
    auto it = symbol_values.find(symbol.name);
    if (it == symbol_values.end()) continue;
    if (it->second < symbol.min || (symbol.max >= 0 && it->second > symbol.max))
      return outOfRange(what + ": symbol '" + symbol.name + "' = " + std::to_string(it->second) +
                        " (from " + symbol_source[symbol.name] +
                        ") is outside its declared range [" + std::to_string(symbol.min) + ", " +
                        (symbol.max >= 0 ? std::to_string(symbol.max) : std::string("unbounded")) +
                        "]");
  }
  // Relations the compiler found the model needs (SymbolInfo::expression).
  for (const SymbolInfo& symbol : plan.symbols) {
    auto it = symbol_values.find(symbol.name);
    int64_t expected = 0;
    if (symbol.expression.empty() || it == symbol_values.end() ||
        !evaluateSymbolExpression(symbol.expression, symbol_values, &expected) ||
        expected == it->second)
      continue;
    return invalidArgument(what + ": symbol '" + symbol.name + "' = " + std::to_string(it->second) +
                           " (from " + symbol_source[symbol.name] + ") must equal " +
                           symbol.expression + " = " + std::to_string(expected) +
                           ": the model computes only then");
  }
  if (plan.llm) LLMC_RETURN_IF_ERROR(checkContext(*plan.llm, inputs, llm_step).withContext(what));

  return state_->executor->run(values, llm_step, outputs).withContext(what);
}

}  // namespace llmc
