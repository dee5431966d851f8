// Serializer: walks @main in exec form and writes values, weights, steps, slots and symbols
// in program order, so the same input and options always give the same bytes.
#include "serializer/Serializer.h"

#include <map>

#include "core/engine_file.h"
#include "exec/IR/ExecOps.h"
#include "llmc/engine_generated.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "transforms/KernelEvaluator.h"

using namespace mlir;

namespace llmc {
namespace {

class EngineWriter {
 public:
  LogicalResult run(func::FuncOp func, const SerializeOptions& options,
                    std::vector<uint8_t>* file) {
    Block& body = func.getBody().front();
    std::map<std::string, std::pair<int64_t, int64_t>> ranges;
    if (auto attr = func->getAttrOfType<DictionaryAttr>("llmc.symbol_ranges")) {
      for (NamedAttribute range : attr) {
        auto bounds = cast<DenseI64ArrayAttr>(range.getValue()).asArrayRef();
        ranges[range.getName().getValue().str()] = {bounds[0], bounds[1]};
      }
    }
    std::vector<flatbuffers::Offset<fb::Symbol>> symbols;
    if (auto attr = func->getAttrOfType<ArrayAttr>("llmc.symbols")) {
      for (Attribute a : attr) {
        std::string name = cast<StringAttr>(a).getValue().str();
        auto range = ranges.count(name) ? ranges[name] : std::pair<int64_t, int64_t>{1, -1};
        symbols.push_back(
            fb::CreateSymbol(fbb_, fbb_.CreateString(name), range.first, range.second));
      }
    }

    std::vector<int32_t> inputs;
    std::string first_input;
    for (BlockArgument arg : body.getArguments()) {
      auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "llmc.name");
      if (first_input.empty() && name) first_input = name.getValue().str();
      auto dims = func.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(), "llmc.dims");
      int32_t index =
          addValue(arg, arg.getType(),
                   name ? name.getValue().str() : "input" + std::to_string(arg.getArgNumber()),
                   fb::ValueKind::Input, dims, -1, -1);
      inputs.push_back(index);
    }

    std::vector<flatbuffers::Offset<fb::Step>> steps;
    for (Operation& op : body.without_terminator()) {
      if (auto weight = dyn_cast<exec::WeightOp>(op)) {
        std::string name =
            weight.getName() ? weight.getName()->str() : "weight" + std::to_string(weights_.size());
        addWeight(weight.getResult(), name, weight.getValue());
      } else if (auto call = dyn_cast<exec::CallOp>(op)) {
        auto step = addStep(call);
        if (step.IsNull()) return failure();
        steps.push_back(step);
      } else if (!isa<exec::NoneOp>(op)) {
        return op.emitError() << "cannot serialize '" << op.getName() << "': lower to exec first";
      }
    }

    auto ret = cast<func::ReturnOp>(body.getTerminator());
    std::vector<int32_t> outputs;
    for (Value v : ret.getOperands()) outputs.push_back(index_.lookup(v));
    std::vector<std::string> output_names;
    auto names = func->getAttrOfType<ArrayAttr>("llmc.output_names");
    for (size_t i = 0; i < outputs.size(); ++i)
      output_names.push_back(names && i < names.size() ? cast<StringAttr>(names[i]).getValue().str()
                                                       : "output" + std::to_string(i));

    std::vector<flatbuffers::Offset<fb::Slot>> slots;
    uint64_t offset = 0;
    if (auto sizes = func->getAttrOfType<DenseI64ArrayAttr>("exec.slot_sizes")) {
      for (int64_t size : sizes.asArrayRef()) {
        slots.push_back(fb::CreateSlot(fbb_, offset, static_cast<uint64_t>(size)));
        offset += static_cast<uint64_t>(size);
      }
    } else if (needs_slots_) {
      return func.emitError() << "memory is not planned: run --llmc-plan-memory before serializing";
    }
    auto arena = func->getAttrOfType<IntegerAttr>("exec.arena_bytes");

    auto producer = fb::CreateProducer(fbb_, fbb_.CreateString(options.compiler_version),
                                       fbb_.CreateString(options.source_hash),
                                       fbb_.CreateString(options.build_options));
    auto values_vec = fbb_.CreateVector(values_);
    auto weights_vec = fbb_.CreateVector(weights_);
    auto slots_vec = fbb_.CreateVector(slots);
    auto symbols_vec = fbb_.CreateVector(symbols);
    auto steps_vec = fbb_.CreateVector(steps);
    auto inputs_vec = fbb_.CreateVector(inputs);
    auto outputs_vec = fbb_.CreateVector(outputs);
    auto output_names_vec = fbb_.CreateVectorOfStrings(output_names);
    auto target = fbb_.CreateString(options.target);
    auto tokenizer = options.tokenizer_json.empty() ? flatbuffers::Offset<flatbuffers::String>()
                                                    : fbb_.CreateString(options.tokenizer_json);
    flatbuffers::Offset<fb::LlmConfig> llm;
    if (auto config = func->getAttrOfType<DictionaryAttr>("llm.config")) {
      auto get = [&](StringRef key, int64_t fallback) {
        auto v = config.getAs<IntegerAttr>(key);
        return v ? v.getInt() : fallback;
      };
      std::vector<int32_t> eos;
      if (auto ids = config.getAs<DenseI64ArrayAttr>("eos_token_ids"))
        for (int64_t id : ids.asArrayRef()) eos.push_back(static_cast<int32_t>(id));
      auto eos_vec = fbb_.CreateVector(eos);
      auto ids_name = fbb_.CreateString(first_input);
      auto logits_name = fbb_.CreateString(output_names.empty() ? "logits" : output_names[0]);
      llm = fb::CreateLlmConfig(
          fbb_, static_cast<int32_t>(get("num_layers", 0)),
          static_cast<int32_t>(get("num_heads", 0)), static_cast<int32_t>(get("num_kv_heads", 0)),
          static_cast<int32_t>(get("head_dim", 0)), get("vocab_size", -1),
          get("max_context", 0), static_cast<int32_t>(get("bos_token_id", -1)), eos_vec,
          ids_name, logits_name);
    }
    auto engine = fb::CreateEngine(fbb_, producer, target, values_vec, weights_vec, slots_vec,
                                   symbols_vec, steps_vec, inputs_vec, outputs_vec,
                                   arena ? static_cast<uint64_t>(arena.getInt()) : offset,
                                   output_names_vec, tokenizer, llm);
    fb::FinishEngineBuffer(fbb_, engine);
    assembleEngineFile({fbb_.GetBufferPointer(), fbb_.GetSize()}, blob_, file);
    return success();
  }

 private:
  std::vector<flatbuffers::Offset<fb::Dim>> makeDims(Type type, ArrayAttr names, bool* ranked) {
    std::vector<flatbuffers::Offset<fb::Dim>> dims;
    auto shaped = dyn_cast<RankedTensorType>(type);
    *ranked = static_cast<bool>(shaped);
    if (!shaped) return dims;
    for (int64_t d = 0; d < shaped.getRank(); ++d) {
      int64_t size = shaped.getDimSize(d);
      std::string symbol;
      if (ShapedType::isDynamic(size)) {
        size = -1;
        if (names && d < static_cast<int64_t>(names.size()))
          symbol = cast<StringAttr>(names[d]).getValue().str();
      }
      dims.push_back(fb::CreateDim(fbb_, size, symbol.empty() ? 0 : fbb_.CreateString(symbol)));
    }
    return dims;
  }

  // Records a value of `type` (which may be a weight with no SSA value, e.g. a tensor
  // parameter); `value`, when given, maps to the new index.
  int32_t addValue(Value value, Type type, const std::string& name, fb::ValueKind kind,
                   ArrayAttr dim_names, int32_t weight, int32_t slot) {
    bool ranked = true;
    auto dims = makeDims(type, dim_names, &ranked);
    DType dtype = dtypeFromMlir(cast<ShapedType>(type).getElementType());
    auto offset = fb::CreateValue(fbb_, fbb_.CreateString(name), kind, static_cast<uint8_t>(dtype),
                                  fbb_.CreateVector(dims), weight, slot, ranked);
    values_.push_back(offset);
    int32_t index = static_cast<int32_t>(values_.size() - 1);
    if (value) index_[value] = index;
    return index;
  }

  int32_t addWeight(Value value, const std::string& name, ElementsAttr elements) {
    Tensor tensor = tensorFromElements(elements);
    uint64_t offset = (blob_.size() + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    blob_.resize(offset + tensor.sizeBytes(), 0);
    if (tensor.sizeBytes()) std::memcpy(blob_.data() + offset, tensor.data(), tensor.sizeBytes());
    weights_.push_back(fb::CreateWeight(fbb_, offset, tensor.sizeBytes()));
    return addValue(value, elements.getType(), name, fb::ValueKind::Weight, ArrayAttr(),
                    static_cast<int32_t>(weights_.size() - 1), -1);
  }

  flatbuffers::Offset<fb::Step> addStep(exec::CallOp call) {
    needs_slots_ = true;
    std::vector<flatbuffers::Offset<fb::Param>> params;
    for (NamedAttribute attr : call.getParams()) {  // DictionaryAttr keeps names sorted
      auto name = fbb_.CreateString(attr.getName().getValue().str());
      Attribute value = attr.getValue();
      if (auto integer = dyn_cast<IntegerAttr>(value)) {
        params.push_back(
            fb::CreateParam(fbb_, name, fb::ParamKind::Int, integer.getValue().getSExtValue()));
      } else if (auto real = dyn_cast<FloatAttr>(value)) {
        params.push_back(
            fb::CreateParam(fbb_, name, fb::ParamKind::Float, 0, real.getValueAsDouble()));
      } else if (auto string = dyn_cast<StringAttr>(value)) {
        params.push_back(fb::CreateParam(fbb_, name, fb::ParamKind::String, 0, 0,
                                         fbb_.CreateString(string.getValue().str())));
      } else if (auto ints = dyn_cast<DenseI64ArrayAttr>(value)) {
        std::vector<int64_t> v(ints.asArrayRef().begin(), ints.asArrayRef().end());
        params.push_back(
            fb::CreateParam(fbb_, name, fb::ParamKind::Ints, 0, 0, 0, fbb_.CreateVector(v)));
      } else if (auto floats = dyn_cast<DenseF32ArrayAttr>(value)) {
        std::vector<double> v(floats.asArrayRef().begin(), floats.asArrayRef().end());
        params.push_back(
            fb::CreateParam(fbb_, name, fb::ParamKind::Floats, 0, 0, 0, 0, fbb_.CreateVector(v)));
      } else if (auto elements = dyn_cast<ElementsAttr>(value)) {
        int32_t tensor = addWeight(
            Value(), call.getNode().value_or("step").str() + "." + attr.getName().getValue().str(),
            elements);
        params.push_back(fb::CreateParam(fbb_, name, fb::ParamKind::Tensor, 0, 0, 0, 0, 0, tensor));
      } else {
        call.emitError() << "parameter '" << attr.getName().getValue() << "' cannot be serialized";
        return {};
      }
    }
    std::vector<int32_t> inputs;
    for (Value operand : call.getInputs()) {
      if (isa<NoneType>(operand.getType())) {
        inputs.push_back(-1);
        continue;
      }
      auto it = index_.find(operand);
      if (it == index_.end()) {
        call.emitError() << "operand is not defined by an exec op";
        return {};
      }
      inputs.push_back(it->second);
    }
    auto slots = call.getSlots();
    if (!slots) {
      call.emitError() << "has no arena slots: run --llmc-plan-memory before serializing";
      return {};
    }
    auto names = call->getAttrOfType<ArrayAttr>("llmc.names");
    auto dims = call->getAttrOfType<ArrayAttr>("llmc.dims");
    std::vector<int32_t> outputs;
    std::string node = call.getNode() ? call.getNode()->str() : "";
    for (unsigned r = 0; r < call.getNumResults(); ++r) {
      std::string name =
          names && r < names.size() ? cast<StringAttr>(names[r]).getValue().str() : "";
      if (name.empty()) name = node + ":" + std::to_string(r);
      ArrayAttr dim_names = dims && r < dims.size() ? dyn_cast<ArrayAttr>(dims[r]) : ArrayAttr();
      outputs.push_back(addValue(call.getResult(r), call.getResult(r).getType(), name,
                                 fb::ValueKind::Intermediate, dim_names, -1,
                                 static_cast<int32_t>((*slots)[r])));
    }
    return fb::CreateStep(fbb_, fbb_.CreateString(call.getKernel().str()), fbb_.CreateString(node),
                          fbb_.CreateVector(params), fbb_.CreateVector(inputs),
                          fbb_.CreateVector(outputs));
  }

  flatbuffers::FlatBufferBuilder fbb_{1 << 16};
  std::vector<flatbuffers::Offset<fb::Value>> values_;
  std::vector<flatbuffers::Offset<fb::Weight>> weights_;
  std::vector<uint8_t> blob_;
  llvm::DenseMap<Value, int32_t> index_;
  bool needs_slots_ = false;
};

}  // namespace

LogicalResult serializeEngine(ModuleOp module, const SerializeOptions& options,
                              std::vector<uint8_t>* file) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func) return module.emitError() << "no @main function to serialize";
  EngineWriter writer;
  return writer.run(func, options, file);
}

}  // namespace llmc
