// Unicode for the tokenizer: UTF-8 coding, general categories, lowercase and the four
// normalization forms, with the semantics of Rust's char methods that Hugging Face
// `tokenizers` uses. Data from unicode_tables.cpp (generated).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace llmc::unicode {

// The order of make_unicode_tables.py's CATEGORIES.
enum class GeneralCategory : uint8_t {
  kCn,
  kLu,
  kLl,
  kLt,
  kLm,
  kLo,
  kMn,
  kMc,
  kMe,
  kNd,
  kNl,
  kNo,
  kPc,
  kPd,
  kPs,
  kPe,
  kPi,
  kPf,
  kPo,
  kSm,
  kSc,
  kSk,
  kSo,
  kZs,
  kZl,
  kZp,
  kCc,
  kCf,
  kCs,
  kCo,
};

const char* unicodeVersion();
GeneralCategory category(char32_t cp);
// Two-letter category name ("Lu") to a mask over GeneralCategory values; a one-letter name
// ("L") covers its group. Returns 0 for an unknown name.
uint32_t categoryMask(std::string_view name);
inline uint32_t categoryBit(GeneralCategory c) { return 1u << static_cast<unsigned>(c); }
inline bool inCategories(char32_t cp, uint32_t mask) {
  return (mask & categoryBit(category(cp))) != 0;
}

bool isLetter(char32_t cp);        // L*
bool isNumber(char32_t cp);        // N* (Rust char::is_numeric)
bool isMark(char32_t cp);          // M*
bool isPunctuation(char32_t cp);   // P*
bool isOther(char32_t cp);         // C* (Cc, Cf, Cs, Co, Cn)
bool isWhiteSpace(char32_t cp);    // the White_Space property (Rust char::is_whitespace)
bool isAlphabetic(char32_t cp);    // L*, Nl, M* and the Other_Alphabetic symbols, approximately
bool isAlphanumeric(char32_t cp);  // Rust char::is_alphanumeric
bool isWordChar(char32_t cp);      // regex \w: alphabetic, marks, Nd, Pc, joiners

// Rust char::to_lowercase of one code point, appended (U+0130 lowercases to two).
void appendLowercase(char32_t cp, std::u32string* out);
// Simple (one-to-one) lowercase, for case-insensitive regex matching.
char32_t simpleLowercase(char32_t cp);
uint8_t combiningClass(char32_t cp);

enum class NormalizationForm { kNFC, kNFD, kNFKC, kNFKD };
std::u32string normalize(std::u32string_view text, NormalizationForm form);

// UTF-8. decodeUtf8 returns false on ill-formed input (and leaves *out unspecified).
bool decodeUtf8(std::string_view text, std::u32string* out);
bool isValidUtf8(std::string_view text);
void appendUtf8(char32_t cp, std::string* out);
std::string toUtf8(std::u32string_view text);
// Byte length of the UTF-8 sequence whose lead byte is `lead` (1 for a stray byte).
size_t utf8SequenceLength(unsigned char lead);
// Like Rust's String::from_utf8_lossy: each maximal ill-formed subpart becomes U+FFFD.
std::string lossyUtf8(std::string_view bytes);

}  // namespace llmc::unicode
