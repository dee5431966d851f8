// LlmAttention and LlmPositions: a ragged step over the paged KV cache (mixed prefill and
// decode of several sequences, across block boundaries, grouped-query heads) must equal
// plain causal attention over each whole sequence, which is what the kernel computes
// without a step context.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/step_context.h"
#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "llm/kv_cache.h"
#include "status_test_util.h"

namespace llmc {
namespace {

using testing::makeFloat;
using testing::TestKernelContext;

constexpr int64_t kHeads = 4, kKvHeads = 2, kDim = 8, kLayers = 2;

class StepKernelContext : public TestKernelContext {
 public:
  LlmStepContext* step = nullptr;
  LlmStepContext* llmStep() const override { return step; }
};

std::vector<float> randomValues(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Rows [first, first + count) of a [1, heads, n, dim] tensor as [1, heads, count, dim].
Tensor rows(const Tensor& t, int64_t first, int64_t count) {
  int64_t heads = t.dim(1), n = t.dim(2), dim = t.dim(3);
  Tensor out = Tensor::allocate(DType::kFloat32, {1, heads, count, dim});
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t r = 0; r < count; ++r)
      for (int64_t d = 0; d < dim; ++d)
        out.data<float>()[(h * count + r) * dim + d] =
            t.data<float>()[(h * n + first + r) * dim + d];
  return out;
}

// Concatenates [1, heads, n_i, dim] tensors along the token axis.
Tensor concatTokens(const std::vector<Tensor>& parts) {
  int64_t heads = parts[0].dim(1), dim = parts[0].dim(3), total = 0;
  for (const Tensor& p : parts) total += p.dim(2);
  Tensor out = Tensor::allocate(DType::kFloat32, {1, heads, total, dim});
  int64_t offset = 0;
  for (const Tensor& p : parts) {
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r = 0; r < p.dim(2); ++r)
        for (int64_t d = 0; d < dim; ++d)
          out.data<float>()[(h * total + offset + r) * dim + d] =
              p.data<float>()[(h * p.dim(2) + r) * dim + d];
    offset += p.dim(2);
  }
  return out;
}

// A cache of `kv_heads` heads of `dim`.
KvCacheSpec floatSpec(int32_t layers, int64_t blocks, DType dtype = DType::kFloat32,
                      int64_t dim = kDim, int64_t kv_heads = kKvHeads) {
  KvCacheSpec spec;
  spec.num_layers = layers;
  spec.num_kv_heads = static_cast<int32_t>(kv_heads);
  spec.head_dim = static_cast<int32_t>(dim);
  spec.dtype = dtype;
  spec.num_blocks = blocks;
  return spec;
}

struct Sequence {
  int64_t id;
  int64_t length;
  Tensor q, k, v;   // whole sequence, [1, heads, length, dim]
  Tensor expected;  // causal attention over it, no cache
};

Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, LlmStepContext* step,
              int64_t layer, Status* status, ThreadPool* pool = nullptr) {
  StepKernelContext ctx;
  ctx.step = step;
  ctx.pool = pool;
  ctx.inputs = {q, k, v};
  KernelParam layer_param;
  layer_param.kind = KernelParam::Kind::kInt;
  layer_param.i = layer;
  ctx.kernel_params.set("layer", layer_param);
  KernelParam scale;
  scale.kind = KernelParam::Kind::kFloat;
  scale.f = 0.35;
  ctx.kernel_params.set("scale", scale);
  *status = ctx.run("LlmAttention");
  return status->ok() ? ctx.outputs[0] : Tensor();
}

// Mixed prefill/decode steps of three sequences (`heads` query heads over `kv_heads` KV heads of
// `dim`) through a cache storing `dtype`; the result must match whole-sequence attention within
// `tolerance`, and be the same bits on 2, 3 and 7 threads as on one.
void checkRaggedSteps(DType dtype, double tolerance, int64_t dim = kDim, int64_t heads = kHeads,
                      int64_t kv_heads = kKvHeads) {
  ThreadPool pools[] = {ThreadPool(2), ThreadPool(3), ThreadPool(7)};
  std::mt19937 rng(7);
  std::vector<Sequence> seqs = {
      {11, 37, {}, {}, {}, {}}, {12, 5, {}, {}, {}, {}}, {13, 18, {}, {}, {}, {}}};
  for (Sequence& s : seqs) {
    s.q = makeFloat({1, heads, s.length, dim}, randomValues(heads * s.length * dim, rng));
    s.k = makeFloat({1, kv_heads, s.length, dim}, randomValues(kv_heads * s.length * dim, rng));
    s.v = makeFloat({1, kv_heads, s.length, dim}, randomValues(kv_heads * s.length * dim, rng));
    Status status;
    s.expected = attend(s.q, s.k, s.v, nullptr, 0, &status);
    ASSERT_OK(status);
  }
  std::unique_ptr<KvCache> cache;
  ASSERT_OK(KvCache::create(floatSpec(kLayers, 16, dtype, dim, kv_heads), &cache));

  // Steps as (sequence, first, count): chunked prefill mixed with decode, in both layers.
  std::vector<std::vector<std::array<int64_t, 3>>> steps = {
      {{0, 0, 20}, {1, 0, 3}},              // prefill A (crosses a block), B partly
      {{1, 3, 2}, {0, 20, 1}, {2, 0, 18}},  // B finishes, A decodes, C prefills
      {{0, 21, 16}, {2, 18, 0}},            // A: a chunk ending exactly at 37; C idle
  };
  std::vector<int64_t> registered(seqs.size(), 0);
  std::vector<Tensor> got_parts[3][kLayers];
  for (const auto& items : steps) {
    LlmStepContext ctx;
    ctx.cache = cache.get();
    std::vector<Tensor> qs, ks, vs;
    for (const auto& [index, first, count] : items) {
      if (count == 0) continue;
      Sequence& s = seqs[static_cast<size_t>(index)];
      // Distinct per sequence, so that no prefix is shared.
      std::vector<int32_t> tokens;
      for (int64_t p = first; p < first + count; ++p)
        tokens.push_back(static_cast<int32_t>(s.id * 1000 + p));
      if (registered[index] == 0) {
        int64_t cached = 0;
        ASSERT_OK(cache->addSequence(s.id, tokens, &cached));
        ASSERT_EQ(cached, 0);
      } else {
        ASSERT_OK(cache->appendTokens(s.id, tokens));
      }
      registered[index] += count;
      std::span<const int32_t> table;
      ASSERT_OK(cache->blockTable(s.id, &table));
      ctx.block_tables.emplace_back(table.begin(), table.end());
      for (int64_t p = first; p < first + count; ++p) {
        KvSlot slot;
        ASSERT_OK(cache->slotFor(s.id, p, &slot));
        ctx.token_sequence.push_back(static_cast<int32_t>(ctx.block_tables.size() - 1));
        ctx.token_position.push_back(p);
        ctx.token_slot.push_back(slot);
      }
      qs.push_back(rows(s.q, first, count));
      ks.push_back(rows(s.k, first, count));
      vs.push_back(rows(s.v, first, count));
    }
    Tensor q = concatTokens(qs), k = concatTokens(ks), v = concatTokens(vs);
    for (int64_t layer = 0; layer < kLayers; ++layer) {
      Status status;
      Tensor out = attend(q, k, v, &ctx, layer, &status);
      ASSERT_OK(status);
      for (ThreadPool& pool : pools) {
        Tensor threaded = attend(q, k, v, &ctx, layer, &status, &pool);
        ASSERT_OK(status);
        ASSERT_EQ(std::memcmp(threaded.data(), out.data(), out.sizeBytes()), 0)
            << pool.threads() << " threads changed the result of layer " << layer;
      }
      int64_t offset = 0;
      for (const auto& [index, first, count] : items) {
        if (count == 0) continue;
        got_parts[index][layer].push_back(rows(out, offset, count));
        offset += count;
      }
    }
    for (const auto& [index, first, count] : items)
      if (count > 0) ASSERT_OK(cache->commitTokens(seqs[index].id, first + count));
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (int64_t layer = 0; layer < kLayers; ++layer) {
      Tensor got = concatTokens(got_parts[i][layer]);
      ASSERT_EQ(got.shape(), seqs[i].expected.shape());
      for (int64_t e = 0; e < got.numElements(); ++e)
        EXPECT_NEAR(got.data<float>()[e], seqs[i].expected.data<float>()[e], tolerance)
            << "sequence " << i << " layer " << layer << " element " << e;
    }
  }
  ASSERT_OK(cache->checkInvariants());
}

TEST(LlmAttention, RaggedStepsOverTheCacheEqualWholeSequenceAttention) {
  checkRaggedSteps(DType::kFloat32, 1e-5);
}

// Heads of 64 and 128, where AVX-512 hosts take the chunked kernel (attendChunk) both over the
// cache's blocks (read in place, or converted) and for the whole sequences.
TEST(LlmAttention, WideHeadsOverTheCacheEqualWholeSequenceAttention) {
  for (int64_t dim : {64, 128}) {
    SCOPED_TRACE("head_dim " + std::to_string(dim));
    checkRaggedSteps(DType::kFloat32, 1e-5, dim);
    // float16's error in a score grows with the square root of its terms (as the test below).
    checkRaggedSteps(DType::kFloat16, 5e-3 * std::sqrt(dim / 8.0), dim);
  }
}

// A KV head per query head, the decode tokens of a step walk their KV heads a block at a time
// for several heads at once (attendHeads), in ranges of heads that the thread count sets: five
// KV heads, which 1, 2, 3 and 7 threads cut into different ranges, for each cache format.
TEST(LlmAttention, MultiHeadDecodeOverHeadRangesOfEveryThreadCount) {
  for (int64_t dim : {8, 64}) {
    SCOPED_TRACE("head_dim " + std::to_string(dim));
    const double growth = std::sqrt(dim / 8.0);
    checkRaggedSteps(DType::kFloat32, 1e-5, dim, 5, 5);
    checkRaggedSteps(DType::kFloat16, 5e-3 * growth, dim, 5, 5);
    checkRaggedSteps(DType::kInt8, 2e-2 * growth, dim, 5, 5);
  }
}

// A stored (not float32) cache is read two ways: a task of one or two tokens (decode) has the
// chunked kernel convert each block as it reads it, a longer one converts its rows into scratch
// once. Both give the same floats, so a token's result must be the same bits whichever way: a
// 37-token prefill in one step (tasks of 32 and 5 tokens), then the last token alone and the
// last two again, over the same cache, for every stored dtype and head size. With one query
// head per KV head, the last token alone is a lone query, which converts each row in registers
// as it reads it (attendLoneStored), and walks its KV heads together (attendHeads), and its bits
// must be the same again; float32 rows, read in place by every task, too.
TEST(LlmAttention, DecodeReadsTheStoredCacheAsPrefillDoes) {
  for (DType dtype :
       {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt8, DType::kUInt8})
    for (int64_t dim : {64, 128, 8, 40, 256})
      for (int64_t heads : {kHeads, kKvHeads}) {
        SCOPED_TRACE(std::string(kvDTypeName(dtype)) + ", head_dim " + std::to_string(dim) + ", " +
                     std::to_string(heads) + " query heads");
        std::mt19937 rng(3);
        constexpr int64_t kLength = 37;
        Tensor q = makeFloat({1, heads, kLength, dim}, randomValues(heads * kLength * dim, rng));
        Tensor k =
            makeFloat({1, kKvHeads, kLength, dim}, randomValues(kKvHeads * kLength * dim, rng));
        Tensor v =
            makeFloat({1, kKvHeads, kLength, dim}, randomValues(kKvHeads * kLength * dim, rng));
        std::unique_ptr<KvCache> cache;
        ASSERT_OK(KvCache::create(floatSpec(1, 8, dtype, dim), &cache));
        std::vector<int32_t> tokens(kLength);
        for (int64_t p = 0; p < kLength; ++p) tokens[p] = static_cast<int32_t>(100 + p);
        int64_t cached = 0;
        ASSERT_OK(cache->addSequence(1, tokens, &cached));
        std::span<const int32_t> table;
        ASSERT_OK(cache->blockTable(1, &table));
        // A step of positions [first, kLength) of the sequence.
        auto run = [&](int64_t first, Status* status) {
          LlmStepContext ctx;
          ctx.cache = cache.get();
          ctx.block_tables.emplace_back(table.begin(), table.end());
          for (int64_t p = first; p < kLength; ++p) {
            KvSlot slot;
            EXPECT_TRUE(cache->slotFor(1, p, &slot).ok());
            ctx.token_sequence.push_back(0);
            ctx.token_position.push_back(p);
            ctx.token_slot.push_back(slot);
          }
          return attend(rows(q, first, kLength - first), rows(k, first, kLength - first),
                        rows(v, first, kLength - first), &ctx, 0, status);
        };
        Status status;
        const Tensor prefill = run(0, &status);
        ASSERT_OK(status);
        for (int64_t first : {kLength - 1, kLength - 2}) {
          const Tensor decode = run(first, &status);
          ASSERT_OK(status);
          const Tensor want = rows(prefill, first, kLength - first);
          EXPECT_EQ(std::memcmp(decode.data(), want.data(), want.sizeBytes()), 0)
              << "positions from " << first;
        }
      }
}

// Half-precision storage: K/V rounded to 11 (float16) or 8 (bfloat16) significant bits.
TEST(LlmAttention, HalfPrecisionCacheStaysClose) {
  checkRaggedSteps(DType::kFloat16, 5e-3);
  checkRaggedSteps(DType::kBFloat16, 4e-2);
}

// 8-bit storage with a scale per token and KV head: int8 (7 bits of each row's absmax) and FP8
// E4M3 (3 mantissa bits); the same bounds as the checks above apply, so a wrong scale or a
// row read from the wrong place fails them.
TEST(LlmAttention, EightBitCacheStaysClose) {
  checkRaggedSteps(DType::kInt8, 2e-2);
  checkRaggedSteps(DType::kUInt8, 8e-2);  // fp8
  KvCacheSpec spec;
  spec.num_layers = 2, spec.num_kv_heads = 3, spec.head_dim = 10, spec.block_size = 16,
  spec.num_blocks = 4;
  spec.dtype = DType::kInt8;
  EXPECT_EQ(spec.kvScaleOffset(), 3 * 16 * 10);
  EXPECT_EQ(spec.bytesPerLayerKv(), 3 * 16 * 10 + 3 * 16 * 4);
  EXPECT_STREQ(kvDTypeName(DType::kUInt8), "fp8");
}

TEST(LlmAttention, RejectsMismatchedShapesAndABatchedStep) {
  std::mt19937 rng(1);
  Tensor q = makeFloat({2, kHeads, 3, kDim}, randomValues(2 * kHeads * 3 * kDim, rng));
  Tensor k = makeFloat({2, 3, 3, kDim}, randomValues(2 * 3 * 3 * kDim, rng));  // 4 % 3 != 0
  Status status;
  attend(q, k, k, nullptr, 0, &status);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.message();

  Tensor k2 = makeFloat({2, kKvHeads, 3, kDim}, randomValues(2 * kKvHeads * 3 * kDim, rng));
  std::unique_ptr<KvCache> cache;
  ASSERT_OK(KvCache::create(floatSpec(1, 2), &cache));
  LlmStepContext ctx;
  ctx.cache = cache.get();
  ctx.token_position = {0, 1, 2};
  attend(q, k2, k2, &ctx, 0, &status);  // a ragged step is one row
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("ragged step"), std::string::npos) << status.message();
}

TEST(LlmPositions, FromTheStepOrCounting) {
  TestKernelContext plain;
  plain.inputs = {testing::makeInt64({2, 4}, {5, 6, 7, 8, 1, 2, 3, 4})};
  ASSERT_OK(plain.run("LlmPositions"));
  EXPECT_EQ(testing::values<int64_t>(plain.outputs[0]), (std::vector<int64_t>{0, 1, 2, 3}));

  StepKernelContext stepped;
  LlmStepContext ctx;
  ctx.token_position = {17, 0, 1, 40};
  stepped.step = &ctx;
  stepped.inputs = {testing::makeInt64({1, 4}, {5, 6, 7, 8})};
  ASSERT_OK(stepped.run("LlmPositions"));
  EXPECT_EQ(testing::values<int64_t>(stepped.outputs[0]), (std::vector<int64_t>{17, 0, 1, 40}));
}

}  // namespace
}  // namespace llmc

namespace llmc {
namespace {

TEST(LlmLastTokens, SelectsEachSequencesLastRowInAStepElseCopies) {
  std::vector<float> rows;
  for (int t = 0; t < 5; ++t)
    for (int f = 0; f < 3; ++f) rows.push_back(static_cast<float>(10 * t + f));
  testing::TestKernelContext plain;
  plain.inputs = {testing::makeFloat({1, 5, 3}, rows)};
  ASSERT_OK(plain.run("LlmLastTokens"));
  EXPECT_EQ(testing::values<float>(plain.outputs[0]), rows);

  StepKernelContext stepped;
  LlmStepContext ctx;
  ctx.token_position = {0, 1, 2, 7, 3};
  ctx.last_token = {2, 3, 4};  // three sequences: tokens 0-2, 3, 4
  stepped.step = &ctx;
  stepped.inputs = {testing::makeFloat({1, 5, 3}, rows)};
  ASSERT_OK(stepped.run("LlmLastTokens"));
  EXPECT_EQ(stepped.outputs[0].shape(), (Shape{1, 3, 3}));
  EXPECT_EQ(testing::values<float>(stepped.outputs[0]),
            (std::vector<float>{20, 21, 22, 30, 31, 32, 40, 41, 42}));
}

}  // namespace
}  // namespace llmc
