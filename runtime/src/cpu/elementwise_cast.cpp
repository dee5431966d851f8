// CPU reference kernels: Cast and CastLike between every supported dtype.
#include <cstring>
#include <string>
#include <type_traits>

#include "core/dispatch.h"
#include "cpu/elementwise_common.h"

namespace llmc {
namespace {

// One element from storage type S to storage type D. Float to integer truncates toward
// zero (see floatToInteger), anything to bool is `value != 0`, and half types go through
// float.
template <typename D, typename S>
D convertElement(S value) {
  if constexpr (std::is_same_v<D, bool>) {
    return load(value) != 0;
  } else if constexpr (kIsHalf<D>) {
    return store<D>(static_cast<float>(load(value)));
  } else if constexpr (std::is_floating_point_v<D>) {
    return static_cast<D>(load(value));
  } else if constexpr (kIsFloating<S>) {
    return floatToInteger<D>(static_cast<double>(load(value)));
  } else {
    return static_cast<D>(value);  // integer or bool to integer: modular, as in C++20
  }
}

// Converts `input` into the already allocated `output` of the same shape.
Status convert(const KernelContext& ctx, const char* op, const Tensor& input, Tensor* output) {
  if (input.dtype() == output->dtype()) {
    if (input.sizeBytes() > 0) std::memcpy(output->data(), input.data(), input.sizeBytes());
    return okStatus();
  }
  const int64_t n = input.numElements();
  bool supported = dispatchAll(input.dtype(), [&](auto source_tag) {
    using S = typename decltype(source_tag)::type;
    dispatchAll(output->dtype(), [&](auto target_tag) {
      using D = typename decltype(target_tag)::type;
      const S* in = input.data<S>();
      D* out = output->data<D>();
      for (int64_t i = 0; i < n; ++i) out[i] = convertElement<D>(in[i]);
    });
  });
  if (!supported) return unsupportedDType(ctx, op, input.dtype());
  return okStatus();
}

// Dtypes Cast can produce or read here: everything with a storage type in dispatch.h.
// Float8, 4-bit types, string and complex are not supported.
bool castable(DType dtype) {
  return dispatchAll(dtype, [](auto) {});
}

Status castKernel(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  if (!x) return kernelError(ctx, "Cast input 0 is missing");
  if (!ctx.params().has("to")) return kernelError(ctx, "Cast needs the 'to' attribute");
  const int64_t to = ctx.params().getInt("to", 0);
  if (to < 0 || to > 255 || !isValidDType(static_cast<int>(to)) ||
      !castable(static_cast<DType>(to))) {
    return unimplemented("node '" + ctx.nodeName() + "': Cast to ONNX dtype " + std::to_string(to) +
                         " is not supported");
  }
  if (!castable(x->dtype())) return unsupportedDType(ctx, "Cast", x->dtype());
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, static_cast<DType>(to), x->shape(), &out));
  if (ctx.shapeOnly()) return okStatus();
  return convert(ctx, "Cast", *x, out);
}

Status castLikeKernel(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* like = ctx.input(1);
  if (!x || !like) return kernelError(ctx, "CastLike expects two inputs");
  if (!castable(x->dtype())) return unsupportedDType(ctx, "CastLike", x->dtype());
  if (!castable(like->dtype())) return unsupportedDType(ctx, "CastLike", like->dtype());
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, like->dtype(), x->shape(), &out));
  if (ctx.shapeOnly()) return okStatus();
  return convert(ctx, "CastLike", *x, out);
}

}  // namespace

void registerCastKernels(KernelRegistry& registry) {
  registry.add({"Cast", 1, 1, 1, 1, &castKernel});
  registry.add({"CastLike", 2, 2, 1, 1, &castLikeKernel});
}

}  // namespace llmc
