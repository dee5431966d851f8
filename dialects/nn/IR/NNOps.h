// The nn dialect: C++ declarations generated from NNOps.td.
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace llmc::nn {
// Checks operand/result counts against ONNX's arity (-1: unbounded).
mlir::LogicalResult verifyOnnxArity(mlir::Operation* op, int min_inputs, int max_inputs,
                                    int min_outputs, int max_outputs);
// The ONNX operator an nn op mirrors ("" for nn.constant and nn.none).
llvm::StringRef onnxNameOf(mlir::Operation* op);
// The nn operation name for an ONNX operator ("" when nn has none).
llvm::StringRef nnOpNameFor(llvm::StringRef onnx_name);
}  // namespace llmc::nn

#include "nn/IR/NNOpsDialect.h.inc"
#define GET_OP_CLASSES
#include "nn/IR/NNOps.h.inc"
