// The C API (llmc/c_api.h) over the C++ runtime: opaque handles holding the C++ objects, every
// call inside guardApi so that no exception crosses into C.
#include "llmc/c_api.h"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "core/api_guard.h"
#include "llmc/engine.h"
#include "llmc/generator.h"
#include "llmc/session.h"
#include "llmc/tokenizer.h"

#ifndef LLMC_VERSION_STRING
#define LLMC_VERSION_STRING "0.0.0"
#endif

struct llmc_status {
  llmc_code code;
  std::string message;
};

namespace {

// Returned when even the status cannot be allocated; llmc_status_free leaves it alone.
llmc_status g_out_of_memory{LLMC_RESOURCE_EXHAUSTED, "out of memory"};

llmc_status* toC(const llmc::Status& status) {
  if (status.ok()) return nullptr;
  llmc_status* out = new (std::nothrow) llmc_status;
  if (!out) return &g_out_of_memory;
  try {
    out->code = static_cast<llmc_code>(status.code());
    out->message = status.message();
  } catch (...) {
    delete out;
    return &g_out_of_memory;
  }
  return out;
}

// Runs `body` (returning llmc::Status) inside the API's exception boundary.
template <typename Body>
llmc_status* guarded(const char* operation, Body&& body) {
  return toC(llmc::guardApi(operation, std::forward<Body>(body)));
}

// An enum field as the int the caller stored: C may store any int in it, and loading a value
// outside the enum's range as the enum type is undefined in C++.
template <typename Enum>
int rawEnum(const Enum& field) {
  std::underlying_type_t<Enum> raw;
  std::memcpy(&raw, &field, sizeof(raw));
  return static_cast<int>(raw);
}

llmc::Status nullArgument(const char* function, const char* argument) {
  return llmc::invalidArgument(std::string(function) + ": " + argument + " is NULL");
}

// A copy the caller frees with llmc_free (malloc'd: C frees it too).
template <typename T>
T* mallocCopy(const T* data, size_t count, size_t extra = 0) {
  T* out = static_cast<T*>(std::malloc((count + extra) * sizeof(T) + 1));
  if (out && count) std::memcpy(out, data, count * sizeof(T));
  return out;
}

}  // namespace

struct llmc_engine {
  std::shared_ptr<const llmc::Engine> engine;
  struct Info {
    std::vector<int64_t> dims;
    std::vector<const char*> symbols;
  };
  std::vector<Info> inputs, outputs;  // dims and symbol pointers for llmc_tensor_info
};

struct llmc_session {
  std::unique_ptr<llmc::Session> session;
};

struct llmc_outputs {
  std::vector<llmc::NamedTensor> tensors;
  std::vector<std::vector<int64_t>> shapes;
};

struct llmc_tokenizer {
  std::shared_ptr<const llmc::Tokenizer> tokenizer;
};

struct llmc_generator {
  std::shared_ptr<const llmc::Engine> engine;
  std::unique_ptr<llmc::Generator> generator;
  std::atomic<bool> cancel{false};
};

struct llmc_generation_result {
  std::vector<int32_t> tokens;
  std::string text;
  llmc_finish_reason finish_reason = LLMC_FINISH_LENGTH;
};

extern "C" {

llmc_code llmc_status_code(const llmc_status* status) { return status ? status->code : LLMC_OK; }

const char* llmc_status_message(const llmc_status* status) {
  return status ? status->message.c_str() : "";
}

const char* llmc_code_name(llmc_code code) {
  return llmc::statusCodeName(static_cast<llmc::StatusCode>(rawEnum(code)));
}

void llmc_status_free(llmc_status* status) {
  if (status != &g_out_of_memory) delete status;
}

const char* llmc_version(void) { return LLMC_VERSION_STRING; }
int llmc_api_version(void) { return LLMC_C_API_VERSION; }
void llmc_free(void* p) { std::free(p); }

size_t llmc_dtype_size(llmc_dtype dtype) {
  const int raw = rawEnum(dtype);
  return raw >= 0 && raw <= 255 && llmc::isValidDType(raw)
             ? llmc::dtypeSize(static_cast<llmc::DType>(raw))
             : 0;
}

// ----- Engines -----

}  // extern "C"

namespace {
llmc::Status wrapEngine(std::shared_ptr<const llmc::Engine> engine, llmc_engine** out) {
  auto wrapped = std::make_unique<llmc_engine>();
  auto describe = [](const std::vector<llmc::TensorInfo>& infos,
                     std::vector<llmc_engine::Info>* out) {
    for (const llmc::TensorInfo& info : infos) {
      llmc_engine::Info c;
      for (const llmc::DimInfo& dim : info.dims) {
        c.dims.push_back(dim.size >= 0 ? dim.size : -1);
        c.symbols.push_back(dim.symbol.c_str());
      }
      out->push_back(std::move(c));
    }
  };
  describe(engine->inputs(), &wrapped->inputs);
  describe(engine->outputs(), &wrapped->outputs);
  wrapped->engine = std::move(engine);
  *out = wrapped.release();
  return llmc::okStatus();
}
}  // namespace

extern "C" {

llmc_status* llmc_engine_load(const char* path, llmc_engine** out) {
  return guarded("llmc_engine_load", [&] {
    if (!path) return nullArgument("llmc_engine_load", "path");
    if (!out) return nullArgument("llmc_engine_load", "out");
    std::shared_ptr<const llmc::Engine> engine;
    LLMC_RETURN_IF_ERROR(llmc::Engine::load(path, &engine));
    return wrapEngine(std::move(engine), out);
  });
}

llmc_status* llmc_engine_load_from_memory(const void* data, size_t size, llmc_engine** out) {
  return guarded("llmc_engine_load_from_memory", [&] {
    if (!data && size) return nullArgument("llmc_engine_load_from_memory", "data");
    if (!out) return nullArgument("llmc_engine_load_from_memory", "out");
    std::shared_ptr<const llmc::Engine> engine;
    LLMC_RETURN_IF_ERROR(llmc::Engine::loadFromMemory(
        std::span<const uint8_t>(static_cast<const uint8_t*>(data), size), "engine bytes",
        &engine));
    return wrapEngine(std::move(engine), out);
  });
}

void llmc_engine_free(llmc_engine* engine) { delete engine; }

size_t llmc_engine_input_count(const llmc_engine* engine) {
  return engine ? engine->engine->inputs().size() : 0;
}

size_t llmc_engine_output_count(const llmc_engine* engine) {
  return engine ? engine->engine->outputs().size() : 0;
}

}  // extern "C"

namespace {
llmc_status* tensorInfo(const char* function, const llmc_engine* engine, bool input, size_t index,
                        llmc_tensor_info* out) {
  return guarded(function, [&] {
    if (!engine) return nullArgument(function, "engine");
    if (!out) return nullArgument(function, "out");
    const auto& infos = input ? engine->engine->inputs() : engine->engine->outputs();
    const auto& c = input ? engine->inputs : engine->outputs;
    if (index >= infos.size())
      return llmc::outOfRange(std::string(function) + ": index " + std::to_string(index) + " of " +
                              std::to_string(infos.size()) + (input ? " inputs" : " outputs"));
    out->name = infos[index].name.c_str();
    out->dtype = static_cast<llmc_dtype>(infos[index].dtype);
    out->rank = c[index].dims.size();
    out->dims = c[index].dims.data();
    out->dim_symbols = c[index].symbols.data();
    return llmc::okStatus();
  });
}
}  // namespace

extern "C" {

llmc_status* llmc_engine_input(const llmc_engine* engine, size_t index, llmc_tensor_info* out) {
  return tensorInfo("llmc_engine_input", engine, true, index, out);
}

llmc_status* llmc_engine_output(const llmc_engine* engine, size_t index, llmc_tensor_info* out) {
  return tensorInfo("llmc_engine_output", engine, false, index, out);
}

const char* llmc_engine_metadata(const llmc_engine* engine, const char* key) {
  // (strcmp, not std::string: nothing here may allocate, so nothing can throw into C.)
  if (!engine || !key) return nullptr;
  const llmc::Engine& e = *engine->engine;
  const struct {
    const char* key;
    const std::string& value;
  } entries[] = {{"target", e.target()},
                 {"compiler_version", e.compilerVersion()},
                 {"build_options", e.buildOptions()},
                 {"source_hash", e.sourceHash()},
                 {"tokenizer_json", e.tokenizerJson()},
                 {"tokenizer_config_json", e.tokenizerConfigJson()},
                 {"generation_config_json", e.generationConfigJson()}};
  for (const auto& entry : entries)
    if (std::strcmp(key, entry.key) == 0) return entry.value.c_str();
  return nullptr;
}

int llmc_engine_language_model(const llmc_engine* engine, llmc_language_model* out) {
  const llmc::LlmConfig* config = engine ? engine->engine->llmConfig() : nullptr;
  if (out) {
    *out = llmc_language_model{0, 0, 0, 0, 0, 0, -1};
    if (config)
      *out = llmc_language_model{config->num_layers,  config->num_heads,  config->num_kv_heads,
                                 config->head_dim,    config->vocab_size, config->max_context,
                                 config->bos_token_id};
  }
  return config ? 1 : 0;
}

// ----- Sessions -----

llmc_session_options llmc_session_options_default(void) {
  return llmc_session_options{sizeof(llmc_session_options), LLMC_BACKEND_AUTO, 0};
}

}  // extern "C"

namespace {
// The C options as the runtime's (fields past what the caller's struct_size covers keep their
// defaults).
llmc::Status sessionOptions(const char* function, const llmc_session_options* in,
                            llmc::SessionOptions* out) {
  if (!in) return llmc::okStatus();
  if (in->struct_size < offsetof(llmc_session_options, threads) + sizeof(int))
    return llmc::invalidArgument(std::string(function) +
                                 ": llmc_session_options.struct_size is too small (take the "
                                 "options from llmc_session_options_default())");
  const int backend = rawEnum(in->backend);
  if (backend != LLMC_BACKEND_AUTO && backend != LLMC_BACKEND_CPU && backend != LLMC_BACKEND_CUDA)
    return llmc::invalidArgument(std::string(function) + ": unknown backend " +
                                 std::to_string(backend));
  out->backend = static_cast<llmc::Backend>(backend);
  out->threads = in->threads;
  return llmc::okStatus();
}
}  // namespace

extern "C" {

llmc_status* llmc_session_create(const llmc_engine* engine, const llmc_session_options* options,
                                 llmc_session** out) {
  return guarded("llmc_session_create", [&] {
    if (!engine) return nullArgument("llmc_session_create", "engine");
    if (!out) return nullArgument("llmc_session_create", "out");
    llmc::SessionOptions session_options;
    LLMC_RETURN_IF_ERROR(sessionOptions("llmc_session_create", options, &session_options));
    auto session = std::make_unique<llmc_session>();
    LLMC_RETURN_IF_ERROR(llmc::Session::create(engine->engine, session_options, &session->session));
    *out = session.release();
    return llmc::okStatus();
  });
}

void llmc_session_free(llmc_session* session) { delete session; }

llmc_status* llmc_session_run(llmc_session* session, const llmc_tensor* inputs, size_t input_count,
                              llmc_outputs** out) {
  return guarded("llmc_session_run", [&] {
    if (!session) return nullArgument("llmc_session_run", "session");
    if (!inputs && input_count) return nullArgument("llmc_session_run", "inputs");
    if (!out) return nullArgument("llmc_session_run", "out");
    std::vector<llmc::NamedTensor> bound;
    for (size_t i = 0; i < input_count; ++i) {
      const llmc_tensor& t = inputs[i];
      const std::string which = "llmc_session_run: input " + std::to_string(i);
      if (!t.name) return llmc::invalidArgument(which + " has no name");
      const int dtype = rawEnum(t.dtype);
      if (dtype < 0 || dtype > 255 || !llmc::isValidDType(dtype) ||
          llmc::dtypeSize(static_cast<llmc::DType>(dtype)) == 0)
        return llmc::invalidArgument(which + " (" + t.name + "): unknown dtype " +
                                     std::to_string(dtype));
      if (t.rank && !t.shape)
        return llmc::invalidArgument(which + " (" + t.name + "): shape is NULL");
      llmc::Shape shape(t.shape, t.shape + t.rank);
      for (int64_t d : shape)
        if (d < 0) return llmc::invalidArgument(which + " (" + t.name + "): a negative dimension");
      llmc::Tensor view = llmc::Tensor::view(static_cast<llmc::DType>(dtype), shape, t.data);
      if (!t.data && view.numElements() > 0)
        return llmc::invalidArgument(which + " (" + t.name + "): data is NULL");
      bound.push_back({t.name, view});
    }
    auto outputs = std::make_unique<llmc_outputs>();
    LLMC_RETURN_IF_ERROR(session->session->run(bound, &outputs->tensors));
    for (const llmc::NamedTensor& t : outputs->tensors)
      outputs->shapes.emplace_back(t.tensor.shape().begin(), t.tensor.shape().end());
    *out = outputs.release();
    return llmc::okStatus();
  });
}

size_t llmc_outputs_count(const llmc_outputs* outputs) {
  return outputs ? outputs->tensors.size() : 0;
}

llmc_status* llmc_outputs_get(const llmc_outputs* outputs, size_t index, llmc_tensor* out) {
  return guarded("llmc_outputs_get", [&] {
    if (!outputs) return nullArgument("llmc_outputs_get", "outputs");
    if (!out) return nullArgument("llmc_outputs_get", "out");
    if (index >= outputs->tensors.size())
      return llmc::outOfRange("llmc_outputs_get: index " + std::to_string(index) + " of " +
                              std::to_string(outputs->tensors.size()) + " outputs");
    const llmc::NamedTensor& t = outputs->tensors[index];
    out->name = t.name.c_str();
    out->dtype = static_cast<llmc_dtype>(t.tensor.dtype());
    out->rank = outputs->shapes[index].size();
    out->shape = outputs->shapes[index].data();
    out->data = t.tensor.data();
    return llmc::okStatus();
  });
}

void llmc_outputs_free(llmc_outputs* outputs) { delete outputs; }

// ----- Tokenizers -----

llmc_status* llmc_tokenizer_load(const char* path, llmc_tokenizer** out) {
  return guarded("llmc_tokenizer_load", [&] {
    if (!path) return nullArgument("llmc_tokenizer_load", "path");
    if (!out) return nullArgument("llmc_tokenizer_load", "out");
    std::unique_ptr<llmc::Tokenizer> tokenizer;
    LLMC_RETURN_IF_ERROR(llmc::Tokenizer::fromFile(path, &tokenizer));
    *out = new llmc_tokenizer{std::move(tokenizer)};
    return llmc::okStatus();
  });
}

llmc_status* llmc_tokenizer_from_engine(const llmc_engine* engine, llmc_tokenizer** out) {
  return guarded("llmc_tokenizer_from_engine", [&] {
    if (!engine) return nullArgument("llmc_tokenizer_from_engine", "engine");
    if (!out) return nullArgument("llmc_tokenizer_from_engine", "out");
    if (engine->engine->tokenizerJson().empty())
      return llmc::notFound("llmc_tokenizer_from_engine: " + engine->engine->path() +
                            " carries no tokenizer (llmc compile --tokenizer)");
    std::unique_ptr<llmc::Tokenizer> tokenizer;
    LLMC_RETURN_IF_ERROR(llmc::Tokenizer::fromJson(engine->engine->tokenizerJson(), &tokenizer)
                             .withContext(engine->engine->path() + ": its tokenizer"));
    *out = new llmc_tokenizer{std::move(tokenizer)};
    return llmc::okStatus();
  });
}

void llmc_tokenizer_free(llmc_tokenizer* tokenizer) { delete tokenizer; }

llmc_status* llmc_tokenizer_encode(const llmc_tokenizer* tokenizer, const char* text, size_t length,
                                   int add_special_tokens, int32_t** ids, size_t* count) {
  return guarded("llmc_tokenizer_encode", [&] {
    if (!tokenizer) return nullArgument("llmc_tokenizer_encode", "tokenizer");
    if (!text && length) return nullArgument("llmc_tokenizer_encode", "text");
    if (!ids || !count) return nullArgument("llmc_tokenizer_encode", "ids or count");
    std::vector<int32_t> encoded;
    LLMC_RETURN_IF_ERROR(tokenizer->tokenizer->encode(std::string_view(text ? text : "", length),
                                                      add_special_tokens != 0, &encoded));
    int32_t* copy = mallocCopy(encoded.data(), encoded.size());
    if (!copy) return llmc::resourceExhausted("llmc_tokenizer_encode: out of memory");
    *ids = copy;
    *count = encoded.size();
    return llmc::okStatus();
  });
}

llmc_status* llmc_tokenizer_decode(const llmc_tokenizer* tokenizer, const int32_t* ids,
                                   size_t count, int skip_special_tokens, char** text) {
  return guarded("llmc_tokenizer_decode", [&] {
    if (!tokenizer) return nullArgument("llmc_tokenizer_decode", "tokenizer");
    if (!ids && count) return nullArgument("llmc_tokenizer_decode", "ids");
    if (!text) return nullArgument("llmc_tokenizer_decode", "text");
    std::string decoded;
    LLMC_RETURN_IF_ERROR(tokenizer->tokenizer->decode(std::span<const int32_t>(ids, count),
                                                      skip_special_tokens != 0, &decoded));
    char* copy = mallocCopy(decoded.data(), decoded.size());
    if (!copy) return llmc::resourceExhausted("llmc_tokenizer_decode: out of memory");
    copy[decoded.size()] = '\0';
    *text = copy;
    return llmc::okStatus();
  });
}

int32_t llmc_tokenizer_token_to_id(const llmc_tokenizer* tokenizer, const char* token) {
  return tokenizer && token ? tokenizer->tokenizer->tokenToId(token) : -1;
}

int32_t llmc_tokenizer_vocab_size(const llmc_tokenizer* tokenizer) {
  return tokenizer ? tokenizer->tokenizer->vocabSize() : 0;
}

int32_t llmc_tokenizer_eos_id(const llmc_tokenizer* tokenizer) {
  return tokenizer ? tokenizer->tokenizer->eosId().value_or(-1) : -1;
}

int32_t llmc_tokenizer_bos_id(const llmc_tokenizer* tokenizer) {
  return tokenizer ? tokenizer->tokenizer->bosId().value_or(-1) : -1;
}

// ----- Generation -----

llmc_generator_options llmc_generator_options_default(void) {
  return llmc_generator_options{
      sizeof(llmc_generator_options), llmc_session_options_default(), 1, 0, nullptr, 0};
}

llmc_generation_options llmc_generation_options_default(void) {
  // The C++ API's defaults, so the two cannot drift apart.
  const llmc::GenerationOptions defaults;
  const llmc::SamplingParams& sampling = defaults.sampling;
  llmc_generation_options options{};
  options.struct_size = sizeof(llmc_generation_options);
  options.max_new_tokens = defaults.max_new_tokens;
  options.temperature = sampling.temperature;
  options.top_k = sampling.top_k;
  options.top_p = sampling.top_p;
  options.min_p = sampling.min_p;
  options.repetition_penalty = sampling.repetition_penalty;
  options.seed = sampling.seed;
  options.stop_token_ids = nullptr;
  options.stop_token_count = 0;
  return options;
}

llmc_status* llmc_generator_create(const llmc_engine* engine, const llmc_generator_options* options,
                                   llmc_generator** out) {
  return guarded("llmc_generator_create", [&] {
    if (!engine) return nullArgument("llmc_generator_create", "engine");
    if (!out) return nullArgument("llmc_generator_create", "out");
    llmc::GeneratorConfig config;
    if (options) {
      // The first release's struct ended after kv_cache_tokens; later fields need the size.
      const size_t first_release =
          offsetof(llmc_generator_options, kv_cache_tokens) + sizeof(int64_t);
      auto covers = [&](size_t offset, size_t size) {
        return options->struct_size >= offset + size;
      };
      if (options->struct_size < first_release)
        return llmc::invalidArgument(
            "llmc_generator_create: llmc_generator_options.struct_size is too small (take the "
            "options from llmc_generator_options_default())");
      LLMC_RETURN_IF_ERROR(
          sessionOptions("llmc_generator_create", &options->session, &config.session));
      config.use_kv_cache = options->use_kv_cache != 0;
      if (options->kv_cache_tokens < 0)
        return llmc::invalidArgument("llmc_generator_create: kv_cache_tokens is negative");
      config.kv_cache_tokens = options->kv_cache_tokens;
      if (covers(offsetof(llmc_generator_options, kv_cache_dtype), sizeof(const char*)) &&
          options->kv_cache_dtype &&
          !llmc::kvCacheDtypeFromName(options->kv_cache_dtype, &config.kv_cache_dtype))
        return llmc::invalidArgument(std::string("llmc_generator_create: kv_cache_dtype takes ") +
                                     llmc::kKvCacheDtypeNames + ", got '" +
                                     options->kv_cache_dtype + "'");
      if (covers(offsetof(llmc_generator_options, kv_cache_prefault), sizeof(int)))
        config.kv_cache_prefault = options->kv_cache_prefault != 0;
    }
    auto generator = std::make_unique<llmc_generator>();
    generator->engine = engine->engine;
    LLMC_RETURN_IF_ERROR(llmc::Generator::create(engine->engine, config, &generator->generator));
    *out = generator.release();
    return llmc::okStatus();
  });
}

void llmc_generator_free(llmc_generator* generator) { delete generator; }

int llmc_generator_uses_kv_cache(const llmc_generator* generator) {
  return generator && generator->generator->usesKvCache() ? 1 : 0;
}

void llmc_generator_cancel(llmc_generator* generator) {
  if (generator) generator->cancel.store(true);
}

}  // extern "C"

namespace {
llmc::Status generate(llmc_generator* generator, std::span<const int32_t> prompt,
                      const llmc_generation_options* in, llmc_token_callback callback,
                      void* user_data, llmc_generation_result** result) {
  llmc_generation_options c = llmc_generation_options_default();
  if (in) {
    if (in->struct_size < sizeof(llmc_generation_options))
      return llmc::invalidArgument(
          "llmc_generator_generate: llmc_generation_options.struct_size is too small (take the "
          "options from llmc_generation_options_default())");
    c = *in;
  }
  if (c.stop_token_count && !c.stop_token_ids)
    return nullArgument("llmc_generator_generate", "stop_token_ids");
  llmc::GenerationOptions options;
  options.max_new_tokens = c.max_new_tokens;
  options.sampling.temperature = c.temperature;
  options.sampling.top_k = c.top_k;
  options.sampling.top_p = c.top_p;
  options.sampling.min_p = c.min_p;
  options.sampling.repetition_penalty = c.repetition_penalty;
  options.sampling.seed = c.seed;
  options.stop_token_ids.assign(c.stop_token_ids, c.stop_token_ids + c.stop_token_count);
  const llmc::Tokenizer* tokenizer = generator->generator->tokenizer();
  // As `llmc generate`: the tokenizer's end-of-sequence token, else the compiler's --eos-id.
  if (options.stop_token_ids.empty() && tokenizer && tokenizer->eosId())
    options.stop_token_ids.push_back(*tokenizer->eosId());
  if (options.stop_token_ids.empty() && generator->engine->llmConfig())
    options.stop_token_ids = generator->engine->llmConfig()->eos_token_ids;

  std::unique_ptr<llmc::Tokenizer::StreamDecoder> stream;
  if (tokenizer && callback) stream = tokenizer->streamDecoder(/*skip_special_tokens=*/true);
  llmc::Status stream_status;
  bool cancelled_by_caller = false;
  auto on_token = [&](int32_t id) {
    if (generator->cancel.exchange(false)) {
      cancelled_by_caller = true;
      return false;
    }
    if (!callback) return true;
    std::string text;
    if (stream) stream_status = stream->step(id, &text);
    if (!stream_status.ok()) return false;
    if (callback(id, stream ? text.c_str() : nullptr, text.size(), user_data) == 0) {
      cancelled_by_caller = true;
      return false;
    }
    return true;
  };
  llmc::GenerationResult generated;
  llmc::Status status = generator->generator->generate(prompt, options, on_token, &generated);
  LLMC_RETURN_IF_ERROR(stream_status.withContext("llmc_generator_generate: streaming decode"));
  const bool cancelled = status.code() == llmc::StatusCode::kCancelled && cancelled_by_caller;
  if (!status.ok() && !cancelled) return status;
  auto out = std::make_unique<llmc_generation_result>();
  out->tokens = std::move(generated.tokens);
  out->text = std::move(generated.text);
  out->finish_reason =
      cancelled                                                    ? LLMC_FINISH_CANCELLED
      : generated.finish_reason == llmc::FinishReason::kStopToken  ? LLMC_FINISH_STOP_TOKEN
      : generated.finish_reason == llmc::FinishReason::kStopString ? LLMC_FINISH_STOP_STRING
                                                                   : LLMC_FINISH_LENGTH;
  *result = out.release();
  return status;
}
}  // namespace

extern "C" {

llmc_status* llmc_generator_generate(llmc_generator* generator, const int32_t* prompt,
                                     size_t prompt_length, const llmc_generation_options* options,
                                     llmc_token_callback callback, void* user_data,
                                     llmc_generation_result** result) {
  return guarded("llmc_generator_generate", [&] {
    if (!generator) return nullArgument("llmc_generator_generate", "generator");
    if (!prompt && prompt_length) return nullArgument("llmc_generator_generate", "prompt");
    if (!result) return nullArgument("llmc_generator_generate", "result");
    return generate(generator, std::span<const int32_t>(prompt, prompt_length), options, callback,
                    user_data, result);
  });
}

llmc_status* llmc_generator_generate_text(llmc_generator* generator, const char* prompt,
                                          const llmc_generation_options* options,
                                          llmc_token_callback callback, void* user_data,
                                          llmc_generation_result** result) {
  return guarded("llmc_generator_generate_text", [&] {
    if (!generator) return nullArgument("llmc_generator_generate_text", "generator");
    if (!prompt) return nullArgument("llmc_generator_generate_text", "prompt");
    if (!result) return nullArgument("llmc_generator_generate_text", "result");
    const llmc::Tokenizer* tokenizer = generator->generator->tokenizer();
    if (!tokenizer)
      return llmc::failedPrecondition(
          "llmc_generator_generate_text: the engine carries no tokenizer (llmc compile "
          "--tokenizer); encode the prompt and call llmc_generator_generate");
    std::vector<int32_t> ids;
    LLMC_RETURN_IF_ERROR(tokenizer->encode(prompt, /*add_special_tokens=*/true, &ids));
    return generate(generator, ids, options, callback, user_data, result);
  });
}

size_t llmc_generation_result_token_count(const llmc_generation_result* result) {
  return result ? result->tokens.size() : 0;
}

const int32_t* llmc_generation_result_tokens(const llmc_generation_result* result) {
  return result ? result->tokens.data() : nullptr;
}

const char* llmc_generation_result_text(const llmc_generation_result* result) {
  return result ? result->text.c_str() : "";
}

llmc_finish_reason llmc_generation_result_finish_reason(const llmc_generation_result* result) {
  return result ? result->finish_reason : LLMC_FINISH_LENGTH;
}

void llmc_generation_result_free(llmc_generation_result* result) { delete result; }

}  // extern "C"
