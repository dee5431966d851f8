// Shared pieces of the llmc command line: exit codes and argument helpers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmc/session.h"
#include "llmc/status.h"

namespace llmc::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;   // llmc itself failed at run time
inline constexpr int kExitBadInput = 2;  // bad usage, bad model, bad engine, bad input file

// Exit code for a Status: problems with what the user gave us are 2, the rest 1.
int exitCodeFor(const Status& status);
// Prints "llmc <command>: error: <message>" to stderr and returns the exit code.
int reportError(const std::string& command, const Status& status);
int usageError(const std::string& command, const std::string& message);

// A whole-string base-10 integer; false for anything else (empty, trailing text, overflow).
inline bool parseInt64(const std::string& text, int64_t* out) {
  try {
    size_t used = 0;
    *out = std::stoll(text, &used);
    return used == text.size();
  } catch (...) {
    return false;
  }
}

// The backend options of run, generate and bench: `--backend auto|cpu|cuda`, `--precision
// fp32|tf32|bf16|fp16` (the GPU's products), `--tf32` (= --precision tf32) and
// `--no-cuda-graphs`. Returns true
// when args[*i] is one of them (consuming its value); *error is set when the value is bad.
inline bool parseSessionFlag(const std::vector<std::string>& args, size_t* i,
                             SessionOptions* options, std::string* error) {
  const std::string& arg = args[*i];
  if (arg == "--tf32") {
    options->allow_tf32 = true;
    return true;
  }
  if (arg == "--no-cuda-graphs") {
    options->cuda_graphs = false;
    return true;
  }
  if (arg == "--precision") {
    const std::string value = *i + 1 < args.size() ? args[++*i] : "";
    options->allow_tf32 = value == "tf32";
    if (value == "fp32" || value == "tf32") options->gpu_weight_dtype = DType::kFloat32;
    else if (value == "bf16") options->gpu_weight_dtype = DType::kBFloat16;
    else if (value == "fp16") options->gpu_weight_dtype = DType::kFloat16;
    else *error = "--precision takes fp32, tf32, bf16 or fp16, got '" + value + "'";
    return true;
  }
  if (arg != "--backend") return false;
  const std::string value = *i + 1 < args.size() ? args[++*i] : "";
  if (value == "auto") options->backend = Backend::kAuto;
  else if (value == "cpu") options->backend = Backend::kCpu;
  else if (value == "cuda") options->backend = Backend::kCuda;
  else *error = "--backend takes auto, cpu or cuda, got '" + value + "'";
  return true;
}

int runCompile(const std::vector<std::string>& args);
int runVerify(const std::vector<std::string>& args);
int runRefit(const std::vector<std::string>& args);
int runEval(const std::vector<std::string>& args);
int runRun(const std::vector<std::string>& args);
int runInspect(const std::vector<std::string>& args);
int runGenerate(const std::vector<std::string>& args);
int runBench(const std::vector<std::string>& args);

}  // namespace llmc::cli
