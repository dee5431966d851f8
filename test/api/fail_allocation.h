// Allocation failure on demand, for tests of the API's "out of memory is a Status" guarantee.
// The test binary replaces the global operator new (fail_allocation.cpp); nothing in the
// library changes. Only the arming thread is affected; the failure happens once.
#pragma once

#include <cstdint>

namespace llmc::testing {

// While alive, the calling thread's `n`th allocation through operator new (counting from 1)
// fails: std::bad_alloc, or null for the nothrow forms. Later allocations succeed.
class FailNthAllocation {
 public:
  explicit FailNthAllocation(int64_t n);
  ~FailNthAllocation();
  FailNthAllocation(const FailNthAllocation&) = delete;
  FailNthAllocation& operator=(const FailNthAllocation&) = delete;

  // Whether the nth allocation was reached (and failed).
  bool fired() const;
};

}  // namespace llmc::testing
