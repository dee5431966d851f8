// Tensor storage and the dtype table.
#include "llmc/tensor.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

namespace llmc {

namespace {
struct DTypeInfo {
  DType dtype;
  size_t size;
  const char* name;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kFloat32, 4, "float32"},   {DType::kUInt8, 1, "uint8"},
    {DType::kInt8, 1, "int8"},         {DType::kUInt16, 2, "uint16"},
    {DType::kInt16, 2, "int16"},       {DType::kInt32, 4, "int32"},
    {DType::kInt64, 8, "int64"},       {DType::kBool, 1, "bool"},
    {DType::kFloat16, 2, "float16"},   {DType::kFloat64, 8, "float64"},
    {DType::kUInt32, 4, "uint32"},     {DType::kUInt64, 8, "uint64"},
    {DType::kBFloat16, 2, "bfloat16"},
};

const DTypeInfo* findDType(DType dtype) {
  for (const auto& info : kDTypes)
    if (info.dtype == dtype) return &info;
  return nullptr;
}

constexpr std::align_val_t kTensorAlignment{64};

// Storage comes from the aligned operator new, so that running out of memory is the
// std::bad_alloc every other allocation throws (and tests can make any of them fail).
struct AlignedFree {
  void operator()(std::byte* p) const { ::operator delete(p, kTensorAlignment); }
};
}  // namespace

size_t dtypeSize(DType dtype) {
  const DTypeInfo* info = findDType(dtype);
  return info ? info->size : 0;
}

const char* dtypeName(DType dtype) {
  const DTypeInfo* info = findDType(dtype);
  return info ? info->name : "undefined";
}

bool dtypeFromName(const std::string& name, DType* dtype) {
  for (const auto& info : kDTypes) {
    if (name == info.name) {
      *dtype = info.dtype;
      return true;
    }
  }
  return false;
}

bool isValidDType(int value) {
  return value >= 0 && value <= 255 && findDType(static_cast<DType>(value)) != nullptr;
}

bool isFloatDType(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16 ||
         dtype == DType::kFloat64;
}

int64_t shapeNumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool checkedNumElements(const Shape& shape, int64_t* count) {
  constexpr int64_t kMaxElements = INT64_MAX / 8;  // bytes of the widest dtype still fit
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > kMaxElements / d) return false;
    n *= d;
  }
  *count = n;
  return true;
}

std::string shapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor Tensor::allocate(DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  size_t bytes = t.sizeBytes();
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = ::operator new(rounded, kTensorAlignment);
  std::memset(p, 0, rounded);
  t.storage_ = std::shared_ptr<std::byte>(static_cast<std::byte*>(p), AlignedFree());
  t.data_ = p;
  return t;
}

Status Tensor::allocate(DType dtype, Shape shape, Tensor* out) {
  int64_t count = 0;
  if (!checkedNumElements(shape, &count) || dtypeSize(dtype) == 0)
    return invalidArgument("Tensor::allocate: cannot allocate " + std::string(dtypeName(dtype)) +
                           shapeToString(shape));
  try {
    *out = allocate(dtype, std::move(shape));
  } catch (const std::bad_alloc&) {
    return resourceExhausted("Tensor::allocate: out of memory for " + std::to_string(count) +
                             " elements of " + dtypeName(dtype));
  }
  return okStatus();
}

Tensor Tensor::view(DType dtype, Shape shape, void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = allocate(dtype_, shape_);
  if (data_ && sizeBytes()) std::memcpy(t.data_, data_, sizeBytes());
  return t;
}

Status Tensor::clone(Tensor* out) const {
  try {
    *out = clone();
  } catch (const std::bad_alloc&) {
    return resourceExhausted(std::string("Tensor::clone: out of memory for ") + dtypeName(dtype_) +
                             shapeToString(shape_));
  }
  return okStatus();
}

}  // namespace llmc
