// CPU reference kernels: binary elementwise ops with numpy broadcasting (arithmetic,
// comparisons, logical and bitwise ops, Pow, Mod, PRelu).
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "cpu/elementwise_common.h"

namespace llmc {
namespace {

// Calls out[j] = fn(a[..], b[..]) (storage types in, storage type out) over the broadcast
// of a and b, with the common stride patterns as separate loops so they stay simple.
template <typename A, typename B, typename O, typename Fn>
void broadcastBinary(const Tensor& a, const Tensor& b, Tensor* out, Fn&& fn) {
  BroadcastLoop loop(out->shape(), {&a.shape(), &b.shape()});
  const A* a_data = a.data<A>();
  const B* b_data = b.data<B>();
  O* out_data = out->data<O>();
  loop.forEachRow(
      [&](int64_t out_offset, const int64_t* offsets, int64_t count, const int64_t* strides) {
        const A* a_row = a_data + offsets[0];
        const B* b_row = b_data + offsets[1];
        O* out_row = out_data + out_offset;
        if (strides[0] == 1 && strides[1] == 1) {
          for (int64_t j = 0; j < count; ++j) out_row[j] = fn(a_row[j], b_row[j]);
        } else if (strides[0] == 1 && strides[1] == 0) {
          const B b_value = b_row[0];
          for (int64_t j = 0; j < count; ++j) out_row[j] = fn(a_row[j], b_value);
        } else if (strides[0] == 0 && strides[1] == 1) {
          const A a_value = a_row[0];
          for (int64_t j = 0; j < count; ++j) out_row[j] = fn(a_value, b_row[j]);
        } else {
          for (int64_t j = 0; j < count; ++j)
            out_row[j] = fn(a_row[j * strides[0]], b_row[j * strides[1]]);
        }
      });
}

// Integer add/sub/mul wrap modulo 2^bits instead of overflowing (undefined for signed types).
template <typename C>
C wrapping(uint64_t value) {
  return static_cast<C>(value);
}

// --- ops ----------------------------------------------------------------------------------
// Each op names itself, says which storage types it accepts (kSupports<T>), whether its
// output is bool, and computes on compute-type values (float for half types).

struct NumericOp {
  static constexpr bool kBoolOutput = false;
  template <typename T>
  static constexpr bool kSupports = !std::is_same_v<T, bool>;
  Status init(const KernelContext&, DType) { return okStatus(); }
};

struct AddOp : NumericOp {
  static constexpr const char* kName = "Add";
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (kIsInteger<C>) {
      return wrapping<C>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    } else {
      return a + b;
    }
  }
};

struct SubOp : NumericOp {
  static constexpr const char* kName = "Sub";
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (kIsInteger<C>) {
      return wrapping<C>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
    } else {
      return a - b;
    }
  }
};

struct MulOp : NumericOp {
  static constexpr const char* kName = "Mul";
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (kIsInteger<C>) {
      return wrapping<C>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    } else {
      return a * b;
    }
  }
};

// Integer division truncates toward zero (C++ and onnxruntime); x / 0 is 0 for integers
// rather than a crash, and MIN / -1 wraps to MIN.
struct DivOp : NumericOp {
  static constexpr const char* kName = "Div";
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (kIsInteger<C>) {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<C>) {
        if (b == -1) return wrapping<C>(0 - static_cast<uint64_t>(a));
      }
      return static_cast<C>(a / b);
    } else {
      return a / b;
    }
  }
};

// fmod=0: the result has the divisor's sign (Python %), integers only. fmod=1: the result
// has the dividend's sign (C fmod / %). x mod 0 is 0 for integers.
struct ModOp : NumericOp {
  static constexpr const char* kName = "Mod";
  bool use_fmod = false;
  Status init(const KernelContext& ctx, DType dtype) {
    use_fmod = ctx.params().getInt("fmod", 0) != 0;
    if (!use_fmod && isFloatDType(dtype))
      return kernelError(ctx, "Mod on floating-point inputs requires fmod=1");
    return okStatus();
  }
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (kIsInteger<C>) {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<C>) {
        if (b == -1) return 0;
        C r = static_cast<C>(a % b);
        if (!use_fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<C>(r + b);
        return r;
      } else {
        return static_cast<C>(a % b);
      }
    } else {
      return std::fmod(a, b);
    }
  }
};

// PRelu: y = x < 0 ? slope * x : x, slope broadcast against x.
struct PReluOp : NumericOp {
  static constexpr const char* kName = "PRelu";
  template <typename C>
  C operator()(C x, C slope) const {
    if constexpr (std::is_unsigned_v<C>) {
      return x;
    } else {
      return x < 0 ? static_cast<C>(slope * x) : x;
    }
  }
};

struct IntegerOp {
  static constexpr bool kBoolOutput = false;
  template <typename T>
  static constexpr bool kSupports = kIsInteger<T>;
  Status init(const KernelContext&, DType) { return okStatus(); }
};

struct BitwiseAndOp : IntegerOp {
  static constexpr const char* kName = "BitwiseAnd";
  template <typename C>
  C operator()(C a, C b) const {
    return static_cast<C>(a & b);
  }
};
struct BitwiseOrOp : IntegerOp {
  static constexpr const char* kName = "BitwiseOr";
  template <typename C>
  C operator()(C a, C b) const {
    return static_cast<C>(a | b);
  }
};
struct BitwiseXorOp : IntegerOp {
  static constexpr const char* kName = "BitwiseXor";
  template <typename C>
  C operator()(C a, C b) const {
    return static_cast<C>(a ^ b);
  }
};

struct CompareOp {
  static constexpr bool kBoolOutput = true;
  template <typename T>
  static constexpr bool kSupports = !std::is_same_v<T, bool>;
  Status init(const KernelContext&, DType) { return okStatus(); }
};

struct EqualOp : CompareOp {
  static constexpr const char* kName = "Equal";
  template <typename T>
  static constexpr bool kSupports = true;  // bool too
  template <typename C>
  bool operator()(C a, C b) const {
    return a == b;
  }
};
struct LessOp : CompareOp {
  static constexpr const char* kName = "Less";
  template <typename C>
  bool operator()(C a, C b) const {
    return a < b;
  }
};
struct LessOrEqualOp : CompareOp {
  static constexpr const char* kName = "LessOrEqual";
  template <typename C>
  bool operator()(C a, C b) const {
    return a <= b;
  }
};
struct GreaterOp : CompareOp {
  static constexpr const char* kName = "Greater";
  template <typename C>
  bool operator()(C a, C b) const {
    return a > b;
  }
};
struct GreaterOrEqualOp : CompareOp {
  static constexpr const char* kName = "GreaterOrEqual";
  template <typename C>
  bool operator()(C a, C b) const {
    return a >= b;
  }
};

struct LogicalOp {
  static constexpr bool kBoolOutput = true;
  template <typename T>
  static constexpr bool kSupports = std::is_same_v<T, bool>;
  Status init(const KernelContext&, DType) { return okStatus(); }
};

struct AndOp : LogicalOp {
  static constexpr const char* kName = "And";
  bool operator()(bool a, bool b) const { return a && b; }
};
struct OrOp : LogicalOp {
  static constexpr const char* kName = "Or";
  bool operator()(bool a, bool b) const { return a || b; }
};
struct XorOp : LogicalOp {
  static constexpr const char* kName = "Xor";
  bool operator()(bool a, bool b) const { return a != b; }
};

// --- kernels -------------------------------------------------------------------------------

// Both inputs present; broadcasts their shapes.
Status prepareBinary(KernelContext& ctx, const Tensor** a, const Tensor** b, Shape* shape) {
  *a = ctx.input(0);
  *b = ctx.input(1);
  if (!*a || !*b) return kernelError(ctx, "expects two inputs");
  return broadcastShapes((*a)->shape(), (*b)->shape(), ctx.nodeName(), shape);
}

// An op whose two inputs share one dtype.
template <typename Op>
Status sameTypeBinaryKernel(KernelContext& ctx) {
  const Tensor* a = nullptr;
  const Tensor* b = nullptr;
  Shape shape;
  LLMC_RETURN_IF_ERROR(prepareBinary(ctx, &a, &b, &shape));
  const DType dtype = a->dtype();
  if (b->dtype() != dtype) {
    return kernelError(ctx, std::string(Op::kName) + " inputs have different dtypes (" +
                                dtypeName(dtype) + " and " + dtypeName(b->dtype()) + ")");
  }
  bool supported = false;
  dispatchAll(dtype,
              [&](auto tag) { supported = Op::template kSupports<typename decltype(tag)::type>; });
  if (!supported) return unsupportedDType(ctx, Op::kName, dtype);
  Op op;
  LLMC_RETURN_IF_ERROR(op.init(ctx, dtype));
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, Op::kBoolOutput ? DType::kBool : dtype, shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  dispatchAll(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (Op::template kSupports<T>) {
      if constexpr (Op::kBoolOutput) {
        broadcastBinary<T, T, bool>(*a, *b, out, [&](T x, T y) { return op(load(x), load(y)); });
      } else {
        broadcastBinary<T, T, T>(*a, *b, out,
                                 [&](T x, T y) { return store<T>(op(load(x), load(y))); });
      }
    }
  });
  return okStatus();
}

// base^exponent for an integer base: exact by repeated squaring (wrapping) when the
// exponent is integral, otherwise pow() truncated toward zero.
template <typename I>
I integerPow(I base, double exponent) {
  if (exponent != std::floor(exponent) || std::fabs(exponent) > 9.0e18) {
    return floatToInteger<I>(std::pow(static_cast<double>(base), exponent));
  }
  auto e = static_cast<int64_t>(exponent);
  if (e < 0) {
    if (base == 1) return 1;
    if constexpr (std::is_signed_v<I>) {
      if (base == -1) return (e % 2 == 0) ? 1 : -1;
    }
    return 0;  // |base| > 1 truncates to 0; 0^negative has no integer value
  }
  uint64_t result = 1;
  uint64_t square = static_cast<uint64_t>(base);
  for (; e > 0; e >>= 1) {
    if (e & 1) result *= square;
    square *= square;
  }
  return static_cast<I>(result);
}

// Pow: base and exponent dtypes may differ; the output has the base's dtype. The exponent is
// read as double, which holds every exponent that gives a finite integer result exactly.
Status powKernel(KernelContext& ctx) {
  const Tensor* base = nullptr;
  const Tensor* exponent = nullptr;
  Shape shape;
  LLMC_RETURN_IF_ERROR(prepareBinary(ctx, &base, &exponent, &shape));
  if (base->dtype() == DType::kBool || dtypeSize(base->dtype()) == 0)
    return unsupportedDType(ctx, "Pow", base->dtype());
  if (exponent->dtype() == DType::kBool || dtypeSize(exponent->dtype()) == 0)
    return unsupportedDType(ctx, "Pow", exponent->dtype());
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, base->dtype(), shape, &out));
  if (ctx.shapeOnly()) return okStatus();

  Tensor exponent_f64 = Tensor::allocate(DType::kFloat64, exponent->shape());
  const int64_t exponent_count = exponent->numElements();
  dispatchNumeric(exponent->dtype(), [&](auto tag) {
    using E = typename decltype(tag)::type;
    const E* in = exponent->data<E>();
    double* converted = exponent_f64.data<double>();
    for (int64_t i = 0; i < exponent_count; ++i) converted[i] = static_cast<double>(load(in[i]));
  });
  dispatchNumeric(base->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsInteger<T>) {
      broadcastBinary<T, double, T>(*base, exponent_f64, out,
                                    [](T x, double e) { return integerPow<T>(x, e); });
    } else if constexpr (!std::is_same_v<T, bool>) {
      broadcastBinary<T, double, T>(*base, exponent_f64, out, [](T x, double e) {
        return store<T>(std::pow(static_cast<double>(load(x)), e));
      });
    }
  });
  return okStatus();
}

template <typename Op>
KernelDef binary() {
  return {Op::kName, 2, 2, 1, 1, &sameTypeBinaryKernel<Op>};
}

}  // namespace

void registerBinaryKernels(KernelRegistry& registry) {
  for (const KernelDef& def : {
           binary<AddOp>(),
           binary<SubOp>(),
           binary<MulOp>(),
           binary<DivOp>(),
           binary<ModOp>(),
           binary<PReluOp>(),
           binary<BitwiseAndOp>(),
           binary<BitwiseOrOp>(),
           binary<BitwiseXorOp>(),
           binary<EqualOp>(),
           binary<LessOp>(),
           binary<LessOrEqualOp>(),
           binary<GreaterOp>(),
           binary<GreaterOrEqualOp>(),
           binary<AndOp>(),
           binary<OrOp>(),
           binary<XorOp>(),
           KernelDef{"Pow", 2, 2, 1, 1, &powKernel},
       }) {
    registry.add(def);
  }
}

}  // namespace llmc
