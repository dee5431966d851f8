// Shared pieces of the llmc command line: exit codes and argument helpers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "llmc/generator.h"
#include "llmc/session.h"
#include "llmc/status.h"
#include "llmc/tokenizer.h"

namespace llmc::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;   // llmc itself failed at run time
inline constexpr int kExitBadInput = 2;  // bad usage, bad model, bad engine, bad input file

// Exit code for a Status: problems with what the user gave us are 2, the rest 1.
int exitCodeFor(const Status& status);
// Prints "llmc <command>: error: <message>" to stderr and returns the exit code.
int reportError(const std::string& command, const Status& status);
int usageError(const std::string& command, const std::string& message);
int usageError(const std::string& command, const Status& status);

// Option values. Integers are decimal digits with an optional sign and nothing else (no
// spaces, fraction, exponent or hexadecimal), within the option's own [min, max]; floats are
// finite decimal numbers (no hexadecimal, inf or nan) within [min, max]. Errors name the
// option, the text and the range. One parser of each (arguments.cpp) serves every subcommand.
bool parseInteger(std::string_view text, int64_t min, int64_t max, int64_t* out);
Status parseIntOption(std::string_view option, const std::string& text, int64_t min, int64_t max,
                      int64_t* out);
Status parseFloatOption(std::string_view option, const std::string& text, double min, double max,
                        double* out);
// Consume args[*i + 1] as the value of option args[*i] (advancing *i); a missing value is an
// error too.
Status intOption(const std::vector<std::string>& args, size_t* i, int64_t min, int64_t max,
                 int64_t* out);
Status floatOption(const std::vector<std::string>& args, size_t* i, double min, double max,
                   double* out);
// The same into a narrower type: an integer [min, max] must lie within T; a float range is
// narrowed to T's finite values.
template <class T>
Status intOption(const std::vector<std::string>& args, size_t* i, int64_t min, int64_t max,
                 T* out) {
  int64_t value = 0;
  LLMC_RETURN_IF_ERROR(intOption(args, i, min, max, &value));
  *out = static_cast<T>(value);
  return okStatus();
}
template <class T>
Status floatOption(const std::vector<std::string>& args, size_t* i, double min, double max,
                   T* out) {
  const double largest = static_cast<double>(std::numeric_limits<T>::max());
  double value = 0;
  LLMC_RETURN_IF_ERROR(
      floatOption(args, i, std::max(min, -largest), std::min(max, largest), &value));
  *out = static_cast<T>(value);
  return okStatus();
}

// A tokenizer.json named by --tokenizer (errors name the option and the path).
Status loadTokenizerFile(const std::string& path, std::unique_ptr<Tokenizer>* out);

inline constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
inline constexpr double kUnbounded = std::numeric_limits<double>::infinity();

// The backend options of run, generate, bench and eval: `--backend auto|cpu|cuda`, `--threads
// N` (the CPU backend's threads; 0 = every physical core), `--precision fp32|tf32|bf16|fp16`
// (the GPU's products), `--tf32` (= --precision tf32), `--no-cuda-graphs` and `--no-prepack`
// (SessionOptions::prepack_weights off). Returns true
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
  if (arg == "--no-prepack") {
    options->prepack_weights = false;
    return true;
  }
  if (arg == "--threads") {
    // 0: every physical core this process may use (SessionOptions::threads).
    const Status status = intOption(args, i, 0, 256, &options->threads);
    if (!status.ok()) *error = status.message();
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

// `--kv-cache-dtype auto|f32|f16|bf16|int8|fp8` (generate, bench, serve): the KV cache's storage
// (auto, the default: the engine's choice, kvCacheDtypeFor).
inline Status kvCacheDtypeOption(const std::vector<std::string>& args, size_t* i, DType* out) {
  const std::string option = args[*i];
  const std::string value = *i + 1 < args.size() ? args[++*i] : "";
  if (!kvCacheDtypeFromName(value, out))
    return invalidArgument(option + " takes " + kKvCacheDtypeNames + ", got '" + value + "'");
  return okStatus();
}

int runCompile(const std::vector<std::string>& args);
int runVerify(const std::vector<std::string>& args);
int runRefit(const std::vector<std::string>& args);
int runEval(const std::vector<std::string>& args);
int runRun(const std::vector<std::string>& args);
int runInspect(const std::vector<std::string>& args);
int runGenerate(const std::vector<std::string>& args);
int runBench(const std::vector<std::string>& args);
int runServe(const std::vector<std::string>& args);

}  // namespace llmc::cli
