// Fuzz target for the ONNX importer and the whole compile pipeline: any bytes must compile
// to an engine that loads, or give an error, never crash. The model sits in a scratch directory
// that holds one external-data file, weights.bin (64 bytes: floats 0..15), so that initializers
// stored outside the model (location, offset, length) are read and bounds-checked too.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "fuzz_util.h"
#include "llmc/compiler.h"
#include "llmc/engine.h"

namespace {

const std::string& modelPath() {
  static const std::string path = [] {
    float weights[16];
    for (int i = 0; i < 16; ++i) weights[i] = static_cast<float>(i);
    llmc::fuzz::writeScratchFile(llmc::fuzz::scratchDirectory() + "/weights.bin", weights,
                                 sizeof(weights));
    return llmc::fuzz::scratchDirectory() + "/fuzz.onnx";
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)modelPath();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  llmc::CompileOptions options;
  options.input_path = modelPath();
  std::vector<uint8_t> engine_bytes;
  llmc::Status status = llmc::compileModelBytes(
      std::string(reinterpret_cast<const char*>(data), size), options, &engine_bytes, nullptr);
  if (!status.ok()) return 0;
  std::shared_ptr<const llmc::Engine> engine;
  // What the compiler writes must always load.
  status = llmc::Engine::loadFromMemory(engine_bytes, "fuzz.engine", &engine);
  if (!status.ok()) llmc::fuzz::fail("a compiled engine does not load: " + status.toString());
  return 0;
}
