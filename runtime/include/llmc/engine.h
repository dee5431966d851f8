// llmc::Engine: a loaded, verified, immutable engine file. Every Session of an engine shares its
// weights (mmapped, never copied).
//
// Threads: an Engine never changes after loading. One Engine (a shared_ptr<const Engine>) may
// be used from any number of threads at once: its methods, and Sessions, Generators and
// BatchGenerators created from it on different threads, all at the same time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "llmc/status.h"
#include "llmc/tensor.h"

namespace llmc {

struct Plan;  // the verified execution plan (internal: runtime/src/core/plan.h)
struct DriftBaseline;  // llmc/drift.h
class InternalAccess;

// One dimension of a declared shape.
struct DimInfo {
  int64_t size = -1;   // >= 0 when fixed
  std::string symbol;  // the symbol's name when symbolic; empty when fixed or unknown
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  std::vector<DimInfo> dims;
};

struct SymbolInfo {
  std::string name;
  int64_t min = 1;
  int64_t max = -1;  // -1: unbounded
  // When the compiler found that the model holds only if this symbol equals a sum of others
  // ("seq + past_seq": exports that name the total length apart from its parts), that sum;
  // a run whose inputs break it is refused. Empty otherwise.
  std::string expression;
};

// The longest context an engine may declare (a sanity bound on an untrusted file; far beyond
// what any model was trained on).
inline constexpr int64_t kMaxContextTokens = int64_t{1} << 24;

// A decoder language model's shape, recorded by the compiler when it moved the model's
// attention onto the runtime's paged KV cache (see docs/llm.md).
struct LlmConfig {
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int64_t vocab_size = -1;  // -1: symbolic
  int64_t max_context = 0;  // tokens per sequence, prompt included; 1..kMaxContextTokens
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
  std::string input_ids;  // input name
  std::string logits;     // output name
  // Per layer: 0 when a token sees every earlier position, W when it sees only its own and the
  // W - 1 before it (sliding-window attention, proven from the model's mask at compile time).
  std::vector<int64_t> attention_windows;
};

struct LoadOptions {
  // Hash the whole weights section at load and compare with the header's checksum.
  // Costs one pass over the weights; turn off for very large engines you trust.
  bool verify_weights_checksum = true;
  // Compare the plan section with the header's checksum. Only fuzzing turns this off, so
  // that mutated plans reach the structural checks behind it.
  bool verify_plan_checksum = true;
};

class Engine {
 public:
  // Maps the file and verifies it (header, FlatBuffer, every index, size and kernel name).
  static Status load(const std::string& path, std::shared_ptr<const Engine>* out,
                     const LoadOptions& options = {});
  // Same checks on bytes in memory (copied). `what` names the source in errors.
  static Status loadFromMemory(std::span<const uint8_t> bytes, const std::string& what,
                               std::shared_ptr<const Engine>* out, const LoadOptions& options = {});
  ~Engine();

  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  const std::vector<SymbolInfo>& symbols() const;
  const std::string& target() const;
  std::string formatVersion() const;  // "1.0"
  const std::string& compilerVersion() const;
  const std::string& sourceHash() const;
  const std::string& buildOptions() const;
  uint64_t weightBytes() const;
  // Weights left out by `llmc compile --strip-weights` (0 for a complete engine); such an
  // engine loads and can be inspected, but runs only after `llmc refit`.
  size_t strippedWeights() const;
  uint64_t arenaBytes() const;  // at the planning shapes
  size_t numSteps() const;
  // The kernel name and ONNX node of step i.
  const std::string& stepKernel(size_t i) const;
  const std::string& stepNode(size_t i) const;
  const std::string& path() const;
  // The tokenizer.json given to `llmc compile --tokenizer` (empty when none).
  const std::string& tokenizerJson() const;
  // The tokenizer_config.json (chat templates, special tokens) and generation_config.json
  // (sampling defaults) given to `llmc compile --tokenizer-config / --generation-config`,
  // checked when stored (empty when none).
  const std::string& tokenizerConfigJson() const;
  const std::string& generationConfigJson() const;
  // The language-model configuration; null when the engine runs as a plain graph.
  const LlmConfig* llmConfig() const;
  // The output statistics `llmc compile --drift-text` recorded (llmc/drift.h); null when none.
  const DriftBaseline* driftBaseline() const;

 private:
  friend class InternalAccess;  // the plan, for the runtime itself (core/internal_access.h)
  Engine();
  struct Mapping;
  std::unique_ptr<Mapping> mapping_;
  std::unique_ptr<Plan> plan_;
};

}  // namespace llmc
