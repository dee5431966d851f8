// Helpers shared by the tensor_ops kernel files (shape and data movement ops). These ops
// move elements without looking at them, so most of them work on raw bytes of a dtype's size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/kernel.h"

namespace llmc {

// Calls fn(TypeTag<U>{}) with an unsigned integer type U of `size_bytes` bytes, so that byte
// moves of one element compile to a single load and store. False for other sizes.
template <typename Fn>
bool dispatchBySize(size_t size_bytes, Fn&& fn) {
  switch (size_bytes) {
    case 1: fn(TypeTag<uint8_t>{}); return true;
    case 2: fn(TypeTag<uint16_t>{}); return true;
    case 4: fn(TypeTag<uint32_t>{}); return true;
    case 8: fn(TypeTag<uint64_t>{}); return true;
    default: return false;
  }
}

// Copies an n-d box of elements: for every index vector `idx` over `shape`,
//   dst[dst_offset + sum(idx * dst_strides)] = src[src_offset + sum(idx * src_strides)].
// Offsets and strides count elements of `element_size` bytes; strides may be 0 (broadcast)
// or negative (reversed slices). Nothing is touched when `shape` has no elements.
void copyStrided(size_t element_size, const Shape& shape, const void* src, int64_t src_offset,
                 const std::vector<int64_t>& src_strides, void* dst, int64_t dst_offset,
                 const std::vector<int64_t>& dst_strides);

// Product of shape[begin, end): the element count of that run of dims.
inline int64_t productOf(const Shape& shape, int64_t begin, int64_t end) {
  int64_t product = 1;
  for (int64_t i = begin; i < end; ++i) product *= shape[static_cast<size_t>(i)];
  return product;
}

// Fetches input `index`, or an error naming `what` when it is absent.
Status requireInput(const KernelContext& ctx, size_t index, const char* what, const Tensor** input);

// Reads integer input `index` (int32 or int64) as int64 values. kUnavailable passes through
// unchanged (shape-only evaluation); other errors name the node and `what`.
Status readIntInput(const KernelContext& ctx, size_t index, const char* what,
                    std::vector<int64_t>* values);

// Checks that every dim is >= 0 and that the element count and byte size fit in int64.
Status checkOutputShape(const KernelContext& ctx, const Shape& shape, DType dtype);

// Output of a kernel that returns its input unchanged in dtype and shape: allocates output
// `index` and copies the input bytes (unless shape-only).
Status copyInputToOutput(KernelContext& ctx, const Tensor& input, size_t index);

// "axis 3 (dim 4)": how errors name an index and its bound.
std::string indexOutOfRange(int64_t index, int64_t bound, int64_t axis);

// Registration of each tensor_ops file; registerTensorKernels calls them all.
void registerShapeKernels(KernelRegistry& registry);   // Reshape, Squeeze, Shape, Range, ...
void registerLayoutKernels(KernelRegistry& registry);  // Transpose, Concat, Slice, Pad, ...
void registerIndexKernels(KernelRegistry& registry);   // Gather*, Scatter*, OneHot

}  // namespace llmc
