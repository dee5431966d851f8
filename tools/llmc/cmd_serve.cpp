// llmc serve: the OpenAI-compatible HTTP service (serve/, docs/serving.md).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "cli.h"
#include "llmc/serve/server.h"

namespace llmc::cli {

namespace {

// The first line of a file (an API key), without its line ending.
bool firstLine(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in || !std::getline(in, *out)) return false;
  while (!out->empty() && (out->back() == '\r' || out->back() == '\n')) out->pop_back();
  return true;
}

}  // namespace

int runServe(const std::vector<std::string>& args) {
  serve::ServerOptions options;
  if (const char* key = std::getenv("LLMC_API_KEY")) options.api_key = key;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto next = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    Status value;
    std::string session_error;
    if (parseSessionFlag(args, &i, &options.batch.session, &session_error)) {
      if (!session_error.empty()) return usageError("serve", session_error);
    } else if (arg == "--host") {
      const std::string* v = next();
      if (!v) return usageError("serve", "--host needs an address");
      options.host = *v;
    } else if (arg == "--port") {
      value = intOption(args, &i, 0, 65535, &options.port);
    } else if (arg == "--tokenizer") {
      const std::string* v = next();
      if (!v) return usageError("serve", "--tokenizer needs a tokenizer.json");
      options.tokenizer_path = *v;
    } else if (arg == "--chat-template") {
      const std::string* v = next();
      if (!v) return usageError("serve", "--chat-template needs a Jinja template file");
      options.chat_template_path = *v;
    } else if (arg == "--model-name") {
      const std::string* v = next();
      if (!v || v->empty()) return usageError("serve", "--model-name needs a name");
      options.model_name = *v;
    } else if (arg == "--api-key") {
      const std::string* v = next();
      if (!v || v->empty()) return usageError("serve", "--api-key needs a key");
      options.api_key = *v;
    } else if (arg == "--api-key-file") {
      const std::string* v = next();
      if (!v || !firstLine(*v, &options.api_key) || options.api_key.empty())
        return usageError(
            "serve", "--api-key-file: cannot read a key from '" + (v ? *v : std::string()) + "'");
    } else if (arg == "--io-threads") {
      value = intOption(args, &i, 1, 64, &options.io_threads);
    } else if (arg == "--max-body-bytes") {
      value = intOption(args, &i, 1024, int64_t{1} << 30, &options.max_body_bytes);
    } else if (arg == "--max-prompt-tokens") {
      value = intOption(args, &i, 1, kInt32Max, &options.max_prompt_tokens);
    } else if (arg == "--max-tokens") {
      value = intOption(args, &i, 1, kInt32Max, &options.max_tokens);
    } else if (arg == "--max-n") {
      value = intOption(args, &i, 1, 128, &options.max_n);
    } else if (arg == "--max-connections") {
      value = intOption(args, &i, 1, 65536, &options.max_connections);
    } else if (arg == "--max-queue") {
      value = intOption(args, &i, 1, 1 << 20, &options.max_queue);
    } else if (arg == "--read-timeout") {
      value = floatOption(args, &i, 0.1, 3600, &options.read_timeout_s);
    } else if (arg == "--write-timeout") {
      value = floatOption(args, &i, 0.1, 3600, &options.write_timeout_s);
    } else if (arg == "--shutdown-grace") {
      value = floatOption(args, &i, 0, 3600, &options.shutdown_grace_s);
    } else if (arg == "--max-step-tokens") {
      value = intOption(args, &i, 1, 1 << 20, &options.batch.max_step_tokens);
    } else if (arg == "--max-running") {
      value = intOption(args, &i, 1, 4096, &options.batch.max_running);
    } else if (arg == "--kv-cache-tokens") {
      value = intOption(args, &i, 1, int64_t{1} << 32, &options.batch.kv_cache_tokens);
    } else if (arg == "--kv-cache-dtype") {
      value = kvCacheDtypeOption(args, &i, &options.batch.kv_cache_dtype);
    } else if (arg == "--kv-prefault") {
      options.batch.kv_cache_prefault = true;
    } else if (arg == "--drift-window") {
      value = intOption(args, &i, 1, int64_t{1} << 24, &options.drift_window_tokens);
    } else if (arg == "--drift-min-tokens") {
      value = intOption(args, &i, 1, int64_t{1} << 24, &options.drift_min_tokens);
    } else if (arg == "--drift-threshold") {
      value = floatOption(args, &i, 0, 100, &options.drift_threshold);
    } else if (!arg.empty() && arg[0] == '-') {
      return usageError("serve", "unknown option '" + arg + "'");
    } else if (options.engine_path.empty()) {
      options.engine_path = arg;
    } else {
      return usageError("serve",
                        "one engine only, got '" + options.engine_path + "' and '" + arg + "'");
    }
    if (!value.ok()) return usageError("serve", value);
  }
  if (options.engine_path.empty()) return usageError("serve", "needs an engine file");
  if (options.drift_min_tokens > options.drift_window_tokens)
    return usageError("serve", "--drift-min-tokens " + std::to_string(options.drift_min_tokens) +
                                   " exceeds --drift-window " +
                                   std::to_string(options.drift_window_tokens));
  Status status = serve::runServer(options, [&](int port) {
    std::printf("llmc serve: listening on http://%s:%d\n", options.host.c_str(), port);
    std::fflush(stdout);
  });
  if (!status.ok()) return reportError("serve", status);
  std::printf("llmc serve: stopped\n");
  return kExitOk;
}

}  // namespace llmc::cli
