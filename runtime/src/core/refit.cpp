// Safetensors parsing and engine refit (llmc/refit.h).
#include "llmc/refit.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/api_guard.h"
#include "core/engine_file.h"
#include "core/internal_access.h"
#include "core/kernel.h"
#include "core/plan.h"
#include "llmc/drift.h"
#include "llmc/engine.h"

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

// Evaluates one weight's recipe with the runtime's reference kernels.
Status evaluateRecipe(const std::vector<RecipeStep>& steps, const std::map<std::string, Tensor>& sources,
                      const std::string& where, Tensor* result) {
  if (steps.empty()) return dataLoss(where + ": empty recipe");
  std::vector<Tensor> values(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const RecipeStep& step = steps[i];
    switch (step.kind) {
      case RecipeStep::Kind::kSource: {
        auto it = sources.find(step.source);
        if (it == sources.end())
          return invalidArgument(where + " needs initializer '" + step.source + "', which the weights file lacks");
        if (it->second.dtype() != step.dtype || it->second.shape() != step.shape)
          return invalidArgument("initializer '" + step.source + "' is " + dtypeName(it->second.dtype()) +
                                 shapeToString(it->second.shape()) + " in the weights file; the engine was built for " +
                                 dtypeName(step.dtype) + shapeToString(step.shape));
        values[i] = it->second;
        break;
      }
      case RecipeStep::Kind::kLiteral: values[i] = step.literal; break;
      case RecipeStep::Kind::kKernel: {
        std::vector<const Tensor*> inputs;
        for (int input : step.inputs) inputs.push_back(input < 0 ? nullptr : &values[static_cast<size_t>(input)]);
        KernelRun run = evaluateKernel(*step.kernel, step.params, inputs, static_cast<size_t>(step.output) + 1,
                                       where, /*shape_only=*/false);
        if (!run.status.ok()) return run.status.withContext(where + " (recipe step " + std::to_string(i) + ")");
        values[i] = std::move(run.outputs[static_cast<size_t>(step.output)]);
        break;
      }
    }
  }
  *result = values.back();
  return okStatus();
}

}  // namespace

Status parseSafetensors(std::span<const uint8_t> bytes, const std::string& what,
                        std::map<std::string, Tensor>* tensors) {
  return guardApi("parseSafetensors", [&]() -> Status {
    tensors->clear();
    if (bytes.size() < 8) return dataLoss(what + ": shorter than a safetensors header");
    uint64_t header_size = 0;
    for (int i = 7; i >= 0; --i) header_size = header_size << 8 | bytes[static_cast<size_t>(i)];
    if (header_size > bytes.size() - 8 || header_size > (uint64_t{100} << 20))
      return dataLoss(what + ": header of " + std::to_string(header_size) +
                      " bytes does not fit the " + std::to_string(bytes.size()) + "-byte file");
    const auto* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
    nlohmann::json header =
        nlohmann::json::parse(header_begin, header_begin + header_size, nullptr, false);
    if (header.is_discarded() || !header.is_object())
      return dataLoss(what + ": the header is not a JSON object");
    const uint8_t* data = bytes.data() + 8 + header_size;
    const uint64_t data_size = bytes.size() - 8 - header_size;
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") continue;
      const std::string where = what + ": tensor '" + name + "'";
      if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
          !entry.contains("shape") || !entry["shape"].is_array() ||
          !entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
          entry["data_offsets"].size() != 2)
        return dataLoss(where + " lacks dtype, shape or data_offsets");
      DType dtype = DType::kUndefined;
      if (!safetensorsDType(entry["dtype"].get<std::string>(), &dtype))
        return unimplemented(where + " has dtype " + entry["dtype"].get<std::string>() +
                             ", which llmc does not read");
      Shape shape;
      uint64_t elements = 1;
      for (const auto& d : entry["shape"]) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0)
          return dataLoss(where + " has a bad dimension");
        const auto size = static_cast<uint64_t>(d.get<int64_t>());
        if (size != 0 && elements > (uint64_t{1} << 48) / size)
          return dataLoss(where + " is impossibly large");
        elements *= size;
        shape.push_back(static_cast<int64_t>(size));
      }
      const auto& offsets = entry["data_offsets"];
      if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
        return dataLoss(where + " has bad data_offsets");
      const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
      if (begin > end || end > data_size)
        return dataLoss(where + " lies outside the file's data (" + std::to_string(data_size) +
                        " bytes)");
      if (end - begin != elements * dtypeSize(dtype))
        return dataLoss(where + " holds " + std::to_string(end - begin) +
                        " bytes, its dtype and shape need " +
                        std::to_string(elements * dtypeSize(dtype)));
      Tensor view = Tensor::view(dtype, shape, static_cast<const void*>(data + begin));
      // The format does not promise aligned data (a header not padded to 8 bytes shifts it):
      // kernels read elements in place, so a misaligned tensor gets an aligned copy.
      const bool aligned =
          reinterpret_cast<uintptr_t>(data + begin) % std::max<size_t>(dtypeSize(dtype), 1) == 0;
      (*tensors)[name] = aligned ? view : view.clone();
    }
    return okStatus();
  });
}

Status refitEngine(std::span<const uint8_t> engine_bytes, const std::string& what,
                   const std::map<std::string, Tensor>& weights, std::vector<uint8_t>* out) {
  return guardApi("refitEngine", [&]() -> Status {
    std::shared_ptr<const Engine> engine;
    LLMC_RETURN_IF_ERROR(
        Engine::loadFromMemory(engine_bytes, what, &engine));  // verifies everything
    // SparseGPT's weights are computed from the calibration data as well as the model's: they
    // are literals, which new initializers cannot recompute.
    if (engine->buildOptions().find(";prune=sparsegpt") != std::string::npos)
      return failedPrecondition(what +
                                " was pruned with SparseGPT, whose updated weights depend on the "
                                "calibration data; compile the new model instead of refitting");
    const Plan& plan = InternalAccess::plan(*engine);
    EngineFileHeader header;
    LLMC_RETURN_IF_ERROR(
        checkEngineHeader(engine_bytes.data(), engine_bytes.size(), what, &header));
    uint64_t blob_size = 0;
    for (const PlanWeight& w : plan.weights)
      blob_size = std::max(blob_size, w.offset + w.size_bytes);
    std::vector<uint8_t> blob(blob_size, 0);
    for (const PlanWeight& w : plan.weights) {
      const PlanValue& value = plan.values[static_cast<size_t>(w.value)];
      if (w.recipe.empty()) {
        // A constant of the model itself: its bytes are in every engine, stripped or not.
        if (w.size_bytes) std::memcpy(blob.data() + w.offset, value.weight.data(), w.size_bytes);
        continue;
      }
      const std::string where = what + ": weight '" + value.name + "'";
      Tensor result;
      LLMC_RETURN_IF_ERROR(evaluateRecipe(w.recipe, weights, where, &result));
      Shape shape;
      for (const DimInfo& d : value.dims) shape.push_back(d.size);
      if (result.dtype() != value.dtype || result.shape() != shape ||
          result.sizeBytes() != w.size_bytes)
        return invalidArgument(where + " comes out " + dtypeName(result.dtype()) +
                               shapeToString(result.shape()) +
                               " from the new weights; the engine holds " + dtypeName(value.dtype) +
                               shapeToString(shape));
      if (w.size_bytes) std::memcpy(blob.data() + w.offset, result.data(), w.size_bytes);
    }
    assembleEngineFile({engine_bytes.data() + header.flatbuffer_offset, header.flatbuffer_size},
                       blob, out);
    // A drift baseline describes the old weights' outputs: the refit engine goes without.
    if (engine->driftBaseline()) {
      std::vector<uint8_t> refit = std::move(*out);
      return clearDriftBaseline(refit, what, out);
    }
    return okStatus();
  });
}

}  // namespace llmc
