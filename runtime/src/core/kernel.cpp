// Kernel parameters, the kernel registry and helpers shared by kernels.
#include "core/kernel.h"

#include <algorithm>
#include <cmath>

#include "core/half.h"
#include "core/thread_pool.h"

namespace llmc {

int64_t KernelParams::getInt(const std::string& name, int64_t fallback) const {
  auto it = params_.find(name);
  if (it == params_.end()) return fallback;
  if (it->second.kind == KernelParam::Kind::kFloat) return static_cast<int64_t>(it->second.f);
  return it->second.i;
}

double KernelParams::getFloat(const std::string& name, double fallback) const {
  auto it = params_.find(name);
  if (it == params_.end()) return fallback;
  if (it->second.kind == KernelParam::Kind::kInt) return static_cast<double>(it->second.i);
  return it->second.f;
}

std::string KernelParams::getString(const std::string& name, const std::string& fallback) const {
  auto it = params_.find(name);
  return it == params_.end() ? fallback : it->second.s;
}

std::vector<int64_t> KernelParams::getInts(const std::string& name,
                                           std::vector<int64_t> fallback) const {
  auto it = params_.find(name);
  return it == params_.end() ? fallback : it->second.ints;
}

std::vector<double> KernelParams::getFloats(const std::string& name,
                                            std::vector<double> fallback) const {
  auto it = params_.find(name);
  return it == params_.end() ? fallback : it->second.floats;
}

const Tensor* KernelParams::getTensor(const std::string& name) const {
  auto it = params_.find(name);
  if (it == params_.end() || it->second.kind != KernelParam::Kind::kTensor) return nullptr;
  return &it->second.tensor;
}

const KernelRegistry& KernelRegistry::cpuReference() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    registerElementwiseKernels(r);
    registerReductionKernels(r);
    registerMathKernels(r);
    registerTensorKernels(r);
    registerAttentionKernels(r);
    registerOrtContribKernels(r);
    registerLlmKernels(r);
    registerFusedKernels(r);
    registerQuantKernels(r);
    registerOnnxQuantKernels(r);
    registerPruneKernels(r);
    return r;
  }();
  return registry;
}

const KernelDef* KernelRegistry::find(const std::string& name) const {
  auto it = kernels_.find(name);
  return it == kernels_.end() ? nullptr : &it->second;
}

std::vector<std::string> KernelRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, def] : kernels_) out.push_back(name);
  return out;
}

Status readInt64s(const Tensor* tensor, std::vector<int64_t>* values) {
  values->clear();
  if (!tensor) return invalidArgument("missing integer input");
  if (!tensor->hasData()) return unavailable("integer input not known at compile time");
  int64_t n = tensor->numElements();
  values->resize(static_cast<size_t>(n));
  if (tensor->dtype() == DType::kInt64) {
    for (int64_t i = 0; i < n; ++i) (*values)[i] = tensor->data<int64_t>()[i];
  } else if (tensor->dtype() == DType::kInt32) {
    for (int64_t i = 0; i < n; ++i) (*values)[i] = tensor->data<int32_t>()[i];
  } else {
    return invalidArgument(std::string("expected an int32 or int64 tensor, got ") +
                           dtypeName(tensor->dtype()));
  }
  return okStatus();
}

Status readScalarDouble(const Tensor* tensor, double* value) {
  if (!tensor) return invalidArgument("missing scalar input");
  if (!tensor->hasData()) return unavailable("scalar input not known at compile time");
  if (tensor->numElements() < 1) return invalidArgument("expected a scalar, got an empty tensor");
  const void* p = tensor->data();
  switch (tensor->dtype()) {
    case DType::kFloat32: *value = *static_cast<const float*>(p); break;
    case DType::kFloat64: *value = *static_cast<const double*>(p); break;
    case DType::kFloat16: *value = toFloat(*static_cast<const Float16*>(p)); break;
    case DType::kBFloat16: *value = toFloat(*static_cast<const BFloat16*>(p)); break;
    case DType::kInt64: *value = static_cast<double>(*static_cast<const int64_t*>(p)); break;
    case DType::kInt32: *value = *static_cast<const int32_t*>(p); break;
    case DType::kInt16: *value = *static_cast<const int16_t*>(p); break;
    case DType::kInt8: *value = *static_cast<const int8_t*>(p); break;
    case DType::kUInt8: *value = *static_cast<const uint8_t*>(p); break;
    case DType::kUInt16: *value = *static_cast<const uint16_t*>(p); break;
    case DType::kUInt32: *value = *static_cast<const uint32_t*>(p); break;
    case DType::kUInt64: *value = static_cast<double>(*static_cast<const uint64_t*>(p)); break;
    case DType::kBool: *value = *static_cast<const bool*>(p) ? 1 : 0; break;
    default: return invalidArgument("unsupported scalar dtype");
  }
  return okStatus();
}

Status normalizeAxis(int64_t axis, int64_t rank, const std::string& node, int64_t* out) {
  int64_t normalized = axis < 0 ? axis + rank : axis;
  if (normalized < 0 || normalized >= rank) {
    return invalidArgument("node '" + node + "': axis " + std::to_string(axis) +
                           " is out of range for a tensor of rank " + std::to_string(rank));
  }
  *out = normalized;
  return okStatus();
}

Status broadcastShapes(const Shape& a, const Shape& b, const std::string& node, Shape* out) {
  size_t rank = std::max(a.size(), b.size());
  Shape result(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db || db == 1) {
      result[i] = da;
    } else if (da == 1) {
      result[i] = db;
    } else {
      return invalidArgument("node '" + node + "': shapes " + shapeToString(a) + " and " +
                             shapeToString(b) + " do not broadcast");
    }
  }
  *out = std::move(result);
  return okStatus();
}

std::vector<int64_t> stridesOf(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

namespace {
class EvalContext : public KernelContext {
 public:
  EvalContext(const KernelParams& params, const std::vector<const Tensor*>& inputs,
              size_t num_outputs, const std::string& node, bool shape_only,
              LlmStepContext* llm_step)
      : params_(params), inputs_(inputs), outputs_(num_outputs), node_(node),
        shape_only_(shape_only), llm_step_(llm_step) {}

  size_t numInputs() const override { return inputs_.size(); }
  const Tensor* input(size_t i) const override { return i < inputs_.size() ? inputs_[i] : nullptr; }
  size_t numOutputs() const override { return outputs_.size(); }
  Status allocateOutput(size_t i, DType dtype, const Shape& shape, Tensor** out) override {
    if (i >= outputs_.size())
      return internalError("node '" + node_ + "': output index out of range");
    for (int64_t d : shape)
      if (d < 0)
        return invalidArgument("node '" + node_ + "': negative dimension in " + shapeToString(shape));
    outputs_[i] = shape_only_ ? Tensor::view(dtype, shape, static_cast<void*>(nullptr))
                              : Tensor::allocate(dtype, shape);
    *out = &outputs_[i];
    return okStatus();
  }
  const KernelParams& params() const override { return params_; }
  const std::string& nodeName() const override { return node_; }
  bool shapeOnly() const override { return shape_only_; }
  LlmStepContext* llmStep() const override { return llm_step_; }
  ThreadPool* threadPool() const override { return shape_only_ ? nullptr : sharedThreadPool(); }
  std::vector<Tensor> takeOutputs() { return std::move(outputs_); }

 private:
  const KernelParams& params_;
  const std::vector<const Tensor*>& inputs_;
  std::vector<Tensor> outputs_;
  const std::string& node_;
  bool shape_only_;
  LlmStepContext* llm_step_;
};
}  // namespace

KernelRun evaluateKernel(const KernelDef& kernel, const KernelParams& params,
                         const std::vector<const Tensor*>& inputs, size_t num_outputs,
                         const std::string& node, bool shape_only,
                         LlmStepContext* llm_step) {
  EvalContext ctx(params, inputs, num_outputs, node, shape_only, llm_step);
  KernelRun run;
  run.status = kernel.fn(ctx);
  run.outputs = ctx.takeOutputs();
  if (run.status.ok())
    for (size_t i = 0; i < run.outputs.size(); ++i)
      if (run.outputs[i].dtype() == DType::kUndefined)
        run.status = internalError("node '" + node + "': kernel " + kernel.name +
                                   " did not produce output " + std::to_string(i));
  return run;
}

Status broadcastStrides(const KernelContext& ctx, const std::string& what, const Shape& operand,
                        const Shape& target, std::vector<int64_t>* strides) {
  strides->assign(target.size(), 0);
  const std::vector<int64_t> own = stridesOf(operand);
  if (operand.size() > target.size())
    return kernelError(ctx, what + " " + shapeToString(operand) + " does not broadcast to " + shapeToString(target));
  const size_t lead = target.size() - operand.size();
  for (size_t d = 0; d < operand.size(); ++d) {
    if (operand[d] != 1 && operand[d] != target[lead + d])
      return kernelError(ctx, what + " " + shapeToString(operand) + " does not broadcast to " + shapeToString(target));
    (*strides)[lead + d] = operand[d] == 1 ? 0 : own[d];
  }
  return okStatus();
}

Status kernelError(const KernelContext& ctx, const std::string& message) {
  return invalidArgument("node '" + ctx.nodeName() + "': " + message);
}

}  // namespace llmc
