// --llmc-recognize-llm: a decoder language model's attention cores become llm.attention over
// the engine-managed paged KV cache, its Range(0, seq) position computations become
// llm.positions, and what is left must compute every token independently. All or nothing:
// on any failure the function is restored and the reasons are recorded.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "core/kernel.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/RegionUtils.h"
#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/MaskProof.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_RECOGNIZELLM
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

// Does anything a MatMul/Gemm computed flow into `v`? (Masks are built from shapes and the
// attention mask input only; scores come from Q·Kᵀ.)
bool dependsOnMatMul(Value v, llvm::DenseMap<Value, bool>& memo) {
  auto it = memo.find(v);
  if (it != memo.end()) return it->second;
  bool result = false;
  if (Operation* op = v.getDefiningOp()) {
    if (isOp(op, "nn.shape") || isOp(op, "nn.size")) {
      result = false;  // sizes, not data
    } else if (isOp(op, "nn.matmul") || isOp(op, "nn.gemm") || isa<llm::AttentionOp>(op)) {
      result = true;
    } else {
      memo[v] = false;  // guards cycles (none in SSA, but cheap)
      for (Value operand : op->getOperands())
        if (dependsOnMatMul(operand, memo)) result = true;
    }
  }
  memo[v] = result;
  return result;
}

struct AttentionMatch {
  Operation* softmax = nullptr;
  Operation* scores_matmul = nullptr;
  Operation* output_matmul = nullptr;
  std::vector<Operation*> chain;  // ops from the scores to the output, to erase
  Value q, k_transposed, v_full;
  double scale = 1.0;
  // The mask: kAdd adds `mask`; kWhere selects the scores where `mask` is true (false when
  // `where_scores_on_false`) and `fill` elsewhere.
  enum class MaskKind { kNone, kAdd, kWhere } mask_kind = MaskKind::kNone;
  Value mask, fill;
  bool where_scores_on_false = false;
  int64_t window = 0;  // proven: 0 causal, W > 0 a sliding window of W keys
  // Logit soft-capping (Gemma-2): the scores are c * tanh(x) with x the scaled scores. `cap`
  // is c, the product of the constant factors met between the softmax and the Tanh (0: no
  // Tanh); `scale` holds those inside it.
  double cap = 0;
  // Scale factors computed from shapes (e.g. sqrt(head_dim) via Shape/Pow), evaluated with
  // the masks: (value, divides).
  std::vector<std::pair<Value, bool>> shape_scales;
  // Heads merged into the batch axis (Bloom's baddbmm): the scores are [batch x heads, q, k],
  // reshaped to [batch, heads, q, k] for the mask and the softmax and back for the product
  // with V, whose result `heads_split` reshapes to [batch, heads, q, d]. `merged_heads` is the
  // head count (0: not merged); q, k (here not transposed) and v_full are the [batch, heads,
  // ..] tensors the merged ones were reshaped from.
  int64_t merged_heads = 0;
  Operation* heads_split = nullptr;
  std::vector<Operation*> output_shapes;  // Shape ops reading the merged output's sizes
  Value k;
  // ALiBi: a second additive bias (met after the mask, walking from the softmax), proven
  // linear in the key position; `alibi_scale` is the product of the constant factors met
  // before it, which scale the bias as well as the scores.
  Value alibi;
  Operation* alibi_add = nullptr;
  double alibi_scale = 1.0;
  std::vector<double> slopes;
};

// `op` as Mul(x, c), Mul(c, x) or Div(x, c) with a constant scalar c: c, whether it divides,
// and x. Nothing for anything else.
struct ScalarFactor {
  double value;
  bool divides;
  Value other;
};
std::optional<ScalarFactor> scalarFactor(Operation* op) {
  bool mul = isOp(op, "nn.mul"), div = isOp(op, "nn.div");
  if (!mul && !div) return std::nullopt;
  if (auto c = scalarConstant(op->getOperand(1))) return ScalarFactor{*c, div, op->getOperand(0)};
  if (mul)
    if (auto c = scalarConstant(op->getOperand(0))) return ScalarFactor{*c, false, op->getOperand(1)};
  return std::nullopt;
}

// llm.attention(q, k, v) with layer 0 (numbered once all are found), carrying `names`.
// `softcap` > 0 caps the scaled scores at ±softcap (llm.attention's description).
Value createAttention(OpBuilder& b, Location loc, Value q, Value k, Value v, Type type,
                      double scale, int64_t window, Attribute names, double softcap = 0) {
  SmallVector<NamedAttribute> attrs = {
      b.getNamedAttr("layer", b.getI64IntegerAttr(0)),
      b.getNamedAttr("scale", b.getF32FloatAttr(static_cast<float>(scale)))};
  if (window > 0) attrs.push_back(b.getNamedAttr("window", b.getI64IntegerAttr(window)));
  if (softcap > 0)
    attrs.push_back(b.getNamedAttr("softcap", b.getF32FloatAttr(static_cast<float>(softcap))));
  Value attention = createOp(b, loc, "llm.attention", {q, k, v}, type, attrs);
  if (names) attention.getDefiningOp()->setAttr("llmc.names", names);
  return attention;
}

// Two dims agree: equal static sizes, or dynamic with the same symbol.
bool sameDim(Value a, int64_t i, Value b, int64_t j) {
  auto ta = dyn_cast<RankedTensorType>(a.getType());
  auto tb = dyn_cast<RankedTensorType>(b.getType());
  if (!ta || !tb || i >= ta.getRank() || j >= tb.getRank()) return false;
  if (!ta.isDynamicDim(i) || !tb.isDynamicDim(j)) return ta.getDimSize(i) == tb.getDimSize(j);
  std::vector<std::string> na = dimNamesOf(a), nb = dimNamesOf(b);
  return static_cast<size_t>(i) < na.size() && static_cast<size_t>(j) < nb.size() &&
         !na[i].empty() && na[i] == nb[j];
}

// `v` = Reshape(x) with x [batch, heads, s, d] and v [batch x heads, s, d]: x. Null otherwise.
Value unmergeHeads(Value v, int64_t heads) {
  Operation* reshape = v.getDefiningOp();
  if (!isOp(reshape, "nn.reshape")) return Value();
  Value x = reshape->getOperand(0);
  auto type = dyn_cast<RankedTensorType>(x.getType());
  auto merged = dyn_cast<RankedTensorType>(v.getType());
  if (!type || !merged || type.getRank() != 4 || merged.getRank() != 3 ||
      type.getDimSize(1) != heads || !sameDim(x, 2, v, 1) || !sameDim(x, 3, v, 2))
    return Value();
  return x;
}

// The [batch, heads, ..] tensors of a core whose heads are merged into the batch axis (see
// AttentionMatch::merged_heads), or a failure.
std::string unmergeCore(AttentionMatch* m) {
  const int64_t heads = m->merged_heads;
  Value q = unmergeHeads(m->q, heads);
  // Kᵀ: Transpose(K [batch x heads, k, d], [0, 2, 1]).
  Operation* transpose = m->k_transposed.getDefiningOp();
  auto perm = transpose ? transpose->getAttrOfType<DenseI64ArrayAttr>("perm") : nullptr;
  Value k =
      isOp(transpose, "nn.transpose") && perm && perm.asArrayRef() == ArrayRef<int64_t>{0, 2, 1}
          ? unmergeHeads(transpose->getOperand(0), heads)
          : Value();
  Value v = unmergeHeads(m->v_full, heads);
  if (!q || !k || !v)
    return "the scores at " + where(m->scores_matmul) +
           " merge the heads into the batch axis, and Q, K or V is not a [batch, heads, seq, "
           "head_dim] tensor reshaped so";
  Value out = m->output_matmul->getResult(0);
  Operation* split = nullptr;
  for (Operation* user : out.getUsers()) {
    if (isOp(user, "nn.shape")) {
      m->output_shapes.push_back(user);
      continue;
    }
    if (split) return "the attention output at " + where(m->output_matmul) + " has other users";
    split = user;
  }
  if (!split) return "the attention output at " + where(m->output_matmul) + " is not used";
  auto split_type = dyn_cast<RankedTensorType>(split->getResult(0).getType());
  if (!isOp(split, "nn.reshape") || !split_type || split_type.getRank() != 4 ||
      split_type.getDimSize(1) != heads || !sameDim(out, 1, split->getResult(0), 2) ||
      !sameDim(out, 2, split->getResult(0), 3))
    return where(split) +
           " does not split the attention output [batch x heads, seq, head_dim] "
           "into [batch, heads, seq, head_dim]";
  m->q = q;
  m->k = k;
  m->v_full = v;
  m->heads_split = split;
  return "";
}

// A failure message, or empty on success.
std::string matchAttention(Operation* softmax, AttentionMatch* m) {
  m->softmax = softmax;
  auto axis = softmax->getAttrOfType<IntegerAttr>("axis");
  auto in_type = dyn_cast<RankedTensorType>(softmax->getOperand(0).getType());
  int64_t rank = in_type ? in_type.getRank() : 4;
  if (axis && axis.getInt() != -1 && axis.getInt() != rank - 1)
    return "softmax is not over the last axis";
  llvm::DenseMap<Value, bool> memo;
  Value current = softmax->getOperand(0);
  while (true) {
    Operation* op = current.getDefiningOp();
    if (!op) return "the softmax input is a model input";
    if (!current.hasOneUse()) return "the attention scores at " + where(op) + " have other users";
    StringRef name = op->getName().getStringRef();
    if (name == "nn.cast") {
      m->chain.push_back(op);
      current = op->getOperand(0);
    } else if (auto factor = scalarFactor(op)) {
      if (factor->divides && factor->value == 0) return where(op) + " divides the scores by zero";
      m->scale = factor->divides ? m->scale / factor->value : m->scale * factor->value;
      m->chain.push_back(op);
      current = factor->other;
    } else if (name == "nn.mul" || name == "nn.div") {
      // A factor computed from shapes only: evaluated (and checked constant) with the masks.
      int shape_index = !dependsOnMatMul(op->getOperand(1), memo)                     ? 1
                        : name == "nn.mul" && !dependsOnMatMul(op->getOperand(0), memo) ? 0
                                                                                         : -1;
      if (shape_index < 0) return where(op) + " scales the scores by a computed tensor";
      m->shape_scales.push_back({op->getOperand(shape_index), name == "nn.div"});
      m->chain.push_back(op);
      current = op->getOperand(1 - shape_index);
    } else if (name == "nn.add") {
      bool a = dependsOnMatMul(op->getOperand(0), memo);
      bool b = dependsOnMatMul(op->getOperand(1), memo);
      if (a == b) return where(op) + ": cannot tell the scores from the mask";
      if (m->mask_kind == AttentionMatch::MaskKind::kNone) {
        m->mask_kind = AttentionMatch::MaskKind::kAdd;
        m->mask = op->getOperand(a ? 1 : 0);
      } else if (!m->alibi) {
        // A second bias after the mask: ALiBi's, proven with the mask.
        if (!m->shape_scales.empty())
          return where(op) + ": a factor computed from shapes scales the second bias";
        m->alibi = op->getOperand(a ? 1 : 0);
        m->alibi_add = op;
        m->alibi_scale = m->scale;
      } else {
        return where(op) + " adds a third bias to the scores";
      }
      m->chain.push_back(op);
      current = op->getOperand(a ? 0 : 1);
    } else if (name == "nn.reshape" && m->merged_heads == 0) {
      // [batch x heads, q, k] -> [batch, heads, q, k]: scores computed with the heads merged
      // into the batch axis (Bloom).
      Value scores = op->getOperand(0);
      auto in = dyn_cast<RankedTensorType>(scores.getType());
      auto out = dyn_cast<RankedTensorType>(current.getType());
      if (!in || !out || in.getRank() != 3 || out.getRank() != 4 ||
          ShapedType::isDynamic(out.getDimSize(1)) || !sameDim(scores, 1, current, 2) ||
          !sameDim(scores, 2, current, 3))
        return where(op) +
               " (nn.reshape) sits between the scores and the softmax (not a "
               "split of [batch x heads, q, k] scores into [batch, heads, q, k])";
      m->merged_heads = out.getDimSize(1);
      m->chain.push_back(op);
      current = scores;
    } else if (name == "nn.where") {
      if (m->mask_kind != AttentionMatch::MaskKind::kNone)
        return where(op) + " masks the scores a second time";
      bool x = dependsOnMatMul(op->getOperand(1), memo);
      bool y = dependsOnMatMul(op->getOperand(2), memo);
      if (x == y || dependsOnMatMul(op->getOperand(0), memo))
        return where(op) + ": cannot tell the scores from the mask";
      m->mask_kind = AttentionMatch::MaskKind::kWhere;
      m->mask = op->getOperand(0);
      m->where_scores_on_false = y;
      m->fill = op->getOperand(x ? 2 : 1);
      m->chain.push_back(op);
      current = op->getOperand(x ? 1 : 2);
    } else if (name == "nn.tanh") {
      // softcap * tanh(scores / softcap): the factors met so far are the cap; those before
      // the Tanh scale the scores inside it. The mask must come after the Tanh (met before
      // it here): a Tanh of the masked scores does not mask, and a mask met after the Tanh
      // is a second bias, refused above.
      if (m->cap != 0) return where(op) + " soft-caps the scores a second time";
      if (m->mask_kind == AttentionMatch::MaskKind::kNone)
        return where(op) +
               " soft-caps the scores after the mask is added (a Tanh of the masked scores "
               "does not mask)";
      if (!m->shape_scales.empty())
        return where(op) + ": a computed factor multiplies the soft-capped scores";
      if (m->alibi)
        return where(op) +
               " soft-caps scores that carry a second bias (ALiBi and soft-capping "
               "together are not supported)";
      const double cap = std::fabs(m->scale);
      if (!(cap >= std::numeric_limits<float>::min() && cap <= std::numeric_limits<float>::max()))
        return where(op) + ": the soft-cap " + std::to_string(m->scale) +
               " is not a finite, normal float32";
      m->cap = m->scale;
      m->scale = 1.0;
      m->chain.push_back(op);
      current = op->getOperand(0);
    } else if (name == "nn.matmul") {
      m->scores_matmul = op;
      break;
    } else {
      return where(op) + " (" + name.str() + ") sits between the scores and the softmax";
    }
  }
  m->q = m->scores_matmul->getOperand(0);
  m->k_transposed = m->scores_matmul->getOperand(1);
  // SDPA exports scale Kᵀ (and Q) by sqrt(scale) each; Kᵀ's factor joins the scale (Q's stays
  // in the graph: it is computed per token).
  while (Operation* def = m->merged_heads ? nullptr : m->k_transposed.getDefiningOp()) {
    std::optional<ScalarFactor> factor = scalarFactor(def);
    if (!factor || !m->k_transposed.hasOneUse() || (factor->divides && factor->value == 0)) break;
    m->scale = factor->divides ? m->scale / factor->value : m->scale * factor->value;
    m->chain.push_back(def);
    m->k_transposed = factor->other;
  }
  // Forward: softmax -> casts -> MatMul(P, V).
  Value probs = softmax->getResult(0);
  while (true) {
    if (!probs.hasOneUse()) return "the attention probabilities at " + where(softmax) +
                                   " have other users";
    Operation* user = *probs.getUsers().begin();
    if (isOp(user, "nn.cast")) {
      m->chain.push_back(user);
      probs = user->getResult(0);
      continue;
    }
    if (isOp(user, "nn.reshape") && m->merged_heads) {  // back to [batch x heads, q, k]
      auto type = dyn_cast<RankedTensorType>(user->getResult(0).getType());
      if (!type || type.getRank() != 3 || !sameDim(probs, 2, user->getResult(0), 1) ||
          !sameDim(probs, 3, user->getResult(0), 2))
        return where(user) +
               " reshapes the attention probabilities into something other than "
               "[batch x heads, q, k]";
      m->chain.push_back(user);
      probs = user->getResult(0);
      continue;
    }
    if (isOp(user, "nn.matmul") && user->getOperand(0) == probs) {
      m->output_matmul = user;
      m->v_full = user->getOperand(1);
      break;
    }
    if (isOp(user, "nn.top_k"))
      return where(user) +
             " picks the top experts from the softmax: mixture-of-experts routing, "
             "which llmc does not move onto the KV cache yet (the graph runs it)";
    return where(user) + " consumes the attention probabilities instead of a MatMul with V";
  }
  if (m->merged_heads)
    if (std::string error = unmergeCore(m); !error.empty()) return error;
  auto q_type = dyn_cast<RankedTensorType>(m->q.getType());
  if (!q_type || q_type.getRank() != 4 || ShapedType::isDynamic(q_type.getDimSize(1)) ||
      ShapedType::isDynamic(q_type.getDimSize(3)))
    return "Q at " + where(m->scores_matmul) + " is not [batch, heads, seq, head_dim] with static heads and head_dim";
  return "";
}

// Un-expands transformers' repeat_kv: Reshape(Expand(Unsqueeze(x, [2]), ...), [b, H, s, d])
// -> x ([b, Hkv, s, d]); and multi-query's Expand(y [b, 1, s, d]) -> [b, H, s, d] along the
// heads only (GPT-BigCode) -> y. Returns `v` itself when it is neither pattern.
Value unexpandKv(Value v) {
  Operation* reshape = v.getDefiningOp();
  if (isOp(reshape, "nn.expand")) {
    Value y = reshape->getOperand(0);
    auto in = dyn_cast<RankedTensorType>(y.getType());
    auto out = dyn_cast<RankedTensorType>(v.getType());
    if (!in || !out || in.getRank() != 4 || out.getRank() != 4 || in.getDimSize(1) != 1 ||
        ShapedType::isDynamic(out.getDimSize(1)))
      return v;
    std::vector<std::string> in_names = dimNamesOf(y), out_names = dimNamesOf(v);
    for (int64_t d : {0, 2, 3}) {
      const bool same_static =
          !ShapedType::isDynamic(in.getDimSize(d)) && in.getDimSize(d) == out.getDimSize(d);
      const bool same_symbol = ShapedType::isDynamic(in.getDimSize(d)) &&
                               ShapedType::isDynamic(out.getDimSize(d)) && in_names.size() == 4 &&
                               out_names.size() == 4 && !in_names[d].empty() &&
                               in_names[d] == out_names[d];
      if (!same_static && !same_symbol) return v;
    }
    return y;
  }
  if (!isOp(reshape, "nn.reshape")) return v;
  Operation* expand = reshape->getOperand(0).getDefiningOp();
  if (!isOp(expand, "nn.expand")) return v;
  Operation* unsqueeze = expand->getOperand(0).getDefiningOp();
  if (!isOp(unsqueeze, "nn.unsqueeze")) return v;
  auto axes = intsConstant(unsqueeze->getOperand(1));
  if (!axes || axes->size() != 1 || (*axes)[0] != 2) return v;
  auto x = dyn_cast<RankedTensorType>(unsqueeze->getOperand(0).getType());
  auto expanded = dyn_cast<RankedTensorType>(expand->getResult(0).getType());
  auto out = dyn_cast<RankedTensorType>(v.getType());
  if (!x || !expanded || !out || x.getRank() != 4 || expanded.getRank() != 5 || out.getRank() != 4)
    return v;
  int64_t kv_heads = x.getDimSize(1), rep = expanded.getDimSize(2), heads = out.getDimSize(1);
  if (ShapedType::isDynamic(kv_heads) || ShapedType::isDynamic(rep) ||
      ShapedType::isDynamic(heads) || kv_heads * rep != heads || expanded.getDimSize(1) != kv_heads ||
      x.getDimSize(3) != out.getDimSize(3))
    return v;
  return unsqueeze->getOperand(0);
}

// Concat(past, new) along the sequence axis where the past is empty (a cache export after
// --llmc-strip-kv-io) is just `new`.
Value skipEmptyPast(Value v) {
  Operation* concat = v.getDefiningOp();
  if (!isOp(concat, "nn.concat")) return v;
  auto type = dyn_cast<RankedTensorType>(v.getType());
  auto axis_attr = concat->getAttrOfType<IntegerAttr>("axis");
  if (!type || !axis_attr) return v;
  int64_t axis = axis_attr.getInt() < 0 ? axis_attr.getInt() + type.getRank() : axis_attr.getInt();
  // The sequence axis of [batch, heads, seq, head_dim] only: a Concat along the head size
  // with an empty part is Phi-3's partial rotary, which --llmc-fuse-rope reads.
  if (axis != type.getRank() - 2) return v;
  Value kept;
  for (Value operand : concat->getOperands()) {
    auto t = dyn_cast<RankedTensorType>(operand.getType());
    if (t && t.getRank() == type.getRank() && t.getDimSize(axis) == 0) continue;
    if (kept) return v;  // two non-empty parts
    kept = operand;
  }
  return kept ? kept : v;
}

// --- Mixture of experts ---------------------------------------------------------------------
//
// transformers' sparse MoE block (Mixtral's) as torch.onnx traces it, per layer: router
// probabilities softmax(x·Wg) (rows x [T, H]), TopK(K) of them, renormalized by their sum; a
// one-hot expert mask Transpose(OneHot(selected, E), [2, 1, 0]) [E, K, T]; for each expert e a
// branch that takes (slot, token) pairs from NonZero(mask[e]), gathers the tokens' rows, runs
// silu(x·W1) * (x·W3) · W2 on them, multiplies by the routing weight read at token * K + slot,
// and ScatterElements the rows back at the tokens into zeros, added to an accumulator that
// starts at zeros. The whole block becomes one llm.moe; anything else is refused, naming the
// node.

// `v` through casts that keep its element type (float32 to float32: the routing arithmetic is
// the kernel's only then).
Value throughCasts(Value v) {
  while (Operation* def = v.getDefiningOp()) {
    auto from = dyn_cast<ShapedType>(def->getNumOperands() ? def->getOperand(0).getType() : Type());
    auto to = dyn_cast<ShapedType>(v.getType());
    if (!isOp(def, "nn.cast") || !from || !to || from.getElementType() != to.getElementType())
      break;
    v = def->getOperand(0);
  }
  return v;
}

// A float32 weight: an nn.constant (its contents are not read: that would copy them).
bool isFloat32Weight(Value v) {
  return isa_and_nonnull<nn::ConstantOp>(v.getDefiningOp()) && isFloat32Tensor(v.getType());
}

// `v`'s user, followed through casts, when it has exactly one; else null.
Operation* soleUser(Value* v) {
  while (v->hasOneUse()) {
    Operation* user = *v->getUsers().begin();
    if (!isOp(user, "nn.cast")) return user;
    *v = user->getResult(0);
  }
  return nullptr;
}

std::optional<int64_t> intScalar(Value v) {
  auto values = intsConstant(v);
  if (!values || values->size() != 1) return std::nullopt;
  return (*values)[0];
}

bool isZeros(Value v) {
  Operation* def = v.getDefiningOp();
  if (!isOp(def, "nn.constant_of_shape")) return false;
  auto value = def->getAttrOfType<DenseElementsAttr>("value");
  if (!value) return true;  // ONNX's default: a float 0
  if (value.getNumElements() != 1 || !isa<FloatType>(value.getElementType())) return false;
  return (*value.getValues<APFloat>().begin()).isZero();
}

// `v` is the integer 1 (a scalar or one element): a constant, or the size of an axis of static
// size 1 read by Gather(Shape(u), i), through Unsqueeze, Squeeze and Cast.
bool isOne(Value v) {
  if (auto c = intsConstant(v)) return c->size() == 1 && (*c)[0] == 1;
  Operation* def = v.getDefiningOp();
  if (isOp(def, "nn.unsqueeze") || isOp(def, "nn.squeeze") || isOp(def, "nn.cast"))
    return isOne(def->getOperand(0));
  if (!isOp(def, "nn.gather")) return false;
  Operation* shape = def->getOperand(0).getDefiningOp();
  auto index = intsConstant(def->getOperand(1));
  auto type = isOp(shape, "nn.shape") ? dyn_cast<RankedTensorType>(shape->getOperand(0).getType())
                                      : RankedTensorType();
  if (!type || !index || index->size() != 1 || shape->getAttr("start") || shape->getAttr("end"))
    return false;
  const int64_t axis = (*index)[0] < 0 ? (*index)[0] + type.getRank() : (*index)[0];
  return axis >= 0 && axis < type.getRank() && type.getDimSize(axis) == 1;
}

// A Reshape to [something, 1]: its target has two elements, the second provably 1; the first
// one element, or the Shape of `vector` (a 1-D value whose type may be left to run time).
bool reshapesToColumn(Operation* reshape, Value vector) {
  Value target = reshape->getOperand(1);
  if (auto c = intsConstant(target)) return c->size() == 2 && (*c)[1] == 1;
  Operation* concat = target.getDefiningOp();
  if (!isOp(concat, "nn.concat") || concat->getNumOperands() != 2) return false;
  auto first = dyn_cast<RankedTensorType>(concat->getOperand(0).getType());
  auto second = dyn_cast<RankedTensorType>(concat->getOperand(1).getType());
  Operation* shape = concat->getOperand(0).getDefiningOp();
  const bool one_element = (first && first.getRank() == 1 && first.getDimSize(0) == 1) ||
                           (isOp(shape, "nn.shape") && shape->getOperand(0) == vector &&
                            !shape->getAttr("start") && !shape->getAttr("end"));
  return one_element && second && second.getRank() == 1 && second.getDimSize(0) == 1 &&
         isOne(concat->getOperand(1));
}

// `target` is x's shape: Shape(x), or a Concat of its dims read one by one (Gather(Shape(x), i),
// unsqueezed where scalar), in order.
bool isShapeOf(Value target, Value x) {
  auto dim_of = [&](Value part) -> std::optional<int64_t> {
    Operation* def = part.getDefiningOp();
    if (isOp(def, "nn.unsqueeze") && intsConstant(def->getOperand(1)) == std::vector<int64_t>{0})
      def = def->getOperand(0).getDefiningOp();
    if (!isOp(def, "nn.gather")) return std::nullopt;
    Operation* shape = def->getOperand(0).getDefiningOp();
    auto index = intsConstant(def->getOperand(1));
    if (!isOp(shape, "nn.shape") || shape->getOperand(0) != x || shape->getAttr("start") ||
        shape->getAttr("end") || !index || index->size() != 1)
      return std::nullopt;
    return (*index)[0];
  };
  Operation* def = target.getDefiningOp();
  if (isOp(def, "nn.shape"))
    return def->getOperand(0) == x && !def->getAttr("start") && !def->getAttr("end");
  auto type = dyn_cast<RankedTensorType>(x.getType());
  if (!isOp(def, "nn.concat") || !type ||
      static_cast<int64_t>(def->getNumOperands()) != type.getRank())
    return false;
  for (unsigned i = 0; i < def->getNumOperands(); ++i) {
    auto part = dyn_cast<RankedTensorType>(def->getOperand(i).getType());
    if (!part || part.getRank() != 1 || part.getDimSize(0) != 1) return false;
    if (auto c = intsConstant(def->getOperand(i))) {  // a static dim, folded
      if (type.isDynamicDim(i) || (*c)[0] != type.getDimSize(i)) return false;
      continue;
    }
    std::optional<int64_t> d = dim_of(def->getOperand(i));
    if (!d || (*d != static_cast<int64_t>(i) && *d != static_cast<int64_t>(i) - type.getRank()))
      return false;
  }
  return true;
}

struct MoeMatch {
  Operation* topk = nullptr;
  Value x, router;
  int64_t top_k = 0, experts = 0;
  bool normalize = false;
  std::vector<Value> gate, up, down;  // per expert: W1 [H, F], W3 [H, F], W2 [F, H]
  Value result;                       // the accumulator after the last expert
};

// One expert's branch: from its routing (slot, token) indices to its ScatterElements. Fills
// the expert's weights; returns the scatter's result, or a failure.
// `broadcast_from` is set to the tensor whose first row's shape index_add_'s Expand broadcasts
// the rows to (the caller checks that it is the accumulator, [tokens, hidden]).
std::string matchExpert(const MoeMatch& m, Value routing_weights, Value slot, Value token,
                        Value* gate, Value* up, Value* down, Value* scattered,
                        Value* broadcast_from) {
  // The tokens' rows: Reshape(Gather(Unsqueeze(x, [0]), token, axis 1)).
  Value rows;
  for (Operation* user : token.getUsers()) {
    if (isOp(user, "nn.gather") && user->getOperand(1) == token) {
      Operation* unsqueeze = user->getOperand(0).getDefiningOp();
      auto axis = user->getAttrOfType<IntegerAttr>("axis");
      if (isOp(unsqueeze, "nn.unsqueeze") && unsqueeze->getOperand(0) == m.x && axis &&
          axis.getInt() == 1 && intsConstant(unsqueeze->getOperand(1)) == std::vector<int64_t>{0}) {
        Value gathered = user->getResult(0);
        Operation* reshape = soleUser(&gathered);
        // Its shape may be left to run time (the rows NonZero picks): the products' constant
        // weights fix the hidden size (checked below).
        if (!isOp(reshape, "nn.reshape"))
          return where(user) + " gathers the rows for an expert, but not into a Reshape";
        rows = reshape->getResult(0);
      }
    }
  }
  if (!rows) return "no Gather of the expert's tokens from the router's input";
  // silu(rows·W1) * (rows·W3) · W2, the weights constant.
  std::vector<Operation*> products;
  for (Operation* user : rows.getUsers())
    if (isOp(user, "nn.matmul") && user->getOperand(0) == rows &&
        isFloat32Weight(user->getOperand(1)))
      products.push_back(user);
  if (products.size() != 2)
    return "the expert's rows feed " + std::to_string(products.size()) + " products, not 2";
  Operation* product = nullptr;
  for (int g = 0; g < 2 && !product; ++g) {
    Value h = products[g]->getResult(0);
    Value other = products[1 - g]->getResult(0);
    // silu(h) = h * sigmoid(h), in either operand order.
    for (Operation* user : h.getUsers()) {
      if (!isOp(user, "nn.sigmoid")) continue;
      Value sig = user->getResult(0);
      if (!sig.hasOneUse()) continue;
      Operation* silu = *sig.getUsers().begin();
      if (!isOp(silu, "nn.mul") || !((silu->getOperand(0) == h && silu->getOperand(1) == sig) ||
                                     (silu->getOperand(1) == h && silu->getOperand(0) == sig)))
        continue;
      Value act = silu->getResult(0);
      if (!act.hasOneUse() || !other.hasOneUse()) continue;
      Operation* mul = *act.getUsers().begin();
      if (!isOp(mul, "nn.mul") || *other.getUsers().begin() != mul) continue;
      Value prod = mul->getResult(0);
      if (!prod.hasOneUse()) continue;
      Operation* down_product = *prod.getUsers().begin();
      if (!isOp(down_product, "nn.matmul") || down_product->getOperand(0) != prod ||
          !isFloat32Weight(down_product->getOperand(1)))
        continue;
      *gate = products[g]->getOperand(1);
      *up = products[1 - g]->getOperand(1);
      *down = down_product->getOperand(1);
      product = down_product;
    }
  }
  if (!product)
    return "the expert's MLP at " + where(products[0]) +
           " is not silu(x·W1) * (x·W3) · W2 (x * sigmoid(x), constant weights)";
  auto gate_type = cast<RankedTensorType>(gate->getType());
  auto down_type = cast<RankedTensorType>(down->getType());
  const int64_t hidden = cast<RankedTensorType>(m.x.getType()).getDimSize(1);
  if (gate_type.getRank() != 2 || gate_type.getDimSize(0) != hidden || up->getType() != gate_type ||
      down_type.getRank() != 2 || down_type.getDimSize(0) != gate_type.getDimSize(1) ||
      down_type.getDimSize(1) != hidden)
    return where(product) + ": the expert's weights are not [H, F], [H, F] and [F, H] for H = " +
           std::to_string(hidden);
  // · the routing weight: Mul(y, Reshape*(Gather(Flatten(Unsqueeze(weights, [2]), 2),
  // token * K + slot))).
  Value y = product->getResult(0);
  if (!y.hasOneUse() || !isOp(*y.getUsers().begin(), "nn.mul"))
    return where(product) + ": the expert's output is not multiplied by its routing weight";
  Operation* weighted = *y.getUsers().begin();
  // The weight: the Gather's [count, 1] rows, through casts and Reshapes to [.., 1] (shapes
  // here are left to run time, after NonZero: each Reshape's target is checked instead).
  Value weight = weighted->getOperand(weighted->getOperand(0) == y ? 1 : 0);
  std::vector<Operation*> weight_reshapes;
  while (Operation* def = weight.getDefiningOp()) {
    if (isOp(def, "nn.reshape")) weight_reshapes.push_back(def);
    if (!isOp(def, "nn.reshape") && !isOp(def, "nn.cast")) break;
    weight = def->getOperand(0);
  }
  Operation* weight_gather = weight.getDefiningOp();
  auto gather_axis = weight_gather ? weight_gather->getAttrOfType<IntegerAttr>("axis") : nullptr;
  Operation* flatten =
      isOp(weight_gather, "nn.gather") ? weight_gather->getOperand(0).getDefiningOp() : nullptr;
  auto flatten_axis = flatten ? flatten->getAttrOfType<IntegerAttr>("axis") : nullptr;
  Operation* unsqueeze =
      isOp(flatten, "nn.flatten") ? flatten->getOperand(0).getDefiningOp() : nullptr;
  if (!isOp(weight_gather, "nn.gather") || (gather_axis && gather_axis.getInt() != 0) ||
      !flatten_axis || flatten_axis.getInt() != 2 || !isOp(unsqueeze, "nn.unsqueeze") ||
      intsConstant(unsqueeze->getOperand(1)) != std::vector<int64_t>{2} ||
      throughCasts(unsqueeze->getOperand(0)) != routing_weights)
    return where(weighted) +
           " does not weigh the expert's rows by the routing weights "
           "(Gather of Flatten(Unsqueeze(weights, [2]), 2))";
  // The flat index token * K + slot, K a constant or the weights' dim 1 read by Shape.
  Operation* add = weight_gather->getOperand(1).getDefiningOp();
  bool index_ok = false;
  if (isOp(add, "nn.add")) {
    for (int i = 0; i < 2 && !index_ok; ++i) {
      Operation* mul = add->getOperand(1 - i).getDefiningOp();
      if (add->getOperand(i) != slot || !isOp(mul, "nn.mul")) continue;
      for (int j = 0; j < 2 && !index_ok; ++j) {
        if (mul->getOperand(j) != token) continue;
        Value k = mul->getOperand(1 - j);
        if (auto c = intScalar(k)) {
          index_ok = *c == m.top_k;
        } else if (Operation* g = k.getDefiningOp();
                   isOp(g, "nn.gather") && intScalar(g->getOperand(1)) == 1) {
          Operation* shape = g->getOperand(0).getDefiningOp();
          auto type = isOp(shape, "nn.shape")
                          ? dyn_cast<RankedTensorType>(shape->getOperand(0).getType())
                          : RankedTensorType();
          index_ok = type && type.getRank() >= 2 && type.getDimSize(1) == m.top_k &&
                     !shape->getAttr("start") && !shape->getAttr("end");
        }
      }
    }
  }
  if (!index_ok)
    return where(weight_gather) + " reads the routing weights at an index other than token * " +
           std::to_string(m.top_k) + " + slot";
  for (Operation* reshape : weight_reshapes)
    if (!reshapesToColumn(reshape, add->getResult(0)))
      return where(reshape) + " reshapes the routing weights to something other than one per row";
  // ScatterElements(zeros, Expand(Unsqueeze(token, [1])), the weighted rows, axis 0).
  Value contribution = weighted->getResult(0);
  Operation* next = soleUser(&contribution);
  if (isOp(next, "nn.expand")) {
    // index_add_'s broadcast to the shape of the first row of a [tokens, hidden] tensor
    // (Slice rows [0, 1), every column): the rows' own shape.
    Operation* shape = next->getOperand(1).getDefiningOp();
    Operation* slice = isOp(shape, "nn.shape") ? shape->getOperand(0).getDefiningOp() : nullptr;
    const int64_t hidden = cast<RankedTensorType>(m.x.getType()).getDimSize(1);
    auto starts = isOp(slice, "nn.slice") ? intsConstant(slice->getOperand(1)) : std::nullopt;
    auto ends = isOp(slice, "nn.slice") ? intsConstant(slice->getOperand(2)) : std::nullopt;
    auto axes = isOp(slice, "nn.slice") && slice->getNumOperands() > 3
                    ? intsConstant(slice->getOperand(3))
                    : std::nullopt;
    const bool steps =
        isOp(slice, "nn.slice") &&
        (slice->getNumOperands() < 5 || isa<NoneType>(slice->getOperand(4).getType()) ||
         intsConstant(slice->getOperand(4)) == std::vector<int64_t>{1, 1});
    // Folded to [1, hidden] where the sizes were known.
    const bool folded = intsConstant(next->getOperand(1)) == std::vector<int64_t>{1, hidden};
    if (!folded && (!isOp(shape, "nn.shape") || shape->getAttr("start") || shape->getAttr("end") ||
                    !starts || !ends || !axes || !steps || *starts != std::vector<int64_t>{0, 0} ||
                    *axes != std::vector<int64_t>{0, 1} || ends->size() != 2 || (*ends)[0] != 1 ||
                    (*ends)[1] < hidden))
      return where(next) + " broadcasts the expert's rows";
    if (!folded) *broadcast_from = slice->getOperand(0);
    contribution = next->getResult(0);
  }
  Operation* scatter = nullptr;
  for (Operation* user : contribution.getUsers())
    if (isOp(user, "nn.scatter_elements") && user->getOperand(2) == contribution) scatter = user;
  if (!scatter)
    return where(weighted) + ": the expert's rows are not scattered back to their tokens";
  auto axis = scatter->getAttrOfType<IntegerAttr>("axis");
  auto reduction = scatter->getAttrOfType<StringAttr>("reduction");
  // The index: Expand(Unsqueeze(token, [1]), Shape(the rows)), each row its token.
  Operation* index_expand = scatter->getOperand(1).getDefiningOp();
  Operation* index_unsqueeze =
      isOp(index_expand, "nn.expand") ? index_expand->getOperand(0).getDefiningOp() : nullptr;
  Operation* index_shape = index_expand ? index_expand->getOperand(1).getDefiningOp() : nullptr;
  if ((axis && axis.getInt() != 0) || (reduction && reduction.getValue() != "none") ||
      !isZeros(scatter->getOperand(0)) || !isOp(index_unsqueeze, "nn.unsqueeze") ||
      index_unsqueeze->getOperand(0) != token ||
      intsConstant(index_unsqueeze->getOperand(1)) != std::vector<int64_t>{1} ||
      !isOp(index_shape, "nn.shape") || index_shape->getOperand(0) != contribution ||
      index_shape->getAttr("start") || index_shape->getAttr("end"))
    return where(scatter) + " does not write the expert's rows to their tokens in zeros";
  *scattered = scatter->getResult(0);
  return "";
}

// The MoE block whose routing starts at `topk`, or a failure naming the node.
std::string matchMoe(Operation* topk, MoeMatch* m) {
  m->topk = topk;
  Operation* softmax = throughCasts(topk->getOperand(0)).getDefiningOp();
  auto k = intScalar(topk->getOperand(1));
  auto largest = topk->getAttrOfType<IntegerAttr>("largest");
  auto topk_type = dyn_cast<RankedTensorType>(topk->getOperand(0).getType());
  auto topk_axis = topk->getAttrOfType<IntegerAttr>("axis");
  if (!topk_type)
    return "the router's shapes are left to run time (by a block before it that is not recognized)";
  if (!isOp(softmax, "nn.softmax") || !k || (largest && largest.getInt() == 0) ||
      topk_type.getRank() != 2 ||
      (topk_axis && topk_axis.getInt() != -1 && topk_axis.getInt() != 1))
    return "it is not the top-k of router probabilities [tokens, experts]";
  auto softmax_axis = softmax->getAttrOfType<IntegerAttr>("axis");
  Operation* router = softmax->getOperand(0).getDefiningOp();
  auto router_type = router ? dyn_cast<RankedTensorType>(router->getOperand(1).getType()) : nullptr;
  if ((softmax_axis && softmax_axis.getInt() != -1 && softmax_axis.getInt() != 1) ||
      !isOp(router, "nn.matmul") || !isFloat32Weight(router->getOperand(1)) || !router_type ||
      router_type.getRank() != 2)
    return where(softmax) + " is not a softmax over the experts of x·W (a constant router)";
  m->x = router->getOperand(0);
  m->router = router->getOperand(1);
  m->top_k = *k;
  m->experts = router_type.getDimSize(1);
  auto x_type = dyn_cast<RankedTensorType>(m->x.getType());
  if (!x_type || x_type.getRank() != 2 || m->top_k < 1 || m->top_k > m->experts)
    return where(router) +
           ": the router's input is not rows [tokens, hidden], or K is out of range";
  // The routing weights: the top-k values, optionally divided by their sum.
  Value values = topk->getResult(0);
  Value routing_weights = values;
  for (Operation* user : values.getUsers()) {
    if (!isOp(user, "nn.reduce_sum")) continue;
    auto keep = user->getAttrOfType<IntegerAttr>("keepdims");
    auto axes = user->getNumOperands() > 1 ? intsConstant(user->getOperand(1)) : std::nullopt;
    Value sum = user->getResult(0);
    Operation* div = soleUser(&sum);
    if ((keep && keep.getInt() == 0) || !axes || axes->size() != 1 ||
        ((*axes)[0] != -1 && (*axes)[0] != 1) || !isOp(div, "nn.div") ||
        div->getOperand(0) != values || div->getOperand(1) != sum)
      return where(user) + " does not renormalize the top-k weights by their sum";
    m->normalize = true;
    routing_weights = div->getResult(0);
  }
  // The expert mask [E, K, T] and one branch per expert.
  Value selected = topk->getResult(1);
  if (!selected.hasOneUse() || !isOp(*selected.getUsers().begin(), "nn.one_hot"))
    return where(topk) + ": the selected experts do not feed one OneHot";
  Operation* one_hot = *selected.getUsers().begin();
  auto one_hot_axis = one_hot->getAttrOfType<IntegerAttr>("axis");
  auto depth = intScalar(one_hot->getOperand(1));
  auto on_off = intsConstant(one_hot->getOperand(2));
  Value one_hot_result = one_hot->getResult(0);
  Operation* transpose = soleUser(&one_hot_result);
  auto perm = transpose ? transpose->getAttrOfType<DenseI64ArrayAttr>("perm") : nullptr;
  if ((one_hot_axis && one_hot_axis.getInt() != -1) || depth != m->experts ||
      on_off != std::vector<int64_t>{0, 1} || !isOp(transpose, "nn.transpose") || !perm ||
      perm.asArrayRef() != ArrayRef<int64_t>{2, 1, 0})
    return where(one_hot) + " is not the one-hot expert mask [experts, K, tokens] of the top-k";
  std::vector<Value> scattered(static_cast<size_t>(m->experts));
  llvm::DenseMap<Value, Value> broadcast_from;  // scatter -> what its rows' Expand read
  m->gate.assign(static_cast<size_t>(m->experts), Value());
  m->up = m->down = m->gate;
  for (Operation* user : transpose->getResult(0).getUsers()) {
    // Gather(mask, e, axis 0) -> bool -> NonZero -> Transpose -> Split -> Squeeze: (slot, token).
    int64_t e = -1;
    if (isOp(user, "nn.gather")) e = intScalar(user->getOperand(1)).value_or(-1);
    auto gather_axis = user->getAttrOfType<IntegerAttr>("axis");
    if (e < 0 || e >= m->experts || (gather_axis && gather_axis.getInt() != 0) ||
        scattered[static_cast<size_t>(e)])
      return where(user) + " reads the expert mask other than once per expert";
    Value v = user->getResult(0);
    Operation* nonzero = soleUser(&v);
    Value pairs = nonzero ? nonzero->getResult(0) : Value();
    Operation* t = isOp(nonzero, "nn.non_zero") ? soleUser(&pairs) : nullptr;
    Value tv = t ? t->getResult(0) : Value();
    auto t_perm = isOp(t, "nn.transpose") ? t->getAttrOfType<DenseI64ArrayAttr>("perm") : nullptr;
    Operation* split =
        t_perm && t_perm.asArrayRef() == ArrayRef<int64_t>{1, 0} ? soleUser(&tv) : nullptr;
    auto split_axis = split ? split->getAttrOfType<IntegerAttr>("axis") : nullptr;
    if (!isOp(split, "nn.split") || split->getNumResults() != 2 || !split_axis ||
        split_axis.getInt() != 1)
      return where(user) + ": expert " + std::to_string(e) +
             "'s (slot, token) pairs are not NonZero -> Transpose -> Split";
    Value parts[2];
    for (int i = 0; i < 2; ++i) {
      Value part = split->getResult(i);
      Operation* squeeze = soleUser(&part);
      if (!isOp(squeeze, "nn.squeeze") ||
          intsConstant(squeeze->getOperand(1)) != std::vector<int64_t>{1})
        return where(split) + ": expert " + std::to_string(e) + "'s indices are not squeezed";
      parts[i] = squeeze->getResult(0);
    }
    const size_t i = static_cast<size_t>(e);
    Value from;
    std::string error = matchExpert(*m, routing_weights, parts[0], parts[1], &m->gate[i], &m->up[i],
                                    &m->down[i], &scattered[i], &from);
    if (!error.empty()) return "expert " + std::to_string(e) + ": " + error;
    if (from) broadcast_from[scattered[i]] = from;
  }
  for (int64_t e = 0; e < m->experts; ++e)
    if (!scattered[static_cast<size_t>(e)])
      return where(topk) + ": expert " + std::to_string(e) +
             " has no branch (an export traced on tokens that never chose it computes without it)";
  // The accumulator: zeros [tokens, hidden], then + each expert's scatter (into zeros of the
  // accumulator's own shape), in any order.
  Value acc;
  for (Value s : scattered) {
    Operation* add = s.hasOneUse() ? *s.getUsers().begin() : nullptr;
    if (!isOp(add, "nn.add")) return "an expert's scatter is not added to the result";
    Value other = add->getOperand(add->getOperand(0) == s ? 1 : 0);
    if (isZeros(other)) {
      if (acc) return where(add) + ": two accumulators of the experts' rows";
      acc = other;
    }
  }
  if (!acc) return where(topk) + ": the experts' rows are not added up from zeros";
  auto zeros_type = dyn_cast<RankedTensorType>(acc.getType());
  if (!zeros_type || zeros_type.getRank() != 2 || zeros_type.getDimSize(1) != x_type.getDimSize(1))
    return where(acc.getDefiningOp()) +
           ": the experts' rows are not added up from zeros [tokens, hidden]";
  llvm::DenseSet<Value> pending(scattered.begin(), scattered.end());
  while (!pending.empty()) {
    Operation* next = nullptr;
    for (Operation* user : acc.getUsers())
      if (isOp(user, "nn.add"))
        for (Value operand : user->getOperands())
          if (operand != acc && pending.contains(operand)) next = user;
    if (!next) return where(topk) + ": the experts' rows are not added up one after another";
    Value s = next->getOperand(next->getOperand(0) == acc ? 1 : 0);
    Operation* zeros = s.getDefiningOp()->getOperand(0).getDefiningOp();
    Operation* zeros_shape = zeros->getOperand(0).getDefiningOp();
    auto acc_type = dyn_cast<RankedTensorType>(acc.getType());
    auto folded = intsConstant(zeros->getOperand(0));  // where the sum's shape was static
    const bool same_shape = (isOp(zeros_shape, "nn.shape") && zeros_shape->getOperand(0) == acc &&
                             !zeros_shape->getAttr("start") && !zeros_shape->getAttr("end")) ||
                            (folded && acc_type && acc_type.hasStaticShape() &&
                             ArrayRef<int64_t>(*folded) == acc_type.getShape());
    if (!same_shape)
      return where(s.getDefiningOp()) + " scatters into zeros of another shape than the sum's";
    if (auto it = broadcast_from.find(s); it != broadcast_from.end() && it->second != acc)
      return where(s.getDefiningOp()) +
             ": its rows are broadcast to another tensor's row than the sum's";
    pending.erase(s);
    acc = next->getResult(0);
  }
  m->result = acc;
  return "";
}

// The context a mask is proven for when neither --max-context nor the sequence dimension's
// range says (the pipeline's default).
constexpr int64_t kDefaultContext = 2048;

class RecognizeLlmPass : public impl::RecognizeLlmBase<RecognizeLlmPass> {
 public:
  using Base::Base;
  std::optional<int64_t> max_positions_;  // rows of a learned position table, if any

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Block& body = func.getBody().front();
    // Only models with an integer input_ids [batch, seq] are candidates.
    int input_ids = -1;
    for (BlockArgument arg : body.getArguments()) {
      auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "llmc.name");
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (name && name.getValue() == "input_ids" && type && type.getRank() == 2 &&
          (type.getElementType().isInteger(64) || type.getElementType().isInteger(32)))
        input_ids = static_cast<int>(arg.getArgNumber());
    }
    if (input_ids < 0) return;
    std::vector<std::string> ids_dims = dimNamesOf(body.getArgument(input_ids));
    if (ids_dims.size() != 2 || ids_dims[1].empty()) return;
    seq_ = ids_dims[1];
    batch_ = ids_dims[0];
    bool has_attention = false;
    for (Operation& op : body)
      has_attention = has_attention || isOp(&op, "nn.softmax") || isOp(&op, "nn.attention") ||
                      isOp(&op, "nn.ms_group_query_attention");
    if (!has_attention) return;  // not an attention model

    // Keep the original: recognition is all or nothing.
    func::FuncOp backup = cast<func::FuncOp>(func->clone());
    std::vector<std::string> failures;
    notes_.clear();
    const bool recognized = recognize(func, input_ids, &failures);
    if (recognized && !notes_.empty()) {
      SmallVector<Attribute> notes;
      for (const std::string& note : notes_) notes.push_back(StringAttr::get(&getContext(), note));
      func->setAttr("llmc.recognition_notes", ArrayAttr::get(&getContext(), notes));
    }
    if (!recognized) {
      func.getBody().takeBody(backup.getBody());
      func.setFunctionType(backup.getFunctionType());
      if (ArrayAttr arg_attrs = backup.getAllArgAttrs())
        func.setAllArgAttrs(arg_attrs);
      SmallVector<Attribute> messages;
      for (const std::string& f : failures) messages.push_back(StringAttr::get(&getContext(), f));
      func->setAttr("llmc.recognition_failures", ArrayAttr::get(&getContext(), messages));
    }
    backup->erase();
  }

 private:
  std::string seq_, batch_;
  llvm::DenseMap<Value, MaskProof> proofs_;  // per round: a mask shared by layers is proven once
  std::vector<std::string> notes_;           // how the masks were proven, each once

  // Positions that index a table of learned position embeddings (GPT-2's wpe; OPT's, two rows
  // ahead; GPT-J's sin/cos table) bound the context: the smallest such table's row count, less
  // the constant added to the positions on the way (OPT's offset of 2).
  void noteLearnedPositions(Value positions) {
    std::vector<std::pair<Value, int64_t>> work = {{positions, 0}};  // (value, added so far)
    while (!work.empty()) {
      auto [v, offset] = work.back();
      work.pop_back();
      for (Operation* user : v.getUsers()) {
        StringRef name = user->getName().getStringRef();
        if (name == "nn.unsqueeze" || name == "nn.reshape" || name == "nn.cast" ||
            name == "nn.squeeze" || name == "nn.expand" || name == "nn.tile") {
          if (user->getOperand(0) == v) work.push_back({user->getResult(0), offset});
        } else if (name == "nn.add" || name == "nn.sub") {
          // positions + c (either side), positions - c.
          const bool first = user->getOperand(0) == v;
          auto c = scalarConstant(user->getOperand(first ? 1 : 0));
          if (c && (name == "nn.add" || first) && *c == std::floor(*c) && std::fabs(*c) < 1e9)
            work.push_back({user->getResult(0),
                            offset + (name == "nn.add" ? 1 : -1) * static_cast<int64_t>(*c)});
        } else if (name == "nn.gather" && user->getOperand(1) == v) {
          auto table = dyn_cast_or_null<nn::ConstantOp>(user->getOperand(0).getDefiningOp());
          auto type = table ? dyn_cast<RankedTensorType>(table.getType()) : RankedTensorType();
          if (type && type.getRank() >= 1) notePositionRows(type.getDimSize(0), offset);
        } else if (name == "nn.gather_elements" && user->getOperand(1) == v) {
          // GPT-J's sin/cos table, tiled over the batch and gathered along its position axis.
          auto type = dyn_cast<RankedTensorType>(user->getOperand(0).getType());
          auto axis_attr = user->getAttrOfType<IntegerAttr>("axis");
          int64_t axis = axis_attr ? axis_attr.getInt() : 0;
          if (type && axis < 0) axis += type.getRank();
          if (type && axis >= 0 && axis < type.getRank())
            notePositionRows(type.getDimSize(axis), offset);
        }
      }
    }
  }

  // A table of `rows` positions (static), read at positions + `offset`, bounds the context.
  void notePositionRows(int64_t rows, int64_t offset) {
    if (ShapedType::isDynamic(rows)) return;
    const int64_t bound = std::max<int64_t>(rows - std::max<int64_t>(offset, 0), 1);
    if (!max_positions_ || bound < *max_positions_) max_positions_ = bound;
  }

  LogicalResult inferShapes(func::FuncOp func) {
    OpPassManager pm(func::FuncOp::getOperationName());
    pm.addPass(createShapeInference());
    return runPipeline(pm, func);
  }

  // Replaces one matched core with llm.attention on un-expanded K and V.
  bool rewriteAttention(AttentionMatch& m, int64_t* heads, int64_t* kv_heads, int64_t* head_dim,
                        std::vector<std::string>* failures) {
    OpBuilder b(m.output_matmul);
    Location loc = m.output_matmul->getLoc();
    Value k4 = m.merged_heads ? m.k : transposeLastTwo(b, loc, m.k_transposed);
    Value k = skipEmptyPast(unexpandKv(skipEmptyPast(k4)));
    Value v = skipEmptyPast(unexpandKv(skipEmptyPast(m.v_full)));
    auto q_type = cast<RankedTensorType>(m.q.getType());
    auto k_type = dyn_cast<RankedTensorType>(k.getType());
    auto v_type = dyn_cast<RankedTensorType>(v.getType());
    if (!k_type || !v_type || k_type.getRank() != 4 || v_type.getRank() != 4 ||
        k_type.getDimSize(1) != v_type.getDimSize(1) ||
        ShapedType::isDynamic(k_type.getDimSize(1)) ||
        ShapedType::isDynamic(v_type.getDimSize(3)) ||
        q_type.getDimSize(1) % k_type.getDimSize(1) != 0) {
      failures->push_back("attention at " + where(m.softmax) +
                          ": K and V are not [batch, kv_heads, seq, head_dim] with kv_heads "
                          "dividing the " + std::to_string(q_type.getDimSize(1)) + " heads");
      return false;
    }
    int64_t h = q_type.getDimSize(1), hkv = k_type.getDimSize(1), d = q_type.getDimSize(3);
    if (*heads >= 0 && (h != *heads || hkv != *kv_heads || d != *head_dim)) {
      failures->push_back("attention at " + where(m.softmax) +
                          ": layers differ in heads, KV heads or head size");
      return false;
    }
    *heads = h;
    *kv_heads = hkv;
    *head_dim = d;
    SmallVector<int64_t> out_shape(q_type.getShape());
    out_shape[3] = v_type.getDimSize(3);
    // c * tanh(s * x) = |c| * tanh(s * c * x / |c|): softcap |c|, scale s * c (tanh is odd).
    const double scale = m.cap != 0 ? m.scale * m.cap : m.scale;
    Value attention = createAttention(
        b, loc, m.q, k, v, RankedTensorType::get(out_shape, q_type.getElementType()), scale,
        m.window, m.output_matmul->getAttr("llmc.names"), std::fabs(m.cap));
    if (!m.slopes.empty()) {
      SmallVector<float> slopes;
      for (double slope : m.slopes) slopes.push_back(static_cast<float>(slope));
      attention.getDefiningOp()->setAttr("alibi_slopes", b.getDenseF32ArrayAttr(slopes));
    }
    // The merged output's sizes, [batch x heads, q, d], from the attention's [batch, heads, q, d].
    for (Operation* shape : m.output_shapes) {
      OpBuilder sb(shape);
      auto ints = [&](int64_t n) { return RankedTensorType::get({n}, sb.getI64Type()); };
      auto part = [&](Value x, int64_t from, int64_t to) {
        return createOp(sb, loc, "nn.slice",
                        {x, int64Constant(sb, loc, {from}), int64Constant(sb, loc, {to}),
                         int64Constant(sb, loc, {0})},
                        ints(to - from));
      };
      Value sizes = createOp(sb, loc, "nn.shape", {attention}, ints(4));
      Value rows = createOp(sb, loc, "nn.mul", {part(sizes, 0, 1), part(sizes, 1, 2)}, ints(1));
      Value merged = createOp(sb, loc, "nn.concat", {rows, part(sizes, 2, 4)}, ints(3),
                              {sb.getNamedAttr("axis", sb.getI64IntegerAttr(0))});
      auto start = shape->getAttrOfType<IntegerAttr>("start");
      auto end = shape->getAttrOfType<IntegerAttr>("end");
      if (start || end) {
        auto clamp = [](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + 3 : i, 0, 3); };
        const int64_t from = clamp(start ? start.getInt() : 0), to = clamp(end ? end.getInt() : 3);
        merged = part(merged, from, std::max(from, to));
      }
      shape->getResult(0).replaceAllUsesWith(merged);
      shape->erase();
    }
    Operation* replaced = m.heads_split ? m.heads_split : m.output_matmul;
    replaced->getResult(0).replaceAllUsesWith(attention);
    // The core's ops only use each other now: drop their operands, then erase them.
    std::vector<Operation*> dead = m.chain;
    if (m.heads_split) dead.push_back(m.heads_split);
    dead.push_back(m.output_matmul);
    dead.push_back(m.softmax);
    dead.push_back(m.scores_matmul);
    for (Operation* op : dead) op->dropAllReferences();
    for (Operation* op : dead) op->erase();
    return true;
  }

  // ONNX Attention (opset 23) with 4-D Q/K/V, no past, only Y used, no softcap, causal (by
  // is_causal or a mask proven causal) -> llm.attention. Returns a failure or "".
  std::string rewriteOnnxAttention(func::FuncOp func, int input_ids, Operation* op,
                                   int64_t* heads, int64_t* kv_heads, int64_t* head_dim) {
    auto present = [&](unsigned i) {
      return i < op->getNumOperands() && !isa<NoneType>(op->getOperand(i).getType());
    };
    for (unsigned i = 1; i < op->getNumResults(); ++i)
      if (!op->getResult(i).use_empty())
        return "its present_key/present_value/qk outputs are used (a cache export)";
    if (present(4) || present(5)) return "it takes past_key/past_value inputs";
    auto q = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
    auto k = dyn_cast<RankedTensorType>(op->getOperand(1).getType());
    auto v = dyn_cast<RankedTensorType>(op->getOperand(2).getType());
    if (!q || !k || !v || q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
      return "Q, K and V are not 4-D [batch, heads, seq, head_dim]";
    if (ShapedType::isDynamic(q.getDimSize(1)) || ShapedType::isDynamic(k.getDimSize(1)) ||
        ShapedType::isDynamic(q.getDimSize(3)) || ShapedType::isDynamic(v.getDimSize(3)))
      return "heads and head sizes must be static";
    if (q.getDimSize(1) != k.getDimSize(1))
      return "grouped-query Attention pairs query head h with KV head h mod kv_heads in ONNX "
             "1.18's definition, which llm.attention does not implement";
    if (auto softcap = op->getAttrOfType<FloatAttr>("softcap"); softcap && softcap.getValueAsDouble() != 0)
      return "softcap is not supported by llm.attention";
    auto causal = op->getAttrOfType<IntegerAttr>("is_causal");
    int64_t window = 0;
    if (present(3)) {
      AttentionMatch m;
      auto mask_type = cast<ShapedType>(op->getOperand(3).getType());
      m.mask_kind = mask_type.getElementType().isInteger(1) ? AttentionMatch::MaskKind::kWhere
                                                           : AttentionMatch::MaskKind::kAdd;
      m.mask = op->getOperand(3);
      MaskProver prover(func, batch_, seq_, proofContext());
      std::string error = proveMask(prover, m);
      if (!error.empty()) return error;
      window = m.window;
    } else if (!causal || causal.getInt() == 0) {
      return "neither is_causal nor a mask: bidirectional attention is not a decoder";
    }
    if (*heads >= 0 && (q.getDimSize(1) != *heads || k.getDimSize(1) != *kv_heads ||
                        q.getDimSize(3) != *head_dim))
      return "layers differ in heads, KV heads or head size";
    *heads = q.getDimSize(1);
    *kv_heads = k.getDimSize(1);
    *head_dim = q.getDimSize(3);
    double scale = 1.0 / std::sqrt(static_cast<double>(q.getDimSize(3)));
    if (auto attr = op->getAttrOfType<FloatAttr>("scale")) scale = attr.getValueAsDouble();
    OpBuilder b(op);
    SmallVector<int64_t> shape(q.getShape());
    shape[3] = v.getDimSize(3);
    Value attention = createAttention(b, op->getLoc(), op->getOperand(0), op->getOperand(1),
                                      op->getOperand(2), RankedTensorType::get(shape, q.getElementType()),
                                      scale, window, op->getAttr("llmc.names"));
    op->getResult(0).replaceAllUsesWith(attention);
    op->erase();
    return "";
  }

  // ONNX Runtime's GroupQueryAttention (packed or separate Q/K/V, rotary from cos/sin caches,
  // always causal) with an empty past (after --llmc-strip-kv-io) and unused present outputs
  // -> split heads, llm.rope, llm.attention, merge heads. Returns a failure or "".
  std::string rewriteOrtGqa(Value ids, Operation* op, int64_t* heads, int64_t* kv_heads,
                            int64_t* head_dim) {
    auto present = [&](unsigned i) {
      return i < op->getNumOperands() && !isa<NoneType>(op->getOperand(i).getType());
    };
    for (unsigned i = 1; i < op->getNumResults(); ++i)
      if (!op->getResult(i).use_empty()) return "its present_key/present_value outputs are used";
    for (unsigned i : {3u, 4u}) {
      auto type = present(i) ? dyn_cast<RankedTensorType>(op->getOperand(i).getType()) : RankedTensorType();
      if (present(i) && (!type || type.getRank() != 4 || type.getDimSize(2) != 0))
        return "it takes a past that is not empty (not a cache export llmc knows)";
    }
    for (unsigned i = 9; i < op->getNumOperands(); ++i)
      if (present(i)) return "position_ids/attention_bias inputs are not supported";
    auto int_attr = [&](StringRef name, int64_t fallback) {
      auto a = op->getAttrOfType<IntegerAttr>(name);
      return a ? a.getInt() : fallback;
    };
    auto float_attr = [&](StringRef name, double fallback) {
      auto a = op->getAttrOfType<FloatAttr>(name);
      return a ? a.getValueAsDouble() : fallback;
    };
    const int64_t h = int_attr("num_heads", 0), hkv = int_attr("kv_num_heads", 0);
    if (h < 1 || hkv < 1 || h % hkv != 0) return "num_heads must be a multiple of kv_num_heads";
    // local_window_size L: each token sees itself and the L keys before it, llm.attention's
    // window L + 1.
    const int64_t local_window = int_attr("local_window_size", -1);
    if (local_window < -1) return "local_window_size below -1";
    if (float_attr("softcap", 0) != 0) return "softcap is not supported by llm.attention";
    auto query = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
    const bool packed = !present(1);
    if (!query || query.getRank() != 3 || ShapedType::isDynamic(query.getDimSize(2)))
      return "query is not [batch, seq, hidden] with a static hidden size";
    const int64_t d = query.getDimSize(2) / (packed ? h + 2 * hkv : h);
    if (d < 1 || query.getDimSize(2) != d * (packed ? h + 2 * hkv : h)) return "query's size does not fit the heads";
    const bool rotary = int_attr("do_rotary", 0) != 0;
    if (rotary && (!present(7) || !present(8))) return "do_rotary without cos/sin caches";
    if (*heads >= 0 && (h != *heads || hkv != *kv_heads || d != *head_dim))
      return "layers differ in heads, KV heads or head size";
    *heads = h;
    *kv_heads = hkv;
    *head_dim = d;

    OpBuilder b(op);
    Location loc = op->getLoc();
    auto f32 = query.getElementType();
    const int64_t dyn = ShapedType::kDynamic;
    auto create = [&](StringRef name, ValueRange operands, Type type, ArrayRef<NamedAttribute> attrs = {}) {
      return createOp(b, loc, name, operands, type, attrs);
    };
    auto ints = [&](ArrayRef<int64_t> values) { return int64Constant(b, loc, values); };
    auto part = [&](Value x, int64_t start, int64_t size) {
      return create("nn.slice", {x, ints({start}), ints({start + size}), ints({2})},
                    RankedTensorType::get({dyn, dyn, size}, f32));
    };
    auto to_heads = [&](Value x, int64_t n) {
      Value split = create("nn.reshape", {x, ints({0, 0, n, d})}, RankedTensorType::get({dyn, dyn, n, d}, f32));
      return create("nn.transpose", {split}, RankedTensorType::get({dyn, n, dyn, d}, f32),
                    {b.getNamedAttr("perm", b.getDenseI64ArrayAttr({0, 2, 1, 3}))});
    };
    Value q = to_heads(packed ? part(op->getOperand(0), 0, h * d) : op->getOperand(0), h);
    Value k = to_heads(packed ? part(op->getOperand(0), h * d, hkv * d) : op->getOperand(1), hkv);
    Value v = to_heads(packed ? part(op->getOperand(0), (h + hkv) * d, hkv * d) : op->getOperand(2), hkv);
    if (rotary) {
      // The rotary cache's rows bound the context, as a learned position table's do.
      if (auto cos = dyn_cast<RankedTensorType>(op->getOperand(7).getType());
          cos && cos.getRank() == 2 && !ShapedType::isDynamic(cos.getDimSize(0)) &&
          (!max_positions_ || cos.getDimSize(0) < *max_positions_))
        max_positions_ = cos.getDimSize(0);
      Value positions = create("llm.positions", {ids}, RankedTensorType::get({dyn}, b.getI64Type()));
      SmallVector<NamedAttribute> attrs = {
          b.getNamedAttr("interleaved", b.getI64IntegerAttr(int_attr("rotary_interleaved", 0)))};
      q = create("llm.rope", {q, positions, op->getOperand(7), op->getOperand(8)}, q.getType(), attrs);
      k = create("llm.rope", {k, positions, op->getOperand(7), op->getOperand(8)}, k.getType(), attrs);
    }
    double scale = float_attr("scale", 0);
    if (scale == 0) scale = 1.0 / std::sqrt(static_cast<double>(d));
    Value attention = createAttention(b, loc, q, k, v, RankedTensorType::get({dyn, h, dyn, d}, f32),
                                      scale, /*window=*/local_window >= 0 ? local_window + 1 : 0,
                                      op->getAttr("llmc.names"));
    Value merged = create("nn.transpose", {attention}, RankedTensorType::get({dyn, dyn, h, d}, f32),
                          {b.getNamedAttr("perm", b.getDenseI64ArrayAttr({0, 2, 1, 3}))});
    Value out = create("nn.reshape", {merged, ints({0, 0, h * d})}, RankedTensorType::get({dyn, dyn, h * d}, f32));
    op->getResult(0).replaceAllUsesWith(out);
    op->dropAllReferences();
    op->erase();
    return "";
  }

  // One llm.moe for each mixture-of-experts block (see matchMoe); its ops are left to die.
  void rewriteMoe(MoeMatch& m) {
    OpBuilder b(m.result.getDefiningOp());
    b.setInsertionPointAfter(m.result.getDefiningOp());
    Location loc = m.topk->getLoc();
    // The experts' weights stacked [E, ..] at compile time (runtime kernels: refit redoes it).
    auto stack = [&](const std::vector<Value>& weights) {
      SmallVector<Value> parts;
      for (Value w : weights)
        parts.push_back(kernelConstant(b, loc, "Unsqueeze", {}, {w, int64Constant(b, loc, {0})}));
      return kernelConstant(b, loc, "Concat", {b.getNamedAttr("axis", b.getI64IntegerAttr(0))},
                            parts);
    };
    SmallVector<NamedAttribute> attrs = {
        b.getNamedAttr("top_k", b.getI64IntegerAttr(m.top_k)),
        b.getNamedAttr("activation", b.getStringAttr("silu")),
        b.getNamedAttr("normalize", b.getI64IntegerAttr(m.normalize ? 1 : 0))};
    // llm.moe is per row of [..., hidden]: where the block merged the tokens into rows and
    // its sum is reshaped back to the input's shape, it takes the input as it was.
    Value x = m.x, result = m.result;
    Operation* merge = m.x.getDefiningOp();
    Operation* split = m.result.hasOneUse() ? *m.result.getUsers().begin() : nullptr;
    if (isOp(merge, "nn.reshape") && isOp(split, "nn.reshape") &&
        isShapeOf(split->getOperand(1), merge->getOperand(0))) {
      auto in = dyn_cast<RankedTensorType>(merge->getOperand(0).getType());
      if (in && in.getRank() >= 2 &&
          in.getShape().back() == cast<RankedTensorType>(m.x.getType()).getShape().back()) {
        x = merge->getOperand(0);
        result = split->getResult(0);
      }
    }
    // Typed as x (the sum's own type may have been left to run time).
    Value moe =
        createOp(b, loc, "llm.moe", {x, m.router, stack(m.gate), stack(m.up), stack(m.down)},
                 x.getType(), attrs);
    if (auto names = m.topk->getAttr("llmc.names"))
      moe.getDefiningOp()->setAttr("llmc.names", names);
    result.replaceAllUsesWith(moe);
  }

  bool recognize(func::FuncOp func, int input_ids, std::vector<std::string>* failures) {
    Block& body = func.getBody().front();
    MLIRContext* context = &getContext();
    // 0. Mixture-of-experts blocks become llm.moe (their router's softmax is no attention), in
    // rounds with shape inference before each: a block's sum has its shape left to run time
    // (its rows come from NonZero), and so has everything after it until it is an llm.moe.
    while (true) {
      if (failed(inferShapes(func))) {
        failures->push_back("shape inference failed during recognition");
        return false;
      }
      std::vector<Operation*> topks;
      for (Operation& op : body)  // a top-k of softmax probabilities: a router
        if (isOp(&op, "nn.top_k") &&
            isOp(throughCasts(op.getOperand(0)).getDefiningOp(), "nn.softmax"))
          topks.push_back(&op);
      if (topks.empty()) break;
      std::vector<std::string> round_failures;
      bool rewrote = false;
      for (Operation* topk : topks) {
        MoeMatch m;
        if (std::string error = matchMoe(topk, &m); !error.empty()) {
          round_failures.push_back("mixture of experts at " + where(topk) + ": " + error);
          continue;
        }
        rewriteMoe(m);
        rewrote = true;
      }
      eraseDeadOps(body);
      if (!rewrote) {
        failures->insert(failures->end(), round_failures.begin(), round_failures.end());
        return false;
      }
    }
    // 1-2. Match attention cores, prove their masks causal and rewrite them into
    // llm.attention, in rounds: shapes are inferred again before each round, because a mask
    // that clamps the length (GPT-2's [max_positions]^2 buffer) can leave everything after
    // the first layer unranked until that layer's mask is gone.
    int64_t heads = -1, kv_heads = -1, head_dim = -1;
    while (true) {
      proofs_.clear();  // values of the last round may have been erased
      if (failed(inferShapes(func))) {
        failures->push_back("shape inference failed during recognition");
        return false;
      }
      // The opset-23 Attention op: one op, nothing to match.
      std::vector<Operation*> onnx_attention;
      for (Operation& op : body)
        if (isOp(&op, "nn.attention")) onnx_attention.push_back(&op);
      for (Operation* op : onnx_attention) {
        std::string error = rewriteOnnxAttention(func, input_ids, op, &heads, &kv_heads, &head_dim);
        if (!error.empty()) failures->push_back("attention at " + where(op) + ": " + error);
      }
      std::vector<Operation*> ort_gqa;
      for (Operation& op : body)
        if (isOp(&op, "nn.ms_group_query_attention")) ort_gqa.push_back(&op);
      for (Operation* op : ort_gqa) {
        std::string error = rewriteOrtGqa(body.getArgument(static_cast<unsigned>(input_ids)), op,
                                          &heads, &kv_heads, &head_dim);
        if (!error.empty()) failures->push_back("attention at " + where(op) + ": " + error);
      }
      if (!failures->empty()) return false;
      std::vector<Operation*> remaining;
      for (Operation& op : body)
        if (isOp(&op, "nn.softmax")) remaining.push_back(&op);
      if (remaining.empty()) break;
      std::vector<AttentionMatch> ready;
      std::vector<std::string> round_failures;
      // Every core is matched before any mask is proven, so that one prover, told of all the
      // masks, evaluates what they share once (a model's mask, sliced per layer).
      std::vector<std::pair<Operation*, AttentionMatch>> matched;
      for (Operation* softmax : remaining) {
        AttentionMatch m;
        std::string error = matchAttention(softmax, &m);
        if (error.empty())
          matched.emplace_back(softmax, std::move(m));
        else
          round_failures.push_back("attention at " + where(softmax) + ": " + error);
      }
      MaskProver prover(func, batch_, seq_, proofContext());
      std::vector<Value> masks;
      for (const auto& [softmax, m] : matched)
        if (m.mask) masks.push_back(m.mask);
      prover.expect(masks);
      for (auto& [softmax, m] : matched) {
        std::string error = proveMask(prover, m);
        if (error.empty() && m.alibi) error = proveAlibi(func, m);
        if (error.empty())
          ready.push_back(std::move(m));
        else
          round_failures.push_back("attention at " + where(softmax) + ": " + error);
      }
      if (ready.empty()) {
        failures->insert(failures->end(), round_failures.begin(), round_failures.end());
        return false;
      }
      for (AttentionMatch& m : ready)
        if (!rewriteAttention(m, &heads, &kv_heads, &head_dim, failures)) return false;
      eraseDeadOps(body);
    }
    int64_t num_layers = 0;  // in program order
    for (Operation& op : body)
      if (isa<llm::AttentionOp>(op))
        op.setAttr("layer", IntegerAttr::get(IntegerType::get(context, 64), num_layers++));

    // 3. Position ids: Range(0, seq, 1) -> llm.positions(input_ids).
    std::vector<Operation*> ranges;
    for (Operation& op : body)
      if (isOp(&op, "nn.range")) ranges.push_back(&op);
    for (Operation* range : ranges) {
      auto start = scalarConstant(range->getOperand(0));
      auto delta = scalarConstant(range->getOperand(2));
      std::vector<std::string> dims = dimNamesOf(range->getResult(0));
      if (!start || *start != 0 || !delta || *delta != 1 || dims.size() != 1 || dims[0] != seq_) {
        failures->push_back(where(range) + ": a Range other than 0..seq (positions) is left");
        continue;
      }
      OpBuilder b(range);
      Type range_type = range->getResult(0).getType();
      auto element = cast<ShapedType>(range_type).getElementType();
      if (!element.isInteger(64) && !element.isInteger(32)) {
        failures->push_back(where(range) + ": positions of type other than int64/int32");
        continue;
      }
      SmallVector<NamedAttribute> attrs;
      if (element.isInteger(32)) attrs.push_back(b.getNamedAttr("dtype", b.getStringAttr("int32")));
      Operation* positions = createOp(b, range->getLoc(), "llm.positions",
                                      {body.getArgument(input_ids)}, range_type, attrs)
                                 .getDefiningOp();
      if (auto names = range->getAttr("llmc.names")) positions->setAttr("llmc.names", names);
      range->getResult(0).replaceAllUsesWith(positions->getResult(0));
      range->erase();
    }
    if (!failures->empty()) return false;
    positionsFromMask(func, input_ids, failures);
    if (!failures->empty()) return false;
    // Every position source: the Ranges just replaced and the positions of a cache export
    // (llm.positions from StripKvIo), which index a learned table the same way.
    for (Operation& op : body)
      if (isOp(&op, "llm.positions")) noteLearnedPositions(op.getResult(0));
    if (!failures->empty()) return false;
    eraseDeadOps(body);

    // Logits only where they are sampled: the LM head (a MatMul by a constant producing the
    // first output) reads llm.last_tokens of its input.
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    if (ret.getNumOperands() > 0) {
      Operation* head = ret.getOperand(0).getDefiningOp();
      if (isOp(head, "nn.matmul") && isa_and_nonnull<nn::ConstantOp>(head->getOperand(1).getDefiningOp())) {
        auto type = dyn_cast<RankedTensorType>(head->getOperand(0).getType());
        if (type && type.getRank() == 3) {
          OpBuilder b(head);
          head->setOperand(0, createOp(b, head->getLoc(), "llm.last_tokens",
                                       {head->getOperand(0)}, type));
        }
      }
    }

    // 4. Inputs other than input_ids must now be unused; they leave the signature.
    llvm::BitVector unused(body.getNumArguments());
    for (BlockArgument arg : body.getArguments()) {
      if (static_cast<int>(arg.getArgNumber()) == input_ids) continue;
      if (!arg.use_empty()) {
        auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "llmc.name");
        failures->push_back("input '" + (name ? name.getValue().str() : std::string("?")) +
                            "' still feeds the graph after the attention masks were replaced");
        continue;
      }
      unused.set(arg.getArgNumber());
    }
    if (!failures->empty()) return false;
    func.eraseArguments(unused);

    // 5. Shapes again, then prove tokenwise.
    if (failed(inferShapes(func))) {
      failures->push_back("shape inference failed after the rewrite");
      return false;
    }
    checkTokenwise(body, failures);
    if (!failures->empty()) return false;

    auto vocab_type = dyn_cast<RankedTensorType>(func.getResultTypes().empty()
                                                     ? Type()
                                                     : func.getResultTypes()[0]);
    Builder b(context);
    SmallVector<NamedAttribute> config = {
        b.getNamedAttr("num_layers", b.getI64IntegerAttr(num_layers)),
        b.getNamedAttr("num_heads", b.getI64IntegerAttr(heads)),
        b.getNamedAttr("num_kv_heads", b.getI64IntegerAttr(kv_heads)),
        b.getNamedAttr("head_dim", b.getI64IntegerAttr(head_dim)),
        b.getNamedAttr("vocab_size",
                       b.getI64IntegerAttr(vocab_type && vocab_type.getRank() == 3
                                               ? vocab_type.getDimSize(2)
                                               : -1)),
        b.getNamedAttr("seq_symbol", b.getStringAttr(seq_))};
    if (max_positions_) config.push_back(b.getNamedAttr("max_positions", b.getI64IntegerAttr(*max_positions_)));
    func->setAttr("llm.config", b.getDictionaryAttr(config));
    return true;
  }

  // [.., a, b] -> [.., b, a], folding into a Transpose that produced `v`.
  Value transposeLastTwo(OpBuilder& b, Location loc, Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    int64_t rank = type ? type.getRank() : 4;
    SmallVector<int64_t> perm;
    Value source = v;
    Operation* def = v.getDefiningOp();
    if (isOp(def, "nn.transpose")) {
      if (auto p = def->getAttrOfType<DenseI64ArrayAttr>("perm")) {
        perm.assign(p.asArrayRef().begin(), p.asArrayRef().end());
        source = def->getOperand(0);
      }
    }
    if (perm.empty())
      for (int64_t i = 0; i < rank; ++i) perm.push_back(i);
    std::swap(perm[rank - 2], perm[rank - 1]);
    bool identity = true;
    for (int64_t i = 0; i < rank; ++i) identity = identity && perm[i] == i;
    if (identity) return source;
    auto source_type = dyn_cast<RankedTensorType>(source.getType());
    SmallVector<int64_t> shape;
    for (int64_t i = 0; i < rank; ++i)
      shape.push_back(source_type ? source_type.getDimSize(perm[i]) : ShapedType::kDynamic);
    return createOp(b, loc, "nn.transpose", {source},
                    RankedTensorType::get(shape, source_type ? source_type.getElementType()
                                                             : type.getElementType()),
                    {b.getNamedAttr("perm", b.getDenseI64ArrayAttr(perm))});
  }

  // Proves m's mask causal or windowed for every length up to the context (MaskProof.h) with
  // `prover`; sets m.scale's shape-computed part and m.window. Layers sharing one mask share
  // the proof.
  std::string proveMask(MaskProver& prover, AttentionMatch& m) {
    if (m.mask_kind == AttentionMatch::MaskKind::kNone)
      return "the scores are not masked (bidirectional attention is not a decoder)";
    auto cached = proofs_.find(m.mask);
    MaskProof proof;
    if (cached != proofs_.end() && m.shape_scales.empty() && !m.fill) {
      proof = cached->second;
    } else {
      MaskSpec spec{m.mask, m.fill, m.mask_kind == AttentionMatch::MaskKind::kAdd,
                    m.where_scores_on_false, m.shape_scales};
      proof = prover.prove(spec);
      if (m.shape_scales.empty() && !m.fill) proofs_[m.mask] = proof;
    }
    if (!proof.error.empty()) return proof.error;
    for (const std::string& note : proof.notes)
      if (std::find(notes_.begin(), notes_.end(), note) == notes_.end()) notes_.push_back(note);
    m.scale *= proof.scale;
    m.window = proof.window;
    if (proof.model_bound && (!max_positions_ || proof.proven_length < *max_positions_))
      max_positions_ = proof.proven_length;
    return "";
  }

  // 3b. Positions the model computes from attention_mask (transformers' cumsum(mask) - 1, for
  // left padding; OPT's learned positions): with the engine's tokens (every mask element 1)
  // they are 0..n-1 plus a constant, proven for every length (MaskProof.h) and replaced by
  // llm.positions. What is replaced: each integer value computed from the mask that feeds an
  // op whose result is not an integer (a Gather of a position table) or that also reads model
  // data. Shape(attention_mask) is Shape(input_ids) where their dims agree.
  void positionsFromMask(func::FuncOp func, int input_ids, std::vector<std::string>* failures) {
    Block& body = func.getBody().front();
    Value ids = body.getArgument(static_cast<unsigned>(input_ids));
    Value mask;
    for (BlockArgument arg : body.getArguments()) {
      auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "llmc.name");
      if (name && name.getValue() == "attention_mask") mask = arg;
    }
    if (!mask || mask.use_empty()) return;
    const bool same_dims = dimNamesOf(mask) == dimNamesOf(ids) && !dimNamesOf(ids).empty();
    std::vector<Operation*> shapes;
    for (Operation* user : mask.getUsers())
      if (isOp(user, "nn.shape") && same_dims) shapes.push_back(user);
    for (Operation* shape : shapes) shape->setOperand(0, ids);
    // Values computed from the mask, in program order.
    llvm::DenseSet<Value> from_mask = {mask};
    std::vector<Value> frontier;
    auto is_integer = [](Value v) {
      auto type = dyn_cast<RankedTensorType>(v.getType());
      return type && type.getElementType().isInteger() && !type.getElementType().isInteger(1);
    };
    for (Operation& op : body.without_terminator()) {
      if (isOp(&op, "nn.shape") || isOp(&op, "nn.size")) continue;  // sizes, not data
      bool reads_mask = false, reads_data = false;
      for (Value operand : op.getOperands()) {
        if (from_mask.contains(operand)) {
          reads_mask = true;
        } else if (Operation* def = operand.getDefiningOp();
                   !def ||
                   !(isa<nn::ConstantOp>(def) || isOp(def, "nn.shape") || isOp(def, "nn.size"))) {
          reads_data = reads_data || !isa<NoneType>(operand.getType());
        }
      }
      if (!reads_mask) continue;
      bool integer_results = true;
      for (Value result : op.getResults()) integer_results = integer_results && is_integer(result);
      if (integer_results && !reads_data) {
        for (Value result : op.getResults()) from_mask.insert(result);
        continue;
      }
      for (Value operand : op.getOperands())
        if (from_mask.contains(operand) && llvm::find(frontier, operand) == frontier.end())
          frontier.push_back(operand);
    }
    for (Value v : frontier) {
      if (v == mask) {  // read as data (e.g. cast to float and multiplying the hidden states)
        failures->push_back(
            "input 'attention_mask' feeds the model's computation directly, not "
            "as masks or positions");
        continue;
      }
      const std::string at = where(v.getDefiningOp());
      auto type = dyn_cast<RankedTensorType>(v.getType());
      std::vector<std::string> dims = dimNamesOf(v);
      if (!type || type.getRank() < 1 || type.getRank() > 2 || dims.empty() ||
          dims.back() != seq_ ||
          (type.getRank() == 2 && type.getDimSize(0) != 1 && dims[0] != batch_)) {
        failures->push_back(at +
                            ": the attention mask reaches the model's computation other than "
                            "as positions [batch, " +
                            seq_ + "]");
        continue;
      }
      PositionsProof proof = llmc::provePositions(func, batch_, seq_, proofContext(), v);
      if (!proof.error.empty()) {
        failures->push_back(at +
                            " is computed from the attention mask and is not the tokens' "
                            "positions: " +
                            proof.error);
        continue;
      }
      Operation* def = v.getDefiningOp();
      OpBuilder b(def);
      b.setInsertionPointAfter(def);
      Location loc = def->getLoc();
      auto element = type.getElementType();
      const int64_t dyn = ShapedType::kDynamic;
      SmallVector<NamedAttribute> attrs;
      if (element.isInteger(32)) attrs.push_back(b.getNamedAttr("dtype", b.getStringAttr("int32")));
      Value positions =
          createOp(b, loc, "llm.positions", {ids}, RankedTensorType::get({dyn}, element), attrs);
      if (proof.offset != 0) {
        auto offset_type = RankedTensorType::get({1}, element);
        Value offset = createOp(
            b, loc, "nn.constant", {}, offset_type,
            {b.getNamedAttr("value", DenseElementsAttr::get(
                                         offset_type, b.getIntegerAttr(element, proof.offset)))});
        positions = createOp(b, loc, "nn.add", {positions, offset}, positions.getType());
      }
      if (type.getRank() == 2) {
        positions = createOp(b, loc, "nn.unsqueeze", {positions, int64Constant(b, loc, {0})},
                             RankedTensorType::get({1, dyn}, element));
        if (type.getDimSize(0) != 1) {
          Value shape =
              createOp(b, loc, "nn.shape", {ids}, RankedTensorType::get({2}, b.getI64Type()));
          positions = createOp(b, loc, "nn.expand", {positions, shape},
                               RankedTensorType::get({dyn, dyn}, element));
        }
      }
      if (auto names = def->getAttr("llmc.names"))
        positions.getDefiningOp()->setAttr("llmc.names", names);
      v.replaceAllUsesWith(positions);
    }
    eraseDeadOps(body);
  }

  // Proves m's second bias ALiBi's (MaskProof.h) and sets m.slopes, scaled by the factors
  // applied after the bias was added.
  std::string proveAlibi(func::FuncOp func, AttentionMatch& m) {
    const int64_t heads =
        m.merged_heads ? m.merged_heads : cast<RankedTensorType>(m.q.getType()).getDimSize(1);
    AlibiProof proof =
        llmc::proveAlibi(func, batch_, seq_, proofContext(), {m.alibi, heads, m.merged_heads > 0});
    if (!proof.error.empty())
      return where(m.alibi_add) +
             " adds a second bias to the scores, which is not ALiBi's: " + proof.error;
    for (double& slope : proof.slopes) slope *= m.alibi_scale;
    m.slopes = proof.slopes;
    return "";
  }

  // The longest sequence the engine may run: --max-context, else the sequence dimension's
  // declared maximum, else 2048 (as the pipeline decides it).
  int64_t proofContext() const {
    if (maxContext > 0) return maxContext;
    for (const std::string& entry : dimMax) {
      size_t eq = entry.rfind('=');
      if (eq != std::string::npos && entry.substr(0, eq) == seq_)
        return std::stoll(entry.substr(eq + 1));
    }
    return kDefaultContext;
  }

  // Everything left must compute each token from that token alone. Each value's token axis
  // is tracked: where its dims name the sequence symbol, or 0 after a Reshape that merged
  // [batch.., seq] into one row axis (GPT-2's Conv1D) and through row-preserving ops on it.
  void checkTokenwise(Block& body, std::vector<std::string>* failures) {
    static const std::set<std::string> kElementwise = {
        "nn.add", "nn.sub", "nn.mul", "nn.div", "nn.pow", "nn.sqrt", "nn.exp", "nn.log",
        "nn.tanh", "nn.erf", "nn.sigmoid", "nn.relu", "nn.neg", "nn.abs", "nn.reciprocal",
        "nn.cast", "nn.gelu", "nn.softplus", "nn.max", "nn.min", "nn.where", "nn.clip",
        "nn.identity", "nn.sin", "nn.cos", "nn.leaky_relu", "nn.hard_sigmoid", "nn.mish"};
    // Same shape out as in, computed along an axis (and those after it, for the norms): the
    // token axis stays where it was unless the op runs along it (checked below).
    static const std::set<std::string> kAlongAxis = {
        "nn.layer_normalization", "nn.simplified_layer_normalization", "nn.rms_normalization",
        "nn.softmax", "nn.log_softmax"};
    llvm::DenseMap<Value, int> axis_of;  // token axis; absent or -1: none
    auto token_axis = [&](Value v) {
      auto it = axis_of.find(v);
      if (it != axis_of.end()) return it->second;
      std::vector<std::string> d = dimNamesOf(v);
      auto pos = std::find(d.begin(), d.end(), seq_);
      return pos == d.end() ? -1 : static_cast<int>(pos - d.begin());
    };
    auto fail = [&](Operation* op, const std::string& why) {
      failures->push_back(where(op) + " (" + op->getName().getStringRef().str() + ") " + why);
    };
    for (Operation& op : body.without_terminator()) {
      if (isa<nn::ConstantOp, nn::NoneOp, llm::PositionsOp>(op)) continue;
      StringRef name = op.getName().getStringRef();
      if (isa<llm::RopeOp>(op)) {  // rotates each token by its own position
        axis_of[op.getResult(0)] = token_axis(op.getOperand(0));
        continue;
      }
      if (isa<llm::LastTokensOp>(op)) {
        axis_of[op.getResult(0)] = 1;  // still one row per (selected) token
        continue;
      }
      if (isa<llm::AttentionOp>(op)) {
        for (Value operand : op.getOperands()) {
          std::vector<std::string> d = dimNamesOf(operand);
          if (d.size() != 4 || d[2] != seq_)
            fail(&op, "has an operand that is not [batch, heads, " + seq_ + ", head_dim]");
        }
        axis_of[op.getResult(0)] = 2;
        continue;
      }
      if (name == "nn.shape" || name == "nn.size") continue;  // sizes, not data
      int in_axis = -1;
      Value token_input;
      for (Value operand : op.getOperands()) {
        if (isa<NoneType>(operand.getType())) continue;
        if (!isa<RankedTensorType>(operand.getType())) {
          fail(&op, "has an operand of unknown rank: cannot prove that tokens are computed "
                    "independently");
          return;
        }
        int a = token_axis(operand);
        if (a < 0) continue;
        // Broadcasting ops align operands on their trailing axes.
        auto result_type = op.getNumResults() == 1
                               ? dyn_cast<RankedTensorType>(op.getResult(0).getType())
                               : RankedTensorType();
        if (kElementwise.count(name.str()) && result_type)
          a += static_cast<int>(result_type.getRank() -
                                cast<RankedTensorType>(operand.getType()).getRank());
        if (in_axis >= 0 && a != in_axis) {
          fail(&op, "combines tensors whose tokens lie on different axes");
          return;
        }
        in_axis = a;
        token_input = operand;
      }
      for (Value result : op.getResults()) {
        std::vector<std::string> d = dimNamesOf(result);
        int count = static_cast<int>(std::count(d.begin(), d.end(), seq_));
        if (count > 1) {
          fail(&op, "pairs tokens with tokens");
          return;
        }
        if (in_axis < 0) {
          axis_of[result] = count ? token_axis(result) : -1;
          continue;
        }
        auto in_type = cast<RankedTensorType>(token_input.getType());
        auto out_type = dyn_cast<RankedTensorType>(result.getType());
        int out_axis = count ? static_cast<int>(std::find(d.begin(), d.end(), seq_) - d.begin()) : -1;
        if (out_axis < 0 && out_type) {
          if (name == "nn.reshape" && isRowMerge(token_input, in_axis, out_type)) {
            out_axis = 0;
          } else if (kElementwise.count(name.str()) && in_axis < out_type.getRank()) {
            out_axis = in_axis;  // elementwise: the (aligned) token axis stays
          } else if (kAlongAxis.count(name.str()) && token_input == op.getOperand(0) &&
                     out_type.getRank() == in_type.getRank()) {
            out_axis = in_axis;  // per row along other axes: checked against the axis below
          } else if (out_type.getRank() == in_type.getRank() && in_axis < in_type.getRank() - 1 &&
                     (((name == "nn.gemm" || name == "nn.matmul") &&
                       token_input == op.getOperand(0) && !op.getAttr("transA")) ||
                      (name == "llm.moe" && token_input == op.getOperand(0)))) {
            out_axis = in_axis;  // rows stay rows
          }
        }
        if (out_axis < 0) {
          fail(&op, "combines or selects tokens along the sequence");
          return;
        }
        axis_of[result] = out_axis;
      }
      if (name == "nn.matmul" || name == "nn.gemm") {
        int with_tokens = 0;
        for (Value operand : op.getOperands())
          if (!isa<NoneType>(operand.getType()) && token_axis(operand) >= 0) ++with_tokens;
        auto a_type = dyn_cast<RankedTensorType>(op.getOperand(0).getType());
        bool contracts = a_type && token_axis(op.getOperand(0)) == a_type.getRank() - 1;
        if (with_tokens > 1 || contracts || (name == "nn.gemm" && op.getAttr("transA"))) {
          fail(&op, "multiplies across tokens");
          return;
        }
      }
      if (kAlongAxis.count(name.str()) || name == "nn.hardmax" || name == "nn.cum_sum") {
        auto axis_attr = op.getAttrOfType<IntegerAttr>("axis");
        auto type = dyn_cast<RankedTensorType>(op.getOperand(0).getType());
        int64_t rank = type ? type.getRank() : 0;
        int64_t axis = axis_attr ? axis_attr.getInt() : -1;
        if (name == "nn.cum_sum") axis = scalarConstant(op.getOperand(1)).value_or(0);
        if (axis < 0) axis += rank;
        // A norm runs along its axis and every axis after it.
        bool hits = name.ends_with("normalization") ? in_axis >= axis : in_axis == axis;
        if (hits) {
          fail(&op, "runs along the sequence");
          return;
        }
      }
    }
  }

  // A Reshape of [batch-like.., tokens, rest..] into [rows, rest..]: rows are tokens.
  bool isRowMerge(Value input, int token_axis, RankedTensorType out) {
    auto in = cast<RankedTensorType>(input.getType());
    std::vector<std::string> d = dimNamesOf(input);
    if (out.getRank() != in.getRank() - token_axis) return false;
    for (int i = 0; i < token_axis; ++i) {
      bool batch_like = in.getDimSize(i) == 1 ||
                        (static_cast<size_t>(i) < d.size() && !d[i].empty() && d[i] != seq_);
      if (!batch_like) return false;
    }
    for (int64_t i = token_axis + 1; i < in.getRank(); ++i) {
      int64_t size = in.getDimSize(i);
      if (ShapedType::isDynamic(size) || out.getDimSize(i - token_axis) != size) return false;
    }
    return true;
  }
};

}  // namespace
}  // namespace llmc
