// Tiled causal attention over the paged KV cache (flash attention with an online softmax), for
// prefill, decode and long contexts: it keeps no row of scores, so the context is bounded
// only by the block tables.
//
// Each block takes 16 consecutive step tokens (a query tile) and one query head; it streams the
// keys of each token's sequence through shared memory 32 at a time, keeping a running max, sum
// and fp32 accumulator per query row. Tokens of different sequences may share a query tile: the
// block runs the tile's runs of same-sequence tokens one after another. When the step has too
// few query tiles to fill the GPU (decode), the keys are also split into ranges, one block each,
// whose partial (max, sum, accumulator) go to the caller's scratch buffer and are merged by a
// second kernel (flash decoding). The split count depends only on tokens, heads and
// max_context, so the caller sizes the scratch with flashAttentionScratchBytes() up front.
//
// Limits: float32, head_dim <= 256, heads <= 65535. Allocates nothing and never synchronizes,
// so a step using it can be captured in a CUDA graph.
#pragma once

#include <cstddef>

#include "cuda/kernels.h"

namespace llmc::cuda {

// Bytes of device scratch launchFlashAttention needs for `params` (its tokens, heads, head_dim
// and max_context); 0 when the keys are not split, and then scratch may be null.
size_t flashAttentionScratchBytes(const PagedAttentionParams& params);

// Causal attention for a ragged step (PagedAttentionParams, kernels.h), max_context up to
// kv.max_blocks * kv.block_size. Run after launchKvAppend for the same step.
// `scratch` holds at least flashAttentionScratchBytes(params) bytes of device memory.
Status launchFlashAttention(const PagedAttentionParams& params, void* scratch, size_t scratch_bytes,
                            cudaStream_t stream);

}  // namespace llmc::cuda
