// Fuzz target for llmc::parseNpy: any bytes must give a tensor or an error, never a crash.
#include <cstddef>
#include <cstdint>

#include "llmc/tensor_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  llmc::Tensor tensor;
  llmc::Status status = llmc::parseNpy(data, size, "fuzz.npy", &tensor);
  if (!status.ok()) return 0;
  // Touch every byte, so that a tensor smaller than it claims is caught by ASan.
  const auto* bytes = tensor.data<uint8_t>();
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < tensor.sizeBytes(); ++i) sink = sink ^ bytes[i];
  return 0;
}
