// llmc::Tokenizer: Hugging Face tokenizer.json files (the `tokenizers` library's format),
// encoding and decoding with the same ids and text as `tokenizers`, plus streaming decode.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "llmc/status.h"

namespace llmc {

namespace tokenization {
class TokenizerImpl;
}

// Loads the tokenizer.json files of GPT-2, RoBERTa, Llama 2/3, Mistral, Qwen and BERT style
// tokenizers (test/models/tokenizers/README.md lists the supported components); a component it
// does not know is a kUnimplemented error naming it. Truncation and padding settings in the file
// are ignored.
//
// Threads: a Tokenizer does not change after loading (encode's word cache is internal and
// locked): its const methods may be called from any number of threads at once, on one shared
// Tokenizer. A StreamDecoder holds one stream's state: one thread at a time, one per stream; it
// refers to its Tokenizer, which must outlive it.
class Tokenizer {
 public:
  // Parses a tokenizer.json. Unknown component types are kUnimplemented errors naming them.
  static Status fromJson(std::string_view json, std::unique_ptr<Tokenizer>* out);
  static Status fromFile(const std::string& path, std::unique_ptr<Tokenizer>* out);
  ~Tokenizer();

  // `text` must be valid UTF-8. With add_special_tokens, the post-processor's tokens (BOS,
  // [CLS]/[SEP] ...) are added around the ids.
  Status encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>* ids) const;
  // An id that is neither in the vocabulary nor an added token is an error naming it.
  Status decode(std::span<const int32_t> ids, bool skip_special_tokens, std::string* text) const;

  // -1 when absent.
  int32_t tokenToId(std::string_view token) const;
  // Empty when absent (or when memory runs out).
  std::string idToToken(int32_t id) const;
  bool isSpecialToken(int32_t id) const;
  // One past the largest id of the vocabulary and the added tokens (the embedding rows a model
  // needs), which is `tokenizers`' vocabulary size when ids are dense.
  int32_t vocabSize() const;
  // The ids in [0, limit) that decode() refuses: a model's logits rows beyond its tokenizer's
  // vocabulary (checkpoints pad theirs to a multiple of 64 or 128), and any gaps in the ids.
  // Ascending.
  Status unknownIds(int32_t limit, std::vector<int32_t>* ids) const;
  // Best effort, from the post-processor's template, then from well-known special tokens.
  std::optional<int32_t> bosId() const;
  std::optional<int32_t> eosId() const;

  // Incremental decoding for streaming generation. The concatenation of everything step()
  // and finish() return equals decode(all ids). Text that may still change (an incomplete
  // UTF-8 sequence, shown by decode as U+FFFD) is held back until a later id completes it.
  class StreamDecoder {
   public:
    // Appends the text that `id` completes (possibly nothing) to *text.
    Status step(int32_t id, std::string* text);
    // Appends whatever is still held back (e.g. U+FFFD for bytes that never completed).
    Status finish(std::string* text);

   private:
    friend class Tokenizer;
    StreamDecoder(const Tokenizer* tokenizer, bool skip_special_tokens)
        : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

    const Tokenizer* tokenizer_;
    bool skip_special_tokens_;
    std::vector<int32_t> all_ids_;  // every id so far (for the rare full re-decode)
    size_t emitted_bytes_ = 0;      // of decode(all_ids_)
    size_t window_begin_ = 0;       // all_ids_[window_begin_..] are decoded each step
    size_t context_end_ = 0;        // all_ids_[window_begin_..context_end_): already emitted
    std::string context_text_;      // decode of that context
  };
  // Null only when memory runs out.
  std::unique_ptr<StreamDecoder> streamDecoder(bool skip_special_tokens) const;

 private:
  Tokenizer();
  std::unique_ptr<tokenization::TokenizerImpl> impl_;
};

}  // namespace llmc
