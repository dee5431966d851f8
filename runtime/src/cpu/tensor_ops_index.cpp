// CPU reference kernels driven by index tensors: Gather, GatherElements, GatherND, ScatterND,
// ScatterElements, OneHot. Every index from the model is checked against its bound before
// any memory is touched; negative indices count from the end of their axis.
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "cpu/tensor_ops_common.h"

namespace llmc {
namespace {

Status requireIndexDType(const KernelContext& ctx, const Tensor& indices) {
  if (indices.dtype() != DType::kInt64 && indices.dtype() != DType::kInt32) {
    return kernelError(
        ctx, std::string("indices must be int32 or int64, got ") + dtypeName(indices.dtype()));
  }
  return okStatus();
}

// Maps a possibly negative index into [0, bound), or fails naming the index and bound.
Status normalizeIndex(const KernelContext& ctx, int64_t index, int64_t bound, int64_t axis,
                      int64_t* out) {
  const int64_t normalized = index < 0 ? index + bound : index;
  if (normalized < 0 || normalized >= bound) {
    return kernelError(ctx, indexOutOfRange(index, bound, axis));
  }
  *out = normalized;
  return okStatus();
}

// Gather: out[a, i..., b] = data[a, indices[i...], b] along `axis`.
Status gatherKernel(KernelContext& ctx) {
  const Tensor *data = nullptr, *indices = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "data", &data));
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 1, "indices", &indices));
  LLMC_RETURN_IF_ERROR(requireIndexDType(ctx, *indices));
  int64_t axis = 0;
  LLMC_RETURN_IF_ERROR(
      normalizeAxis(ctx.params().getInt("axis", 0), data->rank(), ctx.nodeName(), &axis));
  const Shape& data_shape = data->shape();
  Shape shape(data_shape.begin(), data_shape.begin() + axis);
  shape.insert(shape.end(), indices->shape().begin(), indices->shape().end());
  shape.insert(shape.end(), data_shape.begin() + axis + 1, data_shape.end());
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, data->dtype(), shape, &output));
  if (ctx.shapeOnly()) return okStatus();

  std::vector<int64_t> positions;
  LLMC_RETURN_IF_ERROR(readIntInput(ctx, 1, "indices", &positions));
  const int64_t dim = data->dim(axis);
  for (int64_t& position : positions) {
    LLMC_RETURN_IF_ERROR(normalizeIndex(ctx, position, dim, axis, &position));
  }
  const int64_t outer = productOf(data_shape, 0, axis);
  const auto slice_bytes =
      static_cast<size_t>(productOf(data_shape, axis + 1, data->rank())) * dtypeSize(data->dtype());
  if (slice_bytes == 0) return okStatus();
  const auto* src = static_cast<const std::byte*>(data->data());
  auto* dst = static_cast<std::byte*>(output->data());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t position : positions) {
      std::memcpy(dst, src + static_cast<size_t>(o * dim + position) * slice_bytes, slice_bytes);
      dst += slice_bytes;
    }
  }
  return okStatus();
}

// For GatherElements and ScatterElements: the offset in `data` of every element of `indices`
// (same rank; index values replace the coordinate on `axis`). Checks every value.
Status elementOffsets(const KernelContext& ctx, const Shape& data_shape, const Shape& indices_shape,
                      int64_t axis, const std::vector<int64_t>& positions,
                      std::vector<int64_t>* offsets) {
  const auto rank = static_cast<int64_t>(data_shape.size());
  const std::vector<int64_t> data_strides = stridesOf(data_shape);
  offsets->resize(positions.size());
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  int64_t base = 0;  // offset of `index` with its `axis` coordinate left out
  for (size_t e = 0; e < positions.size(); ++e) {
    int64_t position = 0;
    LLMC_RETURN_IF_ERROR(normalizeIndex(ctx, positions[e], data_shape[axis], axis, &position));
    (*offsets)[e] = base + position * data_strides[axis];
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t step = d == axis ? 0 : data_strides[d];
      if (++index[d] < indices_shape[d]) {
        base += step;
        break;
      }
      base -= step * (indices_shape[d] - 1);
      index[d] = 0;
    }
  }
  return okStatus();
}

// Checks the shared shape rules of GatherElements/ScatterElements: same rank, and indices no
// larger than data outside `axis`.
Status checkElementsShapes(const KernelContext& ctx, const Tensor& data, const Tensor& indices,
                           int64_t axis) {
  bool fits = indices.rank() == data.rank();
  for (int64_t d = 0; fits && d < data.rank(); ++d) {
    fits = d == axis || indices.dim(d) <= data.dim(d);
  }
  if (!fits) {
    return kernelError(ctx, "indices shape " + shapeToString(indices.shape()) +
                                " does not fit data shape " + shapeToString(data.shape()) +
                                " outside axis " + std::to_string(axis));
  }
  return okStatus();
}

// GatherElements: out[i...] = data[i... with indices[i...] on `axis`].
Status gatherElementsKernel(KernelContext& ctx) {
  const Tensor *data = nullptr, *indices = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "data", &data));
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 1, "indices", &indices));
  LLMC_RETURN_IF_ERROR(requireIndexDType(ctx, *indices));
  int64_t axis = 0;
  LLMC_RETURN_IF_ERROR(
      normalizeAxis(ctx.params().getInt("axis", 0), data->rank(), ctx.nodeName(), &axis));
  LLMC_RETURN_IF_ERROR(checkElementsShapes(ctx, *data, *indices, axis));
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, data->dtype(), indices->shape(), &output));
  if (ctx.shapeOnly()) return okStatus();

  std::vector<int64_t> positions, offsets;
  LLMC_RETURN_IF_ERROR(readIntInput(ctx, 1, "indices", &positions));
  LLMC_RETURN_IF_ERROR(
      elementOffsets(ctx, data->shape(), indices->shape(), axis, positions, &offsets));
  const size_t element_size = dtypeSize(data->dtype());
  const auto* src = static_cast<const std::byte*>(data->data());
  auto* dst = static_cast<std::byte*>(output->data());
  for (size_t e = 0; e < offsets.size(); ++e) {
    std::memcpy(dst + e * element_size, src + static_cast<size_t>(offsets[e]) * element_size,
                element_size);
  }
  return okStatus();
}

// The offset in `data` that each index tuple (the last dim of `indices`, k entries) selects,
// for tuples within one batch; checks every entry.
Status tupleOffsets(const KernelContext& ctx, const Shape& data_shape, int64_t first_axis,
                    const int64_t* tuples, int64_t tuple_count, int64_t k,
                    std::vector<int64_t>* offsets) {
  const std::vector<int64_t> data_strides = stridesOf(data_shape);
  offsets->resize(static_cast<size_t>(tuple_count));
  for (int64_t n = 0; n < tuple_count; ++n) {
    int64_t offset = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t axis = first_axis + j;
      int64_t position = 0;
      LLMC_RETURN_IF_ERROR(
          normalizeIndex(ctx, tuples[n * k + j], data_shape[axis], axis, &position));
      offset += position * data_strides[axis];
    }
    (*offsets)[n] = offset;
  }
  return okStatus();
}

// GatherND: for each batch (the first batch_dims dims, shared by data and indices), each
// index tuple indices[..., :] selects the slice data[batch, tuple..., :].
Status gatherNDKernel(KernelContext& ctx) {
  const Tensor *data = nullptr, *indices = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "data", &data));
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 1, "indices", &indices));
  LLMC_RETURN_IF_ERROR(requireIndexDType(ctx, *indices));
  const int64_t batch_dims = ctx.params().getInt("batch_dims", 0);
  const int64_t r = data->rank();
  const int64_t q = indices->rank();
  if (q < 1 || batch_dims < 0 || batch_dims >= std::min(q, r)) {
    return kernelError(ctx, "GatherND batch_dims=" + std::to_string(batch_dims) +
                                " does not fit data rank " + std::to_string(r) +
                                " and indices rank " + std::to_string(q));
  }
  const int64_t k = indices->dim(q - 1);
  if (k < 1 || k > r - batch_dims) {
    return kernelError(ctx, "GatherND indices' last dim " + std::to_string(k) + " must be in [1, " +
                                std::to_string(r - batch_dims) + "]");
  }
  for (int64_t d = 0; d < batch_dims; ++d) {
    if (indices->dim(d) != data->dim(d)) {
      return kernelError(ctx, "GatherND batch dims differ: data " + shapeToString(data->shape()) +
                                  ", indices " + shapeToString(indices->shape()));
    }
  }
  Shape shape(indices->shape().begin(), indices->shape().end() - 1);
  shape.insert(shape.end(), data->shape().begin() + batch_dims + k, data->shape().end());
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, data->dtype(), shape, &output));
  if (ctx.shapeOnly()) return okStatus();

  std::vector<int64_t> positions, offsets;
  LLMC_RETURN_IF_ERROR(readIntInput(ctx, 1, "indices", &positions));
  const int64_t batches = productOf(data->shape(), 0, batch_dims);
  const int64_t tuples = productOf(indices->shape(), batch_dims, q - 1);
  const int64_t batch_size = productOf(data->shape(), batch_dims, r);
  const size_t element_size = dtypeSize(data->dtype());
  const auto slice_bytes =
      static_cast<size_t>(productOf(data->shape(), batch_dims + k, r)) * element_size;
  const auto* src = static_cast<const std::byte*>(data->data());
  auto* dst = static_cast<std::byte*>(output->data());
  for (int64_t b = 0; b < batches; ++b) {
    LLMC_RETURN_IF_ERROR(tupleOffsets(ctx, data->shape(), batch_dims,
                                      positions.data() + b * tuples * k, tuples, k, &offsets));
    for (int64_t offset : offsets) {
      if (slice_bytes == 0) break;
      std::memcpy(dst, src + static_cast<size_t>(b * batch_size + offset) * element_size,
                  slice_bytes);
      dst += slice_bytes;
    }
  }
  return okStatus();
}

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

Status parseReduction(const KernelContext& ctx, Reduction* reduction) {
  const std::string name = ctx.params().getString("reduction", "none");
  if (name == "none") {
    *reduction = Reduction::kNone;
  } else if (name == "add") {
    *reduction = Reduction::kAdd;
  } else if (name == "mul") {
    *reduction = Reduction::kMul;
  } else if (name == "max") {
    *reduction = Reduction::kMax;
  } else if (name == "min") {
    *reduction = Reduction::kMin;
  } else {
    return kernelError(ctx, "unknown reduction '" + name + "'");
  }
  return okStatus();
}

// Writes update slice n (`slice` elements of `updates`) to `output` at offsets[n], combining
// with what is there per `reduction`, in order (later updates see earlier ones).
Status scatterSlices(const KernelContext& ctx, Reduction reduction, Tensor& output,
                     const Tensor& updates, const std::vector<int64_t>& offsets, int64_t slice) {
  const size_t element_size = dtypeSize(output.dtype());
  if (reduction == Reduction::kNone) {
    const auto* src = static_cast<const std::byte*>(updates.data());
    auto* dst = static_cast<std::byte*>(output.data());
    const size_t slice_bytes = static_cast<size_t>(slice) * element_size;
    for (size_t n = 0; n < offsets.size() && slice_bytes > 0; ++n) {
      std::memcpy(dst + static_cast<size_t>(offsets[n]) * element_size, src + n * slice_bytes,
                  slice_bytes);
    }
    return okStatus();
  }
  const bool supported = dispatchAll(output.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = updates.data<T>();
    T* dst = output.data<T>();
    for (size_t n = 0; n < offsets.size(); ++n) {
      for (int64_t s = 0; s < slice; ++s) {
        T& target = dst[offsets[n] + s];
        const auto current = load(target);
        const auto update = load(src[static_cast<int64_t>(n) * slice + s]);
        switch (reduction) {
          case Reduction::kAdd: target = store<T>(current + update); break;
          case Reduction::kMul: target = store<T>(current * update); break;
          case Reduction::kMax: target = store<T>(current < update ? update : current); break;
          case Reduction::kMin: target = store<T>(update < current ? update : current); break;
          case Reduction::kNone: break;
        }
      }
    }
  });
  if (!supported) {
    return unimplemented("node '" + ctx.nodeName() + "': scatter reduction on dtype " +
                         dtypeName(output.dtype()));
  }
  return okStatus();
}

// ScatterND: a copy of data where each index tuple's slice is replaced (or reduced) by the
// matching slice of updates.
Status scatterNDKernel(KernelContext& ctx) {
  const Tensor *data = nullptr, *indices = nullptr, *updates = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "data", &data));
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 1, "indices", &indices));
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 2, "updates", &updates));
  LLMC_RETURN_IF_ERROR(requireIndexDType(ctx, *indices));
  Reduction reduction;
  LLMC_RETURN_IF_ERROR(parseReduction(ctx, &reduction));
  const int64_t r = data->rank();
  const int64_t q = indices->rank();
  const int64_t k = q < 1 ? -1 : indices->dim(q - 1);
  if (k < 1 || k > r) {
    return kernelError(ctx, "ScatterND indices shape " + shapeToString(indices->shape()) +
                                " does not fit data of rank " + std::to_string(r));
  }
  Shape expected(indices->shape().begin(), indices->shape().end() - 1);
  expected.insert(expected.end(), data->shape().begin() + k, data->shape().end());
  if (updates->shape() != expected || updates->dtype() != data->dtype()) {
    return kernelError(ctx, std::string("ScatterND updates must be ") + dtypeName(data->dtype()) +
                                " " + shapeToString(expected) + ", got " +
                                dtypeName(updates->dtype()) + " " +
                                shapeToString(updates->shape()));
  }
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, data->dtype(), data->shape(), &output));
  if (ctx.shapeOnly()) return okStatus();
  if (data->sizeBytes() > 0) std::memcpy(output->data(), data->data(), data->sizeBytes());

  std::vector<int64_t> positions, offsets;
  LLMC_RETURN_IF_ERROR(readIntInput(ctx, 1, "indices", &positions));
  const int64_t tuples = productOf(indices->shape(), 0, q - 1);
  LLMC_RETURN_IF_ERROR(tupleOffsets(ctx, data->shape(), 0, positions.data(), tuples, k, &offsets));
  return scatterSlices(ctx, reduction, *output, *updates, offsets, productOf(data->shape(), k, r));
}

// ScatterElements: a copy of data where data[i... with indices[i...] on axis] takes (or is
// reduced with) updates[i...].
Status scatterElementsKernel(KernelContext& ctx) {
  const Tensor *data = nullptr, *indices = nullptr, *updates = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "data", &data));
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 1, "indices", &indices));
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 2, "updates", &updates));
  LLMC_RETURN_IF_ERROR(requireIndexDType(ctx, *indices));
  Reduction reduction;
  LLMC_RETURN_IF_ERROR(parseReduction(ctx, &reduction));
  int64_t axis = 0;
  LLMC_RETURN_IF_ERROR(
      normalizeAxis(ctx.params().getInt("axis", 0), data->rank(), ctx.nodeName(), &axis));
  LLMC_RETURN_IF_ERROR(checkElementsShapes(ctx, *data, *indices, axis));
  if (updates->shape() != indices->shape() || updates->dtype() != data->dtype()) {
    return kernelError(ctx, std::string("ScatterElements updates must be ") +
                                dtypeName(data->dtype()) + " " + shapeToString(indices->shape()) +
                                ", got " + dtypeName(updates->dtype()) + " " +
                                shapeToString(updates->shape()));
  }
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, data->dtype(), data->shape(), &output));
  if (ctx.shapeOnly()) return okStatus();
  if (data->sizeBytes() > 0) std::memcpy(output->data(), data->data(), data->sizeBytes());

  std::vector<int64_t> positions, offsets;
  LLMC_RETURN_IF_ERROR(readIntInput(ctx, 1, "indices", &positions));
  LLMC_RETURN_IF_ERROR(
      elementOffsets(ctx, data->shape(), indices->shape(), axis, positions, &offsets));
  return scatterSlices(ctx, reduction, *output, *updates, offsets, 1);
}

// NonZero: the indices of X's nonzero elements, [rank, count] int64, in row-major order of the
// elements (ONNX's order). Its shape depends on the data: a shape-only run with no data fails,
// and the compiler leaves the shape to run time (a Mixture-of-Experts export routes tokens
// with it).
Status nonZeroKernel(KernelContext& ctx) {
  const Tensor* x = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "X", &x));
  if (!x->hasData()) return unavailable("NonZero's result size depends on X's values");
  const int64_t n = x->numElements();
  std::vector<int64_t> found;  // flat indices of the nonzero elements (NaN is nonzero)
  auto collect = [&](auto element) {
    for (int64_t i = 0; i < n; ++i)
      if (element(i) != 0) found.push_back(i);
  };
  switch (x->dtype()) {
    case DType::kFloat32: collect([&](int64_t i) { return x->data<float>()[i]; }); break;
    case DType::kFloat64: collect([&](int64_t i) { return x->data<double>()[i]; }); break;
    case DType::kFloat16: collect([&](int64_t i) { return toFloat(x->data<Float16>()[i]); }); break;
    case DType::kBFloat16:
      collect([&](int64_t i) { return toFloat(x->data<BFloat16>()[i]); });
      break;
    case DType::kInt64: collect([&](int64_t i) { return x->data<int64_t>()[i]; }); break;
    case DType::kInt32: collect([&](int64_t i) { return x->data<int32_t>()[i]; }); break;
    case DType::kInt16: collect([&](int64_t i) { return x->data<int16_t>()[i]; }); break;
    case DType::kUInt16: collect([&](int64_t i) { return x->data<uint16_t>()[i]; }); break;
    case DType::kInt8: collect([&](int64_t i) { return x->data<int8_t>()[i]; }); break;
    case DType::kUInt8:
    case DType::kBool: collect([&](int64_t i) { return x->data<uint8_t>()[i]; }); break;
    default: return kernelError(ctx, std::string("NonZero does not take ") + dtypeName(x->dtype()));
  }
  // A scalar counts as one element of a 1-D tensor (as ONNX Runtime does): [1, count].
  const Shape dims = x->rank() == 0 ? Shape{1} : x->shape();
  const int64_t rank = static_cast<int64_t>(dims.size()),
                count = static_cast<int64_t>(found.size());
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kInt64, {rank, count}, &out));
  if (ctx.shapeOnly()) return okStatus();
  int64_t* indices = out->data<int64_t>();
  for (int64_t j = 0; j < count; ++j) {
    int64_t flat = found[static_cast<size_t>(j)];
    for (int64_t d = rank - 1; d >= 0; --d) {
      indices[d * count + j] = flat % dims[static_cast<size_t>(d)];
      flat /= dims[static_cast<size_t>(d)];
    }
  }
  return okStatus();
}

// OneHot: a new axis of size depth holding values[1] where the index points and values[0]
// elsewhere. Negative indices count from depth; indices outside [-depth, depth) select none.
Status oneHotKernel(KernelContext& ctx) {
  const Tensor *indices = nullptr, *depth_input = nullptr, *values = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "indices", &indices));
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 1, "depth", &depth_input));
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 2, "values", &values));
  if (depth_input->numElements() != 1) {
    return kernelError(
        ctx, "OneHot depth must be a scalar, got shape " + shapeToString(depth_input->shape()));
  }
  double depth_value = 0;
  Status status = readScalarDouble(depth_input, &depth_value);
  if (status.code() == StatusCode::kUnavailable) return status;
  if (!status.ok()) return kernelError(ctx, "OneHot depth: " + status.message());
  if (!(depth_value >= 1) || depth_value > 1e15) {
    return kernelError(ctx, "OneHot depth " + std::to_string(depth_value) + " is not >= 1");
  }
  const auto depth = static_cast<int64_t>(depth_value);
  if (values->numElements() != 2) {
    return kernelError(
        ctx, "OneHot values must hold [off, on], got shape " + shapeToString(values->shape()));
  }
  const int64_t rank = indices->rank() + 1;
  int64_t axis = 0;
  LLMC_RETURN_IF_ERROR(normalizeAxis(ctx.params().getInt("axis", -1), rank, ctx.nodeName(), &axis));
  Shape shape = indices->shape();
  shape.insert(shape.begin() + axis, depth);
  LLMC_RETURN_IF_ERROR(checkOutputShape(ctx, shape, values->dtype()));
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, values->dtype(), shape, &output));
  if (ctx.shapeOnly()) return okStatus();

  std::vector<double> positions(static_cast<size_t>(indices->numElements()));
  const bool numeric = dispatchNumeric(indices->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < positions.size(); ++i) {
      positions[i] = static_cast<double>(load(indices->data<T>()[i]));
    }
  });
  if (!numeric) {
    return unimplemented("node '" + ctx.nodeName() + "': OneHot indices of dtype " +
                         dtypeName(indices->dtype()));
  }
  const size_t element_size = dtypeSize(values->dtype());
  const auto* off = static_cast<const std::byte*>(values->data());
  const std::byte* on = off + element_size;
  auto* dst = static_cast<std::byte*>(output->data());
  for (int64_t i = 0; i < output->numElements(); ++i) {
    std::memcpy(dst + static_cast<size_t>(i) * element_size, off, element_size);
  }
  const int64_t inner = productOf(indices->shape(), axis, indices->rank());
  const int64_t outer = productOf(indices->shape(), 0, axis);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const double value = std::trunc(positions[static_cast<size_t>(o * inner + i)]);
      if (!(value >= -static_cast<double>(depth) && value < static_cast<double>(depth))) continue;
      int64_t position = static_cast<int64_t>(value);
      if (position < 0) position += depth;
      std::memcpy(dst + static_cast<size_t>((o * depth + position) * inner + i) * element_size, on,
                  element_size);
    }
  }
  return okStatus();
}

}  // namespace

void registerIndexKernels(KernelRegistry& registry) {
  registry.add({"Gather", 2, 2, 1, 1, gatherKernel});
  registry.add({"GatherElements", 2, 2, 1, 1, gatherElementsKernel});
  registry.add({"GatherND", 2, 2, 1, 1, gatherNDKernel});
  registry.add({"ScatterND", 3, 3, 1, 1, scatterNDKernel});
  registry.add({"ScatterElements", 3, 3, 1, 1, scatterElementsKernel});
  registry.add({"NonZero", 1, 1, 1, 1, nonZeroKernel});
  registry.add({"OneHot", 3, 3, 1, 1, oneHotKernel});
}

}  // namespace llmc
