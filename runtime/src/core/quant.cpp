// The quantization formats' traits, the round-to-nearest quantizer and the dequantizer
// (quant.h).
#include "core/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu_features.h"
#include "core/fp8.h"
#include "core/half.h"
#include "core/scale.h"
#include "core/thread_pool.h"

namespace llmc {
namespace {

constexpr QuantTraits kTraits[] = {
    {QuantFormat::kInt8, "int8", 8, false, DType::kInt8, DType::kFloat32, false, false},
    {QuantFormat::kInt4, "int4", 4, false, DType::kUInt8, DType::kFloat16, false, false},
    {QuantFormat::kInt4Zp, "int4_zp", 4, true, DType::kUInt8, DType::kFloat16, false, false},
    {QuantFormat::kW8A8, "w8a8", 8, false, DType::kInt8, DType::kFloat32, true, false},
    {QuantFormat::kFp8, "fp8", 8, false, DType::kUInt8, DType::kFloat32, false, true},
};
static_assert(sizeof(kTraits) / sizeof(kTraits[0]) == 5, "one entry per QuantFormat, in order");

// Where element `i` of a row lives in 4-bit packing: (byte, high nibble?).
inline void nibbleAt(int64_t i, int64_t* byte, bool* high) {
  const int64_t block = i / kQuantBlock, j = i % kQuantBlock;
  *byte = block * (kQuantBlock / 2) + (j % (kQuantBlock / 2));
  *high = j >= kQuantBlock / 2;
}

// Scales tried below the absmax one: 1.00, 0.99, ..., 0.80 of it.
constexpr int kClipSteps = 20;

// The scale as stored (float16 formats round it first, and quantize with the rounded value so
// that dequantization reproduces exactly what was rounded).
float storedScale(const QuantTraits& traits, float scale) {
  return traits.scale_dtype == DType::kFloat16 ? toFloat(toFloat16(scale)) : scale;
}

// std::clamp(std::lround(v), low, high) for finite v and integers low < high, as a float:
// without branches or calls, so that the loops over it vectorize.
inline float roundClamped(float v, float low, float high) {
  const float t = std::min(std::max(v, low), high);
  const float whole = static_cast<float>(static_cast<int32_t>(t));  // toward zero
  const float fraction = t - whole;                                 // exact, in (-1, 1)
  // 2 x fraction (exact) is 1 or more, or -1 or less, where the rounding moves away from zero.
  return whole + static_cast<float>(static_cast<int32_t>(fraction + fraction));
}

// Where quantizeWeight writes, and what it reads besides the row.
struct QuantTarget {
  const QuantTraits& traits;
  int64_t k, group, groups;
  const float* importance;
  Tensor *data, *scales, *zeros;
};

constexpr int kCandidates = kClipSteps + 1;
// Three more lanes (0.79 to 0.77, never chosen) make whole vectors of 4 and 8.
constexpr int kLanes = (kCandidates + 7) / 8 * 8;

// Each candidate's squared error over the group into error[step] (zeroed), summed in ascending
// i (the order of one candidate at a time); the candidates go through the group together.
__attribute__((always_inline)) inline void clipErrors(const float* x, int64_t length,
                                                      const float* importance,
                                                      const float* candidate, const float* inverse,
                                                      float* error) {
  for (int64_t i = 0; i < length; ++i) {
    const float xi = x[i], weight = importance ? importance[i] : 1.0f;
    for (int step = 0; step < kLanes; ++step) {
      const float d = xi - roundClamped(xi * inverse[step], -8, 7) * candidate[step];
      error[step] += d * d * weight;
    }
  }
}
// The same in 8 lanes where the CPU has AVX2. Not FMA: the products and sums round one at a time
// on every CPU.
__attribute__((target("avx2"))) void clipErrorsAvx2(const float* x, int64_t length,
                                                    const float* importance, const float* candidate,
                                                    const float* inverse, float* error) {
  clipErrors(x, length, importance, candidate, inverse, error);
}
void clipErrorsBaseline(const float* x, int64_t length, const float* importance,
                        const float* candidate, const float* inverse, float* error) {
  clipErrors(x, length, importance, candidate, inverse, error);
}

// The scale of int4's clip search: of base x 1.00, 0.99, ..., 0.80 (each as stored), the first
// with the least squared error over the group.
float clippedScale(const QuantTraits& traits, const float* x, int64_t length,
                   const float* importance, float base) {
  float candidate[kLanes], inverse[kLanes], error[kLanes] = {};
  for (int step = 0; step < kLanes; ++step) {
    candidate[step] = storedScale(traits, base * (1.0f - 0.01f * static_cast<float>(step)));
    inverse[step] = inverseScale(candidate[step]);
  }
  (cpuIsa() >= CpuIsa::kAvx2 ? clipErrorsAvx2 : clipErrorsBaseline)(x, length, importance,
                                                                    candidate, inverse, error);
  int best = 0;
  for (int step = 1; step < kCandidates; ++step)
    if (error[step] < error[best]) best = step;
  return candidate[best];
}

// Group g of output channel r (its K values in `row`).
void quantizeGroup(const QuantTarget& out, const float* row, int64_t r, int64_t g) {
  const QuantTraits& traits = out.traits;
  const float* x = row + g * out.group;
  const int64_t length = std::min(out.group, out.k - g * out.group), at = r * out.groups + g;
  float lo = 0, hi = 0, amax = 0, extreme = 0;  // extreme: the value of largest magnitude
  for (int64_t i = 0; i < length; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), extreme = x[i];
  }
  float scale = 0;
  int zero = 0;
  if (traits.e4m3) {
    // The absmax maps to E4M3's largest value; the format's own spacing does the rest.
    scale = amax / kE4M3Max;
    out.scales->data<float>()[at] = scale;
    const float inverse = inverseScale(scale);
    for (int64_t i = 0; i < length; ++i)
      out.data->data<uint8_t>()[r * out.k + g * out.group + i] = floatToE4M3(x[i] * inverse);
    return;
  }
  if (traits.bits == 8) {
    // absmax maps to 127. (int8's step is fine enough that clipping only moved the demo model's
    // top-1 agreement down: it keeps the absmax scale.)
    scale = storedScale(traits, amax / 127.0f);
  } else if (!traits.zero_points) {
    // int4, as llama.cpp's Q4_0: the value of largest magnitude maps to -8, so all 16 levels
    // are used (the scale is negative when that value is positive); then the clip search:
    // clipping the few largest values buys a finer step for all the others.
    scale =
        clippedScale(traits, x, length, out.importance ? out.importance + g * out.group : nullptr,
                     extreme / -8.0f);
  } else {
    // The range [lo, hi] always holds 0 (lo <= 0 <= hi), so zero is exactly representable.
    scale = storedScale(traits, (hi - lo) / 15.0f);
    zero = scale > 0 ? std::clamp(static_cast<int>(std::lround(-lo / scale)), 0, 15) : 0;
    out.zeros->data<uint8_t>()[at] = static_cast<uint8_t>(zero);
  }
  if (traits.scale_dtype == DType::kFloat16)
    out.scales->data<Float16>()[at] = toFloat16(scale);
  else
    out.scales->data<float>()[at] = scale;
  const float inverse = inverseScale(scale);
  if (traits.bits == 8) {
    int8_t* codes = out.data->data<int8_t>() + r * out.k + g * out.group;
    for (int64_t i = 0; i < length; ++i)
      codes[i] = static_cast<int8_t>(roundClamped(x[i] * inverse, -127, 127));
    return;
  }
  // Stored as code + zero (int4: + 8), in [0, 15].
  const float offset = traits.zero_points ? static_cast<float>(zero) : 8.0f;
  uint8_t* cells = out.data->data<uint8_t>() + r * (out.k / 2);
  for (int64_t i = 0; i < length; ++i) {
    const uint8_t stored =
        static_cast<uint8_t>(roundClamped(x[i] * inverse, -offset, 15 - offset) + offset);
    int64_t byte = 0;
    bool high = false;
    nibbleAt(g * out.group + i, &byte, &high);
    uint8_t& cell = cells[byte];
    cell = high ? static_cast<uint8_t>((cell & 0x0f) | (stored << 4))
                : static_cast<uint8_t>((cell & 0xf0) | stored);
  }
}

}  // namespace

const QuantTraits& quantTraits(QuantFormat format) { return kTraits[static_cast<size_t>(format)]; }

const QuantTraits* findQuantTraits(const std::string& name) {
  for (const QuantTraits& traits : kTraits)
    if (name == traits.name) return &traits;
  return nullptr;
}

Status checkQuantGroup(const QuantTraits& traits, int64_t k, int64_t group) {
  if (k <= 0 || k % kQuantBlock != 0)
    return invalidArgument(std::string(traits.name) + " needs K to be a multiple of " +
                           std::to_string(kQuantBlock) + ", got " + std::to_string(k));
  if (traits.bits == 8) {
    if (group != k)
      return invalidArgument(std::string(traits.name) + " has one scale per output channel (group = K = " + std::to_string(k) +
                             "), got group " + std::to_string(group));
    return okStatus();
  }
  if (group <= 0 || group % kQuantBlock != 0)
    return invalidArgument(std::string(traits.name) + " group " + std::to_string(group) +
                           " must be a positive multiple of " + std::to_string(kQuantBlock));
  return okStatus();
}

Status makeQuantWeight(const QuantTraits& traits, int64_t k, int64_t group, const Tensor& data,
                       const Tensor& scales, const Tensor* zeros, QuantWeight* out) {
  if (data.rank() != 2 || data.dtype() != traits.data_dtype)
    return invalidArgument(std::string(traits.name) + " data must be 2-D " + dtypeName(traits.data_dtype) +
                           ", got " + dtypeName(data.dtype()) + shapeToString(data.shape()));
  const int64_t n = data.dim(0);
  if (data.dim(1) != (traits.bits == 8 ? k : k / 2))
    return invalidArgument(std::string(traits.name) + " data " + shapeToString(data.shape()) +
                           " does not hold K = " + std::to_string(k));
  LLMC_RETURN_IF_ERROR(checkQuantGroup(traits, k, group));
  const int64_t groups = (k + group - 1) / group;
  if (scales.rank() != 2 || scales.dtype() != traits.scale_dtype || scales.dim(0) != n || scales.dim(1) != groups)
    return invalidArgument(std::string(traits.name) + " scales must be " + dtypeName(traits.scale_dtype) +
                           " [" + std::to_string(n) + ", " + std::to_string(groups) + "] for K = " +
                           std::to_string(k) + " in groups of " + std::to_string(group) + ", got " +
                           dtypeName(scales.dtype()) + shapeToString(scales.shape()));
  if (traits.zero_points != (zeros != nullptr))
    return invalidArgument(std::string(traits.name) + (traits.zero_points ? " needs" : " has no") + " zero points");
  if (zeros && (zeros->dtype() != DType::kUInt8 || zeros->shape() != scales.shape()))
    return invalidArgument(std::string(traits.name) + " zero points must be uint8 " + shapeToString(scales.shape()) +
                           ", got " + dtypeName(zeros->dtype()) + shapeToString(zeros->shape()));
  *out = QuantWeight{&traits, n, k, group, data.data(), scales.data(),
                     zeros ? zeros->data<uint8_t>() : nullptr};
  return okStatus();
}

Status quantizeWeight(const Tensor& w, bool transposed, const QuantTraits& traits, int64_t group,
                      Tensor* data, Tensor* scales, Tensor* zeros, const float* importance,
                      ThreadPool* pool) {
  if (w.dtype() != DType::kFloat32 || w.rank() != 2)
    return invalidArgument("quantizing needs a 2-D float32 weight, got " + std::string(dtypeName(w.dtype())) +
                           shapeToString(w.shape()));
  const int64_t k = transposed ? w.dim(1) : w.dim(0);
  const int64_t n = transposed ? w.dim(0) : w.dim(1);
  LLMC_RETURN_IF_ERROR(checkQuantGroup(traits, k, group));
  const float* src = w.data<float>();
  // No code stands for inf or NaN: such a weight cannot be quantized (its product stays float).
  for (int64_t i = 0; i < k * n; ++i)
    if (!std::isfinite(src[i]))
      return invalidArgument("quantizing needs finite weights, got " + std::to_string(src[i]) +
                             " at [" + std::to_string(i / w.dim(1)) + ", " +
                             std::to_string(i % w.dim(1)) + "] of " + shapeToString(w.shape()));
  const int64_t groups = (k + group - 1) / group;
  *data = Tensor::allocate(traits.data_dtype, {n, traits.bits == 8 ? k : k / 2});
  *scales = Tensor::allocate(traits.scale_dtype, {n, groups});
  if (traits.zero_points) *zeros = Tensor::allocate(DType::kUInt8, {n, groups});
  const QuantTarget target{traits, k, group, groups, importance, data, scales, zeros};
  constexpr int64_t kRowsPerTask = 16;
  parallelFor(pool, (n + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = task * kRowsPerTask; r < std::min(n, (task + 1) * kRowsPerTask); ++r) {
      for (int64_t i = 0; i < k; ++i) row[i] = transposed ? src[r * k + i] : src[i * n + r];
      for (int64_t g = 0; g < groups; ++g) quantizeGroup(target, row.data(), r, g);
    }
  });
  return okStatus();
}

void dequantizeRow(const QuantWeight& weight, int64_t row, float* out) {
  const int64_t k = weight.k;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t g = i / weight.group;
    const float scale = weight.scale(row, g);
    if (weight.traits->e4m3) {
      out[i] = e4m3ToFloat(static_cast<const uint8_t*>(weight.data)[row * k + i]) * scale;
      continue;
    }
    if (weight.traits->bits == 8) {
      out[i] = static_cast<float>(static_cast<const int8_t*>(weight.data)[row * k + i]) * scale;
      continue;
    }
    int64_t byte = 0;
    bool high = false;
    nibbleAt(i, &byte, &high);
    const uint8_t cell = static_cast<const uint8_t*>(weight.data)[row * (k / 2) + byte];
    const int q = high ? cell >> 4 : cell & 0x0f;
    const int zero = weight.zeros ? weight.zeros[row * weight.groupsPerRow() + g] : 8;
    out[i] = static_cast<float>(q - zero) * scale;
  }
}

}  // namespace llmc
