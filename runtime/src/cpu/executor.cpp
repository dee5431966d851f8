// The CPU backend: runs a plan's steps with the CPU kernels (the KernelRegistry the loader
// resolved them from) over one arena whose slots the compiler assigned by liveness, on the
// session's thread pool. Registered through runtime/src/backends.cpp.
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <new>

#include "core/api_guard.h"
#include "core/backend.h"
#include "core/internal_access.h"
#include "core/plan.h"
#include "core/thread_pool.h"

namespace llmc {

namespace {

constexpr uint64_t kAlign = 64;

struct AlignedDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

// What kernels derived from the engine's weights (KernelContext::derivedFromWeights), kept for
// the executor's life: one entry per kernel key and set of weights.
class DerivedWeights {
 public:
  std::shared_ptr<const void> get(const std::string& key,
                                  const std::function<KernelContext::Derived()>& build) {
    std::lock_guard<std::mutex> lock(mutex_);
    KernelContext::Derived& entry = entries_[key];
    if (!entry.data) {
      entry = build();
      bytes_ += entry.bytes;
    }
    return entry.data;
  }
  uint64_t bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bytes_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, KernelContext::Derived> entries_;
  uint64_t bytes_ = 0;
};

class StepContext : public KernelContext {
 public:
  StepContext(const Plan& plan, const PlanStep& step, std::vector<Tensor>& values,
              ArenaLayout& slots, std::byte* arena, bool& grew, LlmStepContext* llm_step,
              ThreadPool* pool, DerivedWeights* derived)
      : plan_(plan),
        step_(step),
        values_(values),
        slots_(slots),
        arena_(arena),
        grew_(grew),
        llm_step_(llm_step),
        pool_(pool),
        derived_(derived) {}

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
  std::shared_ptr<const void> derivedFromWeights(
      std::initializer_list<size_t> inputs, const std::string& key,
      const std::function<Derived()>& build) const override {
    if (!derived_) return nullptr;  // SessionOptions::prepack_weights off
    std::string id = key;
    for (size_t i : inputs) {
      if (i >= step_.inputs.size() || step_.inputs[i] < 0) continue;  // absent
      const int index = step_.inputs[i];
      if (plan_.values[static_cast<size_t>(index)].kind != PlanValueKind::kWeight) return nullptr;
      id.push_back(':');
      id.append(std::to_string(index));
    }
    return derived_->get(id, build);
  }

 private:
  const Plan& plan_;
  const PlanStep& step_;
  std::vector<Tensor>& values_;
  ArenaLayout& slots_;
  std::byte* arena_;
  bool& grew_;
  LlmStepContext* llm_step_;
  ThreadPool* pool_;
  DerivedWeights* derived_;
};

class CpuExecutor final : public BackendExecutor {
 public:
  CpuExecutor(std::shared_ptr<const Engine> engine, const SessionOptions& options)
      : engine_(std::move(engine)),
        plan_(InternalAccess::plan(*engine_)),
        slots_(plan_.slots),
        observer_(options.observer),
        pool_(options.threads > 0 ? options.threads : defaultThreadCount()),
        prepack_(options.prepack_weights) {}

  Status layout() {
    const uint64_t total = slots_.layout();
    arena_.reset();
    if (total == 0) return okStatus();
    void* p = std::aligned_alloc(kAlign, (total + kAlign - 1) / kAlign * kAlign);
    if (!p) return resourceExhausted("cannot allocate a " + std::to_string(total) + "-byte arena");
    arena_.reset(static_cast<std::byte*>(p));
    return okStatus();
  }

  Status run(std::vector<Tensor>& values, LlmStepContext* llm_step,
             std::vector<NamedTensor>* outputs) override {
    bool grew = false;
    for (const PlanStep& step : plan_.steps) {
      StepContext ctx(plan_, step, values, slots_, arena_.get(), grew, llm_step, &pool_,
                      prepack_ ? &derived_ : nullptr);
      Status status;
      try {  // no exception crosses the library boundary, whatever a kernel's containers do
        status = step.kernel->fn(ctx);
      } catch (const std::bad_alloc&) {
        status = resourceExhausted("node '" + step.node + "': out of memory");
      } catch (const std::exception& e) {
        status = internalError("node '" + step.node + "': " + e.what());
      }
      if (!status.ok()) return status.withContext("step " + step.kernel_name);
      for (size_t i = 0; i < step.outputs.size(); ++i) {
        if (values[static_cast<size_t>(step.outputs[i])].dtype() == DType::kUndefined)
          return internalError("node '" + step.node + "': kernel " + step.kernel_name +
                               " did not produce output " + std::to_string(i));
      }
      if (observer_) {
        StepObservation observation{step.node, step.kernel_name, {}, {}};
        for (int index : step.inputs)
          observation.inputs.push_back(index < 0 ? nullptr : &values[static_cast<size_t>(index)]);
        for (int index : step.outputs)
          observation.outputs.push_back(&values[static_cast<size_t>(index)]);
        Status observed = callUserCode("the step observer", [&] { observer_(observation); });
        if (!observed.ok()) return observed.withContext("node '" + step.node + "'");
      }
      for (int index : step.last_use) values[static_cast<size_t>(index)] = Tensor();
    }

    outputs->clear();
    for (size_t i = 0; i < plan_.outputs.size(); ++i) {
      const Tensor& value = values[static_cast<size_t>(plan_.outputs[i])];
      try {
        outputs->push_back({plan_.output_infos[i].name, value.clone()});
      } catch (const std::bad_alloc&) {
        return resourceExhausted("out of memory copying output '" + plan_.output_infos[i].name +
                                 "'");
      }
    }
    if (grew) LLMC_RETURN_IF_ERROR(layout());
    return okStatus();
  }

  uint64_t arenaBytes() const override { return slots_.total; }
  uint64_t derivedWeightBytes() const override { return derived_.bytes(); }
  int threads() const override { return pool_.threads(); }

 private:
  std::shared_ptr<const Engine> engine_;
  const Plan& plan_;
  ArenaLayout slots_;
  std::unique_ptr<std::byte, AlignedDeleter> arena_;
  std::function<void(const StepObservation&)> observer_;
  ThreadPool pool_;
  bool prepack_;
  DerivedWeights derived_;
};

Status createCpuExecutor(std::shared_ptr<const Engine> engine, const SessionOptions& options,
                         std::unique_ptr<BackendExecutor>* out) {
  auto executor = std::make_unique<CpuExecutor>(std::move(engine), options);
  LLMC_RETURN_IF_ERROR(executor->layout());
  *out = std::move(executor);
  return okStatus();
}

}  // namespace

void registerCpuBackend() {
  BackendInfo info;
  info.kind = Backend::kCpu;
  info.name = "cpu";
  info.target = "cpu";
  info.step_observer = true;
  info.create = createCpuExecutor;
  registerBackend(info);
}

}  // namespace llmc
