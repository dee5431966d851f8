// --llmc-fuse-attention: an attention core left as separate ops (encoders such as BERT, or a
// decoder compiled --as-graph) — softmax(Q·Kᵀ * scale + mask)·V over [batch, heads, tokens,
// head_dim] — becomes one llm.sdpa, with Kᵀ's transpose folded into K's layout.
#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_FUSEATTENTION
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

constexpr const char* kPass = "fuse-attention";

class FuseAttentionPass : public impl::FuseAttentionBase<FuseAttentionPass> {
 public:
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    std::vector<Operation*> softmaxes;
    for (Operation& op : func.getBody().front())
      if (isOp(&op, "nn.softmax")) softmaxes.push_back(&op);
    for (Operation* softmax : softmaxes) fuse(func, softmax);
    eraseDeadOps(func.getBody().front());
  }

  /// matmul(softmax(matmul(Q, Kᵀ) [* | / c] [+ mask]), V) -> llm.sdpa(Q, K, V, mask).
  void fuse(func::FuncOp func, Operation* softmax) {
    std::vector<Operation*> ops{softmax};
    auto miss = [&](const std::string& why) {
      logFusion(func, {false, kPass, "attention", nodeNames(ops), why});
    };
    auto type = dyn_cast<RankedTensorType>(softmax->getResult(0).getType());
    auto axis = softmax->getAttrOfType<IntegerAttr>("axis");
    if (!type || type.getRank() != 4 || !isFloat32Tensor(type)) return;
    if (axis && axis.getInt() != -1 && axis.getInt() != 3) return miss("softmax is not over the keys");
    Value scores = softmax->getOperand(0);
    Value mask;
    if (Operation* add = singleUseDef(scores, "nn.add")) {
      // The operand that comes from Q·Kᵀ is the scores; the other is the additive mask.
      auto fromProduct = [](Value v) {
        Operation* def = v.getDefiningOp();
        if (isOp(def, "nn.mul") || isOp(def, "nn.div"))
          for (Value operand : def->getOperands())
            if (isOp(operand.getDefiningOp(), "nn.matmul")) return true;
        return isOp(def, "nn.matmul");
      };
      int scores_index = fromProduct(add->getOperand(0)) ? 0 : fromProduct(add->getOperand(1)) ? 1 : -1;
      if (scores_index < 0) return miss("the softmax input is not Q·Kᵀ plus a mask");
      mask = add->getOperand(1 - scores_index);
      scores = add->getOperand(scores_index);
      ops.push_back(add);
      auto mask_type = dyn_cast<RankedTensorType>(mask.getType());
      if (!mask_type || mask_type.getRank() < 2 || mask_type.getRank() > 4 || !isFloat32Tensor(mask_type))
        return miss("the mask is not a float32 tensor of rank 2 to 4");
    }
    double scale = 1.0;
    if (Operation* def = scores.getDefiningOp(); (isOp(def, "nn.mul") || isOp(def, "nn.div")) && scores.hasOneUse()) {
      int constant_index = scalarConstant(def->getOperand(1)) ? 1 : (isOp(def, "nn.mul") && scalarConstant(def->getOperand(0))) ? 0 : -1;
      if (constant_index < 0) return miss("the scores are scaled by a computed tensor");
      double c = *scalarConstant(def->getOperand(constant_index));
      if (isOp(def, "nn.div") && c == 0) return miss("the scores are divided by zero");
      scale = isOp(def, "nn.div") ? 1.0 / c : c;
      scores = def->getOperand(1 - constant_index);
      ops.push_back(def);
    }
    Operation* qk = singleUseDef(scores, "nn.matmul");
    if (!qk) return miss("the scores are not a MatMul used once");
    ops.push_back(qk);
    // torch's exported scaled_dot_product_attention scales Q and Kᵀ by √scale each: those
    // constants join the kernel's scale, and Q and Kᵀ are what they multiplied.
    Value q = qk->getOperand(0), kt = qk->getOperand(1);
    Operation* q_scale = singleUseDef(q, "nn.mul");
    Operation* k_scale = singleUseDef(kt, "nn.mul");
    if (q_scale && k_scale && scalarConstant(q_scale->getOperand(1)) && scalarConstant(k_scale->getOperand(1)) &&
        q_scale->getOperand(0).getType() == q.getType() && k_scale->getOperand(0).getType() == kt.getType()) {
      scale *= *scalarConstant(q_scale->getOperand(1)) * *scalarConstant(k_scale->getOperand(1));
      q = q_scale->getOperand(0);
      kt = k_scale->getOperand(0);
      ops.push_back(q_scale);
      ops.push_back(k_scale);
    }
    Value probs = softmax->getResult(0);
    // torch's exported scaled_dot_product_attention zeroes the rows whose every key is masked
    // (softmax gives NaN there): where(isnan(p), 0, p). llm.sdpa gives such rows zeros itself
    // (cpu/attend.h, cuda/attend_row.cuh), so the guard folds in.
    Operation* guard = nanGuard(probs);
    if (guard) {
      ops.push_back(guard->getOperand(0).getDefiningOp());
      ops.push_back(guard);
      probs = guard->getResult(0);
    }
    Operation* pv = probs.hasOneUse() ? *probs.getUsers().begin() : nullptr;
    if (!isOp(pv, "nn.matmul") || pv->getOperand(0) != probs) return miss("the probabilities do not multiply V alone");
    ops.push_back(pv);
    Value v = pv->getOperand(1);
    auto qt = dyn_cast<RankedTensorType>(q.getType());
    auto ktt = dyn_cast<RankedTensorType>(kt.getType());
    auto vt = dyn_cast<RankedTensorType>(v.getType());
    if (!qt || !ktt || !vt || qt.getRank() != 4 || ktt.getRank() != 4 || vt.getRank() != 4)
      return miss("Q, Kᵀ and V are not [batch, heads, tokens, head_dim]");
    if (qt.isDynamicDim(1) || qt.getDimSize(1) != ktt.getDimSize(1) || qt.getDimSize(1) != vt.getDimSize(1))
      return miss("Q, K and V heads differ (grouped-query heads are expanded by the model)");
    if (!isFloat32Tensor(qt) || !isFloat32Tensor(ktt) || !isFloat32Tensor(vt)) return miss("not float32");
    // K = Kᵀ with its last two axes swapped: fold into Kᵀ's own transpose when it has one.
    OpBuilder b(pv);
    Location loc = fusedLoc(func.getContext(), ops);
    Value k;
    Operation* kt_def = singleUseDef(kt, "nn.transpose");
    auto swapLast = [](ArrayRef<int64_t> perm) {
      SmallVector<int64_t> p(perm.begin(), perm.end());
      std::swap(p[2], p[3]);
      return p;
    };
    auto k_type = RankedTensorType::get({ktt.getDimSize(0), ktt.getDimSize(1), ktt.getDimSize(3), ktt.getDimSize(2)},
                                        ktt.getElementType());
    if (auto perm = kt_def ? kt_def->getAttrOfType<DenseI64ArrayAttr>("perm") : DenseI64ArrayAttr();
        perm && perm.size() == 4) {
      SmallVector<int64_t> composed = swapLast(perm.asArrayRef());
      bool identity = composed == SmallVector<int64_t>{0, 1, 2, 3};
      Value source = kt_def->getOperand(0);
      k = identity ? source
                   : createOp(b, loc, "nn.transpose", {source}, k_type,
                              {b.getNamedAttr("perm", b.getDenseI64ArrayAttr(composed))});
      ops.push_back(kt_def);
    } else {
      k = createOp(b, loc, "nn.transpose", {kt}, k_type,
                   {b.getNamedAttr("perm", b.getDenseI64ArrayAttr({0, 1, 3, 2}))});
    }
    Value y = createOp(b, loc, "llm.sdpa", {q, k, v, mask ? mask : noneValue(b, loc)}, pv->getResult(0).getType(),
                       {b.getNamedAttr("scale", b.getF32FloatAttr(static_cast<float>(scale)))});
    carryNames(pv, y.getDefiningOp());
    pv->getResult(0).replaceAllUsesWith(y);
    logFusion(func, {true, kPass, mask ? "attention+mask" : "attention", nodeNames(ops), ""});
    pv->erase();  // what it used, now dead, goes with eraseDeadOps after every softmax
  }

  /// where(isnan(p), 0, p) with p (the softmax) used only there: the where, else null.
  static Operation* nanGuard(Value probs) {
    if (std::distance(probs.use_begin(), probs.use_end()) != 2) return nullptr;
    for (Operation* user : probs.getUsers()) {
      if (!isOp(user, "nn.is_nan") || !user->getResult(0).hasOneUse()) continue;
      Operation* where = *user->getResult(0).getUsers().begin();
      std::optional<double> zero =
          isOp(where, "nn.where") ? scalarConstant(where->getOperand(1)) : std::nullopt;
      if (where->getOperand(0) == user->getResult(0) && zero && *zero == 0.0 &&
          where->getOperand(2) == probs && where->getResult(0).getType() == probs.getType())
        return where;
    }
    return nullptr;
  }
};

}  // namespace
}  // namespace llmc
