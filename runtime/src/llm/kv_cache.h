// The paged KV cache: fixed-size blocks of K/V storage (core/kv_storage.h, what backends see), a
// block table per sequence, reference-counted blocks shared through a prefix index, and LRU
// eviction. See docs/kv-cache.md.
//
// Not thread-safe: one owner (the scheduler) calls it; kernels read and write K/V through the
// pointers it hands out between calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/kv_storage.h"
#include "llmc/status.h"
#include "llmc/tensor.h"

namespace llmc {

struct KvCacheStats {
  int64_t num_blocks = 0;
  int64_t free_blocks = 0;          // unused and holding nothing worth keeping
  int64_t used_blocks = 0;          // referenced by at least one sequence
  int64_t cached_blocks = 0;        // unreferenced, still in the prefix index, evictable (LRU)
  int64_t prefix_query_tokens = 0;  // tokens passed to addSequence
  int64_t prefix_hit_tokens = 0;    // of those, tokens found cached
  int64_t evictions = 0;            // cached blocks reclaimed for new allocations
  int64_t copy_on_writes = 0;       // blocks copied because a write hit a shared block
};

class KvCache : public KvStorage {
 public:
  // Hash of a block given its parent's hash and its tokens; replaceable for tests.
  using BlockHashFn = uint64_t (*)(uint64_t parent_hash, std::span<const int32_t> tokens);

  // Allocates the storage (one 64-byte aligned, zero-filled allocation) for `spec`.
  static Status create(const KvCacheSpec& spec, std::unique_ptr<KvCache>* cache);
  // How many blocks of `spec`'s shape fit in `budget_bytes` (spec.num_blocks is ignored);
  // kResourceExhausted when not even one does.
  static Status numBlocksForBudget(const KvCacheSpec& spec, int64_t budget_bytes,
                                   int64_t* num_blocks);

  ~KvCache() = default;

  // ---- Sequence operations. Each one either succeeds or leaves the cache exactly as it was.

  // Starts sequence `id` with `tokens`, sharing the longest cached prefix of full blocks.
  // `*num_cached_tokens` (a multiple of block_size, at most tokens.size() - 1 so that the last
  // token is always computed) says how many leading tokens already have their K/V; they count
  // as committed.
  Status addSequence(int64_t id, std::span<const int32_t> tokens, int64_t* num_cached_tokens);
  // Appends tokens whose K/V the caller computes next. A write into a partly used last block
  // that is shared first copies it; one that is only indexed leaves the index.
  Status appendTokens(int64_t id, std::span<const int32_t> tokens);
  // Declares that the K/V of the first `num_tokens` tokens are written. Full committed blocks
  // enter the prefix index. num_tokens may not go below the current committed count.
  Status commitTokens(int64_t id, int64_t num_tokens);
  // Makes `child` a copy of `parent` sharing every block; writes by either copy first.
  Status fork(int64_t parent, int64_t child);
  // Drops the last `count` tokens (speculative decoding's rollback).
  Status popTokens(int64_t id, int64_t count);
  // Drops the sequence. Its full committed blocks stay findable until evicted.
  Status removeSequence(int64_t id);

  // ---- Queries.

  bool hasSequence(int64_t id) const { return sequences_.count(id) != 0; }
  Status numTokens(int64_t id, int64_t* num_tokens) const;
  Status numCommittedTokens(int64_t id, int64_t* num_tokens) const;
  Status tokens(int64_t id, std::span<const int32_t>* tokens) const;
  // Block ids, one per block_size tokens; valid until the next mutating call.
  Status blockTable(int64_t id, std::span<const int32_t>* block_table) const;
  Status slotFor(int64_t id, int64_t position, KvSlot* slot) const;
  // New blocks appendTokens(id, <count tokens>) would allocate (copy-on-write included).
  Status blocksNeededToAppend(int64_t id, int64_t count, int64_t* num_blocks) const;
  // Blocks an allocation may take: free plus evictable.
  int64_t numAvailableBlocks() const;
  KvCacheStats stats() const;
  int64_t numSequences() const { return static_cast<int64_t>(sequences_.size()); }

  // ---- Storage: keyData(), valueData(), storage(), the copy log (KvStorage).

  // ---- Introspection for tests and debugging.

  int32_t blockRefCount(int32_t block) const;
  bool isBlockIndexed(int32_t block) const;  // in the prefix index
  void setBlockHashForTesting(BlockHashFn hash) { hash_fn_ = hash; }
  // Checks every internal invariant (refcounts against block tables, free list, LRU list,
  // prefix index); kInternal naming the first one broken.
  Status checkInvariants() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    // Prefix-index registration; epoch 0 means not indexed. Epochs are unique per
    // registration, so (parent, parent_epoch) names the exact parent content.
    uint64_t epoch = 0;
    uint64_t hash = 0;
    int32_t parent = -1;
    uint64_t parent_epoch = 0;
    // Links in the LRU list of cached (unreferenced, indexed) blocks.
    int32_t lru_prev = -1;
    int32_t lru_next = -1;
    bool in_lru = false;
  };
  struct Sequence {
    std::vector<int32_t> tokens;
    std::vector<int32_t> block_table;
    int64_t num_committed = 0;
  };

  KvCache(const KvCacheSpec& spec, StoragePtr& storage);

  Status findSequence(int64_t id, const char* operation, Sequence** sequence);
  Status findSequence(int64_t id, const char* operation, const Sequence** sequence) const;
  Status outOfBlocks(int64_t id, const char* operation, int64_t needed) const;
  int64_t newBlocksForAppend(const Sequence& sequence, int64_t count) const;
  int64_t numBlocksFor(int64_t num_tokens) const;

  // Takes a free block, else evicts the least recently used cached one. The caller has
  // checked numAvailableBlocks(). The block comes back with ref_count 1.
  int32_t allocateBlock();
  void releaseBlock(int32_t block);
  void acquireBlock(int32_t block);  // ref_count++, leaving the LRU list if it was there
  void copyBlock(int32_t from, int32_t to);
  // Makes the last block of `sequence` writable before a token goes into slot > 0 of it.
  void makeLastBlockWritable(Sequence& sequence);
  void indexBlock(Sequence& sequence, size_t block_index);
  void unindexBlock(int32_t block);
  bool parentLinkValid(const Block& block) const;
  // The indexed block holding `tokens` after the block (parent, parent_epoch), or -1.
  int32_t lookupBlock(uint64_t hash, int32_t parent, uint64_t parent_epoch,
                      std::span<const int32_t> tokens) const;
  std::span<const int32_t> blockTokens(int32_t block) const;

  void lruPushBack(int32_t block);
  void lruRemove(int32_t block);

  std::vector<Block> blocks_;  // [num_blocks]
  // Token ids held by each block's slots, [num_blocks][block_size]; what a prefix hit is
  // verified against.
  std::vector<int32_t> block_tokens_;
  std::vector<int32_t> free_blocks_;  // a stack
  int32_t lru_head_ = -1;             // least recently used; evicted first
  int32_t lru_tail_ = -1;
  int64_t num_cached_ = 0;
  std::unordered_map<uint64_t, int32_t> prefix_index_;  // block hash -> block
  std::unordered_map<int64_t, Sequence> sequences_;
  uint64_t next_epoch_ = 1;
  BlockHashFn hash_fn_;
  KvCacheStats counters_;  // the cumulative fields only
};

}  // namespace llmc
