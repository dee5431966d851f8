// The access layer's request model: OpenAI's completion request parsed and checked against
// the served engine, and the text each choice streams (stop strings applied).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat.h"
#include "llmc/generator.h"
#include "llmc/tokenizer.h"

namespace llmc::serve {

// An error answered with OpenAI's error JSON and this HTTP status.
struct ApiError {
  ApiError(int s, std::string m, std::string p = "")
      : status(s), message(std::move(m)), param(std::move(p)) {}
  int status = 400;
  std::string message;
  std::string param;  // the request field at fault, when one is
  std::string type() const;
  std::string json() const;
};

// What a request may ask, from the engine and the server's limits.
struct ModelLimits {
  std::string model_name;
  int64_t context = 0;            // tokens per sequence, prompt included
  int64_t vocab = 0;              // ids are in [0, vocab)
  int64_t max_prompt_tokens = 0;  // 413 beyond
  int64_t max_tokens = 0;         // largest max_tokens
  int32_t max_n = 1;
  std::vector<int32_t> eos_ids;  // stop ids without ignore_eos (defaultStopIds)
  GenerationDefaults defaults;  // the engine's generation_config.json
};

struct CompletionRequest {
  bool chat = false;                          // /v1/chat/completions
  std::vector<std::vector<int32_t>> prompts;  // one or more (a batch)
  int32_t n = 1;                              // choices per prompt
  GenerationOptions options;                  // max_new_tokens, sampling, stop ids
  bool seeded = false;                        // a seed was given (else each choice draws one)
  std::vector<std::string> stop;              // stop strings
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int32_t logprobs = -1;       // -1 none, else top-N alternatives per token
  bool skip_special_tokens = true;
};

// Parses a /v1/completions body. `tokenizer` encodes text prompts.
std::optional<ApiError> parseCompletionRequest(const nlohmann::json& body,
                                               const ModelLimits& limits,
                                               const Tokenizer& tokenizer, CompletionRequest* out);
// Parses a /v1/chat/completions body: the messages rendered with `chat_template` (null: 400)
// and tokenized without adding special tokens (the template writes them). `body_text` is the
// body as received: the template sees its objects' keys in their order (`body`, a
// nlohmann::json, sorts them), as transformers' templates see a Python dict's.
std::optional<ApiError> parseChatRequest(const nlohmann::json& body, std::string_view body_text,
                                         const ModelLimits& limits, const Tokenizer& tokenizer,
                                         const ChatTemplate* chat_template, CompletionRequest* out);

// The text of one choice as its tokens arrive: decoded incrementally, with stop strings cut
// out (the text ends before the first stop string found; text that may be the start of one is
// held back until it is known not to be).
class ChoiceText {
 public:
  ChoiceText(const Tokenizer& tokenizer, const std::vector<std::string>* stop,
             bool skip_special_tokens);
  // Appends to *emit the text that token `id` makes final.
  Status feed(int32_t id, std::string* emit);
  // The rest, once the sequence has ended.
  Status finish(std::string* emit);
  bool stopped() const { return stopped_; }
  size_t tokensFed() const { return tokens_fed_; }

 private:
  void release(std::string* emit);
  std::unique_ptr<Tokenizer::StreamDecoder> decoder_;
  const std::vector<std::string>* stop_;
  std::string pending_;
  bool stopped_ = false;
  size_t tokens_fed_ = 0;
};

}  // namespace llmc::serve
