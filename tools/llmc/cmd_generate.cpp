// llmc generate: stream tokens (or text, with a tokenizer) from a decoder engine.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli.h"
#include "llmc/generator.h"
#include "llmc/tokenizer.h"

namespace llmc::cli {

namespace {

bool parseIds(const std::string& text, std::vector<int32_t>* ids) {
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t comma = text.find(',', begin);
    std::string part =
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    char* end = nullptr;
    long long value = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || value < INT32_MIN || value > INT32_MAX) return false;
    ids->push_back(static_cast<int32_t>(value));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return !ids->empty();
}

bool parseNumber(const std::string& text, double* value) {
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  return !text.empty() && *end == '\0';
}

}  // namespace

int runGenerate(const std::vector<std::string>& args) {
  std::string engine_path, prompt_text, tokenizer_path;
  std::vector<int32_t> prompt_ids;
  bool print_ids = false;
  int32_t num_beams = 0;
  float length_penalty = 1.0f;
  GenerationOptions options;
  GeneratorConfig config;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto next = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    auto number = [&](const char* flag, double* value) -> bool {
      const std::string* v = next();
      return v && parseNumber(*v, value)
                 ? true
                 : (std::fprintf(stderr, "llmc generate: error: %s needs a number\n", flag), false);
    };
    double value = 0;
    if (arg == "--prompt-ids") {
      const std::string* v = next();
      if (!v || !parseIds(*v, &prompt_ids))
        return usageError("generate", "--prompt-ids takes comma-separated ids, e.g. 1,2,3");
    } else if (arg == "--prompt") {
      const std::string* v = next();
      if (!v) return usageError("generate", "--prompt needs text");
      prompt_text = *v;
    } else if (arg == "--tokenizer") {
      const std::string* v = next();
      if (!v) return usageError("generate", "--tokenizer needs a tokenizer.json");
      tokenizer_path = *v;
    } else if (arg == "--max-new-tokens") {
      if (!number("--max-new-tokens", &value)) return kExitBadInput;
      if (value < 0) return usageError("generate", "--max-new-tokens must not be negative");
      options.max_new_tokens = static_cast<int32_t>(value);
    } else if (arg == "--temperature") {
      if (!number("--temperature", &value)) return kExitBadInput;
      options.sampling.temperature = static_cast<float>(value);
    } else if (arg == "--top-k") {
      if (!number("--top-k", &value)) return kExitBadInput;
      options.sampling.top_k = static_cast<int32_t>(value);
    } else if (arg == "--top-p") {
      if (!number("--top-p", &value)) return kExitBadInput;
      options.sampling.top_p = static_cast<float>(value);
    } else if (arg == "--min-p") {
      if (!number("--min-p", &value)) return kExitBadInput;
      options.sampling.min_p = static_cast<float>(value);
    } else if (arg == "--repetition-penalty") {
      if (!number("--repetition-penalty", &value)) return kExitBadInput;
      options.sampling.repetition_penalty = static_cast<float>(value);
    } else if (arg == "--seed") {
      if (!number("--seed", &value)) return kExitBadInput;
      if (value < 0) return usageError("generate", "--seed must not be negative");
      options.sampling.seed = static_cast<uint64_t>(value);
    } else if (arg == "--stop") {
      const std::string* v = next();
      if (!v || v->empty()) return usageError("generate", "--stop needs a non-empty string");
      options.stop_strings.push_back(*v);
    } else if (arg == "--stop-id") {
      if (!number("--stop-id", &value)) return kExitBadInput;
      options.stop_token_ids.push_back(static_cast<int32_t>(value));
    } else if (arg == "--beam") {
      if (!number("--beam", &value)) return kExitBadInput;
      if (value < 1) return usageError("generate", "--beam needs at least 1 beam");
      num_beams = static_cast<int32_t>(value);
    } else if (arg == "--length-penalty") {
      if (!number("--length-penalty", &value)) return kExitBadInput;
      length_penalty = static_cast<float>(value);
    } else if (arg == "--print-ids") {
      print_ids = true;
    } else if (std::string flag_error; parseSessionFlag(args, &i, &config.session, &flag_error)) {
      if (!flag_error.empty()) return usageError("generate", flag_error);
    } else if (arg == "--kv-cache-dtype" || arg == "--kv-cache") {
      const std::string* v = next();
      if (v && *v == "f32") config.kv_cache_dtype = DType::kFloat32;
      else if (v && *v == "f16") config.kv_cache_dtype = DType::kFloat16;
      else if (v && *v == "bf16") config.kv_cache_dtype = DType::kBFloat16;
      else if (v && *v == "int8") config.kv_cache_dtype = DType::kInt8;
      else if (v && *v == "fp8") config.kv_cache_dtype = kKvCacheFp8;
      else return usageError("generate", arg + " takes f32, f16, bf16, int8 or fp8");
    } else if (arg == "--no-kv-cache") {
      config.use_kv_cache = false;
    } else if (arg == "--kv-cache-tokens") {
      if (!number("--kv-cache-tokens", &value)) return kExitBadInput;
      if (value < 1) return usageError("generate", "--kv-cache-tokens must be at least 1");
      config.kv_cache_tokens = static_cast<int64_t>(value);
    } else if (!arg.empty() && arg[0] == '-') {
      return usageError("generate", "unknown option '" + arg + "'");
    } else if (engine_path.empty()) {
      engine_path = arg;
    } else {
      return usageError("generate", "more than one engine given");
    }
  }
  if (engine_path.empty()) return usageError("generate", "no engine given");
  if (prompt_ids.empty() == prompt_text.empty())
    return usageError("generate", "give exactly one of --prompt-ids and --prompt");
  std::shared_ptr<const Engine> engine;
  Status status = Engine::load(engine_path, &engine);
  if (!status.ok()) return reportError("generate", status);
  std::unique_ptr<Generator> generator;
  status = Generator::create(engine, config, &generator);
  if (!status.ok()) return reportError("generate", status);
  if (!tokenizer_path.empty()) {
    std::unique_ptr<Tokenizer> external;
    status = Tokenizer::fromFile(tokenizer_path, &external);
    if (!status.ok()) return reportError("generate", status);
    generator->setTokenizer(std::move(external));
  } else if (generator->tokenizer() && options.stop_token_ids.empty() &&
             generator->tokenizer()->eosId()) {
    // The engine's tokenizer's end-of-sequence token ends generation unless --stop-id says
    // otherwise.
    options.stop_token_ids.push_back(*generator->tokenizer()->eosId());
  }
  if (options.stop_token_ids.empty() && engine->llmConfig())  // the compiler's --eos-id
    options.stop_token_ids = engine->llmConfig()->eos_token_ids;
  const Tokenizer* tokenizer = generator->tokenizer();
  if (!prompt_text.empty()) {
    if (!tokenizer)
      return usageError("generate",
                        "--prompt needs a tokenizer: this engine has none (llmc compile "
                        "--tokenizer), give --tokenizer");
    status = tokenizer->encode(prompt_text, /*add_special_tokens=*/true, &prompt_ids);
    if (!status.ok()) return reportError("generate", status);
  }
  if (!options.stop_strings.empty() && !tokenizer)
    return usageError("generate",
                      "--stop needs a tokenizer: this engine has none (llmc compile --tokenizer)");

  std::unique_ptr<Tokenizer::StreamDecoder> stream;
  // With stop strings the text is printed once they are resolved, so a stop string never
  // shows up half-printed.
  bool text_at_end = !options.stop_strings.empty() && !print_ids;
  if (tokenizer && !print_ids && !text_at_end) {
    stream = tokenizer->streamDecoder(/*skip_special_tokens=*/true);
    std::fputs(prompt_text.c_str(), stdout);
  }
  bool first = true;
  Status stream_status;
  auto on_token = [&](int32_t id) {
    if (stream) {
      std::string text;
      stream_status = stream->step(id, &text);
      std::fputs(text.c_str(), stdout);
    } else if (!text_at_end) {
      std::printf(first ? "%d" : " %d", id);
    }
    first = false;
    std::fflush(stdout);
    return stream_status.ok();
  };
  GenerationResult result;
  if (num_beams > 0) {
    // Beam search picks its tokens at the end: print them then.
    BeamSearchOptions beam;
    beam.num_beams = num_beams;
    beam.max_new_tokens = options.max_new_tokens;
    beam.length_penalty = length_penalty;
    beam.stop_token_ids = options.stop_token_ids;
    status = generator->beamSearch(prompt_ids, beam, &result);
    if (status.ok())
      for (int32_t id : result.tokens) on_token(id);
  } else {
    status = generator->generate(prompt_ids, options, on_token, &result);
  }
  if (stream && stream_status.ok()) {
    std::string rest;
    stream_status = stream->finish(&rest);
    std::fputs(rest.c_str(), stdout);
  }
  if (text_at_end && status.ok()) std::fputs((prompt_text + result.text).c_str(), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  if (!stream_status.ok()) return reportError("generate", stream_status);
  if (!status.ok()) return reportError("generate", status);
  std::fprintf(stderr,
               "llmc generate: %zu prompt tokens, %zu new tokens; time to first token %.1f ms, "
               "decode %.1f tokens/s (%s)\n",
               prompt_ids.size(), result.tokens.size(), result.time_to_first_token_ms,
               result.decode_tokens_per_s,
               generator->usesKvCache() ? "paged KV cache" : "full recomputation");
  return kExitOk;
}

}  // namespace llmc::cli
