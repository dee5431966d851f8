// State shared by the importer and its op handlers: the builder, the value table and the
// error list. Internal to compiler/importer/.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"
#include "onnx/onnx_pb.h"

namespace llmc::importer {

struct NodeInfo {
  const onnx::NodeProto* node;
  std::string name;  // the node's name, or "<OpType>_<index>" when it has none
  int64_t opset;     // the opset of the node's domain
  mlir::Location loc;
  std::vector<mlir::Value> operands;  // ONNX inputs in order; nn.none for absent ones
  std::vector<mlir::Type> result_types;
  std::vector<std::string> result_names;
};

class ImportState {
 public:
  explicit ImportState(mlir::OpBuilder& builder) : builder(builder) {}

  mlir::OpBuilder& builder;
  std::vector<std::string> errors;
  bool unsupported = false;

  // "node 'n' (Op, opset 17): message"
  void nodeError(const NodeInfo& info, const std::string& message);

  // An i64 constant (for attributes the importer turns into operands).
  mlir::Value int64Constant(mlir::Location loc, llvm::ArrayRef<int64_t> values);
  // Creates the nn op for `info` with the given operands and attributes.
  mlir::Operation* createNNOp(const NodeInfo& info, llvm::StringRef nn_op_name,
                              llvm::ArrayRef<mlir::Value> operands,
                              llvm::ArrayRef<mlir::NamedAttribute> attributes);
};

// Converts ONNX attributes to MLIR ones (INT -> i64, FLOAT -> f32, STRING, INTS ->
// array<i64>, FLOATS -> array<f32>, TENSOR -> dense elements). False (and an error) for
// kinds nn does not take.
bool convertAttributes(ImportState& state, const NodeInfo& info,
                       llvm::SmallVectorImpl<mlir::NamedAttribute>* attributes,
                       llvm::ArrayRef<llvm::StringRef> skip = {});

// Converts a TensorProto to a constant attribute; `base_dir` resolves external data.
// Returns null and sets *error on failure.
mlir::DenseElementsAttr convertTensor(mlir::MLIRContext* context, const onnx::TensorProto& tensor,
                                      const std::string& base_dir, std::string* error);

// Handler for one ONNX node; returns the created op (null after reporting an error).
using OpHandler = mlir::Operation* (*)(ImportState& state, const NodeInfo& info);

// The handler for (domain, op_type) at `opset`, or null when llmc cannot import it.
OpHandler findOpHandler(const std::string& domain, const std::string& op_type, int64_t opset);

}  // namespace llmc::importer
