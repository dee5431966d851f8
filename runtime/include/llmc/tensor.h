// llmc::Tensor: a dense, row-major tensor that either owns its bytes or borrows them
// (a view of engine weights, of the session arena, or of caller memory). Copies share storage;
// clone() is the deep copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmc/status.h"

namespace llmc {

// Element types. Values match ONNX's TensorProto.DataType so that importer, engine file
// and .pb reader agree without a translation table. Append-only.
enum class DType : uint8_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

// Size of one element in bytes; 0 for kUndefined or an unknown value.
size_t dtypeSize(DType dtype);
// "float32", "int64", ...; "undefined" for anything unknown.
const char* dtypeName(DType dtype);
// Parses the names dtypeName() prints; false when unknown.
bool dtypeFromName(const std::string& name, DType* dtype);
// True for every value listed in DType.
bool isValidDType(int value);
bool isFloatDType(DType dtype);  // float16, bfloat16, float32, float64

using Shape = std::vector<int64_t>;

// Number of elements of a shape (1 for a scalar).
int64_t shapeNumElements(const Shape& shape);
// Same, for untrusted shapes: false when a dimension is negative or the count (or its size
// in bytes at 8 bytes per element) would overflow int64.
bool checkedNumElements(const Shape& shape, int64_t* count);
// "[2, 3, 4]"
std::string shapeToString(const Shape& shape);

// A Tensor is a handle: copying one (copy construction, assignment, passing or returning by
// value, NamedTensor copies) never copies elements. The copy refers to the same bytes: an
// owning tensor's storage is reference-counted and freed with its last copy, a view's copies
// borrow the same memory. A write through any copy is seen by all of them. clone() is the deep
// copy, with storage of its own. Copies may be read from several threads at once; writes need
// the caller's synchronization, as for any shared memory.
class Tensor {
 public:
  Tensor() = default;
  // An owning tensor with zero-initialized storage (64-byte aligned). Throws std::bad_alloc
  // when memory runs out: this form is for llmc's kernels, whose exceptions the API boundary
  // turns into a Status. Code outside llmc uses the Status form below.
  static Tensor allocate(DType dtype, Shape shape);
  // The same, without exceptions: kResourceExhausted (naming the shape) when memory runs out,
  // kInvalidArgument for a negative or overflowing shape.
  static Status allocate(DType dtype, Shape shape, Tensor* out);
  // A borrowing tensor over `data`, which must outlive it.
  static Tensor view(DType dtype, Shape shape, void* data);
  static Tensor view(DType dtype, Shape shape, const void* data) {
    return view(dtype, std::move(shape), const_cast<void*>(data));
  }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[static_cast<size_t>(i)]; }
  int64_t numElements() const { return shapeNumElements(shape_); }
  size_t sizeBytes() const { return static_cast<size_t>(numElements()) * dtypeSize(dtype_); }

  // Null for a shape-only tensor (compile-time shape evaluation).
  void* data() { return data_; }
  const void* data() const { return data_; }
  template <typename T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }
  bool hasData() const { return data_ != nullptr || numElements() == 0; }
  bool ownsData() const { return storage_ != nullptr; }

  // A deep copy that owns its bytes. Throws std::bad_alloc like allocate(dtype, shape).
  Tensor clone() const;
  // The same, without exceptions (kResourceExhausted when memory runs out).
  Status clone(Tensor* out) const;

 private:
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  void* data_ = nullptr;
  std::shared_ptr<std::byte> storage_;
};

}  // namespace llmc
