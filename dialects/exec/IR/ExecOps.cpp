// The exec dialect: registration and verifiers.
#include "exec/IR/ExecOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;

#include "exec/IR/ExecOpsDialect.cpp.inc"

namespace llmc::exec {

void ExecDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "exec/IR/ExecOps.cpp.inc"
      >();
}

OpFoldResult WeightOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult CallOp::verify() {
  if (getKernel().empty()) return emitOpError() << "needs a kernel name";
  if (auto slots = getSlots()) {
    if (slots->size() != static_cast<size_t>(getNumResults()))
      return emitOpError() << "has " << slots->size() << " slots for " << getNumResults()
                           << " results";
    for (int64_t slot : *slots)
      if (slot < 0) return emitOpError() << "has a negative arena slot " << slot;
  }
  for (NamedAttribute param : getParams()) {
    Attribute value = param.getValue();
    if (!isa<IntegerAttr, FloatAttr, StringAttr, DenseI64ArrayAttr, DenseF32ArrayAttr,
             ElementsAttr>(value))
      return emitOpError() << "parameter '" << param.getName().getValue()
                           << "' has an unsupported kind";
  }
  return success();
}

}  // namespace llmc::exec

#define GET_OP_CLASSES
#include "exec/IR/ExecOps.cpp.inc"
