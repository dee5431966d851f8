// CPU kernels of the fused llm ops: LlmFusedMatMul (matrix product + bias + activation),
// LlmGatedMlp, LlmNorm (RMS / layer norm with the residual add) and LlmElementwise (a chain
// of elementwise ops in one pass). Float32; each replaces several reference kernels and as
// many round trips through memory, and is tested against them (test/unit/cpu/fused_test.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/kernel.h"

namespace llmc {
namespace {

enum class Activation { kNone, kRelu, kGeluErf, kGeluTanh, kSilu, kSigmoid, kTanh, kUnknown };

Activation activationFromName(const std::string& name) {
  if (name.empty() || name == "none") return Activation::kNone;
  if (name == "relu") return Activation::kRelu;
  if (name == "gelu_erf") return Activation::kGeluErf;
  if (name == "gelu_tanh") return Activation::kGeluTanh;
  if (name == "silu") return Activation::kSilu;
  if (name == "sigmoid") return Activation::kSigmoid;
  if (name == "tanh") return Activation::kTanh;
  return Activation::kUnknown;
}

inline float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

inline float activate(Activation activation, float v) {
  switch (activation) {
    case Activation::kRelu: return v > 0 ? v : 0.0f;
    case Activation::kGeluErf: return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
    case Activation::kGeluTanh:
      return 0.5f * v * (1.0f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    case Activation::kSilu: return v * sigmoid(v);
    case Activation::kSigmoid: return sigmoid(v);
    case Activation::kTanh: return std::tanh(v);
    default: return v;
  }
}

// Rows of a·b for up to kRowBlock rows of `a` at a time (each weight row is read once per
// block): acc[r * n_size + n] = sum_k a[r][k] * b(k, n), ascending k like the reference
// MatMul. b is [K, N], or [N, K] when trans_b.
constexpr int64_t kRowBlock = 4;

void matMulRowBlock(const float* a, int64_t rows, int64_t k_size, const float* b, int64_t n_size,
                    bool trans_b, float* acc) {
  if (trans_b) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t n = 0; n < n_size; ++n) {
        const float* a_row = a + r * k_size;
        const float* b_row = b + n * k_size;
        float sum = 0;
        for (int64_t k = 0; k < k_size; ++k) sum += a_row[k] * b_row[k];
        acc[r * n_size + n] = sum;
      }
    return;
  }
  std::fill(acc, acc + rows * n_size, 0.0f);
  for (int64_t k = 0; k < k_size; ++k) {
    const float* b_row = b + k * n_size;
    for (int64_t r = 0; r < rows; ++r) {
      const float a_value = a[r * k_size + k];
      float* acc_row = acc + r * n_size;
      for (int64_t n = 0; n < n_size; ++n) acc_row[n] += a_value * b_row[n];
    }
  }
}

Status checkFloat32(const KernelContext& ctx, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t && t->dtype() != DType::kFloat32)
      return kernelError(ctx, std::string("fused kernels compute float32, got ") +
                                  dtypeName(t->dtype()));
  return okStatus();
}

Status fusedMatMul(KernelContext& ctx) {
  const Tensor* a = ctx.input(0);
  const Tensor* b = ctx.input(1);
  const Tensor* bias = ctx.input(2);
  if (!a || !b || a->rank() < 1 || b->rank() != 2)
    return kernelError(ctx, "LlmFusedMatMul needs a [..., K] and a 2-D weight");
  LLMC_RETURN_IF_ERROR(checkFloat32(ctx, {a, b, bias}));
  const bool trans_b = ctx.params().getInt("trans_b", 0) != 0;
  const int64_t k_size = a->dim(a->rank() - 1);
  const int64_t n_size = trans_b ? b->dim(0) : b->dim(1);
  if ((trans_b ? b->dim(1) : b->dim(0)) != k_size)
    return kernelError(ctx, "inner dimensions differ: " + shapeToString(a->shape()) + " x " +
                                shapeToString(b->shape()) + (trans_b ? "ᵀ" : ""));
  if (bias && bias->numElements() != n_size)
    return kernelError(ctx, "bias " + shapeToString(bias->shape()) + " does not have " +
                                std::to_string(n_size) + " values");
  const Activation activation = activationFromName(ctx.params().getString("activation", ""));
  if (activation == Activation::kUnknown) return kernelError(ctx, "unknown activation");
  Shape out_shape = a->shape();
  out_shape.back() = n_size;
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, out_shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  const float alpha = static_cast<float>(ctx.params().getFloat("alpha", 1.0));
  const int64_t rows = k_size == 0 ? out->numElements() / std::max<int64_t>(n_size, 1)
                                   : a->numElements() / k_size;
  const float* bias_data = bias ? bias->data<float>() : nullptr;
  float* y = out->data<float>();
  for (int64_t row = 0; row < rows; row += kRowBlock) {
    const int64_t block = std::min(kRowBlock, rows - row);
    float* acc = y + row * n_size;
    matMulRowBlock(a->data<float>() + row * k_size, block, k_size, b->data<float>(), n_size,
                   trans_b, acc);
    for (int64_t i = 0; i < block * n_size; ++i) {
      float v = alpha * acc[i];
      if (bias_data) v += bias_data[i % n_size];
      acc[i] = activate(activation, v);
    }
  }
  return okStatus();
}

Status gatedMlp(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* w = ctx.input(1);
  if (!x || !w || x->rank() < 1 || w->rank() != 2 || w->dim(1) % 2 != 0 ||
      w->dim(0) != x->dim(x->rank() - 1))
    return kernelError(ctx, "LlmGatedMlp needs x [..., K] and w [K, 2F], got " +
                                (x ? shapeToString(x->shape()) : std::string("none")) + " and " +
                                (w ? shapeToString(w->shape()) : std::string("none")));
  LLMC_RETURN_IF_ERROR(checkFloat32(ctx, {x, w}));
  const Activation activation = activationFromName(ctx.params().getString("activation", ""));
  if (activation == Activation::kUnknown || activation == Activation::kNone)
    return kernelError(ctx, "unknown gate activation");
  const int64_t k_size = w->dim(0), width = w->dim(1), f_size = width / 2;
  Shape out_shape = x->shape();
  out_shape.back() = f_size;
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, out_shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  const int64_t rows = out->numElements() / std::max<int64_t>(f_size, 1);
  std::vector<float> acc(static_cast<size_t>(kRowBlock * width));
  float* y = out->data<float>();
  for (int64_t row = 0; row < rows; row += kRowBlock) {
    const int64_t block = std::min(kRowBlock, rows - row);
    matMulRowBlock(x->data<float>() + row * k_size, block, k_size, w->data<float>(), width, false,
                   acc.data());
    for (int64_t r = 0; r < block; ++r) {
      const float* h = acc.data() + r * width;
      float* y_row = y + (row + r) * f_size;
      for (int64_t f = 0; f < f_size; ++f) y_row[f] = activate(activation, h[f]) * h[f_size + f];
    }
  }
  return okStatus();
}

Status norm(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* residual = ctx.input(1);
  const Tensor* scale = ctx.input(2);
  const Tensor* bias = ctx.input(3);
  if (!x || !scale || x->rank() < 1) return kernelError(ctx, "LlmNorm needs x and scale");
  LLMC_RETURN_IF_ERROR(checkFloat32(ctx, {x, residual, scale, bias}));
  const int64_t width = x->dim(x->rank() - 1);
  if (residual && residual->shape() != x->shape())
    return kernelError(ctx, "residual " + shapeToString(residual->shape()) + " differs from x " +
                                shapeToString(x->shape()));
  if (scale->numElements() != width || (bias && bias->numElements() != width))
    return kernelError(ctx, "scale/bias must have " + std::to_string(width) + " values");
  const std::string kind = ctx.params().getString("kind", "");
  if (kind != "rms" && kind != "layer") return kernelError(ctx, "norm kind must be rms or layer");
  const bool rms = kind == "rms";
  Tensor* out = nullptr;
  Tensor* sum = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, x->shape(), &out));
  if (residual && ctx.numOutputs() > 1)
    LLMC_RETURN_IF_ERROR(ctx.allocateOutput(1, DType::kFloat32, x->shape(), &sum));
  if (ctx.shapeOnly()) return okStatus();
  const float epsilon = static_cast<float>(ctx.params().getFloat("epsilon", 1e-5));
  const int64_t rows = width == 0 ? 0 : x->numElements() / width;
  std::vector<float> row_sum(static_cast<size_t>(width));
  const float* gamma = scale->data<float>();
  const float* beta = bias ? bias->data<float>() : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x->data<float>() + r * width;
    const float* s = xr;
    if (residual) {
      const float* rr = residual->data<float>() + r * width;
      float* sr = sum ? sum->data<float>() + r * width : row_sum.data();
      for (int64_t i = 0; i < width; ++i) sr[i] = xr[i] + rr[i];
      s = sr;
    }
    float mean = 0;
    if (!rms) {
      double total = 0;
      for (int64_t i = 0; i < width; ++i) total += s[i];
      mean = static_cast<float>(total / static_cast<double>(width));
    }
    double squares = 0;
    for (int64_t i = 0; i < width; ++i) {
      const float d = s[i] - mean;
      squares += static_cast<double>(d) * d;
    }
    const float inv = 1.0f / std::sqrt(static_cast<float>(squares / static_cast<double>(width)) + epsilon);
    float* y = out->data<float>() + r * width;
    for (int64_t i = 0; i < width; ++i)
      y[i] = (s[i] - mean) * inv * gamma[i] + (beta ? beta[i] : 0.0f);
  }
  return okStatus();
}

// --- LlmElementwise ----------------------------------------------------------------------

// Opcodes of llm.elementwise (LLMOps.td): binary 0..6, unary 16..27.
float applyBinary(int64_t opcode, float a, float b) {
  switch (opcode) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return std::pow(a, b);
    case 5: return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    default: return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
  }
}

float applyUnary(int64_t opcode, float a) {
  switch (opcode) {
    case 16: return -a;
    case 17: return std::exp(a);
    case 18: return std::log(a);
    case 19: return std::sqrt(a);
    case 20: return 1.0f / a;
    case 21: return std::tanh(a);
    case 22: return std::erf(a);
    case 23: return sigmoid(a);
    case 24: return a > 0 ? a : 0.0f;
    case 25: return std::fabs(a);
    case 26: return std::sin(a);
    default: return std::cos(a);
  }
}

// How one input is read at a flat output index: contiguous, one scalar, repeating its
// elements every `period` (a suffix of the output shape), or generally through strides.
struct InputReader {
  enum class Kind { kFull, kScalar, kSuffix, kStrided } kind = Kind::kFull;
  const float* data = nullptr;
  int64_t period = 1;
  std::vector<int64_t> strides;  // per output dim, 0 where broadcast (kStrided)
};

Status elementwise(KernelContext& ctx) {
  const std::vector<int64_t> program = ctx.params().getInts("program");
  const std::vector<double> constants = ctx.params().getFloats("constants");
  const int64_t inputs = static_cast<int64_t>(ctx.numInputs());
  if (program.empty() || program.size() % 3 != 0)
    return kernelError(ctx, "LlmElementwise has no program");
  Shape shape;
  for (int64_t i = 0; i < inputs; ++i) {
    const Tensor* t = ctx.input(static_cast<size_t>(i));
    if (!t) return kernelError(ctx, "LlmElementwise input " + std::to_string(i) + " is absent");
    LLMC_RETURN_IF_ERROR(checkFloat32(ctx, {t}));
    Shape next;
    LLMC_RETURN_IF_ERROR(broadcastShapes(shape, t->shape(), ctx.nodeName(), &next));
    shape = next;
  }
  int64_t registers = inputs;
  for (size_t i = 0; i < program.size(); i += 3, ++registers) {
    const int64_t opcode = program[i];
    if (!((opcode >= 0 && opcode <= 6) || (opcode >= 16 && opcode <= 27)))
      return kernelError(ctx, "unknown elementwise opcode " + std::to_string(opcode));
    for (size_t j = 1; j <= 2; ++j)
      if (program[i + j] >= registers || program[i + j] < -static_cast<int64_t>(constants.size()))
        return kernelError(ctx, "elementwise operand out of range");
  }
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  const int64_t total = out->numElements();
  const std::vector<int64_t> out_strides = stridesOf(shape);
  std::vector<InputReader> readers(static_cast<size_t>(inputs));
  for (int64_t i = 0; i < inputs; ++i) {
    const Tensor* t = ctx.input(static_cast<size_t>(i));
    InputReader& reader = readers[static_cast<size_t>(i)];
    reader.data = t->data<float>();
    Shape padded(shape.size() - t->shape().size(), 1);
    padded.insert(padded.end(), t->shape().begin(), t->shape().end());
    if (t->numElements() == total) {
      reader.kind = InputReader::Kind::kFull;
    } else if (t->numElements() == 1) {
      reader.kind = InputReader::Kind::kScalar;
    } else {
      size_t first = 0;  // leading broadcast dims; the rest must match the output
      while (first < padded.size() && padded[first] == 1 && shape[first] != 1) ++first;
      bool suffix = true;
      for (size_t d = first; d < padded.size(); ++d) suffix = suffix && padded[d] == shape[d];
      if (suffix) {
        reader.kind = InputReader::Kind::kSuffix;
        reader.period = t->numElements();
      } else {
        reader.kind = InputReader::Kind::kStrided;
        std::vector<int64_t> own = stridesOf(padded);
        reader.strides.resize(shape.size());
        for (size_t d = 0; d < shape.size(); ++d) reader.strides[d] = padded[d] == 1 ? 0 : own[d];
      }
    }
  }
  constexpr int64_t kChunk = 256;
  std::vector<float> regs(static_cast<size_t>(registers * kChunk));
  float* y = out->data<float>();
  for (int64_t base = 0; base < total; base += kChunk) {
    const int64_t len = std::min(kChunk, total - base);
    for (int64_t i = 0; i < inputs; ++i) {
      const InputReader& reader = readers[static_cast<size_t>(i)];
      float* reg = &regs[static_cast<size_t>(i * kChunk)];
      switch (reader.kind) {
        case InputReader::Kind::kFull:
          std::memcpy(reg, reader.data + base, static_cast<size_t>(len) * sizeof(float));
          break;
        case InputReader::Kind::kScalar: std::fill(reg, reg + len, reader.data[0]); break;
        case InputReader::Kind::kSuffix:
          for (int64_t e = 0; e < len; ++e) reg[e] = reader.data[(base + e) % reader.period];
          break;
        case InputReader::Kind::kStrided:
          for (int64_t e = 0; e < len; ++e) {
            int64_t flat = base + e, offset = 0;
            for (size_t d = 0; d < shape.size(); ++d) {
              offset += (flat / out_strides[d]) * reader.strides[d];
              flat %= out_strides[d];
            }
            reg[e] = reader.data[offset];
          }
          break;
      }
    }
    int64_t target = inputs;
    for (size_t i = 0; i < program.size(); i += 3, ++target) {
      const int64_t opcode = program[i];
      float* dst = &regs[static_cast<size_t>(target * kChunk)];
      auto operand = [&](int64_t index, int64_t e) {
        return index < 0 ? static_cast<float>(constants[static_cast<size_t>(-1 - index)])
                         : regs[static_cast<size_t>(index * kChunk + e)];
      };
      if (opcode < 16) {
        for (int64_t e = 0; e < len; ++e)
          dst[e] = applyBinary(opcode, operand(program[i + 1], e), operand(program[i + 2], e));
      } else {
        for (int64_t e = 0; e < len; ++e) dst[e] = applyUnary(opcode, operand(program[i + 1], e));
      }
    }
    std::memcpy(y + base, &regs[static_cast<size_t>((registers - 1) * kChunk)],
                static_cast<size_t>(len) * sizeof(float));
  }
  return okStatus();
}

}  // namespace

void registerFusedKernels(KernelRegistry& registry) {
  registry.add({"LlmFusedMatMul", 2, 3, 1, 1, fusedMatMul});
  registry.add({"LlmGatedMlp", 2, 2, 1, 1, gatedMlp});
  registry.add({"LlmNorm", 3, 4, 1, 2, norm});
  registry.add({"LlmElementwise", 1, -1, 1, 1, elementwise});
}

}  // namespace llmc
