#include "chat.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace llmc::serve {

using nlohmann::json;

Status parseTokenizerConfig(std::string_view text, ChatConfig* out) {
  json config = json::parse(text, nullptr, false);
  if (config.is_discarded() || !config.is_object())
    return invalidArgument("the tokenizer config is not a JSON object");
  auto tmpl = config.find("chat_template");
  if (tmpl != config.end() && !tmpl->is_null()) {
    if (tmpl->is_string()) {
      out->chat_template = tmpl->get<std::string>();
    } else if (tmpl->is_array()) {
      for (const json& entry : *tmpl) {
        if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
            !entry.contains("template") || !entry["template"].is_string())
          return invalidArgument("chat_template: a list entry is not {\"name\", \"template\"}");
        std::string name = entry["name"].get<std::string>();
        if (name == "default")
          out->chat_template = entry["template"].get<std::string>();
        else
          out->named_templates[name] = entry["template"].get<std::string>();
      }
    } else {
      return invalidArgument("chat_template must be a string or a list of named templates");
    }
  }
  for (const auto& [key, value] : config.items()) {
    if (key.size() < 6 || key.compare(key.size() - 6, 6, "_token") != 0) continue;
    if (value.is_string())
      out->special_tokens[key] = value.get<std::string>();
    else if (value.is_object() && value.contains("content") && value["content"].is_string())
      out->special_tokens[key] = value["content"].get<std::string>();
  }
  // Every template must parse here, not at the first request.
  std::vector<std::pair<std::string, const std::string*>> all;
  if (!out->chat_template.empty()) all.emplace_back("chat_template", &out->chat_template);
  for (const auto& [name, source] : out->named_templates)
    all.emplace_back("chat_template '" + name + "'", &source);
  for (const auto& [what, source] : all) {
    std::unique_ptr<jinja::Template> parsed;
    Status status = jinja::Template::parse(*source, &parsed);
    if (!status.ok()) return status.withContext(what);
  }
  return okStatus();
}

SamplingParams defaultSampling(const GenerationDefaults& d) {
  SamplingParams s;
  s.temperature = d.temperature.value_or(1.0f);
  s.top_p = d.top_p.value_or(1.0f);
  s.top_k = d.top_k.value_or(0);
  s.min_p = d.min_p.value_or(0.0f);
  s.repetition_penalty = d.repetition_penalty.value_or(1.0f);
  return s;
}

std::vector<int32_t> defaultStopIds(const std::vector<int32_t>& engine_eos,
                                    std::optional<int32_t> tokenizer_eos,
                                    const GenerationDefaults& defaults) {
  std::vector<int32_t> ids = engine_eos;
  if (ids.empty() && tokenizer_eos) ids.push_back(*tokenizer_eos);
  for (int32_t id : defaults.eos_token_ids)
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  return ids;
}

Status parseGenerationConfig(std::string_view text, GenerationDefaults* out) {
  json config = json::parse(text, nullptr, false);
  if (config.is_discarded() || !config.is_object())
    return invalidArgument("the generation config is not a JSON object");
  auto number = [&](const char* key, double min, double max,
                    std::optional<float>* field) -> Status {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) return okStatus();
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < min ||
        it->get<double>() > max)
      return invalidArgument(std::string(key) + " must be a number in [" + std::to_string(min) +
                             ", " + std::to_string(max) + "]");
    *field = it->get<float>();
    return okStatus();
  };
  // do_sample false (transformers' default) means greedy whatever the temperature says.
  auto sample = config.find("do_sample");
  if (sample != config.end() && !sample->is_null() && !sample->is_boolean())
    return invalidArgument("do_sample must be true or false");
  bool do_sample = sample != config.end() && sample->is_boolean() && sample->get<bool>();
  LLMC_RETURN_IF_ERROR(number("temperature", 0, 100, &out->temperature));
  LLMC_RETURN_IF_ERROR(number("top_p", 0, 1, &out->top_p));
  LLMC_RETURN_IF_ERROR(number("min_p", 0, 1, &out->min_p));
  LLMC_RETURN_IF_ERROR(number("repetition_penalty", 0, 100, &out->repetition_penalty));
  if (!do_sample) out->temperature = 0.0f;
  auto top_k = config.find("top_k");
  if (top_k != config.end() && !top_k->is_null()) {
    if (!top_k->is_number_integer() || top_k->get<int64_t>() < 0 ||
        top_k->get<int64_t>() > (1 << 30))
      return invalidArgument("top_k must be a non-negative integer");
    out->top_k = static_cast<int32_t>(top_k->get<int64_t>());
  }
  auto eos = config.find("eos_token_id");
  if (eos != config.end() && !eos->is_null()) {
    std::vector<json> ids =
        eos->is_array() ? eos->get<std::vector<json>>() : std::vector<json>{*eos};
    for (const json& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 30))
        return invalidArgument("eos_token_id must be a token id or a list of them");
      out->eos_token_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  return okStatus();
}

Status ChatTemplate::create(const std::string& source, const ChatConfig& config,
                            std::unique_ptr<ChatTemplate>* out) {
  auto t = std::unique_ptr<ChatTemplate>(new ChatTemplate());
  LLMC_RETURN_IF_ERROR(jinja::Template::parse(source, &t->template_));
  t->special_tokens_ = config.special_tokens;
  *out = std::move(t);
  return okStatus();
}

Status ChatTemplate::render(const jinja::Value& messages, bool add_generation_prompt,
                            const jinja::Value& extra, std::string* out) const {
  // The request's extra variables first: they cannot replace the checked messages, the
  // generation prompt flag or the special tokens.
  jinja::Value context = jinja::Value::dict(extra.isDict() ? extra.asDict() : jinja::Value::Dict());
  for (const auto& [name, token] : special_tokens_) context.setKey(name, jinja::Value(token));
  context.setKey("messages", messages);
  context.setKey("add_generation_prompt", jinja::Value(add_generation_prompt));
  return template_->render(context, out);
}

}  // namespace llmc::serve
