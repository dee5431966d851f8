// launchFlashAttention (flash_attention.h) against the CPU LlmAttention over ragged steps of the
// paged cache, and against a double-precision reference for contexts too long for the CPU kernel
// (the key-split path). Unused cache slots and the scratch are NaN, so a stray read shows.
#include "cuda/flash_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"

namespace llmc::testing {
namespace {

// `count` consecutive step tokens of one sequence, from position `first`.
struct StepRun {
  int32_t sequence, first, count;
};

struct FlashCase {
  std::string name;
  int64_t heads, kv_heads, head_dim, block_size;
  std::vector<StepRun> step;  // in step order
};

// Builds the cache for `c` (every sequence's positions up to its last step token, blocks
// scattered through the pool of layer 1 of 2), runs launchFlashAttention and compares with
// LlmAttention over each whole sequence (cpu_reference) or with attention in doubles.
void expectFlashMatchesReference(const FlashCase& c, bool cpu_reference, uint32_t seed) {
  SCOPED_TRACE(c.name);
  const int64_t heads = c.heads, kv_heads = c.kv_heads, d = c.head_dim, block_size = c.block_size;
  const int64_t layers = 2, layer = 1;
  int64_t sequences = 0;
  for (const StepRun& run : c.step) sequences = std::max<int64_t>(sequences, run.sequence + 1);
  std::vector<int64_t> lengths(static_cast<size_t>(sequences), 0);
  for (const StepRun& run : c.step)
    lengths[run.sequence] = std::max<int64_t>(lengths[run.sequence], run.first + run.count);

  // Block tables: shuffled block ids; unused entries name a block that stays NaN.
  int64_t max_blocks = 0, used_blocks = 0;
  for (int64_t length : lengths) {
    max_blocks = std::max(max_blocks, (length + block_size - 1) / block_size);
    used_blocks += (length + block_size - 1) / block_size;
  }
  const int64_t num_blocks = used_blocks + 1;
  std::vector<int32_t> ids(static_cast<size_t>(used_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  std::vector<int32_t> tables(static_cast<size_t>(sequences * max_blocks),
                              static_cast<int32_t>(used_blocks));
  size_t next_id = 0;
  for (int64_t s = 0; s < sequences; ++s)
    for (int64_t b = 0; b < (lengths[s] + block_size - 1) / block_size; ++b)
      tables[s * max_blocks + b] = ids[next_id++];

  // Per sequence, head-major [1, heads, length, d] q, k, v; k and v copied into the pools.
  std::vector<Tensor> q, k, v;
  const int64_t block_elements = kv_heads * block_size * d;
  Tensor key_pool = Tensor::allocate(DType::kFloat32, {num_blocks * layers * block_elements});
  Tensor value_pool = Tensor::allocate(DType::kFloat32, {num_blocks * layers * block_elements});
  std::fill_n(key_pool.data<float>(), key_pool.numElements(), NAN);
  std::fill_n(value_pool.data<float>(), value_pool.numElements(), NAN);
  for (int64_t s = 0; s < sequences; ++s) {
    const int64_t length = lengths[s];
    q.push_back(randomFloat({1, heads, length, d}, seed * 100 + 3 * s));
    k.push_back(randomFloat({1, kv_heads, length, d}, seed * 100 + 3 * s + 1));
    v.push_back(randomFloat({1, kv_heads, length, d}, seed * 100 + 3 * s + 2));
    for (int64_t h = 0; h < kv_heads; ++h)
      for (int64_t p = 0; p < length; ++p) {
        const int64_t slot =
            (tables[s * max_blocks + p / block_size] * layers + layer) * block_elements +
            (h * block_size + p % block_size) * d;
        std::copy_n(k[s].data<float>() + (h * length + p) * d, d, key_pool.data<float>() + slot);
        std::copy_n(v[s].data<float>() + (h * length + p) * d, d, value_pool.data<float>() + slot);
      }
  }

  // The step: token-major q rows (heads from column d, as in a fused row) and per-token slots.
  std::vector<int32_t> token_sequence, token_position, token_block, token_offset;
  for (const StepRun& run : c.step)
    for (int32_t p = run.first; p < run.first + run.count; ++p) {
      token_sequence.push_back(run.sequence);
      token_position.push_back(p);
      token_block.push_back(tables[run.sequence * max_blocks + p / block_size]);
      token_offset.push_back(static_cast<int32_t>(p % block_size));
    }
  const int64_t tokens = static_cast<int64_t>(token_sequence.size());
  const int64_t q_width = (heads + 2) * d, q_column = d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Tensor q_rows = randomFloat({tokens, q_width}, seed * 100 + 99);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h)
      std::copy_n(q[token_sequence[t]].data<float>() +
                      (h * lengths[token_sequence[t]] + token_position[t]) * d,
                  d, q_rows.data<float>() + t * q_width + q_column + h * d);

  Tensor want = Tensor::allocate(DType::kFloat32, {tokens, heads * d});
  if (cpu_reference) {
    std::vector<Tensor> outs;
    for (int64_t s = 0; s < sequences; ++s) {
      KernelParams p;
      p.set("scale", floatParam(scale));
      outs.push_back(runKernel("LlmAttention", {q[s], k[s], v[s]}, p));
    }
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < heads; ++h)
        std::copy_n(outs[token_sequence[t]].data<float>() +
                        (h * lengths[token_sequence[t]] + token_position[t]) * d,
                    d, want.data<float>() + (t * heads + h) * d);
  } else {
    const int64_t group = heads / kv_heads;
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t s = token_sequence[t], length = lengths[s], count = token_position[t] + 1;
        const float* query = q_rows.data<float>() + t * q_width + q_column + h * d;
        const float* keys = k[s].data<float>() + h / group * length * d;
        const float* values = v[s].data<float>() + h / group * length * d;
        std::vector<double> weights(static_cast<size_t>(count));
        double max_score = -INFINITY, sum = 0;
        for (int64_t j = 0; j < count; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += static_cast<double>(query[e]) * keys[j * d + e];
          weights[j] = dot * scale;
          max_score = std::max(max_score, weights[j]);
        }
        for (double& w : weights) sum += (w = std::exp(w - max_score));
        for (int64_t e = 0; e < d; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < count; ++j) acc += weights[j] * values[j * d + e];
          want.data<float>()[(t * heads + h) * d + e] = static_cast<float>(acc / sum);
        }
      }
  }

  DeviceBuffer keys(key_pool), values(value_pool), dq(q_rows), dout(tokens * heads * d);
  auto ints = [](const std::vector<int32_t>& x) {
    return makeTensor(DType::kInt32, {static_cast<int64_t>(x.size())}, x);
  };
  DeviceBuffer dseq(ints(token_sequence)), dpos(ints(token_position)), dblock(ints(token_block)),
      doff(ints(token_offset)), dtables(ints(tables));
  cuda::PagedAttentionParams params;
  params.kv.key_cache = keys.get();
  params.kv.value_cache = values.get();
  params.kv.num_layers = layers;
  params.kv.layer = layer;
  params.kv.kv_heads = kv_heads;
  params.kv.head_dim = d;
  params.kv.block_size = block_size;
  params.kv.token_sequence = dseq.as<int32_t>();
  params.kv.token_position = dpos.as<int32_t>();
  params.kv.token_block = dblock.as<int32_t>();
  params.kv.token_offset = doff.as<int32_t>();
  params.kv.block_tables = dtables.as<int32_t>();
  params.kv.tokens = tokens;
  params.kv.sequences = sequences;
  params.kv.max_blocks = max_blocks;
  params.q = dq.get();
  params.out = dout.get();
  params.q_width = q_width;
  params.q_column = q_column;
  params.heads = heads;
  params.max_context = *std::max_element(token_position.begin(), token_position.end()) + 1;
  params.scale = scale;
  // Twice: tiles of 16 consecutive tokens (mixing sequences), then the executor's tiles of one
  // sequence each (flashQueryTiles), with the output poisoned before each launch.
  const std::vector<int32_t> tiles = cuda::flashQueryTiles(token_sequence.data(), tokens);
  DeviceBuffer dtiles(ints(tiles));
  for (bool tiled : {false, true}) {
    SCOPED_TRACE(tiled ? "a query tile per sequence run" : "16 consecutive tokens per query tile");
    params.kv.query_tiles = tiled ? dtiles.as<int32_t>() : nullptr;
    params.kv.num_query_tiles = tiled ? static_cast<int64_t>(tiles.size()) : 0;
    const size_t scratch_bytes = cuda::flashAttentionScratchBytes(params);
    if (!cpu_reference) {
      EXPECT_GT(scratch_bytes, 0u) << "the long cases are meant to split the keys";
    }
    DeviceBuffer scratch(std::max<int64_t>(1, static_cast<int64_t>(scratch_bytes / sizeof(float))));
    ASSERT_EQ(cudaMemset(dout.get(), 0xff, static_cast<size_t>(tokens * heads * d) * sizeof(float)),
              cudaSuccess);
    Status status = cuda::launchFlashAttention(params, scratch_bytes ? scratch.get() : nullptr,
                                               scratch_bytes, nullptr);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_LT(relativeL2(dout.toHost({tokens, heads * d}), want), 1e-5);
  }
}

// Tiles of one sequence each, at most 16 tokens, covering every token in order.
TEST(FlashAttentionParamsTest, QueryTilesFollowTheSequencesWithoutAGpu) {
  const std::vector<int32_t> decode = {0, 1, 2, 3};
  EXPECT_EQ(cuda::flashQueryTiles(decode.data(), 4), (std::vector<int32_t>{0, 1, 2, 3}));
  std::vector<int32_t> mixed = {4, 2};  // two decode tokens, then a 37-token prompt, then one more
  mixed.insert(mixed.end(), 37, 0);
  mixed.push_back(4);
  EXPECT_EQ(cuda::flashQueryTiles(mixed.data(), static_cast<int64_t>(mixed.size())),
            (std::vector<int32_t>{0, 1, 2, 18, 34, 39}));
  EXPECT_TRUE(cuda::flashQueryTiles(mixed.data(), 0).empty());
}

using FlashAttentionTest = CudaTest;

// Ragged steps mixing a prefill of 37 tokens (from position 0, or a chunk after 13 cached
// positions) with two decode tokens of other sequences; query tiles straddle the sequences.
TEST_F(FlashAttentionTest, RaggedStepsMatchCpuCausalAttention) {
  const std::vector<FlashCase> cases = {
      {"d64 GQA 8/2 bs16", 8, 2, 64, 16, {{1, 70, 1}, {0, 0, 37}, {2, 200, 1}}},
      {"d80 MHA 4/4 bs32 chunked prefill", 4, 4, 80, 32, {{1, 70, 1}, {0, 13, 37}, {2, 200, 1}}},
      {"d128 GQA 8/2 bs32", 8, 2, 128, 32, {{0, 0, 37}, {1, 5, 1}, {2, 0, 1}}},
      {"d128 MHA 4/4 bs16 chunked prefill", 4, 4, 128, 16, {{2, 31, 1}, {0, 13, 37}, {1, 64, 1}}},
      {"d256 GQA 2/1 bs16", 2, 1, 256, 16, {{1, 40, 1}, {0, 0, 37}, {2, 63, 1}}},
      {"d7 MHA 3/3 bs4 interleaved", 3, 3, 7, 4, {{0, 0, 5}, {1, 0, 3}, {0, 5, 4}, {2, 9, 1}}},
  };
  uint32_t seed = 1;
  for (const FlashCase& c : cases) expectFlashMatchesReference(c, /*cpu_reference=*/true, seed++);
}

// Contexts beyond maxPagedAttentionContext(): decode tokens at 20000, 5000 and 1 positions, and a
// 37-token prefill chunk after 3000 cached positions beside a long decode. Few query tiles, so
// the keys are split and merged through the scratch.
TEST_F(FlashAttentionTest, LongContextsSplitTheKeys) {
  const std::vector<FlashCase> cases = {
      {"decode 20000/5000/1 d128 GQA 8/2 bs32",
       8,
       2,
       128,
       32,
       {{0, 19999, 1}, {1, 4999, 1}, {2, 0, 1}}},
      {"prefill after 3000 + decode 20000 d64 MHA 4/4 bs16",
       4,
       4,
       64,
       16,
       {{0, 3000, 37}, {1, 19999, 1}}},
  };
  ASSERT_GT(20000, cuda::maxPagedAttentionContext());
  uint32_t seed = 20;
  for (const FlashCase& c : cases) expectFlashMatchesReference(c, /*cpu_reference=*/false, seed++);
}

TEST(FlashAttentionParamsTest, RefusesBadInputAndSizesScratchWithoutAGpu) {
  float x = 0;
  int32_t i = 0;
  cuda::PagedAttentionParams decode;
  decode.kv.key_cache = decode.kv.value_cache = &x;
  decode.kv.num_layers = 1;
  decode.kv.kv_heads = 1;
  decode.kv.head_dim = 8;
  decode.kv.block_size = 16;
  decode.kv.token_sequence = decode.kv.token_position = decode.kv.token_block = &i;
  decode.kv.token_offset = decode.kv.block_tables = &i;
  decode.kv.tokens = 1;
  decode.kv.sequences = 1;
  decode.kv.max_blocks = 2000;
  decode.q = decode.out = &x;
  decode.q_width = 8;
  decode.heads = 1;
  decode.max_context = 20000;  // past maxPagedAttentionContext(), within the tables
  EXPECT_GT(cuda::flashAttentionScratchBytes(decode), 0u);
  Status status =
      cuda::launchFlashAttention(decode, nullptr, 0, nullptr);  // refused before launching
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();
  EXPECT_NE(status.message().find("scratch"), std::string::npos) << status.message();

  cuda::PagedAttentionParams prefill = decode;
  prefill.kv.tokens = 512;
  prefill.heads = 32;
  prefill.kv.head_dim = 128;
  prefill.max_context = 512;
  EXPECT_EQ(cuda::flashAttentionScratchBytes(prefill), 0u);

  cuda::PagedAttentionParams wide = decode;
  wide.kv.head_dim = 300;
  wide.q_width = 300;
  status = cuda::launchFlashAttention(wide, nullptr, 0, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented) << status.message();
  EXPECT_NE(status.message().find("flash attention"), std::string::npos) << status.message();

  cuda::PagedAttentionParams no_q = decode;
  no_q.q = nullptr;
  EXPECT_EQ(cuda::launchFlashAttention(no_q, nullptr, 0, nullptr).code(),
            StatusCode::kInvalidArgument);

  cuda::PagedAttentionParams beyond = decode;
  beyond.max_context = 2000 * 16 + 1;
  EXPECT_EQ(cuda::launchFlashAttention(beyond, nullptr, 0, nullptr).code(),
            StatusCode::kInvalidArgument);
  beyond.max_context = 0;
  EXPECT_EQ(cuda::launchFlashAttention(beyond, nullptr, 0, nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace llmc::testing
