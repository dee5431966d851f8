// Fuzz target for llmc::parseSafetensors: any bytes must give tensors or an error, never a
// crash; every tensor it returns must lie inside the input.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "llmc/refit.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, llmc::Tensor> tensors;
  llmc::Status status = llmc::parseSafetensors({data, size}, "fuzz.safetensors", &tensors);
  if (!status.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& [name, tensor] : tensors) {
    const auto* bytes = static_cast<const uint8_t*>(tensor.data());
    for (size_t i = 0; i < tensor.sizeBytes(); ++i) sink = sink ^ bytes[i];
  }
  return 0;
}
