// exec -> engine file: the FlatBuffer plan plus the aligned weights section.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlir/IR/BuiltinOps.h"

namespace llmc {

struct SerializeOptions {
  std::string compiler_version;
  std::string source_hash;
  std::string build_options;
  std::string target = "cpu";
  std::string tokenizer_json;  // stored verbatim when not empty
  std::string tokenizer_config_json;   // the same (format 1.4)
  std::string generation_config_json;  // the same (format 1.4)
  // Leave out the bytes of every weight computed from the model's initializers (their recipes
  // stay): `llmc refit` fills them. The plan section is the same as without stripping.
  bool strip_weights = false;
};

// Writes the engine for the module's @main (already lowered to exec and memory-planned).
mlir::LogicalResult serializeEngine(mlir::ModuleOp module, const SerializeOptions& options,
                                    std::vector<uint8_t>* file);

}  // namespace llmc
