// std::vector storage that starts on a 64-byte boundary, for buffers the AMX tiles read 64 bytes a
// row from: malloc's 16-byte alignment splits every such row over two cache lines.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

namespace llmc {

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t count) {
    void* p = std::aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using CacheLineVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace llmc
