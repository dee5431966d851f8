// Fuzz target for llmc::Tokenizer. An input that starts with '{' is a tokenizer.json: it must
// load or fail cleanly, and a loaded tokenizer must encode and decode sample texts. Any other
// input is text for built-in tokenizers (byte-level BPE with the Llama-3 split regex and
// WordPiece/BERT) and, read as ids, something to decode and stream-decode.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "llmc/tokenizer.h"

namespace {

// GPT-2's byte-to-character map, to spell a byte-level vocabulary.
std::string byteChar(int byte) {
  bool printable = (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || byte >= 174;
  int cp = byte;
  if (!printable) {
    int next = 256;
    for (int b = 0; b < byte; ++b) {
      if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) ++next;
    }
    cp = next;
  }
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

// The built-in tokenizers are ours: failing to load one is a bug in this file.
std::unique_ptr<llmc::Tokenizer> mustLoad(std::string_view json) {
  std::unique_ptr<llmc::Tokenizer> tokenizer;
  llmc::Status status = llmc::Tokenizer::fromJson(json, &tokenizer);
  if (!status.ok()) {
    std::fprintf(stderr, "fuzz_tokenizer: built-in tokenizer: %s\n", status.toString().c_str());
    __builtin_trap();
  }
  return tokenizer;
}

std::unique_ptr<llmc::Tokenizer> byteLevelTokenizer() {
  std::string vocab;
  for (int b = 0; b < 256; ++b) vocab += jsonString(byteChar(b)) + ":" + std::to_string(b) + ",";
  vocab += "\"th\":256,\"the\":257,\"Ġt\":258,\"Ġth\":259,\"Ġthe\":264,\"in\":260,\"ing\":261";
  std::string json = R"({"added_tokens":[{"id":262,"content":"<|eot|>","special":true,
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
  return mustLoad(json);
}

std::unique_ptr<llmc::Tokenizer> wordPieceTokenizer() {
  const char* json = R"({"added_tokens":[{"id":0,"content":"[UNK]","special":true},
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
  return mustLoad(json);
}

// Encodes, decodes and stream-decodes; touches every result.
void exercise(const llmc::Tokenizer& tokenizer, std::string_view text,
              const std::vector<int32_t>& extra_ids) {
  std::vector<int32_t> ids;
  if (tokenizer.encode(text, true, &ids).ok()) {
    ids.insert(ids.end(), extra_ids.begin(), extra_ids.end());
  } else {
    ids = extra_ids;
  }
  volatile size_t sink = 0;
  for (bool skip : {false, true}) {
    std::string decoded;
    if (tokenizer.decode(ids, skip, &decoded).ok()) sink = sink + decoded.size();
    auto stream = tokenizer.streamDecoder(skip);
    std::string streamed;
    for (int32_t id : ids) {
      if (!stream->step(id, &streamed).ok()) break;
    }
    if (stream->finish(&streamed).ok()) sink = sink + streamed.size();
  }
  for (int32_t id : ids) sink = sink + tokenizer.idToToken(id).size();
  (void)tokenizer.bosId();
  (void)tokenizer.eosId();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  if (!input.empty() && input[0] == '{') {
    std::unique_ptr<llmc::Tokenizer> tokenizer;
    if (!llmc::Tokenizer::fromJson(input, &tokenizer).ok()) return 0;
    std::vector<int32_t> ids;
    int32_t limit = std::min(tokenizer->vocabSize(), 300);
    for (int32_t id = 0; id < limit; ++id) ids.push_back(id);
    ids.push_back(-1);
    exercise(*tokenizer, "Hello world! héllo 中文 🤖 <s> [CLS]  \n\t x", ids);
    return 0;
  }
  static const std::unique_ptr<llmc::Tokenizer> byte_level = byteLevelTokenizer();
  static const std::unique_ptr<llmc::Tokenizer> word_piece = wordPieceTokenizer();
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 2 <= size && ids.size() < 64; i += 2) {
    ids.push_back(static_cast<int32_t>(data[i] | (data[i + 1] << 8)) % 300);
  }
  exercise(*byte_level, input, ids);
  exercise(*word_piece, input, ids);
  return 0;
}
