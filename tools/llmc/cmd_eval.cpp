// llmc eval: the accuracy of an engine (e.g. quantized) against a reference engine (its float
// compile) on the same text: perplexity of both, mean KL divergence of the next-token
// distributions, top-1 agreement, and the logits' max/mean absolute error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli.h"
#include "llmc/engine.h"
#include "llmc/session.h"
#include "llmc/tokenizer.h"

namespace llmc::cli {

namespace {

struct EngineRun {
  std::shared_ptr<const Engine> engine;
  std::unique_ptr<Session> session;
  std::string ids_name, mask_name, positions_name;
  DType ids_dtype = DType::kInt64, mask_dtype = DType::kInt64, positions_dtype = DType::kInt64;
  size_t logits_index = 0;
};

Status open(const std::string& path, const SessionOptions& options, EngineRun* run) {
  LLMC_RETURN_IF_ERROR(Engine::load(path, &run->engine));
  for (const TensorInfo& input : run->engine->inputs()) {
    if (input.name == "input_ids") run->ids_name = input.name, run->ids_dtype = input.dtype;
    else if (input.name == "attention_mask") run->mask_name = input.name, run->mask_dtype = input.dtype;
    else if (input.name == "position_ids") run->positions_name = input.name, run->positions_dtype = input.dtype;
    else
      return invalidArgument(path + ": input '" + input.name +
                             "' is not one llmc eval feeds (input_ids, attention_mask, position_ids)");
  }
  if (run->ids_name.empty()) return invalidArgument(path + ": no input_ids input");
  bool found = false;
  for (size_t i = 0; i < run->engine->outputs().size() && !found; ++i) {
    const TensorInfo& output = run->engine->outputs()[i];
    if (output.dtype == DType::kFloat32 && output.dims.size() == 3) run->logits_index = i, found = true;
  }
  if (!found) return invalidArgument(path + ": no float32 logits output [batch, seq, vocab]");
  return Session::create(run->engine, options, &run->session);
}

Tensor integers(DType dtype, const std::vector<int64_t>& values) {
  Tensor t = Tensor::allocate(dtype, {1, static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kInt32) t.data<int32_t>()[i] = static_cast<int32_t>(values[i]);
    else t.data<int64_t>()[i] = values[i];
  }
  return t;
}

// Logits [T, vocab] of one window.
Status logitsOf(EngineRun& run, const std::vector<int32_t>& window, Tensor* logits) {
  std::vector<int64_t> ids(window.begin(), window.end()), ones(window.size(), 1), positions(window.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>(i);
  std::vector<NamedTensor> inputs{{run.ids_name, integers(run.ids_dtype, ids)}};
  if (!run.mask_name.empty()) inputs.push_back({run.mask_name, integers(run.mask_dtype, ones)});
  if (!run.positions_name.empty()) inputs.push_back({run.positions_name, integers(run.positions_dtype, positions)});
  std::vector<NamedTensor> outputs;
  LLMC_RETURN_IF_ERROR(run.session->run(inputs, &outputs).withContext(run.engine->path()));
  *logits = outputs[run.logits_index].tensor;
  if (logits->rank() != 3 || logits->dim(1) != static_cast<int64_t>(window.size()))
    return invalidArgument(run.engine->path() + ": logits " + shapeToString(logits->shape()) +
                           " do not have one row per token");
  return okStatus();
}

// log-softmax of one row, in double.
void logSoftmax(const float* logits, int64_t vocab, std::vector<double>* out) {
  out->resize(static_cast<size_t>(vocab));
  double max = logits[0];
  for (int64_t v = 1; v < vocab; ++v) max = std::max(max, static_cast<double>(logits[v]));
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(logits[v] - max);
  const double log_sum = max + std::log(sum);
  for (int64_t v = 0; v < vocab; ++v) (*out)[v] = logits[v] - log_sum;
}

}  // namespace

int runEval(const std::vector<std::string>& args) {
  std::string engine_path, reference_path, text_path, tokenizer_path;
  int64_t context = 0, max_windows = 0;
  bool json = false;
  SessionOptions session_options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto integer = [&](int64_t* value) { return i + 1 < args.size() && parseInt64(args[++i], value); };
    std::string flag_error;
    if (parseSessionFlag(args, &i, &session_options, &flag_error)) {
      if (!flag_error.empty()) return usageError("eval", flag_error);
    } else if (arg == "--reference" || arg == "--text" || arg == "--tokenizer") {
      if (i + 1 >= args.size()) return usageError("eval", arg + " needs a file");
      (arg == "--reference" ? reference_path : arg == "--text" ? text_path : tokenizer_path) = args[++i];
    } else if (arg == "--context") {
      if (!integer(&context) || context < 2) return usageError("eval", "--context needs N >= 2");
    } else if (arg == "--max-windows") {
      if (!integer(&max_windows) || max_windows < 1) return usageError("eval", "--max-windows needs N >= 1");
    } else if (arg == "--json") {
      json = true;
    } else if (!arg.empty() && arg[0] == '-') {
      return usageError("eval", "unknown option '" + arg + "'");
    } else if (engine_path.empty()) {
      engine_path = arg;
    } else {
      return usageError("eval", "more than one engine given");
    }
  }
  if (engine_path.empty()) return usageError("eval", "no engine given");
  if (reference_path.empty()) return usageError("eval", "no reference engine given (--reference FLOAT.engine)");
  if (text_path.empty()) return usageError("eval", "no text given (--text FILE)");

  EngineRun engine, reference;
  Status status = open(engine_path, session_options, &engine);
  if (status.ok()) status = open(reference_path, session_options, &reference);
  if (!status.ok()) return reportError("eval", status);
  std::unique_ptr<Tokenizer> tokenizer;
  if (!tokenizer_path.empty()) status = Tokenizer::fromFile(tokenizer_path, &tokenizer);
  else if (!reference.engine->tokenizerJson().empty()) status = Tokenizer::fromJson(reference.engine->tokenizerJson(), &tokenizer);
  else if (!engine.engine->tokenizerJson().empty()) status = Tokenizer::fromJson(engine.engine->tokenizerJson(), &tokenizer);
  else status = invalidArgument("neither engine carries a tokenizer: give --tokenizer tokenizer.json");
  if (!status.ok()) return reportError("eval", status);

  std::ifstream file(text_path, std::ios::binary);
  if (!file) return reportError("eval", invalidArgument(text_path + ": cannot open the text"));
  std::stringstream buffer;
  buffer << file.rdbuf();
  std::vector<int32_t> ids;
  status = tokenizer->encode(buffer.str(), false, &ids);
  if (!status.ok()) return reportError("eval", status.withContext(text_path));
  int64_t limit = 256;
  for (const EngineRun* run : {&engine, &reference})
    if (const LlmConfig* llm = run->engine->llmConfig()) limit = std::min(limit, llm->max_context);
  if (context == 0) context = limit;
  if (static_cast<int64_t>(ids.size()) < context)
    return reportError("eval", invalidArgument(text_path + ": " + std::to_string(ids.size()) +
                                               " tokens, fewer than one window of " + std::to_string(context)));

  // Non-overlapping windows; every position but a window's last predicts the next token.
  double nll_engine = 0, nll_reference = 0, kl = 0, max_error = 0, sum_error = 0;
  int64_t predictions = 0, agree = 0, logits_seen = 0, windows = 0;
  std::vector<double> p, q;
  for (size_t start = 0; start + context <= ids.size(); start += static_cast<size_t>(context)) {
    if (max_windows > 0 && windows >= max_windows) break;
    std::vector<int32_t> window(ids.begin() + static_cast<ptrdiff_t>(start),
                                ids.begin() + static_cast<ptrdiff_t>(start + context));
    Tensor a, b;
    status = logitsOf(engine, window, &a);
    if (status.ok()) status = logitsOf(reference, window, &b);
    if (!status.ok()) return reportError("eval", status);
    if (a.shape() != b.shape())
      return reportError("eval", invalidArgument("the engines' logits differ in shape: " + shapeToString(a.shape()) +
                                                 " vs " + shapeToString(b.shape())));
    const int64_t vocab = a.dim(2);
    for (int64_t t = 0; t < context; ++t) {
      const float* la = a.data<float>() + t * vocab;
      const float* lb = b.data<float>() + t * vocab;
      for (int64_t v = 0; v < vocab; ++v) {
        const double error = std::fabs(static_cast<double>(la[v]) - lb[v]);
        max_error = std::max(max_error, error);
        sum_error += error;
      }
      logits_seen += vocab;
      if (t + 1 == context) continue;
      logSoftmax(la, vocab, &q);
      logSoftmax(lb, vocab, &p);
      const int32_t next = window[static_cast<size_t>(t + 1)];
      nll_engine -= q[static_cast<size_t>(next)];
      nll_reference -= p[static_cast<size_t>(next)];
      for (int64_t v = 0; v < vocab; ++v) kl += std::exp(p[v]) * (p[v] - q[v]);
      agree += std::max_element(la, la + vocab) - la == std::max_element(lb, lb + vocab) - lb;
      ++predictions;
    }
    ++windows;
  }
  const double ppl_engine = std::exp(nll_engine / predictions), ppl_reference = std::exp(nll_reference / predictions);
  const double increase = ppl_engine / ppl_reference - 1;
  if (json) {
    std::printf("{\"tokens\": %lld, \"windows\": %lld, \"context\": %lld, \"predictions\": %lld, "
                "\"perplexity\": %.6f, \"reference_perplexity\": %.6f, \"perplexity_increase\": %.6f, "
                "\"mean_kl\": %.8f, \"top1_agreement\": %.6f, \"max_logit_error\": %.6f, "
                "\"mean_logit_error\": %.8f}\n",
                static_cast<long long>(ids.size()), static_cast<long long>(windows),
                static_cast<long long>(context), static_cast<long long>(predictions), ppl_engine, ppl_reference,
                increase, kl / predictions, static_cast<double>(agree) / predictions, max_error,
                sum_error / logits_seen);
    return kExitOk;
  }
  std::printf("eval %s against %s\n", engine_path.c_str(), reference_path.c_str());
  std::printf("text %s: %zu tokens; %lld windows of %lld, %lld predictions\n", text_path.c_str(), ids.size(),
              static_cast<long long>(windows), static_cast<long long>(context), static_cast<long long>(predictions));
  std::printf("perplexity          %10.4f (reference %.4f, %+.2f%%)\n", ppl_engine, ppl_reference, 100 * increase);
  std::printf("mean KL(ref || eng) %10.6f nats\n", kl / predictions);
  std::printf("top-1 agreement     %10.2f%%\n", 100.0 * agree / predictions);
  std::printf("logit error         max %.4f, mean %.6f\n", max_error, sum_error / logits_seen);
  return kExitOk;
}

}  // namespace llmc::cli
