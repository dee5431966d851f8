// llmc compile DIR (model_dir.h).
#include "model_dir.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <tuple>

#include "cli.h"
#include "core/file_io.h"
#include "llmc/tokenizer.h"

namespace llmc::cli {

namespace {
namespace fs = std::filesystem;

// The JSON file `name` of the folder, or null when it is absent.
Status readJson(const ModelDir& dir, const std::string& name, bool* found, nlohmann::json* out) {
  const fs::path path = fs::path(dir.dir) / name;
  std::error_code ec;
  *found = fs::is_regular_file(path, ec);
  if (!*found) return okStatus();
  std::string text;
  LLMC_RETURN_IF_ERROR(readFile(path.string(), name, &text));
  *out = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded() || !out->is_object())
    return invalidArgument(path.string() + ": not a JSON object");
  return okStatus();
}

// An id or a list of ids (transformers writes either for eos_token_id).
Status idsOf(const nlohmann::json& value, const std::string& where, std::vector<int32_t>* ids) {
  auto one = [&](const nlohmann::json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kInt32Max)
      return invalidArgument(where + ": " + v.dump() + " is not a token id");
    ids->push_back(static_cast<int32_t>(v.get<int64_t>()));
    return okStatus();
  };
  if (value.is_null()) return okStatus();
  if (!value.is_array()) return one(value);
  for (const nlohmann::json& v : value) LLMC_RETURN_IF_ERROR(one(v));
  return okStatus();
}
}  // namespace

Status resolveModelDir(CompileOptions* options, ModelDir* dir) {
  dir->dir = options->input_path;
  const fs::path root(dir->dir);
  std::error_code ec;
  std::vector<std::string> models;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".onnx")
      models.push_back(entry.path().filename().string());
  if (ec) return notFound(dir->dir + ": cannot list the folder: " + ec.message());
  std::sort(models.begin(), models.end());
  if (std::find(models.begin(), models.end(), "model.onnx") != models.end()) {
    options->input_path = (root / "model.onnx").string();
  } else if (models.size() == 1) {
    options->input_path = (root / models[0]).string();
  } else {
    std::string list;
    for (const std::string& m : models) list += (list.empty() ? "" : ", ") + m;
    return invalidArgument(dir->dir + (models.empty()
                                           ? ": no .onnx model in the folder"
                                           : ": no model.onnx, and several models (" + list +
                                                 "): compile one of them by its path"));
  }
  auto take = [&](std::string* option, const std::string& name) {
    const fs::path path = root / name;
    if (!option->empty() || !fs::is_regular_file(path, ec)) return;
    *option = path.string();
    dir->taken.push_back(name);
  };
  take(&options->tokenizer_path, "tokenizer.json");
  take(&options->tokenizer_config_path, "tokenizer_config.json");
  take(&options->generation_config_path, "generation_config.json");
  if (options->tokenizer_path.empty())
    dir->warnings.push_back(dir->dir +
                            ": no tokenizer.json: the engine carries no tokenizer (llmc generate "
                            "--prompt and llmc serve will need one)");

  bool has_generation = false, has_config = false;
  nlohmann::json generation, config;
  LLMC_RETURN_IF_ERROR(readJson(*dir, "generation_config.json", &has_generation, &generation));
  LLMC_RETURN_IF_ERROR(readJson(*dir, "config.json", &has_config, &config));
  if (has_config) dir->taken.push_back("config.json");
  // EOS and BOS ids, as transformers' generate() reads them: generation_config.json first.
  for (const auto& [found, json, name] :
       {std::tuple{has_generation, &generation, "generation_config.json"},
        std::tuple{has_config, &config, "config.json"}}) {
    if (!found) continue;
    const std::string where = (root / name).string();
    if (options->eos_token_ids.empty() && json->contains("eos_token_id")) {
      LLMC_RETURN_IF_ERROR(
          idsOf((*json)["eos_token_id"], where + ": eos_token_id", &options->eos_token_ids));
      if (!options->eos_token_ids.empty()) dir->eos_source = where;
    }
    if (options->bos_token_id < 0 && json->contains("bos_token_id")) {
      std::vector<int32_t> bos;
      LLMC_RETURN_IF_ERROR(idsOf((*json)["bos_token_id"], where + ": bos_token_id", &bos));
      if (bos.size() > 1) return invalidArgument(where + ": bos_token_id is a list");
      if (!bos.empty()) options->bos_token_id = bos[0];
    }
  }
  if (has_config) {
    const std::string where = (root / "config.json").string();
    if (config.contains("vocab_size") && config["vocab_size"].is_number_integer())
      dir->config_vocab = config["vocab_size"].get<int64_t>();
    if (options->max_context <= 0 && config.contains("max_position_embeddings") &&
        config["max_position_embeddings"].is_number_integer()) {
      const int64_t positions = config["max_position_embeddings"].get<int64_t>();
      if (positions > 0 && positions < 2048) options->max_context = positions;
    }
  }
  // The EOS ids must be tokens the tokenizer knows.
  if (!options->tokenizer_path.empty() && !dir->eos_source.empty()) {
    std::unique_ptr<Tokenizer> tokenizer;
    LLMC_RETURN_IF_ERROR(loadTokenizerFile(options->tokenizer_path, &tokenizer));
    for (int32_t id : options->eos_token_ids)
      if (id >= tokenizer->vocabSize())
        return invalidArgument(dir->eos_source + ": eos_token_id " + std::to_string(id) +
                               " is not in the vocabulary of " + options->tokenizer_path + " (" +
                               std::to_string(tokenizer->vocabSize()) + " ids)");
  }
  return okStatus();
}

Status checkModelDir(const CompileOptions& options, const CompileStats& stats, ModelDir* dir) {
  const int64_t vocab = stats.vocab;
  if (vocab < 0) return okStatus();  // not a language model, or a symbolic vocabulary
  if (!options.tokenizer_path.empty()) {
    std::unique_ptr<Tokenizer> tokenizer;
    LLMC_RETURN_IF_ERROR(loadTokenizerFile(options.tokenizer_path, &tokenizer));
    if (tokenizer->vocabSize() > vocab)
      return invalidArgument(options.tokenizer_path + ": the tokenizer has " +
                             std::to_string(tokenizer->vocabSize()) + " ids, the model's logits " +
                             std::to_string(vocab) + ": the tokenizer does not belong to " +
                             options.input_path);
  }
  if (dir->config_vocab >= 0 && dir->config_vocab != vocab)
    dir->warnings.push_back((fs::path(dir->dir) / "config.json").string() + ": vocab_size " +
                            std::to_string(dir->config_vocab) + ", the model's logits " +
                            std::to_string(vocab));
  return okStatus();
}

}  // namespace llmc::cli
