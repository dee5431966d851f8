// The row operations of attendOne (cpu/attend.h), built for AVX2/FMA and the baseline and
// chosen by cpuIsa() once per attendOne call.
#include "cpu/attend.h"

#include "cpu/isa.h"

namespace llmc {

namespace {

LLMC_ISA_INLINE float dotRowBody(const float* a, const float* b, int64_t n) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += a[d + l] * b[d + l];
  for (int l = 0; d < n; ++d, ++l) lanes[l] += a[d] * b[d];
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) +
         ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

LLMC_ISA_INLINE void addScaledRowBody(float* __restrict out, float p, const float* __restrict v,
                                      int64_t n) {
  for (int64_t d = 0; d < n; ++d) out[d] += p * v[d];
}

LLMC_TARGET_AVX2 float dotRowAvx2(const float* a, const float* b, int64_t n) {
  return dotRowBody(a, b, n);
}
float dotRowBaseline(const float* a, const float* b, int64_t n) { return dotRowBody(a, b, n); }
LLMC_TARGET_AVX2 void addScaledRowAvx2(float* out, float p, const float* v, int64_t n) {
  addScaledRowBody(out, p, v, n);
}
void addScaledRowBaseline(float* out, float p, const float* v, int64_t n) {
  addScaledRowBody(out, p, v, n);
}

}  // namespace

const RowOps& rowOps() {
  static const RowOps avx2{dotRowAvx2, addScaledRowAvx2};
  static const RowOps baseline{dotRowBaseline, addScaledRowBaseline};
  return cpuIsa() >= CpuIsa::kAvx2 ? avx2 : baseline;
}

}  // namespace llmc
