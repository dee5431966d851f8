// The compile pipeline: ONNX -> nn -> (shape inference, folding, canonicalization, CSE)
// -> exec -> memory plan -> engine file.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "chat.h"
#include "core/engine_file.h"
#include "core/file_io.h"
#include "core/plan.h"
#include "core/prune.h"
#include "importer/OnnxImporter.h"
#include "llmc/compiler.h"
#include "llmc/tokenizer.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "mlir/Transforms/Passes.h"
#include "pipeline/Calibration.h"
#include "serializer/Serializer.h"
#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

using namespace mlir;

namespace llmc {

namespace {

std::string hex64(uint64_t value) {
  char buffer[17];
  std::snprintf(buffer, sizeof(buffer), "%016llx", static_cast<unsigned long long>(value));
  return buffer;
}

std::string describeLocation(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc)) return "node '" + name.getName().str() + "'";
  if (auto file = dyn_cast<FileLineColLoc>(loc)) return file.getFilename().str();
  return "";
}

std::string joinLines(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += (text.empty() ? "" : "\n") + line;
  return text;
}

// Optimum names the total length of a cache export's attention mask and present outputs
// "past_sequence_length + 1", which only holds when one token is decoded; the graph computes
// past + new tokens. Rename such a symbol "P + <the input_ids sequence symbol>" so shape
// inference probes it as the sum it is (ShapeInference's expression symbols).
void reinterpretCacheTotalLength(func::FuncOp main) {
  auto symbols = main->getAttrOfType<ArrayAttr>("llmc.symbols");
  if (!symbols) return;
  std::string seq;
  bool has_past = false;
  for (unsigned i = 0; i < main.getNumArguments(); ++i) {
    auto name = main.getArgAttrOfType<StringAttr>(i, "llmc.name");
    auto dims = main.getArgAttrOfType<ArrayAttr>(i, "llmc.dims");
    if (!name) continue;
    if (name.getValue().starts_with("past_key_values.")) has_past = true;
    if (name.getValue() == "input_ids" && dims && dims.size() == 2)
      seq = cast<StringAttr>(dims[1]).getValue().str();
  }
  if (!has_past || seq.empty()) return;
  std::map<std::string, std::string> renamed;
  std::set<std::string> names;
  for (Attribute s : symbols) names.insert(cast<StringAttr>(s).getValue().str());
  for (const std::string& name : names) {
    const std::string suffix = " + 1";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        names.count(name.substr(0, name.size() - suffix.size())))
      renamed[name] = name.substr(0, name.size() - suffix.size()) + " + " + seq;
  }
  if (renamed.empty()) return;
  Builder b(main.getContext());
  auto rename = [&](ArrayAttr list) {
    SmallVector<Attribute> out;
    for (Attribute a : list) {
      auto it = renamed.find(cast<StringAttr>(a).getValue().str());
      out.push_back(it == renamed.end() ? a : b.getStringAttr(it->second));
    }
    return b.getArrayAttr(out);
  };
  main->setAttr("llmc.symbols", rename(symbols));
  for (unsigned i = 0; i < main.getNumArguments(); ++i)
    if (auto dims = main.getArgAttrOfType<ArrayAttr>(i, "llmc.dims"))
      main.setArgAttr(i, "llmc.dims", rename(dims));
}

// --prune: a comma-separated list of at most one unstructured METHOD:PATTERN and the
// structured layers:FRACTION (decoder layers), mlp:FRACTION (MLP channels), heads:FRACTION
// (query heads of each KV group) and kv-heads:FRACTION (KV groups), each at most once.
struct PruneSpec {
  std::string method, pattern;  // unstructured: "" when none
  double mlp = 0;               // the fraction of MLP channels removed
  double heads = 0, kv_heads = 0, layers = 0;
  bool overall = false;     // the unstructured sparsity is over every product together
  bool calibrated = false;  // whether a part needs calibration statistics
};
Status parsePruneSpec(const std::string& text, PruneSpec* spec) {
  for (size_t begin = 0; !text.empty() && begin <= text.size();) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, comma - begin);
    begin = comma + 1;
    if (item == "overall") {  // the unstructured sparsity is the model's, not each product's
      spec->overall = true;
      continue;
    }
    const size_t colon = item.find(':');
    const std::string method = item.substr(0, colon);
    double* structured = method == "mlp"        ? &spec->mlp
                         : method == "heads"    ? &spec->heads
                         : method == "kv-heads" ? &spec->kv_heads
                         : method == "layers"   ? &spec->layers
                                                : nullptr;
    PruneMethod parsed = PruneMethod::kMagnitude;
    if (colon == std::string::npos || (!structured && !parsePruneMethod(method, &parsed)))
      return invalidArgument(
          "--prune takes METHOD:PATTERN with METHOD magnitude, wanda or sparsegpt, and "
          "layers:FRACTION, mlp:FRACTION, heads:FRACTION, kv-heads:FRACTION (wanda:0.5, "
          "sparsegpt:2:4, "
          "mlp:0.25,heads:0.25,wanda:0.5), got '" +
          text + "'");
    const std::string pattern = item.substr(colon + 1);
    PrunePattern checked;
    if (structured) {
      if (!parsePrunePattern(pattern, &checked).ok() || checked.nm() || checked.sparsity <= 0)
        return invalidArgument("--prune " + method +
                               ":FRACTION removes that fraction of each layer's " +
                               (method == "mlp"      ? "MLP channels"
                                : method == "layers" ? "decoder layers"
                                                     : "heads") +
                               ", a number in (0, 1); got '" + pattern + "'");
      if (*structured > 0)
        return invalidArgument("--prune names " + method + " twice: '" + text + "'");
      *structured = checked.sparsity;
      spec->calibrated = true;
      continue;
    }
    if (!spec->method.empty())
      return invalidArgument("--prune names two unstructured methods: '" + text + "'");
    LLMC_RETURN_IF_ERROR(parsePrunePattern(pattern, &checked).withContext("--prune"));
    spec->method = method, spec->pattern = pattern;
    spec->calibrated |= parsed != PruneMethod::kMagnitude;
  }
  if (spec->overall) {
    PrunePattern pattern;
    if (spec->method.empty() || !parsePrunePattern(spec->pattern, &pattern).ok() || pattern.nm())
      return invalidArgument(
          "--prune ...,overall makes an unstructured sparsity the whole model's "
          "(wanda:0.5,overall); "
          "it needs METHOD:SPARSITY, not N:M: '" +
          text + "'");
  }
  return okStatus();
}

}  // namespace

CompileOptions floatCompileOptions(const CompileOptions& options) {
  CompileOptions out = options;
  out.quantize.clear();
  out.quant_head.clear();
  out.keep_float.clear();
  out.calib_file.clear();
  out.calib_dir.clear();
  out.awq = false;
  out.prune.clear();
  out.keep_dense.clear();
  out.sparse_storage = false;
  out.strip_weights = false;
  out.progress = nullptr;
  return out;
}

const std::vector<std::string>& fusionPassNames() {
  static const std::vector<std::string> names = {
      "fuse-norms", "fuse-matmul", "fuse-gated-mlp", "fuse-rope",
      "fuse-attention", "fuse-qkv", "fuse-elementwise", "share-shapes", "lower-matmul-nbits"};
  return names;
}

// The options as the engine records them (its build_options), and as the calibration cache
// key tells float compiles apart.
std::string buildOptionsString(const CompileOptions& options, const std::set<std::string>& disabled) {
  std::string opts = "target=" + options.target;
  if (!options.tokenizer_path.empty()) opts += ";tokenizer";
  if (options.as_graph) opts += ";as-graph";
  if (options.max_context > 0) opts += ";max-context=" + std::to_string(options.max_context);
  if (options.bos_token_id >= 0) opts += ";bos=" + std::to_string(options.bos_token_id);
  for (int32_t id : options.eos_token_ids) opts += ";eos=" + std::to_string(id);
  if (options.opt_level != 1) opts += ";opt-level=" + std::to_string(options.opt_level);
  for (const std::string& name : disabled) opts += ";disable-pass=" + name;
  if (!options.quantize.empty()) {
    opts += ";quantize=" + options.quantize;
    if (options.quantize != "int8") opts += ";group=" + std::to_string(options.quant_group);
    if (!options.quant_head.empty()) opts += ";head=" + options.quant_head;
    for (const std::string& pattern : options.keep_float) opts += ";keep-float=" + pattern;
    if (options.awq) opts += ";awq";
    if (options.quantize == "w8a8") opts += ";smooth-alpha=" + std::to_string(options.smooth_alpha);
    if (options.quantize == "w8a8" && options.smooth_percentile < 1)
      opts += ";smooth-percentile=" + std::to_string(options.smooth_percentile);
  }
  if (!options.prune.empty()) opts += ";prune=" + options.prune;
  for (const std::string& pattern : options.keep_dense) opts += ";keep-dense=" + pattern;
  if (options.sparse_storage) opts += ";sparse-storage";
  for (const auto& [name, range] : options.dim_ranges)
    opts += ";dim " + name + "=" + std::to_string(range.first) + ":" + std::to_string(range.second);
  return opts;
}

Status compileModelBytes(const std::string& bytes, const CompileOptions& options,
                         std::vector<uint8_t>* engine_out, CompileStats* stats) {
  if (!isKnownTarget(options.target))
    return invalidArgument("unknown target '" + options.target +
                           "' (targets: cpu, cuda-sm80, cuda-sm90)");
  if (options.opt_level < 0 || options.opt_level > 1)
    return invalidArgument("--opt-level " + std::to_string(options.opt_level) +
                           " is not a level (0: no fusion, 1: all fusion passes)");
  std::set<std::string> disabled;
  for (std::string name : options.disabled_passes) {
    if (name.rfind("llmc-", 0) == 0) name = name.substr(5);
    const auto& known = fusionPassNames();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      return invalidArgument("--disable-pass " + name + ": not a fusion pass (they are: " + list + ")");
    }
    disabled.insert(name);
  }
  auto progress = [&](const std::string& stage) {
    if (options.progress) options.progress(stage);
  };

  // Calibration: the float32 engine of the same model runs over the calibration inputs.
  std::string calib_stats_path;
  std::string calib_temp;
  if (options.quantize == "w8a8" && options.calib_file.empty() && options.calib_dir.empty())
    return invalidArgument("--quantize w8a8 needs calibration data for its smoothing (--calib FILE or --calib-dir DIR)");
  PruneSpec prune_spec;
  LLMC_RETURN_IF_ERROR(parsePruneSpec(options.prune, &prune_spec));
  if (prune_spec.calibrated && options.calib_file.empty() && options.calib_dir.empty())
    return invalidArgument("--prune " + options.prune +
                           " needs calibration data (--calib FILE or --calib-dir DIR)");
  if (prune_spec.method == "sparsegpt" && options.strip_weights)
    return invalidArgument(
        "--prune sparsegpt computes its weights from the calibration data: refit cannot "
        "recompute them, so they cannot be stripped (--strip-weights)");
  if (options.sparse_storage &&
      (prune_spec.method.empty() || (options.quantize != "int8" && options.quantize != "w8a8")))
    return invalidArgument(
        "--sparse-storage stores the zeros of unstructured or N:M pruning (--prune METHOD:PATTERN) "
        "under --quantize int8 or w8a8");
  if (!options.keep_dense.empty() && options.prune.empty())
    return invalidArgument("--keep-dense keeps products whole under --prune; no --prune given");
  if (!options.keep_float.empty() && options.quantize.empty())
    return invalidArgument(
        "--keep-float keeps products float32 under --quantize; no --quantize given");
  const bool gram = prune_spec.method == "sparsegpt";
  if (options.awq || !options.calib_file.empty() || !options.calib_dir.empty()) {
    if (options.quantize.empty() && options.prune.empty())
      return invalidArgument("--calib, --calib-dir and --awq go with --quantize or --prune");
    if (options.calib_file.empty() && options.calib_dir.empty())
      return invalidArgument("--awq needs calibration data (--calib FILE or --calib-dir DIR)");
    std::string tokenizer_json;
    if (!options.tokenizer_path.empty())
      LLMC_RETURN_IF_ERROR(readFile(options.tokenizer_path, "--tokenizer", &tokenizer_json));
    std::vector<std::vector<NamedTensor>> samples;
    LLMC_RETURN_IF_ERROR(readCalibrationInputs(options.calib_file, options.calib_dir, tokenizer_json, &samples));
    const CompileOptions float_options = floatCompileOptions(options);
    const std::string key = calibrationKey(bytes, samples, buildOptionsString(float_options, disabled));
    if (options.output_path.empty()) {
      char path[] = "/tmp/llmc-calib-XXXXXX";
      const int fd = mkstemp(path);
      if (fd < 0) return internalError("cannot create a temporary file for calibration statistics");
      close(fd);
      calib_temp = calib_stats_path = path;
    } else {
      calib_stats_path = options.output_path + ".calib.safetensors";
    }
    CalibrationStats cached;
    if (readCalibrationStats(calib_stats_path, key, &cached).ok() && (!gram || hasGram(cached)) &&
        (prune_spec.layers == 0 || hasStreams(cached))) {
      progress("calibration: reusing " + calib_stats_path);
    } else {
      progress("calibration: compiling the float32 engine");
      std::vector<uint8_t> float_engine;
      LLMC_RETURN_IF_ERROR(compileModelBytes(bytes, float_options, &float_engine, nullptr).withContext("calibration"));
      CalibrationStats stats;
      LLMC_RETURN_IF_ERROR(collectCalibrationStats(float_engine, samples, gram, progress, &stats));
      LLMC_RETURN_IF_ERROR(writeCalibrationStats(calib_stats_path, key, stats));
    }
  }
  struct RemoveTemp {
    std::string path;
    ~RemoveTemp() {
      if (!path.empty()) std::remove(path.c_str());
    }
  } remove_temp{calib_temp};

  MLIRContext context;
  context.disableMultithreading();  // deterministic output, and 2-core build machines
  context.loadDialect<nn::NNDialect, exec::ExecDialect, llm::LLMDialect, func::FuncDialect>();
  std::vector<std::string> diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic& diag) {
    if (diag.getSeverity() != DiagnosticSeverity::Error) return success();
    std::string where = describeLocation(diag.getLocation());
    diagnostics.push_back((where.empty() ? "" : where + ": ") + diag.str());
    return success();
  });

  progress("importing " + options.input_path);
  ImportResult imported = importOnnxBytes(context, bytes.data(), bytes.size(), options.input_path);
  if (!imported.errors.empty()) {
    std::string message = joinLines(imported.errors);
    return imported.unsupported ? unimplemented(message) : invalidArgument(message);
  }
  ModuleOp module = *imported.module;
  auto main = module.lookupSymbol<func::FuncOp>("main");

  reinterpretCacheTotalLength(main);
  // Symbol ranges: every symbol defaults to [1, unbounded]; --dim narrows them.
  std::set<std::string> known_symbols;
  if (auto symbols = main->getAttrOfType<ArrayAttr>("llmc.symbols"))
    for (Attribute s : symbols) known_symbols.insert(cast<StringAttr>(s).getValue().str());
  Builder b(&context);
  SmallVector<NamedAttribute> ranges;
  for (const auto& [name, range] : options.dim_ranges) {
    if (!known_symbols.count(name)) {
      std::string list;
      for (const auto& s : known_symbols) list += (list.empty() ? "" : ", ") + s;
      return invalidArgument("--dim " + name + ": the model has no dimension named '" + name +
                             "' (it has: " + (list.empty() ? std::string("none") : list) + ")");
    }
    if (range.first < 0 || (range.second >= 0 && range.second < range.first))
      return invalidArgument("--dim " + name + ": empty range [" + std::to_string(range.first) +
                             ", " + std::to_string(range.second) + "]");
    ranges.push_back(b.getNamedAttr(name, b.getDenseI64ArrayAttr({range.first, range.second})));
  }
  main->setAttr("llmc.symbol_ranges", b.getDictionaryAttr(ranges));

  if (options.dump_ir_after == "import" || options.dump_ir_after == "all") {
    llvm::errs() << "// -----// IR after import //----- //\n";
    module.print(llvm::errs());
    llvm::errs() << "\n";
  }

  PassManager pm(&context);
  if (options.pass_timing) pm.enableTiming();  // the report prints when pm is destroyed
  if (!options.dump_ir_after.empty() && options.dump_ir_after != "import") {
    std::string wanted = options.dump_ir_after;
    pm.enableIRPrinting([](Pass*, Operation*) { return false; },
                        [wanted](Pass* pass, Operation*) {
                          return wanted == "all" || pass->getArgument() == wanted;
                        },
                        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false);
  }
  OpPassManager& fpm = pm.nest<func::FuncOp>();
  if (!options.as_graph) fpm.addPass(createStripKvIo());
  fpm.addPass(createShapeInference());
  fpm.addPass(createFoldConstants());
  fpm.addPass(createSimplify());
  fpm.addPass(createCanonicalizerPass());
  fpm.addPass(createCSEPass());
  fpm.addPass(createShapeInference());
  if (!options.as_graph) {
    std::vector<std::string> dim_max;
    for (const auto& [name, range] : options.dim_ranges)
      if (range.second > 0) dim_max.push_back(name + "=" + std::to_string(range.second));
    RecognizeLlmOptions recognize;
    recognize.maxContext = options.max_context;
    recognize.dimMax = dim_max;  // copied by the pass
    fpm.addPass(createRecognizeLlm(recognize));
    // What recognition made known: shapes that NonZero had left to run time before the
    // mixture-of-experts blocks became llm.moe, and the casts and reshapes they kept.
    fpm.addPass(createSimplify());
    fpm.addPass(createShapeInference());
  }
  if (options.opt_level >= 1) {
    using PassFactory = std::unique_ptr<Pass> (*)();
    const std::pair<const char*, PassFactory> fusions[] = {
        {"fuse-norms", [] { return createFuseNorms(); }},
        {"fuse-matmul", [] { return createFuseMatMul(); }},
        {"fuse-gated-mlp", [] { return createFuseGatedMlp(); }},
        {"fuse-rope", [] { return createFuseRope(); }},
        {"fuse-attention", [] { return createFuseAttention(); }},
        {"fuse-qkv", [] { return createFuseQkv(); }},
        {"fuse-elementwise", [] { return createFuseElementwise(); }}};
    for (const auto& [name, create] : fusions)
      if (!disabled.count(name)) fpm.addPass(create());
    if (!disabled.count("share-shapes")) fpm.addPass(createShareShapes());
    if (!disabled.count("lower-matmul-nbits")) {
      LowerMatMulNBitsOptions nbits;
      nbits.int8Activations = !options.quantize.empty();
      fpm.addPass(createLowerMatMulNBits(nbits));
    }
    fpm.addPass(createShapeInference());
  }
  if (!options.prune.empty()) {
    PruneWeightsOptions prune;
    prune.method = prune_spec.method;
    prune.pattern = prune_spec.pattern;
    prune.mlp = prune_spec.mlp;
    prune.heads = prune_spec.heads;
    prune.kvHeads = prune_spec.kv_heads;
    prune.layers = prune_spec.layers;
    prune.overall = prune_spec.overall;
    // The kept channels are a multiple of 32, and of the 4-bit group, so the smaller products
    // still quantize.
    prune.channelAlign = options.quantize == "int4" || options.quantize == "int4_zp"
                             ? std::max<int64_t>(32, options.quant_group)
                             : 32;
    prune.calibStats = calib_stats_path;
    prune.keepDense = options.keep_dense;
    fpm.addPass(createPruneWeights(prune));
  }
  if (!options.quantize.empty()) {
    QuantizeWeightsOptions quant;
    quant.format = options.quantize;
    quant.group = options.quant_group;
    quant.headFormat = options.quant_head;
    quant.keepFloat = options.keep_float;
    quant.calibStats = calib_stats_path;
    quant.awq = options.awq;
    quant.smoothAlpha = options.smooth_alpha;
    quant.smoothPercentile = options.smooth_percentile;
    quant.sparse = options.sparse_storage;
    fpm.addPass(createQuantizeWeights(quant));
  }
  fpm.addPass(createLowerToExec());
  fpm.addPass(createPlanMemory());

  progress("optimizing and planning");
  // Each pass as it starts, and the long passes' products (reportProgress) on the way.
  struct PassProgress : public PassInstrumentation {
    explicit PassProgress(const std::function<void(const std::string&)>& f) : progress(f) {}
    void runBeforePass(Pass* pass, Operation*) override {
      if (pass->getArgument().empty()) return;  // pass managers' adaptors
      progress("pass " + pass->getArgument().str());
    }
    const std::function<void(const std::string&)>& progress;
  };
  std::optional<ScopedProgressHook> pass_progress;
  if (options.progress) {
    pm.addInstrumentation(std::make_unique<PassProgress>(options.progress));
    pass_progress.emplace(options.progress);
  }
  if (failed(pm.run(module))) {
    std::string message = joinLines(diagnostics);
    return invalidArgument(message.empty() ? "compilation failed" : message);
  }
  std::vector<FusionReport> fusions;
  for (const FusionRecord& record : takeFusionLog(main))
    fusions.push_back({record.fired, record.pass, record.pattern, record.nodes, record.reason});
  std::vector<std::string> llm_failures;
  bool llm_expected = false;
  if (auto names = main->getAttrOfType<ArrayAttr>("llmc.output_names"); names && !names.empty())
    if (auto first = dyn_cast<StringAttr>(names[0])) llm_expected = first.getValue() == "logits";
  if (auto failures = main->getAttrOfType<ArrayAttr>("llmc.recognition_failures")) {
    for (Attribute f : failures) llm_failures.push_back(cast<StringAttr>(f).getValue().str());
    main->removeAttr("llmc.recognition_failures");
  }
  std::vector<std::string> llm_notes;
  if (auto notes = main->getAttrOfType<ArrayAttr>("llmc.recognition_notes")) {
    for (Attribute n : notes) llm_notes.push_back(cast<StringAttr>(n).getValue().str());
    main->removeAttr("llmc.recognition_notes");
  }
  bool llm_recognized = false;
  int64_t llm_layers = 0;
  int64_t vocab = -1;
  if (llm_expected) {
    auto logits = dyn_cast<ShapedType>(main.getFunctionType().getResult(0));
    if (logits && logits.hasRank() && logits.getRank() > 0 &&
        !ShapedType::isDynamic(logits.getShape().back()))
      vocab = logits.getShape().back();
  }
  if (auto config = main->getAttrOfType<DictionaryAttr>("llm.config")) {
    llm_recognized = true;
    llm_layers = config.getAs<IntegerAttr>("num_layers").getInt();
    int64_t max_context = options.max_context;
    if (max_context <= 0) {
      max_context = 2048;
      std::string seq = config.getAs<StringAttr>("seq_symbol").getValue().str();
      auto range = options.dim_ranges.find(seq);
      if (range != options.dim_ranges.end() && range->second.second > 0)
        max_context = range->second.second;
    }
    if (auto positions = config.getAs<IntegerAttr>("max_positions")) {
      // Learned position embeddings or a rotary cache have this many rows: no position may
      // reach past them.
      if (options.max_context > positions.getInt())
        return invalidArgument("--max-context " + std::to_string(options.max_context) +
                               " exceeds the model's " + std::to_string(positions.getInt()) +
                               " positions (its position table or rotary cache)");
      max_context = std::min(max_context, positions.getInt());
    }
    vocab = config.getAs<IntegerAttr>("vocab_size").getInt();
    for (int32_t id : options.eos_token_ids)
      if (id < 0 || (vocab >= 0 && id >= vocab))
        return invalidArgument("--eos-id " + std::to_string(id) + " is outside the vocabulary [0, " +
                               std::to_string(vocab) + ")");
    if (options.bos_token_id < -1 || (vocab >= 0 && options.bos_token_id >= vocab))
      return invalidArgument("--bos-id " + std::to_string(options.bos_token_id) +
                             " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    SmallVector<NamedAttribute> entries;
    for (NamedAttribute entry : config)
      if (entry.getName() != "max_positions") entries.push_back(entry);
    entries.push_back(b.getNamedAttr("max_context", b.getI64IntegerAttr(max_context)));
    entries.push_back(b.getNamedAttr("bos_token_id", b.getI64IntegerAttr(options.bos_token_id)));
    SmallVector<int64_t> eos(options.eos_token_ids.begin(), options.eos_token_ids.end());
    entries.push_back(b.getNamedAttr("eos_token_ids", b.getDenseI64ArrayAttr(eos)));
    main->setAttr("llm.config", b.getDictionaryAttr(entries));
  }

  SerializeOptions serialize;
  std::vector<std::string> warnings;
  serialize.compiler_version = kCompilerVersion;
  serialize.source_hash = hex64(checksum64(bytes.data(), bytes.size()));
  serialize.target = options.target;
  serialize.strip_weights = options.strip_weights;
  if (!options.tokenizer_path.empty()) {
    LLMC_RETURN_IF_ERROR(
        readFile(options.tokenizer_path, "--tokenizer", &serialize.tokenizer_json));
    std::unique_ptr<Tokenizer> tokenizer;  // refuse what the runtime could not load
    Status status = Tokenizer::fromJson(serialize.tokenizer_json, &tokenizer);
    if (!status.ok()) return status.withContext(options.tokenizer_path);
    // A tokenizer with added ids the embedding never grew for still generates (no logit picks
    // those ids); a prompt that encodes to one is refused when it runs.
    if (vocab >= 0 && tokenizer->vocabSize() > vocab)
      warnings.push_back(options.tokenizer_path + ": the tokenizer has " +
                         std::to_string(tokenizer->vocabSize()) + " ids, the model's logits " +
                         std::to_string(vocab) + ": a prompt with an id of " +
                         std::to_string(vocab) + " or more is refused when generating");
  }
  if (!options.tokenizer_config_path.empty()) {
    LLMC_RETURN_IF_ERROR(readFile(options.tokenizer_config_path, "--tokenizer-config",
                                  &serialize.tokenizer_config_json));
    serve::ChatConfig chat;  // refuse what llmc serve could not use
    Status status = serve::parseTokenizerConfig(serialize.tokenizer_config_json, &chat);
    if (!status.ok()) return status.withContext(options.tokenizer_config_path);
  }
  if (!options.generation_config_path.empty()) {
    LLMC_RETURN_IF_ERROR(readFile(options.generation_config_path, "--generation-config",
                                  &serialize.generation_config_json));
    serve::GenerationDefaults defaults;
    Status status = serve::parseGenerationConfig(serialize.generation_config_json, &defaults);
    if (!status.ok()) return status.withContext(options.generation_config_path);
  }
  serialize.build_options = buildOptionsString(options, disabled);
  std::vector<uint8_t>& engine = *engine_out;
  if (failed(serializeEngine(module, serialize, &engine))) {
    return internalError("serialization failed: " + joinLines(diagnostics));
  }

  if (stats) {
    stats->llm_recognized = llm_recognized;
    stats->llm_layers = llm_layers;
    stats->llm_failures = llm_failures;
    stats->llm_notes = llm_notes;
    stats->llm_expected = llm_expected;
    stats->vocab = vocab;
    stats->warnings = warnings;
    stats->fusions = fusions;
    stats->engine_bytes = engine.size();
    if (auto arena = main->getAttrOfType<IntegerAttr>("exec.arena_bytes"))
      stats->arena_bytes = static_cast<uint64_t>(arena.getInt());
    for (Operation& op : main.getBody().front()) {
      if (isa<exec::CallOp>(op)) ++stats->num_steps;
      if (auto weight = dyn_cast<exec::WeightOp>(op)) {
        auto type = cast<ShapedType>(weight.getType());
        stats->weight_bytes += static_cast<uint64_t>(type.getNumElements()) *
                               dtypeSize(dtypeFromMlir(type.getElementType()));
      }
    }
  }
  return okStatus();
}

Status compileModel(const CompileOptions& options, CompileStats* stats) {
  std::string bytes;
  LLMC_RETURN_IF_ERROR(readFile(options.input_path, "model", &bytes));
  std::vector<uint8_t> engine;
  LLMC_RETURN_IF_ERROR(compileModelBytes(bytes, options, &engine, stats));
  if (options.progress) options.progress("writing " + options.output_path);
  return writeEngineFile(options.output_path, engine);
}

}  // namespace llmc
