// CPU reference kernels: unary elementwise ops (activations, math functions, rounding,
// predicates). Float math is evaluated in double and rounded once to the storage type.
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "core/dispatch.h"
#include "cpu/elementwise_common.h"

namespace llmc {
namespace {

// Base of ops without attributes.
struct NoAttributes {
  Status init(const KernelContext&) { return okStatus(); }
};

// ONNX float attributes are float32; defaults are the float32 values widened to double so
// that an absent attribute and one spelled out in the model give identical results.
double floatAttribute(const KernelContext& ctx, const char* name, float fallback) {
  return ctx.params().getFloat(name, static_cast<double>(fallback));
}

// --- float-only ops: double -> double --------------------------------------------------

#define LLMC_FLOAT_UNARY(NAME, EXPR)                     \
  struct NAME##Op : NoAttributes {                       \
    static constexpr const char* kName = #NAME;          \
    double operator()(double x) const { return (EXPR); } \
  };

LLMC_FLOAT_UNARY(Sqrt, std::sqrt(x))
LLMC_FLOAT_UNARY(Reciprocal, 1.0 / x)
LLMC_FLOAT_UNARY(Exp, std::exp(x))
LLMC_FLOAT_UNARY(Log, std::log(x))
LLMC_FLOAT_UNARY(Erf, std::erf(x))
LLMC_FLOAT_UNARY(Tanh, std::tanh(x))
// Written so that exp() never overflows: for x < 0 use e^x / (1 + e^x).
LLMC_FLOAT_UNARY(Sigmoid, x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)))
LLMC_FLOAT_UNARY(HardSwish, std::fmax(0.0, std::fmin(1.0, x / 6.0 + 0.5)) * x)
// log(1 + e^x) without overflow for large x.
LLMC_FLOAT_UNARY(Softplus, x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)))
LLMC_FLOAT_UNARY(Sin, std::sin(x))
LLMC_FLOAT_UNARY(Cos, std::cos(x))
LLMC_FLOAT_UNARY(Tan, std::tan(x))
LLMC_FLOAT_UNARY(Asin, std::asin(x))
LLMC_FLOAT_UNARY(Acos, std::acos(x))
LLMC_FLOAT_UNARY(Atan, std::atan(x))
LLMC_FLOAT_UNARY(Sinh, std::sinh(x))
LLMC_FLOAT_UNARY(Cosh, std::cosh(x))
LLMC_FLOAT_UNARY(Asinh, std::asinh(x))
LLMC_FLOAT_UNARY(Acosh, std::acosh(x))
LLMC_FLOAT_UNARY(Atanh, std::atanh(x))
LLMC_FLOAT_UNARY(Floor, std::floor(x))
LLMC_FLOAT_UNARY(Ceil, std::ceil(x))
// nearbyint in the default rounding mode rounds halfway cases to even, as ONNX requires.
LLMC_FLOAT_UNARY(Round, std::nearbyint(x))

#undef LLMC_FLOAT_UNARY

struct LeakyReluOp {
  static constexpr const char* kName = "LeakyRelu";
  double alpha = 0;
  Status init(const KernelContext& ctx) {
    alpha = floatAttribute(ctx, "alpha", 0.01f);
    return okStatus();
  }
  double operator()(double x) const { return x < 0 ? alpha * x : x; }
};

struct EluOp {
  static constexpr const char* kName = "Elu";
  double alpha = 0;
  Status init(const KernelContext& ctx) {
    alpha = floatAttribute(ctx, "alpha", 1.0f);
    return okStatus();
  }
  double operator()(double x) const { return x < 0 ? alpha * std::expm1(x) : x; }
};

struct SeluOp {
  static constexpr const char* kName = "Selu";
  double alpha = 0, gamma = 0;
  Status init(const KernelContext& ctx) {
    alpha = floatAttribute(ctx, "alpha", 1.67326319217681884765625f);
    gamma = floatAttribute(ctx, "gamma", 1.05070102214813232421875f);
    return okStatus();
  }
  double operator()(double x) const { return gamma * (x <= 0 ? alpha * std::expm1(x) : x); }
};

struct CeluOp {
  static constexpr const char* kName = "Celu";
  double alpha = 0;
  Status init(const KernelContext& ctx) {
    alpha = floatAttribute(ctx, "alpha", 1.0f);
    if (alpha == 0) return kernelError(ctx, "Celu alpha must be nonzero");
    return okStatus();
  }
  double operator()(double x) const {
    return std::fmax(0.0, x) + std::fmin(0.0, alpha * std::expm1(x / alpha));
  }
};

struct ThresholdedReluOp {
  static constexpr const char* kName = "ThresholdedRelu";
  double alpha = 0;
  Status init(const KernelContext& ctx) {
    alpha = floatAttribute(ctx, "alpha", 1.0f);
    return okStatus();
  }
  double operator()(double x) const { return x > alpha ? x : 0.0; }
};

struct HardSigmoidOp {
  static constexpr const char* kName = "HardSigmoid";
  double alpha = 0, beta = 0;
  Status init(const KernelContext& ctx) {
    alpha = floatAttribute(ctx, "alpha", 0.2f);
    beta = floatAttribute(ctx, "beta", 0.5f);
    return okStatus();
  }
  double operator()(double x) const { return std::fmax(0.0, std::fmin(1.0, alpha * x + beta)); }
};

struct GeluOp {
  static constexpr const char* kName = "Gelu";
  bool tanh_approximation = false;
  Status init(const KernelContext& ctx) {
    std::string approximate = ctx.params().getString("approximate", "none");
    if (approximate != "none" && approximate != "tanh")
      return kernelError(ctx,
                         "Gelu approximate must be 'none' or 'tanh', got '" + approximate + "'");
    tanh_approximation = approximate == "tanh";
    return okStatus();
  }
  double operator()(double x) const {
    if (tanh_approximation) {
      const double sqrt_2_over_pi = 0.79788456080286535588;
      return 0.5 * x * (1.0 + std::tanh(sqrt_2_over_pi * (x + 0.044715 * x * x * x)));
    }
    return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440));
  }
};

// --- ops on every numeric type: computed in the compute type (float for half types) ------

struct AbsOp : NoAttributes {
  static constexpr const char* kName = "Abs";
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) {
      return x;
    } else {
      return x < 0 ? static_cast<C>(-x) : x;
    }
  }
};

struct NegOp : NoAttributes {
  static constexpr const char* kName = "Neg";
  template <typename C>
  C operator()(C x) const {
    return static_cast<C>(-x);
  }
};

struct SignOp : NoAttributes {
  static constexpr const char* kName = "Sign";
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (std::isnan(x)) return x;
    }
    if constexpr (std::is_unsigned_v<C>) {
      return x > 0 ? 1 : 0;
    } else {
      return static_cast<C>(x > 0 ? 1 : x < 0 ? -1 : 0);
    }
  }
};

struct ReluOp : NoAttributes {
  static constexpr const char* kName = "Relu";
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) {
      return x;
    } else {
      return x < 0 ? C(0) : x;
    }
  }
};

// --- kernels -------------------------------------------------------------------------------

// Validates the single input and allocates an output of `dtype` and the input's shape.
Status prepareUnary(KernelContext& ctx, DType dtype, const Tensor** x, Tensor** y) {
  *x = ctx.input(0);
  if (!*x) return kernelError(ctx, "missing input 0");
  return ctx.allocateOutput(0, dtype, (*x)->shape(), y);
}

// Float-only op: y = op(x), computed in double.
template <typename Op>
Status floatUnaryKernel(KernelContext& ctx) {
  Op op;
  LLMC_RETURN_IF_ERROR(op.init(ctx));
  const Tensor* x = ctx.input(0);
  if (x && !isFloatDType(x->dtype())) return unsupportedDType(ctx, Op::kName, x->dtype());
  Tensor* y = nullptr;
  LLMC_RETURN_IF_ERROR(prepareUnary(ctx, x ? x->dtype() : DType::kFloat32, &x, &y));
  if (ctx.shapeOnly()) return okStatus();
  const int64_t n = x->numElements();
  dispatchFloat(x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x->data<T>();
    T* out = y->data<T>();
    for (int64_t i = 0; i < n; ++i) out[i] = store<T>(op(static_cast<double>(load(in[i]))));
  });
  return okStatus();
}

// Op on any numeric type, computed in the type's compute type.
template <typename Op>
Status numericUnaryKernel(KernelContext& ctx) {
  Op op;
  const Tensor* x = ctx.input(0);
  if (x && (x->dtype() == DType::kBool || dtypeSize(x->dtype()) == 0))
    return unsupportedDType(ctx, Op::kName, x->dtype());
  Tensor* y = nullptr;
  LLMC_RETURN_IF_ERROR(prepareUnary(ctx, x ? x->dtype() : DType::kFloat32, &x, &y));
  if (ctx.shapeOnly()) return okStatus();
  const int64_t n = x->numElements();
  bool supported = dispatchNumeric(x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x->data<T>();
    T* out = y->data<T>();
    for (int64_t i = 0; i < n; ++i) out[i] = store<T>(op(load(in[i])));
  });
  if (!supported) return unsupportedDType(ctx, Op::kName, x->dtype());
  return okStatus();
}

// IsNaN / IsInf: float input, bool output.
template <typename Predicate>
Status floatPredicateKernel(KernelContext& ctx, const char* name, Predicate predicate) {
  const Tensor* x = ctx.input(0);
  if (x && !isFloatDType(x->dtype())) return unsupportedDType(ctx, name, x->dtype());
  Tensor* y = nullptr;
  LLMC_RETURN_IF_ERROR(prepareUnary(ctx, DType::kBool, &x, &y));
  if (ctx.shapeOnly()) return okStatus();
  const int64_t n = x->numElements();
  bool* out = y->data<bool>();
  dispatchFloat(x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x->data<T>();
    for (int64_t i = 0; i < n; ++i) out[i] = predicate(static_cast<double>(load(in[i])));
  });
  return okStatus();
}

Status isNaNKernel(KernelContext& ctx) {
  return floatPredicateKernel(ctx, "IsNaN", [](double v) { return std::isnan(v); });
}

Status isInfKernel(KernelContext& ctx) {
  const bool detect_negative = ctx.params().getInt("detect_negative", 1) != 0;
  const bool detect_positive = ctx.params().getInt("detect_positive", 1) != 0;
  return floatPredicateKernel(ctx, "IsInf", [=](double v) {
    return std::isinf(v) && (v > 0 ? detect_positive : detect_negative);
  });
}

Status notKernel(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  if (x && x->dtype() != DType::kBool) return unsupportedDType(ctx, "Not", x->dtype());
  Tensor* y = nullptr;
  LLMC_RETURN_IF_ERROR(prepareUnary(ctx, DType::kBool, &x, &y));
  if (ctx.shapeOnly()) return okStatus();
  const int64_t n = x->numElements();
  const bool* in = x->data<bool>();
  bool* out = y->data<bool>();
  for (int64_t i = 0; i < n; ++i) out[i] = !in[i];
  return okStatus();
}

Status bitwiseNotKernel(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  if (x && (isFloatDType(x->dtype()) || x->dtype() == DType::kBool))
    return unsupportedDType(ctx, "BitwiseNot", x->dtype());
  Tensor* y = nullptr;
  LLMC_RETURN_IF_ERROR(prepareUnary(ctx, x ? x->dtype() : DType::kInt32, &x, &y));
  if (ctx.shapeOnly()) return okStatus();
  const int64_t n = x->numElements();
  bool supported = dispatchNumeric(x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const T* in = x->data<T>();
      T* out = y->data<T>();
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(~in[i]);
    }
  });
  if (!supported) return unsupportedDType(ctx, "BitwiseNot", x->dtype());
  return okStatus();
}

template <typename Op>
KernelDef floatUnary() {
  return {Op::kName, 1, 1, 1, 1, &floatUnaryKernel<Op>};
}
template <typename Op>
KernelDef numericUnary() {
  return {Op::kName, 1, 1, 1, 1, &numericUnaryKernel<Op>};
}

}  // namespace

void registerUnaryKernels(KernelRegistry& registry) {
  for (const KernelDef& def : {
           floatUnary<SqrtOp>(),
           floatUnary<ReciprocalOp>(),
           floatUnary<ExpOp>(),
           floatUnary<LogOp>(),
           floatUnary<ErfOp>(),
           floatUnary<TanhOp>(),
           floatUnary<SigmoidOp>(),
           floatUnary<HardSwishOp>(),
           floatUnary<SoftplusOp>(),
           floatUnary<SinOp>(),
           floatUnary<CosOp>(),
           floatUnary<TanOp>(),
           floatUnary<AsinOp>(),
           floatUnary<AcosOp>(),
           floatUnary<AtanOp>(),
           floatUnary<SinhOp>(),
           floatUnary<CoshOp>(),
           floatUnary<AsinhOp>(),
           floatUnary<AcoshOp>(),
           floatUnary<AtanhOp>(),
           floatUnary<FloorOp>(),
           floatUnary<CeilOp>(),
           floatUnary<RoundOp>(),
           floatUnary<LeakyReluOp>(),
           floatUnary<EluOp>(),
           floatUnary<SeluOp>(),
           floatUnary<CeluOp>(),
           floatUnary<ThresholdedReluOp>(),
           floatUnary<HardSigmoidOp>(),
           floatUnary<GeluOp>(),
           numericUnary<AbsOp>(),
           numericUnary<NegOp>(),
           numericUnary<SignOp>(),
           numericUnary<ReluOp>(),
           KernelDef{"IsNaN", 1, 1, 1, 1, &isNaNKernel},
           KernelDef{"IsInf", 1, 1, 1, 1, &isInfKernel},
           KernelDef{"Not", 1, 1, 1, 1, &notKernel},
           KernelDef{"BitwiseNot", 1, 1, 1, 1, &bitwiseNotKernel},
       }) {
    registry.add(def);
  }
}

}  // namespace llmc
