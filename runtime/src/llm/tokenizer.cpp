// llmc::Tokenizer: loading tokenizer.json, the added-token vocabulary, and the encode/decode
// pipelines in the order of Hugging Face `tokenizers` (added tokens are split off first, then
// normalizer, added tokens on normalized text, pre-tokenizer, model, post-processor).
#include "llmc/tokenizer.h"

#include <algorithm>
#include <map>
#include <new>
#include <unordered_map>
#include <unordered_set>

#include "core/api_guard.h"
#include "core/file_io.h"
#include "llm/tokenizer_components.h"
#include "llm/unicode.h"

namespace llmc {
namespace tokenization {
namespace {

struct AddedToken {
  std::string content;
  std::u32string content_chars;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A trie over code points with leftmost-longest search (like aho-corasick's LeftmostLongest).
class TokenTrie {
 public:
  void insert(const std::u32string& pattern, size_t token_index) {
    if (pattern.empty()) return;
    size_t node = 0;
    for (char32_t cp : pattern) {
      auto [it, inserted] = nodes_[node].children.emplace(cp, nodes_.size());
      if (inserted) nodes_.emplace_back();
      node = it->second;
    }
    if (!nodes_[node].token_index) nodes_[node].token_index = token_index;
  }
  bool empty() const { return nodes_[0].children.empty(); }

  // The first match at or after `from`: the earliest start, then the longest.
  bool find(std::u32string_view text, size_t from, size_t* begin, size_t* end,
            size_t* token_index) const {
    for (size_t start = from; start < text.size(); ++start) {
      size_t node = 0;
      bool found = false;
      for (size_t i = start; i < text.size(); ++i) {
        auto it = nodes_[node].children.find(text[i]);
        if (it == nodes_[node].children.end()) break;
        node = it->second;
        if (nodes_[node].token_index) {
          found = true;
          *end = i + 1;
          *token_index = *nodes_[node].token_index;
        }
      }
      if (found) {
        *begin = start;
        return true;
      }
    }
    return false;
  }

 private:
  struct Node {
    std::unordered_map<char32_t, size_t> children;
    std::optional<size_t> token_index;
  };
  std::vector<Node> nodes_ = std::vector<Node>(1);
};

// A stretch of text: either an added token (id >= 0) or text for the model.
struct Segment {
  size_t begin, end;
  int32_t id;
};

}  // namespace

class TokenizerImpl {
 public:
  Status load(const Json& root) {
    if (!root.is_object())
      return invalidArgument("tokenizer.json: the top level must be an object");
    auto model = root.find("model");
    if (model == root.end()) return invalidArgument("tokenizer.json: 'model' is missing");
    LLMC_RETURN_IF_ERROR(makeModel(*model, "model", &model_));
    // A reference, never a copy of the subtree (copies cost time, and destroying them
    // allocates: see dismantle()).
    static const Json kAbsent;
    auto get = [&](const char* key) -> const Json& {
      auto it = root.find(key);
      return it == root.end() ? kAbsent : *it;
    };
    LLMC_RETURN_IF_ERROR(makeNormalizer(get("normalizer"), "normalizer", &normalizer_));
    LLMC_RETURN_IF_ERROR(makePreTokenizer(get("pre_tokenizer"), "pre_tokenizer", &pre_tokenizer_));
    LLMC_RETURN_IF_ERROR(
        makePostProcessor(get("post_processor"), "post_processor", &post_processor_));
    LLMC_RETURN_IF_ERROR(makeDecoder(get("decoder"), "decoder", &decoder_));
    return loadAddedTokens(get("added_tokens"));
  }

  Status encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>* ids) const {
    ids->clear();
    std::u32string chars;
    if (!unicode::decodeUtf8(text, &chars)) {
      return invalidArgument("Tokenizer::encode: the text is not valid UTF-8");
    }
    std::vector<Segment> segments;
    splitAddedTokens(chars, raw_trie_, &segments);
    for (const Segment& segment : segments) {
      if (segment.id >= 0) {
        ids->push_back(segment.id);
        continue;
      }
      std::u32string normalized = chars.substr(segment.begin, segment.end - segment.begin);
      if (normalizer_) LLMC_RETURN_IF_ERROR(normalizer_->normalize(&normalized));
      std::vector<Segment> inner;
      splitAddedTokens(normalized, normalized_trie_, &inner);
      for (const Segment& piece : inner) {
        if (piece.id >= 0) {
          ids->push_back(piece.id);
          continue;
        }
        Piece model_piece{normalized.substr(piece.begin, piece.end - piece.begin),
                          segment.begin == 0 && piece.begin == 0};
        LLMC_RETURN_IF_ERROR(encodePiece(std::move(model_piece), ids));
      }
    }
    if (add_special_tokens && post_processor_) {
      LLMC_RETURN_IF_ERROR(post_processor_->addSpecialTokens(ids));
    }
    return okStatus();
  }

  Status decode(std::span<const int32_t> ids, bool skip_special_tokens, std::string* text) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      int32_t id = ids[i];
      const std::string* token = tokenOf(id);
      if (token == nullptr) {
        return outOfRange("Tokenizer::decode: id " + std::to_string(id) + " (at position " +
                          std::to_string(i) + ") is not in the vocabulary");
      }
      if (skip_special_tokens && special_contents_.count(*token)) continue;
      tokens.push_back(*token);
    }
    text->clear();
    if (!decoder_) {
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (i > 0) text->push_back(' ');
        *text += tokens[i];
      }
      return okStatus();
    }
    LLMC_RETURN_IF_ERROR(decoder_->decodeChain(&tokens));
    for (const std::string& token : tokens) *text += token;
    return okStatus();
  }

  const std::string* tokenOf(int32_t id) const {
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) return &added_[it->second].content;
    return model_->idToToken(id);
  }

  int32_t tokenToId(std::string_view token) const {
    auto it = added_by_content_.find(std::string(token));
    if (it != added_by_content_.end()) return added_[it->second].id;
    return model_->tokenToId(token).value_or(-1);
  }

  bool isSpecial(int32_t id) const {
    const std::string* token = tokenOf(id);
    return token != nullptr && special_contents_.count(*token) != 0;
  }

  int32_t vocabSize() const {
    int32_t limit = model_->idLimit();
    for (const AddedToken& token : added_) limit = std::max(limit, token.id + 1);
    return limit;
  }

  std::optional<int32_t> bosId() const {
    if (post_processor_) {
      auto prefix = post_processor_->prefixIds();
      if (!prefix.empty()) return prefix.front();
    }
    return specialNamed({"<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>"});
  }

  std::optional<int32_t> eosId() const {
    if (post_processor_) {
      auto suffix = post_processor_->suffixIds();
      if (!suffix.empty()) return suffix.back();
    }
    return specialNamed(
        {"<|end_of_text|>", "</s>", "<eos>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "[SEP]"});
  }

 private:
  Status loadAddedTokens(const Json& json) {
    if (json.is_null()) return okStatus();
    if (!json.is_array()) return invalidArgument("tokenizer.json: added_tokens must be an array");
    for (size_t i = 0; i < json.size(); ++i) {
      const Json& entry = json[i];
      std::string where = "added_tokens[" + std::to_string(i) + "]";
      AddedToken token;
      int64_t id = 0;
      LLMC_RETURN_IF_ERROR(getString(entry, "content", where, &token.content));
      LLMC_RETURN_IF_ERROR(getInt(entry, "id", where, &id));
      if (id < 0 || id >= (int64_t{1} << 30)) {
        return outOfRange("tokenizer.json: " + where + ".id " + std::to_string(id) +
                          " is out of range");
      }
      LLMC_RETURN_IF_ERROR(getBool(entry, "special", where, &token.special, false));
      LLMC_RETURN_IF_ERROR(getBool(entry, "single_word", where, &token.single_word, false));
      LLMC_RETURN_IF_ERROR(getBool(entry, "lstrip", where, &token.lstrip, false));
      LLMC_RETURN_IF_ERROR(getBool(entry, "rstrip", where, &token.rstrip, false));
      LLMC_RETURN_IF_ERROR(getBool(entry, "normalized", where, &token.normalized, !token.special));
      if (!unicode::decodeUtf8(token.content, &token.content_chars)) {
        return invalidArgument("tokenizer.json: " + where + ".content is not valid UTF-8");
      }
      if (token.content.empty() || added_by_content_.count(token.content)) continue;
      // Like `tokenizers`, a token the model already has keeps the model's id.
      token.id = model_->tokenToId(token.content).value_or(static_cast<int32_t>(id));
      added_by_content_[token.content] = added_.size();
      added_by_id_.emplace(token.id, added_.size());
      if (token.special) special_contents_.insert(token.content);
      added_.push_back(std::move(token));
    }
    // Special tokens first, then the others (the order of `tokenizers`' tries).
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < added_.size(); ++i) {
        const AddedToken& token = added_[i];
        if (token.special != (pass == 0)) continue;
        if (!token.normalized) {
          raw_trie_.insert(token.content_chars, i);
          continue;
        }
        std::u32string pattern = token.content_chars;
        if (normalizer_) LLMC_RETURN_IF_ERROR(normalizer_->normalize(&pattern));
        normalized_trie_.insert(pattern, i);
      }
    }
    return okStatus();
  }

  // Splits `text` at the added tokens of `trie`, with their single_word/lstrip/rstrip rules.
  void splitAddedTokens(const std::u32string& text, const TokenTrie& trie,
                        std::vector<Segment>* segments) const {
    segments->clear();
    size_t done = 0;  // end of the last emitted segment
    size_t search = 0;
    size_t begin = 0, end = 0, index = 0;
    while (!trie.empty() && trie.find(text, search, &begin, &end, &index)) {
      search = end;
      const AddedToken& token = added_[index];
      if (token.single_word) {
        bool word_before = begin > 0 && unicode::isWordChar(text[begin - 1]);
        bool word_after = end < text.size() && unicode::isWordChar(text[end]);
        if (word_before || word_after) continue;
      }
      size_t start = begin, stop = end;
      if (token.lstrip) {
        while (start > done && unicode::isWhiteSpace(text[start - 1])) --start;
      }
      if (token.rstrip) {
        while (stop < text.size() && unicode::isWhiteSpace(text[stop])) ++stop;
      }
      if (start > done) segments->push_back({done, start, -1});
      segments->push_back({start, stop, token.id});
      done = stop;
    }
    if (done < text.size()) segments->push_back({done, text.size(), -1});
  }

  Status encodePiece(Piece piece, std::vector<int32_t>* ids) const {
    if (piece.text.empty()) return okStatus();
    std::vector<Piece> pieces;
    pieces.push_back(std::move(piece));
    if (pre_tokenizer_) LLMC_RETURN_IF_ERROR(pre_tokenizer_->preTokenize(&pieces));
    std::string word;
    for (const Piece& p : pieces) {
      if (p.text.empty()) continue;
      word = unicode::toUtf8(p.text);
      LLMC_RETURN_IF_ERROR(model_->tokenize(word, ids));
    }
    return okStatus();
  }

  std::optional<int32_t> specialNamed(std::initializer_list<const char*> names) const {
    for (const char* name : names) {
      auto it = added_by_content_.find(name);
      if (it != added_by_content_.end() && added_[it->second].special) return added_[it->second].id;
    }
    return std::nullopt;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;
  std::unordered_map<std::string, size_t> added_by_content_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  std::unordered_set<std::string> special_contents_;
  TokenTrie raw_trie_, normalized_trie_;
};

}  // namespace tokenization

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

Status Tokenizer::fromJson(std::string_view json, std::unique_ptr<Tokenizer>* out) {
  return guardApi("Tokenizer::fromJson", [&]() -> Status {
    tokenization::Json root;
    struct Dismantle {  // runs before root's destructor, whichever way this returns
      tokenization::Json& json;
      ~Dismantle() { tokenization::dismantle(json); }
    } dismantle_root{root};
    try {
      root = tokenization::Json::parse(json.begin(), json.end());
    } catch (const tokenization::Json::exception& e) {
      return invalidArgument(std::string("tokenizer.json: not valid JSON: ") + e.what());
    }
    std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
    tokenizer->impl_ = std::make_unique<tokenization::TokenizerImpl>();
    // The loaders check types before every access; guardApi is the last line of defense.
    LLMC_RETURN_IF_ERROR(tokenizer->impl_->load(root));
    *out = std::move(tokenizer);
    return okStatus();
  });
}

Status Tokenizer::fromFile(const std::string& path, std::unique_ptr<Tokenizer>* out) {
  return guardApi("Tokenizer::fromFile", [&]() -> Status {
    std::string json;
    LLMC_RETURN_IF_ERROR(readFile(path, "tokenizer", &json));
    Status status = fromJson(json, out);
    return status.ok() ? status : status.withContext(path);
  });
}

Status Tokenizer::encode(std::string_view text, bool add_special_tokens,
                         std::vector<int32_t>* ids) const {
  return guardApi("Tokenizer::encode",
                  [&]() -> Status { return impl_->encode(text, add_special_tokens, ids); });
}

Status Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens,
                         std::string* text) const {
  return guardApi("Tokenizer::decode",
                  [&]() -> Status { return impl_->decode(ids, skip_special_tokens, text); });
}

int32_t Tokenizer::tokenToId(std::string_view token) const { return impl_->tokenToId(token); }

std::string Tokenizer::idToToken(int32_t id) const {
  const std::string* token = impl_->tokenOf(id);
  try {
    return token ? *token : std::string();
  } catch (const std::bad_alloc&) {
    return std::string();  // documented: empty when memory runs out
  }
}

bool Tokenizer::isSpecialToken(int32_t id) const { return impl_->isSpecial(id); }
int32_t Tokenizer::vocabSize() const { return impl_->vocabSize(); }

Status Tokenizer::unknownIds(int32_t limit, std::vector<int32_t>* ids) const {
  return guardApi("Tokenizer::unknownIds", [&]() -> Status {
    ids->clear();
    for (int32_t id = 0; id < limit; ++id)
      if (impl_->tokenOf(id) == nullptr) ids->push_back(id);
    return okStatus();
  });
}
std::optional<int32_t> Tokenizer::bosId() const { return impl_->bosId(); }
std::optional<int32_t> Tokenizer::eosId() const { return impl_->eosId(); }

std::unique_ptr<Tokenizer::StreamDecoder> Tokenizer::streamDecoder(bool skip_special_tokens) const {
  // Null only when memory runs out (no exception crosses the API).
  return std::unique_ptr<StreamDecoder>(new (std::nothrow)
                                            StreamDecoder(this, skip_special_tokens));
}

namespace {

bool endsWithReplacement(const std::string& text) { return text.ends_with("\xEF\xBF\xBD"); }

}  // namespace

// Decodes a window: the ids already emitted since the window began (the context, which gives
// decoders their left neighbor: Metaspace's and WordPiece's first-token rules, Strip) plus the
// new ones. When the window's text extends the context's text and does not end in U+FFFD, the
// extension is emitted and the window slides to start at the new ids.
Status Tokenizer::StreamDecoder::step(int32_t id, std::string* text) {
  return guardApi("Tokenizer::StreamDecoder::step", [&]() -> Status {
    const std::string* token = tokenizer_->impl_->tokenOf(id);
    if (token == nullptr) {
      return outOfRange("StreamDecoder::step: id " + std::to_string(id) +
                        " is not in the vocabulary");
    }
    all_ids_.push_back(id);
    // ByteFallback decodes a run of "<0xXX>" tokens as a whole: when the run is not valid UTF-8,
    // every byte of it becomes U+FFFD, even bytes that formed whole characters before the run
    // went wrong. So nothing of a run is emitted until a token after it (or finish()) ends it;
    // a skipped special token adds no text and ends nothing (the bytes around it form one run).
    if (tokenization::byteTokenValue(*token) >= 0 ||
        (skip_special_tokens_ && tokenizer_->isSpecialToken(id)))
      return okStatus();
    std::string window_text;
    std::span<const int32_t> window(all_ids_.data() + window_begin_,
                                    all_ids_.size() - window_begin_);
    LLMC_RETURN_IF_ERROR(tokenizer_->decode(window, skip_special_tokens_, &window_text));
    if (endsWithReplacement(window_text) || window_text.size() <= context_text_.size()) {
      return okStatus();
    }
    if (!window_text.starts_with(context_text_)) {
      // A decoder whose output for earlier ids changed: fall back to decoding everything.
      std::string full;
      LLMC_RETURN_IF_ERROR(tokenizer_->decode(all_ids_, skip_special_tokens_, &full));
      if (full.size() > emitted_bytes_) {
        text->append(full, emitted_bytes_, std::string::npos);
        emitted_bytes_ = full.size();
      }
      window_begin_ = 0;
      context_end_ = all_ids_.size();
      context_text_ = std::move(full);
      return okStatus();
    }
    text->append(window_text, context_text_.size(), std::string::npos);
    emitted_bytes_ += window_text.size() - context_text_.size();
    window_begin_ = context_end_;
    context_end_ = all_ids_.size();
    std::span<const int32_t> context(all_ids_.data() + window_begin_, context_end_ - window_begin_);
    return tokenizer_->decode(context, skip_special_tokens_, &context_text_);
  });
}

Status Tokenizer::StreamDecoder::finish(std::string* text) {
  return guardApi("Tokenizer::StreamDecoder::finish", [&]() -> Status {
    std::string full;
    LLMC_RETURN_IF_ERROR(tokenizer_->decode(all_ids_, skip_special_tokens_, &full));
    if (full.size() > emitted_bytes_) text->append(full, emitted_bytes_, std::string::npos);
    emitted_bytes_ = full.size();
    return okStatus();
  });
}

}  // namespace llmc
