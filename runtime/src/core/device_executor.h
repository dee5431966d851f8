// The interface core owns for a backend that runs a session's whole plan itself (today the
// CUDA backend). Core and llm/ never include a backend's headers: a backend implements
// DeviceExecutor and defines its factory, which core names here and calls only when the
// runtime is built with that backend (LLMC_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "llmc/engine.h"
#include "llmc/session.h"
#include "llmc/status.h"
#include "llmc/tensor.h"

namespace llmc {

struct DeviceExecutorOptions {
  bool allow_tf32 = false;
  // kBFloat16 or kFloat16: the products' float32 weights live on the device in that type.
  DType weight_dtype = DType::kFloat32;
  bool cuda_graphs = true;  // replay captured decode steps
  int64_t cuda_graph_max_batch = 64;
};

class DeviceExecutor {
 public:
  virtual ~DeviceExecutor() = default;
  // Runs every step. `values` has the plan's inputs bound to host tensors (checked by the
  // Session); outputs come back as host tensors that own their bytes.
  virtual Status run(std::vector<Tensor>& values, LlmStepContext* llm_step,
                     std::vector<NamedTensor>* outputs) = 0;
  virtual uint64_t arenaBytes() const = 0;
  // What the last run did (Session::lastRunSteps()).
  virtual Session::StepCounts lastRun() const = 0;
};

// The CUDA backend's factory (runtime/src/cuda/executor.cpp), linked only into runtimes built
// with CUDA: probes the device, checks the engine's target and uploads (or shares) its weights.
Status createCudaExecutor(std::shared_ptr<const Engine> engine,
                          const DeviceExecutorOptions& options,
                          std::unique_ptr<DeviceExecutor>* out);

}  // namespace llmc
