// Safetensors parsing and engine refit (llmc/refit.h).
#include "llmc/refit.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "core/engine_file.h"
#include "core/kernel.h"
#include "llmc/engine.h"
#include "llmc/engine_generated.h"

namespace llmc {

namespace {

bool safetensorsDType(const std::string& name, DType* dtype) {
  static const std::pair<const char*, DType> kNames[] = {
      {"F32", DType::kFloat32}, {"F16", DType::kFloat16}, {"BF16", DType::kBFloat16},
      {"F64", DType::kFloat64}, {"I64", DType::kInt64},   {"I32", DType::kInt32},
      {"I16", DType::kInt16},   {"I8", DType::kInt8},     {"U8", DType::kUInt8},
      {"BOOL", DType::kBool}};
  for (const auto& [known, type] : kNames)
    if (name == known) {
      *dtype = type;
      return true;
    }
  return false;
}

// A KernelContext over owned tensors, for evaluating recipe steps.
class RecipeContext : public KernelContext {
 public:
  RecipeContext(const KernelParams& params, std::vector<const Tensor*> inputs, size_t num_outputs,
                const std::string& node)
      : params_(params), inputs_(std::move(inputs)), outputs_(num_outputs), node_(node) {}
  size_t numInputs() const override { return inputs_.size(); }
  const Tensor* input(size_t i) const override { return i < inputs_.size() ? inputs_[i] : nullptr; }
  size_t numOutputs() const override { return outputs_.size(); }
  Status allocateOutput(size_t i, DType dtype, const Shape& shape, Tensor** out) override {
    if (i >= outputs_.size()) return internalError("output index out of range");
    outputs_[i] = Tensor::allocate(dtype, shape);
    *out = &outputs_[i];
    return okStatus();
  }
  const KernelParams& params() const override { return params_; }
  const std::string& nodeName() const override { return node_; }
  std::vector<Tensor>& outputs() { return outputs_; }

 private:
  const KernelParams& params_;
  std::vector<const Tensor*> inputs_;
  std::vector<Tensor> outputs_;
  std::string node_;
};

KernelParams paramsOf(const flatbuffers::Vector<flatbuffers::Offset<fb::Param>>* list) {
  KernelParams params;
  if (!list) return params;
  for (const fb::Param* p : *list) {
    KernelParam param;
    switch (p->kind()) {
      case fb::ParamKind::Int: param.kind = KernelParam::Kind::kInt; param.i = p->i(); break;
      case fb::ParamKind::Float: param.kind = KernelParam::Kind::kFloat; param.f = p->f(); break;
      case fb::ParamKind::String:
        param.kind = KernelParam::Kind::kString;
        param.s = p->s() ? p->s()->str() : "";
        break;
      case fb::ParamKind::Ints:
        param.kind = KernelParam::Kind::kInts;
        if (p->ints()) param.ints.assign(p->ints()->begin(), p->ints()->end());
        break;
      case fb::ParamKind::Floats:
        param.kind = KernelParam::Kind::kFloats;
        if (p->floats()) param.floats.assign(p->floats()->begin(), p->floats()->end());
        break;
      default: continue;  // tensor parameters are refused when the engine loads
    }
    params.set(p->name()->str(), std::move(param));
  }
  return params;
}

std::string shapeText(const flatbuffers::Vector<int64_t>* dims) {
  Shape shape;
  if (dims) shape.assign(dims->begin(), dims->end());
  return shapeToString(shape);
}

// Evaluates one weight's recipe with the runtime's reference kernels.
Status evaluateRecipe(const fb::Weight* weight, const std::map<std::string, Tensor>& sources,
                      const std::string& where, Tensor* result) {
  const auto& steps = *weight->recipe();
  std::vector<Tensor> values(steps.size());
  for (flatbuffers::uoffset_t i = 0; i < steps.size(); ++i) {
    const fb::RecipeStep* step = steps.Get(i);
    switch (step->kind()) {
      case fb::RecipeKind::Source: {
        const std::string name = step->source()->str();
        auto it = sources.find(name);
        if (it == sources.end())
          return invalidArgument(where + " needs initializer '" + name + "', which the weights file lacks");
        Shape want;
        if (step->dims()) want.assign(step->dims()->begin(), step->dims()->end());
        if (it->second.dtype() != static_cast<DType>(step->dtype()) || it->second.shape() != want)
          return invalidArgument("initializer '" + name + "' is " + dtypeName(it->second.dtype()) +
                                 shapeToString(it->second.shape()) + " in the weights file; the engine was built for " +
                                 dtypeName(static_cast<DType>(step->dtype())) + shapeText(step->dims()));
        values[i] = it->second;
        break;
      }
      case fb::RecipeKind::Literal: {
        Shape shape;
        if (step->dims()) shape.assign(step->dims()->begin(), step->dims()->end());
        values[i] = Tensor::view(static_cast<DType>(step->dtype()), shape,
                                 static_cast<const void*>(step->data() ? step->data()->data() : nullptr));
        break;
      }
      case fb::RecipeKind::Kernel: {
        const KernelDef* kernel = KernelRegistry::cpuReference().find(step->kernel()->str());
        KernelParams params = paramsOf(step->params());
        std::vector<const Tensor*> inputs;
        if (step->inputs())
          for (int32_t input : *step->inputs())
            inputs.push_back(input < 0 ? nullptr : &values[static_cast<size_t>(input)]);
        const size_t outputs = static_cast<size_t>(std::max(step->output() + 1, 1));
        RecipeContext ctx(params, std::move(inputs), outputs, where);
        Status status = kernel->fn(ctx);
        if (!status.ok()) return status.withContext(where + " (recipe step " + std::to_string(i) + ")");
        values[i] = ctx.outputs()[static_cast<size_t>(step->output())];
        break;
      }
      default: return dataLoss(where + ": unknown recipe step");
    }
  }
  if (steps.size() == 0) return dataLoss(where + ": empty recipe");
  *result = values.back();
  return okStatus();
}

}  // namespace

Status parseSafetensors(std::span<const uint8_t> bytes, const std::string& what,
                        std::map<std::string, Tensor>* tensors) {
  tensors->clear();
  if (bytes.size() < 8) return dataLoss(what + ": shorter than a safetensors header");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = header_size << 8 | bytes[static_cast<size_t>(i)];
  if (header_size > bytes.size() - 8 || header_size > (uint64_t{100} << 20))
    return dataLoss(what + ": header of " + std::to_string(header_size) + " bytes does not fit the " +
                    std::to_string(bytes.size()) + "-byte file");
  const auto* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
  nlohmann::json header = nlohmann::json::parse(header_begin, header_begin + header_size, nullptr, false);
  if (header.is_discarded() || !header.is_object()) return dataLoss(what + ": the header is not a JSON object");
  const uint8_t* data = bytes.data() + 8 + header_size;
  const uint64_t data_size = bytes.size() - 8 - header_size;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = what + ": tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2)
      return dataLoss(where + " lacks dtype, shape or data_offsets");
    DType dtype = DType::kUndefined;
    if (!safetensorsDType(entry["dtype"].get<std::string>(), &dtype))
      return unimplemented(where + " has dtype " + entry["dtype"].get<std::string>() + ", which llmc does not read");
    Shape shape;
    uint64_t elements = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return dataLoss(where + " has a bad dimension");
      const auto size = static_cast<uint64_t>(d.get<int64_t>());
      if (size != 0 && elements > (uint64_t{1} << 48) / size) return dataLoss(where + " is impossibly large");
      elements *= size;
      shape.push_back(static_cast<int64_t>(size));
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      return dataLoss(where + " has bad data_offsets");
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_size)
      return dataLoss(where + " lies outside the file's data (" + std::to_string(data_size) + " bytes)");
    if (end - begin != elements * dtypeSize(dtype))
      return dataLoss(where + " holds " + std::to_string(end - begin) + " bytes, its dtype and shape need " +
                      std::to_string(elements * dtypeSize(dtype)));
    (*tensors)[name] = Tensor::view(dtype, shape, static_cast<const void*>(data + begin));
  }
  return okStatus();
}

Status refitEngine(std::span<const uint8_t> engine_bytes, const std::string& what,
                   const std::map<std::string, Tensor>& weights, std::vector<uint8_t>* out) {
  std::shared_ptr<const Engine> engine;
  LLMC_RETURN_IF_ERROR(Engine::loadFromMemory(engine_bytes, what, &engine));  // verifies everything
  EngineFileHeader header;
  LLMC_RETURN_IF_ERROR(checkEngineHeader(engine_bytes.data(), engine_bytes.size(), what, &header));
  const uint8_t* fb_bytes = engine_bytes.data() + header.flatbuffer_offset;
  const fb::Engine* def = fb::GetEngine(fb_bytes);
  // Each weight's dtype and shape, from the value that names it.
  std::vector<std::pair<DType, Shape>> declared(def->weights() ? def->weights()->size() : 0);
  std::vector<std::string> names(declared.size());
  for (const fb::Value* value : *def->values()) {
    if (value->kind() != fb::ValueKind::Weight) continue;
    Shape shape;
    if (value->dims())
      for (const fb::Dim* d : *value->dims()) shape.push_back(d->size());
    declared[static_cast<size_t>(value->weight())] = {static_cast<DType>(value->dtype()), shape};
    names[static_cast<size_t>(value->weight())] = value->name()->str();
  }
  uint64_t blob_size = 0;
  for (const fb::Weight* w : *def->weights()) blob_size = std::max(blob_size, w->offset() + w->size_bytes());
  std::vector<uint8_t> blob(blob_size, 0);
  const uint8_t* old_blob = engine_bytes.data() + header.weights_offset;
  size_t used = 0;
  for (flatbuffers::uoffset_t i = 0; i < def->weights()->size(); ++i) {
    const fb::Weight* w = def->weights()->Get(i);
    const std::string where = what + ": weight '" + names[i] + "'";
    if (!w->recipe() || w->recipe()->size() == 0) {
      // A constant of the model itself: its bytes are in every engine, stripped or not.
      if (w->offset() + w->size_bytes() > header.weights_size)
        return dataLoss(where + " has no recipe and no bytes");
      if (w->size_bytes()) std::memcpy(blob.data() + w->offset(), old_blob + w->offset(), w->size_bytes());
      continue;
    }
    Tensor value;
    LLMC_RETURN_IF_ERROR(evaluateRecipe(w, weights, where, &value));
    if (value.dtype() != declared[i].first || value.shape() != declared[i].second ||
        value.sizeBytes() != w->size_bytes())
      return invalidArgument(where + " comes out " + dtypeName(value.dtype()) + shapeToString(value.shape()) +
                             " from the new weights; the engine holds " + dtypeName(declared[i].first) +
                             shapeToString(declared[i].second));
    if (value.sizeBytes()) std::memcpy(blob.data() + w->offset(), value.data(), value.sizeBytes());
    ++used;
  }
  (void)used;
  assembleEngineFile({fb_bytes, header.flatbuffer_size}, blob, out);
  return okStatus();
}

}  // namespace llmc
