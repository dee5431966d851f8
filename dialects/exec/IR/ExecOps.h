// The exec dialect: C++ declarations generated from ExecOps.td.
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

// The generated declarations need the headers above: keep them after (clang-format off).
// clang-format off
#include "exec/IR/ExecOpsDialect.h.inc"
#define GET_OP_CLASSES
#include "exec/IR/ExecOps.h.inc"
// clang-format on
