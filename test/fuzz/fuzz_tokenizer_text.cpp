// Fuzz target for the text paths of llmc::Tokenizer: any bytes, as text, must encode (or give
// an error, e.g. for invalid UTF-8) through each built-in tokenizer (fuzz_tokenizers.h: byte-level
// BPE, SentencePiece BPE, WordPiece, WordLevel), and the same bytes read as ids must decode and
// stream-decode to the same text, or give an error, never crash.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "fuzz_exercise_tokenizer.h"
#include "fuzz_tokenizers.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)llmc::fuzz::builtinTokenizers();  // load them before the first input is timed
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // Ids from byte pairs, in [-1, 299]: some past each built-in's vocabulary, one negative.
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 2 <= size && ids.size() < 64; i += 2)
    ids.push_back(static_cast<int32_t>(data[i] | (data[i + 1] << 8)) % 301 - 1);
  for (const auto& tokenizer : llmc::fuzz::builtinTokenizers())
    llmc::fuzz::exerciseTokenizer(*tokenizer, text, ids);
  return 0;
}
