// CPU reference kernels that move elements to new positions: Transpose, Concat, Split, Slice,
// Expand, Tile, Pad, Trilu. All work on raw bytes of the element size, so every dtype works.
#include <algorithm>
#include <cstring>
#include <limits>

#include "cpu/tensor_ops_common.h"

namespace llmc {
namespace {

// Transpose: output dim i is input dim perm[i]; perm defaults to the reversed dims.
Status transposeKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "data", &data));
  const int64_t rank = data->rank();
  std::vector<int64_t> perm = ctx.params().getInts("perm");
  if (!ctx.params().has("perm")) {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  if (static_cast<int64_t>(perm.size()) != rank) {
    return kernelError(ctx, "Transpose perm has " + std::to_string(perm.size()) +
                                " entries for a tensor of rank " + std::to_string(rank));
  }
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t axis : perm) {
    if (axis < 0 || axis >= rank || seen[axis]) {
      return kernelError(ctx, "Transpose perm " + shapeToString(perm) + " is not a permutation");
    }
    seen[axis] = true;
  }
  const std::vector<int64_t> input_strides = stridesOf(data->shape());
  Shape shape(static_cast<size_t>(rank));
  std::vector<int64_t> src_strides(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) {
    shape[i] = data->dim(perm[i]);
    src_strides[i] = input_strides[perm[i]];
  }
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, data->dtype(), shape, &output));
  if (ctx.shapeOnly()) return okStatus();
  copyStrided(dtypeSize(data->dtype()), shape, data->data(), 0, src_strides, output->data(), 0,
              stridesOf(shape));
  return okStatus();
}

// Concat: inputs of the same rank and dtype, equal in every dim but `axis`.
Status concatKernel(KernelContext& ctx) {
  const size_t count = ctx.numInputs();
  if (count == 0) return kernelError(ctx, "Concat needs at least one input");
  if (!ctx.params().has("axis")) return kernelError(ctx, "Concat needs an 'axis' attribute");
  std::vector<const Tensor*> inputs(count);
  for (size_t i = 0; i < count; ++i) {
    LLMC_RETURN_IF_ERROR(requireInput(ctx, i, "inputs", &inputs[i]));
  }
  const Tensor& first = *inputs[0];
  int64_t axis = 0;
  LLMC_RETURN_IF_ERROR(
      normalizeAxis(ctx.params().getInt("axis", 0), first.rank(), ctx.nodeName(), &axis));
  Shape shape = first.shape();
  shape[axis] = 0;
  for (size_t i = 0; i < count; ++i) {
    const Tensor& input = *inputs[i];
    bool compatible = input.dtype() == first.dtype() && input.rank() == first.rank();
    for (int64_t d = 0; compatible && d < first.rank(); ++d) {
      compatible = d == axis || input.dim(d) == first.dim(d);
    }
    if (!compatible) {
      return kernelError(ctx, std::string("Concat input ") + std::to_string(i) + " (" +
                                  dtypeName(input.dtype()) + " " + shapeToString(input.shape()) +
                                  ") does not match input 0 (" + dtypeName(first.dtype()) + " " +
                                  shapeToString(first.shape()) + ") outside axis " +
                                  std::to_string(axis));
    }
    shape[axis] += input.dim(axis);
  }
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, first.dtype(), shape, &output));
  if (ctx.shapeOnly()) return okStatus();

  const size_t element_size = dtypeSize(first.dtype());
  const int64_t outer = productOf(shape, 0, axis);
  const auto inner_bytes =
      static_cast<size_t>(productOf(shape, axis + 1, first.rank())) * element_size;
  auto* dst = static_cast<std::byte*>(output->data());
  for (int64_t o = 0; o < outer; ++o) {
    for (const Tensor* input : inputs) {
      const size_t chunk = static_cast<size_t>(input->dim(axis)) * inner_bytes;
      if (chunk == 0) continue;
      std::memcpy(dst, static_cast<const std::byte*>(input->data()) + o * chunk, chunk);
      dst += chunk;
    }
  }
  return okStatus();
}

// Split: sizes along `axis` from the `split` input, else ctx.numOutputs() chunks of
// ceil(dim / n) with a smaller last one (opset 18's num_outputs).
Status splitKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "input", &data));
  int64_t axis = 0;
  LLMC_RETURN_IF_ERROR(
      normalizeAxis(ctx.params().getInt("axis", 0), data->rank(), ctx.nodeName(), &axis));
  const auto outputs = static_cast<int64_t>(ctx.numOutputs());
  const int64_t dim = data->dim(axis);
  std::vector<int64_t> sizes;
  if (ctx.input(1) && ctx.input(1)->numElements() > 0) {
    LLMC_RETURN_IF_ERROR(readIntInput(ctx, 1, "split", &sizes));
    int64_t total = 0;
    for (int64_t size : sizes) {
      if (size < 0) return kernelError(ctx, "Split has a negative size " + std::to_string(size));
      total += size;
    }
    if (static_cast<int64_t>(sizes.size()) != outputs || total != dim) {
      return kernelError(ctx, "Split sizes " + shapeToString(sizes) + " do not split dim " +
                                  std::to_string(dim) + " into " + std::to_string(outputs) +
                                  " outputs");
    }
  } else {
    const int64_t num_outputs = ctx.params().getInt("num_outputs", outputs);
    if (num_outputs != outputs || outputs < 1) {
      return kernelError(ctx, "Split num_outputs=" + std::to_string(num_outputs) +
                                  " but the node has " + std::to_string(outputs) + " outputs");
    }
    const int64_t chunk = (dim + outputs - 1) / outputs;
    if (chunk * (outputs - 1) > dim) {
      return kernelError(ctx, "Split cannot cut dim " + std::to_string(dim) + " into " +
                                  std::to_string(outputs) + " chunks");
    }
    sizes.assign(static_cast<size_t>(outputs), chunk);
    sizes.back() = dim - chunk * (outputs - 1);
  }

  std::vector<Tensor*> results(static_cast<size_t>(outputs));
  for (int64_t i = 0; i < outputs; ++i) {
    Shape shape = data->shape();
    shape[axis] = sizes[i];
    LLMC_RETURN_IF_ERROR(
        ctx.allocateOutput(static_cast<size_t>(i), data->dtype(), shape, &results[i]));
  }
  if (ctx.shapeOnly()) return okStatus();

  const int64_t outer = productOf(data->shape(), 0, axis);
  const auto inner_bytes = static_cast<size_t>(productOf(data->shape(), axis + 1, data->rank())) *
                           dtypeSize(data->dtype());
  const auto* src = static_cast<const std::byte*>(data->data());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < outputs; ++i) {
      const size_t chunk = static_cast<size_t>(sizes[i]) * inner_bytes;
      if (chunk == 0) continue;
      std::memcpy(static_cast<std::byte*>(results[i]->data()) + o * chunk, src, chunk);
      src += chunk;
    }
  }
  return okStatus();
}

// Slice: per listed axis, start/end clamped like ONNX (ends may be INT64_MAX/INT64_MIN) and
// a nonzero step, possibly negative.
Status sliceKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "data", &data));
  std::vector<int64_t> starts, ends, axes, steps;
  LLMC_RETURN_IF_ERROR(readIntInput(ctx, 1, "starts", &starts));
  LLMC_RETURN_IF_ERROR(readIntInput(ctx, 2, "ends", &ends));
  if (ctx.input(3)) LLMC_RETURN_IF_ERROR(readIntInput(ctx, 3, "axes", &axes));
  if (ctx.input(4)) LLMC_RETURN_IF_ERROR(readIntInput(ctx, 4, "steps", &steps));
  const size_t count = starts.size();
  if (!ctx.input(3)) {
    for (size_t i = 0; i < count; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (!ctx.input(4)) steps.assign(count, 1);
  if (ends.size() != count || axes.size() != count || steps.size() != count) {
    return kernelError(ctx, "Slice starts, ends, axes and steps differ in length (" +
                                std::to_string(count) + ", " + std::to_string(ends.size()) + ", " +
                                std::to_string(axes.size()) + ", " + std::to_string(steps.size()) +
                                ")");
  }

  const int64_t rank = data->rank();
  Shape shape = data->shape();
  std::vector<int64_t> src_strides = stridesOf(data->shape());
  int64_t src_offset = 0;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t j = 0; j < count; ++j) {
    int64_t axis = 0;
    LLMC_RETURN_IF_ERROR(normalizeAxis(axes[j], rank, ctx.nodeName(), &axis));
    if (seen[axis]) return kernelError(ctx, "Slice axis " + std::to_string(axes[j]) + " repeats");
    seen[axis] = true;
    const int64_t step = steps[j];
    if (step == 0) return kernelError(ctx, "Slice step is 0 on axis " + std::to_string(axis));
    const int64_t dim = data->dim(axis);
    int64_t start = starts[j] < 0 ? starts[j] + dim : starts[j];
    int64_t end = ends[j] < 0 ? ends[j] + dim : ends[j];
    int64_t length = 0;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      if (end > start) length = (end - start - 1) / step + 1;
    } else if (dim > 0) {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      // -step overflows for INT64_MIN; any step that large takes only the first element.
      if (start > end) {
        length = step == std::numeric_limits<int64_t>::min() ? 1 : (start - end - 1) / -step + 1;
      }
    }
    shape[axis] = length;
    if (length > 0) {
      src_offset += start * src_strides[axis];
      src_strides[axis] *= length > 1 ? step : 1;
    }
  }
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, data->dtype(), shape, &output));
  if (ctx.shapeOnly()) return okStatus();
  copyStrided(dtypeSize(data->dtype()), shape, data->data(), src_offset, src_strides,
              output->data(), 0, stridesOf(shape));
  return okStatus();
}

// Expand: the input broadcast (both ways, numpy rules) with `shape`.
Status expandKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "input", &data));
  std::vector<int64_t> requested;
  LLMC_RETURN_IF_ERROR(readIntInput(ctx, 1, "shape", &requested));
  Shape shape;
  LLMC_RETURN_IF_ERROR(broadcastShapes(data->shape(), requested, ctx.nodeName(), &shape));
  LLMC_RETURN_IF_ERROR(checkOutputShape(ctx, shape, data->dtype()));
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, data->dtype(), shape, &output));
  if (ctx.shapeOnly()) return okStatus();

  const auto rank = static_cast<int64_t>(shape.size());
  const int64_t skipped = rank - data->rank();
  const std::vector<int64_t> input_strides = stridesOf(data->shape());
  std::vector<int64_t> src_strides(static_cast<size_t>(rank), 0);
  for (int64_t i = skipped; i < rank; ++i) {
    if (data->dim(i - skipped) != 1) src_strides[i] = input_strides[i - skipped];
  }
  copyStrided(dtypeSize(data->dtype()), shape, data->data(), 0, src_strides, output->data(), 0,
              stridesOf(shape));
  return okStatus();
}

// Tile: output dim i is dim i repeated repeats[i] times. Copied as a box of rank 2r whose
// dims are interleaved (repeat_i, dim_i), the repeat dims reading with stride 0.
Status tileKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "input", &data));
  std::vector<int64_t> repeats;
  LLMC_RETURN_IF_ERROR(readIntInput(ctx, 1, "repeats", &repeats));
  const int64_t rank = data->rank();
  if (static_cast<int64_t>(repeats.size()) != rank) {
    return kernelError(ctx, "Tile repeats has " + std::to_string(repeats.size()) +
                                " entries for a tensor of rank " + std::to_string(rank));
  }
  Shape shape(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) {
    if (repeats[i] < 0) {
      return kernelError(ctx, "Tile repeats " + shapeToString(repeats) + " has a negative entry");
    }
    if (data->dim(i) != 0 && repeats[i] > std::numeric_limits<int64_t>::max() / data->dim(i)) {
      return kernelError(ctx, "Tile output is too large");
    }
    shape[i] = data->dim(i) * repeats[i];
  }
  LLMC_RETURN_IF_ERROR(checkOutputShape(ctx, shape, data->dtype()));
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, data->dtype(), shape, &output));
  if (ctx.shapeOnly()) return okStatus();

  const std::vector<int64_t> input_strides = stridesOf(data->shape());
  const std::vector<int64_t> output_strides = stridesOf(shape);
  Shape box;
  std::vector<int64_t> src_strides, dst_strides;
  for (int64_t i = 0; i < rank; ++i) {
    box.push_back(repeats[i]);
    src_strides.push_back(0);
    dst_strides.push_back(data->dim(i) * output_strides[i]);
    box.push_back(data->dim(i));
    src_strides.push_back(input_strides[i]);
    dst_strides.push_back(output_strides[i]);
  }
  copyStrided(dtypeSize(data->dtype()), box, data->data(), 0, src_strides, output->data(), 0,
              dst_strides);
  return okStatus();
}

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

// The input coordinate that output coordinate `out` of a padded dim reads, or -1 for the
// constant value. `before` is the (possibly negative) padding before the dim.
int64_t padSource(int64_t out, int64_t before, int64_t dim, PadMode mode) {
  const int64_t in = out - before;
  if (in >= 0 && in < dim) return in;
  switch (mode) {
    case PadMode::kConstant: return -1;
    case PadMode::kEdge: return in < 0 ? 0 : dim - 1;
    case PadMode::kWrap: return ((in % dim) + dim) % dim;
    case PadMode::kReflect: {
      if (dim == 1) return 0;
      // Reflection (without repeating the edge) is periodic with period 2 * (dim - 1).
      const int64_t period = 2 * (dim - 1);
      int64_t folded = (in < 0 ? -in : in) % period;
      return folded < dim ? folded : period - folded;
    }
  }
  return -1;
}

// Pad: pads = [begin_0, ..., begin_n, end_0, ..., end_n] for `axes` (default all); negative
// pads crop. Modes constant, reflect, edge, wrap.
Status padKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "data", &data));
  std::vector<int64_t> pads, axes;
  LLMC_RETURN_IF_ERROR(readIntInput(ctx, 1, "pads", &pads));
  if (ctx.input(3)) LLMC_RETURN_IF_ERROR(readIntInput(ctx, 3, "axes", &axes));
  const int64_t rank = data->rank();
  if (!ctx.input(3)) {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  const std::string mode_name = ctx.params().getString("mode", "constant");
  PadMode mode;
  if (mode_name == "constant") {
    mode = PadMode::kConstant;
  } else if (mode_name == "reflect") {
    mode = PadMode::kReflect;
  } else if (mode_name == "edge") {
    mode = PadMode::kEdge;
  } else if (mode_name == "wrap") {
    mode = PadMode::kWrap;
  } else {
    return kernelError(ctx, "unknown Pad mode '" + mode_name + "'");
  }
  if (pads.size() != 2 * axes.size()) {
    return kernelError(ctx, "Pad has " + std::to_string(pads.size()) + " pads for " +
                                std::to_string(axes.size()) + " axes; expected twice as many");
  }
  std::vector<int64_t> before(static_cast<size_t>(rank), 0), after(static_cast<size_t>(rank), 0);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t j = 0; j < axes.size(); ++j) {
    int64_t axis = 0;
    LLMC_RETURN_IF_ERROR(normalizeAxis(axes[j], rank, ctx.nodeName(), &axis));
    if (seen[axis]) return kernelError(ctx, "Pad axis " + std::to_string(axes[j]) + " repeats");
    seen[axis] = true;
    before[axis] = pads[j];
    after[axis] = pads[j + axes.size()];
    if (before[axis] < -data->dim(axis) || after[axis] < -data->dim(axis)) {
      return kernelError(ctx, "Pad pads " + shapeToString(pads) + " crop more than axis " +
                                  std::to_string(axis) + " of " + shapeToString(data->shape()) +
                                  " holds");
    }
  }
  Shape shape(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t dim = data->dim(i);
    if (__builtin_add_overflow(dim, before[i], &shape[i]) ||
        __builtin_add_overflow(shape[i], after[i], &shape[i]) || shape[i] < 0) {
      return kernelError(ctx, "Pad pads " + shapeToString(pads) + " do not fit input shape " +
                                  shapeToString(data->shape()));
    }
    if (mode != PadMode::kConstant && dim == 0 && shape[i] > 0) {
      return kernelError(
          ctx, "Pad mode '" + mode_name + "' cannot pad the empty axis " + std::to_string(i));
    }
  }
  LLMC_RETURN_IF_ERROR(checkOutputShape(ctx, shape, data->dtype()));
  const Tensor* constant = ctx.input(2);
  if (constant) {
    if (constant->dtype() != data->dtype() || constant->numElements() > 1) {
      return kernelError(ctx, std::string("Pad constant_value must be a scalar of the data's "
                                          "dtype ") +
                                  dtypeName(data->dtype()) + ", got " +
                                  dtypeName(constant->dtype()) + " " +
                                  shapeToString(constant->shape()));
    }
  }
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, data->dtype(), shape, &output));
  if (ctx.shapeOnly() || output->numElements() == 0) return okStatus();

  const size_t element_size = dtypeSize(data->dtype());
  std::vector<std::byte> fill(element_size, std::byte{0});
  if (constant && constant->numElements() == 1) {
    std::memcpy(fill.data(), constant->data(), element_size);
  }
  const auto* src = static_cast<const std::byte*>(data->data());
  auto* dst = static_cast<std::byte*>(output->data());
  if (rank == 0) {
    std::memcpy(dst, src, element_size);
    return okStatus();
  }
  // sources[i][o]: the input coordinate that output coordinate o of dim i reads, or -1.
  std::vector<std::vector<int64_t>> sources(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) {
    for (int64_t o = 0; o < shape[i]; ++o) {
      sources[i].push_back(padSource(o, before[i], data->dim(i), mode));
    }
  }
  const std::vector<int64_t> input_strides = stridesOf(data->shape());
  const int64_t inner = shape[rank - 1];
  const int64_t rows = output->numElements() / inner;
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  for (int64_t row = 0; row < rows; ++row) {
    // Source offset of this row, or -1 when an outer coordinate is padding.
    int64_t base = 0;
    for (int64_t d = 0; d + 1 < rank && base >= 0; ++d) {
      const int64_t source = sources[d][index[d]];
      base = source < 0 ? -1 : base + source * input_strides[d];
    }
    std::byte* out_row = dst + static_cast<size_t>(row * inner) * element_size;
    for (int64_t o = 0; o < inner; ++o) {
      const int64_t source = sources[rank - 1][o];
      const std::byte* from = base < 0 || source < 0
                                  ? fill.data()
                                  : src + static_cast<size_t>(base + source) * element_size;
      std::memcpy(out_row + static_cast<size_t>(o) * element_size, from, element_size);
    }
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return okStatus();
}

// Trilu: keeps the upper (j - i >= k) or lower (j - i <= k) triangle of the last two dims
// and zeroes the rest.
Status triluKernel(KernelContext& ctx) {
  const Tensor* data = nullptr;
  LLMC_RETURN_IF_ERROR(requireInput(ctx, 0, "input", &data));
  if (data->rank() < 2) {
    return kernelError(ctx,
                       "Trilu needs a tensor of rank >= 2, got " + shapeToString(data->shape()));
  }
  Tensor* output = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, data->dtype(), data->shape(), &output));
  if (ctx.shapeOnly()) return okStatus();
  int64_t k = 0;
  if (ctx.input(1)) {
    std::vector<int64_t> values;
    LLMC_RETURN_IF_ERROR(readIntInput(ctx, 1, "k", &values));
    if (values.size() != 1) return kernelError(ctx, "Trilu k must be a scalar");
    k = values[0];
  }
  const bool upper = ctx.params().getInt("upper", 1) != 0;
  if (data->sizeBytes() > 0) std::memcpy(output->data(), data->data(), data->sizeBytes());
  const int64_t rows = data->dim(data->rank() - 2);
  const int64_t cols = data->dim(data->rank() - 1);
  const int64_t matrices = rows * cols == 0 ? 0 : data->numElements() / (rows * cols);
  const size_t element_size = dtypeSize(data->dtype());
  auto* out = static_cast<std::byte*>(output->data());
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const bool keep = upper ? j - i >= k : j - i <= k;
        if (!keep) {
          std::memset(out + static_cast<size_t>((m * rows + i) * cols + j) * element_size, 0,
                      element_size);
        }
      }
    }
  }
  return okStatus();
}

}  // namespace

void registerLayoutKernels(KernelRegistry& registry) {
  registry.add({"Transpose", 1, 1, 1, 1, transposeKernel});
  registry.add({"Concat", 1, -1, 1, 1, concatKernel});
  registry.add({"Split", 1, 2, 1, -1, splitKernel});
  registry.add({"Slice", 3, 5, 1, 1, sliceKernel});
  registry.add({"Expand", 2, 2, 1, 1, expandKernel});
  registry.add({"Tile", 2, 2, 1, 1, tileKernel});
  registry.add({"Pad", 2, 4, 1, 1, padKernel});
  registry.add({"Trilu", 1, 2, 1, 1, triluKernel});
}

}  // namespace llmc
