// The verified, in-memory execution plan of an engine: what loading produces and what a
// Session executes. Built only by the loader, after every check has passed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/kernel.h"
#include "llmc/drift.h"
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

// One step of a weight's recipe (engine format 1.3): how `llmc refit` recomputes the weight
// from the source model's initializers.
struct RecipeStep {
  enum class Kind : uint8_t { kSource, kLiteral, kKernel };
  Kind kind = Kind::kSource;
  std::string source;  // kSource: the initializer's name
  DType dtype = DType::kUndefined;
  Shape shape;         // kSource: the initializer's expected shape
  Tensor literal;      // kLiteral: an owned copy of the bytes
  const KernelDef* kernel = nullptr;  // kKernel
  KernelParams params;
  std::vector<int> inputs;  // earlier steps; -1 for an absent input
  int output = 0;
};

struct PlanWeight {
  uint64_t offset = 0;  // in the weights section
  uint64_t size_bytes = 0;
  int value = -1;       // the value it holds
  std::vector<RecipeStep> recipe;  // empty: a constant of the model itself
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
  std::vector<PlanWeight> weights;  // by the engine's weight index
  std::vector<PlanSlot> slots;
  std::vector<SymbolInfo> symbols;
  std::vector<int> inputs;
  std::vector<int> outputs;
  std::vector<TensorInfo> input_infos;
  std::vector<TensorInfo> output_infos;
  uint64_t arena_bytes = 0;
  uint64_t weight_bytes = 0;
  // Weights whose bytes are not in the file (compiled with --strip-weights): `llmc refit`
  // fills them; until then the engine can be inspected but not run.
  size_t stripped_weights = 0;
  std::string tokenizer_json;  // empty when the engine carries no tokenizer
  std::string tokenizer_config_json;   // tokenizer_config.json (empty: none)
  std::string generation_config_json;  // generation_config.json (empty: none)
  std::optional<LlmConfig> llm;
  std::optional<DriftBaseline> drift_baseline;
};

// Engine targets: "cpu" runs on the CPU backend; "cuda-sm80" / "cuda-sm90" name the GPU an
// engine was built for (docs/cuda.md).
inline bool isKnownTarget(const std::string& target) {
  return target == "cpu" || target == "cuda-sm80" || target == "cuda-sm90";
}

// The byte offsets of the plan's memory slots in one arena (host or device). A slot grows
// when a run produces a larger value than the planning shapes gave; the next layout() uses
// the new capacities.
struct ArenaLayout {
  std::vector<uint64_t> capacity;  // bytes wanted per slot
  std::vector<uint64_t> offset;    // per slot, in the current arena
  std::vector<uint64_t> laid_out;  // bytes each slot has in the current arena
  uint64_t total = 0;

  explicit ArenaLayout(const std::vector<PlanSlot>& slots);
  // Recomputes offsets from the capacities (64-byte aligned); returns the arena's size.
  uint64_t layout();
  // Whether `bytes` fit slot `slot` as laid out; otherwise records the growth for next time.
  bool fits(int slot, uint64_t bytes);
};

// Checks a kernel's output `i` against what the plan declares for it (dtype, rank, static
// dims) and that its size is representable; the error names the node and kernel.
Status checkPlannedOutput(const Plan& plan, const PlanStep& step, size_t i, DType dtype,
                          const Shape& shape, uint64_t* bytes);

}  // namespace llmc
