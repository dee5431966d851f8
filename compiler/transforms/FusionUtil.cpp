// Helpers shared by the fusion passes and recognition (FusionUtil.h).
#include "transforms/FusionUtil.h"

#include <algorithm>

#include "core/kernel.h"
#include "mlir/Transforms/RegionUtils.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

using namespace mlir;

namespace llmc {

namespace {
thread_local ProgressHook progress_hook;
}  // namespace

ScopedProgressHook::ScopedProgressHook(ProgressHook hook) : previous_(std::move(progress_hook)) {
  progress_hook = std::move(hook);
}
ScopedProgressHook::~ScopedProgressHook() { progress_hook = std::move(previous_); }

void reportProgress(const std::string& stage) {
  if (progress_hook) progress_hook(stage);
}

std::string where(Operation* op) {
  std::string node = nodeNameOf(op);
  return node.empty() ? "an unnamed " + op->getName().getStringRef().str() + " node"
                      : "node '" + node + "'";
}

bool isOp(Operation* op, StringRef name) { return op && op->getName().getStringRef() == name; }

std::optional<double> scalarConstant(Value v) {
  auto constant = dyn_cast_or_null<nn::ConstantOp>(v.getDefiningOp());
  if (!constant) return std::nullopt;
  auto type = cast<ShapedType>(constant.getType());
  if (type.getNumElements() != 1) return std::nullopt;
  Tensor t = tensorFromElements(constant.getValue());
  double value = 0;
  if (!readScalarDouble(&t, &value).ok()) return std::nullopt;
  return value;
}

std::optional<std::vector<int64_t>> intsConstant(Value v) {
  auto constant = dyn_cast_or_null<nn::ConstantOp>(v.getDefiningOp());
  if (!constant) return std::nullopt;
  Tensor t = tensorFromElements(constant.getValue());
  std::vector<int64_t> values;
  if (!readInt64s(&t, &values).ok()) return std::nullopt;
  return values;
}

std::optional<Tensor> float32Constant(Value v) {
  auto constant = dyn_cast_or_null<nn::ConstantOp>(v.getDefiningOp());
  if (!constant || !isFloat32Tensor(constant.getType())) return std::nullopt;
  return tensorFromElements(constant.getValue());
}

bool isFloat32Tensor(Type type) {
  auto ranked = dyn_cast<RankedTensorType>(type);
  return ranked && ranked.getElementType().isF32();
}

Operation* singleUseDef(Value v, StringRef name) {
  Operation* def = v.getDefiningOp();
  return isOp(def, name) && v.hasOneUse() ? def : nullptr;
}

bool sameShape(Value a, Value b) {
  auto ta = dyn_cast<RankedTensorType>(a.getType());
  auto tb = dyn_cast<RankedTensorType>(b.getType());
  if (!ta || !tb || ta.getShape() != tb.getShape()) return false;
  if (ta.hasStaticShape()) return true;
  std::vector<std::string> na = dimNamesOf(a), nb = dimNamesOf(b);
  if (na.size() != static_cast<size_t>(ta.getRank()) || na != nb) return false;
  for (int64_t d = 0; d < ta.getRank(); ++d)
    if (ta.isDynamicDim(d) && na[static_cast<size_t>(d)].empty()) return false;
  return true;
}

// Constants and nn.none go to the top of the block, so they dominate any op a fusion creates.
void hoistToBlockStart(OpBuilder& builder) {
  Block* block = builder.getInsertionBlock();
  builder.setInsertionPointToStart(block);
}

bool sameLeadingDims(Value a, Value b, int64_t count) {
  auto ta = dyn_cast<RankedTensorType>(a.getType()), tb = dyn_cast<RankedTensorType>(b.getType());
  if (!ta || !tb || ta.getRank() < count || tb.getRank() < count) return false;
  std::vector<std::string> na = dimNamesOf(a), nb = dimNamesOf(b);
  for (int64_t d = 0; d < count; ++d) {
    if (ta.getDimSize(d) != tb.getDimSize(d)) return false;
    if (!ta.isDynamicDim(d)) continue;
    size_t i = static_cast<size_t>(d);
    if (na.size() <= i || nb.size() <= i || na[i].empty() || na[i] != nb[i]) return false;
  }
  return true;
}

Value float32ConstantOp(OpBuilder& builder, Location loc, const Tensor& tensor, StringRef name) {
  OpBuilder::InsertionGuard guard(builder);
  hoistToBlockStart(builder);
  DenseElementsAttr value = elementsFromTensor(tensor, builder.getContext());
  SmallVector<NamedAttribute> attrs{builder.getNamedAttr("value", value)};
  if (!name.empty()) attrs.push_back(builder.getNamedAttr("name", builder.getStringAttr(name)));
  return createOp(builder, loc, "nn.constant", {}, value.getType(), attrs);
}

SmallVector<Value> kernelConstants(OpBuilder& builder, Location loc, StringRef kernel,
                                   ArrayRef<NamedAttribute> params, ValueRange inputs,
                                   unsigned num_outputs, std::string* error) {
  const KernelDef* def = KernelRegistry::cpuReference().find(kernel.str());
  KernelParams kernel_params;
  DictionaryAttr param_dict = builder.getDictionaryAttr(params);
  if (!def || !paramsFromAttributes(param_dict.getValue(), &kernel_params).ok()) return {};
  std::vector<Tensor> storage;
  storage.reserve(inputs.size());
  std::vector<const Tensor*> pointers;
  for (Value input : inputs) {
    auto constant = dyn_cast_or_null<nn::ConstantOp>(input.getDefiningOp());
    if (!constant) return {};
    storage.push_back(tensorFromElements(constant.getValue()));
    pointers.push_back(&storage.back());
  }
  KernelRun run = evaluateKernel(*def, kernel_params, pointers, num_outputs, kernel.str(), false);
  if (!run.status.ok() || run.outputs.size() != num_outputs) {
    if (error) *error = run.status.message();
    return {};
  }
  OpBuilder::InsertionGuard guard(builder);
  hoistToBlockStart(builder);
  SmallVector<Value> results;
  for (unsigned i = 0; i < num_outputs; ++i) {
    DenseElementsAttr value = elementsFromTensor(run.outputs[i], builder.getContext());
    Value result = createOp(builder, loc, "nn.constant", {}, value.getType(),
                            {builder.getNamedAttr("value", value)});
    if (DictionaryAttr recipe = kernelRecipe(builder.getContext(), kernel, param_dict, inputs, i))
      result.getDefiningOp()->setAttr("llmc.recipe", recipe);
    results.push_back(result);
  }
  return results;
}

Value kernelConstant(OpBuilder& builder, Location loc, StringRef kernel,
                     ArrayRef<NamedAttribute> params, ValueRange inputs) {
  SmallVector<Value> results = kernelConstants(builder, loc, kernel, params, inputs, 1);
  return results.empty() ? Value() : results[0];
}

std::optional<ConstantSlice> constantSlice(Operation* slice, Value x) {
  if (!isOp(slice, "nn.slice") || slice->getOperand(0) != x || slice->getNumOperands() < 4)
    return std::nullopt;
  auto type = dyn_cast<RankedTensorType>(x.getType());
  auto starts = intsConstant(slice->getOperand(1));
  auto ends = intsConstant(slice->getOperand(2));
  auto axes = intsConstant(slice->getOperand(3));
  if (!type || !starts || !ends || !axes || starts->size() != 1 || ends->size() != 1 ||
      axes->size() != 1)
    return std::nullopt;
  const int64_t rank = type.getRank();
  int64_t axis = (*axes)[0] < 0 ? (*axes)[0] + rank : (*axes)[0];
  if (axis < 0 || axis >= rank) return std::nullopt;
  int64_t step = 1;
  if (slice->getNumOperands() > 4 && !isa<NoneType>(slice->getOperand(4).getType())) {
    auto steps = intsConstant(slice->getOperand(4));
    if (!steps || steps->size() != 1) return std::nullopt;
    step = (*steps)[0];
  }
  return ConstantSlice{(*starts)[0], (*ends)[0], axis, step};
}

std::optional<std::pair<int64_t, int64_t>> lastAxisSlice(Operation* slice, Value x, int64_t d) {
  std::optional<ConstantSlice> c = constantSlice(slice, x);
  if (!c || c->axis != cast<RankedTensorType>(x.getType()).getRank() - 1 || c->step != 1)
    return std::nullopt;
  auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + d : v, int64_t{0}, d); };
  return std::make_pair(clamp(c->start), clamp(c->end));
}

Value float32Scalar(OpBuilder& builder, Location loc, float value) {
  Tensor t = Tensor::allocate(DType::kFloat32, {});
  t.data<float>()[0] = value;
  return float32ConstantOp(builder, loc, t, "");
}

Value noneValue(OpBuilder& builder, Location loc) {
  OpBuilder::InsertionGuard guard(builder);
  hoistToBlockStart(builder);
  return createOp(builder, loc, "nn.none", {}, builder.getNoneType());
}

Location fusedLoc(MLIRContext* context, ArrayRef<Operation*> ops) {
  SmallVector<Location> locs;
  for (Operation* op : ops) locs.push_back(op->getLoc());
  return FusedLoc::get(context, locs);
}

void carryNames(Operation* from, Operation* to) {
  if (Attribute names = from->getAttr("llmc.names")) to->setAttr("llmc.names", names);
  if (from->getNumResults() == to->getNumResults())
    if (Attribute dims = from->getAttr("llmc.dims")) to->setAttr("llmc.dims", dims);
}

void logFusion(func::FuncOp func, const FusionRecord& record) {
  std::string text = std::string(record.fired ? "fired" : "missed") + "\t" + record.pass + "\t" +
                     record.pattern + "\t" + record.nodes + "\t" + record.reason;
  SmallVector<Attribute> entries;
  if (auto log = func->getAttrOfType<ArrayAttr>("llmc.fusion_log"))
    entries.append(log.begin(), log.end());
  // A pass that runs more than once (shape inference) says the same thing once.
  StringAttr entry = StringAttr::get(func.getContext(), text);
  if (llvm::is_contained(entries, entry)) return;
  entries.push_back(entry);
  func->setAttr("llmc.fusion_log", ArrayAttr::get(func.getContext(), entries));
}

bool hasFusionRecord(func::FuncOp func, bool fired, llvm::StringRef pass, llvm::StringRef pattern) {
  auto log = func->getAttrOfType<ArrayAttr>("llmc.fusion_log");
  if (!log) return false;
  std::string prefix = std::string(fired ? "fired" : "missed") + "\t" + pass.str() + "\t" + pattern.str() + "\t";
  return llvm::any_of(log, [&](Attribute entry) { return cast<StringAttr>(entry).getValue().starts_with(prefix); });
}

std::vector<FusionRecord> takeFusionLog(func::FuncOp func) {
  std::vector<FusionRecord> records;
  auto log = func->getAttrOfType<ArrayAttr>("llmc.fusion_log");
  if (!log) return records;
  for (Attribute entry : log) {
    SmallVector<StringRef> fields;
    cast<StringAttr>(entry).getValue().split(fields, '\t');
    if (fields.size() != 5) continue;
    records.push_back({fields[0] == "fired", fields[1].str(), fields[2].str(), fields[3].str(),
                       fields[4].str()});
  }
  func->removeAttr("llmc.fusion_log");
  return records;
}

void eraseDeadOps(Block& body) {
  // In reverse program order a chain of dead ops goes in one pass: users come after their defs.
  std::vector<Operation*> ops;
  for (Operation& op : body.without_terminator()) ops.push_back(&op);
  for (auto it = ops.rbegin(); it != ops.rend(); ++it)
    if (isOpTriviallyDead(*it)) (*it)->erase();
}

std::string nodeNames(ArrayRef<Operation*> ops) {
  std::string text;
  for (Operation* op : ops) {
    std::string node = nodeNameOf(op);
    if (node.empty()) continue;
    text += (text.empty() ? "" : ", ") + node;
  }
  return text;
}

namespace {
void collectNames(Location loc, std::string* out) {
  if (auto fused = dyn_cast<FusedLoc>(loc)) {
    for (Location inner : fused.getLocations()) collectNames(inner, out);
  } else if (auto name = dyn_cast<NameLoc>(loc)) {
    *out += name.getName().str() + "\n";
  }
}
}  // namespace

std::string allNodeNames(Operation* op) {
  std::string names;
  collectNames(op->getLoc(), &names);
  return names;
}

}  // namespace llmc
