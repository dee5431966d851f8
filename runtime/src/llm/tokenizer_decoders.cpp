// Decoders (ByteLevel, Metaspace, WordPiece, ByteFallback, Fuse, Strip, Replace, BPEDecoder,
// Sequence) and post-processors (TemplateProcessing, BertProcessing, RobertaProcessing,
// ByteLevel, Sequence) of tokenizer.json.
#include <map>

#include "llm/tokenizer_components.h"
#include "llm/unicode.h"

namespace llmc::tokenization {
namespace {

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  Status decodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& part : parts_) LLMC_RETURN_IF_ERROR(part->decodeChain(tokens));
    return okStatus();
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

class ByteLevelDecoder final : public Decoder {
 public:
  Status decodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    std::u32string chars;
    for (const std::string& token : *tokens) {
      bool mapped = unicode::decodeUtf8(token, &chars);
      std::string token_bytes;
      for (char32_t cp : chars) {
        int byte = mapped ? charToByte(cp) : -1;
        if (byte < 0) {
          mapped = false;
          break;
        }
        token_bytes.push_back(static_cast<char>(byte));
      }
      bytes += mapped ? token_bytes : token;  // a token with other characters stays as it is
    }
    *tokens = {unicode::lossyUtf8(bytes)};
    return okStatus();
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  Status decodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      std::string out;
      size_t pos = 0;
      while (true) {
        size_t hit = token.find(replacement_, pos);
        out.append(token, pos, hit == std::string::npos ? std::string::npos : hit - pos);
        if (hit == std::string::npos) break;
        if (!(i == 0 && strip_first_)) out.push_back(' ');
        pos = hit + replacement_.size();
      }
      token = std::move(out);
    }
    return okStatus();
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

std::string replaceAll(const std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t hit = text.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(text, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  out.append(text, pos, std::string::npos);
  return out;
}

class WordPieceDecoder final : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  Status decodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      if (i != 0) {
        if (token.starts_with(prefix_)) {
          token = token.substr(prefix_.size());
        } else {
          token = " " + token;
        }
      }
      if (cleanup_) token = cleanup(token);
    }
    return okStatus();
  }

  static std::string cleanup(std::string text) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},     {" ,", ","},
        {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},   {" do not", " don't"},
        {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
    };
    for (const auto& [from, to] : kRules) text = replaceAll(text, from, to);
    return text;
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  Status decodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&]() {
      if (pending.empty()) return;
      if (unicode::isValidUtf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& token : *tokens) {
      int byte = byteTokenValue(token);
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    *tokens = std::move(out);
    return okStatus();
  }
};

class FuseDecoder final : public Decoder {
 public:
  Status decodeChain(std::vector<std::string>* tokens) const override {
    std::string joined;
    for (const std::string& token : *tokens) joined += token;
    *tokens = {std::move(joined)};
    return okStatus();
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  Status decodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) {
      std::u32string chars;
      if (!unicode::decodeUtf8(token, &chars)) continue;
      size_t start_cut = 0;
      for (size_t i = 0; i < std::min(start_, chars.size()) && chars[i] == content_; ++i) {
        start_cut = i + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t i = 0; i < std::min(stop_, chars.size()); ++i) {
        size_t index = chars.size() - i - 1;
        if (chars[index] != content_) break;
        stop_cut = index;
      }
      if (stop_cut < start_cut) stop_cut = start_cut;
      token = unicode::toUtf8(std::u32string_view(chars).substr(start_cut, stop_cut - start_cut));
    }
    return okStatus();
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status decodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) token = replaceAll(token, pattern_, content_);
    return okStatus();
  }

 private:
  std::string pattern_, content_;
};

// BPEDecoder: the end-of-word suffix becomes a space (none after the last token).
class BpeSuffixDecoder final : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  Status decodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      (*tokens)[i] = replaceAll((*tokens)[i], suffix_, i + 1 == tokens->size() ? "" : " ");
    }
    return okStatus();
  }

 private:
  std::string suffix_;
};

class SequenceProcessor final : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts)
      : parts_(std::move(parts)) {}
  Status addSpecialTokens(std::vector<int32_t>* ids) const override {
    for (const auto& part : parts_) LLMC_RETURN_IF_ERROR(part->addSpecialTokens(ids));
    return okStatus();
  }
  std::vector<int32_t> prefixIds() const override {
    std::vector<int32_t> ids;
    for (const auto& part : parts_) {
      auto more = part->prefixIds();
      ids.insert(ids.begin(), more.begin(), more.end());
    }
    return ids;
  }
  std::vector<int32_t> suffixIds() const override {
    std::vector<int32_t> ids;
    for (const auto& part : parts_) {
      auto more = part->suffixIds();
      ids.insert(ids.end(), more.begin(), more.end());
    }
    return ids;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

// TemplateProcessing's single template, and Bert/RobertaProcessing: fixed ids around the text.
class AroundProcessor final : public PostProcessor {
 public:
  AroundProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  Status addSpecialTokens(std::vector<int32_t>* ids) const override {
    ids->insert(ids->begin(), prefix_.begin(), prefix_.end());
    ids->insert(ids->end(), suffix_.begin(), suffix_.end());
    return okStatus();
  }
  std::vector<int32_t> prefixIds() const override { return prefix_; }
  std::vector<int32_t> suffixIds() const override { return suffix_; }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

class NoOpProcessor final : public PostProcessor {
 public:
  Status addSpecialTokens(std::vector<int32_t>*) const override { return okStatus(); }
};

Status tokenPairId(const Json& json, const char* key, const std::string& where, int32_t* id) {
  auto it = json.find(key);
  if (it == json.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
    return invalidArgument("tokenizer.json: " + where + "." + key + " must be [token, id]");
  }
  int64_t value = (*it)[1].get<int64_t>();
  if (value < 0 || value > INT32_MAX) {
    return outOfRange("tokenizer.json: " + where + "." + key + ": bad id");
  }
  *id = static_cast<int32_t>(value);
  return okStatus();
}

Status makeTemplateProcessor(const Json& json, const std::string& where,
                             std::unique_ptr<PostProcessor>* out) {
  auto single = json.find("single");
  if (single == json.end() || !single->is_array()) {
    return invalidArgument("tokenizer.json: " + where + ".single must be an array");
  }
  std::map<std::string, std::vector<int32_t>> special_ids;
  auto specials = json.find("special_tokens");
  if (specials != json.end() && specials->is_object()) {
    for (auto it = specials->begin(); it != specials->end(); ++it) {
      auto ids = it.value().find("ids");
      if (ids == it.value().end() || !ids->is_array()) {
        return invalidArgument("tokenizer.json: " + where + ".special_tokens." + it.key() +
                               ".ids must be an array");
      }
      std::vector<int32_t>& list = special_ids[it.key()];
      for (const Json& id : *ids) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
          return invalidArgument("tokenizer.json: " + where + ".special_tokens." + it.key() +
                                 ": bad id");
        }
        list.push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
    }
  }
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& piece = (*single)[i];
    std::string at = where + ".single[" + std::to_string(i) + "]";
    if (piece.contains("Sequence")) {
      std::string id;
      LLMC_RETURN_IF_ERROR(getString(piece["Sequence"], "id", at + ".Sequence", &id));
      if (id != "A" || seen_sequence) {
        return unimplemented("tokenizer.json: " + at + ": a single template must use $A once");
      }
      seen_sequence = true;
    } else if (piece.contains("SpecialToken")) {
      std::string id;
      LLMC_RETURN_IF_ERROR(getString(piece["SpecialToken"], "id", at + ".SpecialToken", &id));
      auto found = special_ids.find(id);
      if (found == special_ids.end()) {
        return invalidArgument("tokenizer.json: " + at + ": special token '" + id +
                               "' is missing from special_tokens");
      }
      auto& target = seen_sequence ? suffix : prefix;
      target.insert(target.end(), found->second.begin(), found->second.end());
    } else {
      return invalidArgument("tokenizer.json: " + at + " must be a Sequence or a SpecialToken");
    }
  }
  *out = std::make_unique<AroundProcessor>(std::move(prefix), std::move(suffix));
  return okStatus();
}

}  // namespace

// Parses the byte of a "<0xXX>" token like Rust's u8::from_str_radix (which allows a '+').
int byteTokenValue(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (token[3] == '+') return digit(token[4]);
  int high = digit(token[3]), low = digit(token[4]);
  return high < 0 || low < 0 ? -1 : high * 16 + low;
}

Status makeDecoder(const Json& json, const std::string& where, std::unique_ptr<Decoder>* out) {
  out->reset();
  if (json.is_null()) return okStatus();
  std::string type;
  LLMC_RETURN_IF_ERROR(getType(json, where, &type));
  if (type == "Sequence") {
    auto it = json.find("decoders");
    if (it == json.end() || !it->is_array()) {
      return invalidArgument("tokenizer.json: " + where + ".decoders must be an array");
    }
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      std::unique_ptr<Decoder> part;
      LLMC_RETURN_IF_ERROR(
          makeDecoder((*it)[i], where + ".decoders[" + std::to_string(i) + "]", &part));
      if (part) parts.push_back(std::move(part));
    }
    *out = std::make_unique<SequenceDecoder>(std::move(parts));
  } else if (type == "ByteLevel") {
    *out = std::make_unique<ByteLevelDecoder>();
  } else if (type == "Metaspace") {
    std::string replacement = "\xE2\x96\x81";
    if (json.contains("replacement")) {
      LLMC_RETURN_IF_ERROR(getString(json, "replacement", where, &replacement));
    }
    bool strip_first = true;
    auto scheme = json.find("prepend_scheme");
    if (scheme != json.end() && scheme->is_string()) {
      strip_first = scheme->get<std::string>() != "never";
    } else {
      LLMC_RETURN_IF_ERROR(getBool(json, "add_prefix_space", where, &strip_first, true));
    }
    *out = std::make_unique<MetaspaceDecoder>(replacement, strip_first);
  } else if (type == "WordPiece") {
    std::string prefix = "##";
    if (json.contains("prefix")) LLMC_RETURN_IF_ERROR(getString(json, "prefix", where, &prefix));
    bool cleanup = true;
    LLMC_RETURN_IF_ERROR(getBool(json, "cleanup", where, &cleanup, true));
    *out = std::make_unique<WordPieceDecoder>(prefix, cleanup);
  } else if (type == "ByteFallback") {
    *out = std::make_unique<ByteFallbackDecoder>();
  } else if (type == "Fuse") {
    *out = std::make_unique<FuseDecoder>();
  } else if (type == "Strip") {
    std::string content;
    LLMC_RETURN_IF_ERROR(getString(json, "content", where, &content));
    std::u32string content_chars;
    if (!unicode::decodeUtf8(content, &content_chars) || content_chars.size() != 1) {
      return invalidArgument("tokenizer.json: " + where + ".content must be one character");
    }
    int64_t start = 0, stop = 0;
    LLMC_RETURN_IF_ERROR(getInt(json, "start", where, &start, 0));
    LLMC_RETURN_IF_ERROR(getInt(json, "stop", where, &stop, 0));
    if (start < 0 || stop < 0)
      return invalidArgument("tokenizer.json: " + where + ": negative count");
    *out = std::make_unique<StripDecoder>(content_chars[0], start, stop);
  } else if (type == "Replace") {
    PatternSpec pattern;
    LLMC_RETURN_IF_ERROR(getPattern(json, "pattern", where, &pattern));
    if (pattern.is_regex) {
      return unimplemented("tokenizer.json: " + where +
                           ": Replace decoder with a Regex pattern is not supported");
    }
    std::string content;
    LLMC_RETURN_IF_ERROR(getString(json, "content", where, &content));
    *out = std::make_unique<ReplaceDecoder>(pattern.text, content);
  } else if (type == "BPEDecoder") {
    std::string suffix = "</w>";
    if (json.contains("suffix")) LLMC_RETURN_IF_ERROR(getString(json, "suffix", where, &suffix));
    *out = std::make_unique<BpeSuffixDecoder>(suffix);
  } else {
    return unimplemented("tokenizer.json: " + where + ": decoder type '" + type +
                         "' is not supported");
  }
  return okStatus();
}

Status makePostProcessor(const Json& json, const std::string& where,
                         std::unique_ptr<PostProcessor>* out) {
  out->reset();
  if (json.is_null()) return okStatus();
  std::string type;
  LLMC_RETURN_IF_ERROR(getType(json, where, &type));
  if (type == "Sequence") {
    auto it = json.find("processors");
    if (it == json.end() || !it->is_array()) {
      return invalidArgument("tokenizer.json: " + where + ".processors must be an array");
    }
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      std::unique_ptr<PostProcessor> part;
      LLMC_RETURN_IF_ERROR(
          makePostProcessor((*it)[i], where + ".processors[" + std::to_string(i) + "]", &part));
      if (part) parts.push_back(std::move(part));
    }
    *out = std::make_unique<SequenceProcessor>(std::move(parts));
  } else if (type == "TemplateProcessing") {
    return makeTemplateProcessor(json, where, out);
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    int32_t cls = 0, sep = 0;
    LLMC_RETURN_IF_ERROR(tokenPairId(json, "cls", where, &cls));
    LLMC_RETURN_IF_ERROR(tokenPairId(json, "sep", where, &sep));
    *out = std::make_unique<AroundProcessor>(std::vector<int32_t>{cls}, std::vector<int32_t>{sep});
  } else if (type == "ByteLevel") {
    *out = std::make_unique<NoOpProcessor>();  // it only trims offsets
  } else {
    return unimplemented("tokenizer.json: " + where + ": post-processor type '" + type +
                         "' is not supported");
  }
  return okStatus();
}

}  // namespace llmc::tokenization
