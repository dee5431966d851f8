// Fuzz target for llmc::Tokenizer::fromJson: any bytes must load as a tokenizer.json or give an
// error, never crash; a tokenizer that loads must encode, decode and stream-decode sample texts
// and every id up to its vocabulary size. (Text through fixed tokenizers is the tokenizer_text
// target's.)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "fuzz_exercise_tokenizer.h"
#include "llmc/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view json(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<llmc::Tokenizer> tokenizer;
  if (!llmc::Tokenizer::fromJson(json, &tokenizer).ok()) return 0;
  std::vector<int32_t> ids;
  const int32_t limit = std::min(tokenizer->vocabSize(), 300);
  for (int32_t id = 0; id < limit; ++id) ids.push_back(id);
  ids.push_back(-1);
  ids.push_back(tokenizer->vocabSize());
  for (std::string_view text : {"Hello world! héllo 中文 🤖 <s> [CLS]  \n\t x", "", " ",
                                "1,234|a", "\xF0\x9F", "the thing\r\n"}) {
    llmc::fuzz::exerciseTokenizer(*tokenizer, text, ids);
  }
  return 0;
}
