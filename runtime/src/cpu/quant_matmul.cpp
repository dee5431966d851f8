// CPU kernels of weight quantization (core/quant.h): LlmQuantizeWeight (the compiler's and
// `llmc refit`'s round-to-nearest quantizer), LlmQuantMatMul, the product with a quantized
// weight, and LlmQuantGather, rows of a quantized embedding table. As llama.cpp does, each row of activations is quantized on the fly to int8 in blocks
// of 32 with a float scale per block, and the products are int8 dot products (AVX2:
// vpmaddubsw/vpmaddwd) scaled per block; 4-bit weights are unpacked to int8 in registers.
// Tested against dequantized float products (test/unit/cpu/quant_test.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/kernel.h"
#include "core/fp8.h"
#include "core/quant.h"
#include "core/scale.h"
#include "cpu/epilogue.h"
#include "cpu/quant_dot.h"

namespace llmc {

void quantizeActivations(const float* x, int64_t k, int64_t group, int bits, QuantizedActivations* out) {
  const int64_t blocks = k / kQuantBlock;
  const float levels = bits == 16 ? 32767.0f : 127.0f;
  if (bits == 16) out->q16.resize(static_cast<size_t>(k));
  else out->q.resize(static_cast<size_t>(k));
  out->scales.resize(static_cast<size_t>(blocks));
  out->group_sums.assign(static_cast<size_t>((k + group - 1) / group), 0.0f);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0;
    for (int64_t i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float scale = amax / levels;
    const float inverse = inverseScale(scale);
    int32_t sum = 0;
    for (int64_t i = 0; i < kQuantBlock; ++i) {
      const long q = std::clamp<long>(std::lround(xb[i] * inverse), -static_cast<long>(levels), static_cast<long>(levels));
      if (bits == 16) out->q16[static_cast<size_t>(b * kQuantBlock + i)] = static_cast<int16_t>(q);
      else out->q[static_cast<size_t>(b * kQuantBlock + i)] = static_cast<int8_t>(q);
      sum += static_cast<int32_t>(q);
    }
    out->scales[static_cast<size_t>(b)] = scale;
    out->group_sums[static_cast<size_t>(b * kQuantBlock / group)] += scale * static_cast<float>(sum);
  }
}

int activationBits(const QuantTraits& traits) { return traits.bits == 8 ? 16 : 8; }

namespace {

// Block i's 32 weights of `row` as int8 (zero point subtracted for 4-bit formats).
inline void weightBlock(const QuantWeight& w, int64_t row, int64_t block, int8_t* out) {
  if (w.traits->bits == 8) {
    std::memcpy(out, static_cast<const int8_t*>(w.data) + row * w.k + block * kQuantBlock, kQuantBlock);
    return;
  }
  const uint8_t* packed = static_cast<const uint8_t*>(w.data) + row * (w.k / 2) + block * (kQuantBlock / 2);
  const int zero = w.zeros ? w.zeros[row * w.groupsPerRow() + block * kQuantBlock / w.group] : 8;
  for (int64_t j = 0; j < kQuantBlock / 2; ++j) {
    out[j] = static_cast<int8_t>((packed[j] & 0x0f) - zero);
    out[j + kQuantBlock / 2] = static_cast<int8_t>((packed[j] >> 4) - zero);
  }
}

}  // namespace

float quantDotScalar(const QuantWeight& w, int64_t row, const QuantizedActivations& a) {
  float sum = 0;
  int8_t wq[kQuantBlock];
  for (int64_t b = 0; b < w.k / kQuantBlock; ++b) {
    weightBlock(w, row, b, wq);
    int32_t dot = 0;
    for (int64_t i = 0; i < kQuantBlock; ++i) {
      const size_t at = static_cast<size_t>(b * kQuantBlock + i);
      dot += (a.q16.empty() ? static_cast<int32_t>(a.q[at]) : static_cast<int32_t>(a.q16[at])) * wq[i];
    }
    sum += static_cast<float>(dot) * a.scales[static_cast<size_t>(b)] * w.scale(row, b * kQuantBlock / w.group);
  }
  return sum;
}

#if defined(__x86_64__) && defined(__GNUC__)
// Per group g: scale_g * (sum over its blocks of ad_b * dot_b), with dot_b an int8 dot product.
// 4-bit weights stay unsigned (0..15), so vpmaddubsw takes them as they are and the zero point
// comes off once per group: sum_b ad_b * sum_i a_i (w_i - z) = sum_b ad_b dot_b - z * group_sum.
__attribute__((target("avx2,fma,f16c"))) float quantDotAvx2(const QuantWeight& w, int64_t row,
                                                            const QuantizedActivations& a) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  const int64_t blocks = w.k / kQuantBlock;
  const int64_t blocks_per_group = w.group / kQuantBlock;
  const bool four_bit = w.traits->bits == 4;
  const int8_t* aq = a.q.data();
  const int16_t* aq16 = a.q16.data();
  const float* ad = a.scales.data();
  const int64_t groups = w.groupsPerRow();
  const uint16_t* half_scales =
      w.traits->scale_dtype == DType::kFloat16 ? static_cast<const uint16_t*>(w.scales) + row * groups : nullptr;
  const float* float_scales = half_scales ? nullptr : static_cast<const float*>(w.scales) + row * groups;
  __m256 total = _mm256_setzero_ps();
  float correction = 0;
  for (int64_t g = 0; g < groups; ++g) {
    __m256 acc = _mm256_setzero_ps();
    const int64_t end = std::min(blocks, (g + 1) * blocks_per_group);
    for (int64_t b = g * blocks_per_group; b < end; ++b) {
      __m256i sums;
      if (!four_bit) {
        // int8 weights with 16-bit activations: vpmovsxbw widens 16 weights, vpmaddwd multiplies
        // and adds pairs into int32 (at most 32 * 32767 * 127 per block: no overflow).
        const int8_t* wb = static_cast<const int8_t*>(w.data) + row * w.k + b * kQuantBlock;
        const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb)));
        const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 16)));
        const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq16 + b * kQuantBlock));
        const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq16 + b * kQuantBlock + 16));
        sums = _mm256_add_epi32(_mm256_madd_epi16(w0, a0), _mm256_madd_epi16(w1, a1));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_broadcast_ss(ad + b), acc);
        continue;
      }
      const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + b * kQuantBlock));
      __m256i products;
      if (four_bit) {
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(
            static_cast<const uint8_t*>(w.data) + row * (w.k / 2) + b * (kQuantBlock / 2)));
        // Low nibbles are elements 0..15, high nibbles 16..31.
        const __m256i wv = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), low_nibbles);
        products = _mm256_maddubs_epi16(wv, av);
      } else {
        const __m256i wv = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(static_cast<const int8_t*>(w.data) + row * w.k + b * kQuantBlock));
        // vpmaddubsw multiplies unsigned by signed bytes: |w| times a with w's sign moved onto it.
        products = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(av, wv));
      }
      const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(products, ones));
      acc = _mm256_fmadd_ps(dot, _mm256_broadcast_ss(ad + b), acc);
    }
    const float scale = half_scales ? _cvtsh_ss(half_scales[g]) : float_scales[g];
    total = _mm256_fmadd_ps(acc, _mm256_set1_ps(scale), total);
    if (four_bit) {
      const int zero = w.zeros ? w.zeros[row * groups + g] : 8;
      correction += scale * static_cast<float>(zero) * a.group_sums[static_cast<size_t>(g)];
    }
  }
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(total), _mm256_extractf128_ps(total, 1));
  sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
  sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
  return _mm_cvtss_f32(sum) - correction;
}

bool quantDotHasAvx2() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return has;
}
#else
float quantDotAvx2(const QuantWeight& w, int64_t row, const QuantizedActivations& a) {
  return quantDotScalar(w, row, a);
}
bool quantDotHasAvx2() { return false; }
#endif

float quantizeRowPerToken(const float* x, int64_t k, int8_t* q) {
  float amax = 0;
  for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 127.0f;
  const float inverse = inverseScale(scale);
  for (int64_t i = 0; i < k; ++i) q[i] = static_cast<int8_t>(std::clamp<long>(std::lround(x[i] * inverse), -127, 127));
  return scale;
}

int32_t dotInt8Scalar(const int8_t* a, const int8_t* w, int64_t k) {
  int32_t sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += static_cast<int32_t>(a[i]) * w[i];
  return sum;
}

#if defined(__x86_64__) && defined(__GNUC__)
// 32 products per step through vpmaddubsw/vpmaddwd, summed in int32 lanes (no float per block).
__attribute__((target("avx2"))) int32_t dotInt8Avx2(const int8_t* a, const int8_t* w, int64_t k) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc = _mm256_setzero_si256();
  for (int64_t i = 0; i < k; i += kQuantBlock) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i));
    const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
    const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(av, wv));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(products, ones));
  }
  __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4e));
  sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xb1));
  return _mm_cvtsi128_si32(sum);
}
#else
int32_t dotInt8Avx2(const int8_t* a, const int8_t* w, int64_t k) { return dotInt8Scalar(a, w, k); }
#endif

namespace {

Status quantizeWeightKernel(KernelContext& ctx) {
  const Tensor* w = ctx.input(0);
  const QuantTraits* traits = findQuantTraits(ctx.params().getString("format", ""));
  if (!traits) return kernelError(ctx, "unknown quantization format '" + ctx.params().getString("format", "") + "'");
  if (!w || w->rank() != 2 || w->dtype() != DType::kFloat32)
    return kernelError(ctx, "LlmQuantizeWeight needs a 2-D float32 weight");
  const bool transposed = ctx.params().getInt("trans_b", 0) != 0;
  const int64_t k = transposed ? w->dim(1) : w->dim(0), n = transposed ? w->dim(0) : w->dim(1);
  const int64_t group = ctx.params().getInt("group", k);
  if (Status s = checkQuantGroup(*traits, k, group); !s.ok()) return kernelError(ctx, s.message());
  const int64_t groups = (k + group - 1) / group;
  // data, scales and (for formats with them) zero points; a caller may ask for a prefix of them
  // (`llmc refit` replays one output of a recipe step at a time).
  const size_t available = traits->zero_points ? 3 : 2;
  if (ctx.numOutputs() < 1 || ctx.numOutputs() > available)
    return kernelError(ctx, std::string(traits->name) + " has " + std::to_string(available) + " outputs");
  const DType dtypes[3] = {traits->data_dtype, traits->scale_dtype, DType::kUInt8};
  const Shape shapes[3] = {{n, traits->bits == 8 ? k : k / 2}, {n, groups}, {n, groups}};
  Tensor* outs[3] = {nullptr, nullptr, nullptr};
  for (size_t i = 0; i < ctx.numOutputs(); ++i)
    LLMC_RETURN_IF_ERROR(ctx.allocateOutput(i, dtypes[i], shapes[i], &outs[i]));
  if (ctx.shapeOnly()) return okStatus();
  const Tensor* importance = ctx.input(1);
  if (importance && (importance->dtype() != DType::kFloat32 || importance->numElements() != k))
    return kernelError(ctx, "importance must be float32 [K = " + std::to_string(k) + "]");
  Tensor parts[3];
  LLMC_RETURN_IF_ERROR(quantizeWeight(*w, transposed, *traits, group, &parts[0], &parts[1], &parts[2],
                                      importance ? importance->data<float>() : nullptr));
  for (size_t i = 0; i < ctx.numOutputs(); ++i) std::memcpy(outs[i]->data(), parts[i].data(), parts[i].sizeBytes());
  return okStatus();
}

// y = act(alpha * x·Wᵀ + bias) with W the quantized [N, K]; or, gated (N = 2F),
// y = act(h[:, :F]) * h[:, F:] with h = x·Wᵀ.
Status quantMatMulKernel(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* data = ctx.input(1);
  const Tensor* scales = ctx.input(2);
  const Tensor* zeros = ctx.input(3);
  const Tensor* bias = ctx.input(4);
  const Tensor* input_scales = ctx.input(5);
  const QuantTraits* traits = findQuantTraits(ctx.params().getString("format", ""));
  if (!traits) return kernelError(ctx, "unknown quantization format '" + ctx.params().getString("format", "") + "'");
  if (!x || !data || !scales || x->rank() < 1 || x->dtype() != DType::kFloat32)
    return kernelError(ctx, "LlmQuantMatMul needs float32 x [..., K], data and scales");
  const int64_t k = x->dim(x->rank() - 1);
  const int64_t group = ctx.params().getInt("group", k);
  QuantWeight w;
  if (Status s = makeQuantWeight(*traits, k, group, *data, *scales, zeros, &w); !s.ok())
    return kernelError(ctx, s.message());
  const bool gated = ctx.params().getInt("gated", 0) != 0;
  const Activation activation = activationFromName(ctx.params().getString("activation", ""));
  if (activation == Activation::kUnknown || (gated && activation == Activation::kNone))
    return kernelError(ctx, "unknown activation");
  if (gated && (w.n % 2 != 0 || bias)) return kernelError(ctx, "a gated product has 2F outputs and no bias");
  if (input_scales && (input_scales->dtype() != DType::kFloat32 || input_scales->numElements() != k))
    return kernelError(ctx, "input_scales " + shapeToString(input_scales->shape()) + " does not have K = " +
                                std::to_string(k) + " values");
  if (bias && (bias->dtype() != DType::kFloat32 || bias->numElements() != w.n))
    return kernelError(ctx, "bias " + shapeToString(bias->shape()) + " does not have " + std::to_string(w.n) + " values");
  const int64_t out_n = gated ? w.n / 2 : w.n;
  Shape out_shape = x->shape();
  out_shape.back() = out_n;
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, out_shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  const int64_t rows = x->numElements() / k;
  std::vector<float> scaled(input_scales ? static_cast<size_t>(k) : 0);
  auto input_row = [&](int64_t r) {
    const float* row = x->data<float>() + r * k;
    if (!input_scales) return row;
    // Activation-aware or smoothed: x * s per channel, the weight's rows hold 1 / s.
    for (int64_t j = 0; j < k; ++j) scaled[static_cast<size_t>(j)] = row[j] * input_scales->data<float>()[j];
    return static_cast<const float*>(scaled.data());
  };
  std::vector<float> gate_up;
  float* h = out->data<float>();
  if (gated) {
    gate_up.resize(static_cast<size_t>(rows * w.n));
    h = gate_up.data();
  }
  if (traits->e4m3) {
    // fp8: the activations (all rows) as E4M3 with one scale, the products of the decoded
    // values summed in float (each product of two E4M3 values is exact in float32), then the
    // two scales. The reference the GPU's FP8 products are tested against; not tuned.
    float amax = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = input_row(r);
      for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(row[j]));
    }
    const float a_scale = amax / kE4M3Max;
    const float inverse = inverseScale(a_scale);
    std::vector<float> a(static_cast<size_t>(rows * k)), wrow(static_cast<size_t>(k));
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = input_row(r);
      for (int64_t j = 0; j < k; ++j) a[static_cast<size_t>(r * k + j)] = e4m3ToFloat(floatToE4M3(row[j] * inverse));
    }
    const uint8_t* wq = static_cast<const uint8_t*>(w.data);
    for (int64_t n = 0; n < w.n; ++n) {
      for (int64_t j = 0; j < k; ++j) wrow[static_cast<size_t>(j)] = e4m3ToFloat(wq[n * k + j]);
      const float w_scale = w.scale(n, 0);
      for (int64_t r = 0; r < rows; ++r) {
        float sum = 0;
        for (int64_t j = 0; j < k; ++j) sum += a[static_cast<size_t>(r * k + j)] * wrow[static_cast<size_t>(j)];
        h[r * w.n + n] = sum * a_scale * w_scale;
      }
    }
  } else if (traits->per_token_activations) {
    // w8a8: one int8 scale per row, exact int32 sums over K, two float multiplies per output.
    if (k > kMaxPerTokenK) return kernelError(ctx, "w8a8 takes K up to " + std::to_string(kMaxPerTokenK));
    std::vector<int8_t> aq(static_cast<size_t>(rows * k));
    std::vector<float> row_scales(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) row_scales[r] = quantizeRowPerToken(input_row(r), k, aq.data() + r * k);
    const auto dot = quantDotHasAvx2() ? dotInt8Avx2 : dotInt8Scalar;
    const int8_t* wq = static_cast<const int8_t*>(w.data);
    for (int64_t n = 0; n < w.n; ++n) {
      const float w_scale = w.scale(n, 0);
      for (int64_t r = 0; r < rows; ++r)
        h[r * w.n + n] = static_cast<float>(dot(aq.data() + r * k, wq + n * k, k)) * row_scales[r] * w_scale;
    }
  } else {
    std::vector<QuantizedActivations> activations(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      quantizeActivations(input_row(r), k, w.group, activationBits(*traits), &activations[r]);
    const auto dot = quantDotHasAvx2() ? quantDotAvx2 : quantDotScalar;
    // Output channel outer, rows inner: one weight row serves every row while it is in cache.
    for (int64_t n = 0; n < w.n; ++n)
      for (int64_t r = 0; r < rows; ++r) h[r * w.n + n] = dot(w, n, activations[static_cast<size_t>(r)]);
  }
  if (!gated) {
    applyEpilogue(h, rows, w.n, static_cast<float>(ctx.params().getFloat("alpha", 1.0)),
                  bias ? bias->data<float>() : nullptr, activation);
    return okStatus();
  }
  float* y = out->data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t f = 0; f < out_n; ++f)
      y[r * out_n + f] = activate(activation, h[r * w.n + f]) * h[r * w.n + out_n + f];
  return okStatus();
}

// Rows of a quantized table [V, K] by ids (an embedding): y[i..., :] = dequantized row ids[i...];
// ids in [-V, V), negative ones counting from the end as ONNX Gather's do.
Status quantGatherKernel(KernelContext& ctx) {
  const Tensor* ids = ctx.input(0);
  const Tensor* data = ctx.input(1);
  const Tensor* scales = ctx.input(2);
  const Tensor* zeros = ctx.input(3);
  const QuantTraits* traits = findQuantTraits(ctx.params().getString("format", ""));
  if (!traits) return kernelError(ctx, "unknown quantization format '" + ctx.params().getString("format", "") + "'");
  if (!ids || !data || !scales || data->rank() != 2 ||
      (ids->dtype() != DType::kInt64 && ids->dtype() != DType::kInt32))
    return kernelError(ctx, "LlmQuantGather needs int32/int64 ids, data and scales");
  const int64_t k = traits->bits == 8 ? data->dim(1) : data->dim(1) * 2;
  QuantWeight w;
  if (Status s = makeQuantWeight(*traits, k, ctx.params().getInt("group", k), *data, *scales, zeros, &w); !s.ok())
    return kernelError(ctx, s.message());
  Shape out_shape = ids->shape();
  out_shape.push_back(k);
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, out_shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  std::vector<int64_t> rows;
  LLMC_RETURN_IF_ERROR(readInt64s(ids, &rows));
  for (size_t i = 0; i < rows.size(); ++i) {
    int64_t row = rows[i];
    if (row < -w.n || row >= w.n)
      return kernelError(ctx, "index " + std::to_string(row) + " is outside the table's " + std::to_string(w.n) + " rows");
    if (row < 0) row += w.n;
    dequantizeRow(w, row, out->data<float>() + static_cast<int64_t>(i) * k);
  }
  return okStatus();
}

}  // namespace

void registerQuantKernels(KernelRegistry& registry) {
  registry.add({"LlmQuantizeWeight", 1, 2, 2, 3, quantizeWeightKernel});
  registry.add({"LlmQuantMatMul", 3, 6, 1, 1, quantMatMulKernel});
  registry.add({"LlmQuantGather", 3, 4, 1, 1, quantGatherKernel});
}

}  // namespace llmc
