// --llmc-fuse-rope: rotary embedding written as x * cos + rotate_half(x) * sin, with
// rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2]) (Hugging Face's Llama, Qwen2, Mistral
// ... exports: Slice, Slice, Neg, Concat, Mul, Mul, Add), becomes one llm.rope with per-token
// cos/sin tables; so does GPT-J's x * cos + rotate_every_two(x) * sin (interleaved pairs, on
// the heads before their transpose), and partial rotary folds into the rope.
#include <limits>

#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_FUSEROPE
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

constexpr const char* kPass = "fuse-rope";

class FuseRopePass : public impl::FuseRopeBase<FuseRopePass> {
 public:
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    std::vector<Operation*> adds;
    for (Operation& op : func.getBody().front())
      if (isOp(&op, "nn.add")) adds.push_back(&op);
    for (Operation* add : adds)
      if (!fuseInterleaved(func, add)) fuse(func, add);
    eraseDeadOps(func.getBody().front());
    std::vector<Operation*> concats;
    for (Operation& op : func.getBody().front())
      if (isOp(&op, "nn.concat")) concats.push_back(&op);
    for (Operation* concat : concats) fusePartial(func, concat);
    eraseDeadOps(func.getBody().front());
  }

  /// Partial rotary (GPT-NeoX, Phi-2, StableLM): concat(llm.rope(x[..., :R], cos, sin),
  /// x[..., R:]) on the last axis -> llm.rope(x, none, cos, sin) with the [.., R] tables, which
  /// rotates the first R values of each head and passes the rest through.
  void fusePartial(func::FuncOp func, Operation* concat) {
    if (concat->getNumOperands() != 2) return;
    Operation* rope = singleUseDef(concat->getOperand(0), "llm.rope");
    Operation* pass = singleUseDef(concat->getOperand(1), "nn.slice");
    if (!rope || !pass || !isa<NoneType>(rope->getOperand(1).getType())) return;
    Operation* head = singleUseDef(rope->getOperand(0), "nn.slice");
    if (!head || head->getOperand(0) != pass->getOperand(0)) return;
    Value x = head->getOperand(0);
    std::vector<Operation*> ops{head, pass, rope, concat};
    auto miss = [&](const std::string& why) {
      logFusion(func, {false, kPass, "partial-rope", nodeNames(ops), why});
    };
    auto type = dyn_cast<RankedTensorType>(x.getType());
    if (!type || type.getRank() != 4 || !isFloat32Tensor(type) || type.isDynamicDim(3))
      return miss("x is not a float32 [batch, heads, tokens, head_dim] with a static head_dim");
    const int64_t d = type.getDimSize(3);
    auto axis = concat->getAttrOfType<IntegerAttr>("axis");
    if (!axis || (axis.getInt() != -1 && axis.getInt() != 3)) return miss("the concat is not on the last axis");
    auto rotated = lastAxisSlice(head, x, d);
    auto passed = lastAxisSlice(pass, x, d);
    if (!rotated || !passed || rotated->first != 0 || passed->first != rotated->second ||
        passed->second != d || rotated->second < 2 || rotated->second % 2 != 0)
      return miss("the slices are not x[..., :R] and x[..., R:] with R even");
    auto table = dyn_cast<RankedTensorType>(rope->getOperand(2).getType());
    if (!table || table.getRank() != 4 || table.getDimSize(3) != rotated->second)
      return miss("the tables are not as wide as the rotated part");
    if (concat->getResult(0).getType() != type) return miss("the result is not x's shape");
    OpBuilder b(concat);
    SmallVector<NamedAttribute> attrs;  // interleaved, token_axis
    for (NamedAttribute attr : rope->getAttrs())
      if (!attr.getName().getValue().starts_with("llmc.")) attrs.push_back(attr);
    Value y =
        createOp(b, fusedLoc(func.getContext(), ops), "llm.rope",
                 {x, rope->getOperand(1), rope->getOperand(2), rope->getOperand(3)}, type, attrs);
    carryNames(concat, y.getDefiningOp());
    concat->getResult(0).replaceAllUsesWith(y);
    logFusion(func, {true, kPass, "partial-rope", nodeNames(ops), ""});
    for (Operation* op : {concat, rope, head, pass})
      if (op->use_empty()) op->erase();
  }

  /// GPT-J's interleaved rotary: add(mul(x, cos), mul(rotate_every_two(x), sin)) where
  /// rotate_every_two(x) = reshape(concat(unsqueeze(neg(x[..., 1::2]), -1),
  /// unsqueeze(x[..., ::2], -1)), x's shape) -> llm.rope(x, none, cos, sin) {interleaved = 1},
  /// on x [b, h, s, D] with [b | 1, 1, s, D] tables or, with token_axis = 1, on x [b, s, h, D]
  /// with [b | 1, s, 1, D] tables (GPT-J rotates its heads before the transpose). Returns
  /// whether the add was this pattern (fused or logged as a miss).
  bool fuseInterleaved(func::FuncOp func, Operation* add) {
    Operation* muls[2] = {singleUseDef(add->getOperand(0), "nn.mul"),
                          singleUseDef(add->getOperand(1), "nn.mul")};
    if (!muls[0] || !muls[1]) return false;
    // (x[..., start::2]) -> x, or null.
    auto everyOther = [](Operation* slice, int64_t start) -> Value {
      Value x = slice ? slice->getOperand(0) : Value();
      std::optional<ConstantSlice> c = slice ? constantSlice(slice, x) : std::nullopt;
      auto type = c ? cast<RankedTensorType>(x.getType()) : RankedTensorType();
      if (!c || type.isDynamicDim(type.getRank() - 1) || c->axis != type.getRank() - 1 ||
          c->step != 2 || c->start != start || c->end < type.getDimSize(type.getRank() - 1))
        return Value();
      return x;
    };
    auto lastAxisUnsqueeze = [](Operation* op) {
      auto axes = op && isOp(op, "nn.unsqueeze") ? intsConstant(op->getOperand(1)) : std::nullopt;
      auto type = op ? dyn_cast<RankedTensorType>(op->getResult(0).getType()) : nullptr;
      return axes && type && axes->size() == 1 &&
             ((*axes)[0] == -1 || (*axes)[0] == type.getRank() - 1);
    };
    for (int r = 0; r < 2; ++r) {
      Operation* rot_mul = muls[r];
      Operation* plain = muls[1 - r];
      for (int i = 0; i < 2; ++i) {
        Operation* reshape = singleUseDef(rot_mul->getOperand(i), "nn.reshape");
        Operation* concat = reshape ? singleUseDef(reshape->getOperand(0), "nn.concat") : nullptr;
        if (!concat || concat->getNumOperands() != 2) continue;
        // Stacked on a new last axis, then flattened back to x's shape: pairs interleave.
        auto stacked = cast<RankedTensorType>(concat->getResult(0).getType());
        auto axis = concat->getAttrOfType<IntegerAttr>("axis");
        if (!axis || (axis.getInt() != -1 && axis.getInt() != stacked.getRank() - 1)) continue;
        Operation* u0 = singleUseDef(concat->getOperand(0), "nn.unsqueeze");
        Operation* u1 = singleUseDef(concat->getOperand(1), "nn.unsqueeze");
        if (!lastAxisUnsqueeze(u0) || !lastAxisUnsqueeze(u1)) continue;
        Operation* neg = singleUseDef(u0->getOperand(0), "nn.neg");
        Operation* odd = neg ? singleUseDef(neg->getOperand(0), "nn.slice") : nullptr;
        Operation* even = singleUseDef(u1->getOperand(0), "nn.slice");
        Value x = everyOther(odd, 1);
        if (!x || x != everyOther(even, 0)) continue;
        std::vector<Operation*> ops{odd, even, neg, u0, u1, concat, reshape, rot_mul, plain, add};
        auto miss = [&](const std::string& why) {
          logFusion(func, {false, kPass, "interleaved-rope", nodeNames(ops), why});
          return true;
        };
        Value sin = rot_mul->getOperand(1 - i), cos;
        if (plain->getOperand(0) == x)
          cos = plain->getOperand(1);
        else if (plain->getOperand(1) == x)
          cos = plain->getOperand(0);
        else
          return miss("x * cos does not multiply the rotated tensor");
        auto type = dyn_cast<RankedTensorType>(x.getType());
        if (!type || type.getRank() != 4 || !isFloat32Tensor(type) || type.isDynamicDim(3) ||
            type.getDimSize(3) % 2 != 0 || add->getResult(0).getType() != type ||
            reshape->getResult(0).getType() != type)
          return miss(
              "x is not a float32 4-D tensor with an even static last axis, or the "
              "rotated pairs are not reshaped back to it");
        // The tables' layout: [b | 1, 1, s, D] (token_axis 2) or [b | 1, s, 1, D] (1).
        auto t = dyn_cast<RankedTensorType>(cos.getType());
        if (!t || t != sin.getType() || t.getRank() != 4 || !isFloat32Tensor(t) ||
            t.getDimSize(3) != type.getDimSize(3))
          return miss("cos/sin are not 4-D tables as wide as x");
        // The tables hold one row per batch row (or one for all) and token: their unit axis
        // is x's heads axis (static), their other axis x's tokens axis.
        auto same = [](int64_t a, int64_t b) {
          return a == b || (ShapedType::isDynamic(a) && ShapedType::isDynamic(b));
        };
        int64_t token_axis = 0;
        if (t.getDimSize(1) == 1 && !type.isDynamicDim(1) &&
            same(t.getDimSize(2), type.getDimSize(2)))
          token_axis = 2;
        else if (t.getDimSize(2) == 1 && !type.isDynamicDim(2) && t.getDimSize(1) != 1 &&
                 same(t.getDimSize(1), type.getDimSize(1)))
          token_axis = 1;
        if (!token_axis || (t.getDimSize(0) != 1 && !same(t.getDimSize(0), type.getDimSize(0))))
          return miss("cos/sin are not one row per token, broadcast over x's heads");
        OpBuilder b(add);
        Location loc = fusedLoc(func.getContext(), ops);
        SmallVector<NamedAttribute> attrs{b.getNamedAttr("interleaved", b.getI64IntegerAttr(1))};
        if (token_axis == 1) attrs.push_back(b.getNamedAttr("token_axis", b.getI64IntegerAttr(1)));
        Value y = createOp(b, loc, "llm.rope", {x, noneValue(b, loc), cos, sin}, type, attrs);
        carryNames(add, y.getDefiningOp());
        add->getResult(0).replaceAllUsesWith(y);
        logFusion(func, {true, kPass, "interleaved-rope", nodeNames(ops), ""});
        for (auto it = ops.rbegin(); it != ops.rend(); ++it)
          if ((*it)->use_empty()) (*it)->erase();
        return true;
      }
    }
    return false;
  }

  /// add(mul(x, cos), mul(concat(neg(x[D/2:]), x[:D/2]), sin)) -> llm.rope(x, none, cos, sin).
  void fuse(func::FuncOp func, Operation* add) {
    Operation* m0 = singleUseDef(add->getOperand(0), "nn.mul");
    Operation* m1 = singleUseDef(add->getOperand(1), "nn.mul");
    if (!m0 || !m1) return;
    // Find which product holds rotate_half(x).
    auto rotated = [](Operation* mul, Value* table) -> Operation* {
      for (int i = 0; i < 2; ++i)
        if (Operation* concat = singleUseDef(mul->getOperand(i), "nn.concat")) {
          *table = mul->getOperand(1 - i);
          return concat;
        }
      return nullptr;
    };
    Value sin, cos;
    Operation* concat = rotated(m1, &sin);
    Operation* plain = m0;
    if (!concat) {
      concat = rotated(m0, &sin);
      plain = m1;
    }
    if (!concat || concat->getNumOperands() != 2) return;
    Operation* neg = singleUseDef(concat->getOperand(0), "nn.neg");
    if (!neg) return;
    Value x = neg->getOperand(0).getDefiningOp() && isOp(neg->getOperand(0).getDefiningOp(), "nn.slice")
                  ? neg->getOperand(0).getDefiningOp()->getOperand(0)
                  : Value();
    if (!x) return;
    std::vector<Operation*> ops{neg->getOperand(0).getDefiningOp(), concat->getOperand(1).getDefiningOp(),
                                neg, concat, m0, m1, add};
    auto miss = [&](const std::string& why) {
      std::vector<Operation*> named;
      for (Operation* op : ops)
        if (op) named.push_back(op);
      logFusion(func, {false, kPass, "rope", nodeNames(named), why});
    };
    if (plain->getOperand(0) == x) cos = plain->getOperand(1);
    else if (plain->getOperand(1) == x) cos = plain->getOperand(0);
    else return miss("x * cos does not multiply the rotated tensor");
    auto type = dyn_cast<RankedTensorType>(x.getType());
    if (!type || type.getRank() != 4 || !isFloat32Tensor(type) || type.isDynamicDim(3) ||
        type.getDimSize(3) % 2 != 0)
      return miss("x is not a float32 [batch, heads, tokens, head_dim] with an even static head_dim");
    const int64_t d = type.getDimSize(3), half = d / 2;
    auto axis = concat->getAttrOfType<IntegerAttr>("axis");
    if (!axis || (axis.getInt() != -1 && axis.getInt() != 3)) return miss("the concat is not on the last axis");
    auto upper = lastAxisSlice(neg->getOperand(0).getDefiningOp(), x, d);
    auto lower = lastAxisSlice(concat->getOperand(1).getDefiningOp(), x, d);
    if (!upper || !lower || *upper != std::make_pair(half, d) || *lower != std::make_pair(int64_t{0}, half))
      return miss("the slices are not x[..., D/2:] and x[..., :D/2]");
    if (!neg->getOperand(0).hasOneUse() || !concat->getOperand(1).hasOneUse())
      return miss("a slice has other users");
    for (Value table : {cos, sin}) {
      auto t = dyn_cast<RankedTensorType>(table.getType());
      if (!t || t.getRank() != 4 || !isFloat32Tensor(t) || t.getDimSize(1) != 1 || t.getDimSize(3) != d)
        return miss("cos/sin are not [batch | 1, 1, tokens, head_dim] tables");
    }
    if (add->getResult(0).getType() != type) return miss("the result broadcasts x");
    OpBuilder b(add);
    Location loc = fusedLoc(func.getContext(), ops);
    Value y = createOp(b, loc, "llm.rope", {x, noneValue(b, loc), cos, sin}, type);
    carryNames(add, y.getDefiningOp());
    add->getResult(0).replaceAllUsesWith(y);
    logFusion(func, {true, kPass, "rope", nodeNames(ops), ""});
    for (Operation* op : {add, m0, m1, concat, neg, ops[0], ops[1]})
      if (op->use_empty()) op->erase();
  }
};

}  // namespace
}  // namespace llmc
