// llmc verify: the built-in golden check. The reference is the model as exported: compiled
// with --as-graph at --opt-level 0 (no language-model recognition, no fusion, no
// quantization). The engine under test is the model compiled with the given options, or a
// built engine (--engine FILE).
//
// A graph engine is compared with the reference at three shapes (every dimension symbol at
// its smallest size, at 3 and at 17, within its range) on random inputs. A language-model
// engine (recognized onto the KV cache) is compared where recognition could go wrong: at
// every length past each attention window and up to the context. It generates greedily over
// the KV cache from a random prompt up to --length tokens (default: the context, at most
// 4096), then the reference runs on that sequence's prefixes at lengths 1, 2, 3, around each
// window (W - 1, W, W + 1, 2W + 1), half the length and the whole length; at each of those,
// every position's logits of the engine's own full-sequence run and the log-probabilities of
// every KV-cache step at those positions must match. Exit 1 when anything is beyond tolerance.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <set>

#include "cli.h"
#include "compile_flags.h"
#include "core/file_io.h"
#include "core/half.h"
#include "core/symbols.h"
#include "llmc/engine.h"
#include "llmc/generator.h"
#include "llmc/session.h"
#include "llmc/tensor_io.h"

namespace llmc::cli {

namespace {

// Lengths past this are only checked when asked for with --length (the reference's
// unfused attention holds a [heads, length, length] score tensor per layer).
constexpr int64_t kDefaultMaxLength = 4096;

// A size for each dimension symbol (`preferred`, within the symbol's range); a symbol named
// as a sum ("past_sequence_length + sequence_length") is the sum of its terms' sizes, so the
// inputs of a cache export agree with each other.
int64_t symbolSize(const Engine& engine, const std::string& symbol, int64_t preferred,
                   int depth = 0) {
  // A symbol the compiler found equal to a sum of others (SymbolInfo::expression) is that sum.
  for (const SymbolInfo& info : engine.symbols())
    if (info.name == symbol && !info.expression.empty() && depth < 4)
      return symbolSize(engine, info.expression, preferred, depth + 1);
  std::vector<SymbolTerm> terms;
  if (depth < 4 && symbol.find('+') != std::string::npos && parseSymbolExpression(symbol, &terms)) {
    int64_t total = 0;
    for (const SymbolTerm& term : terms)
      total += term.symbol.empty() ? term.constant
                                   : symbolSize(engine, term.symbol, preferred, depth + 1);
    return total;
  }
  for (const SymbolInfo& info : engine.symbols())
    if (info.name == symbol) {
      int64_t size = std::max<int64_t>(info.min, preferred);
      return info.max >= 0 ? std::min(size, info.max) : size;
    }
  return preferred;
}

// Random inputs: floats ~ N(0, 1); integer inputs named like masks are 1, like token types
// 0, anything else uniform in [0, bound) (the vocabulary for language models, else 2).
Status randomInput(const Engine& engine, const TensorInfo& info, int64_t preferred,
                   std::mt19937& rng, Tensor* out) {
  Shape shape;
  for (const DimInfo& d : info.dims)
    shape.push_back(d.size >= 0 ? d.size : symbolSize(engine, d.symbol, preferred));
  *out = Tensor::allocate(info.dtype, shape);
  const int64_t n = out->numElements();
  std::normal_distribution<float> normal;
  const bool mask = info.name.find("mask") != std::string::npos;
  const bool type = info.name.find("type") != std::string::npos;
  std::uniform_int_distribution<int64_t> uniform(0, 1);
  for (int64_t i = 0; i < n; ++i) {
    switch (info.dtype) {
      case DType::kFloat32: out->data<float>()[i] = normal(rng); break;
      case DType::kFloat16: out->data<Float16>()[i] = toFloat16(normal(rng)); break;
      case DType::kBFloat16: out->data<BFloat16>()[i] = toBFloat16(normal(rng)); break;
      case DType::kFloat64: out->data<double>()[i] = normal(rng); break;
      case DType::kInt64: out->data<int64_t>()[i] = mask ? 1 : type ? 0 : uniform(rng); break;
      case DType::kInt32: out->data<int32_t>()[i] = static_cast<int32_t>(mask ? 1 : type ? 0 : uniform(rng)); break;
      case DType::kBool: out->data<bool>()[i] = mask || (rng() & 1); break;
      default:
        return unimplemented("input '" + info.name + "' has dtype " + dtypeName(info.dtype) +
                             ": give it with --input NAME=FILE");
    }
  }
  return okStatus();
}

double elementAt(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32: return t.data<float>()[i];
    case DType::kFloat64: return t.data<double>()[i];
    case DType::kFloat16: return toFloat(t.data<Float16>()[i]);
    case DType::kBFloat16: return toFloat(t.data<BFloat16>()[i]);
    case DType::kInt64: return static_cast<double>(t.data<int64_t>()[i]);
    case DType::kInt32: return t.data<int32_t>()[i];
    case DType::kBool: return t.data<bool>()[i];
    default: return NAN;
  }
}

struct Tolerance {
  double rtol = 1e-4, atol = 1e-5;
  bool within(double got, double want) const {
    if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
    return got == want || std::fabs(got - want) <= atol + rtol * std::fabs(want);
  }
};

// The errors of `got` against `want` over elements [begin, end).
struct Errors {
  double max_abs = 0, max_rel = 0;
  int64_t mismatches = 0;
  int64_t first_mismatch = -1;
  void add(const Errors& other) {
    max_abs = std::max(max_abs, other.max_abs);
    max_rel = std::max(max_rel, other.max_rel);
    mismatches += other.mismatches;
  }
};

Errors compareRange(const Tensor& got, const Tensor& want, int64_t begin, int64_t end,
                    const Tolerance& tolerance) {
  Errors e;
  for (int64_t i = begin; i < end; ++i) {
    double a = elementAt(got, i), b = elementAt(want, i);
    double err = std::isnan(a) != std::isnan(b) ? INFINITY : std::isnan(a) || a == b ? 0 : std::fabs(a - b);
    e.max_abs = std::max(e.max_abs, err);
    e.max_rel = std::max(e.max_rel, err / std::max(std::fabs(b), 1e-30));
    if (!tolerance.within(a, b)) {
      if (e.first_mismatch < 0) e.first_mismatch = i;
      ++e.mismatches;
    }
  }
  return e;
}

void printRow(const std::string& what, const std::string& shape, const Errors& e) {
  std::printf("%-28s %-16s %12.3g %12.3g %10lld\n", what.c_str(), shape.c_str(), e.max_abs,
              e.max_rel, static_cast<long long>(e.mismatches));
}

Status runEngine(const std::shared_ptr<const Engine>& engine, const std::vector<NamedTensor>& inputs,
                 std::vector<NamedTensor>* outputs) {
  std::unique_ptr<Session> session;
  LLMC_RETURN_IF_ERROR(Session::create(engine, &session));
  return session->run(inputs, outputs);
}

const Tensor* findOutput(const std::vector<NamedTensor>& outputs, const std::string& name) {
  for (const NamedTensor& t : outputs)
    if (t.name == name) return &t.tensor;
  return nullptr;
}

// ---- graph engines ----------------------------------------------------------------------

int verifyGraph(const std::shared_ptr<const Engine>& engine,
                const std::shared_ptr<const Engine>& reference,
                const std::vector<std::pair<std::string, std::string>>& input_files,
                const Tolerance& tolerance, uint32_t seed) {
  for (const auto& [name, path] : input_files) {
    bool known = false;
    for (const TensorInfo& info : reference->inputs()) known |= info.name == name;
    if (!known) return usageError("verify", "--input " + name + ": the model has no input of that name");
  }
  bool any_symbolic = false;
  for (const TensorInfo& info : reference->inputs())
    for (const DimInfo& d : info.dims) any_symbolic |= d.size < 0;
  // Given inputs fix the shapes: one comparison. Otherwise three sizes per symbol.
  std::vector<int64_t> sizes = input_files.empty() && any_symbolic ? std::vector<int64_t>{1, 3, 17}
                                                                   : std::vector<int64_t>{3};
  std::printf("steps: %zu (engine under test) vs %zu (reference: the graph as exported, opt-level 0)\n",
              engine->numSteps(), reference->numSteps());
  std::printf("%-28s %-16s %12s %12s %10s\n", "output", "shape", "max abs err", "max rel err", "mismatch");
  bool failed = false;
  std::set<std::string> shapes_seen;
  std::mt19937 rng(seed);
  for (int64_t preferred : sizes) {
    std::vector<NamedTensor> inputs;
    std::string shapes;
    for (const TensorInfo& info : reference->inputs()) {
      NamedTensor input{info.name, Tensor()};
      auto given = std::find_if(input_files.begin(), input_files.end(),
                                [&](const auto& f) { return f.first == info.name; });
      Status status = given != input_files.end()
                          ? readTensorFile(given->second, &input.tensor)
                          : randomInput(*reference, info, preferred, rng, &input.tensor);
      if (!status.ok())
        return reportError("verify", status.withContext(given != input_files.end()
                                                            ? "--input " + info.name
                                                            : "input '" + info.name + "'"));
      shapes += " " + info.name + shapeToString(input.tensor.shape());
      inputs.push_back(std::move(input));
    }
    if (!shapes_seen.insert(shapes).second) continue;  // a range that pins the sizes
    std::printf("inputs:%s\n", shapes.c_str());
    std::vector<NamedTensor> outputs[2];
    const std::shared_ptr<const Engine>* engines[2] = {&engine, &reference};
    for (int e = 0; e < 2; ++e) {
      Status status = runEngine(*engines[e], inputs, &outputs[e]);
      if (!status.ok())
        return reportError("verify", status.withContext(e == 0 ? "the engine under test"
                                                               : "the reference"));
    }
    for (const NamedTensor& reference_output : outputs[1]) {
      const Tensor& want = reference_output.tensor;
      const Tensor* got = findOutput(outputs[0], reference_output.name);
      if (!got || got->shape() != want.shape() || got->dtype() != want.dtype()) {
        std::printf("%-28s differs in shape or dtype: %s vs %s\n", reference_output.name.c_str(),
                    got ? shapeToString(got->shape()).c_str() : "missing",
                    shapeToString(want.shape()).c_str());
        failed = true;
        continue;
      }
      Errors e = compareRange(*got, want, 0, want.numElements(), tolerance);
      failed |= e.mismatches > 0;
      printRow(reference_output.name, shapeToString(want.shape()), e);
    }
  }
  std::printf("%s (rtol %g, atol %g)\n",
              failed ? "FAILED: outputs differ beyond tolerance" : "OK: within tolerance",
              tolerance.rtol, tolerance.atol);
  return failed ? kExitFailure : kExitOk;
}

// ---- language-model engines -------------------------------------------------------------

// The past axis of a cache export's past input: 2 of [batch, kv_heads, past, head_dim], 1 of
// GPT-BigCode's packed [batch, past, 2 x head_dim] `past_key_values.N.key_value`; -1 otherwise.
int pastAxis(const TensorInfo& info) {
  if (info.name.find("past") == std::string::npos) return -1;
  if (info.dims.size() == 4) return 2;
  const std::string suffix = ".key_value";
  if (info.dims.size() == 3 && info.name.size() > suffix.size() &&
      info.name.compare(info.name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return 1;
  return -1;
}

// The inputs of one full-sequence run of `engine` (the reference graph or the engine under
// test) on tokens[0, n): the token ids, an all-ones attention mask, positions 0..n-1, and an
// empty past for each KV-cache input of a cache export. Any other input is refused: verify
// could not know what it holds at a given length.
Status sequenceInputs(const Engine& engine, const std::string& input_ids,
                      std::span<const int32_t> tokens, std::vector<NamedTensor>* out) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  out->clear();
  for (const TensorInfo& info : engine.inputs()) {
    const bool ids = info.name == input_ids;
    const bool mask = info.name.find("mask") != std::string::npos;
    const bool positions = info.name.find("position") != std::string::npos;
    const int past_axis = pastAxis(info);
    const bool integer = info.dtype == DType::kInt64 || info.dtype == DType::kInt32;
    Shape shape;
    if ((ids || positions) && integer && info.dims.size() == 2) {
      shape = {1, n};
    } else if (mask && (integer || info.dtype == DType::kBool || info.dtype == DType::kFloat32) &&
               info.dims.size() == 2) {
      shape = {1, n};
    } else if (past_axis > 0) {
      // [batch, kv_heads, past, head_dim] or [batch, past, 2 x head_dim]: the past is empty.
      for (size_t d = 0; d < info.dims.size(); ++d) {
        if (d == 0 || d == static_cast<size_t>(past_axis)) {
          shape.push_back(d == 0 ? 1 : 0);
        } else if (info.dims[d].size >= 0) {
          shape.push_back(info.dims[d].size);
        } else {
          return unimplemented("input '" + info.name + "' has a symbolic dimension " +
                               std::to_string(d) + " ('" + info.dims[d].symbol +
                               "'): verify needs the KV heads and head size as numbers");
        }
      }
    } else {
      return unimplemented("input '" + info.name + "' (" + dtypeName(info.dtype) +
                           "): verify feeds a language model only its token ids, an attention "
                           "mask, position ids and an empty past, and cannot tell what this "
                           "input holds");
    }
    Tensor t = Tensor::allocate(info.dtype, shape);
    for (int64_t i = 0; i < t.numElements(); ++i) {
      const int64_t value = ids ? tokens[i] : positions ? i : 1;
      switch (info.dtype) {
        case DType::kInt64: t.data<int64_t>()[i] = value; break;
        case DType::kInt32: t.data<int32_t>()[i] = static_cast<int32_t>(value); break;
        case DType::kBool: t.data<bool>()[i] = true; break;
        case DType::kFloat32: t.data<float>()[i] = mask ? 1.0f : 0.0f; break;
        default: break;  // the past tensors, which are empty
      }
    }
    out->push_back(NamedTensor{info.name, std::move(t)});
  }
  return okStatus();
}

// The lengths at which the reference runs: 1, 2, 3, around each window, half and the whole.
std::vector<int64_t> checkedLengths(const LlmConfig& config, int64_t length) {
  std::set<int64_t> lengths = {1, 2, 3, length / 2, length};
  for (int64_t w : config.attention_windows)
    if (w > 0)
      for (int64_t n : {w - 1, w, w + 1, 2 * w + 1}) lengths.insert(n);
  std::vector<int64_t> out;
  for (int64_t n : lengths)
    if (n >= 1 && n <= length) out.push_back(n);
  return out;
}

// The tolerance of one row of logits: atol + rtol * (the row's largest |logit|), the same for
// every element of the row.
Tolerance rowTolerance(const Tensor& logits, int64_t offset, int64_t vocab, const Tolerance& base) {
  double scale = 0;
  for (int64_t v = 0; v < vocab; ++v) scale = std::max(scale, std::fabs(elementAt(logits, offset + v)));
  return Tolerance{0, base.atol + base.rtol * scale};
}

// log-softmax of one row of logits.
std::vector<double> logSoftmax(const Tensor& logits, int64_t offset, int64_t vocab) {
  double top = -INFINITY;
  for (int64_t v = 0; v < vocab; ++v) top = std::max(top, elementAt(logits, offset + v));
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(elementAt(logits, offset + v) - top);
  std::vector<double> out(vocab);
  for (int64_t v = 0; v < vocab; ++v) out[v] = elementAt(logits, offset + v) - top - std::log(sum);
  return out;
}

int verifyLanguageModel(const std::shared_ptr<const Engine>& engine,
                        const std::shared_ptr<const Engine>& reference,
                        const std::vector<std::pair<std::string, std::string>>& input_files,
                        int64_t requested_length, const Tolerance& tolerance, uint32_t seed) {
  const LlmConfig& config = *engine->llmConfig();
  // The reference names the logits as the export does; the engine keeps the export's names.
  const std::string logits_name = config.logits;
  std::vector<int32_t> prompt;
  for (const auto& [name, path] : input_files) {
    if (name != config.input_ids)
      return usageError("verify", "--input " + name + ": a language-model engine is verified from "
                                  "its token ids only (--input " + config.input_ids + "=FILE)");
    Tensor ids;
    Status status = readTensorFile(path, &ids);
    if (status.ok() && ids.dtype() != DType::kInt64 && ids.dtype() != DType::kInt32)
      status = invalidArgument(std::string("token ids must be int64 or int32, not ") + dtypeName(ids.dtype()));
    if (status.ok() && (ids.numElements() == 0 || ids.shape().size() > 2 ||
                        (ids.shape().size() == 2 && ids.shape()[0] != 1)))
      status = invalidArgument("token ids must be one non-empty sequence ([n] or [1, n]), got " +
                               shapeToString(ids.shape()));
    if (!status.ok()) return reportError("verify", status.withContext("--input " + name));
    for (int64_t i = 0; i < ids.numElements(); ++i)
      prompt.push_back(static_cast<int32_t>(elementAt(ids, i)));
  }
  if (requested_length > config.max_context)
    return usageError("verify", "--length " + std::to_string(requested_length) +
                                    " is longer than the engine's context (" +
                                    std::to_string(config.max_context) + " tokens)");
  const int64_t length = requested_length > 0 ? requested_length
                                              : std::min(config.max_context, kDefaultMaxLength);
  if (prompt.empty()) {
    if (config.vocab_size <= 0)
      return usageError("verify", "the engine's vocabulary size is symbolic: give the prompt with --input " +
                                      config.input_ids + "=FILE");
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config.vocab_size) - 1);
    for (int64_t i = 0; i < std::min<int64_t>(3, length); ++i) prompt.push_back(token(rng));
  }
  if (static_cast<int64_t>(prompt.size()) > length)
    return usageError("verify", "the prompt (" + std::to_string(prompt.size()) +
                                    " tokens) is longer than the checked length (" +
                                    std::to_string(length) + ")");

  // Greedy generation over the KV cache up to `length` tokens, with the top logprobs of
  // every step.
  constexpr int32_t kTopLogprobs = 4;
  std::vector<int32_t> tokens = prompt;
  std::vector<std::vector<std::pair<int32_t, float>>> step_logprobs;  // per new token
  const int64_t new_tokens = length - static_cast<int64_t>(prompt.size());
  if (new_tokens > 0) {
    std::unique_ptr<Generator> generator;
    Status status = Generator::create(engine, &generator);
    if (status.ok() && !generator->usesKvCache())
      status = internalError("the generator does not run this engine over the KV cache");
    GenerationOptions options;
    options.max_new_tokens = static_cast<int32_t>(new_tokens);
    options.sampling.num_logprobs = kTopLogprobs;
    GenerationResult result;
    if (status.ok()) status = generator->generate(prompt, options, nullptr, &result);
    if (!status.ok())
      return reportError("verify", status.withContext("generating over the KV cache"));
    tokens.insert(tokens.end(), result.tokens.begin(), result.tokens.end());
    step_logprobs = std::move(result.top_logprobs);
    for (size_t k = 0; k < step_logprobs.size(); ++k)  // the chosen token, when not the best
      if (std::none_of(step_logprobs[k].begin(), step_logprobs[k].end(),
                       [&](const auto& p) { return p.first == result.tokens[k]; }))
        step_logprobs[k].emplace_back(result.tokens[k], result.logprobs[k]);
  }

  const std::vector<int64_t> lengths = checkedLengths(config, length);
  std::printf("language model: context %lld, attention windows", static_cast<long long>(config.max_context));
  std::set<int64_t> windows(config.attention_windows.begin(), config.attention_windows.end());
  for (int64_t w : windows) std::printf(" %lld", static_cast<long long>(w));
  std::printf(" (0: causal)\nsequence: %zu prompt tokens + %lld generated over the KV cache (greedy)\n",
              prompt.size(), static_cast<long long>(new_tokens));
  std::printf("reference: the graph as exported (opt-level 0), %zu steps; engine under test: %zu steps\n",
              reference->numSteps(), engine->numSteps());
  if (length < config.max_context)
    std::printf("lengths past %lld are not checked (--length %lld checks the whole context)\n",
                static_cast<long long>(length), static_cast<long long>(config.max_context));
  std::printf("%-28s %-16s %12s %12s %10s\n", "check", "shape", "max abs err", "max rel err", "mismatch");
  bool failed = false;
  for (int64_t n : lengths) {
    std::span<const int32_t> prefix(tokens.data(), static_cast<size_t>(n));
    std::vector<NamedTensor> outputs[2];
    const std::shared_ptr<const Engine>* engines[2] = {&engine, &reference};
    for (int e = 0; e < 2; ++e) {
      std::vector<NamedTensor> inputs;
      Status status = sequenceInputs(**engines[e], config.input_ids, prefix, &inputs);
      if (status.ok()) status = runEngine(*engines[e], inputs, &outputs[e]);
      if (!status.ok())
        return reportError("verify", status.withContext(
                                         (e == 0 ? "the engine under test" : "the reference") +
                                         std::string(" at length ") + std::to_string(n)));
    }
    const Tensor* want = findOutput(outputs[1], logits_name);
    const Tensor* got = findOutput(outputs[0], logits_name);
    if (!want)
      return reportError("verify", notFound("the reference has no output '" + logits_name + "'"));
    if (!got || got->shape() != want->shape() || want->shape().size() != 3) {
      std::printf("logits at length %-12lld differ in shape: %s vs %s\n", static_cast<long long>(n),
                  got ? shapeToString(got->shape()).c_str() : "missing",
                  shapeToString(want->shape()).c_str());
      failed = true;
      continue;
    }
    // Each position's logits against the largest of its row (a softmax's inputs: an error
    // of 1e-4 of the largest logit is the same wherever it falls in the row).
    const int64_t vocab = want->shape()[2];
    Errors e;
    for (int64_t position = 0; position < n; ++position) {
      Errors row = compareRange(*got, *want, position * vocab, (position + 1) * vocab,
                                rowTolerance(*want, position * vocab, vocab, tolerance));
      if (row.first_mismatch >= 0 && e.first_mismatch < 0) e.first_mismatch = row.first_mismatch;
      e.add(row);
    }
    printRow("logits, length " + std::to_string(n), shapeToString(want->shape()), e);
    if (e.mismatches > 0) {
      std::printf("  first mismatch at position %lld\n", static_cast<long long>(e.first_mismatch / vocab));
      failed = true;
    }
    // The KV-cache steps whose logits lie in this prefix: step k chose tokens[P + k] from
    // position P + k - 1.
    Errors kv;
    int64_t steps = 0, first_bad_position = -1;
    for (size_t k = 0; k < step_logprobs.size(); ++k) {
      const int64_t position = static_cast<int64_t>(prompt.size() + k) - 1;
      if (position >= n) break;
      std::vector<double> want_lp = logSoftmax(*want, position * vocab, vocab);
      const Tolerance lp_tolerance = rowTolerance(*want, position * vocab, vocab, tolerance);
      const double best = *std::max_element(want_lp.begin(), want_lp.end());
      bool bad = false;
      for (const auto& [id, lp] : step_logprobs[k]) {
        const double err = std::fabs(lp - want_lp[id]);
        kv.max_abs = std::max(kv.max_abs, err);
        kv.max_rel = std::max(kv.max_rel, err / std::max(std::fabs(want_lp[id]), 1e-30));
        bad |= !lp_tolerance.within(lp, want_lp[id]);
      }
      // Greedy: the chosen token must be the reference's best, up to the tolerance.
      const int32_t chosen = tokens[prompt.size() + k];
      bad |= want_lp[chosen] < best - lp_tolerance.atol;
      if (bad) {
        ++kv.mismatches;
        if (first_bad_position < 0) first_bad_position = position;
      }
      ++steps;
    }
    if (steps > 0) {
      printRow("  KV steps' logprobs", std::to_string(steps) + " steps", kv);
      if (kv.mismatches > 0) {
        std::printf("  first mismatch at position %lld\n", static_cast<long long>(first_bad_position));
        failed = true;
      }
    }
  }
  std::printf("%s (rtol %g of each position's largest |logit|, atol %g)\n",
              failed ? "FAILED: outputs differ beyond tolerance" : "OK: within tolerance",
              tolerance.rtol, tolerance.atol);
  return failed ? kExitFailure : kExitOk;
}

Status compileToEngine(const std::string& bytes, const CompileOptions& options,
                       std::shared_ptr<const Engine>* engine) {
  std::vector<uint8_t> data;
  CompileStats stats;
  LLMC_RETURN_IF_ERROR(compileModelBytes(bytes, options, &data, &stats));
  return Engine::loadFromMemory(data, options.input_path, engine);
}

}  // namespace

int runVerify(const std::vector<std::string>& args) {
  CompileOptions options;
  std::vector<std::pair<std::string, std::string>> input_files;
  Tolerance tolerance;
  uint32_t seed = 0;
  int64_t length = 0;
  std::string engine_path;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--input" || arg == "-i") {
      if (i + 1 >= args.size()) return usageError("verify", "--input needs NAME=FILE");
      const std::string& spec = args[++i];
      size_t eq = spec.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
        return usageError("verify", "--input takes NAME=FILE, got '" + spec + "'");
      input_files.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
      continue;
    }
    if (arg == "--engine") {
      if (i + 1 >= args.size()) return usageError("verify", "--engine needs an engine file");
      engine_path = args[++i];
      continue;
    }
    if (arg == "--rtol" || arg == "--atol" || arg == "--seed" || arg == "--length") {
      Status value =
          arg == "--seed"     ? intOption(args, &i, 0, std::numeric_limits<uint32_t>::max(), &seed)
          : arg == "--length" ? intOption(args, &i, 1, kMaxContextTokens, &length)
                              : floatOption(args, &i, 0, kUnbounded,
                                            arg == "--rtol" ? &tolerance.rtol : &tolerance.atol);
      if (!value.ok()) return usageError("verify", value);
      continue;
    }
    bool consumed = false;
    if (Status s = parseCompileFlag(args, i, options, nullptr, &consumed); !s.ok())
      return usageError("verify", s);
    if (consumed) continue;
    if (!arg.empty() && arg[0] == '-') return usageError("verify", "unknown option '" + arg + "'");
    if (!options.input_path.empty()) return usageError("verify", "more than one model given");
    options.input_path = arg;
  }
  if (options.input_path.empty()) return usageError("verify", "no model given");
  std::string bytes;
  Status read = readFile(options.input_path, "model", &bytes);
  if (!read.ok()) return reportError("verify", read);

  // The reference: the graph as exported, without recognition, fusion or quantization.
  CompileOptions reference_options = floatCompileOptions(options);
  reference_options.as_graph = true;
  reference_options.opt_level = 0;
  reference_options.disabled_passes.clear();
  reference_options.max_context = 0;
  std::shared_ptr<const Engine> engine, reference;
  Status status = engine_path.empty() ? compileToEngine(bytes, options, &engine)
                                      : Engine::load(engine_path, &engine);
  if (!status.ok())
    return reportError("verify", engine_path.empty() ? status : status.withContext("--engine"));
  status = compileToEngine(bytes, reference_options, &reference);
  if (!status.ok())
    return reportError("verify", status.withContext("the reference (the graph as exported)"));
  if (engine->llmConfig()) {
    // The reference runs a cache export with an empty past: its past-length symbols (the past
    // axis of each past input) must admit 0, which a symbol's default range does not.
    bool recompile = false;
    for (const TensorInfo& info : reference->inputs()) {
      const int axis = pastAxis(info);
      if (axis < 0 || info.dims[static_cast<size_t>(axis)].size >= 0) continue;
      for (const SymbolInfo& symbol : reference->symbols())
        if (symbol.name == info.dims[static_cast<size_t>(axis)].symbol && symbol.min > 0) {
          reference_options.dim_ranges[symbol.name] = {0, symbol.max};
          recompile = true;
        }
    }
    if (recompile) {
      status = compileToEngine(bytes, reference_options, &reference);
      if (!status.ok())
        return reportError("verify", status.withContext("the reference (the graph as exported, "
                                                        "with an empty past)"));
    }
    return verifyLanguageModel(engine, reference, input_files, length, tolerance, seed);
  }
  if (length > 0)
    return usageError("verify", "--length applies to language-model engines only");
  return verifyGraph(engine, reference, input_files, tolerance, seed);
}

}  // namespace llmc::cli
