// A hand-built engine for runtime tests that need no compiler: logits = OneHot(input_ids,
// depth 10), so greedy decoding always repeats the last token. With `as_language_model` it
// also carries a language-model config, so that Generator and BatchGenerator run it over the
// paged KV cache (it has no attention step: the cache is allocated and managed, never read).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/engine_file.h"
#include "llmc/engine.h"
#include "llmc/engine_generated.h"

namespace llmc::testing {

inline constexpr int64_t kOneHotVocab = 10;
inline constexpr int64_t kOneHotMaxSeq = 64;

// The engine file's bytes.
inline std::vector<uint8_t> oneHotEngineFile(bool as_language_model = false) {
  flatbuffers::FlatBufferBuilder fbb;
  auto dim = [&](int64_t size, const char* symbol) {
    return fb::CreateDim(fbb, size, symbol ? fbb.CreateString(symbol) : 0);
  };
  std::vector<flatbuffers::Offset<fb::Value>> values;
  values.push_back(fb::CreateValue(fbb, fbb.CreateString("input_ids"), fb::ValueKind::Input,
                                   static_cast<uint8_t>(DType::kInt64),
                                   fbb.CreateVector(std::vector{dim(1, nullptr), dim(-1, "seq")})));
  values.push_back(fb::CreateValue(
      fbb, fbb.CreateString("depth"), fb::ValueKind::Weight, static_cast<uint8_t>(DType::kInt64),
      fbb.CreateVector(std::vector<flatbuffers::Offset<fb::Dim>>{}), 0));
  values.push_back(fb::CreateValue(fbb, fbb.CreateString("on_off"), fb::ValueKind::Weight,
                                   static_cast<uint8_t>(DType::kFloat32),
                                   fbb.CreateVector(std::vector{dim(2, nullptr)}), 1));
  values.push_back(fb::CreateValue(
      fbb, fbb.CreateString("logits"), fb::ValueKind::Intermediate,
      static_cast<uint8_t>(DType::kFloat32),
      fbb.CreateVector(std::vector{dim(1, nullptr), dim(-1, "seq"), dim(kOneHotVocab, nullptr)}),
      -1, 0));
  std::vector<flatbuffers::Offset<fb::Weight>> weights{fb::CreateWeight(fbb, 0, 8),
                                                       fb::CreateWeight(fbb, 64, 8)};
  std::vector<flatbuffers::Offset<fb::Slot>> slots{fb::CreateSlot(fbb, uint64_t{0}, uint64_t{0})};
  std::vector<flatbuffers::Offset<fb::Symbol>> symbols{
      fb::CreateSymbol(fbb, fbb.CreateString("seq"), 1, kOneHotMaxSeq)};
  std::vector<flatbuffers::Offset<fb::Param>> params{
      fb::CreateParam(fbb, fbb.CreateString("axis"), fb::ParamKind::Int, -1)};
  std::vector<flatbuffers::Offset<fb::Step>> steps{fb::CreateStep(
      fbb, fbb.CreateString("OneHot"), fbb.CreateString("one_hot"), fbb.CreateVector(params),
      fbb.CreateVector(std::vector<int32_t>{0, 1, 2}), fbb.CreateVector(std::vector<int32_t>{3}))};
  flatbuffers::Offset<fb::LlmConfig> llm = 0;
  if (as_language_model)
    llm = fb::CreateLlmConfig(fbb, /*num_layers=*/1, /*num_heads=*/1, /*num_kv_heads=*/1,
                              /*head_dim=*/4, kOneHotVocab, kOneHotMaxSeq, /*bos_token_id=*/-1, 0,
                              fbb.CreateString("input_ids"), fbb.CreateString("logits"));
  auto engine = fb::CreateEngine(
      fbb, 0, fbb.CreateString("cpu"), fbb.CreateVector(values), fbb.CreateVector(weights),
      fbb.CreateVector(slots), fbb.CreateVector(symbols), fbb.CreateVector(steps),
      fbb.CreateVector(std::vector<int32_t>{0}), fbb.CreateVector(std::vector<int32_t>{3}), 0,
      fbb.CreateVectorOfStrings(std::vector<std::string>{"logits"}), 0, llm);
  fb::FinishEngineBuffer(fbb, engine);
  std::vector<uint8_t> blob(72, 0);
  int64_t depth = kOneHotVocab;
  float on_off[2] = {0.0f, 1.0f};
  std::memcpy(blob.data(), &depth, 8);
  std::memcpy(blob.data() + 64, on_off, 8);
  std::vector<uint8_t> file;
  assembleEngineFile({fbb.GetBufferPointer(), fbb.GetSize()}, blob, &file);
  return file;
}

inline std::shared_ptr<const Engine> oneHotEngine(bool as_language_model = false) {
  std::shared_ptr<const Engine> loaded;
  Status status =
      Engine::loadFromMemory(oneHotEngineFile(as_language_model), "one_hot.engine", &loaded);
  EXPECT_TRUE(status.ok()) << status.toString();
  return loaded;
}

}  // namespace llmc::testing
