// Unit tests for the paged KV cache: spec validation, every sequence operation, copy on
// write, prefix sharing and its collision safety, LRU eviction, the all-or-nothing full-cache
// error, and a randomized run against a plain reference model.
#include "llm/kv_cache.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "status_test_util.h"

namespace llmc {
namespace {

KvCacheSpec smallSpec(int64_t num_blocks, int32_t block_size = 4) {
  KvCacheSpec spec;
  spec.num_layers = 2;
  spec.num_kv_heads = 2;
  spec.head_dim = 4;
  spec.dtype = DType::kFloat32;
  spec.block_size = block_size;
  spec.num_blocks = num_blocks;
  return spec;
}

std::unique_ptr<KvCache> makeCache(int64_t num_blocks, int32_t block_size = 4) {
  std::unique_ptr<KvCache> cache;
  Status status = KvCache::create(smallSpec(num_blocks, block_size), &cache);
  EXPECT_TRUE(status.ok()) << status.toString();
  return cache;
}

// `count` consecutive token ids from `first`.
std::vector<int32_t> tokenRange(int32_t first, int32_t count) {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < count; ++i) tokens.push_back(first + i);
  return tokens;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> table(const KvCache& cache, int64_t id) {
  std::span<const int32_t> block_table;
  Status status = cache.blockTable(id, &block_table);
  EXPECT_TRUE(status.ok()) << status.toString();
  return std::vector<int32_t>(block_table.begin(), block_table.end());
}

int64_t addSeq(KvCache& cache, int64_t id, const std::vector<int32_t>& tokens) {
  int64_t cached = -1;
  Status status = cache.addSequence(id, tokens, &cached);
  EXPECT_TRUE(status.ok()) << status.toString();
  return cached;
}

// What the attention kernel would do: K of every layer, head and element of the token's slot
// gets `value`, V gets -value.
void writeKv(KvCache& cache, int64_t id, int64_t position, float value) {
  KvSlot slot;
  ASSERT_OK(cache.slotFor(id, position, &slot));
  const KvCacheSpec& spec = cache.spec();
  for (int32_t layer = 0; layer < spec.num_layers; ++layer) {
    float* key = static_cast<float*>(cache.keyData(slot.block, layer));
    float* val = static_cast<float*>(cache.valueData(slot.block, layer));
    for (int32_t head = 0; head < spec.num_kv_heads; ++head) {
      for (int32_t d = 0; d < spec.head_dim; ++d) {
        const int64_t index = (int64_t{head} * spec.block_size + slot.offset) * spec.head_dim + d;
        key[index] = value;
        val[index] = -value;
      }
    }
  }
}

// The value writeKv stored for the token at `position`; NaN when layers, heads or K and V
// disagree.
float readKv(const KvCache& cache, int64_t id, int64_t position) {
  KvSlot slot;
  Status status = cache.slotFor(id, position, &slot);
  EXPECT_TRUE(status.ok()) << status.toString();
  const KvCacheSpec& spec = cache.spec();
  const float expected =
      static_cast<const float*>(cache.keyData(slot.block, 0))[int64_t{slot.offset} * spec.head_dim];
  for (int32_t layer = 0; layer < spec.num_layers; ++layer) {
    const float* key = static_cast<const float*>(cache.keyData(slot.block, layer));
    const float* val = static_cast<const float*>(cache.valueData(slot.block, layer));
    for (int32_t head = 0; head < spec.num_kv_heads; ++head) {
      for (int32_t d = 0; d < spec.head_dim; ++d) {
        const int64_t index = (int64_t{head} * spec.block_size + slot.offset) * spec.head_dim + d;
        if (key[index] != expected || val[index] != -expected) return std::nanf("");
      }
    }
  }
  return expected;
}

// ---- Spec and storage

TEST(KvCacheSpecTest, ValidatesFields) {
  EXPECT_TRUE(smallSpec(8).validate().ok());
  KvCacheSpec spec = smallSpec(8);
  spec.num_layers = 0;
  Status status = spec.validate();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("num_layers is 0"), std::string::npos) << status.message();

  spec = smallSpec(8);
  spec.dtype = DType::kInt32;
  status = spec.validate();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("int32"), std::string::npos) << status.message();

  spec = smallSpec(8, 0);
  EXPECT_EQ(spec.validate().code(), StatusCode::kInvalidArgument);
  spec = smallSpec(0);
  EXPECT_EQ(spec.validate().code(), StatusCode::kInvalidArgument);
  spec = smallSpec(8);
  spec.head_dim = -3;
  EXPECT_EQ(spec.validate().code(), StatusCode::kInvalidArgument);

  // Valid fields, but the total overflows.
  spec = smallSpec(std::numeric_limits<int32_t>::max(), 4096);
  spec.num_layers = 60000;
  spec.num_kv_heads = 60000;
  status = spec.validate();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("overflow"), std::string::npos) << status.message();
}

TEST(KvCacheSpecTest, BytesAndBudget) {
  KvCacheSpec spec = smallSpec(8);
  // 2 layers * (K, V) * 2 heads * 4 slots * 4 dims * 4 bytes.
  EXPECT_EQ(spec.bytesPerLayerKv(), 2 * 4 * 4 * 4);
  EXPECT_EQ(spec.bytesPerBlock(), 2 * 2 * 2 * 4 * 4 * 4);
  spec.dtype = DType::kBFloat16;
  EXPECT_EQ(spec.bytesPerBlock(), 2 * 2 * 2 * 4 * 4 * 2);

  spec = smallSpec(0);
  int64_t num_blocks = 0;
  ASSERT_OK(KvCache::numBlocksForBudget(spec, 512 * 10 + 100, &num_blocks));
  EXPECT_EQ(num_blocks, 10);
  Status status = KvCache::numBlocksForBudget(spec, 511, &num_blocks);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("511"), std::string::npos) << status.message();
}

TEST(KvCacheSpecTest, CreateRejectsBadSpecAndAlignsStorage) {
  std::unique_ptr<KvCache> cache;
  EXPECT_EQ(KvCache::create(smallSpec(0), &cache).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache, nullptr);

  cache = makeCache(5);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(cache->storage()) % 64, 0u);
  EXPECT_EQ(cache->storageBytes(), 5 * 512);
  // [block][layer][k|v][head][slot][dim]
  auto* base = static_cast<std::byte*>(cache->storage());
  EXPECT_EQ(static_cast<std::byte*>(cache->keyData(0, 0)), base);
  EXPECT_EQ(static_cast<std::byte*>(cache->valueData(0, 0)), base + 128);
  EXPECT_EQ(static_cast<std::byte*>(cache->keyData(0, 1)), base + 256);
  EXPECT_EQ(static_cast<std::byte*>(cache->valueData(3, 1)), base + 3 * 512 + 384);
  const float* zeros = static_cast<const float*>(cache->storage());
  for (int i = 0; i < 5 * 128; ++i) ASSERT_EQ(zeros[i], 0.0f);

  KvCacheStats stats = cache->stats();
  EXPECT_EQ(stats.num_blocks, 5);
  EXPECT_EQ(stats.free_blocks, 5);
  EXPECT_EQ(stats.used_blocks, 0);
  EXPECT_EQ(stats.cached_blocks, 0);
}

// The share of the storage's pages that are resident (mincore).
double residentShare(KvCache& cache) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t pages = (static_cast<size_t>(cache.storageBytes()) + page - 1) / page;
  std::vector<unsigned char> resident(pages);
  EXPECT_EQ(mincore(cache.storage(), pages * page, resident.data()), 0);
  size_t count = 0;
  for (unsigned char r : resident) count += r & 1;
  return static_cast<double>(count) / static_cast<double>(pages);
}

TEST(KvCacheSpecTest, PrefaultWritesEveryPageWhenCreatedAndOnlyThen) {
  KvCacheSpec spec = smallSpec(2048);  // 512 bytes a block: 1 MiB, 256 pages of 4 KiB
  std::unique_ptr<KvCache> lazy;
  ASSERT_OK(KvCache::create(spec, &lazy));
  EXPECT_EQ(residentShare(*lazy), 0.0) << "a lazily mapped cache has no page before a write";
  spec.prefault = true;
  std::unique_ptr<KvCache> eager;
  ASSERT_OK(KvCache::create(spec, &eager));
  EXPECT_EQ(residentShare(*eager), 1.0) << "a prefaulted cache has every page at creation";
  const float* values = static_cast<const float*>(eager->storage());
  for (int64_t i = 0; i < eager->storageBytes() / 4; ++i) ASSERT_EQ(values[i], 0.0f) << i;
  // Both work alike.
  for (KvCache* cache : {lazy.get(), eager.get()}) {
    int64_t cached = -1;
    const std::vector<int32_t> tokens(9, 7);
    ASSERT_OK(cache->addSequence(1, tokens, &cached));
    EXPECT_EQ(cache->stats().used_blocks, 3);
  }
}

// ---- Basic operations

TEST(KvCacheTest, AddAllocatesBlocksAndMapsSlots) {
  auto cache = makeCache(8);
  EXPECT_EQ(addSeq(*cache, 7, tokenRange(100, 10)), 0);
  EXPECT_EQ(table(*cache, 7), (std::vector<int32_t>{0, 1, 2}));
  int64_t n = 0;
  ASSERT_OK(cache->numTokens(7, &n));
  EXPECT_EQ(n, 10);
  ASSERT_OK(cache->numCommittedTokens(7, &n));
  EXPECT_EQ(n, 0);
  KvSlot slot;
  ASSERT_OK(cache->slotFor(7, 9, &slot));
  EXPECT_EQ(slot.block, 2);
  EXPECT_EQ(slot.offset, 1);
  EXPECT_EQ(cache->slotFor(7, 10, &slot).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(cache->slotFor(7, -1, &slot).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(cache->stats().used_blocks, 3);
  EXPECT_EQ(cache->stats().free_blocks, 5);
  EXPECT_EQ(cache->numSequences(), 1);

  // An empty sequence holds no block.
  EXPECT_EQ(addSeq(*cache, 8, {}), 0);
  EXPECT_TRUE(table(*cache, 8).empty());
  ASSERT_OK(cache->checkInvariants());
}

TEST(KvCacheTest, AppendCrossesBlockBoundaries) {
  auto cache = makeCache(8);
  addSeq(*cache, 1, tokenRange(0, 3));
  ASSERT_OK(cache->appendTokens(1, std::vector<int32_t>{3}));
  EXPECT_EQ(table(*cache, 1), (std::vector<int32_t>{0}));
  ASSERT_OK(cache->appendTokens(1, tokenRange(4, 6)));
  EXPECT_EQ(table(*cache, 1), (std::vector<int32_t>{0, 1, 2}));
  int64_t needed = 0;
  ASSERT_OK(cache->blocksNeededToAppend(1, 2, &needed));
  EXPECT_EQ(needed, 0);
  ASSERT_OK(cache->blocksNeededToAppend(1, 3, &needed));
  EXPECT_EQ(needed, 1);
  std::span<const int32_t> tokens;
  ASSERT_OK(cache->tokens(1, &tokens));
  EXPECT_EQ(std::vector<int32_t>(tokens.begin(), tokens.end()), tokenRange(0, 10));
  ASSERT_OK(cache->appendTokens(1, {}));
  ASSERT_OK(cache->checkInvariants());
}

TEST(KvCacheTest, RejectsUnknownAndDuplicateIdsAndBadCounts) {
  auto cache = makeCache(8);
  addSeq(*cache, 1, tokenRange(0, 5));
  int64_t cached = 0;
  Status status = cache->addSequence(1, tokenRange(0, 2), &cached);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("sequence 1 already exists"), std::string::npos);

  status = cache->appendTokens(42, tokenRange(0, 1));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("appendTokens: unknown sequence 42"), std::string::npos);
  EXPECT_EQ(cache->popTokens(42, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->removeSequence(42).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->commitTokens(42, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->fork(42, 43).code(), StatusCode::kInvalidArgument);
  int64_t n = 0;
  EXPECT_EQ(cache->numTokens(42, &n).code(), StatusCode::kInvalidArgument);
  std::span<const int32_t> span;
  EXPECT_EQ(cache->blockTable(42, &span).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(cache->hasSequence(42));

  status = cache->fork(1, 1);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("child sequence 1 already exists"), std::string::npos);

  status = cache->popTokens(1, 6);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("cannot pop 6 tokens from sequence 1 of 5 tokens"),
            std::string::npos)
      << status.message();
  EXPECT_EQ(cache->popTokens(1, -1).code(), StatusCode::kInvalidArgument);

  EXPECT_EQ(cache->commitTokens(1, 6).code(), StatusCode::kInvalidArgument);
  ASSERT_OK(cache->commitTokens(1, 3));
  EXPECT_EQ(cache->commitTokens(1, 2).code(), StatusCode::kInvalidArgument);
  ASSERT_OK(cache->checkInvariants());
  EXPECT_EQ(table(*cache, 1), (std::vector<int32_t>{0, 1}));
}

TEST(KvCacheTest, PopAcrossBlockBoundariesFreesBlocks) {
  auto cache = makeCache(8);
  addSeq(*cache, 1, tokenRange(0, 10));
  ASSERT_OK(cache->commitTokens(1, 10));
  ASSERT_OK(cache->popTokens(1, 0));
  EXPECT_EQ(table(*cache, 1).size(), 3u);
  ASSERT_OK(cache->popTokens(1, 7));  // 3 tokens left: one block
  EXPECT_EQ(table(*cache, 1), (std::vector<int32_t>{0}));
  int64_t n = 0;
  ASSERT_OK(cache->numCommittedTokens(1, &n));
  EXPECT_EQ(n, 3);
  KvCacheStats stats = cache->stats();
  EXPECT_EQ(stats.used_blocks, 1);
  // Block 1 was full and committed: it stays findable; block 2 was partial: free.
  EXPECT_EQ(stats.cached_blocks, 1);
  EXPECT_EQ(stats.free_blocks, 6);
  ASSERT_OK(cache->popTokens(1, 3));
  EXPECT_TRUE(table(*cache, 1).empty());
  ASSERT_OK(cache->appendTokens(1, tokenRange(50, 5)));
  EXPECT_EQ(table(*cache, 1).size(), 2u);
  ASSERT_OK(cache->checkInvariants());
}

TEST(KvCacheTest, RemoveReturnsBlocks) {
  auto cache = makeCache(8);
  addSeq(*cache, 1, tokenRange(0, 10));
  addSeq(*cache, 2, tokenRange(100, 3));
  ASSERT_OK(cache->removeSequence(1));
  EXPECT_FALSE(cache->hasSequence(1));
  // Nothing was committed, so nothing is worth caching.
  EXPECT_EQ(cache->stats().free_blocks, 7);
  EXPECT_EQ(cache->stats().cached_blocks, 0);
  ASSERT_OK(cache->removeSequence(2));
  EXPECT_EQ(cache->stats().free_blocks, 8);
  EXPECT_EQ(cache->removeSequence(2).code(), StatusCode::kInvalidArgument);
  ASSERT_OK(cache->checkInvariants());
}

// ---- Copy on write

TEST(KvCacheTest, ForkSharesBlocksAndCopiesOnWrite) {
  auto cache = makeCache(8);
  addSeq(*cache, 1, tokenRange(0, 6));
  for (int64_t p = 0; p < 6; ++p) writeKv(*cache, 1, p, 10.0f + p);
  ASSERT_OK(cache->commitTokens(1, 6));

  ASSERT_OK(cache->fork(1, 2));
  EXPECT_EQ(table(*cache, 2), table(*cache, 1));
  for (int32_t block : table(*cache, 1)) EXPECT_EQ(cache->blockRefCount(block), 2);
  int64_t n = 0;
  ASSERT_OK(cache->numCommittedTokens(2, &n));
  EXPECT_EQ(n, 6);
  int64_t needed = 0;
  ASSERT_OK(cache->blocksNeededToAppend(2, 1, &needed));
  EXPECT_EQ(needed, 1);  // the copy

  // The child writes into the shared partial block: it gets its own copy.
  ASSERT_OK(cache->appendTokens(2, std::vector<int32_t>{77}));
  std::vector<int32_t> child = table(*cache, 2);
  std::vector<int32_t> parent = table(*cache, 1);
  EXPECT_EQ(child[0], parent[0]);
  EXPECT_NE(child[1], parent[1]);
  EXPECT_EQ(cache->blockRefCount(parent[0]), 2);
  EXPECT_EQ(cache->blockRefCount(parent[1]), 1);
  EXPECT_EQ(cache->blockRefCount(child[1]), 1);
  EXPECT_EQ(cache->stats().copy_on_writes, 1);
  writeKv(*cache, 2, 6, 99.0f);
  writeKv(*cache, 2, 5, -5.0f);  // overwrite a copied slot in the child only
  for (int64_t p = 0; p < 6; ++p) EXPECT_EQ(readKv(*cache, 1, p), 10.0f + p) << p;
  for (int64_t p = 0; p < 5; ++p) EXPECT_EQ(readKv(*cache, 2, p), 10.0f + p) << p;
  EXPECT_EQ(readKv(*cache, 2, 5), -5.0f);
  EXPECT_EQ(readKv(*cache, 2, 6), 99.0f);

  // The parent is now the only owner of its last block: it writes in place.
  ASSERT_OK(cache->appendTokens(1, std::vector<int32_t>{88}));
  EXPECT_EQ(table(*cache, 1), parent);
  EXPECT_EQ(cache->stats().copy_on_writes, 1);
  writeKv(*cache, 1, 6, 1234.0f);
  EXPECT_EQ(readKv(*cache, 2, 6), 99.0f);
  ASSERT_OK(cache->checkInvariants());

  // Removing the parent leaves the child whole.
  ASSERT_OK(cache->removeSequence(1));
  for (int64_t p = 0; p < 5; ++p) EXPECT_EQ(readKv(*cache, 2, p), 10.0f + p) << p;
  EXPECT_EQ(cache->blockRefCount(child[0]), 1);
  ASSERT_OK(cache->checkInvariants());
}

TEST(KvCacheTest, ForkAtBlockBoundaryNeedsNoCopy) {
  auto cache = makeCache(8);
  addSeq(*cache, 1, tokenRange(0, 8));
  ASSERT_OK(cache->fork(1, 2));
  ASSERT_OK(cache->appendTokens(2, tokenRange(8, 1)));
  ASSERT_OK(cache->appendTokens(1, tokenRange(20, 1)));
  EXPECT_EQ(cache->stats().copy_on_writes, 0);
  std::vector<int32_t> child = table(*cache, 2);
  std::vector<int32_t> parent = table(*cache, 1);
  EXPECT_EQ(std::vector<int32_t>(child.begin(), child.begin() + 2),
            std::vector<int32_t>(parent.begin(), parent.begin() + 2));
  EXPECT_NE(child[2], parent[2]);
  ASSERT_OK(cache->checkInvariants());
}

// A mirror of the storage (the CUDA backend's device pools) learns every copy on write, in
// order, once it asked for them, and each only once.
TEST(KvCacheTest, RecordsBlockCopiesForAMirror) {
  auto cache = makeCache(8);
  addSeq(*cache, 1, tokenRange(0, 6));
  ASSERT_OK(cache->fork(1, 2));
  ASSERT_OK(cache->appendTokens(2, std::vector<int32_t>{77}));  // not recording yet
  EXPECT_TRUE(cache->takeBlockCopies().empty());
  cache->recordBlockCopies();
  ASSERT_OK(cache->fork(1, 3));
  const int32_t shared = table(*cache, 1)[1];
  ASSERT_OK(cache->appendTokens(3, std::vector<int32_t>{78}));
  ASSERT_OK(cache->appendTokens(1, std::vector<int32_t>{79}));  // sole owner again: in place
  const std::vector<std::pair<int32_t, int32_t>> copies = cache->takeBlockCopies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0], std::make_pair(shared, table(*cache, 3)[1]));
  EXPECT_EQ(cache->stats().copy_on_writes, 2);
  EXPECT_TRUE(cache->takeBlockCopies().empty());
}

TEST(KvCacheTest, PopThenAppendOnSharedBlockCopies) {
  auto cache = makeCache(8);
  addSeq(*cache, 1, tokenRange(0, 8));
  for (int64_t p = 0; p < 8; ++p) writeKv(*cache, 1, p, float(p));
  ASSERT_OK(cache->fork(1, 2));
  ASSERT_OK(cache->popTokens(2, 2));  // the child rolls back into the shared block
  ASSERT_OK(cache->appendTokens(2, std::vector<int32_t>{500, 501}));
  EXPECT_EQ(cache->stats().copy_on_writes, 1);
  writeKv(*cache, 2, 6, 600.0f);
  writeKv(*cache, 2, 7, 700.0f);
  EXPECT_EQ(readKv(*cache, 1, 6), 6.0f);
  EXPECT_EQ(readKv(*cache, 1, 7), 7.0f);
  EXPECT_EQ(readKv(*cache, 2, 5), 5.0f);
  ASSERT_OK(cache->checkInvariants());
}

// ---- Prefix caching

TEST(KvCacheTest, SharesCommittedFullBlocksOnly) {
  auto cache = makeCache(16);
  const std::vector<int32_t> prompt = tokenRange(0, 10);
  addSeq(*cache, 1, prompt);
  // Not committed yet: nothing to share.
  EXPECT_EQ(addSeq(*cache, 2, prompt), 0);
  for (int64_t p = 0; p < 10; ++p) writeKv(*cache, 1, p, 100.0f + p);
  ASSERT_OK(cache->commitTokens(1, 10));
  std::vector<int32_t> first = table(*cache, 1);
  EXPECT_TRUE(cache->isBlockIndexed(first[0]));
  EXPECT_TRUE(cache->isBlockIndexed(first[1]));
  EXPECT_FALSE(cache->isBlockIndexed(first[2]));  // partial

  EXPECT_EQ(addSeq(*cache, 3, concat(prompt, {42, 43})), 8);
  std::vector<int32_t> third = table(*cache, 3);
  EXPECT_EQ(third[0], first[0]);
  EXPECT_EQ(third[1], first[1]);
  EXPECT_NE(third[2], first[2]);
  EXPECT_EQ(cache->blockRefCount(first[0]), 2);
  for (int64_t p = 0; p < 8; ++p) EXPECT_EQ(readKv(*cache, 3, p), 100.0f + p);
  int64_t n = 0;
  ASSERT_OK(cache->numCommittedTokens(3, &n));
  EXPECT_EQ(n, 8);

  // The last token is always left to compute: 8 tokens share only one block.
  EXPECT_EQ(addSeq(*cache, 4, tokenRange(0, 8)), 4);
  EXPECT_EQ(addSeq(*cache, 5, tokenRange(0, 9)), 8);
  // A different second block shares the first one only; a different first none.
  EXPECT_EQ(addSeq(*cache, 6, concat(tokenRange(0, 4), tokenRange(50, 5))), 4);
  EXPECT_EQ(addSeq(*cache, 7, concat(tokenRange(1, 4), tokenRange(4, 5))), 0);

  KvCacheStats stats = cache->stats();
  EXPECT_EQ(stats.prefix_hit_tokens, 8 + 4 + 8 + 4);
  EXPECT_EQ(stats.prefix_query_tokens, 10 + 10 + 12 + 8 + 9 + 9 + 9);
  ASSERT_OK(cache->checkInvariants());
}

TEST(KvCacheTest, PrefixSurvivesRemoval) {
  auto cache = makeCache(8);
  const std::vector<int32_t> prompt = tokenRange(0, 9);
  addSeq(*cache, 1, prompt);
  for (int64_t p = 0; p < 9; ++p) writeKv(*cache, 1, p, 7.0f * p);
  ASSERT_OK(cache->commitTokens(1, 9));
  ASSERT_OK(cache->removeSequence(1));
  KvCacheStats stats = cache->stats();
  EXPECT_EQ(stats.cached_blocks, 2);
  EXPECT_EQ(stats.free_blocks, 6);
  EXPECT_EQ(stats.used_blocks, 0);

  EXPECT_EQ(addSeq(*cache, 2, prompt), 8);
  for (int64_t p = 0; p < 8; ++p) EXPECT_EQ(readKv(*cache, 2, p), 7.0f * p);
  stats = cache->stats();
  EXPECT_EQ(stats.cached_blocks, 0);
  EXPECT_EQ(stats.used_blocks, 3);
  ASSERT_OK(cache->checkInvariants());
}

TEST(KvCacheTest, RollbackIntoIndexedBlockThenWriteLeavesIndex) {
  auto cache = makeCache(8);
  addSeq(*cache, 1, tokenRange(0, 8));
  ASSERT_OK(cache->commitTokens(1, 8));
  const int32_t second = table(*cache, 1)[1];
  ASSERT_OK(cache->popTokens(1, 1));
  // Its K/V are untouched until a write: still findable.
  EXPECT_TRUE(cache->isBlockIndexed(second));
  ASSERT_OK(cache->appendTokens(1, std::vector<int32_t>{999}));
  EXPECT_FALSE(cache->isBlockIndexed(second));
  EXPECT_EQ(table(*cache, 1)[1], second);  // the sole owner writes in place
  EXPECT_EQ(addSeq(*cache, 2, tokenRange(0, 9)), 4);
  ASSERT_OK(cache->checkInvariants());
}

TEST(KvCacheTest, RollbackIntoIndexedBlockSharedByPrefixCopies) {
  auto cache = makeCache(8);
  addSeq(*cache, 1, tokenRange(0, 8));
  ASSERT_OK(cache->commitTokens(1, 8));
  ASSERT_OK(cache->popTokens(1, 1));
  // Another sequence finds the rolled-back block and shares it.
  EXPECT_EQ(addSeq(*cache, 2, tokenRange(0, 9)), 8);
  const int32_t second = table(*cache, 1)[1];
  EXPECT_EQ(cache->blockRefCount(second), 2);
  ASSERT_OK(cache->appendTokens(1, std::vector<int32_t>{999}));
  EXPECT_NE(table(*cache, 1)[1], second);
  EXPECT_TRUE(cache->isBlockIndexed(second));
  EXPECT_EQ(cache->stats().copy_on_writes, 1);
  ASSERT_OK(cache->checkInvariants());
}

uint64_t constantHash(uint64_t, std::span<const int32_t>) { return 42; }
uint64_t tokensOnlyHash(uint64_t, std::span<const int32_t> tokens) {
  uint64_t hash = 0;
  for (int32_t token : tokens) hash = hash * 31 + static_cast<uint32_t>(token);
  return hash;
}

TEST(KvCacheTest, HashCollisionsNeverShareWrongBlocks) {
  auto cache = makeCache(16);
  cache->setBlockHashForTesting(constantHash);
  addSeq(*cache, 1, tokenRange(0, 9));
  ASSERT_OK(cache->commitTokens(1, 9));
  // Same hash, different tokens.
  EXPECT_EQ(addSeq(*cache, 2, tokenRange(100, 9)), 0);
  // The second block collided with the first when it was indexed, so it was not: only the
  // first block is shared.
  EXPECT_EQ(addSeq(*cache, 3, tokenRange(0, 9)), 4);
  ASSERT_OK(cache->checkInvariants());
}

TEST(KvCacheTest, ChainedHashCollisionChecksParentIdentity) {
  // A hash that ignores the parent: [Z, Y] collides with [X, Y] at the second block, whose
  // K/V were computed after X and must not be shared after Z.
  auto cache = makeCache(16);
  cache->setBlockHashForTesting(tokensOnlyHash);
  const std::vector<int32_t> x = tokenRange(0, 4), y = tokenRange(10, 4), z = tokenRange(20, 4);
  addSeq(*cache, 1, concat(concat(x, y), {1}));
  ASSERT_OK(cache->commitTokens(1, 9));
  addSeq(*cache, 2, concat(z, {1}));
  ASSERT_OK(cache->commitTokens(2, 5));
  EXPECT_EQ(addSeq(*cache, 3, concat(concat(z, y), {1})), 4);
  EXPECT_EQ(table(*cache, 3)[0], table(*cache, 2)[0]);
  EXPECT_NE(table(*cache, 3)[1], table(*cache, 1)[1]);
  EXPECT_EQ(addSeq(*cache, 4, concat(concat(x, y), {1})), 8);
  ASSERT_OK(cache->checkInvariants());
}

TEST(KvCacheTest, ReindexedParentInvalidatesIndexedChildren) {
  // Block ids get reused: Y, indexed under block p holding X, must not be found under p once
  // p holds other content, even when the hash cannot tell.
  auto cache = makeCache(8);
  cache->setBlockHashForTesting(tokensOnlyHash);
  const std::vector<int32_t> x = tokenRange(0, 4), y = tokenRange(10, 4);
  addSeq(*cache, 1, concat(concat(x, y), {1}));
  ASSERT_OK(cache->commitTokens(1, 9));
  const int32_t block_x = table(*cache, 1)[0], block_y = table(*cache, 1)[1];
  ASSERT_OK(cache->popTokens(1, 6));  // back into X; Y stays cached
  EXPECT_TRUE(cache->isBlockIndexed(block_y));
  std::vector<int32_t> x2 = tokenRange(0, 3);
  x2.push_back(99);
  ASSERT_OK(cache->appendTokens(1, std::vector<int32_t>{99}));  // X becomes X2 in place
  ASSERT_OK(cache->commitTokens(1, 4));
  EXPECT_EQ(table(*cache, 1)[0], block_x);
  EXPECT_TRUE(cache->isBlockIndexed(block_x));
  EXPECT_EQ(addSeq(*cache, 2, concat(concat(x2, y), {1})), 4);
  EXPECT_NE(table(*cache, 2)[1], block_y);
  ASSERT_OK(cache->checkInvariants());
}

// ---- LRU eviction

TEST(KvCacheTest, EvictsLeastRecentlyUsedCachedBlocks) {
  auto cache = makeCache(6);
  // Three sequences of one full block and one token; each indexes its first block.
  const std::vector<int32_t> a = tokenRange(0, 5), b = tokenRange(10, 5), c = tokenRange(20, 5);
  addSeq(*cache, 1, a);
  addSeq(*cache, 2, b);
  addSeq(*cache, 3, c);
  for (int64_t id : {1, 2, 3}) ASSERT_OK(cache->commitTokens(id, 5));
  const int32_t block_a = table(*cache, 1)[0], block_b = table(*cache, 2)[0],
                block_c = table(*cache, 3)[0];
  ASSERT_OK(cache->removeSequence(1));
  ASSERT_OK(cache->removeSequence(3));
  ASSERT_OK(cache->removeSequence(2));
  // LRU: a, c, b. Using a again makes it the most recent: c, b, a.
  EXPECT_EQ(addSeq(*cache, 4, a), 4);
  ASSERT_OK(cache->removeSequence(4));
  KvCacheStats stats = cache->stats();
  EXPECT_EQ(stats.cached_blocks, 3);
  EXPECT_EQ(stats.free_blocks, 3);

  addSeq(*cache, 5, tokenRange(100, 12));  // the 3 free blocks: no eviction
  EXPECT_EQ(cache->stats().evictions, 0);
  ASSERT_OK(cache->appendTokens(5, tokenRange(200, 1)));  // evicts c
  EXPECT_EQ(cache->stats().evictions, 1);
  EXPECT_FALSE(cache->isBlockIndexed(block_c));
  EXPECT_TRUE(cache->isBlockIndexed(block_b));
  EXPECT_TRUE(cache->isBlockIndexed(block_a));
  ASSERT_OK(cache->appendTokens(5, tokenRange(300, 4)));  // evicts b
  EXPECT_FALSE(cache->isBlockIndexed(block_b));
  EXPECT_TRUE(cache->isBlockIndexed(block_a));
  EXPECT_EQ(cache->stats().cached_blocks, 1);
  ASSERT_OK(cache->checkInvariants());
}

TEST(KvCacheTest, RemovalEvictsChainFromTheTail) {
  auto cache = makeCache(4);
  addSeq(*cache, 1, tokenRange(0, 13));
  ASSERT_OK(cache->commitTokens(1, 13));
  const std::vector<int32_t> blocks = table(*cache, 1);
  ASSERT_OK(cache->removeSequence(1));
  EXPECT_EQ(cache->stats().cached_blocks, 3);
  addSeq(*cache, 2, tokenRange(100, 8));  // the free block, then the chain's last block
  EXPECT_FALSE(cache->isBlockIndexed(blocks[2]));
  EXPECT_TRUE(cache->isBlockIndexed(blocks[1]));
  EXPECT_TRUE(cache->isBlockIndexed(blocks[0]));
  ASSERT_OK(cache->removeSequence(2));
  EXPECT_EQ(addSeq(*cache, 3, tokenRange(0, 13)), 8);
  ASSERT_OK(cache->checkInvariants());
}

// ---- Full cache

struct Snapshot {
  std::map<int64_t, std::vector<int32_t>> tables;
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::vector<int32_t> ref_counts;
  std::vector<bool> indexed;
  int64_t free_blocks, used_blocks, cached_blocks, evictions, copies;

  static Snapshot of(const KvCache& cache, const std::vector<int64_t>& ids) {
    Snapshot s;
    for (int64_t id : ids) {
      s.tables[id] = table(cache, id);
      std::span<const int32_t> tokens;
      EXPECT_TRUE(cache.tokens(id, &tokens).ok());
      s.tokens[id].assign(tokens.begin(), tokens.end());
    }
    for (int32_t b = 0; b < cache.spec().num_blocks; ++b) {
      s.ref_counts.push_back(cache.blockRefCount(b));
      s.indexed.push_back(cache.isBlockIndexed(b));
    }
    KvCacheStats stats = cache.stats();
    s.free_blocks = stats.free_blocks;
    s.used_blocks = stats.used_blocks;
    s.cached_blocks = stats.cached_blocks;
    s.evictions = stats.evictions;
    s.copies = stats.copy_on_writes;
    return s;
  }
  bool operator==(const Snapshot&) const = default;
};

TEST(KvCacheTest, FullCacheFailsCleanly) {
  auto cache = makeCache(3);
  addSeq(*cache, 1, tokenRange(0, 9));  // every block
  ASSERT_OK(cache->fork(1, 2));
  const Snapshot before = Snapshot::of(*cache, {1, 2});

  int64_t cached = -1;
  Status status = cache->addSequence(3, tokenRange(50, 2), &cached);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("KV cache full"), std::string::npos);
  EXPECT_NE(status.message().find("sequence 3"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("needs 1 new blocks"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("0 available"), std::string::npos) << status.message();
  EXPECT_FALSE(cache->hasSequence(3));

  // A copy on write needs a block too.
  status = cache->appendTokens(2, tokenRange(60, 1));
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("appendTokens of sequence 2 needs 1 new blocks"),
            std::string::npos)
      << status.message();
  status = cache->appendTokens(1, tokenRange(60, 8));
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("needs 3 new blocks"), std::string::npos) << status.message();
  EXPECT_TRUE(before == Snapshot::of(*cache, {1, 2}));
  ASSERT_OK(cache->checkInvariants());

  // Appending within the partial last block of a sole owner needs nothing.
  ASSERT_OK(cache->removeSequence(2));
  ASSERT_OK(cache->appendTokens(1, tokenRange(60, 3)));
}

TEST(KvCacheTest, FullCacheCountsRevivedPrefixBlocks) {
  auto cache = makeCache(2);
  const std::vector<int32_t> x = tokenRange(0, 4);
  addSeq(*cache, 1, concat(x, {1}));
  ASSERT_OK(cache->commitTokens(1, 5));
  ASSERT_OK(cache->removeSequence(1));  // X cached, one block free
  const Snapshot before = Snapshot::of(*cache, {});
  int64_t cached = -1;
  // Shares X (taking it off the evictable list) and needs two more: one is available.
  Status status = cache->addSequence(2, concat(concat(x, tokenRange(10, 4)), {1}), &cached);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("needs 2 new blocks"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("1 available"), std::string::npos) << status.message();
  EXPECT_TRUE(before == Snapshot::of(*cache, {}));
  EXPECT_EQ(addSeq(*cache, 2, concat(x, {2})), 4);
  ASSERT_OK(cache->checkInvariants());
}

// ---- Randomized against a reference model

// The K value a token's slot holds: a hash of the whole prefix up to it, as K/V depend on
// it; exact in float32 below 2^24.
float prefixValue(const std::vector<int32_t>& tokens, size_t position) {
  uint32_t hash = 2166136261u;
  for (size_t i = 0; i <= position; ++i)
    hash = (hash ^ static_cast<uint32_t>(tokens[i])) * 16777619u;
  return static_cast<float>(hash & 0x7fffff);
}

uint64_t weakHash(uint64_t, std::span<const int32_t> tokens) {
  return static_cast<uint64_t>(tokens[0]) % 3;
}

struct RefSequence {
  std::vector<int32_t> tokens;
  int64_t committed = 0;
};

void runRandomized(uint32_t seed, KvCache::BlockHashFn hash, int iterations) {
  KvCacheSpec spec;
  spec.num_layers = 2;
  spec.num_kv_heads = 1;
  spec.head_dim = 2;
  spec.dtype = DType::kFloat32;
  spec.block_size = 4;
  spec.num_blocks = 40;
  std::unique_ptr<KvCache> cache;
  ASSERT_OK(KvCache::create(spec, &cache));
  if (hash != nullptr) cache->setBlockHashForTesting(hash);

  std::mt19937 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  // A few shared prompt stems over a tiny vocabulary: many prefix hits and equal blocks.
  std::vector<std::vector<int32_t>> stems;
  for (int s = 0; s < 3; ++s) {
    std::vector<int32_t> stem;
    for (int i = 0; i < 24; ++i) stem.push_back(static_cast<int32_t>(uniform(0, 5)));
    stems.push_back(stem);
  }
  auto randomTokens = [&](int64_t count) {
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < count; ++i) tokens.push_back(static_cast<int32_t>(uniform(0, 5)));
    return tokens;
  };

  std::map<int64_t, RefSequence> model;
  int64_t next_id = 0;
  int64_t exhausted = 0;

  auto ids = [&] {
    std::vector<int64_t> out;
    for (const auto& [id, seq] : model) out.push_back(id);
    return out;
  };
  auto pickId = [&]() -> int64_t {
    auto it = model.begin();
    std::advance(it, uniform(0, static_cast<int64_t>(model.size()) - 1));
    return it->first;
  };
  // The generator's step: compute K/V of uncommitted tokens, then commit some or all.
  auto compute = [&](int64_t id) {
    RefSequence& seq = model[id];
    const int64_t total = static_cast<int64_t>(seq.tokens.size());
    const int64_t upto = uniform(0, 3) == 0 ? uniform(seq.committed, total) : total;
    for (int64_t p = seq.committed; p < upto; ++p) {
      writeKv(*cache, id, p, prefixValue(seq.tokens, static_cast<size_t>(p)));
    }
    ASSERT_OK(cache->commitTokens(id, upto));
    seq.committed = upto;
  };
  auto expectUnchangedOnExhaustion = [&](const Status& status, const Snapshot& before) {
    if (status.ok()) return false;
    EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.toString();
    EXPECT_TRUE(before == Snapshot::of(*cache, ids()));
    ++exhausted;
    return true;
  };

  for (int iter = 0; iter < iterations; ++iter) {
    const int64_t op = model.empty() ? 0 : uniform(0, 9);
    const Snapshot before = Snapshot::of(*cache, ids());
    if (op <= 1 && model.size() < 10) {  // add
      std::vector<int32_t> tokens = stems[static_cast<size_t>(uniform(0, 2))];
      tokens.resize(static_cast<size_t>(uniform(0, 24)));
      for (int32_t t : randomTokens(uniform(0, 6))) tokens.push_back(t);
      const int64_t id = next_id++;
      int64_t cached = -1;
      Status status = cache->addSequence(id, tokens, &cached);
      if (!expectUnchangedOnExhaustion(status, before)) {
        ASSERT_OK(status);
        ASSERT_EQ(cached % spec.block_size, 0);
        ASSERT_LE(cached, std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) - 1));
        model[id] = RefSequence{tokens, cached};
      }
    } else if (op <= 3) {  // append
      const int64_t id = pickId();
      std::vector<int32_t> tokens = randomTokens(uniform(1, 6));
      Status status = cache->appendTokens(id, tokens);
      if (!expectUnchangedOnExhaustion(status, before)) {
        ASSERT_OK(status);
        for (int32_t t : tokens) model[id].tokens.push_back(t);
      }
    } else if (op == 4 && model.size() < 10) {  // fork
      const int64_t parent = pickId();
      const int64_t child = next_id++;
      ASSERT_OK(cache->fork(parent, child));
      model[child] = model[parent];
    } else if (op == 5) {  // pop
      const int64_t id = pickId();
      RefSequence& seq = model[id];
      const int64_t count =
          uniform(0, std::min<int64_t>(9, static_cast<int64_t>(seq.tokens.size())));
      ASSERT_OK(cache->popTokens(id, count));
      seq.tokens.resize(seq.tokens.size() - static_cast<size_t>(count));
      seq.committed = std::min<int64_t>(seq.committed, static_cast<int64_t>(seq.tokens.size()));
    } else if (op <= 7) {  // compute and commit
      compute(pickId());
    } else {  // remove
      const int64_t id = pickId();
      ASSERT_OK(cache->removeSequence(id));
      model.erase(id);
    }

    // Check everything against the model.
    const Status invariants = cache->checkInvariants();
    ASSERT_TRUE(invariants.ok()) << "iteration " << iter << ": " << invariants.toString();
    ASSERT_EQ(cache->numSequences(), static_cast<int64_t>(model.size()));
    std::set<int32_t> used;
    std::map<int32_t, int32_t> refs;
    for (const auto& [id, seq] : model) {
      std::span<const int32_t> tokens;
      ASSERT_OK(cache->tokens(id, &tokens));
      ASSERT_EQ(std::vector<int32_t>(tokens.begin(), tokens.end()), seq.tokens);
      int64_t committed = -1;
      ASSERT_OK(cache->numCommittedTokens(id, &committed));
      ASSERT_EQ(committed, seq.committed);
      std::vector<int32_t> blocks = table(*cache, id);
      ASSERT_EQ(static_cast<int64_t>(blocks.size()),
                (static_cast<int64_t>(seq.tokens.size()) + spec.block_size - 1) / spec.block_size);
      for (int32_t block : blocks) {
        used.insert(block);
        ++refs[block];
      }
      for (int64_t p = 0; p < seq.committed; ++p) {
        ASSERT_EQ(readKv(*cache, id, p), prefixValue(seq.tokens, static_cast<size_t>(p)))
            << "iteration " << iter << " sequence " << id << " position " << p;
      }
    }
    for (const auto& [block, count] : refs) ASSERT_EQ(cache->blockRefCount(block), count);
    const KvCacheStats stats = cache->stats();
    ASSERT_EQ(stats.used_blocks, static_cast<int64_t>(used.size()));
    ASSERT_EQ(stats.free_blocks + stats.used_blocks + stats.cached_blocks, spec.num_blocks);
  }
  const KvCacheStats stats = cache->stats();
  // The run exercised what it is meant to.
  EXPECT_GT(stats.prefix_hit_tokens, 0);
  EXPECT_GT(stats.copy_on_writes, 0);
  EXPECT_GT(stats.evictions, 0);
  EXPECT_GT(exhausted, 0);

  // Removing everything leaves no block referenced.
  for (int64_t id : ids()) ASSERT_OK(cache->removeSequence(id));
  EXPECT_EQ(cache->stats().used_blocks, 0);
  EXPECT_EQ(cache->stats().free_blocks + cache->stats().cached_blocks, spec.num_blocks);
  ASSERT_OK(cache->checkInvariants());
}

TEST(KvCacheRandomizedTest, MatchesReferenceModel) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    runRandomized(seed, nullptr, 3000);
  }
}

TEST(KvCacheRandomizedTest, MatchesReferenceModelUnderHashCollisions) {
  for (uint32_t seed : {4u, 5u}) {
    SCOPED_TRACE(seed);
    runRandomized(seed, weakHash, 3000);
  }
}

}  // namespace
}  // namespace llmc
