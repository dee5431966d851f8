// ONNX ModelProto -> nn dialect: graph inputs, initializers (raw, typed, float16/bfloat16,
// external data), symbolic dimensions, nodes through the handler table, graph outputs.
#include "importer/OnnxImporter.h"

#include <google/protobuf/io/coded_stream.h>

#include <climits>
#include <cstring>
#include <set>
#include <sstream>

#include "core/file_io.h"
#include "core/half.h"
#include "core/kernel.h"
#include "importer/ImportState.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "nn/IR/NNOps.h"
#include "transforms/KernelEvaluator.h"

using namespace mlir;

namespace llmc {
namespace importer {

void ImportState::nodeError(const NodeInfo& info, const std::string& message) {
  errors.push_back("node '" + info.name + "' (" + info.node->op_type() + ", opset " +
                   std::to_string(info.opset) + "): " + message);
}

Value ImportState::int64Constant(Location loc, ArrayRef<int64_t> values) {
  auto type = RankedTensorType::get({static_cast<int64_t>(values.size())}, builder.getI64Type());
  return builder.create<nn::ConstantOp>(loc, DenseElementsAttr::get(type, values), StringAttr())
      .getResult();
}

Operation* ImportState::createNNOp(const NodeInfo& info, StringRef nn_op_name,
                                   ArrayRef<Value> operands, ArrayRef<NamedAttribute> attributes) {
  OperationState op_state(info.loc, nn_op_name);
  op_state.addOperands(operands);
  op_state.addTypes(info.result_types);
  op_state.addAttributes(attributes);
  SmallVector<Attribute> names;
  for (const std::string& name : info.result_names) names.push_back(builder.getStringAttr(name));
  op_state.addAttribute("llmc.names", builder.getArrayAttr(names));
  return builder.create(op_state);
}

namespace {

bool readExternalData(const onnx::TensorProto& tensor, const std::string& base_dir,
                      std::string* bytes, std::string* error) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& entry : tensor.external_data()) {
    if (entry.key() == "location")
      location = entry.value();
    else if (entry.key() == "offset")
      offset = std::atoll(entry.value().c_str());
    else if (entry.key() == "length")
      length = std::atoll(entry.value().c_str());
  }
  if (location.empty()) {
    *error = "external data has no location";
    return false;
  }
  if (location.front() == '/' || location.find("..") != std::string::npos) {
    *error = "external data location '" + location +
             "' must be a relative path inside the model's directory";
    return false;
  }
  std::string path = base_dir.empty() ? location : base_dir + "/" + location;
  Status status = readFile(path, "external data file", bytes, offset, length);
  if (!status.ok()) *error = status.message();
  return status.ok();
}

}  // namespace

DenseElementsAttr convertTensor(MLIRContext* context, const onnx::TensorProto& tensor,
                                const std::string& base_dir, std::string* error) {
  if (!isValidDType(tensor.data_type()) || tensor.data_type() == 0) {
    *error = "tensor '" + tensor.name() + "' has data type " + std::to_string(tensor.data_type()) +
             ", which llmc does not support (strings, complex, float8 and 4-bit types are not "
             "supported)";
    return {};
  }
  DType dtype = static_cast<DType>(tensor.data_type());
  SmallVector<int64_t> shape;
  int64_t count = 1;
  for (int64_t d : tensor.dims()) {
    if (d < 0 || (d > 0 && count > INT64_MAX / d)) {
      *error = "tensor '" + tensor.name() + "' has an invalid dimension " + std::to_string(d);
      return {};
    }
    shape.push_back(d);
    count *= d;
  }
  if (tensor.has_segment()) {
    *error = "tensor '" + tensor.name() + "' is segmented, which llmc does not support";
    return {};
  }
  size_t element_size = dtypeSize(dtype);
  std::string external;
  const std::string* raw = nullptr;
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
    if (!readExternalData(tensor, base_dir, &external, error)) {
      *error = "tensor '" + tensor.name() + "': " + *error;
      return {};
    }
    raw = &external;
  } else if (tensor.has_raw_data()) {
    raw = &tensor.raw_data();
  }
  auto mismatch = [&](size_t have) {
    *error = "tensor '" + tensor.name() + "' declares shape " +
             shapeToString(Shape(shape.begin(), shape.end())) + " (" + std::to_string(count) +
             " elements of " + dtypeName(dtype) + ") but holds " + std::to_string(have) +
             (raw ? " bytes" : " values");
    return DenseElementsAttr();
  };
  // The data is checked against the shape before the buffer is allocated: a few bytes of model
  // can declare any shape (an allocation of exabytes aborted the compiler).
  size_t size_bytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(count), element_size, &size_bytes))
    return mismatch(raw ? raw->size() : 0);
  const size_t values = static_cast<size_t>(tensor.float_data_size()) + tensor.double_data_size() +
                        tensor.int32_data_size() + tensor.int64_data_size() +
                        tensor.uint64_data_size();
  if (raw ? raw->size() != size_bytes : static_cast<size_t>(count) > values)
    return mismatch(raw ? raw->size() : values);
  std::vector<char> bytes(size_bytes);
  if (raw) {
    if (!bytes.empty()) std::memcpy(bytes.data(), raw->data(), bytes.size());
  } else {
    auto fill = [&](const auto& field, auto convert) -> bool {
      if (static_cast<int64_t>(field.size()) != count) return false;
      for (int64_t i = 0; i < count; ++i)
        convert(field.Get(static_cast<int>(i)), bytes.data() + i * element_size);
      return true;
    };
    auto store = [&](auto value, char* dst) { std::memcpy(dst, &value, sizeof(value)); };
    bool ok = true;
    switch (dtype) {
      case DType::kFloat32:
        ok = fill(tensor.float_data(), [&](float v, char* d) { store(v, d); });
        break;
      case DType::kFloat64:
        ok = fill(tensor.double_data(), [&](double v, char* d) { store(v, d); });
        break;
      case DType::kInt64:
        ok = fill(tensor.int64_data(), [&](int64_t v, char* d) { store(v, d); });
        break;
      case DType::kInt32:
        ok = fill(tensor.int32_data(), [&](int32_t v, char* d) { store(v, d); });
        break;
      case DType::kInt16:
        ok = fill(tensor.int32_data(),
                  [&](int32_t v, char* d) { store(static_cast<int16_t>(v), d); });
        break;
      case DType::kUInt16:
      case DType::kFloat16:
      case DType::kBFloat16:
        ok = fill(tensor.int32_data(),
                  [&](int32_t v, char* d) { store(static_cast<uint16_t>(v), d); });
        break;
      case DType::kInt8:
        ok = fill(tensor.int32_data(),
                  [&](int32_t v, char* d) { store(static_cast<int8_t>(v), d); });
        break;
      case DType::kUInt8:
      case DType::kBool:
        ok = fill(tensor.int32_data(),
                  [&](int32_t v, char* d) { store(static_cast<uint8_t>(v), d); });
        break;
      case DType::kUInt32:
        ok = fill(tensor.uint64_data(),
                  [&](uint64_t v, char* d) { store(static_cast<uint32_t>(v), d); });
        break;
      case DType::kUInt64:
        ok = fill(tensor.uint64_data(), [&](uint64_t v, char* d) { store(v, d); });
        break;
      default: ok = false;
    }
    if (!ok) {
      size_t have =
          std::max({tensor.float_data_size(), tensor.int32_data_size(), tensor.int64_data_size(),
                    tensor.double_data_size(), tensor.uint64_data_size()});
      return mismatch(have);
    }
  }
  Tensor view = Tensor::view(dtype, Shape(shape.begin(), shape.end()),
                             static_cast<const void*>(bytes.data()));
  return elementsFromTensor(view, context);
}

bool convertAttributes(ImportState& state, const NodeInfo& info,
                       SmallVectorImpl<NamedAttribute>* attributes, ArrayRef<StringRef> skip) {
  OpBuilder& b = state.builder;
  bool ok = true;
  for (const onnx::AttributeProto& attr : info.node->attribute()) {
    if (llvm::is_contained(skip, attr.name())) continue;
    Attribute value;
    switch (attr.type()) {
      case onnx::AttributeProto::INT: value = b.getI64IntegerAttr(attr.i()); break;
      case onnx::AttributeProto::FLOAT: value = b.getF32FloatAttr(attr.f()); break;
      case onnx::AttributeProto::STRING: value = b.getStringAttr(attr.s()); break;
      case onnx::AttributeProto::INTS:
        value =
            b.getDenseI64ArrayAttr(SmallVector<int64_t>(attr.ints().begin(), attr.ints().end()));
        break;
      case onnx::AttributeProto::FLOATS:
        value =
            b.getDenseF32ArrayAttr(SmallVector<float>(attr.floats().begin(), attr.floats().end()));
        break;
      case onnx::AttributeProto::TENSOR: {
        std::string error;
        value = convertTensor(b.getContext(), attr.t(), "", &error);
        if (!value) {
          state.nodeError(info, "attribute '" + attr.name() + "': " + error);
          ok = false;
          continue;
        }
        break;
      }
      default:
        state.nodeError(info, "attribute '" + attr.name() +
                                  "' has a kind llmc does not support (graphs, "
                                  "sparse tensors, string lists, types)");
        state.unsupported = true;
        ok = false;
        continue;
    }
    attributes->push_back(b.getNamedAttr(attr.name(), value));
  }
  return ok;
}

}  // namespace importer

namespace {

using importer::ImportState;
using importer::NodeInfo;

std::string dirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// A graph input/output/value_info type; null with *error set when unsupported.
Type convertValueType(MLIRContext* context, const onnx::ValueInfoProto& info,
                      std::vector<std::string>* dim_names, std::string* error) {
  if (!info.type().has_tensor_type()) {
    *error =
        "'" + info.name() + "' is not a tensor (sequences, maps and optionals are not supported)";
    return {};
  }
  const auto& tensor_type = info.type().tensor_type();
  int elem = tensor_type.elem_type();
  if (!isValidDType(elem) || elem == 0) {
    *error = "'" + info.name() + "' has element type " + std::to_string(elem) +
             ", which llmc does not support (strings, complex, float8 and 4-bit types are not "
             "supported)";
    return {};
  }
  Type element = mlirFromDType(static_cast<DType>(elem), context);
  if (!tensor_type.has_shape()) return UnrankedTensorType::get(element);
  SmallVector<int64_t> shape;
  for (int d = 0; d < tensor_type.shape().dim_size(); ++d) {
    const auto& dim = tensor_type.shape().dim(d);
    if (dim.has_dim_value() && dim.dim_value() >= 0) {
      shape.push_back(dim.dim_value());
      if (dim_names) dim_names->push_back("");
    } else {
      shape.push_back(ShapedType::kDynamic);
      if (dim_names)
        dim_names->push_back(dim.has_dim_param() && !dim.dim_param().empty()
                                 ? dim.dim_param()
                                 : info.name() + "_dim" + std::to_string(d));
    }
  }
  return RankedTensorType::get(shape, element);
}

ImportResult importModel(MLIRContext& context, const onnx::ModelProto& model,
                         const std::string& path) {
  context.getOrLoadDialect<nn::NNDialect>();
  context.getOrLoadDialect<func::FuncDialect>();
  ImportResult result;
  OpBuilder builder(&context);
  ImportState state(builder);
  const onnx::GraphProto& graph = model.graph();
  std::string base_dir = dirName(path);

  // Opsets per domain.
  std::map<std::string, int64_t> opsets;
  for (const auto& opset : model.opset_import())
    opsets[opset.domain() == "ai.onnx" ? "" : opset.domain()] = opset.version();
  int64_t default_opset = opsets.count("") ? opsets[""] : 0;
  if (default_opset < kMinOpset || default_opset > kMaxOpset) {
    result.errors.push_back(path + ": default-domain opset " + std::to_string(default_opset) +
                            " is not supported (llmc imports opsets " + std::to_string(kMinOpset) +
                            " to " + std::to_string(kMaxOpset) +
                            "; convert the model with onnx.version_converter)");
    result.unsupported = true;
    return result;
  }

  Location file_loc = FileLineColLoc::get(&context, path, 0, 0);
  auto module = ModuleOp::create(file_loc);
  OwningOpRef<ModuleOp> owner(module);  // erases the module on every early return
  builder.setInsertionPointToEnd(module.getBody());

  // Declared types of intermediates and outputs (used when inference cannot tell).
  std::map<std::string, Type> declared;
  for (const auto* list : {&graph.value_info(), &graph.output()}) {
    for (const auto& info : *list) {
      std::string ignored;
      if (Type t = convertValueType(&context, info, nullptr, &ignored)) declared[info.name()] = t;
    }
  }

  std::set<std::string> initializer_names;
  for (const auto& init : graph.initializer()) initializer_names.insert(init.name());

  // Function signature: graph inputs that are not initializers.
  SmallVector<Type> arg_types;
  SmallVector<Attribute> arg_attrs;
  std::vector<std::string> arg_names;
  std::vector<std::string> symbols;
  for (const auto& input : graph.input()) {
    if (initializer_names.count(input.name())) continue;
    std::vector<std::string> dim_names;
    std::string error;
    Type type = convertValueType(&context, input, &dim_names, &error);
    if (!type) {
      result.errors.push_back("graph input " + error);
      result.unsupported = true;
      continue;
    }
    if (!isa<RankedTensorType>(type)) {
      result.errors.push_back("graph input '" + input.name() +
                              "' has no shape; llmc needs the rank of every input");
      continue;
    }
    SmallVector<Attribute> dims;
    for (const std::string& name : dim_names) {
      dims.push_back(builder.getStringAttr(name));
      if (!name.empty() && std::find(symbols.begin(), symbols.end(), name) == symbols.end())
        symbols.push_back(name);
    }
    arg_types.push_back(type);
    arg_names.push_back(input.name());
    arg_attrs.push_back(builder.getDictionaryAttr(
        {builder.getNamedAttr("llmc.name", builder.getStringAttr(input.name())),
         builder.getNamedAttr("llmc.dims", builder.getArrayAttr(dims))}));
  }
  if (!result.errors.empty()) return result;

  auto func =
      builder.create<func::FuncOp>(file_loc, "main", builder.getFunctionType(arg_types, {}));
  func.setAllArgAttrs(arg_attrs);
  SmallVector<Attribute> symbol_attrs;
  for (const std::string& s : symbols) symbol_attrs.push_back(builder.getStringAttr(s));
  func->setAttr("llmc.symbols", builder.getArrayAttr(symbol_attrs));
  Block* body = func.addEntryBlock();
  builder.setInsertionPointToStart(body);

  std::map<std::string, Value> values;
  for (size_t i = 0; i < arg_names.size(); ++i)
    values[arg_names[i]] = body->getArgument(static_cast<unsigned>(i));

  // Initializers.
  for (const auto& init : graph.initializer()) {
    std::string error;
    DenseElementsAttr attr = importer::convertTensor(&context, init, base_dir, &error);
    if (!attr) {
      result.errors.push_back("initializer " + error);
      continue;
    }
    auto op = builder.create<nn::ConstantOp>(NameLoc::get(builder.getStringAttr(init.name())), attr,
                                             builder.getStringAttr(init.name()));
    // Where the weight comes from, for llmc refit (every weight derived from it records it).
    op->setAttr("llmc.recipe",
                builder.getDictionaryAttr({builder.getNamedAttr("source", builder.getStringAttr(init.name())),
                                           builder.getNamedAttr("type", TypeAttr::get(attr.getType()))}));
    values[init.name()] = op.getResult();
  }
  if (!graph.sparse_initializer().empty())
    result.errors.push_back("sparse initializers are not supported");

  Value none;
  auto getNone = [&]() {
    if (!none) {
      OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPointToStart(body);
      none = builder.create<nn::NoneOp>(file_loc).getResult();
    }
    return none;
  };

  // Nodes. Unsupported ones are collected across the whole model before failing.
  std::map<std::string, std::vector<std::string>>
      unsupported_ops;  // "(domain, op, opset)" -> nodes
  const KernelRegistry& kernels = KernelRegistry::cpuReference();
  for (int n = 0; n < graph.node_size(); ++n) {
    const onnx::NodeProto& node = graph.node(n);
    std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
    std::string name = node.name().empty() ? node.op_type() + "_" + std::to_string(n) : node.name();
    int64_t opset = opsets.count(domain) ? opsets[domain] : 0;
    Location loc =
        NameLoc::get(builder.getStringAttr(name), FileLineColLoc::get(&context, path, n + 1, 0));
    NodeInfo info{&node, name, opset, loc, {}, {}, {}};

    importer::OpHandler handler = importer::findOpHandler(domain, node.op_type(), opset);
    if (!handler ||
        (domain.empty() && node.op_type() != "Constant" && !kernels.find(node.op_type()))) {
      std::string key = "(" + (domain.empty() ? std::string("ai.onnx") : domain) + ", " +
                        node.op_type() + ", opset " + std::to_string(opset) + ")";
      unsupported_ops[key].push_back(name);
      for (const std::string& output : node.output()) values[output] = Value();
      continue;
    }
    bool inputs_ok = true;
    for (const std::string& input : node.input()) {
      if (input.empty()) {
        info.operands.push_back(getNone());
        continue;
      }
      auto it = values.find(input);
      if (it == values.end()) {
        state.nodeError(
            info, "input '" + input +
                      "' is not a graph input, an initializer or the output of an "
                      "earlier node (missing initializer, or nodes not in topological order)");
        inputs_ok = false;
      } else if (!it->second) {
        inputs_ok = false;  // produced by an unsupported node: already reported
      } else {
        info.operands.push_back(it->second);
      }
    }
    for (const std::string& output : node.output()) {
      info.result_names.push_back(output);
      auto it = declared.find(output);
      info.result_types.push_back(
          it != declared.end() ? it->second : UnrankedTensorType::get(builder.getF32Type()));
    }
    if (!inputs_ok) {
      for (const std::string& output : node.output()) values[output] = Value();
      continue;
    }
    Operation* op = handler(state, info);
    if (!op) {
      for (const std::string& output : node.output()) values[output] = Value();
      continue;
    }
    SmallVector<int64_t> untyped;
    for (size_t i = 0; i < info.result_names.size(); ++i)
      if (!declared.count(info.result_names[i])) untyped.push_back(static_cast<int64_t>(i));
    if (!untyped.empty()) op->setAttr("llmc.untyped", builder.getDenseI64ArrayAttr(untyped));
    for (int i = 0; i < node.output_size() && i < static_cast<int>(op->getNumResults()); ++i)
      if (!node.output(i).empty()) values[node.output(i)] = op->getResult(static_cast<unsigned>(i));
  }
  if (!unsupported_ops.empty()) {
    result.unsupported = true;
    std::string message = "the model uses " + std::to_string(unsupported_ops.size()) +
                          " operator(s) llmc does not support:";
    for (const auto& [key, nodes] : unsupported_ops) {
      message += "\n  " + key + " at node" + (nodes.size() > 1 ? "s " : " ");
      for (size_t i = 0; i < nodes.size() && i < 5; ++i)
        message += (i ? ", '" : "'") + nodes[i] + "'";
      if (nodes.size() > 5) message += " and " + std::to_string(nodes.size() - 5) + " more";
    }
    result.errors.insert(result.errors.begin(), message);
  }
  for (auto& e : state.errors) result.errors.push_back(e);
  result.unsupported = result.unsupported || state.unsupported;

  // Graph outputs.
  SmallVector<Value> outputs;
  SmallVector<Attribute> output_names;
  for (const auto& output : graph.output()) {
    auto it = values.find(output.name());
    if (it == values.end()) {
      result.errors.push_back("graph output '" + output.name() +
                              "' is not produced by any node, input or initializer");
      continue;
    }
    if (!it->second) continue;  // an unsupported node's output: already reported
    outputs.push_back(it->second);
    output_names.push_back(builder.getStringAttr(output.name()));
  }
  if (graph.output_size() == 0) result.errors.push_back("the graph has no outputs");
  if (!result.errors.empty()) return result;
  builder.setInsertionPointToEnd(body);
  builder.create<func::ReturnOp>(file_loc, outputs);
  SmallVector<Type> result_types;
  for (Value v : outputs) result_types.push_back(v.getType());
  func.setType(builder.getFunctionType(arg_types, result_types));
  func->setAttr("llmc.output_names", builder.getArrayAttr(output_names));
  result.module = std::move(owner);
  return result;
}

}  // namespace

ImportResult importOnnxBytes(MLIRContext& context, const void* data, size_t size_bytes,
                             const std::string& path) {
  onnx::ModelProto model;
  google::protobuf::io::CodedInputStream stream(static_cast<const uint8_t*>(data),
                                                static_cast<int>(size_bytes));
  stream.SetTotalBytesLimit(INT_MAX);
  if (size_bytes > static_cast<size_t>(INT_MAX) || !model.ParseFromCodedStream(&stream) ||
      !stream.ConsumedEntireMessage()) {
    ImportResult result;
    result.errors.push_back(
        path + ": not a valid ONNX model (the protobuf does not parse: truncated or not ONNX)");
    return result;
  }
  if (!model.has_graph()) {
    ImportResult result;
    result.errors.push_back(path + ": the ONNX model has no graph");
    return result;
  }
  return importModel(context, model, path);
}

ImportResult importOnnxFile(MLIRContext& context, const std::string& path) {
  std::string bytes;
  Status status = readFile(path, "model", &bytes);
  if (!status.ok()) {
    ImportResult result;
    result.errors.push_back(status.message());
    return result;
  }
  return importOnnxBytes(context, bytes.data(), bytes.size(), path);
}

}  // namespace llmc
