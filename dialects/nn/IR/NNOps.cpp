// The nn dialect: registration, verifiers and folders.
#include "nn/IR/NNOps.h"

#include "llvm/ADT/StringMap.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;

#include "nn/IR/NNOpsDialect.cpp.inc"

namespace llmc::nn {

void NNDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "nn/IR/NNOps.cpp.inc"
      >();
}

LogicalResult verifyOnnxArity(Operation* op, int min_inputs, int max_inputs, int min_outputs,
                              int max_outputs) {
  auto inRange = [](int n, int lo, int hi) { return n >= lo && (hi < 0 || n <= hi); };
  auto range = [](int lo, int hi) {
    return hi < 0     ? std::to_string(lo) + " or more"
           : lo == hi ? std::to_string(lo)
                      : std::to_string(lo) + " to " + std::to_string(hi);
  };
  int n_in = static_cast<int>(op->getNumOperands());
  int n_out = static_cast<int>(op->getNumResults());
  if (!inRange(n_in, min_inputs, max_inputs))
    return op->emitOpError() << "takes " << range(min_inputs, max_inputs) << " inputs, got "
                             << n_in;
  if (!inRange(n_out, min_outputs, max_outputs))
    return op->emitOpError() << "has " << range(min_outputs, max_outputs) << " outputs, got "
                             << n_out;
  // An absent optional input may not be a required one.
  for (int i = 0; i < std::min(n_in, min_inputs); ++i) {
    if (isa<NoneType>(op->getOperand(i).getType()))
      return op->emitOpError() << "required input " << i << " is absent";
  }
  return success();
}

namespace {
struct OnnxNames {
  llvm::StringMap<llvm::StringRef> onnx_by_op;
  llvm::StringMap<llvm::StringRef> op_by_onnx;
};

template <typename Op>
void addOnnxName(OnnxNames& names) {
  if constexpr (requires { Op::getOnnxName(); }) {
    names.onnx_by_op[Op::getOperationName()] = Op::getOnnxName();
    names.op_by_onnx[Op::getOnnxName()] = Op::getOperationName();
  }
}

template <typename... Ops>
OnnxNames buildOnnxNames() {
  OnnxNames names;
  (addOnnxName<Ops>(names), ...);
  return names;
}

const OnnxNames& onnxNames() {
  static const OnnxNames names = buildOnnxNames<
#define GET_OP_LIST
#include "nn/IR/NNOps.cpp.inc"
      >();
  return names;
}
}  // namespace

llvm::StringRef onnxNameOf(Operation* op) {
  auto it = onnxNames().onnx_by_op.find(op->getName().getStringRef());
  return it == onnxNames().onnx_by_op.end() ? llvm::StringRef() : it->second;
}

llvm::StringRef nnOpNameFor(llvm::StringRef onnx_name) {
  auto it = onnxNames().op_by_onnx.find(onnx_name);
  return it == onnxNames().op_by_onnx.end() ? llvm::StringRef() : it->second;
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

}  // namespace llmc::nn

#define GET_OP_CLASSES
#include "nn/IR/NNOps.cpp.inc"
