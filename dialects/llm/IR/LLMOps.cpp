// The llm dialect: registration, verifiers and kernel names.
#include "llm/IR/LLMOps.h"

#include <cmath>

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
  if (isa<FusedMatMulOp>(op)) return "LlmFusedMatMul";
  if (isa<QuantMatMulOp>(op)) return "LlmQuantMatMul";
  if (isa<QuantGatherOp>(op)) return "LlmQuantGather";
  if (isa<NormOp>(op)) return "LlmNorm";
  if (isa<GatedMlpOp>(op)) return "LlmGatedMlp";
  if (isa<MoeOp>(op)) return "LlmMoe";
  if (isa<ElementwiseOp>(op)) return "LlmElementwise";
  if (isa<SdpaOp>(op)) return "LlmSdpa";
  return "";
}

LogicalResult AttentionOp::verify() {
  auto q = cast<RankedTensorType>(getQ().getType());
  auto k = cast<RankedTensorType>(getK().getType());
  auto v = cast<RankedTensorType>(getV().getType());
  auto out = cast<RankedTensorType>(getOutput().getType());
  if (getWindow() && *getWindow() < 1) return emitOpError() << "window must be at least 1";
  if (FloatAttr cap = getSoftcapAttr();
      cap && !(cap.getValueAsDouble() > 0 && std::isfinite(cap.getValueAsDouble())))
    return emitOpError() << "softcap must be positive and finite";
  if (std::optional<ArrayRef<float>> slopes = getAlibiSlopes()) {
    const int64_t heads = getNumHeadsAttr()  ? *getNumHeads()
                          : q.getRank() == 4 ? q.getDimSize(1)
                                             : -1;
    if (static_cast<int64_t>(slopes->size()) != heads)
      return emitOpError() << "alibi_slopes holds " << slopes->size() << " slopes for " << heads
                           << " heads";
    for (float slope : *slopes)
      if (!std::isfinite(slope)) return emitOpError() << "alibi_slopes must be finite";
  }
  if (getNumHeadsAttr()) return verifyTokenMajor();
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

namespace {
bool isKnownActivation(StringRef name, bool allow_none) {
  return (allow_none && name == "none") || name == "relu" || name == "gelu_erf" ||
         name == "gelu_tanh" || name == "silu" || name == "sigmoid" || name == "tanh";
}
}  // namespace

LogicalResult AttentionOp::verifyTokenMajor() {
  auto out = cast<RankedTensorType>(getOutput().getType());
  if (!getNumKvHeadsAttr() || !getHeadDimAttr())
    return emitOpError() << "the token-major form needs num_heads, num_kv_heads and head_dim";
  int64_t heads = *getNumHeads(), kv_heads = *getNumKvHeads(), head_dim = *getHeadDim();
  if (heads < 1 || kv_heads < 1 || head_dim < 1 || heads % kv_heads != 0)
    return emitOpError() << "heads (" << heads << ") must be a positive multiple of kv_heads ("
                         << kv_heads << ")";
  struct Part {
    Value value;
    std::optional<int64_t> column;
    int64_t heads;
    const char* name;
  };
  for (const Part& part : {Part{getQ(), getQColumn(), heads, "q"},
                           Part{getK(), getKColumn(), kv_heads, "k"},
                           Part{getV(), getVColumn(), kv_heads, "v"}}) {
    auto type = cast<RankedTensorType>(part.value.getType());
    if (type.getRank() != 3)
      return emitOpError() << part.name << " must be [batch, tokens, width] in the token-major form";
    int64_t column = part.column.value_or(0);
    int64_t width = type.getDimSize(2);
    if (column < 0 || (!ShapedType::isDynamic(width) && column + part.heads * head_dim > width))
      return emitOpError() << part.name << "'s heads (columns " << column << " .. "
                           << column + part.heads * head_dim << ") exceed its width " << width;
  }
  if (out.getRank() != 3 || out.getDimSize(2) != heads * head_dim)
    return emitOpError() << "result must be [batch, tokens, " << heads * head_dim << "]";
  if (getLayerAttr().getInt() < 0) return emitOpError() << "layer must not be negative";
  return success();
}

LogicalResult RopeOp::verify() {
  auto x = cast<RankedTensorType>(getX().getType());
  bool tables = isa<NoneType>(getPositions().getType());
  auto cos = cast<RankedTensorType>(getCos().getType());
  if (cos != getSin().getType()) return emitOpError() << "cos and sin must have the same type";
  if (getNumHeadsAttr()) {
    if (x.getRank() != 3 || !getHeadDimAttr() || *getNumHeads() < 1 || *getHeadDim() < 2 ||
        *getHeadDim() % 2 != 0)
      return emitOpError() << "the token-major form needs x [batch, tokens, width], num_heads "
                              "and an even head_dim";
  } else if (x.getRank() != 4) {
    return emitOpError() << "x must be [batch, heads, tokens, head_dim]";
  }
  if (tables ? cos.getRank() != 4 : cos.getRank() != 2)
    return emitOpError() << (tables ? "per-token cos/sin tables must be 4-D"
                                    : "cos/sin caches must be [max_positions, head_dim / 2]");
  if (tables) {
    const int64_t head = getNumHeadsAttr() ? *getHeadDim() : x.getDimSize(3);
    const int64_t width = cos.getDimSize(3);
    if (!ShapedType::isDynamic(width) &&
        (width < 2 || width % 2 != 0 || (!ShapedType::isDynamic(head) && width > head)))
      return emitOpError() << "per-token tables of " << width
                           << " values per token do not rotate an even part of heads of "
                           << head;
  }
  if (auto axis = getTokenAxis(); axis && (*axis < 1 || *axis > 2 || getNumHeadsAttr()))
    return emitOpError() << "token_axis is 1 or 2, and only for 4-D x";
  if (getOutput().getType() != x) return emitOpError() << "result must have x's type";
  return success();
}

LogicalResult FusedMatMulOp::verify() {
  auto b = cast<RankedTensorType>(getB().getType());
  if (b.getRank() != 2) return emitOpError() << "b must be a 2-D weight";
  if (cast<RankedTensorType>(getA().getType()).getRank() < 1)
    return emitOpError() << "a must have rank >= 1";
  if (auto activation = getActivation(); activation && !isKnownActivation(*activation, true))
    return emitOpError() << "unknown activation '" << *activation << "'";
  if (!isa<NoneType>(getBias().getType()) && cast<ShapedType>(getBias().getType()).getRank() != 1)
    return emitOpError() << "bias must be 1-D [N]";
  return success();
}

LogicalResult QuantMatMulOp::verify() {
  const StringRef format = getFormat();
  if (format != "int8" && format != "int4" && format != "int4_zp" && format != "w8a8" && format != "fp8")
    return emitOpError() << "unknown format '" << format << "' (int8, int4, int4_zp, w8a8, fp8)";
  auto data = cast<RankedTensorType>(getData().getType());
  auto scales = cast<RankedTensorType>(getScales().getType());
  const bool eight = format == "int8" || format == "w8a8" || format == "fp8";
  if (data.getRank() != 2 || !data.getElementType().isInteger(8))
    return emitOpError() << "data must be a 2-D 8-bit tensor";
  if (scales.getRank() != 2 || scales.getDimSize(0) != data.getDimSize(0))
    return emitOpError() << "scales must be [N, ceil(K / group)] with N = " << data.getDimSize(0);
  if (getGroup() < 32 || getGroup() % 32 != 0) return emitOpError() << "group must be a multiple of 32";
  if (!(eight ? scales.getElementType().isF32() : scales.getElementType().isF16()))
    return emitOpError() << "scales must be " << (eight ? "f32" : "f16") << " for " << format;
  if ((format == "int4_zp") == isa<NoneType>(getZeros().getType()))
    return emitOpError() << "zeros must be given exactly for int4_zp";
  if (!isa<NoneType>(getZeros().getType()) && cast<ShapedType>(getZeros().getType()).getShape() != scales.getShape())
    return emitOpError() << "zeros must have the scales' shape";
  auto a = dyn_cast<RankedTensorType>(getA().getType());  // unranked: K is checked when it runs
  const int64_t k = a && a.getRank() ? a.getDimSize(a.getRank() - 1) : ShapedType::kDynamic;
  if (getExtra().size() > 2)
    return emitOpError() << "takes at most input_scales and mask after the bias";
  Value mask = getExtra().size() == 2 ? getExtra()[1] : Value();
  if (mask) {
    auto type = dyn_cast<RankedTensorType>(mask.getType());
    if (format != "int8" && format != "w8a8")
      return emitOpError() << "a mask (sparse storage) is for int8 and w8a8 weights, not "
                           << format;
    if (!type || type.getRank() != 2 || !type.getElementType().isUnsignedInteger(8) ||
        type.getDimSize(0) != data.getDimSize(0) ||
        (!ShapedType::isDynamic(k) && type.getDimSize(1) != (k + 7) / 8))
      return emitOpError() << "mask must be ui8 [N, ceil(K / 8)]";
    if (!ShapedType::isDynamic(k) && data.getDimSize(1) > k)
      return emitOpError() << "sparse data's stride " << data.getDimSize(1) << " exceeds K = " << k;
  } else if (!ShapedType::isDynamic(k) && data.getDimSize(1) != (eight ? k : k / 2)) {
    return emitOpError() << "data " << data.getDimSize(1) << " columns do not hold K = " << k;
  }
  if (auto activation = getActivation(); activation && !isKnownActivation(*activation, true))
    return emitOpError() << "unknown activation '" << *activation << "'";
  if (Value input_scales = getExtra().empty() ? Value() : getExtra()[0];
      input_scales && !isa<NoneType>(input_scales.getType())) {
    auto type = dyn_cast<RankedTensorType>(input_scales.getType());
    if (!type || type.getRank() != 1 || !type.getElementType().isF32() ||
        (!ShapedType::isDynamic(k) && type.getDimSize(0) != k))
      return emitOpError() << "input_scales must be f32 [K]";
  }
  const bool gated = getGated() && *getGated() != 0;
  if (gated && (!isa<NoneType>(getBias().getType()) || data.getDimSize(0) % 2 != 0))
    return emitOpError() << "a gated product has 2F output channels and no bias";
  return success();
}

LogicalResult NormOp::verify() {
  if (getKind() != "rms" && getKind() != "layer")
    return emitOpError() << "kind must be \"rms\" or \"layer\", got \"" << getKind() << "\"";
  size_t expected = isa<NoneType>(getResidual().getType()) ? 1 : 2;
  if (getOutputs().size() != expected)
    return emitOpError() << "has " << getOutputs().size() << " results; expected " << expected
                         << (expected == 2 ? " (the normalized value and the sum)" : "");
  auto scale = cast<RankedTensorType>(getScale().getType());
  if (scale.getRank() != 1) return emitOpError() << "scale must be 1-D";
  if (std::optional<uint64_t> group = getGroup()) {
    auto x = cast<RankedTensorType>(getX().getType());
    const int64_t g = static_cast<int64_t>(*group), columns = scale.getDimSize(0);
    if (expected != 1) return emitOpError() << "a grouped norm takes no residual";
    if (g < 1 || ShapedType::isDynamic(columns) || columns % g != 0 || x.getRank() < 1 ||
        (!x.isDynamicDim(x.getRank() - 1) && columns > x.getDimSize(x.getRank() - 1)))
      return emitOpError() << "a grouped norm's scale must hold a whole number of groups of " << g
                           << ", at most the last axis";
  }
  return success();
}

LogicalResult GatedMlpOp::verify() {
  auto w = cast<RankedTensorType>(getW().getType());
  if (w.getRank() != 2 || (!w.isDynamicDim(1) && w.getDimSize(1) % 2 != 0))
    return emitOpError() << "w must be [K, 2F]";
  if (!isKnownActivation(getActivation(), false))
    return emitOpError() << "unknown activation '" << getActivation() << "'";
  return success();
}

LogicalResult MoeOp::verify() {
  auto x = cast<RankedTensorType>(getX().getType());
  auto router = cast<RankedTensorType>(getRouter().getType());
  auto gate = cast<RankedTensorType>(getWGate().getType());
  auto up = cast<RankedTensorType>(getWUp().getType());
  auto down = cast<RankedTensorType>(getWDown().getType());
  if (x.getRank() < 1 || router.getRank() != 2 || gate.getRank() != 3 ||
      up.getShape() != gate.getShape() || down.getRank() != 3 || !router.hasStaticShape() ||
      !gate.hasStaticShape() || !down.hasStaticShape())
    return emitOpError() << "needs x [..., H], router [H, E], w_gate and w_up [E, H, F] and w_down "
                            "[E, F, H], static but for x";
  const int64_t hidden = router.getDimSize(0), experts = router.getDimSize(1),
                ffn = gate.getDimSize(2);
  if ((!x.isDynamicDim(x.getRank() - 1) && x.getDimSize(x.getRank() - 1) != hidden) ||
      gate.getDimSize(0) != experts || gate.getDimSize(1) != hidden ||
      down.getShape() != ArrayRef<int64_t>{experts, ffn, hidden})
    return emitOpError() << "x, router " << router << ", w_gate " << gate << " and w_down " << down
                         << " do not fit";
  const int64_t top_k = getTopKAttr().getInt();
  if (top_k < 1 || top_k > experts)
    return emitOpError() << "top_k " << top_k << " is not in [1, " << experts << "]";
  if (!isKnownActivation(getActivation(), false))
    return emitOpError() << "unknown activation '" << getActivation() << "'";
  return success();
}

LogicalResult ElementwiseOp::verify() {
  ArrayRef<int64_t> program = getProgram();
  if (program.empty() || program.size() % 3 != 0)
    return emitOpError() << "program must be a non-empty list of [opcode, a, b] triples";
  int64_t registers = static_cast<int64_t>(getInputs().size());
  int64_t constants = static_cast<int64_t>(getConstants().size());
  for (size_t i = 0; i < program.size(); i += 3) {
    int64_t opcode = program[i];
    if (!((opcode >= 0 && opcode <= 6) || (opcode >= 16 && opcode <= 27)))
      return emitOpError() << "unknown opcode " << opcode;
    for (int64_t operand : {program[i + 1], program[i + 2]})
      if (operand >= registers || operand < -constants)
        return emitOpError() << "instruction " << i / 3 << " reads operand " << operand
                             << " (registers 0.." << registers - 1 << ", " << constants
                             << " constants)";
    ++registers;
  }
  return success();
}

LogicalResult SdpaOp::verify() {
  if (getNumHeadsAttr()) {
    if (!getNumKvHeadsAttr() || !getHeadDimAttr())
      return emitOpError() << "the token-major form needs num_heads, num_kv_heads and head_dim";
    for (Value part : {getQ(), getK(), getV()})
      if (cast<RankedTensorType>(part.getType()).getRank() != 3)
        return emitOpError() << "q, k and v must be [batch, tokens, width] in the token-major form";
    int64_t heads = *getNumHeads(), kv_heads = *getNumKvHeads();
    if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || *getHeadDim() < 1)
      return emitOpError() << "heads (" << heads << ") must be a positive multiple of kv_heads ("
                           << kv_heads << ")";
    return success();
  }
  auto q = cast<RankedTensorType>(getQ().getType());
  auto k = cast<RankedTensorType>(getK().getType());
  auto v = cast<RankedTensorType>(getV().getType());
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
    return emitOpError() << "q, k and v must be [batch, heads, tokens, head_dim]";
  int64_t heads = q.getDimSize(1), kv_heads = k.getDimSize(1);
  if (!ShapedType::isDynamic(heads) && !ShapedType::isDynamic(kv_heads) &&
      (kv_heads < 1 || heads % kv_heads != 0 || v.getDimSize(1) != kv_heads))
    return emitOpError() << "heads (" << heads << ") must be a multiple of k's and v's heads";
  if (!isa<NoneType>(getMask().getType())) {
    auto mask = dyn_cast<RankedTensorType>(getMask().getType());
    if (!mask || mask.getRank() < 2 || mask.getRank() > 4)
      return emitOpError() << "the mask must have rank 2 to 4";
  }
  return success();
}

}  // namespace llmc::llm
