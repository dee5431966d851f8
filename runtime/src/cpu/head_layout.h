// Where attention reads and writes each head: [batch, heads, tokens, head_dim] tensors, or
// token-major [batch, tokens, width] rows holding the heads from a column on (the packed-QKV
// form of llm.attention and llm.sdpa). Shared by LlmAttention and LlmSdpa.
#pragma once

#include <cstdint>
#include <string>

#include "core/kernel.h"

namespace llmc {

struct HeadLayout {
  int64_t batch_stride = 0, head_stride = 0, token_stride = 0, column = 0;
  // Element offset of head `h` of token `t` in batch row `b`.
  int64_t at(int64_t b, int64_t h, int64_t t) const {
    return b * batch_stride + h * head_stride + t * token_stride + column;
  }
  static HeadLayout headMajor(int64_t heads, int64_t tokens, int64_t head_dim) {
    return {heads * tokens * head_dim, tokens * head_dim, head_dim, 0};
  }
  static HeadLayout tokenMajor(int64_t tokens, int64_t width, int64_t head_dim, int64_t column) {
    return {tokens * width, head_dim, width, column};
  }
};

// The token-major form's layouts of q, k and v ([batch, tokens, width] rows, heads from the
// `q_column` / `k_column` / `v_column` parameters): checks that each part's heads fit its rows
// and that the rows agree in batch and tokens (q: q_tokens, k and v: kv_tokens).
inline Status tokenMajorLayouts(const KernelContext& ctx, const Tensor* q, const Tensor* k,
                                const Tensor* v, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                int64_t q_tokens, int64_t kv_tokens, HeadLayout* q_layout,
                                HeadLayout* k_layout, HeadLayout* v_layout) {
  struct Part {
    const Tensor* t;
    const char* column;
    int64_t heads, tokens;
    HeadLayout* layout;
  };
  const int64_t batch = q->dim(0);
  for (const Part& part : {Part{q, "q_column", heads, q_tokens, q_layout},
                           Part{k, "k_column", kv_heads, kv_tokens, k_layout},
                           Part{v, "v_column", kv_heads, kv_tokens, v_layout}}) {
    const int64_t column = ctx.params().getInt(part.column, 0);
    if (part.t->dim(0) != batch || part.t->dim(1) != part.tokens || column < 0 ||
        column + part.heads * head_dim > part.t->dim(2))
      return kernelError(ctx, std::string(part.column) + " " + std::to_string(column) + " and " +
                                  std::to_string(part.heads) + " heads of " +
                                  std::to_string(head_dim) + " do not fit " +
                                  shapeToString(part.t->shape()));
    *part.layout = HeadLayout::tokenMajor(part.tokens, part.t->dim(2), head_dim, column);
  }
  return okStatus();
}

}  // namespace llmc
