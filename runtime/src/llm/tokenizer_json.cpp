// Exception-free access to tokenizer.json fields, and GPT-2's byte/character map.
#include <array>

#include "llm/tokenizer_components.h"

namespace llmc::tokenization {
namespace {

std::string path(const std::string& where, const char* key) { return where + "." + key; }

const Json* field(const Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

}  // namespace

void dismantle(Json& root) noexcept {
  while ((root.is_array() || root.is_object()) && !root.empty()) {
    Json* node = &root;
    for (;;) {
      if (node->is_array()) {
        Json::array_t& items = *node->get_ptr<Json::array_t*>();
        Json& last = items.back();
        if ((last.is_array() || last.is_object()) && !last.empty()) {
          node = &last;
          continue;
        }
        items.pop_back();
      } else {
        Json::object_t& members = *node->get_ptr<Json::object_t*>();
        Json& last = std::prev(members.end())->second;
        if ((last.is_array() || last.is_object()) && !last.empty()) {
          node = &last;
          continue;
        }
        members.erase(std::prev(members.end()));
      }
      break;
    }
  }
}

Status getString(const Json& object, const char* key, const std::string& where, std::string* out) {
  const Json* value = field(object, key);
  if (value == nullptr || !value->is_string()) {
    return invalidArgument("tokenizer.json: " + path(where, key) + " must be a string");
  }
  *out = value->get_ref<const std::string&>();
  return okStatus();
}

Status getBool(const Json& object, const char* key, const std::string& where, bool* out,
               std::optional<bool> default_value) {
  const Json* value = field(object, key);
  if ((value == nullptr || value->is_null()) && default_value) {
    *out = *default_value;
    return okStatus();
  }
  if (value == nullptr || !value->is_boolean()) {
    return invalidArgument("tokenizer.json: " + path(where, key) + " must be true or false");
  }
  *out = value->get<bool>();
  return okStatus();
}

Status getInt(const Json& object, const char* key, const std::string& where, int64_t* out,
              std::optional<int64_t> default_value) {
  const Json* value = field(object, key);
  if ((value == nullptr || value->is_null()) && default_value) {
    *out = *default_value;
    return okStatus();
  }
  if (value == nullptr || !value->is_number_integer()) {
    return invalidArgument("tokenizer.json: " + path(where, key) + " must be an integer");
  }
  *out = value->get<int64_t>();
  return okStatus();
}

Status getType(const Json& object, const std::string& where, std::string* type) {
  if (!object.is_object())
    return invalidArgument("tokenizer.json: " + where + " must be an object");
  return getString(object, "type", where, type);
}

Status getPattern(const Json& object, const char* key, const std::string& where, PatternSpec* out) {
  const Json* value = field(object, key);
  std::string at = path(where, key);
  if (value == nullptr || !value->is_object() || value->size() != 1) {
    return invalidArgument("tokenizer.json: " + at +
                           " must be {\"String\": ...} or {\"Regex\": ...}");
  }
  if (value->contains("String")) {
    out->is_regex = false;
    return getString(*value, "String", at, &out->text);
  }
  if (value->contains("Regex")) {
    out->is_regex = true;
    return getString(*value, "Regex", at, &out->text);
  }
  return invalidArgument("tokenizer.json: " + at +
                         " must be {\"String\": ...} or {\"Regex\": ...}");
}

namespace {

// Printable bytes map to themselves; the others to 256, 257, ... in byte order (GPT-2).
struct ByteMap {
  std::array<char32_t, 256> to_char{};
  ByteMap() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
    }
  }
};

const ByteMap& byteMap() {
  static const ByteMap map;
  return map;
}

}  // namespace

char32_t byteToChar(uint8_t byte) { return byteMap().to_char[byte]; }

int charToByte(char32_t cp) {
  if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) {
    return static_cast<int>(cp);
  }
  if (cp < 256 || cp >= 256 + 68) return -1;
  const ByteMap& map = byteMap();
  for (int b = 0; b < 256; ++b) {
    if (map.to_char[b] == cp) return b;
  }
  return -1;
}

}  // namespace llmc::tokenization
