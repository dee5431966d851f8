// CPU reference kernels: elementwise ops over several broadcast inputs (Min, Max, Sum,
// Mean, Where) and Clip.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "cpu/elementwise_common.h"

namespace llmc {
namespace {

enum class Fold { kMin, kMax, kSum, kMean };

template <typename C>
C foldStep(Fold fold, C acc, C value) {
  if constexpr (std::is_floating_point_v<C>) {
    // Min and Max propagate NaN, like numpy's minimum/maximum.
    if (fold == Fold::kMin || fold == Fold::kMax) {
      if (std::isnan(acc) || std::isnan(value)) return std::numeric_limits<C>::quiet_NaN();
    }
  }
  switch (fold) {
    case Fold::kMin: return value < acc ? value : acc;
    case Fold::kMax: return value > acc ? value : acc;
    default:
      if constexpr (kIsInteger<C>) {
        return static_cast<C>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(value));
      } else {
        return acc + value;
      }
  }
}

// Min / Max / Sum / Mean of one or more inputs of one dtype, broadcast together.
template <Fold kFold>
Status foldKernel(KernelContext& ctx, const char* name) {
  std::vector<const Tensor*> inputs;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const Tensor* input = ctx.input(i);
    if (!input)
      return kernelError(ctx, std::string(name) + " input " + std::to_string(i) + " is missing");
    if (input->dtype() != ctx.input(0)->dtype()) {
      return kernelError(ctx, std::string(name) + " inputs have different dtypes (" +
                                  dtypeName(ctx.input(0)->dtype()) + " and " +
                                  dtypeName(input->dtype()) + ")");
    }
    inputs.push_back(input);
  }
  if (inputs.empty()) return kernelError(ctx, std::string(name) + " needs at least one input");
  const DType dtype = inputs[0]->dtype();
  if (dtype == DType::kBool || dtypeSize(dtype) == 0) return unsupportedDType(ctx, name, dtype);
  Shape shape;
  LLMC_RETURN_IF_ERROR(broadcastAll(ctx, inputs, &shape));
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, dtype, shape, &out));
  if (ctx.shapeOnly()) return okStatus();

  std::vector<const Shape*> shapes;
  for (const Tensor* input : inputs) shapes.push_back(&input->shape());
  BroadcastLoop loop(shape, shapes);
  dispatchNumeric(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename ComputeType<T>::type;
    if constexpr (!std::is_same_v<T, bool>) {  // excluded above; dispatch instantiates it
      std::vector<C> acc;
      T* out_data = out->data<T>();
      loop.forEachRow(
          [&](int64_t out_offset, const int64_t* offsets, int64_t count, const int64_t* strides) {
            acc.resize(static_cast<size_t>(count));
            const T* first = inputs[0]->data<T>() + offsets[0];
            for (int64_t j = 0; j < count; ++j) acc[j] = load(first[j * strides[0]]);
            for (size_t k = 1; k < inputs.size(); ++k) {
              const T* row = inputs[k]->data<T>() + offsets[k];
              for (int64_t j = 0; j < count; ++j)
                acc[j] = foldStep(kFold, acc[j], C(load(row[j * strides[k]])));
            }
            if constexpr (kFold == Fold::kMean) {
              const auto n = static_cast<C>(inputs.size());
              for (int64_t j = 0; j < count; ++j) acc[j] = static_cast<C>(acc[j] / n);
            }
            for (int64_t j = 0; j < count; ++j) out_data[out_offset + j] = store<T>(acc[j]);
          });
    }
  });
  return okStatus();
}

Status minKernel(KernelContext& ctx) { return foldKernel<Fold::kMin>(ctx, "Min"); }
Status maxKernel(KernelContext& ctx) { return foldKernel<Fold::kMax>(ctx, "Max"); }
Status sumKernel(KernelContext& ctx) { return foldKernel<Fold::kSum>(ctx, "Sum"); }
Status meanKernel(KernelContext& ctx) { return foldKernel<Fold::kMean>(ctx, "Mean"); }

// Where only moves elements, so it works on raw words of the element's size.
template <typename Word>
void selectWords(const Tensor& condition, const Tensor& x, const Tensor& y, Tensor* out) {
  BroadcastLoop loop(out->shape(), {&condition.shape(), &x.shape(), &y.shape()});
  const bool* cond_data = condition.data<bool>();
  const Word* x_data = static_cast<const Word*>(x.data());
  const Word* y_data = static_cast<const Word*>(y.data());
  Word* out_data = static_cast<Word*>(out->data());
  loop.forEachRow(
      [&](int64_t out_offset, const int64_t* offsets, int64_t count, const int64_t* strides) {
        for (int64_t j = 0; j < count; ++j) {
          out_data[out_offset + j] = cond_data[offsets[0] + j * strides[0]]
                                         ? x_data[offsets[1] + j * strides[1]]
                                         : y_data[offsets[2] + j * strides[2]];
        }
      });
}

Status whereKernel(KernelContext& ctx) {
  const Tensor* condition = ctx.input(0);
  const Tensor* x = ctx.input(1);
  const Tensor* y = ctx.input(2);
  if (!condition || !x || !y) return kernelError(ctx, "Where expects three inputs");
  if (condition->dtype() != DType::kBool) {
    return kernelError(
        ctx, std::string("Where condition must be bool, got ") + dtypeName(condition->dtype()));
  }
  if (x->dtype() != y->dtype()) {
    return kernelError(ctx, std::string("Where inputs have different dtypes (") +
                                dtypeName(x->dtype()) + " and " + dtypeName(y->dtype()) + ")");
  }
  if (dtypeSize(x->dtype()) == 0) return unsupportedDType(ctx, "Where", x->dtype());
  Shape shape;
  LLMC_RETURN_IF_ERROR(broadcastAll(ctx, {condition, x, y}, &shape));
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, x->dtype(), shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  switch (dtypeSize(x->dtype())) {
    case 1: selectWords<uint8_t>(*condition, *x, *y, out); break;
    case 2: selectWords<uint16_t>(*condition, *x, *y, out); break;
    case 4: selectWords<uint32_t>(*condition, *x, *y, out); break;
    case 8: selectWords<uint64_t>(*condition, *x, *y, out); break;
    default: return unsupportedDType(ctx, "Where", x->dtype());
  }
  return okStatus();
}

// Clip(x, min?, max?): min and max are optional scalars of x's dtype. When min > max every
// element becomes max, as the ONNX spec says.
Status clipKernel(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  if (!x) return kernelError(ctx, "Clip input 0 is missing");
  const DType dtype = x->dtype();
  if (dtype == DType::kBool || dtypeSize(dtype) == 0) return unsupportedDType(ctx, "Clip", dtype);
  const char* bound_names[2] = {"min", "max"};
  for (size_t i = 1; i <= 2; ++i) {
    const Tensor* bound = ctx.input(i);
    if (!bound) continue;
    if (bound->dtype() != dtype) {
      return kernelError(ctx, std::string("Clip ") + bound_names[i - 1] + " has dtype " +
                                  dtypeName(bound->dtype()) + ", expected " + dtypeName(dtype));
    }
    if (bound->numElements() != 1) {
      return kernelError(ctx, std::string("Clip ") + bound_names[i - 1] +
                                  " must be a scalar, got shape " + shapeToString(bound->shape()));
    }
  }
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, dtype, x->shape(), &out));
  if (ctx.shapeOnly()) return okStatus();
  const Tensor* min_tensor = ctx.input(1);
  const Tensor* max_tensor = ctx.input(2);
  const int64_t n = x->numElements();
  dispatchNumeric(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename ComputeType<T>::type;
    // Absent bounds are the type's extremes; for floats +-inf, so that infinities pass.
    constexpr C kLowest = std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity()
                                                               : std::numeric_limits<C>::lowest();
    constexpr C kHighest = std::numeric_limits<C>::has_infinity ? std::numeric_limits<C>::infinity()
                                                                : std::numeric_limits<C>::max();
    const C lo = min_tensor ? C(load(min_tensor->data<T>()[0])) : kLowest;
    const C hi = max_tensor ? C(load(max_tensor->data<T>()[0])) : kHighest;
    const T* in = x->data<T>();
    T* result = out->data<T>();
    for (int64_t i = 0; i < n; ++i) {
      C v = load(in[i]);
      if (v < lo) v = lo;  // comparisons with NaN are false, so NaN passes through
      if (v > hi) v = hi;
      result[i] = store<T>(v);
    }
  });
  return okStatus();
}

}  // namespace

void registerVariadicKernels(KernelRegistry& registry) {
  registry.add({"Min", 1, -1, 1, 1, &minKernel});
  registry.add({"Max", 1, -1, 1, 1, &maxKernel});
  registry.add({"Sum", 1, -1, 1, 1, &sumKernel});
  registry.add({"Mean", 1, -1, 1, 1, &meanKernel});
  registry.add({"Where", 3, 3, 1, 1, &whereKernel});
  registry.add({"Clip", 1, 3, 1, 1, &clipKernel});
}

}  // namespace llmc
