// The mask proof. Evaluating a mask at a handful of lengths proves nothing about the others
// (a sliding window only shows past its width), and evaluating it at every length up to the
// context costs context³. Instead the proof has two steps:
//
// 1. Prefix consistency, by a pass over the mask's subgraph: every value is classified as
//    invariant (the same tensor at every length n), a shape vector (small integer vectors
//    whose elements are affine in n and the batch size: what Shape, Gather, Concat, Add...
//    compute), or prefix data (a tensor whose element at a given index is the same at every n
//    where that index exists: Range(0, n), ConstantOfShape, Trilu, comparisons of such
//    tensors...). Each op has a rule saying which classes its operands may have; an op
//    without a rule, or a length-dependent value reaching a value-changing operand (a
//    comparison with n - W, a slice starting at n - k), refuses the proof, naming the node.
//    A mask that is prefix data is, at every length n <= L, the top-left n x n corner of the
//    mask at length L.
// 2. One evaluation at L = the context (or less, where the model's own buffers cap lengths,
//    found from the affine clamps in step 1), checked element by element: causal, or causal
//    within a window of W keys; anything else is refused.
#include "transforms/MaskProof.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "core/kernel.h"
#include "llm/IR/LLMOps.h"
#include "nn/IR/NNOps.h"
#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"

using namespace mlir;

namespace llmc {
namespace {

// A masked position's additive bias must be at most this (exporters use -inf, the float
// type's lowest value, or -1e9/-1e4).
constexpr double kMaskedBias = -1e4;
// The proof evaluates the mask once at the context: [context, context] elements per
// intermediate tensor. Past this length that memory is refused rather than spent.
constexpr int64_t kMaxProofLength = 16384;
// From this proof length on, a ScatterND's index grid is proven from how it is built where it
// can be (Prover::identityGridByConstruction, which reads shapes at lengths 3 and 7) instead of
// evaluated; below it the evaluation costs nothing worth saving.
constexpr int64_t kGridByConstructionLength = 16;

// Evaluates a shape/mask subgraph with the runtime's kernels for concrete inputs. Operands
// of Shape/Size are evaluated shape-only (so a mask sliced to K's length does not compute
// K), and so are float operands of anything evaluated shape-only.
class SubgraphEvaluator {
 public:
  explicit SubgraphEvaluator(std::map<unsigned, Tensor> args) : args_(std::move(args)) {}

  // The value of `v` (with data when `need_data`), or an error naming what could not be
  // evaluated.
  Status evaluate(Value v, bool need_data, const Tensor** out) {
    auto it = values_.find(v);
    if (it != values_.end() && (!need_data || it->second.hasData())) {
      *out = &it->second;
      return okStatus();
    }
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      auto a = args_.find(arg.getArgNumber());
      if (a == args_.end())
        return unimplemented("the mask depends on model input " +
                             std::to_string(arg.getArgNumber()) +
                             ", which only input_ids, attention_mask and position_ids may");
      values_[v] = a->second;
      *out = &values_[v];
      return okStatus();
    }
    Operation* op = v.getDefiningOp();
    if (auto constant = dyn_cast<nn::ConstantOp>(op)) {
      values_[v] = tensorFromElements(constant.getValue());
      *out = &values_[v];
      return okStatus();
    }
    if (pasted_.count(op)) return evaluatePaste(op, need_data, out);
    const KernelDef* kernel = KernelRegistry::cpuReference().find(kernelNameOf(op));
    if (!kernel || (need_data && isa<llm::AttentionOp>(op)))
      return unimplemented(where(op) + " cannot be evaluated at compile time");
    bool sizes_only = isOp(op, "nn.shape") || isOp(op, "nn.size");
    // The operands are held here (Tensor copies share their storage): evaluating a later
    // operand may release an earlier one from values_ (an op evaluated shape-only and then
    // with data counts its operands' uses twice), which must not free what this op reads.
    std::vector<std::optional<Tensor>> held;
    for (Value operand : op->getOperands()) {
      if (isa<NoneType>(operand.getType())) {
        held.push_back(std::nullopt);
        continue;
      }
      bool is_float = false;
      if (auto type = dyn_cast<ShapedType>(operand.getType()))
        is_float = isa<FloatType>(type.getElementType());
      bool operand_data = sizes_only ? false : need_data || !is_float;
      const Tensor* t = nullptr;
      LLMC_RETURN_IF_ERROR(evaluate(operand, operand_data, &t));
      held.push_back(*t);
    }
    std::vector<const Tensor*> inputs;
    for (const std::optional<Tensor>& t : held) inputs.push_back(t ? &*t : nullptr);
    KernelParams params;
    LLMC_RETURN_IF_ERROR(paramsFromAttributes(op->getAttrs(), &params));
    if (need_data && isOp(op, "nn.slice") && inputs[0]) {
      // A Slice that keeps every element in order (a layer's slice of the model's mask to the
      // keys' length, which is the mask's) is its input, not a copy of it.
      KernelRun shape = evaluateKernel(*kernel, params, inputs, 1, nodeNameOf(op), true);
      LLMC_RETURN_IF_ERROR(shape.status);
      if (shape.outputs[0].shape() == inputs[0]->shape() && unitSteps(inputs)) {
        values_[op->getResult(0)] = *inputs[0];
        release(op);
        *out = &values_[v];
        return okStatus();
      }
    }
    KernelRun run = evaluateKernel(*kernel, params, inputs, op->getNumResults(), nodeNameOf(op),
                                   /*shape_only=*/!need_data && !sizes_only);
    LLMC_RETURN_IF_ERROR(run.status);
    for (unsigned i = 0; i < op->getNumResults(); ++i)
      values_[op->getResult(i)] = std::move(run.outputs[i]);
    // Releasing: an operand every user of which has run is dropped (the cache only saves
    // work, so an early drop costs a recomputation, never a wrong value: callers hold copies).
    release(op);
    *out = &values_[v];
    return okStatus();
  }

  // Counts each operand use of the ops that compute `roots` and were not counted before. A
  // value is kept until every counted op that reads it has run, so what several roots share
  // (a model's one mask, sliced per layer) is evaluated once for all of them, and what only
  // roots already proven read is dropped.
  void expect(llvm::ArrayRef<Value> roots) {
    std::vector<Operation*> work;
    for (Value root : roots)
      if (Operation* op = root.getDefiningOp()) work.push_back(op);
    while (!work.empty()) {
      Operation* op = work.back();
      work.pop_back();
      if (!counted_.insert(op).second) continue;
      for (Value operand : op->getOperands()) {
        ++remaining_uses_[operand];
        if (Operation* def = operand.getDefiningOp()) work.push_back(def);
      }
    }
  }

  // evaluate(root, true, out), keeping only the values still needed (expect): the mask at the
  // full context has [context, context] elements per intermediate. `out` may be released by a
  // later evaluation: callers keep a copy.
  Status evaluateReleasing(Value root, const Tensor** out) {
    expect(root);
    root_ = root;
    Status status = evaluate(root, true, out);
    root_ = Value();
    return status;
  }

  void forget(Value v) { values_.erase(v); }

  // ScatterND `op`, whose indices are proven the identity grid by how they are built
  // (Prover::identityGridByConstruction), is evaluated as what it then computes: `updates`
  // written over the box of the same shape at the origin of a copy of `data`. Its indices,
  // context² index tuples, are never built.
  void pasteScatter(Operation* op) { pasted_.insert(op); }

 private:
  Status evaluatePaste(Operation* op, bool need_data, const Tensor** out) {
    const Tensor* data = nullptr;
    LLMC_RETURN_IF_ERROR(evaluate(op->getOperand(0), false, &data));
    Tensor base = *data;  // held: evaluating the updates may release it from values_
    Tensor result = Tensor::view(base.dtype(), base.shape(), static_cast<void*>(nullptr));
    if (need_data) {
      const Tensor* updates_value = nullptr;
      LLMC_RETURN_IF_ERROR(evaluate(op->getOperand(2), true, &updates_value));
      const Tensor updates = *updates_value;
      if (updates.dtype() != base.dtype() || updates.rank() != base.rank() || base.rank() == 0)
        return unimplemented(where(op) + ": updates " + shapeToString(updates.shape()) +
                             " do not fit data " + shapeToString(base.shape()));
      for (int64_t a = 0; a < base.rank(); ++a)
        if (updates.dim(a) > base.dim(a))
          return unimplemented(where(op) + ": updates " + shapeToString(updates.shape()) +
                               " do not fit data " + shapeToString(base.shape()));
      if (updates.shape() == base.shape()) {
        // The box is all of the data (a mask written over its whole buffer): nothing of the
        // data survives, so it is never computed.
        values_[op->getResult(0)] = updates;
        release(op);
        *out = &values_[op->getResult(0)];
        return okStatus();
      }
      LLMC_RETURN_IF_ERROR(evaluate(op->getOperand(0), true, &data));
      base = *data;
      result = base.clone();
      // Row by row of the last axis: row r of the updates (its multi-index over the leading
      // axes) lands on the row of `result` with the same multi-index.
      const int64_t rank = base.rank(), width = updates.dim(rank - 1);
      const size_t element = dtypeSize(base.dtype());
      const int64_t rows = width == 0 ? 0 : updates.numElements() / width;
      for (int64_t r = 0; r < rows; ++r) {
        int64_t rest = r, offset = 0, stride = base.dim(rank - 1);
        for (int64_t a = rank - 2; a >= 0; --a) {
          offset += (rest % updates.dim(a)) * stride;
          rest /= updates.dim(a);
          stride *= base.dim(a);
        }
        std::memcpy(static_cast<uint8_t*>(result.data()) + offset * element,
                    static_cast<const uint8_t*>(updates.data()) + r * width * element,
                    static_cast<size_t>(width) * element);
      }
    }
    values_[op->getResult(0)] = std::move(result);
    release(op);
    *out = &values_[op->getResult(0)];
    return okStatus();
  }

  // Whether a Slice's steps (operand 4, 1 where absent) are all 1.
  static bool unitSteps(const std::vector<const Tensor*>& inputs) {
    if (inputs.size() < 5 || !inputs[4]) return true;
    std::vector<int64_t> steps;
    return readInt64s(inputs[4], &steps).ok() &&
           std::all_of(steps.begin(), steps.end(), [](int64_t step) { return step == 1; });
  }

  // Drops each operand of `op` (which has run) that every counted user has now read.
  void release(Operation* op) {
    for (Value operand : op->getOperands()) {
      auto count = remaining_uses_.find(operand);
      if (count != remaining_uses_.end() && --count->second <= 0 && operand != root_)
        values_.erase(operand);
    }
  }

  llvm::DenseSet<Operation*> pasted_;
  llvm::DenseSet<Operation*> counted_;
  llvm::DenseMap<Value, int64_t> remaining_uses_;
  Value root_;
  std::map<unsigned, Tensor> args_;
  // Node-based: pointers handed out stay valid while more values are added.
  struct ValueHash {
    size_t operator()(Value v) const { return std::hash<void*>()(v.getAsOpaquePointer()); }
  };
  std::unordered_map<Value, Tensor, ValueHash> values_;
};

double elementAsDouble(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32: return t.data<float>()[i];
    case DType::kFloat64: return t.data<double>()[i];
    case DType::kBool: return t.data<uint8_t>()[i] ? 1.0 : 0.0;
    case DType::kInt64: return static_cast<double>(t.data<int64_t>()[i]);
    case DType::kInt32: return t.data<int32_t>()[i];
    default: return std::nan("");
  }
}

// An element as an integer, exactly: nothing where it is a float with a fraction or outside
// int64 (a double's integers stop being exact at 2^53, and INT64_MAX, an exporter's "to the
// end", is not a double).
std::optional<int64_t> elementAsInt64(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kInt64: return t.data<int64_t>()[i];
    case DType::kInt32: return t.data<int32_t>()[i];
    case DType::kBool: return t.data<uint8_t>()[i] ? 1 : 0;
    default: break;
  }
  const double value = elementAsDouble(t, i);
  // [-2^63, 2^63): the doubles that convert to int64 without overflow.
  if (!(value >= -0x1p63 && value < 0x1p63) || value != std::trunc(value)) return std::nullopt;
  return static_cast<int64_t>(value);
}

// c0 + cn * n + cb * b, over the sequence length n and the batch size b (both >= 1). The
// arithmetic is exact or gives nothing: a model's INT64_MAX ("to the end") plus one is not a
// form the proof follows, and must not wrap into one.
struct Affine {
  int64_t c0 = 0, cn = 0, cb = 0;
  bool invariant() const { return cn == 0 && cb == 0; }
  std::optional<Affine> plus(const Affine& o) const {
    Affine r;
    if (__builtin_add_overflow(c0, o.c0, &r.c0) || __builtin_add_overflow(cn, o.cn, &r.cn) ||
        __builtin_add_overflow(cb, o.cb, &r.cb))
      return std::nullopt;
    return r;
  }
  std::optional<Affine> minus(const Affine& o) const {
    Affine r;
    if (__builtin_sub_overflow(c0, o.c0, &r.c0) || __builtin_sub_overflow(cn, o.cn, &r.cn) ||
        __builtin_sub_overflow(cb, o.cb, &r.cb))
      return std::nullopt;
    return r;
  }
  std::optional<Affine> times(int64_t k) const {
    Affine r;
    if (__builtin_mul_overflow(c0, k, &r.c0) || __builtin_mul_overflow(cn, k, &r.cn) ||
        __builtin_mul_overflow(cb, k, &r.cb))
      return std::nullopt;
    return r;
  }
  // The sign of the value for every n, b >= 1: +1, -1, 0 (always zero) or nothing.
  std::optional<int> sign() const {
    if (invariant()) return c0 > 0 ? 1 : c0 < 0 ? -1 : 0;
    int64_t at_one = 0;
    if (__builtin_add_overflow(c0, cn, &at_one) || __builtin_add_overflow(at_one, cb, &at_one))
      return std::nullopt;
    if (cn >= 0 && cb >= 0 && at_one > 0) return 1;
    if (cn <= 0 && cb <= 0 && at_one < 0) return -1;
    return std::nullopt;
  }
};
using Elements = std::vector<std::optional<Affine>>;  // nothing: not affine

enum class Kind {
  kInvariant,  // the same tensor at every length
  kShape,      // a small integer vector, affine in n and b (some element depends on them)
  kPrefix,     // data whose element at an index does not depend on n
};
struct Abstract {
  Kind kind = Kind::kInvariant;
  std::optional<Elements> elements;  // kShape always; kInvariant when a small integer tensor
};

bool isElementwise(Operation* op) {
  static const std::set<std::string> kNames = {
      "nn.add", "nn.sub", "nn.mul", "nn.div", "nn.pow", "nn.mod", "nn.equal", "nn.less",
      "nn.greater", "nn.less_or_equal", "nn.greater_or_equal", "nn.and", "nn.or", "nn.not",
      "nn.xor", "nn.where", "nn.cast", "nn.cast_like", "nn.neg", "nn.abs", "nn.min", "nn.max",
      "nn.sqrt", "nn.exp", "nn.log", "nn.clip", "nn.identity", "nn.sign", "nn.floor", "nn.ceil",
      "nn.round", "nn.reciprocal", "nn.is_nan", "nn.is_inf", "nn.bitwise_and", "nn.bitwise_or",
      "nn.bitwise_xor", "nn.bitwise_not", "nn.tanh", "nn.sigmoid", "nn.erf", "nn.relu"};
  return kNames.count(op->getName().getStringRef().str()) > 0;
}

class Prover {
 public:
  Prover(func::FuncOp func, StringRef batch_symbol, StringRef seq_symbol)
      : func_(func), batch_(batch_symbol.str()), seq_(seq_symbol.str()) {}

  // The largest length at which the model's own clamps keep the analysis exact.
  int64_t bound() const { return bound_; }

  // Classifies `v`; on failure returns false with error() naming the node.
  bool classify(Value v, Abstract* out) {
    auto it = memo_.find(v);
    if (it != memo_.end()) {
      *out = it->second;
      return true;
    }
    if (!classifyUncached(v, out)) return false;
    memo_[v] = *out;
    return true;
  }

  const std::string& error() const { return error_; }

  // The evaluator for batch size `batch` and length `n` (inputs as the engine's tokens give
  // them: attention_mask ones, position_ids 0..n-1, input_ids zeros).
  SubgraphEvaluator& evaluatorAt(int64_t batch, int64_t n) {
    auto key = std::make_pair(batch, n);
    auto it = evaluators_.find(key);
    if (it != evaluators_.end()) return *it->second;
    Block& body = func_.getBody().front();
    std::map<unsigned, Tensor> args;
    for (BlockArgument arg : body.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!type || type.getRank() != 2 || !type.getElementType().isIntOrIndex()) continue;
      std::string name = argName(arg);
      if (name != "input_ids" && name != "attention_mask" && name != "position_ids") continue;
      DType dtype = dtypeFromMlir(type.getElementType());
      Tensor t = Tensor::allocate(dtype, {batch, n});
      for (int64_t r = 0; r < batch; ++r) {
        for (int64_t c = 0; c < n; ++c) {
          int64_t value = name == "attention_mask" ? 1 : name == "position_ids" ? c : 0;
          if (dtype == DType::kInt64)
            t.data<int64_t>()[r * n + c] = value;
          else
            t.data<int32_t>()[r * n + c] = static_cast<int32_t>(value);
        }
      }
      args[arg.getArgNumber()] = std::move(t);
    }
    auto& slot = evaluators_[key];
    slot = std::make_unique<SubgraphEvaluator>(std::move(args));
    return *slot;
  }

  // Of the ops whose acceptance rests on a property of their values at the proof length
  // (ScatterND whose indices must be the identity grid), those that compute `root`.
  std::vector<Operation*> scattersUnder(Value root) const {
    std::vector<Operation*> found, work;
    llvm::DenseSet<Operation*> seen;
    if (Operation* op = root.getDefiningOp()) work.push_back(op);
    while (!work.empty()) {
      Operation* op = work.back();
      work.pop_back();
      if (!seen.insert(op).second) continue;
      if (std::find(scatters_.begin(), scatters_.end(), op) != scatters_.end()) found.push_back(op);
      for (Value operand : op->getOperands())
        if (Operation* def = operand.getDefiningOp()) work.push_back(def);
    }
    return found;
  }

  // What checking a ScatterND at a length found (checkScatters), kept for the proofs after.
  struct ScatterVerdict {
    std::string error, note;
  };
  std::map<std::pair<Operation*, int64_t>, ScatterVerdict>& scatterVerdicts() {
    return scatter_verdicts_;
  }

  // Whether ScatterND `op`'s indices are the identity grid at every length (batch 1) by how
  // they are built: a Concat along the last axis of k parts, each of last size 1, part m
  // the index along axis m, and k the rank of the data (transformers' exports build it from
  // Range(0, .., 1) through Cast, Unsqueeze, Reshape and Expand). False proves nothing: the
  // caller then evaluates the grid at the proof length.
  bool identityGridByConstruction(Operation* op) {
    Value indices = op->getOperand(1);
    auto type = dyn_cast<RankedTensorType>(indices.getType());
    auto data_type = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
    if (!type || !data_type || type.getRank() < 2 || type.isDynamicDim(type.getRank() - 1))
      return false;
    const int64_t k = type.getRank() - 1;
    Operation* concat = indices.getDefiningOp();
    if (type.getDimSize(k) != k || data_type.getRank() != k || !concat ||
        concat->getName().getStringRef() != "nn.concat" || concat->getNumOperands() != k)
      return false;
    auto axis = concat->getAttrOfType<IntegerAttr>("axis");
    if (!axis || (axis.getInt() != k && axis.getInt() != -1)) return false;
    // The updates fill the grid's box (as ScatterND requires; the paste relies on it).
    auto grid = shapesAt(indices);
    auto updates = shapesAt(op->getOperand(2));
    if (!grid || !updates) return false;
    for (size_t i = 0; i < 2; ++i)
      if (Shape((*grid)[i].begin(), (*grid)[i].end() - 1) != (*updates)[i]) return false;
    for (int64_t m = 0; m < k; ++m) {
      Value part = concat->getOperand(static_cast<unsigned>(m));
      auto sizes = shapesAt(part);
      std::optional<IndexForm> form = indexForm(part);
      if (!sizes || !form || (*sizes)[0].size() != static_cast<size_t>(k + 1) ||
          (*sizes)[0][k] != 1 || (*sizes)[1][k] != 1 || form->c != 0)
        return false;
      for (int64_t a = 0; a < k; ++a) {
        if ((*grid)[0][a] == 1 && (*grid)[1][a] == 1) continue;  // index 0 there, any weight
        if (form->w[static_cast<size_t>(a)] != (a == m ? 1 : 0)) return false;
      }
    }
    return true;
  }

 private:
  func::FuncOp func_;
  std::string batch_, seq_;
  int64_t bound_ = std::numeric_limits<int64_t>::max();
  std::string error_;
  llvm::DenseMap<Value, Abstract> memo_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<SubgraphEvaluator>> evaluators_;
  std::vector<Operation*> scatters_;
  std::map<std::pair<Operation*, int64_t>, ScatterVerdict> scatter_verdicts_;

  std::string argName(BlockArgument arg) {
    auto name = func_.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "llmc.name");
    return name ? name.getValue().str() : "";
  }

  // v's element at every index i (batch 1, every length): c + sum over axes a of w[a] * i[a].
  struct IndexForm {
    int64_t c = 0;
    std::vector<int64_t> w;
  };

  // v's shape at batch 1 and lengths 3 and 7. Its dims are affine in the length (as the
  // reshape rule relies on), so two that agree at both agree at every length.
  std::optional<std::array<Shape, 2>> shapesAt(Value v) {
    std::array<Shape, 2> shapes;
    const int64_t lengths[2] = {3, 7};
    for (int i = 0; i < 2; ++i) {
      const Tensor* t = nullptr;
      if (!evaluatorAt(1, lengths[i]).evaluate(v, false, &t).ok()) return std::nullopt;
      shapes[static_cast<size_t>(i)] = t->shape();
    }
    return shapes;
  }

  // A small integer constant (what constant folding leaves of Range(0, 1) reshaped) as an
  // IndexForm, when every element fits one: c the first element, w[a] the step along axis a.
  std::optional<IndexForm> constantForm(nn::ConstantOp constant, size_t rank) {
    const Tensor t = tensorFromElements(constant.getValue());
    if (t.rank() != static_cast<int64_t>(rank) || t.numElements() == 0 || t.numElements() > 4096)
      return std::nullopt;
    IndexForm form{0, std::vector<int64_t>(rank, 0)};
    // Elements within 2^31, so that the steps and sums below stay far inside int64.
    auto at = [&](int64_t i) -> std::optional<int64_t> {
      std::optional<int64_t> value = elementAsInt64(t, i);
      if (!value || *value < -(int64_t{1} << 31) || *value > (int64_t{1} << 31))
        return std::nullopt;
      return value;
    };
    auto first = at(0);
    if (!first) return std::nullopt;
    form.c = *first;
    int64_t stride = 1;
    for (int64_t a = static_cast<int64_t>(rank) - 1; a >= 0; --a) {
      if (t.dim(a) > 1) {
        auto next = at(stride);
        if (!next) return std::nullopt;
        form.w[static_cast<size_t>(a)] = *next - form.c;
      }
      stride *= t.dim(a);
    }
    for (int64_t i = 0; i < t.numElements(); ++i) {
      int64_t rest = i, want = form.c;
      for (int64_t a = static_cast<int64_t>(rank) - 1; a >= 0; --a) {
        want += form.w[static_cast<size_t>(a)] * (rest % t.dim(a));
        rest /= t.dim(a);
      }
      if (at(i) != want) return std::nullopt;
    }
    return form;
  }

  // The values of an invariant integer operand (starts, steps, axes).
  std::optional<std::vector<int64_t>> constantsOf(Value v) {
    Abstract a;
    if (!classify(v, &a)) return std::nullopt;
    return constants(a);
  }

  // The one value of an invariant integer operand.
  std::optional<int64_t> invariantScalar(Value v) {
    auto values = constantsOf(v);
    if (!values || values->size() != 1) return std::nullopt;
    return (*values)[0];
  }

  // v as an IndexForm, from Range(start, .., delta) with invariant start and delta through
  // integer Cast, Identity, Unsqueeze, Reshape that only adds or drops unit axes, and Expand;
  // nothing for anything else.
  std::optional<IndexForm> indexForm(Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    Operation* op = v.getDefiningOp();
    if (!type || !type.getElementType().isIntOrIndex() || !op) return std::nullopt;
    const size_t rank = static_cast<size_t>(type.getRank());
    StringRef name = op->getName().getStringRef();
    if (auto constant = dyn_cast<nn::ConstantOp>(op)) return constantForm(constant, rank);
    if (name == "nn.range") {
      auto start = invariantScalar(op->getOperand(0));
      auto delta = invariantScalar(op->getOperand(2));
      if (!start || !delta || rank != 1) return std::nullopt;
      return IndexForm{*start, {*delta}};
    }
    if (op->getNumOperands() == 0) return std::nullopt;
    Value x = op->getOperand(0);
    auto x_type = dyn_cast<RankedTensorType>(x.getType());
    if (!x_type || !x_type.getElementType().isIntOrIndex()) return std::nullopt;
    const size_t x_rank = static_cast<size_t>(x_type.getRank());
    std::optional<IndexForm> from = indexForm(x);
    if (!from || from->w.size() != x_rank) return std::nullopt;
    if (name == "nn.cast" || name == "nn.identity") {
      if (x_rank != rank) return std::nullopt;
      return from;
    }
    IndexForm form{from->c, std::vector<int64_t>(rank, 0)};
    if (name == "nn.slice") {
      // Index i along a sliced axis reads x at start + i * step (starts from the front).
      if (x_rank != rank || op->getNumOperands() < 3) return std::nullopt;
      auto operandConstants = [&](unsigned i) -> std::optional<std::vector<int64_t>> {
        if (i >= op->getNumOperands() || isa<NoneType>(op->getOperand(i).getType()))
          return std::vector<int64_t>{};
        return constantsOf(op->getOperand(i));
      };
      auto starts = operandConstants(1);
      auto axes = operandConstants(3);
      auto steps = operandConstants(4);
      if (!starts || !axes || !steps || (!axes->empty() && axes->size() != starts->size()) ||
          (!steps->empty() && steps->size() != starts->size()))
        return std::nullopt;
      form.w = from->w;
      for (size_t i = 0; i < starts->size(); ++i) {
        int64_t axis = axes->empty() ? static_cast<int64_t>(i) : (*axes)[i];
        if (axis < 0) axis += static_cast<int64_t>(rank);
        const int64_t start = (*starts)[i], step = steps->empty() ? 1 : (*steps)[i];
        if (axis < 0 || axis >= static_cast<int64_t>(rank) || start < 0 || step < 1)
          return std::nullopt;
        form.c += from->w[static_cast<size_t>(axis)] * start;
        form.w[static_cast<size_t>(axis)] = from->w[static_cast<size_t>(axis)] * step;
      }
      return form;
    }
    if (name == "nn.unsqueeze") {
      if (op->getNumOperands() < 2) return std::nullopt;
      auto axes = constantsOf(op->getOperand(1));
      if (!axes) return std::nullopt;
      std::vector<bool> inserted(rank, false);
      for (int64_t axis : *axes) {
        int64_t at = axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
        if (at < 0 || at >= static_cast<int64_t>(rank) || inserted[static_cast<size_t>(at)])
          return std::nullopt;
        inserted[static_cast<size_t>(at)] = true;
      }
      size_t next = 0;
      for (size_t a = 0; a < rank; ++a)
        if (!inserted[a]) form.w[a] = next < x_rank ? from->w[next++] : 0;
      if (next != x_rank) return std::nullopt;
      return form;
    }
    auto x_shapes = shapesAt(x);
    auto shapes = shapesAt(v);
    if (!x_shapes || !shapes) return std::nullopt;
    if (name == "nn.reshape") {
      // Only unit axes come or go: the k-th axis of x that is not 1 becomes the k-th of v.
      for (size_t i = 0; i < 2; ++i) {
        std::vector<size_t> kept_x, kept_v;
        for (size_t a = 0; a < x_rank; ++a)
          if ((*x_shapes)[i][a] != 1) kept_x.push_back(a);
        for (size_t a = 0; a < rank; ++a)
          if ((*shapes)[i][a] != 1) kept_v.push_back(a);
        if (kept_x.size() != kept_v.size()) return std::nullopt;
        for (size_t j = 0; j < kept_x.size(); ++j)
          if ((*x_shapes)[i][kept_x[j]] != (*shapes)[i][kept_v[j]]) return std::nullopt;
        if (i == 1) {
          for (size_t j = 0; j < kept_x.size(); ++j) form.w[kept_v[j]] = from->w[kept_x[j]];
          // An axis of x that is 1 at both lengths but not at every one would be lost here.
          for (size_t a = 0; a < x_rank; ++a)
            if (((*x_shapes)[0][a] == 1) != ((*x_shapes)[1][a] == 1)) return std::nullopt;
          for (size_t a = 0; a < rank; ++a)
            if (((*shapes)[0][a] == 1) != ((*shapes)[1][a] == 1)) return std::nullopt;
        }
      }
      return form;
    }
    if (name == "nn.expand") {
      // Broadcast from the right: an axis of x keeps its weight where v's size is x's at both
      // lengths, and loses it where x's size is 1 at both (the value repeats along it).
      // Its target must be affine too (classified with known elements), as Reshape's is.
      Abstract target;
      if (rank < x_rank || op->getNumOperands() < 2 || !classify(op->getOperand(1), &target) ||
          !target.elements)
        return std::nullopt;
      for (const auto& e : *target.elements)
        if (!e) return std::nullopt;
      for (size_t a = 0; a < x_rank; ++a) {
        const size_t to = a + rank - x_rank;
        const bool same =
            (*x_shapes)[0][a] == (*shapes)[0][to] && (*x_shapes)[1][a] == (*shapes)[1][to];
        const bool repeated = (*x_shapes)[0][a] == 1 && (*x_shapes)[1][a] == 1;
        if (same)
          form.w[to] = from->w[a];
        else if (!repeated)
          return std::nullopt;
      }
      return form;
    }
    return std::nullopt;
  }

  bool refuse(Operation* op, const std::string& why) {
    error_ = where(op) + " (" + op->getName().getStringRef().str() + ") " + why;
    return false;
  }

  static bool isInvariant(const Abstract& a) { return a.kind == Kind::kInvariant; }
  static bool isData(const Abstract& a) { return a.kind != Kind::kShape; }

  // The elements of a small integer tensor that does not depend on the length, from the
  // kernels at an arbitrary length.
  std::optional<Elements> invariantElements(Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type || type.getRank() > 1 || !type.getElementType().isIntOrIndex()) return std::nullopt;
    const Tensor* t = nullptr;
    if (!evaluatorAt(1, 3).evaluate(v, true, &t).ok()) return std::nullopt;
    if (t->numElements() > 64) return std::nullopt;
    Elements elements;
    for (int64_t i = 0; i < t->numElements(); ++i) {
      std::optional<int64_t> value = elementAsInt64(*t, i);
      if (!value) return std::nullopt;
      elements.push_back(Affine{*value, 0, 0});
    }
    return elements;
  }

  // Shape(x): x's dims as affine forms, from its static sizes and the dimension symbols
  // shape inference gave it.
  Elements dimsOf(Value x) {
    Elements dims;
    auto type = dyn_cast<RankedTensorType>(x.getType());
    if (!type) return dims;
    std::vector<std::string> names = dimNamesOf(x);
    for (int64_t i = 0; i < type.getRank(); ++i) {
      if (!type.isDynamicDim(i)) {
        dims.push_back(Affine{type.getDimSize(i), 0, 0});
        continue;
      }
      std::string name = static_cast<size_t>(i) < names.size() ? names[i] : "";
      if (name == seq_)
        dims.push_back(Affine{0, 1, 0});
      else if (name == batch_)
        dims.push_back(Affine{0, 0, 1});
      else
        dims.push_back(std::nullopt);
    }
    return dims;
  }

  // Known values of an invariant operand (starts, axes, steps, indices).
  std::optional<std::vector<int64_t>> constants(const Abstract& a) {
    if (!isInvariant(a) || !a.elements) return std::nullopt;
    std::vector<int64_t> values;
    for (const auto& e : *a.elements) {
      if (!e) return std::nullopt;
      values.push_back(e->c0);
    }
    return values;
  }

  bool classifyUncached(Value v, Abstract* out) {
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      std::string name = argName(arg);
      if (name != "input_ids" && name != "attention_mask" && name != "position_ids") {
        error_ = "the mask depends on model input '" + name +
                 "', which only input_ids, attention_mask and position_ids may";
        return false;
      }
      *out = {Kind::kPrefix, std::nullopt};
      return true;
    }
    Operation* op = v.getDefiningOp();
    if (isa<nn::ConstantOp>(op)) {
      *out = {Kind::kInvariant, invariantElements(v)};
      return true;
    }
    StringRef name = op->getName().getStringRef();
    if (name == "nn.shape") {
      Elements dims = dimsOf(op->getOperand(0));
      if (dims.empty() && !isa<RankedTensorType>(op->getOperand(0).getType()))
        return refuse(op, "takes the shape of a tensor of unknown rank");
      int64_t rank = static_cast<int64_t>(dims.size());
      auto clampIndex = [&](int64_t i) { return std::clamp(i < 0 ? i + rank : i, int64_t{0}, rank); };
      auto start_attr = op->getAttrOfType<IntegerAttr>("start");
      auto end_attr = op->getAttrOfType<IntegerAttr>("end");
      int64_t start = clampIndex(start_attr ? start_attr.getInt() : 0);
      int64_t end = clampIndex(end_attr ? end_attr.getInt() : rank);
      Elements elements(dims.begin() + start, dims.begin() + std::max(start, end));
      *out = {Kind::kShape, elements};
      normalize(out);
      return true;
    }
    if (name == "nn.size") {
      Elements dims = dimsOf(op->getOperand(0));
      Affine product{1, 0, 0};
      bool known = !dims.empty() || isa<RankedTensorType>(op->getOperand(0).getType());
      for (const auto& d : dims) {
        if (!d) { known = false; break; }
        std::optional<Affine> next = d->invariant()        ? product.times(d->c0)
                                     : product.invariant() ? d->times(product.c0)
                                                           : std::nullopt;
        if (!next) {
          known = false;
          break;
        }
        product = *next;
      }
      *out = {Kind::kShape, Elements{known ? std::optional<Affine>(product) : std::nullopt}};
      normalize(out);
      return true;
    }

    std::vector<Abstract> in;
    for (Value operand : op->getOperands()) {
      if (isa<NoneType>(operand.getType())) {
        in.push_back({Kind::kInvariant, std::nullopt});
        continue;
      }
      Abstract a;
      if (!classify(operand, &a)) return false;
      in.push_back(a);
    }
    bool all_invariant = true;
    for (const Abstract& a : in) all_invariant = all_invariant && isInvariant(a);
    if (all_invariant) {
      *out = {Kind::kInvariant, invariantElements(v)};
      return true;
    }
    bool shapes = true;
    for (const Abstract& a : in) shapes = shapes && a.kind != Kind::kPrefix && a.elements;
    if (shapes && shapeArithmetic(op, in, out)) return true;
    if (!error_.empty()) return false;
    return prefixRule(op, in, out);
  }

  // A shape vector whose every element is known and invariant is invariant.
  static void normalize(Abstract* a) {
    if (a->kind != Kind::kShape || !a->elements) return;
    for (const auto& e : *a->elements)
      if (!e || !e->invariant()) return;
    a->kind = Kind::kInvariant;
  }

  // Integer arithmetic on shape vectors (operands are shape vectors or small invariant
  // integers). Returns false (error empty) when `op` is not shape arithmetic.
  bool shapeArithmetic(Operation* op, const std::vector<Abstract>& in, Abstract* out) {
    StringRef name = op->getName().getStringRef();
    const Elements& a = *in[0].elements;
    auto result = [&](Elements elements) {
      *out = {Kind::kShape, std::move(elements)};
      normalize(out);
      return true;
    };
    auto broadcast = [&](auto&& combine) -> bool {
      const Elements& b = *in[1].elements;
      if (a.size() != b.size() && a.size() != 1 && b.size() != 1) return false;
      size_t count = std::max(a.size(), b.size());
      Elements elements;
      for (size_t i = 0; i < count; ++i) {
        const auto& x = a[a.size() == 1 ? 0 : i];
        const auto& y = b[b.size() == 1 ? 0 : i];
        elements.push_back(x && y ? combine(*x, *y) : std::nullopt);
      }
      return result(std::move(elements));
    };
    if (name == "nn.identity" || name == "nn.cast" || name == "nn.squeeze" ||
        name == "nn.unsqueeze" || name == "nn.reshape" || name == "nn.flatten")
      return result(a);
    if (name == "nn.add") return broadcast([](Affine x, Affine y) { return x.plus(y); });
    if (name == "nn.sub") return broadcast([](Affine x, Affine y) { return x.minus(y); });
    if (name == "nn.mul")
      return broadcast([](Affine x, Affine y) -> std::optional<Affine> {
        if (x.invariant()) return y.times(x.c0);
        if (y.invariant()) return x.times(y.c0);
        return std::nullopt;  // n * n is not affine
      });
    if (name == "nn.div")
      return broadcast([](Affine x, Affine y) -> std::optional<Affine> {
        if (!y.invariant() || y.c0 == 0) return std::nullopt;
        if (y.c0 == -1) return x.times(-1);  // (INT64_MIN / -1 and % -1 overflow)
        if (x.c0 % y.c0 != 0 || x.cn % y.c0 != 0 || x.cb % y.c0 != 0) return std::nullopt;
        return Affine{x.c0 / y.c0, x.cn / y.c0, x.cb / y.c0};
      });
    if (name == "nn.min" || name == "nn.max") {
      if (in.size() != 2) return false;
      bool is_min = name == "nn.min";
      return broadcast([&](Affine x, Affine y) -> std::optional<Affine> {
        auto difference = x.minus(y);
        auto sign = difference ? difference->sign() : std::nullopt;
        if (sign) return (*sign >= 0) == is_min ? y : x;
        // min(a, c) with a growing in n only: a while n <= (c - a.c0) / a.cn.
        const Affine& grow = x.invariant() ? y : x;
        const Affine& limit = x.invariant() ? x : y;
        int64_t room = 0;
        if (!is_min || !limit.invariant() || grow.cb != 0 || grow.cn <= 0 ||
            __builtin_sub_overflow(limit.c0, grow.c0, &room))
          return std::nullopt;
        bound_ = std::min(bound_, room / grow.cn);
        return grow;
      });
    }
    if (name == "nn.equal" || name == "nn.less" || name == "nn.greater" ||
        name == "nn.less_or_equal" || name == "nn.greater_or_equal")
      return broadcast([&](Affine x, Affine y) -> std::optional<Affine> {
        auto difference = x.minus(y);
        auto sign = difference ? difference->sign() : std::nullopt;
        if (!sign) return std::nullopt;
        bool value = name == "nn.equal"          ? *sign == 0
                     : name == "nn.less"         ? *sign < 0
                     : name == "nn.greater"      ? *sign > 0
                     : name == "nn.less_or_equal" ? *sign <= 0
                                                  : *sign >= 0;
        return Affine{value ? 1 : 0, 0, 0};
      });
    if (name == "nn.where" && in.size() == 3) {
      auto cond = constants(in[0]);
      const Elements& x = *in[1].elements;
      const Elements& y = *in[2].elements;
      if (!cond) return false;
      size_t count = std::max({cond->size(), x.size(), y.size()});
      Elements elements;
      for (size_t i = 0; i < count; ++i) {
        auto pick = [&](const Elements& e) { return e[e.size() == 1 ? 0 : i]; };
        if ((cond->size() != 1 && cond->size() != count) || (x.size() != 1 && x.size() != count) ||
            (y.size() != 1 && y.size() != count))
          return false;
        elements.push_back((*cond)[cond->size() == 1 ? 0 : i] ? pick(x) : pick(y));
      }
      return result(std::move(elements));
    }
    if (name == "nn.gather") {
      auto indices = constants(in[1]);
      if (!indices) return false;
      Elements elements;
      for (int64_t index : *indices) {
        int64_t i = index < 0 ? index + static_cast<int64_t>(a.size()) : index;
        if (i < 0 || i >= static_cast<int64_t>(a.size())) return false;
        elements.push_back(a[static_cast<size_t>(i)]);
      }
      return result(std::move(elements));
    }
    if (name == "nn.slice") {
      auto starts = constants(in[1]);
      auto ends = constants(in[2]);
      std::optional<std::vector<int64_t>> steps;
      if (in.size() > 4 && !isa<NoneType>(op->getOperand(4).getType())) steps = constants(in[4]);
      if (!starts || !ends || starts->size() != 1 || ends->size() != 1) return false;
      int64_t size = static_cast<int64_t>(a.size());
      int64_t step = steps && !steps->empty() ? (*steps)[0] : 1;
      if (step != 1) return false;
      auto clampIndex = [&](int64_t i) { return std::clamp(i < 0 ? i + size : i, int64_t{0}, size); };
      int64_t start = clampIndex((*starts)[0]), end = clampIndex((*ends)[0]);
      return result(Elements(a.begin() + start, a.begin() + std::max(start, end)));
    }
    if (name == "nn.concat") {
      Elements elements;
      for (const Abstract& operand : in)
        elements.insert(elements.end(), operand.elements->begin(), operand.elements->end());
      return result(std::move(elements));
    }
    return false;
  }

  // The rules for ops producing prefix data.
  bool prefixRule(Operation* op, const std::vector<Abstract>& in, Abstract* out) {
    StringRef name = op->getName().getStringRef();
    *out = {Kind::kPrefix, std::nullopt};
    auto need_invariant = [&](size_t i, const char* what) {
      if (i < in.size() && !isInvariant(in[i]))
        return refuse(op, std::string("has a ") + what + " that depends on the sequence length");
      return true;
    };
    auto need_data = [&](size_t i) {
      if (i < in.size() && !isData(in[i]))
        return refuse(op, "combines the mask with the sequence length (a mask that changes with "
                          "the length is neither causal nor a fixed window)");
      return true;
    };
    if (isElementwise(op)) {
      for (size_t i = 0; i < in.size(); ++i)
        if (!need_data(i)) return false;
      return true;
    }
    if (name == "nn.range")  // start + i * delta over the first (limit - start) / delta indices
      return need_invariant(0, "start") && need_invariant(2, "step");
    if (name == "nn.constant_of_shape") return true;
    if (name == "nn.expand") return need_data(0);
    if (name == "nn.trilu") return need_data(0) && need_invariant(1, "diagonal");
    if (name == "nn.unsqueeze" || name == "nn.squeeze")
      return need_data(0) && need_invariant(1, "axes");
    if (name == "nn.transpose") return need_data(0);
    if (name == "nn.cum_sum") {
      if (auto reverse = op->getAttrOfType<IntegerAttr>("reverse"); reverse && reverse.getInt())
        return refuse(op, "sums from the end of the sequence");
      return need_data(0) && need_invariant(1, "axis");
    }
    if (name == "nn.gather") return need_data(0) && need_data(1);
    if (name == "nn.slice") {
      if (!need_data(0) || !need_invariant(1, "start") || !need_invariant(3, "axis list") ||
          !need_invariant(4, "step"))
        return false;
      auto starts = constants(in[1]);
      std::optional<std::vector<int64_t>> steps;
      if (in.size() > 4 && !isa<NoneType>(op->getOperand(4).getType())) steps = constants(in[4]);
      if (!starts) return refuse(op, "has starts that are not known");
      for (int64_t s : *starts)
        if (s < 0) return refuse(op, "starts counting from the end of an axis");
      if (steps)
        for (int64_t s : *steps)
          if (s < 1) return refuse(op, "steps backwards");
      // A fixed-size buffer sliced to the length caps the lengths the model supports.
      if (isInvariant(in[0]) && in[2].elements) {
        auto type = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
        auto axes = in.size() > 3 ? constants(in[3]) : std::nullopt;
        for (size_t i = 0; type && i < in[2].elements->size(); ++i) {
          const auto& end = (*in[2].elements)[i];
          if (!end || end->invariant()) continue;
          int64_t axis = axes && i < axes->size() ? (*axes)[i] : static_cast<int64_t>(i);
          if (axis < 0) axis += type.getRank();
          int64_t room = 0;
          if (end->cb != 0 || end->cn <= 0 || axis < 0 || axis >= type.getRank() ||
              type.isDynamicDim(axis) ||
              __builtin_sub_overflow(type.getDimSize(axis), end->c0, &room))
            return refuse(op, "slices a buffer to a length it cannot bound");
          bound_ = std::min(bound_, room / end->cn);
        }
      }
      return true;
    }
    if (name == "nn.reshape" || name == "nn.flatten") {
      if (!need_data(0)) return false;
      // Only unit axes may come or go: the target's dims are affine (shapeArithmetic refuses
      // n * n), so agreement at two lengths is agreement at all.
      for (int64_t n : {3, 7}) {
        const Tensor* x = nullptr;
        const Tensor* y = nullptr;
        SubgraphEvaluator& evaluator = evaluatorAt(1, n);
        if (!evaluator.evaluate(op->getOperand(0), false, &x).ok() ||
            !evaluator.evaluate(op->getResult(0), false, &y).ok())
          return refuse(op, "cannot be evaluated");
        auto squeeze = [](const Shape& s) {
          Shape kept;
          for (int64_t d : s)
            if (d != 1) kept.push_back(d);
          return kept;
        };
        if (squeeze(x->shape()) != squeeze(y->shape()))
          return refuse(op, "regroups the mask's elements (" + shapeToString(x->shape()) + " -> " +
                                shapeToString(y->shape()) + " at length " + std::to_string(n) + ")");
      }
      if (name == "nn.reshape" && in.size() > 1 && in[1].elements)
        for (const auto& e : *in[1].elements)
          if (!e) return refuse(op, "reshapes to a size that is not affine in the length");
      return true;
    }
    if (name == "nn.concat") {
      for (size_t i = 0; i < in.size(); ++i)
        if (!need_data(i)) return false;
      // Every part but the last must keep its size along the axis at every length.
      auto axis_attr = op->getAttrOfType<IntegerAttr>("axis");
      for (unsigned i = 0; i + 1 < op->getNumOperands(); ++i) {
        std::vector<int64_t> sizes;
        for (int64_t n : {3, 7}) {
          const Tensor* t = nullptr;
          if (!evaluatorAt(1, n).evaluate(op->getOperand(i), false, &t).ok())
            return refuse(op, "cannot be evaluated");
          int64_t axis = axis_attr ? axis_attr.getInt() : 0;
          if (axis < 0) axis += t->rank();
          sizes.push_back(t->dim(axis));
        }
        if (sizes[0] != sizes[1])
          return refuse(op, "places part of the mask at an offset that depends on the length");
      }
      return true;
    }
    if (name == "nn.scatter_nd") {
      if (!need_data(0) || !need_data(1) || !need_data(2)) return false;
      if (auto reduction = op->getAttrOfType<StringAttr>("reduction");
          reduction && reduction.getValue() != "none")
        return refuse(op, "scatters with a reduction");
      scatters_.push_back(op);
      return true;
    }
    return refuse(op, "is not an op the mask proof knows how a length change affects");
  }
};

std::string identityGridError(Operation* op, const Tensor& indices);

// ScatterND's indices are the identity grid (index tuple == its own position), so the op
// writes `updates` over a box at the origin: prefix data stays prefix data.
std::string checkIdentityScatter(Operation* op, SubgraphEvaluator& evaluator) {
  const Tensor* indices = nullptr;
  Status status = evaluator.evaluateReleasing(op->getOperand(1), &indices);
  if (!status.ok()) return where(op) + ": " + status.message();
  std::string error = identityGridError(op, *indices);
  evaluator.forget(op->getOperand(1));
  return error;
}

// Every ScatterND the prover accepted on the way to `root` writes its updates at the origin, at
// `length`: its index grid proven from how it is built (then evaluated as that paste, its
// indices never built), or else evaluated and checked element by element. Each is checked once
// per length and prover; its note, if `notes`, comes with every proof that passes through it.
std::string checkScatters(Prover& prover, SubgraphEvaluator& evaluator, int64_t length, Value root,
                          std::vector<std::string>* notes) {
  for (Operation* scatter : prover.scattersUnder(root)) {
    auto [at, fresh] = prover.scatterVerdicts().try_emplace({scatter, length});
    Prover::ScatterVerdict& verdict = at->second;
    if (fresh) {
      if (length >= kGridByConstructionLength && prover.identityGridByConstruction(scatter)) {
        evaluator.pasteScatter(scatter);
        verdict.note = "mask proof: " + where(scatter) +
                       " (ScatterND) writes at the origin: its index grid proven from how it is "
                       "built";
      } else {
        verdict.error = checkIdentityScatter(scatter, evaluator);
        verdict.note = "mask proof: " + where(scatter) +
                       " (ScatterND) writes at the origin: its index grid evaluated at " +
                       std::to_string(length) + " positions";
      }
    }
    if (!verdict.error.empty()) return verdict.error;
    if (notes) notes->push_back(verdict.note);
  }
  return "";
}

std::string identityGridError(Operation* op, const Tensor& indices_tensor) {
  const Tensor* indices = &indices_tensor;
  int64_t rank = indices->rank();
  if (rank < 1) return where(op) + ": indices of rank 0";
  int64_t depth = indices->dim(rank - 1);
  if (depth != rank - 1)
    return where(op) + " (ScatterND) writes slices through indices " +
           shapeToString(indices->shape()) + ", which the mask proof does not follow";
  int64_t count = indices->numElements() / std::max<int64_t>(depth, 1);
  for (int64_t p = 0; p < count; ++p) {
    int64_t rest = p;
    for (int64_t k = depth - 1; k >= 0; --k) {
      int64_t coordinate = rest % indices->dim(k);
      rest /= indices->dim(k);
      if (elementAsInt64(*indices, p * depth + k) != coordinate)
        return where(op) + " (ScatterND) writes element " + std::to_string(p) +
               " away from its own position; the mask proof does not follow permuted writes";
    }
  }
  return "";
}

// What a mask element `x` does under `spec`: 1 lets the query see the key, 0 masks it, -1 is
// neither (a NaN, or an additive bias that is not 0 and not large and negative).
int seesValue(const MaskSpec& spec, double x) {
  if (std::isnan(x)) return -1;
  if (spec.additive) return x == 0 ? 1 : x <= kMaskedBias ? 0 : -1;
  return (spec.where_scores_on_false ? x == 0 : x != 0) ? 1 : 0;
}

// Whether `matrices` matrices of rows x cols elements at `data` see exactly what the window
// allows (0: causal): sees(x) is 1 where x lets a query see a key, 0 where it masks it, -1
// where it is neither.
template <typename T, typename Sees>
bool matchesWindow(const T* data, int64_t matrices, int64_t rows, int64_t cols, int64_t window,
                   Sees sees) {
  for (int64_t m = 0; m < matrices; ++m)
    for (int64_t i = 0; i < rows; ++i) {
      const T* row = data + (m * rows + i) * cols;
      // Query i sees keys [first, last).
      const int64_t first = window == 0 ? 0 : std::max<int64_t>(0, i - window + 1);
      const int64_t last = std::min(i + 1, cols);
      bool ok = true;
      for (int64_t j = 0; j < first; ++j) ok &= sees(row[j]) == 0;
      for (int64_t j = first; j < last; ++j) ok &= sees(row[j]) == 1;
      for (int64_t j = last; j < cols; ++j) ok &= sees(row[j]) == 0;
      if (!ok) return false;
    }
  return true;
}

// The window of `mask` at length `seq`: 0 when causal, W when each query sees exactly its
// own and the W - 1 keys before it; or an error naming the first element that is neither.
std::string findWindow(const MaskSpec& spec, const Tensor& mask, int64_t seq, int64_t* window) {
  if (mask.rank() < 2) return "the mask has rank " + std::to_string(mask.rank());
  int64_t rows = mask.dim(mask.rank() - 2), cols = mask.dim(mask.rank() - 1);
  if (!((rows == seq || rows == 1) && cols == seq && (rows == seq || seq == 1)))
    return "the mask is " + shapeToString(mask.shape()) + " for " + std::to_string(seq) +
           " tokens, not [.., " + std::to_string(seq) + ", " + std::to_string(seq) + "]";
  auto allowed = [&](int64_t e, bool* ok) {
    const int sees = seesValue(spec, elementAsDouble(mask, e));
    *ok = sees >= 0;
    return sees == 1;
  };
  // The last query row of the first matrix decides W; every element is then checked.
  int64_t last = (rows - 1) * cols, first_seen = -1;
  for (int64_t j = 0; j < cols; ++j) {
    bool ok = true;
    if (allowed(last + j, &ok) && first_seen < 0) first_seen = j;
  }
  *window = first_seen > 0 ? seq - first_seen : 0;
  const int64_t matrices = mask.numElements() / (rows * cols);
  // The common element types are checked in typed loops, without elementAsDouble's dtype
  // switch per element; only a mask that fails is walked again below, for the message naming
  // its first wrong element.
  if (mask.dtype() == DType::kFloat32) {
    if (matchesWindow(mask.data<float>(), matrices, rows, cols, *window,
                      [&](float x) { return seesValue(spec, x); }))
      return "";
  } else if (mask.dtype() == DType::kBool) {
    if (matchesWindow(mask.data<uint8_t>(), matrices, rows, cols, *window,
                      [&](uint8_t x) { return seesValue(spec, x != 0 ? 1.0 : 0.0); }))
      return "";
  }
  for (int64_t m = 0, e = 0; m < matrices; ++m)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j, ++e) {
        bool ok = true;
        bool sees = allowed(e, &ok);
        if (!ok)
          return "the mask value " + std::to_string(elementAsDouble(mask, e)) + " at query " +
                 std::to_string(i) + ", key " + std::to_string(j) +
                 " is neither 0 nor a large negative bias";
        bool expected = j <= i && (*window == 0 || i - j < *window);
        if (sees != expected)
          return "query " + std::to_string(i) + " " + (expected ? "cannot see" : "sees") + " key " +
                 std::to_string(j) + " at length " + std::to_string(seq) +
                 ": the mask is neither causal nor a sliding window";
      }
  return "";
}

// The slopes of an ALiBi bias `bias` evaluated for `batch` rows at length `seq`: each element,
// broadcast to the scores ([batch, heads, seq, seq], or [batch x heads, seq, seq] with the heads
// merged), must be slope(h) * j for its head h and key j, slope(h) read at key 1 of the head's
// first row. An error names the first element that is not.
std::string alibiSlopes(const AlibiSpec& spec, const Tensor& bias, int64_t batch, int64_t seq,
                        std::vector<double>* slopes) {
  const int64_t heads = spec.heads;
  const Shape scores =
      spec.merged_heads ? Shape{batch * heads, seq, seq} : Shape{batch, heads, seq, seq};
  const int64_t rank = bias.rank(), out_rank = static_cast<int64_t>(scores.size());
  bool fits = rank >= 1 && rank <= out_rank && bias.dim(rank - 1) == seq;
  for (int64_t i = 0; fits && i < rank; ++i) {
    const int64_t want = scores[static_cast<size_t>(out_rank - rank + i)];
    fits = bias.dim(i) == want || bias.dim(i) == 1;
  }
  if (!fits)
    return "the ALiBi bias is " + shapeToString(bias.shape()) + " for scores " +
           shapeToString(scores) + ": not one value per head and key position";
  // The bias's axis that picks the head: [batch x heads] merged, or the heads axis; absent
  // (or of size 1) when every head gets the same bias.
  const int64_t head_axis = rank - (spec.merged_heads ? 3 : out_rank - 1);
  const int64_t cols = seq;
  slopes->assign(static_cast<size_t>(heads), std::nan(""));
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  const int64_t count = bias.numElements();
  for (int64_t e = 0; e < count; ++e) {
    int64_t rest = e;
    for (int64_t a = rank - 1; a >= 0; --a) {
      index[static_cast<size_t>(a)] = rest % bias.dim(a);
      rest /= bias.dim(a);
    }
    const int64_t j = e % cols;
    int64_t h = -1;  // -1: every head
    if (head_axis >= 0 && bias.dim(head_axis) > 1)
      h = index[static_cast<size_t>(head_axis)] % heads;
    const double value = elementAsDouble(bias, e);
    for (int64_t head = h < 0 ? 0 : h; head < (h < 0 ? heads : h + 1); ++head) {
      double& slope = (*slopes)[static_cast<size_t>(head)];
      if (std::isnan(slope)) {
        if (j != 0) return "the ALiBi bias does not start at key 0";
        slope = elementAsDouble(bias, e + 1);  // key 1 of the same row (seq >= 2)
        if (!std::isfinite(slope))
          return "the ALiBi bias of head " + std::to_string(head) + " is not finite";
      }
      const double want = static_cast<double>(static_cast<float>(slope) * static_cast<float>(j));
      if (!(std::fabs(value - want) <= 1e-6 * std::fabs(want)))
        return "the ALiBi bias of head " + std::to_string(head) + " at key " + std::to_string(j) +
               " is " + std::to_string(value) + ", not slope " + std::to_string(slope) +
               " times the key's position (" + std::to_string(want) + ")";
    }
  }
  return "";
}

}  // namespace

namespace {

// `v` as prefix data by the mask's rules, evaluated at batch 1 over the proof length (the
// context, or less where the model's buffers cap it; at least `min_length`) and at batch 2
// over min(length, 4); errors say `what` failed.
struct PrefixValues {
  std::string error;
  Tensor full, batched;
  int64_t length = 0, small = 0;
};
PrefixValues evaluatePrefix(Prover& prover, Value v, const std::string& what, int64_t context,
                            int64_t min_length) {
  PrefixValues out;
  Abstract value;
  if (!prover.classify(v, &value)) {
    out.error = "cannot prove " + what + " for every length: " + prover.error();
    return out;
  }
  if (value.kind != Kind::kPrefix) {
    out.error = what + " does not follow the token positions";
    return out;
  }
  out.length = std::min(context, prover.bound());
  if (out.length < min_length || out.length > kMaxProofLength) {
    out.error = what + " cannot be proven at a context of " + std::to_string(out.length) +
                " tokens (" + std::to_string(min_length) + " .. " +
                std::to_string(kMaxProofLength) + ")";
    return out;
  }
  SubgraphEvaluator& evaluator = prover.evaluatorAt(1, out.length);
  out.error = checkScatters(prover, evaluator, out.length, v, nullptr);
  if (!out.error.empty()) return out;
  const Tensor* t = nullptr;
  Status status = evaluator.evaluateReleasing(v, &t);
  if (!status.ok()) {
    out.error = "cannot evaluate " + what + ": " + status.message();
    return out;
  }
  out.full = *t;
  out.small = std::min<int64_t>(out.length, 4);
  status = prover.evaluatorAt(2, out.small).evaluate(v, true, &t);
  if (!status.ok()) {
    out.error = "cannot evaluate " + what + " for a batch of 2: " + status.message();
    return out;
  }
  out.batched = *t;
  return out;
}

}  // namespace

AlibiProof proveAlibi(func::FuncOp func, StringRef batch_symbol, StringRef seq_symbol,
                      int64_t context, const AlibiSpec& spec) {
  AlibiProof proof;
  Prover prover(func, batch_symbol, seq_symbol);
  PrefixValues values = evaluatePrefix(prover, spec.bias, "the ALiBi bias", context, 2);
  proof.error = values.error;
  if (proof.error.empty())
    proof.error = alibiSlopes(spec, values.full, 1, values.length, &proof.slopes);
  if (!proof.error.empty()) return proof;
  // A batch of 2: each row's heads get the same slopes (the merged axis is batch x heads).
  std::vector<double> batched;
  proof.error = alibiSlopes(spec, values.batched, 2, values.small, &batched);
  if (proof.error.empty() && batched != proof.slopes)
    proof.error = "the ALiBi slopes differ between a batch of 1 and a batch of 2";
  return proof;
}

PositionsProof provePositions(func::FuncOp func, StringRef batch_symbol, StringRef seq_symbol,
                              int64_t context, Value positions) {
  PositionsProof proof;
  Prover prover(func, batch_symbol, seq_symbol);
  PrefixValues values = evaluatePrefix(prover, positions, "the positions", context, 1);
  if (!values.error.empty()) {
    proof.error = values.error;
    return proof;
  }
  // j + offset at index j of the last axis in every row; offset read at index 0 of the first
  // (within 2^31, so that j + offset is exact).
  const std::optional<int64_t> offset =
      values.full.numElements() ? elementAsInt64(values.full, 0) : std::nullopt;
  if (!offset || *offset < -(int64_t{1} << 31) || *offset > (int64_t{1} << 31)) {
    proof.error =
        "the first token's position is not a position (" +
        (values.full.numElements() ? std::to_string(elementAsDouble(values.full, 0)) : "none") +
        ")";
    return proof;
  }
  proof.offset = *offset;
  auto check = [&](const Tensor& t, int64_t batch, int64_t n) -> std::string {
    if (t.rank() < 1 || t.rank() > 2 || t.dim(t.rank() - 1) != n ||
        (t.rank() == 2 && t.dim(0) != 1 && t.dim(0) != batch))
      return "the positions are " + shapeToString(t.shape()) + " for " + std::to_string(batch) +
             " x " + std::to_string(n) + " tokens, not [batch, " + std::to_string(n) + "]";
    const int64_t count = t.numElements();
    for (int64_t e = 0; e < count; ++e) {
      const std::optional<int64_t> got = elementAsInt64(t, e);
      if (got != e % n + proof.offset)
        return "the position of token " + std::to_string(e % n) + " is " +
               (got ? std::to_string(*got) : std::to_string(elementAsDouble(t, e))) + ", not " +
               std::to_string(e % n + proof.offset);
    }
    return "";
  };
  proof.error = check(values.full, 1, values.length);
  if (proof.error.empty()) proof.error = check(values.batched, 2, values.small);
  return proof;
}

struct MaskProver::State {
  State(func::FuncOp func, StringRef batch_symbol, StringRef seq_symbol, int64_t context)
      : prover(func, batch_symbol, seq_symbol), context(context) {}
  Prover prover;
  int64_t context;
  std::vector<Value> expected;
  // The last mask checked at the proof length and what findWindow found; held, so that its
  // storage (compared by address) is not reused while it is.
  struct Checked {
    Tensor mask;
    bool additive, on_false;
    int64_t length;
    std::string error;
    int64_t window;
  };
  std::optional<Checked> last_checked;
};

MaskProver::MaskProver(func::FuncOp func, StringRef batch_symbol, StringRef seq_symbol,
                       int64_t context)
    : state_(std::make_unique<State>(func, batch_symbol, seq_symbol, context)) {}
MaskProver::~MaskProver() = default;

void MaskProver::expect(llvm::ArrayRef<Value> masks) {
  state_->expected.insert(state_->expected.end(), masks.begin(), masks.end());
}

MaskProof MaskProver::prove(const MaskSpec& spec) {
  MaskProof proof;
  Prover& prover = state_->prover;
  const int64_t context = state_->context;
  Abstract mask;
  if (!prover.classify(spec.mask, &mask)) {
    proof.error = "cannot prove the mask for every length: " + prover.error();
    return proof;
  }
  if (mask.kind == Kind::kShape) {
    proof.error = "the mask is computed from sizes alone";
    return proof;
  }
  for (Value v : {spec.fill}) {
    Abstract a;
    if (v && (!prover.classify(v, &a) || a.kind != Kind::kInvariant)) {
      proof.error = "the masked fill value depends on the sequence length";
      return proof;
    }
  }
  for (const auto& [factor, divides] : spec.shape_scales) {
    Abstract a;
    if (!prover.classify(factor, &a) || a.kind != Kind::kInvariant) {
      proof.error = "a scale factor of the scores depends on the sequence length";
      return proof;
    }
  }
  int64_t length = std::min(context, prover.bound());
  proof.model_bound = prover.bound() < context;
  if (length < 1) {
    proof.error = "the mask's buffers hold no position";
    return proof;
  }
  if (length > kMaxProofLength) {
    proof.error = "proving the mask at a context of " + std::to_string(length) +
                  " tokens is over the proof's limit of " + std::to_string(kMaxProofLength) +
                  " (compile with a smaller --max-context)";
    return proof;
  }
  proof.proven_length = length;
  SubgraphEvaluator& evaluator = prover.evaluatorAt(1, length);
  evaluator.expect(state_->expected);
  proof.error = checkScatters(prover, evaluator, length, spec.mask, &proof.notes);
  if (!proof.error.empty()) return proof;
  // Copies (sharing the storage): a later evaluation may release what the evaluator holds.
  std::optional<Tensor> values, fill;
  const Tensor* t = nullptr;
  Status status = evaluator.evaluateReleasing(spec.mask, &t);
  if (status.ok()) values = *t;
  if (status.ok() && spec.fill) status = evaluator.evaluate(spec.fill, true, &t);
  if (status.ok() && spec.fill) fill = *t;
  if (!status.ok()) {
    proof.error = "cannot evaluate the mask: " + status.message();
    return proof;
  }
  if (fill) {
    const int64_t count = fill->numElements();
    for (int64_t i = 0; i < count; ++i) {
      double f = elementAsDouble(*fill, i);
      if (!(f <= kMaskedBias)) {
        proof.error = "the masked fill value " + std::to_string(f) + " is not large and negative";
        return proof;
      }
    }
  }
  for (const auto& [factor, divides] : spec.shape_scales) {
    double value = 0;
    Status s = evaluator.evaluate(factor, true, &t);
    if (s.ok()) s = readScalarDouble(t, &value);
    if (!s.ok()) {
      proof.error = "cannot evaluate a scale factor of the scores: " + s.message();
      return proof;
    }
    if (value == 0) {
      proof.error = "a scale factor of the scores is zero";
      return proof;
    }
    proof.scale = divides ? proof.scale / value : proof.scale * value;
  }
  // Layers whose masks are one tensor (a Slice that keeps the whole mask is its input) are
  // checked once.
  std::optional<State::Checked>& last = state_->last_checked;
  if (last && last->mask.data() == values->data() && last->mask.shape() == values->shape() &&
      last->mask.dtype() == values->dtype() && last->additive == spec.additive &&
      last->on_false == spec.where_scores_on_false && last->length == length) {
    proof.error = last->error;
    proof.window = last->window;
  } else {
    proof.error = findWindow(spec, *values, length, &proof.window);
    last = State::Checked{*values, spec.additive, spec.where_scores_on_false,
                          length,  proof.error,   proof.window};
  }
  if (!proof.error.empty()) return proof;
  values.reset();
  // Rows of a batch are computed alike (the rules above mix no axes); one batch-2 evaluation
  // checks that the mask broadcasts over the batch as the engine's per-sequence runs assume.
  int64_t small = std::min<int64_t>(length, 4);
  SubgraphEvaluator& batched = prover.evaluatorAt(2, small);
  status = batched.evaluate(spec.mask, true, &t);
  if (!status.ok()) {
    proof.error = "cannot evaluate the mask for a batch of 2: " + status.message();
    return proof;
  }
  int64_t window = 0;
  proof.error = findWindow(spec, *t, small, &window);
  if (proof.error.empty() && window != (proof.window != 0 && proof.window < small ? proof.window : 0))
    proof.error = "the mask's window differs between a batch of 1 and a batch of 2";
  return proof;
}

}  // namespace llmc
