// The importer's handler table, keyed by (domain, op type, since-opset). Most ONNX
// operators map one-to-one onto an nn op with the same attributes; the handlers here cover
// the ones whose form changed within opsets 13-23 and the Constant node.
#include <algorithm>

#include "importer/ImportState.h"
#include "nn/IR/NNOps.h"

using namespace mlir;

namespace llmc::importer {
namespace {

// One nn op with the node's attributes as they are.
Operation* importGeneric(ImportState& state, const NodeInfo& info) {
  StringRef op_name = nn::nnOpNameFor(info.node->op_type());
  SmallVector<NamedAttribute> attributes;
  if (!convertAttributes(state, info, &attributes)) return nullptr;
  return state.createNNOp(info, op_name, info.operands, attributes);
}

// Reduce* before opset 18 (ReduceSum before 13) took `axes` as an attribute; nn always
// takes it as operand 1.
Operation* importReduceWithAxesAttribute(ImportState& state, const NodeInfo& info) {
  SmallVector<NamedAttribute> attributes;
  if (!convertAttributes(state, info, &attributes, {"axes"})) return nullptr;
  SmallVector<Value> operands(info.operands.begin(), info.operands.end());
  for (const auto& attr : info.node->attribute()) {
    if (attr.name() == "axes") {
      SmallVector<int64_t> axes(attr.ints().begin(), attr.ints().end());
      operands.push_back(state.int64Constant(info.loc, axes));
    }
  }
  return state.createNNOp(info, nn::nnOpNameFor(info.node->op_type()), operands, attributes);
}

// Constant: the value in whichever attribute form it comes.
Operation* importConstant(ImportState& state, const NodeInfo& info) {
  OpBuilder& b = state.builder;
  if (info.node->attribute_size() != 1) {
    state.nodeError(info, "Constant needs exactly one value attribute");
    return nullptr;
  }
  const onnx::AttributeProto& attr = info.node->attribute(0);
  DenseElementsAttr value;
  if (attr.name() == "value") {
    std::string error;
    value = convertTensor(b.getContext(), attr.t(), "", &error);
    if (!value) {
      state.nodeError(info, error);
      return nullptr;
    }
  } else if (attr.name() == "value_float") {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getF32Type()), attr.f());
  } else if (attr.name() == "value_floats") {
    SmallVector<float> v(attr.floats().begin(), attr.floats().end());
    value = DenseElementsAttr::get(
        RankedTensorType::get({static_cast<int64_t>(v.size())}, b.getF32Type()),
        ArrayRef<float>(v));
  } else if (attr.name() == "value_int") {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getI64Type()), attr.i());
  } else if (attr.name() == "value_ints") {
    SmallVector<int64_t> v(attr.ints().begin(), attr.ints().end());
    value = DenseElementsAttr::get(
        RankedTensorType::get({static_cast<int64_t>(v.size())}, b.getI64Type()),
        ArrayRef<int64_t>(v));
  } else {
    state.nodeError(info, "Constant attribute '" + attr.name() +
                              "' is not supported (strings and sparse tensors)");
    state.unsupported = true;
    return nullptr;
  }
  std::string name = info.result_names.empty() ? info.name : info.result_names[0];
  auto op = b.create<nn::ConstantOp>(info.loc, value, b.getStringAttr(name));
  return op.getOperation();
}

// ONNX Runtime's com.microsoft operators: an nn op named "com.microsoft.<op>".
Operation* importMicrosoft(ImportState& state, const NodeInfo& info) {
  StringRef op_name = nn::nnOpNameFor("com.microsoft." + info.node->op_type());
  SmallVector<NamedAttribute> attributes;
  if (!convertAttributes(state, info, &attributes)) return nullptr;
  return state.createNNOp(info, op_name, info.operands, attributes);
}

struct HandlerEntry {
  const char* domain;
  const char* op_type;
  int64_t since_opset;  // the entry applies from this opset until the next entry of the op
  OpHandler handler;
};

// Ops whose import differs by opset. Everything else with an nn op uses importGeneric.
const HandlerEntry kHandlers[] = {
    {"", "Constant", 1, importConstant},
    {"", "ReduceMean", 1, importReduceWithAxesAttribute},
    {"", "ReduceMean", 18, importGeneric},
    {"", "ReduceMax", 1, importReduceWithAxesAttribute},
    {"", "ReduceMax", 18, importGeneric},
    {"", "ReduceMin", 1, importReduceWithAxesAttribute},
    {"", "ReduceMin", 18, importGeneric},
    {"", "ReduceProd", 1, importReduceWithAxesAttribute},
    {"", "ReduceProd", 18, importGeneric},
    {"", "ReduceL1", 1, importReduceWithAxesAttribute},
    {"", "ReduceL1", 18, importGeneric},
    {"", "ReduceL2", 1, importReduceWithAxesAttribute},
    {"", "ReduceL2", 18, importGeneric},
    {"", "ReduceLogSum", 1, importReduceWithAxesAttribute},
    {"", "ReduceLogSum", 18, importGeneric},
    {"", "ReduceLogSumExp", 1, importReduceWithAxesAttribute},
    {"", "ReduceLogSumExp", 18, importGeneric},
    {"", "ReduceSumSquare", 1, importReduceWithAxesAttribute},
    {"", "ReduceSumSquare", 18, importGeneric},
    {"", "ReduceSum", 1, importReduceWithAxesAttribute},
    {"", "ReduceSum", 13, importGeneric},
    {"com.microsoft", "SkipSimplifiedLayerNormalization", 1, importMicrosoft},
    {"com.microsoft", "GroupQueryAttention", 1, importMicrosoft},
    {"com.microsoft", "RotaryEmbedding", 1, importMicrosoft},
    {"com.microsoft", "MatMulNBits", 1, importMicrosoft},
};

}  // namespace

OpHandler findOpHandler(const std::string& domain, const std::string& op_type, int64_t opset) {
  const HandlerEntry* best = nullptr;
  for (const HandlerEntry& entry : kHandlers) {
    if (domain == entry.domain && op_type == entry.op_type && entry.since_opset <= opset &&
        (!best || entry.since_opset > best->since_opset))
      best = &entry;
  }
  if (best) return best->handler;
  if (domain.empty() && !nn::nnOpNameFor(op_type).empty()) return importGeneric;
  return nullptr;
}

}  // namespace llmc::importer
