// llmc's passes (declared in Passes.td) and their registration.
#pragma once

#include <memory>

#include "exec/IR/ExecOps.h"
#include "llm/IR/LLMOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"
#include "nn/IR/NNOps.h"

namespace llmc {

#define GEN_PASS_DECL
#include "transforms/Passes.h.inc"

// Canonicalization patterns of --llmc-simplify.
void populateSimplifyPatterns(mlir::RewritePatternSet& patterns);

#define GEN_PASS_REGISTRATION
#include "transforms/Passes.h.inc"

}  // namespace llmc
