// llmc::compileModel: the whole compiler as one call (import, passes, lowering, planning,
// serialization). The CLI, the Python package and tests use it; the SDK installs it as
// llmc/compiler.h with libllmc_compiler.so (llmc::compiler, docs/c-api.md). Nothing else needs
// to know the pass order.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "llmc/status.h"

namespace llmc {

inline constexpr const char* kCompilerVersion = "0.1.0";

struct CompileOptions {
  std::string input_path;
  std::string output_path;
  std::string target = "cpu";
  // Range of each dimension symbol ("batch" -> {min, max}; max -1 = unbounded).
  std::map<std::string, std::pair<int64_t, int64_t>> dim_ranges;
  bool pass_timing = false;    // print per-pass timing to stderr
  std::string tokenizer_path;  // a tokenizer.json to store in the engine (checked here)
  // A tokenizer_config.json (chat templates: each must parse) and a generation_config.json to
  // store in the engine (for `llmc serve`).
  std::string tokenizer_config_path;
  std::string generation_config_path;
  std::string dump_ir_after;  // a pass flag (e.g. "llmc-shape-inference"), "import" or "all"
  // Keep the ONNX graph's own inputs and outputs: no language-model recognition.
  bool as_graph = false;
  // Language models: tokens per sequence (0: the seq dimension's --dim max, else 2048),
  // and the BOS/EOS ids recorded in the engine (-1 / empty: none).
  int64_t max_context = 0;
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
  // Optimization: 0 = no fusion (the graph cleanups, which compute bit-identical results,
  // always run), 1 = every fusion pass (the default). `disabled_passes` names fusion passes
  // to skip ("fuse-norms" or "llmc-fuse-norms"); see fusionPassNames().
  int opt_level = 1;
  // Write every weight computed from the model's initializers without its bytes (names,
  // shapes, dtypes and recipes stay); `llmc refit` fills them. Not in the build options, so a
  // refit engine is byte-identical to a normal compile of the same weights.
  bool strip_weights = false;
  std::vector<std::string> disabled_passes;
  // Quantization (docs/quantization.md): "" (none), "int8", "int4", "int4_zp" (weight-only),
  // "w8a8" or "fp8" (weights and activations);
  // the 4-bit group along K; the LM head's format ("" = `quantize`); ONNX node name
  // substrings whose products stay float32.
  std::string quantize;
  int64_t quant_group = 128;
  std::string quant_head;
  std::vector<std::string> keep_float;
  // Calibration (needed by `awq`): prompts, one per line, tokenized with `tokenizer_path`, or
  // a directory of input_ids .npy files. The statistics are cached next to the output
  // (OUTPUT.calib.safetensors) and reused while the model, data and float options match.
  std::string calib_file;
  std::string calib_dir;
  bool awq = false;           // activation-aware scales for 4-bit weights (docs/quantization.md)
  double smooth_alpha = 0.5;  // w8a8: SmoothQuant's migration strength
  double smooth_percentile =
      1.0;  // w8a8: percentile of |x| per channel taken as its max (1: absmax)
  // Pruning (docs/pruning.md): "" (none) or METHOD:PATTERN, METHOD magnitude, wanda or
  // sparsegpt (the last two need calibration), PATTERN a sparsity ("0.5") or N:M ("2:4").
  std::string prune;
  // ONNX node name substrings whose products (unstructured), MLPs, attentions and decoder layers
  // pruning leaves whole.
  std::vector<std::string> keep_dense;
  // Pruned int8 and w8a8 weights stored sparse (core/sparse.h: a bitmask and the kept values)
  // where that takes at most kSparseMaxBytesShare of the dense bytes: smaller engines, but decode
  // measured slower than dense on the CPUs here (docs/pruning.md), so only when asked
  // (--sparse-storage).
  bool sparse_storage = false;
  std::function<void(const std::string&)> progress;  // called at each stage when set
};

// One fusion that fired, or a near miss (a pattern that almost matched) and why not.
struct FusionReport {
  bool fired = false;
  std::string pass;     // "fuse-norms"
  std::string pattern;  // "rms-norm", "matmul+bias+gelu_erf", ...
  std::string nodes;    // the ONNX nodes involved, comma-separated
  std::string reason;   // near misses: why it did not fuse
};

// The same compile without quantization, calibration or stripping, and without progress: the
// float32 engine that calibration runs and `--max-ppl-increase` measures against.
CompileOptions floatCompileOptions(const CompileOptions& options);

// The fusion passes in pipeline order (the names --disable-pass takes).
const std::vector<std::string>& fusionPassNames();

struct CompileStats {
  uint64_t engine_bytes = 0;
  uint64_t weight_bytes = 0;
  uint64_t arena_bytes = 0;
  size_t num_steps = 0;
  // Language-model recognition: whether the engine runs over the KV cache, and otherwise
  // why not (one line per problem, naming nodes); empty when the model has no attention.
  bool llm_recognized = false;
  int64_t llm_layers = 0;
  std::vector<std::string> llm_failures;
  // How recognition proved what it relied on (one line each: how each mask's ScatterND was
  // shown to write at the origin), for `llmc compile --verbose`.
  std::vector<std::string> llm_notes;
  // Whether the first output is named "logits", as every causal-LM export names it: failures
  // then matter (a language model will generate by recomputation); on an encoder they do not.
  bool llm_expected = false;
  // The width of the logits: the recognized model's vocabulary, or a graph's static last
  // dimension of an output named "logits"; -1 otherwise.
  int64_t vocab = -1;
  std::vector<FusionReport> fusions;  // in pass order
  // What the engine will do that the options may not expect (each naming the option's file).
  std::vector<std::string> warnings;
};

// Errors: kInvalidArgument / kUnimplemented for problems with the model or the options
// (the CLI exits 2), anything else for failures of llmc itself (exit 1). The message lists
// every problem found, one per line, naming nodes and tensors.
Status compileModel(const CompileOptions& options, CompileStats* stats);

// The same pipeline on a model in memory; writes the engine's bytes instead of a file
// (options.input_path only names the model in messages; output_path is unused).
Status compileModelBytes(const std::string& model_bytes, const CompileOptions& options,
                         std::vector<uint8_t>* engine, CompileStats* stats);

}  // namespace llmc
