// The kernel interface: what a CPU kernel sees (its inputs, parameters, and a way to
// allocate outputs) and the registry that maps kernel names in an engine to functions.
//
// Contract for every kernel:
//   1. Validate inputs and parameters; compute every output's dtype and shape.
//   2. Call ctx.allocateOutput() for each output, in order, before writing anything.
//   3. If ctx.shapeOnly(), return okStatus() right after allocating: the compiler calls
//      kernels this way to infer shapes, and outputs then have no data.
//   4. Compute.
// An optional input that is absent is a nullptr. An input whose values are needed to compute
// shapes (Reshape's shape, Slice's starts, ...) may lack data in shape-only mode; read such
// inputs with readInt64s(), which returns kUnavailable then.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "llmc/status.h"
#include "llmc/tensor.h"

namespace llmc {

struct LlmStepContext;  // a language-model step's ragged batch (core/step_context.h)
class ThreadPool;       // the session's threads (core/thread_pool.h)

// A kernel's typed parameters (ONNX attributes after the importer normalized them).
struct KernelParam {
  enum class Kind : uint8_t { kInt, kFloat, kString, kInts, kFloats, kTensor };
  Kind kind = Kind::kInt;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  Tensor tensor;  // kTensor: a view of engine weights
};

class KernelParams {
 public:
  void set(const std::string& name, KernelParam param) { params_[name] = std::move(param); }
  bool has(const std::string& name) const { return params_.count(name) != 0; }
  const std::map<std::string, KernelParam>& all() const { return params_; }

  int64_t getInt(const std::string& name, int64_t fallback) const;
  double getFloat(const std::string& name, double fallback) const;
  std::string getString(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> getInts(const std::string& name, std::vector<int64_t> fallback = {}) const;
  std::vector<double> getFloats(const std::string& name, std::vector<double> fallback = {}) const;
  // Null when absent or not a tensor.
  const Tensor* getTensor(const std::string& name) const;

 private:
  std::map<std::string, KernelParam> params_;
};

class KernelContext {
 public:
  virtual ~KernelContext() = default;

  virtual size_t numInputs() const = 0;
  // Null for an absent optional input (and for i >= numInputs()).
  virtual const Tensor* input(size_t i) const = 0;
  virtual size_t numOutputs() const = 0;
  // Allocates output i. In shape-only mode the tensor has a shape and no data.
  virtual Status allocateOutput(size_t i, DType dtype, const Shape& shape, Tensor** out) = 0;
  virtual const KernelParams& params() const = 0;
  // The ONNX node name, for error messages.
  virtual const std::string& nodeName() const = 0;
  virtual bool shapeOnly() const { return false; }
  // The ragged-batch context of a language-model step, or null (a plain run, or the
  // compiler): llm kernels then treat every batch row as one fresh sequence.
  virtual LlmStepContext* llmStep() const { return nullptr; }
  // The threads the kernel may split its work over (parallelFor in core/thread_pool.h), or
  // null: run on the caller alone. A kernel's result must not depend on it.
  virtual ThreadPool* threadPool() const { return nullptr; }
  // What a kernel derives from inputs that are engine weights (constant while the executor
  // lives), e.g. a weight repacked for this CPU's kernels: `build` makes it on the first call
  // for these inputs and `key`, and the executor keeps it for every later run. Null where one
  // of the inputs is not a weight (its data may change between runs; absent optional inputs do
  // not count) or the backend keeps nothing: the kernel then works from the inputs themselves,
  // with the same result.
  struct Derived {
    std::shared_ptr<const void> data;
    size_t bytes = 0;  // its memory, for Session::derivedWeightBytes()
  };
  virtual std::shared_ptr<const void> derivedFromWeights(
      std::initializer_list<size_t> inputs, const std::string& key,
      const std::function<Derived()>& build) const {
    return nullptr;
  }
};

using KernelFn = Status (*)(KernelContext& ctx);

struct KernelDef {
  const char* name;  // the op name the engine refers to, e.g. "Add", "MatMul"
  int min_inputs;
  int max_inputs;  // -1: variadic
  int min_outputs;
  int max_outputs;
  KernelFn fn;
};

class KernelRegistry {
 public:
  // The registry with every built-in CPU reference kernel.
  static const KernelRegistry& cpuReference();

  void add(const KernelDef& def) { kernels_[def.name] = def; }
  const KernelDef* find(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, KernelDef> kernels_;
};

// --- helpers shared by kernels ---------------------------------------------------------

// Reads an integer tensor (int32 or int64) as int64 values. kUnavailable when the tensor
// has no data (shape-only evaluation); kInvalidArgument for other dtypes.
Status readInt64s(const Tensor* tensor, std::vector<int64_t>* values);
// Reads a float-typed or integer scalar tensor as double.
Status readScalarDouble(const Tensor* tensor, double* value);
// Normalizes a possibly negative axis for a tensor of `rank`; kInvalidArgument when out
// of range. The message names the node.
Status normalizeAxis(int64_t axis, int64_t rank, const std::string& node, int64_t* out);
// Numpy-style multidirectional broadcast of two shapes.
Status broadcastShapes(const Shape& a, const Shape& b, const std::string& node, Shape* out);
// Row-major strides of `shape`.
std::vector<int64_t> stridesOf(const Shape& shape);
// The strides with which a tensor of `operand` shape is read at each index of `target`
// (numpy broadcasting, right-aligned; 0 along broadcast dims). An operand that does not
// broadcast is "node 'N': <what> <shape> does not broadcast to <target>".
Status broadcastStrides(const KernelContext& ctx, const std::string& what, const Shape& operand,
                        const Shape& target, std::vector<int64_t>* strides);
// One kernel run outside a session: by the compiler (shape inference, constant folding) and
// by `llmc refit` (weight recipes). Inputs may be null (absent); with shape_only the outputs
// have dtypes and shapes but no data. `llm_step` is the language-model step the kernel belongs
// to (the CUDA backend's shape queries and CPU fallbacks), or null. A full run splits its work
// over sharedThreadPool() (core/thread_pool.h).
struct KernelRun {
  Status status;
  std::vector<Tensor> outputs;
};
KernelRun evaluateKernel(const KernelDef& kernel, const KernelParams& params,
                         const std::vector<const Tensor*>& inputs, size_t num_outputs,
                         const std::string& node, bool shape_only,
                         LlmStepContext* llm_step = nullptr);

// Error helper: "node 'NAME': message".
Status kernelError(const KernelContext& ctx, const std::string& message);

// Each family file registers its kernels here (one line per family in kernel_table.cpp).
void registerElementwiseKernels(KernelRegistry& registry);
void registerReductionKernels(KernelRegistry& registry);
void registerMathKernels(KernelRegistry& registry);    // MatMul, Gemm, Einsum, norms, Softmax
void registerTensorKernels(KernelRegistry& registry);  // shape and data movement
void registerAttentionKernels(KernelRegistry& registry);  // ONNX Attention (opset 23)
void registerOrtContribKernels(KernelRegistry& registry);  // ONNX Runtime's contrib ops
void registerLlmKernels(KernelRegistry& registry);  // LlmAttention, LlmPositions, LlmLastTokens
// LlmFusedMatMul, LlmGatedMlp, LlmMoe, LlmNorm, LlmElementwise (cpu/fused.cpp)
void registerFusedKernels(KernelRegistry& registry);
// LlmQuantizeWeight, LlmQuantMatMul (cpu/quant_matmul.cpp)
void registerQuantKernels(KernelRegistry& registry);
void registerOnnxQuantKernels(KernelRegistry& registry);  // cpu/quant_onnx.cpp
void registerPruneKernels(
    KernelRegistry& registry);  // LlmPruneWeight, LlmSparsifyWeight (cpu/prune_weight.cpp)

}  // namespace llmc
