// Fuzz target for engine loading and execution: any bytes must load (and then run on small
// zero inputs) or give an error, never crash. Checksums are off so mutations reach the
// FlatBuffers verifier and the semantic checks behind it.
#include <cstddef>
#include <cstdint>
#include <span>

#include "llmc/engine.h"
#include "llmc/session.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  llmc::LoadOptions options;
  options.verify_plan_checksum = false;
  options.verify_weights_checksum = false;
  std::shared_ptr<const llmc::Engine> engine;
  if (!llmc::Engine::loadFromMemory(std::span<const uint8_t>(data, size), "fuzz.engine", &engine,
                                    options)
           .ok())
    return 0;
  // Bind every input with symbols at 2 and keep the run small.
  std::vector<llmc::NamedTensor> inputs;
  for (const llmc::TensorInfo& info : engine->inputs()) {
    llmc::Shape shape;
    for (const llmc::DimInfo& dim : info.dims) shape.push_back(dim.size >= 0 ? dim.size : 2);
    int64_t count = 0;
    if (!llmc::checkedNumElements(shape, &count) || count > (1 << 16)) return 0;
    inputs.push_back({info.name, llmc::Tensor::allocate(info.dtype, shape)});
  }
  std::unique_ptr<llmc::Session> session;
  if (!llmc::Session::create(engine, &session).ok()) return 0;
  std::vector<llmc::NamedTensor> outputs;
  (void)session->run(inputs, &outputs);
  return 0;
}
