// --llmc-fuse-gated-mlp: act(x·Wg) ⊙ (x·Wu), both products llm.fused_matmul of the same x
// with constant weights and no bias, becomes llm.gated_mlp with [Wg | Wu] concatenated at
// compile time: one pass over x and one output instead of two products and a Mul.
#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_FUSEGATEDMLP
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

constexpr const char* kPass = "fuse-gated-mlp";

// A fused_matmul's activation, or "" when `op` is not a plain [K, N] product (no bias, no
// transposed weight, alpha 1) with a constant weight.
std::optional<std::string> plainProduct(Operation* op) {
  if (!isOp(op, "llm.fused_matmul") || !isa<NoneType>(op->getOperand(2).getType()))
    return std::nullopt;
  if (auto t = op->getAttrOfType<IntegerAttr>("trans_b"); t && t.getInt() != 0) return std::nullopt;
  if (auto alpha = op->getAttrOfType<FloatAttr>("alpha"); alpha && alpha.getValueAsDouble() != 1.0)
    return std::nullopt;
  if (!float32Constant(op->getOperand(1))) return std::nullopt;
  auto activation = op->getAttrOfType<StringAttr>("activation");
  return activation ? activation.getValue().str() : std::string("none");
}

class FuseGatedMlpPass : public impl::FuseGatedMlpBase<FuseGatedMlpPass> {
 public:
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    std::vector<Operation*> muls;
    for (Operation& op : func.getBody().front())
      if (isOp(&op, "nn.mul")) muls.push_back(&op);
    for (Operation* mul : muls) fuse(func, mul);
    eraseDeadOps(func.getBody().front());
  }

  /// mul(fused_matmul{act}(x, Wg), fused_matmul{none}(x, Wu)) (either order) ->
  /// gated_mlp(x, [Wg | Wu]){act}.
  void fuse(func::FuncOp func, Operation* mul) {
    Operation* p = mul->getOperand(0).getDefiningOp();
    Operation* q = mul->getOperand(1).getDefiningOp();
    auto pa = p ? plainProduct(p) : std::nullopt;
    auto qa = q ? plainProduct(q) : std::nullopt;
    if (!pa || !qa) return;
    if (*pa == "none" && *qa != "none") {
      std::swap(p, q);
      std::swap(pa, qa);
    }
    auto miss = [&](const std::string& why) {
      logFusion(func, {false, kPass, "gated-mlp", nodeNames({p, q, mul}), why});
    };
    if (*pa == "none" || *qa != "none") return miss("not one activated and one plain product");
    if (p->getOperand(0) != q->getOperand(0)) return miss("the two products read different inputs");
    if (!p->getResult(0).hasOneUse() || !q->getResult(0).hasOneUse())
      return miss("a product has other users");
    if (p->getResult(0).getType() != q->getResult(0).getType() ||
        mul->getResult(0).getType() != p->getResult(0).getType())
      return miss("the gate and up products differ in shape");
    Tensor wg = *float32Constant(p->getOperand(1)), wu = *float32Constant(q->getOperand(1));
    if (wg.shape() != wu.shape()) return miss("the gate and up weights differ in shape");
    OpBuilder b(mul);
    std::vector<Operation*> ops{p, q, mul};
    Location loc = fusedLoc(func.getContext(), ops);
    // [Wg | Wu] by the runtime's Concat, so that refit recomputes it the same way.
    Value weight = kernelConstant(b, loc, "Concat", {b.getNamedAttr("axis", b.getI64IntegerAttr(1))},
                                  {p->getOperand(1), q->getOperand(1)});
    if (!weight) return miss("cannot concatenate the weights");
    Value y = createOp(b, loc, "llm.gated_mlp", {p->getOperand(0), weight}, mul->getResult(0).getType(),
                       {b.getNamedAttr("activation", b.getStringAttr(*pa))});
    carryNames(mul, y.getDefiningOp());
    mul->getResult(0).replaceAllUsesWith(y);
    logFusion(func, {true, kPass, "gated-mlp+" + *pa, nodeNames(ops), ""});
    mul->erase();
    p->erase();
    q->erase();
  }
};

}  // namespace
}  // namespace llmc
