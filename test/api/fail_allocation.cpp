// The replaced global allocation functions behind FailNthAllocation: malloc/aligned_alloc and
// free, with a per-thread countdown that makes one chosen allocation fail.
#include "fail_allocation.h"

#include <cstddef>
#include <cstdlib>
#include <new>

namespace llmc::testing {
namespace {
thread_local int64_t countdown = 0;  // 0: disarmed
thread_local bool fired_flag = false;

// True when this allocation is the one to fail.
bool failThisOne() {
  if (countdown <= 0) return false;
  if (--countdown > 0) return false;
  fired_flag = true;
  return true;
}

void* allocate(std::size_t size, std::size_t alignment, bool nothrow) {
  if (failThisOne()) {
    if (nothrow) return nullptr;
    throw std::bad_alloc();
  }
  if (size == 0) size = 1;
  void* p = nullptr;
  if (alignment <= alignof(std::max_align_t)) {
    p = std::malloc(size);
  } else {
    p = std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  }
  if (!p && !nothrow) throw std::bad_alloc();
  return p;
}
}  // namespace

FailNthAllocation::FailNthAllocation(int64_t n) {
  countdown = n;
  fired_flag = false;
}
FailNthAllocation::~FailNthAllocation() { countdown = 0; }
bool FailNthAllocation::fired() const { return fired_flag; }

}  // namespace llmc::testing

using llmc::testing::allocate;

void* operator new(std::size_t size) { return allocate(size, 0, false); }
void* operator new[](std::size_t size) { return allocate(size, 0, false); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return allocate(size, 0, true);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return allocate(size, 0, true);
}
void* operator new(std::size_t size, std::align_val_t alignment) {
  return allocate(size, static_cast<std::size_t>(alignment), false);
}
void* operator new[](std::size_t size, std::align_val_t alignment) {
  return allocate(size, static_cast<std::size_t>(alignment), false);
}
void* operator new(std::size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  return allocate(size, static_cast<std::size_t>(alignment), true);
}
void* operator new[](std::size_t size, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  return allocate(size, static_cast<std::size_t>(alignment), true);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
