// Where attention reads and writes each head: [batch, heads, tokens, head_dim] tensors, or
// token-major [batch, tokens, width] rows holding the heads from a column on (the packed-QKV
// form of llm.attention and llm.sdpa). Shared by LlmAttention and LlmSdpa.
#pragma once

#include <cstdint>

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

}  // namespace llmc
