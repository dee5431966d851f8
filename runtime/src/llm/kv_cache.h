// The paged KV cache: fixed-size blocks of K/V storage, a block table per sequence,
// reference-counted blocks shared through a prefix index, and LRU eviction. See docs/kv-cache.md.
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

#include "llmc/status.h"
#include "llmc/tensor.h"

namespace llmc {

// The shape of the cache. Storage per block is laid out [layer][k|v][kv_head][slot][head_dim]
// (slot < block_size), so one block holds block_size tokens of every layer. The 8-bit formats
// (dtype int8, or uint8 holding FP8 E4M3 codes: llmc has no float8 dtype) follow each layer's
// K (or V) codes with one float32 scale per (kv_head, slot) row: kvScaleOffset() bytes in.
struct KvCacheSpec {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  DType dtype = DType::kFloat16;  // float32, float16, bfloat16, int8, or uint8 (FP8 E4M3 codes)
  int32_t block_size = 16;        // tokens per block
  int64_t num_blocks = 0;

  // Checks every field, including that the whole storage size fits in int64 and size_t.
  Status validate() const;
  // Bytes of one block (all layers, K and V). Meaningful only for a spec whose shape fields
  // are valid.
  int64_t bytesPerBlock() const;
  // Bytes of K (or of V) of one layer of one block: num_kv_heads * block_size * head_dim
  // elements, and for the 8-bit formats their row scales.
  int64_t bytesPerLayerKv() const;
  // The 8-bit formats: where the row scales start in a layer's K (or V), 4-byte aligned.
  int64_t kvScaleOffset() const;
};

// int8, or FP8 E4M3 codes in uint8: stored 8-bit with a scale per row.
inline bool isQuantizedKvDType(DType dtype) { return dtype == DType::kInt8 || dtype == DType::kUInt8; }
// "int8", "fp8" or the dtype's name: how messages and the CLI name a cache's storage.
const char* kvDTypeName(DType dtype);

// Where a token's K/V lives.
struct KvSlot {
  int32_t block = -1;
  int32_t offset = -1;  // slot inside the block, < block_size
};

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

class KvCache {
 public:
  // Hash of a block given its parent's hash and its tokens; replaceable for tests.
  using BlockHashFn = uint64_t (*)(uint64_t parent_hash, std::span<const int32_t> tokens);

  // Allocates the storage (one 64-byte aligned, zero-filled allocation) for `spec`.
  static Status create(const KvCacheSpec& spec, std::unique_ptr<KvCache>* cache);
  // How many blocks of `spec`'s shape fit in `budget_bytes` (spec.num_blocks is ignored);
  // kResourceExhausted when not even one does.
  static Status numBlocksForBudget(const KvCacheSpec& spec, int64_t budget_bytes,
                                   int64_t* num_blocks);

  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvCacheSpec& spec() const { return spec_; }

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

  // ---- Storage. `block` and `layer` must be in range (they come from blockTable()).

  // K (or V) of one layer of one block: [num_kv_heads][block_size][head_dim] elements.
  void* keyData(int32_t block, int32_t layer);
  void* valueData(int32_t block, int32_t layer);
  const void* keyData(int32_t block, int32_t layer) const;
  const void* valueData(int32_t block, int32_t layer) const;
  void* storage() { return storage_; }

  // ---- A mirror of the storage elsewhere (the CUDA backend's device pools) repeats the
  // copies on write the cache makes. Once recording is on, every copy (from, to) is kept until
  // takeBlockCopies() hands them over, in order.
  void recordBlockCopies() { record_copies_ = true; }
  std::vector<std::pair<int32_t, int32_t>> takeBlockCopies() { return std::move(block_copies_); }
  int64_t storageBytes() const { return spec_.bytesPerBlock() * spec_.num_blocks; }

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

  KvCache(const KvCacheSpec& spec, std::byte* storage);

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

  bool record_copies_ = false;
  std::vector<std::pair<int32_t, int32_t>> block_copies_;

  void lruPushBack(int32_t block);
  void lruRemove(int32_t block);

  KvCacheSpec spec_;
  std::byte* storage_ = nullptr;
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
