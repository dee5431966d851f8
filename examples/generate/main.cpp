// A minimal C++ service loop around the llmc runtime: load an engine once, then serve
// requests with a Generator, streaming each token as it comes and cancelling a request that
// runs over its token budget. Only the public API (llmc/*.h) is used.
//
//   llmc_example_generate ENGINE PROMPT_IDS [MAX_NEW_TOKENS] [CANCEL_AFTER]
//   e.g. llmc_example_generate model.engine 1,2,3 16 8
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llmc/engine.h"
#include "llmc/generator.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ENGINE PROMPT_IDS [MAX_NEW_TOKENS] [CANCEL_AFTER]\n", argv[0]);
    return 2;
  }
  std::vector<int32_t> prompt;
  for (char* p = argv[2]; *p;) {
    prompt.push_back(static_cast<int32_t>(std::strtol(p, &p, 10)));
    if (*p == ',') ++p;
  }
  int max_new_tokens = argc > 3 ? std::atoi(argv[3]) : 16;
  int cancel_after = argc > 4 ? std::atoi(argv[4]) : -1;

  // The engine is immutable and shareable: load it once per process.
  std::shared_ptr<const llmc::Engine> engine;
  llmc::Status status = llmc::Engine::load(argv[1], &engine);
  if (!status.ok()) {
    std::fprintf(stderr, "load failed: %s\n", status.toString().c_str());
    return 1;
  }
  // One Generator per worker thread; it owns its session (arena).
  std::unique_ptr<llmc::Generator> generator;
  status = llmc::Generator::create(engine, &generator);
  if (!status.ok()) {
    std::fprintf(stderr, "not a decoder engine: %s\n", status.toString().c_str());
    return 1;
  }

  // Request 1: stream tokens; the callback cancels once the budget is spent.
  llmc::GenerationOptions options;
  options.max_new_tokens = max_new_tokens;
  int streamed = 0;
  llmc::GenerationResult result;
  status = generator->generate(
      prompt, options,
      [&](int32_t token) {
        std::printf("%s%d", streamed ? " " : "", token);
        std::fflush(stdout);
        return cancel_after < 0 || ++streamed < cancel_after;
      },
      &result);
  std::printf("\n");
  if (status.code() == llmc::StatusCode::kCancelled) {
    std::printf("request 1 cancelled after %zu tokens\n", result.tokens.size());
  } else if (!status.ok()) {
    std::fprintf(stderr, "request 1 failed: %s\n", status.toString().c_str());
    return 1;
  } else {
    std::printf("request 1 done: %zu tokens, %.1f tokens/s\n", result.tokens.size(),
                result.decode_tokens_per_s);
  }

  // Request 2 on the same generator: errors and cancellations leave it usable.
  status = generator->generate(prompt, options, nullptr, &result);
  if (!status.ok()) {
    std::fprintf(stderr, "request 2 failed: %s\n", status.toString().c_str());
    return 1;
  }
  std::printf("request 2 done: %zu tokens\n", result.tokens.size());
  return 0;
}
