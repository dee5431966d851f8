// Fuzz target for the ONNX importer and the whole compile pipeline: any bytes must compile
// to an engine that loads, or give an error, never crash.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "llmc/engine.h"
#include "pipeline/Pipeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  llmc::CompileOptions options;
  options.input_path = "fuzz.onnx";
  std::vector<uint8_t> engine_bytes;
  llmc::Status status = llmc::compileModelBytes(
      std::string(reinterpret_cast<const char*>(data), size), options, &engine_bytes, nullptr);
  if (!status.ok()) return 0;
  std::shared_ptr<const llmc::Engine> engine;
  // What the compiler writes must always load.
  if (!llmc::Engine::loadFromMemory(engine_bytes, "fuzz.engine", &engine).ok()) __builtin_trap();
  return 0;
}
