// A Jinja2 subset for Hugging Face chat templates (tokenizer_config.json's `chat_template`),
// rendered as transformers renders them: trim_blocks and lstrip_blocks on, loop controls
// (break, continue), `raise_exception`, `strftime_now`, `namespace`, and a `tojson` that is
// json.dumps(ensure_ascii=False). What real templates use is here (statements if/for/set/
// macro/generation, filters, tests, string and dict methods, Python's operators and truth);
// anything else is an error naming it and its line, never a silent difference.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "llmc/status.h"

namespace llmc::serve::jinja {

struct Callable;

// A value: Python's None, bool, int, float, str, list and dict (insertion-ordered), plus
// Jinja's undefined and callables (macros, globals, bound methods).
class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };
  using List = std::vector<Value>;
  using Dict = std::vector<std::pair<std::string, Value>>;

  Value() = default;  // undefined
  static Value none();
  Value(bool b);
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double d);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(List items = {});
  static Value tuple(List items);  // a list that prints as Python's tuple
  static Value dict(Dict items = {});
  static Value callable(std::shared_ptr<Callable> c);

  Kind kind() const { return kind_; }
  bool isUndefined() const { return kind_ == Kind::kUndefined; }
  bool isNone() const { return kind_ == Kind::kNone; }
  bool isString() const { return kind_ == Kind::kString; }
  bool isNumber() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool isList() const { return kind_ == Kind::kList; }
  bool isDict() const { return kind_ == Kind::kDict; }
  bool isTuple() const { return tuple_; }
  bool isNamespace() const { return namespace_; }
  void markNamespace() { namespace_ = true; }  // a dict whose attributes `set` may assign
  // A string from `safe` (markupsafe's Markup): `+` with a plain string escapes that string.
  bool isMarkup() const { return markup_; }
  void markMarkup() { markup_ = true; }
  // A list that is a Python iterator or view in jinja2 (what map/select/unique/reverse and
  // dict.items() return): json.dumps refuses it, naming this type; null for a list.
  const char* iteratorType() const { return iterator_type_; }
  void markIterator(const char* type) { iterator_type_ = type; }
  bool asBool() const { return b_; }
  int64_t asInt() const { return i_; }
  double asDouble() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : d_; }
  const std::string& asString() const { return *s_; }
  List& asList() const { return *list_; }
  Dict& asDict() const { return *dict_; }
  const std::shared_ptr<Callable>& asCallable() const { return fn_; }

  // Dict lookup (nullptr when absent). Keys are strings; other keys (Python allows ints, None,
  // bools) are stored under an encoded string (dictKey) and decoded when iterated.
  const Value* find(std::string_view key) const;
  void setKey(const std::string& key, Value v);  // a dict's key, added or replaced

 private:
  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  bool namespace_ = false;
  bool markup_ = false;
  const char* iterator_type_ = nullptr;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<std::string> s_;
  std::shared_ptr<List> list_;  // shared like Python's: a namespace is mutated through it
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> fn_;
};

// The deepest nesting of arrays and objects in JSON text (what is inside strings skipped), to
// refuse deep values before anything recursive reads them.
int jsonNesting(std::string_view text);

// Parses JSON text into a Value (objects keep their key order); nesting over 128 is refused.
Status valueFromJson(std::string_view json, Value* out);

class Template {
 public:
  // Parses; a syntax error names its line.
  static Status parse(std::string_view source, std::unique_ptr<Template>* out);
  ~Template();
  // Renders with `context`'s keys as variables. `strftime_now` formats this time (seconds since
  // the epoch, UTC) so that tests can fix it; 0 means now.
  Status render(const Value& context, std::string* out, int64_t now = 0) const;

  struct Node;

 private:
  Template();
  std::vector<std::unique_ptr<Node>> body_;
  std::vector<std::unique_ptr<Node>>* bodyPtr() { return &body_; }
  friend class Parser;
};

}  // namespace llmc::serve::jinja
