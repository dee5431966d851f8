// Tiled causal attention over the paged KV cache (flash attention with an online softmax), for
// prefill, decode and long contexts: it keeps no row of scores, so the context is bounded
// only by the block tables.
//
// Each block takes a query tile of up to 16 step tokens and one query head; it streams the keys
// of each token's sequence through shared memory 32 at a time, keeping a running max, sum and
// fp32 accumulator per query row. The tiles are PagedKvParams::query_tiles when given (the
// executor's: flashQueryTiles(), each of one sequence, so a batch of decode tokens gets a tile
// per sequence and runs in parallel), else 16 consecutive tokens, which may mix sequences: the
// block then runs the tile's runs of same-sequence tokens one after another. When the step has too
// few query tiles to fill the GPU (decode), the keys are also split into ranges, one block each,
// whose partial (max, sum, accumulator) go to the caller's scratch buffer and are merged by a
// second kernel (flash decoding). The split count depends only on tokens, heads and
// max_context, so the caller sizes the scratch with flashAttentionScratchBytes() up front.
//
// Limits: float32, head_dim <= 256, heads <= 65535. Allocates nothing and never synchronizes,
// so a step using it can be captured in a CUDA graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/kernels.h"

namespace llmc::cuda {

constexpr int64_t kFlashTileQueries = 16;  // the most step tokens one query tile holds

// The query tiles of a step (PagedKvParams::query_tiles) from its tokens' sequences: the first
// token of each run of up to kFlashTileQueries consecutive tokens of one sequence.
std::vector<int32_t> flashQueryTiles(const int32_t* token_sequence, int64_t tokens);

// Bytes of device scratch launchFlashAttention needs for `params` (its tokens, heads, head_dim
// and max_context); 0 when the keys are not split, and then scratch may be null.
size_t flashAttentionScratchBytes(const PagedAttentionParams& params);

// Causal attention for a ragged step (PagedAttentionParams, kernels.h), max_context up to
// kv.max_blocks * kv.block_size. Run after launchKvAppend for the same step.
// `scratch` holds at least flashAttentionScratchBytes(params) bytes of device memory.
Status launchFlashAttention(const PagedAttentionParams& params, void* scratch, size_t scratch_bytes,
                            cudaStream_t stream);

}  // namespace llmc::cuda
