// llmc::Session: an execution context for an engine (its arena and bindings).
//
// Threads: a Session is used by one thread at a time (every run rewrites its arena); it may
// move between threads with the caller's synchronization. For parallel runs create one Session
// per thread: Sessions of one Engine run concurrently and share only the engine (on the CUDA
// backend each has its own stream; the engine's uploaded weights are shared under a lock). A
// step observer runs on the thread that called run().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "llmc/engine.h"
#include "llmc/status.h"
#include "llmc/tensor.h"

namespace llmc {

struct LlmStepContext;  // internal: a language-model step's ragged batch and KV cache
class InternalAccess;

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// Where a session executes its engine's plan.
enum class Backend : uint8_t {
  kAuto,  // the engine's target: "cpu" on the CPU, "cuda-smXX" on the GPU
  kCpu,   // the CPU reference kernels, whatever the target (a plan is the same for every target)
  kCuda,  // the CUDA backend (docs/cuda.md); steps without a GPU kernel run on the CPU
};

// What a step observer (SessionOptions::observer) sees: one step's ONNX node, kernel and
// tensors, valid only during the call.
struct StepObservation {
  const std::string& node;
  const std::string& kernel;
  std::vector<const Tensor*> inputs;  // null for an absent optional input
  std::vector<const Tensor*> outputs;
};

struct SessionOptions {
  Backend backend = Backend::kAuto;
  // CPU: the threads this session's kernels run on, counting the one that calls run() (the
  // session starts threads - 1 of its own). 0: the physical cores this process may use (its
  // affinity mask and cgroup CPU quota; SMT siblings count once). Results are identical for
  // every thread count. At most 256.
  int threads = 0;
  // CUDA: float32 products through the tensor cores' tf32 mode (about 1e-3 relative error).
  bool allow_tf32 = false;
  // CUDA: kBFloat16 or kFloat16 keeps the products' float32 weights on the GPU in that type
  // (half the memory and of the bytes a decode step reads) and rounds their activations to it;
  // products accumulate in float32. kFloat32: weights as the engine stores them.
  DType gpu_weight_dtype = DType::kFloat32;
  // CUDA: decode steps over the KV cache (one new token per sequence) are captured once per
  // batch bucket (1, 2, 4, ... up to cuda_graph_max_batch sequences, padded to the bucket) and
  // replayed, which removes the per-kernel launch cost. Off: every step launches its kernels.
  bool cuda_graphs = true;
  int64_t cuda_graph_max_batch = 64;
  // Called after every step of every run, CPU backend only (the compiler's calibration
  // collects activation statistics with it; also for debugging). Slows every step.
  std::function<void(const StepObservation&)> observer;
  // CPU: the engine's product weights copied once, on first use, into the layouts of this
  // CPU's kernels and kept with the session, instead of repacked per product: float32 weights
  // as strips (then read by prefill and decode alike; the engine's own pages of them are not
  // read again), quantized ones for the AVX-512 panels of prefill and batches (decode keeps
  // reading the engine's layout). Costs about those weights' size in memory
  // (derivedWeightBytes() says how much) and the copy on the first run; buys 10-17% of a
  // 64-token prefill and 17-35% of an 8-request batch on the 110M Llama (docs/cpu.md). Off:
  // every product reads or repacks the engine's weights. The same results either way.
  bool prepack_weights = true;
};

class Session {
 public:
  static Status create(std::shared_ptr<const Engine> engine, std::unique_ptr<Session>* out);
  static Status create(std::shared_ptr<const Engine> engine, const SessionOptions& options,
                       std::unique_ptr<Session>* out);
  ~Session();

  // Binds `inputs` by name (each engine input exactly once; shapes within the declared
  // symbols' min/max), runs every step, and returns the engine outputs in engine order.
  // Output tensors own their memory.
  Status run(const std::vector<NamedTensor>& inputs, std::vector<NamedTensor>* outputs);

  // Current arena size; grows when a run needs more than the plan's planning shapes.
  uint64_t arenaBytes() const;
  // Memory the CPU kernels keep derived from the weights (SessionOptions::prepack_weights); 0
  // until a run needed it.
  uint64_t derivedWeightBytes() const;
  // The backend this session runs on (never kAuto).
  Backend backend() const;
  // The threads its CPU kernels run on (SessionOptions::threads, resolved; 1 on CUDA, whose
  // host steps run on the caller).
  int threads() const;
  // CUDA: how many steps of the last run ran on the GPU and how many on the CPU fallback
  // (both 0 on the CPU backend).
  struct StepCounts {
    int64_t device = 0;
    int64_t host = 0;
    bool cuda_graph = false;  // the run replayed a captured CUDA graph
    // Device values that host steps read mid-run (CUDA): each is a transfer and a wait, and a
    // decode step with one is never captured in a CUDA graph (docs/cuda.md).
    int64_t host_reads = 0;
  };
  StepCounts lastRunSteps() const;
  const Engine& engine() const { return *engine_; }

 private:
  friend class InternalAccess;  // runStep, for the Generator's KV-cache path
  Session() = default;
  // run() for one step of a language model over the paged KV cache (`step` null: the plain
  // run). Internal: the step context is the runtime's own type.
  Status runStep(const std::vector<NamedTensor>& inputs, std::vector<NamedTensor>* outputs,
                 LlmStepContext* step);
  struct State;  // arena and slot capacities (session.cpp)
  std::shared_ptr<const Engine> engine_;
  std::unique_ptr<State> state_;
};

}  // namespace llmc
