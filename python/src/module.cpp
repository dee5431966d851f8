// llmc._llmc: the runtime's C++ API (and, in builds with the compiler, `llmc compile`) for
// Python, through nanobind. The Python package (python/llmc) wraps it; docs/python.md is the
// user's account.
//
// Rules kept here: every call that runs a model, a tokenizer over long text or the compiler
// releases the GIL; a Status that is not ok becomes the llmc.errors class of its code carrying
// the runtime's message; arrays cross without copies where the memory allows (inputs are
// viewed in place when C-contiguous and of the engine's dtype, outputs are handed to numpy with
// the runtime's own buffer as their owner).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat.h"
#include "cli.h"
#include "jinja.h"
#include "llmc/engine.h"
#include "llmc/generator.h"
#include "llmc/session.h"
#include "llmc/status.h"
#include "llmc/tensor.h"
#include "llmc/tokenizer.h"

#ifdef LLMC_HAVE_COMPILER
#include "compile_flags.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace llmc::python {
namespace {

// A Status that is not ok, on its way to Python (translated in the module's exception
// translator below into llmc.errors' class for its code).
struct StatusError {
  Status status;
};

void check(const Status& status) {
  if (!status.ok()) throw StatusError{status};
}

// DLPack dtypes <-> llmc::DType.
bool dtypeOf(const nb::dlpack::dtype& d, DType* out) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(d.code);
  if (d.lanes != 1) return false;
  if (code == Code::Float && d.bits == 32)
    *out = DType::kFloat32;
  else if (code == Code::Float && d.bits == 16)
    *out = DType::kFloat16;
  else if (code == Code::Float && d.bits == 64)
    *out = DType::kFloat64;
  else if (code == Code::Bfloat && d.bits == 16)
    *out = DType::kBFloat16;
  else if (code == Code::Int && d.bits == 8)
    *out = DType::kInt8;
  else if (code == Code::Int && d.bits == 16)
    *out = DType::kInt16;
  else if (code == Code::Int && d.bits == 32)
    *out = DType::kInt32;
  else if (code == Code::Int && d.bits == 64)
    *out = DType::kInt64;
  else if (code == Code::UInt && d.bits == 8)
    *out = DType::kUInt8;
  else if (code == Code::UInt && d.bits == 16)
    *out = DType::kUInt16;
  else if (code == Code::UInt && d.bits == 32)
    *out = DType::kUInt32;
  else if (code == Code::UInt && d.bits == 64)
    *out = DType::kUInt64;
  else if (code == Code::Bool && d.bits == 8)
    *out = DType::kBool;
  else
    return false;
  return true;
}

nb::dlpack::dtype dlpackOf(DType dtype) {
  using Code = nb::dlpack::dtype_code;
  auto make = [](Code code, int bits) {
    return nb::dlpack::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  };
  switch (dtype) {
    case DType::kFloat32: return make(Code::Float, 32);
    case DType::kFloat16: return make(Code::Float, 16);
    case DType::kFloat64: return make(Code::Float, 64);
    case DType::kBFloat16: return make(Code::Bfloat, 16);
    case DType::kInt8: return make(Code::Int, 8);
    case DType::kInt16: return make(Code::Int, 16);
    case DType::kInt32: return make(Code::Int, 32);
    case DType::kInt64: return make(Code::Int, 64);
    case DType::kUInt8: return make(Code::UInt, 8);
    case DType::kUInt16: return make(Code::UInt, 16);
    case DType::kUInt32: return make(Code::UInt, 32);
    case DType::kUInt64: return make(Code::UInt, 64);
    case DType::kBool: return make(Code::Bool, 8);
    default: return make(Code::Float, 0);
  }
}

using AnyArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

// An output tensor as a numpy array over the tensor's own storage (a heap copy of the handle
// keeps it alive as long as the array).
nb::object toNumpy(const std::string& name, const Tensor& tensor) {
  if (tensor.dtype() == DType::kBFloat16)
    throw StatusError{
        unimplemented("output " + name + " is bfloat16, which numpy has no type for")};
  auto* owned = new Tensor(tensor);
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<size_t> shape(tensor.shape().begin(), tensor.shape().end());
  void* data = owned->data();
  static char empty = 0;
  if (!data) data = &empty;  // zero elements
  nb::ndarray<nb::numpy> array(data, shape.size(), shape.data(), owner, nullptr,
                               dlpackOf(tensor.dtype()));
  return array.cast();
}

const char* backendName(Backend backend) {
  switch (backend) {
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
    default: return "auto";
  }
}

Backend backendOf(const std::string& name) {
  if (name == "auto") return Backend::kAuto;
  if (name == "cpu") return Backend::kCpu;
  if (name == "cuda") return Backend::kCuda;
  throw StatusError{invalidArgument("backend takes 'auto', 'cpu' or 'cuda', got '" + name + "'")};
}

SessionOptions sessionOptions(const std::string& backend, int threads) {
  if (threads < 0 || threads > 256)
    throw StatusError{invalidArgument("threads takes 0 (every physical core) to 256, got " +
                                      std::to_string(threads))};
  SessionOptions options;
  options.backend = backendOf(backend);
  options.threads = threads;
  return options;
}

nb::list dimsOf(const TensorInfo& info) {
  nb::list dims;
  for (const DimInfo& d : info.dims) {
    if (d.size >= 0)
      dims.append(d.size);
    else if (!d.symbol.empty())
      dims.append(d.symbol);
    else
      dims.append(nb::none());
  }
  return dims;
}

// ---- Engine ---------------------------------------------------------------------------------

struct PyEngine {
  std::shared_ptr<const Engine> engine;
};

PyEngine loadEngine(const std::string& path, bool verify_weights) {
  LoadOptions options;
  options.verify_weights_checksum = verify_weights;
  PyEngine out;
  Status status;
  {
    nb::gil_scoped_release release;
    status = Engine::load(path, &out.engine, options);
  }
  check(status);
  return out;
}

nb::list infosOf(const std::vector<TensorInfo>& infos) {
  nb::list out;
  for (const TensorInfo& info : infos)
    out.append(nb::make_tuple(info.name, dtypeName(info.dtype), dimsOf(info)));
  return out;
}

nb::dict metadataOf(const Engine& engine) {
  nb::dict m;
  m["format_version"] = engine.formatVersion();
  m["compiler_version"] = engine.compilerVersion();
  m["target"] = engine.target();
  m["source_hash"] = engine.sourceHash();
  m["build_options"] = engine.buildOptions();
  m["weight_bytes"] = engine.weightBytes();
  m["arena_bytes"] = engine.arenaBytes();
  m["steps"] = engine.numSteps();
  m["stripped_weights"] = engine.strippedWeights();
  m["has_tokenizer"] = !engine.tokenizerJson().empty();
  // As `llmc inspect --json` lists them: max None when unbounded; "expression" when the
  // compiler found the symbol equal to a sum of others (the session checks it).
  nb::list symbols;
  for (const SymbolInfo& s : engine.symbols()) {
    nb::dict symbol;
    symbol["name"] = s.name;
    symbol["min"] = s.min;
    symbol["max"] = s.max >= 0 ? nb::object(nb::int_(s.max)) : nb::none();
    if (!s.expression.empty()) symbol["expression"] = s.expression;
    symbols.append(symbol);
  }
  m["symbols"] = symbols;
  if (const LlmConfig* llm = engine.llmConfig()) {
    nb::dict l;
    l["num_layers"] = llm->num_layers;
    l["num_heads"] = llm->num_heads;
    l["num_kv_heads"] = llm->num_kv_heads;
    l["head_dim"] = llm->head_dim;
    l["vocab_size"] = llm->vocab_size;
    l["max_context"] = llm->max_context;
    l["bos_token_id"] = llm->bos_token_id;
    l["eos_token_ids"] = llm->eos_token_ids;
    l["attention_windows"] = llm->attention_windows;
    m["llm"] = l;
  } else {
    m["llm"] = nb::none();
  }
  return m;
}

// ---- Session --------------------------------------------------------------------------------

// One thread at a time (Session's rule): a second caller gets an error rather than a race.
struct PySession {
  std::shared_ptr<const Engine> engine;
  std::unique_ptr<Session> session;
  std::mutex busy;
};

std::unique_ptr<PySession> makeSession(const PyEngine& engine, const std::string& backend,
                                       int threads) {
  auto out = std::make_unique<PySession>();
  out->engine = engine.engine;
  const SessionOptions options = sessionOptions(backend, threads);
  Status status;
  {
    nb::gil_scoped_release release;
    status = Session::create(engine.engine, options, &out->session);
  }
  check(status);
  return out;
}

nb::dict runSession(PySession& self, const std::vector<std::pair<std::string, AnyArray>>& feeds) {
  std::unique_lock<std::mutex> lock(self.busy, std::try_to_lock);
  if (!lock.owns_lock())
    throw StatusError{failedPrecondition(
        "Session.run: this session is running on another thread (a session runs one call at a "
        "time; create one session per thread)")};
  std::vector<NamedTensor> inputs;
  inputs.reserve(feeds.size());
  for (const auto& [name, array] : feeds) {
    DType dtype = DType::kUndefined;
    if (!dtypeOf(array.dtype(), &dtype))
      throw StatusError{invalidArgument("input " + name +
                                        ": an array of a dtype llmc has no "
                                        "type for (DLPack code " +
                                        std::to_string(array.dtype().code) + ", " +
                                        std::to_string(array.dtype().bits) + " bits)")};
    Shape shape(array.ndim());
    for (size_t d = 0; d < array.ndim(); ++d) shape[d] = static_cast<int64_t>(array.shape(d));
    inputs.push_back({name, Tensor::view(dtype, std::move(shape), array.data())});
  }
  std::vector<NamedTensor> outputs;
  Status status;
  {
    nb::gil_scoped_release release;
    status = self.session->run(inputs, &outputs);
  }
  check(status);
  nb::dict result;
  for (const NamedTensor& output : outputs)
    result[output.name.c_str()] = toNumpy(output.name, output.tensor);
  return result;
}

// ---- Tokenizer ------------------------------------------------------------------------------

struct PyTokenizer {
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<serve::ChatTemplate> chat_template;  // null: none
  std::string chat_template_source;
};

PyTokenizer tokenizerOf(std::unique_ptr<Tokenizer> tokenizer, const std::string& config_json) {
  PyTokenizer out;
  out.tokenizer = std::move(tokenizer);
  if (!config_json.empty()) {
    serve::ChatConfig chat;
    check(serve::parseTokenizerConfig(config_json, &chat).withContext("tokenizer_config.json"));
    if (!chat.chat_template.empty()) {
      check(serve::ChatTemplate::create(chat.chat_template, chat, &out.chat_template));
      out.chat_template_source = chat.chat_template;
    }
  }
  return out;
}

PyTokenizer tokenizerFromJson(const std::string& json, const std::string& config_json) {
  std::unique_ptr<Tokenizer> tokenizer;
  Status status;
  {
    nb::gil_scoped_release release;
    status = Tokenizer::fromJson(json, &tokenizer);
  }
  check(status);
  return tokenizerOf(std::move(tokenizer), config_json);
}

PyTokenizer engineTokenizer(const PyEngine& engine) {
  if (engine.engine->tokenizerJson().empty())
    throw StatusError{notFound(engine.engine->path() +
                               " has no tokenizer (llmc compile --tokenizer tokenizer.json)")};
  return tokenizerFromJson(engine.engine->tokenizerJson(), engine.engine->tokenizerConfigJson());
}

// Python values (None, bool, int, float, str, list, tuple, dict) as the template engine's.
serve::jinja::Value jinjaOf(nb::handle value, int depth = 0) {
  if (depth > 64) throw StatusError{invalidArgument("chat messages nest deeper than 64 levels")};
  if (value.is_none()) return serve::jinja::Value::none();
  if (nb::isinstance<nb::bool_>(value)) return serve::jinja::Value(nb::cast<bool>(value));
  if (nb::isinstance<nb::int_>(value)) return serve::jinja::Value(nb::cast<int64_t>(value));
  if (nb::isinstance<nb::float_>(value)) return serve::jinja::Value(nb::cast<double>(value));
  if (nb::isinstance<nb::str>(value)) return serve::jinja::Value(nb::cast<std::string>(value));
  if (nb::isinstance<nb::dict>(value)) {
    serve::jinja::Value out = serve::jinja::Value::dict();
    for (auto [k, v] : nb::borrow<nb::dict>(value)) {
      if (!nb::isinstance<nb::str>(k))
        throw StatusError{invalidArgument("chat messages: dict keys must be strings")};
      out.setKey(nb::cast<std::string>(k), jinjaOf(v, depth + 1));
    }
    return out;
  }
  if (nb::isinstance<nb::list>(value) || nb::isinstance<nb::tuple>(value)) {
    serve::jinja::Value::List items;
    for (nb::handle item : value) items.push_back(jinjaOf(item, depth + 1));
    return serve::jinja::Value::list(std::move(items));
  }
  throw StatusError{invalidArgument("chat messages: a value of type " +
                                    nb::cast<std::string>(nb::str(value.type())) +
                                    " (messages hold None, bool, int, float, str, list and dict)")};
}

std::string applyChatTemplate(const PyTokenizer& self, nb::handle messages,
                              bool add_generation_prompt, nb::handle extra) {
  if (!self.chat_template)
    throw StatusError{
        notFound("this tokenizer has no chat template (a tokenizer_config.json "
                 "with chat_template: llmc compile --tokenizer-config)")};
  const serve::jinja::Value messages_value = jinjaOf(messages);
  const serve::jinja::Value extra_value =
      extra.is_none() ? serve::jinja::Value::dict() : jinjaOf(extra);
  if (!extra_value.isDict()) throw StatusError{invalidArgument("chat template variables: a dict")};
  std::string text;
  check(self.chat_template->render(messages_value, add_generation_prompt, extra_value, &text));
  return text;
}

// ---- Generator ------------------------------------------------------------------------------

struct PyGenerator {
  std::shared_ptr<const Engine> engine;
  std::unique_ptr<Generator> generator;
  std::mutex busy;
  std::atomic<bool> running{false};
  std::atomic<bool> cancel_requested{false};
};

std::unique_ptr<PyGenerator> makeGenerator(const PyEngine& engine, const std::string& backend,
                                           int threads, bool use_kv_cache, int64_t kv_cache_tokens,
                                           const std::string& kv_cache_dtype,
                                           bool kv_cache_prefault) {
  GeneratorConfig config;
  config.session = sessionOptions(backend, threads);
  config.use_kv_cache = use_kv_cache;
  if (kv_cache_tokens < 0)
    throw StatusError{invalidArgument("kv_cache_tokens takes 0 (the default size) or more")};
  config.kv_cache_tokens = kv_cache_tokens;
  if (!kvCacheDtypeFromName(kv_cache_dtype, &config.kv_cache_dtype))
    throw StatusError{invalidArgument(std::string("kv_cache_dtype takes ") + kKvCacheDtypeNames +
                                      ", got '" + kv_cache_dtype + "'")};
  config.kv_cache_prefault = kv_cache_prefault;
  auto out = std::make_unique<PyGenerator>();
  out->engine = engine.engine;
  Status status;
  {
    nb::gil_scoped_release release;
    status = Generator::create(engine.engine, config, &out->generator);
  }
  check(status);
  return out;
}

const char* finishName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStopToken: return "stop_token";
    case FinishReason::kStopString: return "stop_string";
    default: return "length";
  }
}

nb::dict resultOf(const GenerationResult& r, bool cancelled) {
  nb::dict d;
  d["tokens"] = r.tokens;
  d["text"] = nb::bytes(r.text.data(), r.text.size());
  d["logprobs"] = r.logprobs;
  d["top_logprobs"] = r.top_logprobs;
  d["finish_reason"] = cancelled ? "cancelled" : finishName(r.finish_reason);
  d["time_to_first_token_ms"] = r.time_to_first_token_ms;
  d["decode_tokens_per_s"] = r.decode_tokens_per_s;
  d["prompt_tokens_cached"] = r.prompt_tokens_cached;
  return d;
}

// The stop ids `llmc generate` uses when none are given: the tokenizer's EOS, else the
// engine's (the compiler's --eos-id or the model folder's).
std::vector<int32_t> defaultStopIds(const PyGenerator& self) {
  const Tokenizer* tokenizer = self.generator->tokenizer();
  if (tokenizer && tokenizer->eosId()) return {*tokenizer->eosId()};
  if (self.engine->llmConfig()) return self.engine->llmConfig()->eos_token_ids;
  return {};
}

// Runs with the GIL released; `on_token(id, text)` (may be None) is called with the GIL held,
// text being what the token completes of the decoded output (empty without a tokenizer).
// Returning False from it, Generator.cancel() from another thread, or an exception in it ends
// the generation; the first two return the tokens so far with finish_reason "cancelled".
nb::dict generate(PyGenerator& self, const std::vector<int32_t>& prompt, GenerationOptions options,
                  std::optional<std::vector<int32_t>> stop_token_ids, nb::object on_token,
                  int num_beams, float length_penalty, bool early_stopping) {
  std::unique_lock<std::mutex> lock(self.busy, std::try_to_lock);
  if (!lock.owns_lock())
    throw StatusError{failedPrecondition(
        "Generator.generate: this generator is generating on another thread (one generation at "
        "a time per generator; create one generator per thread)")};
  options.stop_token_ids = stop_token_ids ? *stop_token_ids : defaultStopIds(self);
  const Tokenizer* tokenizer = self.generator->tokenizer();
  if (!options.stop_strings.empty() && !tokenizer)
    throw StatusError{
        invalidArgument("stop strings need a tokenizer: this engine has none "
                        "(llmc compile --tokenizer)")};
  std::unique_ptr<Tokenizer::StreamDecoder> stream;
  if (tokenizer && !on_token.is_none()) stream = tokenizer->streamDecoder(true);
  std::optional<nb::python_error> callback_error;
  Status stream_status;
  bool user_stopped = false;
  auto callback = [&](int32_t id) -> bool {
    if (self.cancel_requested.load()) return false;
    if (on_token.is_none()) return true;
    std::string text;
    if (stream) stream_status = stream->step(id, &text);
    if (!stream_status.ok()) return false;
    nb::gil_scoped_acquire acquire;
    try {
      nb::object keep = on_token(id, nb::bytes(text.data(), text.size()));
      if (!keep.is_none() && !nb::cast<bool>(keep)) {
        user_stopped = true;
        return false;
      }
    } catch (nb::python_error& e) {
      callback_error.emplace(std::move(e));
      return false;
    }
    return !self.cancel_requested.load();
  };
  GenerationResult result;
  Status status;
  self.cancel_requested = false;
  self.running = true;
  {
    nb::gil_scoped_release release;
    if (num_beams > 0) {
      BeamSearchOptions beam;
      beam.num_beams = num_beams;
      beam.max_new_tokens = options.max_new_tokens;
      beam.length_penalty = length_penalty;
      beam.early_stopping = early_stopping;
      beam.stop_token_ids = options.stop_token_ids;
      status = self.generator->beamSearch(prompt, beam, &result);
      if (status.ok())
        for (int32_t id : result.tokens)
          if (!callback(id)) break;
    } else {
      status = self.generator->generate(prompt, options, callback, &result);
    }
    if (stream && stream_status.ok() && !callback_error) {
      std::string rest;
      stream_status = stream->finish(&rest);
      if (stream_status.ok() && !rest.empty() && !on_token.is_none()) {
        nb::gil_scoped_acquire acquire;
        try {
          on_token(-1, nb::bytes(rest.data(), rest.size()));
        } catch (nb::python_error& e) {
          callback_error.emplace(std::move(e));
        }
      }
    }
  }
  self.running = false;
  const bool cancelled = self.cancel_requested.exchange(false) || user_stopped;
  if (callback_error) throw std::move(*callback_error);
  check(stream_status);
  if (status.code() == StatusCode::kCancelled && cancelled) return resultOf(result, true);
  check(status);
  return resultOf(result, false);
}

}  // namespace
}  // namespace llmc::python

NB_MODULE(_llmc, m) {
  using namespace llmc;
  using namespace llmc::python;
  m.doc() = "llmc's runtime and compiler (the llmc package wraps this module)";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      nb::object errors = nb::module_::import_("llmc.errors");
      nb::object cls = errors.attr("_class_for_code")(static_cast<int>(e.status.code()));
      PyErr_SetObject(cls.ptr(),
                      nb::make_tuple(e.status.message(), static_cast<int>(e.status.code())).ptr());
    }
  });

  m.def("has_compiler", [] {
#ifdef LLMC_HAVE_COMPILER
    return true;
#else
    return false;
#endif
  });

#ifdef LLMC_HAVE_COMPILER
  m.def(
      "compile_args",
      [](const std::vector<std::string>& args, nb::object progress) {
        cli::CompileProgress on_stage;
        // The caller's frame keeps `progress` alive; the callback (copied inside the compiler,
        // without the GIL) holds only its pointer.
        PyObject* fn = progress.is_none() ? nullptr : progress.ptr();
        if (fn)
          on_stage = [fn](const std::string& stage) {
            nb::gil_scoped_acquire acquire;
            try {
              nb::handle callback(fn);
              callback(stage);
            } catch (nb::python_error& e) {
              e.discard_as_unraisable("llmc.compile progress callback");
            }
          };
        cli::CompileRun run;
        Status status;
        {
          nb::gil_scoped_release release;
          status = cli::compileFromArgs(args, on_stage, &run);
        }
        check(status);
        nb::dict out;
        out["output"] = run.options.output_path;
        out["model"] = run.options.input_path;
        out["steps"] = run.stats.num_steps;
        out["weight_bytes"] = run.stats.weight_bytes;
        out["arena_bytes"] = run.stats.arena_bytes;
        out["engine_bytes"] = run.stats.engine_bytes;
        out["llm_layers"] = run.stats.llm_recognized ? run.stats.llm_layers : 0;
        out["warnings"] = run.warnings;
        out["notes"] = run.notes;
        out["from_dir"] = run.from_dir;
        out["seconds"] = run.seconds;
        nb::list fusions;
        for (const FusionReport& f : run.stats.fusions)
          fusions.append(nb::make_tuple(f.fired, f.pass, f.pattern, f.nodes, f.reason));
        out["fusions"] = fusions;
        return out;
      },
      "args"_a, "progress"_a.none() = nb::none());
#endif

  nb::class_<PyEngine>(m, "Engine")
      .def_static("load", &loadEngine, "path"_a, "verify_weights"_a = true)
      .def_prop_ro("path", [](const PyEngine& e) { return e.engine->path(); })
      .def_prop_ro("inputs", [](const PyEngine& e) { return infosOf(e.engine->inputs()); })
      .def_prop_ro("outputs", [](const PyEngine& e) { return infosOf(e.engine->outputs()); })
      .def_prop_ro("metadata", [](const PyEngine& e) { return metadataOf(*e.engine); })
      .def_prop_ro("tokenizer_config_json",
                   [](const PyEngine& e) { return e.engine->tokenizerConfigJson(); })
      .def_prop_ro("generation_config_json",
                   [](const PyEngine& e) { return e.engine->generationConfigJson(); })
      .def("tokenizer", &engineTokenizer);

  nb::class_<PySession>(m, "Session")
      .def_static("create", &makeSession, "engine"_a, "backend"_a = "auto", "threads"_a = 0)
      .def("run", &runSession, "feeds"_a)
      .def_prop_ro("backend", [](const PySession& s) { return backendName(s.session->backend()); })
      .def_prop_ro("threads", [](const PySession& s) { return s.session->threads(); })
      .def_prop_ro("arena_bytes", [](const PySession& s) { return s.session->arenaBytes(); });

  nb::class_<PyTokenizer>(m, "Tokenizer")
      .def_static("from_json", &tokenizerFromJson, "json"_a, "config_json"_a = "")
      .def_static("from_engine", &engineTokenizer, "engine"_a)
      .def(
          "encode",
          [](const PyTokenizer& t, const std::string& text, bool add_special_tokens) {
            std::vector<int32_t> ids;
            Status status;
            {
              nb::gil_scoped_release release;
              status = t.tokenizer->encode(text, add_special_tokens, &ids);
            }
            check(status);
            return ids;
          },
          "text"_a, "add_special_tokens"_a = true)
      .def(
          "decode",
          [](const PyTokenizer& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            std::string text;
            check(t.tokenizer->decode(ids, skip_special_tokens, &text));
            return nb::bytes(text.data(), text.size());
          },
          "ids"_a, "skip_special_tokens"_a = false)
      .def("token_to_id",
           [](const PyTokenizer& t, const std::string& token) -> std::optional<int32_t> {
             const int32_t id = t.tokenizer->tokenToId(token);
             if (id < 0) return std::nullopt;
             return id;
           })
      .def("id_to_token",
           [](const PyTokenizer& t, int32_t id) -> std::optional<std::string> {
             std::string token = t.tokenizer->idToToken(id);
             if (token.empty()) return std::nullopt;
             return token;
           })
      .def("is_special",
           [](const PyTokenizer& t, int32_t id) { return t.tokenizer->isSpecialToken(id); })
      .def_prop_ro("vocab_size", [](const PyTokenizer& t) { return t.tokenizer->vocabSize(); })
      .def_prop_ro("bos_id", [](const PyTokenizer& t) { return t.tokenizer->bosId(); })
      .def_prop_ro("eos_id", [](const PyTokenizer& t) { return t.tokenizer->eosId(); })
      .def_prop_ro("chat_template",
                   [](const PyTokenizer& t) -> std::optional<std::string> {
                     if (!t.chat_template) return std::nullopt;
                     return t.chat_template_source;
                   })
      .def("apply_chat_template", &applyChatTemplate, "messages"_a,
           "add_generation_prompt"_a = true, "variables"_a.none() = nb::none());

  nb::class_<PyGenerator>(m, "Generator")
      .def_static("create", &makeGenerator, "engine"_a, "backend"_a = "auto", "threads"_a = 0,
                  "use_kv_cache"_a = true, "kv_cache_tokens"_a = 0, "kv_cache_dtype"_a = "auto",
                  "kv_cache_prefault"_a = false)
      .def(
          "generate",
          [](PyGenerator& self, const std::vector<int32_t>& prompt, int32_t max_new_tokens,
             float temperature, int32_t top_k, float top_p, float min_p, float repetition_penalty,
             float presence_penalty, float frequency_penalty, uint64_t seed, int32_t logprobs,
             std::vector<std::pair<int32_t, float>> logit_bias, std::vector<std::string> stop,
             std::optional<std::vector<int32_t>> stop_token_ids, nb::object on_token, int num_beams,
             float length_penalty, bool early_stopping) {
            if (max_new_tokens < 0)
              throw StatusError{invalidArgument("max_new_tokens takes 0 or more, got " +
                                                std::to_string(max_new_tokens))};
            GenerationOptions options;
            options.max_new_tokens = max_new_tokens;
            options.sampling.temperature = temperature;
            options.sampling.top_k = top_k;
            options.sampling.top_p = top_p;
            options.sampling.min_p = min_p;
            options.sampling.repetition_penalty = repetition_penalty;
            options.sampling.presence_penalty = presence_penalty;
            options.sampling.frequency_penalty = frequency_penalty;
            options.sampling.seed = seed;
            options.sampling.num_logprobs = logprobs;
            options.sampling.logit_bias = std::move(logit_bias);
            options.stop_strings = std::move(stop);
            return generate(self, prompt, std::move(options), std::move(stop_token_ids),
                            std::move(on_token), num_beams, length_penalty, early_stopping);
          },
          "prompt"_a, "max_new_tokens"_a, "temperature"_a, "top_k"_a, "top_p"_a, "min_p"_a,
          "repetition_penalty"_a, "presence_penalty"_a, "frequency_penalty"_a, "seed"_a,
          "logprobs"_a, "logit_bias"_a, "stop"_a, "stop_token_ids"_a.none(), "on_token"_a.none(),
          "num_beams"_a, "length_penalty"_a, "early_stopping"_a)
      .def("cancel",
           [](PyGenerator& self) {
             if (!self.running.load()) return false;
             self.cancel_requested = true;
             return true;
           })
      .def_prop_ro("uses_kv_cache", [](const PyGenerator& g) { return g.generator->usesKvCache(); })
      .def_prop_ro("kv_cache_dtype",
                   [](const PyGenerator& g) -> std::optional<std::string> {
                     if (!g.generator->usesKvCache()) return std::nullopt;
                     return std::string(kvCacheDtypeName(g.generator->kvCacheDtype()));
                   })
      .def_prop_ro("vocab_size", [](const PyGenerator& g) { return g.generator->vocabSize(); })
      .def_prop_ro("max_sequence_length",
                   [](const PyGenerator& g) { return g.generator->maxSequenceLength(); });
}
