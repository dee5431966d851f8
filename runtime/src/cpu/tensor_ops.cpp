// CPU reference kernels: the tensor_ops family (shape and data movement), the helpers its
// files share, and its registration. The kernels live in tensor_ops_{shape,layout,index}.cpp.
#include <algorithm>
#include <cstring>
#include <limits>

#include "cpu/tensor_ops_common.h"

namespace llmc {

void copyStrided(size_t element_size, const Shape& shape, const void* src, int64_t src_offset,
                 const std::vector<int64_t>& src_strides, void* dst, int64_t dst_offset,
                 const std::vector<int64_t>& dst_strides) {
  if (shapeNumElements(shape) == 0) return;
  const auto* src_bytes = static_cast<const std::byte*>(src);
  auto* dst_bytes = static_cast<std::byte*>(dst);
  const size_t rank = shape.size();
  if (rank == 0) {
    std::memcpy(dst_bytes + dst_offset * static_cast<int64_t>(element_size),
                src_bytes + src_offset * static_cast<int64_t>(element_size), element_size);
    return;
  }
  // Odometer over the outer dims; the innermost dim is one tight loop.
  const int64_t inner = shape[rank - 1];
  const int64_t src_inner_stride = src_strides[rank - 1];
  const int64_t dst_inner_stride = dst_strides[rank - 1];
  auto copy_row = [&](int64_t src_at, int64_t dst_at) {
    bool typed = dispatchBySize(element_size, [&](auto tag) {
      using U = typename decltype(tag)::type;
      const U* s = reinterpret_cast<const U*>(src_bytes) + src_at;
      U* d = reinterpret_cast<U*>(dst_bytes) + dst_at;
      for (int64_t i = 0; i < inner; ++i) {
        U value;
        std::memcpy(&value, s + i * src_inner_stride, sizeof(U));
        std::memcpy(d + i * dst_inner_stride, &value, sizeof(U));
      }
    });
    if (!typed) {
      const auto size = static_cast<int64_t>(element_size);
      for (int64_t i = 0; i < inner; ++i) {
        std::memcpy(dst_bytes + (dst_at + i * dst_inner_stride) * size,
                    src_bytes + (src_at + i * src_inner_stride) * size, element_size);
      }
    }
  };
  std::vector<int64_t> index(rank, 0);
  int64_t src_at = src_offset;
  int64_t dst_at = dst_offset;
  while (true) {
    copy_row(src_at, dst_at);
    // Advance the outer dims (all but the last).
    int64_t d = static_cast<int64_t>(rank) - 2;
    for (; d >= 0; --d) {
      if (++index[d] < shape[d]) {
        src_at += src_strides[d];
        dst_at += dst_strides[d];
        break;
      }
      src_at -= src_strides[d] * (shape[d] - 1);
      dst_at -= dst_strides[d] * (shape[d] - 1);
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

Status requireInput(const KernelContext& ctx, size_t index, const char* what,
                    const Tensor** input) {
  *input = ctx.input(index);
  if (!*input) return kernelError(ctx, std::string("missing input '") + what + "'");
  return okStatus();
}

Status readIntInput(const KernelContext& ctx, size_t index, const char* what,
                    std::vector<int64_t>* values) {
  const Tensor* tensor = ctx.input(index);
  if (!tensor) return kernelError(ctx, std::string("missing input '") + what + "'");
  Status status = readInt64s(tensor, values);
  if (status.ok() || status.code() == StatusCode::kUnavailable) return status;
  return kernelError(ctx, std::string("input '") + what + "': " + status.message());
}

Status checkOutputShape(const KernelContext& ctx, const Shape& shape, DType dtype) {
  const int64_t max_bytes = std::numeric_limits<int64_t>::max();
  const auto element_size = std::max<int64_t>(1, static_cast<int64_t>(dtypeSize(dtype)));
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return kernelError(ctx, "negative dim in output shape " + shapeToString(shape));
    if (dim != 0 && count > max_bytes / element_size / dim) {
      return kernelError(ctx, "output shape " + shapeToString(shape) + " is too large");
    }
    count *= dim;
  }
  return okStatus();
}

Status copyInputToOutput(KernelContext& ctx, const Tensor& input, size_t index) {
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(index, input.dtype(), input.shape(), &output));
  if (ctx.shapeOnly()) return okStatus();
  if (input.sizeBytes() > 0) std::memcpy(output->data(), input.data(), input.sizeBytes());
  return okStatus();
}

std::string indexOutOfRange(int64_t index, int64_t bound, int64_t axis) {
  return "index " + std::to_string(index) + " is out of range [" + std::to_string(-bound) + ", " +
         std::to_string(bound - 1) + "] on axis " + std::to_string(axis);
}

void registerTensorKernels(KernelRegistry& registry) {
  registerShapeKernels(registry);
  registerLayoutKernels(registry);
  registerIndexKernels(registry);
}

}  // namespace llmc
