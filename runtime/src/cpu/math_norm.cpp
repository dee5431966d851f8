// CPU reference kernels, math family: Softmax, LogSoftmax, LayerNormalization and
// RMSNormalization. Statistics are computed in double whatever the stash type.
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/kernel.h"

namespace llmc {

void registerNormalizationKernels(KernelRegistry& registry);

namespace {

Status unsupportedDType(const KernelContext& ctx, const char* op, DType dtype) {
  return unimplemented("node '" + ctx.nodeName() + "': " + op + " does not support dtype " +
                       dtypeName(dtype));
}

// --- Softmax / LogSoftmax -----------------------------------------------------------------

template <bool kLog>
Status softmaxKernel(KernelContext& ctx) {
  const char* op = kLog ? "LogSoftmax" : "Softmax";
  const Tensor* x = ctx.input(0);
  if (!x) return kernelError(ctx, std::string(op) + " needs an input");
  const DType dtype = x->dtype();
  if (!isFloatDType(dtype)) return unsupportedDType(ctx, op, dtype);
  int64_t axis = 0;
  LLMC_RETURN_IF_ERROR(
      normalizeAxis(ctx.params().getInt("axis", -1), x->rank(), ctx.nodeName(), &axis));
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, dtype, x->shape(), &out));
  if (ctx.shapeOnly()) return okStatus();

  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x->dim(d);
  for (int64_t d = axis + 1; d < x->rank(); ++d) inner *= x->dim(d);
  const int64_t axis_dim = x->dim(axis);
  dispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x->data<T>();
    T* dst = out->data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = o * axis_dim * inner + i;
        // Subtracting the max keeps exp() from overflowing.
        double max_value = -INFINITY;
        for (int64_t j = 0; j < axis_dim; ++j) {
          max_value = std::max(max_value, static_cast<double>(load(src[base + j * inner])));
        }
        double sum = 0;
        for (int64_t j = 0; j < axis_dim; ++j) {
          sum += std::exp(static_cast<double>(load(src[base + j * inner])) - max_value);
        }
        const double log_sum = std::log(sum);
        for (int64_t j = 0; j < axis_dim; ++j) {
          const double shifted = static_cast<double>(load(src[base + j * inner])) - max_value;
          dst[base + j * inner] = store<T>(kLog ? shifted - log_sum : std::exp(shifted) / sum);
        }
      }
    }
  });
  return okStatus();
}

// --- LayerNormalization / RMSNormalization ------------------------------------------------

// Walks a tensor of shape `shape` in row-major order and tracks the offset of an operand
// that broadcasts one way to it.
class BroadcastCursor {
 public:
  BroadcastCursor(const Shape& shape, const Shape& operand)
      : shape_(shape), index_(shape.size(), 0) {
    strides_.assign(shape.size(), 0);
    const size_t lead = shape.size() - operand.size();
    int64_t stride = 1;
    for (size_t d = operand.size(); d-- > 0;) {
      strides_[lead + d] = operand[d] == 1 ? 0 : stride;
      stride *= operand[d];
    }
  }
  int64_t offset() const { return offset_; }
  void next() {
    for (size_t d = shape_.size(); d-- > 0;) {
      offset_ += strides_[d];
      if (++index_[d] < shape_[d]) return;
      offset_ -= strides_[d] * shape_[d];
      index_[d] = 0;
    }
  }

 private:
  const Shape& shape_;
  std::vector<int64_t> strides_;
  std::vector<int64_t> index_;
  int64_t offset_ = 0;
};

// True when `operand` broadcasts one way (numpy rules, never growing `target`) to `target`.
bool broadcastsTo(const Shape& operand, const Shape& target) {
  if (operand.size() > target.size()) return false;
  const size_t lead = target.size() - operand.size();
  for (size_t d = 0; d < operand.size(); ++d) {
    if (operand[d] != 1 && operand[d] != target[lead + d]) return false;
  }
  return true;
}

// The dtype a stash_type attribute names; only float types make sense.
Status stashDType(const KernelContext& ctx, DType* dtype) {
  const int64_t stash_type = ctx.params().getInt("stash_type", 1);
  if (!isValidDType(static_cast<int>(stash_type)) ||
      !isFloatDType(static_cast<DType>(stash_type))) {
    return kernelError(ctx, "stash_type " + std::to_string(stash_type) + " is not a float type");
  }
  *dtype = static_cast<DType>(stash_type);
  return okStatus();
}

// Common checks of both normalizations: the axis and the split of X into [rows, row_size].
Status planNormalization(const KernelContext& ctx, const Tensor& x, int64_t* axis, int64_t* rows,
                         int64_t* row_size) {
  LLMC_RETURN_IF_ERROR(
      normalizeAxis(ctx.params().getInt("axis", -1), x.rank(), ctx.nodeName(), axis));
  *rows = 1;
  *row_size = 1;
  for (int64_t d = 0; d < x.rank(); ++d) (d < *axis ? *rows : *row_size) *= x.dim(d);
  return okStatus();
}

Status layerNormKernel(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* scale = ctx.input(1);
  const Tensor* bias = ctx.input(2);
  if (!x || !scale) return kernelError(ctx, "LayerNormalization needs inputs X and Scale");
  const DType dtype = x->dtype();
  if (!isFloatDType(dtype)) return unsupportedDType(ctx, "LayerNormalization", dtype);
  if (scale->dtype() != dtype || (bias && bias->dtype() != dtype)) {
    return kernelError(ctx, "LayerNormalization X, Scale and B must share a dtype");
  }
  if (!broadcastsTo(scale->shape(), x->shape()) ||
      (bias && !broadcastsTo(bias->shape(), x->shape()))) {
    return kernelError(ctx, "LayerNormalization Scale/B do not broadcast to X of shape " +
                                shapeToString(x->shape()));
  }
  DType stash = DType::kFloat32;
  LLMC_RETURN_IF_ERROR(stashDType(ctx, &stash));
  int64_t axis = 0, rows = 0, row_size = 0;
  LLMC_RETURN_IF_ERROR(planNormalization(ctx, *x, &axis, &rows, &row_size));
  Shape stat_shape = x->shape();  // the reduced shape with the normalized dims kept as 1
  for (int64_t d = axis; d < x->rank(); ++d) stat_shape[d] = 1;
  Tensor* y = nullptr;
  Tensor* mean_out = nullptr;
  Tensor* inv_std_out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, dtype, x->shape(), &y));
  if (ctx.numOutputs() > 1)
    LLMC_RETURN_IF_ERROR(ctx.allocateOutput(1, stash, stat_shape, &mean_out));
  if (ctx.numOutputs() > 2)
    LLMC_RETURN_IF_ERROR(ctx.allocateOutput(2, stash, stat_shape, &inv_std_out));
  if (ctx.shapeOnly()) return okStatus();

  const double epsilon = ctx.params().getFloat("epsilon", 1e-5);
  dispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x->data<T>();
    const T* scale_data = scale->data<T>();
    const T* bias_data = bias ? bias->data<T>() : nullptr;
    T* dst = y->data<T>();
    BroadcastCursor scale_at(x->shape(), scale->shape());
    BroadcastCursor bias_at(x->shape(), bias ? bias->shape() : Shape{});
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = src + r * row_size;
      double sum = 0;
      for (int64_t j = 0; j < row_size; ++j) sum += static_cast<double>(load(row[j]));
      const double mean = sum / static_cast<double>(row_size);
      double square_sum = 0;
      for (int64_t j = 0; j < row_size; ++j) {
        const double diff = static_cast<double>(load(row[j])) - mean;
        square_sum += diff * diff;
      }
      const double inv_std = 1.0 / std::sqrt(square_sum / static_cast<double>(row_size) + epsilon);
      for (int64_t j = 0; j < row_size; ++j) {
        double value = (static_cast<double>(load(row[j])) - mean) * inv_std *
                       static_cast<double>(load(scale_data[scale_at.offset()]));
        if (bias_data) value += static_cast<double>(load(bias_data[bias_at.offset()]));
        dst[r * row_size + j] = store<T>(value);
        scale_at.next();
        bias_at.next();
      }
      auto writeStat = [&](Tensor* stat, double value) {
        if (!stat) return;
        dispatchFloat(stash, [&](auto stat_tag) {
          using S = typename decltype(stat_tag)::type;
          stat->data<S>()[r] = store<S>(value);
        });
      };
      writeStat(mean_out, mean);
      writeStat(inv_std_out, inv_std);
    }
  });
  return okStatus();
}

Status rmsNormKernel(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* scale = ctx.input(1);
  if (!x || !scale) return kernelError(ctx, "RMSNormalization needs inputs X and scale");
  if (!isFloatDType(x->dtype())) return unsupportedDType(ctx, "RMSNormalization", x->dtype());
  // Y takes the dtype of scale (ONNX type V), which may differ from X's.
  const DType out_dtype = scale->dtype();
  if (!isFloatDType(out_dtype)) return unsupportedDType(ctx, "RMSNormalization", out_dtype);
  if (!broadcastsTo(scale->shape(), x->shape())) {
    return kernelError(ctx, "RMSNormalization scale of shape " + shapeToString(scale->shape()) +
                                " does not broadcast to X of shape " + shapeToString(x->shape()));
  }
  DType stash = DType::kFloat32;
  LLMC_RETURN_IF_ERROR(stashDType(ctx, &stash));
  int64_t axis = 0, rows = 0, row_size = 0;
  LLMC_RETURN_IF_ERROR(planNormalization(ctx, *x, &axis, &rows, &row_size));
  Tensor* y = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, out_dtype, x->shape(), &y));
  if (ctx.shapeOnly()) return okStatus();

  const double epsilon = ctx.params().getFloat("epsilon", 1e-5);
  dispatchFloat(x->dtype(), [&](auto x_tag) {
    using T = typename decltype(x_tag)::type;
    dispatchFloat(out_dtype, [&](auto v_tag) {
      using V = typename decltype(v_tag)::type;
      const T* src = x->data<T>();
      const V* scale_data = scale->data<V>();
      V* dst = y->data<V>();
      BroadcastCursor scale_at(x->shape(), scale->shape());
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = src + r * row_size;
        double square_sum = 0;
        for (int64_t j = 0; j < row_size; ++j) {
          const double value = static_cast<double>(load(row[j]));
          square_sum += value * value;
        }
        const double inv_rms =
            1.0 / std::sqrt(square_sum / static_cast<double>(row_size) + epsilon);
        for (int64_t j = 0; j < row_size; ++j) {
          dst[r * row_size + j] =
              store<V>(static_cast<double>(load(row[j])) * inv_rms *
                       static_cast<double>(load(scale_data[scale_at.offset()])));
          scale_at.next();
        }
      }
    });
  });
  return okStatus();
}

}  // namespace

void registerNormalizationKernels(KernelRegistry& registry) {
  registry.add({"Softmax", 1, 1, 1, 1, &softmaxKernel<false>});
  registry.add({"LogSoftmax", 1, 1, 1, 1, &softmaxKernel<true>});
  registry.add({"LayerNormalization", 2, 3, 1, 3, &layerNormKernel});
  registry.add({"RMSNormalization", 2, 2, 1, 1, &rmsNormKernel});
}

}  // namespace llmc
