// Memory for what the CPU kernels keep derived from an engine's weights (the strips and panel
// packs that KernelContext::derivedFromWeights holds for a session): mapped with its pages
// populated in one call, since a float32 model's strips are hundreds of megabytes whose 4 KiB
// page faults, taken one at a time as the copy first writes them, cost more than the copy
// (the 110M Llama's cold first token 360 -> 300 ms). Page-aligned; unmapped when the last
// owner lets go.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>

namespace llmc {

template <typename T>
std::shared_ptr<T> keptBuffer(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  return std::shared_ptr<T>(static_cast<T*>(mapped), [bytes](T* p) { munmap(p, bytes); });
}

}  // namespace llmc
