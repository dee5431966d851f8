#include "openai.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace llmc::serve {

using nlohmann::json;

std::string ApiError::type() const {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string ApiError::json() const {
  nlohmann::json error = {{"message", message},
                          {"type", type()},
                          {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)},
                          {"code", status}};
  return nlohmann::json{{"error", error}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError{400, message, param};
}

// A number field within [min, max]; absent: *out unchanged.
std::optional<ApiError> number(const json& body, const char* name, double min, double max,
                               float* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return bad(name, std::string("'") + name + "' must be a number");
  double v = it->get<double>();
  if (!std::isfinite(v) || v < min || v > max)
    return bad(name, std::string("'") + name + "' must be in [" + json(min).dump() + ", " +
                         json(max).dump() + "], got " + it->dump());
  *out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> integer(const json& body, const char* name, int64_t min, int64_t max,
                                int64_t* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) return bad(name, std::string("'") + name + "' must be an integer");
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(max))
    return bad(name, std::string("'") + name + "' must be at most " + std::to_string(max));
  int64_t v = it->get<int64_t>();
  if (v < min || v > max)
    return bad(name, std::string("'") + name + "' must be in [" + std::to_string(min) + ", " +
                         std::to_string(max) + "], got " + std::to_string(v));
  *out = v;
  return std::nullopt;
}

std::optional<ApiError> boolean(const json& body, const char* name, bool* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return bad(name, std::string("'") + name + "' must be true or false");
  *out = it->get<bool>();
  return std::nullopt;
}

// One prompt: text or token ids.
std::optional<ApiError> onePrompt(const json& p, const ModelLimits& limits,
                                  const Tokenizer& tokenizer, std::vector<int32_t>* ids) {
  if (p.is_string()) {
    Status s = tokenizer.encode(p.get<std::string>(), true, ids);
    if (!s.ok()) return bad("prompt", "cannot tokenize the prompt: " + s.message());
  } else if (p.is_array()) {
    for (size_t i = 0; i < p.size(); ++i) {
      const json& id = p[i];
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= limits.vocab)
        return bad("prompt", "prompt token " + std::to_string(i) + " (" + id.dump() +
                                 ") is not an id in [0, " + std::to_string(limits.vocab) + ")");
      ids->push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  } else {
    return bad("prompt",
               "'prompt' must be a string, an array of strings, an array of token ids "
               "or an array of such arrays");
  }
  if (ids->empty()) return bad("prompt", "the prompt is empty");
  return std::nullopt;
}

// `model`, when given, must name the served model.
std::optional<ApiError> checkModel(const json& body, const ModelLimits& limits) {
  auto model = body.find("model");
  if (model != body.end() && !model->is_null()) {
    if (!model->is_string()) return bad("model", "'model' must be a string");
    if (model->get<std::string>() != limits.model_name)
      return ApiError{404,
                      "the model '" + model->get<std::string>() +
                          "' does not exist; this server serves '" + limits.model_name + "'",
                      "model"};
  }
  return std::nullopt;
}

std::optional<ApiError> checkPromptLength(const std::vector<int32_t>& ids,
                                          const ModelLimits& limits, const std::string& what,
                                          const char* param) {
  if (static_cast<int64_t>(ids.size()) <= limits.max_prompt_tokens) return std::nullopt;
  return ApiError{413,
                  what + " has " + std::to_string(ids.size()) +
                      " tokens; this server takes at most " +
                      std::to_string(limits.max_prompt_tokens),
                  param};
}

// The fields completions and chat completions share: lengths, sampling, stops, streaming.
std::optional<ApiError> parseCommon(const json& body, const ModelLimits& limits,
                                    CompletionRequest* out) {
  // OpenAI's defaults: 16 tokens for completions; for chat, as far as the context allows.
  int64_t max_tokens = 16;
  if (out->chat) {
    size_t longest = 0;
    for (const auto& ids : out->prompts) longest = std::max(longest, ids.size());
    max_tokens = std::min<int64_t>(
        limits.max_tokens, std::max<int64_t>(1, limits.context - static_cast<int64_t>(longest)));
  }
  if (auto e = integer(body, "max_tokens", 1, limits.max_tokens, &max_tokens)) return e;
  if (out->chat) {  // the newer name wins, as OpenAI and vLLM read it
    if (auto e = integer(body, "max_completion_tokens", 1, limits.max_tokens, &max_tokens))
      return e;
  }
  for (const auto& ids : out->prompts) {
    if (static_cast<int64_t>(ids.size()) + max_tokens > limits.context)
      return bad("max_tokens", "this model's context is " + std::to_string(limits.context) +
                                   " tokens; the prompt (" + std::to_string(ids.size()) +
                                   " tokens) plus max_tokens (" + std::to_string(max_tokens) +
                                   ") exceeds it");
  }
  out->options.max_new_tokens = static_cast<int32_t>(max_tokens);
  int64_t n = 1;
  if (auto e = integer(body, "n", 1, limits.max_n, &n)) return e;
  out->n = static_cast<int32_t>(n);

  SamplingParams& s = out->options.sampling;
  // Unset fields take the engine's generation_config.json, else OpenAI's defaults.
  s = defaultSampling(limits.defaults);
  if (auto e = number(body, "temperature", 0, 100, &s.temperature)) return e;
  if (auto e = number(body, "top_p", std::numeric_limits<float>::min(), 1, &s.top_p)) return e;
  int64_t top_k = s.top_k;
  if (auto e = integer(body, "top_k", -1, std::numeric_limits<int32_t>::max(), &top_k)) return e;
  s.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
  if (auto e = number(body, "min_p", 0, 1, &s.min_p)) return e;
  if (auto e = number(body, "presence_penalty", -2, 2, &s.presence_penalty)) return e;
  if (auto e = number(body, "frequency_penalty", -2, 2, &s.frequency_penalty)) return e;
  if (auto e = number(body, "repetition_penalty", std::numeric_limits<float>::min(), 100,
                      &s.repetition_penalty))
    return e;
  int64_t seed = 0;
  auto seed_it = body.find("seed");
  if (seed_it != body.end() && !seed_it->is_null()) {
    if (auto e = integer(body, "seed", std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max(), &seed))
      return e;
    s.seed = static_cast<uint64_t>(seed);
    out->seeded = true;
  }
  auto bias = body.find("logit_bias");
  if (bias != body.end() && !bias->is_null()) {
    if (!bias->is_object())
      return bad("logit_bias", "'logit_bias' must map token ids (as strings) to numbers");
    for (const auto& [key, value] : bias->items()) {
      char* end = nullptr;
      long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id >= limits.vocab)
        return bad("logit_bias", "logit_bias key '" + key + "' is not a token id in [0, " +
                                     std::to_string(limits.vocab) + ")");
      if (!value.is_number() || !std::isfinite(value.get<double>()) ||
          std::fabs(value.get<double>()) > 100)
        return bad("logit_bias", "logit_bias of token " + key + " must be in [-100, 100]");
      s.logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
    }
  }
  int64_t logprobs = -1;
  auto lp = body.find("logprobs");
  if (out->chat) {  // logprobs: true, top_logprobs: N
    bool wanted = false;
    if (auto e = boolean(body, "logprobs", &wanted)) return e;
    int64_t top = 0;
    if (auto e = integer(body, "top_logprobs", 0, 20, &top)) return e;
    if (!wanted && body.contains("top_logprobs") && !body["top_logprobs"].is_null())
      return bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (wanted) logprobs = top;
  } else if (lp != body.end() && !lp->is_null()) {
    if (auto e = integer(body, "logprobs", 0, 20, &logprobs)) return e;
  }
  if (logprobs >= 0) {
    out->logprobs = static_cast<int32_t>(logprobs);
    s.num_logprobs = static_cast<int32_t>(logprobs);
  }

  bool ignore_eos = false;
  if (auto e = boolean(body, "ignore_eos", &ignore_eos)) return e;
  if (!ignore_eos) {
    out->options.stop_token_ids = limits.eos_ids;
  }
  auto stop_ids = body.find("stop_token_ids");
  if (stop_ids != body.end() && !stop_ids->is_null()) {
    if (!stop_ids->is_array()) return bad("stop_token_ids", "'stop_token_ids' must be an array");
    for (const json& id : *stop_ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= limits.vocab)
        return bad("stop_token_ids", "stop token " + id.dump() + " is not an id in [0, " +
                                         std::to_string(limits.vocab) + ")");
      out->options.stop_token_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  auto stop = body.find("stop");
  if (stop != body.end() && !stop->is_null()) {
    std::vector<json> items =
        stop->is_array() ? stop->get<std::vector<json>>() : std::vector<json>{*stop};
    if (items.size() > 16) return bad("stop", "at most 16 stop strings");
    for (const json& item : items) {
      if (!item.is_string() || item.get<std::string>().empty())
        return bad("stop", "'stop' must be a non-empty string or an array of them");
      out->stop.push_back(item.get<std::string>());
    }
  }
  if (auto e = boolean(body, "stream", &out->stream)) return e;
  auto stream_options = body.find("stream_options");
  if (stream_options != body.end() && !stream_options->is_null()) {
    if (!stream_options->is_object())
      return bad("stream_options", "'stream_options' must be an object");
    if (!out->stream) return bad("stream_options", "'stream_options' needs 'stream': true");
    if (auto e = boolean(*stream_options, "include_usage", &out->include_usage)) return e;
  }
  if (auto e = boolean(body, "skip_special_tokens", &out->skip_special_tokens)) return e;
  auto user = body.find("user");
  if (user != body.end() && !user->is_null() && !user->is_string())
    return bad("user", "'user' must be a string");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parseCompletionRequest(const json& body, const ModelLimits& limits,
                                               const Tokenizer& tokenizer, CompletionRequest* out) {
  if (!body.is_object()) return bad("", "the request body must be a JSON object");
  if (auto e = checkModel(body, limits)) return e;
  static const char* const kUnsupported[] = {"echo", "suffix", "best_of", "tools", "functions"};
  for (const char* name : kUnsupported) {
    auto it = body.find(name);
    if (it != body.end() && !it->is_null() && *it != json(false) &&
        !(std::string(name) == "best_of" && *it == json(1)))
      return bad(name, std::string("'") + name + "' is not supported by this server");
  }
  auto prompt = body.find("prompt");
  if (prompt == body.end()) return bad("prompt", "'prompt' is required");
  // A batch: an array of strings or an array of arrays (an array of integers is one prompt).
  bool batch = prompt->is_array() && !prompt->empty() &&
               ((*prompt)[0].is_string() || (*prompt)[0].is_array());
  std::vector<const json*> prompts;
  if (batch) {
    for (const json& p : *prompt) prompts.push_back(&p);
  } else {
    prompts.push_back(&*prompt);
  }
  for (const json* p : prompts) {
    if (batch && !p->is_string() && !p->is_array())
      return bad("prompt", "every prompt of a batch must be a string or an array of token ids");
    std::vector<int32_t> ids;
    if (auto e = onePrompt(*p, limits, tokenizer, &ids)) return e;
    if (auto e = checkPromptLength(ids, limits, "the prompt", "prompt")) return e;
    out->prompts.push_back(std::move(ids));
  }

  return parseCommon(body, limits, out);
}

std::optional<ApiError> parseChatRequest(const json& body, std::string_view body_text,
                                         const ModelLimits& limits, const Tokenizer& tokenizer,
                                         const ChatTemplate* chat_template,
                                         CompletionRequest* out) {
  if (!body.is_object()) return bad("", "the request body must be a JSON object");
  out->chat = true;
  if (auto e = checkModel(body, limits)) return e;
  if (!chat_template)
    return bad("messages",
               "this engine has no chat template: compile it with --tokenizer-config "
               "tokenizer_config.json, or serve it with --chat-template FILE; "
               "/v1/completions takes plain prompts");
  auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array() || messages->empty())
    return bad("messages", "'messages' must be a non-empty array");
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return bad("messages", where + " must be an object with a string 'role'");
    auto content = m.find("content");
    if (content == m.end() || content->is_null() || content->is_string()) continue;
    if (!content->is_array())
      return bad("messages", where + ".content must be a string or an array of parts");
    for (const json& part : *content) {
      auto type = part.is_object() ? part.find("type") : part.end();
      if (!part.is_object() || type == part.end() || !type->is_string() || *type != "text" ||
          !part.contains("text") || !part["text"].is_string())
        return bad("messages", where +
                                   ".content: only text parts ({\"type\": \"text\", "
                                   "\"text\": ...}) are supported");
    }
  }
  for (const char* unsupported : {"continue_final_message", "echo"}) {
    auto it = body.find(unsupported);
    if (it != body.end() && !it->is_null() && *it != json(false))
      return bad(unsupported, std::string("'") + unsupported + "' is not supported by this server");
  }
  bool add_generation_prompt = true;
  if (auto e = boolean(body, "add_generation_prompt", &add_generation_prompt)) return e;
  // What the template sees: the messages as given, tools, and chat_template_kwargs, read from
  // the body's text so that objects keep their keys' order (a tool's parameters are printed
  // in it).
  jinja::Value given, extra = jinja::Value::dict();
  if (Status read = jinja::valueFromJson(body_text, &given); !read.ok())
    return bad("messages", "cannot read the request for the chat template: " + read.message());
  const jinja::Value* messages_given = given.find("messages");
  if (!messages_given || !messages_given->isList())  // `body` is this text, parsed
    return bad("messages", "'messages' must be a non-empty array");
  const jinja::Value messages_value = *messages_given;
  auto kwargs = body.find("chat_template_kwargs");
  if (kwargs != body.end() && !kwargs->is_null()) {
    if (!kwargs->is_object())
      return bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    extra = jinja::Value::dict(given.find("chat_template_kwargs")->asDict());  // distinct keys
  }
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return bad("tools", "'tools' must be an array");
    if (!extra.find("tools")) extra.setKey("tools", *given.find("tools"));  // kwargs' wins
  }
  std::string text;
  Status status = chat_template->render(messages_value, add_generation_prompt, extra, &text);
  if (!status.ok()) return bad("messages", status.message());
  std::vector<int32_t> ids;
  status = tokenizer.encode(text, false, &ids);
  if (!status.ok())
    return bad("messages", "cannot tokenize the rendered conversation: " + status.message());
  if (ids.empty()) return bad("messages", "the rendered conversation is empty");
  if (auto e = checkPromptLength(ids, limits, "the conversation", "messages")) return e;
  out->prompts.push_back(std::move(ids));
  return parseCommon(body, limits, out);
}

ChoiceText::ChoiceText(const Tokenizer& tokenizer, const std::vector<std::string>* stop,
                       bool skip_special_tokens)
    : decoder_(tokenizer.streamDecoder(skip_special_tokens)), stop_(stop) {}

void ChoiceText::release(std::string* emit) {
  // The earliest stop string ends the text.
  size_t cut = std::string::npos;
  for (const std::string& s : *stop_) cut = std::min(cut, pending_.find(s));
  if (cut != std::string::npos) {
    emit->append(pending_, 0, cut);
    pending_.clear();
    stopped_ = true;
    return;
  }
  // Hold back the longest tail that is the start of a stop string.
  size_t hold = 0;
  for (const std::string& s : *stop_) {
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  emit->append(pending_, 0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
}

Status ChoiceText::feed(int32_t id, std::string* emit) {
  if (stopped_) return okStatus();
  ++tokens_fed_;
  if (!decoder_) return Status(StatusCode::kResourceExhausted, "out of memory");
  LLMC_RETURN_IF_ERROR(decoder_->step(id, &pending_));
  release(emit);
  return okStatus();
}

Status ChoiceText::finish(std::string* emit) {
  if (stopped_ || !decoder_) return okStatus();
  LLMC_RETURN_IF_ERROR(decoder_->finish(&pending_));
  release(emit);
  if (!stopped_) {
    emit->append(pending_);
    pending_.clear();
  }
  return okStatus();
}

}  // namespace llmc::serve
