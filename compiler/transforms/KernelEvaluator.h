// Bridges MLIR and the runtime's reference kernels: converts types, attributes and
// constants to runtime tensors and parameters, and runs one kernel (shape-only or fully).
// Shape inference and constant folding use it, so compile-time results are computed by the
// very code the engine runs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/kernel.h"
#include "llmc/tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"

namespace llmc {

// MLIR element type <-> runtime dtype. kUndefined / null Type when there is no match.
DType dtypeFromMlir(mlir::Type element_type);
mlir::Type mlirFromDType(DType dtype, mlir::MLIRContext* context);

// The bytes of a constant as an owning runtime tensor (splats expanded, i1 as bytes).
Tensor tensorFromElements(mlir::ElementsAttr elements);
// A constant attribute holding `tensor` (whose shape must be static).
mlir::DenseElementsAttr elementsFromTensor(const Tensor& tensor, mlir::MLIRContext* context);

// Kernel parameters from an attribute dictionary; attributes named "llmc.*" are skipped.
Status paramsFromAttributes(llvm::ArrayRef<mlir::NamedAttribute> attributes, KernelParams* params);

// The runtime kernel name of an nn op ("nn.reduce_mean" -> "ReduceMean").
std::string kernelNameOf(mlir::Operation* op);
// The ONNX node name carried in an op's location ("" when none).
std::string nodeNameOf(mlir::Operation* op);

// evaluateKernel() (core/kernel.h) runs one runtime kernel on tensors.

}  // namespace llmc

namespace llmc {
// Weight recipes (docs/refit.md): an initializer constant carries `llmc.recipe =
// {source = "name"}`; a constant computed from constants by a kernel carries
// `{kernel = "Name", params = {...}, inputs = [expr, ...], output = i}` when any input has a
// recipe; other constants are literals. recipeExpr gives the expression a value contributes as
// a kernel input ({literal = value} for literals, {none} for an absent input).
mlir::DictionaryAttr recipeOf(mlir::Value value);
mlir::DictionaryAttr recipeExpr(mlir::Value value);
// The recipe of output `output` of `kernel` on `inputs` (null when no input has a recipe).
mlir::DictionaryAttr kernelRecipe(mlir::MLIRContext* context, llvm::StringRef kernel,
                                  mlir::DictionaryAttr params, mlir::ValueRange inputs,
                                  unsigned output);

// Replaces every result of `op` with an nn.constant holding the matching tensor (which must
// have data) and erases `op`. Constant names come from the op's `llmc.names`. Returns the
// constants' values, in result order. The constants get the kernel's recipe when an operand
// has one.
std::vector<mlir::Value> replaceWithConstants(mlir::Operation* op,
                                              const std::vector<Tensor>& values);

// The symbol name of each dimension of `value`, from the `llmc.dims` that shape inference
// writes ("" for static or unnamed dims; empty when the rank is unknown).
std::vector<std::string> dimNamesOf(mlir::Value value);

// Creates the single-result op `name` (an nn or llm op: generic form, attributes in the
// dictionary) at the builder's insertion point and returns its result.
mlir::Value createOp(mlir::OpBuilder& builder, mlir::Location loc, llvm::StringRef name,
                     mlir::ValueRange operands, mlir::Type type,
                     llvm::ArrayRef<mlir::NamedAttribute> attributes = {});
// An nn.constant holding the 1-D int64 tensor `values`.
mlir::Value int64Constant(mlir::OpBuilder& builder, mlir::Location loc,
                          llvm::ArrayRef<int64_t> values);
}  // namespace llmc
