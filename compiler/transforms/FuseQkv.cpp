// --llmc-fuse-qkv: moves llm.attention and llm.sdpa (and the llm.rope before them) onto the
// token-major rows the projections produce, dropping the Reshape/Transpose pairs around it, then
// packs the Q, K and V projections of one input into one llm.fused_matmul whose weights are
// concatenated at compile time; the attention reads q, k and v as column ranges of it (the
// split is folded into the consumer), and one rope rotates q and k together. Per-head norms of
// q and k (Qwen3's q_norm/k_norm) become one grouped llm.norm of the packed rows' first columns.
#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_FUSEQKV
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

constexpr const char* kPass = "fuse-qkv";

bool isHeadTranspose(Operation* op) {
  auto perm = op ? op->getAttrOfType<DenseI64ArrayAttr>("perm") : DenseI64ArrayAttr();
  return isOp(op, "nn.transpose") && perm && perm.asArrayRef() == ArrayRef<int64_t>{0, 2, 1, 3};
}

// One of q/k/v traced back to token-major rows: rows [b, s, width], heads from `column`.
struct Operand {
  Value rows;
  int64_t column = 0;
  Operation* rope = nullptr;  // llm.rope applied to it (per-token tables or caches)
  Operation* norm = nullptr;  // llm.norm of each head before the transpose (Qwen3's q/k norm)
  std::vector<Operation*> chain;
};

// llm.norm over the head_dim of [b, s, H, D] with no residual and constant [D] scale (and
// bias, if any): a per-head norm that a grouped norm on the rows computes.
bool isHeadNorm(Operation* norm, int64_t head_dim) {
  if (!isa<NoneType>(norm->getOperand(1).getType()) || norm->getNumResults() != 1 ||
      norm->getAttr("group"))
    return false;
  for (unsigned i : {2u, 3u}) {
    Value v = norm->getOperand(i);
    if (i == 3 && isa<NoneType>(v.getType())) continue;
    std::optional<Tensor> t = float32Constant(v);
    if (!t || t->rank() != 1 || t->dim(0) != head_dim) return false;
  }
  return true;
}

// [llm.rope] <- transpose(0, 2, 1, 3) <- [llm.norm of each head] <- reshape [b, s, H, D] <-
// rows [b, s, H * D]; or multi-query's single K or V head, unsqueeze([b, s, D], axis 1)
// (GPT-BigCode).
std::optional<Operand> traceOperand(Value v, std::string* why) {
  Operand operand;
  if (Operation* unsqueeze = singleUseDef(v, "nn.unsqueeze")) {
    auto axes = intsConstant(unsqueeze->getOperand(1));
    auto rows_type = dyn_cast<RankedTensorType>(unsqueeze->getOperand(0).getType());
    auto head_type = dyn_cast<RankedTensorType>(v.getType());
    if (axes && axes->size() == 1 && (*axes)[0] == 1 && rows_type && head_type &&
        rows_type.getRank() == 3 && head_type.getRank() == 4 && head_type.getDimSize(1) == 1 &&
        !rows_type.isDynamicDim(2) && sameLeadingDims(unsqueeze->getOperand(0), v, 1)) {
      operand.rows = unsqueeze->getOperand(0);
      operand.chain.push_back(unsqueeze);
      return operand;
    }
  }
  if (Operation* rope = singleUseDef(v, "llm.rope")) {
    if (rope->getAttr("num_heads") || rope->getAttr("token_axis"))
      return *why = "its rope is not on [batch, heads, tokens, head_dim]", std::nullopt;
    operand.rope = rope;
    operand.chain.push_back(rope);
    v = rope->getOperand(0);
  }
  Operation* transpose = singleUseDef(v, "nn.transpose");
  if (!isHeadTranspose(transpose)) return *why = "an operand is not transposed from [batch, tokens, heads, head_dim]", std::nullopt;
  Value split = transpose->getOperand(0);
  operand.chain.push_back(transpose);
  // A rope of the heads before their transpose (token_axis 1, GPT-J's).
  if (Operation* rope = singleUseDef(split, "llm.rope")) {
    auto axis = rope->getAttrOfType<IntegerAttr>("token_axis");
    if (operand.rope || !axis || axis.getInt() != 1 ||
        !isa<NoneType>(rope->getOperand(1).getType()))
      return *why = "the rope at " + where(rope) + " is not one of the heads before the transpose",
             std::nullopt;
    operand.rope = rope;
    operand.chain.push_back(rope);
    split = rope->getOperand(0);
  }
  if (Operation* norm = singleUseDef(split, "llm.norm")) {
    auto type = cast<RankedTensorType>(split.getType());
    if (type.getRank() != 4 || type.isDynamicDim(3) || !isHeadNorm(norm, type.getDimSize(3)))
      return *why = "the norm at " + where(norm) + " is not a norm of each head", std::nullopt;
    operand.norm = norm;
    split = norm->getOperand(0);
  }
  Operation* reshape = singleUseDef(split, "nn.reshape");
  if (!reshape) return *why = "an operand is not reshaped from [batch, tokens, width] rows", std::nullopt;
  Value rows = reshape->getOperand(0);
  auto rows_type = dyn_cast<RankedTensorType>(rows.getType());
  auto split_type = cast<RankedTensorType>(reshape->getResult(0).getType());
  if (!rows_type || rows_type.getRank() != 3 || split_type.getRank() != 4 ||
      split_type.isDynamicDim(2) || split_type.isDynamicDim(3) ||
      rows_type.isDynamicDim(2) || rows_type.getDimSize(2) != split_type.getDimSize(2) * split_type.getDimSize(3) ||
      !sameLeadingDims(rows, reshape->getResult(0), 2))
    return *why = "the reshape at " + where(reshape) + " is not [b, s, H * D] -> [b, s, H, D]",
           std::nullopt;
  if (operand.norm) operand.chain.push_back(operand.norm);
  operand.chain.push_back(reshape);
  operand.rows = rows;
  return operand;
}

class FuseQkvPass : public impl::FuseQkvBase<FuseQkvPass> {
 public:
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    std::vector<Operation*> attentions;
    for (Operation& op : func.getBody().front())
      if ((isOp(&op, "llm.attention") || isOp(&op, "llm.sdpa")) && !op.getAttr("num_heads"))
        attentions.push_back(&op);
    for (Operation* attention : attentions) fuse(func, attention);
    eraseDeadOps(func.getBody().front());
  }

  void fuse(func::FuncOp func, Operation* attention) {
    auto miss = [&](const char* pattern, const std::string& why) {
      logFusion(func, {false, kPass, pattern, nodeNames({attention}), why});
    };
    std::string why;
    // q scaled by a constant (SDPA exports split the scale between q and k): fold it into the
    // attention's scale; rope is linear, so the order does not matter.
    double q_factor = 1.0;
    Value q_value = attention->getOperand(0);
    Operation* q_scale = singleUseDef(q_value, "nn.mul");
    if (q_scale && q_scale->getResult(0).getType() == q_scale->getOperand(0).getType() &&
        scalarConstant(q_scale->getOperand(1))) {
      q_factor = *scalarConstant(q_scale->getOperand(1));
      q_value = q_scale->getOperand(0);
    } else {
      q_scale = nullptr;
    }
    std::optional<Operand> parts[3];
    for (int i = 0; i < 3; ++i) {
      parts[i] = traceOperand(i == 0 ? q_value : attention->getOperand(i), &why);
      if (!parts[i]) return miss("attention-layout", why);
    }
    if (parts[2]->rope) return miss("attention-layout", "v is rotated");
    // Per-head norms of q and k (Qwen3) become one grouped norm of the rows: q's, or q's and
    // k's alike (kind, epsilon, bias), so that on packed rows they are the first columns.
    Operation* q_norm = parts[0]->norm;
    Operation* k_norm = parts[1]->norm;
    if (parts[2]->norm) return miss("attention-layout", "v is normalized per head");
    if (k_norm && !q_norm) return miss("attention-layout", "k is normalized per head and q is not");
    if (q_norm && k_norm &&
        (q_norm->getAttr("kind") != k_norm->getAttr("kind") ||
         q_norm->getAttr("epsilon") != k_norm->getAttr("epsilon") ||
         isa<NoneType>(q_norm->getOperand(3).getType()) !=
             isa<NoneType>(k_norm->getOperand(3).getType())))
      return miss("attention-layout", "q's and k's per-head norms differ in kind, epsilon or bias");
    // The result: transpose(0, 2, 1, 3) then reshape to [b, s, H * D].
    Value out = attention->getResult(0);
    Operation* out_transpose = out.hasOneUse() ? *out.getUsers().begin() : nullptr;
    if (!isHeadTranspose(out_transpose) || !out_transpose->getResult(0).hasOneUse())
      return miss("attention-layout", "the result is not transposed back to [batch, tokens, heads, head_dim]");
    Operation* out_reshape = *out_transpose->getResult(0).getUsers().begin();
    auto q_type = cast<RankedTensorType>(attention->getOperand(0).getType());
    auto k_type = cast<RankedTensorType>(attention->getOperand(1).getType());
    const int64_t heads = q_type.getDimSize(1), kv_heads = k_type.getDimSize(1), head_dim = q_type.getDimSize(3);
    auto merged = isOp(out_reshape, "nn.reshape") ? dyn_cast<RankedTensorType>(out_reshape->getResult(0).getType())
                                                  : RankedTensorType();
    if (!merged || merged.getRank() != 3 || merged.getDimSize(2) != heads * head_dim ||
        !sameLeadingDims(out_reshape->getResult(0), parts[0]->rows, 2))
      return miss("attention-layout", "the result is not merged back to [batch, tokens, heads * head_dim]");
    for (int i = 0; i < 3; ++i)
      if (!sameLeadingDims(parts[i]->rows, parts[0]->rows, 2))
        return miss("attention-layout", "q, k and v rows differ in batch or tokens");

    OpBuilder b(attention);
    std::vector<Operation*> replaced{attention, out_transpose, out_reshape};
    for (auto& part : parts) replaced.insert(replaced.end(), part->chain.begin(), part->chain.end());
    if (q_scale) replaced.push_back(q_scale);
    Location loc = fusedLoc(func.getContext(), replaced);
    const int64_t widths[3] = {heads * head_dim, kv_heads * head_dim, kv_heads * head_dim};
    Value rows[3] = {parts[0]->rows, parts[1]->rows, parts[2]->rows};
    int64_t columns[3] = {0, 0, 0};
    std::vector<Operation*> packed_ops;
    bool packed = pack(func, b, loc, parts, widths, rows, columns, &packed_ops);
    if (q_norm) {
      // (Packed rows hold q then k from column 0: pack() lays them out so.)
      // A grouped norm of `x`'s first columns: the heads of `norms` in turn, `counts` each.
      auto groupedNorm = [&](Value x, ArrayRef<Operation*> norms, ArrayRef<int64_t> counts) {
        SmallVector<Value> scales, biases;
        for (size_t i = 0; i < norms.size(); ++i)
          for (int64_t h = 0; h < counts[i]; ++h) {
            scales.push_back(norms[i]->getOperand(2));
            biases.push_back(norms[i]->getOperand(3));
          }
        auto axis = b.getNamedAttr("axis", b.getI64IntegerAttr(0));
        Value scale = kernelConstant(b, loc, "Concat", {axis}, scales);
        Value bias = isa<NoneType>(biases[0].getType())
                         ? noneValue(b, loc)
                         : kernelConstant(b, loc, "Concat", {axis}, biases);
        if (!scale || !bias) return Value();
        Value none = noneValue(b, loc);
        return createOp(b, loc, "llm.norm", {x, none, scale, bias}, x.getType(),
                        {b.getNamedAttr("kind", q_norm->getAttr("kind")),
                         b.getNamedAttr("epsilon", q_norm->getAttr("epsilon")),
                         b.getNamedAttr("group", b.getI64IntegerAttr(head_dim))});
      };
      Value normalized[2];
      if (packed) {
        normalized[0] = k_norm ? groupedNorm(rows[0], {q_norm, k_norm}, {heads, kv_heads})
                               : groupedNorm(rows[0], {q_norm}, {heads});
        normalized[1] = normalized[0];
      } else {
        normalized[0] = groupedNorm(rows[0], {q_norm}, {heads});
        normalized[1] = k_norm ? groupedNorm(rows[1], {k_norm}, {kv_heads}) : rows[1];
      }
      if (!normalized[0] || !normalized[1])
        return miss("attention-layout", "the per-head norms' weights do not concatenate");
      if (packed) {
        rows[0] = rows[1] = rows[2] = normalized[0];
      } else {
        rows[0] = normalized[0];
        rows[1] = normalized[1];
      }
    }
    // Ropes, token-major: one over the packed q and k when they share their tables.
    Operation* q_rope = parts[0]->rope;
    Operation* k_rope = parts[1]->rope;
    auto tokenMajorRope = [&](Value x, Operation* rope, int64_t rotated_heads) {
      SmallVector<NamedAttribute> attrs{
          b.getNamedAttr("num_heads", b.getI64IntegerAttr(rotated_heads)),
          b.getNamedAttr("head_dim", b.getI64IntegerAttr(head_dim))};
      if (Attribute interleaved = rope->getAttr("interleaved"))
        attrs.push_back(b.getNamedAttr("interleaved", interleaved));
      return createOp(b, loc, "llm.rope",
                      {x, rope->getOperand(1), rope->getOperand(2), rope->getOperand(3)},
                      x.getType(), attrs);
    };
    if (packed) {
      if (q_rope && k_rope) {
        rows[0] = rows[1] = rows[2] = tokenMajorRope(rows[0], q_rope, heads + kv_heads);
      } else if (q_rope) {
        rows[0] = rows[1] = rows[2] = tokenMajorRope(rows[0], q_rope, heads);
      }
    } else {
      if (q_rope) rows[0] = tokenMajorRope(rows[0], q_rope, heads);
      if (k_rope) rows[1] = tokenMajorRope(rows[1], k_rope, kv_heads);
    }
    SmallVector<NamedAttribute> attrs;
    for (NamedAttribute attr : attention->getAttrs())
      if (attr.getName() != "scale") attrs.push_back(attr);
    double scale = cast<FloatAttr>(attention->getAttr("scale")).getValueAsDouble() * q_factor;
    attrs.push_back(b.getNamedAttr("scale", b.getF32FloatAttr(static_cast<float>(scale))));
    attrs.push_back(b.getNamedAttr("num_heads", b.getI64IntegerAttr(heads)));
    attrs.push_back(b.getNamedAttr("num_kv_heads", b.getI64IntegerAttr(kv_heads)));
    attrs.push_back(b.getNamedAttr("head_dim", b.getI64IntegerAttr(head_dim)));
    attrs.push_back(b.getNamedAttr("q_column", b.getI64IntegerAttr(columns[0])));
    attrs.push_back(b.getNamedAttr("k_column", b.getI64IntegerAttr(columns[1])));
    attrs.push_back(b.getNamedAttr("v_column", b.getI64IntegerAttr(columns[2])));
    SmallVector<Value> operands{rows[0], rows[1], rows[2]};
    if (isOp(attention, "llm.sdpa")) operands.push_back(attention->getOperand(3));  // the mask
    Value y = createOp(b, loc, attention->getName().getStringRef(), operands, merged, attrs);
    carryNames(out_reshape, y.getDefiningOp());
    out_reshape->getResult(0).replaceAllUsesWith(y);
    logFusion(func, {true, kPass, "attention-layout", nodeNames(replaced), ""});
    if (packed) logFusion(func, {true, kPass, "qkv", nodeNames(packed_ops), ""});
    for (Operation* op : {out_reshape, out_transpose, attention}) op->erase();
    if (q_scale) q_scale->erase();
    for (auto& part : parts)
      for (Operation* op : part->chain)
        if (op->use_empty()) op->erase();
    for (auto it = packed_ops.rbegin(); it != packed_ops.rend(); ++it)
      if ((*it)->use_empty()) (*it)->erase();
  }

  /// q, k, v rows from one source: three products of the same input with constant weights
  /// (concatenated into one product), or the three parts of one Split of the last axis.
  /// Sets rows/columns to the packed tensor and its column offsets.
  bool pack(func::FuncOp func, OpBuilder& b, Location loc, std::optional<Operand> (&parts)[3],
            const int64_t (&widths)[3], Value (&rows)[3], int64_t (&columns)[3],
            std::vector<Operation*>* packed_ops) {
    if (parts[0]->rope && parts[1]->rope)
      for (unsigned i = 1; i < 4; ++i)
        if (parts[0]->rope->getOperand(i) != parts[1]->rope->getOperand(i) &&
            !(isa<NoneType>(parts[0]->rope->getOperand(i).getType()) &&
              isa<NoneType>(parts[1]->rope->getOperand(i).getType())))
          return false;  // q and k rotated by different tables
    if (!parts[0]->rope && parts[1]->rope) return false;
    if (parts[0]->rope && parts[1]->rope &&
        parts[0]->rope->getAttr("interleaved") != parts[1]->rope->getAttr("interleaved"))
      return false;  // one rope for both would rotate one of them the wrong way
    // One Split of the last axis (GPT-2's c_attn).
    Operation* split = rows[0].getDefiningOp();
    if (isOp(split, "nn.split") && rows[1].getDefiningOp() == split && rows[2].getDefiningOp() == split &&
        split->getNumResults() == 3) {
      auto axis = split->getAttrOfType<IntegerAttr>("axis");
      Value source = split->getOperand(0);
      auto source_type = cast<RankedTensorType>(source.getType());
      if (!axis || (axis.getInt() != -1 && axis.getInt() != 2) || source_type.getRank() != 3) return false;
      int64_t offset = 0;
      for (int i = 0; i < 3; ++i) {
        auto result = dyn_cast<OpResult>(rows[i]);
        if (!result || result.getResultNumber() != static_cast<unsigned>(i) || !rows[i].hasOneUse()) return false;
        columns[i] = offset;
        offset += cast<RankedTensorType>(rows[i].getType()).getDimSize(2);
      }
      rows[0] = rows[1] = rows[2] = source;
      packed_ops->push_back(split);
      return true;
    }
    // Multi-query (GPT-BigCode): Split(x) -> [q, kv], Split(kv) -> [k, v], both of the last axis.
    Operation* q_split = rows[0].getDefiningOp();
    Operation* kv_split = rows[1].getDefiningOp();
    if (isOp(q_split, "nn.split") && isOp(kv_split, "nn.split") && q_split->getNumResults() == 2 &&
        kv_split->getNumResults() == 2 && rows[2].getDefiningOp() == kv_split &&
        kv_split->getOperand(0) == q_split->getResult(1) && q_split->getResult(1).hasOneUse()) {
      auto lastAxis = [](Operation* split) {
        auto axis = split->getAttrOfType<IntegerAttr>("axis");
        auto type = cast<RankedTensorType>(split->getOperand(0).getType());
        return axis && type.getRank() == 3 && (axis.getInt() == -1 || axis.getInt() == 2);
      };
      if (!lastAxis(q_split) || !lastAxis(kv_split) || rows[0] != q_split->getResult(0) ||
          rows[1] != kv_split->getResult(0) || rows[2] != kv_split->getResult(1) ||
          !rows[0].hasOneUse() || !rows[1].hasOneUse() || !rows[2].hasOneUse())
        return false;
      columns[0] = 0;
      columns[1] = cast<RankedTensorType>(rows[0].getType()).getDimSize(2);
      columns[2] = columns[1] + cast<RankedTensorType>(rows[1].getType()).getDimSize(2);
      rows[0] = rows[1] = rows[2] = q_split->getOperand(0);
      packed_ops->push_back(kv_split);
      packed_ops->push_back(q_split);
      return true;
    }
    // Three products of one input.
    Operation* products[3];
    for (int i = 0; i < 3; ++i) {
      products[i] = singleUseDef(rows[i], "llm.fused_matmul");
      if (!products[i]) return false;
    }
    Value input = products[0]->getOperand(0);
    bool with_bias = !isa<NoneType>(products[0]->getOperand(2).getType());
    int64_t k_size = -1;
    for (Operation* p : products) {
      auto activation = p->getAttrOfType<StringAttr>("activation");
      auto trans = p->getAttrOfType<IntegerAttr>("trans_b");
      if (p->getOperand(0) != input || (activation && activation.getValue() != "none") ||
          (trans && trans.getInt() != 0) || p->getAttr("alpha") ||
          with_bias == isa<NoneType>(p->getOperand(2).getType())) {
        logFusion(func, {false, kPass, "qkv", nodeNames({products[0], products[1], products[2]}),
                         "the projections differ in input, bias, layout or activation"});
        return false;
      }
      auto w = float32Constant(p->getOperand(1));
      if (!w || (k_size >= 0 && w->dim(0) != k_size)) return false;
      k_size = w->dim(0);
      if (with_bias && !float32Constant(p->getOperand(2))) return false;
    }
    int64_t total = 0;
    for (int i = 0; i < 3; ++i) {
      const int64_t n = cast<RankedTensorType>(products[i]->getOperand(1).getType()).getDimSize(1);
      if (n != widths[i]) return false;
      columns[i] = total;
      total += n;
    }
    // The packed weight [Wq | Wk | Wv] (and bias) by the runtime's Concat, as refit redoes it.
    Value weight = kernelConstant(b, loc, "Concat", {b.getNamedAttr("axis", b.getI64IntegerAttr(1))},
                                  {products[0]->getOperand(1), products[1]->getOperand(1), products[2]->getOperand(1)});
    Value bias_value = with_bias ? kernelConstant(b, loc, "Concat", {b.getNamedAttr("axis", b.getI64IntegerAttr(0))},
                                                  {products[0]->getOperand(2), products[1]->getOperand(2), products[2]->getOperand(2)})
                                 : noneValue(b, loc);
    if (!weight || !bias_value) return false;
    auto rows_type = cast<RankedTensorType>(rows[0].getType());
    auto packed_type = RankedTensorType::get({rows_type.getDimSize(0), rows_type.getDimSize(1), total},
                                             rows_type.getElementType());
    Value packed = createOp(b, loc, "llm.fused_matmul", {input, weight, bias_value}, packed_type,
                            {b.getNamedAttr("activation", b.getStringAttr("none")),
                             b.getNamedAttr("trans_b", b.getI64IntegerAttr(0))});
    if (Attribute dims = products[0]->getAttr("llmc.dims")) packed.getDefiningOp()->setAttr("llmc.dims", dims);
    rows[0] = rows[1] = rows[2] = packed;
    packed_ops->assign(products, products + 3);
    return true;
  }
};

}  // namespace
}  // namespace llmc
