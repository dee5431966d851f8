// llmc compile DIR: the folder an exporter writes (Optimum's `optimum-cli export onnx`, or
// save_pretrained plus an ONNX export): the model, its tokenizer and configs, taken into the
// engine so that `llmc generate --prompt` and `llmc serve` need nothing else (docs/cli.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmc/compiler.h"
#include "llmc/status.h"

namespace llmc::cli {

struct ModelDir {
  std::string dir;
  std::vector<std::string> taken;     // "tokenizer.json", ... (what the folder gave)
  std::vector<std::string> warnings;  // each naming its file
  std::string eos_source;             // the file the EOS ids came from ("" : none or --eos-id)
  int64_t config_vocab = -1;          // config.json's vocab_size (-1: none)
};

// Fills what `options` leaves unset from the folder options->input_path names: the model
// (model.onnx, or the folder's only .onnx file), --tokenizer, --tokenizer-config and
// --generation-config from tokenizer.json, tokenizer_config.json and generation_config.json,
// the EOS and BOS ids from generation_config.json (else config.json), and --max-context from
// config.json's max_position_embeddings when that is below the default. Errors name the file:
// no model, several models, unreadable or malformed JSON, an EOS id outside the tokenizer's
// vocabulary.
Status resolveModelDir(CompileOptions* options, ModelDir* dir);

// After the compile: the model's vocabulary (the compile's logits width) against the
// tokenizer's (an error when the tokenizer has ids the model cannot embed) and config.json's
// (a warning).
Status checkModelDir(const CompileOptions& options, const CompileStats& stats, ModelDir* dir);

}  // namespace llmc::cli
