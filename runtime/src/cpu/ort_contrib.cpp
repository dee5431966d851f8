// Reference kernels for the ONNX Runtime contrib operators that onnxruntime-genai's model
// builder writes for decoders: SimplifiedLayerNormalization (RMS norm),
// com.microsoft.SkipSimplifiedLayerNormalization (residual add + RMS norm) and
// com.microsoft.GroupQueryAttention (packed or separate Q/K/V, its own past/present KV
// tensors, rotary embedding from cos/sin caches, causal attention with grouped KV heads).
// Semantics as ONNX Runtime's contrib-op documentation states them; float32 only.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/kernel.h"
#include "cpu/rotary.h"

namespace llmc {
namespace {

// y = x / sqrt(mean(x^2) + eps) * gain over the last `inner` elements of each row.
void rmsNormRows(const float* x, const float* gain, int64_t rows, int64_t inner, double epsilon,
                 float* y, float* inv_std) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * inner;
    double sum = 0;
    for (int64_t i = 0; i < inner; ++i) sum += static_cast<double>(row[i]) * row[i];
    double inv = 1.0 / std::sqrt(sum / static_cast<double>(inner) + epsilon);
    for (int64_t i = 0; i < inner; ++i)
      y[r * inner + i] = static_cast<float>(row[i] * inv) * gain[i];
    if (inv_std) inv_std[r] = static_cast<float>(inv);
  }
}

Status requireFloat32(KernelContext& ctx, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t && t->dtype() != DType::kFloat32) return kernelError(ctx, "float32 only");
  return okStatus();
}

Status simplifiedLayerNorm(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* scale = ctx.input(1);
  if (!x || !scale) return kernelError(ctx, "needs X and scale");
  LLMC_RETURN_IF_ERROR(requireFloat32(ctx, {x, scale}));
  int64_t axis = 0;
  LLMC_RETURN_IF_ERROR(normalizeAxis(ctx.params().getInt("axis", -1), x->rank(), ctx.nodeName(), &axis));
  int64_t inner = 1;
  for (int64_t d = axis; d < x->rank(); ++d) inner *= x->dim(d);
  if (scale->numElements() != inner)
    return kernelError(ctx, "scale " + shapeToString(scale->shape()) + " does not match the " +
                                std::to_string(inner) + " normalized elements");
  Tensor* y = nullptr;
  Tensor* inv_std = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, x->shape(), &y));
  Shape reduced = x->shape();
  for (int64_t d = axis; d < x->rank(); ++d) reduced[d] = 1;
  if (ctx.numOutputs() > 1) LLMC_RETURN_IF_ERROR(ctx.allocateOutput(1, DType::kFloat32, reduced, &inv_std));
  if (ctx.shapeOnly()) return okStatus();
  int64_t rows = inner ? x->numElements() / inner : 0;
  rmsNormRows(x->data<float>(), scale->data<float>(), rows, inner,
              ctx.params().getFloat("epsilon", 1e-5), y->data<float>(),
              inv_std ? inv_std->data<float>() : nullptr);
  return okStatus();
}

Status skipSimplifiedLayerNorm(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* skip = ctx.input(1);
  const Tensor* gamma = ctx.input(2);
  const Tensor* bias = ctx.input(3);
  if (!x || !skip || !gamma) return kernelError(ctx, "needs input, skip and gamma");
  LLMC_RETURN_IF_ERROR(requireFloat32(ctx, {x, skip, gamma, bias}));
  if (x->rank() < 1) return kernelError(ctx, "input must have a hidden axis");
  const int64_t hidden = x->dim(x->rank() - 1);
  // skip is the input's shape, or broadcast over the batch ([seq, hidden]).
  if (skip->numElements() == 0 || x->numElements() % skip->numElements() != 0 ||
      skip->dim(skip->rank() - 1) != hidden || gamma->numElements() != hidden ||
      (bias && bias->numElements() != hidden))
    return kernelError(ctx, "skip " + shapeToString(skip->shape()) + ", gamma " +
                                shapeToString(gamma->shape()) + " do not fit input " +
                                shapeToString(x->shape()));
  Tensor* y = nullptr;
  Tensor* mean = nullptr;
  Tensor* inv_std = nullptr;
  Tensor* sum = nullptr;
  Shape reduced = x->shape();
  reduced.back() = 1;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, x->shape(), &y));
  if (ctx.numOutputs() > 1) LLMC_RETURN_IF_ERROR(ctx.allocateOutput(1, DType::kFloat32, reduced, &mean));
  if (ctx.numOutputs() > 2) LLMC_RETURN_IF_ERROR(ctx.allocateOutput(2, DType::kFloat32, reduced, &inv_std));
  if (ctx.numOutputs() > 3) LLMC_RETURN_IF_ERROR(ctx.allocateOutput(3, DType::kFloat32, x->shape(), &sum));
  if (ctx.shapeOnly()) return okStatus();
  const int64_t rows = x->numElements() / hidden;
  const int64_t skip_rows = skip->numElements() / hidden;
  std::vector<float> added(static_cast<size_t>(x->numElements()));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < hidden; ++i)
      added[r * hidden + i] = x->data<float>()[r * hidden + i] +
                              skip->data<float>()[(r % skip_rows) * hidden + i] +
                              (bias ? bias->data<float>()[i] : 0.0f);
  rmsNormRows(added.data(), gamma->data<float>(), rows, hidden,
              ctx.params().getFloat("epsilon", 1e-5), y->data<float>(),
              inv_std ? inv_std->data<float>() : nullptr);
  if (mean)  // ONNX Runtime leaves it unused for the simplified form; give the row means
    for (int64_t r = 0; r < rows; ++r) {
      double m = 0;
      for (int64_t i = 0; i < hidden; ++i) m += added[r * hidden + i];
      mean->data<float>()[r] = static_cast<float>(m / hidden);
    }
  if (sum) std::memcpy(sum->data<float>(), added.data(), added.size() * sizeof(float));
  return okStatus();
}

// Rotates `x` (head_dim values) in place for position `pos` with cos/sin caches
// [max_positions, head_dim / 2].
void rotate(float* x, int64_t head_dim, int64_t pos, const float* cos_cache, const float* sin_cache,
            bool interleaved) {
  const int64_t half = head_dim / 2;
  rotateHead(x, cos_cache + pos * half, sin_cache + pos * half, half, interleaved);
}

Status groupQueryAttention(KernelContext& ctx) {
  const Tensor* query = ctx.input(0);
  const Tensor* key = ctx.input(1);
  const Tensor* value = ctx.input(2);
  const Tensor* past_key = ctx.input(3);
  const Tensor* past_value = ctx.input(4);
  const Tensor* seqlens_k = ctx.input(5);
  const Tensor* total_length = ctx.input(6);
  const Tensor* cos_cache = ctx.input(7);
  const Tensor* sin_cache = ctx.input(8);
  const KernelParams& p = ctx.params();
  const int64_t heads = p.getInt("num_heads", 0), kv_heads = p.getInt("kv_num_heads", 0);
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0)
    return kernelError(ctx, "num_heads must be a positive multiple of kv_num_heads");
  if (!query || query->rank() != 3 || !seqlens_k || !total_length)
    return kernelError(ctx, "needs query [batch, seq, hidden], seqlens_k and total_sequence_length");
  LLMC_RETURN_IF_ERROR(requireFloat32(ctx, {query, key, value, past_key, past_value, cos_cache, sin_cache}));
  if (p.getFloat("softcap", 0.0) != 0.0) return kernelError(ctx, "softcap is not supported");
  // local_window_size L >= 0: the token at position i sees keys i - L .. i (L + 1 of them).
  const int64_t local_window = p.getInt("local_window_size", -1);
  if (local_window < -1) return kernelError(ctx, "local_window_size must be -1 (off) or >= 0");
  const int64_t batch = query->dim(0), seq = query->dim(1);
  const bool packed = key == nullptr;
  const int64_t head_dim = packed ? query->dim(2) / (heads + 2 * kv_heads) : query->dim(2) / heads;
  if (head_dim < 1 || (packed && query->dim(2) != (heads + 2 * kv_heads) * head_dim) ||
      (!packed && (!value || key->rank() != 3 || key->dim(2) != kv_heads * head_dim ||
                   value->dim(2) != kv_heads * head_dim || key->dim(1) != seq)))
    return kernelError(ctx, "query/key/value do not fit num_heads and kv_num_heads");
  const int64_t past = past_key ? past_key->dim(2) : 0;
  if (past_key && (past_key->rank() != 4 || past_key->dim(0) != batch ||
                   past_key->dim(1) != kv_heads || past_key->dim(3) != head_dim || !past_value ||
                   past_value->shape() != past_key->shape()))
    return kernelError(ctx, "past_key/past_value must be [batch, kv_heads, past, head_dim]");
  std::vector<int64_t> lengths, total;
  LLMC_RETURN_IF_ERROR(readInt64s(seqlens_k, &lengths).withContext(ctx.nodeName()));
  LLMC_RETURN_IF_ERROR(readInt64s(total_length, &total).withContext(ctx.nodeName()));
  if (total.size() != 1 || total[0] < seq) return kernelError(ctx, "bad total_sequence_length");
  const int64_t present_len = std::max(total[0], past + seq);
  Tensor* out = nullptr;
  Tensor* present_k = nullptr;
  Tensor* present_v = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, {batch, seq, heads * head_dim}, &out));
  if (ctx.numOutputs() > 1)
    LLMC_RETURN_IF_ERROR(ctx.allocateOutput(1, DType::kFloat32, {batch, kv_heads, present_len, head_dim}, &present_k));
  if (ctx.numOutputs() > 2)
    LLMC_RETURN_IF_ERROR(ctx.allocateOutput(2, DType::kFloat32, {batch, kv_heads, present_len, head_dim}, &present_v));
  if (ctx.shapeOnly()) return okStatus();
  if (static_cast<int64_t>(lengths.size()) != batch)
    return kernelError(ctx, "seqlens_k must have one entry per batch row");
  const bool rotary = p.getInt("do_rotary", 0) != 0;
  const bool interleaved = p.getInt("rotary_interleaved", 0) != 0;
  if (rotary && (!cos_cache || !sin_cache || cos_cache->rank() != 2 ||
                 cos_cache->dim(1) * 2 != head_dim || sin_cache->shape() != cos_cache->shape()))
    return kernelError(ctx, "do_rotary needs cos_cache/sin_cache [max_positions, head_dim / 2]");
  const double scale = p.has("scale") && p.getFloat("scale", 0.0) != 0.0
                           ? p.getFloat("scale", 0.0)
                           : 1.0 / std::sqrt(static_cast<double>(head_dim));
  const int64_t group = heads / kv_heads;
  // K/V of every batch row: past then new, [batch][kv_heads][present_len][head_dim].
  std::vector<float> keys(static_cast<size_t>(batch * kv_heads * present_len * head_dim), 0.0f);
  std::vector<float> values(keys.size(), 0.0f);
  std::vector<float> q(static_cast<size_t>(batch * heads * seq * head_dim));
  const int64_t q_stride = packed ? (heads + 2 * kv_heads) * head_dim : heads * head_dim;
  for (int64_t b = 0; b < batch; ++b) {
    // The row's new tokens sit after its past: positions past_b .. past_b + seq - 1.
    const int64_t past_b = lengths[b] + 1 - seq;
    if (past_b < 0 || past_b > past || lengths[b] + 1 > present_len)
      return kernelError(ctx, "seqlens_k[" + std::to_string(b) + "] = " + std::to_string(lengths[b]) +
                                  " does not fit a past of " + std::to_string(past) + " and " +
                                  std::to_string(seq) + " new tokens");
    if (rotary && past_b + seq > cos_cache->dim(0))
      return kernelError(ctx, "position " + std::to_string(past_b + seq - 1) +
                                  " is past the rotary cache of " + std::to_string(cos_cache->dim(0)));
    for (int64_t h = 0; h < kv_heads; ++h) {
      float* kdst = &keys[static_cast<size_t>(((b * kv_heads + h) * present_len) * head_dim)];
      float* vdst = &values[static_cast<size_t>(((b * kv_heads + h) * present_len) * head_dim)];
      if (past_b > 0) {
        std::memcpy(kdst, past_key->data<float>() + (b * kv_heads + h) * past * head_dim,
                    past_b * head_dim * sizeof(float));
        std::memcpy(vdst, past_value->data<float>() + (b * kv_heads + h) * past * head_dim,
                    past_b * head_dim * sizeof(float));
      }
      for (int64_t s = 0; s < seq; ++s) {
        const float* ksrc = packed ? query->data<float>() + (b * seq + s) * q_stride + (heads + h) * head_dim
                                   : key->data<float>() + (b * seq + s) * kv_heads * head_dim + h * head_dim;
        const float* vsrc = packed ? query->data<float>() + (b * seq + s) * q_stride + (heads + kv_heads + h) * head_dim
                                   : value->data<float>() + (b * seq + s) * kv_heads * head_dim + h * head_dim;
        float* kd = kdst + (past_b + s) * head_dim;
        std::memcpy(kd, ksrc, head_dim * sizeof(float));
        std::memcpy(vdst + (past_b + s) * head_dim, vsrc, head_dim * sizeof(float));
        if (rotary) rotate(kd, head_dim, past_b + s, cos_cache->data<float>(), sin_cache->data<float>(), interleaved);
      }
    }
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < seq; ++s) {
        float* qd = &q[static_cast<size_t>(((b * heads + h) * seq + s) * head_dim)];
        std::memcpy(qd, query->data<float>() + (b * seq + s) * q_stride + h * head_dim, head_dim * sizeof(float));
        if (rotary) rotate(qd, head_dim, past_b + s, cos_cache->data<float>(), sin_cache->data<float>(), interleaved);
      }
    std::vector<double> scores;
    for (int64_t h = 0; h < heads; ++h) {
      const float* kh = &keys[static_cast<size_t>(((b * kv_heads + h / group) * present_len) * head_dim)];
      const float* vh = &values[static_cast<size_t>(((b * kv_heads + h / group) * present_len) * head_dim)];
      for (int64_t s = 0; s < seq; ++s) {
        const float* qd = &q[static_cast<size_t>(((b * heads + h) * seq + s) * head_dim)];
        const int64_t position = past_b + s;  // causal: keys first .. position
        const int64_t first = local_window >= 0 ? std::max<int64_t>(0, position - local_window) : 0;
        const int64_t count = position + 1 - first;
        const float* kw = kh + first * head_dim;
        const float* vw = vh + first * head_dim;
        scores.assign(static_cast<size_t>(count), 0.0);
        double max_score = -INFINITY;
        for (int64_t j = 0; j < count; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(qd[d]) * kw[j * head_dim + d];
          scores[j] = dot * scale;
          max_score = std::max(max_score, scores[j]);
        }
        double sum = 0;
        for (double& x : scores) sum += (x = std::exp(x - max_score));
        float* o = out->data<float>() + (b * seq + s) * heads * head_dim + h * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < count; ++j) acc += scores[j] / sum * vw[j * head_dim + d];
          o[d] = static_cast<float>(acc);
        }
      }
    }
  }
  if (present_k) std::memcpy(present_k->data<float>(), keys.data(), keys.size() * sizeof(float));
  if (present_v) std::memcpy(present_v->data<float>(), values.data(), values.size() * sizeof(float));
  return okStatus();
}

// RotaryEmbedding: input [batch, seq, heads * head] or [batch, heads, seq, head];
// position_ids [batch, seq] (or [1]: an offset, token i at offset + i); cos/sin caches
// [max_positions, rotary_dim / 2]. The first rotary_dim values of each head rotate; the rest
// are copied.
Status rotaryEmbedding(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* position_ids = ctx.input(1);
  const Tensor* cos = ctx.input(2);
  const Tensor* sin = ctx.input(3);
  if (!x || !position_ids || !cos || !sin) return kernelError(ctx, "needs input, position_ids, cos_cache, sin_cache");
  LLMC_RETURN_IF_ERROR(requireFloat32(ctx, {x, cos, sin}));
  if ((x->rank() != 3 && x->rank() != 4) || cos->rank() != 2 || sin->shape() != cos->shape())
    return kernelError(ctx, "input must be 3-D or 4-D and cos/sin caches [max_positions, rotary_dim / 2]");
  const int64_t batch = x->dim(0);
  const int64_t seq = x->rank() == 3 ? x->dim(1) : x->dim(2);
  const int64_t rotary_dim = cos->dim(1) * 2;
  int64_t heads = ctx.params().getInt("num_heads", 0);
  int64_t head = 0;
  if (x->rank() == 4) {
    heads = x->dim(1);
    head = x->dim(3);
  } else {
    if (heads <= 0) heads = rotary_dim > 0 ? x->dim(2) / rotary_dim : 0;
    head = heads > 0 ? x->dim(2) / heads : 0;
  }
  const int64_t attr_dim = ctx.params().getInt("rotary_embedding_dim", 0);
  if (heads <= 0 || head <= 0 || heads * head != (x->rank() == 3 ? x->dim(2) : heads * head) ||
      rotary_dim > head || (attr_dim > 0 && attr_dim != rotary_dim))
    return kernelError(ctx, "input " + shapeToString(x->shape()) + " does not fit num_heads and the " +
                                std::to_string(rotary_dim) + "-wide rotary cache");
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, x->shape(), &out));
  if (ctx.shapeOnly()) return okStatus();
  std::vector<int64_t> pos;
  LLMC_RETURN_IF_ERROR(readInt64s(position_ids, &pos));
  const bool offset_only = pos.size() == 1;
  if (!offset_only && static_cast<int64_t>(pos.size()) != batch * seq)
    return kernelError(ctx, "position_ids must be [batch, seq] or [1]");
  const bool interleaved = ctx.params().getInt("interleaved", 0) != 0;
  const int64_t half = rotary_dim / 2;
  std::memcpy(out->data<float>(), x->data<float>(), x->numElements() * sizeof(float));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      const int64_t p = offset_only ? pos[0] + s : pos[b * seq + s];
      if (p < 0 || p >= cos->dim(0))
        return kernelError(ctx, "position " + std::to_string(p) + " is outside the rotary cache of " +
                                    std::to_string(cos->dim(0)));
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t offset = x->rank() == 3 ? (b * seq + s) * heads * head + h * head
                                              : ((b * heads + h) * seq + s) * head;
        rotateHead(out->data<float>() + offset, cos->data<float>() + p * half,
                   sin->data<float>() + p * half, half, interleaved);
      }
    }
  return okStatus();
}

}  // namespace

void registerOrtContribKernels(KernelRegistry& registry) {
  registry.add({"com.microsoft.RotaryEmbedding", 4, 4, 1, 1, &rotaryEmbedding});
  registry.add({"SimplifiedLayerNormalization", 2, 3, 1, 2, &simplifiedLayerNorm});
  registry.add({"com.microsoft.SkipSimplifiedLayerNormalization", 3, 4, 1, 4, &skipSimplifiedLayerNorm});
  registry.add({"com.microsoft.GroupQueryAttention", 1, 12, 1, 4, &groupQueryAttention});
}

}  // namespace llmc
