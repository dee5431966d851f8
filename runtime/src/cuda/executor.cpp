// The CUDA executor (executor.h): weights per engine, an arena per session, and the step loop
// that runs each step on its GPU kernel or on the CPU reference kernel.
#include "cuda/executor.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <new>

#include "core/backend.h"
#include "core/half.h"
#include "core/internal_access.h"
#include "core/step_context.h"
#include "cuda/cublas_status.h"
#include "cuda/cuda_status.h"
#include "cuda/device.h"
#include "cuda/flash_attention.h"
#include "cuda/kernels.h"

namespace llmc::cuda {
namespace {

constexpr uint64_t kAlign = 256;  // cuBLASLt and vector loads want 16; 256 matches cudaMalloc
constexpr size_t kStagingBytes = size_t{32} << 20;

uint64_t alignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// ---- Weights: uploaded once per engine ------------------------------------------------------

// The engine's weights on the device: each weight as stored (float32, int8, ...), and with a
// half weight type (ExecutorOptions::weight_dtype) the products' float32 right operands in that
// type instead, or besides when another step also reads them.
struct DeviceWeights {
  void* stored_base = nullptr;
  void* half_base = nullptr;
  std::vector<void*> stored;  // per plan value: its device copy as stored, or null
  std::vector<void*> half;    // per plan value: its copy in the half type, or null
  ~DeviceWeights() {
    if (stored_base) cudaFree(stored_base);
    if (half_base) cudaFree(half_base);
  }
};

bool isProductKernel(const std::string& name) {
  return name == "MatMul" || name == "LlmFusedMatMul" || name == "LlmGatedMlp";
}

// Which weights get a half copy (the 2-D float32 right operands of products) and which of them
// also need the stored copy (read by any other step or position, or an engine output).
void planHalfWeights(const Plan& plan, std::vector<bool>* half, std::vector<bool>* stored) {
  half->assign(plan.values.size(), false);
  stored->assign(plan.values.size(), false);
  std::vector<bool> other_use(plan.values.size(), false);
  for (const PlanStep& step : plan.steps)
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      const int v = step.inputs[i];
      if (v < 0) continue;
      const PlanValue& value = plan.values[static_cast<size_t>(v)];
      if (i == 1 && isProductKernel(step.kernel_name) && value.kind == PlanValueKind::kWeight &&
          value.weight.dtype() == DType::kFloat32 && value.weight.rank() == 2)
        (*half)[static_cast<size_t>(v)] = true;
      else
        other_use[static_cast<size_t>(v)] = true;
    }
  for (int v : plan.outputs) other_use[static_cast<size_t>(v)] = true;
  for (size_t v = 0; v < plan.values.size(); ++v)
    (*stored)[v] = plan.values[v].kind == PlanValueKind::kWeight && (!(*half)[v] || other_use[v]);
}

// Copies every weight through two pinned staging buffers, alternated so that filling one (a
// memcpy from the mapped file, or the conversion to the half type) overlaps the other's
// transfer.
Status uploadWeights(const Plan& plan, DType half_dtype, DeviceWeights* weights) {
  std::vector<bool> half, stored;
  if (half_dtype == DType::kFloat32) {
    half.assign(plan.values.size(), false);
    stored.assign(plan.values.size(), false);
    for (const PlanWeight& w : plan.weights) stored[static_cast<size_t>(w.value)] = true;
  } else {
    planHalfWeights(plan, &half, &stored);
  }
  struct Copy {
    const std::byte* src;
    uint64_t count;  // bytes, or floats when converting
    bool convert;
    uint64_t offset;  // in its region
  };
  std::vector<Copy> copies;
  std::vector<size_t> copy_value;
  uint64_t stored_bytes = 0, half_bytes = 0;
  for (const PlanWeight& w : plan.weights) {
    const size_t v = static_cast<size_t>(w.value);
    const Tensor& t = plan.values[v].weight;
    if (stored[v]) {
      copies.push_back({static_cast<const std::byte*>(t.data()), w.size_bytes, false, stored_bytes});
      copy_value.push_back(v);
      stored_bytes += alignUp(w.size_bytes);
    }
    if (half[v]) {
      copies.push_back({static_cast<const std::byte*>(t.data()), static_cast<uint64_t>(t.numElements()), true, half_bytes});
      copy_value.push_back(v);
      half_bytes += alignUp(static_cast<uint64_t>(t.numElements()) * 2);
    }
  }
  weights->stored.assign(plan.values.size(), nullptr);
  weights->half.assign(plan.values.size(), nullptr);
  if (stored_bytes > 0)
    LLMC_CUDA_RETURN_IF_ERROR(cudaMalloc(&weights->stored_base, stored_bytes),
                              "cudaMalloc(" + std::to_string(stored_bytes) + " bytes of weights)");
  if (half_bytes > 0)
    LLMC_CUDA_RETURN_IF_ERROR(cudaMalloc(&weights->half_base, half_bytes),
                              "cudaMalloc(" + std::to_string(half_bytes) + " bytes of half weights)");
  for (size_t i = 0; i < copies.size(); ++i) {
    void* base = copies[i].convert ? weights->half_base : weights->stored_base;
    void* at = static_cast<std::byte*>(base) + copies[i].offset;
    (copies[i].convert ? weights->half : weights->stored)[copy_value[i]] = at;
  }
  if (copies.empty()) return okStatus();
  cudaStream_t stream = nullptr;
  LLMC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  void* staging[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
  Status status;
  auto release = [&] {
    if (stream) cudaStreamSynchronize(stream);
    for (int i = 0; i < 2; ++i) {
      if (staging[i]) cudaFreeHost(staging[i]);
      if (done[i]) cudaEventDestroy(done[i]);
    }
    if (stream) cudaStreamDestroy(stream);
  };
  for (int i = 0; i < 2 && status.ok(); ++i) {
    status = cudaStatus(cudaHostAlloc(&staging[i], kStagingBytes, cudaHostAllocDefault), "cudaHostAlloc(staging)");
    if (status.ok()) status = cudaStatus(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming), "cudaEventCreate");
  }
  int buffer = 0;
  for (size_t i = 0; i < copies.size() && status.ok(); ++i) {
    const Copy& c = copies[i];
    auto* dst = static_cast<std::byte*>((c.convert ? weights->half : weights->stored)[copy_value[i]]);
    const uint64_t unit = c.convert ? kStagingBytes / 2 : kStagingBytes;  // elements or bytes per chunk
    for (uint64_t done_units = 0; done_units < c.count && status.ok();) {
      const uint64_t n = std::min<uint64_t>(unit, c.count - done_units);
      status = cudaStatus(cudaEventSynchronize(done[buffer]), "cudaEventSynchronize(staging)");
      if (!status.ok()) break;
      size_t bytes = static_cast<size_t>(n);
      if (c.convert) {
        const float* src = reinterpret_cast<const float*>(c.src) + done_units;
        if (half_dtype == DType::kBFloat16) {
          auto* out = static_cast<BFloat16*>(staging[buffer]);
          for (uint64_t e = 0; e < n; ++e) out[e] = toBFloat16(src[e]);
        } else {
          auto* out = static_cast<Float16*>(staging[buffer]);
          for (uint64_t e = 0; e < n; ++e) out[e] = toFloat16(src[e]);
        }
        bytes = static_cast<size_t>(n) * 2;
        status = cudaStatus(cudaMemcpyAsync(dst + done_units * 2, staging[buffer], bytes, cudaMemcpyHostToDevice, stream),
                            "cudaMemcpyAsync(half weights)");
      } else {
        std::memcpy(staging[buffer], c.src + done_units, bytes);
        status = cudaStatus(cudaMemcpyAsync(dst + done_units, staging[buffer], bytes, cudaMemcpyHostToDevice, stream),
                            "cudaMemcpyAsync(weights)");
      }
      if (status.ok()) status = cudaStatus(cudaEventRecord(done[buffer], stream), "cudaEventRecord");
      done_units += n;
      buffer ^= 1;
    }
  }
  if (status.ok()) status = cudaStatus(cudaStreamSynchronize(stream), "uploading weights");
  release();
  return status;
}

// One upload per engine and weight type: sessions of the same engine share it while any of
// them lives. An engine outlives its sessions, so a live entry's plan address is never reused.
Status sharedWeights(const Plan& plan, DType half_dtype, std::shared_ptr<DeviceWeights>* out) {
  static std::mutex mutex;
  static std::map<std::pair<const Plan*, DType>, std::weak_ptr<DeviceWeights>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& entry = cache[{&plan, half_dtype}];
  if (auto live = entry.lock()) {
    *out = std::move(live);
    return okStatus();
  }
  auto weights = std::make_shared<DeviceWeights>();
  LLMC_RETURN_IF_ERROR(uploadWeights(plan, half_dtype, weights.get()));
  entry = weights;
  *out = std::move(weights);
  return okStatus();
}

// A value during a run: a host copy, a device copy, or both (same dtype and shape).
struct Value {
  Tensor host;
  Tensor device;
  const void* half = nullptr;  // a product weight's copy in the session's half type (device)
  const Tensor& meta() const { return device.dtype() != DType::kUndefined ? device : host; }
  bool present() const { return meta().dtype() != DType::kUndefined; }
};

}  // namespace

struct Executor::Impl {
  std::shared_ptr<const Engine> engine;
  const Plan* plan = nullptr;
  ExecutorOptions options;
  DeviceInfo device;
  std::shared_ptr<DeviceWeights> weights;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  MatMulAlgoCache algo_cache;
  ArenaLayout slots;
  void* arena = nullptr;
  RunCounts counts;

  // LLMC_CUDA_PROFILE=1 (a diagnostic): every eager step waits for the GPU and its wall time is
  // summed by kernel and kind of run; the executor prints the table to stderr when destroyed.
  // The waits serialize host and device, so the sums show where time goes, not the fast rate.
  struct ProfileEntry {
    int64_t calls = 0;
    double ms = 0;
  };
  bool profile = false;
  std::map<std::string, ProfileEntry> profile_ms;
  std::string profile_tag;  // this run's kind: "decode xN" or "N tokens"
  void addProfile(const std::string& key, std::chrono::steady_clock::time_point start) {
    ProfileEntry& e = profile_ms[key + "  [" + profile_tag + "]"];
    ++e.calls;
    e.ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  void printProfile() const;

  // The paged KV cache's device copy: float32 K and V pools in the host cache's block numbering
  // (PagedKvParams' layout), allocated when a step over `kv_host` first runs. On this backend the
  // device pools hold the K/V; the host cache keeps the block tables and prefix index, and
  // reports its copies on write, which are repeated here.
  const KvStorage* kv_host = nullptr;
  float* key_pool = nullptr;
  float* value_pool = nullptr;
  PagedKvParams kv_step;  // this run's step metadata on the device (pools, tables, slots)
  bool kv_step_ready = false;

  // Per run.
  std::vector<Value> values;
  std::vector<void*> scratch;  // stream-ordered allocations freed at the end of the run
  bool grew = false;

  // CUDA graphs of decode steps, one per batch bucket (docs/cuda.md). A bucket's first decode
  // step runs eagerly as a probe (padded to the bucket) that measures its scratch and uploads
  // and checks that nothing needs the host mid-step; then the step loop is captured with
  // scratch from a pool and uploads from pinned memory at fixed addresses. A replay re-runs only
  // the host steps (LlmPositions, shape arithmetic), refills the pinned uploads and launches.
  enum class Mode { kEager, kProbe, kCapture };
  struct Upload {
    int value = -1;  // the plan value uploaded; -1: the KV-cache step metadata
    uint64_t pinned_offset = 0, bytes = 0;
  };
  struct Graph {
    bool capturable = true;
    cudaGraphExec_t exec = nullptr;
    void* pool = nullptr;  // the steps' scratch
    uint64_t pool_bytes = 0;
    void* pinned = nullptr;  // the uploads' host side
    uint64_t pinned_bytes = 0;
    std::vector<Upload> uploads;
    std::vector<size_t> host_steps;        // steps run on the CPU, again before each replay
    std::vector<Tensor> outputs;           // the plan outputs' device tensors (padded rows)
    int64_t device_steps = 0;
    ~Graph() {
      if (exec) cudaGraphExecDestroy(exec);
      if (pool) cudaFree(pool);
      if (pinned) cudaFreeHost(pinned);
    }
  };
  Mode mode = Mode::kEager;
  std::map<int64_t, std::unique_ptr<Graph>> graphs;  // by bucket
  Graph* capturing = nullptr;
  uint64_t pool_used = 0, pinned_used = 0;  // capture
  uint64_t probe_scratch = 0, probe_pinned = 0;  // probe
  bool probe_downloaded = false;
  bool regrown = false;         // runGraph: probing again after growing the arena
  int64_t pad_tokens = -1;      // graph mode: step tokens from here on are padding
  int64_t graph_max_blocks = 0;  // graph mode: block-table width (and the attention's context)

  explicit Impl(const Plan& p) : plan(&p), slots(p.slots) {}
  ~Impl() {
    if (stream) cudaStreamSynchronize(stream);
    graphs.clear();
    if (arena) cudaFree(arena);
    if (key_pool) cudaFree(key_pool);
    if (value_pool) cudaFree(value_pool);
    if (workspace) cudaFree(workspace);
    if (lt) cublasLt().destroy(lt);
    if (stream) cudaStreamDestroy(stream);
  }

  Status layout() {
    graphs.clear();  // they address the old arena
    const uint64_t total = slots.layout();
    if (arena) LLMC_CUDA_RETURN_IF_ERROR(cudaFree(arena), "cudaFree(arena)");
    arena = nullptr;
    if (total > 0)
      LLMC_CUDA_RETURN_IF_ERROR(cudaMalloc(&arena, total),
                                "cudaMalloc(" + std::to_string(total) + "-byte arena)");
    return okStatus();
  }

  Status allocScratch(uint64_t bytes, void** out) {
    *out = nullptr;
    if (bytes == 0) return okStatus();
    if (mode == Mode::kCapture) {  // from the bucket's pool: a captured graph allocates nothing
      if (pool_used + alignUp(bytes) > capturing->pool_bytes)
        return internalError("CUDA graph capture: the step needs more scratch than its probe did");
      *out = static_cast<std::byte*>(capturing->pool) + pool_used;
      pool_used += alignUp(bytes);
      return okStatus();
    }
    if (mode == Mode::kProbe) probe_scratch += alignUp(bytes);
    LLMC_CUDA_RETURN_IF_ERROR(cudaMallocAsync(out, alignUp(bytes), stream),
                              "cudaMallocAsync(" + std::to_string(bytes) + " bytes)");
    scratch.push_back(*out);
    return okStatus();
  }

  // The device copy of value `index`, uploading the host copy when there is none.
  Status onDevice(int index, const Tensor** out) {
    Value& v = values[static_cast<size_t>(index)];
    if (v.device.dtype() == DType::kUndefined) {
      void* p = nullptr;
      LLMC_RETURN_IF_ERROR(allocScratch(v.host.sizeBytes(), &p));
      LLMC_RETURN_IF_ERROR(upload(index, v.host.data(), v.host.sizeBytes(), p));
      v.device = Tensor::view(v.host.dtype(), v.host.shape(), p);
    }
    *out = &v.device;
    return okStatus();
  }

  // Copies `bytes` of host data to `device`: directly, or in a capture through the bucket's
  // pinned buffer (recorded, so that a replay refills it from value `value`; -1: the KV step
  // metadata).
  Status upload(int value, const void* host, uint64_t bytes, void* device) {
    if (bytes == 0) return okStatus();
    const std::string what = value >= 0 ? "'" + plan->values[static_cast<size_t>(value)].name + "'" : "step metadata";
    if (mode == Mode::kCapture) {
      if (pinned_used + alignUp(bytes) > capturing->pinned_bytes)
        return internalError("CUDA graph capture: the step uploads more than its probe did");
      void* staged = static_cast<std::byte*>(capturing->pinned) + pinned_used;
      std::memcpy(staged, host, bytes);
      capturing->uploads.push_back({value, pinned_used, bytes});
      pinned_used += alignUp(bytes);
      host = staged;
    } else if (mode == Mode::kProbe) {
      probe_pinned += alignUp(bytes);
    }
    LLMC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream),
                              "cudaMemcpyAsync(upload " + what + ")");
    return okStatus();
  }

  // The host copy of value `index`, downloading the device copy when there is none; `by_step`
  // false for the run's outputs, read after the last step.
  Status onHost(int index, const Tensor** out, bool by_step = true) {
    Value& v = values[static_cast<size_t>(index)];
    if (v.host.dtype() == DType::kUndefined) {
      if (mode == Mode::kCapture) return internalError("CUDA graph capture: a step reads a device value on the host");
      if (mode == Mode::kProbe) probe_downloaded = true;
      if (by_step) ++counts.host_reads;
      try {
        v.host = Tensor::allocate(v.device.dtype(), v.device.shape());
      } catch (const std::bad_alloc&) {
        return resourceExhausted("cannot allocate host memory for '" +
                                 plan->values[static_cast<size_t>(index)].name + "'");
      }
      if (v.host.sizeBytes() > 0) {
        LLMC_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(v.host.data(), v.device.data(), v.host.sizeBytes(), cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync(download '" + plan->values[static_cast<size_t>(index)].name + "')");
        LLMC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      }
    }
    *out = &v.host;
    return okStatus();
  }

  // A device buffer for output `i` of `step`: its arena slot, or scratch when the value is
  // larger than the slot (the arena grows before the next run).
  Status allocateDeviceOutput(const PlanStep& step, size_t i, DType dtype, const Shape& shape, Tensor** out) {
    uint64_t bytes = 0;
    LLMC_RETURN_IF_ERROR(checkPlannedOutput(*plan, step, i, dtype, shape, &bytes));
    const size_t index = static_cast<size_t>(step.outputs[i]);
    const int slot = plan->values[index].slot;
    void* p = nullptr;
    const bool fits = slots.fits(slot, bytes);
    if (fits && arena) {
      p = static_cast<std::byte*>(arena) + slots.offset[static_cast<size_t>(slot)];
    } else {
      grew = grew || !fits;
      LLMC_RETURN_IF_ERROR(allocScratch(bytes, &p));
    }
    values[index] = Value{Tensor(), Tensor::view(dtype, shape, p)};
    *out = &values[index].device;
    return okStatus();
  }

  Status prepareKv(LlmStepContext& step);
  Status ensureKvPools(KvStorage& cache);
  Status copyKvBlocks(KvStorage& cache);
  std::vector<int32_t> kvMetadata(const LlmStepContext& step, int64_t* max_blocks) const;
  Status sampleOnDevice(int index, LlmStepContext& step, bool* sampled);
  void bindValues(const std::vector<Tensor>& bound);
  Status runSteps(LlmStepContext* llm_step);
  Status runGraph(std::vector<Tensor>& bound, LlmStepContext& llm_step, bool* ran);
  Status runStep(const PlanStep& step, LlmStepContext* llm_step);
  Status runOnHost(const PlanStep& step, LlmStepContext* llm_step);
};

// ---- The GPU kernels of the step loop -------------------------------------------------------

namespace {

// What a GPU step sees: its inputs' shapes, device copies on request, and its outputs, whose
// shapes the CPU kernel computes in shape-only mode (one set of shape and parameter checks
// for both backends).
class DeviceStep {
 public:
  DeviceStep(Executor::Impl& exec, const PlanStep& step, LlmStepContext* llm_step)
      : exec_(exec), step_(step), llm_step_(llm_step) {}

  const PlanStep& step() const { return step_; }
  const KernelParams& params() const { return step_.params; }
  LlmStepContext* llmStep() const { return llm_step_; }
  Executor::Impl& exec() { return exec_; }
  cudaStream_t stream() const { return exec_.stream; }
  size_t numInputs() const { return step_.inputs.size(); }
  // Dtype and shape of input i; null when absent.
  const Tensor* meta(size_t i) const {
    if (i >= step_.inputs.size() || step_.inputs[i] < 0) return nullptr;
    return &exec_.values[static_cast<size_t>(step_.inputs[i])].meta();
  }
  bool allFloat32() const {
    for (size_t i = 0; i < numInputs(); ++i)
      if (meta(i) && meta(i)->dtype() != DType::kFloat32) return false;
    return true;
  }
  template <typename T = float>
  Status device(size_t i, const T** out) {
    *out = nullptr;
    if (!meta(i)) return okStatus();
    const Tensor* t = nullptr;
    LLMC_RETURN_IF_ERROR(exec_.onDevice(step_.inputs[i], &t));
    *out = t->data<T>();
    return okStatus();
  }
  Status host(size_t i, const Tensor** out) { return exec_.onHost(step_.inputs[i], out); }
  // Input i's copy in the session's half weight type (a product's weight), or null.
  const void* half(size_t i) const {
    return meta(i) ? exec_.values[static_cast<size_t>(step_.inputs[i])].half : nullptr;
  }

  // Computes the outputs' dtypes and shapes with the CPU kernel (shape-only) and allocates
  // them on the device.
  Status allocateOutputs() {
    std::vector<Tensor> shape_views(numInputs());
    std::vector<const Tensor*> inputs(numInputs(), nullptr);
    for (size_t i = 0; i < numInputs(); ++i) {
      const Tensor* t = meta(i);
      if (!t) continue;
      const Value& v = exec_.values[static_cast<size_t>(step_.inputs[i])];
      if (v.host.dtype() != DType::kUndefined) {
        inputs[i] = &v.host;  // host data lets data-dependent shapes be computed
      } else {
        shape_views[i] = Tensor::view(t->dtype(), t->shape(), static_cast<const void*>(nullptr));
        inputs[i] = &shape_views[i];
      }
    }
    KernelRun run = evaluateKernel(*step_.kernel, step_.params, inputs, step_.outputs.size(),
                                   step_.node, /*shape_only=*/true, llm_step_);
    LLMC_RETURN_IF_ERROR(run.status);
    outputs_.assign(run.outputs.size(), nullptr);
    for (size_t i = 0; i < run.outputs.size(); ++i)
      LLMC_RETURN_IF_ERROR(exec_.allocateDeviceOutput(step_, i, run.outputs[i].dtype(),
                                                     run.outputs[i].shape(), &outputs_[i]));
    return okStatus();
  }
  Tensor* output(size_t i) { return i < outputs_.size() ? outputs_[i] : nullptr; }

  Status error(const std::string& message) const {
    return invalidArgument("node '" + step_.node + "': " + message);
  }

 private:
  Executor::Impl& exec_;
  const PlanStep& step_;
  LlmStepContext* llm_step_;
  std::vector<Tensor*> outputs_;
};

// A GPU kernel of the step loop. Sets *handled = false (before launching anything) when the
// operands do not fit it; the step then runs on the CPU.
using DeviceKernelFn = Status (*)(DeviceStep& s, bool* handled);

// A GPU kernel's answer for operands it does not take: run the step on the CPU.
Status notHandled(bool* handled) {
  *handled = false;
  return okStatus();
}

// llm.fused_matmul's activation as the CUDA kernels name it ("" is "none").
std::string activationName(const KernelParams& params) {
  const std::string name = params.getString("activation", "");
  return name.empty() ? "none" : name;
}

MatMulParams matMulParams(DeviceStep& s) {
  MatMulParams p;
  p.handle = s.exec().lt;
  p.workspace = s.exec().workspace;
  p.workspace_bytes = matMulWorkspaceBytes();
  p.algo_cache = &s.exec().algo_cache;
  p.allow_tf32 = s.exec().options.allow_tf32;
  return p;
}

// A product's operands (p.m, p.k set): the weight's half copy when the session keeps one, with
// the activations rounded to its type in scratch; else both as float32.
Status productOperands(DeviceStep& s, MatMulParams* p) {
  const float* a = nullptr;
  LLMC_RETURN_IF_ERROR(s.device(0, &a));
  p->a = a;
  if (const void* half = s.half(1)) {
    ConvertParams convert;
    convert.x = a;
    convert.count = p->m * p->k;
    convert.dtype = s.exec().options.weight_dtype;
    void* rounded = nullptr;
    LLMC_RETURN_IF_ERROR(s.exec().allocScratch(static_cast<uint64_t>(convert.count) * 2, &rounded));
    convert.y = rounded;
    LLMC_RETURN_IF_ERROR(launchConvert(convert, s.stream()));
    p->a = rounded;
    p->b = half;
    p->input_dtype = convert.dtype;
    return okStatus();
  }
  const float* b = nullptr;
  LLMC_RETURN_IF_ERROR(s.device(1, &b));
  p->b = b;
  return okStatus();
}

// LlmFusedMatMul and MatMul with a 2-D float32 right operand: a [..., K] · b (+ bias), act.
Status deviceMatMul(DeviceStep& s, bool* handled) {
  const Tensor* a = s.meta(0);
  const Tensor* b = s.meta(1);
  const bool fused = s.step().kernel_name == "LlmFusedMatMul";
  // An empty inner dimension (act(bias) or 0) is left to the CPU.
  if (!s.allFloat32() || !a || !b || b->rank() != 2 || a->rank() < 1 || (!fused && a->rank() < 2) ||
      a->dim(a->rank() - 1) == 0) {
    return notHandled(handled);
  }
  LLMC_RETURN_IF_ERROR(s.allocateOutputs());
  MatMulParams p = matMulParams(s);
  p.trans_b = fused && s.params().getInt("trans_b", 0) != 0;
  p.k = a->dim(a->rank() - 1);
  p.n = p.trans_b ? b->dim(0) : b->dim(1);
  p.m = a->numElements() / p.k;
  p.alpha = fused ? static_cast<float>(s.params().getFloat("alpha", 1.0)) : 1.0f;
  const std::string activation = fused ? activationName(s.params()) : "none";
  p.activation = activation.c_str();
  LLMC_RETURN_IF_ERROR(productOperands(s, &p));
  if (fused) LLMC_RETURN_IF_ERROR(s.device(2, &p.bias));
  p.y = s.output(0)->data<float>();
  return launchMatMul(p, s.stream());
}

// LlmGatedMlp: h = x · [Wg | Wu] into scratch, then y = act(h[:, :F]) * h[:, F:].
Status deviceGatedMlp(DeviceStep& s, bool* handled) {
  const Tensor* x = s.meta(0);
  const Tensor* w = s.meta(1);
  if (!s.allFloat32() || !x || !w || w->rank() != 2 || x->rank() < 1 || w->dim(0) == 0) {
    return notHandled(handled);
  }
  LLMC_RETURN_IF_ERROR(s.allocateOutputs());
  MatMulParams p = matMulParams(s);
  p.k = w->dim(0);
  p.n = w->dim(1);
  p.m = x->numElements() / p.k;
  LLMC_RETURN_IF_ERROR(productOperands(s, &p));
  void* h = nullptr;
  LLMC_RETURN_IF_ERROR(s.exec().allocScratch(static_cast<uint64_t>(p.m * p.n) * sizeof(float), &h));
  p.y = static_cast<float*>(h);
  LLMC_RETURN_IF_ERROR(launchMatMul(p, s.stream()));
  ActivationParams gate;
  gate.y = s.output(0)->data<float>();
  gate.gate_up = p.y;
  gate.rows = p.m;
  gate.width = p.n / 2;
  const std::string activation = activationName(s.params());
  gate.activation = activation.c_str();
  return launchActivation(gate, s.stream());
}

Status deviceNorm(DeviceStep& s, bool* handled) {
  // The grouped (per-head) form has no device kernel yet: the CPU runs it.
  if (!s.allFloat32() || s.params().getInt("group", 0) != 0) {
    return notHandled(handled);
  }
  LLMC_RETURN_IF_ERROR(s.allocateOutputs());
  NormParams p;
  LLMC_RETURN_IF_ERROR(s.device(0, &p.x));
  LLMC_RETURN_IF_ERROR(s.device(1, &p.residual));
  LLMC_RETURN_IF_ERROR(s.device(2, &p.scale));
  LLMC_RETURN_IF_ERROR(s.device(3, &p.bias));
  p.y = s.output(0)->data<float>();
  p.sum = s.output(1) ? s.output(1)->data<float>() : nullptr;
  p.width = s.meta(0)->dim(s.meta(0)->rank() - 1);
  p.rows = p.width == 0 ? 0 : s.meta(0)->numElements() / p.width;
  p.epsilon = static_cast<float>(s.params().getFloat("epsilon", 1e-5));
  p.rms = s.params().getString("kind", "") == "rms";
  return launchNorm(p, s.stream());
}

// The strides with which `operand` is read at each index of `target` (0 where it broadcasts).
void broadcastReadStrides(const Shape& operand, const Shape& target, int64_t* strides) {
  const std::vector<int64_t> own = stridesOf(operand);
  const size_t lead = target.size() - operand.size();
  for (size_t d = 0; d < target.size(); ++d)
    strides[d] = d < lead || operand[d - lead] == 1 ? 0 : own[d - lead];
}

// A program of float32 ops over the step's inputs broadcast to its output, through
// launchElementwise; false in *handled when the operands exceed what it takes.
Status runElementwiseProgram(DeviceStep& s, const std::vector<int64_t>& program,
                             const std::vector<double>& constants, bool* handled) {
  bool fits = s.allFloat32() && s.numInputs() <= static_cast<size_t>(kMaxElementwiseInputs) &&
              program.size() <= static_cast<size_t>(3 * kMaxElementwiseProgram) &&
              constants.size() <= static_cast<size_t>(kMaxElementwiseProgram);
  for (size_t i = 0; i < s.numInputs() && fits; ++i)
    fits = s.meta(i) && s.meta(i)->rank() <= kMaxElementwiseRank;
  if (!fits) {
    return notHandled(handled);
  }
  LLMC_RETURN_IF_ERROR(s.allocateOutputs());  // validates the program and broadcasting
  Tensor* y = s.output(0);
  if (y->numElements() == 0) return okStatus();
  ElementwiseParams p;
  p.num_inputs = static_cast<int>(s.numInputs());
  p.rank = static_cast<int>(y->rank());
  for (int d = 0; d < p.rank; ++d) p.shape[d] = y->dim(d);
  for (int i = 0; i < p.num_inputs; ++i) {
    LLMC_RETURN_IF_ERROR(s.device(static_cast<size_t>(i), &p.inputs[i]));
    broadcastReadStrides(s.meta(static_cast<size_t>(i))->shape(), y->shape(), p.strides[i]);
  }
  for (size_t i = 0; i < program.size(); ++i) p.program[i] = program[i];
  p.program_length = static_cast<int>(program.size() / 3);
  for (size_t i = 0; i < constants.size(); ++i) p.constants[i] = static_cast<float>(constants[i]);
  p.num_constants = static_cast<int>(constants.size());
  p.y = y->data<float>();
  return launchElementwise(p, s.stream());
}

Status deviceElementwise(DeviceStep& s, bool* handled) {
  return runElementwiseProgram(s, s.params().getInts("program"), s.params().getFloats("constants"),
                               handled);
}

// ONNX Add, Sub, Mul and Div of two float32 tensors (numpy broadcasting): a one-instruction
// program (opcodes as in llm.elementwise).
Status deviceBinary(DeviceStep& s, bool* handled) {
  const std::string& op = s.step().kernel_name;
  const int64_t opcode = op == "Add" ? 0 : op == "Sub" ? 1 : op == "Mul" ? 2 : 3;
  if (s.numInputs() != 2) {
    return notHandled(handled);
  }
  return runElementwiseProgram(s, {opcode, 0, 1}, {}, handled);
}

// Softmax and LogSoftmax of float32 along the last axis.
Status deviceSoftmax(DeviceStep& s, bool* handled) {
  const Tensor* x = s.meta(0);
  if (!x || x->dtype() != DType::kFloat32 || x->rank() < 1) {
    return notHandled(handled);
  }
  const int64_t axis = s.params().getInt("axis", -1);
  if (axis != -1 && axis != x->rank() - 1) {
    return notHandled(handled);
  }
  LLMC_RETURN_IF_ERROR(s.allocateOutputs());
  SoftmaxParams p;
  LLMC_RETURN_IF_ERROR(s.device(0, &p.x));
  p.y = s.output(0)->data<float>();
  p.width = x->dim(x->rank() - 1);
  p.rows = p.width == 0 ? 0 : x->numElements() / p.width;
  p.log = s.step().kernel_name == "LogSoftmax";
  if (p.width == 0) return okStatus();
  return launchSoftmax(p, s.stream());
}

// LlmSdpa, head-major [batch, heads, tokens, head_dim] with v's head_dim equal to q's.
Status deviceSdpa(DeviceStep& s, bool* handled) {
  const Tensor* q = s.meta(0);
  const Tensor* k = s.meta(1);
  const Tensor* v = s.meta(2);
  const Tensor* mask = s.meta(3);
  if (!s.allFloat32() || s.params().getInt("num_heads", 0) > 0 || !q || !k || !v ||
      q->rank() != 4 || k->rank() != 4 || v->rank() != 4 || v->dim(3) != q->dim(3) ||
      k->dim(2) > maxPagedAttentionContext() || (mask && mask->rank() > 4)) {
    return notHandled(handled);
  }
  LLMC_RETURN_IF_ERROR(s.allocateOutputs());
  SdpaParams p;
  LLMC_RETURN_IF_ERROR(s.device(0, &p.q));
  LLMC_RETURN_IF_ERROR(s.device(1, &p.k));
  LLMC_RETURN_IF_ERROR(s.device(2, &p.v));
  LLMC_RETURN_IF_ERROR(s.device(3, &p.mask));
  p.batch = q->dim(0), p.heads = q->dim(1), p.queries = q->dim(2), p.head_dim = q->dim(3);
  p.kv_heads = k->dim(1), p.keys = k->dim(2);
  if (mask) broadcastReadStrides(mask->shape(), {p.batch, p.heads, p.queries, p.keys}, p.mask_strides);
  p.scale = static_cast<float>(
      s.params().getFloat("scale", 1.0 / std::sqrt(static_cast<double>(p.head_dim))));
  p.out = s.output(0)->data<float>();
  return launchSdpa(p, s.stream());
}

// LlmRope: y = x, then rotated in place (per-token tables, or int64 positions into caches).
Status deviceRope(DeviceStep& s, bool* handled) {
  const Tensor* x = s.meta(0);
  const Tensor* positions = s.meta(1);
  const Tensor* cos = s.meta(2);
  const Tensor* sin = s.meta(3);
  if (!x || !cos || !sin || x->dtype() != DType::kFloat32 || cos->dtype() != DType::kFloat32 ||
      sin->dtype() != DType::kFloat32 ||
      (positions && positions->dtype() != DType::kInt64)) {
    return notHandled(handled);
  }
  const bool token_major = s.params().getInt("num_heads", 0) > 0;
  // Partial rotary (tables narrower than the head) is not in the GPU kernel: the CPU runs it.
  const int64_t head_dim = token_major ? s.params().getInt("head_dim", 0) : x->dim(3);
  // Nor are interleaved tables or GPT-J's table layout (token_axis, tables [b, tokens, 1, R]).
  if (!positions && (cos->rank() != 4 || cos->dim(3) != head_dim || cos->dim(1) != 1 ||
                     s.params().getInt("interleaved", 0) != 0))
    return notHandled(handled);
  if (s.params().getInt("token_axis", 2) != 2) return notHandled(handled);
  LLMC_RETURN_IF_ERROR(s.allocateOutputs());
  RopeParams p;
  p.x = s.output(0)->data<float>();
  if (token_major) {
    p.batch = x->dim(0), p.tokens = x->dim(1), p.row_width = x->dim(2);
    p.rotated_heads = s.params().getInt("num_heads", 0);
    p.head_dim = s.params().getInt("head_dim", 0);
  } else {
    p.batch = x->dim(0), p.rotated_heads = x->dim(1), p.tokens = x->dim(2), p.head_dim = x->dim(3);
  }
  p.interleaved = s.params().getInt("interleaved", 0) != 0;
  if (positions) {
    // Positions are checked against the cache on the host (they come from there).
    const Tensor* host_positions = nullptr;
    LLMC_RETURN_IF_ERROR(s.host(1, &host_positions));
    p.max_positions = cos->dim(0);
    for (int64_t t = 0; t < host_positions->numElements(); ++t) {
      const int64_t position = host_positions->data<int64_t>()[t];
      if (position < 0 || position >= p.max_positions)
        return s.error("position " + std::to_string(position) + " is outside the rotary cache of " +
                       std::to_string(p.max_positions) + " positions");
    }
    LLMC_RETURN_IF_ERROR(s.device<int64_t>(1, &p.positions));
  } else {
    if (p.interleaved) return s.error("per-token tables rotate halves only");
    p.table_batch = cos->dim(0);
  }
  LLMC_RETURN_IF_ERROR(s.device(2, &p.cos));
  LLMC_RETURN_IF_ERROR(s.device(3, &p.sin));
  const float* x_data = nullptr;
  LLMC_RETURN_IF_ERROR(s.device(0, &x_data));
  if (x->sizeBytes() > 0)
    LLMC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p.x, x_data, x->sizeBytes(), cudaMemcpyDeviceToDevice, s.stream()),
                              "LlmRope: cudaMemcpyAsync");
  return launchRope(p, s.stream());
}

// LlmLastTokens: the rows of each sequence's last token (all rows without a step context).
Status deviceLastTokens(DeviceStep& s, bool* handled) {
  const Tensor* x = s.meta(0);
  if (!x || x->rank() != 3) {
    return notHandled(handled);
  }
  LLMC_RETURN_IF_ERROR(s.allocateOutputs());
  const std::byte* in = nullptr;
  LLMC_RETURN_IF_ERROR(s.device<std::byte>(0, &in));
  auto* out = static_cast<std::byte*>(s.output(0)->data());
  const size_t row_bytes = static_cast<size_t>(x->dim(2)) * dtypeSize(x->dtype());
  LlmStepContext* step = s.llmStep();
  if (!step) {
    if (x->sizeBytes() == 0) return okStatus();
    LLMC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, in, x->sizeBytes(), cudaMemcpyDeviceToDevice, s.stream()),
                              "LlmLastTokens: cudaMemcpyAsync");
    return okStatus();
  }
  for (size_t r = 0; r < step->last_token.size(); ++r) {
    const int32_t t = step->last_token[r];
    if (t < 0 || t >= x->dim(1)) return s.error("last token index out of range");
    LLMC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out + r * row_bytes, in + static_cast<size_t>(t) * row_bytes,
                                              row_bytes, cudaMemcpyDeviceToDevice, s.stream()),
                              "LlmLastTokens: cudaMemcpyAsync");
  }
  return okStatus();
}

// Gather along axis 0 of a float32 [vocab, width] table by int64 ids in [0, vocab): the
// embedding lookup. Negative (wrapping) ids and other forms run on the CPU.
Status deviceGather(DeviceStep& s, bool* handled) {
  const Tensor* table = s.meta(0);
  const Tensor* ids = s.meta(1);
  *handled = false;
  if (!table || !ids || table->dtype() != DType::kFloat32 || table->rank() != 2 ||
      ids->dtype() != DType::kInt64 || s.params().getInt("axis", 0) != 0)
    return okStatus();
  const Tensor* host_ids = nullptr;
  LLMC_RETURN_IF_ERROR(s.host(1, &host_ids));
  for (int64_t i = 0; i < host_ids->numElements(); ++i) {
    const int64_t id = host_ids->data<int64_t>()[i];
    if (id < 0 || id >= table->dim(0)) return okStatus();  // the CPU kernel wraps or reports it
  }
  *handled = true;
  LLMC_RETURN_IF_ERROR(s.allocateOutputs());
  EmbeddingParams p;
  LLMC_RETURN_IF_ERROR(s.device(0, &p.table));
  LLMC_RETURN_IF_ERROR(s.device<int64_t>(1, &p.ids));
  p.y = s.output(0)->data<float>();
  p.vocab = table->dim(0);
  p.width = table->dim(1);
  p.tokens = ids->numElements();
  return launchEmbedding(p, s.stream());
}

// LlmQuantMatMul: any format of core/quant.h on float32 activations (the CPU kernel's
// shape-only pass checks the weight's tensors against the format).
Status deviceQuantMatMul(DeviceStep& s, bool* handled) {
  const Tensor* x = s.meta(0);
  const QuantTraits* traits = findQuantTraits(s.params().getString("format", ""));
  if (!traits || !x || x->dtype() != DType::kFloat32 || x->rank() < 1 || x->dim(x->rank() - 1) == 0) {
    return notHandled(handled);
  }
  LLMC_RETURN_IF_ERROR(s.allocateOutputs());
  QuantMatMulParams p;
  p.traits = traits;
  p.k = x->dim(x->rank() - 1);
  p.rows = x->numElements() / p.k;
  p.n = s.meta(1)->dim(0);
  p.group = s.params().getInt("group", p.k);
  p.alpha = static_cast<float>(s.params().getFloat("alpha", 1.0));
  p.gated = s.params().getInt("gated", 0) != 0;
  const std::string activation = activationName(s.params());
  p.activation = activation.c_str();
  LLMC_RETURN_IF_ERROR(s.device(0, &p.x));
  LLMC_RETURN_IF_ERROR(s.device<void>(1, &p.data));
  LLMC_RETURN_IF_ERROR(s.device<void>(2, &p.scales));
  LLMC_RETURN_IF_ERROR(s.device<uint8_t>(3, &p.zeros));
  LLMC_RETURN_IF_ERROR(s.device(4, &p.bias));
  LLMC_RETURN_IF_ERROR(s.device(5, &p.input_scales));
  p.y = s.output(0)->data<float>();
  const MatMulParams mm = matMulParams(s);
  p.handle = mm.handle;
  p.workspace = mm.workspace;
  p.workspace_bytes = mm.workspace_bytes;
  p.algo_cache = mm.algo_cache;
  p.allow_tf32 = mm.allow_tf32;
  const DeviceInfo& device = s.exec().device;
  p.fp8_tensor_cores = device.sm_major > 8 || (device.sm_major == 8 && device.sm_minor >= 9);
  p.scratch_bytes = quantMatMulScratchBytes(p);
  LLMC_RETURN_IF_ERROR(s.exec().allocScratch(p.scratch_bytes, &p.scratch));
  return launchQuantMatMul(p, s.stream());
}

// LlmQuantGather by int64 ids in [0, vocab) (others run on the CPU, which wraps or reports them).
Status deviceQuantGather(DeviceStep& s, bool* handled) {
  const Tensor* ids = s.meta(0);
  const Tensor* data = s.meta(1);
  const QuantTraits* traits = findQuantTraits(s.params().getString("format", ""));
  if (!traits || !ids || !data || ids->dtype() != DType::kInt64 || data->rank() != 2) {
    return notHandled(handled);
  }
  const Tensor* host_ids = nullptr;
  LLMC_RETURN_IF_ERROR(s.host(0, &host_ids));
  for (int64_t i = 0; i < host_ids->numElements(); ++i) {
    const int64_t id = host_ids->data<int64_t>()[i];
    if (id < 0 || id >= data->dim(0)) {
      return notHandled(handled);
    }
  }
  LLMC_RETURN_IF_ERROR(s.allocateOutputs());
  QuantGatherParams p;
  p.traits = traits;
  p.vocab = data->dim(0);
  p.width = traits->bits == 8 ? data->dim(1) : data->dim(1) * 2;
  p.group = s.params().getInt("group", p.width);
  p.tokens = ids->numElements();
  LLMC_RETURN_IF_ERROR(s.device<int64_t>(0, &p.ids));
  LLMC_RETURN_IF_ERROR(s.device<void>(1, &p.data));
  LLMC_RETURN_IF_ERROR(s.device<void>(2, &p.scales));
  LLMC_RETURN_IF_ERROR(s.device<uint8_t>(3, &p.zeros));
  p.y = s.output(0)->data<float>();
  return launchQuantGather(p, s.stream());
}

// LlmAttention over the paged KV cache (a generator's step), token-major: append the step's
// K/V to the device pools, then causal attention of each token over its sequence. Without a
// step context (a plain run: every row a fresh sequence) it runs on the CPU. The head-major
// form (--opt-level 0) is refused over a cache: the CPU kernel would write the host cache,
// which this backend does not read.
Status deviceAttention(DeviceStep& s, bool* handled) {
  LlmStepContext* step = s.llmStep();
  if (!step) {
    return notHandled(handled);
  }
  const int64_t heads = s.params().getInt("num_heads", 0);
  if (heads <= 0 || !s.allFloat32())
    return unimplemented("node '" + s.step().node + "': the CUDA backend attends over the KV cache "
                         "with the token-major float32 LlmAttention (compile at --opt-level 1, "
                         "the default)");
  // No new device kernels before the CUDA backend has run once on a GPU (docs/cuda.md): a
  // windowed engine is refused here rather than attended causally.
  if (const int64_t window = s.params().getInt("window", 0); window != 0)
    return unimplemented("node '" + s.step().node + "': sliding-window attention (window " +
                         std::to_string(window) + ") has no CUDA kernel yet; run this engine "
                         "on the CPU backend");
  if (const double softcap = s.params().getFloat("softcap", 0.0); softcap != 0)
    return unimplemented("node '" + s.step().node + "': soft-capped attention scores (softcap " +
                         std::to_string(softcap) +
                         ") have no CUDA kernel yet; run this "
                         "engine on the CPU backend");
  if (!s.params().getFloats("alibi_slopes").empty())
    return unimplemented("node '" + s.step().node +
                         "': ALiBi position biases (alibi_slopes) "
                         "have no CUDA kernel yet; run this engine on the CPU backend");
  LLMC_RETURN_IF_ERROR(s.allocateOutputs());
  const KvCacheSpec& spec = step->cache->spec();
  const int64_t layer = s.params().getInt("layer", 0);
  const int64_t kv_heads = s.params().getInt("num_kv_heads", 0);
  const int64_t head_dim = s.params().getInt("head_dim", 0);
  if (layer < 0 || layer >= spec.num_layers || kv_heads != spec.num_kv_heads || head_dim != spec.head_dim)
    return s.error("the KV cache (" + std::to_string(spec.num_layers) + " layers, " +
                   std::to_string(spec.num_kv_heads) + " KV heads of " + std::to_string(spec.head_dim) +
                   ") does not fit layer " + std::to_string(layer) + " with " + std::to_string(kv_heads) +
                   " KV heads of " + std::to_string(head_dim));
  const Tensor* q = s.meta(0);
  if (q->dim(0) != 1 || static_cast<size_t>(q->dim(1)) != step->token_position.size())
    return s.error("a ragged step runs [1, " + std::to_string(step->token_position.size()) +
                   "] tokens, attention got q " + shapeToString(q->shape()));
  if (q->dim(1) == 0) return okStatus();
  int64_t max_context = 0;
  for (int64_t position : step->token_position) max_context = std::max(max_context, position + 1);
  // A graph's bucket attends with the table width as its context: the kernel's launch shape
  // stays the same from step to step; each token still reads only its own positions.
  if (s.exec().pad_tokens >= 0) max_context = s.exec().graph_max_blocks * spec.block_size;
  LLMC_RETURN_IF_ERROR(s.exec().prepareKv(*step));
  KvAppendParams append;
  append.kv = s.exec().kv_step;
  append.kv.layer = layer;
  LLMC_RETURN_IF_ERROR(s.device(1, &append.k));
  LLMC_RETURN_IF_ERROR(s.device(2, &append.v));
  append.k_width = s.meta(1)->dim(2);
  append.v_width = s.meta(2)->dim(2);
  append.k_column = s.params().getInt("k_column", 0);
  append.v_column = s.params().getInt("v_column", 0);
  LLMC_RETURN_IF_ERROR(launchKvAppend(append, s.stream()));
  PagedAttentionParams attention;
  attention.kv = append.kv;
  LLMC_RETURN_IF_ERROR(s.device(0, &attention.q));
  attention.q_width = q->dim(2);
  attention.q_column = s.params().getInt("q_column", 0);
  attention.heads = heads;
  attention.max_context = max_context;
  attention.scale = static_cast<float>(s.params().getFloat("scale", 1.0));
  attention.out = s.output(0)->data<float>();
  void* scratch = nullptr;
  const size_t scratch_bytes = flashAttentionScratchBytes(attention);
  LLMC_RETURN_IF_ERROR(s.exec().allocScratch(scratch_bytes, &scratch));
  return launchFlashAttention(attention, scratch, scratch_bytes, s.stream());
}

struct DeviceKernelEntry {
  const char* name;
  DeviceKernelFn fn;
};

constexpr DeviceKernelEntry kDeviceKernels[] = {
    {"Add", deviceBinary},
    {"Div", deviceBinary},
    {"Gather", deviceGather},
    {"LlmAttention", deviceAttention},
    {"LlmElementwise", deviceElementwise},
    {"LlmFusedMatMul", deviceMatMul},
    {"LlmGatedMlp", deviceGatedMlp},
    {"LlmLastTokens", deviceLastTokens},
    {"LlmNorm", deviceNorm},
    {"LlmQuantGather", deviceQuantGather},
    {"LlmQuantMatMul", deviceQuantMatMul},
    {"LlmRope", deviceRope},
    {"LlmSdpa", deviceSdpa},
    {"LogSoftmax", deviceSoftmax},
    {"MatMul", deviceMatMul},
    {"Mul", deviceBinary},
    {"Softmax", deviceSoftmax},
    {"Sub", deviceBinary},
};

DeviceKernelFn findDeviceKernel(const std::string& name) {
  for (const DeviceKernelEntry& entry : kDeviceKernels)
    if (name == entry.name) return entry.fn;
  return nullptr;
}

}  // namespace

const std::vector<std::string>& deviceKernelNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const DeviceKernelEntry& entry : kDeviceKernels) out.push_back(entry.name);
    return out;
  }();
  return names;
}

// ---- The step loop --------------------------------------------------------------------------

// The device pools of `cache`: allocated (zeroed) when a step over a new cache first runs, with
// one block more than the cache has: padding tokens of a graph's bucket write their K/V there.
Status Executor::Impl::ensureKvPools(KvStorage& cache) {
  if (kv_host == &cache) return okStatus();
  graphs.clear();  // they address the old pools
  const KvCacheSpec& spec = cache.spec();
  const uint64_t block_floats = static_cast<uint64_t>(spec.num_layers) * spec.num_kv_heads *
                                spec.block_size * spec.head_dim;
  if (key_pool) cudaFree(key_pool);
  if (value_pool) cudaFree(value_pool);
  key_pool = value_pool = nullptr;
  kv_host = nullptr;
  const uint64_t bytes = block_floats * static_cast<uint64_t>(spec.num_blocks + 1) * sizeof(float);
  LLMC_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&key_pool), bytes), "cudaMalloc(" + std::to_string(bytes) + "-byte K pool)");
  LLMC_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&value_pool), bytes), "cudaMalloc(" + std::to_string(bytes) + "-byte V pool)");
  LLMC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(key_pool, 0, bytes, stream), "cudaMemsetAsync(K pool)");
  LLMC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(value_pool, 0, bytes, stream), "cudaMemsetAsync(V pool)");
  // Its blocks hold nothing computed yet: earlier copies on write do not matter.
  cache.recordBlockCopies();
  cache.takeBlockCopies();
  kv_host = &cache;
  return okStatus();
}

// The cache's copies on write since the last step, in order (outside any graph: they differ
// from step to step).
Status Executor::Impl::copyKvBlocks(KvStorage& cache) {
  const KvCacheSpec& spec = cache.spec();
  const uint64_t block_floats = static_cast<uint64_t>(spec.num_layers) * spec.num_kv_heads *
                                spec.block_size * spec.head_dim;
  for (const auto& [from, to] : cache.takeBlockCopies()) {
    const size_t bytes = block_floats * sizeof(float);
    for (float* pool : {key_pool, value_pool})
      LLMC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pool + static_cast<size_t>(to) * block_floats,
                                                pool + static_cast<size_t>(from) * block_floats, bytes,
                                                cudaMemcpyDeviceToDevice, stream),
                                "cudaMemcpyAsync(KV block copy)");
  }
  return okStatus();
}

// The step's tokens and block tables as uploaded: [sequence | position | block | offset] per
// token, then the tables, each padded to *max_blocks entries (in graph mode the bucket's fixed
// width), then attention's query tiles (flashQueryTiles: a tile per sequence run, so decode
// tokens of different sequences attend in parallel; a decode bucket has one per token, a
// fixed count). Padding tokens (graph mode) write to the spare block and read only it.
std::vector<int32_t> Executor::Impl::kvMetadata(const LlmStepContext& step, int64_t* max_blocks) const {
  const int64_t tokens = static_cast<int64_t>(step.token_position.size());
  const int64_t sequences = static_cast<int64_t>(step.block_tables.size());
  const int32_t spare = static_cast<int32_t>(step.cache->spec().num_blocks);
  *max_blocks = 1;
  for (const auto& table : step.block_tables) *max_blocks = std::max<int64_t>(*max_blocks, static_cast<int64_t>(table.size()));
  if (pad_tokens >= 0) *max_blocks = graph_max_blocks;
  std::vector<int32_t> meta(static_cast<size_t>(4 * tokens + sequences * *max_blocks), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    const bool pad = pad_tokens >= 0 && t >= pad_tokens;
    meta[static_cast<size_t>(t)] = step.token_sequence[static_cast<size_t>(t)];
    meta[static_cast<size_t>(tokens + t)] = pad ? 0 : static_cast<int32_t>(step.token_position[static_cast<size_t>(t)]);
    meta[static_cast<size_t>(2 * tokens + t)] = pad ? spare : step.token_slot[static_cast<size_t>(t)].block;
    meta[static_cast<size_t>(3 * tokens + t)] = pad ? 0 : step.token_slot[static_cast<size_t>(t)].offset;
  }
  for (int64_t s = 0; s < sequences; ++s) {
    const auto& table = step.block_tables[static_cast<size_t>(s)];
    const bool pad = pad_tokens >= 0 && s >= pad_tokens;  // a decode bucket: sequence s is token s
    auto row = meta.begin() + 4 * tokens + s * *max_blocks;
    if (pad) std::fill(row, row + *max_blocks, spare);
    else std::copy(table.begin(), table.end(), row);
  }
  const std::vector<int32_t> tiles = flashQueryTiles(meta.data(), tokens);
  meta.insert(meta.end(), tiles.begin(), tiles.end());
  return meta;
}

Status Executor::Impl::prepareKv(LlmStepContext& step) {
  if (kv_step_ready) return okStatus();
  KvStorage& cache = *step.cache;
  const KvCacheSpec& spec = cache.spec();
  LLMC_RETURN_IF_ERROR(ensureKvPools(cache));
  LLMC_RETURN_IF_ERROR(copyKvBlocks(cache));
  int64_t max_blocks = 1;
  const std::vector<int32_t> meta = kvMetadata(step, &max_blocks);
  void* device_meta = nullptr;
  LLMC_RETURN_IF_ERROR(allocScratch(meta.size() * sizeof(int32_t), &device_meta));
  // A pageable source has been staged when cudaMemcpyAsync returns, so `meta` may go.
  LLMC_RETURN_IF_ERROR(upload(-1, meta.data(), meta.size() * sizeof(int32_t), device_meta));
  const int64_t tokens = static_cast<int64_t>(step.token_position.size());
  const auto* base = static_cast<const int32_t*>(device_meta);
  kv_step = PagedKvParams();
  kv_step.key_cache = key_pool;
  kv_step.value_cache = value_pool;
  kv_step.num_layers = spec.num_layers;
  kv_step.kv_heads = spec.num_kv_heads;
  kv_step.head_dim = spec.head_dim;
  kv_step.block_size = spec.block_size;
  kv_step.token_sequence = base;
  kv_step.token_position = base + tokens;
  kv_step.token_block = base + 2 * tokens;
  kv_step.token_offset = base + 3 * tokens;
  kv_step.block_tables = base + 4 * tokens;
  kv_step.tokens = tokens;
  kv_step.sequences = static_cast<int64_t>(step.block_tables.size());
  kv_step.max_blocks = max_blocks;
  kv_step.query_tiles = kv_step.block_tables + kv_step.sequences * max_blocks;
  kv_step.num_query_tiles =
      static_cast<int64_t>(meta.size()) - 4 * tokens - kv_step.sequences * max_blocks;
  kv_step_ready = true;
  return okStatus();
}

// The step's tokens chosen from the logits (value `index`) where they are: each work item's
// row (its last token's, or row w of per-item logits), argmax or top-k/top-p with the caller's
// draws, and the chosen tokens' log-probabilities; only ids and log-probabilities come back.
// Logits that are not a float32 [1, rows, vocab] device tensor are left to the host sampler.
Status Executor::Impl::sampleOnDevice(int index, LlmStepContext& step, bool* sampled) {
  *sampled = false;
  DeviceSampling& request = *step.sampling;
  const Tensor& logits = values[static_cast<size_t>(index)].device;
  if (logits.dtype() != DType::kFloat32 || logits.rank() != 3 || logits.dim(0) != 1) return okStatus();
  const int64_t rows = logits.dim(1), vocab = logits.dim(2);
  const int64_t items = static_cast<int64_t>(step.last_token.size());
  const int64_t tokens = static_cast<int64_t>(step.token_position.size());
  const bool per_item = rows == items && rows != tokens;
  if ((!per_item && rows != tokens) || vocab < 1 || items == 0) return okStatus();
  if (request.temperature > 0 && static_cast<int64_t>(request.uniform.size()) != items)
    return invalidArgument("device sampling: " + std::to_string(request.uniform.size()) + " draws for " +
                           std::to_string(items) + " sequences");
  // The ids sampled from: all, or those below the request's limit (each row's first `width`
  // logits, gathered into rows of that width for the kernels).
  const int64_t width = request.vocab_limit > 0 ? std::min(request.vocab_limit, vocab) : vocab;
  const uint64_t row_bytes = static_cast<uint64_t>(width) * sizeof(float);
  void* buffer = nullptr;
  LLMC_RETURN_IF_ERROR(allocScratch(alignUp(static_cast<uint64_t>(items) * row_bytes) +
                                        3 * alignUp(static_cast<uint64_t>(items) * 4), &buffer));
  auto* base = static_cast<std::byte*>(buffer);
  const float* chosen_rows = logits.data<float>();
  if (!per_item || width < vocab) {
    float* gathered = reinterpret_cast<float*>(base);
    for (int64_t w = 0; w < items; ++w) {
      const int64_t row = per_item ? w : step.last_token[static_cast<size_t>(w)];
      if (row < 0 || row >= rows) return internalError("device sampling: last token index out of range");
      LLMC_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(gathered + w * width, logits.data<float>() + row * vocab, row_bytes,
                          cudaMemcpyDeviceToDevice, stream),
          "device sampling: cudaMemcpyAsync(logits row)");
    }
    chosen_rows = gathered;
  }
  base += alignUp(static_cast<uint64_t>(items) * row_bytes);
  auto* ids = reinterpret_cast<int32_t*>(base);
  auto* logprobs = reinterpret_cast<float*>(base + alignUp(static_cast<uint64_t>(items) * 4));
  auto* uniform = reinterpret_cast<float*>(base + 2 * alignUp(static_cast<uint64_t>(items) * 4));
  if (request.temperature > 0) {
    LLMC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(uniform, request.uniform.data(), static_cast<size_t>(items) * sizeof(float),
                                              cudaMemcpyHostToDevice, stream),
                              "device sampling: cudaMemcpyAsync(draws)");
    SampleParams sample;
    sample.logits = chosen_rows;
    sample.uniform = uniform;
    sample.ids = ids;
    sample.rows = items, sample.vocab = width;
    sample.temperature = request.temperature;
    sample.top_k = request.top_k;
    sample.top_p = request.top_p;
    LLMC_RETURN_IF_ERROR(launchSample(sample, stream));
  } else {
    ArgmaxParams argmax;
    argmax.logits = chosen_rows;
    argmax.ids = ids;
    argmax.rows = items, argmax.vocab = width;
    LLMC_RETURN_IF_ERROR(launchArgmax(argmax, stream));
  }
  TokenLogprobParams logprob;
  logprob.logits = chosen_rows;
  logprob.ids = ids;
  logprob.logprobs = logprobs;
  logprob.rows = items, logprob.vocab = width;
  logprob.temperature = request.temperature;
  LLMC_RETURN_IF_ERROR(launchTokenLogprob(logprob, stream));
  request.ids.resize(static_cast<size_t>(items));
  request.logprobs.resize(static_cast<size_t>(items));
  LLMC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(request.ids.data(), ids, static_cast<size_t>(items) * sizeof(int32_t),
                                            cudaMemcpyDeviceToHost, stream),
                            "device sampling: cudaMemcpyAsync(ids)");
  LLMC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(request.logprobs.data(), logprobs, static_cast<size_t>(items) * sizeof(float),
                                            cudaMemcpyDeviceToHost, stream),
                            "device sampling: cudaMemcpyAsync(logprobs)");
  LLMC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "device sampling: cudaStreamSynchronize");
  request.done = true;
  *sampled = true;
  return okStatus();
}

Status Executor::Impl::runOnHost(const PlanStep& step, LlmStepContext* llm_step) {
  std::vector<const Tensor*> inputs(step.inputs.size(), nullptr);
  for (size_t i = 0; i < step.inputs.size(); ++i)
    if (step.inputs[i] >= 0) LLMC_RETURN_IF_ERROR(onHost(step.inputs[i], &inputs[i]));
  KernelRun run = evaluateKernel(*step.kernel, step.params, inputs, step.outputs.size(), step.node,
                                 /*shape_only=*/false, llm_step);
  LLMC_RETURN_IF_ERROR(run.status);
  for (size_t i = 0; i < run.outputs.size(); ++i) {
    uint64_t bytes = 0;
    LLMC_RETURN_IF_ERROR(checkPlannedOutput(*plan, step, i, run.outputs[i].dtype(), run.outputs[i].shape(), &bytes));
    values[static_cast<size_t>(step.outputs[i])] = Value{std::move(run.outputs[i]), Tensor()};
  }
  ++counts.host_steps;
  if (mode == Mode::kCapture) capturing->host_steps.push_back(static_cast<size_t>(&step - plan->steps.data()));
  return okStatus();
}

Status Executor::Impl::runStep(const PlanStep& step, LlmStepContext* llm_step) {
  if (DeviceKernelFn fn = findDeviceKernel(step.kernel_name)) {
    DeviceStep device_step(*this, step, llm_step);
    bool handled = true;
    LLMC_RETURN_IF_ERROR(fn(device_step, &handled));
    if (handled) {
      ++counts.device_steps;
      return okStatus();
    }
  }
  return runOnHost(step, llm_step);
}

Status Executor::create(std::shared_ptr<const Engine> engine, const ExecutorOptions& options,
                        std::unique_ptr<Executor>* out) {
  DeviceInfo device;
  LLMC_RETURN_IF_ERROR(probeDevice(&device));
  if (engine->target() != "cpu") LLMC_RETURN_IF_ERROR(checkTarget(device, engine->target()));
  const Plan& plan = InternalAccess::plan(*engine);
  std::unique_ptr<Executor> executor(new Executor());
  executor->impl_ = std::make_unique<Impl>(plan);
  Impl& impl = *executor->impl_;
  impl.engine = std::move(engine);
  impl.options = options;
  impl.device = device;
  const char* profile = std::getenv("LLMC_CUDA_PROFILE");
  impl.profile = profile && *profile && std::string(profile) != "0";
  LLMC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.device), "cudaSetDevice");
  LLMC_RETURN_IF_ERROR(sharedWeights(plan, options.weight_dtype, &impl.weights));
  LLMC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const CublasLt* lt_api = nullptr;
  LLMC_RETURN_IF_ERROR(loadCublasLt(&lt_api));
  LLMC_CUBLAS_RETURN_IF_ERROR(lt_api->create(&impl.lt), "cublasLtCreate");
  LLMC_CUDA_RETURN_IF_ERROR(cudaMalloc(&impl.workspace, matMulWorkspaceBytes()), "cudaMalloc(cuBLASLt workspace)");
  LLMC_RETURN_IF_ERROR(impl.layout());
  *out = std::move(executor);
  return okStatus();
}

Executor::~Executor() {
  if (impl_ && impl_->profile) impl_->printProfile();
}

uint64_t Executor::arenaBytes() const { return impl_->slots.total; }
const RunCounts& Executor::lastRun() const { return impl_->counts; }

void Executor::Impl::bindValues(const std::vector<Tensor>& bound) {
  values.assign(plan->values.size(), Value());
  for (size_t i = 0; i < plan->values.size(); ++i) {
    const PlanValue& value = plan->values[i];
    if (value.kind == PlanValueKind::kWeight) {
      // Both copies: the host one is the mapped file, for steps that run on the CPU.
      values[i].host = value.weight;
      if (void* stored = weights->stored[i])
        values[i].device = Tensor::view(value.weight.dtype(), value.weight.shape(), stored);
      values[i].half = weights->half[i];
    } else if (bound[i].dtype() != DType::kUndefined) {
      values[i].host = bound[i];
    }
  }
}

Status Executor::Impl::runSteps(LlmStepContext* llm_step) {
  for (const PlanStep& step : plan->steps) {
    Status status;
    const bool timed = profile && mode == Mode::kEager;
    const auto start = std::chrono::steady_clock::now();
    const int64_t device_before = counts.device_steps;
    try {  // no exception crosses the library boundary
      status = runStep(step, llm_step);
      if (timed && status.ok()) {
        status = cudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize (profile)");
        addProfile(step.kernel_name + (counts.device_steps > device_before ? "" : " (host)"),
                   start);
      }
    } catch (const std::bad_alloc&) {
      status = resourceExhausted("node '" + step.node + "': out of memory");
    } catch (const std::exception& e) {
      status = internalError("node '" + step.node + "': " + e.what());
    }
    if (!status.ok()) return status.withContext("step " + step.kernel_name + " (CUDA)");
    for (int index : step.last_use) values[static_cast<size_t>(index)] = Value();
  }
  return okStatus();
}

namespace {

int64_t bucketFor(int64_t batch) {
  int64_t bucket = 1;
  while (bucket < batch) bucket *= 2;
  return bucket;
}

// A decode step's input padded from `tokens` to `bucket` tokens along dim 1 ([1, tokens] ids),
// zeros after; other inputs as they are.
Tensor padTokens(const Tensor& t, int64_t tokens, int64_t bucket) {
  if (t.dtype() == DType::kUndefined || t.rank() != 2 || t.dim(0) != 1 || t.dim(1) != tokens) return t;
  Tensor padded = Tensor::allocate(t.dtype(), {1, bucket});
  std::memset(padded.data(), 0, padded.sizeBytes());
  std::memcpy(padded.data(), t.data(), t.sizeBytes());
  return padded;
}

}  // namespace

// A decode step (every sequence one new token) through its bucket's graph; *ran false when the
// step is not one or the bucket cannot be captured (the caller then runs it eagerly).
Status Executor::Impl::runGraph(std::vector<Tensor>& bound, LlmStepContext& step, bool* ran) {
  *ran = false;
  const int64_t tokens = static_cast<int64_t>(step.token_position.size());
  const int64_t items = static_cast<int64_t>(step.block_tables.size());
  if (!options.cuda_graphs || !step.cache || tokens < 1 || tokens != items ||
      static_cast<int64_t>(step.last_token.size()) != items)
    return okStatus();
  const KvCacheSpec& spec = step.cache->spec();
  const int64_t max_context = engine->llmConfig() && engine->llmConfig()->max_context > 0
                                  ? engine->llmConfig()->max_context
                                  : spec.num_blocks * spec.block_size;
  const int64_t table_width = std::min<int64_t>(spec.num_blocks, (max_context + spec.block_size - 1) / spec.block_size);
  for (int64_t t = 0; t < tokens; ++t)
    if (step.token_sequence[static_cast<size_t>(t)] != t || step.last_token[static_cast<size_t>(t)] != t ||
        static_cast<int64_t>(step.block_tables[static_cast<size_t>(t)].size()) > table_width)
      return okStatus();
  // Token ids outside the vocabulary run eagerly, where the embedding's CPU kernel reports them
  // (a replay checks nothing on the device).
  const int64_t vocab = engine->llmConfig() ? engine->llmConfig()->vocab_size : -1;
  for (const Tensor& t : bound) {
    if (t.rank() != 2 || t.dim(0) != 1 || t.dim(1) != tokens) continue;
    for (int64_t i = 0; i < tokens; ++i) {
      const int64_t id = t.dtype() == DType::kInt64 ? t.data<int64_t>()[i]
                         : t.dtype() == DType::kInt32 ? t.data<int32_t>()[i]
                                                      : 0;
      if (id < 0 || (vocab > 0 && id >= vocab)) return okStatus();
    }
  }
  const int64_t bucket = bucketFor(tokens);
  if (bucket > options.cuda_graph_max_batch) return okStatus();
  // Pools first: new ones drop every graph (they address the old pools).
  LLMC_RETURN_IF_ERROR(ensureKvPools(*step.cache));
  LLMC_RETURN_IF_ERROR(copyKvBlocks(*step.cache));
  std::unique_ptr<Graph>& slot = graphs[bucket];
  if (!slot) slot = std::make_unique<Graph>();
  Graph& graph = *slot;
  if (!graph.capturable) return okStatus();

  // The step padded to the bucket: padding token t is sequence t at position 0, its K/V in the
  // spare block (kvMetadata), its logits row computed and dropped.
  LlmStepContext padded;
  padded.cache = step.cache;
  padded.token_sequence = step.token_sequence;
  padded.token_position = step.token_position;
  padded.token_slot = step.token_slot;
  padded.block_tables = step.block_tables;
  padded.last_token = step.last_token;
  for (int64_t t = tokens; t < bucket; ++t) {
    padded.token_sequence.push_back(static_cast<int32_t>(t));
    padded.token_position.push_back(0);
    padded.token_slot.push_back(padded.token_slot.front());  // the device writes the spare block
    padded.block_tables.push_back({});
    padded.last_token.push_back(static_cast<int32_t>(t));
  }
  std::vector<Tensor> padded_bound(bound.size());
  for (size_t i = 0; i < bound.size(); ++i) padded_bound[i] = padTokens(bound[i], tokens, bucket);
  pad_tokens = tokens;
  graph_max_blocks = table_width;

  auto finish_mode = [&] {
    mode = Mode::kEager;
    capturing = nullptr;
    values.clear();
  };
  if (!graph.exec) {
    // Probe: the padded step eagerly, measuring what a capture needs.
    mode = Mode::kProbe;
    probe_scratch = probe_pinned = 0;
    probe_downloaded = false;
    grew = false;
    kv_step_ready = false;
    counts = RunCounts();
    bindValues(padded_bound);
    Status status = runSteps(&padded);
    Status sync = cudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize (graph probe)");
    for (void* p : scratch) cudaFreeAsync(p, stream);
    scratch.clear();
    finish_mode();
    pad_tokens = -1;
    LLMC_RETURN_IF_ERROR(sync);
    if (!status.ok() || probe_downloaded || counts.device_steps == 0) {
      graph.capturable = false;  // the eager run reports any error
      return okStatus();
    }
    if (grew) {
      // The padded step outgrew the arena: probe again in the grown one (once; its K/V writes
      // repeat the same values).
      LLMC_RETURN_IF_ERROR(layout());
      if (regrown) return okStatus();
      regrown = true;
      Status again = runGraph(bound, step, ran);
      regrown = false;
      return again;
    }
    graph.pool_bytes = probe_scratch;
    graph.pinned_bytes = probe_pinned;
    Status allocated;
    if (graph.pool_bytes) allocated = cudaStatus(cudaMalloc(&graph.pool, graph.pool_bytes), "cudaMalloc(graph scratch)");
    if (allocated.ok() && graph.pinned_bytes)
      allocated = cudaStatus(cudaHostAlloc(&graph.pinned, graph.pinned_bytes, cudaHostAllocDefault), "cudaHostAlloc(graph uploads)");
    if (!allocated.ok()) {  // no room for the graph: this bucket runs eagerly
      graph.capturable = false;
      return okStatus();
    }
    // Capture: the same loop, its scratch from the pool and its uploads through pinned memory.
    pad_tokens = tokens;
    mode = Mode::kCapture;
    capturing = &graph;
    pool_used = pinned_used = 0;
    kv_step_ready = false;
    counts = RunCounts();
    bindValues(padded_bound);
    cudaGraph_t captured = nullptr;
    status = cudaStatus(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    if (status.ok()) {
      status = runSteps(&padded);
      Status end = cudaStatus(cudaStreamEndCapture(stream, &captured), "cudaStreamEndCapture");
      if (status.ok()) status = end;
    }
    if (status.ok())
      status = cudaStatus(cudaGraphInstantiate(&graph.exec, captured, 0), "cudaGraphInstantiate");
    if (captured) cudaGraphDestroy(captured);
    if (status.ok()) {
      for (int output : plan->outputs) graph.outputs.push_back(values[static_cast<size_t>(output)].device);
      graph.device_steps = counts.device_steps;
    }
    if (!status.ok() || grew) {
      cudaGetLastError();  // a failed capture leaves no sticky error; clear the last one
      graph.capturable = false;
      if (graph.exec) cudaGraphExecDestroy(graph.exec);
      if (graph.pool) cudaFree(graph.pool);
      if (graph.pinned) cudaFreeHost(graph.pinned);
      graph.exec = nullptr, graph.pool = nullptr, graph.pinned = nullptr;
      finish_mode();
      pad_tokens = -1;
      return okStatus();
    }
    mode = Mode::kEager;
    capturing = nullptr;
    // The capture wrote this step's uploads into the pinned buffer: launch as is.
  } else {
    // Replay: the host steps again (their results feed the uploads), then the uploads refilled.
    auto replay_error = [&](Status status) {
      values.clear();
      pad_tokens = -1;
      return status;
    };
    counts = RunCounts();
    bindValues(padded_bound);
    for (size_t index : graph.host_steps) {
      const PlanStep& host_step = plan->steps[index];
      std::vector<const Tensor*> inputs(host_step.inputs.size(), nullptr);
      for (size_t i = 0; i < host_step.inputs.size(); ++i) {
        const int v = host_step.inputs[i];
        if (v < 0) continue;
        if (values[static_cast<size_t>(v)].host.dtype() == DType::kUndefined)
          return replay_error(internalError("CUDA graph replay: host step '" + host_step.node + "' lost an input"));
        inputs[i] = &values[static_cast<size_t>(v)].host;
      }
      KernelRun run = evaluateKernel(*host_step.kernel, host_step.params, inputs, host_step.outputs.size(),
                                     host_step.node, /*shape_only=*/false, &padded);
      if (!run.status.ok())
        return replay_error(run.status.withContext("step " + host_step.kernel_name + " (CUDA graph replay)"));
      for (size_t i = 0; i < run.outputs.size(); ++i)
        values[static_cast<size_t>(host_step.outputs[i])] = Value{std::move(run.outputs[i]), Tensor()};
    }
    for (const Upload& u : graph.uploads) {
      auto* staged = static_cast<std::byte*>(graph.pinned) + u.pinned_offset;
      if (u.value < 0) {
        int64_t max_blocks = 0;
        const std::vector<int32_t> meta = kvMetadata(padded, &max_blocks);
        if (meta.size() * sizeof(int32_t) != u.bytes)
          return replay_error(internalError("CUDA graph replay: the step metadata changed size"));
        std::memcpy(staged, meta.data(), u.bytes);
      } else {
        const Tensor& host = values[static_cast<size_t>(u.value)].host;
        if (host.sizeBytes() != u.bytes)
          return replay_error(internalError("CUDA graph replay: '" + plan->values[static_cast<size_t>(u.value)].name +
                                            "' changed size"));
        std::memcpy(staged, host.data(), u.bytes);
      }
    }
    counts.device_steps = graph.device_steps;
    counts.host_steps = static_cast<int64_t>(graph.host_steps.size());
  }
  pad_tokens = -1;
  LLMC_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph.exec, stream), "cudaGraphLaunch");
  counts.graph_replays = 1;
  // The outputs as the step's own rows: the first `tokens` of each padded [1, bucket, ...].
  for (size_t i = 0; i < plan->outputs.size(); ++i) {
    Tensor t = graph.outputs[i];
    if (t.dtype() == DType::kUndefined) continue;
    if (t.rank() >= 2 && t.dim(0) == 1 && t.dim(1) == bucket) {
      Shape shape = t.shape();
      shape[1] = tokens;
      t = Tensor::view(t.dtype(), shape, t.data());
    }
    values[static_cast<size_t>(plan->outputs[i])] = Value{Tensor(), t};
  }
  *ran = true;
  return okStatus();
}

Status Executor::run(std::vector<Tensor>& bound, LlmStepContext* llm_step,
                     std::vector<NamedTensor>* outputs) {
  Impl& impl = *impl_;
  const Plan& plan = *impl.plan;
  impl.counts = RunCounts();
  impl.grew = false;
  impl.kv_step_ready = false;
  bool graphed = false;
  Status status;
  const auto run_start = std::chrono::steady_clock::now();
  if (impl.profile) {
    const size_t tokens = llm_step ? llm_step->token_position.size() : 0;
    impl.profile_tag = !llm_step ? "run"
                       : tokens == llm_step->block_tables.size()
                           ? "decode x" + std::to_string(tokens)
                           : std::to_string(tokens) + " tokens";
  }
  if (llm_step) status = impl.runGraph(bound, *llm_step, &graphed);
  if (status.ok() && !graphed) {
    impl.counts = RunCounts();
    impl.grew = false;
    impl.kv_step_ready = false;
    impl.bindValues(bound);
    status = impl.runSteps(llm_step);
  }
  if (status.ok()) {
    outputs->clear();
    for (size_t i = 0; i < plan.outputs.size() && status.ok(); ++i) {
      if (llm_step && llm_step->sampling && i == llm_step->sampling->logits_output) {
        bool sampled = false;
        status = impl.sampleOnDevice(plan.outputs[i], *llm_step, &sampled);
        if (!status.ok()) break;
        if (sampled) {  // the logits stay on the device
          outputs->push_back({plan.output_infos[i].name, Tensor()});
          continue;
        }
      }
      const Tensor* host = nullptr;
      status = impl.onHost(plan.outputs[i], &host, false);
      if (status.ok()) outputs->push_back({plan.output_infos[i].name, host->clone()});
    }
  }
  // Kernel launches are asynchronous: a fault shows at the synchronization.
  Status sync = cudaStatus(cudaStreamSynchronize(impl.stream), "cudaStreamSynchronize (end of run)");
  if (status.ok()) status = sync;
  for (void* p : impl.scratch) cudaFreeAsync(p, impl.stream);
  impl.scratch.clear();
  impl.values.clear();
  if (status.ok() && impl.grew) {
    cudaStreamSynchronize(impl.stream);
    status = impl.layout();
  }
  if (impl.profile)
    impl.addProfile(graphed ? "(whole run, a CUDA graph's replay)" : "(whole run)", run_start);
  return status;
}

void Executor::Impl::printProfile() const {
  std::vector<std::pair<std::string, ProfileEntry>> rows(profile_ms.begin(), profile_ms.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::fprintf(
      stderr,
      "LLMC_CUDA_PROFILE: wall time by step kernel (each step waited for), whole runs first\n");
  std::fprintf(stderr, "%12s %10s %12s  %s\n", "total ms", "calls", "ms per call", "kernel  [run]");
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& [key, e] : rows)
      if ((key[0] == '(') == (pass == 0))
        std::fprintf(stderr, "%12.2f %10lld %12.4f  %s\n", e.ms, static_cast<long long>(e.calls),
                     e.ms / static_cast<double>(std::max<int64_t>(e.calls, 1)), key.c_str());
}

}  // namespace llmc::cuda

namespace llmc {
namespace {

// The CUDA executor behind core's BackendExecutor interface.
class CudaBackendExecutor final : public BackendExecutor {
 public:
  explicit CudaBackendExecutor(std::unique_ptr<cuda::Executor> executor)
      : executor_(std::move(executor)) {}
  Status run(std::vector<Tensor>& values, LlmStepContext* llm_step,
             std::vector<NamedTensor>* outputs) override {
    return executor_->run(values, llm_step, outputs);
  }
  uint64_t arenaBytes() const override { return executor_->arenaBytes(); }
  Session::StepCounts lastRun() const override {
    const cuda::RunCounts& counts = executor_->lastRun();
    return {counts.device_steps, counts.host_steps, counts.graph_replays > 0, counts.host_reads};
  }

 private:
  std::unique_ptr<cuda::Executor> executor_;
};

// Probes the device, checks the engine's target and uploads (or shares) its weights.
Status createCudaExecutor(std::shared_ptr<const Engine> engine, const SessionOptions& options,
                          std::unique_ptr<BackendExecutor>* out) {
  cuda::ExecutorOptions cuda_options;
  cuda_options.allow_tf32 = options.allow_tf32;
  cuda_options.weight_dtype = options.gpu_weight_dtype;
  cuda_options.cuda_graphs = options.cuda_graphs;
  cuda_options.cuda_graph_max_batch = options.cuda_graph_max_batch;
  std::unique_ptr<cuda::Executor> executor;
  LLMC_RETURN_IF_ERROR(cuda::Executor::create(std::move(engine), cuda_options, &executor));
  *out = std::make_unique<CudaBackendExecutor>(std::move(executor));
  return okStatus();
}

}  // namespace

// Registered through runtime/src/backends.cpp.
void registerCudaBackend() {
  BackendInfo info;
  info.kind = Backend::kCuda;
  info.name = "cuda";
  info.target = "cuda-";
  info.half_weights = true;
  info.samples_on_device = true;
  info.device_kv_dtype = DType::kFloat32;  // the device pools (docs/cuda.md)
  info.create = createCudaExecutor;
  registerBackend(info);
}

}  // namespace llmc
