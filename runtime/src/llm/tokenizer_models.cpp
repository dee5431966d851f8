// Models of tokenizer.json: BPE (byte-level or SentencePiece-style with byte fallback),
// WordPiece and WordLevel, with the merge order of Hugging Face `tokenizers`.
#include <algorithm>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "llm/tokenizer_components.h"
#include "llm/unicode.h"

namespace llmc::tokenization {
namespace {

// Heterogeneous lookup, so that string_view keys need no copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// A vocabulary with its reverse map; ids need not be dense.
class VocabTable {
 public:
  Status load(const Json& json, const std::string& where) {
    if (!json.is_object()) {
      return invalidArgument("tokenizer.json: " + where + " must be an object of token: id");
    }
    for (auto it = json.begin(); it != json.end(); ++it) {
      if (!it.value().is_number_integer()) {
        return invalidArgument("tokenizer.json: " + where + "[\"" + it.key() + "\"] must be an id");
      }
      int64_t id = it.value().get<int64_t>();
      if (id < 0 || id >= (int64_t{1} << 30)) {
        return outOfRange("tokenizer.json: " + where + "[\"" + it.key() + "\"]: id " +
                          std::to_string(id) + " is out of range");
      }
      if (!unicode::isValidUtf8(it.key())) {
        return invalidArgument("tokenizer.json: " + where + " has a token that is not UTF-8");
      }
      vocab_[it.key()] = static_cast<int32_t>(id);
      reverse_[static_cast<int32_t>(id)] = it.key();
      id_limit_ = std::max(id_limit_, static_cast<int32_t>(id) + 1);
    }
    return okStatus();
  }

  std::optional<int32_t> find(std::string_view token) const {
    auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  const std::string* token(int32_t id) const {
    auto it = reverse_.find(id);
    return it == reverse_.end() ? nullptr : &it->second;
  }
  int32_t idLimit() const { return id_limit_; }

 private:
  Vocab vocab_;
  // By id, in a hash map: sized by the entries, not by the largest id (a vector indexed by id
  // made a 70-byte tokenizer.json with one id near 2^30 allocate 32 GB).
  std::unordered_map<int32_t, std::string> reverse_;
  int32_t id_limit_ = 0;
};

std::optional<std::string> optionalString(const Json& json, const char* key) {
  auto it = json.find(key);
  if (it == json.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

// A model whose ids come from one vocabulary table ("vocab" in its JSON).
class VocabModel : public Model {
 public:
  std::optional<int32_t> tokenToId(std::string_view token) const override {
    return vocab_.find(token);
  }
  const std::string* idToToken(int32_t id) const override { return vocab_.token(id); }
  int32_t idLimit() const override { return vocab_.idLimit(); }

 protected:
  Status loadVocab(const Json& json, const std::string& where) {
    // Never a copy of the vocabulary (a conditional expression would make one).
    auto vocab = json.find("vocab");
    if (vocab == json.end()) return vocab_.load(Json(), where + ".vocab");
    return vocab_.load(*vocab, where + ".vocab");
  }
  VocabTable vocab_;
};

class BpeModel final : public VocabModel {
 public:
  Status load(const Json& json, const std::string& where) {
    LLMC_RETURN_IF_ERROR(loadVocab(json, where));
    unk_token_ = optionalString(json, "unk_token");
    continuing_subword_prefix_ = optionalString(json, "continuing_subword_prefix");
    end_of_word_suffix_ = optionalString(json, "end_of_word_suffix");
    LLMC_RETURN_IF_ERROR(getBool(json, "fuse_unk", where, &fuse_unk_, false));
    LLMC_RETURN_IF_ERROR(getBool(json, "byte_fallback", where, &byte_fallback_, false));
    LLMC_RETURN_IF_ERROR(getBool(json, "ignore_merges", where, &ignore_merges_, false));
    auto dropout = json.find("dropout");
    if (dropout != json.end() && !dropout->is_null() &&
        !(dropout->is_number() && dropout->get<double>() == 0.0)) {
      return unimplemented("tokenizer.json: " + where + ".dropout: BPE dropout is not supported");
    }
    if (unk_token_ && !vocab_.find(*unk_token_)) {
      return invalidArgument("tokenizer.json: " + where + ".unk_token '" + *unk_token_ +
                             "' is not in the vocabulary");
    }
    for (int b = 0; b < 256; ++b) {
      static const char kHex[] = "0123456789ABCDEF";
      std::string name = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
      byte_ids_[b] = vocab_.find(name).value_or(-1);
    }
    return loadMerges(json, where + ".merges");
  }

  Status tokenize(std::string_view word, std::vector<int32_t>* ids) const override {
    if (word.empty()) return okStatus();
    if (ignore_merges_) {
      if (auto id = vocab_.find(word)) {
        ids->push_back(*id);
        return okStatus();
      }
    }
    constexpr size_t kMaxCachedWordBytes = 256;
    bool cacheable = word.size() < kMaxCachedWordBytes;
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      auto it = cache_.find(word);
      if (it != cache_.end()) {
        ids->insert(ids->end(), it->second.begin(), it->second.end());
        return okStatus();
      }
    }
    std::vector<int32_t> word_ids;
    mergeWord(word, &word_ids);
    ids->insert(ids->end(), word_ids.begin(), word_ids.end());
    if (cacheable) {
      constexpr size_t kCacheCapacity = 10000;
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (cache_.size() < kCacheCapacity) cache_.emplace(std::string(word), std::move(word_ids));
    }
    return okStatus();
  }

 private:
  struct MergeResult {
    uint32_t rank;
    int32_t new_id;
  };
  static uint64_t pairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  Status loadMerges(const Json& json, const std::string& where) {
    auto it = json.find("merges");
    if (it == json.end() || it->is_null()) return okStatus();
    if (!it->is_array()) return invalidArgument("tokenizer.json: " + where + " must be an array");
    size_t prefix_length = continuing_subword_prefix_ ? continuing_subword_prefix_->size() : 0;
    uint32_t rank = 0;
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& merge = (*it)[i];
      std::string left, right;
      std::string at = where + "[" + std::to_string(i) + "]";
      if (merge.is_string()) {
        const std::string& line = merge.get_ref<const std::string&>();
        if (line.starts_with("#version")) continue;
        size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
          return invalidArgument("tokenizer.json: " + at + ": a merge must be \"left right\"");
        }
        left = line.substr(0, space);
        right = line.substr(space + 1);
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                 merge[1].is_string()) {
        left = merge[0].get<std::string>();
        right = merge[1].get<std::string>();
      } else {
        return invalidArgument("tokenizer.json: " + at + ": a merge must be a string or a pair");
      }
      auto left_id = vocab_.find(left), right_id = vocab_.find(right);
      if (!left_id || !right_id) {
        return invalidArgument("tokenizer.json: " + at + ": merge token '" +
                               (left_id ? right : left) + "' is not in the vocabulary");
      }
      std::string merged =
          left + (right.size() >= prefix_length ? right.substr(prefix_length) : "");
      auto merged_id = vocab_.find(merged);
      if (!merged_id) {
        return invalidArgument("tokenizer.json: " + at + ": merged token '" + merged +
                               "' is not in the vocabulary");
      }
      merges_[pairKey(*left_id, *right_id)] = MergeResult{rank++, *merged_id};
    }
    return okStatus();
  }

  struct Symbol {
    int32_t id;
    int prev, next;
    bool removed;
  };

  // Initial symbols per character (with unknown and byte fallback handling), then merges by
  // rank with a priority queue, exactly as tokenizers' Word::merge_all.
  void mergeWord(std::string_view word, std::vector<int32_t>* out) const {
    std::vector<int32_t> initial;
    std::optional<int32_t> pending_unk;
    std::optional<int32_t> unk_id = unk_token_ ? vocab_.find(*unk_token_) : std::nullopt;
    size_t i = 0;
    while (i < word.size()) {
      size_t length = std::min(unicode::utf8SequenceLength(static_cast<unsigned char>(word[i])),
                               word.size() - i);
      bool is_first = i == 0, is_last = i + length == word.size();
      std::string symbol(word.substr(i, length));
      i += length;
      if (!is_first && continuing_subword_prefix_) symbol = *continuing_subword_prefix_ + symbol;
      if (is_last && end_of_word_suffix_) symbol += *end_of_word_suffix_;
      if (auto id = vocab_.find(symbol)) {
        if (pending_unk) initial.push_back(*pending_unk);
        pending_unk.reset();
        initial.push_back(*id);
        continue;
      }
      if (byte_fallback_) {
        bool all_bytes = true;
        for (char byte : symbol)
          all_bytes = all_bytes && byte_ids_[static_cast<uint8_t>(byte)] >= 0;
        if (all_bytes) {
          // tokenizers does not flush a pending unknown here; it joins the next one.
          for (char byte : symbol) initial.push_back(byte_ids_[static_cast<uint8_t>(byte)]);
          continue;
        }
      }
      if (unk_id) {
        if (pending_unk && !fuse_unk_) initial.push_back(*pending_unk);
        pending_unk = *unk_id;
      }
    }
    if (pending_unk) initial.push_back(*pending_unk);
    mergeAll(initial, out);
  }

  void mergeAll(const std::vector<int32_t>& initial, std::vector<int32_t>* out) const {
    std::vector<Symbol> symbols(initial.size());
    for (size_t k = 0; k < initial.size(); ++k) {
      symbols[k] = Symbol{initial[k], static_cast<int>(k) - 1,
                          k + 1 < initial.size() ? static_cast<int>(k) + 1 : -1, false};
    }
    struct Candidate {
      uint32_t rank;
      int pos;
      int32_t new_id;
      bool operator>(const Candidate& o) const {
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    auto lookup = [&](int32_t a, int32_t b) -> const MergeResult* {
      auto it = merges_.find(pairKey(a, b));
      return it == merges_.end() ? nullptr : &it->second;
    };
    for (size_t k = 0; k + 1 < symbols.size(); ++k) {
      if (const MergeResult* m = lookup(symbols[k].id, symbols[k + 1].id)) {
        queue.push({m->rank, static_cast<int>(k), m->new_id});
      }
    }
    while (!queue.empty()) {
      Candidate top = queue.top();
      queue.pop();
      Symbol& left = symbols[top.pos];
      if (left.removed || left.next < 0) continue;
      Symbol& right = symbols[left.next];
      const MergeResult* current = lookup(left.id, right.id);
      if (current == nullptr || current->new_id != top.new_id) continue;  // stale entry
      left.id = top.new_id;
      right.removed = true;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = top.pos;
      if (left.prev >= 0) {
        if (const MergeResult* m = lookup(symbols[left.prev].id, left.id)) {
          queue.push({m->rank, left.prev, m->new_id});
        }
      }
      if (left.next >= 0) {
        if (const MergeResult* m = lookup(left.id, symbols[left.next].id)) {
          queue.push({m->rank, top.pos, m->new_id});
        }
      }
    }
    for (const Symbol& s : symbols) {
      if (!s.removed) out->push_back(s.id);
    }
  }

  std::unordered_map<uint64_t, MergeResult> merges_;
  std::optional<std::string> unk_token_, continuing_subword_prefix_, end_of_word_suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  int32_t byte_ids_[256];
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

class WordPieceModel final : public VocabModel {
 public:
  Status load(const Json& json, const std::string& where) {
    LLMC_RETURN_IF_ERROR(loadVocab(json, where));
    LLMC_RETURN_IF_ERROR(getString(json, "unk_token", where, &unk_token_));
    prefix_ = optionalString(json, "continuing_subword_prefix").value_or("##");
    int64_t max_chars = 100;
    LLMC_RETURN_IF_ERROR(getInt(json, "max_input_chars_per_word", where, &max_chars, 100));
    if (max_chars < 0)
      return invalidArgument("tokenizer.json: " + where + ".max_input_chars_per_word < 0");
    max_input_chars_per_word_ = static_cast<size_t>(max_chars);
    return okStatus();
  }

  Status tokenize(std::string_view word, std::vector<int32_t>* ids) const override {
    std::u32string chars;
    if (!unicode::decodeUtf8(word, &chars)) return internalError("WordPiece: word is not UTF-8");
    if (chars.size() > max_input_chars_per_word_) return pushUnknown(ids);
    std::vector<int32_t> pieces;
    size_t start = 0;
    while (start < word.size()) {
      size_t end = word.size();
      std::optional<int32_t> found;
      while (start < end) {
        std::string candidate(word.substr(start, end - start));
        if (start > 0) candidate = prefix_ + candidate;
        if ((found = vocab_.find(candidate))) break;
        // Step back over the last character (of the candidate, which ends at `end`).
        --end;
        while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;
      }
      if (!found) return pushUnknown(ids);
      pieces.push_back(*found);
      start = end;
    }
    ids->insert(ids->end(), pieces.begin(), pieces.end());
    return okStatus();
  }

 private:
  Status pushUnknown(std::vector<int32_t>* ids) const {
    auto unk = vocab_.find(unk_token_);
    if (!unk)
      return invalidArgument("WordPiece: unk_token '" + unk_token_ + "' is not in the vocabulary");
    ids->push_back(*unk);
    return okStatus();
  }

  std::string unk_token_, prefix_;
  size_t max_input_chars_per_word_ = 100;
};

class WordLevelModel final : public VocabModel {
 public:
  Status load(const Json& json, const std::string& where) {
    LLMC_RETURN_IF_ERROR(loadVocab(json, where));
    return getString(json, "unk_token", where, &unk_token_);
  }
  Status tokenize(std::string_view word, std::vector<int32_t>* ids) const override {
    auto id = vocab_.find(word);
    if (!id) id = vocab_.find(unk_token_);
    if (!id)
      return invalidArgument("WordLevel: unk_token '" + unk_token_ + "' is not in the vocabulary");
    ids->push_back(*id);
    return okStatus();
  }

 private:
  std::string unk_token_;
};

}  // namespace

Status makeModel(const Json& json, const std::string& where, std::unique_ptr<Model>* out) {
  if (!json.is_object()) return invalidArgument("tokenizer.json: " + where + " must be an object");
  std::string type;
  auto type_it = json.find("type");
  if (type_it != json.end()) {
    LLMC_RETURN_IF_ERROR(getString(json, "type", where, &type));
  } else if (json.contains("merges")) {
    type = "BPE";  // old files leave the type out
  } else if (json.contains("max_input_chars_per_word")) {
    type = "WordPiece";
  }
  if (type == "BPE") {
    auto model = std::make_unique<BpeModel>();
    LLMC_RETURN_IF_ERROR(model->load(json, where));
    *out = std::move(model);
  } else if (type == "WordPiece") {
    auto model = std::make_unique<WordPieceModel>();
    LLMC_RETURN_IF_ERROR(model->load(json, where));
    *out = std::move(model);
  } else if (type == "WordLevel") {
    auto model = std::make_unique<WordLevelModel>();
    LLMC_RETURN_IF_ERROR(model->load(json, where));
    *out = std::move(model);
  } else {
    return unimplemented("tokenizer.json: " + where + ": model type '" + type +
                         "' is not supported (BPE, WordPiece and WordLevel are)");
  }
  return okStatus();
}

}  // namespace llmc::tokenization
