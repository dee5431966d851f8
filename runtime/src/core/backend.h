// The interface between core and the backends that execute a plan (docs/design.md, "Backends").
//
// A backend lives in its own folder (runtime/src/cpu, runtime/src/cuda, ...), implements
// BackendExecutor, and registers a BackendInfo once at startup through one line in
// runtime/src/backends.cpp. Core picks a backend by the session's options or the engine's
// target through this registry and otherwise never names one; a backend sees the plan (core/
// plan.h), the ragged step and the KV cache's storage (core/step_context.h, core/kv_storage.h),
// and nothing of the language-model layer (llm/).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "llmc/engine.h"
#include "llmc/session.h"
#include "llmc/status.h"
#include "llmc/tensor.h"

namespace llmc {

struct LlmStepContext;

// One session's executor: its arena and whatever per-session state the backend keeps
// (threads, streams, uploaded weights shared per engine).
class BackendExecutor {
 public:
  virtual ~BackendExecutor() = default;
  // Runs every step of the plan. `values` has the plan's weights and inputs bound to host
  // tensors (checked by the Session); outputs come back as host tensors that own their bytes.
  // `llm_step` is a language-model step over the paged KV cache, or null (a plain run).
  virtual Status run(std::vector<Tensor>& values, LlmStepContext* llm_step,
                     std::vector<NamedTensor>* outputs) = 0;
  virtual uint64_t arenaBytes() const = 0;
  // Memory of what kernels derived from the weights and keep (KernelContext::derivedFromWeights).
  virtual uint64_t derivedWeightBytes() const { return 0; }
  // What the last run did (Session::lastRunSteps()); zeros where the backend has no host
  // fallback to count.
  virtual Session::StepCounts lastRun() const { return {}; }
  // The threads its kernels run on (Session::threads()).
  virtual int threads() const { return 1; }
};

struct BackendInfo {
  Backend kind = Backend::kAuto;
  const char* name = "";
  // The engine targets it runs when the session asks for Backend::kAuto: a target equal to
  // this, or starting with it when it ends in '-' ("cuda-" takes cuda-sm80 and cuda-sm90).
  const char* target = "";
  // Capabilities the layers above ask about instead of naming a backend.
  bool step_observer = false;      // SessionOptions::observer is honoured
  bool half_weights = false;       // SessionOptions::gpu_weight_dtype bf16/fp16
  bool samples_on_device = false;  // chooses tokens where the logits are (DeviceSampling)
  // The dtype its own copy of the KV cache holds whatever the host cache stores (the CUDA
  // backend's device pools: float32), or kUndefined: it works on the host cache itself.
  DType device_kv_dtype = DType::kUndefined;
  // Why it is absent from this runtime and how to build it in (create is null then), e.g.
  // "this runtime was built without CUDA (configure with -DLLMC_ENABLE_CUDA=ON ...)".
  const char* unavailable = "";
  // Creates one session's executor (checks the engine against the device, uploads weights);
  // null for a backend this runtime knows of but was built without.
  Status (*create)(std::shared_ptr<const Engine> engine, const SessionOptions& options,
                   std::unique_ptr<BackendExecutor>* out) = nullptr;
};

// Adds a backend; a second registration of the same kind replaces the first in place (tests
// stand in a fake backend that way; sessions created before keep their executor).
void registerBackend(const BackendInfo& info);
// The registered backend of `kind`, or null (not built into this runtime).
const BackendInfo* findBackend(Backend kind);
// The registered backend that runs engines of `target` by default, or null.
const BackendInfo* backendForTarget(const std::string& target);

// Registers every backend built into this runtime (runtime/src/backends.cpp: one line each).
// Called once, before the first lookup.
void registerBuiltinBackends();

}  // namespace llmc
