// Normalizers of tokenizer.json: Sequence, NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents,
// Replace (string pattern), Prepend and BertNormalizer, as Hugging Face `tokenizers` has them.
#include "llm/tokenizer_components.h"
#include "llm/unicode.h"

namespace llmc::tokenization {
namespace {

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  Status normalize(std::u32string* text) const override {
    for (const auto& part : parts_) LLMC_RETURN_IF_ERROR(part->normalize(text));
    return okStatus();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormalizationForm form) : form_(form) {}
  Status normalize(std::u32string* text) const override {
    *text = unicode::normalize(*text, form_);
    return okStatus();
  }

 private:
  unicode::NormalizationForm form_;
};

void lowercase(std::u32string* text) {
  std::u32string out;
  out.reserve(text->size());
  for (char32_t cp : *text) unicode::appendLowercase(cp, &out);
  *text = std::move(out);
}

class LowercaseNormalizer final : public Normalizer {
 public:
  Status normalize(std::u32string* text) const override {
    lowercase(text);
    return okStatus();
  }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  Status normalize(std::u32string* text) const override {
    size_t begin = 0, end = text->size();
    if (left_) {
      while (begin < end && unicode::isWhiteSpace((*text)[begin])) ++begin;
    }
    if (right_) {
      while (end > begin && unicode::isWhiteSpace((*text)[end - 1])) --end;
    }
    *text = text->substr(begin, end - begin);
    return okStatus();
  }

 private:
  bool left_, right_;
};

class StripAccentsNormalizer final : public Normalizer {
 public:
  Status normalize(std::u32string* text) const override {
    std::erase_if(*text, [](char32_t cp) { return unicode::isMark(cp); });
    return okStatus();
  }
};

// Replaces every non-overlapping occurrence of `pattern`, left to right.
void replaceAll(std::u32string* text, const std::u32string& pattern,
                const std::u32string& content) {
  if (pattern.empty()) return;
  std::u32string out;
  size_t pos = 0;
  while (true) {
    size_t hit = text->find(pattern, pos);
    if (hit == std::u32string::npos) break;
    out.append(*text, pos, hit - pos);
    out += content;
    pos = hit + pattern.size();
  }
  out.append(*text, pos, std::u32string::npos);
  *text = std::move(out);
}

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::u32string pattern, std::u32string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status normalize(std::u32string* text) const override {
    replaceAll(text, pattern_, content_);
    return okStatus();
  }

 private:
  std::u32string pattern_, content_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::u32string prefix) : prefix_(std::move(prefix)) {}
  Status normalize(std::u32string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);
    return okStatus();
  }

 private:
  std::u32string prefix_;
};

bool isChineseChar(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool handle_chinese_chars, bool strip_accents, bool lowercase)
      : clean_text_(clean_text),
        handle_chinese_chars_(handle_chinese_chars),
        strip_accents_(strip_accents),
        lowercase_(lowercase) {}

  Status normalize(std::u32string* text) const override {
    if (clean_text_) {
      std::u32string out;
      out.reserve(text->size());
      for (char32_t cp : *text) {
        bool tab_or_newline = cp == U'\t' || cp == U'\n' || cp == U'\r';
        if (cp == 0 || cp == 0xFFFD || (!tab_or_newline && unicode::isOther(cp))) continue;
        out.push_back(tab_or_newline || unicode::isWhiteSpace(cp) ? U' ' : cp);
      }
      *text = std::move(out);
    }
    if (handle_chinese_chars_) {
      std::u32string out;
      out.reserve(text->size());
      for (char32_t cp : *text) {
        if (isChineseChar(cp)) {
          out.push_back(U' ');
          out.push_back(cp);
          out.push_back(U' ');
        } else {
          out.push_back(cp);
        }
      }
      *text = std::move(out);
    }
    if (strip_accents_) {
      *text = unicode::normalize(*text, unicode::NormalizationForm::kNFD);
      std::erase_if(*text, [](char32_t cp) {
        return unicode::category(cp) == unicode::GeneralCategory::kMn;
      });
    }
    if (lowercase_) lowercase(text);
    return okStatus();
  }

 private:
  bool clean_text_, handle_chinese_chars_, strip_accents_, lowercase_;
};

Status toCodePoints(const std::string& utf8, const std::string& where, std::u32string* out) {
  if (!unicode::decodeUtf8(utf8, out)) {
    return invalidArgument("tokenizer.json: " + where + " is not valid UTF-8");
  }
  return okStatus();
}

}  // namespace

Status makeNormalizer(const Json& json, const std::string& where,
                      std::unique_ptr<Normalizer>* out) {
  out->reset();
  if (json.is_null()) return okStatus();
  std::string type;
  LLMC_RETURN_IF_ERROR(getType(json, where, &type));
  if (type == "Sequence") {
    auto it = json.find("normalizers");
    if (it == json.end() || !it->is_array()) {
      return invalidArgument("tokenizer.json: " + where + ".normalizers must be an array");
    }
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      std::unique_ptr<Normalizer> part;
      LLMC_RETURN_IF_ERROR(
          makeNormalizer((*it)[i], where + ".normalizers[" + std::to_string(i) + "]", &part));
      if (part) parts.push_back(std::move(part));
    }
    *out = std::make_unique<SequenceNormalizer>(std::move(parts));
  } else if (type == "NFC") {
    *out = std::make_unique<UnicodeNormalizer>(unicode::NormalizationForm::kNFC);
  } else if (type == "NFD") {
    *out = std::make_unique<UnicodeNormalizer>(unicode::NormalizationForm::kNFD);
  } else if (type == "NFKC") {
    *out = std::make_unique<UnicodeNormalizer>(unicode::NormalizationForm::kNFKC);
  } else if (type == "NFKD") {
    *out = std::make_unique<UnicodeNormalizer>(unicode::NormalizationForm::kNFKD);
  } else if (type == "Lowercase") {
    *out = std::make_unique<LowercaseNormalizer>();
  } else if (type == "Strip") {
    bool left = true, right = true;
    LLMC_RETURN_IF_ERROR(getBool(json, "strip_left", where, &left, true));
    LLMC_RETURN_IF_ERROR(getBool(json, "strip_right", where, &right, true));
    *out = std::make_unique<StripNormalizer>(left, right);
  } else if (type == "StripAccents") {
    *out = std::make_unique<StripAccentsNormalizer>();
  } else if (type == "Replace") {
    PatternSpec pattern;
    LLMC_RETURN_IF_ERROR(getPattern(json, "pattern", where, &pattern));
    if (pattern.is_regex) {
      return unimplemented("tokenizer.json: " + where +
                           ": Replace normalizer with a Regex pattern is not supported");
    }
    std::string content;
    LLMC_RETURN_IF_ERROR(getString(json, "content", where, &content));
    std::u32string pattern32, content32;
    LLMC_RETURN_IF_ERROR(toCodePoints(pattern.text, where + ".pattern", &pattern32));
    LLMC_RETURN_IF_ERROR(toCodePoints(content, where + ".content", &content32));
    *out = std::make_unique<ReplaceNormalizer>(std::move(pattern32), std::move(content32));
  } else if (type == "Prepend") {
    std::string prefix;
    LLMC_RETURN_IF_ERROR(getString(json, "prepend", where, &prefix));
    std::u32string prefix32;
    LLMC_RETURN_IF_ERROR(toCodePoints(prefix, where + ".prepend", &prefix32));
    *out = std::make_unique<PrependNormalizer>(std::move(prefix32));
  } else if (type == "BertNormalizer") {
    bool clean_text = true, chinese = true, lower = true, strip = false;
    LLMC_RETURN_IF_ERROR(getBool(json, "clean_text", where, &clean_text, true));
    LLMC_RETURN_IF_ERROR(getBool(json, "handle_chinese_chars", where, &chinese, true));
    LLMC_RETURN_IF_ERROR(getBool(json, "lowercase", where, &lower, true));
    // strip_accents: null means "follow lowercase".
    LLMC_RETURN_IF_ERROR(getBool(json, "strip_accents", where, &strip, lower));
    *out = std::make_unique<BertNormalizer>(clean_text, chinese, strip, lower);
  } else {
    return unimplemented("tokenizer.json: " + where + ": normalizer type '" + type +
                         "' is not supported");
  }
  return okStatus();
}

}  // namespace llmc::tokenization
