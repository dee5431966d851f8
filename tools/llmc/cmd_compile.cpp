// llmc compile: ONNX model -> engine file.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "chat.h"
#include "cli.h"
#include "compile_flags.h"
#include "core/engine_file.h"
#include "core/file_io.h"
#include "core/thread_pool.h"
#include "eval.h"
#include "llmc/compiler.h"
#include "llmc/drift.h"
#include "model_dir.h"

namespace llmc::cli {

namespace {
bool parseDim(const std::string& spec, std::string* name, int64_t* min, int64_t* max) {
  size_t eq = spec.find('='), colon = spec.find(':', eq == std::string::npos ? 0 : eq);
  if (eq == std::string::npos || eq == 0 || colon == std::string::npos) return false;
  *name = spec.substr(0, eq);
  return parseInteger(spec.substr(eq + 1, colon - eq - 1), 0, kInt64Max, min) &&
         parseInteger(spec.substr(colon + 1), -1, kInt64Max, max);
}
// What the fusion passes did: how often each pattern fired, then every near miss with its
// nodes and reason (llmc compile --report).
void printFusionReport(const std::vector<FusionReport>& fusions) {
  std::map<std::pair<std::string, std::string>, int> fired;
  size_t fired_total = 0, missed_total = 0;
  for (const FusionReport& f : fusions) {
    if (f.fired) ++fired[{f.pass, f.pattern}], ++fired_total;
    else ++missed_total;
  }
  std::printf("fusions: %zu fired, %zu near misses\n", fired_total, missed_total);
  for (const auto& [key, count] : fired)
    std::printf("  %-18s %-28s x%d\n", key.first.c_str(), key.second.c_str(), count);
  for (const FusionReport& f : fusions)
    if (f.fired && !f.nodes.empty())
      std::printf("  fired  %s %s: %s%s%s\n", f.pass.c_str(), f.pattern.c_str(), f.nodes.c_str(),
                  f.reason.empty() ? "" : ": ", f.reason.c_str());
  for (const FusionReport& f : fusions)
    if (!f.fired)
      std::printf("  missed %s %s at %s: %s\n", f.pass.c_str(), f.pattern.c_str(),
                  f.nodes.empty() ? "(unnamed nodes)" : f.nodes.c_str(), f.reason.c_str());
}

// Recognition's failures, one line per node, with the lines that say the same of several
// nodes ("attention at node 'X': why", X every layer's) merged into one that names the first
// and the last of them and how many there are.
std::vector<std::string> groupedFailures(const std::vector<std::string>& failures) {
  static const std::string kAt = " at node '";
  // A line as it is (group < 0), or the place of the group it started.
  struct Entry {
    std::string line;
    int group = -1;
  };
  struct Group {
    std::string kind, reason;
    std::vector<std::string> nodes;
  };
  std::vector<Entry> entries;
  std::vector<Group> groups;
  for (const std::string& failure : failures) {
    const size_t at = failure.find(kAt);
    const size_t end = at == std::string::npos ? at : failure.find("': ", at + kAt.size());
    if (end == std::string::npos) {
      entries.push_back({failure});
      continue;
    }
    std::string kind = failure.substr(0, at), reason = failure.substr(end + 3);
    std::string node = failure.substr(at + kAt.size(), end - at - kAt.size());
    auto same = std::find_if(groups.begin(), groups.end(),
                             [&](const Group& g) { return g.kind == kind && g.reason == reason; });
    if (same != groups.end()) {
      same->nodes.push_back(std::move(node));
      continue;
    }
    entries.push_back({"", static_cast<int>(groups.size())});
    groups.push_back({std::move(kind), std::move(reason), {std::move(node)}});
  }
  std::vector<std::string> lines;
  for (const Entry& entry : entries) {
    if (entry.group < 0) {
      lines.push_back(entry.line);
      continue;
    }
    const Group& g = groups[static_cast<size_t>(entry.group)];
    lines.push_back(g.nodes.size() == 1
                        ? g.kind + kAt + g.nodes[0] + "': " + g.reason
                        : g.kind + " at " + std::to_string(g.nodes.size()) + " nodes ('" +
                              g.nodes.front() + "' .. '" + g.nodes.back() + "'): " + g.reason);
  }
  return lines;
}

// --max-ppl-increase: the quantized or pruned engine against its float32 compile on `text`; when
// the perplexity grows by more than `max_percent`, an error with the products whose float32
// version (--keep-float) or whose unpruned version (--keep-dense) recovers the most, each tried
// alone. Trials that evaluate the same (keeping one attention of a decoder keeps every
// attention's heads: the KV cache holds one head count) are listed once.
Status checkAccuracy(const std::string& model, const CompileOptions& options,
                     const std::vector<uint8_t>& quantized, const CompileStats& stats,
                     const std::string& text, const std::string& text_option, double max_percent) {
  std::vector<uint8_t> float_bytes;
  LLMC_RETURN_IF_ERROR(compileModelBytes(model, floatCompileOptions(options), &float_bytes, nullptr)
                           .withContext("the float32 reference"));
  std::shared_ptr<const Engine> engine, reference;
  LLMC_RETURN_IF_ERROR(Engine::loadFromMemory(quantized, options.output_path, &engine));
  LLMC_RETURN_IF_ERROR(Engine::loadFromMemory(float_bytes, "the float32 reference", &reference));
  std::vector<int32_t> ids;
  LLMC_RETURN_IF_ERROR(
      tokenizeText(text, text_option, options.tokenizer_path, {engine, reference}, &ids));
  SessionOptions session;
  session.backend = Backend::kCpu;
  const int64_t context = defaultEvalContext({engine, reference});
  EvalMetrics m;
  LLMC_RETURN_IF_ERROR(evaluateEngine(engine, reference, session, ids, context, 0, &m));
  std::fprintf(stderr,
               "llmc compile: accuracy on %s (%lld predictions): perplexity %.4f against float32's %.4f (%+.2f%%), "
               "mean KL %.5f, top-1 agreement %.2f%%\n",
               text.c_str(), static_cast<long long>(m.predictions), m.perplexity, m.reference_perplexity,
               100 * m.perplexityIncrease(), m.mean_kl, 100 * m.top1_agreement);
  if (100 * m.perplexityIncrease() <= max_percent) return okStatus();
  // Sensitivity: each quantized product kept in float32 alone, each pruned one kept whole alone.
  std::vector<std::pair<double, std::string>> recovered;
  // The metrics of each engine tried: equal ones (to the last bit) come from the same engine.
  std::set<std::pair<double, double>> tried = {{m.perplexity, m.mean_kl}};
  for (const FusionReport& record : stats.fusions) {
    const bool pruned = record.pass == "prune";
    if (!record.fired || (!pruned && record.pass != "quantize") || record.nodes.empty()) continue;
    const std::string node = record.nodes.substr(0, record.nodes.find(", "));
    CompileOptions one = options;
    (pruned ? one.keep_dense : one.keep_float).push_back(node);
    one.progress = nullptr;
    std::vector<uint8_t> bytes;
    std::shared_ptr<const Engine> trial;
    EvalMetrics t;
    if (!compileModelBytes(model, one, &bytes, nullptr).ok() ||
        !Engine::loadFromMemory(bytes, node, &trial).ok() ||
        !evaluateEngine(trial, reference, session, ids, context, 0, &t).ok() ||
        !tried.insert({t.perplexity, t.mean_kl}).second)
      continue;
    recovered.emplace_back(100 * t.perplexityIncrease(),
                           (pruned ? "--keep-dense " : "--keep-float ") + node);
  }
  std::sort(recovered.begin(), recovered.end());
  std::string message =
      "perplexity +" + std::to_string(100 * m.perplexityIncrease()).substr(0, 5) +
      "% exceeds --max-ppl-increase " + std::to_string(max_percent).substr(0, 5) +
      "% (nothing written)" +
      (recovered.empty() ? ""
                         : "; the most sensitive layers, each kept in float32 (--keep-float) or "
                           "unpruned (--keep-dense) alone:");
  for (size_t i = 0; i < recovered.size() && i < 5; ++i)
    message += "\n  " + recovered[i].second + ": " + (recovered[i].first >= 0 ? "+" : "") +
               std::to_string(recovered[i].first).substr(0, 5) + "%";
  return failedPrecondition(message);
}

}  // namespace

Status parseCompileFlag(const std::vector<std::string>& args, size_t& i, CompileOptions& options,
                        bool* report, bool* consumed) {
  const std::string& arg = args[i];
  *consumed = true;
  auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
  if (arg == "--target") {
    const std::string* v = value();
    if (!v) return invalidArgument("--target needs a value");
    options.target = *v;
  } else if (arg == "--dim") {
    const std::string* v = value();
    std::string name;
    int64_t min = 0, max = 0;
    if (!v || !parseDim(*v, &name, &min, &max))
      return invalidArgument("--dim takes NAME=MIN:MAX (integers, MAX -1 for unbounded), got '" +
                             (v ? *v : std::string()) + "'");
    options.dim_ranges[name] = {min, max};
  } else if (arg == "--tokenizer") {
    const std::string* v = value();
    if (!v) return invalidArgument("--tokenizer needs a tokenizer.json");
    options.tokenizer_path = *v;
  } else if (arg == "--tokenizer-config" || arg == "--generation-config") {
    const std::string* v = value();
    if (!v) return invalidArgument(arg + " needs a JSON file");
    (arg == "--tokenizer-config" ? options.tokenizer_config_path : options.generation_config_path) =
        *v;
  } else if (arg == "--as-graph") {
    options.as_graph = true;
  } else if (arg == "--max-context") {
    if (Status s = intOption(args, &i, 1, kMaxContextTokens, &options.max_context); !s.ok())
      return s;
  } else if (arg == "--bos-id" || arg == "--eos-id") {
    int32_t id = 0;
    if (Status s = intOption(args, &i, 0, kInt32Max, &id); !s.ok()) return s;
    if (arg == "--bos-id")
      options.bos_token_id = id;
    else
      options.eos_token_ids.push_back(id);
  } else if (arg == "--opt-level") {  // 0: no fusion; 1: every fusion pass
    if (Status s = intOption(args, &i, 0, 1, &options.opt_level); !s.ok()) return s;
  } else if (arg == "--disable-pass") {
    const std::string* v = value();
    if (!v) return invalidArgument("--disable-pass needs a pass name");
    options.disabled_passes.push_back(*v);
  } else if (arg == "--quantize" || arg == "--quant-head") {
    const std::string* v = value();
    if (!v || (*v != "int8" && *v != "int4" && *v != "int4_zp" && *v != "w8a8" && *v != "fp8"))
      return invalidArgument(arg + " takes int8, int4, int4_zp, w8a8 or fp8");
    (arg == "--quantize" ? options.quantize : options.quant_head) = *v;
  } else if (arg == "--quant-group") {
    int64_t group = 0;
    if (Status s = intOption(args, &i, 32, 4096, &group); !s.ok()) return s;
    if (group % 32 != 0)
      return invalidArgument("--quant-group takes a multiple of 32 (32, 64, 128, ...), got '" +
                             args[i] + "'");
    options.quant_group = group;
  } else if (arg == "--calib" || arg == "--calib-dir") {
    const std::string* v = value();
    if (!v || v->empty())
      return invalidArgument(arg + " needs a " + (arg == "--calib" ? "file" : "directory"));
    (arg == "--calib" ? options.calib_file : options.calib_dir) = *v;
  } else if (arg == "--awq") {
    options.awq = true;
  } else if (arg == "--smooth-alpha") {
    if (Status s = floatOption(args, &i, 0, 1, &options.smooth_alpha); !s.ok()) return s;
  } else if (arg == "--smooth-percentile") {  // in (0.5, 1], e.g. 0.99
    double q = 0;
    if (Status s = floatOption(args, &i, 0.5, 1, &q); !s.ok()) return s;
    if (q == 0.5)
      return invalidArgument("--smooth-percentile takes a number in (0.5, 1], got '" + args[i] +
                             "'");
    options.smooth_percentile = q;
  } else if (arg == "--prune") {  // METHOD:PATTERN (docs/pruning.md); checked by the compiler
    const std::string* v = value();
    if (!v || v->empty())
      return invalidArgument(
          "--prune needs METHOD:PATTERN (wanda:0.5, sparsegpt:2:4, mlp:0.25, heads:0.25)");
    options.prune = *v;
  } else if (arg == "--sparse-storage") {  // pruned int8 and w8a8 weights as mask + kept values
    options.sparse_storage = true;
  } else if (arg == "--keep-float" || arg == "--keep-dense") {
    const std::string* v = value();
    if (!v || v->empty()) return invalidArgument(arg + " needs a node-name pattern");
    (arg == "--keep-float" ? options.keep_float : options.keep_dense).push_back(*v);
  } else if (arg == "--strip-weights") {
    options.strip_weights = true;
  } else if (arg == "--report" && report) {
    *report = true;
  } else if (arg == "--threads") {
    // The process's: calibration, quantization and every engine the command runs (0: every
    // physical core this process may use, the default).
    int threads = 0;
    if (Status s = intOption(args, &i, 0, kMaxThreads, &threads); !s.ok()) return s;
    if (threads > 0 && !setDefaultThreadCount(threads))
      return failedPrecondition("--threads " + std::to_string(threads) +
                                ": this process's threads were already started with " +
                                std::to_string(defaultThreadCount()));
  } else if (arg == "--verbose" || arg == "-v") {
    options.pass_timing = true;
  } else if (arg == "--dump-ir-after") {
    const std::string* v = value();
    if (!v) return invalidArgument("--dump-ir-after needs a pass name");
    options.dump_ir_after = *v;
  } else {
    *consumed = false;
  }
  return okStatus();
}

// --drift-text: the engine's output statistics on `text` (the contents of `text_path`;
// docs/serving.md, drift monitor), generated with the sampling a request without sampling
// fields gets, stored in `engine`.
Status addDriftBaseline(const CompileOptions& options, const std::string& text_path,
                        const std::string& text, int64_t tokens, int32_t new_tokens,
                        std::vector<uint8_t>* engine_bytes) {
  std::shared_ptr<const Engine> engine;
  LLMC_RETURN_IF_ERROR(Engine::loadFromMemory(*engine_bytes, options.output_path, &engine));
  if (!engine->llmConfig())
    return failedPrecondition("--drift-text needs a decoder language model; " + options.input_path +
                              " compiled as a plain graph");
  const int64_t context = engine->llmConfig()->max_context;
  if (new_tokens >= context)
    return invalidArgument("--drift-new-tokens " + std::to_string(new_tokens) +
                           " leaves no room for a prompt in the context of " +
                           std::to_string(context));
  std::unique_ptr<Tokenizer> tokenizer;
  LLMC_RETURN_IF_ERROR(loadTokenizer(options.tokenizer_path, {engine}, &tokenizer));
  std::vector<std::vector<int32_t>> prompts;
  LLMC_RETURN_IF_ERROR(
      driftPrompts(*tokenizer, text, std::min<int64_t>(64, context - new_tokens), &prompts)
          .withContext(text_path));
  DriftCalibration calibration;
  calibration.new_tokens = new_tokens;
  calibration.max_tokens = tokens;
  serve::GenerationDefaults defaults;
  if (!engine->generationConfigJson().empty())
    LLMC_RETURN_IF_ERROR(serve::parseGenerationConfig(engine->generationConfigJson(), &defaults));
  calibration.sampling = serve::defaultSampling(defaults);
  calibration.stop_token_ids =  // as llmc serve stops
      serve::defaultStopIds(engine->llmConfig()->eos_token_ids, tokenizer->eosId(), defaults);
  calibration.session.backend = Backend::kCpu;
  if (options.progress) options.progress("drift baseline on " + text_path);
  DriftBaseline baseline;
  const std::string name = std::filesystem::path(text_path).filename().string();
  LLMC_RETURN_IF_ERROR(computeDriftBaseline(engine, prompts, calibration, name, &baseline));
  engine.reset();  // its weights: setDriftBaseline loads the bytes once more to verify them
  std::vector<uint8_t> with_baseline;
  LLMC_RETURN_IF_ERROR(
      setDriftBaseline(*engine_bytes, options.output_path, baseline, &with_baseline));
  *engine_bytes = std::move(with_baseline);
  std::fprintf(stderr, "llmc compile: drift baseline: %s\n", baseline.source.c_str());
  return okStatus();
}

Status compileFromArgs(const std::vector<std::string>& args, const CompileProgress& progress,
                       CompileRun* run) {
  CompileOptions& options = run->options;
  double max_ppl_increase = -1;
  std::string eval_text, eval_text_option = "--eval-text", drift_text;
  int64_t drift_tokens = 4096, drift_new_tokens = 4;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-o" || arg == "--output" || arg == "--eval-text" || arg == "--drift-text") {
      if (i + 1 >= args.size()) return invalidArgument(arg + " needs a file name");
      (arg == "--eval-text"    ? eval_text
       : arg == "--drift-text" ? drift_text
                               : options.output_path) = args[++i];
      continue;
    }
    if (arg == "--drift-tokens" || arg == "--drift-new-tokens") {
      LLMC_RETURN_IF_ERROR(arg == "--drift-tokens"
                               ? intOption(args, &i, 64, 1 << 20, &drift_tokens)
                               : intOption(args, &i, 1, 4096, &drift_new_tokens));
      continue;
    }
    if (arg == "--max-ppl-increase") {  // a percentage, e.g. 5 for 5%
      LLMC_RETURN_IF_ERROR(floatOption(args, &i, 0, kUnbounded, &max_ppl_increase));
      continue;
    }
    bool consumed = false;
    LLMC_RETURN_IF_ERROR(parseCompileFlag(args, i, options, &run->report, &consumed));
    if (consumed) continue;
    if (!arg.empty() && arg[0] == '-') {
      return invalidArgument("unknown option '" + arg + "'");
    } else if (options.input_path.empty()) {
      options.input_path = arg;
    } else {
      return invalidArgument("more than one model given ('" + options.input_path + "', '" + arg +
                             "')");
    }
  }
  if (options.input_path.empty()) return invalidArgument("no model given");
  if (options.output_path.empty()) return invalidArgument("no output given (-o OUT.engine)");
  // A folder as exporters write it: the model, its tokenizer and configs (model_dir.h).
  std::error_code dir_error;
  const bool from_dir = std::filesystem::is_directory(options.input_path, dir_error);
  ModelDir model_dir;
  if (from_dir) LLMC_RETURN_IF_ERROR(resolveModelDir(&options, &model_dir));
  if (!drift_text.empty() && (drift_tokens + drift_new_tokens - 1) / drift_new_tokens < 64)
    return invalidArgument("--drift-tokens " + std::to_string(drift_tokens) +
                           " at --drift-new-tokens " + std::to_string(drift_new_tokens) +
                           " per prompt makes fewer than the 64 prompts a drift baseline needs");
  if (!drift_text.empty() && options.strip_weights)
    return invalidArgument(
        "--drift-text runs the engine: it needs the weights (not --strip-weights)");
  if (max_ppl_increase >= 0) {
    if (options.quantize.empty() && options.prune.empty())
      return invalidArgument("--max-ppl-increase goes with --quantize or --prune");
    if (options.strip_weights)
      return invalidArgument("--max-ppl-increase needs the weights (not --strip-weights)");
    if (eval_text.empty()) eval_text = options.calib_file, eval_text_option = "--calib";
    if (eval_text.empty())
      return invalidArgument(
          "--max-ppl-increase needs a text to evaluate on (--eval-text FILE or --calib FILE)");
  }
  options.progress = progress;

  auto start = std::chrono::steady_clock::now();
  CompileStats& stats = run->stats;
  std::string model;
  LLMC_RETURN_IF_ERROR(readFile(options.input_path, "model", &model));
  std::string drift_contents;  // read now: a bad path fails before the compile, not after
  if (!drift_text.empty())
    LLMC_RETURN_IF_ERROR(readFile(drift_text, "--drift-text", &drift_contents));
  std::vector<uint8_t> engine;
  LLMC_RETURN_IF_ERROR(compileModelBytes(model, options, &engine, &stats));
  if (from_dir) LLMC_RETURN_IF_ERROR(checkModelDir(options, stats, &model_dir));
  if (max_ppl_increase >= 0)
    LLMC_RETURN_IF_ERROR(checkAccuracy(model, options, engine, stats, eval_text, eval_text_option,
                                       max_ppl_increase));
  if (!drift_text.empty())
    LLMC_RETURN_IF_ERROR(addDriftBaseline(options, drift_text, drift_contents, drift_tokens,
                                          static_cast<int32_t>(drift_new_tokens), &engine));
  if (options.progress) options.progress("writing " + options.output_path);
  LLMC_RETURN_IF_ERROR(writeEngineFile(options.output_path, engine));
  // A model returning logits that is not recognized will generate by recomputation: a
  // warning. Anything else (an encoder's hidden states) is a graph anyway: a note.
  if (!stats.llm_failures.empty()) {
    std::string text = stats.llm_expected
                           ? "not recognized as a decoder language model; the engine runs the "
                             "graph as exported (full recomputation when generating):"
                           : "compiled as a graph, not as a decoder language model:";
    for (const std::string& failure : groupedFailures(stats.llm_failures)) text += "\n  " + failure;
    (stats.llm_expected ? run->warnings : run->notes).push_back(text);
  }
  for (const std::string& note : stats.llm_notes) run->notes.push_back(note);
  const int threads = defaultThreadCount();
  run->notes.push_back(std::to_string(threads) + (threads == 1 ? " thread" : " threads") +
                       " for calibration, quantization and the engines run (--threads)");
  for (const FusionReport& record : stats.fusions)
    if (record.pass == "shape-inference") run->warnings.push_back(record.reason);
  for (const FusionReport& record : stats.fusions)
    if (!record.fired && record.pass == "quantize" &&
        record.reason.find("--keep-float") == std::string::npos)
      run->warnings.push_back(record.nodes + " not quantized to " + record.pattern + ": " +
                              record.reason);
  for (const std::string& warning : stats.warnings) run->warnings.push_back(warning);
  for (const std::string& warning : model_dir.warnings) run->warnings.push_back(warning);
  if (from_dir) {
    run->from_dir =
        model_dir.dir + ": " + std::filesystem::path(options.input_path).filename().string();
    for (const std::string& name : model_dir.taken) run->from_dir += ", " + name;
  }
  run->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return okStatus();
}

int runCompile(const std::vector<std::string>& args) {
  // On a terminal: one line, rewritten in place, with the elapsed time, the stage, the pass and
  // the product being quantized or pruned; cleared at the end. With --verbose: every stage on a
  // line of its own. Otherwise (a file, a pipe): nothing.
  const bool verbose = std::find(args.begin(), args.end(), "--verbose") != args.end() ||
                       std::find(args.begin(), args.end(), "-v") != args.end();
  const bool terminal = isatty(STDERR_FILENO) && !verbose;
  const auto start = std::chrono::steady_clock::now();
  bool line_shown = false;
  CompileProgress progress;
  if (terminal || verbose)
    progress = [&](const std::string& stage) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(
          stderr, terminal ? "\r\033[Kllmc compile [%6.1f s] %.*s" : "llmc compile [%.1f s] %.*s\n",
          seconds, terminal ? 160 : static_cast<int>(stage.size()), stage.c_str());
      line_shown = terminal;
    };
  auto clearLine = [&] {
    if (line_shown) std::fputs("\r\033[K", stderr);
  };
  CompileRun run;
  const Status status = compileFromArgs(args, progress, &run);
  clearLine();
  if (!status.ok()) return reportError("compile", status);
  for (const std::string& warning : run.warnings)
    std::fprintf(stderr, "llmc compile: warning: %s\n", warning.c_str());
  if (run.options.pass_timing)
    for (const std::string& note : run.notes)
      std::fprintf(stderr, "llmc compile: note: %s\n", note.c_str());
  if (run.report) printFusionReport(run.stats.fusions);
  const CompileStats& stats = run.stats;
  if (stats.llm_recognized)
    std::printf("decoder language model: %lld attention layers over the paged KV cache\n",
                static_cast<long long>(stats.llm_layers));
  if (!run.from_dir.empty()) std::printf("from %s\n", run.from_dir.c_str());
  std::printf("wrote %s: %zu steps, %.1f KiB weights, %.1f KiB arena, %.1f KiB engine (%.2f s)\n",
              run.options.output_path.c_str(), stats.num_steps, stats.weight_bytes / 1024.0,
              stats.arena_bytes / 1024.0, stats.engine_bytes / 1024.0, run.seconds);
  return kExitOk;
}

}  // namespace llmc::cli
