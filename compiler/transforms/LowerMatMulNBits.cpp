// --llmc-lower-matmul-nbits: ONNX Runtime's com.microsoft.MatMulNBits with a constant 4-bit
// weight becomes llm.quant_matmul in the int4 formats (no zero points: int4, whose implicit
// zero point is MatMulNBits' default 8; packed 4-bit zero points: int4_zp), so that models
// quantized by ONNX Runtime's tools run on the quantized kernels instead of the reference loop.
// The weight is repacked by the runtime's LlmRepackNBits kernel and recorded as its recipe
// (`llmc refit` repeats it). The int4 kernels quantize the activations to int8 blocks, which is
// what MatMulNBits' accuracy_level 4 allows; a product with a lower accuracy_level keeps float
// activations (the reference kernel) unless `int8-activations` is set (`llmc compile
// --quantize ...`, which opts into quantized activations anyway).
#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_LOWERMATMULNBITS
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

constexpr const char* kPass = "lower-matmul-nbits";

int64_t intAttr(Operation* op, StringRef name, int64_t fallback) {
  auto attr = op->getAttrOfType<IntegerAttr>(name);
  return attr ? attr.getInt() : fallback;
}

bool isConstant(Value v) { return v.getDefiningOp() && isOp(v.getDefiningOp(), "nn.constant"); }

class LowerMatMulNBitsPass : public impl::LowerMatMulNBitsBase<LowerMatMulNBitsPass> {
 public:
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    SmallVector<Operation*> ops;
    func.walk([&](Operation* op) {
      if (isOp(op, "nn.ms_matmul_nbits")) ops.push_back(op);
    });
    for (Operation* op : ops) lower(func, op);
    eraseDeadOps(func.getBody().front());
  }

  void lower(func::FuncOp func, Operation* op) {
    const std::string nodes = nodeNames({op});
    auto miss = [&](const std::string& why) { logFusion(func, {false, kPass, "matmul-nbits", nodes, why}); };
    const int64_t k = intAttr(op, "K", 0), n = intAttr(op, "N", 0), bits = intAttr(op, "bits", 4);
    const int64_t block = intAttr(op, "block_size", 0), accuracy = intAttr(op, "accuracy_level", 0);
    const unsigned count = op->getNumOperands();
    auto operand = [&](unsigned i) -> Value {
      return i < count && !isa<NoneType>(op->getOperand(i).getType()) ? op->getOperand(i) : Value();
    };
    Value a = operand(0), b = operand(1), scales = operand(2), zeros = operand(3), g_idx = operand(4), bias = operand(5);
    if (!a || !b || !scales) return miss("A, B and scales are required");
    if (bits != 4) return miss("bits " + std::to_string(bits) + ": the int4 kernels take 4");
    if (k % 32 != 0 || block % 32 != 0) return miss("K and block_size must be multiples of 32");
    if (accuracy < 4 && !int8Activations) return miss("accuracy_level below 4 asks for float activations");
    if (g_idx) return miss("g_idx (act-order) is not supported");
    if (!isConstant(b) || !isConstant(scales) || (zeros && !isConstant(zeros))) return miss("the weight is not constant");
    auto scale_type = dyn_cast<RankedTensorType>(scales.getType());
    auto zero_type = zeros ? dyn_cast<RankedTensorType>(zeros.getType()) : RankedTensorType();
    if (!scale_type || !scale_type.getElementType().isF32()) return miss("scales are not float32");
    if (zeros && (!zero_type || !zero_type.getElementType().isUnsignedInteger(8)))
      return miss("zero points are not packed uint8");
    if (auto a_type = dyn_cast<TensorType>(a.getType()); !a_type || !a_type.getElementType().isF32())
      return miss("A is not float32");
    OpBuilder builder(op);
    Location loc = op->getLoc();
    SmallVector<Value> inputs{b, scales};
    if (zeros) inputs.push_back(zeros);
    SmallVector<Value> parts =
        kernelConstants(builder, loc, "LlmRepackNBits",
                        {builder.getNamedAttr("K", builder.getI64IntegerAttr(k)),
                         builder.getNamedAttr("N", builder.getI64IntegerAttr(n)),
                         builder.getNamedAttr("block_size", builder.getI64IntegerAttr(block))},
                        inputs, zeros ? 3 : 2);
    if (parts.empty()) return miss("the weight does not repack (shapes disagree with K, N, block_size)");
    Value none = noneValue(builder, loc);
    Value y = createOp(builder, loc, "llm.quant_matmul",
                       {a, parts[0], parts[1], zeros ? parts[2] : none, bias ? bias : none},
                       op->getResult(0).getType(),
                       {builder.getNamedAttr("format", builder.getStringAttr(zeros ? "int4_zp" : "int4")),
                        builder.getNamedAttr("group", builder.getI64IntegerAttr(block))});
    carryNames(op, y.getDefiningOp());
    op->getResult(0).replaceAllUsesWith(y);
    op->erase();
    logFusion(func, {true, kPass, zeros ? "int4_zp" : "int4", nodes, ""});
  }
};

}  // namespace
}  // namespace llmc
