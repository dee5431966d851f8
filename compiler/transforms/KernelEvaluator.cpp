// MLIR <-> runtime conversions and compile-time kernel evaluation.
#include "transforms/KernelEvaluator.h"

#include <cstring>

#include "exec/IR/ExecOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llm/IR/LLMOps.h"
#include "mlir/IR/Location.h"
#include "nn/IR/NNOps.h"

using namespace mlir;

namespace llmc {

DType dtypeFromMlir(Type type) {
  if (type.isF32()) return DType::kFloat32;
  if (type.isF64()) return DType::kFloat64;
  if (type.isF16()) return DType::kFloat16;
  if (type.isBF16()) return DType::kBFloat16;
  if (auto integer = dyn_cast<IntegerType>(type)) {
    bool is_unsigned = integer.isUnsigned();
    switch (integer.getWidth()) {
      case 1: return DType::kBool;
      case 8: return is_unsigned ? DType::kUInt8 : DType::kInt8;
      case 16: return is_unsigned ? DType::kUInt16 : DType::kInt16;
      case 32: return is_unsigned ? DType::kUInt32 : DType::kInt32;
      case 64: return is_unsigned ? DType::kUInt64 : DType::kInt64;
      default: return DType::kUndefined;
    }
  }
  return DType::kUndefined;
}

Type mlirFromDType(DType dtype, MLIRContext* context) {
  Builder b(context);
  switch (dtype) {
    case DType::kFloat32: return b.getF32Type();
    case DType::kFloat64: return b.getF64Type();
    case DType::kFloat16: return b.getF16Type();
    case DType::kBFloat16: return b.getBF16Type();
    case DType::kBool: return b.getI1Type();
    case DType::kInt8: return b.getIntegerType(8);
    case DType::kInt16: return b.getIntegerType(16);
    case DType::kInt32: return b.getIntegerType(32);
    case DType::kInt64: return b.getIntegerType(64);
    case DType::kUInt8: return b.getIntegerType(8, /*isSigned=*/false);
    case DType::kUInt16: return b.getIntegerType(16, false);
    case DType::kUInt32: return b.getIntegerType(32, false);
    case DType::kUInt64: return b.getIntegerType(64, false);
    default: return Type();
  }
}

Tensor tensorFromElements(ElementsAttr elements) {
  auto type = cast<ShapedType>(elements.getType());
  DType dtype = dtypeFromMlir(type.getElementType());
  Tensor tensor = Tensor::allocate(dtype, Shape(type.getShape().begin(), type.getShape().end()));
  auto dense = dyn_cast<DenseElementsAttr>(elements);
  size_t count = static_cast<size_t>(tensor.numElements());
  if (!dense || count == 0) return tensor;
  if (dtype == DType::kBool) {
    auto* out = tensor.data<uint8_t>();
    size_t i = 0;
    for (bool v : dense.getValues<bool>()) out[i++] = v ? 1 : 0;
    return tensor;
  }
  ArrayRef<char> raw = dense.getRawData();
  size_t element_size = dtypeSize(dtype);
  if (dense.isSplat()) {
    for (size_t i = 0; i < count; ++i)
      std::memcpy(static_cast<char*>(tensor.data()) + i * element_size, raw.data(), element_size);
  } else {
    std::memcpy(tensor.data(), raw.data(), count * element_size);
  }
  return tensor;
}

DenseElementsAttr elementsFromTensor(const Tensor& tensor, MLIRContext* context) {
  auto type = RankedTensorType::get(tensor.shape(), mlirFromDType(tensor.dtype(), context));
  if (tensor.dtype() == DType::kBool) {
    SmallVector<bool> bits(static_cast<size_t>(tensor.numElements()));
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = tensor.data<uint8_t>()[i] != 0;
    return DenseElementsAttr::get(type, ArrayRef<bool>(bits));
  }
  ArrayRef<char> raw(static_cast<const char*>(tensor.data()), tensor.sizeBytes());
  return DenseElementsAttr::getFromRawBuffer(type, raw);
}

Status paramsFromAttributes(llvm::ArrayRef<NamedAttribute> attributes, KernelParams* params) {
  for (NamedAttribute attr : attributes) {
    StringRef name = attr.getName().getValue();
    if (name.starts_with("llmc.")) continue;
    KernelParam param;
    Attribute value = attr.getValue();
    if (auto integer = dyn_cast<IntegerAttr>(value)) {
      param.kind = KernelParam::Kind::kInt;
      param.i = integer.getValue().getSExtValue();
    } else if (auto real = dyn_cast<FloatAttr>(value)) {
      param.kind = KernelParam::Kind::kFloat;
      param.f = real.getValueAsDouble();
    } else if (auto string = dyn_cast<StringAttr>(value)) {
      param.kind = KernelParam::Kind::kString;
      param.s = string.getValue().str();
    } else if (auto ints = dyn_cast<DenseI64ArrayAttr>(value)) {
      param.kind = KernelParam::Kind::kInts;
      param.ints.assign(ints.asArrayRef().begin(), ints.asArrayRef().end());
    } else if (auto floats = dyn_cast<DenseF32ArrayAttr>(value)) {
      param.kind = KernelParam::Kind::kFloats;
      for (float f : floats.asArrayRef()) param.floats.push_back(f);
    } else if (auto elements = dyn_cast<ElementsAttr>(value)) {
      param.kind = KernelParam::Kind::kTensor;
      param.tensor = tensorFromElements(elements);
    } else {
      return unimplemented("attribute '" + name.str() +
                           "' has a kind llmc does not pass to kernels");
    }
    params->set(name.str(), std::move(param));
  }
  return okStatus();
}

std::string kernelNameOf(Operation* op) {
  if (auto call = dyn_cast<exec::CallOp>(op)) return call.getKernel().str();
  std::string llm_kernel = llm::kernelNameOf(op);
  if (!llm_kernel.empty()) return llm_kernel;
  return nn::onnxNameOf(op).str();
}

std::string nodeNameOf(Operation* op) {
  Location loc = op->getLoc();
  if (auto fused = dyn_cast<FusedLoc>(loc)) {
    for (Location inner : fused.getLocations())
      if (auto name = dyn_cast<NameLoc>(inner)) return name.getName().str();
  }
  if (auto name = dyn_cast<NameLoc>(loc)) return name.getName().str();
  return "";
}

}  // namespace llmc

namespace llmc {
DictionaryAttr recipeOf(Value value) {
  auto constant = dyn_cast_or_null<nn::ConstantOp>(value.getDefiningOp());
  return constant ? constant->getAttrOfType<DictionaryAttr>("llmc.recipe") : DictionaryAttr();
}

DictionaryAttr recipeExpr(Value value) {
  Builder b(value.getContext());
  if (DictionaryAttr recipe = recipeOf(value)) return recipe;
  if (auto constant = dyn_cast_or_null<nn::ConstantOp>(value.getDefiningOp()))
    return b.getDictionaryAttr({b.getNamedAttr("literal", constant.getValue())});
  return b.getDictionaryAttr({b.getNamedAttr("none", b.getUnitAttr())});
}

DictionaryAttr kernelRecipe(MLIRContext* context, StringRef kernel, DictionaryAttr params,
                            ValueRange inputs, unsigned output) {
  bool any = false;
  SmallVector<Attribute> exprs;
  for (Value input : inputs) {
    any = any || static_cast<bool>(recipeOf(input));
    exprs.push_back(recipeExpr(input));
  }
  if (!any) return DictionaryAttr();
  Builder b(context);
  SmallVector<NamedAttribute> kept;
  if (params)
    for (NamedAttribute attr : params)
      if (!attr.getName().getValue().starts_with("llmc.")) kept.push_back(attr);
  return b.getDictionaryAttr({b.getNamedAttr("kernel", b.getStringAttr(kernel)),
                              b.getNamedAttr("params", b.getDictionaryAttr(kept)),
                              b.getNamedAttr("inputs", b.getArrayAttr(exprs)),
                              b.getNamedAttr("output", b.getI64IntegerAttr(output))});
}

std::vector<Value> replaceWithConstants(Operation* op, const std::vector<Tensor>& values) {
  OpBuilder builder(op);
  std::vector<Value> constants;
  auto names = op->getAttrOfType<ArrayAttr>("llmc.names");
  const std::string kernel = kernelNameOf(op);
  for (unsigned i = 0; i < op->getNumResults(); ++i) {
    StringAttr name;
    if (names && i < names.size()) name = dyn_cast<StringAttr>(names[i]);
    auto constant = builder.create<nn::ConstantOp>(
        op->getLoc(), elementsFromTensor(values[i], op->getContext()), name);
    if (DictionaryAttr recipe = kernelRecipe(op->getContext(), kernel, op->getAttrDictionary(),
                                             op->getOperands(), i))
      constant->setAttr("llmc.recipe", recipe);
    op->getResult(i).replaceAllUsesWith(constant.getResult());
    constants.push_back(constant.getResult());
  }
  op->erase();
  return constants;
}

std::vector<std::string> dimNamesOf(Value value) {
  std::vector<std::string> names;
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type) return names;
  ArrayAttr dims;
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    if (auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      dims = func.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(), "llmc.dims");
  } else if (auto all = value.getDefiningOp()->getAttrOfType<ArrayAttr>("llmc.dims")) {
    unsigned index = cast<OpResult>(value).getResultNumber();
    if (index < all.size()) dims = dyn_cast<ArrayAttr>(all[index]);
  }
  for (int64_t d = 0; d < type.getRank(); ++d)
    names.push_back(dims && d < static_cast<int64_t>(dims.size())
                        ? cast<StringAttr>(dims[d]).getValue().str()
                        : "");
  return names;
}

Value createOp(OpBuilder& builder, Location loc, StringRef name, ValueRange operands, Type type,
               ArrayRef<NamedAttribute> attributes) {
  OperationState state(loc, name);
  state.addOperands(operands);
  state.addTypes(type);
  state.addAttributes(attributes);
  return builder.create(state)->getResult(0);
}

Value int64Constant(OpBuilder& builder, Location loc, ArrayRef<int64_t> values) {
  auto type = RankedTensorType::get({static_cast<int64_t>(values.size())}, builder.getI64Type());
  return createOp(builder, loc, "nn.constant", {}, type,
                  {builder.getNamedAttr("value", DenseElementsAttr::get(type, values))});
}

}  // namespace llmc
