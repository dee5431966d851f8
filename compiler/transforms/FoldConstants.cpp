// --llmc-fold-constants: evaluates nn ops whose operands are all constants with the
// runtime's reference kernels, so folded values are exactly what the engine would compute.
#include "core/kernel.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_FOLDCONSTANTS
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

class FoldConstantsPass : public impl::FoldConstantsBase<FoldConstantsPass> {
 public:
  using FoldConstantsBase::FoldConstantsBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Dialect* nn_dialect = getContext().getLoadedDialect<nn::NNDialect>();
    std::vector<Operation*> ops;
    for (Operation& op : func.getBody().front().without_terminator()) ops.push_back(&op);
    for (Operation* op : ops) {
      if (op->getDialect() != nn_dialect || isa<nn::ConstantOp, nn::NoneOp>(op)) continue;
      bool all_constant = llvm::all_of(op->getOperands(), [](Value v) {
        return isa_and_nonnull<nn::ConstantOp, nn::NoneOp>(v.getDefiningOp());
      });
      if (!all_constant) continue;
      const KernelDef* kernel = KernelRegistry::cpuReference().find(kernelNameOf(op));
      if (!kernel) continue;
      KernelParams params;
      if (!paramsFromAttributes(op->getAttrs(), &params).ok()) continue;
      std::vector<Tensor> storage;
      storage.reserve(op->getNumOperands());
      std::vector<const Tensor*> inputs;
      for (Value operand : op->getOperands()) {
        if (auto constant = dyn_cast<nn::ConstantOp>(operand.getDefiningOp())) {
          storage.push_back(tensorFromElements(constant.getValue()));
          inputs.push_back(&storage.back());
        } else {
          inputs.push_back(nullptr);
        }
      }
      std::string node = nodeNameOf(op);
      KernelRun shapes =
          evaluateKernel(*kernel, params, inputs, op->getNumResults(), node, /*shape_only=*/true);
      if (!shapes.status.ok()) continue;  // shape inference reports real errors
      int64_t total = 0;
      for (const Tensor& t : shapes.outputs) total += t.numElements();
      if (total > maxElements) continue;
      KernelRun run =
          evaluateKernel(*kernel, params, inputs, op->getNumResults(), node, /*shape_only=*/false);
      if (!run.status.ok()) {
        op->emitError() << run.status.message();
        return signalPassFailure();
      }
      replaceWithConstants(op, run.outputs);
    }
  }
};

}  // namespace
}  // namespace llmc
