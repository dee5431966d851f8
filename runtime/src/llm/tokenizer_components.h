// The stages of a Hugging Face tokenizer pipeline (normalizer, pre-tokenizer, model,
// decoder, post-processor) as llmc implements them, each built from its tokenizer.json object.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "llmc/status.h"

namespace llmc::tokenization {

using Json = nlohmann::json;

// A piece of normalized text on its way to the model. `at_origin` is true when the piece starts
// where the original text starts (Metaspace's "first" prepend scheme needs it).
struct Piece {
  std::u32string text;
  bool at_origin = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual Status normalize(std::u32string* text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits (and may rewrite) every piece; empty pieces are dropped.
  virtual Status preTokenize(std::vector<Piece>* pieces) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-tokenized word (UTF-8).
  virtual Status tokenize(std::string_view word, std::vector<int32_t>* ids) const = 0;
  virtual std::optional<int32_t> tokenToId(std::string_view token) const = 0;
  virtual const std::string* idToToken(int32_t id) const = 0;
  // One past the largest id.
  virtual int32_t idLimit() const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token strings; the decoded text is their concatenation.
  virtual Status decodeChain(std::vector<std::string>* tokens) const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens around the ids of one sequence.
  virtual Status addSpecialTokens(std::vector<int32_t>* ids) const = 0;
  // The ids it puts before and after a sequence, for bosId()/eosId().
  virtual std::vector<int32_t> prefixIds() const { return {}; }
  virtual std::vector<int32_t> suffixIds() const { return {}; }
};

// Each returns null through *out for a JSON null. Errors name the JSON path `where`.
Status makeNormalizer(const Json& json, const std::string& where, std::unique_ptr<Normalizer>* out);
Status makePreTokenizer(const Json& json, const std::string& where,
                        std::unique_ptr<PreTokenizer>* out);
Status makeModel(const Json& json, const std::string& where, std::unique_ptr<Model>* out);
Status makeDecoder(const Json& json, const std::string& where, std::unique_ptr<Decoder>* out);
Status makePostProcessor(const Json& json, const std::string& where,
                         std::unique_ptr<PostProcessor>* out);

// JSON field access without exceptions. Each fails with a message naming `where`.`key`.
// Takes a tree apart leaf by leaf without allocating. nlohmann::json's destructor flattens a
// tree into a heap-allocated stack, and an allocation that fails in a destructor terminates;
// the tokenizer.json tree is dismantled first so that running out of memory stays a Status.
// O(nodes x depth).
void dismantle(Json& root) noexcept;

Status getString(const Json& object, const char* key, const std::string& where, std::string* out);
Status getBool(const Json& object, const char* key, const std::string& where, bool* out,
               std::optional<bool> default_value = std::nullopt);
Status getInt(const Json& object, const char* key, const std::string& where, int64_t* out,
              std::optional<int64_t> default_value = std::nullopt);
// The "type" of a component object.
Status getType(const Json& object, const std::string& where, std::string* type);
// A {"String": s} or {"Regex": r} pattern object.
struct PatternSpec {
  bool is_regex = false;
  std::string text;
};
Status getPattern(const Json& object, const char* key, const std::string& where, PatternSpec* out);

// The byte of a ByteFallback token "<0xXX>" (what the ByteFallback decoder turns back into a
// byte), or -1 for any other token.
int byteTokenValue(const std::string& token);

// GPT-2's byte-to-character map of the ByteLevel pre-tokenizer and decoder.
char32_t byteToChar(uint8_t byte);
// The byte of a ByteLevel character, or -1 when `cp` is not one.
int charToByte(char32_t cp);

}  // namespace llmc::tokenization
