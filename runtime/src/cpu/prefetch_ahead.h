// What a product's loop reads next, asked for into L2 a few lines at a time between the steps of
// what it reads now. A prefill product reads each part of its weight (a panel of K, a panel of
// channels) once per tile of rows: the first tile takes it from memory, faster than one core
// streams it (about 32 GB/s for the float32 12 x 32 tile against the 21-22 GB/s one core drew on
// the Xeon of docs/performance.md), and the others from cache. Asked for during the part before,
// the first tile reads from cache too (the 110M Llama's float32 first token at 64 tokens, one
// thread: 115-125 -> 106-115 ms).
#pragma once

#include <algorithm>
#include <cstdint>

namespace llmc {

class PrefetchAhead {
 public:
  // `runs` runs of `run_bytes` bytes from `base`, `stride` bytes apart, over `steps` calls of
  // step(). Nothing is read: a prefetch of an address past an allocation is harmless.
  PrefetchAhead(const void* base, int64_t runs, int64_t run_bytes, int64_t stride, int64_t steps)
      : base_(static_cast<const char*>(base)),
        run_lines_((run_bytes + kLine - 1) / kLine),
        stride_(stride),
        lines_(runs > 0 ? runs * run_lines_ : 0),
        per_step_(steps > 0 ? (lines_ + steps - 1) / steps : lines_) {}

  void step() {
    for (const int64_t end = std::min(lines_, next_ + per_step_); next_ < end; ++next_)
      __builtin_prefetch(base_ + (next_ / run_lines_) * stride_ + (next_ % run_lines_) * kLine, 0,
                         2);
  }

 private:
  static constexpr int64_t kLine = 64;
  const char* base_;
  int64_t run_lines_, stride_, lines_, per_step_, next_ = 0;
};

}  // namespace llmc
