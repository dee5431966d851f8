// --llmc-fuse-norms: decomposed RMSNorm / LayerNorm (as exporters write them), ONNX's and
// ONNX Runtime's normalization ops, and a residual add in front of any of them, become one
// llm.norm.
#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_FUSENORMS
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

constexpr const char* kPass = "fuse-norms";

struct NormMatch {
  std::string kind;  // "rms" | "layer"
  Value x;
  double epsilon = 0;
  Value scale, bias;  // constants or null
  Value residual;     // set by the residual fusion
  Operation* last = nullptr;
  std::vector<Operation*> ops;
};

// The single user of `v` when it is named `name`.
Operation* onlyUser(Value v, StringRef name) {
  if (!v.hasOneUse()) return nullptr;
  Operation* user = *v.getUsers().begin();
  return isOp(user, name) ? user : nullptr;
}

// The operand of binary `op` other than `v` (null when `v` is neither).
Value otherOperand(Operation* op, Value v) {
  if (op->getOperand(0) == v) return op->getOperand(1);
  if (op->getOperand(1) == v) return op->getOperand(0);
  return Value();
}

// Does reduce_mean `op` reduce only the last axis of its input, keeping it?
bool reducesLastAxis(Operation* op) {
  auto type = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  if (!type || op->getNumOperands() < 2) return false;
  auto axes = intsConstant(op->getOperand(1));
  auto keepdims = op->getAttrOfType<IntegerAttr>("keepdims");
  if (keepdims && keepdims.getInt() == 0) return false;
  return axes && axes->size() == 1 && ((*axes)[0] == -1 || (*axes)[0] == type.getRank() - 1);
}

class Matcher {
 public:
  explicit Matcher(func::FuncOp func) : func_(func) {}

  void miss(const char* pattern, ArrayRef<Operation*> ops, const std::string& reason) {
    logFusion(func_, {false, kPass, pattern, nodeNames(ops), reason});
  }

  /// mean(x²) -> + eps -> sqrt -> (x / s | x * (1 / s) | x * reciprocal(s)): the normalized
  /// value of `x` (RMS), with `mean_op` the reduce_mean of x² (or of (x - mean)²).
  /// Returns the normalized value or null, filling ops/epsilon.
  Value matchDenominator(Operation* mean_op, Value x, NormMatch* m, std::string* why) {
    Operation* add = onlyUser(mean_op->getResult(0), "nn.add");
    if (!add) return *why = "mean(x²) does not flow only into an Add (+ epsilon)", Value();
    auto epsilon = scalarConstant(otherOperand(add, mean_op->getResult(0)));
    if (!epsilon) return *why = "the epsilon at " + where(add) + " is not a scalar constant", Value();
    Operation* sqrt = onlyUser(add->getResult(0), "nn.sqrt");
    if (!sqrt) return *why = "mean(x²) + epsilon at " + where(add) + " is not only square-rooted", Value();
    m->epsilon = *epsilon;
    m->ops.push_back(add);
    m->ops.push_back(sqrt);
    Value root = sqrt->getResult(0);
    if (!root.hasOneUse()) return *why = "the root at " + where(sqrt) + " has other users", Value();
    Operation* user = *root.getUsers().begin();
    if (isOp(user, "nn.div") && user->getOperand(1) == root && user->getOperand(0) == x) {
      m->ops.push_back(user);
      return user->getResult(0);
    }
    Value inverse;
    if (isOp(user, "nn.reciprocal")) {
      inverse = user->getResult(0);
    } else if (isOp(user, "nn.div") && user->getOperand(1) == root) {
      auto one = scalarConstant(user->getOperand(0));
      if (!one || *one != 1.0) return *why = where(user) + " divides something other than 1 or x", Value();
      inverse = user->getResult(0);
    } else {
      return *why = "the root at " + where(sqrt) + " is used by " + where(user) +
                    ", not a division", Value();
    }
    m->ops.push_back(user);
    Operation* scale = onlyUser(inverse, "nn.mul");
    if (!scale || otherOperand(scale, inverse) != x)
      return *why = "1 / root at " + where(user) + " does not multiply x", Value();
    m->ops.push_back(scale);
    return scale->getResult(0);
  }

  /// n -> (* gamma) -> (+ beta): the optional affine tail, constants of `width` values.
  void matchAffine(Value n, int64_t width, NormMatch* m) {
    m->last = n.getDefiningOp();
    if (Operation* mul = onlyUser(n, "nn.mul")) {
      Value gamma = otherOperand(mul, n);
      auto t = float32Constant(gamma);
      if (t && t->numElements() == width && cast<ShapedType>(mul->getResult(0).getType()) ==
                                                 cast<ShapedType>(n.getType())) {
        m->scale = gamma;
        m->ops.push_back(mul);
        m->last = mul;
        n = mul->getResult(0);
      }
    }
    if (Operation* add = onlyUser(n, "nn.add")) {
      Value beta = otherOperand(add, n);
      auto t = float32Constant(beta);
      if (t && t->numElements() == width && cast<ShapedType>(add->getResult(0).getType()) ==
                                                cast<ShapedType>(n.getType())) {
        m->bias = beta;
        m->ops.push_back(add);
        m->last = add;
      }
    }
  }

  /// RMSNorm: x * 1/sqrt(mean(x²) + eps) [* gamma], x² as Pow(x, 2) or Mul(x, x).
  bool matchRms(Operation* mean_op, NormMatch* m) {
    Value square = mean_op->getOperand(0);
    Operation* sq = square.getDefiningOp();
    Value x;
    if (isOp(sq, "nn.pow") && scalarConstant(sq->getOperand(1)) == 2.0)
      x = sq->getOperand(0);
    else if (isOp(sq, "nn.mul") && sq->getOperand(0) == sq->getOperand(1))
      x = sq->getOperand(0);
    else
      return false;
    if (!isFloat32Tensor(x.getType())) return false;
    auto type = cast<RankedTensorType>(x.getType());
    if (type.getRank() < 1 || type.isDynamicDim(type.getRank() - 1)) return false;
    m->ops = {sq, mean_op};
    std::string why;
    if (!square.hasOneUse()) why = "x² at " + where(sq) + " has other users";
    else if (!reducesLastAxis(mean_op)) why = where(mean_op) + " does not reduce the last axis (keepdims)";
    Value n;
    if (why.empty()) n = matchDenominator(mean_op, x, m, &why);
    if (!n) {
      miss("rms-norm", m->ops, why);
      return false;
    }
    m->kind = "rms";
    m->x = x;
    matchAffine(n, type.getDimSize(type.getRank() - 1), m);
    return true;
  }

  /// LayerNorm: d = x - mean(x); d / sqrt(mean(d²) + eps) [* gamma] [+ beta].
  bool matchLayer(Operation* mean_op, NormMatch* m) {
    Value x = mean_op->getOperand(0);
    if (!isFloat32Tensor(x.getType()) || !reducesLastAxis(mean_op)) return false;
    auto type = cast<RankedTensorType>(x.getType());
    if (type.isDynamicDim(type.getRank() - 1)) return false;
    Operation* sub = onlyUser(mean_op->getResult(0), "nn.sub");
    if (!sub || sub->getOperand(0) != x || sub->getOperand(1) != mean_op->getResult(0)) return false;
    Value d = sub->getResult(0);
    Operation *sq = nullptr, *divide = nullptr;
    for (Operation* user : d.getUsers()) {
      if ((isOp(user, "nn.pow") && scalarConstant(user->getOperand(1)) == 2.0) ||
          (isOp(user, "nn.mul") && user->getOperand(0) == d && user->getOperand(1) == d))
        sq = user;
      else if (isOp(user, "nn.div") && user->getOperand(0) == d)
        divide = user;
    }
    if (!sq) return false;  // not a LayerNorm (x - mean(x) used otherwise)
    m->ops = {mean_op, sub, sq};
    std::string why;
    Operation* var = onlyUser(sq->getResult(0), "nn.reduce_mean");
    size_t d_uses = static_cast<size_t>(std::distance(d.getUses().begin(), d.getUses().end()));
    if (!var || !reducesLastAxis(var)) why = "(x - mean)² at " + where(sq) + " is not only averaged over the last axis";
    else if (!divide || d_uses != 2) why = "x - mean at " + where(sub) + " has users besides its square and the division";
    Value n;
    if (why.empty()) {
      m->ops.push_back(var);
      n = matchDenominator(var, d, m, &why);
    }
    if (!n) {
      miss("layer-norm", m->ops, why);
      return false;
    }
    m->kind = "layer";
    m->x = x;
    matchAffine(n, type.getDimSize(type.getRank() - 1), m);
    return true;
  }

  /// ONNX LayerNormalization / RMSNormalization and ONNX Runtime's
  /// (Skip)SimplifiedLayerNormalization over the last axis, with only the normalized output
  /// (and Skip's sum) used.
  bool matchOp(Operation* op, NormMatch* m) {
    StringRef name = op->getName().getStringRef();
    bool layer = name == "nn.layer_normalization";
    bool rms = name == "nn.rms_normalization" || name == "nn.simplified_layer_normalization";
    bool skip = name == "nn.ms_skip_simplified_layer_normalization";
    if (!layer && !rms && !skip) return false;
    Value x = op->getOperand(0);
    if (!isFloat32Tensor(x.getType())) return false;
    auto type = cast<RankedTensorType>(x.getType());
    int64_t axis = -1;
    if (auto a = op->getAttrOfType<IntegerAttr>("axis")) axis = a.getInt();
    std::string why;
    unsigned scale_index = skip ? 2 : 1;
    if (axis != -1 && axis != type.getRank() - 1) why = "normalizes from axis " + std::to_string(axis) + ", not the last";
    else if (type.isDynamicDim(type.getRank() - 1)) why = "the normalized axis is not static";
    for (unsigned r = 1; r < op->getNumResults() && why.empty(); ++r)
      if (!op->getResult(r).use_empty() && !(skip && r == 3)) why = "its mean/inverse-std output is used";
    if (skip && op->getNumOperands() > 3 && !isa<NoneType>(op->getOperand(3).getType()))
      why = "a bias added before the normalization";
    if (skip && !sameShape(op->getOperand(0), op->getOperand(1))) why = "skip and input differ in shape";
    int64_t width = type.getRank() ? type.getDimSize(type.getRank() - 1) : 0;
    auto scale = float32Constant(op->getOperand(scale_index));
    if (why.empty() && (!scale || scale->numElements() != width)) why = "the scale is not a constant of " + std::to_string(width) + " values";
    if (why.empty() && !skip && op->getNumOperands() > 2 && !isa<NoneType>(op->getOperand(2).getType())) {
      auto bias = float32Constant(op->getOperand(2));
      if (!bias || bias->numElements() != width) why = "the bias is not a constant of " + std::to_string(width) + " values";
      else m->bias = op->getOperand(2);
    }
    if (!why.empty()) {
      miss(layer ? "layer-norm" : "rms-norm", {op}, why);
      return false;
    }
    m->kind = layer ? "layer" : "rms";
    m->x = x;
    m->scale = op->getOperand(scale_index);
    if (skip) m->residual = op->getOperand(1);
    auto epsilon = op->getAttrOfType<FloatAttr>("epsilon");
    m->epsilon = epsilon ? epsilon.getValueAsDouble() : 1e-5;
    m->ops = {op};
    m->last = op;
    return true;
  }

  // Writes llm.norm for `m` in place of m.last (and, for Skip ops, of their sum output).
  void rewrite(NormMatch& m, const char* pattern) {
    OpBuilder b(m.last);
    Location loc = fusedLoc(func_.getContext(), m.ops);
    auto type = cast<RankedTensorType>(m.x.getType());
    int64_t width = type.getDimSize(type.getRank() - 1);
    Value scale = m.scale;
    if (!scale) {
      Tensor ones = Tensor::allocate(DType::kFloat32, {width});
      for (int64_t i = 0; i < width; ++i) ones.data<float>()[i] = 1.0f;
      scale = float32ConstantOp(b, loc, ones, "");
    } else if (cast<ShapedType>(scale.getType()).getRank() != 1) {
      scale = kernelConstant(b, loc, "Reshape", {}, {scale, int64Constant(b, loc, {width})});
    }
    Value bias = m.bias ? m.bias : noneValue(b, loc);
    if (m.bias && cast<ShapedType>(bias.getType()).getRank() != 1)
      bias = kernelConstant(b, loc, "Reshape", {}, {bias, int64Constant(b, loc, {width})});
    Value residual = m.residual ? m.residual : noneValue(b, loc);
    SmallVector<Type> types{m.last->getResult(0).getType()};
    if (m.residual) types.push_back(type);
    OperationState state(loc, "llm.norm");
    state.addOperands({m.x, residual, scale, bias});
    state.addTypes(types);
    state.addAttribute("kind", b.getStringAttr(m.kind));
    state.addAttribute("epsilon", b.getF32FloatAttr(static_cast<float>(m.epsilon)));
    Operation* norm = b.create(state);
    carryNames(m.last, norm);
    if (m.residual)
      if (auto dims = m.last->getAttrOfType<ArrayAttr>("llmc.dims"); dims && !dims.empty())
        norm->setAttr("llmc.dims", b.getArrayAttr({dims[0], dims[0]}));
    m.last->getResult(0).replaceAllUsesWith(norm->getResult(0));
    if (m.residual && m.last->getNumResults() > 3)
      m.last->getResult(3).replaceAllUsesWith(norm->getResult(1));
    logFusion(func_, {true, kPass, pattern, nodeNames(m.ops), ""});
    for (auto it = m.ops.rbegin(); it != m.ops.rend(); ++it)
      if ((*it)->use_empty()) (*it)->erase();
  }

  /// x = a + b (same shapes) feeding a norm -> llm.norm(a, b) returning (y, a + b).
  void fuseResidual(Operation* norm) {
    if (!isa<NoneType>(norm->getOperand(1).getType())) return;
    Operation* add = norm->getOperand(0).getDefiningOp();
    if (!isOp(add, "nn.add")) return;
    Value a = add->getOperand(0), c = add->getOperand(1);
    std::string why;
    if (!sameShape(a, c) || !sameShape(a, add->getResult(0)))
      why = "the residual add at " + where(add) + " broadcasts";
    for (unsigned i = 2; i < 4 && why.empty(); ++i)
      if (Operation* def = norm->getOperand(i).getDefiningOp())
        if (!isa<nn::NoneOp>(def) && !def->isBeforeInBlock(add)) why = "the scale is defined after the add";
    if (!why.empty()) {
      miss("residual-norm", {add, norm}, why);
      return;
    }
    OpBuilder b(add->getBlock(), std::next(add->getIterator()));
    OperationState state(fusedLoc(func_.getContext(), {add, norm}), "llm.norm");
    SmallVector<Value> operands{a, c, norm->getOperand(2), norm->getOperand(3)};
    for (Value& operand : operands)
      if (isa<NoneType>(operand.getType()) && operand.getDefiningOp() &&
          !operand.getDefiningOp()->isBeforeInBlock(add))
        operand = noneValue(b, add->getLoc());
    state.addOperands(operands);
    state.addTypes({norm->getResult(0).getType(), add->getResult(0).getType()});
    state.addAttributes(norm->getAttrs());
    Operation* fused = b.create(state);
    auto dims = norm->getAttrOfType<ArrayAttr>("llmc.dims");
    auto add_dims = add->getAttrOfType<ArrayAttr>("llmc.dims");
    if (dims && add_dims && dims.size() == 1 && add_dims.size() == 1)
      fused->setAttr("llmc.dims", b.getArrayAttr({dims[0], add_dims[0]}));
    norm->getResult(0).replaceAllUsesWith(fused->getResult(0));
    add->getResult(0).replaceAllUsesWith(fused->getResult(1));
    logFusion(func_, {true, kPass, "residual-norm", nodeNames({add, norm}), ""});
    norm->erase();
    add->erase();
  }

 private:
  func::FuncOp func_;
};

class FuseNormsPass : public impl::FuseNormsBase<FuseNormsPass> {
 public:
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Matcher matcher(func);
    std::vector<Operation*> ops;
    for (Operation& op : func.getBody().front()) ops.push_back(&op);
    llvm::DenseSet<Operation*> erased;
    for (Operation* op : ops) {
      if (erased.contains(op)) continue;
      NormMatch m;
      const char* pattern = nullptr;
      if (isOp(op, "nn.reduce_mean")) {
        if (matcher.matchLayer(op, &m)) pattern = "layer-norm";
        else if (matcher.matchRms(op, &m)) pattern = "rms-norm";
      } else if (matcher.matchOp(op, &m)) {
        pattern = m.kind == "layer" ? "layer-norm" : "rms-norm";
      }
      if (!pattern) continue;
      for (Operation* matched : m.ops) erased.insert(matched);
      matcher.rewrite(m, pattern);
    }
    // Residual adds, once every norm is an llm.norm.
    std::vector<Operation*> norms;
    func.walk([&](Operation* op) {
      if (isOp(op, "llm.norm")) norms.push_back(op);
    });
    for (Operation* norm : norms) matcher.fuseResidual(norm);
    eraseDeadOps(func.getBody().front());
  }
};

}  // namespace
}  // namespace llmc
