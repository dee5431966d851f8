// Fuzz target: what `llmc serve` parses from clients and from engines (serve/src/openai.cpp,
// chat.cpp). The first byte picks the parser: 0 a /v1/completions body, 1 a
// /v1/chat/completions body (rendered through a ChatML template), 2 a tokenizer_config.json,
// 3 a generation_config.json; the rest is the JSON. A request the parser accepts must be one the
// generator can run within the limits given (every property below), and its prompt's ids, fed
// back as if generated, stream through the request's stop strings.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "chat.h"
#include "fuzz_tokenizers.h"
#include "fuzz_util.h"
#include "openai.h"

namespace {

using llmc::fuzz::fail;
using namespace llmc::serve;

struct Served {
  ModelLimits limits;
  const llmc::Tokenizer* tokenizer = nullptr;
  std::unique_ptr<ChatTemplate> chat;
};

const Served& served() {
  static const Served* s = [] {
    auto* out = new Served;
    out->tokenizer = llmc::fuzz::builtinTokenizers()[0].get();  // byte-level BPE
    out->limits.model_name = "fuzz";
    out->limits.context = 96;
    out->limits.vocab = out->tokenizer->vocabSize();
    out->limits.max_prompt_tokens = 64;
    out->limits.max_tokens = 48;
    out->limits.max_n = 4;
    out->limits.eos_ids = {0};
    ChatConfig config;
    config.chat_template =
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    if (!ChatTemplate::create(config.chat_template, config, &out->chat).ok())
      fail("the ChatML template");
    return out;
  }();
  return *s;
}

// What an accepted request promises the scheduler and the generator.
void checkAccepted(const CompletionRequest& r, const ModelLimits& limits) {
  if (r.prompts.empty()) fail("accepted without a prompt");
  const int64_t new_tokens = r.options.max_new_tokens;
  if (new_tokens < 1 || new_tokens > limits.max_tokens)
    fail("max_new_tokens outside [1, max_tokens]");
  if (r.n < 1 || r.n > limits.max_n) fail("n outside [1, max_n]");
  for (const auto& ids : r.prompts) {
    if (ids.empty()) fail("an empty prompt accepted");
    if (static_cast<int64_t>(ids.size()) > limits.max_prompt_tokens)
      fail("a prompt past max_prompt_tokens");
    if (static_cast<int64_t>(ids.size()) + new_tokens > limits.context)
      fail("prompt + max_tokens past the context");
    for (int32_t id : ids)
      if (id < 0 || id >= limits.vocab) fail("a prompt id outside the vocabulary");
  }
  for (int32_t id : r.options.stop_token_ids)
    if (id < 0 || id >= limits.vocab) fail("a stop id outside the vocabulary");
  const llmc::SamplingParams& s = r.options.sampling;
  if (!(s.temperature >= 0 && s.temperature <= 100)) fail("temperature outside [0, 100]");
  if (!(s.top_p > 0 && s.top_p <= 1)) fail("top_p outside (0, 1]");
  if (!(s.min_p >= 0 && s.min_p <= 1)) fail("min_p outside [0, 1]");
  if (r.stop.size() > 16) fail("more than 16 stop strings");
  for (const std::string& stop : r.stop)
    if (stop.empty()) fail("an empty stop string");
  if (r.logprobs < -1 || r.logprobs > 20) fail("logprobs outside [-1, 20]");
}

// The first prompt's ids through a choice's text, as if the model had generated them.
void streamThroughStops(const CompletionRequest& r, const llmc::Tokenizer& tokenizer) {
  ChoiceText text(tokenizer, &r.stop, r.skip_special_tokens);
  std::string emitted;
  for (int32_t id : r.prompts[0]) {
    if (!text.feed(id, &emitted).ok() || text.stopped()) break;
  }
  (void)text.finish(&emitted);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)served();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Served& s = served();
  switch (data[0] % 4) {
    case 0:
    case 1: {
      const nlohmann::json body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (body.is_discarded()) return 0;
      CompletionRequest request;
      const std::optional<ApiError> error =
          data[0] % 4 == 0
              ? parseCompletionRequest(body, s.limits, *s.tokenizer, &request)
              : parseChatRequest(body, text, s.limits, *s.tokenizer, s.chat.get(), &request);
      if (error) {
        if (error->status < 400 || error->status > 599 || error->message.empty())
          fail("an error without a status or message");
        (void)error->json();
        return 0;
      }
      checkAccepted(request, s.limits);
      streamThroughStops(request, *s.tokenizer);
      return 0;
    }
    case 2: {
      ChatConfig config;
      if (parseTokenizerConfig(text, &config).ok() && !config.chat_template.empty()) {
        std::unique_ptr<ChatTemplate> chat;
        (void)ChatTemplate::create(config.chat_template, config, &chat);
      }
      return 0;
    }
    default: {
      GenerationDefaults defaults;
      (void)parseGenerationConfig(text, &defaults);
      return 0;
    }
  }
}
