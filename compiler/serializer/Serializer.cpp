// Serializer: walks @main in exec form and writes values, weights, steps, slots and symbols
// in program order, so the same input and options always give the same bytes.
#include "serializer/Serializer.h"

#include <cstring>
#include <map>
#include <set>
#include <span>

#include "core/engine_file.h"
#include "core/symbols.h"
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
    // Relations shape inference found (llmc.symbol_relations), kept where every symbol they
    // name is still declared and has no relation itself (what the runtime accepts).
    std::set<std::string> declared;
    if (auto attr = func->getAttrOfType<ArrayAttr>("llmc.symbols"))
      for (Attribute a : attr) declared.insert(cast<StringAttr>(a).getValue().str());
    std::map<std::string, std::string> relations;
    if (auto attr = func->getAttrOfType<DictionaryAttr>("llmc.symbol_relations"))
      for (NamedAttribute r : attr)
        relations[r.getName().getValue().str()] = cast<StringAttr>(r.getValue()).getValue().str();
    std::vector<flatbuffers::Offset<fb::Symbol>> symbols;
    if (auto attr = func->getAttrOfType<ArrayAttr>("llmc.symbols")) {
      for (Attribute a : attr) {
        std::string name = cast<StringAttr>(a).getValue().str();
        auto range = ranges.count(name) ? ranges[name] : std::pair<int64_t, int64_t>{1, -1};
        std::string expression = relations.count(name) ? relations[name] : "";
        std::vector<SymbolTerm> terms;
        bool kept = !expression.empty() && parseSymbolExpression(expression, &terms);
        for (const SymbolTerm& term : terms)
          kept = kept && (term.symbol.empty() ||
                          (declared.count(term.symbol) && !relations.count(term.symbol)));
        auto name_string = fbb_.CreateString(name);
        auto expression_string = kept ? fbb_.CreateString(expression) : 0;
        symbols.push_back(
            fb::CreateSymbol(fbb_, name_string, range.first, range.second, expression_string));
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
        addWeight(weight.getResult(), name, weight.getValue(),
                  weight->getAttrOfType<DictionaryAttr>("llmc.recipe"));
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

    // Every builder call in a statement of its own, here and below: the order of a call's
    // arguments is the compiler's choice (gcc and clang differ), and the buffer's layout
    // follows the order of the calls, so the same model gave other bytes from a clang build.
    auto compiler_version = fbb_.CreateString(options.compiler_version);
    auto source_hash = fbb_.CreateString(options.source_hash);
    auto build_options = fbb_.CreateString(options.build_options);
    auto producer = fb::CreateProducer(fbb_, compiler_version, source_hash, build_options);
    if (failed(layoutWeights(func))) return failure();
    auto values_vec = fbb_.CreateVector(values_);
    auto weights_vec = fbb_.CreateVector(weights_);
    auto slots_vec = fbb_.CreateVector(slots);
    auto symbols_vec = fbb_.CreateVector(symbols);
    auto steps_vec = fbb_.CreateVector(steps);
    auto inputs_vec = fbb_.CreateVector(inputs);
    auto outputs_vec = fbb_.CreateVector(outputs);
    auto output_names_vec = fbb_.CreateVectorOfStrings(output_names);
    auto target = fbb_.CreateString(options.target);
    auto optionalString = [&](const std::string& s) {
      return s.empty() ? flatbuffers::Offset<flatbuffers::String>() : fbb_.CreateString(s);
    };
    auto tokenizer = optionalString(options.tokenizer_json);
    auto tokenizer_config = optionalString(options.tokenizer_config_json);
    auto generation_config = optionalString(options.generation_config_json);
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
    auto engine = fb::CreateEngine(
        fbb_, producer, target, values_vec, weights_vec, slots_vec, symbols_vec, steps_vec,
        inputs_vec, outputs_vec, arena ? static_cast<uint64_t>(arena.getInt()) : offset,
        output_names_vec, tokenizer, llm, tokenizer_config, generation_config);
    fb::FinishEngineBuffer(fbb_, engine);
    std::span<const uint8_t> weights(blob_);
    if (options.strip_weights) weights = weights.first(literal_bytes_);
    assembleEngineFile({fbb_.GetBufferPointer(), fbb_.GetSize()}, weights, file);
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
    auto name_string = fbb_.CreateString(name);
    auto dims_vector = fbb_.CreateVector(dims);
    auto offset = fb::CreateValue(fbb_, name_string, kind, static_cast<uint8_t>(dtype), dims_vector,
                                  weight, slot, ranked);
    values_.push_back(offset);
    int32_t index = static_cast<int32_t>(values_.size() - 1);
    if (value) index_[value] = index;
    return index;
  }

  // Records a weight; its bytes are placed by layoutWeights() once all are known.
  int32_t addWeight(Value value, const std::string& name, ElementsAttr elements,
                    DictionaryAttr recipe = DictionaryAttr()) {
    pending_.push_back({tensorFromElements(elements), recipe});
    return addValue(value, elements.getType(), name, fb::ValueKind::Weight, ArrayAttr(),
                    static_cast<int32_t>(pending_.size() - 1), -1);
  }

  // The weights section: first the model's own constants (no recipe), then the weights
  // computed from initializers, each 64-byte aligned in program order; a stripped engine keeps
  // only the first part (literal_bytes_), with the same plan.
  LogicalResult layoutWeights(func::FuncOp func) {
    std::vector<uint64_t> offsets(pending_.size());
    for (int pass = 0; pass < 2; ++pass)
      for (size_t i = 0; i < pending_.size(); ++i) {
        if (static_cast<bool>(pending_[i].recipe) != (pass == 1)) continue;
        const Tensor& tensor = pending_[i].tensor;
        uint64_t offset = (blob_.size() + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
        blob_.resize(offset + tensor.sizeBytes(), 0);
        if (tensor.sizeBytes()) std::memcpy(blob_.data() + offset, tensor.data(), tensor.sizeBytes());
        offsets[i] = offset;
        if (pass == 0) literal_bytes_ = blob_.size();
      }
    for (size_t i = 0; i < pending_.size(); ++i) {
      std::vector<flatbuffers::Offset<fb::RecipeStep>> steps;
      if (pending_[i].recipe) {
        llvm::DenseMap<Attribute, int32_t> memo;
        if (flattenRecipe(pending_[i].recipe, steps, memo) < 0)
          return func.emitError() << "weight " << i << " has a recipe that cannot be serialized";
      }
      weights_.push_back(fb::CreateWeight(fbb_, offsets[i], pending_[i].tensor.sizeBytes(),
                                          steps.empty() ? 0 : fbb_.CreateVector(steps)));
    }
    return success();
  }

  // Appends the steps computing `expr` (after those of its inputs) and returns its index, or
  // -1 for an absent input ({none}); -2 when the expression is malformed.
  int32_t flattenRecipe(DictionaryAttr expr, std::vector<flatbuffers::Offset<fb::RecipeStep>>& steps,
                        llvm::DenseMap<Attribute, int32_t>& memo) {
    auto it = memo.find(expr);
    if (it != memo.end()) return it->second;
    int32_t index = -2;
    if (expr.get("none")) return -1;
    if (auto source = expr.getAs<StringAttr>("source")) {
      auto type = expr.getAs<TypeAttr>("type");
      auto shaped = type ? dyn_cast<RankedTensorType>(type.getValue()) : RankedTensorType();
      if (!shaped) return -2;
      std::vector<int64_t> dims(shaped.getShape().begin(), shaped.getShape().end());
      auto source_name = fbb_.CreateString(source.getValue().str());
      auto dims_vector = fbb_.CreateVector(dims);
      steps.push_back(fb::CreateRecipeStep(
          fbb_, fb::RecipeKind::Source, source_name,
          static_cast<uint8_t>(dtypeFromMlir(shaped.getElementType())), dims_vector));
      index = static_cast<int32_t>(steps.size() - 1);
    } else if (auto literal = expr.getAs<ElementsAttr>("literal")) {
      Tensor t = tensorFromElements(literal);
      std::vector<int64_t> dims(t.shape().begin(), t.shape().end());
      fbb_.ForceVectorAlignment(t.sizeBytes(), 1, 8);
      auto data = fbb_.CreateVector(static_cast<const uint8_t*>(t.data()), t.sizeBytes());
      auto dims_vector = fbb_.CreateVector(dims);
      steps.push_back(fb::CreateRecipeStep(fbb_, fb::RecipeKind::Literal, 0,
                                           static_cast<uint8_t>(t.dtype()), dims_vector, data));
      index = static_cast<int32_t>(steps.size() - 1);
    } else if (auto kernel = expr.getAs<StringAttr>("kernel")) {
      std::vector<int32_t> inputs;
      auto input_exprs = expr.getAs<ArrayAttr>("inputs");
      if (!input_exprs) return -2;
      for (Attribute input : input_exprs) {
        auto dict = dyn_cast<DictionaryAttr>(input);
        int32_t i = dict ? flattenRecipe(dict, steps, memo) : -2;
        if (i == -2) return -2;
        inputs.push_back(i);
      }
      std::vector<flatbuffers::Offset<fb::Param>> params;
      if (auto dict = expr.getAs<DictionaryAttr>("params"))
        if (!makeParams(dict, nullptr, &params)) return -2;
      auto output = expr.getAs<IntegerAttr>("output");
      auto kernel_name = fbb_.CreateString(kernel.getValue().str());
      auto params_vector = fbb_.CreateVector(params);
      auto inputs_vector = fbb_.CreateVector(inputs);
      steps.push_back(fb::CreateRecipeStep(fbb_, fb::RecipeKind::Kernel, 0, 0, 0, 0, kernel_name,
                                           params_vector, inputs_vector,
                                           output ? static_cast<int32_t>(output.getInt()) : 0));
      index = static_cast<int32_t>(steps.size() - 1);
    }
    if (index >= 0) memo[expr] = index;
    return index;
  }

  // Kernel parameters from an attribute dictionary (sorted by name). Tensor-valued parameters
  // become weights when `call` is given; recipes have none.
  bool makeParams(DictionaryAttr dict, exec::CallOp* call, std::vector<flatbuffers::Offset<fb::Param>>* params) {
    for (NamedAttribute attr : dict) {  // DictionaryAttr keeps names sorted
      auto name = fbb_.CreateString(attr.getName().getValue().str());
      Attribute value = attr.getValue();
      if (auto integer = dyn_cast<IntegerAttr>(value)) {
        params->push_back(
            fb::CreateParam(fbb_, name, fb::ParamKind::Int, integer.getValue().getSExtValue()));
      } else if (auto real = dyn_cast<FloatAttr>(value)) {
        params->push_back(
            fb::CreateParam(fbb_, name, fb::ParamKind::Float, 0, real.getValueAsDouble()));
      } else if (auto string = dyn_cast<StringAttr>(value)) {
        params->push_back(fb::CreateParam(fbb_, name, fb::ParamKind::String, 0, 0,
                                          fbb_.CreateString(string.getValue().str())));
      } else if (auto ints = dyn_cast<DenseI64ArrayAttr>(value)) {
        std::vector<int64_t> v(ints.asArrayRef().begin(), ints.asArrayRef().end());
        params->push_back(
            fb::CreateParam(fbb_, name, fb::ParamKind::Ints, 0, 0, 0, fbb_.CreateVector(v)));
      } else if (auto floats = dyn_cast<DenseF32ArrayAttr>(value)) {
        std::vector<double> v(floats.asArrayRef().begin(), floats.asArrayRef().end());
        params->push_back(
            fb::CreateParam(fbb_, name, fb::ParamKind::Floats, 0, 0, 0, 0, fbb_.CreateVector(v)));
      } else if (auto elements = dyn_cast<ElementsAttr>(value); elements && call) {
        int32_t tensor = addWeight(
            Value(), call->getNode().value_or("step").str() + "." + attr.getName().getValue().str(),
            elements);
        params->push_back(fb::CreateParam(fbb_, name, fb::ParamKind::Tensor, 0, 0, 0, 0, 0, tensor));
      } else {
        if (call) call->emitError() << "parameter '" << attr.getName().getValue() << "' cannot be serialized";
        return false;
      }
    }
    return true;
  }

  flatbuffers::Offset<fb::Step> addStep(exec::CallOp call) {
    needs_slots_ = true;
    std::vector<flatbuffers::Offset<fb::Param>> params;
    if (!makeParams(call.getParams(), &call, &params)) return {};
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
    auto kernel_name = fbb_.CreateString(call.getKernel().str());
    auto node_name = fbb_.CreateString(node);
    auto params_vector = fbb_.CreateVector(params);
    auto inputs_vector = fbb_.CreateVector(inputs);
    auto outputs_vector = fbb_.CreateVector(outputs);
    return fb::CreateStep(fbb_, kernel_name, node_name, params_vector, inputs_vector,
                          outputs_vector);
  }

  flatbuffers::FlatBufferBuilder fbb_{1 << 16};
  std::vector<flatbuffers::Offset<fb::Value>> values_;
  struct PendingWeight {
    Tensor tensor;
    DictionaryAttr recipe;  // null: a constant of the model itself
  };
  std::vector<PendingWeight> pending_;
  std::vector<flatbuffers::Offset<fb::Weight>> weights_;
  std::vector<uint8_t> blob_;
  uint64_t literal_bytes_ = 0;  // the weights section's first part: weights without a recipe
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
