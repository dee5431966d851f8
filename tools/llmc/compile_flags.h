// The compile options shared by `llmc compile` and `llmc verify` (compiler builds only).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "llmc/compiler.h"

namespace llmc::cli {

// Parses the compile flag at args[i] (advancing i past its value) into `options`; *consumed is
// false when args[i] is not a compile flag. An error names the flag and the bad value.
// `report` (null: --report is not accepted) is set by --report.
Status parseCompileFlag(const std::vector<std::string>& args, size_t& i, CompileOptions& options,
                        bool* report, bool* consumed);

// What `llmc compile` did: the CLI prints it, the Python API (python/) returns it.
struct CompileRun {
  CompileOptions options;  // as compiled: a model folder's files filled in
  CompileStats stats;
  bool report = false;                // --report
  std::vector<std::string> warnings;  // each naming nodes or files (may span lines)
  std::vector<std::string> notes;     // what --verbose adds
  std::string from_dir;               // "DIR: model.onnx, tokenizer.json, ..." from a folder
  double seconds = 0;
};

using CompileProgress = std::function<void(const std::string& stage)>;

// `llmc compile ARGS` without printing: parses the arguments (bad ones are kInvalidArgument
// errors naming them), compiles, checks (a folder's vocabularies, --max-ppl-increase), adds the
// drift baseline and writes the engine. `progress` (may be empty) sees each stage.
Status compileFromArgs(const std::vector<std::string>& args, const CompileProgress& progress,
                       CompileRun* run);

}  // namespace llmc::cli
