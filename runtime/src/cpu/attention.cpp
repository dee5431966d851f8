// ONNX Attention (opset 23) reference kernel, following the operator as ONNX 1.18 defines it
// (its function body and reference implementation, which its node tests were made with):
//  - 3-D Q/K/V [batch, seq, heads * head] are read as [batch, heads, seq, head] (a reshape,
//    no transpose); a 3-D output is [batch, seq, heads * v_head] (transposed back);
//  - with fewer KV heads, K/V heads are tiled: query head h reads KV head h % kv_heads;
//  - scores = (Q·√scale)(K·√scale)ᵀ + bias, where bias is -inf above the diagonal
//    (is_causal, aligned top-left) or the attention mask (bool: true attends; float: added);
//    then softcap (after the bias), softmax, ·V;
//  - past_key/past_value are concatenated before K/V and returned as present_key/value;
//  - output 3 is the score tensor chosen by qk_matmul_output_mode (0 raw Q·Kᵀ, 1 with bias,
//    2 after softcap, 3 after softmax).
// Accumulation is in double; storage types float32/float64/float16/bfloat16.
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/kernel.h"

namespace llmc {
namespace {

struct Dims4 {
  int64_t batch = 0, heads = 0, seq = 0, head = 0;
};

Status viewAs4d(KernelContext& ctx, const Tensor& t, int64_t heads_attr, const char* what,
                Dims4* out) {
  if (t.rank() == 4) {
    *out = {t.dim(0), t.dim(1), t.dim(2), t.dim(3)};
    return okStatus();
  }
  if (t.rank() != 3) return kernelError(ctx, std::string(what) + " must be 3-D or 4-D");
  if (heads_attr <= 0 || t.dim(2) % heads_attr != 0)
    return kernelError(ctx, std::string(what) + " is 3-D " + shapeToString(t.shape()) +
                                ": q_num_heads/kv_num_heads must divide its hidden size");
  *out = {t.dim(0), heads_attr, t.dim(1), t.dim(2) / heads_attr};
  return okStatus();
}

Status attentionKernel(KernelContext& ctx) {
  const Tensor* q = ctx.input(0);
  const Tensor* k = ctx.input(1);
  const Tensor* v = ctx.input(2);
  const Tensor* mask = ctx.input(3);
  const Tensor* past_k = ctx.input(4);
  const Tensor* past_v = ctx.input(5);
  if (!q || !k || !v) return kernelError(ctx, "Attention needs Q, K and V");
  const DType dtype = q->dtype();
  if (!isFloatDType(dtype) || k->dtype() != dtype || v->dtype() != dtype)
    return kernelError(ctx, "Q, K and V must share one float dtype");
  if (q->rank() != k->rank() || q->rank() != v->rank())
    return kernelError(ctx, "Q, K and V must have the same rank");
  if ((past_k == nullptr) != (past_v == nullptr))
    return kernelError(ctx, "past_key and past_value come together");
  const KernelParams& p = ctx.params();
  Dims4 qd, kd, vd;
  LLMC_RETURN_IF_ERROR(viewAs4d(ctx, *q, p.getInt("q_num_heads", 0), "Q", &qd));
  LLMC_RETURN_IF_ERROR(viewAs4d(ctx, *k, p.getInt("kv_num_heads", 0), "K", &kd));
  LLMC_RETURN_IF_ERROR(viewAs4d(ctx, *v, p.getInt("kv_num_heads", 0), "V", &vd));
  if (kd.batch != qd.batch || vd.batch != qd.batch || kd.heads != vd.heads ||
      kd.seq != vd.seq || kd.head != qd.head || kd.heads < 1 || qd.heads % kd.heads != 0)
    return kernelError(ctx, "Q " + shapeToString(q->shape()) + ", K " +
                                shapeToString(k->shape()) + " and V " +
                                shapeToString(v->shape()) + " do not fit together");
  int64_t past = 0;
  if (past_k) {
    if (past_k->rank() != 4 || past_v->rank() != 4 || past_k->dim(0) != qd.batch ||
        past_k->dim(1) != kd.heads || past_k->dim(3) != kd.head || past_v->dim(0) != qd.batch ||
        past_v->dim(1) != kd.heads || past_v->dim(2) != past_k->dim(2) ||
        past_v->dim(3) != vd.head || past_k->dtype() != dtype || past_v->dtype() != dtype)
      return kernelError(ctx, "past_key " + shapeToString(past_k->shape()) + " / past_value " +
                                  shapeToString(past_v->shape()) + " do not fit K/V");
    past = past_k->dim(2);
  }
  const int64_t total = past + kd.seq;
  const int64_t is_causal = p.getInt("is_causal", 0);
  if (is_causal && mask) return kernelError(ctx, "is_causal and attn_mask exclude each other");
  // The mask broadcasts (right-aligned) to [batch, q_heads, q_seq, total].
  std::vector<int64_t> mask_strides(4, 0);
  if (mask) {
    if (mask->rank() < 2 || mask->rank() > 4)
      return kernelError(ctx, "attn_mask must have rank 2 to 4, got " + shapeToString(mask->shape()));
    if (mask->dtype() != DType::kBool && mask->dtype() != dtype)
      return kernelError(ctx, "attn_mask must be bool or Q's dtype");
    LLMC_RETURN_IF_ERROR(broadcastStrides(ctx, "attn_mask", mask->shape(),
                                          {qd.batch, qd.heads, qd.seq, total}, &mask_strides));
  }

  Tensor* y = nullptr;
  Shape y_shape = q->rank() == 4 ? Shape{qd.batch, qd.heads, qd.seq, vd.head}
                                 : Shape{qd.batch, qd.seq, qd.heads * vd.head};
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, dtype, y_shape, &y));
  Tensor* present_k = nullptr;
  Tensor* present_v = nullptr;
  Tensor* qk_out = nullptr;
  if (ctx.numOutputs() > 1)
    LLMC_RETURN_IF_ERROR(ctx.allocateOutput(1, dtype, {qd.batch, kd.heads, total, kd.head}, &present_k));
  if (ctx.numOutputs() > 2)
    LLMC_RETURN_IF_ERROR(ctx.allocateOutput(2, dtype, {qd.batch, kd.heads, total, vd.head}, &present_v));
  if (ctx.numOutputs() > 3)
    LLMC_RETURN_IF_ERROR(ctx.allocateOutput(3, dtype, {qd.batch, qd.heads, qd.seq, total}, &qk_out));
  if (ctx.shapeOnly()) return okStatus();

  const double scale_attr = p.getFloat("scale", 0.0);
  const double scale = p.has("scale") ? scale_attr : 1.0 / std::sqrt(static_cast<double>(qd.head));
  const double root = std::sqrt(scale);
  const double softcap = p.getFloat("softcap", 0.0);
  const int64_t mode = p.getInt("qk_matmul_output_mode", 0);
  bool ok = dispatchFloat(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // K/V with the past in front: [batch, kv_heads, total, head].
    auto with_past = [&](const Tensor* past_t, const Tensor* now, int64_t head, Tensor* present) {
      std::vector<double> all(static_cast<size_t>(qd.batch * kd.heads * total * head));
      for (int64_t b = 0; b < qd.batch; ++b)
        for (int64_t h = 0; h < kd.heads; ++h)
          for (int64_t t = 0; t < total; ++t)
            for (int64_t d = 0; d < head; ++d) {
              double x = t < past ? load(past_t->data<T>()[((b * kd.heads + h) * past + t) * head + d])
                                  : load(now->data<T>()[((b * kd.heads + h) * kd.seq + (t - past)) * head + d]);
              size_t i = static_cast<size_t>(((b * kd.heads + h) * total + t) * head + d);
              all[i] = x;
              if (present) present->data<T>()[i] = store<T>(x);
            }
      return all;
    };
    std::vector<double> keys = with_past(past_k, k, kd.head, present_k);
    std::vector<double> values = with_past(past_v, v, vd.head, present_v);
    std::vector<double> scores(static_cast<size_t>(total));
    const T* qp = q->data<T>();
    for (int64_t b = 0; b < qd.batch; ++b) {
      for (int64_t h = 0; h < qd.heads; ++h) {
        const int64_t kvh = h % kd.heads;  // np.tile over the heads axis
        for (int64_t i = 0; i < qd.seq; ++i) {
          const T* qrow = qp + ((b * qd.heads + h) * qd.seq + i) * qd.head;
          double max_score = -INFINITY;
          for (int64_t j = 0; j < total; ++j) {
            const double* krow = &keys[static_cast<size_t>(((b * kd.heads + kvh) * total + j) * kd.head)];
            double dot = 0;
            for (int64_t d = 0; d < qd.head; ++d) dot += (load(qrow[d]) * root) * (krow[d] * root);
            double bias = 0;
            if (is_causal && j > i) bias = -INFINITY;
            if (mask) {
              int64_t offset = b * mask_strides[0] + h * mask_strides[1] + i * mask_strides[2] +
                               j * mask_strides[3];
              if (mask->dtype() == DType::kBool)
                bias = mask->data<uint8_t>()[offset] ? 0.0 : -INFINITY;
              else
                bias = load(mask->data<T>()[offset]);
            }
            double with_bias = dot + bias;
            if (softcap > 0) with_bias = softcap * std::tanh(with_bias / softcap);
            scores[static_cast<size_t>(j)] = with_bias;
            max_score = std::max(max_score, with_bias);
            if (qk_out && mode != 3) {
              double chosen = mode == 0 ? dot : mode == 1 ? dot + bias : with_bias;
              qk_out->data<T>()[((b * qd.heads + h) * qd.seq + i) * total + j] = store<T>(chosen);
            }
          }
          double sum = 0;
          for (double& s : scores) {
            s = std::exp(s - max_score);
            sum += s;
          }
          for (int64_t j = 0; j < total; ++j) {
            scores[static_cast<size_t>(j)] /= sum;
            if (qk_out && mode == 3)
              qk_out->data<T>()[((b * qd.heads + h) * qd.seq + i) * total + j] =
                  store<T>(scores[static_cast<size_t>(j)]);
          }
          for (int64_t d = 0; d < vd.head; ++d) {
            double acc = 0;
            for (int64_t j = 0; j < total; ++j)
              acc += scores[static_cast<size_t>(j)] *
                     values[static_cast<size_t>(((b * kd.heads + kvh) * total + j) * vd.head + d)];
            int64_t index = q->rank() == 4 ? ((b * qd.heads + h) * qd.seq + i) * vd.head + d
                                           : ((b * qd.seq + i) * qd.heads + h) * vd.head + d;
            y->data<T>()[index] = store<T>(acc);
          }
        }
      }
    }
  });
  if (!ok) return kernelError(ctx, std::string("unsupported dtype ") + dtypeName(dtype));
  return okStatus();
}

}  // namespace

void registerAttentionKernels(KernelRegistry& registry) {
  registry.add({"Attention", 3, 6, 1, 4, &attentionKernel});
}

}  // namespace llmc
