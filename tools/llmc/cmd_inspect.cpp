// llmc inspect: what an engine holds, as text or as one JSON document.
#include <cstdio>
#include <map>

#include "cli.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "llmc/drift.h"
#include "llmc/engine.h"

namespace llmc::cli {

namespace {

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
          out += buffer;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// "1, 2, 3".
template <typename Int>
std::string joinInts(const std::vector<Int>& values) {
  std::string out;
  for (Int v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

std::string dimsText(const TensorInfo& info) {
  std::string text = "[";
  for (size_t i = 0; i < info.dims.size(); ++i) {
    if (i) text += ", ";
    const DimInfo& d = info.dims[i];
    text += d.size >= 0 ? std::to_string(d.size) : (d.symbol.empty() ? "?" : d.symbol);
  }
  return text + "]";
}

std::string dimsJson(const TensorInfo& info) {
  std::string text = "[";
  for (size_t i = 0; i < info.dims.size(); ++i) {
    if (i) text += ", ";
    const DimInfo& d = info.dims[i];
    text +=
        d.size >= 0 ? std::to_string(d.size) : (d.symbol.empty() ? "null" : jsonString(d.symbol));
  }
  return text + "]";
}

std::string tensorsJson(const std::vector<TensorInfo>& list) {
  std::string out = "[";
  for (size_t i = 0; i < list.size(); ++i) {
    out += std::string(i ? ", " : "") + "{\"name\": " + jsonString(list[i].name) +
           ", \"dtype\": " + jsonString(dtypeName(list[i].dtype)) +
           ", \"shape\": " + dimsJson(list[i]) + "}";
  }
  return out + "]";
}

}  // namespace

int runInspect(const std::vector<std::string>& args) {
  std::string engine_path;
  bool json = false;
  for (const std::string& arg : args) {
    if (arg == "--json")
      json = true;
    else if (!arg.empty() && arg[0] == '-')
      return usageError("inspect", "unknown option '" + arg + "'");
    else if (engine_path.empty())
      engine_path = arg;
    else
      return usageError("inspect", "more than one engine given");
  }
  if (engine_path.empty()) return usageError("inspect", "no engine given");
  std::shared_ptr<const Engine> engine;
  Status status = Engine::load(engine_path, &engine);
  if (!status.ok()) return reportError("inspect", status);

  std::map<std::string, int> kernel_counts;
  for (size_t i = 0; i < engine->numSteps(); ++i) kernel_counts[engine->stepKernel(i)]++;

  if (json) {
    std::string out = "{\n";
    out += "  \"path\": " + jsonString(engine_path) + ",\n";
    out += "  \"format_version\": " + jsonString(engine->formatVersion()) + ",\n";
    out += "  \"target\": " + jsonString(engine->target()) + ",\n";
    out += "  \"producer\": {\"compiler_version\": " + jsonString(engine->compilerVersion()) +
           ", \"source_hash\": " + jsonString(engine->sourceHash()) +
           ", \"options\": " + jsonString(engine->buildOptions()) + "},\n";
    out += "  \"inputs\": " + tensorsJson(engine->inputs()) + ",\n";
    out += "  \"outputs\": " + tensorsJson(engine->outputs()) + ",\n";
    out += "  \"symbols\": [";
    for (size_t i = 0; i < engine->symbols().size(); ++i) {
      const SymbolInfo& s = engine->symbols()[i];
      out += std::string(i ? ", " : "") + "{\"name\": " + jsonString(s.name) +
             ", \"min\": " + std::to_string(s.min) +
             ", \"max\": " + (s.max >= 0 ? std::to_string(s.max) : "null") +
             (s.expression.empty() ? "" : ", \"expression\": " + jsonString(s.expression)) + "}";
    }
    out += "],\n";
    out += "  \"tokenizer_bytes\": " + std::to_string(engine->tokenizerJson().size()) + ",\n";
    out += "  \"tokenizer_config_bytes\": " + std::to_string(engine->tokenizerConfigJson().size()) +
           ",\n";
    out +=
        "  \"generation_config_bytes\": " + std::to_string(engine->generationConfigJson().size()) +
        ",\n";
    if (const DriftBaseline* drift = engine->driftBaseline())
      out += "  \"drift_baseline\": {\"tokens\": " + std::to_string(drift->tokens) +
             ", \"entropy_bins\": " + std::to_string(drift->entropy.counts.size()) +
             ", \"logprob_bins\": " + std::to_string(drift->logprob.counts.size()) +
             ", \"source\": " + jsonString(drift->source) + "},\n";
    if (const LlmConfig* llm = engine->llmConfig()) {
      std::string eos;
      for (int32_t id : llm->eos_token_ids) {
        if (!eos.empty()) eos += ", ";
        eos += std::to_string(id);
      }
      out += "  \"llm\": {\"num_layers\": " + std::to_string(llm->num_layers) +
             ", \"num_heads\": " + std::to_string(llm->num_heads) +
             ", \"num_kv_heads\": " + std::to_string(llm->num_kv_heads) +
             ", \"head_dim\": " + std::to_string(llm->head_dim) +
             ", \"vocab_size\": " + std::to_string(llm->vocab_size) +
             ", \"max_context\": " + std::to_string(llm->max_context) +
             ", \"bos_token_id\": " + std::to_string(llm->bos_token_id) +
             ", \"eos_token_ids\": [" + eos + "]" +
             ", \"attention_windows\": [" + joinInts(llm->attention_windows) + "]},\n";
    } else {
      out += "  \"llm\": null,\n";
    }
    out += "  \"weight_bytes\": " + std::to_string(engine->weightBytes()) + ",\n";
    out += "  \"arena_bytes\": " + std::to_string(engine->arenaBytes()) + ",\n";
    out += "  \"kernel_counts\": {";
    bool first = true;
    for (const auto& [kernel, count] : kernel_counts) {
      out += std::string(first ? "" : ", ") + jsonString(kernel) + ": " + std::to_string(count);
      first = false;
    }
    out += "},\n  \"steps\": [";
    for (size_t i = 0; i < engine->numSteps(); ++i) {
      out += std::string(i ? ",\n    " : "\n    ") +
             "{\"kernel\": " + jsonString(engine->stepKernel(i)) +
             ", \"node\": " + jsonString(engine->stepNode(i)) + "}";
    }
    out += engine->numSteps() ? "\n  ]\n}\n" : "]\n}\n";
    std::fputs(out.c_str(), stdout);
    return kExitOk;
  }

  std::printf("engine:   %s\n", engine_path.c_str());
  std::printf("format:   %s\n", engine->formatVersion().c_str());
  std::printf("target:   %s\n", engine->target().c_str());
  std::printf("producer: llmc %s, source %s, options \"%s\"\n", engine->compilerVersion().c_str(),
              engine->sourceHash().c_str(), engine->buildOptions().c_str());
  std::printf("inputs:\n");
  for (const TensorInfo& t : engine->inputs())
    std::printf("  %s: %s %s\n", t.name.c_str(), dtypeName(t.dtype), dimsText(t).c_str());
  std::printf("outputs:\n");
  for (const TensorInfo& t : engine->outputs())
    std::printf("  %s: %s %s\n", t.name.c_str(), dtypeName(t.dtype), dimsText(t).c_str());
  if (!engine->symbols().empty()) {
    std::printf("symbols:\n");
    for (const SymbolInfo& s : engine->symbols())
      std::printf("  %s in [%lld, %s]%s\n", s.name.c_str(), static_cast<long long>(s.min),
                  s.max >= 0 ? std::to_string(s.max).c_str() : "unbounded",
                  s.expression.empty() ? "" : (" = " + s.expression).c_str());
  }
  std::printf("steps:    %zu\n", engine->numSteps());
  for (const auto& [kernel, count] : kernel_counts)
    std::printf("  %-22s %d\n", kernel.c_str(), count);
  if (!engine->tokenizerJson().empty())
    std::printf("tokenizer: %zu bytes of tokenizer.json\n", engine->tokenizerJson().size());
  if (!engine->tokenizerConfigJson().empty())
    std::printf("tokenizer config: %zu bytes of tokenizer_config.json\n",
                engine->tokenizerConfigJson().size());
  if (!engine->generationConfigJson().empty())
    std::printf("generation config: %zu bytes of generation_config.json\n",
                engine->generationConfigJson().size());
  if (const DriftBaseline* drift = engine->driftBaseline()) {
    std::printf("drift baseline: %llu tokens from %s\n",
                static_cast<unsigned long long>(drift->tokens), drift->source.c_str());
    auto print_edges = [](const char* name, const DriftHistogram& h) {
      std::string edges;
      char number[32];
      for (float e : h.edges) {
        std::snprintf(number, sizeof(number), "%s%.3f", edges.empty() ? "" : " ", e);
        edges += number;
      }
      std::printf("  %s bin edges: %s\n", name, edges.c_str());
    };
    print_edges("entropy (nats)", drift->entropy);
    print_edges("chosen logprob", drift->logprob);
  }
  if (const LlmConfig* llm = engine->llmConfig()) {
    std::string eos;
    for (int32_t id : llm->eos_token_ids) {
      if (!eos.empty()) eos += ",";
      eos += std::to_string(id);
    }
    std::printf("language model: %d layers, %d query / %d KV heads of %d, vocab %lld, context %lld, "
                "BOS %d, EOS [%s]; attention over the paged KV cache\n",
                llm->num_layers, llm->num_heads, llm->num_kv_heads, llm->head_dim,
                static_cast<long long>(llm->vocab_size), static_cast<long long>(llm->max_context),
                llm->bos_token_id, eos.c_str());
    bool windowed = false;
    for (int64_t w : llm->attention_windows) windowed = windowed || w > 0;
    if (windowed)
      std::printf("                sliding-window attention, window per layer (0: none): [%s]\n",
                  joinInts(llm->attention_windows).c_str());
  }
  std::printf("weights:  %llu bytes", static_cast<unsigned long long>(engine->weightBytes()));
  if (engine->strippedWeights() > 0)
    std::printf(" present; %zu weights stripped (fill them with llmc refit)", engine->strippedWeights());
  std::printf("\n");
  std::printf("arena:    %llu bytes (at the planning shapes)\n",
              static_cast<unsigned long long>(engine->arenaBytes()));
  std::printf("this cpu: %s; %d threads by default\n", cpuSummary().c_str(), defaultThreadCount());
  return kExitOk;
}

}  // namespace llmc::cli
