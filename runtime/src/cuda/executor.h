// The CUDA backend's executor: runs an engine's plan on the GPU. Weights are uploaded once per
// engine; each session has its stream, cuBLASLt handle and workspace, and one device arena laid
// out from the plan's memory slots. Steps with a GPU kernel (deviceKernelNames()) run on the
// device; the others run on their CPU reference kernel with their inputs copied to the host and
// their outputs left there until a GPU step needs them (shape arithmetic, rope tables, and
// today LlmAttention over the host KV cache). docs/cuda.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/plan.h"
#include "llmc/engine.h"
#include "llmc/session.h"

namespace llmc::cuda {

struct ExecutorOptions {
  bool allow_tf32 = false;
  // kBFloat16 or kFloat16: the products' float32 weights live on the device in that type and
  // their activations are rounded to it before each product (float32 accumulation).
  DType weight_dtype = DType::kFloat32;
  // Decode steps (one new token per sequence) captured once per batch bucket (1, 2, 4, ...,
  // up to cuda_graph_max_batch sequences), padded to it, and replayed.
  bool cuda_graphs = true;
  int64_t cuda_graph_max_batch = 64;
};

// What the last run did.
struct RunCounts {
  int64_t device_steps = 0;
  int64_t host_steps = 0;
  int64_t graph_replays = 0;  // 1 when the run was a captured graph's replay
  int64_t host_reads = 0;     // device values a step read on the host (never in a captured graph)
};

// The kernel names the CUDA backend runs on the GPU (when their operands fit: float32 data,
// the layouts documented per kernel in executor.cpp).
const std::vector<std::string>& deviceKernelNames();

class Executor {
 public:
  // Probes the device, checks the engine's target against it, uploads (or shares) the engine's
  // weights and creates the session's stream, handle, workspace and arena.
  static Status create(std::shared_ptr<const Engine> engine, const ExecutorOptions& options,
                       std::unique_ptr<Executor>* out);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs every step. `values` has the plan's inputs bound to host tensors (checked by the
  // Session); outputs come back as host tensors that own their bytes.
  Status run(std::vector<Tensor>& values, LlmStepContext* llm_step,
             std::vector<NamedTensor>* outputs);

  uint64_t arenaBytes() const;
  const RunCounts& lastRun() const;

  struct Impl;

 private:
  Executor() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmc::cuda
