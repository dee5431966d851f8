// ONNX importer: reads a ModelProto (with external data next to it) and writes the nn
// dialect. Errors are collected for the whole model and reported at once, each naming the
// node (name, op type, opset) or tensor involved.
#pragma once

#include <string>
#include <vector>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace llmc {

struct ImportResult {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::vector<std::string> errors;  // empty on success
  bool unsupported = false;         // some errors are unsupported ops / dtypes
};

// The lowest and highest default-domain opset llmc imports.
inline constexpr int64_t kMinOpset = 13;
inline constexpr int64_t kMaxOpset = 23;

ImportResult importOnnxFile(mlir::MLIRContext& context, const std::string& path);
ImportResult importOnnxBytes(mlir::MLIRContext& context, const void* data, size_t size_bytes,
                             const std::string& path);

}  // namespace llmc
