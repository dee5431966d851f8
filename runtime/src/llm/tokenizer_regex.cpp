// The split-pattern regex engine: a recursive-descent parser to a small tree, and a
// backtracking matcher that passes continuations (no allocation per step).
#include "llm/tokenizer_regex.h"

#include <string>
#include <type_traits>

#include "llm/unicode.h"

namespace llmc::tokenization {
namespace {

// One item of a character class: a range, a set of general categories or a named class.
struct ClassItem {
  enum class Kind { kRange, kCategories, kSpace, kWord, kDigit, kAny } kind = Kind::kRange;
  bool negated = false;
  char32_t low = 0, high = 0;
  uint32_t category_mask = 0;

  bool matches(char32_t cp, bool case_insensitive) const {
    bool hit = false;
    switch (kind) {
      case Kind::kRange:
        hit = cp >= low && cp <= high;
        if (!hit && case_insensitive) {
          char32_t lower = unicode::simpleLowercase(cp);
          char32_t upper = cp >= U'a' && cp <= U'z' ? cp - 32 : cp;
          if (cp == 0x17F) lower = U's';  // ſ folds to s
          hit = (lower >= low && lower <= high) || (upper >= low && upper <= high);
        }
        break;
      case Kind::kCategories: hit = unicode::inCategories(cp, category_mask); break;
      case Kind::kSpace: hit = unicode::isWhiteSpace(cp); break;
      case Kind::kWord: hit = unicode::isWordChar(cp); break;
      case Kind::kDigit: hit = unicode::category(cp) == unicode::GeneralCategory::kNd; break;
      case Kind::kAny: hit = cp != U'\n'; break;
    }
    return hit != negated;
  }
};

struct CharClass {
  std::vector<ClassItem> items;
  bool negated = false;
  bool case_insensitive = false;

  bool matches(char32_t cp) const {
    bool hit = false;
    for (const ClassItem& item : items) {
      if (item.matches(cp, case_insensitive)) {
        hit = true;
        break;
      }
    }
    return hit != negated;
  }
};

}  // namespace

struct RegexNode {
  enum class Kind { kChar, kGroup, kLookahead, kRepeat } kind = Kind::kChar;
  CharClass char_class;                                               // kChar
  std::vector<std::vector<std::unique_ptr<RegexNode>>> alternatives;  // kGroup, kLookahead
  bool negative = false;                                              // kLookahead
  std::unique_ptr<RegexNode> child;                                   // kRepeat
  size_t min_count = 0, max_count = 0;  // kRepeat; max SIZE_MAX = unbounded
  enum class Greed { kGreedy, kLazy, kPossessive } greed = Greed::kGreedy;
};

namespace {

using Sequence = std::vector<std::unique_ptr<RegexNode>>;
constexpr size_t kUnbounded = static_cast<size_t>(-1);

class Parser {
 public:
  explicit Parser(std::u32string pattern) : pattern_(std::move(pattern)) {}

  Status parse(std::unique_ptr<RegexNode>* root) {
    auto group = std::make_unique<RegexNode>();
    group->kind = RegexNode::Kind::kGroup;
    LLMC_RETURN_IF_ERROR(parseAlternatives(&group->alternatives));
    if (pos_ != pattern_.size()) return error("unbalanced ')'");
    *root = std::move(group);
    return okStatus();
  }

 private:
  Status error(const std::string& what) const {
    return invalidArgument("regex: " + what + " at offset " + std::to_string(pos_));
  }
  Status unsupported(const std::string& what) const {
    return unimplemented("regex: " + what + " (at offset " + std::to_string(pos_) +
                         ") is not supported by llmc's split-pattern engine");
  }
  bool atEnd() const { return pos_ >= pattern_.size(); }
  char32_t peek(size_t ahead = 0) const {
    return pos_ + ahead < pattern_.size() ? pattern_[pos_ + ahead] : 0;
  }

  Status parseAlternatives(std::vector<Sequence>* alternatives) {
    bool saved_case = case_insensitive_;
    while (true) {
      Sequence sequence;
      LLMC_RETURN_IF_ERROR(parseSequence(&sequence));
      alternatives->push_back(std::move(sequence));
      if (peek() != U'|') break;
      ++pos_;
    }
    case_insensitive_ = saved_case;
    return okStatus();
  }

  Status parseSequence(Sequence* sequence) {
    while (!atEnd() && peek() != U'|' && peek() != U')') {
      std::unique_ptr<RegexNode> atom;
      LLMC_RETURN_IF_ERROR(parseAtom(&atom));
      if (!atom) continue;  // a flag group like (?i)
      LLMC_RETURN_IF_ERROR(parseQuantifier(&atom));
      sequence->push_back(std::move(atom));
    }
    return okStatus();
  }

  Status parseAtom(std::unique_ptr<RegexNode>* out) {
    char32_t c = peek();
    auto node = std::make_unique<RegexNode>();
    if (c == U'(') {
      ++pos_;
      bool saved_case = case_insensitive_;
      node->kind = RegexNode::Kind::kGroup;
      if (peek() == U'?') {
        char32_t kind = peek(1);
        if (kind == U':') {
          pos_ += 2;
        } else if (kind == U'=' || kind == U'!') {
          node->kind = RegexNode::Kind::kLookahead;
          node->negative = kind == U'!';
          pos_ += 2;
        } else if (kind == U'i' && (peek(2) == U':' || peek(2) == U')')) {
          bool scoped = peek(2) == U':';
          pos_ += 3;
          case_insensitive_ = true;
          if (!scoped) return okStatus();  // (?i): the rest of the enclosing group
        } else {
          return unsupported("group kind '(?" + unicode::toUtf8(std::u32string(1, kind)) + "'");
        }
      }
      LLMC_RETURN_IF_ERROR(parseAlternatives(&node->alternatives));
      case_insensitive_ = saved_case;
      if (peek() != U')') return error("missing ')'");
      ++pos_;
      *out = std::move(node);
      return okStatus();
    }
    node->kind = RegexNode::Kind::kChar;
    node->char_class.case_insensitive = case_insensitive_;
    if (c == U'[') {
      LLMC_RETURN_IF_ERROR(parseClass(&node->char_class));
    } else if (c == U'.') {
      ++pos_;
      node->char_class.items.push_back(ClassItem{ClassItem::Kind::kAny});
    } else if (c == U'\\') {
      ++pos_;
      ClassItem item;
      LLMC_RETURN_IF_ERROR(parseEscape(&item));
      node->char_class.items.push_back(item);
    } else if (c == U'^' || c == U'$') {
      return unsupported("anchor");
    } else if (c == U'*' || c == U'+' || c == U'?') {
      return error("quantifier without an operand");
    } else {
      ++pos_;
      node->char_class.items.push_back(ClassItem{ClassItem::Kind::kRange, false, c, c});
    }
    *out = std::move(node);
    return okStatus();
  }

  Status parseNumber(size_t* value) {
    if (peek() < U'0' || peek() > U'9') return error("expected a number in {}");
    *value = 0;
    while (peek() >= U'0' && peek() <= U'9') {
      *value = *value * 10 + (peek() - U'0');
      if (*value > 100000) return unsupported("repetition count over 100000");
      ++pos_;
    }
    return okStatus();
  }

  Status parseQuantifier(std::unique_ptr<RegexNode>* atom) {
    size_t min_count = 0, max_count = 0;
    char32_t c = peek();
    if (c == U'*') {
      min_count = 0, max_count = kUnbounded;
      ++pos_;
    } else if (c == U'+') {
      min_count = 1, max_count = kUnbounded;
      ++pos_;
    } else if (c == U'?') {
      min_count = 0, max_count = 1;
      ++pos_;
    } else if (c == U'{') {
      ++pos_;
      LLMC_RETURN_IF_ERROR(parseNumber(&min_count));
      max_count = min_count;
      if (peek() == U',') {
        ++pos_;
        max_count = kUnbounded;
        if (peek() != U'}') LLMC_RETURN_IF_ERROR(parseNumber(&max_count));
      }
      if (peek() != U'}') return error("expected '}'");
      ++pos_;
      if (max_count < min_count) return error("{n,m} with m < n");
    } else {
      return okStatus();
    }
    auto repeat = std::make_unique<RegexNode>();
    repeat->kind = RegexNode::Kind::kRepeat;
    repeat->min_count = min_count;
    repeat->max_count = max_count;
    if (peek() == U'?') {
      repeat->greed = RegexNode::Greed::kLazy;
      ++pos_;
    } else if (peek() == U'+') {
      repeat->greed = RegexNode::Greed::kPossessive;
      ++pos_;
    }
    repeat->child = std::move(*atom);
    *atom = std::move(repeat);
    char32_t next = peek();
    if (next == U'*' || next == U'+' || next == U'?' || next == U'{') {
      return unsupported("stacked quantifiers");
    }
    return okStatus();
  }

  Status parseHex(size_t digits, char32_t* value) {
    *value = 0;
    for (size_t i = 0; i < digits; ++i) {
      char32_t c = peek();
      int digit = c >= U'0' && c <= U'9'   ? static_cast<int>(c - U'0')
                  : c >= U'a' && c <= U'f' ? static_cast<int>(c - U'a' + 10)
                  : c >= U'A' && c <= U'F' ? static_cast<int>(c - U'A' + 10)
                                           : -1;
      if (digit < 0) return error("bad hex escape");
      *value = *value * 16 + digit;
      if (*value > 0x10FFFF) return error("code point out of range");
      ++pos_;
    }
    return okStatus();
  }

  // After the backslash.
  Status parseEscape(ClassItem* item) {
    if (atEnd()) return error("trailing backslash");
    char32_t c = pattern_[pos_++];
    auto literal = [&](char32_t cp) {
      *item = ClassItem{ClassItem::Kind::kRange, false, cp, cp};
      return okStatus();
    };
    switch (c) {
      case U's': *item = ClassItem{ClassItem::Kind::kSpace}; return okStatus();
      case U'S': *item = ClassItem{ClassItem::Kind::kSpace, true}; return okStatus();
      case U'w': *item = ClassItem{ClassItem::Kind::kWord}; return okStatus();
      case U'W': *item = ClassItem{ClassItem::Kind::kWord, true}; return okStatus();
      case U'd': *item = ClassItem{ClassItem::Kind::kDigit}; return okStatus();
      case U'D': *item = ClassItem{ClassItem::Kind::kDigit, true}; return okStatus();
      case U'n': return literal(U'\n');
      case U'r': return literal(U'\r');
      case U't': return literal(U'\t');
      case U'f': return literal(U'\f');
      case U'v': return literal(U'\v');
      case U'a': return literal(7);
      case U'e': return literal(0x1B);
      case U'0': return literal(0);
      case U'x': {
        char32_t value = 0;
        if (peek() == U'{') {
          ++pos_;
          size_t start = pos_;
          while (!atEnd() && peek() != U'}') ++pos_;
          if (atEnd() || pos_ == start || pos_ - start > 6) return error("bad \\x{...}");
          size_t end = pos_;
          pos_ = start;
          LLMC_RETURN_IF_ERROR(parseHex(end - start, &value));
          ++pos_;  // '}'
        } else {
          LLMC_RETURN_IF_ERROR(parseHex(2, &value));
        }
        return literal(value);
      }
      case U'u': {
        char32_t value = 0;
        LLMC_RETURN_IF_ERROR(parseHex(4, &value));
        return literal(value);
      }
      case U'p':
      case U'P': {
        bool negated = c == U'P';
        std::u32string name;
        if (peek() == U'{') {
          ++pos_;
          if (peek() == U'^') {
            negated = !negated;
            ++pos_;
          }
          while (!atEnd() && peek() != U'}') name.push_back(pattern_[pos_++]);
          if (atEnd()) return error("missing '}' after \\p{");
          ++pos_;
        } else if (!atEnd()) {
          name.push_back(pattern_[pos_++]);
        }
        std::string utf8_name = unicode::toUtf8(name);
        uint32_t mask = unicode::categoryMask(utf8_name);
        if (mask == 0) return unsupported("Unicode property \\p{" + utf8_name + "}");
        *item = ClassItem{ClassItem::Kind::kCategories, negated, 0, 0, mask};
        return okStatus();
      }
      default:
        if ((c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z') || (c >= U'1' && c <= U'9')) {
          return unsupported("escape '\\" + unicode::toUtf8(std::u32string(1, c)) + "'");
        }
        return literal(c);
    }
  }

  Status parseClass(CharClass* out) {
    ++pos_;  // '['
    if (peek() == U'^') {
      out->negated = true;
      ++pos_;
    }
    bool first = true;
    while (true) {
      if (atEnd()) return error("missing ']'");
      char32_t c = peek();
      if (c == U']' && !first) {
        ++pos_;
        return okStatus();
      }
      first = false;
      if (c == U'[') return unsupported("nested character class");
      if (c == U'&' && peek(1) == U'&') return unsupported("class intersection");
      ClassItem item;
      if (c == U'\\') {
        ++pos_;
        LLMC_RETURN_IF_ERROR(parseEscape(&item));
      } else {
        ++pos_;
        item = ClassItem{ClassItem::Kind::kRange, false, c, c};
      }
      if (item.kind == ClassItem::Kind::kRange && !item.negated && item.low == item.high &&
          peek() == U'-' && peek(1) != U']' && peek(1) != 0) {
        ++pos_;
        ClassItem high;
        if (peek() == U'\\') {
          ++pos_;
          LLMC_RETURN_IF_ERROR(parseEscape(&high));
        } else {
          high = ClassItem{ClassItem::Kind::kRange, false, peek(), peek()};
          ++pos_;
        }
        if (high.kind != ClassItem::Kind::kRange || high.low < item.low) {
          return error("bad class range");
        }
        item.high = high.low;
      }
      out->items.push_back(item);
    }
  }

  std::u32string pattern_;
  size_t pos_ = 0;
  bool case_insensitive_ = false;
};

// A non-owning reference to a callable bool(size_t); continuations live on the stack.
class Continuation {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Continuation>>>
  Continuation(const F& f)  // NOLINT(google-explicit-constructor)
      : object_(&f),
        call_([](const void* o, size_t p) { return (*static_cast<const F*>(o))(p); }) {}
  bool operator()(size_t pos) const { return call_(object_, pos); }

 private:
  const void* object_;
  bool (*call_)(const void*, size_t);
};

class Matcher {
 public:
  explicit Matcher(std::u32string_view text) : text_(text) {}

  bool exhausted() const { return exhausted_; }

  bool matchSequence(const Sequence& sequence, size_t index, size_t pos, Continuation k) {
    if (index == sequence.size()) return k(pos);
    return matchNode(*sequence[index], pos,
                     [&](size_t next) { return matchSequence(sequence, index + 1, next, k); });
  }

  bool matchNode(const RegexNode& node, size_t pos, Continuation k) {
    if (++steps_ > kMaxSteps) exhausted_ = true;
    if (exhausted_) return false;
    switch (node.kind) {
      case RegexNode::Kind::kChar:
        return pos < text_.size() && node.char_class.matches(text_[pos]) && k(pos + 1);
      case RegexNode::Kind::kGroup:
        for (const Sequence& alternative : node.alternatives) {
          if (matchSequence(alternative, 0, pos, k)) return true;
        }
        return false;
      case RegexNode::Kind::kLookahead: {
        bool found = false;
        for (const Sequence& alternative : node.alternatives) {
          if (matchSequence(alternative, 0, pos, [](size_t) { return true; })) {
            found = true;
            break;
          }
        }
        return found != node.negative && k(pos);
      }
      case RegexNode::Kind::kRepeat:
        if (node.child->kind == RegexNode::Kind::kChar) return matchCharRepeat(node, pos, k);
        return matchRepeat(node, 0, pos, k);
    }
    return false;
  }

 private:
  static constexpr size_t kMaxSteps = size_t{1} << 26;
  static constexpr size_t kMaxDepth = 2000;

  // A quantified single character: count the run once, then try lengths without recursion.
  bool matchCharRepeat(const RegexNode& node, size_t pos, Continuation k) {
    const CharClass& char_class = node.child->char_class;
    size_t count = 0;
    while (count < node.max_count && pos + count < text_.size() &&
           char_class.matches(text_[pos + count])) {
      ++count;
    }
    if (count < node.min_count) return false;
    switch (node.greed) {
      case RegexNode::Greed::kPossessive: return k(pos + count);
      case RegexNode::Greed::kGreedy:
        for (size_t n = count + 1; n-- > node.min_count;) {
          if (k(pos + n)) return true;
        }
        return false;
      case RegexNode::Greed::kLazy:
        for (size_t n = node.min_count; n <= count; ++n) {
          if (k(pos + n)) return true;
        }
        return false;
    }
    return false;
  }

  bool matchRepeat(const RegexNode& node, size_t count, size_t pos, Continuation k) {
    if (count > kMaxDepth) {
      exhausted_ = true;
      return false;
    }
    auto more = [&]() {
      if (count >= node.max_count) return false;
      return matchNode(*node.child, pos, [&](size_t next) {
        if (next == pos && count >= node.min_count) return false;  // no empty iterations
        return matchRepeat(node, count + 1, next, k);
      });
    };
    if (count < node.min_count) return more();
    if (node.greed == RegexNode::Greed::kLazy) return k(pos) || more();
    return more() || k(pos);  // possessive groups are treated as greedy
  }

  std::u32string_view text_;
  size_t steps_ = 0;
  bool exhausted_ = false;
};

}  // namespace

Regex::~Regex() = default;

Status Regex::compile(std::string_view pattern, std::unique_ptr<Regex>* out) {
  std::u32string code_points;
  if (!unicode::decodeUtf8(pattern, &code_points)) {
    return invalidArgument("regex: the pattern is not valid UTF-8");
  }
  std::unique_ptr<Regex> regex(new Regex());
  Parser parser(std::move(code_points));
  LLMC_RETURN_IF_ERROR(parser.parse(&regex->root_));
  *out = std::move(regex);
  return okStatus();
}

Status Regex::findAll(std::u32string_view text,
                      std::vector<std::pair<size_t, size_t>>* matches) const {
  Matcher matcher(text);
  size_t pos = 0;
  while (pos < text.size()) {
    bool found = false;
    for (size_t start = pos; start < text.size(); ++start) {
      size_t end = start;
      bool matched = matcher.matchNode(*root_, start, [&](size_t e) {
        end = e;
        return true;
      });
      if (matcher.exhausted()) {
        return resourceExhausted("regex: matching took too many steps (text of " +
                                 std::to_string(text.size()) + " code points)");
      }
      if (matched && end > start) {
        matches->emplace_back(start, end);
        pos = end;
        found = true;
        break;
      }
    }
    if (!found) break;
  }
  return okStatus();
}

}  // namespace llmc::tokenization
