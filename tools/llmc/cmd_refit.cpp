// llmc refit: fill an engine's weights (a --strip-weights engine, or any engine) from a
// safetensors file of the source model's initializers.
#include <cstdio>

#include "cli.h"
#include "core/engine_file.h"
#include "core/file_io.h"
#include "llmc/refit.h"

namespace llmc::cli {

int runRefit(const std::vector<std::string>& args) {
  std::string engine_path, weights_path, output_path;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--weights" || arg == "-o" || arg == "--output") {
      if (i + 1 >= args.size()) return usageError("refit", arg + " needs a file name");
      (arg == "--weights" ? weights_path : output_path) = args[++i];
    } else if (!arg.empty() && arg[0] == '-') {
      return usageError("refit", "unknown option '" + arg + "'");
    } else if (engine_path.empty()) {
      engine_path = arg;
    } else {
      return usageError("refit", "more than one engine given");
    }
  }
  if (engine_path.empty()) return usageError("refit", "no engine given");
  if (weights_path.empty()) return usageError("refit", "no weights given (--weights FILE.safetensors)");
  if (output_path.empty()) return usageError("refit", "no output given (-o OUT.engine)");
  std::vector<uint8_t> engine, weights, out;
  Status status = readFile(engine_path, "engine", &engine);
  if (status.ok()) status = readFile(weights_path, "--weights", &weights);
  std::map<std::string, Tensor> tensors;
  if (status.ok()) status = parseSafetensors(weights, weights_path, &tensors);
  if (status.ok()) status = refitEngine(engine, engine_path, tensors, &out);
  if (!status.ok()) return reportError("refit", status);
  status = writeEngineFile(output_path, out);  // through a temporary file: nothing partial
  if (!status.ok()) return reportError("refit", status);
  std::printf("wrote %s: %zu bytes, weights from %s (%zu tensors)\n", output_path.c_str(), out.size(),
              weights_path.c_str(), tensors.size());
  return kExitOk;
}

}  // namespace llmc::cli
