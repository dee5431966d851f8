// The reciprocal of a quantization scale, shared by the quantizers on the host and the device.
#pragma once

#include <float.h>
#include <math.h>

#ifndef LLMC_HOST_DEVICE
#if defined(__CUDACC__)
#define LLMC_HOST_DEVICE __host__ __device__
#else
#define LLMC_HOST_DEVICE
#endif
#endif

namespace llmc {

// 1 / scale, or 0 for a scale too small to invert finitely (zero or denormal: every value it
// covers quantizes to 0 then), so that 0 * inverse never makes a NaN.
LLMC_HOST_DEVICE inline float inverseScale(float scale) { return fabsf(scale) >= FLT_MIN ? 1.0f / scale : 0.0f; }

}  // namespace llmc
