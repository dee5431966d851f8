// Tiled causal attention over the paged KV cache (flash_attention.h): query tiles of one head
// against key tiles staged in shared memory, online softmax in fp32, optional key splits merged
// by a second kernel.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>

#include "cuda/cuda_status.h"
#include "cuda/flash_attention.h"

namespace llmc::cuda {
namespace {

constexpr int kTileQueries = static_cast<int>(kFlashTileQueries);  // step tokens per block
constexpr int kTileKeys = 32;     // keys per shared tile; one per lane in the softmax step
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeadDim = 256;
constexpr int kCombineThreads = 128;
// Splitting the keys: aim for this many blocks (a few per SM of the GPUs we target; a constant,
// not the device's SM count, so that the scratch size is known without asking the device),
// never with fewer keys than kMinKeysPerSplit per split, never more than kMaxSplits splits.
// 64 keys (two tiles) per split at the least: on an H200 (2026-12-04) one decode token of a
// 1.2 B model at 512 positions spent 85 us per layer in 64 blocks of 256 keys, most of the
// step's 2.6 ms; a split costs one more partial row for the combine kernel.
constexpr int64_t kTargetBlocks = 512;
constexpr int64_t kMinKeysPerSplit = 64;
constexpr int64_t kMaxSplits = 128;
static_assert(kTileKeys == 32, "the softmax step gives each key of a tile one lane");

struct SplitPlan {
  int64_t splits = 1;
  int64_t keys_per_split = 0;  // a multiple of kTileKeys
};

// The query tiles a launch runs: the given ones, or 16 consecutive tokens each.
int64_t queryTiles(const PagedKvParams& kv) {
  return kv.query_tiles ? kv.num_query_tiles : (kv.tokens + kTileQueries - 1) / kTileQueries;
}

SplitPlan planSplits(int64_t query_tiles, int64_t heads, int64_t max_context) {
  SplitPlan plan;
  const int64_t key_tiles = (max_context + kTileKeys - 1) / kTileKeys;
  const int64_t blocks = query_tiles * heads;
  int64_t splits = 1;
  if (blocks < kTargetBlocks)
    splits = std::min(
        {(kTargetBlocks + blocks - 1) / blocks, max_context / kMinKeysPerSplit, kMaxSplits});
  splits = std::max<int64_t>(splits, 1);
  plan.keys_per_split = (key_tiles + splits - 1) / splits * kTileKeys;
  plan.splits = (max_context + plan.keys_per_split - 1) / plan.keys_per_split;  // no empty split
  return plan;
}

bool validSizes(const PagedAttentionParams& p) {
  return p.kv.tokens >= 1 && p.heads >= 1 && p.kv.head_dim >= 1 && p.max_context >= 1;
}

// PagedAttentionParams::check() plus this kernel's own limits.
Status checkFlashAttention(const PagedAttentionParams& p) {
  LLMC_RETURN_IF_ERROR(p.check());
  if (p.kv.head_dim > kMaxHeadDim)
    return unimplemented("flash attention (CUDA): head_dim " + std::to_string(p.kv.head_dim) +
                         "; this kernel holds at most " + std::to_string(kMaxHeadDim));
  if (p.heads > 65535)
    return invalidArgument("flash attention (CUDA): too many heads for one grid");
  if ((p.kv.tokens + kTileQueries - 1) / kTileQueries > 0x7fffffff)
    return invalidArgument("flash attention (CUDA): too many tokens for one grid");
  if (p.kv.query_tiles && (p.kv.num_query_tiles < 1 || p.kv.num_query_tiles > p.kv.tokens))
    return invalidArgument("flash attention (CUDA): " + std::to_string(p.kv.num_query_tiles) +
                           " query tiles for " + std::to_string(p.kv.tokens) + " tokens");
  return okStatus();
}

// Shared memory of flashAttentionKernel: the int64 array first for its alignment.
size_t flashSharedBytes(int64_t head_dim) {
  const size_t floats = kTileQueries * 3               // row max, sum, rescale
                        + kTileQueries * kTileKeys     // scores, then probabilities
                        + 2 * kTileQueries * head_dim  // queries, accumulators
                        + kTileKeys * (head_dim + 1)   // keys (padded: no bank conflicts)
                        + kTileKeys * head_dim;        // values
  return kTileKeys * sizeof(int64_t) + kTileQueries * sizeof(int64_t) + kTileQueries * sizeof(int) +
         floats * sizeof(float);
}

__device__ int64_t slotOffset(const PagedKvParams& kv, int64_t block, int64_t head,
                              int64_t offset) {
  const int64_t block_elements = kv.kv_heads * kv.block_size * kv.head_dim;
  return (block * kv.num_layers + kv.layer) * block_elements +
         (head * kv.block_size + offset) * kv.head_dim;
}

__device__ float warpMax(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}
__device__ float warpSum(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// Block (query tile x, head y, key split z). With one split it writes out; with several it
// writes the split's unnormalized accumulators and row (max, sum) to `partial` (see
// combineKernel for the layout). The control flow between __syncthreads() depends only on
// shared values every thread reads alike, so every thread reaches every barrier.
__global__ void __launch_bounds__(kThreads)
    flashAttentionKernel(PagedAttentionParams p, int64_t keys_per_split, float* partial) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const PagedKvParams& kv = p.kv;
  const int head_dim = static_cast<int>(kv.head_dim);
  const int key_stride = head_dim + 1;
  int64_t* key_slot = reinterpret_cast<int64_t*>(shared_bytes);  // [kTileKeys] cache offsets
  int64_t* row_limit = key_slot + kTileKeys;                     // [kTileQueries] keys it sees
  int* row_sequence = reinterpret_cast<int*>(row_limit + kTileQueries);  // -1: none
  float* row_max = reinterpret_cast<float*>(row_sequence + kTileQueries);
  float* row_sum = row_max + kTileQueries;
  float* row_rescale = row_sum + kTileQueries;
  float* probs = row_rescale + kTileQueries;         // [kTileQueries, kTileKeys]
  float* q_tile = probs + kTileQueries * kTileKeys;  // [kTileQueries, head_dim]
  float* acc = q_tile + kTileQueries * head_dim;     // [kTileQueries, head_dim]
  float* k_tile = acc + kTileQueries * head_dim;     // [kTileKeys, head_dim + 1]
  float* v_tile = k_tile + kTileKeys * key_stride;   // [kTileKeys, head_dim]

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTileQueries, t_end = kv.tokens;
  if (kv.query_tiles) {  // ascending starts (checked on the host for count only: clamp here)
    t0 = min(static_cast<int64_t>(max(kv.query_tiles[blockIdx.x], 0)), kv.tokens);
    if (blockIdx.x + 1 < kv.num_query_tiles)
      t_end = min(max(static_cast<int64_t>(kv.query_tiles[blockIdx.x + 1]), t0), kv.tokens);
  }
  const int rows = static_cast<int>(min(static_cast<int64_t>(kTileQueries), t_end - t0));
  const int64_t h = blockIdx.y, split = blockIdx.z;
  const int64_t kv_head = h / (p.heads / kv.kv_heads);
  const int64_t split_begin = split * keys_per_split;
  const int64_t split_end = min(split_begin + keys_per_split, p.max_context);

  if (tid < kTileQueries) {
    int sequence = -1;
    int64_t limit = 0;
    if (tid < rows) {
      sequence = kv.token_sequence[t0 + tid];
      // Positions past max_context (a caller's error) are clipped, so the block tables are never
      // read past their rows; an unknown sequence attends to nothing.
      limit = min(static_cast<int64_t>(kv.token_position[t0 + tid]) + 1, p.max_context);
      if (sequence < 0 || sequence >= kv.sequences || limit < 1) sequence = -1, limit = 0;
    }
    row_sequence[tid] = sequence;
    row_limit[tid] = limit;
    row_max[tid] = -INFINITY;
    row_sum[tid] = 0.0f;
  }
  for (int i = tid; i < kTileQueries * head_dim; i += kThreads) {
    const int r = i / head_dim, d = i % head_dim;
    q_tile[i] = r < rows ? p.q[(t0 + r) * p.q_width + p.q_column + h * head_dim + d] : 0.0f;
    acc[i] = 0.0f;
  }
  __syncthreads();

  for (int first = 0; first < rows;) {
    // The run of tokens [first, last) of one sequence shares the key tiles.
    const int sequence = row_sequence[first];
    int last = first + 1;
    int64_t run_limit = row_limit[first];
    for (; last < rows && row_sequence[last] == sequence; ++last)
      run_limit = max(run_limit, row_limit[last]);
    const int run_rows = last - first;
    const int64_t key_end = min(split_end, run_limit);
    const int32_t* table = kv.block_tables + static_cast<int64_t>(max(sequence, 0)) * kv.max_blocks;

    for (int64_t tile = split_begin; tile < key_end; tile += kTileKeys) {
      const int tile_keys = static_cast<int>(min(static_cast<int64_t>(kTileKeys), key_end - tile));
      if (tid < tile_keys) {
        const int64_t position = tile + tid;
        key_slot[tid] =
            slotOffset(kv, table[position / kv.block_size], kv_head, position % kv.block_size);
      }
      __syncthreads();
      for (int i = tid; i < kTileKeys * head_dim; i += kThreads) {
        const int j = i / head_dim, d = i % head_dim;
        float k = 0.0f, v = 0.0f;  // a partial tile's tail stays finite
        if (j < tile_keys) {
          k = kv.key_cache[key_slot[j] + d];
          v = kv.value_cache[key_slot[j] + d];
        }
        k_tile[j * key_stride + d] = k;
        v_tile[j * head_dim + d] = v;
      }
      __syncthreads();

      // Scores: a warp per (row, 32 keys), so the row's query is a broadcast read.
      for (int i = tid; i < run_rows * kTileKeys; i += kThreads) {
        const int r = first + i / kTileKeys, j = i % kTileKeys;
        float score = -INFINITY;
        if (j < tile_keys && tile + j < row_limit[r]) {
          const float* q = q_tile + r * head_dim;
          const float* k = k_tile + j * key_stride;
          float dot = 0.0f;
#pragma unroll 4
          for (int d = 0; d < head_dim; ++d) dot = fmaf(q[d], k[d], dot);
          score = dot * p.scale;
        }
        probs[r * kTileKeys + j] = score;
      }
      __syncthreads();

      // Online softmax: a warp per row, a lane per key. A row with no key yet keeps max -inf,
      // sum 0 and a zero accumulator, with no inf - inf along the way.
      for (int r = first + warp; r < last; r += kWarps) {
        const float score = probs[r * kTileKeys + lane];
        const float old_max = row_max[r];
        const float new_max = fmaxf(old_max, warpMax(score));
        const float prob = score == -INFINITY ? 0.0f : expf(score - new_max);
        const float tile_sum = warpSum(prob);
        probs[r * kTileKeys + lane] = prob;
        if (lane == 0) {
          const float rescale = old_max == -INFINITY ? 0.0f : expf(old_max - new_max);
          row_sum[r] = row_sum[r] * rescale + tile_sum;
          row_max[r] = new_max;
          row_rescale[r] = rescale;
        }
      }
      __syncthreads();

      for (int i = tid; i < run_rows * head_dim; i += kThreads) {
        const int r = first + i / head_dim, d = i % head_dim;
        const float* prob = probs + r * kTileKeys;
        float sum = 0.0f;
        for (int j = 0; j < tile_keys; ++j) sum = fmaf(prob[j], v_tile[j * head_dim + d], sum);
        acc[r * head_dim + d] = acc[r * head_dim + d] * row_rescale[r] + sum;
      }
      __syncthreads();  // the next tile overwrites key_slot, the tiles and probs
    }
    first = last;
  }

  const int64_t rows_total = kv.tokens * p.heads;
  for (int i = tid; i < rows * head_dim; i += kThreads) {
    const int r = i / head_dim, d = i % head_dim;
    const int64_t row = (t0 + r) * p.heads + h;
    if (partial) {
      partial[(split * rows_total + row) * head_dim + d] = acc[i];
    } else {
      const float sum = row_sum[r];
      p.out[row * head_dim + d] = sum > 0.0f ? acc[i] / sum : 0.0f;
    }
  }
  if (partial && tid < rows) {
    const int64_t row = (t0 + tid) * p.heads + h;
    float* split_max = partial + gridDim.z * rows_total * head_dim;
    float* split_sum = split_max + gridDim.z * rows_total;
    split_max[split * rows_total + row] = row_max[tid];
    split_sum[split * rows_total + row] = row_sum[tid];
  }
}

// Merges the splits of one (token, head): out = Σ acc_s e^(m_s - m) / Σ sum_s e^(m_s - m) with
// m the largest m_s. `partial` is [splits, tokens, heads, head_dim] accumulators, then
// [splits, tokens, heads] maxima, then as many sums.
__global__ void __launch_bounds__(kCombineThreads)
    combineKernel(PagedAttentionParams p, int64_t splits, const float* partial) {
  __shared__ float weight[kMaxSplits];
  __shared__ float total;
  const int64_t head_dim = p.kv.head_dim, rows_total = p.kv.tokens * p.heads;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * p.heads + blockIdx.y;
  const float* split_max = partial + splits * rows_total * head_dim;
  const float* split_sum = split_max + splits * rows_total;
  float max_all = -INFINITY;
  for (int64_t s = 0; s < splits; ++s) max_all = fmaxf(max_all, split_max[s * rows_total + row]);
  for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) {
    const float m = split_max[s * rows_total + row];
    weight[s] = m == -INFINITY ? 0.0f : expf(m - max_all);  // -inf only for an empty split
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int64_t s = 0; s < splits; ++s) sum += split_sum[s * rows_total + row] * weight[s];
    total = sum;
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float value = 0.0f;
    for (int64_t s = 0; s < splits; ++s)
      value += partial[(s * rows_total + row) * head_dim + d] * weight[s];
    p.out[row * head_dim + d] = total > 0.0f ? value / total : 0.0f;
  }
}

}  // namespace

std::vector<int32_t> flashQueryTiles(const int32_t* token_sequence, int64_t tokens) {
  std::vector<int32_t> starts;
  int64_t start = 0;
  for (int64_t t = 0; t < tokens; ++t)
    if (t == 0 || token_sequence[t] != token_sequence[t - 1] || t - start == kFlashTileQueries) {
      start = t;
      starts.push_back(static_cast<int32_t>(t));
    }
  return starts;
}

size_t flashAttentionScratchBytes(const PagedAttentionParams& params) {
  if (!validSizes(params)) return 0;
  const SplitPlan plan = planSplits(queryTiles(params.kv), params.heads, params.max_context);
  if (plan.splits == 1) return 0;
  return static_cast<size_t>(plan.splits * params.kv.tokens * params.heads *
                             (params.kv.head_dim + 2)) *
         sizeof(float);
}

Status launchFlashAttention(const PagedAttentionParams& params, void* scratch, size_t scratch_bytes,
                            cudaStream_t stream) {
  LLMC_RETURN_IF_ERROR(checkFlashAttention(params));
  if (params.kv.tokens == 0) return okStatus();
  const SplitPlan plan = planSplits(queryTiles(params.kv), params.heads, params.max_context);
  const size_t needed = flashAttentionScratchBytes(params);
  if (needed > 0 && (!scratch || scratch_bytes < needed))
    return invalidArgument("flash attention (CUDA): needs " + std::to_string(needed) +
                           " bytes of scratch, got " + std::to_string(scratch ? scratch_bytes : 0));
  if (plan.splits > 1 && params.kv.tokens > 0x7fffffff)
    return invalidArgument("flash attention (CUDA): too many tokens for the combine grid");

  const size_t shared = flashSharedBytes(params.kv.head_dim);
  // Raised once, to what the largest head needs: the first launch runs eagerly, and a later
  // one may be inside a CUDA graph capture.
  static const cudaError_t raised = cudaFuncSetAttribute(
      flashAttentionKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(flashSharedBytes(kMaxHeadDim)));
  if (shared > 48 * 1024)
    LLMC_RETURN_IF_ERROR(cudaStatus(raised, "flash attention (CUDA): cudaFuncSetAttribute"));
  float* partial = plan.splits > 1 ? static_cast<float*>(scratch) : nullptr;
  const dim3 grid(static_cast<unsigned>(queryTiles(params.kv)), static_cast<unsigned>(params.heads),
                  static_cast<unsigned>(plan.splits));
  flashAttentionKernel<<<grid, kThreads, shared, stream>>>(params, plan.keys_per_split, partial);
  LLMC_RETURN_IF_ERROR(
      cudaStatus(cudaGetLastError(), "flash attention (CUDA): flashAttentionKernel launch"));
  if (!partial) return okStatus();
  const dim3 combine_grid(static_cast<unsigned>(params.kv.tokens),
                          static_cast<unsigned>(params.heads));
  combineKernel<<<combine_grid, kCombineThreads, 0, stream>>>(params, plan.splits, partial);
  return cudaStatus(cudaGetLastError(), "flash attention (CUDA): combineKernel launch");
}

}  // namespace llmc::cuda
