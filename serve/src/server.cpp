// The access layer: HTTP/1.1 on Boost.Beast (asynchronous, on a few I/O threads), the
// OpenAI-compatible routes, authentication and limits. Each connection is a Session on its own
// strand; a completion's tokens arrive from the scheduler thread through its jobs' `notify`,
// which posts the session's pump() onto that strand.
#include "llmc/serve/server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "chat.h"
#include "llmc/engine.h"
#include "llmc/tokenizer.h"
#include "metrics.h"
#include "openai.h"
#include "scheduler.h"

namespace llmc::serve {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using nlohmann::json;

namespace {

std::string dumpJson(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

constexpr int kMaxJsonNesting = 64;

// Compares in time that depends on the lengths only, not on where the strings differ.
bool constantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

// What every session shares.
struct ServerState {
  ServerOptions options;
  Metrics metrics;
  std::atomic<bool> ready{false};
  std::atomic<bool> shutting_down{false};
  std::shared_ptr<const Engine> engine;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<DriftMonitor> drift;  // null: the engine has no drift baseline
  std::unique_ptr<Scheduler> scheduler;
  ModelLimits limits;
  std::unique_ptr<ChatTemplate> chat_template;  // null: the engine has none
  int64_t created = 0;
  std::atomic<int> connections{0};
  std::atomic<uint64_t> next_id{1};
  std::mt19937_64 seeds{std::random_device{}()};
  std::mutex seeds_mu;

  explicit ServerState(const ServerOptions& o, std::string name)
      : options(o), metrics(std::move(name)) {}
  uint64_t randomSeed() {
    std::lock_guard<std::mutex> lock(seeds_mu);
    return seeds();
  }
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, ServerState& state) : stream_(std::move(socket)), s_(state) {
    s_.metrics.set("llmc:http_connections", ++s_.connections);
  }
  ~Session() { s_.metrics.set("llmc:http_connections", --s_.connections); }

  void start(bool over_limit) {
    net::dispatch(stream_.get_executor(), [self = shared_from_this(), over_limit] {
      if (over_limit) {
        self->keep_alive_ = false;
        self->sendError(ApiError{503, "too many connections; try again later"}, true);
      } else {
        self->readRequest();
      }
    });
  }

 private:
  // ---- Reading requests --------------------------------------------------------------

  void readRequest() {
    parser_.emplace();
    parser_->body_limit(static_cast<uint64_t>(s_.options.max_body_bytes));
    parser_->header_limit(16 * 1024);
    stream_.expires_after(seconds(s_.options.read_timeout_s));
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->onRead(ec); });
  }

  void onRead(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted)
      return close();
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      return sendError(ApiError{413, "the request body is over the limit of " +
                                         std::to_string(s_.options.max_body_bytes) + " bytes"},
                       true);
    }
    if (ec == http::error::header_limit) {
      keep_alive_ = false;
      return sendError(ApiError{431, "the request's headers are over the limit of 16 KiB"}, true);
    }
    if (ec) {
      keep_alive_ = false;
      return sendError(ApiError{400, "malformed HTTP request: " + ec.message()}, true);
    }
    request_ = parser_->release();
    keep_alive_ = request_.keep_alive();
    stream_.expires_never();
    // No exception may leave a handler (it would end the I/O thread and the process): one that
    // escapes the request's own checks is answered 500.
    try {
      route();
    } catch (const std::exception& e) {
      if (!generating_ && !writing_)
        sendError(ApiError{500, std::string("internal error: ") + e.what()});
    }
  }

  // ---- Routes --------------------------------------------------------------------------

  void route() {
    const std::string target(request_.target());
    const std::string path = target.substr(0, target.find('?'));
    const auto method = request_.method();
    auto only = [&](http::verb verb) {
      if (method == verb) return true;
      sendError(ApiError{405, "use " + std::string(http::to_string(verb)) + " for " + path});
      return false;
    };
    if (path == "/health") {
      if (!only(http::verb::get)) return;
      if (!s_.ready) return sendError(ApiError{503, "the engine is loading"});
      if (s_.shutting_down) return sendError(ApiError{503, "the server is shutting down"});
      return sendJson(200, json{{"status", "ok"}});
    }
    if (path == "/metrics") {
      if (!only(http::verb::get)) return;
      return send(200, "text/plain; version=0.0.4; charset=utf-8", s_.metrics.render());
    }
    const bool guarded = path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
    if (!guarded) return sendError(ApiError{404, "no route " + path});
    if (!s_.options.api_key.empty()) {
      auto auth = request_.find(http::field::authorization);
      std::string given = auth == request_.end() ? "" : std::string(auth->value());
      if (!constantTimeEquals(given, "Bearer " + s_.options.api_key))
        return sendError(ApiError{401, "a valid API key is required (Authorization: Bearer KEY)"});
    }
    if (!s_.ready) return sendError(ApiError{503, "the engine is loading"});
    if (path == "/v1/models") {
      if (!only(http::verb::get)) return;
      json model = {{"id", s_.limits.model_name},     {"object", "model"},
                    {"created", s_.created},          {"owned_by", "llmc"},
                    {"root", s_.options.engine_path}, {"max_model_len", s_.limits.context}};
      return sendJson(200, json{{"object", "list"}, {"data", json::array({model})}});
    }
    if (path != "/v1/completions" && path != "/v1/chat/completions" && path != "/tokenize" &&
        path != "/detokenize")
      return sendError(ApiError{404, "no route " + path});
    if (!only(http::verb::post)) return;
    // Nesting is bounded before parsing: dumping or converting a deeply nested value recurses.
    if (jinja::jsonNesting(request_.body()) > kMaxJsonNesting)
      return sendError(ApiError{400, "the request body nests arrays or objects more than " +
                                         std::to_string(kMaxJsonNesting) + " deep"});
    json body = json::parse(request_.body(), nullptr, false);
    if (body.is_discarded()) return sendError(ApiError{400, "the request body is not valid JSON"});
    if (path == "/tokenize") return tokenize(body);
    if (path == "/detokenize") return detokenize(body);
    return complete(body, request_.body(), path == "/v1/chat/completions");
  }

  void tokenize(const json& body) {
    auto prompt = body.find("prompt");
    if (!body.is_object() || prompt == body.end() || !prompt->is_string())
      return sendError(ApiError{400, "'prompt' must be a string", "prompt"});
    bool add_special = true;
    auto add = body.find("add_special_tokens");
    if (add != body.end() && add->is_boolean()) add_special = add->get<bool>();
    std::vector<int32_t> ids;
    Status status = s_.tokenizer->encode(prompt->get<std::string>(), add_special, &ids);
    if (!status.ok()) return sendError(ApiError{400, status.message(), "prompt"});
    sendJson(200,
             json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", s_.limits.context}});
  }

  void detokenize(const json& body) {
    auto tokens = body.find("tokens");
    if (!body.is_object() || tokens == body.end() || !tokens->is_array())
      return sendError(ApiError{400, "'tokens' must be an array of token ids", "tokens"});
    std::vector<int32_t> ids;
    for (const json& id : *tokens) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= s_.limits.vocab)
        return sendError(ApiError{
            400,
            "token " + id.dump() + " is not an id in [0, " + std::to_string(s_.limits.vocab) + ")",
            "tokens"});
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    std::string text;
    Status status = s_.tokenizer->decode(ids, false, &text);
    if (!status.ok()) return sendError(ApiError{400, status.message(), "tokens"});
    sendJson(200, json{{"prompt", text}});
  }

  // ---- Completions ---------------------------------------------------------------------

  struct Choice {
    std::shared_ptr<Job> job;
    std::optional<ChoiceText> text;
    size_t cursor = 0;  // tokens of the job taken so far
    bool finished = false;
    std::string finish_reason;
    std::string all_text;  // non-streaming: the whole text
    bool role_sent = false;  // chat streaming: the first chunk (the role) is out
    size_t logprobs_sent = 0;  // tokens whose logprobs are out
    size_t text_offset = 0;    // completions' logprobs: the text offset of the next token
  };

  void complete(const json& body, std::string_view body_text, bool chat) {
    CompletionRequest request;
    if (auto error = chat ? parseChatRequest(body, body_text, s_.limits, *s_.tokenizer,
                                             s_.chat_template.get(), &request)
                          : parseCompletionRequest(body, s_.limits, *s_.tokenizer, &request))
      return sendError(*error);
    if (request.stream && request_.version() < 11)
      return sendError(
          ApiError{400, "streaming needs HTTP/1.1 (chunked transfer encoding)", "stream"});
    const size_t sequences = request.prompts.size() * static_cast<size_t>(request.n);
    if (sequences > static_cast<size_t>(s_.options.max_queue))
      return sendError(ApiError{400,
                                "the request asks for " + std::to_string(sequences) +
                                    " sequences (prompts x n); this server queues at most " +
                                    std::to_string(s_.options.max_queue),
                                "n"});
    request_data_ = std::move(request);
    CompletionRequest& r = *request_data_;
    id_ = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(s_.next_id++);
    created_ = static_cast<int64_t>(std::time(nullptr));
    choices_.clear();
    for (size_t p = 0; p < r.prompts.size(); ++p) {
      for (int32_t i = 0; i < r.n; ++i) {
        auto job = std::make_shared<Job>();
        job->prompt = r.prompts[p];
        job->options = r.options;
        if (!r.seeded)
          job->options.sampling.seed = s_.randomSeed();
        else
          job->options.sampling.seed = r.options.sampling.seed + static_cast<uint64_t>(i);
        if (s_.drift)  // the statistics of the tokens the drift monitor counts, no more
          job->options.sampling.model_statistics_tokens = s_.drift->newTokens();
        // Holds the session until the job is done (cleared then): the session has no
        // operation pending while it waits for tokens.
        job->notify = [self = shared_from_this()] {
          net::post(self->stream_.get_executor(), [self] { self->pump(); });
        };
        Choice choice;
        choice.job = job;
        choice.text.emplace(*s_.tokenizer, &r.stop, r.skip_special_tokens);
        choices_.push_back(std::move(choice));
      }
    }
    for (size_t i = 0; i < choices_.size(); ++i) {
      SubmitResult result = s_.scheduler->submit(choices_[i].job);
      if (result == SubmitResult::kQueued) continue;
      for (size_t j = 0; j < choices_.size(); ++j) {
        if (j < i) choices_[j].job->cancel = true;
        std::lock_guard<std::mutex> lock(choices_[j].job->mu);
        choices_[j].job->notify = nullptr;
      }
      if (result == SubmitResult::kQueueFull) {
        retry_after_ = true;
        return sendError(ApiError{429, "the server is busy: too many requests are waiting"});
      }
      return sendError(ApiError{503, "the server is shutting down"});
    }
    generating_ = true;
    // The watch read first, with no timer armed (Beast gives a pending read the timer that was
    // set when it started, whatever is set later): it must outlive any write timeout.
    stream_.expires_never();
    watchClient();
    if (r.stream) {
      // Headers now; each event is a chunk.
      stream_res_.emplace(http::status::ok, request_.version());
      stream_res_->set(http::field::content_type, "text/event-stream");
      stream_res_->set(http::field::cache_control, "no-cache");
      stream_res_->keep_alive(keep_alive_);
      stream_res_->chunked(true);
      stream_sr_.emplace(*stream_res_);
      writing_ = true;
      stream_.expires_after(seconds(s_.options.write_timeout_s));
      http::async_write_header(
          stream_, *stream_sr_,
          [self = shared_from_this()](beast::error_code ec, size_t) { self->onWritten(ec); });
    }
  }

  // A read while the request is served: the client closing its end cancels the request.
  // Bytes that arrive (a pipelined next request) are kept for readRequest.
  void watchClient() {
    if (watching_) return;
    watching_ = true;
    stream_.async_read_some(
        buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
          self->watching_ = false;
          if (ec == net::error::operation_aborted && self->unwatching_) {
            self->unwatching_ = false;  // afterResponse() stopped the watch: not a disconnect
          } else if (ec) {
            self->clientGone();
          } else {
            self->buffer_.commit(n);  // a pipelined request: kept for readRequest
            // Keep watching while generating (up to a bound on what is buffered).
            if (self->generating_ && self->buffer_.size() < 65536) self->watchClient();
          }
          if (!self->generating_) self->afterResponse();
        });
  }

  void clientGone() {
    if (gone_) return;
    gone_ = true;
    keep_alive_ = false;
    for (Choice& c : choices_) {
      if (!c.finished) {
        c.job->cancel_reason = CancelReason::kClientGone;
        c.job->cancel = true;
      }
    }
  }

  // Takes what the jobs have produced; writes it (streaming) or, once all are done, the
  // response.
  void pump() {
    try {
      pumpUnguarded();
    } catch (const std::exception&) {
      // Cannot happen by design; if it does, end the request rather than the process.
      for (Choice& c : choices_) c.job->cancel = true;
      clientGone();
    }
  }

  void pumpUnguarded() {
    if (!generating_ || writing_) return;
    std::string events;
    bool all_done = true;
    std::optional<ApiError> failure;
    const CompletionRequest& r = *request_data_;
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      if (c.finished) continue;
      std::vector<int32_t> fresh;
      bool done = false;
      Status status;
      {
        std::lock_guard<std::mutex> lock(c.job->mu);
        fresh.assign(c.job->tokens.begin() + static_cast<std::ptrdiff_t>(c.cursor),
                     c.job->tokens.end());
        c.cursor = c.job->tokens.size();
        done = c.job->done;
        if (done) {
          status = c.job->status;
          c.job->notify = nullptr;  // releases the session
        }
      }
      std::string delta;
      for (int32_t id : fresh) {
        Status s = c.text->feed(id, &delta);
        if (!s.ok()) failure = ApiError{500, "cannot decode the output: " + s.message()};
        if (c.text->stopped() && !c.job->cancel) {
          c.job->cancel_reason = CancelReason::kStopString;
          c.job->cancel = true;
        }
      }
      if (done) {
        c.finished = true;
        if (status.ok() || status.code() == StatusCode::kCancelled) {
          Status s = c.text->finish(&delta);
          if (!s.ok()) failure = ApiError{500, "cannot decode the output: " + s.message()};
          if (c.text->stopped()) {
            c.finish_reason = "stop";
          } else if (status.ok()) {
            std::lock_guard<std::mutex> lock(c.job->mu);
            c.finish_reason =
                c.job->result.finish_reason == FinishReason::kLength ? "length" : "stop";
          } else {
            c.finish_reason = "cancelled";
          }
        } else {
          failure = ApiError{status.code() == StatusCode::kInvalidArgument ||
                                     status.code() == StatusCode::kResourceExhausted
                                 ? 400
                                 : 500,
                             status.message()};
        }
      } else {
        all_done = false;
      }
      if (r.stream) {
        json reason = done && !c.finish_reason.empty() ? json(c.finish_reason) : json();
        if (r.chat && !c.role_sent) {  // the first chunk of a chat choice names the role
          c.role_sent = true;
          events += event(json{{"index", i},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}});
        }
        if (!delta.empty() || done) {
          json choice = {{"index", i}, {"logprobs", nullptr}, {"finish_reason", reason}};
          if (r.logprobs >= 0) {  // the tokens whose text is out (or held back by a stop string)
            std::lock_guard<std::mutex> lock(c.job->mu);
            choice["logprobs"] = takeLogprobs(c, c.text->tokensFed());
          }
          if (r.chat)
            choice["delta"] = delta.empty() ? json::object() : json{{"content", delta}};
          else
            choice["text"] = delta;
          events += event(choice);
        }
      } else {
        c.all_text += delta;
      }
    }
    if (failure) {
      for (Choice& c : choices_) {
        if (!c.finished) {
          c.job->cancel = true;
        }
      }
    }
    if (gone_) {
      if (all_done) finishRequest();
      return;
    }
    if (!r.stream) {
      if (!all_done) return;
      if (failure) {
        finishRequest();
        return sendError(*failure);
      }
      json body = responseBody();
      finishRequest();
      return sendJson(200, body);
    }
    if (all_done) {
      if (failure) events += "data: " + failure->json() + "\n\n";
      if (r.include_usage) {
        json chunk = {{"id", id_},
                      {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
                      {"created", created_},
                      {"model", s_.limits.model_name},
                      {"choices", json::array()},
                      {"usage", usage()}};
        events += "data: " + dumpJson(chunk) + "\n\n";
      }
      events += "data: [DONE]\n\n";
      stream_ending_ = true;
    }
    if (events.empty()) return;
    writeChunk(std::move(events));
  }

  void writeChunk(std::string events) {
    chunk_ = std::move(events);
    writing_ = true;
    stream_.expires_after(seconds(s_.options.write_timeout_s));
    net::async_write(
        stream_, http::make_chunk(net::buffer(chunk_)),
        [self = shared_from_this()](beast::error_code ec, size_t) { self->onWritten(ec); });
  }

  void onWritten(beast::error_code ec) {
    writing_ = false;
    stream_.expires_never();
    if (ec) {
      clientGone();
      pump();
      return;
    }
    if (stream_ending_ && !last_chunk_sent_) {
      // The events are out; the terminating chunk ends the response.
      last_chunk_sent_ = true;
      writing_ = true;
      stream_.expires_after(seconds(s_.options.write_timeout_s));
      net::async_write(
          stream_, http::make_chunk_last(),
          [self = shared_from_this()](beast::error_code ec2, size_t) { self->onWritten(ec2); });
      return;
    }
    if (stream_ending_) {
      stream_ending_ = false;
      last_chunk_sent_ = false;
      finishRequest();
      return afterResponse();
    }
    pump();
  }

  json usage() const {
    int64_t prompt_tokens = 0, completion_tokens = 0;
    for (const auto& p : request_data_->prompts) prompt_tokens += static_cast<int64_t>(p.size());
    for (const Choice& c : choices_) completion_tokens += static_cast<int64_t>(c.text->tokensFed());
    return json{{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens}};
  }

  // One token's text for logprobs (empty when it does not decode alone).
  std::string tokenText(int32_t id) const {
    std::string text;
    if (!s_.tokenizer->decode(std::span<const int32_t>(&id, 1), false, &text).ok()) text.clear();
    return text;
  }

  // One server-sent event holding one choice's chunk.
  std::string event(const json& choice) const {
    json chunk = {{"id", id_},
                  {"object", request_data_->chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created_},
                  {"model", s_.limits.model_name},
                  {"choices", json::array({choice})}};
    return "data: " + dumpJson(chunk) + "\n\n";
  }

  // The logprobs of a choice's tokens [c.logprobs_sent, end), in the request's format: chat's
  // (per token its text, logprob, UTF-8 bytes and alternatives) or completions' (parallel
  // lists with text offsets); the choice's cursor moves to `end`. Needs the job's mutex.
  json takeLogprobs(Choice& c, size_t end) {
    const Job& job = *c.job;
    const size_t top_n = static_cast<size_t>(std::max(0, request_data_->logprobs));
    end = std::min({end, job.tokens.size(), job.logprobs.size(), job.top_logprobs.size()});
    const size_t begin = std::min(c.logprobs_sent, end);
    c.logprobs_sent = end;
    if (request_data_->chat) {
      auto bytes = [](const std::string& text) {
        json b = json::array();
        for (unsigned char ch : text) b.push_back(static_cast<int>(ch));
        return b;
      };
      json content = json::array();
      for (size_t t = begin; t < end; ++t) {
        std::string text = tokenText(job.tokens[t]);
        json top = json::array();
        for (size_t k = 0; k < job.top_logprobs[t].size() && k < top_n; ++k) {
          const auto& [id, lp] = job.top_logprobs[t][k];
          std::string alt = tokenText(id);
          top.push_back(json{{"token", alt}, {"logprob", lp}, {"bytes", bytes(alt)}});
        }
        content.push_back(json{{"token", text},
                               {"logprob", job.logprobs[t]},
                               {"bytes", bytes(text)},
                               {"top_logprobs", top}});
      }
      return json{{"content", content}};
    }
    json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
         offsets = json::array();
    for (size_t t = begin; t < end; ++t) {
      std::string text = tokenText(job.tokens[t]);
      tokens.push_back(text);
      token_logprobs.push_back(job.logprobs[t]);
      json alternatives = json::object();
      for (size_t k = 0; k < job.top_logprobs[t].size() && k < top_n; ++k)
        alternatives[tokenText(job.top_logprobs[t][k].first)] = job.top_logprobs[t][k].second;
      top.push_back(alternatives);
      offsets.push_back(c.text_offset);
      c.text_offset += text.size();
    }
    return json{{"tokens", tokens},
                {"token_logprobs", token_logprobs},
                {"top_logprobs", top},
                {"text_offset", offsets}};
  }

  json responseBody() {
    json choices = json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      json logprobs = nullptr;
      if (request_data_->logprobs >= 0) {
        std::lock_guard<std::mutex> lock(c.job->mu);
        logprobs = takeLogprobs(c, c.text->tokensFed());
      }
      if (request_data_->chat)
        choices.push_back(json{{"index", i},
                               {"message", {{"role", "assistant"}, {"content", c.all_text}}},
                               {"logprobs", logprobs},
                               {"finish_reason", c.finish_reason}});
      else
        choices.push_back(json{{"index", i},
                               {"text", c.all_text},
                               {"logprobs", logprobs},
                               {"finish_reason", c.finish_reason}});
    }
    return json{{"id", id_},
                {"object", request_data_->chat ? "chat.completion" : "text_completion"},
                {"created", created_},
                {"model", s_.limits.model_name},
                {"choices", choices},
                {"usage", usage()}};
  }

  // The request's jobs are all done (or abandoned): nothing of it is left to send.
  void finishRequest() {
    generating_ = false;
    for (Choice& c : choices_) {
      std::lock_guard<std::mutex> lock(c.job->mu);
      c.job->notify = nullptr;
    }
  }

  // After a response: the next request on this connection, or its end.
  void afterResponse() {
    if (writing_ || generating_) return;
    if (watching_) {
      // Stop the watch; its handler calls back here, and readRequest then parses what is
      // buffered and waits for the rest under the read timeout.
      unwatching_ = true;
      beast::error_code ec;
      stream_.socket().cancel(ec);
      return;
    }
    if (linger_ && !gone_) return lingeringClose();
    if (gone_ || !keep_alive_) return close();
    choices_.clear();
    request_data_.reset();
    readRequest();
  }

  // ---- Plain responses -----------------------------------------------------------------

  void sendJson(int status, const json& body) { send(status, "application/json", dumpJson(body)); }

  void sendError(const ApiError& error, bool close_after = false) {
    s_.metrics.add("llmc:request_errors_total", 1,
                   "status=\"" + std::to_string(error.status) + "\"");
    if (close_after) {
      keep_alive_ = false;
      linger_ = true;  // the client may still be sending (a body over the limit)
    }
    send(error.status, "application/json", error.json());
  }

  void send(int status, const char* content_type, std::string body) {
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(status), request_.version());
    res->set(http::field::server, "llmc");
    res->set(http::field::content_type, content_type);
    if (retry_after_) res->set(http::field::retry_after, "1");
    retry_after_ = false;
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    writing_ = true;
    stream_.expires_after(seconds(s_.options.write_timeout_s));
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, size_t) {
                        self->writing_ = false;
                        self->stream_.expires_never();
                        if (ec || res->need_eof()) self->keep_alive_ = false;
                        if (ec) self->gone_ = true;
                        self->afterResponse();
                      });
  }

  // Closing while the client is still sending would reset the connection before it has read
  // the error: stop sending, read and drop what arrives for up to 2 s, then close.
  void lingeringClose() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(2));
    drain();
  }
  void drain() {
    stream_.async_read_some(net::buffer(discard_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->close();
                              self->drain();
                            });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  ServerState& s_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  bool keep_alive_ = true;
  bool writing_ = false;
  bool watching_ = false;
  bool generating_ = false;
  bool gone_ = false;
  bool retry_after_ = false;
  bool linger_ = false;
  bool unwatching_ = false;  // afterResponse() cancelled the watch read
  std::array<char, 8192> discard_{};
  bool stream_ending_ = false;
  // The completion being served.
  std::optional<CompletionRequest> request_data_;
  std::vector<Choice> choices_;
  std::string id_;
  int64_t created_ = 0;
  std::optional<http::response<http::empty_body>> stream_res_;
  std::optional<http::response_serializer<http::empty_body>> stream_sr_;
  std::string chunk_;
  bool last_chunk_sent_ = false;
};

// Accepts connections until stopped.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(net::io_context& ioc, tcp::acceptor acceptor, ServerState& state)
      : ioc_(ioc), acceptor_(std::move(acceptor)), s_(state) {}
  void accept() {
    acceptor_.async_accept(net::make_strand(ioc_), [self = shared_from_this()](beast::error_code ec,
                                                                               tcp::socket socket) {
      if (ec) {
        if (ec == net::error::operation_aborted || !self->acceptor_.is_open()) return;
      } else {
        bool over = self->s_.connections.load() >= self->s_.options.max_connections;
        std::make_shared<Session>(std::move(socket), self->s_)->start(over);
      }
      self->accept();
    });
  }
  void stop() {
    net::post(acceptor_.get_executor(), [self = shared_from_this()] {
      beast::error_code ec;
      self->acceptor_.close(ec);
    });
  }

 private:
  net::io_context& ioc_;
  tcp::acceptor acceptor_;
  ServerState& s_;
};

Status loadModel(ServerState& s) {
  const ServerOptions& o = s.options;
  LLMC_RETURN_IF_ERROR(Engine::load(o.engine_path, &s.engine));
  const LlmConfig* llm = s.engine->llmConfig();
  if (!llm)
    return Status(StatusCode::kInvalidArgument,
                  o.engine_path +
                      " is not a language-model engine (compile a recognized decoder "
                      "without --as-graph)");
  std::unique_ptr<Tokenizer> tokenizer;
  if (!o.tokenizer_path.empty()) {
    LLMC_RETURN_IF_ERROR(Tokenizer::fromFile(o.tokenizer_path, &tokenizer));
  } else if (!s.engine->tokenizerJson().empty()) {
    LLMC_RETURN_IF_ERROR(Tokenizer::fromJson(s.engine->tokenizerJson(), &tokenizer));
  } else {
    return Status(StatusCode::kInvalidArgument,
                  o.engine_path +
                      " holds no tokenizer: compile it with --tokenizer "
                      "tokenizer.json, or pass --tokenizer");
  }
  s.tokenizer = std::move(tokenizer);
  // Chat: the engine's tokenizer_config.json (its template and special tokens), the template
  // replaced by --chat-template; generation defaults from its generation_config.json.
  ChatConfig chat;
  if (!s.engine->tokenizerConfigJson().empty())
    LLMC_RETURN_IF_ERROR(parseTokenizerConfig(s.engine->tokenizerConfigJson(), &chat)
                             .withContext(o.engine_path + ": tokenizer config"));
  if (!o.chat_template_path.empty()) {
    std::ifstream in(o.chat_template_path, std::ios::binary);
    if (!in) return invalidArgument("--chat-template: cannot read '" + o.chat_template_path + "'");
    std::stringstream text;
    text << in.rdbuf();
    chat.chat_template = text.str();
  }
  if (!chat.chat_template.empty())
    LLMC_RETURN_IF_ERROR(
        ChatTemplate::create(chat.chat_template, chat, &s.chat_template)
            .withContext(o.chat_template_path.empty() ? o.engine_path : o.chat_template_path));
  if (!s.engine->generationConfigJson().empty())
    LLMC_RETURN_IF_ERROR(parseGenerationConfig(s.engine->generationConfigJson(), &s.limits.defaults)
                             .withContext(o.engine_path + ": generation config"));
  ModelLimits& l = s.limits;
  l.context = llm->max_context;
  l.vocab = llm->vocab_size > 0 ? llm->vocab_size : s.tokenizer->vocabSize();
  l.max_prompt_tokens =
      o.max_prompt_tokens > 0 ? std::min(o.max_prompt_tokens, l.context - 1) : l.context - 1;
  l.max_tokens = o.max_tokens > 0 ? std::min(o.max_tokens, l.context - 1) : l.context - 1;
  l.max_n = o.max_n;
  l.eos_ids = defaultStopIds(llm->eos_token_ids, s.tokenizer->eosId(), l.defaults);
  std::unique_ptr<BatchGenerator> generator;
  LLMC_RETURN_IF_ERROR(BatchGenerator::create(s.engine, o.batch, &generator));
  if (const DriftBaseline* baseline = s.engine->driftBaseline()) {
    DriftOptions drift;
    drift.window_tokens = o.drift_window_tokens;
    drift.min_tokens = o.drift_min_tokens;
    drift.threshold = o.drift_threshold;
    s.drift = std::make_unique<DriftMonitor>(*baseline, drift, &s.metrics);
    std::fprintf(stderr, "llmc serve: drift monitor on (baseline: %s)\n", baseline->source.c_str());
  }
  s.scheduler = std::make_unique<Scheduler>(std::move(generator), static_cast<size_t>(o.max_queue),
                                            &s.metrics, s.drift.get());
  return okStatus();
}

}  // namespace

Status runServer(const ServerOptions& options, const std::function<void(int port)>& on_listening) {
  std::string name = options.model_name;
  if (name.empty()) name = std::filesystem::path(options.engine_path).stem().string();
  ServerState state(options, name);
  state.limits.model_name = name;
  state.created = static_cast<int64_t>(std::time(nullptr));

  net::io_context ioc(options.io_threads);
  beast::error_code ec;
  auto address = net::ip::make_address(options.host, ec);
  if (ec)
    return Status(StatusCode::kInvalidArgument,
                  "--host '" + options.host + "' is not an IP address");
  tcp::acceptor acceptor(net::make_strand(ioc));
  tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return Status(StatusCode::kUnavailable, "cannot listen on " + options.host + ":" +
                                                std::to_string(options.port) + ": " + ec.message());
  const int port = acceptor.local_endpoint().port();
  auto listener = std::make_shared<Listener>(ioc, std::move(acceptor), state);
  listener->accept();

  // SIGINT/SIGTERM start the shutdown.
  net::signal_set signals(ioc, SIGINT, SIGTERM);
  std::atomic<bool> stop_requested{false};
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  signals.async_wait([&](beast::error_code, int) {
    std::lock_guard<std::mutex> lock(stop_mu);
    stop_requested = true;
    stop_cv.notify_all();
  });

  std::vector<std::thread> threads;
  for (int i = 0; i < std::max(1, options.io_threads); ++i)
    threads.emplace_back([&] { ioc.run(); });
  if (on_listening) on_listening(port);

  Status loaded = loadModel(state);
  if (loaded.ok()) {
    state.ready = true;
    std::unique_lock<std::mutex> lock(stop_mu);
    stop_cv.wait(lock, [&] { return stop_requested.load(); });
  }
  // Stop accepting; let what is in flight finish within the grace period.
  state.shutting_down = true;
  listener->stop();
  if (state.scheduler) {
    auto deadline = Clock::now() + seconds(options.shutdown_grace_s);
    state.scheduler->drain(deadline);
    while (!state.scheduler->idle() && Clock::now() < deadline + std::chrono::seconds(1))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // The last events reach their connections.
    auto flushed = Clock::now() + std::chrono::seconds(2);
    while (state.connections.load() > 0 && Clock::now() < flushed)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ioc.stop();
  for (auto& t : threads) t.join();
  state.scheduler.reset();
  return loaded;
}

}  // namespace llmc::serve
