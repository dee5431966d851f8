// The CUDA backend's own kernels, each with a Params struct that documents its shapes, a
// check() that validates them, and a launcher on a stream (STYLE.md §14). Device pointers;
// float32. Tested against the CPU reference kernels in test/cuda/ (skipped without a GPU).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/quant.h"
#include "llmc/status.h"

namespace llmc::cuda {

// llm.norm: s = x + residual; y = RMS or layer normalization of s over each row, * scale
// (+ bias). One block per row.
struct NormParams {
  const float* x = nullptr;         // [rows, width]
  const float* residual = nullptr;  // [rows, width] or null
  const float* scale = nullptr;     // [width]
  const float* bias = nullptr;      // [width] or null
  float* y = nullptr;               // [rows, width]
  float* sum = nullptr;             // [rows, width] or null: x + residual, for the residual stream
  int64_t rows = 0, width = 0;
  float epsilon = 1e-5f;
  bool rms = true;  // false: layer normalization (subtracts the mean)
  Status check() const;
};
Status launchNorm(const NormParams& params, cudaStream_t stream);

// llm.rope, in place: rotates the first `rotated_heads` heads of each token by its position.
struct RopeParams {
  float* x = nullptr;  // head-major [batch, rotated_heads, tokens, head_dim] (row_width 0), or
                       // token-major rows [batch, tokens, row_width]
  const int64_t* positions = nullptr;  // [tokens], each < max_positions (checked by the caller), with cos/sin caches [max_positions, head_dim/2];
                                       // null: per-token tables [table_batch, tokens, head_dim]
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t batch = 0, rotated_heads = 0, tokens = 0, head_dim = 0;
  int64_t row_width = 0;      // token-major row width (0: head-major)
  int64_t max_positions = 0;  // rows of the caches (positions form)
  int64_t table_batch = 1;    // 1 or batch (tables form)
  bool interleaved = false;   // pairs (2i, 2i+1) instead of halves (positions form only)
  Status check() const;
};
Status launchRope(const RopeParams& params, cudaStream_t stream);

// cuBLASLt's heuristic answer per product shape, so it is asked once per shape (at load time,
// when the session warms up each step), not on every call. One per session: not thread-safe.
class MatMulAlgoCache {
 public:
  struct Key {
    int64_t m, n, k, ldy;
    int flags;      // trans_b | bias << 1 | tf32 << 2 | epilogue << 3
    int dtype = 0;  // of the inputs (DType; 255: E4M3) | the operands' least alignment << 8
    bool operator<(const Key& o) const {
      if (m != o.m) return m < o.m;
      if (n != o.n) return n < o.n;
      if (k != o.k) return k < o.k;
      if (ldy != o.ldy) return ldy < o.ldy;
      return flags != o.flags ? flags < o.flags : dtype < o.dtype;
    }
  };
  const cublasLtMatmulAlgo_t* find(const Key& key) const;
  void insert(const Key& key, const cublasLtMatmulAlgo_t& algo);
  size_t size() const;

 private:
  std::vector<std::pair<Key, cublasLtMatmulAlgo_t>> entries_;  // sorted by key
};

// llm.fused_matmul through cuBLASLt: y = act(alpha * a·op(b) + bias), row-major. Bias, ReLU
// and tanh-GELU run in cuBLASLt's epilogue; erf-GELU, SiLU, sigmoid and tanh in a second pass
// (activationKernel). Activations are named as in llm.fused_matmul.
struct MatMulParams {
  cublasLtHandle_t handle = nullptr;
  const void* a = nullptr;     // [m, k]
  const void* b = nullptr;     // [k, n], or [n, k] when trans_b
  DType input_dtype = DType::kFloat32;  // of a and b: float32, bfloat16 or float16 (y is float32)
  // FP8 instead (sm_89 and later): a and b are E4M3 codes, b transposed ([n, k], as the tensor
  // cores take it), y = a_scale * (a · bᵀ) with a_scale a device scalar (b's scales are left to
  // the caller). No bias or activation here.
  bool e4m3 = false;
  const float* a_scale = nullptr;
  const float* bias = nullptr;  // [n] or null
  float* y = nullptr;           // [m, n], rows ldy floats apart
  int64_t m = 0, n = 0, k = 0;
  int64_t ldy = 0;              // 0: n (a larger one writes columns of a wider matrix)
  bool trans_b = false;
  float alpha = 1.0f;
  const char* activation = "none";
  bool allow_tf32 = false;       // float32 inputs through the tensor cores' tf32 mode
  void* workspace = nullptr;     // matMulWorkspaceBytes() of device memory
  size_t workspace_bytes = 0;
  MatMulAlgoCache* algo_cache = nullptr;  // optional: reuse the heuristic's choice per shape
  Status check() const;
};
constexpr size_t matMulWorkspaceBytes() { return size_t{32} << 20; }
Status launchMatMul(const MatMulParams& params, cudaStream_t stream);

// y = x rounded to bfloat16 or float16 (round to nearest even), `count` values: the
// activations of a product whose weight is stored in that type.
struct ConvertParams {
  const float* x = nullptr;
  void* y = nullptr;
  int64_t count = 0;
  DType dtype = DType::kBFloat16;
  Status check() const;
};
Status launchConvert(const ConvertParams& params, cudaStream_t stream);

// ONNX Softmax / LogSoftmax along the last axis of [rows, width] float32 (other axes run on
// the CPU).
struct SoftmaxParams {
  const float* x = nullptr;
  float* y = nullptr;
  int64_t rows = 0, width = 0;
  bool log = false;
  Status check() const;
};
Status launchSoftmax(const SoftmaxParams& params, cudaStream_t stream);

// y = activation(y) in place over `count` floats (activations as in llm.fused_matmul), or for the
// gated MLP: y[r, f] = activation(h[r, f]) * h[r, F + f] with h [rows, 2F] and y [rows, F].
struct ActivationParams {
  float* y = nullptr;
  const float* gate_up = nullptr;  // [rows, 2 * width] for the gated form, else null
  int64_t rows = 0, width = 0;     // y is [rows, width]
  const char* activation = "none";
  Status check() const;
};
Status launchActivation(const ActivationParams& params, cudaStream_t stream);

// Embedding rows: y[t] = table[ids[t]]. Ids must be in [0, vocab) (the caller checks them on
// the host, where they come from).
struct EmbeddingParams {
  const float* table = nullptr;  // [vocab, width]
  const int64_t* ids = nullptr;  // [tokens]
  float* y = nullptr;            // [tokens, width]
  int64_t vocab = 0, tokens = 0, width = 0;
  Status check() const;
};
Status launchEmbedding(const EmbeddingParams& params, cudaStream_t stream);

// Greedy sampling on the device: ids[r] = argmax over logits[r] (the lowest index among ties,
// as the CPU sampler), so that decode's logits never leave the GPU.
struct ArgmaxParams {
  const float* logits = nullptr;  // [rows, vocab]
  int32_t* ids = nullptr;         // [rows]
  int64_t rows = 0, vocab = 0;
  Status check() const;
};
Status launchArgmax(const ArgmaxParams& params, cudaStream_t stream);

// The paged KV cache on the device, one pool per K and V: block b of layer l is
// [kv_heads, block_size, head_dim] floats at cache + (b * num_layers + l) * block_elements
// (the CPU KvCache's layout). A step's tokens are ragged: token t belongs to sequence
// token_sequence[t] at position token_position[t] and is stored at (token_block[t],
// token_offset[t]); sequence s's positions p live in block_tables[s * max_blocks + p / block_size].
struct PagedKvParams {
  float* key_cache = nullptr;
  float* value_cache = nullptr;
  int64_t num_layers = 0, layer = 0, kv_heads = 0, head_dim = 0, block_size = 0;
  const int32_t* token_sequence = nullptr;  // [tokens]
  const int32_t* token_position = nullptr;  // [tokens]
  const int32_t* token_block = nullptr;     // [tokens]
  const int32_t* token_offset = nullptr;    // [tokens]
  const int32_t* block_tables = nullptr;    // [sequences, max_blocks]
  int64_t tokens = 0, sequences = 0, max_blocks = 0;
  // Optional, for attention: the first token of each query tile (flashQueryTiles(), ascending;
  // a tile runs to the next one's first token). Null: tiles of 16 consecutive tokens.
  const int32_t* query_tiles = nullptr;  // [num_query_tiles]
  int64_t num_query_tiles = 0;
  Status check() const;
};

// KV-cache append: stores each new token's k and v (token-major rows, heads from k_column /
// v_column) at its slot.
struct KvAppendParams {
  PagedKvParams kv;
  const float* k = nullptr;  // [tokens, k_width]
  const float* v = nullptr;  // [tokens, v_width]
  int64_t k_width = 0, v_width = 0, k_column = 0, v_column = 0;
  Status check() const;
};
Status launchKvAppend(const KvAppendParams& params, cudaStream_t stream);

// Causal attention over the paged cache for a ragged step (prefill, decode or both): each
// token's heads attend to positions 0..its own of its sequence (GQA: query head h reads KV
// head h / (heads / kv_heads)). Run after launchKvAppend for the same step. The kernel is
// launchFlashAttention (flash_attention.h), tiled, with no limit on the context but the tables.
struct PagedAttentionParams {
  PagedKvParams kv;
  const float* q = nullptr;  // [tokens, q_width], heads from q_column
  float* out = nullptr;      // [tokens, heads * head_dim]
  int64_t q_width = 0, q_column = 0, heads = 0;
  int64_t max_context = 0;   // the longest sequence in the step (positions + 1)
  float scale = 1.0f;
  Status check() const;
};
// The keys a kernel that keeps a row of scores in shared memory holds (llm.sdpa).
constexpr int64_t maxPagedAttentionContext() { return 12 * 1024; }

// Top-k / top-p (nucleus) sampling on the device, one block per row: logits / temperature;
// keep the tokens whose logit is at least the k-th largest (ties at the boundary kept; k <= 0
// keeps all), then the smallest set of the most probable of those whose probability reaches
// top_p (again with ties kept); then ids[r] is the token where the kept probabilities,
// accumulated in token order, first exceed uniform[r] * their total. uniform[r] in [0, 1)
// comes from the caller's seeded generator, so a row's choice is reproducible.
struct SampleParams {
  const float* logits = nullptr;   // [rows, vocab]
  const float* uniform = nullptr;  // [rows]
  int32_t* ids = nullptr;          // [rows]
  int64_t rows = 0, vocab = 0;
  float temperature = 1.0f;        // > 0 (temperature 0 is greedy: launchArgmax)
  int64_t top_k = 0;
  float top_p = 1.0f;              // (0, 1]
  Status check() const;
};
Status launchSample(const SampleParams& params, cudaStream_t stream);

// The log-probability of each row's chosen token: logits[r, ids[r]] / T - logsumexp(logits[r] / T)
// (T = temperature, 1 when it is 0: greedy), the host sampler's convention (llm/sampler.h).
struct TokenLogprobParams {
  const float* logits = nullptr;  // [rows, vocab]
  const int32_t* ids = nullptr;   // [rows]
  float* logprobs = nullptr;      // [rows]
  int64_t rows = 0, vocab = 0;
  float temperature = 0;
  Status check() const;
};
Status launchTokenLogprob(const TokenLogprobParams& params, cudaStream_t stream);

// llm.elementwise: a program of float32 ops over inputs broadcast to the output (opcodes as
// in LLMOps.td). Each input is described by its strides over the output's dims (0 where it
// broadcasts); up to kMaxElementwiseInputs inputs, kMaxElementwiseRank dims and
// kMaxElementwiseProgram instructions (a chain longer than that stays split).
constexpr int kMaxElementwiseInputs = 8;
constexpr int kMaxElementwiseRank = 6;
constexpr int kMaxElementwiseProgram = 32;
struct ElementwiseParams {
  const float* inputs[kMaxElementwiseInputs] = {};
  int64_t strides[kMaxElementwiseInputs][kMaxElementwiseRank] = {};
  int num_inputs = 0;
  int64_t shape[kMaxElementwiseRank] = {};  // the output's dims
  int rank = 0;
  int64_t program[3 * kMaxElementwiseProgram] = {};  // [opcode, a, b] triples
  int program_length = 0;                             // instructions
  float constants[kMaxElementwiseProgram] = {};
  int num_constants = 0;
  float* y = nullptr;
  Status check() const;
};
Status launchElementwise(const ElementwiseParams& params, cudaStream_t stream);

// llm.sdpa: softmax(scale * q·kᵀ + mask)·v without a cache (encoders), head-major
// [batch, heads, tokens, head_dim]. The mask (optional) is read through its strides over
// [batch, heads, queries, keys] (0 where it broadcasts). One block per (batch, head, query);
// keys up to maxPagedAttentionContext().
struct SdpaParams {
  const float* q = nullptr;  // [batch, heads, queries, head_dim]
  const float* k = nullptr;  // [batch, kv_heads, keys, head_dim]
  const float* v = nullptr;  // [batch, kv_heads, keys, head_dim]
  const float* mask = nullptr;
  int64_t mask_strides[4] = {0, 0, 0, 0};
  float* out = nullptr;  // [batch, heads, queries, head_dim]
  int64_t batch = 0, heads = 0, kv_heads = 0, queries = 0, keys = 0, head_dim = 0;
  float scale = 1.0f;
  Status check() const;
};
Status launchSdpa(const SdpaParams& params, cudaStream_t stream);

// llm.quant_matmul on the GPU, with core/quant.h's weight layouts (row n of the [N, K] weight
// holds output n; 4-bit values packed per block of 32). Weight-only formats multiply float32
// activations by the dequantized weights: up to kQuantMatVecRows rows (decode) one warp per
// output channel reads the packed weight once for all rows; more rows (prefill) dequantize
// slices of the weight into scratch and multiply through cuBLASLt. w8a8 quantizes each row to
// int8 (after the smoothing factors) and sums int8 products in int32 (dp4a), as the CPU kernel
// does, so both give the same sums. y = act(alpha * h + bias), or gated (N = 2F):
// y = act(h[:, :F]) * h[:, F:].
constexpr int64_t kQuantMatVecRows = 8;
struct QuantMatMulParams {
  const QuantTraits* traits = nullptr;
  const float* x = nullptr;            // [rows, k]
  const void* data = nullptr;          // int8 [n, k] or uint8 [n, k / 2]
  const void* scales = nullptr;        // [n, groups] float32 or float16 (traits->scale_dtype)
  const uint8_t* zeros = nullptr;      // [n, groups] for formats with zero points
  const float* bias = nullptr;         // [n] or null (not with gated)
  const float* input_scales = nullptr; // [k] or null: x * input_scales per channel first
  float* y = nullptr;                  // [rows, gated ? n / 2 : n]
  int64_t rows = 0, n = 0, k = 0, group = 0;
  float alpha = 1.0f;
  const char* activation = "none";
  bool gated = false;
  // The prefill path's cuBLASLt product (as MatMulParams).
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  MatMulAlgoCache* algo_cache = nullptr;
  bool allow_tf32 = false;
  bool fp8_tensor_cores = false;  // fp8 with more than kQuantMatVecRows rows: cuBLASLt's FP8 products
  void* scratch = nullptr;  // quantMatMulScratchBytes() of device memory
  size_t scratch_bytes = 0;
  Status check() const;
};
size_t quantMatMulScratchBytes(const QuantMatMulParams& params);
Status launchQuantMatMul(const QuantMatMulParams& params, cudaStream_t stream);

// llm.quant_gather: y[t] = dequantized row ids[t] of a quantized [vocab, width] table. Ids
// must be in [0, vocab) (the caller checks them on the host).
struct QuantGatherParams {
  const QuantTraits* traits = nullptr;
  const void* data = nullptr;
  const void* scales = nullptr;
  const uint8_t* zeros = nullptr;
  const int64_t* ids = nullptr;  // [tokens]
  float* y = nullptr;            // [tokens, width]
  int64_t vocab = 0, width = 0, group = 0, tokens = 0;
  Status check() const;
};
Status launchQuantGather(const QuantGatherParams& params, cudaStream_t stream);

}  // namespace llmc::cuda
