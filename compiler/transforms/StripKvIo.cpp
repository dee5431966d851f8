// --llmc-strip-kv-io: a decoder exported with explicit cache inputs and outputs (Optimum's
// `past_key_values.N.key/value` -> `present.N.key/value`, or GPT-BigCode's packed multi-query
// `past_key_values.N.key_value` [batch, past, 2 x head_dim]) becomes the same model without a
// past: every past tensor is empty (its past axis 0, [batch, kv_heads, 0, head_dim] or
// [batch, 0, 2 x head_dim]), position_ids
// come from llm.positions, the attention mask is as long as the new tokens, and the present
// outputs go. What remains is a full-sequence model (the past is the runtime's KV cache), which
// --llmc-recognize-llm then moves onto the cache.
#include <set>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_STRIPKVIO
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

std::string argName(func::FuncOp func, unsigned i) {
  auto name = func.getArgAttrOfType<StringAttr>(i, "llmc.name");
  return name ? name.getValue().str() : "";
}

// "<prefix><digits>.key", ".value" or ".key_value" (no std::regex: GCC 12's -Wmaybe-
// uninitialized misfires inside it under the sanitizers).
bool isLayerKv(const std::string& name, const std::string& prefix) {
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  size_t i = prefix.size(), digits = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i, ++digits;
  std::string rest = name.substr(i);
  return digits > 0 && (rest == ".key" || rest == ".value" || rest == ".key_value");
}
bool isPast(const std::string& name) { return isLayerKv(name, "past_key_values."); }
bool isPresent(const std::string& name) { return isLayerKv(name, "present."); }

class StripKvIoPass : public impl::StripKvIoBase<StripKvIoPass> {
 public:
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Block& body = func.getBody().front();
    int input_ids = -1, position_ids = -1, attention_mask = -1;
    std::vector<unsigned> past;
    for (unsigned i = 0; i < body.getNumArguments(); ++i) {
      std::string name = argName(func, i);
      if (name == "input_ids") input_ids = static_cast<int>(i);
      if (name == "position_ids") position_ids = static_cast<int>(i);
      if (name == "attention_mask") attention_mask = static_cast<int>(i);
      if (isPast(name)) past.push_back(i);
    }
    if (past.empty() || input_ids < 0) return;
    Value ids = body.getArgument(static_cast<unsigned>(input_ids));
    auto ids_type = dyn_cast<RankedTensorType>(ids.getType());
    auto ids_dims = func.getArgAttrOfType<ArrayAttr>(input_ids, "llmc.dims");
    if (!ids_type || ids_type.getRank() != 2 || !ids_dims || ids_dims.size() != 2) return;
    // The past axis of each: 2 of [batch, kv_heads, past, head_dim], 1 of a packed
    // [batch, past, 2 x head_dim]; every other axis but the batch is static.
    std::vector<int64_t> past_axis;
    for (unsigned i : past) {
      auto type = dyn_cast<RankedTensorType>(body.getArgument(i).getType());
      const bool packed = argName(func, i).ends_with(".key_value");
      const int64_t rank = packed ? 3 : 4, axis = packed ? 1 : 2;
      if (!type || type.getRank() != rank) return;  // not a layout this pass knows
      for (int64_t d = 1; d < rank; ++d)
        if (d != axis && ShapedType::isDynamic(type.getDimSize(d))) return;
      past_axis.push_back(axis);
    }

    OpBuilder b = OpBuilder::atBlockBegin(&body);
    Location loc = func.getLoc();
    auto i64 = b.getI64Type();
    auto constant = [&](ArrayRef<int64_t> values) { return int64Constant(b, loc, values); };
    auto create = [&](StringRef name, ValueRange operands, Type type,
                      ArrayRef<NamedAttribute> attrs = {}) {
      return createOp(b, loc, name, operands, type, attrs);
    };
    // [batch] from input_ids, shared by every empty past tensor.
    Value shape = create("nn.shape", {ids}, RankedTensorType::get({2}, i64));
    Value batch = create("nn.slice", {shape, constant({0}), constant({1})},
                         RankedTensorType::get({1}, i64));
    for (size_t n = 0; n < past.size(); ++n) {
      BlockArgument arg = body.getArgument(past[n]);
      auto type = cast<RankedTensorType>(arg.getType());
      SmallVector<int64_t> rest, shape = {ShapedType::kDynamic};
      for (int64_t d = 1; d < type.getRank(); ++d) {
        rest.push_back(d == past_axis[n] ? 0 : type.getDimSize(d));
        shape.push_back(rest.back());
      }
      Value target =
          create("nn.concat", {batch, constant(rest)}, RankedTensorType::get({type.getRank()}, i64),
                 {b.getNamedAttr("axis", b.getI64IntegerAttr(0))});
      auto fill = DenseElementsAttr::get(RankedTensorType::get({1}, type.getElementType()),
                                         b.getZeroAttr(type.getElementType()));
      Value empty = create("nn.constant_of_shape", {target},
                           RankedTensorType::get(shape, type.getElementType()),
                           {b.getNamedAttr("value", fill)});
      arg.replaceAllUsesWith(empty);
    }
    if (position_ids >= 0) {
      BlockArgument arg = body.getArgument(static_cast<unsigned>(position_ids));
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (type && type.getRank() == 2) {
        Value positions = create("llm.positions", {ids},
                                 RankedTensorType::get({ShapedType::kDynamic}, i64));
        Value row = create("nn.unsqueeze", {positions, constant({0})},
                           RankedTensorType::get({1, ShapedType::kDynamic}, i64));
        Value rows = create("nn.expand", {row, shape},
                            RankedTensorType::get({ShapedType::kDynamic, ShapedType::kDynamic}, i64));
        if (!type.getElementType().isInteger(64))
          rows = create("nn.cast", {rows}, type,
                        {b.getNamedAttr("to", b.getI64IntegerAttr(6))});  // ONNX INT32
        arg.replaceAllUsesWith(rows);
      }
    }
    if (attention_mask >= 0)  // as long as the new tokens: there is no past any more
      func.setArgAttr(attention_mask, "llmc.dims",
                      b.getStrArrayAttr({cast<StringAttr>(ids_dims[0]).getValue(),
                                         cast<StringAttr>(ids_dims[1]).getValue()}));

    // Drop the present outputs.
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    auto names = func->getAttrOfType<ArrayAttr>("llmc.output_names");
    SmallVector<Value> kept_values;
    SmallVector<Attribute> kept_names;
    for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
      std::string name =
          names && i < names.size() ? cast<StringAttr>(names[i]).getValue().str() : "";
      if (isPresent(name)) continue;
      kept_values.push_back(ret.getOperand(i));
      if (names) kept_names.push_back(names[i]);
    }
    ret->setOperands(kept_values);
    if (names) func->setAttr("llmc.output_names", b.getArrayAttr(kept_names));

    // Remove the inputs that are now unused (the past, position_ids) and the symbols no
    // input uses any more.
    llvm::BitVector erase(body.getNumArguments());
    for (unsigned i = 0; i < body.getNumArguments(); ++i)
      if (body.getArgument(i).use_empty() &&
          (isPast(argName(func, i)) || static_cast<int>(i) == position_ids))
        erase.set(i);
    func.eraseArguments(erase);
    func.setType(FunctionType::get(&getContext(), func.getArgumentTypes(), ret.getOperandTypes()));
    if (auto symbols = func->getAttrOfType<ArrayAttr>("llmc.symbols")) {
      std::set<std::string> used;
      for (unsigned i = 0; i < func.getNumArguments(); ++i)
        if (auto dims = func.getArgAttrOfType<ArrayAttr>(i, "llmc.dims"))
          for (Attribute d : dims) used.insert(cast<StringAttr>(d).getValue().str());
      SmallVector<Attribute> kept;
      for (Attribute s : symbols)
        if (used.count(cast<StringAttr>(s).getValue().str())) kept.push_back(s);
      func->setAttr("llmc.symbols", b.getArrayAttr(kept));
    }
    func->setAttr("llmc.stripped_kv_io", b.getUnitAttr());
  }
};

}  // namespace
}  // namespace llmc
