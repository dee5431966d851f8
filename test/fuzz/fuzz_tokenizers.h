// Small tokenizer.json files written here, one per family of components (byte-level BPE with
// a split regex, SentencePiece-style BPE with byte fallback, WordPiece/BERT, WordLevel with the
// rule-based pre-tokenizers), for the fuzz targets that need a tokenizer to feed text through.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "llmc/tokenizer.h"

namespace llmc::fuzz {

// GPT-2's byte-to-character map, to spell a byte-level vocabulary.
inline std::string byteLevelChar(int byte) {
  auto printable = [](int b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  };
  int code_point = byte;
  if (!printable(byte)) {
    code_point = 256;
    for (int b = 0; b < byte; ++b)
      if (!printable(b)) ++code_point;
  }
  std::string out;
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
  return out;
}

inline std::string jsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

// Llama-3 / GPT-4 style: NFKC, the split regex, byte-level BPE, added tokens of every kind.
inline std::string byteLevelBpeJson() {
  std::string vocab;
  for (int b = 0; b < 256; ++b)
    vocab += jsonString(byteLevelChar(b)) + ":" + std::to_string(b) + ",";
  vocab += "\"th\":256,\"the\":257,\"Ġt\":258,\"Ġth\":259,\"Ġthe\":264,\"in\":260,\"ing\":261";
  return R"({"added_tokens":[{"id":262,"content":"<|eot|>","special":true,
    "single_word":false,"lstrip":false,"rstrip":false,"normalized":false},
    {"id":263,"content":"<mask>","special":true,"single_word":true,"lstrip":true,"rstrip":true,
    "normalized":true}],
    "normalizer":{"type":"NFKC"},
    "pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    "behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,
    "trim_offsets":true,"use_regex":false}]},
    "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<|eot|>",
    "type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"pair":[],"special_tokens":{"<|eot|>":
    {"id":"<|eot|>","ids":[262],"tokens":["<|eot|>"]}}},
    "decoder":{"type":"ByteLevel"},
    "model":{"type":"BPE","vocab":{)" +
         vocab + R"(},"merges":[["t","h"],["th","e"],["Ġ","t"],
    ["Ġt","h"],["Ġth","e"],["i","n"],["in","g"]]}})";
}

// Llama-2 / Mistral style: "▁" for spaces, BPE with <0xNN> byte fallback, unknown pieces fused.
inline std::string sentencePieceBpeJson() {
  std::string vocab = R"("<unk>":0,"<s>":1,"</s>":2,)";
  char byte_token[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(byte_token, sizeof(byte_token), "<0x%02X>", b);
    vocab += jsonString(byte_token) + ":" + std::to_string(3 + b) + ",";
  }
  vocab += R"("▁":259,"t":260,"h":261,"e":262,"▁t":263,"▁th":264,"▁the":265,"a":266,"é":267,)"
           R"("▁a":268,"中":269)";
  return R"({"added_tokens":[{"id":0,"content":"<unk>","special":true},
    {"id":1,"content":"<s>","special":true},{"id":2,"content":"</s>","special":true}],
    "normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},
    {"type":"Replace","pattern":{"String":" "},"content":"▁"}]},
    "pre_tokenizer":null,
    "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>",
    "type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"pair":[],"special_tokens":{"<s>":
    {"id":"<s>","ids":[1],"tokens":["<s>"]}}},
    "decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},
    "content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ",
    "start":1,"stop":0}]},
    "model":{"type":"BPE","unk_token":"<unk>","fuse_unk":true,"byte_fallback":true,"vocab":{)" +
         vocab + R"(},"merges":["▁ t","▁t h","▁th e","▁ a"]}})";
}

// BERT: its normalizer and pre-tokenizer, WordPiece, [CLS]/[SEP], decoders in a sequence.
inline std::string wordPieceJson() {
  return R"({"added_tokens":[{"id":0,"content":"[UNK]","special":true},
    {"id":1,"content":"[CLS]","special":true},{"id":2,"content":"[SEP]","special":true}],
    "normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,
    "strip_accents":null,"lowercase":true},
    "pre_tokenizer":{"type":"BertPreTokenizer"},
    "post_processor":{"type":"BertProcessing","sep":["[SEP]",2],"cls":["[CLS]",1]},
    "decoder":{"type":"Sequence","decoders":[{"type":"WordPiece","prefix":"##","cleanup":true},
    {"type":"Strip","content":" ","start":1,"stop":1},{"type":"Replace","pattern":{"String":"a"},
    "content":"b"}]},
    "model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##",
    "max_input_chars_per_word":20,"vocab":{"[UNK]":0,"[CLS]":1,"[SEP]":2,"a":3,"b":4,"##a":5,
    "##b":6,"ab":7,"中":8,".":9,"##.":10}}})";
}

// The rule-based pieces: accent stripping and lowercasing, whitespace, punctuation, digit and
// delimiter splits, Metaspace, a word-level vocabulary, RoBERTa's post-processor.
inline std::string wordLevelJson() {
  return R"({"added_tokens":[{"id":0,"content":"<unk>","special":true},
    {"id":1,"content":"<s>","special":true},{"id":2,"content":"</s>","special":true},
    {"id":3,"content":"STOP","special":false,"single_word":true,"normalized":false}],
    "normalizer":{"type":"Sequence","normalizers":[{"type":"NFD"},{"type":"StripAccents"},
    {"type":"Lowercase"},{"type":"Strip","strip_left":true,"strip_right":true},{"type":"NFC"}]},
    "pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},
    {"type":"Punctuation","behavior":"Isolated"},{"type":"Digits","individual_digits":true},
    {"type":"CharDelimiterSplit","delimiter":"|"},{"type":"Metaspace","replacement":"▁",
    "prepend_scheme":"first","split":true}]},
    "post_processor":{"type":"RobertaProcessing","sep":["</s>",2],"cls":["<s>",1],
    "trim_offsets":true,"add_prefix_space":false},
    "decoder":{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true},
    "model":{"type":"WordLevel","unk_token":"<unk>","vocab":{"<unk>":0,"<s>":1,"</s>":2,
    "STOP":3,"▁hello":4,"▁world":5,"hello":6,"world":7,"1":8,"2":9,",":10,"!":11,"▁":12,
    "cafe":13,"▁cafe":14}}})";
}

// The built-in tokenizers are ours: failing to load one is a bug in this file, not in the
// parser, so it stops the fuzzer at once.
inline std::unique_ptr<Tokenizer> mustLoadTokenizer(std::string_view json, const char* which) {
  std::unique_ptr<Tokenizer> tokenizer;
  Status status = Tokenizer::fromJson(json, &tokenizer);
  if (!status.ok()) fail(std::string("built-in tokenizer ") + which + ": " + status.toString());
  return tokenizer;
}

// Every built-in tokenizer, loaded once.
inline const std::vector<std::unique_ptr<Tokenizer>>& builtinTokenizers() {
  static const std::vector<std::unique_ptr<Tokenizer>> tokenizers = [] {
    std::vector<std::unique_ptr<Tokenizer>> all;
    all.push_back(mustLoadTokenizer(byteLevelBpeJson(), "byte-level BPE"));
    all.push_back(mustLoadTokenizer(sentencePieceBpeJson(), "SentencePiece BPE"));
    all.push_back(mustLoadTokenizer(wordPieceJson(), "WordPiece"));
    all.push_back(mustLoadTokenizer(wordLevelJson(), "WordLevel"));
    return all;
  }();
  return tokenizers;
}

}  // namespace llmc::fuzz
