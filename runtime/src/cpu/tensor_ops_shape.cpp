// CPU reference kernels for ops that change only a tensor's shape, or make a tensor from a
// shape: Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout, Shape, Size,
// ConstantOfShape, Range.
#include <cmath>
#include <cstring>

#include "cpu/tensor_ops_common.h"

namespace llmc {
namespace {

// Reshape: one -1 is inferred; 0 copies the input dim unless allowzero=1.
Status reshapeKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "data", &data));
  std::vector<int64_t> requested;
  LLMC_RETURN_IF_ERROR(readIntInput(ctx, 1, "shape", &requested));
  const bool allow_zero = ctx.params().getInt("allowzero", 0) != 0;

  Shape shape(requested.size());
  int64_t inferred_axis = -1;
  bool has_zero = false;
  int64_t known_count = 1;
  for (size_t i = 0; i < requested.size(); ++i) {
    int64_t dim = requested[i];
    if (dim == -1) {
      if (inferred_axis >= 0) return kernelError(ctx, "Reshape shape has more than one -1");
      inferred_axis = static_cast<int64_t>(i);
      continue;
    }
    if (dim < -1) return kernelError(ctx, "Reshape shape has invalid dim " + std::to_string(dim));
    if (dim == 0 && !allow_zero) {
      if (static_cast<int64_t>(i) >= data->rank()) {
        return kernelError(ctx, "Reshape shape has 0 at position " + std::to_string(i) +
                                    " but the input " + shapeToString(data->shape()) +
                                    " has no such dim");
      }
      dim = data->dim(static_cast<int64_t>(i));
    }
    has_zero = has_zero || dim == 0;
    shape[i] = dim;
    if (__builtin_mul_overflow(known_count, dim, &known_count)) {
      return kernelError(ctx, "Reshape shape " + shapeToString(requested) + " is too large");
    }
  }
  if (allow_zero && has_zero && inferred_axis >= 0) {
    return kernelError(ctx, "Reshape with allowzero=1 cannot have both 0 and -1 in its shape");
  }
  const int64_t count = data->numElements();
  if (inferred_axis >= 0) {
    if (known_count == 0 || count % known_count != 0) {
      return kernelError(ctx, "cannot reshape " + shapeToString(data->shape()) + " to " +
                                  shapeToString(requested) + ": the -1 dim cannot be inferred");
    }
    shape[static_cast<size_t>(inferred_axis)] = count / known_count;
  } else if (known_count != count) {
    return kernelError(ctx, "cannot reshape " + shapeToString(data->shape()) + " (" +
                                std::to_string(count) + " elements) to " + shapeToString(shape));
  }

  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, data->dtype(), shape, &output));
  if (ctx.shapeOnly()) return okStatus();
  if (data->sizeBytes() > 0) std::memcpy(output->data(), data->data(), data->sizeBytes());
  return okStatus();
}

// Copies `data` into a new output of `shape` (same element count).
Status reshapeTo(KernelContext& ctx, const Tensor& data, const Shape& shape) {
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, data.dtype(), shape, &output));
  if (ctx.shapeOnly()) return okStatus();
  if (data.sizeBytes() > 0) std::memcpy(output->data(), data.data(), data.sizeBytes());
  return okStatus();
}

// Flatten: [d0 * ... * d(axis-1), d(axis) * ... * d(r-1)], axis in [-r, r].
Status flattenKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "input", &data));
  const int64_t rank = data->rank();
  int64_t axis = ctx.params().getInt("axis", 1);
  if (axis < -rank || axis > rank) {
    return kernelError(ctx, "Flatten axis " + std::to_string(axis) +
                                " is out of range for a tensor of rank " + std::to_string(rank));
  }
  if (axis < 0) axis += rank;
  int64_t outer = 1;
  int64_t inner = 1;
  for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : inner) *= data->dim(i);
  return reshapeTo(ctx, *data, {outer, inner});
}

// Squeeze: removes the listed dims (each must be 1), or every dim of 1 when axes is absent.
Status squeezeKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "data", &data));
  const int64_t rank = data->rank();
  std::vector<bool> removed(static_cast<size_t>(rank), false);
  std::vector<int64_t> axes;
  if (ctx.input(1)) LLMC_RETURN_IF_ERROR(readIntInput(ctx, 1, "axes", &axes));
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i) removed[i] = data->dim(i) == 1;
  }
  for (int64_t axis : axes) {
    int64_t normalized = 0;
    LLMC_RETURN_IF_ERROR(normalizeAxis(axis, rank, ctx.nodeName(), &normalized));
    if (removed[normalized]) {
      return kernelError(ctx, "Squeeze axis " + std::to_string(axis) + " is listed twice");
    }
    if (data->dim(normalized) != 1) {
      return kernelError(ctx, "cannot squeeze axis " + std::to_string(axis) + " of shape " +
                                  shapeToString(data->shape()) + ": its dim is not 1");
    }
    removed[normalized] = true;
  }
  Shape shape;
  for (int64_t i = 0; i < rank; ++i) {
    if (!removed[i]) shape.push_back(data->dim(i));
  }
  return reshapeTo(ctx, *data, shape);
}

// Unsqueeze: inserts dims of 1 at the listed positions of the output.
Status unsqueezeKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "data", &data));
  std::vector<int64_t> axes;
  LLMC_RETURN_IF_ERROR(readIntInput(ctx, 1, "axes", &axes));
  const int64_t rank = data->rank() + static_cast<int64_t>(axes.size());
  std::vector<bool> inserted(static_cast<size_t>(rank), false);
  for (int64_t axis : axes) {
    int64_t normalized = 0;
    LLMC_RETURN_IF_ERROR(normalizeAxis(axis, rank, ctx.nodeName(), &normalized));
    if (inserted[normalized]) {
      return kernelError(ctx, "Unsqueeze axis " + std::to_string(axis) + " is listed twice");
    }
    inserted[normalized] = true;
  }
  Shape shape(static_cast<size_t>(rank), 1);
  int64_t next_input_dim = 0;
  for (int64_t i = 0; i < rank; ++i) {
    if (!inserted[i]) shape[i] = data->dim(next_input_dim++);
  }
  return reshapeTo(ctx, *data, shape);
}

Status identityKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "input", &data));
  return copyInputToOutput(ctx, *data, 0);
}

// numpy's legacy generator (np.random.seed(seed), then np.random.uniform(0, 1)): MT19937
// with its 53-bit doubles. Training-mode Dropout draws from it so that its masks are those of
// the ONNX node tests, which were made with numpy.
class NumpyLegacyRandom {
 public:
  explicit NumpyLegacyRandom(uint32_t seed) {
    state_[0] = seed;
    for (uint32_t i = 1; i < kSize; ++i) {
      state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + i;
    }
  }

  double nextDouble() {
    const uint32_t high = next() >> 5;
    const uint32_t low = next() >> 6;
    return (high * 67108864.0 + low) / 9007199254740992.0;
  }

 private:
  static constexpr uint32_t kSize = 624;

  uint32_t next() {
    if (position_ >= kSize) twist();
    uint32_t y = state_[position_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
  }

  void twist() {
    for (uint32_t i = 0; i < kSize; ++i) {
      const uint32_t y = (state_[i] & 0x80000000u) | (state_[(i + 1) % kSize] & 0x7fffffffu);
      state_[i] = state_[(i + 397) % kSize] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    position_ = 0;
  }

  uint32_t state_[kSize];
  uint32_t position_ = kSize;
};

// Dropout: the identity (and an all-true mask) in inference or with ratio 0. In training
// mode, drops each element whose uniform draw is below `ratio` and scales the rest by
// 1 / (1 - ratio); the draws come from numpy's legacy generator seeded with `seed` (0 when
// absent), in row-major order.
Status dropoutKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "data", &data));
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, data->dtype(), data->shape(), &output));
  Tensor* mask = nullptr;
  if (ctx.numOutputs() > 1) {
    LLMC_RETURN_IF_ERROR(ctx.allocateOutput(1, DType::kBool, data->shape(), &mask));
  }
  if (ctx.shapeOnly()) return okStatus();

  double ratio = 0.5;
  double training = 0;
  Status status = okStatus();
  if (ctx.input(1)) status = readScalarDouble(ctx.input(1), &ratio);
  if (status.ok() && ctx.input(2)) status = readScalarDouble(ctx.input(2), &training);
  if (!status.ok()) return kernelError(ctx, "Dropout: " + status.message());
  bool* mask_values = mask ? mask->data<bool>() : nullptr;
  const int64_t count = data->numElements();
  if (training == 0 || ratio == 0) {
    if (data->sizeBytes() > 0) std::memcpy(output->data(), data->data(), data->sizeBytes());
    for (int64_t i = 0; mask_values && i < count; ++i) mask_values[i] = true;
    return okStatus();
  }
  if (!(ratio > 0 && ratio < 1)) {
    return kernelError(ctx, "Dropout ratio " + std::to_string(ratio) + " is not in [0, 1)");
  }
  NumpyLegacyRandom random(static_cast<uint32_t>(ctx.params().getInt("seed", 0)));
  const float ratio_f = static_cast<float>(ratio);
  const float scale = 1.0f / (1.0f - ratio_f);
  const bool supported = dispatchFloat(data->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = data->data<T>();
    T* out = output->data<T>();
    for (int64_t i = 0; i < count; ++i) {
      const bool keep = random.nextDouble() >= static_cast<double>(ratio_f);
      out[i] = store<T>(keep ? load(in[i]) * scale : 0.0f);
      if (mask_values) mask_values[i] = keep;
    }
  });
  if (!supported) {
    return unimplemented("node '" + ctx.nodeName() + "': training-mode Dropout of dtype " +
                         dtypeName(data->dtype()));
  }
  return okStatus();
}

// Shape: the dims [start, end) of the input as int64; start and end are clamped to [0, r].
Status shapeKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "data", &data));
  const int64_t rank = data->rank();
  auto clamp = [rank](int64_t value) {
    if (value < 0) value += rank;
    return std::min(std::max<int64_t>(value, 0), rank);
  };
  const int64_t start = clamp(ctx.params().getInt("start", 0));
  const int64_t end = clamp(ctx.params().getInt("end", rank));
  const int64_t count = std::max<int64_t>(end - start, 0);
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kInt64, {count}, &output));
  if (ctx.shapeOnly()) return okStatus();
  for (int64_t i = 0; i < count; ++i) output->data<int64_t>()[i] = data->dim(start + i);
  return okStatus();
}

Status sizeKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "data", &data));
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kInt64, {}, &output));
  if (ctx.shapeOnly()) return okStatus();
  output->data<int64_t>()[0] = data->numElements();
  return okStatus();
}

// ConstantOfShape: the shape comes from input 0; the value (and dtype) from the one-element
// tensor parameter `value`, float32 0 by default.
Status constantOfShapeKernel(KernelContext& ctx) {
  std::vector<int64_t> dims;
  LLMC_RETURN_IF_ERROR(readIntInput(ctx, 0, "input", &dims));
  const Tensor* value = ctx.params().getTensor("value");
  DType dtype = DType::kFloat32;
  if (value) {
    if (value->numElements() != 1 || !value->hasData()) {
      return kernelError(ctx, "ConstantOfShape value must have exactly one element, got shape " +
                                  shapeToString(value->shape()));
    }
    dtype = value->dtype();
  }
  const size_t element_size = dtypeSize(dtype);
  if (element_size == 0) {
    return unimplemented("node '" + ctx.nodeName() + "': ConstantOfShape of dtype " +
                         dtypeName(dtype));
  }
  Shape shape(dims.begin(), dims.end());
  LLMC_RETURN_IF_ERROR(checkOutputShape(ctx, shape, dtype));
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, dtype, shape, &output));
  if (ctx.shapeOnly() || !value) return okStatus();  // outputs start zeroed
  auto* out = static_cast<std::byte*>(output->data());
  for (int64_t i = 0; i < output->numElements(); ++i) {
    std::memcpy(out + static_cast<size_t>(i) * element_size, value->data(), element_size);
  }
  return okStatus();
}

// Range: max(ceil((limit - start) / delta), 0) values start + i * delta. Integer types are
// computed exactly; float types in double.
Status rangeKernel(KernelContext& ctx) {
  const Tensor* operands[3] = {ctx.input(0), ctx.input(1), ctx.input(2)};
  const char* names[3] = {"start", "limit", "delta"};
  for (int i = 0; i < 3; ++i) {
    if (!operands[i]) return kernelError(ctx, std::string("missing input '") + names[i] + "'");
    if (operands[i]->numElements() != 1) {
      return kernelError(ctx, std::string("Range ") + names[i] + " must be a scalar, got shape " +
                                  shapeToString(operands[i]->shape()));
    }
    if (operands[i]->dtype() != operands[0]->dtype()) {
      return kernelError(ctx, std::string("Range inputs differ in dtype: start is ") +
                                  dtypeName(operands[0]->dtype()) + ", " + names[i] + " is " +
                                  dtypeName(operands[i]->dtype()));
    }
    if (!operands[i]->hasData()) return unavailable("Range inputs not known at compile time");
  }
  const DType dtype = operands[0]->dtype();
  Status status;
  int64_t count = 0;
  Tensor* output = nullptr;
  bool supported = dispatchNumeric(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T start = operands[0]->data<T>()[0];
    const T limit = operands[1]->data<T>()[0];
    const T delta = operands[2]->data<T>()[0];
    if constexpr (kIsFloating<T>) {
      const double s = load(start), l = load(limit), d = load(delta);
      if (d == 0 || !std::isfinite(s) || !std::isfinite(l) || !std::isfinite(d)) {
        status = kernelError(ctx, "Range needs finite start and limit and a nonzero delta");
        return;
      }
      const double length = std::ceil((l - s) / d);
      if (length > 4.0e18) {
        status = kernelError(ctx, "Range output of " + std::to_string(length) + " is too large");
        return;
      }
      count = length > 0 ? static_cast<int64_t>(length) : 0;
    } else {
      const auto s = static_cast<__int128>(start), l = static_cast<__int128>(limit),
                 d = static_cast<__int128>(delta);
      if (d == 0) {
        status = kernelError(ctx, "Range delta is 0");
        return;
      }
      // Ceiling division of (l - s) by d, for either sign.
      const __int128 diff = l - s;
      __int128 length = diff / d;
      if (length * d != diff && ((diff > 0) == (d > 0))) ++length;
      count = length > 0 ? static_cast<int64_t>(length) : 0;
    }
    status = checkOutputShape(ctx, {count}, dtype);
    if (status.ok()) status = ctx.allocateOutput(0, dtype, {count}, &output);
    if (!status.ok() || ctx.shapeOnly()) return;
    T* out = output->data<T>();
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (kIsFloating<T>) {
        out[i] = store<T>(static_cast<double>(load(start)) +
                          static_cast<double>(i) * static_cast<double>(load(delta)));
      } else {
        out[i] = static_cast<T>(static_cast<__int128>(start) + static_cast<__int128>(i) * delta);
      }
    }
  });
  if (!supported) {
    return unimplemented("node '" + ctx.nodeName() + "': Range of dtype " + dtypeName(dtype));
  }
  return status;
}

}  // namespace

void registerShapeKernels(KernelRegistry& registry) {
  registry.add({"Reshape", 2, 2, 1, 1, reshapeKernel});
  registry.add({"Flatten", 1, 1, 1, 1, flattenKernel});
  registry.add({"Squeeze", 1, 2, 1, 1, squeezeKernel});
  registry.add({"Unsqueeze", 2, 2, 1, 1, unsqueezeKernel});
  registry.add({"Identity", 1, 1, 1, 1, identityKernel});
  registry.add({"Dropout", 1, 3, 1, 2, dropoutKernel});
  registry.add({"Shape", 1, 1, 1, 1, shapeKernel});
  registry.add({"Size", 1, 1, 1, 1, sizeKernel});
  registry.add({"ConstantOfShape", 1, 1, 1, 1, constantOfShapeKernel});
  registry.add({"Range", 3, 3, 1, 1, rangeKernel});
}

}  // namespace llmc
