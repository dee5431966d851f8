// Unicode lookups, normalization forms and UTF-8 coding for the tokenizer.
#include "llm/unicode.h"

#include <algorithm>

#include "llm/unicode_tables.h"

namespace llmc::unicode {
namespace {

using GC = GeneralCategory;

constexpr char32_t kHangulSBase = 0xAC00, kHangulLBase = 0x1100, kHangulVBase = 0x1161,
                   kHangulTBase = 0x11A7;
constexpr uint32_t kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28,
                   kHangulNCount = kHangulVCount * kHangulTCount,
                   kHangulSCount = kHangulLCount * kHangulNCount;

uint32_t maskOf(std::initializer_list<GC> categories) {
  uint32_t mask = 0;
  for (GC c : categories) mask |= categoryBit(c);
  return mask;
}

const uint32_t kLetterMask = maskOf({GC::kLu, GC::kLl, GC::kLt, GC::kLm, GC::kLo});
const uint32_t kMarkMask = maskOf({GC::kMn, GC::kMc, GC::kMe});
const uint32_t kNumberMask = maskOf({GC::kNd, GC::kNl, GC::kNo});
const uint32_t kPunctuationMask =
    maskOf({GC::kPc, GC::kPd, GC::kPs, GC::kPe, GC::kPi, GC::kPf, GC::kPo});
const uint32_t kSymbolMask = maskOf({GC::kSm, GC::kSc, GC::kSk, GC::kSo});
const uint32_t kSeparatorMask = maskOf({GC::kZs, GC::kZl, GC::kZp});
const uint32_t kOtherMask = maskOf({GC::kCc, GC::kCf, GC::kCs, GC::kCo, GC::kCn});

// Looks `cp` up in a table of `count` decompositions; null when absent.
const tables::Decomposition* findDecomposition(const tables::Decomposition* table, size_t count,
                                               char32_t cp) {
  const tables::Decomposition* end = table + count;
  const tables::Decomposition* it = std::lower_bound(
      table, end, cp, [](const tables::Decomposition& d, char32_t v) { return d.code_point < v; });
  return it != end && it->code_point == cp ? it : nullptr;
}

void decompose(char32_t cp, bool compat, std::u32string* out) {
  if (cp >= kHangulSBase && cp < kHangulSBase + kHangulSCount) {
    uint32_t index = cp - kHangulSBase;
    out->push_back(kHangulLBase + index / kHangulNCount);
    out->push_back(kHangulVBase + (index % kHangulNCount) / kHangulTCount);
    if (index % kHangulTCount != 0) out->push_back(kHangulTBase + index % kHangulTCount);
    return;
  }
  if (compat) {
    if (const auto* d = findDecomposition(tables::kCompatDecompositions,
                                          tables::kCompatDecompositionCount, cp)) {
      for (uint32_t k = 0; k < d->length; ++k)
        out->push_back(tables::kCompatDecompositionData[d->offset + k]);
      return;
    }
  }
  if (const auto* d = findDecomposition(tables::kCanonicalDecompositions,
                                        tables::kCanonicalDecompositionCount, cp)) {
    for (uint32_t k = 0; k < d->length; ++k)
      out->push_back(tables::kCanonicalDecompositionData[d->offset + k]);
    return;
  }
  out->push_back(cp);
}

// Stable-sorts every run of non-starters by combining class (canonical ordering).
void canonicalOrder(std::u32string* text) {
  size_t i = 0;
  while (i < text->size()) {
    if (combiningClass((*text)[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text->size() && combiningClass((*text)[end]) != 0) ++end;
    std::stable_sort(text->begin() + i, text->begin() + end,
                     [](char32_t a, char32_t b) { return combiningClass(a) < combiningClass(b); });
    i = end;
  }
}

// The primary composite of (first, second), or 0.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kHangulLBase && first < kHangulLBase + kHangulLCount && second >= kHangulVBase &&
      second < kHangulVBase + kHangulVCount) {
    return kHangulSBase +
           ((first - kHangulLBase) * kHangulVCount + (second - kHangulVBase)) * kHangulTCount;
  }
  if (first >= kHangulSBase && first < kHangulSBase + kHangulSCount &&
      (first - kHangulSBase) % kHangulTCount == 0 && second > kHangulTBase &&
      second < kHangulTBase + kHangulTCount) {
    return first + (second - kHangulTBase);
  }
  uint64_t key = (static_cast<uint64_t>(first) << 21) | second;
  const tables::Composition* end = tables::kCompositions + tables::kCompositionCount;
  const tables::Composition* it =
      std::lower_bound(tables::kCompositions, end, key,
                       [](const tables::Composition& c, uint64_t k) { return c.key < k; });
  return it != end && it->key == key ? it->composite : 0;
}

std::u32string composeAll(const std::u32string& decomposed) {
  std::u32string out;
  out.reserve(decomposed.size());
  size_t starter = std::u32string::npos;
  for (char32_t cp : decomposed) {
    uint8_t ccc = combiningClass(cp);
    if (starter != std::u32string::npos) {
      bool adjacent = out.size() - 1 == starter;
      uint8_t last_ccc = combiningClass(out.back());
      bool blocked = !adjacent && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        if (char32_t composite = compose(out[starter], cp)) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (ccc == 0) starter = out.size();
    out.push_back(cp);
  }
  return out;
}

}  // namespace

const char* unicodeVersion() { return tables::kUnicodeVersion; }

GeneralCategory category(char32_t cp) {
  if (cp > 0x10FFFF) return GC::kCn;
  const uint32_t* end = tables::kCategoryRunStarts + tables::kCategoryRunCount;
  const uint32_t* it = std::upper_bound(tables::kCategoryRunStarts, end, static_cast<uint32_t>(cp));
  return static_cast<GC>(tables::kCategoryRunValues[it - tables::kCategoryRunStarts - 1]);
}

uint32_t categoryMask(std::string_view name) {
  static const char* const kNames[] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd",
                                       "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm",
                                       "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
  if (name == "L" || name == "Letter") return kLetterMask;
  if (name == "M" || name == "Mark") return kMarkMask;
  if (name == "N" || name == "Number") return kNumberMask;
  if (name == "P" || name == "Punctuation") return kPunctuationMask;
  if (name == "S" || name == "Symbol") return kSymbolMask;
  if (name == "Z" || name == "Separator") return kSeparatorMask;
  if (name == "C" || name == "Other") return kOtherMask;
  for (unsigned i = 0; i < sizeof(kNames) / sizeof(kNames[0]); ++i) {
    if (name == kNames[i]) return 1u << i;
  }
  return 0;
}

bool isLetter(char32_t cp) { return inCategories(cp, kLetterMask); }
bool isNumber(char32_t cp) { return inCategories(cp, kNumberMask); }
bool isMark(char32_t cp) { return inCategories(cp, kMarkMask); }
bool isPunctuation(char32_t cp) { return inCategories(cp, kPunctuationMask); }
bool isOther(char32_t cp) { return inCategories(cp, kOtherMask); }

bool isWhiteSpace(char32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool isAlphabetic(char32_t cp) {
  if (inCategories(cp, kLetterMask | kMarkMask) || category(cp) == GC::kNl) return true;
  // Other_Alphabetic symbols: circled and squared Latin letters.
  return (cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
         (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189);
}

bool isAlphanumeric(char32_t cp) { return isAlphabetic(cp) || isNumber(cp); }

bool isWordChar(char32_t cp) {
  GC c = category(cp);
  return isAlphabetic(cp) || c == GC::kNd || c == GC::kPc || cp == 0x200C || cp == 0x200D;
}

char32_t simpleLowercase(char32_t cp) {
  const tables::CodePointPair* end = tables::kLowercase + tables::kLowercaseCount;
  const tables::CodePointPair* it =
      std::lower_bound(tables::kLowercase, end, static_cast<uint32_t>(cp),
                       [](const tables::CodePointPair& p, uint32_t v) { return p.from < v; });
  return it != end && it->from == cp ? it->to : cp;
}

void appendLowercase(char32_t cp, std::u32string* out) {
  if (cp == 0x130) {  // İ: the only code point whose lowercase is two code points
    out->push_back(U'i');
    out->push_back(0x307);
    return;
  }
  out->push_back(simpleLowercase(cp));
}

uint8_t combiningClass(char32_t cp) {
  if (cp < 0x300) return 0;
  const tables::CombiningClassRange* end = tables::kCombiningClasses + tables::kCombiningClassCount;
  const tables::CombiningClassRange* it = std::upper_bound(
      tables::kCombiningClasses, end, static_cast<uint32_t>(cp),
      [](uint32_t v, const tables::CombiningClassRange& r) { return v < r.first; });
  if (it == tables::kCombiningClasses) return 0;
  --it;
  return cp <= it->last ? it->combining_class : 0;
}

std::u32string normalize(std::u32string_view text, NormalizationForm form) {
  bool compat = form == NormalizationForm::kNFKC || form == NormalizationForm::kNFKD;
  std::u32string decomposed;
  decomposed.reserve(text.size());
  for (char32_t cp : text) decompose(cp, compat, &decomposed);
  canonicalOrder(&decomposed);
  if (form == NormalizationForm::kNFD || form == NormalizationForm::kNFKD) return decomposed;
  return composeAll(decomposed);
}

size_t utf8SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 1;
}

namespace {

// Length of the well-formed sequence at text[i], or 0 when ill-formed; *valid_prefix gets the
// length of its longest well-formed prefix (the "maximal subpart", at least 1).
size_t wellFormedLength(std::string_view text, size_t i, size_t* valid_prefix, char32_t* cp) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char lead = byte(i);
  *valid_prefix = 1;
  if (lead < 0x80) {
    *cp = lead;
    return 1;
  }
  size_t length = utf8SequenceLength(lead);
  if (length == 1) return 0;
  unsigned char low = 0x80, high = 0xBF;
  if (lead == 0xE0) low = 0xA0;
  if (lead == 0xED) high = 0x9F;
  if (lead == 0xF0) low = 0x90;
  if (lead == 0xF4) high = 0x8F;
  char32_t value = lead & (length == 2 ? 0x1F : length == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < length; ++k) {
    if (i + k >= text.size()) return 0;
    unsigned char b = byte(i + k);
    unsigned char lo = k == 1 ? low : 0x80, hi = k == 1 ? high : 0xBF;
    if (b < lo || b > hi) return 0;
    value = (value << 6) | (b & 0x3F);
    *valid_prefix = k + 1;
  }
  *cp = value;
  return length;
}

}  // namespace

bool decodeUtf8(std::string_view text, std::u32string* out) {
  out->clear();
  out->reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    size_t prefix = 0;
    char32_t cp = 0;
    size_t length = wellFormedLength(text, i, &prefix, &cp);
    if (length == 0) return false;
    out->push_back(cp);
    i += length;
  }
  return true;
}

bool isValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    size_t prefix = 0;
    char32_t cp = 0;
    size_t length = wellFormedLength(text, i, &prefix, &cp);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

void appendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string toUtf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text) appendUtf8(cp, &out);
  return out;
}

std::string lossyUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t prefix = 0;
    char32_t cp = 0;
    size_t length = wellFormedLength(bytes, i, &prefix, &cp);
    if (length == 0) {
      out += "\xEF\xBF\xBD";
      i += prefix;
    } else {
      out.append(bytes.substr(i, length));
      i += length;
    }
  }
  return out;
}

}  // namespace llmc::unicode
