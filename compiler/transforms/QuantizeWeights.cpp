// --llmc-quantize-weights: weight-only quantization. Every matrix product with a constant
// float32 weight (llm.fused_matmul, llm.gated_mlp, nn.matmul) becomes llm.quant_matmul, and a
// Gather of a constant float32 table (the embedding) llm.quant_gather, with the weight quantized
// at compile time by the runtime's LlmQuantizeWeight kernel (so `llmc refit` repeats it from new
// weights); weights whose K does not fit the format stay float32 and are logged with the
// reason, as are those --keep-float names.
#include <functional>

#include "core/quant.h"
#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_QUANTIZEWEIGHTS
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

constexpr const char* kPass = "quantize";

// Every ONNX node name in `loc` (a fused op carries all of its nodes').
void collectNames(Location loc, std::string* out) {
  if (auto fused = dyn_cast<FusedLoc>(loc)) {
    for (Location inner : fused.getLocations()) collectNames(inner, out);
  } else if (auto name = dyn_cast<NameLoc>(loc)) {
    *out += name.getName().str() + "\n";
  }
}

class QuantizeWeightsPass : public impl::QuantizeWeightsBase<QuantizeWeightsPass> {
 public:
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    const QuantTraits* traits = findQuantTraits(format);
    const QuantTraits* head = headFormat.empty() ? traits : findQuantTraits(headFormat);
    if (!traits || !head) {
      func.emitError() << "unknown quantization format '" << (traits ? headFormat : format)
                       << "' (formats: int8, int4, int4_zp)";
      return signalPassFailure();
    }
    // The LM head: the product whose result the function returns (the logits).
    llvm::DenseSet<Operation*> returned;
    for (Value v : func.getBody().front().getTerminator()->getOperands())
      if (Operation* def = v.getDefiningOp()) returned.insert(def);
    std::vector<Operation*> products, gathers;
    for (Operation& op : func.getBody().front()) {
      if (isOp(&op, "llm.fused_matmul") || isOp(&op, "llm.gated_mlp") || isOp(&op, "nn.matmul"))
        products.push_back(&op);
      if (isOp(&op, "nn.gather")) gathers.push_back(&op);
    }
    for (Operation* op : products) quantize(func, op, returned.count(op) ? *head : *traits);
    for (Operation* op : gathers) quantizeTable(func, op, *head);
    eraseDeadOps(func.getBody().front());
  }

  bool keptFloat(Operation* op, const std::function<void(const std::string&)>& skip) {
    std::string names;
    collectNames(op->getLoc(), &names);
    for (const std::string& pattern : keepFloat)
      if (!pattern.empty() && names.find(pattern) != std::string::npos) {
        skip("kept float32 (--keep-float " + pattern + ")");
        return true;
      }
    return false;
  }

  // The group for K, or 0 (logged) when the weight does not fit the format.
  int64_t groupFor(const QuantTraits& traits, int64_t k, const std::function<void(const std::string&)>& skip) {
    const int64_t group_size = traits.format == QuantFormat::kInt8 ? k : group;
    if (Status fits = checkQuantGroup(traits, k, group_size); !fits.ok()) {
      skip(fits.message() + "; stays float32");
      return 0;
    }
    return group_size;
  }

  // The weight quantized by the runtime's LlmQuantizeWeight (with its recipe): data, scales and
  // zero points (nn.none for formats without); empty when the quantizer refuses it.
  SmallVector<Value> quantizedWeight(OpBuilder& b, Location loc, const QuantTraits& traits, int64_t group_size,
                                     int64_t trans_b, Value weight) {
    SmallVector<Value> parts = kernelConstants(
        b, loc, "LlmQuantizeWeight",
        {b.getNamedAttr("format", b.getStringAttr(traits.name)),
         b.getNamedAttr("group", b.getI64IntegerAttr(group_size)),
         b.getNamedAttr("trans_b", b.getI64IntegerAttr(trans_b))},
        {weight}, traits.zero_points ? 3 : 2);
    if (!parts.empty() && !traits.zero_points) parts.push_back(noneValue(b, loc));
    return parts;
  }

  /// gather(T, ids) along axis 0 with T a constant float32 [V, K] ->
  /// llm.quant_gather(ids, data, scales, zeros | none){format, group}.
  void quantizeTable(func::FuncOp func, Operation* op, const QuantTraits& traits) {
    Value table = op->getOperand(0);
    auto type = dyn_cast<RankedTensorType>(table.getType());
    auto axis = op->getAttrOfType<IntegerAttr>("axis");
    if (!type || type.getRank() != 2 || (axis && axis.getInt() != 0) || !float32Constant(table)) return;
    const std::string nodes = nodeNames({op});
    auto skip = [&](const std::string& why) { logFusion(func, {false, kPass, traits.name, nodes, why}); };
    if (keptFloat(op, skip)) return;
    const int64_t k = type.getDimSize(1);
    const int64_t group_size = groupFor(traits, k, skip);
    if (group_size == 0) return;
    OpBuilder b(op);
    Location loc = op->getLoc();
    SmallVector<Value> parts = quantizedWeight(b, loc, traits, group_size, /*trans_b=*/1, table);
    if (parts.empty()) return skip("the quantizer refused the table; stays float32");
    Value y = createOp(b, loc, "llm.quant_gather", {op->getOperand(1), parts[0], parts[1], parts[2]},
                       op->getResult(0).getType(),
                       {b.getNamedAttr("format", b.getStringAttr(traits.name)),
                        b.getNamedAttr("group", b.getI64IntegerAttr(group_size))});
    carryNames(op, y.getDefiningOp());
    op->getResult(0).replaceAllUsesWith(y);
    logFusion(func, {true, kPass, std::string(traits.name) + " embedding", nodes, ""});
    op->erase();
  }

  /// y = product(x, W) with W a constant [K, N] (or [N, K] with trans_b) ->
  /// llm.quant_matmul(x, data, scales, zeros | none, bias | none){format, activation, alpha, gated}.
  void quantize(func::FuncOp func, Operation* op, const QuantTraits& traits) {
    const bool gated = isOp(op, "llm.gated_mlp");
    const bool plain = isOp(op, "nn.matmul");
    Value x = op->getOperand(0), w = op->getOperand(1);
    auto x_type = dyn_cast<RankedTensorType>(x.getType());
    auto w_type = dyn_cast<RankedTensorType>(w.getType());
    if (!x_type || !w_type || w_type.getRank() != 2 || !x_type.getElementType().isF32() ||
        (plain && x_type.getRank() < 2) || !float32Constant(w))
      return;  // not a product with a float32 weight: nothing to quantize
    const std::string nodes = nodeNames({op});
    auto skip = [&](const std::string& why) { logFusion(func, {false, kPass, traits.name, nodes, why}); };
    if (keptFloat(op, skip)) return;
    int64_t trans_b = 0;
    if (auto t = op->getAttrOfType<IntegerAttr>("trans_b")) trans_b = t.getInt();
    const int64_t k = w_type.getDimSize(trans_b ? 1 : 0);
    const int64_t group_size = groupFor(traits, k, skip);
    if (group_size == 0) return;
    OpBuilder b(op);
    Location loc = op->getLoc();
    SmallVector<Value> parts = quantizedWeight(b, loc, traits, group_size, trans_b, w);
    if (parts.empty()) return skip("the quantizer refused the weight; stays float32");
    Value zeros = parts[2];
    Value bias = gated || plain ? noneValue(b, loc) : op->getOperand(2);
    SmallVector<NamedAttribute> attrs{b.getNamedAttr("format", b.getStringAttr(traits.name)),
                                      b.getNamedAttr("group", b.getI64IntegerAttr(group_size))};
    for (const char* name : {"activation", "alpha"})
      if (Attribute a = op->getAttr(name)) attrs.push_back(b.getNamedAttr(name, a));
    if (gated) attrs.push_back(b.getNamedAttr("gated", b.getI64IntegerAttr(1)));
    Value y = createOp(b, loc, "llm.quant_matmul", {x, parts[0], parts[1], zeros, bias},
                       op->getResult(0).getType(), attrs);
    carryNames(op, y.getDefiningOp());
    op->getResult(0).replaceAllUsesWith(y);
    logFusion(func, {true, kPass, std::string(traits.name) + (gated ? " gated-mlp" : " matmul"), nodes, ""});
    op->erase();
  }
};

}  // namespace
}  // namespace llmc
