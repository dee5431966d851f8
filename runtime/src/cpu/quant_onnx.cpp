// Reference kernels for pre-quantized ONNX models (docs/quantization.md): ONNX's
// QuantizeLinear and DequantizeLinear (per tensor, per axis and blocked, opset 23 forms),
// DynamicQuantizeLinear and MatMulInteger (what ONNX Runtime's quantize_dynamic writes), and
// ONNX Runtime's com.microsoft.MatMulNBits (2-8-bit block-wise weights, as its
// MatMul4BitsQuantizer writes them). Semantics as the operators' specifications state them;
// tested against ONNX's node tests and ONNX Runtime's outputs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "core/kernel.h"

namespace llmc {
namespace {

bool isQuantizedDType(DType d) {
  return d == DType::kInt8 || d == DType::kUInt8 || d == DType::kInt16 || d == DType::kUInt16;
}

// The integer range of a quantized dtype.
void quantRange(DType d, double* lo, double* hi) {
  switch (d) {
    case DType::kInt8: *lo = -128, *hi = 127; return;
    case DType::kUInt8: *lo = 0, *hi = 255; return;
    case DType::kInt16: *lo = -32768, *hi = 32767; return;
    case DType::kUInt16: *lo = 0, *hi = 65535; return;
    default: *lo = -2147483648.0, *hi = 2147483647.0; return;  // int32 (DequantizeLinear)
  }
}

double loadAsDouble(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32: return t.data<float>()[i];
    case DType::kFloat16: return toFloat(t.data<Float16>()[i]);
    case DType::kBFloat16: return toFloat(t.data<BFloat16>()[i]);
    case DType::kInt8: return t.data<int8_t>()[i];
    case DType::kUInt8: return t.data<uint8_t>()[i];
    case DType::kInt16: return t.data<int16_t>()[i];
    case DType::kUInt16: return t.data<uint16_t>()[i];
    case DType::kInt32: return t.data<int32_t>()[i];
    default: return 0;
  }
}

void storeFromDouble(Tensor* t, int64_t i, double v) {
  switch (t->dtype()) {
    case DType::kFloat32: t->data<float>()[i] = static_cast<float>(v); return;
    case DType::kFloat16: t->data<Float16>()[i] = toFloat16(static_cast<float>(v)); return;
    case DType::kBFloat16: t->data<BFloat16>()[i] = toBFloat16(static_cast<float>(v)); return;
    case DType::kInt8: t->data<int8_t>()[i] = static_cast<int8_t>(v); return;
    case DType::kUInt8: t->data<uint8_t>()[i] = static_cast<uint8_t>(v); return;
    case DType::kInt16: t->data<int16_t>()[i] = static_cast<int16_t>(v); return;
    case DType::kUInt16: t->data<uint16_t>()[i] = static_cast<uint16_t>(v); return;
    default: return;
  }
}

// Where each element of x finds its scale (and zero point): x viewed as [outer, dim, inner]
// around `axis`; per tensor (one value), per axis ([dim]) or blocked (x's shape with the axis
// divided into blocks of block_size: [outer, ceil(dim / block_size), inner]).
struct ScaleLayout {
  int64_t outer = 1, dim = 1, inner = 1, block = 0;  // block 0: not blocked
  bool per_tensor = true;
  int64_t at(int64_t i) const {
    if (per_tensor) return 0;
    const int64_t o = i / (dim * inner), a = i / inner % dim, n = i % inner;
    if (block == 0) return a;
    return (o * ((dim + block - 1) / block) + a / block) * inner + n;
  }
};

Status scaleLayout(KernelContext& ctx, const Tensor& x, const Tensor& scale, ScaleLayout* out) {
  ScaleLayout l;
  if (scale.numElements() == 1 && scale.rank() <= 1) {
    *out = l;
    return okStatus();
  }
  int64_t axis = 0;
  LLMC_RETURN_IF_ERROR(normalizeAxis(ctx.params().getInt("axis", 1), x.rank(), ctx.nodeName(), &axis));
  l.per_tensor = false;
  for (int64_t d = 0; d < axis; ++d) l.outer *= x.dim(d);
  l.dim = x.dim(axis);
  for (int64_t d = axis + 1; d < x.rank(); ++d) l.inner *= x.dim(d);
  l.block = ctx.params().getInt("block_size", 0);
  if (l.block < 0) return kernelError(ctx, "block_size must not be negative");
  if (l.block == 0) {
    if (scale.rank() != 1 || scale.dim(0) != l.dim)
      return kernelError(ctx, "a per-axis scale must be 1-D [" + std::to_string(l.dim) + "] (axis " +
                                  std::to_string(axis) + " of " + shapeToString(x.shape()) + "), got " +
                                  shapeToString(scale.shape()));
  } else {
    Shape want = x.shape();
    want[static_cast<size_t>(axis)] = (l.dim + l.block - 1) / l.block;
    if (scale.shape() != want)
      return kernelError(ctx, "a blocked scale must be " + shapeToString(want) + " for blocks of " +
                                  std::to_string(l.block) + ", got " + shapeToString(scale.shape()));
  }
  *out = l;
  return okStatus();
}

bool isFloatType(DType d) { return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16; }

// y = saturate(round_half_even(x / scale) + zero_point).
Status quantizeLinear(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* scale = ctx.input(1);
  const Tensor* zero = ctx.input(2);
  if (!x || !scale) return kernelError(ctx, "QuantizeLinear needs x and y_scale");
  if (!isFloatType(x->dtype()) && x->dtype() != DType::kInt32)
    return kernelError(ctx, std::string("QuantizeLinear takes float32, float16, bfloat16 or int32 x, got ") +
                                dtypeName(x->dtype()));
  if (!isFloatType(scale->dtype())) return kernelError(ctx, "y_scale must be a float type");
  DType out_dtype = DType::kUInt8;
  if (zero) {
    out_dtype = zero->dtype();
  } else if (int64_t requested = ctx.params().getInt("output_dtype", 0); requested != 0) {
    if (!isValidDType(static_cast<int>(requested)))
      return kernelError(ctx, "output_dtype " + std::to_string(requested) + " is not supported");
    out_dtype = static_cast<DType>(requested);
  }
  if (!isQuantizedDType(out_dtype))
    return kernelError(ctx, std::string("QuantizeLinear outputs int8, uint8, int16 or uint16 here, not ") +
                                dtypeName(out_dtype));
  ScaleLayout layout;
  LLMC_RETURN_IF_ERROR(scaleLayout(ctx, *x, *scale, &layout));
  if (zero && zero->shape() != scale->shape() && !(zero->numElements() == 1 && scale->numElements() == 1))
    return kernelError(ctx, "y_zero_point must have y_scale's shape");
  Tensor* y = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, out_dtype, x->shape(), &y));
  if (ctx.shapeOnly()) return okStatus();
  double lo = 0, hi = 0;
  quantRange(out_dtype, &lo, &hi);
  for (int64_t i = 0; i < x->numElements(); ++i) {
    const int64_t s = layout.at(i);
    // In float32, as ONNX's reference and ONNX Runtime divide.
    const float q = static_cast<float>(loadAsDouble(*x, i)) / static_cast<float>(loadAsDouble(*scale, s));
    double v = std::isnan(q) ? 0.0 : std::nearbyint(static_cast<double>(q));  // NaN: the zero point
    if (zero) v += loadAsDouble(*zero, s);
    storeFromDouble(y, i, std::clamp(v, lo, hi));
  }
  return okStatus();
}

// y = (x - zero_point) * scale, in the scale's type (or output_dtype).
Status dequantizeLinear(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* scale = ctx.input(1);
  const Tensor* zero = ctx.input(2);
  if (!x || !scale) return kernelError(ctx, "DequantizeLinear needs x and x_scale");
  if (!isQuantizedDType(x->dtype()) && x->dtype() != DType::kInt32)
    return kernelError(ctx, std::string("DequantizeLinear takes int8, uint8, int16, uint16 or int32 x, not ") +
                                dtypeName(x->dtype()));
  if (!isFloatType(scale->dtype())) return kernelError(ctx, "x_scale must be a float type");
  if (zero && zero->dtype() != x->dtype()) return kernelError(ctx, "x_zero_point must have x's dtype");
  DType out_dtype = scale->dtype();
  if (int64_t requested = ctx.params().getInt("output_dtype", 0); requested != 0) {
    if (!isValidDType(static_cast<int>(requested)) || !isFloatType(static_cast<DType>(requested)))
      return kernelError(ctx, "output_dtype " + std::to_string(requested) + " is not a supported float type");
    out_dtype = static_cast<DType>(requested);
  }
  ScaleLayout layout;
  LLMC_RETURN_IF_ERROR(scaleLayout(ctx, *x, *scale, &layout));
  if (zero && zero->shape() != scale->shape() && !(zero->numElements() == 1 && scale->numElements() == 1))
    return kernelError(ctx, "x_zero_point must have x_scale's shape");
  Tensor* y = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, out_dtype, x->shape(), &y));
  if (ctx.shapeOnly()) return okStatus();
  for (int64_t i = 0; i < x->numElements(); ++i) {
    const int64_t s = layout.at(i);
    const double q = loadAsDouble(*x, i) - (zero ? loadAsDouble(*zero, s) : 0.0);
    // float32 arithmetic, as the reference implementations.
    storeFromDouble(y, i, static_cast<float>(q) * static_cast<float>(loadAsDouble(*scale, s)));
  }
  return okStatus();
}

// uint8 with a scale and zero point covering [min(x, 0), max(x, 0)]; an all-zero x gets scale 1
// and zero point 0, as ONNX Runtime gives it (the range is empty). NaNs are ignored for the
// range and become the zero point.
Status dynamicQuantizeLinear(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  if (!x || x->dtype() != DType::kFloat32) return kernelError(ctx, "DynamicQuantizeLinear takes float32 x");
  Tensor *y = nullptr, *scale = nullptr, *zero = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kUInt8, x->shape(), &y));
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(1, DType::kFloat32, {}, &scale));
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(2, DType::kUInt8, {}, &zero));
  if (ctx.shapeOnly()) return okStatus();
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < x->numElements(); ++i) {
    const float v = x->data<float>()[i];
    if (std::isnan(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const float s = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  const float z = std::isfinite(s) ? std::clamp(std::nearbyint(-lo / s), 0.0f, 255.0f) : 0.0f;
  scale->data<float>()[0] = s;
  zero->data<uint8_t>()[0] = static_cast<uint8_t>(z);
  for (int64_t i = 0; i < x->numElements(); ++i) {
    const float r = std::nearbyint(x->data<float>()[i] / s);
    const float q = std::isnan(r) ? z : r + z;
    y->data<uint8_t>()[i] = static_cast<uint8_t>(std::clamp(q, 0.0f, 255.0f));
  }
  return okStatus();
}

// int32 (A - a_zero_point) · (B - b_zero_point), numpy matmul broadcasting; A's zero point is
// a scalar or one per row of A ([M]), B's a scalar or one per column of B ([N]).
Status matMulInteger(KernelContext& ctx) {
  const Tensor* a = ctx.input(0);
  const Tensor* b = ctx.input(1);
  const Tensor* a_zero = ctx.input(2);
  const Tensor* b_zero = ctx.input(3);
  if (!a || !b) return kernelError(ctx, "MatMulInteger needs A and B");
  auto eight = [](DType d) { return d == DType::kInt8 || d == DType::kUInt8; };
  if (!eight(a->dtype()) || !eight(b->dtype())) return kernelError(ctx, "MatMulInteger takes int8 or uint8 A and B");
  if ((a_zero && a_zero->dtype() != a->dtype()) || (b_zero && b_zero->dtype() != b->dtype()))
    return kernelError(ctx, "a zero point must have its operand's dtype");
  if (a->rank() == 0 || b->rank() == 0) return kernelError(ctx, "MatMulInteger operands must have rank >= 1");
  Shape a_shape = a->shape(), b_shape = b->shape();
  if (a_shape.size() == 1) a_shape.insert(a_shape.begin(), 1);
  if (b_shape.size() == 1) b_shape.push_back(1);
  const int64_t m = a_shape[a_shape.size() - 2], k = a_shape.back(), n = b_shape.back();
  if (b_shape[b_shape.size() - 2] != k)
    return kernelError(ctx, "MatMulInteger inner dimensions differ: " + shapeToString(a->shape()) + " x " +
                                shapeToString(b->shape()));
  if (a_zero && a_zero->numElements() != 1 && a_zero->numElements() != m)
    return kernelError(ctx, "a_zero_point must be a scalar or [M = " + std::to_string(m) + "]");
  if (b_zero && b_zero->numElements() != 1 && b_zero->numElements() != n)
    return kernelError(ctx, "b_zero_point must be a scalar or [N = " + std::to_string(n) + "]");
  const Shape a_batch(a_shape.begin(), a_shape.end() - 2), b_batch(b_shape.begin(), b_shape.end() - 2);
  Shape batch;
  LLMC_RETURN_IF_ERROR(broadcastShapes(a_batch, b_batch, ctx.nodeName(), &batch));
  Shape out_shape = batch;
  if (a->rank() > 1) out_shape.push_back(m);
  if (b->rank() > 1) out_shape.push_back(n);
  Tensor* y = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kInt32, out_shape, &y));
  if (ctx.shapeOnly()) return okStatus();
  std::vector<int64_t> a_strides, b_strides;
  LLMC_RETURN_IF_ERROR(broadcastStrides(ctx, "A", a_batch, batch, &a_strides));
  LLMC_RETURN_IF_ERROR(broadcastStrides(ctx, "B", b_batch, batch, &b_strides));
  const std::vector<int64_t> batch_strides = stridesOf(batch);
  const int64_t count = shapeNumElements(batch);
  auto value = [](const Tensor& t, int64_t i) -> int32_t {
    return t.dtype() == DType::kInt8 ? t.data<int8_t>()[i] : t.data<uint8_t>()[i];
  };
  for (int64_t bi = 0; bi < count; ++bi) {
    int64_t a_off = 0, b_off = 0;
    for (size_t d = 0; d < batch.size(); ++d) {
      const int64_t index = bi / batch_strides[d] % batch[d];
      a_off += index * a_strides[d];
      b_off += index * b_strides[d];
    }
    // broadcastStrides counts in batch elements: scale to matrix sizes.
    a_off *= m * k;
    b_off *= k * n;
    for (int64_t r = 0; r < m; ++r) {
      const int32_t az = a_zero ? value(*a_zero, a_zero->numElements() == 1 ? 0 : r) : 0;
      for (int64_t c = 0; c < n; ++c) {
        const int32_t bz = b_zero ? value(*b_zero, b_zero->numElements() == 1 ? 0 : c) : 0;
        int64_t sum = 0;  // int32 wraps past K = 33,025 at full range: sum in 64 bits, wrap as ONNX Runtime
        for (int64_t i = 0; i < k; ++i)
          sum += static_cast<int64_t>(value(*a, a_off + r * k + i) - az) * (value(*b, b_off + i * n + c) - bz);
        y->data<int32_t>()[(bi * m + r) * n + c] = static_cast<int32_t>(static_cast<uint32_t>(sum));
      }
    }
  }
  return okStatus();
}

// com.microsoft.MatMulNBits: Y = A · dequantize(B)ᵀ (+ bias). B is uint8 [N, blocks, blob]
// with `bits`-bit values packed from the low bits up, `block_size` values per block along K;
// scales [N * blocks]; zero points either packed like B ([N * ceil(blocks * bits / 8)]) or in
// the scales' type ([N * blocks]), 2^(bits - 1) when absent.
Status matMulNBits(KernelContext& ctx) {
  const Tensor* a = ctx.input(0);
  const Tensor* b = ctx.input(1);
  const Tensor* scales = ctx.input(2);
  const Tensor* zeros = ctx.input(3);
  const Tensor* g_idx = ctx.input(4);
  const Tensor* bias = ctx.input(5);
  const int64_t k = ctx.params().getInt("K", 0), n = ctx.params().getInt("N", 0);
  const int64_t bits = ctx.params().getInt("bits", 4), block = ctx.params().getInt("block_size", 0);
  if (!a || !b || !scales) return kernelError(ctx, "MatMulNBits needs A, B and scales");
  if (a->dtype() != DType::kFloat32) return kernelError(ctx, "MatMulNBits: float32 A only");
  if (bits != 2 && bits != 4 && bits != 8) return kernelError(ctx, "MatMulNBits: bits must be 2, 4 or 8");
  if (k < 1 || n < 1 || k > (int64_t{1} << 31) || n > (int64_t{1} << 31) || block < 16 || block > (1 << 16) ||
      (block & (block - 1)) != 0)
    return kernelError(ctx, "MatMulNBits: needs 1 <= K, N <= 2^31 and block_size a power of 2 in [16, 65536]");
  if (a->rank() < 1 || a->dim(a->rank() - 1) != k)
    return kernelError(ctx, "MatMulNBits: A " + shapeToString(a->shape()) + " does not end in K = " + std::to_string(k));
  const int64_t blocks = (k + block - 1) / block, blob = block * bits / 8;
  int64_t b_elements = 0;
  if (__builtin_mul_overflow(n, blocks * blob, &b_elements))
    return kernelError(ctx, "MatMulNBits: N * K overflows");
  if (b->dtype() != DType::kUInt8 || b->numElements() != b_elements)
    return kernelError(ctx, "MatMulNBits: B must be uint8 [N, " + std::to_string(blocks) + ", " + std::to_string(blob) +
                                "], got " + dtypeName(b->dtype()) + shapeToString(b->shape()));
  if (scales->dtype() != DType::kFloat32 || scales->numElements() != n * blocks)
    return kernelError(ctx, "MatMulNBits: scales must be float32 with N * blocks = " + std::to_string(n * blocks) + " values");
  const int64_t packed_zero_row = (blocks * bits + 7) / 8;
  const bool packed_zeros = zeros && zeros->dtype() == DType::kUInt8;
  if (zeros && !(packed_zeros ? zeros->numElements() == n * packed_zero_row
                              : zeros->dtype() == DType::kFloat32 && zeros->numElements() == n * blocks))
    return kernelError(ctx, "MatMulNBits: zero_points must be uint8 [N * " + std::to_string(packed_zero_row) +
                                "] or float32 [N * blocks]");
  if (g_idx && g_idx->numElements() != 0) return kernelError(ctx, "MatMulNBits: g_idx (act-order) is not supported");
  if (bias && (bias->dtype() != DType::kFloat32 || bias->numElements() != n))
    return kernelError(ctx, "MatMulNBits: bias must be float32 [N]");
  Shape out_shape = a->shape();
  out_shape.back() = n;
  Tensor* y = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, out_shape, &y));
  if (ctx.shapeOnly()) return okStatus();
  const uint8_t* packed = b->data<uint8_t>();
  const uint32_t mask = (1u << bits) - 1;
  const int64_t rows = a->numElements() / k;
  std::vector<float> w(static_cast<size_t>(k));
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const float scale = scales->data<float>()[c * blocks + blk];
      float zero = static_cast<float>(1 << (bits - 1));
      if (packed_zeros) {
        const int64_t bit = blk * bits;
        zero = static_cast<float>((zeros->data<uint8_t>()[c * packed_zero_row + bit / 8] >> (bit % 8)) & mask);
      } else if (zeros) {
        zero = zeros->data<float>()[c * blocks + blk];
      }
      const uint8_t* src = packed + (c * blocks + blk) * blob;
      for (int64_t j = 0; j < block && blk * block + j < k; ++j) {
        const int64_t bit = j * bits;
        const float q = static_cast<float>((src[bit / 8] >> (bit % 8)) & mask);
        w[static_cast<size_t>(blk * block + j)] = (q - zero) * scale;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = a->data<float>() + r * k;
      float sum = 0;
      for (int64_t i = 0; i < k; ++i) sum += x[i] * w[static_cast<size_t>(i)];
      y->data<float>()[r * n + c] = sum + (bias ? bias->data<float>()[c] : 0.0f);
    }
  }
  return okStatus();
}

// MatMulNBits' 4-bit weight in llm.quant_matmul's layout (core/quant.h), for the compiler's
// lowering of MatMulNBits onto the int4 kernels (and `llmc refit`, which replays it): B [N,
// blocks, block_size / 2] (element j of a block in byte j / 2, low nibble first) becomes data
// [N, K / 2] (per 32 along K: byte j holds element j low and j + 16 high), the float32 scales
// [N * blocks] become float16 [N, blocks] (group = block_size), and packed 4-bit zero points
// become uint8 [N, blocks]. Params K, N, block_size (a multiple of 32), zero_points (0/1).
Status repackNBits(KernelContext& ctx) {
  const Tensor* b = ctx.input(0);
  const Tensor* scales = ctx.input(1);
  const Tensor* zeros = ctx.input(2);
  const int64_t k = ctx.params().getInt("K", 0), n = ctx.params().getInt("N", 0);
  const int64_t block = ctx.params().getInt("block_size", 0);
  if (k < 32 || k % 32 != 0 || n < 1 || k > (int64_t{1} << 31) || n > (int64_t{1} << 31) || block < 32 ||
      block % 32 != 0 || block > (1 << 16))
    return kernelError(ctx, "LlmRepackNBits needs K and block_size multiples of 32 (K, N <= 2^31, block_size <= 65536)");
  const int64_t blocks = (k + block - 1) / block;
  int64_t b_elements = 0;
  if (__builtin_mul_overflow(n, blocks * (block / 2), &b_elements))
    return kernelError(ctx, "LlmRepackNBits: N * K overflows");
  if (!b || !scales || b->dtype() != DType::kUInt8 || b->numElements() != b_elements ||
      scales->dtype() != DType::kFloat32 || scales->numElements() != n * blocks)
    return kernelError(ctx, "LlmRepackNBits: B must be uint8 [N, blocks, block_size / 2] and scales float32 [N * blocks]");
  const int64_t zero_row = (blocks + 1) / 2;
  if (zeros && (zeros->dtype() != DType::kUInt8 || zeros->numElements() != n * zero_row))
    return kernelError(ctx, "LlmRepackNBits: zero_points must be packed uint8 [N * " + std::to_string(zero_row) + "]");
  if (ctx.numOutputs() < 1 || ctx.numOutputs() > (zeros ? 3u : 2u))
    return kernelError(ctx, "LlmRepackNBits has data, scales and (with zero points) zeros");
  Tensor* outs[3] = {nullptr, nullptr, nullptr};
  const DType dtypes[3] = {DType::kUInt8, DType::kFloat16, DType::kUInt8};
  const Shape shapes[3] = {{n, k / 2}, {n, blocks}, {n, blocks}};
  for (size_t i = 0; i < ctx.numOutputs(); ++i) LLMC_RETURN_IF_ERROR(ctx.allocateOutput(i, dtypes[i], shapes[i], &outs[i]));
  if (ctx.shapeOnly()) return okStatus();
  const uint8_t* src = b->data<uint8_t>();
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t i = 0; i < k; ++i) {
      const int64_t blk = i / block, j = i % block;
      const uint8_t cell = src[(row * blocks + blk) * (block / 2) + j / 2];
      const uint8_t q = j % 2 == 0 ? cell & 0x0f : cell >> 4;
      if (outs[0]) {
        const int64_t b32 = i / 32, e = i % 32;
        uint8_t& dst = outs[0]->data<uint8_t>()[row * (k / 2) + b32 * 16 + e % 16];
        dst = e < 16 ? static_cast<uint8_t>((dst & 0xf0) | q) : static_cast<uint8_t>((dst & 0x0f) | (q << 4));
      }
    }
    for (int64_t blk = 0; blk < blocks; ++blk) {
      if (outs[1]) outs[1]->data<Float16>()[row * blocks + blk] = toFloat16(scales->data<float>()[row * blocks + blk]);
      if (outs[2]) {
        const uint8_t cell = zeros->data<uint8_t>()[row * zero_row + blk / 2];
        outs[2]->data<uint8_t>()[row * blocks + blk] = blk % 2 == 0 ? cell & 0x0f : cell >> 4;
      }
    }
  }
  return okStatus();
}

}  // namespace

void registerOnnxQuantKernels(KernelRegistry& registry) {
  registry.add({"LlmRepackNBits", 2, 3, 1, 3, &repackNBits});
  registry.add({"QuantizeLinear", 2, 3, 1, 1, &quantizeLinear});
  registry.add({"DequantizeLinear", 2, 3, 1, 1, &dequantizeLinear});
  registry.add({"DynamicQuantizeLinear", 1, 1, 3, 3, &dynamicQuantizeLinear});
  registry.add({"MatMulInteger", 2, 4, 1, 1, &matMulInteger});
  registry.add({"com.microsoft.MatMulNBits", 3, 6, 1, 1, &matMulNBits});
}

}  // namespace llmc
