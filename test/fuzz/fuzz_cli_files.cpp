// Fuzz target for every file the llmc command line reads, through the same functions it calls:
// the input is written to a scratch file and read back by name, so the file reader
// (core/file_io.h) runs too. The first byte picks the reader (kReaders below; byte / kReaders
// picks one of the built-in tokenizers where a reader needs one); the rest is the file.
// Models (onnx_import), engines in memory (engine) and tokenizer.json in memory (tokenizer)
// have targets of their own; here each format comes in as the CLI gets it.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cli.h"
#include "core/file_io.h"
#include "core/prune.h"
#include "eval.h"
#include "fuzz_tokenizers.h"
#include "fuzz_util.h"
#include "llmc/engine.h"
#include "llmc/refit.h"
#include "llmc/tensor_io.h"
#include "llmc/tokenizer.h"

#ifdef LLMC_FUZZ_WITH_COMPILER
#include "llmc/compiler.h"
#include "onnx/onnx_pb.h"
#include "pipeline/Calibration.h"
#endif

namespace {

using llmc::fuzz::fail;

enum Reader : uint8_t {
  kInputNpy,          // run/verify --input NAME=FILE.npy
  kInputTensorProto,  // run/verify --input NAME=FILE.pb
  kEngineFile,        // run, inspect, generate, bench: ENGINE (mapped, checksums on)
  kTokenizerFile,     // --tokenizer FILE.json
  kSentences,         // eval --sentences FILE: one sentence per line
  kText,              // eval --text FILE
  kOptionValues,      // integer and float option values (the text after the option)
  kCalibPrompts,      // compile --calib FILE: one prompt per line
  kCalibNpy,          // compile --calib-dir DIR: input_ids .npy files
  kCalibStats,        // OUTPUT.calib.safetensors, the calibration cache compile reads back
  kRefitWeights,      // refit --weights FILE.safetensors
  kReaders
};

std::string scratchPath(const std::string& name) {
  return llmc::fuzz::scratchDirectory() + "/" + name;
}

// One tokenizer.json file per built-in tokenizer, written once.
const std::vector<std::string>& tokenizerFiles() {
  static const std::vector<std::string> paths = [] {
    const std::string jsons[] = {llmc::fuzz::byteLevelBpeJson(), llmc::fuzz::sentencePieceBpeJson(),
                                 llmc::fuzz::wordPieceJson(), llmc::fuzz::wordLevelJson()};
    std::vector<std::string> out;
    for (const std::string& json : jsons) {
      out.push_back(scratchPath("tokenizer" + std::to_string(out.size()) + ".json"));
      llmc::fuzz::writeScratchFile(out.back(), json.data(), json.size());
    }
    return out;
  }();
  return paths;
}

void touch(const llmc::Tensor& tensor) {
  const auto* bytes = static_cast<const uint8_t*>(tensor.data());
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < tensor.sizeBytes(); ++i) sink = sink ^ bytes[i];
}

void readInputTensor(const std::string& path) {
  llmc::Tensor tensor;
  if (llmc::readTensorFile(path, &tensor).ok()) touch(tensor);
}

// What `llmc inspect` shows of an engine, and the tokenizer `llmc generate` takes from it.
void readEngineFile(const std::string& path) {
  std::shared_ptr<const llmc::Engine> engine;
  if (!llmc::Engine::load(path, &engine).ok()) return;
  volatile size_t sink = 0;
  for (const auto* tensors : {&engine->inputs(), &engine->outputs()})
    for (const llmc::TensorInfo& info : *tensors) sink = sink + info.name.size() + info.dims.size();
  sink = sink + engine->symbols().size() + engine->target().size() +
         engine->formatVersion().size() + engine->compilerVersion().size() +
         engine->sourceHash().size() + engine->buildOptions().size() + engine->weightBytes() +
         engine->strippedWeights() + engine->arenaBytes();
  for (size_t i = 0; i < engine->numSteps(); ++i)
    sink = sink + engine->stepKernel(i).size() + engine->stepNode(i).size();
  if (!engine->tokenizerJson().empty()) {
    std::unique_ptr<llmc::Tokenizer> tokenizer;
    (void)llmc::Tokenizer::fromJson(engine->tokenizerJson(), &tokenizer);
  }
}

// parseInteger against a reference built on std::from_chars; float values against their range.
void parseOptionValues(std::string_view text) {
  using llmc::cli::parseInteger;
  constexpr int64_t kLimits[][2] = {
      {0, 100}, {-5, 5}, {1, llmc::cli::kInt32Max}, {INT64_MIN, INT64_MAX}};
  for (const auto& limit : kLimits) {
    int64_t value = 0;
    const bool ok = parseInteger(text, limit[0], limit[1], &value);
    std::string_view digits = text;
    if (!digits.empty() && digits[0] == '+') digits.remove_prefix(1);
    int64_t expected = 0;
    const auto [end, error] =
        std::from_chars(digits.data(), digits.data() + digits.size(), expected);
    const bool signed_once = digits.empty() || text[0] != '+' || digits[0] != '-';
    const bool expected_ok = !digits.empty() && error == std::errc() &&
                             end == digits.data() + digits.size() && signed_once &&
                             expected >= limit[0] && expected <= limit[1];
    if (ok != expected_ok || (ok && value != expected))
      fail("parseInteger disagrees with std::from_chars");
  }
  double number = 0;
  if (llmc::cli::parseFloatOption("--x", std::string(text), -1.0, 2.5, &number).ok() &&
      !(number >= -1.0 && number <= 2.5))
    fail("parseFloatOption returned a value outside its range");
}

#ifdef LLMC_FUZZ_WITH_COMPILER

// What the compiler's quantization passes read from calibration statistics.
void useCalibrationStats(const llmc::CalibrationStats& stats) {
  volatile float sink = 0;
  for (const auto& [node, s] : stats) {
    const int64_t k = s.absmax.numElements();
    for (int64_t j = 0; j < k; ++j) sink = sink + s.absmax.data<float>()[j];
    if (s.mean_abs.numElements() == k)
      for (int64_t j = 0; j < k; ++j) sink = sink + s.mean_abs.data<float>()[j];
    const llmc::Tensor percentile = llmc::channelPercentile(s, 0.99);
    for (int64_t j = 0; j < percentile.numElements(); ++j)
      sink = sink + percentile.data<float>()[j];
    for (int64_t i = 0; i < s.samples.numElements(); ++i) sink = sink + s.samples.data<float>()[i];
    // The pruning pass: Wanda's channel norms and SparseGPT's XᵀX on a [K, 2] weight.
    if (k == 0 || k > 64) continue;
    llmc::Tensor w = llmc::Tensor::allocate(llmc::DType::kFloat32, {k, 2}), pruned;
    for (int64_t i = 0; i < w.numElements(); ++i)
      w.data<float>()[i] = static_cast<float>(i % 7) - 3.0f;
    llmc::PrunePattern half;
    half.sparsity = 0.5;
    std::vector<float> norms(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) norms[j] = std::sqrt(s.mean_sq.data<float>()[j]);
    if (llmc::pruneWeight(w, false, half, norms.data(), &pruned).ok() &&
        pruned.numElements() != w.numElements())
      fail("pruneWeight changed the weight's size");
    if (s.gram.dtype() == llmc::DType::kFloat32 && s.gram.numElements() == k * k &&
        llmc::sparseGptPrune(w, false, half, s.gram, llmc::SparseGptOptions{}, &pruned).ok())
      for (int64_t i = 0; i < pruned.numElements(); ++i) sink = sink + pruned.data<float>()[i];
  }
}

// y = x @ w + b with w [2, 3] and b [3] initializers, compiled once with --strip-weights: the
// engine that refit fills from the fuzzed weights file.
const std::vector<uint8_t>& strippedEngine() {
  static const std::vector<uint8_t> engine = [] {
    onnx::ModelProto model;
    model.set_ir_version(8);
    model.add_opset_import()->set_version(17);
    onnx::GraphProto* graph = model.mutable_graph();
    graph->set_name("refit");
    auto addValue = [](onnx::ValueInfoProto* value, const char* name, const char* first_dim,
                       int64_t second_dim) {
      value->set_name(name);
      onnx::TypeProto::Tensor* type = value->mutable_type()->mutable_tensor_type();
      type->set_elem_type(onnx::TensorProto::FLOAT);
      type->mutable_shape()->add_dim()->set_dim_param(first_dim);
      type->mutable_shape()->add_dim()->set_dim_value(second_dim);
    };
    addValue(graph->add_input(), "x", "n", 2);
    addValue(graph->add_output(), "y", "n", 3);
    auto addInitializer = [&](const char* name, std::vector<int64_t> dims) {
      onnx::TensorProto* tensor = graph->add_initializer();
      tensor->set_name(name);
      tensor->set_data_type(onnx::TensorProto::FLOAT);
      int64_t count = 1;
      for (int64_t d : dims) {
        tensor->add_dims(d);
        count *= d;
      }
      for (int64_t i = 0; i < count; ++i) tensor->add_float_data(0.5f * static_cast<float>(i));
    };
    addInitializer("w", {2, 3});
    addInitializer("b", {3});
    auto addNode = [&](const char* op, const char* name, std::vector<const char*> inputs,
                       const char* output) {
      onnx::NodeProto* node = graph->add_node();
      node->set_op_type(op);
      node->set_name(name);
      for (const char* input : inputs) node->add_input(input);
      node->add_output(output);
    };
    addNode("MatMul", "mm", {"x", "w"}, "m");
    addNode("Add", "bias", {"m", "b"}, "y");
    llmc::CompileOptions options;
    options.input_path = "refit.onnx";
    options.strip_weights = true;
    std::vector<uint8_t> bytes;
    llmc::Status status =
        llmc::compileModelBytes(model.SerializeAsString(), options, &bytes, nullptr);
    if (!status.ok()) fail("compiling the refit model: " + status.toString());
    return bytes;
  }();
  return engine;
}

void refitWeights(const std::string& path) {
  std::vector<uint8_t> weights;
  if (!llmc::readFile(path, "--weights", &weights).ok()) fail("cannot read back a scratch file");
  std::map<std::string, llmc::Tensor> tensors;
  if (!llmc::parseSafetensors(weights, path, &tensors).ok()) return;
  for (const auto& [name, tensor] : tensors) touch(tensor);
  std::vector<uint8_t> refit;
  if (!llmc::refitEngine(strippedEngine(), "refit.engine", tensors, &refit).ok()) return;
  // What refit writes must load, with its checksums.
  std::shared_ptr<const llmc::Engine> engine;
  llmc::Status status = llmc::Engine::loadFromMemory(refit, "refit.engine", &engine);
  if (!status.ok()) fail("a refit engine does not load: " + status.toString());
}

#endif  // LLMC_FUZZ_WITH_COMPILER

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizerFiles();
  std::filesystem::create_directory(scratchPath("calib"));
#ifdef LLMC_FUZZ_WITH_COMPILER
  (void)strippedEngine();
#endif
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto reader = static_cast<Reader>(data[0] % kReaders);
  const std::string& tokenizer = tokenizerFiles()[data[0] / kReaders % tokenizerFiles().size()];
  const uint8_t* contents = data + 1;
  const size_t contents_size = size - 1;
  std::string_view text(reinterpret_cast<const char*>(contents), contents_size);
  auto writeAs = [&](const std::string& name) {
    const std::string path = scratchPath(name);
    llmc::fuzz::writeScratchFile(path, contents, contents_size);
    return path;
  };

  switch (reader) {
    case kInputNpy: readInputTensor(writeAs("input.npy")); break;
    case kInputTensorProto: readInputTensor(writeAs("input.pb")); break;
    case kEngineFile: readEngineFile(writeAs("model.engine")); break;
    case kTokenizerFile: {
      std::unique_ptr<llmc::Tokenizer> loaded;
      (void)llmc::cli::loadTokenizerFile(writeAs("tokenizer.json"), &loaded);
      break;
    }
    case kSentences: {
      std::vector<std::vector<int32_t>> sentences;
      if (llmc::cli::tokenizeLines(writeAs("sentences.txt"), tokenizer, {}, &sentences).ok() &&
          sentences.empty())
        fail("tokenizeLines succeeded with no sentences");
      break;
    }
    case kText: {
      std::vector<int32_t> ids;
      (void)llmc::cli::tokenizeText(writeAs("text.txt"), "--text", tokenizer, {}, &ids);
      break;
    }
    case kOptionValues: parseOptionValues(text); break;
#ifdef LLMC_FUZZ_WITH_COMPILER
    case kCalibPrompts:
    case kCalibNpy: {
      // compile reads the --tokenizer file and hands its text to calibration.
      std::string json;
      if (!llmc::readFile(tokenizer, "--tokenizer", &json).ok()) fail("cannot read a tokenizer");
      std::vector<std::vector<llmc::NamedTensor>> samples;
      llmc::Status status;
      if (reader == kCalibPrompts) {
        status = llmc::readCalibrationInputs(writeAs("prompts.txt"), "", json, &samples);
      } else {
        writeAs("calib/sample.npy");
        status = llmc::readCalibrationInputs("", scratchPath("calib"), "", &samples);
      }
      if (!status.ok()) break;
      // What calibration feeds the engine: input_ids int64 [1, tokens].
      for (const auto& sample : samples) {
        const llmc::Tensor& ids = sample.at(0).tensor;
        if (ids.dtype() != llmc::DType::kInt64 || ids.rank() != 2 || ids.dim(0) != 1)
          fail("a calibration sample is not int64 [1, tokens]");
        touch(ids);
      }
      break;
    }
    case kCalibStats: {
      llmc::CalibrationStats stats;
      if (llmc::readCalibrationStats(writeAs("model.calib.safetensors"), "", &stats).ok())
        useCalibrationStats(stats);
      break;
    }
    case kRefitWeights: refitWeights(writeAs("weights.safetensors")); break;
#else
    case kCalibPrompts:
    case kCalibNpy:
    case kCalibStats:
    case kRefitWeights: break;  // readers of the compiler, which this build does not have
#endif
    case kReaders: break;
  }
  return 0;
}
