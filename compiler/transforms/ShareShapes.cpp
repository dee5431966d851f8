// --llmc-share-shapes: every decoder layer of an export computes the shapes it reshapes to from
// its own activations (Shape, Gather, Unsqueeze, Concat: OPT's rows and back, per layer), the
// same numbers in every layer. A Shape of a value whose shape is proven equal to an earlier
// Shape's input (the same static sizes and the same symbols, sameShape) reads the earlier one,
// and then integer ops that compute the same thing from the same operands (shape arithmetic)
// are merged, so it runs once per step instead of once per layer. Ops differing only in the
// exporter's node names (llmc.names) are the same computation.
#include <map>
#include <string>
#include <vector>

#include "llvm/Support/raw_ostream.h"
#include "transforms/FusionUtil.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_SHARESHAPES
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

constexpr const char* kPass = "share-shapes";

// The attributes that say what an op computes: all but the names it carries for reports.
std::string computeAttributes(Operation* op) {
  std::string text;
  llvm::raw_string_ostream out(text);
  for (NamedAttribute attr : op->getAttrs()) {
    if (attr.getName() == "llmc.names" || attr.getName() == "llmc.dims") continue;
    out << attr.getName() << "=" << attr.getValue() << ";";
  }
  return text;
}

// A side-effect-free nn op producing one integer tensor (shape arithmetic), not a constant.
bool isIntegerArithmetic(Operation& op) {
  if (op.getNumResults() != 1 || op.getNumRegions() != 0 || isa<nn::ConstantOp>(op) ||
      !op.getName().getStringRef().starts_with("nn."))
    return false;
  auto type = dyn_cast<RankedTensorType>(op.getResult(0).getType());
  return type && type.getElementType().isInteger(64);
}

class ShareShapesPass : public impl::ShareShapesBase<ShareShapesPass> {
 public:
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Block& body = func.getBody().front();
    // 1. Shapes proven equal read the first of them (block order: it dominates the others).
    std::vector<std::pair<Operation*, std::string>> kept;  // with computeAttributes
    std::vector<Operation*> shapes;
    for (Operation& op : body)
      if (isOp(&op, "nn.shape")) shapes.push_back(&op);
    for (Operation* shape : shapes) {
      const std::string attributes = computeAttributes(shape);
      Operation* same = nullptr;
      for (const auto& [earlier, earlier_attributes] : kept)
        if (earlier_attributes == attributes &&
            earlier->getResult(0).getType() == shape->getResult(0).getType() &&
            sameShape(earlier->getOperand(0), shape->getOperand(0))) {
          same = earlier;
          break;
        }
      if (!same) {
        kept.emplace_back(shape, attributes);
        continue;
      }
      logFusion(func, {true, kPass, "shape", nodeNames({same, shape}), ""});
      shape->getResult(0).replaceAllUsesWith(same->getResult(0));
      shape->erase();
    }
    // 2. The integer arithmetic on them, merged where op, operands, attributes and type agree
    // (constants are compared by value).
    std::map<std::string, Operation*> seen;
    std::vector<Operation*> dead;
    auto operandKey = [](Value v) {
      std::string text;
      llvm::raw_string_ostream out(text);
      if (auto constant = v.getDefiningOp<nn::ConstantOp>())
        out << "const:" << constant->getAttr("value");
      else
        out << "value:" << v.getAsOpaquePointer();
      return text;
    };
    for (Operation& op : body) {
      if (!isIntegerArithmetic(op)) continue;
      std::string key;
      llvm::raw_string_ostream out(key);
      out << op.getName() << "(";
      for (Value operand : op.getOperands()) out << operandKey(operand) << ",";
      out << ")" << computeAttributes(&op) << ":" << op.getResult(0).getType();
      auto [it, inserted] = seen.emplace(key, &op);
      if (inserted) continue;
      op.getResult(0).replaceAllUsesWith(it->second->getResult(0));
      dead.push_back(&op);
    }
    for (Operation* op : dead) op->erase();
    eraseDeadOps(body);
  }
};

}  // namespace
}  // namespace llmc
