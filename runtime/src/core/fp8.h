// FP8 E4M3 (the "FN" variant of the OCP 8-bit float spec, as NVIDIA's Hopper tensor cores take
// it): 1 sign, 4 exponent (bias 7), 3 mantissa bits, no infinities, S.1111.111 is NaN, largest
// finite 448. Used by the `fp8` quantization format (core/quant.h) on the CPU and, compiled by
// nvcc, in the CUDA kernels, so both encode and decode the same way.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include "core/scale.h"  // LLMC_HOST_DEVICE

namespace llmc {

constexpr float kE4M3Max = 448.0f;

// Round to nearest even, saturating to +-448 (what NVIDIA's SATFINITE conversion does); NaN
// stays NaN.
// (C math functions and bit tests only: the same code compiles for the host and the device.)
LLMC_HOST_DEVICE inline uint8_t floatToE4M3(float x) {
  uint32_t bits = 0;
  memcpy(&bits, &x, sizeof(bits));
  const uint8_t sign = (bits >> 31) ? 0x80 : 0x00;
  if (x != x) return static_cast<uint8_t>(sign | 0x7f);  // NaN
  const float a = fabsf(x);
  if (a < 0.015625f) {  // below 2^-6: subnormal, steps of 2^-9 (8 of them reach 2^-6, exponent 1)
    return static_cast<uint8_t>(sign | static_cast<int>(nearbyintf(a * 512.0f)));
  }
  int e = 0;
  const float f = frexpf(a, &e);  // a = f * 2^e, f in [0.5, 1); infinity saturates below
  if (a > kE4M3Max) return static_cast<uint8_t>(sign | 0x7e);
  int exponent = e + 6;            // the field of 1.m * 2^(e - 1)
  int mantissa = static_cast<int>(nearbyintf((f * 2.0f - 1.0f) * 8.0f));
  if (mantissa == 8) mantissa = 0, ++exponent;
  if (exponent > 15 || (exponent == 15 && mantissa == 7)) return static_cast<uint8_t>(sign | 0x7e);
  return static_cast<uint8_t>(sign | exponent << 3 | mantissa);
}

LLMC_HOST_DEVICE inline float e4m3ToFloat(uint8_t v) {
  const int exponent = (v >> 3) & 0x0f, mantissa = v & 0x07;
  float a;
  if (exponent == 15 && mantissa == 7) a = NAN;
  else if (exponent == 0) a = ldexpf(static_cast<float>(mantissa), -9);
  else a = ldexpf(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  return (v & 0x80) ? -a : a;
}

}  // namespace llmc
