// Building an engine from C++ (llmc/compiler.h, llmc::compiler) and loading it with the
// runtime (llmc/engine.h): what a service does that compiles the models it is handed instead of
// shelling out to `llmc compile`. Only the public API is used.
//
//   llmc_example_compile MODEL.onnx OUT.engine [QUANTIZE]
//   e.g. llmc_example_compile model.onnx model.engine int8
#include <cstdio>
#include <memory>
#include <string>

#include "llmc/compiler.h"
#include "llmc/engine.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s MODEL.onnx OUT.engine [int8|int4|int4_zp|w8a8|fp8]\n", argv[0]);
    return 2;
  }
  llmc::CompileOptions options;
  options.input_path = argv[1];
  options.output_path = argv[2];
  if (argc == 4) options.quantize = argv[3];
  options.progress = [](const std::string& stage) {
    std::fprintf(stderr, "  %s\n", stage.c_str());
  };

  llmc::CompileStats stats;
  llmc::Status status = llmc::compileModel(options, &stats);
  if (!status.ok()) {
    // kInvalidArgument / kUnimplemented: the model or the options; anything else: llmc itself.
    std::fprintf(stderr, "compile failed: %s\n", status.toString().c_str());
    return status.code() == llmc::StatusCode::kInvalidArgument ||
                   status.code() == llmc::StatusCode::kUnimplemented
               ? 2
               : 1;
  }
  std::printf("compiled %s: %zu steps, %llu weight bytes\n", options.output_path.c_str(),
              stats.num_steps, static_cast<unsigned long long>(stats.weight_bytes));
  if (stats.llm_recognized)
    std::printf("decoder language model: %lld layers over the KV cache\n",
                static_cast<long long>(stats.llm_layers));
  for (const std::string& failure : stats.llm_failures)
    std::printf("not recognized: %s\n", failure.c_str());

  std::shared_ptr<const llmc::Engine> engine;
  status = llmc::Engine::load(options.output_path, &engine);
  if (!status.ok()) {
    std::fprintf(stderr, "load failed: %s\n", status.toString().c_str());
    return 1;
  }
  for (const llmc::TensorInfo& input : engine->inputs())
    std::printf("input %s %s\n", input.name.c_str(), llmc::dtypeName(input.dtype));
  for (const llmc::TensorInfo& output : engine->outputs())
    std::printf("output %s %s\n", output.name.c_str(), llmc::dtypeName(output.dtype));
  return 0;
}
