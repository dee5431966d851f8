// llmc::serve: the reference HTTP service over the runtime (`llmc serve`), OpenAI-compatible.
// Layers (docs/serving.md): access (this API, HTTP, routes, auth, limits), compute (one
// scheduler thread over a BatchGenerator), storage (the batch generator's paged KV cache and
// prefix cache), monitoring (Prometheus metrics, the output-drift monitor).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "llmc/batch_generator.h"
#include "llmc/status.h"

namespace llmc::serve {

struct ServerOptions {
  std::string engine_path;
  std::string tokenizer_path;  // a tokenizer.json; empty: the engine's own
  std::string model_name;      // the `model` clients name; empty: the engine file's stem
  std::string chat_template_path;  // a Jinja chat template replacing the engine's
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port (the one chosen is printed)
  std::string api_key;  // empty: no authentication
  int io_threads = 2;   // threads serving HTTP (the engine runs on its own thread)

  // Limits: beyond them a request is refused with its status, never queued.
  int64_t max_body_bytes = 1 << 20;  // 413
  int64_t max_prompt_tokens = 0;     // 413; 0: the engine's context
  int64_t max_tokens = 0;            // largest max_tokens a request may ask (400); 0: context
  int32_t max_n = 8;                 // largest n (400)
  int32_t max_connections = 256;     // beyond: 503 and the connection closes
  int32_t max_queue = 256;           // requests waiting for the batch; beyond: 429
  double read_timeout_s = 30;        // a request's headers and body, and an idle keep-alive
  double write_timeout_s = 30;       // one write to a client that does not read
  double shutdown_grace_s = 30;      // SIGTERM: in-flight requests may finish within this

  BatchConfig batch;  // the scheduler's token budget, running requests, KV cache, backend

  // The output-drift monitor, on when the engine holds a drift baseline (llmc compile
  // --drift-text): scores over the most recent drift_window_tokens counted tokens (the first
  // few of each response), none while fewer than drift_min_tokens; a PSI above
  // drift_threshold logs a warning and raises the alert gauge until it falls under 0.8 x the
  // threshold.
  int64_t drift_window_tokens = 2048;
  int64_t drift_min_tokens = 512;
  double drift_threshold = 0.25;
};

// Binds, loads the engine (GET /health answers 503 until it is loaded), serves until SIGINT or
// SIGTERM, then stops accepting, lets in-flight requests finish within shutdown_grace_s,
// cancels the rest, and returns. `on_listening` is called with the bound port.
Status runServer(const ServerOptions& options, const std::function<void(int port)>& on_listening);

}  // namespace llmc::serve
