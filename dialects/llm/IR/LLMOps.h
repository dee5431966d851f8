// The llm dialect: C++ declarations generated from LLMOps.td.
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

// The generated declarations need the headers above: keep them after (clang-format off).
// clang-format off
#include "llm/IR/LLMOpsDialect.h.inc"
#define GET_OP_CLASSES
#include "llm/IR/LLMOps.h.inc"
// clang-format on

namespace llmc::llm {
// The runtime kernel that computes an llm op ("llm.attention" -> "LlmAttention"); empty for
// ops of other dialects.
std::string kernelNameOf(mlir::Operation* op);
}  // namespace llmc::llm
