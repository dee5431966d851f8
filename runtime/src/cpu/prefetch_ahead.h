// What a product's loop reads next, asked for into L2 while it computes on what it reads now. A
// prefill product reads each part of its weight (a panel of K, a panel of channels) once per
// tile of rows: the first tile takes it from memory, faster than one core streams it (about 32
// GB/s for the float32 12 x 32 tile against the 21-22 GB/s one core drew on the Xeon of
// docs/performance.md), and the others from cache. Asked for during the part before, the first
// tile reads from cache too. The lines are handed out in parts, one per step of the part before
// (a tile's call), and the kernels issue a part one line per K step: asked for all at once
// between the calls, a part's prefetches filled the core's queue of misses and stalled it (perf:
// 18% of a float32 prefill in the loop that issued them).
#pragma once

#include <algorithm>
#include <cstdint>

namespace llmc {

// Lines of memory a kernel asks for into L2 as it goes: one per step of its K loop, from the
// first, while k < count.
struct AheadLines {
  const char* at = nullptr;
  int64_t count = 0;
  void step(int64_t k) const {
    if (k < count) __builtin_prefetch(at + k * 64, 0, 2);
  }
};

class PrefetchAhead {
 public:
  // `runs` runs of `run_bytes` bytes from `base`, `stride` bytes apart, each handed out in
  // `parts` parts. Nothing is read: a prefetch of an address past an allocation is harmless.
  PrefetchAhead(const void* base, int64_t runs, int64_t run_bytes, int64_t stride, int64_t parts)
      : base_(static_cast<const char*>(base)),
        runs_(std::max<int64_t>(runs, 0)),
        run_lines_((run_bytes + 63) / 64),
        stride_(stride),
        per_part_(parts > 0 ? (run_lines_ + parts - 1) / parts : run_lines_) {}

  // Part `part` of run `run` (empty past the runs or the run's end).
  AheadLines part(int64_t run, int64_t part) const {
    if (run >= runs_ || part * per_part_ >= run_lines_) return {};
    return {base_ + run * stride_ + part * per_part_ * 64,
            std::min(per_part_, run_lines_ - part * per_part_)};
  }

 private:
  const char* base_;
  int64_t runs_, run_lines_, stride_, per_part_;
};

}  // namespace llmc
