// Tests llmc::Tokenizer against references made by Hugging Face `tokenizers`
// (test/models/tokenizers/make_fixtures.py): exact ids, decodes and streamed decodes on every
// text of the corpus, for every committed tokenizer.json; plus error cases.
#include "llmc/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "llm/tokenizer_regex.h"
#include "llm/unicode.h"
#include "status_test_util.h"

namespace llmc {
namespace {

using Json = nlohmann::json;

std::filesystem::path fixturesDir() {
  return std::filesystem::path(LLMC_TEST_SOURCE_DIR) / "models" / "tokenizers";
}

std::string readFile(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

std::vector<int32_t> idsOf(const Json& array) {
  std::vector<int32_t> ids;
  for (const Json& id : array) ids.push_back(id.get<int32_t>());
  return ids;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.append(std::to_string(ids[i]));
  }
  out.push_back(']');
  return out;
}

// Streams `ids` one at a time and returns the concatenated text; checks that no chunk ends
// inside a UTF-8 sequence.
std::string streamDecode(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip) {
  auto stream = tokenizer.streamDecoder(skip);
  std::string all;
  for (int32_t id : ids) {
    std::string chunk;
    Status status = stream->step(id, &chunk);
    EXPECT_TRUE(status.ok()) << status.toString();
    EXPECT_TRUE(unicode::isValidUtf8(chunk));
    all += chunk;
  }
  std::string rest;
  EXPECT_TRUE(stream->finish(&rest).ok());
  return all + rest;
}

class TokenizerFixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerFixtureTest, MatchesHuggingFaceOnEveryText) {
  std::filesystem::path dir = fixturesDir() / GetParam();
  std::unique_ptr<Tokenizer> tokenizer;
  Status status = Tokenizer::fromFile((dir / "tokenizer.json").string(), &tokenizer);
  ASSERT_TRUE(status.ok()) << status.toString();

  Json corpus = Json::parse(readFile(fixturesDir() / "corpus.json"));
  std::istringstream expected(readFile(dir / "expected.jsonl"));
  std::string line;
  ASSERT_TRUE(std::getline(expected, line));
  Json header = Json::parse(line);
  std::vector<int32_t> prefix = idsOf(header["special_prefix"]);
  std::vector<int32_t> suffix = idsOf(header["special_suffix"]);

  size_t index = 0, encode_ok = 0, special_ok = 0, decode_ok = 0, stream_ok = 0;
  int reported = 0;
  for (; std::getline(expected, line); ++index) {
    ASSERT_LT(index, corpus.size());
    const std::string& text = corpus[index].get_ref<const std::string&>();
    Json row = Json::parse(line);
    std::vector<int32_t> want = idsOf(row["ids"]);
    std::vector<int32_t> want_special = prefix;
    want_special.insert(want_special.end(), want.begin(), want.end());
    want_special.insert(want_special.end(), suffix.begin(), suffix.end());
    std::string want_decoded = row.contains("decoded") ? row["decoded"].get<std::string>() : text;
    std::string want_skip =
        row.contains("decoded_skip") ? row["decoded_skip"].get<std::string>() : want_decoded;

    std::vector<int32_t> got, got_special;
    ASSERT_TRUE(tokenizer->encode(text, false, &got).ok()) << "text " << index;
    ASSERT_TRUE(tokenizer->encode(text, true, &got_special).ok()) << "text " << index;
    std::string decoded, decoded_skip;
    ASSERT_TRUE(tokenizer->decode(want, false, &decoded).ok());
    ASSERT_TRUE(tokenizer->decode(want_special, true, &decoded_skip).ok());
    std::string streamed = streamDecode(*tokenizer, want, false);
    std::string streamed_skip = streamDecode(*tokenizer, want_special, true);

    bool encode_match = got == want, special_match = got_special == want_special;
    bool decode_match = decoded == want_decoded && decoded_skip == want_skip;
    bool stream_match = streamed == want_decoded && streamed_skip == want_skip;
    encode_ok += encode_match;
    special_ok += special_match;
    decode_ok += decode_match;
    stream_ok += stream_match;
    if ((!encode_match || !special_match || !decode_match || !stream_match) && reported++ < 5) {
      ADD_FAILURE() << GetParam() << " text " << index << ": " << Json(text).dump()
                    << "\n  want ids " << show(want) << "\n  got  ids " << show(got)
                    << "\n  with special: " << (special_match ? "ok" : show(got_special))
                    << "\n  decode: " << Json(decoded).dump() << " want "
                    << Json(want_decoded).dump() << "\n  decode skip: " << Json(decoded_skip).dump()
                    << " want " << Json(want_skip).dump() << "\n  stream: " << Json(streamed).dump()
                    << " / " << Json(streamed_skip).dump();
    }
  }
  EXPECT_EQ(index, corpus.size());
  std::cout << "[ agreement ] " << GetParam() << ": encode " << encode_ok << "/" << index
            << ", with special tokens " << special_ok << "/" << index << ", decode " << decode_ok
            << "/" << index << ", stream " << stream_ok << "/" << index << "\n";
  EXPECT_EQ(encode_ok, index);
  EXPECT_EQ(special_ok, index);
  EXPECT_EQ(decode_ok, index);
  EXPECT_EQ(stream_ok, index);
}

TEST_P(TokenizerFixtureTest, DecodesRandomIdsLikeHuggingFace) {
  std::filesystem::path dir = fixturesDir() / GetParam();
  std::unique_ptr<Tokenizer> tokenizer;
  ASSERT_TRUE(Tokenizer::fromFile((dir / "tokenizer.json").string(), &tokenizer).ok());
  std::istringstream rows(readFile(dir / "decode.jsonl"));
  std::string line;
  size_t count = 0;
  while (std::getline(rows, line)) {
    Json row = Json::parse(line);
    std::vector<int32_t> ids = idsOf(row["ids"]);
    std::string want = row["decoded"].get<std::string>();
    std::string want_skip =
        row.contains("decoded_skip") ? row["decoded_skip"].get<std::string>() : want;
    std::string got, got_skip;
    ASSERT_TRUE(tokenizer->decode(ids, false, &got).ok());
    ASSERT_TRUE(tokenizer->decode(ids, true, &got_skip).ok());
    EXPECT_EQ(got, want) << show(ids);
    EXPECT_EQ(got_skip, want_skip) << show(ids);
    EXPECT_EQ(streamDecode(*tokenizer, ids, false), want) << show(ids);
    EXPECT_EQ(streamDecode(*tokenizer, ids, true), want_skip) << show(ids);
    ++count;
  }
  EXPECT_GT(count, 0u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerFixtureTest,
                         ::testing::Values("gpt2_bpe", "roberta_bpe", "qwen_bpe", "llama3_bpe",
                                           "llama2_sp", "mistral_sp", "bert_wordpiece",
                                           "minilm_bert"),
                         [](const auto& info) { return std::string(info.param); });

std::unique_ptr<Tokenizer> load(const char* name) {
  std::unique_ptr<Tokenizer> tokenizer;
  Status status =
      Tokenizer::fromFile((fixturesDir() / name / "tokenizer.json").string(), &tokenizer);
  EXPECT_TRUE(status.ok()) << status.toString();
  return tokenizer;
}

TEST(TokenizerTest, RoundTripsByteLevelText) {
  auto tokenizer = load("llama3_bpe");
  ASSERT_TRUE(tokenizer);
  const std::string text = "Round trip: ünïcödé, 中文, emoji 🤖, code `x += 1;`\n\ttabs.";
  std::vector<int32_t> ids;
  ASSERT_TRUE(tokenizer->encode(text, false, &ids).ok());
  std::string decoded;
  ASSERT_TRUE(tokenizer->decode(ids, false, &decoded).ok());
  EXPECT_EQ(decoded, text);
}

TEST(TokenizerTest, SpecialTokenIds) {
  auto llama3 = load("llama3_bpe");
  ASSERT_TRUE(llama3);
  int32_t bos = llama3->tokenToId("<|begin_of_text|>");
  EXPECT_GE(bos, 0);
  EXPECT_EQ(llama3->bosId(), bos);
  EXPECT_EQ(llama3->eosId(), llama3->tokenToId("<|end_of_text|>"));
  EXPECT_TRUE(llama3->isSpecialToken(bos));
  EXPECT_EQ(llama3->idToToken(bos), "<|begin_of_text|>");
  EXPECT_EQ(llama3->tokenToId("no such token, surely"), -1);
  EXPECT_EQ(llama3->idToToken(1 << 29), "");
  EXPECT_EQ(llama3->vocabSize(), 5000);

  auto bert = load("minilm_bert");
  ASSERT_TRUE(bert);
  EXPECT_EQ(bert->bosId(), bert->tokenToId("[CLS]"));
  EXPECT_EQ(bert->eosId(), bert->tokenToId("[SEP]"));
  EXPECT_EQ(bert->vocabSize(), 30522);
  std::vector<int32_t> ids;
  ASSERT_TRUE(bert->encode("Hello, World!", true, &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{101, 7592, 1010, 2088, 999, 102}));
}

TEST(TokenizerTest, StreamDecoderHoldsIncompleteUtf8) {
  auto tokenizer = load("gpt2_bpe");
  ASSERT_TRUE(tokenizer);
  // 🤖 is four bytes; byte-level BPE with a small vocabulary splits it over several tokens.
  std::vector<int32_t> ids;
  ASSERT_TRUE(tokenizer->encode("🤖🤖", false, &ids).ok());
  ASSERT_GT(ids.size(), 2u);
  auto stream = tokenizer->streamDecoder(false);
  std::string first;
  ASSERT_TRUE(stream->step(ids[0], &first).ok());
  EXPECT_EQ(first, "");  // not a whole character yet
  std::string all = first;
  for (size_t i = 1; i < ids.size(); ++i) ASSERT_TRUE(stream->step(ids[i], &all).ok());
  ASSERT_TRUE(stream->finish(&all).ok());
  EXPECT_EQ(all, "🤖🤖");
  std::string unused;
  Status status = stream->step(1 << 29, &unused);
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
}

TEST(TokenizerTest, ErrorCases) {
  std::unique_ptr<Tokenizer> tokenizer;
  Status status = Tokenizer::fromJson("{not json", &tokenizer);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("not valid JSON"), std::string::npos) << status.message();

  status = Tokenizer::fromJson(R"({"model": {"type": "Unigram", "vocab": []}})", &tokenizer);
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("Unigram"), std::string::npos) << status.message();

  status = Tokenizer::fromJson(
      R"({"model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"},
          "normalizer": {"type": "Sequence", "normalizers": [{"type": "Precompiled"}]}})",
      &tokenizer);
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("normalizer.normalizers[0]"), std::string::npos)
      << status.message();

  status = Tokenizer::fromJson(
      R"({"model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"},
          "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?<=a)b"},
                            "behavior": "Isolated", "invert": false}})",
      &tokenizer);
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented) << status.toString();

  status = Tokenizer::fromJson(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})", &tokenizer);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("'ab'"), std::string::npos) << status.message();

  status = Tokenizer::fromFile("/nonexistent/tokenizer.json", &tokenizer);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);

  auto gpt2 = load("gpt2_bpe");
  ASSERT_TRUE(gpt2);
  std::string text;
  std::vector<int32_t> bad_ids = {5, 123456789, 7};
  status = gpt2->decode(bad_ids, false, &text);
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
  EXPECT_NE(status.message().find("123456789"), std::string::npos) << status.message();
  std::vector<int32_t> ids;
  status = gpt2->encode("bad \xC3\x28 utf-8", false, &ids);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
}

// unknownIds: exactly the ids decode() refuses below the limit (gaps, and past the vocabulary).
TEST(TokenizerTest, UnknownIdsAreTheIdsDecodeRefuses) {
  std::unique_ptr<Tokenizer> tokenizer;
  ASSERT_OK(Tokenizer::fromJson(
      R"({"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1, "d": 3}, "unk_token": "a"},
          "added_tokens": [{"id": 5, "content": "<e>", "special": true}]})",
      &tokenizer));
  std::vector<int32_t> unknown;
  ASSERT_OK(tokenizer->unknownIds(9, &unknown));
  EXPECT_EQ(unknown, (std::vector<int32_t>{2, 4, 6, 7, 8}));
  for (int32_t id = 0; id < 9; ++id) {
    std::string text;
    const bool refused = !tokenizer->decode(std::vector<int32_t>{id}, false, &text).ok();
    EXPECT_EQ(refused, std::count(unknown.begin(), unknown.end(), id) == 1) << "id " << id;
  }
  ASSERT_OK(tokenizer->unknownIds(2, &unknown));
  EXPECT_TRUE(unknown.empty());
}

TEST(TokenizerTest, RegexEngine) {
  using tokenization::Regex;
  std::unique_ptr<Regex> regex;
  ASSERT_TRUE(
      Regex::compile(R"((?i:'s|'t)|\p{L}+|\p{N}{1,3}|\s+(?!\S)|\s+|[^\s\p{L}\p{N}]+)", &regex)
          .ok());
  std::u32string text;
  ASSERT_TRUE(unicode::decodeUtf8("IT'S 12345  héllo!?", &text));
  std::vector<std::pair<size_t, size_t>> matches;
  ASSERT_TRUE(regex->findAll(text, &matches).ok());
  std::vector<std::string> pieces;
  for (auto [b, e] : matches) pieces.push_back(unicode::toUtf8(text.substr(b, e - b)));
  EXPECT_EQ(pieces,
            (std::vector<std::string>{"IT", "'S", " ", "123", "45", " ", " ", "héllo", "!?"}));
  EXPECT_EQ(Regex::compile("a\\1", &regex).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(Regex::compile("\\p{Greek}", &regex).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(Regex::compile("(ab", &regex).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Regex::compile("[ab", &regex).code(), StatusCode::kInvalidArgument);
}

TEST(TokenizerTest, UnicodeNormalization) {
  auto nf = [](const char* utf8, unicode::NormalizationForm form) {
    std::u32string text;
    EXPECT_TRUE(unicode::decodeUtf8(utf8, &text));
    return unicode::toUtf8(unicode::normalize(text, form));
  };
  EXPECT_EQ(nf("e\xCC\x81", unicode::NormalizationForm::kNFC), "\xC3\xA9");  // é
  EXPECT_EQ(nf("\xC3\xA9", unicode::NormalizationForm::kNFD), "e\xCC\x81");
  EXPECT_EQ(nf("\xEF\xAC\x81", unicode::NormalizationForm::kNFKC), "fi");  // ﬁ
  EXPECT_EQ(nf("\xEA\xB0\x81", unicode::NormalizationForm::kNFD),          // 각
            "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8");
  EXPECT_EQ(unicode::lossyUtf8("a\xE4\xB8"
                               "b\xFF"),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
}

}  // namespace
}  // namespace llmc
