// --llmc-lower-to-exec: nn and llm ops become exec.call steps of the runtime kernel of the same
// name (attributes become typed parameters); constants become exec.weight.
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_LOWERTOEXEC
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

class LowerToExecPass : public impl::LowerToExecBase<LowerToExecPass> {
 public:
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Dialect* nn_dialect = getContext().getLoadedDialect<nn::NNDialect>();
    Dialect* llm_dialect = getContext().getLoadedDialect<llm::LLMDialect>();
    std::vector<Operation*> ops;
    for (Operation& op : func.getBody().front().without_terminator()) ops.push_back(&op);
    for (Operation* op : ops) {
      if (op->getDialect() != nn_dialect && op->getDialect() != llm_dialect) continue;
      OpBuilder builder(op);
      Operation* lowered = nullptr;
      if (auto constant = dyn_cast<nn::ConstantOp>(op)) {
        lowered = builder.create<exec::WeightOp>(op->getLoc(), constant.getType(),
                                                 constant.getValue(), constant.getNameAttr());
        if (Attribute recipe = constant->getAttr("llmc.recipe")) lowered->setAttr("llmc.recipe", recipe);
      } else if (isa<nn::NoneOp>(op)) {
        lowered = builder.create<exec::NoneOp>(op->getLoc(), builder.getNoneType());
      } else {
        SmallVector<NamedAttribute> params;
        for (NamedAttribute attr : op->getAttrs())
          if (!attr.getName().getValue().starts_with("llmc.")) params.push_back(attr);
        std::string node = nodeNameOf(op);
        auto call = builder.create<exec::CallOp>(
            op->getLoc(), op->getResultTypes(), builder.getStringAttr(kernelNameOf(op)),
            op->getOperands(), builder.getDictionaryAttr(params),
            node.empty() ? StringAttr() : builder.getStringAttr(node), DenseI64ArrayAttr());
        for (StringRef carried : {"llmc.names", "llmc.dims"})
          if (Attribute a = op->getAttr(carried)) call->setAttr(carried, a);
        lowered = call;
      }
      op->replaceAllUsesWith(lowered->getResults());
      op->erase();
    }
  }
};

}  // namespace
}  // namespace llmc
