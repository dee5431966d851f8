// The Jinja2 subset (jinja.h): a lexer that applies Jinja's whitespace rules, a recursive-
// descent parser with Jinja's operator precedence, and a tree-walking evaluator with Python's
// value semantics. Errors are thrown inside and become a Status at parse() and render().
#include "jinja.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <unordered_map>

namespace llmc::serve::jinja {

namespace {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Limits that keep an untrusted template from exhausting the stack, the memory or the CPU.
constexpr int kMaxNesting = 128;             // blocks, parentheses, values inside values
constexpr size_t kMaxTagTokens = 2048;       // tokens in one {{ }} or {% %}
constexpr size_t kMaxValueBytes = 16 << 20;  // one string or list, and the whole output
constexpr int64_t kMaxWork = 10000000;       // units of work per render (Budget)
constexpr size_t kBytesPerUnit = 64;
constexpr int64_t kMaxWidth = kMaxValueBytes + 1;  // indents wider are refused by size, unbuilt

[[noreturn]] void fail(int line, const std::string& message) {
  throw Error(line > 0 ? "line " + std::to_string(line) + ": " + message : message);
}

void checkSize(size_t bytes, int line) {
  if (bytes > kMaxValueBytes)
    fail(line, "a value or the output is over " + std::to_string(kMaxValueBytes >> 20) + " MiB");
}

// The work one render may do, counted before or while it is done, so that no template and no
// input can make a render run long: a unit is an evaluation step, a list element or dict entry
// visited, compared or copied, or 64 bytes of text scanned or built. Counting only evaluations
// let `range(300000) | unique` (quadratic in one step) and 100,000 `in` tests over a list of
// 100,000 run for minutes.
class Budget {
 public:
  void charge(int64_t units, int line) {
    if (units > kMaxWork - used_)
      fail(line, "the template does more than " + std::to_string(kMaxWork) +
                     " units of work (steps, elements, 64-byte blocks of text)");
    used_ += units;
  }
  void chargeBytes(size_t bytes, int line) {
    charge(1 + static_cast<int64_t>(bytes / kBytesPerUnit), line);
  }
  // Searching `text` for `pattern` compares up to |text| x |pattern| bytes.
  void chargeSearch(size_t text, size_t pattern, int line) {
    const int64_t a = 1 + static_cast<int64_t>(text / kBytesPerUnit),
                  b = 1 + static_cast<int64_t>(pattern / kBytesPerUnit);
    charge(a > kMaxWork / b ? kMaxWork + 1 : a * b, line);
  }
  // A dict keeps its entries in insertion order and finds a key by scanning them: a unit per
  // entry, whether the key is there or not.
  const Value* find(const Value& dict, std::string_view key, int line) {
    charge(static_cast<int64_t>(dict.asDict().size()), line);
    return dict.find(key);
  }
  void setKey(Value& dict, const std::string& key, Value v, int line) {
    charge(static_cast<int64_t>(dict.asDict().size()), line);
    dict.setKey(key, std::move(v));
  }

 private:
  int64_t used_ = 0;
};

// ---- UTF-8 code points (Python indexes strings by code point) -------------------------

std::vector<size_t> codePointOffsets(const std::string& s) {
  std::vector<size_t> offsets;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) offsets.push_back(i);
  return offsets;
}

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

// ---- Values ---------------------------------------------------------------------------

struct Callable {
  virtual ~Callable() = default;
  // Positional and keyword arguments.
  virtual Value call(std::vector<Value>& args, std::vector<std::pair<std::string, Value>>& kwargs,
                     int line) = 0;
};

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value::Value(bool b) : kind_(Kind::kBool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
Value::Value(double d) : kind_(Kind::kFloat), d_(d) {}
Value::Value(std::string s)
    : kind_(Kind::kString), s_(std::make_shared<std::string>(std::move(s))) {}
Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.tuple_ = true;
  return v;
}
Value Value::dict(Dict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}
Value Value::callable(std::shared_ptr<Callable> c) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::move(c);
  return v;
}
const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::kDict) return nullptr;
  for (const auto& [k, v] : *dict_)
    if (k == key) return &v;
  return nullptr;
}
void Value::setKey(const std::string& key, Value v) {
  for (auto& [k, old] : *dict_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  dict_->emplace_back(key, std::move(v));
}

namespace {

// Builds Values from the parser's events, keeping each object's first key order and the last
// value of a repeated key (Python's json.loads). Linear in the text: nlohmann's ordered_json
// searches an object's keys on every insert, which took 34 s for one object of 100,000 keys.
class ValueBuilder {
 public:
  using Json = nlohmann::json;
  bool null() { return add(Value::none()); }
  bool boolean(bool b) { return add(Value(b)); }
  bool number_integer(Json::number_integer_t i) { return add(Value(static_cast<int64_t>(i))); }
  bool number_unsigned(Json::number_unsigned_t u) { return add(Value(static_cast<int64_t>(u))); }
  bool number_float(Json::number_float_t d, const Json::string_t&) { return add(Value(d)); }
  bool string(Json::string_t& s) { return add(Value(std::move(s))); }
  bool binary(Json::binary_t&) { return false; }
  bool start_object(std::size_t) {
    open_.push_back({Value::dict(), {}, {}});
    return true;
  }
  bool key(Json::string_t& k) {
    open_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) {
    open_.push_back({Value::list(), {}, {}});
    return true;
  }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }

  Value result;

 private:
  struct Open {
    Value container;
    std::string key;
    std::unordered_map<std::string, size_t> index;  // an object's keys: where each is in it
  };
  bool add(Value v) {
    if (open_.empty()) {
      result = std::move(v);
      return true;
    }
    Open& o = open_.back();
    if (o.container.isList()) {
      o.container.asList().push_back(std::move(v));
      return true;
    }
    Value::Dict& items = o.container.asDict();
    auto [at, fresh] = o.index.emplace(o.key, items.size());
    if (fresh)
      items.emplace_back(std::move(o.key), std::move(v));
    else
      items[at->second].second = std::move(v);
    return true;
  }
  bool close() {
    Value done = std::move(open_.back().container);
    open_.pop_back();
    return add(std::move(done));
  }
  std::vector<Open> open_;
};

}  // namespace

int jsonNesting(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

Status valueFromJson(std::string_view json, Value* out) {
  const int deepest = jsonNesting(json);
  if (deepest > kMaxNesting)
    return invalidArgument("JSON nested more than " + std::to_string(kMaxNesting) + " deep");
  ValueBuilder builder;
  if (!nlohmann::json::sax_parse(json, &builder)) return invalidArgument("not valid JSON");
  *out = std::move(builder.result);
  return okStatus();
}

namespace {

const char* kindName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "undefined";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kCallable: return "function";
  }
  return "?";
}

// Non-string dict keys: a prefix no template text holds, then the key's Python repr.
constexpr char kKeyPrefix[] = "\x01key:";

std::string scalarStr(const Value& v);

std::string dictKey(const Value& key, int line) {
  switch (key.kind()) {
    case Value::Kind::kString: return key.asString();
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
    case Value::Kind::kBool:
    case Value::Kind::kNone: return kKeyPrefix + scalarStr(key);
    default: fail(line, std::string("unhashable dict key of type ") + kindName(key));
  }
}

Value keyValue(const std::string& key) {
  if (key.rfind(kKeyPrefix, 0) != 0) return Value(key);
  std::string repr = key.substr(sizeof(kKeyPrefix) - 1);
  if (repr == "None") return Value::none();
  if (repr == "True") return Value(true);
  if (repr == "False") return Value(false);
  if (repr.find_first_of(".eE") != std::string::npos) return Value(std::stod(repr));
  return Value(static_cast<int64_t>(std::stoll(repr)));
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.asBool();
    case Value::Kind::kInt: return v.asInt() != 0;
    case Value::Kind::kFloat: return v.asDouble() != 0;
    case Value::Kind::kString: return !v.asString().empty();
    case Value::Kind::kList: return !v.asList().empty();
    case Value::Kind::kDict: return !v.asDict().empty();
    case Value::Kind::kCallable: return true;
  }
  return false;
}

// Python's repr of a float: the fewest significant digits that read back to the same double,
// in fixed notation for exponents -4 to 15 (with ".0" when there is no fraction), otherwise
// scientific with a signed exponent of at least two digits (1e+16, 2.5e-07).
std::string floatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  int digits = 1;
  for (; digits < 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*e", digits - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::snprintf(buf, sizeof(buf), "%.*e", digits - 1, d);
  const std::string scientific = buf;
  const size_t e = scientific.find('e');
  const int exp = std::stoi(scientific.substr(e + 1));
  if (exp >= -4 && exp < 16) {
    std::snprintf(buf, sizeof(buf), "%.*f", std::max(digits - 1 - exp, 0), d);
    std::string fixed = buf;
    if (fixed.find('.') == std::string::npos) fixed += ".0";
    return fixed;
  }
  const int magnitude = std::abs(exp);
  return scientific.substr(0, e) + "e" + (exp < 0 ? "-" : "+") + (magnitude < 10 ? "0" : "") +
         std::to_string(magnitude);
}

// Python's str() of a value that holds no other values.
std::string scalarStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.asBool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.asInt());
    case Value::Kind::kFloat: return floatRepr(v.asDouble());
    case Value::Kind::kString: return v.asString();
    default: return "<function>";
  }
}

std::string pyRepr(const Value& v, Budget& budget, int line, int depth = 0);

std::string strOf(const Value& v, Budget& budget, int line) {
  if (v.isList() || v.isDict()) return pyRepr(v, budget, line);
  if (v.isString()) budget.chargeBytes(v.asString().size(), line);
  return scalarStr(v);
}

std::string stringRepr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos,
       has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    if (c == quote || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else
      out += c;
  }
  return out + quote;
}

// Printing is charged per value and per 64 bytes, and stops at the size limit as it goes: a
// list of 100,000 references to one 8 MB string is 10 MB to hold and 800 GB to print.
std::string pyRepr(const Value& v, Budget& budget, int line, int depth) {
  if (depth > kMaxNesting) fail(line, "a value nested too deep to print (does it contain itself?)");
  budget.charge(1, line);
  switch (v.kind()) {
    case Value::Kind::kString:
      budget.chargeBytes(v.asString().size(), line);
      return stringRepr(v.asString());
    case Value::Kind::kList: {
      std::string out = v.isTuple() ? "(" : "[";
      for (size_t i = 0; i < v.asList().size(); ++i) {
        out += (i ? ", " : "") + pyRepr(v.asList()[i], budget, line, depth + 1);
        checkSize(out.size(), line);
      }
      if (v.isTuple() && v.asList().size() == 1) out += ",";
      return out + (v.isTuple() ? ")" : "]");
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, e] : v.asDict()) {
        out += (first ? "" : ", ") + pyRepr(keyValue(k), budget, line, depth + 1) + ": " +
               pyRepr(e, budget, line, depth + 1);
        checkSize(out.size(), line);
        first = false;
      }
      return out + "}";
    }
    case Value::Kind::kCallable: return "<function>";
    case Value::Kind::kUndefined: return "Undefined";
    default: return scalarStr(v);
  }
}

// markupsafe's escape.
std::string htmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&#39;"; break;
      case '"': out += "&#34;"; break;
      default: out += c;
    }
  }
  return out;
}

// A UTF-8 sequence at s[i] (advancing i) as a code point; a stray byte stands for itself.
uint32_t nextCodePoint(const std::string& s, size_t* i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(*i);
  const size_t extra = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
  if (extra == 0 || *i + extra >= s.size()) return byte((*i)++);
  uint32_t cp = lead & (0x3Fu >> extra);
  for (size_t k = 1; k <= extra; ++k) {
    if ((byte(*i + k) & 0xC0) != 0x80) return byte((*i)++);
    cp = (cp << 6) | (byte(*i + k) & 0x3Fu);
  }
  *i += extra + 1;
  return cp;
}

// json.dumps(v, ensure_ascii, indent, separators, sort_keys)
void jsonEscape(const std::string& s, std::string* out, bool ensure_ascii) {
  *out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (ensure_ascii && c >= 0x80) {
      const uint32_t cp = nextCodePoint(s, &i);
      char buf[16];
      if (cp >= 0x10000)
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                      0xDC00 + ((cp - 0x10000) & 0x3FF));
      else
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      *out += buf;
      continue;
    }
    ++i;
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7f)) {  // DEL is ASCII but not printable
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

struct JsonStyle {
  bool ensure_ascii = false;  // non-ASCII as \uXXXX (UTF-16 surrogates past U+FFFF)
  int64_t indent = -1;        // -1: none
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};

void toJson(const Value& v, const JsonStyle& style, int depth, std::string* out, Budget& budget,
            int line) {
  if (depth > kMaxNesting)
    fail(line, "tojson: a value nested more than " + std::to_string(kMaxNesting) +
                   " deep (does it contain itself?)");
  budget.charge(1, line);
  checkSize(out->size(), line);
  auto newline = [&](int d) {
    if (style.indent < 0) return;
    *out += '\n';
    checkSize(out->size() +
                  static_cast<size_t>(std::min(style.indent, kMaxWidth)) * static_cast<size_t>(d),
              line);
    out->append(static_cast<size_t>(style.indent * d), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return;
    case Value::Kind::kBool: *out += v.asBool() ? "true" : "false"; return;
    case Value::Kind::kInt: *out += std::to_string(v.asInt()); return;
    case Value::Kind::kFloat: {
      double d = v.asDouble();
      *out += std::isnan(d)   ? "NaN"
              : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                              : floatRepr(d);
      return;
    }
    case Value::Kind::kString:
      budget.chargeBytes(v.asString().size(), line);
      jsonEscape(v.asString(), out, style.ensure_ascii);
      return;
    case Value::Kind::kList: {
      if (v.iteratorType())
        fail(line, std::string("tojson: Object of type ") + v.iteratorType() +
                       " is not JSON serializable (| list makes it a list)");
      if (v.asList().empty()) {
        *out += "[]";
        return;
      }
      *out += '[';
      for (size_t i = 0; i < v.asList().size(); ++i) {
        if (i) *out += style.item_sep;
        newline(depth + 1);
        toJson(v.asList()[i], style, depth + 1, out, budget, line);
      }
      newline(depth);
      *out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.asDict().empty()) {
        *out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.asDict()) items.push_back(&item);
      if (style.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      *out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += style.item_sep;
        newline(depth + 1);
        Value key = keyValue(items[i]->first);
        if (key.isString())
          jsonEscape(key.asString(), out, style.ensure_ascii);
        else if (key.isNone())
          *out += "\"null\"";
        else if (key.kind() == Value::Kind::kBool)
          *out += key.asBool() ? "\"true\"" : "\"false\"";
        else
          jsonEscape(scalarStr(key), out, style.ensure_ascii);
        *out += style.key_sep;
        toJson(items[i]->second, style, depth + 1, out, budget, line);
      }
      newline(depth);
      *out += '}';
      return;
    }
    default: fail(line, std::string("tojson: cannot serialize a value of type ") + kindName(v));
  }
}

// ---- Lexer --------------------------------------------------------------------------------

enum class Tok {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEnd
};

struct Token {
  Tok type;
  std::string text;
  int line;
};

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') newlines_.push_back(i);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool strip_next = false;    // a `-` closed the previous tag
    bool line_starting = true;  // the previous tag's match ended a line (lstrip_blocks)
    bool trim_newline = false;  // trim_blocks: drop one newline after a block/comment tag
    while (pos < src_.size()) {
      size_t open = findOpen(pos);
      std::string text(src_.substr(pos, open - pos));
      if (trim_newline && !text.empty() && text[0] == '\n')
        text.erase(0, 1);
      else if (trim_newline && text.rfind("\r\n", 0) == 0)
        text.erase(0, 2);
      if (strip_next) {
        size_t i = 0;
        while (i < text.size() && isSpace(text[i])) ++i;
        text.erase(0, i);
      }
      if (open < src_.size()) {
        char kind = src_[open + 1];
        bool minus = open + 2 < src_.size() && src_[open + 2] == '-';
        bool plus = open + 2 < src_.size() && src_[open + 2] == '+';
        if (minus) {
          size_t end = text.size();
          while (end > 0 && isSpace(text[end - 1])) --end;
          text.erase(end);
        } else if ((kind == '%' || kind == '#') && !plus) {
          size_t l_pos = text.rfind('\n');
          l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
          if (l_pos > 0 || line_starting) {
            bool blank = true;
            for (size_t i = l_pos; i < text.size(); ++i)
              if (text[i] != ' ' && text[i] != '\t') blank = false;
            if (blank) text.erase(l_pos);
          }
        }
      }
      if (!text.empty()) tokens_.push_back({Tok::kText, text, lineAt(pos)});
      if (open >= src_.size()) break;
      char kind = src_[open + 1];
      size_t inner = open + 2;
      if (inner < src_.size() && (src_[inner] == '-' || src_[inner] == '+')) ++inner;
      size_t after = 0;
      bool right_minus = false, right_plus = false;
      if (kind == '#') {
        size_t close = src_.find("#}", inner);
        if (close == std::string::npos) fail(lineAt(open), "unclosed comment");
        right_minus = close > inner && src_[close - 1] == '-';
        after = close + 2;
      } else if (kind == '%' && isRaw(inner)) {
        after = lexRaw(open, inner);
        right_minus = false;
      } else {
        tokens_.push_back({kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", lineAt(open)});
        after = lexExpression(inner, kind, &right_minus, &right_plus);
        tokens_.push_back({kind == '{' ? Tok::kVarEnd : Tok::kBlockEnd, "", lineAt(after)});
      }
      strip_next = right_minus;
      trim_newline = kind != '{' && !right_minus && !right_plus;
      // Whether the next text starts a line: trim_blocks ate the newline after this tag.
      line_starting = trim_newline && after < src_.size() && src_[after] == '\n';
      pos = after;
    }
    tokens_.push_back({Tok::kEnd, "", lineAt(src_.size())});
    return std::move(tokens_);
  }

 private:
  size_t findOpen(size_t pos) const {
    for (size_t i = pos; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return src_.size();
  }
  // Lines are counted once (newlines_), not per token.
  int lineAt(size_t pos) const {  // 1 + the newlines before pos
    return 1 + static_cast<int>(std::lower_bound(newlines_.begin(), newlines_.end(), pos) -
                                newlines_.begin());
  }

  bool isRaw(size_t inner) const {
    size_t i = inner;
    while (i < src_.size() && isSpace(src_[i])) ++i;
    if (src_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    while (i < src_.size() && isSpace(src_[i])) ++i;
    return src_.compare(i, 2, "%}") == 0 || src_.compare(i, 3, "-%}") == 0;
  }
  // {% raw %}...{% endraw %}: the text between, verbatim.
  size_t lexRaw(size_t open, size_t inner) {
    size_t body = src_.find("%}", inner) + 2;
    for (size_t i = body; i < src_.size(); ++i) {
      if (src_.compare(i, 2, "{%") != 0) continue;
      size_t j = i + 2;
      if (j < src_.size() && src_[j] == '-') ++j;
      while (j < src_.size() && isSpace(src_[j])) ++j;
      if (src_.compare(j, 6, "endraw") != 0) continue;
      size_t close = src_.find("%}", j);
      if (close == std::string::npos) break;
      tokens_.push_back({Tok::kText, std::string(src_.substr(body, i - body)), lineAt(body)});
      return close + 2;
    }
    fail(lineAt(open), "unclosed raw block");
  }

  size_t lexExpression(size_t pos, char kind, bool* right_minus, bool* right_plus) {
    int depth = 0;
    const size_t first_token = tokens_.size();
    while (pos < src_.size()) {
      if (tokens_.size() - first_token > kMaxTagTokens)
        fail(lineAt(pos), "a tag of more than " + std::to_string(kMaxTagTokens) + " tokens");
      char c = src_[pos];
      if (isSpace(c)) {
        ++pos;
        continue;
      }
      // The tag's end (only outside brackets, as Jinja's lexer balances them).
      if (depth == 0) {
        const char* end = kind == '{' ? "}}" : "%}";
        if ((c == '-' || c == '+') && src_.compare(pos + 1, 2, end) == 0) {
          *right_minus = c == '-';
          *right_plus = c == '+';
          return pos + 3;
        }
        if (src_.compare(pos, 2, end) == 0) return pos + 2;
      }
      int line = lineAt(pos);
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t start = pos;
        while (pos < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[pos])) || src_[pos] == '_'))
          ++pos;
        tokens_.push_back({Tok::kName, std::string(src_.substr(start, pos - start)), line});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t start = pos;
        bool is_float = false;
        while (pos < src_.size() &&
               (std::isdigit(static_cast<unsigned char>(src_[pos])) || src_[pos] == '_'))
          ++pos;
        if (pos + 1 < src_.size() && src_[pos] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[pos + 1]))) {
          is_float = true;
          ++pos;
          while (pos < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos]))) ++pos;
        }
        if (pos < src_.size() && (src_[pos] == 'e' || src_[pos] == 'E')) {
          is_float = true;
          ++pos;
          if (pos < src_.size() && (src_[pos] == '+' || src_[pos] == '-')) ++pos;
          while (pos < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos]))) ++pos;
        }
        std::string text(src_.substr(start, pos - start));
        text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
        tokens_.push_back({is_float ? Tok::kFloat : Tok::kInt, text, line});
      } else if (c == '\'' || c == '"') {
        tokens_.push_back({Tok::kString, lexString(&pos), line});
      } else {
        static const char* const kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                           "/",  "%",  "~",  "|",  ".",  ",",  ":", "(", ")",
                                           "[",  "]",  "{",  "}",  "<",  ">",  "="};
        std::string op;
        for (const char* o : kOps) {
          if (src_.compare(pos, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (op.empty()) fail(line, std::string("unexpected character '") + c + "'");
        if (op == "(" || op == "[" || op == "{") ++depth;
        if (op == ")" || op == "]" || op == "}") --depth;
        tokens_.push_back({Tok::kOp, op, line});
        pos += op.size();
      }
    }
    fail(lineAt(pos), kind == '{' ? "unclosed '{{'" : "unclosed '{%'");
  }

  std::string lexString(size_t* pos) {
    char quote = src_[*pos];
    int line = lineAt(*pos);
    std::string out;
    size_t i = *pos + 1;
    for (; i < src_.size() && src_[i] != quote; ++i) {
      char c = src_[i];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (++i >= src_.size()) break;
      switch (src_[i]) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'u':
        case 'x': {
          size_t digits = src_[i] == 'u' ? 4 : 2;
          if (i + digits >= src_.size()) fail(line, "bad escape in a string");
          uint32_t cp = static_cast<uint32_t>(
              std::stoul(std::string(src_.substr(i + 1, digits)), nullptr, 16));
          i += digits;
          if (cp < 0x80)
            out += static_cast<char>(cp);
          else if (cp < 0x800)
            out += static_cast<char>(0xC0 | (cp >> 6)),
                out += static_cast<char>(0x80 | (cp & 0x3F));
          else
            out += static_cast<char>(0xE0 | (cp >> 12)),
                out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                out += static_cast<char>(0x80 | (cp & 0x3F));
          break;
        }
        default: out += '\\', out += src_[i];  // Python keeps unknown escapes
      }
    }
    if (i >= src_.size()) fail(line, "unclosed string");
    *pos = i + 1;
    return out;
  }

  std::string_view src_;
  std::vector<size_t> newlines_;  // offsets of '\n'
  std::vector<Token> tokens_;
};

}  // namespace

// ---- Syntax tree ------------------------------------------------------------------------

struct Expr {
  enum class Kind {
    kLiteral,
    kName,
    kList,
    kDict,
    kAttr,
    kItem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kBinary,
    kAnd,
    kOr,
    kNot,
    kCond,
    kCompare
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;                         // name, attribute, filter, test, operator
  std::vector<std::unique_ptr<Expr>> args;  // operands / elements / positional arguments
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;  // dict items / keywords
  std::vector<std::string> ops;                                       // comparison chain operators
  bool negated = false;                                               // `is not`
};
using ExprPtr = std::unique_ptr<Expr>;

struct Template::Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kBlock };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;                      // output / set value / for iterable / if conditions
  std::vector<std::string> targets;  // for/set targets; set: name or ns.attr
  std::vector<std::pair<ExprPtr, std::vector<std::unique_ptr<Node>>>> branches;  // if
  std::vector<std::unique_ptr<Node>> body, else_body;
  ExprPtr filter;                                       // for ... if cond
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters and defaults
};
using Node = Template::Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

// ---- Parser -----------------------------------------------------------------------------

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  // Counts nesting (blocks inside blocks, expressions inside parentheses) while it lives.
  struct Nest {
    explicit Nest(Parser* p) : parser(p) {
      if (++parser->nesting_ > kMaxNesting)
        fail(parser->cur().line, "nested more than " + std::to_string(kMaxNesting) + " deep");
    }
    ~Nest() { --parser->nesting_; }
    Parser* parser;
  };

  void parseTemplate(Body* body) {
    std::string end = parseBody(body, {});
    if (!end.empty()) fail(cur().line, "unexpected '" + end + "'");
  }

 private:
  const Token& cur() const { return t_[pos_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  bool isOp(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool isName(const char* name) const { return cur().type == Tok::kName && cur().text == name; }
  void expectOp(const char* op) {
    if (!isOp(op))
      fail(cur().line, std::string("expected '") + op + "', got '" + describe(cur()) + "'");
    ++pos_;
  }
  std::string expectName() {
    if (cur().type != Tok::kName)
      fail(cur().line, "expected a name, got '" + describe(cur()) + "'");
    return t_[pos_++].text;
  }
  void expectBlockEnd() {
    if (cur().type != Tok::kBlockEnd)
      fail(cur().line, "expected '%}', got '" + describe(cur()) + "'");
    ++pos_;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::kBlockEnd: return "%}";
      case Tok::kVarEnd: return "}}";
      case Tok::kEnd: return "end of template";
      default: return t.text;
    }
  }

  // Parses nodes until a block tag whose name is in `ends` (returned, its name consumed but
  // not the rest of the tag) or the end of the template ("").
  std::string parseBody(Body* body, const std::vector<std::string>& ends) {
    while (cur().type != Tok::kEnd) {
      const Token& tok = cur();
      if (tok.type == Tok::kText) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kText;
        node->text = tok.text;
        body->push_back(std::move(node));
        ++pos_;
      } else if (tok.type == Tok::kVarBegin) {
        ++pos_;
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kOutput;
        node->line = tok.line;
        node->expr = parseExpr();
        if (cur().type != Tok::kVarEnd)
          fail(cur().line, "expected '}}', got '" + describe(cur()) + "'");
        ++pos_;
        body->push_back(std::move(node));
      } else if (tok.type == Tok::kBlockBegin) {
        ++pos_;
        std::string name = expectName();
        if (std::find(ends.begin(), ends.end(), name) != ends.end()) return name;
        body->push_back(parseStatement(name, tok.line));
      } else {
        fail(tok.line, "unexpected '" + describe(tok) + "'");
      }
    }
    if (!ends.empty()) fail(cur().line, "missing '{% " + ends.back() + " %}'");
    return "";
  }

  NodePtr parseStatement(const std::string& name, int line) {
    Nest nest(this);
    auto node = std::make_unique<Node>();
    node->line = line;
    if (name == "if") {
      node->kind = Node::Kind::kIf;
      ExprPtr cond = parseExpr();
      expectBlockEnd();
      for (;;) {
        Body branch;
        std::string end = parseBody(&branch, {"elif", "else", "endif"});
        node->branches.emplace_back(std::move(cond), std::move(branch));
        if (end == "elif") {
          cond = parseExpr();
          expectBlockEnd();
          continue;
        }
        if (end == "else") {
          expectBlockEnd();
          if (parseBody(&node->else_body, {"endif"}) != "endif") fail(line, "missing endif");
        }
        expectBlockEnd();
        break;
      }
    } else if (name == "for") {
      node->kind = Node::Kind::kFor;
      node->targets.push_back(expectName());
      while (isOp(",")) {
        ++pos_;
        node->targets.push_back(expectName());
      }
      if (!isName("in")) fail(cur().line, "expected 'in' in a for loop");
      ++pos_;
      node->expr = parseExpr(/*allow_cond=*/false);
      if (isName("if")) {
        ++pos_;
        node->filter = parseExpr(false);
      }
      if (isName("recursive")) fail(cur().line, "recursive for loops are not supported");
      expectBlockEnd();
      std::string end = parseBody(&node->body, {"else", "endfor"});
      if (end == "else") {
        expectBlockEnd();
        parseBody(&node->else_body, {"endfor"});
      }
      expectBlockEnd();
    } else if (name == "set") {
      std::string target = expectName();
      if (isOp(".")) {
        ++pos_;
        target += "." + expectName();
      }
      node->targets.push_back(target);
      while (isOp(",")) {
        ++pos_;
        node->targets.push_back(expectName());
      }
      if (isOp("=")) {
        ++pos_;
        node->kind = Node::Kind::kSet;
        node->expr = parseExpr();
        if (isOp(",")) {  // a tuple on the right
          auto tuple = std::make_unique<Expr>();
          tuple->kind = Expr::Kind::kList;
          tuple->name = "tuple";
          tuple->args.push_back(std::move(node->expr));
          while (isOp(",")) {
            ++pos_;
            tuple->args.push_back(parseExpr());
          }
          node->expr = std::move(tuple);
        }
        expectBlockEnd();
      } else {
        node->kind = Node::Kind::kSetBlock;
        expectBlockEnd();
        parseBody(&node->body, {"endset"});
        expectBlockEnd();
      }
    } else if (name == "macro") {
      node->kind = Node::Kind::kMacro;
      node->text = expectName();
      expectOp("(");
      while (!isOp(")")) {
        std::string param = expectName();
        ExprPtr def;
        if (isOp("=")) {
          ++pos_;
          def = parseExpr();
        }
        node->params.emplace_back(param, std::move(def));
        if (!isOp(",")) break;
        ++pos_;
      }
      expectOp(")");
      expectBlockEnd();
      parseBody(&node->body, {"endmacro"});
      expectBlockEnd();
    } else if (name == "break" || name == "continue") {
      node->kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      expectBlockEnd();
    } else if (name == "generation") {
      // transformers' assistant-mask marker: renders its body.
      node->kind = Node::Kind::kBlock;
      expectBlockEnd();
      parseBody(&node->body, {"endgeneration"});
      expectBlockEnd();
    } else {
      fail(line, "the statement '" + name + "' is not supported");
    }
    return node;
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  ExprPtr parseExpr(bool allow_cond = true) {
    Nest nest(this);
    ExprPtr e = parseOr();
    if (allow_cond && isName("if")) {
      int line = cur().line;
      ++pos_;
      auto cond = make(Expr::Kind::kCond, line);
      ExprPtr test = parseOr();
      ExprPtr otherwise;
      if (isName("else")) {
        ++pos_;
        otherwise = parseExpr();
      }
      cond->args.push_back(std::move(test));
      cond->args.push_back(std::move(e));
      cond->args.push_back(std::move(otherwise));  // may be null: undefined
      return cond;
    }
    return e;
  }
  // One precedence level of left-associative operators: `next (op next)*`. kOr and kAnd are
  // the keywords; kBinary nodes carry their operator in `name`.
  ExprPtr chain(Expr::Kind kind, std::initializer_list<const char*> ops,
                ExprPtr (Parser::*next)()) {
    ExprPtr left = (this->*next)();
    for (;;) {
      const char* op = nullptr;
      for (const char* o : ops)
        if (kind == Expr::Kind::kBinary ? isOp(o) : isName(o)) op = o;
      if (!op) return left;
      auto e = make(kind, cur().line);
      e->name = op;
      ++pos_;
      e->args.push_back(std::move(left));
      e->args.push_back((this->*next)());
      left = std::move(e);
    }
  }
  ExprPtr parseOr() { return chain(Expr::Kind::kOr, {"or"}, &Parser::parseAnd); }
  ExprPtr parseAnd() { return chain(Expr::Kind::kAnd, {"and"}, &Parser::parseNot); }
  ExprPtr parseNot() {
    if (isName("not")) {
      Nest nest(this);
      auto e = make(Expr::Kind::kNot, cur().line);
      ++pos_;
      e->args.push_back(parseNot());
      return e;
    }
    return parseCompare();
  }
  ExprPtr parseCompare() {
    ExprPtr left = parseMath1();
    ExprPtr chain;
    for (;;) {
      std::string op;
      if (cur().type == Tok::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        ++pos_;
      } else if (isName("in")) {
        op = "in";
        ++pos_;
      } else if (isName("not") && peek().type == Tok::kName && peek().text == "in") {
        op = "not in";
        pos_ += 2;
      } else {
        break;
      }
      if (!chain) {
        chain = make(Expr::Kind::kCompare, cur().line);
        chain->args.push_back(std::move(left));
      }
      chain->ops.push_back(op);
      chain->args.push_back(parseMath1());
    }
    return chain ? std::move(chain) : std::move(left);
  }
  ExprPtr parseMath1() { return chain(Expr::Kind::kBinary, {"+", "-"}, &Parser::parseConcat); }
  ExprPtr parseConcat() { return chain(Expr::Kind::kBinary, {"~"}, &Parser::parseMath2); }
  ExprPtr parseMath2() {
    return chain(Expr::Kind::kBinary, {"*", "/", "//", "%"}, &Parser::parsePow);
  }
  ExprPtr parsePow() { return chain(Expr::Kind::kBinary, {"**"}, &Parser::parseFilteredUnary); }
  ExprPtr parseFilteredUnary() { return parseUnary(true); }
  ExprPtr parseUnary(bool with_filter) {
    ExprPtr e;
    if (isOp("-") || isOp("+")) {
      Nest nest(this);
      auto u = make(Expr::Kind::kUnary, cur().line);
      u->name = cur().text;
      ++pos_;
      u->args.push_back(parseUnary(false));
      e = std::move(u);
    } else {
      e = parsePostfix(parsePrimary());
    }
    if (with_filter) e = parseFilters(std::move(e));
    return e;
  }
  ExprPtr parsePrimary() {
    const Token tok = cur();
    ++pos_;
    switch (tok.type) {
      case Tok::kString: {
        std::string s = tok.text;
        while (cur().type == Tok::kString) s += t_[pos_++].text;  // adjacent literals join
        auto e = make(Expr::Kind::kLiteral, tok.line);
        e->literal = Value(s);
        return e;
      }
      case Tok::kInt: {
        auto e = make(Expr::Kind::kLiteral, tok.line);
        e->literal = Value(static_cast<int64_t>(std::stoll(tok.text)));
        return e;
      }
      case Tok::kFloat: {
        auto e = make(Expr::Kind::kLiteral, tok.line);
        e->literal = Value(std::stod(tok.text));
        return e;
      }
      case Tok::kName: {
        auto e = make(Expr::Kind::kLiteral, tok.line);
        if (tok.text == "true" || tok.text == "True")
          e->literal = Value(true);
        else if (tok.text == "false" || tok.text == "False")
          e->literal = Value(false);
        else if (tok.text == "none" || tok.text == "None")
          e->literal = Value::none();
        else {
          e->kind = Expr::Kind::kName;
          e->name = tok.text;
        }
        return e;
      }
      case Tok::kOp:
        if (tok.text == "(") {
          ExprPtr inner = parseExpr();
          if (isOp(",")) {  // a tuple
            auto list = make(Expr::Kind::kList, tok.line);
            list->name = "tuple";
            list->args.push_back(std::move(inner));
            while (isOp(",")) {
              ++pos_;
              if (isOp(")")) break;
              list->args.push_back(parseExpr());
            }
            inner = std::move(list);
          }
          expectOp(")");
          return inner;
        }
        if (tok.text == "[") {
          auto list = make(Expr::Kind::kList, tok.line);
          while (!isOp("]")) {
            list->args.push_back(parseExpr());
            if (!isOp(",")) break;
            ++pos_;
          }
          expectOp("]");
          return list;
        }
        if (tok.text == "{") {
          auto dict = make(Expr::Kind::kDict, tok.line);
          while (!isOp("}")) {
            ExprPtr key = parseExpr();
            expectOp(":");
            dict->args.push_back(std::move(key));
            dict->args.push_back(parseExpr());
            if (!isOp(",")) break;
            ++pos_;
          }
          expectOp("}");
          return dict;
        }
        break;
      default: break;
    }
    fail(tok.line, "unexpected '" + describe(tok) + "' in an expression");
  }
  void parseCallArgs(Expr* call) {
    expectOp("(");
    while (!isOp(")")) {
      if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
        std::string key = cur().text;
        pos_ += 2;
        call->kwargs.emplace_back(key, parseExpr());
      } else {
        call->args.push_back(parseExpr());
      }
      if (!isOp(",")) break;
      ++pos_;
    }
    expectOp(")");
  }
  ExprPtr parsePostfix(ExprPtr e) {
    for (;;) {
      if (isOp(".")) {
        ++pos_;
        auto attr = make(Expr::Kind::kAttr, cur().line);
        if (cur().type == Tok::kInt)
          attr->name = t_[pos_++].text;
        else
          attr->name = expectName();
        attr->args.push_back(std::move(e));
        e = std::move(attr);
      } else if (isOp("[")) {
        int line = cur().line;
        ++pos_;
        ExprPtr parts[3];
        bool slice = false;
        int part = 0;
        while (!isOp("]")) {
          if (isOp(":")) {
            slice = true;
            if (++part > 2) fail(line, "a slice has at most two ':'");
            ++pos_;
            continue;
          }
          parts[part] = parseExpr();
        }
        expectOp("]");
        auto item = make(slice ? Expr::Kind::kSlice : Expr::Kind::kItem, line);
        item->args.push_back(std::move(e));
        for (auto& p : parts) item->args.push_back(std::move(p));
        if (!slice && !item->args[1]) fail(line, "an empty subscript");
        e = std::move(item);
      } else if (isOp("(")) {
        auto call = make(Expr::Kind::kCall, cur().line);
        call->args.push_back(std::move(e));
        parseCallArgs(call.get());
        e = std::move(call);
      } else {
        return e;
      }
    }
  }
  ExprPtr parseFilters(ExprPtr e) {
    for (;;) {
      if (isOp("|")) {
        ++pos_;
        auto f = make(Expr::Kind::kFilter, cur().line);
        f->name = expectName();
        f->args.push_back(std::move(e));
        if (isOp("(")) parseCallArgs(f.get());
        e = std::move(f);
      } else if (isName("is")) {
        ++pos_;
        auto t = make(Expr::Kind::kTest, cur().line);
        if (isName("not")) {
          t->negated = true;
          ++pos_;
        }
        t->name = expectName();
        t->args.push_back(std::move(e));
        if (isOp("(")) {
          parseCallArgs(t.get());
        } else if (cur().type == Tok::kString || cur().type == Tok::kInt ||
                   cur().type == Tok::kFloat ||
                   (cur().type == Tok::kName && !isName("and") && !isName("or") &&
                    !isName("else") && !isName("if") && !isName("in") && !isName("not") &&
                    !isName("is"))) {
          t->args.push_back(parsePostfix(parsePrimary()));  // `is divisibleby 3`
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

// ---- Evaluator --------------------------------------------------------------------------

namespace {

using Kwargs = std::vector<std::pair<std::string, Value>>;

struct NativeFunction : Callable {
  std::function<Value(std::vector<Value>&, Kwargs&, int)> fn;
  explicit NativeFunction(std::function<Value(std::vector<Value>&, Kwargs&, int)> f)
      : fn(std::move(f)) {}
  Value call(std::vector<Value>& args, Kwargs& kwargs, int line) override {
    return fn(args, kwargs, line);
  }
};

Value native(std::function<Value(std::vector<Value>&, Kwargs&, int)> f) {
  return Value::callable(std::make_shared<NativeFunction>(std::move(f)));
}

// Comparisons are charged per value visited (shared lists can nest far more values than they
// hold) and per 64 bytes of the shorter string.
bool equal(const Value& a, const Value& b, Budget& budget, int line, int depth = 0) {
  if (depth > kMaxNesting)
    fail(line, "values nested too deep to compare (does one contain itself?)");
  budget.charge(1, line);
  if (a.isNumber() && b.isNumber()) {
    if (a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt)
      return a.asInt() == b.asInt();
    return a.asDouble() == b.asDouble();
  }
  if ((a.kind() == Value::Kind::kBool && b.isNumber()) ||
      (b.kind() == Value::Kind::kBool && a.isNumber()))
    return (a.kind() == Value::Kind::kBool ? (a.asBool() ? 1.0 : 0.0) : a.asDouble()) ==
           (b.kind() == Value::Kind::kBool ? (b.asBool() ? 1.0 : 0.0) : b.asDouble());
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return a.asBool() == b.asBool();
    case Value::Kind::kString:
      budget.chargeBytes(std::min(a.asString().size(), b.asString().size()), line);
      return a.asString() == b.asString();
    case Value::Kind::kList: {
      if (a.asList().size() != b.asList().size()) return false;
      for (size_t i = 0; i < a.asList().size(); ++i)
        if (!equal(a.asList()[i], b.asList()[i], budget, line, depth + 1)) return false;
      return true;
    }
    case Value::Kind::kDict: {
      if (a.asDict().size() != b.asDict().size()) return false;
      for (const auto& [k, v] : a.asDict()) {
        const Value* other = budget.find(b, k, line);
        if (!other || !equal(v, *other, budget, line, depth + 1)) return false;
      }
      return true;
    }
    default: return a.asCallable() == b.asCallable();
  }
}

int compareOrder(const Value& a, const Value& b, Budget& budget, int line, int depth = 0) {
  if (depth > kMaxNesting) fail(line, "values nested too deep to compare");
  budget.charge(1, line);
  auto num = [](const Value& v) {
    return v.kind() == Value::Kind::kBool ? (v.asBool() ? 1.0 : 0.0) : v.asDouble();
  };
  bool an = a.isNumber() || a.kind() == Value::Kind::kBool,
       bn = b.isNumber() || b.kind() == Value::Kind::kBool;
  if (an && bn) {
    if (a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt)
      return a.asInt() < b.asInt() ? -1 : a.asInt() > b.asInt();
    double x = num(a), y = num(b);
    return x < y ? -1 : x > y;
  }
  if (a.isString() && b.isString()) {
    budget.chargeBytes(std::min(a.asString().size(), b.asString().size()), line);
    int c = a.asString().compare(b.asString());  // bytewise = code point order in UTF-8
    return c < 0 ? -1 : c > 0;
  }
  if (a.isList() && b.isList()) {
    const auto &x = a.asList(), &y = b.asList();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (equal(x[i], y[i], budget, line, depth + 1)) continue;
      return compareOrder(x[i], y[i], budget, line, depth + 1);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  fail(line, std::string("cannot order ") + kindName(a) + " and " + kindName(b));
}

bool contains(const Value& container, const Value& item, Budget& budget, int line) {
  if (container.isString()) {
    if (!item.isString()) fail(line, "'in <string>' needs a string on the left");
    budget.chargeSearch(container.asString().size(), item.asString().size(), line);
    return container.asString().find(item.asString()) != std::string::npos;
  }
  if (container.isList()) {
    for (const Value& v : container.asList())
      if (equal(v, item, budget, line)) return true;
    return false;
  }
  if (container.isDict()) {
    if (item.isList() || item.isDict() || item.isUndefined()) return false;
    return budget.find(container, dictKey(item, line), line) != nullptr;
  }
  if (container.isUndefined()) return false;  // iterating an undefined value yields nothing
  fail(line, std::string("'in' on a value of type ") + kindName(container));
}

// Python's sequence index normalization.
int64_t normalizeIndex(int64_t i, int64_t n) { return i < 0 ? (i < -n ? -1 : i + n) : i; }

std::vector<int64_t> sliceIndices(int64_t n, const std::optional<int64_t>& start,
                                  const std::optional<int64_t>& stop, int64_t step, Budget& budget,
                                  int line) {
  if (step == 0) fail(line, "slice step cannot be zero");
  std::vector<int64_t> out;
  auto clampIdx = [&](std::optional<int64_t> v, int64_t def, bool neg_step) {
    if (!v) return def;
    int64_t i = *v < 0 ? (*v < -n ? -1 - n : *v + n) : *v;
    if (neg_step) return std::clamp<int64_t>(i, -1, n - 1);
    return std::clamp<int64_t>(i, 0, n);
  };
  // Counted, not stepped past the end: a huge step must not overflow.
  if (step > 0) {
    int64_t b = clampIdx(start, 0, false), e = clampIdx(stop, n, false);
    int64_t count = e > b ? (e - b - 1) / step + 1 : 0;
    budget.charge(count, line);
    for (int64_t k = 0; k < count; ++k) out.push_back(b + k * step);
  } else {
    int64_t b = clampIdx(start, n - 1, true), e = clampIdx(stop, -1, true);
    uint64_t stride = static_cast<uint64_t>(-(step + 1)) + 1;  // |step|, without overflow
    int64_t count =
        b > e ? static_cast<int64_t>((static_cast<uint64_t>(b - e) - 1) / stride + 1) : 0;
    budget.charge(count, line);
    for (int64_t k = 0; k < count; ++k)
      out.push_back(b - static_cast<int64_t>(static_cast<uint64_t>(k) * stride));
  }
  return out;
}

std::string stripChars(const std::string& s, const std::optional<std::string>& chars, bool left,
                       bool right) {
  auto strip = [&](char c) { return chars ? chars->find(c) != std::string::npos : isSpace(c); };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && strip(s[b])) ++b;
  if (right)
    while (e > b && strip(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string replaceAll(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count, Budget& budget, int line) {
  budget.chargeSearch(s.size(), from.size(), line);
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    std::string out = to;
    auto offsets = codePointOffsets(s);
    for (size_t i = 0; i < offsets.size(); ++i) {
      size_t end = i + 1 < offsets.size() ? offsets[i + 1] : s.size();
      budget.chargeBytes(end - offsets[i] + to.size(), line);
      out += s.substr(offsets[i], end - offsets[i]) + to;
      checkSize(out.size(), line);
    }
    return out;
  }
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  for (;;) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos || (count >= 0 && done >= count)) break;
    budget.chargeBytes(hit - pos + to.size(), line);
    out += s.substr(pos, hit - pos) + to;
    checkSize(out.size(), line);
    pos = hit + from.size();
    ++done;
  }
  return out + s.substr(pos);
}

std::string titleCase(const std::string& s, bool capitalize_only) {
  std::string out = s;
  bool start = true;
  for (size_t i = 0; i < out.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(out[i]);
    if (capitalize_only) {
      out[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
      continue;
    }
    if (std::isalpha(c)) {
      out[i] = static_cast<char>(start ? std::toupper(c) : std::tolower(c));
      start = false;
    } else {
      start = !(c >= 0x80);  // Python treats non-ASCII letters as letters; approximate
    }
  }
  return out;
}

struct Frame {
  std::map<std::string, Value> vars;
};

class Renderer;

struct Macro : Callable {
  const Node* node;
  Renderer* renderer;
  Macro(const Node* n, Renderer* r) : node(n), renderer(r) {}
  Value call(std::vector<Value>& args, Kwargs& kwargs, int line) override;
};

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  ~Renderer() {
    // Break the reference cycles a template may make through namespaces.
    for (Value& ns : namespaces_) ns.asDict().clear();
    frames_.clear();
    globals_.clear();
  }

  Renderer(const Value& context, int64_t now) : now_(now) {
    frames_.emplace_back();
    if (context.isDict())
      for (const auto& [k, v] : context.asDict()) frames_.back().vars[k] = v;
    installGlobals();
  }

  Flow exec(const Body& body, std::string* out) {
    for (const NodePtr& n : body) {
      Flow f = execNode(*n, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Value callMacro(const Node* node, std::vector<Value>& args, Kwargs& kwargs, int line) {
    if (++depth_ > 64) fail(line, "macros nested too deep");
    frames_.emplace_back();
    for (size_t i = 0; i < node->params.size(); ++i) {
      const auto& [name, def] = node->params[i];
      Value v;
      if (i < args.size())
        v = args[i];
      else if (def)
        v = eval(*def);
      for (auto& [k, kv] : kwargs)
        if (k == name) v = kv;
      frames_.back().vars[name] = v;
    }
    std::string text;
    exec(node->body, &text);
    frames_.pop_back();
    --depth_;
    return Value(text);
  }

 private:
  Value lookup(const std::string& name, int line) {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      step(line);  // loops inside macros inside loops: thousands of frames
      auto v = it->vars.find(name);
      if (v != it->vars.end()) return v->second;
    }
    auto g = globals_.find(name);
    return g == globals_.end() ? Value() : g->second;
  }

  void installGlobals() {
    globals_["raise_exception"] = native([this](std::vector<Value>& a, Kwargs&, int line) -> Value {
      fail(line, "raise_exception: " + (a.empty() ? std::string() : strOf(a[0], budget_, line)));
    });
    globals_["range"] = native([this](std::vector<Value>& a, Kwargs&, int line) {
      int64_t start = 0, stop = 0, step = 1;
      for (const Value& v : a)
        if (v.kind() != Value::Kind::kInt) fail(line, "range() takes integers");
      if (a.size() == 1)
        stop = a[0].asInt();
      else if (a.size() >= 2)
        start = a[0].asInt(), stop = a[1].asInt();
      if (a.size() == 3) step = a[2].asInt();
      if (a.empty() || a.size() > 3 || step == 0) fail(line, "bad arguments to range()");
      Value::List out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        out.push_back(Value(i));
        if (out.size() > 1000000) fail(line, "range() too long");
        this->step(line);  // building the list costs steps too
        if (step > 0 ? i > std::numeric_limits<int64_t>::max() - step
                     : i < std::numeric_limits<int64_t>::min() - step)
          break;  // the next value would overflow: past stop anyway
      }
      return Value::list(std::move(out));
    });
    auto make_dict = [this](std::vector<Value>& a, Kwargs& kw, int line) {
      Value d = Value::dict();
      if (!a.empty()) {
        if (!a[0].isDict()) fail(line, "dict()/namespace() takes a mapping or keywords");
        budget_.charge(static_cast<int64_t>(a[0].asDict().size()), line);
        d = Value::dict(a[0].asDict());  // its keys are distinct already
      }
      for (auto& [k, v] : kw) budget_.setKey(d, k, v, line);
      return d;
    };
    globals_["namespace"] = native([this, make_dict](std::vector<Value>& a, Kwargs& kw, int line) {
      Value ns = make_dict(a, kw, line);
      ns.markNamespace();
      namespaces_.push_back(ns);  // emptied when the render ends: `set ns.x = ns` cycles
      return ns;
    });
    globals_["dict"] = native(make_dict);
    int64_t now = now_;
    globals_["strftime_now"] = native([now](std::vector<Value>& a, Kwargs&, int line) {
      if (a.size() != 1 || !a[0].isString()) fail(line, "strftime_now takes a format string");
      std::time_t t = now ? static_cast<std::time_t>(now) : std::time(nullptr);
      std::tm tm{};
      gmtime_r(&t, &tm);
      char buf[256];
      size_t n = std::strftime(buf, sizeof(buf), a[0].asString().c_str(), &tm);
      return Value(std::string(buf, n));
    });
  }

  void step(int line) { budget_.charge(1, line); }
  Flow execNode(const Node& n, std::string* out) {
    step(n.line);
    switch (n.kind) {
      case Node::Kind::kText:
        *out += n.text;
        checkSize(out->size(), n.line);
        return Flow::kNormal;
      case Node::Kind::kOutput:
        *out += strOf(eval(*n.expr), budget_, n.line);
        checkSize(out->size(), n.line);
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches)
          if (truthy(eval(*cond))) return exec(body, out);
        return exec(n.else_body, out);
      case Node::Kind::kFor: return execFor(n, out);
      case Node::Kind::kSet: {
        Value v = eval(*n.expr);
        if (n.targets.size() > 1) {
          if (!v.isList() || v.asList().size() != n.targets.size())
            fail(n.line, "cannot unpack into " + std::to_string(n.targets.size()) + " names");
          for (size_t i = 0; i < n.targets.size(); ++i) assign(n.targets[i], v.asList()[i], n.line);
        } else {
          assign(n.targets[0], v, n.line);
        }
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        std::string text;
        exec(n.body, &text);
        assign(n.targets[0], Value(text), n.line);
        return Flow::kNormal;
      }
      case Node::Kind::kMacro:
        frames_.back().vars[n.text] = Value::callable(std::make_shared<Macro>(&n, this));
        return Flow::kNormal;
      case Node::Kind::kBreak: return Flow::kBreak;
      case Node::Kind::kContinue: return Flow::kContinue;
      case Node::Kind::kBlock: return exec(n.body, out);
    }
    return Flow::kNormal;
  }

  void assign(const std::string& target, Value v, int line) {
    size_t dot = target.find('.');
    if (dot == std::string::npos) {
      frames_.back().vars[target] = std::move(v);
      return;
    }
    Value ns = lookup(target.substr(0, dot), line);
    if (!ns.isNamespace())
      fail(line, "cannot set an attribute of '" + target.substr(0, dot) + "' (not a namespace)");
    budget_.setKey(ns, target.substr(dot + 1), std::move(v), line);
  }

  // An iteration builds `loop`, ten entries and a function: 1.6 us here, against 50 ns for an
  // evaluation step.
  static constexpr int64_t kLoopVariableUnits = 30;

  Flow execFor(const Node& n, std::string* out) {
    Value iterable = eval(*n.expr);
    Value::List items;
    if (iterable.isList()) {
      budget_.charge(static_cast<int64_t>(iterable.asList().size()), n.line);
      items = iterable.asList();
    } else if (iterable.isDict()) {
      budget_.charge(static_cast<int64_t>(iterable.asDict().size()), n.line);
      for (const auto& [k, v] : iterable.asDict()) items.push_back(keyValue(k));
    } else if (iterable.isString()) {
      const std::string& s = iterable.asString();
      budget_.charge(static_cast<int64_t>(s.size()), n.line);  // a Value per code point
      auto offsets = codePointOffsets(s);
      checkSize(offsets.size() * sizeof(Value), n.line);
      for (size_t i = 0; i < offsets.size(); ++i)
        items.push_back(Value(s.substr(
            offsets[i], (i + 1 < offsets.size() ? offsets[i + 1] : s.size()) - offsets[i])));
    } else if (!iterable.isUndefined() && !iterable.isNone()) {
      fail(n.line, std::string("cannot iterate over a value of type ") + kindName(iterable));
    } else if (iterable.isNone()) {
      fail(n.line, "cannot iterate over None");
    }
    frames_.emplace_back();
    auto bind = [&](const Value& item) {
      if (n.targets.size() == 1) {
        frames_.back().vars[n.targets[0]] = item;
        return;
      }
      if (!item.isList() || item.asList().size() != n.targets.size())
        fail(n.line,
             "cannot unpack a loop item into " + std::to_string(n.targets.size()) + " names");
      for (size_t i = 0; i < n.targets.size(); ++i)
        frames_.back().vars[n.targets[i]] = item.asList()[i];
    };
    if (n.filter) {
      Value::List kept;
      for (const Value& item : items) {
        bind(item);
        if (truthy(eval(*n.filter))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      budget_.charge(kLoopVariableUnits, n.line);
      bind(items[static_cast<size_t>(i)]);
      Value loop = Value::dict();
      loop.setKey("index", Value(i + 1));
      loop.setKey("index0", Value(i));
      loop.setKey("revindex", Value(length - i));
      loop.setKey("revindex0", Value(length - i - 1));
      loop.setKey("first", Value(i == 0));
      loop.setKey("last", Value(i == length - 1));
      loop.setKey("length", Value(length));
      loop.setKey("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value());
      loop.setKey("nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)] : Value());
      loop.setKey("cycle", native([i](std::vector<Value>& a, Kwargs&, int line) {
                    if (a.empty()) fail(line, "loop.cycle needs arguments");
                    return a[static_cast<size_t>(i) % a.size()];
                  }));
      frames_.back().vars["loop"] = loop;
      Flow f = exec(n.body, out);
      if (f == Flow::kBreak) break;
    }
    frames_.pop_back();
    if (length == 0) return exec(n.else_body, out);
    return Flow::kNormal;
  }

  Value eval(const Expr& e) {
    step(e.line);
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.literal;
      case Expr::Kind::kName: return lookup(e.name, e.line);
      case Expr::Kind::kList: {
        Value::List items;
        for (const auto& a : e.args) items.push_back(eval(*a));
        return e.name == "tuple" ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      case Expr::Kind::kDict: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i]);
          budget_.setKey(d, dictKey(k, e.line), eval(*e.args[i + 1]), e.line);
        }
        return d;
      }
      case Expr::Kind::kAttr: return attribute(eval(*e.args[0]), e.name, e.line);
      case Expr::Kind::kItem: return item(eval(*e.args[0]), eval(*e.args[1]), e.line);
      case Expr::Kind::kSlice: return slice(e);
      case Expr::Kind::kCall: return call(e);
      case Expr::Kind::kFilter: return filter(e);
      case Expr::Kind::kTest: {
        bool r = test(e);
        return Value(e.negated ? !r : r);
      }
      case Expr::Kind::kUnary: {
        Value v = eval(*e.args[0]);
        if (v.kind() == Value::Kind::kInt) return e.name == "-" ? Value(-v.asInt()) : v;
        if (v.kind() == Value::Kind::kFloat) return e.name == "-" ? Value(-v.asDouble()) : v;
        fail(e.line, std::string("bad operand for unary ") + e.name + ": " + kindName(v));
      }
      case Expr::Kind::kNot: return Value(!truthy(eval(*e.args[0])));
      case Expr::Kind::kAnd: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? eval(*e.args[1]) : a;
      }
      case Expr::Kind::kOr: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? a : eval(*e.args[1]);
      }
      case Expr::Kind::kCond:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value();
      case Expr::Kind::kCompare: {
        Value left = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1]);
          const std::string& op = e.ops[i];
          bool r;
          if (op == "==")
            r = equal(left, right, budget_, e.line);
          else if (op == "!=")
            r = !equal(left, right, budget_, e.line);
          else if (op == "in")
            r = contains(right, left, budget_, e.line);
          else if (op == "not in")
            r = !contains(right, left, budget_, e.line);
          else {
            int c = compareOrder(left, right, budget_, e.line);
            r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
          }
          if (!r) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::kBinary: return binaryOp(e.name, eval(*e.args[0]), eval(*e.args[1]), e.line);
    }
    fail(e.line, "bad expression");
  }

  Value binaryOp(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "~") {
      std::string s = strOf(a, budget_, line);
      s += strOf(b, budget_, line);
      checkSize(s.size(), line);
      return Value(std::move(s));
    }
    auto isNum = [](const Value& v) { return v.isNumber() || v.kind() == Value::Kind::kBool; };
    auto asI = [](const Value& v) {
      return v.kind() == Value::Kind::kBool ? (v.asBool() ? 1 : 0) : v.asInt();
    };
    if (op == "+") {
      if (a.isString() && b.isString()) {
        checkSize(a.asString().size() + b.asString().size(), line);
        budget_.chargeBytes(a.asString().size() + b.asString().size(), line);
        if (!a.isMarkup() && !b.isMarkup()) return Value(a.asString() + b.asString());
        // Markup + str escapes the str (markupsafe), whichever side it is on.
        std::string joined = a.isMarkup() ? a.asString() : htmlEscape(a.asString());
        joined += b.isMarkup() ? b.asString() : htmlEscape(b.asString());
        checkSize(joined.size(), line);
        Value markup(std::move(joined));
        markup.markMarkup();
        return markup;
      }
      if (a.isList() && b.isList()) {
        checkSize((a.asList().size() + b.asList().size()) * sizeof(Value), line);
        budget_.charge(static_cast<int64_t>(a.asList().size() + b.asList().size()), line);
        Value::List items = a.asList();
        items.insert(items.end(), b.asList().begin(), b.asList().end());
        return Value::list(std::move(items));
      }
    }
    if (op == "*") {
      if ((a.isString() || a.isList()) && b.kind() == Value::Kind::kInt) {
        int64_t n = std::max<int64_t>(0, b.asInt());
        const size_t unit = a.isString() ? a.asString().size() : a.asList().size() * sizeof(Value);
        if (n > 1000000 || (unit && static_cast<size_t>(n) > kMaxValueBytes / unit))
          fail(line, "repetition too large");
        if (a.isString())
          budget_.chargeBytes(static_cast<size_t>(n) * unit, line);
        else
          budget_.charge(n * static_cast<int64_t>(a.asList().size()), line);
        if (a.isString()) {
          std::string s;
          for (int64_t i = 0; i < n; ++i) s += a.asString();
          return Value(s);
        }
        Value::List items;
        for (int64_t i = 0; i < n; ++i)
          items.insert(items.end(), a.asList().begin(), a.asList().end());
        return Value::list(std::move(items));
      }
    }
    if (!isNum(a) || !isNum(b))
      fail(line, std::string("unsupported operand types for ") + op + ": " + kindName(a) + " and " +
                     kindName(b));
    bool ints = a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
    double x = a.kind() == Value::Kind::kBool ? asI(a) : a.asDouble();
    double y = b.kind() == Value::Kind::kBool ? asI(b) : b.asDouble();
    int64_t r = 0;
    auto overflow = [&]() { fail(line, "integer overflow in '" + op + "'"); };
    if (ints && op == "+")
      return __builtin_add_overflow(asI(a), asI(b), &r) ? (overflow(), Value()) : Value(r);
    if (ints && op == "-")
      return __builtin_sub_overflow(asI(a), asI(b), &r) ? (overflow(), Value()) : Value(r);
    if (ints && op == "*")
      return __builtin_mul_overflow(asI(a), asI(b), &r) ? (overflow(), Value()) : Value(r);
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "/") {
      if (y == 0) fail(line, "division by zero");
      return Value(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) fail(line, "division by zero");
      if (ints) {
        int64_t p = asI(a), q = asI(b);
        if (p == std::numeric_limits<int64_t>::min() && q == -1) overflow();
        int64_t d = p / q, m = p % q;
        if (m != 0 && ((m < 0) != (q < 0))) --d, m += q;
        return op == "//" ? Value(d) : Value(m);
      }
      double d = std::floor(x / y);
      return op == "//" ? Value(d) : Value(x - d * y);
    }
    if (op == "**") {
      if (ints && asI(b) >= 0) {
        const int64_t base = asI(a), exponent = asI(b);
        if (base == 0 || base == 1) return Value(exponent == 0 ? int64_t{1} : base);
        if (base == -1) return Value(exponent % 2 ? int64_t{-1} : int64_t{1});
        int64_t power = 1;  // |base| >= 2: overflows within 63 factors
        for (int64_t i = 0; i < exponent; ++i)
          if (__builtin_mul_overflow(power, base, &power)) overflow();
        return Value(power);
      }
      return Value(std::pow(x, y));
    }
    fail(line, "unknown operator " + op);
  }

  Value attribute(const Value& obj, const std::string& name, int line) {
    if (obj.isDict()) {
      if (const Value* v = budget_.find(obj, name, line)) return *v;
      return dictMethod(obj, name, line);
    }
    if (obj.isString()) {
      budget_.chargeBytes(obj.asString().size(), line);  // the method holds a copy
      return stringMethod(obj, name, line);
    }
    if (obj.isList()) {
      if (!name.empty() && std::isdigit(static_cast<unsigned char>(name[0])))
        return item(obj, Value(static_cast<int64_t>(std::stoll(name))), line);
      return listMethod(obj, name, line);
    }
    if (obj.isUndefined()) fail(line, "'" + name + "' of an undefined value");
    return Value();
  }

  Value item(const Value& obj, const Value& key, int line) {
    if (obj.isDict()) {
      if (key.isList() || key.isDict() || key.isUndefined()) return Value();
      const Value* v = budget_.find(obj, dictKey(key, line), line);
      return v ? *v : Value();
    }
    if (obj.isList() || obj.isString()) {
      if (key.kind() != Value::Kind::kInt) {
        if (key.isString()) return attribute(obj, key.asString(), line);
        fail(line, "indices must be integers");
      }
      if (obj.isList()) {
        int64_t n = static_cast<int64_t>(obj.asList().size());
        int64_t i = normalizeIndex(key.asInt(), n);
        if (i < 0 || i >= n) return Value();  // Jinja: undefined
        return obj.asList()[static_cast<size_t>(i)];
      }
      const std::string& s = obj.asString();
      budget_.chargeBytes(s.size(), line);
      auto offsets = codePointOffsets(s);
      int64_t n = static_cast<int64_t>(offsets.size());
      int64_t i = normalizeIndex(key.asInt(), n);
      if (i < 0 || i >= n) return Value();
      size_t b = offsets[static_cast<size_t>(i)],
             end = i + 1 < n ? offsets[static_cast<size_t>(i + 1)] : s.size();
      return Value(s.substr(b, end - b));
    }
    if (obj.isUndefined()) fail(line, "subscript of an undefined value");
    return Value();
  }

  Value slice(const Expr& e) {
    Value obj = eval(*e.args[0]);
    std::optional<int64_t> parts[3];
    for (int i = 0; i < 3; ++i) {
      if (!e.args[static_cast<size_t>(i + 1)]) continue;
      Value v = eval(*e.args[static_cast<size_t>(i + 1)]);
      if (v.isNone()) continue;
      if (v.kind() != Value::Kind::kInt) fail(e.line, "slice indices must be integers");
      parts[i] = v.asInt();
    }
    int64_t step = parts[2].value_or(1);
    if (obj.isList()) {
      Value::List out;
      for (int64_t i : sliceIndices(static_cast<int64_t>(obj.asList().size()), parts[0], parts[1],
                                    step, budget_, e.line))
        out.push_back(obj.asList()[static_cast<size_t>(i)]);
      return Value::list(std::move(out));
    }
    if (obj.isString()) {
      const std::string& s = obj.asString();
      budget_.chargeBytes(s.size(), e.line);
      auto offsets = codePointOffsets(s);
      std::string out;
      for (int64_t i : sliceIndices(static_cast<int64_t>(offsets.size()), parts[0], parts[1], step,
                                    budget_, e.line)) {
        size_t b = offsets[static_cast<size_t>(i)];
        size_t end = static_cast<size_t>(i) + 1 < offsets.size()
                         ? offsets[static_cast<size_t>(i) + 1]
                         : s.size();
        out += s.substr(b, end - b);
      }
      return Value(out);
    }
    fail(e.line, std::string("cannot slice a value of type ") + kindName(obj));
  }

  void evalArgs(const Expr& e, size_t first, std::vector<Value>* args, Kwargs* kwargs) {
    for (size_t i = first; i < e.args.size(); ++i) args->push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) kwargs->emplace_back(k, eval(*v));
  }

  Value call(const Expr& e) {
    Value fn = eval(*e.args[0]);
    if (fn.kind() != Value::Kind::kCallable) {
      if (e.args[0]->kind == Expr::Kind::kName)
        fail(e.line, "'" + e.args[0]->name + "' is not a function");
      fail(e.line, "calling a value of type " + std::string(kindName(fn)));
    }
    std::vector<Value> args;
    Kwargs kwargs;
    evalArgs(e, 1, &args, &kwargs);
    return fn.asCallable()->call(args, kwargs, e.line);
  }

  static const Value* kwarg(Kwargs& kw, const char* name) {
    for (auto& [k, v] : kw)
      if (k == name) return &v;
    return nullptr;
  }

  Value stringMethod(const Value& obj, const std::string& name, int line) {
    std::string s = obj.asString();
    auto optStr = [line](std::vector<Value>& a, size_t i) -> std::optional<std::string> {
      if (i >= a.size() || a[i].isNone()) return std::nullopt;
      if (!a[i].isString()) fail(line, "expected a string argument");
      return a[i].asString();
    };
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return native([this, s, name, optStr](std::vector<Value>& a, Kwargs&, int l) {
        std::optional<std::string> chars = optStr(a, 0);
        budget_.chargeSearch(s.size(), chars ? chars->size() : 6, l);
        return Value(stripChars(s, chars, name != "rstrip", name != "lstrip"));
      });
    if (name == "upper" || name == "lower")
      return native([this, s, name](std::vector<Value>&, Kwargs&, int l) {
        budget_.chargeBytes(s.size(), l);
        std::string r = s;
        for (char& c : r)
          c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                                : std::tolower(static_cast<unsigned char>(c)));
        return Value(r);
      });
    if (name == "title" || name == "capitalize")
      return native([this, s, name](std::vector<Value>&, Kwargs&, int l) {
        budget_.chargeBytes(s.size(), l);
        return Value(titleCase(s, name == "capitalize"));
      });
    if (name == "startswith" || name == "endswith")
      return native([this, s, name](std::vector<Value>& a, Kwargs&, int l) {
        if (a.empty()) fail(l, name + " needs an argument");
        std::vector<std::string> options;
        if (a[0].isList()) {
          for (const Value& v : a[0].asList()) options.push_back(strOf(v, budget_, l));
        } else if (a[0].isString()) {
          options.push_back(a[0].asString());
        } else {
          fail(l, name + " takes a string or a tuple of strings");
        }
        for (const std::string& o : options) {
          budget_.chargeBytes(o.size(), l);
          if (name == "startswith"
                  ? s.rfind(o, 0) == 0
                  : s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0)
            return Value(true);
        }
        return Value(false);
      });
    if (name == "split" || name == "rsplit")
      return native([this, s, name, optStr](std::vector<Value>& a, Kwargs&, int l) {
        std::optional<std::string> sep = optStr(a, 0);
        budget_.chargeSearch(s.size(), sep ? sep->size() : 1, l);
        int64_t maxsplit = a.size() > 1 && a[1].kind() == Value::Kind::kInt ? a[1].asInt() : -1;
        Value::List parts;
        if (sep && sep->empty()) fail(l, "empty separator");
        if (name == "rsplit" && maxsplit >= 0) fail(l, "rsplit with maxsplit is not supported");
        if (!sep) {
          size_t i = 0;
          int64_t splits = 0;
          while (i < s.size()) {
            while (i < s.size() && isSpace(s[i])) ++i;
            if (i >= s.size()) break;
            if (maxsplit >= 0 && splits == maxsplit) {
              parts.push_back(Value(stripChars(s.substr(i), std::nullopt, false, true)));
              break;
            }
            size_t j = i;
            while (j < s.size() && !isSpace(s[j])) ++j;
            budget_.charge(1, l);
            checkSize((parts.size() + 1) * sizeof(Value), l);
            parts.push_back(Value(s.substr(i, j - i)));
            ++splits;
            i = j;
          }
          return Value::list(std::move(parts));
        }
        size_t pos = 0;
        int64_t splits = 0;
        for (;;) {
          size_t hit = s.find(*sep, pos);
          if (hit == std::string::npos || (maxsplit >= 0 && splits == maxsplit)) break;
          budget_.charge(1, l);
          checkSize((parts.size() + 1) * sizeof(Value), l);
          parts.push_back(Value(s.substr(pos, hit - pos)));
          pos = hit + sep->size();
          ++splits;
        }
        parts.push_back(Value(s.substr(pos)));
        return Value::list(std::move(parts));
      });
    if (name == "replace")
      return native([this, s](std::vector<Value>& a, Kwargs&, int l) {
        if (a.size() < 2 || !a[0].isString() || !a[1].isString())
          fail(l, "replace takes two strings");
        int64_t count = a.size() > 2 && a[2].kind() == Value::Kind::kInt ? a[2].asInt() : -1;
        return Value(replaceAll(s, a[0].asString(), a[1].asString(), count, budget_, l));
      });
    if (name == "find" || name == "count" || name == "index")
      return native([this, s, name](std::vector<Value>& a, Kwargs&, int l) {
        if (a.empty() || !a[0].isString()) fail(l, name + " takes a string");
        const std::string& sub = a[0].asString();
        budget_.chargeSearch(s.size(), sub.size(), l);
        if (name == "count") {
          if (sub.empty()) return Value(static_cast<int64_t>(codePointOffsets(s).size() + 1));
          int64_t n = 0;
          for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
          return Value(n);
        }
        size_t p = s.find(sub);
        if (p == std::string::npos) {
          if (name == "index") fail(l, "substring not found");
          return Value(static_cast<int64_t>(-1));
        }
        int64_t cp = 0;
        for (size_t i = 0; i < p; ++i)
          if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) ++cp;
        return Value(cp);
      });
    if (name == "join")
      return native([this, s](std::vector<Value>& a, Kwargs&, int l) {
        if (a.empty() || !a[0].isList()) fail(l, "join takes a list");
        std::string out;
        for (size_t i = 0; i < a[0].asList().size(); ++i) {
          budget_.chargeBytes(s.size(), l);
          out += (i ? s : "") + strOf(a[0].asList()[i], budget_, l);
          checkSize(out.size(), l);
        }
        return Value(out);
      });
    if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum" ||
        name == "islower" || name == "isupper")
      return native([this, s, name](std::vector<Value>&, Kwargs&, int l) {
        budget_.chargeBytes(s.size(), l);
        if (s.empty()) return Value(false);
        bool any_cased = false;
        for (unsigned char c : s) {
          if (name == "isdigit" && !std::isdigit(c)) return Value(false);
          if (name == "isspace" && !isSpace(static_cast<char>(c))) return Value(false);
          if (name == "isalpha" && !std::isalpha(c)) return Value(false);
          if (name == "isalnum" && !std::isalnum(c)) return Value(false);
          if (name == "islower" && std::isupper(c)) return Value(false);
          if (name == "isupper" && std::islower(c)) return Value(false);
          if (std::isalpha(c)) any_cased = true;
        }
        if (name == "islower" || name == "isupper") return Value(any_cased);
        return Value(true);
      });
    if (name == "format")
      return native([this, s](std::vector<Value>& a, Kwargs& kw, int l) {
        // Python's str.format: {} / {0} / {name} and {{ }}; no format specs.
        budget_.chargeBytes(s.size(), l);
        std::string out;
        size_t next = 0;
        for (size_t i = 0; i < s.size(); ++i) {
          if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '{') {
            out += '{';
            ++i;
          } else if (s[i] == '}' && i + 1 < s.size() && s[i + 1] == '}') {
            out += '}';
            ++i;
          } else if (s[i] == '{') {
            size_t close = s.find('}', i);
            if (close == std::string::npos) fail(l, "format: unclosed '{'");
            std::string field = s.substr(i + 1, close - i - 1);
            if (field.find_first_of(":!.[") != std::string::npos)
              fail(l, "format: field '" + field +
                          "' (conversions, specs, attributes) is not supported");
            const Value* v = nullptr;
            if (field.empty()) {
              if (next >= a.size()) fail(l, "format: not enough arguments");
              v = &a[next++];
            } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
              size_t index = static_cast<size_t>(std::stoul(field));
              if (index >= a.size()) fail(l, "format: no argument " + field);
              v = &a[index];
            } else {
              v = kwarg(kw, field.c_str());
              if (!v) fail(l, "format: no argument '" + field + "'");
            }
            out += strOf(*v, budget_, l);
            checkSize(out.size(), l);
            i = close;
          } else if (s[i] == '}') {
            fail(l, "format: single '}'");
          } else {
            out += s[i];
          }
        }
        return Value(out);
      });
    return Value();  // no such attribute: undefined, as jinja2 gives
  }

  Value dictMethod(const Value& obj, const std::string& name, int line) {
    if (name == "items" || name == "keys" || name == "values")
      return native([this, obj, name](std::vector<Value>&, Kwargs&, int l) {
        budget_.charge(static_cast<int64_t>(obj.asDict().size()), l);
        Value::List out;
        for (const auto& [k, v] : obj.asDict()) {
          if (name == "items")
            out.push_back(Value::tuple({keyValue(k), v}));
          else if (name == "keys")
            out.push_back(keyValue(k));
          else
            out.push_back(v);
        }
        Value view = Value::list(std::move(out));
        view.markIterator(name == "items"  ? "dict_items"
                          : name == "keys" ? "dict_keys"
                                           : "dict_values");
        return view;
      });
    if (name == "get")
      return native([this, obj](std::vector<Value>& a, Kwargs&, int l) {
        if (a.empty()) fail(l, "get needs a key");
        const Value* v = a[0].isList() || a[0].isDict() || a[0].isUndefined()
                             ? nullptr
                             : budget_.find(obj, dictKey(a[0], l), l);
        if (v) return *v;
        return a.size() > 1 ? a[1] : Value::none();
      });
    return Value();  // a missing key: undefined
  }

  Value listMethod(const Value& obj, const std::string& name, int line) {
    if (name == "index")
      return native([this, obj](std::vector<Value>& a, Kwargs&, int l) {
        if (a.empty()) fail(l, "index needs a value");
        for (size_t i = 0; i < obj.asList().size(); ++i)
          if (equal(obj.asList()[i], a[0], budget_, l)) return Value(static_cast<int64_t>(i));
        fail(l, "value not in list");
      });
    if (name == "count")
      return native([this, obj](std::vector<Value>& a, Kwargs&, int l) {
        if (a.empty()) fail(l, "count needs a value");
        int64_t n = 0;
        for (const Value& v : obj.asList()) n += equal(v, a[0], budget_, l);
        return Value(n);
      });
    if (name == "append" || name == "extend" || name == "pop" || name == "insert")
      fail(line, "lists cannot be modified in a chat template (transformers' sandbox refuses '" +
                     name + "')");
    return Value();
  }

  Value::List asSequence(const Value& v, int line, const char* what) {
    if (v.isList()) {
      budget_.charge(static_cast<int64_t>(v.asList().size()), line);
      return v.asList();
    }
    if (v.isDict()) {
      budget_.charge(static_cast<int64_t>(v.asDict().size()), line);
      Value::List keys;
      for (const auto& [k, e] : v.asDict()) keys.push_back(keyValue(k));
      return keys;
    }
    if (v.isString()) {
      Value::List chars;
      const std::string& s = v.asString();
      budget_.charge(static_cast<int64_t>(s.size()), line);  // a Value per code point
      auto offsets = codePointOffsets(s);
      checkSize(offsets.size() * sizeof(Value), line);
      for (size_t i = 0; i < offsets.size(); ++i)
        chars.push_back(Value(s.substr(
            offsets[i], (i + 1 < offsets.size() ? offsets[i + 1] : s.size()) - offsets[i])));
      return chars;
    }
    if (v.isUndefined()) return {};
    fail(line, std::string(what) + ": cannot iterate over a value of type " + kindName(v));
  }

  bool runTest(const std::string& name, const Value& v, std::vector<Value>& args, int line) {
    if (name == "defined") return !v.isUndefined();
    if (name == "undefined") return v.isUndefined();
    if (name == "none") return v.isNone();
    if (name == "string") return v.isString();
    if (name == "number") return v.isNumber();
    if (name == "integer") return v.kind() == Value::Kind::kInt;
    if (name == "float") return v.kind() == Value::Kind::kFloat;
    if (name == "boolean") return v.kind() == Value::Kind::kBool;
    if (name == "true") return v.kind() == Value::Kind::kBool && v.asBool();
    if (name == "false") return v.kind() == Value::Kind::kBool && !v.asBool();
    if (name == "mapping") return v.isDict();
    if (name == "sequence") return v.isList() || v.isString() || v.isDict();
    if (name == "iterable") return v.isList() || v.isString() || v.isDict();
    if (name == "callable") return v.kind() == Value::Kind::kCallable;
    if (name == "lower" || name == "upper") {
      if (!v.isString()) return false;
      budget_.chargeBytes(v.asString().size(), line);
      for (unsigned char c : v.asString())
        if (name == "lower" ? std::isupper(c) : std::islower(c)) return false;
      return true;
    }
    if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") {
      if (args.empty()) fail(line, "the test '" + name + "' needs a value");
      return equal(v, args[0], budget_, line);
    }
    if (name == "ne" || name == "!=") return args.empty() || !equal(v, args[0], budget_, line);
    if (name == "in") {
      if (args.empty()) fail(line, "the test 'in' needs a container");
      return contains(args[0], v, budget_, line);
    }
    if (name == "odd" || name == "even") {
      if (v.kind() != Value::Kind::kInt) fail(line, "odd/even need an integer");
      return (v.asInt() % 2 != 0) == (name == "odd");
    }
    if (name == "divisibleby") {
      if (v.kind() != Value::Kind::kInt || args.empty() || args[0].kind() != Value::Kind::kInt ||
          args[0].asInt() == 0)
        fail(line, "divisibleby needs integers");
      return v.asInt() % args[0].asInt() == 0;
    }
    if (name == "gt" || name == ">" || name == "lt" || name == "<" || name == "ge" ||
        name == ">=" || name == "le" || name == "<=") {
      if (args.empty()) fail(line, "the test '" + name + "' needs a value");
      int c = compareOrder(v, args[0], budget_, line);
      if (name == "gt" || name == ">") return c > 0;
      if (name == "lt" || name == "<") return c < 0;
      if (name == "ge" || name == ">=") return c >= 0;
      return c <= 0;
    }
    fail(line, "the test '" + name + "' is not supported");
  }

  bool test(const Expr& e) {
    Value v = eval(*e.args[0]);
    std::vector<Value> args;
    Kwargs kwargs;
    evalArgs(e, 1, &args, &kwargs);
    return runTest(e.name, v, args, e.line);
  }

  // selectattr/rejectattr/select/reject
  Value selectFilter(const std::string& name, const Value& seq, std::vector<Value>& args,
                     int line) {
    bool by_attr = name == "selectattr" || name == "rejectattr";
    bool keep_if = name == "select" || name == "selectattr";
    size_t next = 0;
    std::string attr;
    if (by_attr) {
      if (args.empty() || !args[0].isString()) fail(line, name + " needs an attribute name");
      attr = args[0].asString();
      next = 1;
    }
    std::string test_name =
        next < args.size() && args[next].isString() ? args[next].asString() : "";
    std::vector<Value> test_args(
        args.begin() + static_cast<std::ptrdiff_t>(std::min(args.size(), next + 1)), args.end());
    Value::List out;
    if (!truthy(seq)) return Value::list();  // jinja2 selects from nothing when the value is falsy
    for (const Value& item : asSequence(seq, line, name.c_str())) {
      Value v = by_attr ? attribute(item, attr, line) : item;
      bool r = test_name.empty() ? truthy(v) : runTest(test_name, v, test_args, line);
      if (r == keep_if) out.push_back(item);
    }
    return iterator(std::move(out), "generator");
  }

  Value filter(const Expr& e) {
    Value v = eval(*e.args[0]);
    std::vector<Value> args;
    Kwargs kwargs;
    evalArgs(e, 1, &args, &kwargs);
    const std::string& name = e.name;
    const int line = e.line;
    if (name == "trim") {
      std::optional<std::string> chars;
      if (!args.empty() && args[0].isString()) chars = args[0].asString();
      std::string text = strOf(v, budget_, line);
      budget_.chargeSearch(text.size(), chars ? chars->size() : 6, line);
      return Value(stripChars(text, chars, true, true));
    }
    if (name == "upper" || name == "lower") {
      std::string s = strOf(v, budget_, line);
      for (char& c : s)
        c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                              : std::tolower(static_cast<unsigned char>(c)));
      return Value(s);
    }
    if (name == "capitalize" || name == "title")
      return Value(titleCase(strOf(v, budget_, line), name == "capitalize"));
    if (name == "length" || name == "count") {
      if (v.isString()) {
        budget_.chargeBytes(v.asString().size(), line);
        return Value(static_cast<int64_t>(codePointOffsets(v.asString()).size()));
      }
      if (v.isList()) return Value(static_cast<int64_t>(v.asList().size()));
      if (v.isDict()) return Value(static_cast<int64_t>(v.asDict().size()));
      if (v.isUndefined()) return Value(static_cast<int64_t>(0));
      fail(line, std::string("length of a value of type ") + kindName(v));
    }
    if (name == "default" || name == "d") {
      bool boolean = (args.size() > 1 && truthy(args[1])) ||
                     (kwarg(kwargs, "boolean") && truthy(*kwarg(kwargs, "boolean")));
      if (v.isUndefined() || (boolean && !truthy(v))) return args.empty() ? Value("") : args[0];
      return v;
    }
    if (name == "first" || name == "last") {
      Value::List items = asSequence(v, line, name.c_str());
      if (items.empty()) return Value();
      return name == "first" ? items.front() : items.back();
    }
    if (name == "join") {
      std::string sep = args.empty() ? "" : strOf(args[0], budget_, line);
      const Value* attr = kwarg(kwargs, "attribute");
      const std::string attr_name = attr ? strOf(*attr, budget_, line) : "";
      std::string out;
      Value::List items = asSequence(v, line, "join");
      for (size_t i = 0; i < items.size(); ++i) {
        budget_.chargeBytes(sep.size(), line);
        out += (i ? sep : "") +
               strOf(attr ? attribute(items[i], attr_name, line) : items[i], budget_, line);
        checkSize(out.size(), line);
      }
      return Value(out);
    }
    if (name == "replace") {
      if (args.size() < 2) fail(line, "replace needs two arguments");
      int64_t count = args.size() > 2 && args[2].kind() == Value::Kind::kInt ? args[2].asInt() : -1;
      return Value(replaceAll(strOf(v, budget_, line), strOf(args[0], budget_, line),
                              strOf(args[1], budget_, line), count, budget_, line));
    }
    if (name == "tojson") {
      JsonStyle style;
      const Value* indent = kwarg(kwargs, "indent");
      if (!indent && !args.empty()) indent = &args[0];
      if (indent && indent->kind() == Value::Kind::kInt) {
        style.indent = std::max<int64_t>(0, indent->asInt());  // Python: ' ' * -1 is ''

        style.item_sep = ",";
      }
      if (const Value* sep = kwarg(kwargs, "separators");
          sep && sep->isList() && sep->asList().size() == 2) {
        style.item_sep = strOf(sep->asList()[0], budget_, line);
        style.key_sep = strOf(sep->asList()[1], budget_, line);
      }
      if (const Value* sort = kwarg(kwargs, "sort_keys")) style.sort_keys = truthy(*sort);
      if (const Value* ascii = kwarg(kwargs, "ensure_ascii")) style.ensure_ascii = truthy(*ascii);
      std::string out;
      toJson(v, style, 0, &out, budget_, line);
      return Value(out);
    }
    if (name == "string") return Value(strOf(v, budget_, line));
    if (name == "int") {
      if (v.kind() == Value::Kind::kInt) return v;
      if (v.kind() == Value::Kind::kFloat) return Value(static_cast<int64_t>(v.asDouble()));
      if (v.kind() == Value::Kind::kBool) return Value(static_cast<int64_t>(v.asBool()));
      if (v.isString()) {
        budget_.chargeBytes(v.asString().size(), line);
        try {
          size_t used = 0;
          std::string s = stripChars(v.asString(), std::nullopt, true, true);
          int64_t r = std::stoll(s, &used);
          if (used == s.size()) return Value(r);
        } catch (const std::exception&) {
        }
      }
      return args.empty() ? Value(static_cast<int64_t>(0)) : args[0];
    }
    if (name == "float") {
      if (v.isNumber()) return Value(v.asDouble());
      if (v.isString()) {
        budget_.chargeBytes(v.asString().size(), line);
        try {
          return Value(std::stod(v.asString()));
        } catch (const std::exception&) {
        }
      }
      return Value(0.0);
    }
    if (name == "abs") {
      if (v.kind() == Value::Kind::kInt) return Value(std::abs(v.asInt()));
      if (v.kind() == Value::Kind::kFloat) return Value(std::fabs(v.asDouble()));
      fail(line, "abs of a non-number");
    }
    if (name == "round") {
      if (!v.isNumber()) fail(line, "round of a non-number");
      int64_t precision =
          !args.empty() && args[0].kind() == Value::Kind::kInt ? args[0].asInt() : 0;
      double scale = std::pow(10.0, static_cast<double>(precision));
      return Value(std::nearbyint(v.asDouble() * scale) / scale);
    }
    if (name == "list") return Value::list(asSequence(v, line, "list"));
    if (name == "reverse") {
      if (v.isString()) {
        Value::List chars = asSequence(v, line, "reverse");
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->asString();
        return Value(out);
      }
      Value::List items = asSequence(v, line, "reverse");
      std::reverse(items.begin(), items.end());
      return iterator(std::move(items), "list_reverseiterator");
    }
    if (name == "items") {
      if (!v.isDict()) fail(line, "items of a non-mapping");
      budget_.charge(static_cast<int64_t>(v.asDict().size()), line);
      Value::List out;
      for (const auto& [k, e2] : v.asDict()) out.push_back(Value::tuple({keyValue(k), e2}));
      return iterator(std::move(out), "generator");
    }
    if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject")
      return selectFilter(name, v, args, line);
    if (name == "map") {
      Value::List out;
      if (!truthy(v)) return Value::list();
      const Value* attr = kwarg(kwargs, "attribute");
      for (const Value& item : asSequence(v, line, "map")) {
        if (attr) {
          Value got = attribute(item, strOf(*attr, budget_, line), line);
          if (got.isUndefined() && kwarg(kwargs, "default")) got = *kwarg(kwargs, "default");
          out.push_back(got);
        } else {
          if (args.empty() || !args[0].isString())
            fail(line, "map needs a filter name or attribute=");
          out.push_back(applySimpleFilter(args[0].asString(), item, line));
        }
      }
      return iterator(std::move(out), "generator");
    }
    if (name == "unique") {
      Value::List out;
      for (const Value& item : asSequence(v, line, "unique")) {
        bool seen = false;
        for (const Value& o : out) seen = seen || equal(o, item, budget_, line);
        if (!seen) out.push_back(item);
      }
      return iterator(std::move(out), "generator");
    }
    if (name == "indent") {
      int64_t width = !args.empty() && args[0].kind() == Value::Kind::kInt ? args[0].asInt() : 4;
      if (const Value* w = kwarg(kwargs, "width"); w && w->kind() == Value::Kind::kInt)
        width = w->asInt();
      bool first = args.size() > 1 ? truthy(args[1]) : false;
      if (const Value* f = kwarg(kwargs, "first")) first = truthy(*f);
      bool blank = args.size() > 2 ? truthy(args[2]) : false;
      if (const Value* b = kwarg(kwargs, "blank")) blank = truthy(*b);
      checkSize(static_cast<size_t>(std::clamp(width, int64_t{0}, kMaxWidth)), line);
      std::string pad(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
      std::string s = strOf(v, budget_, line), out;
      size_t start = 0;
      bool is_first = true;
      for (;;) {
        size_t nl = s.find('\n', start);
        std::string line_text =
            s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
        bool add = is_first ? first : (blank || !line_text.empty());
        budget_.chargeBytes(line_text.size() + (add ? pad.size() : 0), line);
        out += (add ? pad : "") + line_text;
        checkSize(out.size(), line);
        if (nl == std::string::npos) break;
        out += '\n';
        start = nl + 1;
        is_first = false;
      }
      return Value(out);
    }
    if (name == "safe" || name == "e" || name == "escape" || name == "forceescape") {
      if (name == "safe") {
        Value markup(strOf(v, budget_, line));
        markup.markMarkup();
        return markup;
      }
      fail(line, "the filter '" + name + "' is not supported (transformers does not autoescape)");
    }
    if (name == "sort") {
      Value::List items = asSequence(v, line, "sort");
      const Value* attr = kwarg(kwargs, "attribute");
      bool reverse = (kwarg(kwargs, "reverse") && truthy(*kwarg(kwargs, "reverse"))) ||
                     (!args.empty() && truthy(args[0]));
      const std::string attr_name = attr ? strOf(*attr, budget_, line) : "";
      std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
        Value x = attr ? attribute(a, attr_name, line) : a,
              y = attr ? attribute(b, attr_name, line) : b;
        return reverse ? compareOrder(y, x, budget_, line) < 0
                       : compareOrder(x, y, budget_, line) < 0;
      });
      return Value::list(std::move(items));
    }
    if (name == "dictsort") {
      if (!v.isDict()) fail(line, "dictsort of a non-mapping");
      budget_.charge(static_cast<int64_t>(v.asDict().size()), line);
      Value::List out;
      for (const auto& [k, e2] : v.asDict()) out.push_back(Value::tuple({keyValue(k), e2}));
      std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
        return compareOrder(a.asList()[0], b.asList()[0], budget_, line) < 0;
      });
      return Value::list(std::move(out));
    }
    if (name == "wordcount") {
      int64_t n = 0;
      bool in_word = false;
      for (char c : strOf(v, budget_, line)) {
        bool word = !isSpace(c);
        if (word && !in_word) ++n;
        in_word = word;
      }
      return Value(n);
    }
    if (name == "max" || name == "min") {
      Value::List items = asSequence(v, line, name.c_str());
      if (items.empty()) return Value();
      Value best = items[0];
      for (const Value& item : items)
        if (name == "max" ? compareOrder(item, best, budget_, line) > 0
                          : compareOrder(item, best, budget_, line) < 0)
          best = item;
      return best;
    }
    if (name == "sum") {
      Value total = Value(static_cast<int64_t>(0));
      for (const Value& item : asSequence(v, line, "sum")) total = binaryOp("+", total, item, line);
      return total;
    }
    if (name == "batch" || name == "slice" || name == "groupby" || name == "format" ||
        name == "pprint" || name == "urlencode" || name == "xmlattr" || name == "truncate" ||
        name == "wordwrap" || name == "center" || name == "filesizeformat" || name == "striptags" ||
        name == "random" || name == "attr" || name == "urlize")
      fail(line, "the filter '" + name + "' is not supported");
    fail(line, "unknown filter '" + name + "'");
  }

  static Value iterator(Value::List items, const char* type) {
    Value v = Value::list(std::move(items));
    v.markIterator(type);
    return v;
  }

  Value applySimpleFilter(const std::string& name, const Value& v, int line) {
    Expr lit;
    lit.kind = Expr::Kind::kLiteral;
    lit.literal = v;
    Expr f;
    f.kind = Expr::Kind::kFilter;
    f.name = name;
    f.line = line;
    f.args.push_back(std::make_unique<Expr>(std::move(lit)));
    return filter(f);
  }

  std::vector<Frame> frames_;
  std::map<std::string, Value> globals_;
  std::vector<Value> namespaces_;
  int64_t now_;
  int depth_ = 0;
  Budget budget_;
};

Value Macro::call(std::vector<Value>& args, Kwargs& kwargs, int line) {
  return renderer->callMacro(node, args, kwargs, line);
}

}  // namespace

// ---- Public API -------------------------------------------------------------------------

Template::Template() = default;
Template::~Template() = default;

Status Template::parse(std::string_view source, std::unique_ptr<Template>* out) {
  try {
    Lexer lexer(source);
    Parser parser(lexer.run());
    std::unique_ptr<Template> t(new Template());
    parser.parseTemplate(t->bodyPtr());
    *out = std::move(t);
    return okStatus();
  } catch (const Error& e) {
    return invalidArgument(std::string("chat template: ") + e.what());
  } catch (const std::exception& e) {
    return invalidArgument(std::string("chat template: ") + e.what());
  }
}

Status Template::render(const Value& context, std::string* out, int64_t now) const {
  try {
    Renderer renderer(context, now);
    std::string text;
    renderer.exec(body_, &text);
    *out = std::move(text);
    return okStatus();
  } catch (const Error& e) {
    return invalidArgument(std::string("chat template: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kResourceExhausted, "chat template: out of memory");
  } catch (const std::exception& e) {
    return invalidArgument(std::string("chat template: ") + e.what());
  }
}

}  // namespace llmc::serve::jinja
