// The accuracy comparison of `llmc eval` and `llmc compile --max-ppl-increase` (eval.h).
#include "eval.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "cli.h"
#include "core/file_io.h"
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

Status open(std::shared_ptr<const Engine> engine, const SessionOptions& options, EngineRun* run) {
  run->engine = std::move(engine);
  const std::string& path = run->engine->path();
  for (const TensorInfo& input : run->engine->inputs()) {
    if (input.dtype != DType::kInt32 && input.dtype != DType::kInt64)
      return invalidArgument(path + ": input '" + input.name + "' is " + dtypeName(input.dtype) +
                             "; llmc eval feeds int32 or int64 ids, masks and positions");
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

Status evaluateEngine(std::shared_ptr<const Engine> engine_in, std::shared_ptr<const Engine> reference_in,
                      const SessionOptions& options, const std::vector<int32_t>& ids, int64_t context,
                      int64_t max_windows, EvalMetrics* metrics) {
  EngineRun engine, reference;
  LLMC_RETURN_IF_ERROR(open(std::move(engine_in), options, &engine));
  LLMC_RETURN_IF_ERROR(open(std::move(reference_in), options, &reference));
  if (static_cast<int64_t>(ids.size()) < context)
    return invalidArgument("the text has " + std::to_string(ids.size()) + " tokens, fewer than one window of " +
                           std::to_string(context));
  double nll_engine = 0, nll_reference = 0, kl = 0, max_error = 0, sum_error = 0;
  int64_t predictions = 0, agree = 0, logits_seen = 0, windows = 0;
  std::vector<double> p, q;
  for (size_t start = 0; start + context <= ids.size(); start += static_cast<size_t>(context)) {
    if (max_windows > 0 && windows >= max_windows) break;
    std::vector<int32_t> window(ids.begin() + static_cast<ptrdiff_t>(start),
                                ids.begin() + static_cast<ptrdiff_t>(start + context));
    Tensor a, b;
    LLMC_RETURN_IF_ERROR(logitsOf(engine, window, &a));
    LLMC_RETURN_IF_ERROR(logitsOf(reference, window, &b));
    if (a.shape() != b.shape())
      return invalidArgument("the engines' logits differ in shape: " + shapeToString(a.shape()) + " vs " +
                             shapeToString(b.shape()));
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
  metrics->windows = windows;
  metrics->context = context;
  metrics->predictions = predictions;
  metrics->perplexity = std::exp(nll_engine / predictions);
  metrics->reference_perplexity = std::exp(nll_reference / predictions);
  metrics->mean_kl = kl / predictions;
  metrics->top1_agreement = static_cast<double>(agree) / predictions;
  metrics->max_logit_error = max_error;
  metrics->mean_logit_error = sum_error / logits_seen;
  return okStatus();
}

Status loadTokenizer(const std::string& tokenizer_path, const std::vector<std::shared_ptr<const Engine>>& engines,
                     std::unique_ptr<Tokenizer>* tokenizer) {
  if (!tokenizer_path.empty()) return loadTokenizerFile(tokenizer_path, tokenizer);
  for (const auto& engine : engines)
    if (!*tokenizer && !engine->tokenizerJson().empty())
      LLMC_RETURN_IF_ERROR(Tokenizer::fromJson(engine->tokenizerJson(), tokenizer));
  if (!*tokenizer) return invalidArgument("no engine carries a tokenizer: give --tokenizer tokenizer.json");
  return okStatus();
}

namespace {

// An encoder's session and which of input_ids / attention_mask / token_type_ids it takes.
struct EncoderRun {
  std::shared_ptr<const Engine> engine;
  std::unique_ptr<Session> session;
  std::vector<std::pair<std::string, DType>> inputs;
  size_t output_index = 0;
};

Status openEncoder(std::shared_ptr<const Engine> engine, const SessionOptions& options, const std::string& output,
                   EncoderRun* run) {
  run->engine = std::move(engine);
  const std::string& path = run->engine->path();
  for (const TensorInfo& input : run->engine->inputs()) {
    if (input.name != "input_ids" && input.name != "attention_mask" && input.name != "token_type_ids")
      return invalidArgument(path + ": input '" + input.name +
                             "' is not one llmc eval feeds an encoder (input_ids, attention_mask, token_type_ids)");
    if (input.dtype != DType::kInt32 && input.dtype != DType::kInt64)
      return invalidArgument(path + ": input '" + input.name + "' is " + dtypeName(input.dtype) +
                             "; llmc eval feeds int32 or int64 ids and masks");
    run->inputs.push_back({input.name, input.dtype});
  }
  bool found = false;
  for (size_t i = 0; i < run->engine->outputs().size() && !found; ++i) {
    const TensorInfo& info = run->engine->outputs()[i];
    if (output.empty() ? info.dtype == DType::kFloat32 && info.dims.size() == 3 : info.name == output)
      run->output_index = i, found = true;
  }
  if (!found)
    return invalidArgument(path + (output.empty() ? ": no float32 output [batch, tokens, hidden]"
                                                  : ": no output named '" + output + "'"));
  return Session::create(run->engine, options, &run->session);
}

Status encode(EncoderRun& run, const std::vector<int32_t>& sentence, Tensor* out) {
  std::vector<int64_t> ids(sentence.begin(), sentence.end()), ones(sentence.size(), 1), zeros(sentence.size(), 0);
  std::vector<NamedTensor> inputs;
  for (const auto& [name, dtype] : run.inputs)
    inputs.push_back({name, integers(dtype, name == "input_ids" ? ids : name == "attention_mask" ? ones : zeros)});
  std::vector<NamedTensor> outputs;
  LLMC_RETURN_IF_ERROR(run.session->run(inputs, &outputs).withContext(run.engine->path()));
  *out = outputs[run.output_index].tensor;
  if (out->dtype() != DType::kFloat32 || out->rank() != 3 || out->dim(0) != 1 ||
      out->dim(1) != static_cast<int64_t>(sentence.size()))
    return invalidArgument(run.engine->path() + ": output " + shapeToString(out->shape()) +
                           " is not float32 [1, tokens, hidden]");
  return okStatus();
}

double cosine(const float* a, const float* b, int64_t n) {
  double dot = 0, na = 0, nb = 0;
  for (int64_t i = 0; i < n; ++i) dot += static_cast<double>(a[i]) * b[i], na += a[i] * static_cast<double>(a[i]),
                                   nb += b[i] * static_cast<double>(b[i]);
  return na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : (na == nb ? 1.0 : 0.0);
}

}  // namespace

Status evaluateEncoder(std::shared_ptr<const Engine> engine_in, std::shared_ptr<const Engine> reference_in,
                       const SessionOptions& options, const std::vector<std::vector<int32_t>>& sentences,
                       const std::string& output, EncoderMetrics* metrics) {
  EncoderRun engine, reference;
  LLMC_RETURN_IF_ERROR(openEncoder(std::move(engine_in), options, output, &engine));
  // The reference's output of the same name as the engine's (not its own first candidate).
  LLMC_RETURN_IF_ERROR(openEncoder(std::move(reference_in), options,
                                   engine.engine->outputs()[engine.output_index].name, &reference));
  if (sentences.empty()) return invalidArgument("no sentences to encode");
  *metrics = EncoderMetrics();
  metrics->output = engine.engine->outputs()[engine.output_index].name;
  metrics->min_cosine = metrics->min_token_cosine = 1;
  double sum = 0, token_sum = 0;
  for (const std::vector<int32_t>& sentence : sentences) {
    Tensor a, b;
    LLMC_RETURN_IF_ERROR(encode(engine, sentence, &a));
    LLMC_RETURN_IF_ERROR(encode(reference, sentence, &b));
    if (a.shape() != b.shape())
      return invalidArgument("the engines' outputs differ in shape: " + shapeToString(a.shape()) + " vs " +
                             shapeToString(b.shape()));
    const int64_t tokens = a.dim(1), hidden = a.dim(2);
    std::vector<float> pooled_a(static_cast<size_t>(hidden), 0.0f), pooled_b(pooled_a.size(), 0.0f);
    for (int64_t t = 0; t < tokens; ++t) {
      const float* ra = a.data<float>() + t * hidden;
      const float* rb = b.data<float>() + t * hidden;
      const double c = cosine(ra, rb, hidden);
      token_sum += c;
      metrics->min_token_cosine = std::min(metrics->min_token_cosine, c);
      for (int64_t h = 0; h < hidden; ++h) {
        pooled_a[static_cast<size_t>(h)] += ra[h] / static_cast<float>(tokens);
        pooled_b[static_cast<size_t>(h)] += rb[h] / static_cast<float>(tokens);
        metrics->max_abs_error = std::max(metrics->max_abs_error, std::fabs(static_cast<double>(ra[h]) - rb[h]));
      }
    }
    const double c = cosine(pooled_a.data(), pooled_b.data(), hidden);
    sum += c;
    metrics->min_cosine = std::min(metrics->min_cosine, c);
    metrics->tokens += tokens;
    ++metrics->sentences;
  }
  metrics->mean_cosine = sum / static_cast<double>(metrics->sentences);
  metrics->mean_token_cosine = token_sum / static_cast<double>(metrics->tokens);
  return okStatus();
}

Status tokenizeLines(const std::string& path, const std::string& tokenizer_path,
                     const std::vector<std::shared_ptr<const Engine>>& engines,
                     std::vector<std::vector<int32_t>>* sentences) {
  std::unique_ptr<Tokenizer> tokenizer;
  LLMC_RETURN_IF_ERROR(loadTokenizer(tokenizer_path, engines, &tokenizer));
  std::string text;
  LLMC_RETURN_IF_ERROR(readFile(path, "--sentences", &text));
  std::istringstream lines(text);
  sentences->clear();
  std::string line;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
    if (line.empty()) continue;
    std::vector<int32_t> ids;
    LLMC_RETURN_IF_ERROR(tokenizer->encode(line, true, &ids).withContext(path + ":" + std::to_string(number)));
    if (!ids.empty()) sentences->push_back(std::move(ids));
  }
  if (sentences->empty()) return invalidArgument(path + ": no sentences");
  return okStatus();
}

Status tokenizeText(const std::string& path, const std::string& option,
                    const std::string& tokenizer_path,
                    const std::vector<std::shared_ptr<const Engine>>& engines,
                    std::vector<int32_t>* ids) {
  std::unique_ptr<Tokenizer> tokenizer;
  LLMC_RETURN_IF_ERROR(loadTokenizer(tokenizer_path, engines, &tokenizer));
  std::string text;
  LLMC_RETURN_IF_ERROR(readFile(path, option, &text));
  return tokenizer->encode(text, false, ids).withContext(path);
}

int64_t defaultEvalContext(const std::vector<std::shared_ptr<const Engine>>& engines) {
  int64_t limit = 256;
  for (const auto& engine : engines)
    if (const LlmConfig* llm = engine->llmConfig()) limit = std::min(limit, llm->max_context);
  return limit;
}

}  // namespace llmc::cli
