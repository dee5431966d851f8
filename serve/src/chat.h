// What a Hugging Face model ships for chat, as llmc stores it in an engine (`llmc compile
// --tokenizer-config tokenizer_config.json --generation-config generation_config.json`) and
// `llmc serve` uses it: the chat template(s), the special tokens the template refers to, and
// the generation defaults a request falls back on.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jinja.h"
#include "llmc/sampling.h"
#include "llmc/status.h"

namespace llmc::serve {

struct ChatConfig {
  // The default template's source ("" when the config has none) and the named ones
  // (tokenizer_config.json's `chat_template` may be a list of {name, template}).
  std::string chat_template;
  std::map<std::string, std::string> named_templates;
  // bos_token, eos_token, unk_token, pad_token ... as strings (AddedToken objects unwrapped).
  std::map<std::string, std::string> special_tokens;
};

// Parses a tokenizer_config.json and every template in it; an error names what is wrong (a
// template that does not parse names its line).
Status parseTokenizerConfig(std::string_view json, ChatConfig* out);

// generation_config.json's sampling defaults (absent fields stay unset).
struct GenerationDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int32_t> top_k;
  std::vector<int32_t> eos_token_ids;
};
Status parseGenerationConfig(std::string_view json, GenerationDefaults* out);
// A request's sampling before its own fields: the defaults, else OpenAI's (temperature 1).
SamplingParams defaultSampling(const GenerationDefaults& defaults);
// The ids a request stops at unless it sets ignore_eos: the engine's EOS ids (none: the
// tokenizer's EOS token), then the generation config's.
std::vector<int32_t> defaultStopIds(const std::vector<int32_t>& engine_eos,
                                    std::optional<int32_t> tokenizer_eos,
                                    const GenerationDefaults& defaults);

// A parsed template with the config's special tokens.
class ChatTemplate {
 public:
  static Status create(const std::string& source, const ChatConfig& config,
                       std::unique_ptr<ChatTemplate>* out);
  // Renders `messages` (a list of {role, content, ...}); `extra` adds or overrides variables
  // (tools, chat_template_kwargs).
  Status render(const jinja::Value& messages, bool add_generation_prompt, const jinja::Value& extra,
                std::string* out) const;

 private:
  std::unique_ptr<jinja::Template> template_;
  std::map<std::string, std::string> special_tokens_;
};

}  // namespace llmc::serve
