// The verified, in-memory execution plan of an engine: what loading produces and what a
// Session executes. Built only by the loader, after every check has passed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/kernel.h"
#include "llmc/engine.h"
#include "llmc/tensor.h"

namespace llmc {

enum class PlanValueKind : uint8_t { kInput = 0, kWeight = 1, kIntermediate = 2 };

struct PlanValue {
  std::string name;
  PlanValueKind kind = PlanValueKind::kIntermediate;
  DType dtype = DType::kUndefined;
  std::vector<DimInfo> dims;
  bool ranked = true;  // false: rank known only at run time
  int slot = -1;       // kIntermediate
  Tensor weight;       // kWeight: a view into the mapped weights section
};

struct PlanStep {
  std::string kernel_name;
  const KernelDef* kernel = nullptr;
  std::string node;
  KernelParams params;
  std::vector<int> inputs;  // -1: absent optional input
  std::vector<int> outputs;
  std::vector<int> last_use;  // intermediates whose last use is this step
};

struct PlanSlot {
  uint64_t offset = 0;
  uint64_t size_bytes = 0;
};

struct Plan {
  std::string path;
  std::string target;
  std::string format_version;
  std::string compiler_version;
  std::string source_hash;
  std::string build_options;
  std::vector<PlanValue> values;
  std::vector<PlanStep> steps;
  std::vector<PlanSlot> slots;
  std::vector<SymbolInfo> symbols;
  std::vector<int> inputs;
  std::vector<int> outputs;
  std::vector<TensorInfo> input_infos;
  std::vector<TensorInfo> output_infos;
  uint64_t arena_bytes = 0;
  uint64_t weight_bytes = 0;
  std::string tokenizer_json;  // empty when the engine carries no tokenizer
  std::optional<LlmConfig> llm;
};

}  // namespace llmc
