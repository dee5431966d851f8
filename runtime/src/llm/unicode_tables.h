// The generated Unicode data of unicode_tables.cpp (see test/models/tokenizers/
// make_unicode_tables.py). Only unicode.cpp reads these; everything else uses unicode.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llmc::unicode::tables {

struct CodePointPair {
  uint32_t from;
  uint32_t to;
};
struct CombiningClassRange {
  uint32_t first;
  uint32_t last;
  uint8_t combining_class;
};
struct Decomposition {
  uint32_t code_point;
  uint32_t offset;  // into the matching k*DecompositionData
  uint32_t length;
};
struct Composition {
  uint64_t key;  // (first << 21) | second
  uint32_t composite;
};

extern const char kUnicodeVersion[];
extern const uint32_t kCategoryRunStarts[];
extern const uint8_t kCategoryRunValues[];
extern const size_t kCategoryRunCount;
extern const CodePointPair kLowercase[];
extern const size_t kLowercaseCount;
extern const CombiningClassRange kCombiningClasses[];
extern const size_t kCombiningClassCount;
extern const Decomposition kCanonicalDecompositions[];
extern const size_t kCanonicalDecompositionCount;
extern const uint32_t kCanonicalDecompositionData[];
extern const Decomposition kCompatDecompositions[];
extern const size_t kCompatDecompositionCount;
extern const uint32_t kCompatDecompositionData[];
extern const Composition kCompositions[];
extern const size_t kCompositionCount;

}  // namespace llmc::unicode::tables
