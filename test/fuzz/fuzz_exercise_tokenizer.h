// What the tokenizer targets do with a tokenizer: encode a text, then decode and stream-decode
// its ids plus others, touching every result so that ASan sees any over-read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "llmc/tokenizer.h"

namespace llmc::fuzz {

// Bytes outside printable ASCII as \xNN, for failure messages.
inline std::string escapeBytes(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      const char digits[] = "0123456789abcdef";
      out += {'\\', 'x', digits[c >> 4], digits[c & 15]};
    }
  }
  return out;
}

// The concatenation of a stream decoder's pieces must equal decode() of the same ids (the
// contract in tokenizer.h); a difference stops the fuzzer.
inline void exerciseTokenizer(const Tokenizer& tokenizer, std::string_view text,
                              const std::vector<int32_t>& extra_ids) {
  volatile size_t sink = 0;
  std::vector<int32_t> ids;
  for (bool add_special_tokens : {false, true}) {
    ids.clear();
    if (!tokenizer.encode(text, add_special_tokens, &ids).ok()) ids.clear();
    for (int32_t id : ids) {
      if (id < 0 || id >= tokenizer.vocabSize())
        fail("encode returned an id outside the vocabulary");
    }
  }
  ids.insert(ids.end(), extra_ids.begin(), extra_ids.end());
  for (bool skip : {false, true}) {
    std::string decoded;
    const bool decoded_ok = tokenizer.decode(ids, skip, &decoded).ok();
    sink = sink + decoded.size();
    auto stream = tokenizer.streamDecoder(skip);
    std::string streamed;
    bool stream_ok = true;
    for (int32_t id : ids) {
      if (!stream->step(id, &streamed).ok()) {
        stream_ok = false;
        break;
      }
    }
    if (stream_ok) stream_ok = stream->finish(&streamed).ok();
    if (decoded_ok && stream_ok && streamed != decoded) {
      std::string ids_text;
      for (int32_t id : ids) ids_text += std::to_string(id) + " ";
      fail("the stream decoder's text differs from decode() (skip_special_tokens " +
           std::to_string(skip) + "): ids " + ids_text + "\n  decode: '" + escapeBytes(decoded) +
           "'\n  stream: '" + escapeBytes(streamed) + "'");
    }
    sink = sink + streamed.size();
  }
  for (int32_t id : ids)
    sink = sink + tokenizer.idToToken(id).size() + tokenizer.isSpecialToken(id);
  (void)tokenizer.bosId();
  (void)tokenizer.eosId();
}

}  // namespace llmc::fuzz
