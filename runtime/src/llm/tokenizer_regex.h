// A small backtracking regex engine for the split patterns of tokenizer.json files (GPT-2's,
// Llama-3's, Qwen's ...), with Oniguruma's leftmost-first semantics over Unicode code points.
// It has what those patterns use: alternation, groups ((?:), (?i:), (?=), (?!)), classes
// with \p{..}, \s \d \w and their negations, greedy/lazy/possessive quantifiers. Anything else
// (anchors, backreferences, lookbehind, scripts) is reported as unimplemented.
#pragma once

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "llmc/status.h"

namespace llmc::tokenization {

struct RegexNode;

class Regex {
 public:
  static Status compile(std::string_view pattern, std::unique_ptr<Regex>* out);
  ~Regex();

  // Appends the [begin, end) code point ranges of the non-overlapping, non-empty matches in
  // `text`, left to right.
  Status findAll(std::u32string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

 private:
  Regex() = default;
  std::unique_ptr<RegexNode> root_;
};

}  // namespace llmc::tokenization
