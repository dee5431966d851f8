// Dtype dispatch for kernels: calls a generic lambda with a value of the C++ storage type
// that matches a runtime DType (Float16/BFloat16 are 16-bit patterns; see half.h).
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "llmc/tensor.h"

namespace llmc {

template <typename T>
struct TypeTag {
  using type = T;
};

// Storage type to compute type: half types compute in float, everything else as itself.
template <typename T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<Float16> {
  using type = float;
};
template <>
struct ComputeType<BFloat16> {
  using type = float;
};

template <typename T>
inline typename ComputeType<T>::type load(T v) {
  return v;
}
inline float load(Float16 v) { return toFloat(v); }
inline float load(BFloat16 v) { return toFloat(v); }

template <typename T, typename U>
inline T store(U v) {
  return static_cast<T>(v);
}
template <>
inline Float16 store<Float16, float>(float v) {
  return toFloat16(v);
}
template <>
inline BFloat16 store<BFloat16, float>(float v) {
  return toBFloat16(v);
}
template <>
inline Float16 store<Float16, double>(double v) {
  return toFloat16(static_cast<float>(v));
}
template <>
inline BFloat16 store<BFloat16, double>(double v) {
  return toBFloat16(static_cast<float>(v));
}

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;
template <typename T>
constexpr bool kIsFloating = std::is_floating_point_v<T> || kIsHalf<T>;

// Calls fn(TypeTag<T>{}) for the storage type T of `dtype`; returns false if the dtype is
// not one of the listed ones.
template <typename Fn>
bool dispatchAll(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: fn(TypeTag<float>{}); return true;
    case DType::kFloat64: fn(TypeTag<double>{}); return true;
    case DType::kFloat16: fn(TypeTag<Float16>{}); return true;
    case DType::kBFloat16: fn(TypeTag<BFloat16>{}); return true;
    case DType::kInt64: fn(TypeTag<int64_t>{}); return true;
    case DType::kInt32: fn(TypeTag<int32_t>{}); return true;
    case DType::kInt16: fn(TypeTag<int16_t>{}); return true;
    case DType::kInt8: fn(TypeTag<int8_t>{}); return true;
    case DType::kUInt64: fn(TypeTag<uint64_t>{}); return true;
    case DType::kUInt32: fn(TypeTag<uint32_t>{}); return true;
    case DType::kUInt16: fn(TypeTag<uint16_t>{}); return true;
    case DType::kUInt8: fn(TypeTag<uint8_t>{}); return true;
    case DType::kBool: fn(TypeTag<bool>{}); return true;
    default: return false;
  }
}

// Like dispatchAll, restricted to float types.
template <typename Fn>
bool dispatchFloat(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: fn(TypeTag<float>{}); return true;
    case DType::kFloat64: fn(TypeTag<double>{}); return true;
    case DType::kFloat16: fn(TypeTag<Float16>{}); return true;
    case DType::kBFloat16: fn(TypeTag<BFloat16>{}); return true;
    default: return false;
  }
}

// Like dispatchAll without bool: every numeric type.
template <typename Fn>
bool dispatchNumeric(DType dtype, Fn&& fn) {
  if (dtype == DType::kBool) return false;
  return dispatchAll(dtype, std::forward<Fn>(fn));
}

}  // namespace llmc
