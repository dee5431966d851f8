// The accuracy comparison behind `llmc eval` and `llmc compile --max-ppl-increase`: an engine
// against a reference engine on the same tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmc/engine.h"
#include "llmc/session.h"
#include "llmc/status.h"
#include "llmc/tokenizer.h"

namespace llmc::cli {

struct EvalMetrics {
  int64_t windows = 0, context = 0, predictions = 0;
  double perplexity = 0, reference_perplexity = 0;
  double mean_kl = 0;  // KL(reference || engine) of the next-token distributions, nats
  double top1_agreement = 0;
  double max_logit_error = 0, mean_logit_error = 0;
  double perplexityIncrease() const { return perplexity / reference_perplexity - 1; }
};

// Runs both engines over non-overlapping windows of `context` tokens of `ids` (at most
// `max_windows` when > 0); every position but a window's last predicts the next token.
Status evaluateEngine(std::shared_ptr<const Engine> engine, std::shared_ptr<const Engine> reference,
                      const SessionOptions& options, const std::vector<int32_t>& ids, int64_t context,
                      int64_t max_windows, EvalMetrics* metrics);

// An encoder (e.g. a sentence-embedding model) against its reference, sentence by sentence:
// the cosine similarity of each sentence's mean-pooled output (over its tokens, as
// sentence-transformers pools) and of each token's output row, and the largest absolute error.
struct EncoderMetrics {
  int64_t sentences = 0, tokens = 0;
  std::string output;  // the output compared
  double mean_cosine = 0, min_cosine = 0;              // pooled, per sentence
  double mean_token_cosine = 0, min_token_cosine = 0;  // per token row
  double max_abs_error = 0;
};

// Feeds input_ids, attention_mask (ones) and token_type_ids (zeros) where the engines have them;
// compares `output` (empty: the first float32 output of rank 3, [1, tokens, hidden]).
Status evaluateEncoder(std::shared_ptr<const Engine> engine, std::shared_ptr<const Engine> reference,
                       const SessionOptions& options, const std::vector<std::vector<int32_t>>& sentences,
                       const std::string& output, EncoderMetrics* metrics);

// Each non-empty line of `path` tokenized with the special tokens (a sentence, as an encoder
// sees it).
Status tokenizeLines(const std::string& path, const std::string& tokenizer_path,
                     const std::vector<std::shared_ptr<const Engine>>& engines,
                     std::vector<std::vector<int32_t>>* sentences);

// The tokenizer of `tokenizer_path`, or else the first of `engines` that carries one.
Status loadTokenizer(const std::string& tokenizer_path,
                     const std::vector<std::shared_ptr<const Engine>>& engines,
                     std::unique_ptr<Tokenizer>* tokenizer);

// The text of `path` (given as `option`, e.g. --text) tokenized with `tokenizer_path`, or else
// the first of `engines` that carries a tokenizer.
Status tokenizeText(const std::string& path, const std::string& option,
                    const std::string& tokenizer_path,
                    const std::vector<std::shared_ptr<const Engine>>& engines,
                    std::vector<int32_t>* ids);

// The default window: 256 tokens or the engines' context, whichever is smaller.
int64_t defaultEvalContext(const std::vector<std::shared_ptr<const Engine>>& engines);

}  // namespace llmc::cli
