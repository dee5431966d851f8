// float16 and bfloat16 storage types: plain 16-bit patterns with exact conversions to and
// from float (round to nearest even). Reference kernels compute in float.
#pragma once

#include <cstdint>
#include <cstring>

namespace llmc {

struct Float16 {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};
static_assert(sizeof(Float16) == 2 && sizeof(BFloat16) == 2);

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float toFloat(BFloat16 h) { return bitsToFloat(static_cast<uint32_t>(h.bits) << 16); }

inline BFloat16 toBFloat16(float f) {
  uint32_t u = floatBits(f);
  BFloat16 h;
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it quiet and a NaN
    h.bits = static_cast<uint16_t>((u >> 16) | 0x40);
    return h;
  }
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  h.bits = static_cast<uint16_t>((u + rounding) >> 16);
  return h;
}

inline float toFloat(Float16 h) {
  uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exponent = (h.bits >> 10) & 0x1fu;
  uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return bitsToFloat(sign);
    // Subnormal: normalize.
    float value = static_cast<float>(mantissa) * (1.0f / 16777216.0f);  // 2^-24
    return sign ? -value : value;
  }
  if (exponent == 31) return bitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  return bitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline Float16 toFloat16(float f) {
  uint32_t u = floatBits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  Float16 h;
  if (abs > 0x7f800000u) {  // NaN
    h.bits = static_cast<uint16_t>(sign | 0x7e00u);
    return h;
  }
  if (abs >= 0x477ff000u) {  // rounds to >= 65520: infinity
    h.bits = static_cast<uint16_t>(sign | 0x7c00u);
    return h;
  }
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    // Add 0.5 (as a float with exponent matching half subnormal spacing) to round.
    float magnitude = bitsToFloat(abs) + 0.5f;
    h.bits = static_cast<uint16_t>(sign | (floatBits(magnitude) - 0x3f000000u));
    return h;
  }
  uint32_t mantissa_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mantissa_odd;  // rebias exponent (-112 << 23) and round to nearest even
  h.bits = static_cast<uint16_t>(sign | (abs >> 13));
  return h;
}

}  // namespace llmc
