// Helpers shared by the fusion passes (FuseNorms, FuseMatMul, FuseGatedMlp, FuseRope,
// FuseQkv, FuseElementwise) and language-model recognition: constant inspection, building
// fused ops, and the fusion log that `llmc compile --report` prints.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "llmc/tensor.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Operation.h"

namespace llmc {

// "node 'NAME'" (or "an unnamed nn.x node") for messages.
// Progress of the long passes (quantization and pruning, product by product): the pipeline
// installs a hook for the passes of one compile on its thread (the context is single-threaded,
// so passes run there); reportProgress does nothing without one.
using ProgressHook = std::function<void(const std::string& stage)>;
class ScopedProgressHook {
 public:
  explicit ScopedProgressHook(ProgressHook hook);
  ~ScopedProgressHook();
  ScopedProgressHook(const ScopedProgressHook&) = delete;
  ScopedProgressHook& operator=(const ScopedProgressHook&) = delete;

 private:
  ProgressHook previous_;
};
void reportProgress(const std::string& stage);

std::string where(mlir::Operation* op);
// Whether `op` is non-null and named `name` ("nn.mul").
bool isOp(mlir::Operation* op, llvm::StringRef name);
// The scalar value of a one-element constant of any numeric dtype.
std::optional<double> scalarConstant(mlir::Value v);
// The values of an integer constant.
std::optional<std::vector<int64_t>> intsConstant(mlir::Value v);
// The contents of a float32 constant (any shape).
std::optional<Tensor> float32Constant(mlir::Value v);
// Ranked float32 tensor type?
bool isFloat32Tensor(mlir::Type type);
// The defining op when it is `name` and `v` has exactly one use.
mlir::Operation* singleUseDef(mlir::Value v, llvm::StringRef name);
// Whether two values have the same shape: equal static types, or equal ranks whose dynamic
// dims carry the same symbol names (llmc.dims).
bool sameShape(mlir::Value a, mlir::Value b);

// Whether the first `count` dims of `a` and `b` agree: equal static sizes, or dynamic dims
// with the same symbol name (llmc.dims).
bool sameLeadingDims(mlir::Value a, mlir::Value b, int64_t count);

// An nn.constant holding `tensor` (float32), named `name`, at the top of the builder's block.
mlir::Value float32ConstantOp(mlir::OpBuilder& builder, mlir::Location loc, const Tensor& tensor,
                              llvm::StringRef name);
// A new weight computed at compile time by runtime kernel `kernel` on constant `inputs`
// (e.g. "Concat" of the gate and up weights), at the top of the block, carrying the kernel's
// recipe so that `llmc refit` recomputes it identically from new weights. Null when the kernel
// fails on them.
mlir::Value kernelConstant(mlir::OpBuilder& builder, mlir::Location loc, llvm::StringRef kernel,
                           llvm::ArrayRef<mlir::NamedAttribute> params, mlir::ValueRange inputs);
// The same for a kernel with `num_outputs` results (e.g. LlmQuantizeWeight's data, scales and
// zero points), each with its recipe; empty when the kernel fails (its message in *error when
// given).
llvm::SmallVector<mlir::Value> kernelConstants(mlir::OpBuilder& builder, mlir::Location loc,
                                               llvm::StringRef kernel,
                                               llvm::ArrayRef<mlir::NamedAttribute> params,
                                               mlir::ValueRange inputs, unsigned num_outputs,
                                               std::string* error = nullptr);
// Slice(x, [start], [end], [axis], [step]) of x with one-element constant operands: the raw
// start and end, the axis in [0, rank) and the step (1 when absent), or nullopt.
struct ConstantSlice {
  int64_t start, end, axis, step;
};
std::optional<ConstantSlice> constantSlice(mlir::Operation* slice, mlir::Value x);
// Slice(x, [start], [end], [last axis], [1]) of x's last axis (of size d): {start, end}
// normalized to [0, d], or nullopt.
std::optional<std::pair<int64_t, int64_t>> lastAxisSlice(mlir::Operation* slice, mlir::Value x,
                                                         int64_t d);
// A 0-d float32 literal.
mlir::Value float32Scalar(mlir::OpBuilder& builder, mlir::Location loc, float value);

// An nn.none (an absent optional operand), at the top of the builder's block.
mlir::Value noneValue(mlir::OpBuilder& builder, mlir::Location loc);
// The location of a fused op: the ONNX node names of every op it replaces.
mlir::Location fusedLoc(mlir::MLIRContext* context, llvm::ArrayRef<mlir::Operation*> ops);
// Copies the replaced op's result names (llmc.names) and, when the result counts agree,
// its symbolic dims (llmc.dims) onto the fused op.
void carryNames(mlir::Operation* from, mlir::Operation* to);

// What each fusion pass did, in the function's `llmc.fusion_log` (read and removed by the
// pipeline): a fusion that fired, or one that nearly matched and why it did not. Shape
// inference logs there too when it had to probe smaller sizes or left shapes to run time.
// A record identical to one already logged is not logged again.
struct FusionRecord {
  bool fired = false;
  std::string pass;     // "fuse-norms"
  std::string pattern;  // "rms-norm"
  std::string nodes;    // ONNX node names, comma-separated
  std::string reason;   // why not (near misses)
};
void logFusion(mlir::func::FuncOp func, const FusionRecord& record);
// Whether a record of `pass` and `pattern` that fired (or not) is logged already.
bool hasFusionRecord(mlir::func::FuncOp func, bool fired, llvm::StringRef pass, llvm::StringRef pattern);
std::vector<FusionRecord> takeFusionLog(mlir::func::FuncOp func);
// Erases side-effect-free ops whose results are all unused (weights a fusion replaced, the
// shape arithmetic of a reshape it removed); llm.attention, which writes the KV cache, stays.
void eraseDeadOps(mlir::Block& body);
// Node names of `ops` for a record ("a, b, c"; unnamed ops are skipped).
std::string nodeNames(llvm::ArrayRef<mlir::Operation*> ops);
// Every ONNX node name `op` came from (a fused op carries all of its nodes'), one per line: what
// the node-name patterns of --keep-float and --keep-dense are looked for in.
std::string allNodeNames(mlir::Operation* op);

}  // namespace llmc
