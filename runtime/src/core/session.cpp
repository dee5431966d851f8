// Session: binds inputs, resolves symbolic dimensions, and runs the plan's steps with the
// registered kernels over one arena whose slots the compiler assigned by liveness.
#include "llmc/session.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <new>

#include "core/api_guard.h"
#include "core/device_executor.h"
#include "core/internal_access.h"
#include "core/plan.h"
#include "core/thread_pool.h"
#include "llm/step_context.h"

namespace llmc {

namespace {
constexpr uint64_t kAlign = 64;

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

uint64_t alignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct AlignedDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
}  // namespace

ArenaLayout::ArenaLayout(const std::vector<PlanSlot>& slots) {
  for (const PlanSlot& slot : slots) capacity.push_back(slot.size_bytes);
}

uint64_t ArenaLayout::layout() {
  total = 0;
  offset.resize(capacity.size());
  laid_out = capacity;
  for (size_t i = 0; i < capacity.size(); ++i) {
    offset[i] = total;
    total += alignUp(capacity[i]);
  }
  return total;
}

bool ArenaLayout::fits(int slot, uint64_t bytes) {
  const size_t s = static_cast<size_t>(slot);
  if (bytes <= laid_out[s]) return true;
  if (bytes > capacity[s]) capacity[s] = bytes;
  return false;
}

Status checkPlannedOutput(const Plan& plan, const PlanStep& step, size_t i, DType dtype,
                          const Shape& shape, uint64_t* bytes) {
  if (i >= step.outputs.size())
    return internalError("node '" + step.node + "': output index out of range");
  const PlanValue& value = plan.values[static_cast<size_t>(step.outputs[i])];
  // The compiler's inferred dtype and static dims must agree with what the kernel computes.
  if (dtype != value.dtype || (value.ranked && shape.size() != value.dims.size()))
    return internalError("node '" + step.node + "': kernel " + step.kernel_name + " produced " +
                         dtypeName(dtype) + shapeToString(shape) + " for '" + value.name +
                         "', the plan declares " + dtypeName(value.dtype) + " of rank " +
                         std::to_string(value.dims.size()));
  for (size_t d = 0; value.ranked && d < shape.size(); ++d) {
    if (value.dims[d].size >= 0 && value.dims[d].size != shape[d])
      return internalError("node '" + step.node + "': kernel " + step.kernel_name +
                           " produced shape " + shapeToString(shape) + " for '" + value.name +
                           "', the plan declares dim " + std::to_string(d) + " = " +
                           std::to_string(value.dims[d].size));
  }
  int64_t count = 0;
  if (!checkedNumElements(shape, &count))
    return invalidArgument("node '" + step.node + "': output shape " + shapeToString(shape) +
                           " is too large");
  *bytes = static_cast<uint64_t>(count) * dtypeSize(dtype);
  return okStatus();
}

struct Session::State {
  explicit State(const Plan& plan) : slots(plan.slots) {}
  ArenaLayout slots;
  std::unique_ptr<std::byte, AlignedDeleter> arena;
  Backend backend = Backend::kCpu;
  std::function<void(const StepObservation&)> observer;
  std::unique_ptr<DeviceExecutor> device;  // a backend that runs the whole plan (CUDA)
  std::unique_ptr<ThreadPool> pool;        // the CPU kernels' threads

  Status layout() {
    const uint64_t total = slots.layout();
    arena.reset();
    if (total == 0) return okStatus();
    void* p = std::aligned_alloc(kAlign, total);
    if (!p) return resourceExhausted("cannot allocate a " + std::to_string(total) + "-byte arena");
    arena.reset(static_cast<std::byte*>(p));
    return okStatus();
  }
};

namespace {

class StepContext : public KernelContext {
 public:
  StepContext(const Plan& plan, const PlanStep& step, std::vector<Tensor>& values,
              ArenaLayout& slots, std::byte* arena, bool& grew, LlmStepContext* llm_step,
              ThreadPool* pool)
      : plan_(plan),
        step_(step),
        values_(values),
        slots_(slots),
        arena_(arena),
        grew_(grew),
        llm_step_(llm_step),
        pool_(pool) {}

  size_t numInputs() const override { return step_.inputs.size(); }
  const Tensor* input(size_t i) const override {
    if (i >= step_.inputs.size() || step_.inputs[i] < 0) return nullptr;
    return &values_[static_cast<size_t>(step_.inputs[i])];
  }
  size_t numOutputs() const override { return step_.outputs.size(); }
  Status allocateOutput(size_t i, DType dtype, const Shape& shape, Tensor** out) override {
    uint64_t bytes = 0;
    LLMC_RETURN_IF_ERROR(checkPlannedOutput(plan_, step_, i, dtype, shape, &bytes));
    const size_t index = static_cast<size_t>(step_.outputs[i]);
    const PlanValue& value = plan_.values[index];
    const bool fits = slots_.fits(value.slot, bytes);
    if (fits && arena_) {
      values_[index] =
          Tensor::view(dtype, shape,
                       static_cast<void*>(arena_ + slots_.offset[static_cast<size_t>(value.slot)]));
    } else {
      // Larger than planned: a private buffer for this run; the arena grows before the next.
      try {
        values_[index] = Tensor::allocate(dtype, shape);
      } catch (const std::bad_alloc&) {
        return resourceExhausted("node '" + step_.node + "': cannot allocate " +
                                 std::to_string(bytes) + " bytes for '" + value.name + "' " +
                                 shapeToString(shape));
      }
      grew_ = grew_ || !fits;
    }
    *out = &values_[index];
    return okStatus();
  }
  const KernelParams& params() const override { return step_.params; }
  const std::string& nodeName() const override { return step_.node; }
  LlmStepContext* llmStep() const override { return llm_step_; }
  ThreadPool* threadPool() const override { return pool_; }

 private:
  const Plan& plan_;
  const PlanStep& step_;
  std::vector<Tensor>& values_;
  ArenaLayout& slots_;
  std::byte* arena_;
  bool& grew_;
  LlmStepContext* llm_step_;
  ThreadPool* pool_;
};

}  // namespace

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
    Backend backend = options.backend;
    if (backend == Backend::kAuto) {
      const std::string refusal = targetRefusal(engine->target());
      if (!refusal.empty()) return failedPrecondition(plan.path + ": " + refusal);
      backend = engine->target() == "cpu" ? Backend::kCpu : Backend::kCuda;
    }
    std::unique_ptr<Session> session(new Session());
    session->state_ = std::make_unique<State>(plan);
    session->state_->backend = backend;
    session->state_->observer = options.observer;
    if (options.threads < 0 || options.threads > kMaxThreads)
      return invalidArgument(plan.path + ": threads must be 0 (every core) to " +
                             std::to_string(kMaxThreads) + ", got " +
                             std::to_string(options.threads));
    if (backend == Backend::kCuda && options.observer)
      return invalidArgument(plan.path + ": step observers run on the CPU backend only");
    if (options.gpu_weight_dtype != DType::kFloat32 &&
        options.gpu_weight_dtype != DType::kBFloat16 && options.gpu_weight_dtype != DType::kFloat16)
      return invalidArgument(plan.path + ": GPU weights are float32, bfloat16 or float16, not " +
                             dtypeName(options.gpu_weight_dtype));
    if (backend != Backend::kCuda && options.gpu_weight_dtype != DType::kFloat32)
      return invalidArgument(plan.path + ": " + dtypeName(options.gpu_weight_dtype) +
                             " weights are a CUDA backend option; this session runs on the CPU");
    if (backend == Backend::kCuda) {
#ifdef LLMC_HAVE_CUDA
      DeviceExecutorOptions device_options;
      device_options.allow_tf32 = options.allow_tf32;
      device_options.weight_dtype = options.gpu_weight_dtype;
      device_options.cuda_graphs = options.cuda_graphs;
      device_options.cuda_graph_max_batch = options.cuda_graph_max_batch;
      LLMC_RETURN_IF_ERROR(createCudaExecutor(engine, device_options, &session->state_->device)
                               .withContext(plan.path));
#else
      return failedPrecondition(plan.path + ": the CUDA backend was asked for, but this runtime "
                                "was built without CUDA (configure with -DLLMC_ENABLE_CUDA=ON "
                                "where nvcc is installed)");
#endif
    } else {
      LLMC_RETURN_IF_ERROR(session->state_->layout());
      session->state_->pool = std::make_unique<ThreadPool>(
          options.threads > 0 ? options.threads : defaultThreadCount());
    }
    session->engine_ = std::move(engine);
    *out = std::move(session);
    return okStatus();
  });
}

uint64_t Session::arenaBytes() const {
  if (state_->device) return state_->device->arenaBytes();
  return state_->slots.total;
}

Backend Session::backend() const { return state_->backend; }

int Session::threads() const { return state_->pool ? state_->pool->threads() : 1; }

Session::StepCounts Session::lastRunSteps() const {
  if (state_->device) return state_->device->lastRun();
  return {};
}

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
  if (plan.llm) LLMC_RETURN_IF_ERROR(checkContext(*plan.llm, inputs, llm_step).withContext(what));

  // Execute.
  if (state_->device) return state_->device->run(values, llm_step, outputs).withContext(what);
  bool grew = false;
  for (const PlanStep& step : plan.steps) {
    StepContext ctx(plan, step, values, state_->slots, state_->arena.get(), grew, llm_step,
                    state_->pool.get());
    Status status;
    try {  // no exception crosses the library boundary, whatever a kernel's containers do
      status = step.kernel->fn(ctx);
    } catch (const std::bad_alloc&) {
      status = resourceExhausted("node '" + step.node + "': out of memory");
    } catch (const std::exception& e) {
      status = internalError("node '" + step.node + "': " + e.what());
    }
    if (!status.ok()) return status.withContext(what + ": step " + step.kernel_name);
    for (size_t i = 0; i < step.outputs.size(); ++i) {
      if (values[static_cast<size_t>(step.outputs[i])].dtype() == DType::kUndefined)
        return internalError(what + ": node '" + step.node + "': kernel " + step.kernel_name +
                             " did not produce output " + std::to_string(i));
    }
    if (state_->observer) {
      StepObservation observation{step.node, step.kernel_name, {}, {}};
      for (int index : step.inputs)
        observation.inputs.push_back(index < 0 ? nullptr : &values[static_cast<size_t>(index)]);
      for (int index : step.outputs) observation.outputs.push_back(&values[static_cast<size_t>(index)]);
      Status observed = callUserCode("the step observer", [&] { state_->observer(observation); });
      if (!observed.ok()) return observed.withContext(what + ": node '" + step.node + "'");
    }
    for (int index : step.last_use) values[static_cast<size_t>(index)] = Tensor();
  }

  outputs->clear();
  for (size_t i = 0; i < plan.outputs.size(); ++i) {
    const Tensor& value = values[static_cast<size_t>(plan.outputs[i])];
    try {
      outputs->push_back({plan.output_infos[i].name, value.clone()});
    } catch (const std::bad_alloc&) {
      return resourceExhausted(what + ": out of memory copying output '" +
                               plan.output_infos[i].name + "'");
    }
  }
  if (grew) LLMC_RETURN_IF_ERROR(state_->layout());
  return okStatus();
}

}  // namespace llmc
