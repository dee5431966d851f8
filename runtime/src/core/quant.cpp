// The quantization formats' traits, the round-to-nearest quantizer and the dequantizer
// (quant.h).
#include "core/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp8.h"
#include "core/half.h"
#include "core/scale.h"

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
                      Tensor* data, Tensor* scales, Tensor* zeros, const float* importance) {
  if (w.dtype() != DType::kFloat32 || w.rank() != 2)
    return invalidArgument("quantizing needs a 2-D float32 weight, got " + std::string(dtypeName(w.dtype())) +
                           shapeToString(w.shape()));
  const int64_t k = transposed ? w.dim(1) : w.dim(0);
  const int64_t n = transposed ? w.dim(0) : w.dim(1);
  LLMC_RETURN_IF_ERROR(checkQuantGroup(traits, k, group));
  const int64_t groups = (k + group - 1) / group;
  *data = Tensor::allocate(traits.data_dtype, {n, traits.bits == 8 ? k : k / 2});
  *scales = Tensor::allocate(traits.scale_dtype, {n, groups});
  if (traits.zero_points) *zeros = Tensor::allocate(DType::kUInt8, {n, groups});
  const float* src = w.data<float>();
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < k; ++i) row[i] = transposed ? src[r * k + i] : src[i * n + r];
    for (int64_t g = 0; g < groups; ++g) {
      const float* x = row.data() + g * group;
      const int64_t length = std::min(group, k - g * group);
      float lo = 0, hi = 0, amax = 0, extreme = 0;  // extreme: the value of largest magnitude
      for (int64_t i = 0; i < length; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
        if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), extreme = x[i];
      }
      const int64_t at = r * groups + g;
      float scale = 0;
      int zero = 0;
      if (traits.e4m3) {
        // The absmax maps to E4M3's largest value; the format's own spacing does the rest.
        scale = amax / kE4M3Max;
        scales->data<float>()[at] = scale;
        const float inverse = inverseScale(scale);
        for (int64_t i = 0; i < length; ++i) data->data<uint8_t>()[r * k + g * group + i] = floatToE4M3(x[i] * inverse);
        continue;
      }
      if (!traits.zero_points) {
        // int8: absmax maps to 127. int4, as llama.cpp's Q4_0: the value of largest magnitude
        // maps to -8, so all 16 levels are used (the scale is negative when that value is
        // positive); then the scale with the least squared error between 0.8x and 1x of that
        // is kept: clipping the few largest values buys a finer step for all the others.
        const bool eight = traits.bits == 8;
        const float base = eight ? amax / 127.0f : extreme / -8.0f;
        const long low = eight ? -127 : -8, high = eight ? 127 : 7;
        float best_error = INFINITY;
        // (int8's step is fine enough that clipping only moved the demo model's top-1 agreement
        // down: it keeps the absmax scale.)
        for (int step = 0; step <= (eight ? 0 : kClipSteps); ++step) {
          const float candidate = storedScale(traits, base * (1.0f - 0.01f * static_cast<float>(step)));
          const float inverse = inverseScale(candidate);
          float error = 0;
          for (int64_t i = 0; i < length; ++i) {
            const float q = static_cast<float>(std::clamp<long>(std::lround(x[i] * inverse), low, high));
            error += (x[i] - q * candidate) * (x[i] - q * candidate) * (importance ? importance[g * group + i] : 1.0f);
          }
          if (error < best_error) best_error = error, scale = candidate;
        }
      } else {
        // The range [lo, hi] always holds 0 (lo <= 0 <= hi), so zero is exactly representable.
        scale = storedScale(traits, (hi - lo) / 15.0f);
        zero = scale > 0 ? std::clamp(static_cast<int>(std::lround(-lo / scale)), 0, 15) : 0;
        zeros->data<uint8_t>()[at] = static_cast<uint8_t>(zero);
      }
      if (traits.scale_dtype == DType::kFloat16) scales->data<Float16>()[at] = toFloat16(scale);
      else scales->data<float>()[at] = scale;
      const float inverse = inverseScale(scale);
      for (int64_t i = 0; i < length; ++i) {
        const int64_t e = g * group + i;
        const long q = std::lround(x[i] * inverse);
        if (traits.bits == 8) {
          data->data<int8_t>()[r * k + e] = static_cast<int8_t>(std::clamp<long>(q, -127, 127));
          continue;
        }
        const uint8_t stored = traits.zero_points ? static_cast<uint8_t>(std::clamp<long>(q + zero, 0, 15))
                                                  : static_cast<uint8_t>(std::clamp<long>(q, -8, 7) + 8);
        int64_t byte = 0;
        bool high = false;
        nibbleAt(e, &byte, &high);
        uint8_t& cell = data->data<uint8_t>()[r * (k / 2) + byte];
        cell = high ? static_cast<uint8_t>((cell & 0x0f) | (stored << 4)) : static_cast<uint8_t>((cell & 0xf0) | stored);
      }
    }
  }
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
