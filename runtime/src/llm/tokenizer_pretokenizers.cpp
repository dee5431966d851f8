// Pre-tokenizers of tokenizer.json: Sequence, ByteLevel, Split, Metaspace, BertPreTokenizer,
// Whitespace, WhitespaceSplit, Digits, Punctuation and CharDelimiterSplit, with the split
// behaviors of Hugging Face `tokenizers` (NormalizedString::split).
#include <algorithm>
#include <functional>

#include "llm/tokenizer_components.h"
#include "llm/tokenizer_regex.h"
#include "llm/unicode.h"

namespace llmc::tokenization {
namespace {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Status parseBehavior(const Json& json, const std::string& where, SplitBehavior default_behavior,
                     SplitBehavior* out) {
  auto it = json.find("behavior");
  if (it == json.end() || it->is_null()) {
    *out = default_behavior;
    return okStatus();
  }
  std::string name;
  LLMC_RETURN_IF_ERROR(getString(json, "behavior", where, &name));
  if (name == "Removed")
    *out = SplitBehavior::kRemoved;
  else if (name == "Isolated")
    *out = SplitBehavior::kIsolated;
  else if (name == "MergedWithPrevious")
    *out = SplitBehavior::kMergedWithPrevious;
  else if (name == "MergedWithNext")
    *out = SplitBehavior::kMergedWithNext;
  else if (name == "Contiguous")
    *out = SplitBehavior::kContiguous;
  else
    return invalidArgument("tokenizer.json: " + where + ".behavior: unknown '" + name + "'");
  return okStatus();
}

// A stretch of a piece: [begin, end) in code points, and whether the pattern matched it.
struct Span {
  size_t begin, end;
  bool is_match;
};

// Spans of a whole piece: each code point for which `predicate` holds is one match.
std::vector<Span> charMatches(const std::u32string& text,
                              const std::function<bool(char32_t)>& predicate) {
  std::vector<Span> spans;
  size_t last = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!predicate(text[i])) continue;
    if (last < i) spans.push_back({last, i, false});
    spans.push_back({i, i + 1, true});
    last = i + 1;
  }
  if (last < text.size()) spans.push_back({last, text.size(), false});
  return spans;
}

std::vector<Span> rangeMatches(size_t size, const std::vector<std::pair<size_t, size_t>>& ranges) {
  std::vector<Span> spans;
  size_t last = 0;
  for (auto [begin, end] : ranges) {
    if (last < begin) spans.push_back({last, begin, false});
    spans.push_back({begin, end, true});
    last = end;
  }
  if (last < size) spans.push_back({last, size, false});
  return spans;
}

// Applies `behavior` to the spans and appends the non-empty pieces.
void splitPiece(const Piece& piece, const std::vector<Span>& spans, SplitBehavior behavior,
                std::vector<Piece>* out) {
  struct Kept {
    size_t begin, end;
    bool removed;
  };
  std::vector<Kept> kept;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) kept.push_back({s.begin, s.end, s.is_match});
      break;
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) kept.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !kept.empty())
          kept.back().end = s.end;
        else
          kept.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& s = spans[i];
        if (s.is_match && !previous_match && !kept.empty())
          kept.back().begin = s.begin;
        else
          kept.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !kept.empty())
          kept.back().end = s.end;
        else
          kept.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      break;
    }
  }
  for (const Kept& k : kept) {
    if (k.removed || k.begin == k.end) continue;
    out->push_back(
        Piece{piece.text.substr(k.begin, k.end - k.begin), piece.at_origin && k.begin == 0});
  }
}

// Splits every piece with spans computed by `find`.
Status splitAll(std::vector<Piece>* pieces, SplitBehavior behavior,
                const std::function<Status(const std::u32string&, std::vector<Span>*)>& find) {
  std::vector<Piece> out;
  out.reserve(pieces->size());
  for (const Piece& piece : *pieces) {
    std::vector<Span> spans;
    LLMC_RETURN_IF_ERROR(find(piece.text, &spans));
    splitPiece(piece, spans, behavior, &out);
  }
  *pieces = std::move(out);
  return okStatus();
}

Status charSplit(std::vector<Piece>* pieces, SplitBehavior behavior,
                 const std::function<bool(char32_t)>& predicate) {
  return splitAll(pieces, behavior, [&](const std::u32string& text, std::vector<Span>* spans) {
    *spans = charMatches(text, predicate);
    return okStatus();
  });
}

bool isBertPunctuation(char32_t cp) {
  bool ascii_punctuation = (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) ||
                           (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
  return ascii_punctuation || unicode::isPunctuation(cp);
}

// The whole-text spans of `regex` (with `invert`, matches and gaps swap roles).
Status regexSpans(const Regex& regex, bool invert, const std::u32string& text,
                  std::vector<Span>* spans) {
  std::vector<std::pair<size_t, size_t>> ranges;
  LLMC_RETURN_IF_ERROR(regex.findAll(text, &ranges));
  *spans = rangeMatches(text.size(), ranges);
  if (invert) {
    for (Span& s : *spans) s.is_match = !s.is_match;
  }
  return okStatus();
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  Status preTokenize(std::vector<Piece>* pieces) const override {
    for (const auto& part : parts_) LLMC_RETURN_IF_ERROR(part->preTokenize(pieces));
    return okStatus();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

const char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  Status preTokenize(std::vector<Piece>* pieces) const override {
    if (add_prefix_space_) {
      for (Piece& piece : *pieces) {
        if (piece.text.empty() || piece.text[0] != U' ') piece.text.insert(0, 1, U' ');
      }
    }
    if (regex_) {
      LLMC_RETURN_IF_ERROR(splitAll(pieces, SplitBehavior::kIsolated,
                                    [&](const std::u32string& text, std::vector<Span>* spans) {
                                      return regexSpans(*regex_, false, text, spans);
                                    }));
    }
    for (Piece& piece : *pieces) {
      std::string utf8 = unicode::toUtf8(piece.text);
      std::u32string mapped;
      mapped.reserve(utf8.size());
      for (char byte : utf8) mapped.push_back(byteToChar(static_cast<uint8_t>(byte)));
      piece.text = std::move(mapped);
    }
    return okStatus();
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // null when use_regex is false
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::u32string literal, std::unique_ptr<Regex> regex, SplitBehavior behavior,
                    bool invert)
      : literal_(std::move(literal)),
        regex_(std::move(regex)),
        behavior_(behavior),
        invert_(invert) {}

  Status preTokenize(std::vector<Piece>* pieces) const override {
    return splitAll(pieces, behavior_, [&](const std::u32string& text, std::vector<Span>* spans) {
      if (regex_) return regexSpans(*regex_, invert_, text, spans);
      std::vector<std::pair<size_t, size_t>> ranges;
      if (!literal_.empty()) {
        size_t pos = 0;
        while ((pos = text.find(literal_, pos)) != std::u32string::npos) {
          ranges.emplace_back(pos, pos + literal_.size());
          pos += literal_.size();
        }
      }
      *spans = rangeMatches(text.size(), ranges);
      if (invert_) {
        for (Span& s : *spans) s.is_match = !s.is_match;
      }
      return okStatus();
    });
  }

 private:
  std::u32string literal_;
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {}

  Status preTokenize(std::vector<Piece>* pieces) const override {
    for (Piece& piece : *pieces) {
      for (char32_t& cp : piece.text) {
        if (cp == U' ') cp = replacement_;
      }
      bool starts_with_replacement = !piece.text.empty() && piece.text[0] == replacement_;
      bool prepend = scheme_ == PrependScheme::kAlways ||
                     (scheme_ == PrependScheme::kFirst && piece.at_origin);
      if (prepend && !starts_with_replacement) piece.text.insert(0, 1, replacement_);
    }
    if (!split_) return okStatus();
    return charSplit(pieces, SplitBehavior::kMergedWithNext,
                     [&](char32_t cp) { return cp == replacement_; });
  }

 private:
  char32_t replacement_;
  PrependScheme scheme_;
  bool split_;
};

class BertPreTokenizer final : public PreTokenizer {
 public:
  Status preTokenize(std::vector<Piece>* pieces) const override {
    LLMC_RETURN_IF_ERROR(charSplit(pieces, SplitBehavior::kRemoved, unicode::isWhiteSpace));
    return charSplit(pieces, SplitBehavior::kIsolated, isBertPunctuation);
  }
};

class RegexPreTokenizer final : public PreTokenizer {
 public:
  RegexPreTokenizer(std::unique_ptr<Regex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  Status preTokenize(std::vector<Piece>* pieces) const override {
    return splitAll(pieces, behavior_, [&](const std::u32string& text, std::vector<Span>* spans) {
      return regexSpans(*regex_, invert_, text, spans);
    });
  }

 private:
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class CharPreTokenizer final : public PreTokenizer {
 public:
  CharPreTokenizer(std::function<bool(char32_t)> predicate, SplitBehavior behavior)
      : predicate_(std::move(predicate)), behavior_(behavior) {}
  Status preTokenize(std::vector<Piece>* pieces) const override {
    return charSplit(pieces, behavior_, predicate_);
  }

 private:
  std::function<bool(char32_t)> predicate_;
  SplitBehavior behavior_;
};

Status singleCodePoint(const std::string& text, const std::string& where, char32_t* out) {
  std::u32string code_points;
  if (!unicode::decodeUtf8(text, &code_points) || code_points.size() != 1) {
    return invalidArgument("tokenizer.json: " + where + " must be a single character");
  }
  *out = code_points[0];
  return okStatus();
}

}  // namespace

Status makePreTokenizer(const Json& json, const std::string& where,
                        std::unique_ptr<PreTokenizer>* out) {
  out->reset();
  if (json.is_null()) return okStatus();
  std::string type;
  LLMC_RETURN_IF_ERROR(getType(json, where, &type));
  if (type == "Sequence") {
    auto it = json.find("pretokenizers");
    if (it == json.end() || !it->is_array()) {
      return invalidArgument("tokenizer.json: " + where + ".pretokenizers must be an array");
    }
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      std::unique_ptr<PreTokenizer> part;
      LLMC_RETURN_IF_ERROR(
          makePreTokenizer((*it)[i], where + ".pretokenizers[" + std::to_string(i) + "]", &part));
      if (part) parts.push_back(std::move(part));
    }
    *out = std::make_unique<SequencePreTokenizer>(std::move(parts));
  } else if (type == "ByteLevel") {
    bool add_prefix_space = true, use_regex = true;
    LLMC_RETURN_IF_ERROR(getBool(json, "add_prefix_space", where, &add_prefix_space, true));
    LLMC_RETURN_IF_ERROR(getBool(json, "use_regex", where, &use_regex, true));
    std::unique_ptr<Regex> regex;
    if (use_regex) LLMC_RETURN_IF_ERROR(Regex::compile(kGpt2Pattern, &regex));
    *out = std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(regex));
  } else if (type == "Split") {
    PatternSpec pattern;
    LLMC_RETURN_IF_ERROR(getPattern(json, "pattern", where, &pattern));
    SplitBehavior behavior;
    LLMC_RETURN_IF_ERROR(parseBehavior(json, where, SplitBehavior::kRemoved, &behavior));
    bool invert = false;
    LLMC_RETURN_IF_ERROR(getBool(json, "invert", where, &invert, false));
    std::u32string literal;
    std::unique_ptr<Regex> regex;
    if (pattern.is_regex) {
      Status status = Regex::compile(pattern.text, &regex);
      if (!status.ok()) return status.withContext("tokenizer.json: " + where + ".pattern");
    } else if (!unicode::decodeUtf8(pattern.text, &literal)) {
      return invalidArgument("tokenizer.json: " + where + ".pattern is not valid UTF-8");
    }
    *out =
        std::make_unique<SplitPreTokenizer>(std::move(literal), std::move(regex), behavior, invert);
  } else if (type == "Metaspace") {
    std::string replacement_text = "\xE2\x96\x81";
    if (json.contains("replacement")) {
      LLMC_RETURN_IF_ERROR(getString(json, "replacement", where, &replacement_text));
    }
    char32_t replacement = 0;
    LLMC_RETURN_IF_ERROR(singleCodePoint(replacement_text, where + ".replacement", &replacement));
    PrependScheme scheme = PrependScheme::kAlways;
    auto scheme_it = json.find("prepend_scheme");
    if (scheme_it != json.end() && !scheme_it->is_null()) {
      std::string name;
      LLMC_RETURN_IF_ERROR(getString(json, "prepend_scheme", where, &name));
      if (name == "always")
        scheme = PrependScheme::kAlways;
      else if (name == "first")
        scheme = PrependScheme::kFirst;
      else if (name == "never")
        scheme = PrependScheme::kNever;
      else
        return invalidArgument("tokenizer.json: " + where + ".prepend_scheme: unknown '" + name +
                               "'");
    } else {
      bool add_prefix_space = true;
      LLMC_RETURN_IF_ERROR(getBool(json, "add_prefix_space", where, &add_prefix_space, true));
      scheme = add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    bool split = true;
    LLMC_RETURN_IF_ERROR(getBool(json, "split", where, &split, true));
    *out = std::make_unique<MetaspacePreTokenizer>(replacement, scheme, split);
  } else if (type == "BertPreTokenizer") {
    *out = std::make_unique<BertPreTokenizer>();
  } else if (type == "Whitespace") {
    std::unique_ptr<Regex> regex;
    LLMC_RETURN_IF_ERROR(Regex::compile(R"(\w+|[^\w\s]+)", &regex));
    *out = std::make_unique<RegexPreTokenizer>(std::move(regex), SplitBehavior::kRemoved, true);
  } else if (type == "WhitespaceSplit") {
    *out = std::make_unique<CharPreTokenizer>(unicode::isWhiteSpace, SplitBehavior::kRemoved);
  } else if (type == "Punctuation") {
    SplitBehavior behavior;
    LLMC_RETURN_IF_ERROR(parseBehavior(json, where, SplitBehavior::kIsolated, &behavior));
    *out = std::make_unique<CharPreTokenizer>(isBertPunctuation, behavior);
  } else if (type == "Digits") {
    bool individual = false;
    LLMC_RETURN_IF_ERROR(getBool(json, "individual_digits", where, &individual, false));
    *out = std::make_unique<CharPreTokenizer>(
        unicode::isNumber, individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  } else if (type == "CharDelimiterSplit") {
    std::string delimiter_text;
    LLMC_RETURN_IF_ERROR(getString(json, "delimiter", where, &delimiter_text));
    char32_t delimiter = 0;
    LLMC_RETURN_IF_ERROR(singleCodePoint(delimiter_text, where + ".delimiter", &delimiter));
    *out = std::make_unique<CharPreTokenizer>([delimiter](char32_t cp) { return cp == delimiter; },
                                              SplitBehavior::kRemoved);
  } else {
    return unimplemented("tokenizer.json: " + where + ": pre-tokenizer type '" + type +
                         "' is not supported");
  }
  return okStatus();
}

}  // namespace llmc::tokenization
