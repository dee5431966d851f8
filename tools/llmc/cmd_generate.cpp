// llmc generate: stream tokens (or text, with a tokenizer) from a decoder engine.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cli.h"
#include "llmc/generator.h"
#include "llmc/tokenizer.h"

namespace llmc::cli {

namespace {

// Negative ids parse here and are refused with the vocabulary's bounds by the generator.
bool parseIds(const std::string& text, std::vector<int32_t>* ids) {
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t comma = text.find(',', begin);
    std::string_view part = std::string_view(text).substr(
        begin, comma == std::string::npos ? std::string::npos : comma - begin);
    int64_t value = 0;
    if (!parseInteger(part, -kInt32Max - 1, kInt32Max, &value)) return false;
    ids->push_back(static_cast<int32_t>(value));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return !ids->empty();
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
    Status value;  // of a numeric option
    if (arg == "--prompt-ids") {
      const std::string* v = next();
      if (!v || !parseIds(*v, &prompt_ids))
        return usageError("generate",
                          "--prompt-ids takes comma-separated integer ids, e.g. 1,2,3, got '" +
                              (v ? *v : std::string()) + "'");
    } else if (arg == "--prompt") {
      const std::string* v = next();
      if (!v) return usageError("generate", "--prompt needs text");
      prompt_text = *v;
    } else if (arg == "--tokenizer") {
      const std::string* v = next();
      if (!v) return usageError("generate", "--tokenizer needs a tokenizer.json");
      tokenizer_path = *v;
    } else if (arg == "--max-new-tokens") {
      value = intOption(args, &i, 0, kInt32Max, &options.max_new_tokens);
    } else if (arg == "--temperature") {  // 0: greedy
      value = floatOption(args, &i, 0, kUnbounded, &options.sampling.temperature);
    } else if (arg == "--top-k") {  // 0: off
      value = intOption(args, &i, 0, kInt32Max, &options.sampling.top_k);
    } else if (arg == "--top-p") {  // the sampler refuses 0
      value = floatOption(args, &i, 0, 1, &options.sampling.top_p);
    } else if (arg == "--min-p") {
      value = floatOption(args, &i, 0, 1, &options.sampling.min_p);
    } else if (arg == "--repetition-penalty") {  // the sampler refuses 0
      value = floatOption(args, &i, 0, kUnbounded, &options.sampling.repetition_penalty);
    } else if (arg == "--seed") {
      value = intOption(args, &i, 0, kInt64Max, &options.sampling.seed);
    } else if (arg == "--stop") {
      const std::string* v = next();
      if (!v || v->empty()) return usageError("generate", "--stop needs a non-empty string");
      options.stop_strings.push_back(*v);
    } else if (arg == "--stop-id") {
      int32_t id = 0;
      value = intOption(args, &i, 0, kInt32Max, &id);
      options.stop_token_ids.push_back(id);
    } else if (arg == "--beam") {
      value = intOption(args, &i, 1, kInt32Max, &num_beams);
    } else if (arg == "--length-penalty") {
      value = floatOption(args, &i, -kUnbounded, kUnbounded, &length_penalty);
    } else if (arg == "--print-ids") {
      print_ids = true;
    } else if (std::string flag_error; parseSessionFlag(args, &i, &config.session, &flag_error)) {
      if (!flag_error.empty()) return usageError("generate", flag_error);
    } else if (arg == "--kv-cache-dtype" || arg == "--kv-cache") {
      value = kvCacheDtypeOption(args, &i, &config.kv_cache_dtype);
    } else if (arg == "--kv-prefault") {
      config.kv_cache_prefault = true;
    } else if (arg == "--no-kv-cache") {
      config.use_kv_cache = false;
    } else if (arg == "--kv-cache-tokens") {  // bounded so that rounding to blocks cannot overflow
      value = intOption(args, &i, 1, int64_t{1} << 40, &config.kv_cache_tokens);
    } else if (!arg.empty() && arg[0] == '-') {
      return usageError("generate", "unknown option '" + arg + "'");
    } else if (engine_path.empty()) {
      engine_path = arg;
    } else {
      return usageError("generate", "more than one engine given");
    }
    if (!value.ok()) return usageError("generate", value);
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
    status = loadTokenizerFile(tokenizer_path, &external);
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
  if (tokenizer && !print_ids && !text_at_end)
    stream = tokenizer->streamDecoder(/*skip_special_tokens=*/true);
  // The prompt is echoed with the first token, so that a prompt the generator refuses (too
  // long, an id the model has no row for) leaves nothing on stdout but the error.
  bool prompt_shown = false;
  auto showPrompt = [&] {
    if (stream && !prompt_shown) std::fputs(prompt_text.c_str(), stdout);
    prompt_shown = true;
  };
  bool first = true;
  Status stream_status;
  auto on_token = [&](int32_t id) {
    showPrompt();
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
  if (!status.ok()) {
    if (prompt_shown) std::fputs("\n", stdout);  // ends the text streamed before the error
    return reportError("generate", status);
  }
  showPrompt();
  if (stream && stream_status.ok()) {
    std::string rest;
    stream_status = stream->finish(&rest);
    std::fputs(rest.c_str(), stdout);
  }
  if (text_at_end) std::fputs((prompt_text + result.text).c_str(), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  if (!stream_status.ok()) return reportError("generate", stream_status);
  std::fprintf(stderr,
               "llmc generate: %zu prompt tokens, %zu new tokens; time to first token %.1f ms, "
               "decode %.1f tokens/s (%s)\n",
               prompt_ids.size(), result.tokens.size(), result.time_to_first_token_ms,
               result.decode_tokens_per_s,
               generator->usesKvCache() ? "paged KV cache" : "full recomputation");
  return kExitOk;
}

}  // namespace llmc::cli
