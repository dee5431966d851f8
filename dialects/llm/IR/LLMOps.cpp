// The llm dialect: registration, verifiers and kernel names.
#include "llm/IR/LLMOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;

#include "llm/IR/LLMOpsDialect.cpp.inc"
#define GET_OP_CLASSES
#include "llm/IR/LLMOps.cpp.inc"

namespace llmc::llm {

void LLMDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "llm/IR/LLMOps.cpp.inc"
      >();
}

std::string kernelNameOf(Operation* op) {
  if (isa<AttentionOp>(op)) return "LlmAttention";
  if (isa<PositionsOp>(op)) return "LlmPositions";
  if (isa<LastTokensOp>(op)) return "LlmLastTokens";
  if (isa<RopeOp>(op)) return "LlmRope";
  return "";
}

LogicalResult AttentionOp::verify() {
  auto q = cast<RankedTensorType>(getQ().getType());
  auto k = cast<RankedTensorType>(getK().getType());
  auto v = cast<RankedTensorType>(getV().getType());
  auto out = cast<RankedTensorType>(getOutput().getType());
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4 || out.getRank() != 4)
    return emitOpError() << "q, k, v and the result must be [batch, heads, tokens, head_dim]";
  if (k.getShape() != v.getShape()) return emitOpError() << "k and v must have the same shape";
  int64_t heads = q.getDimSize(1), kv_heads = k.getDimSize(1);
  if (ShapedType::isDynamic(heads) || ShapedType::isDynamic(kv_heads) ||
      ShapedType::isDynamic(q.getDimSize(3)) || ShapedType::isDynamic(k.getDimSize(3)))
    return emitOpError() << "heads and head_dim must be static";
  if (q.getDimSize(3) != k.getDimSize(3))
    return emitOpError() << "q and k head_dim differ (" << q.getDimSize(3) << " vs "
                         << k.getDimSize(3) << ")";
  if (kv_heads < 1 || heads % kv_heads != 0)
    return emitOpError() << "heads (" << heads << ") must be a multiple of kv_heads ("
                         << kv_heads << ")";
  if (out.getDimSize(1) != heads || out.getDimSize(3) != v.getDimSize(3))
    return emitOpError() << "result must be [batch, " << heads << ", tokens, "
                         << v.getDimSize(3) << "]";
  if (getLayerAttr().getInt() < 0) return emitOpError() << "layer must not be negative";
  return success();
}

}  // namespace llmc::llm
