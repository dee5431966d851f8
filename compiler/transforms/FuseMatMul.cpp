// --llmc-fuse-matmul: MatMul / Gemm with a constant 2-D weight, the bias add after it and
// the activation after that become one llm.fused_matmul. Activations are recognized by what
// they compute, not by how an exporter spelled them: the elementwise ops after the product
// are evaluated with the runtime's kernels on probe values and compared with each known
// activation (so x·sigmoid(x), GELU as erf or tanh in any operand order, Relu all match).
// Before that, packed products that the model slices apart itself are split into one product
// per part (splitSlicedProduct), for the later fusions to pack the way their kernels read.
#include <algorithm>
#include <cmath>

#include "core/kernel.h"
#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_FUSEMATMUL
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

constexpr const char* kPass = "fuse-matmul";

// Elementwise nn ops an activation may be written with.
bool isActivationPiece(Operation* op) {
  static const char* const kNames[] = {
      "nn.add",  "nn.sub",     "nn.mul",  "nn.div",  "nn.pow",     "nn.erf", "nn.tanh",
      "nn.sigmoid", "nn.relu", "nn.exp",  "nn.neg",  "nn.sqrt", "nn.reciprocal", "nn.gelu",
      "nn.max",  "nn.min",     "nn.softplus", "nn.hard_sigmoid", "nn.cast"};
  for (const char* name : kNames)
    if (isOp(op, name)) return op->getNumResults() == 1 && isFloat32Tensor(op->getResult(0).getType());
  return false;
}

struct Activation {
  const char* name;
  double (*fn)(double);
};
const Activation kActivations[] = {
    {"relu", [](double x) { return x > 0 ? x : 0.0; }},
    {"gelu_erf", [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
    {"gelu_tanh",
     [](double x) {
       return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
     }},
    {"silu", [](double x) { return x / (1 + std::exp(-x)); }},
    {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }},
    {"tanh", [](double x) { return std::tanh(x); }},
};

class Matcher {
 public:
  explicit Matcher(func::FuncOp func) : func_(func) {}

  /// The activation computed from `h` by the elementwise ops after it: the largest region
  /// R (h's users, their users, ... reading only h, R and scalar constants) whose single
  /// escaping result equals a known activation of h on probe values. Fills `region` and
  /// returns the activation name and the result, or nullptr.
  const char* matchActivation(Value h, std::vector<Operation*>* region, Value* result,
                              bool* had_region) {
    // Grow the region in block order.
    llvm::SetVector<Operation*> ops;
    llvm::DenseSet<Value> inside{h};
    bool grew = true;
    while (grew && ops.size() < 32) {
      grew = false;
      for (Value v : llvm::SmallVector<Value>(inside.begin(), inside.end()))
        for (Operation* user : v.getUsers()) {
          if (ops.contains(user) || !isActivationPiece(user)) continue;
          bool reads_only_inside = true;
          for (Value operand : user->getOperands())
            reads_only_inside &= inside.contains(operand) || scalarConstant(operand).has_value();
          if (!reads_only_inside) continue;
          ops.insert(user);
          inside.insert(user->getResult(0));
          grew = true;
        }
    }
    *had_region = !ops.empty();
    if (ops.empty()) return nullptr;
    std::vector<Operation*> ordered(ops.begin(), ops.end());
    std::sort(ordered.begin(), ordered.end(),
              [](Operation* a, Operation* b) { return a->isBeforeInBlock(b); });
    // Evaluate every op of the region on the probe.
    constexpr int64_t kProbe = 101;
    Tensor probe = Tensor::allocate(DType::kFloat32, {kProbe});
    for (int64_t i = 0; i < kProbe; ++i) probe.data<float>()[i] = -6.0f + 12.0f * i / (kProbe - 1);
    llvm::DenseMap<Value, Tensor> values;
    values[h] = probe;
    std::vector<Tensor> constants;
    constants.reserve(64);
    for (Operation* op : ordered) {
      const KernelDef* kernel = KernelRegistry::cpuReference().find(kernelNameOf(op));
      KernelParams params;
      if (!kernel || !paramsFromAttributes(op->getAttrs(), &params).ok()) return nullptr;
      std::vector<const Tensor*> inputs;
      for (Value operand : op->getOperands()) {
        auto it = values.find(operand);
        if (it != values.end()) {
          inputs.push_back(&it->second);
        } else {
          auto constant = cast<nn::ConstantOp>(operand.getDefiningOp());
          constants.push_back(tensorFromElements(constant.getValue()));
          inputs.push_back(&constants.back());
        }
      }
      KernelRun run = evaluateKernel(*kernel, params, inputs, 1, nodeNameOf(op), false);
      if (!run.status.ok() || run.outputs.empty() || run.outputs[0].numElements() != kProbe)
        return nullptr;
      values[op->getResult(0)] = std::move(run.outputs[0]);
    }
    // The largest closed sub-region whose result is a known activation.
    for (auto sink = ordered.rbegin(); sink != ordered.rend(); ++sink) {
      llvm::DenseSet<Operation*> needed;
      std::vector<Operation*> stack{*sink};
      while (!stack.empty()) {
        Operation* op = stack.back();
        stack.pop_back();
        if (!needed.insert(op).second) continue;
        for (Value operand : op->getOperands())
          if (Operation* def = operand.getDefiningOp(); def && ops.contains(def)) stack.push_back(def);
      }
      bool closed = true;
      for (Operation* user : h.getUsers()) closed &= needed.contains(user);
      for (Operation* op : needed)
        if (op != *sink)
          for (Operation* user : op->getResult(0).getUsers()) closed &= needed.contains(user);
      if (!closed) continue;
      const Tensor& out = values[(*sink)->getResult(0)];
      for (const Activation& activation : kActivations) {
        bool same = true;
        for (int64_t i = 0; i < kProbe && same; ++i) {
          double expected = activation.fn(probe.data<float>()[i]);
          same = std::fabs(out.data<float>()[i] - expected) <= 1e-5 * (1 + std::fabs(expected));
        }
        if (!same) continue;
        region->clear();
        for (Operation* op : ordered)
          if (needed.contains(op)) region->push_back(op);
        *result = (*sink)->getResult(0);
        return activation.name;
      }
    }
    return nullptr;
  }

  void miss(ArrayRef<Operation*> ops, const std::string& reason) {
    logFusion(func_, {false, kPass, "matmul", nodeNames(ops), reason});
  }

  /// MatMul(a, W) or Gemm(a, W[ᵀ], C) -> [+ bias] -> [activation] -> llm.fused_matmul.
  void fuse(Operation* op) {
    bool gemm = isOp(op, "nn.gemm");
    if (!gemm && !isOp(op, "nn.matmul")) return;
    Value a = op->getOperand(0), w = op->getOperand(1);
    auto w_type = dyn_cast<RankedTensorType>(w.getType());
    if (!w_type || w_type.getRank() != 2) return;  // batched products (attention) are not weights
    if (!isFloat32Tensor(a.getType()) || !isFloat32Tensor(w_type) ||
        !isFloat32Tensor(op->getResult(0).getType()))
      return miss({op}, "not float32");
    if (!float32Constant(w)) return miss({op}, "the weight is not a constant");
    bool trans_b = false;
    double alpha = 1.0;
    // The bias is computed by runtime kernels (Reshape, Mul, Add) so that it carries a recipe
    // `llmc refit` can redo.
    OpBuilder kb(op);
    Value bias_value;
    auto asVector = [&](Value c, int64_t n) {
      return cast<ShapedType>(c.getType()).getRank() == 1
                 ? c
                 : kernelConstant(kb, op->getLoc(), "Reshape", {}, {c, int64Constant(kb, op->getLoc(), {n})});
    };
    std::vector<Operation*> fused{op};
    Operation* folded_merge = nullptr;
    const int64_t n_size = cast<RankedTensorType>(op->getResult(0).getType()).getShape().back();
    if (gemm) {
      auto attr = [&](const char* name, double fallback) {
        if (auto i = op->getAttrOfType<IntegerAttr>(name)) return static_cast<double>(i.getInt());
        if (auto f = op->getAttrOfType<FloatAttr>(name)) return f.getValueAsDouble();
        return fallback;
      };
      if (attr("transA", 0) != 0) return miss({op}, "Gemm transposes A");
      trans_b = attr("transB", 0) != 0;
      alpha = attr("alpha", 1.0);
      if (op->getNumOperands() > 2 && !isa<NoneType>(op->getOperand(2).getType())) {
        auto c = float32Constant(op->getOperand(2));
        if (!c || c->numElements() != n_size) return miss({op}, "Gemm's C is not a constant bias of N values");
        const float beta = static_cast<float>(attr("beta", 1.0));
        bias_value = asVector(op->getOperand(2), n_size);
        if (bias_value && beta != 1.0f)
          bias_value = kernelConstant(kb, op->getLoc(), "Mul", {}, {bias_value, float32Scalar(kb, op->getLoc(), beta)});
        if (!bias_value) return miss({op}, "cannot fold Gemm's beta into its bias");
      }
    }
    if (ShapedType::isDynamic(n_size)) return miss({op}, "N is not static");
    Value h = op->getResult(0);
    // Bias: h + c (either order) with c a constant of N values that does not broadcast h.
    if (h.hasOneUse()) {
      Operation* add = *h.getUsers().begin();
      if (isOp(add, "nn.add") && add->getResult(0).getType() == h.getType()) {
        Value c = add->getOperand(0) == h ? add->getOperand(1) : add->getOperand(0);
        auto t = float32Constant(c);
        Value t_vector = t && t->numElements() == n_size &&
                                 cast<ShapedType>(c.getType()).getShape().back() == n_size
                             ? asVector(c, n_size)
                             : Value();
        Value sum = t_vector && bias_value ? kernelConstant(kb, op->getLoc(), "Add", {}, {bias_value, t_vector})
                                           : t_vector;
        if (sum) {
          bias_value = sum;
          fused.push_back(add);
          h = add->getResult(0);
        }
      }
    }
    // A constant scalar factor after the product and its bias (OPT's q_proj(x) * scaling)
    // scales the weight and the bias instead, by runtime kernels (refit redoes it); not where
    // the weight is shared, which would then be stored twice.
    if (h.hasOneUse() && w.hasOneUse()) {
      Operation* scale = *h.getUsers().begin();
      const bool mul = isOp(scale, "nn.mul"), div = isOp(scale, "nn.div");
      std::optional<double> c;
      if ((mul || div) && scale->getOperand(0) == h) c = scalarConstant(scale->getOperand(1));
      if (mul && scale->getOperand(1) == h) c = scalarConstant(scale->getOperand(0));
      if (c && div) c = *c != 0 ? std::optional<double>(1.0 / *c) : std::nullopt;
      if (c && std::isfinite(*c) && scale->getResult(0).getType() == h.getType()) {
        Value factor = float32Scalar(kb, op->getLoc(), static_cast<float>(*c));
        Value scaled_w = kernelConstant(kb, op->getLoc(), "Mul", {}, {w, factor});
        Value scaled_bias = bias_value
                                ? kernelConstant(kb, op->getLoc(), "Mul", {}, {bias_value, factor})
                                : Value();
        if (scaled_w && (!bias_value || scaled_bias)) {
          w = scaled_w;
          bias_value = scaled_bias;
          fused.push_back(scale);
          h = scale->getResult(0);
        }
      }
    }
    // GPT-2's Conv1D: x [b, s, K] merged to rows [b * s, K] for the product, and the result
    // split back to [b, s, N]: the fused op takes x as it is (it reads [..., K]).
    if (Operation* merge = a.getDefiningOp(); isOp(merge, "nn.reshape") && h.hasOneUse()) {
      Operation* split = *h.getUsers().begin();
      Value x = merge->getOperand(0);
      auto x_type = dyn_cast<RankedTensorType>(x.getType());
      auto out_type = isOp(split, "nn.reshape") ? dyn_cast<RankedTensorType>(split->getResult(0).getType())
                                                : RankedTensorType();
      auto a_type = cast<RankedTensorType>(a.getType());
      if (x_type && out_type && a_type.getRank() == 2 && x_type.getRank() > 2 &&
          out_type.getRank() == x_type.getRank() && x_type.getShape().back() == a_type.getShape().back() &&
          !x_type.isDynamicDim(x_type.getRank() - 1) && out_type.getShape().back() == n_size &&
          sameLeadingDims(x, split->getResult(0), x_type.getRank() - 1)) {
        a = x;
        fused.push_back(split);
        h = split->getResult(0);
        folded_merge = merge;
      }
    }
    std::vector<Operation*> region;
    Value result = h;
    bool had_region = false;
    const char* activation = matchActivation(h, &region, &result, &had_region);
    if (!activation) {
      if (had_region)
        logFusion(func_, {false, kPass, "matmul-activation", nodeNames(fused),
                          "the elementwise ops after the product compute no known activation"});
    }
    fused.insert(fused.end(), region.begin(), region.end());
    OpBuilder b(result.getDefiningOp());
    Location loc = fusedLoc(func_.getContext(), fused);
    const bool has_bias = static_cast<bool>(bias_value);
    if (!bias_value) bias_value = noneValue(b, loc);
    SmallVector<NamedAttribute> attrs{
        b.getNamedAttr("activation", b.getStringAttr(activation ? activation : "none")),
        b.getNamedAttr("trans_b", b.getI64IntegerAttr(trans_b ? 1 : 0))};
    if (alpha != 1.0) attrs.push_back(b.getNamedAttr("alpha", b.getF32FloatAttr(static_cast<float>(alpha))));
    Value y = createOp(b, loc, "llm.fused_matmul", {a, w, bias_value}, result.getType(), attrs);
    carryNames(result.getDefiningOp(), y.getDefiningOp());
    result.replaceAllUsesWith(y);
    std::string pattern = std::string(gemm ? "gemm" : "matmul") + (has_bias ? "+bias" : "") +
                          (activation ? std::string("+") + activation : "");
    logFusion(func_, {true, kPass, pattern, nodeNames(fused), ""});
    for (auto it = fused.rbegin(); it != fused.rend(); ++it)
      if ((*it)->use_empty()) (*it)->erase();
    if (folded_merge && folded_merge->use_empty()) folded_merge->erase();
  }

 private:
  func::FuncOp func_;
};

// Slice(x, [g0], [g1], [groups axis]) or Gather(x, g or [g]) along the groups axis (the one
// before the last) of x [.., G, P]: the groups [g0, g1) it keeps, all of every group's P values,
// or nullopt. (A scalar index drops the axis: the part's Reshape gives the Gather's shape.)
std::optional<std::pair<int64_t, int64_t>> groupsAxisPart(Operation* user, Value x,
                                                          int64_t groups) {
  const int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
  auto normalized = [&](int64_t g) {
    return std::clamp(g < 0 ? g + groups : g, int64_t{0}, groups);
  };
  if (std::optional<ConstantSlice> c = constantSlice(user, x)) {
    if (c->axis != rank - 2 || c->step != 1) return std::nullopt;
    const int64_t g0 = normalized(c->start), g1 = normalized(c->end);
    return g1 > g0 ? std::optional(std::make_pair(g0, g1)) : std::nullopt;
  }
  if (isOp(user, "nn.gather") && user->getOperand(0) == x) {
    auto axis = user->getAttrOfType<IntegerAttr>("axis");
    auto index = intsConstant(user->getOperand(1));
    auto index_type = dyn_cast<RankedTensorType>(user->getOperand(1).getType());
    if (!axis || (axis.getInt() != -2 && axis.getInt() != rank - 2) || !index ||
        index->size() != 1 || !index_type || index_type.getRank() > 1 || (*index)[0] < -groups ||
        (*index)[0] >= groups)
      return std::nullopt;
    const int64_t g = normalized((*index)[0]);
    return std::make_pair(g, g + 1);
  }
  return std::nullopt;
}

// Whether a Concat within a few ops after two of `parts` joins them again (GPT-J's partial
// rotary splits each head at R, rotates the first part and concatenates the two): such a
// product stays whole, where the rotary fusion wants it.
template <typename Part>
bool partsRejoin(const std::vector<Part>& parts) {
  llvm::DenseMap<Operation*, size_t> reached_from;  // concat -> the part that reached it first
  for (size_t i = 0; i < parts.size(); ++i) {
    std::vector<std::pair<Value, int>> work = {{parts[i].user->getResult(0), 0}};
    llvm::DenseSet<Operation*> seen;
    while (!work.empty()) {
      auto [v, depth] = work.back();
      work.pop_back();
      for (Operation* user : v.getUsers()) {
        if (!seen.insert(user).second) continue;
        if (isOp(user, "nn.concat")) {
          auto [it, inserted] = reached_from.try_emplace(user, i);
          if (!inserted && it->second != i) return true;
        }
        if (depth < 8)
          for (Value result : user->getResults()) work.push_back({result, depth + 1});
      }
    }
  }
  return false;
}

// A packed product that the model splits itself becomes one product per part, its weight (and
// bias) columns gathered at compile time by the runtime's Reshape and Slice (so that refit
// redoes it): MatMul(a, W) [+ bias], optionally Reshape'd to [.., G, P] (the last axis split
// into G groups of P: GPT-NeoX's per-head [q | k | v]) and Transpose'd (the last axis kept),
// whose every user is a Slice [s0, s1) of the last axis (the columns g * P + [s0, s1) of every
// group g) or, after the Reshape, a Slice or one-element Gather of the groups axis (groups
// [g0, g1) whole: Falcon's query_key_value, split into its heads). Each part then fuses its own
// bias and activation, and fuse-qkv and fuse-gated-mlp pack the parts again the way their kernels
// read them (Phi-3's qkv_proj and gate_up_proj, GPT-NeoX's query_key_value), with no Slice left
// between.
void splitSlicedProduct(func::FuncOp func, Operation* op) {
  Value w = op->getOperand(1), y = op->getResult(0);
  auto w_type = dyn_cast<RankedTensorType>(w.getType());
  auto y_type = dyn_cast<RankedTensorType>(y.getType());
  if (!w_type || !y_type || w_type.getRank() != 2 || y_type.getRank() < 2 ||
      w_type.isDynamicDim(0) || w_type.isDynamicDim(1) || !isFloat32Tensor(w_type))
    return;
  const int64_t k = w_type.getDimSize(0), n = w_type.getDimSize(1);
  std::vector<Operation*> chain{op};
  Value v = y;
  auto sole_user = [](Value x, StringRef name) -> Operation* {
    return x.hasOneUse() && isOp(*x.getUsers().begin(), name) ? *x.getUsers().begin() : nullptr;
  };
  // The bias: Add(y, c) or Add(c, y) with a constant [N].
  Value bias;
  if (Operation* add = sole_user(v, "nn.add")) {
    Value c = add->getOperand(add->getOperand(0) == v ? 1 : 0);
    std::optional<Tensor> t = float32Constant(c);
    if (t && t->rank() == 1 && t->dim(0) == n && add->getResult(0).getType() == y.getType()) {
      bias = c;
      chain.push_back(add);
      v = add->getResult(0);
    }
  }
  // The last axis split into [G, P], or into [G, M, E] (Bloom's query_key_value: each head's
  // q, k and v side by side, M = 3), read as [G, P = M x E] with member m the columns
  // [m x E, (m + 1) x E) of every group.
  int64_t groups = 1, group = n, member = 0;  // member: E, 0 unless [G, M, E]
  Operation* reshape = sole_user(v, "nn.reshape");
  auto reshaped = reshape ? dyn_cast<RankedTensorType>(reshape->getResult(0).getType()) : nullptr;
  const int64_t split_rank = reshaped ? reshaped.getRank() : 0;
  auto static_dims = [&](int64_t count) {
    for (int64_t i = split_rank - count; i < split_rank; ++i)
      if (reshaped.isDynamicDim(i)) return false;
    return true;
  };
  if (reshaped && split_rank == y_type.getRank() + 1 && static_dims(2) &&
      reshaped.getDimSize(split_rank - 1) * reshaped.getDimSize(split_rank - 2) == n &&
      sameLeadingDims(v, reshape->getResult(0), y_type.getRank() - 1)) {
    groups = reshaped.getDimSize(split_rank - 2);
    group = reshaped.getDimSize(split_rank - 1);
    chain.push_back(reshape);
    v = reshape->getResult(0);
  } else if (reshaped && split_rank == y_type.getRank() + 2 && static_dims(3) &&
             reshaped.getDimSize(split_rank - 3) * reshaped.getDimSize(split_rank - 2) *
                     reshaped.getDimSize(split_rank - 1) ==
                 n &&
             sameLeadingDims(v, reshape->getResult(0), y_type.getRank() - 1)) {
    groups = reshaped.getDimSize(split_rank - 3);
    member = reshaped.getDimSize(split_rank - 1);
    group = reshaped.getDimSize(split_rank - 2) * member;
    chain.push_back(reshape);
    v = reshape->getResult(0);
  } else {
    reshape = nullptr;
  }
  Operation* transpose = member ? nullptr : sole_user(v, "nn.transpose");
  auto perm = transpose ? transpose->getAttrOfType<DenseI64ArrayAttr>("perm") : DenseI64ArrayAttr();
  const int64_t rank = cast<RankedTensorType>(v.getType()).getRank();
  if (perm && static_cast<int64_t>(perm.size()) == rank && perm[rank - 1] == rank - 1) {
    chain.push_back(transpose);
    v = transpose->getResult(0);
  } else {
    transpose = nullptr;
  }
  // The parts: [s0, s1) of every group's last axis, or (after a Reshape, with no Transpose)
  // groups [s0, s1) whole: a Slice of the groups axis, or a Gather of one group by a
  // one-element index (Falcon's q heads, its one K head and its one V head).
  struct Part {
    Operation* user;
    bool whole_groups;
    int64_t s0, s1;
  };
  std::vector<Part> slices;
  for (Operation* user : v.getUsers()) {
    if (member) {  // [G, M, E]: a Gather of one member by a scalar index
      if (!isOp(user, "nn.gather") || user->getOperand(0) != v) return;
      auto axis = user->getAttrOfType<IntegerAttr>("axis");
      auto index = intsConstant(user->getOperand(1));
      auto index_type = dyn_cast<RankedTensorType>(user->getOperand(1).getType());
      const int64_t members = group / member;
      if (!axis || (axis.getInt() != -2 && axis.getInt() != split_rank - 2) || !index ||
          index->size() != 1 || !index_type || index_type.getRank() != 0 ||
          (*index)[0] < -members || (*index)[0] >= members)
        return;
      const int64_t m = (*index)[0] < 0 ? (*index)[0] + members : (*index)[0];
      slices.push_back({user, false, m * member, (m + 1) * member});
      continue;
    }
    if (auto range = lastAxisSlice(user, v, group)) {
      if (range->second <= range->first) return;
      slices.push_back({user, false, range->first, range->second});
      continue;
    }
    std::optional<std::pair<int64_t, int64_t>> range;
    if (reshape && !transpose) range = groupsAxisPart(user, v, groups);
    if (!range) return;
    slices.push_back({user, true, range->first, range->second});
  }
  // The weight is checked last: reading a constant's contents copies it.
  if (slices.empty() || partsRejoin(slices) || !float32Constant(w)) return;
  OpBuilder b(op);
  Location loc = op->getLoc();
  auto ints = [&](ArrayRef<int64_t> values) { return int64Constant(b, loc, values); };
  // Columns g * P + [s0, s1) of `x` ([.., N] along `axis`, the last) for every g.
  auto columns = [&](Value x, ArrayRef<int64_t> lead, int64_t s0, int64_t s1) -> Value {
    const int64_t axis = static_cast<int64_t>(lead.size());
    if (groups == 1)
      return kernelConstant(b, loc, "Slice", {}, {x, ints({s0}), ints({s1}), ints({axis})});
    SmallVector<int64_t> split(lead), merged(lead);
    split.append({groups, group});
    merged.push_back(groups * (s1 - s0));
    Value grouped = kernelConstant(b, loc, "Reshape", {}, {x, ints(split)});
    Value part = grouped ? kernelConstant(b, loc, "Slice", {},
                                          {grouped, ints({s0}), ints({s1}), ints({axis + 1})})
                         : Value();
    return part ? kernelConstant(b, loc, "Reshape", {}, {part, ints(merged)}) : Value();
  };
  // Groups [g0, g1) whole: the contiguous columns [g0 * P, g1 * P).
  auto wholeGroups = [&](Value x, int64_t axis, int64_t g0, int64_t g1) -> Value {
    return kernelConstant(b, loc, "Slice", {},
                          {x, ints({g0 * group}), ints({g1 * group}), ints({axis})});
  };
  std::vector<std::pair<Value, Value>> parts;  // (weight, bias) of each slice
  for (const Part& part : slices) {
    Value part_w =
        part.whole_groups ? wholeGroups(w, 1, part.s0, part.s1) : columns(w, {k}, part.s0, part.s1);
    Value part_b = !bias               ? Value()
                   : part.whole_groups ? wholeGroups(bias, 0, part.s0, part.s1)
                                       : columns(bias, {}, part.s0, part.s1);
    if (!part_w || (bias && !part_b)) return;  // the constants made so far are dead: erased later
    parts.push_back({part_w, part_b});
  }
  std::vector<Operation*> replaced = chain;
  for (size_t i = 0; i < slices.size(); ++i) {
    Operation* slice = slices[i].user;
    const int64_t width = slices[i].s1 - slices[i].s0;
    // The part's groups and the width of each (all of the groups' P, or `width` of every one).
    const int64_t part_groups = slices[i].whole_groups ? width : groups;
    const int64_t part_group = slices[i].whole_groups ? group : width;
    Location part_loc = fusedLoc(func.getContext(), {op, slice});
    SmallVector<int64_t> shape(y_type.getShape());
    shape.back() = part_groups * part_group;
    auto product_type = RankedTensorType::get(shape, y_type.getElementType());
    Value x = createOp(b, part_loc, "nn.matmul", {op->getOperand(0), parts[i].first}, product_type);
    carryNames(op, x.getDefiningOp());
    if (bias) {
      x = createOp(b, part_loc, "nn.add", {x, parts[i].second}, product_type);
      carryNames(chain[1], x.getDefiningOp());
    }
    const bool drops_axis = slices[i].whole_groups &&
                            cast<RankedTensorType>(slice->getResult(0).getType()).getRank() ==
                                y_type.getRank();  // a Gather by a scalar: [.., P] is the product
    if (reshape && !drops_axis) {
      SmallVector<int64_t> target(y_type.getRank() - 1, 0);  // 0: the input's dim
      target.append({part_groups, part_group});
      SmallVector<int64_t> split_shape(reshaped.getShape());
      if (member) split_shape.erase(split_shape.end() - 2);  // the Gather's [.., G, E]
      split_shape[split_shape.size() - 2] = part_groups;
      split_shape.back() = part_group;
      x = createOp(b, part_loc, "nn.reshape", {x, ints(target)},
                   RankedTensorType::get(split_shape, y_type.getElementType()));
      carryNames(reshape, x.getDefiningOp());
    }
    if (transpose) {
      x = createOp(b, part_loc, "nn.transpose", {x}, slice->getResult(0).getType(),
                   {b.getNamedAttr("perm", perm)});
    }
    carryNames(slice, x.getDefiningOp());
    slice->getResult(0).replaceAllUsesWith(x);
    replaced.push_back(slice);
  }
  logFusion(func, {true, kPass, "split-sliced-product", nodeNames(replaced), ""});
  for (size_t i = chain.size(); i < replaced.size(); ++i) replaced[i]->erase();
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) (*it)->erase();
}

class FuseMatMulPass : public impl::FuseMatMulBase<FuseMatMulPass> {
 public:
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Matcher matcher(func);
    std::vector<Operation*> ops;
    for (Operation& op : func.getBody().front())
      if (isOp(&op, "nn.matmul")) ops.push_back(&op);
    for (Operation* op : ops) splitSlicedProduct(func, op);
    ops.clear();
    for (Operation& op : func.getBody().front())
      if (isOp(&op, "nn.matmul") || isOp(&op, "nn.gemm")) ops.push_back(&op);
    for (Operation* op : ops) matcher.fuse(op);
    eraseDeadOps(func.getBody().front());
  }
};

}  // namespace
}  // namespace llmc
