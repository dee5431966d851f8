// CPU reference kernels, reduction family: Reduce* over a set of axes, ArgMax/ArgMin, TopK
// and CumSum. Float types accumulate in double, integer types in 64 bits.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/kernel.h"

namespace llmc {
namespace {

// The accumulator for a storage type: double for float types (so float32 sums match numpy
// well within 1e-5), 64-bit integers for integer types (wrapping like numpy when stored back),
// a byte for bool (std::vector<bool> has no references).
template <typename T>
using AccumType = std::conditional_t<
    kIsFloating<T>, double,
    std::conditional_t<std::is_same_v<T, bool>, uint8_t,
                       std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>>;

template <typename T>
AccumType<T> toAccum(T v) {
  return static_cast<AccumType<T>>(load(v));
}

// Stores a double into T; integer types saturate (and NaN becomes 0) instead of hitting
// undefined float-to-integer conversions, e.g. for the -inf of an empty ReduceLogSum.
template <typename T>
T storeFromDouble(double v) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (std::isnan(v)) return T{0};
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest()))
      return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max()))
      return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return store<T>(v);
  }
}

template <typename V>
bool isNaN(V v) {
  if constexpr (std::is_floating_point_v<V>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

Status unsupportedDType(const KernelContext& ctx, const char* op, DType dtype) {
  return unimplemented("node '" + ctx.nodeName() + "': " + op + " does not support dtype " +
                       dtypeName(dtype));
}

// Splits `shape` around `axis` into [outer, axis, inner] element counts.
void splitAroundAxis(const Shape& shape, int64_t axis, int64_t* outer, int64_t* inner) {
  *outer = 1;
  *inner = 1;
  for (int64_t d = 0; d < axis; ++d) *outer *= shape[d];
  for (int64_t d = axis + 1; d < static_cast<int64_t>(shape.size()); ++d) *inner *= shape[d];
}

// --- Reduce* ----------------------------------------------------------------------------

enum class ReduceKind {
  kSum,
  kMean,
  kProd,
  kMax,
  kMin,
  kL1,
  kL2,
  kSumSquare,
  kLogSum,
  kLogSumExp,
};

const char* reduceOpName(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum: return "ReduceSum";
    case ReduceKind::kMean: return "ReduceMean";
    case ReduceKind::kProd: return "ReduceProd";
    case ReduceKind::kMax: return "ReduceMax";
    case ReduceKind::kMin: return "ReduceMin";
    case ReduceKind::kL1: return "ReduceL1";
    case ReduceKind::kL2: return "ReduceL2";
    case ReduceKind::kSumSquare: return "ReduceSumSquare";
    case ReduceKind::kLogSum: return "ReduceLogSum";
    case ReduceKind::kLogSumExp: return "ReduceLogSumExp";
  }
  return "Reduce";
}

// Where each input element lands in the output.
struct ReducePlan {
  Shape out_shape;
  // Per input dim: the output stride along it, 0 for a reduced dim.
  std::vector<int64_t> out_strides;
  // Input elements that fold into one output element.
  int64_t reduced_count = 1;
  // noop_with_empty_axes with no axes: the output is the input.
  bool noop = false;
};

Status planReduce(const KernelContext& ctx, const Tensor& data, ReducePlan* plan) {
  const int64_t rank = data.rank();
  const bool keepdims = ctx.params().getInt("keepdims", 1) != 0;
  const bool noop_with_empty_axes = ctx.params().getInt("noop_with_empty_axes", 0) != 0;
  std::vector<int64_t> axes;
  if (const Tensor* axes_tensor = ctx.input(1)) {
    Status status = readInt64s(axes_tensor, &axes);
    if (status.code() == StatusCode::kUnavailable) return status;
    if (!status.ok()) return kernelError(ctx, "axes: " + status.message());
  }
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  if (axes.empty()) {
    if (noop_with_empty_axes) {
      plan->noop = true;
      plan->out_shape = data.shape();
      return okStatus();
    }
    std::fill(reduced.begin(), reduced.end(), true);
  }
  for (int64_t axis : axes) {
    int64_t normalized = 0;
    LLMC_RETURN_IF_ERROR(normalizeAxis(axis, rank, ctx.nodeName(), &normalized));
    if (reduced[normalized]) {
      return kernelError(ctx, "axis " + std::to_string(axis) + " is listed twice in axes");
    }
    reduced[normalized] = true;
  }
  Shape kept_shape = data.shape();  // the output shape with reduced dims kept as 1
  plan->out_shape.clear();
  plan->reduced_count = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) {
      plan->reduced_count *= data.dim(d);
      kept_shape[d] = 1;
      if (keepdims) plan->out_shape.push_back(1);
    } else {
      plan->out_shape.push_back(data.dim(d));
    }
  }
  plan->out_strides = stridesOf(kept_shape);
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) plan->out_strides[d] = 0;
  }
  return okStatus();
}

// Calls fn(input_index, output_index) for every input element in row-major order.
template <typename Fn>
void forEachReduced(const Shape& shape, const std::vector<int64_t>& out_strides, Fn&& fn) {
  const int64_t count = shapeNumElements(shape);
  std::vector<int64_t> index(shape.size(), 0);
  int64_t out = 0;
  for (int64_t i = 0; i < count; ++i) {
    fn(i, out);
    for (size_t d = shape.size(); d-- > 0;) {
      out += out_strides[d];
      if (++index[d] < shape[d]) break;
      out -= out_strides[d] * shape[d];
      index[d] = 0;
    }
  }
}

template <ReduceKind kKind, typename T>
void reduceTyped(const Tensor& in, const ReducePlan& plan, Tensor* out) {
  constexpr bool kMinMax = kKind == ReduceKind::kMax || kKind == ReduceKind::kMin;
  if constexpr (std::is_same_v<T, bool> && !kMinMax) {
    return;  // rejected before dispatch
  } else {
    // LogSumExp needs exp() even for integer inputs.
    using A = std::conditional_t<kKind == ReduceKind::kLogSumExp, double, AccumType<T>>;
    const T* x = in.data<T>();
    T* y = out->data<T>();
    const int64_t out_count = out->numElements();

    if (plan.noop) {
      // Like the ONNX reference: the input itself, except that ReduceSumSquare squares it.
      for (int64_t i = 0; i < out_count; ++i) {
        if constexpr (kKind == ReduceKind::kSumSquare) {
          A v = toAccum(x[i]);
          y[i] = store<T>(v * v);
        } else {
          y[i] = x[i];
        }
      }
      return;
    }

    A init{};
    if constexpr (kKind == ReduceKind::kProd) {
      init = A{1};
    } else if constexpr (kKind == ReduceKind::kMax) {
      if constexpr (std::is_same_v<T, bool>)
        init = false;
      else if constexpr (kIsFloating<T>)
        init = -std::numeric_limits<double>::infinity();
      else
        init = static_cast<A>(std::numeric_limits<T>::lowest());
    } else if constexpr (kKind == ReduceKind::kMin) {
      if constexpr (std::is_same_v<T, bool>)
        init = true;
      else if constexpr (kIsFloating<T>)
        init = std::numeric_limits<double>::infinity();
      else
        init = static_cast<A>(std::numeric_limits<T>::max());
    }
    std::vector<A> acc(static_cast<size_t>(out_count), init);

    // LogSumExp: shift by the per-output max so exp() cannot overflow.
    std::vector<double> shift;
    if constexpr (kKind == ReduceKind::kLogSumExp) {
      shift.assign(static_cast<size_t>(out_count), -std::numeric_limits<double>::infinity());
      forEachReduced(in.shape(), plan.out_strides, [&](int64_t i, int64_t o) {
        double v = static_cast<double>(load(x[i]));
        if (v > shift[o] || std::isnan(v)) shift[o] = v;
      });
      for (double& s : shift) {
        if (!std::isfinite(s)) s = 0;  // all -inf, empty, or NaN: nothing to gain from shifting
      }
    }

    forEachReduced(in.shape(), plan.out_strides, [&](int64_t i, int64_t o) {
      A& a = acc[o];
      if constexpr (kKind == ReduceKind::kLogSumExp) {
        a += std::exp(static_cast<double>(load(x[i])) - shift[o]);
      } else {
        const A v = toAccum(x[i]);
        if constexpr (kKind == ReduceKind::kSum || kKind == ReduceKind::kMean ||
                      kKind == ReduceKind::kLogSum) {
          a += v;
        } else if constexpr (kKind == ReduceKind::kProd) {
          a *= v;
        } else if constexpr (kKind == ReduceKind::kMax) {
          if constexpr (std::is_same_v<T, bool>)
            a = a || v;
          else if (v > a || isNaN(v))
            a = isNaN(a) ? a : v;
        } else if constexpr (kKind == ReduceKind::kMin) {
          if constexpr (std::is_same_v<T, bool>)
            a = a && v;
          else if (v < a || isNaN(v))
            a = isNaN(a) ? a : v;
        } else if constexpr (kKind == ReduceKind::kL1) {
          if constexpr (std::is_unsigned_v<A>)
            a += v;
          else
            a += v < 0 ? -v : v;
        } else {  // kL2, kSumSquare
          a += v * v;
        }
      }
    });

    const int64_t count = plan.reduced_count;
    for (int64_t o = 0; o < out_count; ++o) {
      const A a = acc[o];
      if constexpr (kKind == ReduceKind::kMean) {
        if constexpr (std::is_floating_point_v<A>) {
          y[o] = store<T>(a / static_cast<double>(count));  // 0/0 = NaN for an empty set
        } else {
          y[o] = count == 0 ? T{0} : static_cast<T>(a / static_cast<A>(count));
        }
      } else if constexpr (kKind == ReduceKind::kL2) {
        y[o] = storeFromDouble<T>(std::sqrt(static_cast<double>(a)));
      } else if constexpr (kKind == ReduceKind::kLogSum) {
        y[o] = storeFromDouble<T>(std::log(static_cast<double>(a)));
      } else if constexpr (kKind == ReduceKind::kLogSumExp) {
        y[o] = storeFromDouble<T>(std::log(a) + shift[o]);
      } else {
        y[o] = store<T>(a);
      }
    }
  }
}

template <ReduceKind kKind>
Status reduceKernel(KernelContext& ctx) {
  constexpr bool kMinMax = kKind == ReduceKind::kMax || kKind == ReduceKind::kMin;
  const Tensor* data = ctx.input(0);
  if (!data) return kernelError(ctx, "missing input 'data'");
  const DType dtype = data->dtype();
  if (dtype == DType::kBool && !kMinMax) {
    return unsupportedDType(ctx, reduceOpName(kKind), dtype);
  }
  bool supported = dispatchAll(dtype, [](auto) {});
  if (!supported) return unsupportedDType(ctx, reduceOpName(kKind), dtype);

  ReducePlan plan;
  LLMC_RETURN_IF_ERROR(planReduce(ctx, *data, &plan));
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, dtype, plan.out_shape, &out));
  if (ctx.shapeOnly()) return okStatus();

  dispatchAll(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduceTyped<kKind, T>(*data, plan, out);
  });
  return okStatus();
}

// --- ArgMax / ArgMin ----------------------------------------------------------------------

template <bool kMax>
Status argReduceKernel(KernelContext& ctx) {
  const char* op = kMax ? "ArgMax" : "ArgMin";
  const Tensor* data = ctx.input(0);
  if (!data) return kernelError(ctx, "missing input 'data'");
  const DType dtype = data->dtype();
  if (dtype == DType::kBool || !dispatchAll(dtype, [](auto) {})) {
    return unsupportedDType(ctx, op, dtype);
  }
  const int64_t rank = data->rank();
  if (rank == 0) return kernelError(ctx, std::string(op) + " needs a tensor of rank >= 1");
  int64_t axis = 0;
  LLMC_RETURN_IF_ERROR(normalizeAxis(ctx.params().getInt("axis", 0), rank, ctx.nodeName(), &axis));
  const bool keepdims = ctx.params().getInt("keepdims", 1) != 0;
  const bool select_last = ctx.params().getInt("select_last_index", 0) != 0;
  const int64_t axis_dim = data->dim(axis);
  if (axis_dim == 0) {
    return kernelError(ctx, std::string(op) + " over axis " + std::to_string(axis) +
                                " of size 0 of shape " + shapeToString(data->shape()));
  }
  Shape out_shape = data->shape();
  if (keepdims) {
    out_shape[axis] = 1;
  } else {
    out_shape.erase(out_shape.begin() + axis);
  }
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kInt64, out_shape, &out));
  if (ctx.shapeOnly()) return okStatus();

  int64_t outer = 0, inner = 0;
  splitAroundAxis(data->shape(), axis, &outer, &inner);
  int64_t* y = out->data<int64_t>();
  dispatchAll(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      const T* x = data->data<T>();
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          const T* row = x + o * axis_dim * inner + i;
          auto best = load(row[0]);
          int64_t best_index = 0;
          for (int64_t k = 1; k < axis_dim; ++k) {
            auto v = load(row[k * inner]);
            bool take;
            if (isNaN(best)) {
              take = select_last && isNaN(v);  // like numpy: NaN wins, first (or last) one
            } else if (isNaN(v)) {
              take = true;
            } else if (select_last) {
              take = kMax ? v >= best : v <= best;
            } else {
              take = kMax ? v > best : v < best;
            }
            if (take) {
              best = v;
              best_index = k;
            }
          }
          y[o * inner + i] = best_index;
        }
      }
    }
  });
  return okStatus();
}

// --- TopK -------------------------------------------------------------------------------

Status topKKernel(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* k_tensor = ctx.input(1);
  if (!x || !k_tensor) return kernelError(ctx, "TopK needs inputs X and K");
  const DType dtype = x->dtype();
  if (dtype == DType::kBool || !dispatchAll(dtype, [](auto) {})) {
    return unsupportedDType(ctx, "TopK", dtype);
  }
  const int64_t rank = x->rank();
  if (rank == 0) return kernelError(ctx, "TopK needs X of rank >= 1");
  int64_t axis = 0;
  LLMC_RETURN_IF_ERROR(normalizeAxis(ctx.params().getInt("axis", -1), rank, ctx.nodeName(), &axis));
  std::vector<int64_t> k_values;
  Status status = readInt64s(k_tensor, &k_values);
  if (status.code() == StatusCode::kUnavailable) return status;
  if (!status.ok()) return kernelError(ctx, "K: " + status.message());
  if (k_values.size() != 1) {
    return kernelError(ctx, "K must hold one value, got " + std::to_string(k_values.size()));
  }
  const int64_t k = k_values[0];
  const int64_t axis_dim = x->dim(axis);
  if (k < 0 || k > axis_dim) {
    return kernelError(ctx, "K = " + std::to_string(k) + " is out of range for axis " +
                                std::to_string(axis) + " of size " + std::to_string(axis_dim));
  }
  const bool largest = ctx.params().getInt("largest", 1) != 0;
  // `sorted` = 0 leaves the order unspecified; sorted output is a valid answer.
  Shape out_shape = x->shape();
  out_shape[axis] = k;
  Tensor* values = nullptr;
  Tensor* indices = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, dtype, out_shape, &values));
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(1, DType::kInt64, out_shape, &indices));
  if (ctx.shapeOnly()) return okStatus();

  int64_t outer = 0, inner = 0;
  splitAroundAxis(x->shape(), axis, &outer, &inner);
  int64_t* index_out = indices->data<int64_t>();
  dispatchAll(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      using V = decltype(load(T{}));
      struct Entry {
        V value;
        int64_t index;
      };
      // A strict order on values with NaN above everything.
      auto less = [](V a, V b) {
        if (isNaN(a)) return false;
        if (isNaN(b)) return true;
        return a < b;
      };
      // Ties go to the lower index in both directions.
      auto before = [&](const Entry& a, const Entry& b) {
        if (largest ? less(b.value, a.value) : less(a.value, b.value)) return true;
        if (largest ? less(a.value, b.value) : less(b.value, a.value)) return false;
        return a.index < b.index;
      };
      const T* src = x->data<T>();
      T* value_out = values->data<T>();
      std::vector<Entry> entries(static_cast<size_t>(axis_dim));
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t base = o * axis_dim * inner + i;
          for (int64_t j = 0; j < axis_dim; ++j) entries[j] = {load(src[base + j * inner]), j};
          std::partial_sort(entries.begin(), entries.begin() + k, entries.end(), before);
          const int64_t out_base = o * k * inner + i;
          for (int64_t j = 0; j < k; ++j) {
            value_out[out_base + j * inner] = src[base + entries[j].index * inner];
            index_out[out_base + j * inner] = entries[j].index;
          }
        }
      }
    }
  });
  return okStatus();
}

// --- CumSum -----------------------------------------------------------------------------

Status cumSumKernel(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* axis_tensor = ctx.input(1);
  if (!x || !axis_tensor) return kernelError(ctx, "CumSum needs inputs x and axis");
  const DType dtype = x->dtype();
  if (dtype == DType::kBool || !dispatchAll(dtype, [](auto) {})) {
    return unsupportedDType(ctx, "CumSum", dtype);
  }
  if (axis_tensor->dtype() != DType::kInt32 && axis_tensor->dtype() != DType::kInt64) {
    return kernelError(
        ctx, std::string("axis must be int32 or int64, got ") + dtypeName(axis_tensor->dtype()));
  }
  if (axis_tensor->numElements() != 1) {
    return kernelError(
        ctx, "axis must hold one value, got shape " + shapeToString(axis_tensor->shape()));
  }
  if (x->rank() == 0) return kernelError(ctx, "CumSum needs x of rank >= 1");
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, dtype, x->shape(), &out));
  if (ctx.shapeOnly()) return okStatus();

  std::vector<int64_t> axis_values;
  Status status = readInt64s(axis_tensor, &axis_values);
  if (!status.ok()) return kernelError(ctx, "axis: " + status.message());
  int64_t axis = 0;
  LLMC_RETURN_IF_ERROR(normalizeAxis(axis_values[0], x->rank(), ctx.nodeName(), &axis));
  const bool exclusive = ctx.params().getInt("exclusive", 0) != 0;
  const bool reverse = ctx.params().getInt("reverse", 0) != 0;
  int64_t outer = 0, inner = 0;
  splitAroundAxis(x->shape(), axis, &outer, &inner);
  const int64_t axis_dim = x->dim(axis);
  dispatchAll(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      const T* src = x->data<T>();
      T* dst = out->data<T>();
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t base = o * axis_dim * inner + i;
          AccumType<T> sum{};
          for (int64_t step = 0; step < axis_dim; ++step) {
            const int64_t j = reverse ? axis_dim - 1 - step : step;
            const int64_t at = base + j * inner;
            if (exclusive) {
              dst[at] = store<T>(sum);
              sum += toAccum(src[at]);
            } else {
              sum += toAccum(src[at]);
              dst[at] = store<T>(sum);
            }
          }
        }
      }
    }
  });
  return okStatus();
}

}  // namespace

void registerReductionKernels(KernelRegistry& registry) {
  registry.add({"ReduceSum", 1, 2, 1, 1, &reduceKernel<ReduceKind::kSum>});
  registry.add({"ReduceMean", 1, 2, 1, 1, &reduceKernel<ReduceKind::kMean>});
  registry.add({"ReduceProd", 1, 2, 1, 1, &reduceKernel<ReduceKind::kProd>});
  registry.add({"ReduceMax", 1, 2, 1, 1, &reduceKernel<ReduceKind::kMax>});
  registry.add({"ReduceMin", 1, 2, 1, 1, &reduceKernel<ReduceKind::kMin>});
  registry.add({"ReduceL1", 1, 2, 1, 1, &reduceKernel<ReduceKind::kL1>});
  registry.add({"ReduceL2", 1, 2, 1, 1, &reduceKernel<ReduceKind::kL2>});
  registry.add({"ReduceSumSquare", 1, 2, 1, 1, &reduceKernel<ReduceKind::kSumSquare>});
  registry.add({"ReduceLogSum", 1, 2, 1, 1, &reduceKernel<ReduceKind::kLogSum>});
  registry.add({"ReduceLogSumExp", 1, 2, 1, 1, &reduceKernel<ReduceKind::kLogSumExp>});
  registry.add({"ArgMax", 1, 1, 1, 1, &argReduceKernel<true>});
  registry.add({"ArgMin", 1, 1, 1, 1, &argReduceKernel<false>});
  registry.add({"TopK", 2, 2, 2, 2, &topKKernel});
  registry.add({"CumSum", 2, 2, 1, 1, &cumSumKernel});
}

}  // namespace llmc
