// llmc eval: the accuracy of an engine (e.g. quantized) against a reference engine (its float
// compile) on the same text: perplexity of both, mean KL divergence of the next-token
// distributions, top-1 agreement, and the logits' max/mean absolute error; for encoders
// (--sentences FILE), the cosine similarity of the outputs.
#include <cstdio>

#include "cli.h"
#include "eval.h"

namespace llmc::cli {

int runEval(const std::vector<std::string>& args) {
  std::string engine_path, reference_path, text_path, tokenizer_path, sentences_path, output_name;
  int64_t context = 0, max_windows = 0;
  bool json = false;
  SessionOptions session_options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    std::string flag_error;
    if (parseSessionFlag(args, &i, &session_options, &flag_error)) {
      if (!flag_error.empty()) return usageError("eval", flag_error);
    } else if (arg == "--reference" || arg == "--text" || arg == "--tokenizer" || arg == "--sentences" ||
               arg == "--output") {
      if (i + 1 >= args.size()) return usageError("eval", arg + " needs a value");
      (arg == "--reference" ? reference_path
       : arg == "--text"    ? text_path
       : arg == "--sentences" ? sentences_path
       : arg == "--output"  ? output_name
                            : tokenizer_path) = args[++i];
    } else if (arg == "--context") {
      if (Status s = intOption(args, &i, 2, kMaxContextTokens, &context); !s.ok())
        return usageError("eval", s);
    } else if (arg == "--max-windows") {
      if (Status s = intOption(args, &i, 1, kInt64Max, &max_windows); !s.ok())
        return usageError("eval", s);
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
  if (text_path.empty() == sentences_path.empty())
    return usageError("eval", "give --text FILE (a language model) or --sentences FILE (an encoder)");

  if (!sentences_path.empty() && (context != 0 || max_windows != 0))
    return usageError("eval", "--context and --max-windows are for --text (a language model)");
  if (!sentences_path.empty()) {
    std::shared_ptr<const Engine> engine, reference;
    Status status = Engine::load(engine_path, &engine);
    if (status.ok()) status = Engine::load(reference_path, &reference).withContext("--reference");
    std::vector<std::vector<int32_t>> sentences;
    if (status.ok()) status = tokenizeLines(sentences_path, tokenizer_path, {reference, engine}, &sentences);
    EncoderMetrics m;
    if (status.ok()) status = evaluateEncoder(engine, reference, session_options, sentences, output_name, &m);
    if (!status.ok()) return reportError("eval", status);
    if (json) {
      std::string name;  // JSON-escaped
      for (char c : m.output) {
        if (c == '"' || c == '\\') name += '\\';
        if (static_cast<unsigned char>(c) >= 0x20) name += c;
      }
      std::printf("{\"sentences\": %lld, \"tokens\": %lld, \"output\": \"%s\", \"mean_cosine\": %.8f, "
                  "\"min_cosine\": %.8f, \"mean_token_cosine\": %.8f, \"min_token_cosine\": %.8f, "
                  "\"max_abs_error\": %.6f}\n",
                  static_cast<long long>(m.sentences), static_cast<long long>(m.tokens), name.c_str(),
                  m.mean_cosine, m.min_cosine, m.mean_token_cosine, m.min_token_cosine, m.max_abs_error);
      return kExitOk;
    }
    std::printf("eval %s against %s (encoder output '%s')\n", engine_path.c_str(), reference_path.c_str(),
                m.output.c_str());
    std::printf("sentences %s: %lld sentences, %lld tokens\n", sentences_path.c_str(),
                static_cast<long long>(m.sentences), static_cast<long long>(m.tokens));
    std::printf("cosine, mean-pooled  mean %.6f, min %.6f\n", m.mean_cosine, m.min_cosine);
    std::printf("cosine, per token    mean %.6f, min %.6f\n", m.mean_token_cosine, m.min_token_cosine);
    std::printf("max |error|          %.6f\n", m.max_abs_error);
    return kExitOk;
  }

  std::shared_ptr<const Engine> engine, reference;
  Status status = Engine::load(engine_path, &engine);
  if (status.ok()) status = Engine::load(reference_path, &reference).withContext("--reference");
  std::vector<int32_t> ids;
  if (status.ok())
    status = tokenizeText(text_path, "--text", tokenizer_path, {reference, engine}, &ids);
  if (context == 0) context = status.ok() ? defaultEvalContext({engine, reference}) : 0;
  EvalMetrics m;
  if (status.ok()) status = evaluateEngine(engine, reference, session_options, ids, context, max_windows, &m);
  if (!status.ok()) return reportError("eval", status);
  const double increase = m.perplexityIncrease();
  if (json) {
    std::printf("{\"tokens\": %lld, \"windows\": %lld, \"context\": %lld, \"predictions\": %lld, "
                "\"perplexity\": %.6f, \"reference_perplexity\": %.6f, \"perplexity_increase\": %.6f, "
                "\"mean_kl\": %.8f, \"top1_agreement\": %.6f, \"max_logit_error\": %.6f, "
                "\"mean_logit_error\": %.8f}\n",
                static_cast<long long>(ids.size()), static_cast<long long>(m.windows),
                static_cast<long long>(m.context), static_cast<long long>(m.predictions), m.perplexity,
                m.reference_perplexity, increase, m.mean_kl, m.top1_agreement, m.max_logit_error,
                m.mean_logit_error);
    return kExitOk;
  }
  std::printf("eval %s against %s\n", engine_path.c_str(), reference_path.c_str());
  std::printf("text %s: %zu tokens; %lld windows of %lld, %lld predictions\n", text_path.c_str(), ids.size(),
              static_cast<long long>(m.windows), static_cast<long long>(m.context),
              static_cast<long long>(m.predictions));
  std::printf("perplexity          %10.4f (reference %.4f, %+.2f%%)\n", m.perplexity, m.reference_perplexity,
              100 * increase);
  std::printf("mean KL(ref || eng) %10.6f nats\n", m.mean_kl);
  std::printf("top-1 agreement     %10.2f%%\n", 100.0 * m.top1_agreement);
  std::printf("logit error         max %.4f, mean %.6f\n", m.max_logit_error, m.mean_logit_error);
  return kExitOk;
}

}  // namespace llmc::cli
