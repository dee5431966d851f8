// The paged KV cache: block allocation, prefix index, copy-on-write and LRU eviction.
#include "llm/kv_cache.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>

namespace llmc {
namespace {

constexpr uint64_t kRootHash = 0x6c6c6d632d6b7600ull;  // the parent hash of a first block

uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

uint64_t defaultBlockHash(uint64_t parent_hash, std::span<const int32_t> tokens) {
  uint64_t hash = mix64(parent_hash ^ 0x9e3779b97f4a7c15ull);
  for (int32_t token : tokens) hash = mix64(hash ^ static_cast<uint32_t>(token));
  return mix64(hash ^ tokens.size());
}

}  // namespace

// ---- Creation

Status KvCache::numBlocksForBudget(const KvCacheSpec& spec, int64_t budget_bytes,
                                   int64_t* num_blocks) {
  LLMC_RETURN_IF_ERROR(spec.validateShape());
  const int64_t block_bytes = spec.bytesPerBlock();
  const int64_t count = budget_bytes < 0 ? 0 : budget_bytes / block_bytes;
  if (count < 1) {
    return resourceExhausted("KV cache budget of " + std::to_string(budget_bytes) +
                             " bytes holds no block of " + std::to_string(block_bytes) + " bytes");
  }
  *num_blocks = std::min<int64_t>(count, std::numeric_limits<int32_t>::max());
  return okStatus();
}

Status KvCache::create(const KvCacheSpec& spec, std::unique_ptr<KvCache>* cache) {
  LLMC_RETURN_IF_ERROR(spec.validate());
  StoragePtr storage;
  LLMC_RETURN_IF_ERROR(allocate(spec, &storage));
  // The constructor allocates the block tables too; whatever fails, the storage is freed once
  // (by `storage` before the KvStorage base takes it, by the base after).
  try {
    cache->reset(new KvCache(spec, storage));
  } catch (const std::bad_alloc&) {
    return resourceExhausted("cannot allocate the KV cache's bookkeeping");
  }
  return okStatus();
}

KvCache::KvCache(const KvCacheSpec& spec, StoragePtr& storage)
    : KvStorage(spec, storage),
      blocks_(static_cast<size_t>(spec.num_blocks)),
      block_tokens_(static_cast<size_t>(spec.num_blocks * spec.block_size), 0),
      hash_fn_(defaultBlockHash) {
  // A stack: the lowest ids come out first, which keeps tables readable in tests.
  free_blocks_.reserve(blocks_.size());
  for (int64_t b = spec.num_blocks - 1; b >= 0; --b)
    free_blocks_.push_back(static_cast<int32_t>(b));
  counters_.num_blocks = spec.num_blocks;
}

// ---- Helpers

int64_t KvCache::numBlocksFor(int64_t num_tokens) const {
  return (num_tokens + spec_.block_size - 1) / spec_.block_size;
}

Status KvCache::findSequence(int64_t id, const char* operation, Sequence** sequence) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) {
    return invalidArgument(std::string("KvCache::") + operation + ": unknown sequence " +
                           std::to_string(id));
  }
  *sequence = &it->second;
  return okStatus();
}

Status KvCache::findSequence(int64_t id, const char* operation, const Sequence** sequence) const {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) {
    return invalidArgument(std::string("KvCache::") + operation + ": unknown sequence " +
                           std::to_string(id));
  }
  *sequence = &it->second;
  return okStatus();
}

int64_t KvCache::numAvailableBlocks() const {
  return static_cast<int64_t>(free_blocks_.size()) + num_cached_;
}

Status KvCache::outOfBlocks(int64_t id, const char* operation, int64_t needed) const {
  return resourceExhausted(
      "KV cache full: " + std::string(operation) + " of sequence " + std::to_string(id) +
      " needs " + std::to_string(needed) + " new blocks of " + std::to_string(spec_.block_size) +
      " tokens, " + std::to_string(numAvailableBlocks()) + " available (" +
      std::to_string(free_blocks_.size()) + " free, " + std::to_string(num_cached_) +
      " cached) of " + std::to_string(spec_.num_blocks));
}

std::span<const int32_t> KvCache::blockTokens(int32_t block) const {
  return std::span<const int32_t>(block_tokens_)
      .subspan(static_cast<size_t>(block) * spec_.block_size,
               static_cast<size_t>(spec_.block_size));
}

// ---- LRU list of cached blocks (unreferenced, still indexed)

void KvCache::lruPushBack(int32_t block) {
  Block& b = blocks_[block];
  b.lru_prev = lru_tail_;
  b.lru_next = -1;
  b.in_lru = true;
  if (lru_tail_ >= 0)
    blocks_[lru_tail_].lru_next = block;
  else
    lru_head_ = block;
  lru_tail_ = block;
  ++num_cached_;
}

void KvCache::lruRemove(int32_t block) {
  Block& b = blocks_[block];
  if (b.lru_prev >= 0)
    blocks_[b.lru_prev].lru_next = b.lru_next;
  else
    lru_head_ = b.lru_next;
  if (b.lru_next >= 0)
    blocks_[b.lru_next].lru_prev = b.lru_prev;
  else
    lru_tail_ = b.lru_prev;
  b.lru_prev = b.lru_next = -1;
  b.in_lru = false;
  --num_cached_;
}

// ---- Block lifetime

int32_t KvCache::allocateBlock() {
  int32_t block;
  if (!free_blocks_.empty()) {
    block = free_blocks_.back();
    free_blocks_.pop_back();
  } else {
    block = lru_head_;
    lruRemove(block);
    unindexBlock(block);
    ++counters_.evictions;
  }
  blocks_[block].ref_count = 1;
  return block;
}

void KvCache::acquireBlock(int32_t block) {
  Block& b = blocks_[block];
  if (b.in_lru) lruRemove(block);
  ++b.ref_count;
}

void KvCache::releaseBlock(int32_t block) {
  Block& b = blocks_[block];
  if (--b.ref_count > 0) return;
  if (b.epoch != 0)
    lruPushBack(block);  // still findable by its prefix
  else
    free_blocks_.push_back(block);
}

void KvCache::copyBlock(int32_t from, int32_t to) {
  // The whole block, unused slots included: simpler than per-head slices, and a copy on
  // write is rare (a fork followed by a write into the shared partial block).
  copyBlockStorage(from, to);
  std::span<const int32_t> tokens = blockTokens(from);
  std::copy(tokens.begin(), tokens.end(),
            block_tokens_.begin() + static_cast<ptrdiff_t>(to) * spec_.block_size);
  ++counters_.copy_on_writes;
}

// ---- Prefix index

bool KvCache::parentLinkValid(const Block& block) const {
  return block.parent < 0 || blocks_[block.parent].epoch == block.parent_epoch;
}

void KvCache::unindexBlock(int32_t block) {
  Block& b = blocks_[block];
  if (b.epoch == 0) return;
  auto it = prefix_index_.find(b.hash);
  if (it != prefix_index_.end() && it->second == block) prefix_index_.erase(it);
  b.epoch = 0;
  b.hash = 0;
  b.parent = -1;
  b.parent_epoch = 0;
  // An unreferenced block only stays around for the index's sake.
  if (b.in_lru) {
    lruRemove(block);
    free_blocks_.push_back(block);
  }
}

void KvCache::indexBlock(Sequence& sequence, size_t block_index) {
  const int32_t block = sequence.block_table[block_index];
  if (blocks_[block].epoch != 0) return;  // already indexed (a prefix hit, or shared)
  int32_t parent = -1;
  uint64_t parent_hash = kRootHash;
  uint64_t parent_epoch = 0;
  if (block_index > 0) {
    parent = sequence.block_table[block_index - 1];
    // A lookup walks the chain from the first block, so a block under an unindexed parent
    // could never be found.
    if (blocks_[parent].epoch == 0) return;
    parent_hash = blocks_[parent].hash;
    parent_epoch = blocks_[parent].epoch;
  }
  const uint64_t hash = hash_fn_(parent_hash, blockTokens(block));
  auto it = prefix_index_.find(hash);
  if (it != prefix_index_.end()) {
    // The same content under another block, or a hash collision: keep the entry there is,
    // unless its parent is gone (then nothing can reach it).
    if (parentLinkValid(blocks_[it->second])) return;
    unindexBlock(it->second);
  }
  Block& b = blocks_[block];
  b.epoch = next_epoch_++;
  b.hash = hash;
  b.parent = parent;
  b.parent_epoch = parent_epoch;
  prefix_index_.emplace(hash, block);
}

int32_t KvCache::lookupBlock(uint64_t hash, int32_t parent, uint64_t parent_epoch,
                             std::span<const int32_t> tokens) const {
  auto it = prefix_index_.find(hash);
  if (it == prefix_index_.end()) return -1;
  const Block& b = blocks_[it->second];
  // The hash only narrows the search; the parent's identity and the tokens decide.
  if (b.parent != parent || b.parent_epoch != parent_epoch) return -1;
  std::span<const int32_t> cached = blockTokens(it->second);
  if (!std::equal(cached.begin(), cached.end(), tokens.begin(), tokens.end())) return -1;
  return it->second;
}

// ---- Sequence operations

Status KvCache::addSequence(int64_t id, std::span<const int32_t> tokens,
                            int64_t* num_cached_tokens) {
  if (sequences_.count(id) != 0) {
    return invalidArgument("KvCache::addSequence: sequence " + std::to_string(id) +
                           " already exists");
  }
  const int64_t num_tokens = static_cast<int64_t>(tokens.size());
  const size_t block_size = static_cast<size_t>(spec_.block_size);

  // The longest chain of indexed full blocks, leaving at least the last token to compute.
  std::vector<int32_t> hits;
  int64_t hits_cached = 0;  // hits that leave the LRU list, and so stop being available
  const int64_t max_hit_blocks = num_tokens > 0 ? (num_tokens - 1) / spec_.block_size : 0;
  int32_t parent = -1;
  uint64_t parent_hash = kRootHash;
  uint64_t parent_epoch = 0;
  for (int64_t i = 0; i < max_hit_blocks; ++i) {
    std::span<const int32_t> block_tokens = tokens.subspan(i * block_size, block_size);
    const int32_t block =
        lookupBlock(hash_fn_(parent_hash, block_tokens), parent, parent_epoch, block_tokens);
    if (block < 0) break;
    hits.push_back(block);
    if (blocks_[block].in_lru) ++hits_cached;
    parent = block;
    parent_hash = blocks_[block].hash;
    parent_epoch = blocks_[block].epoch;
  }

  const int64_t needed = numBlocksFor(num_tokens) - static_cast<int64_t>(hits.size());
  if (needed > numAvailableBlocks() - hits_cached) {
    // Report what the caller could see: availability without the hits it would revive.
    return resourceExhausted("KV cache full: addSequence of sequence " + std::to_string(id) + " (" +
                             std::to_string(num_tokens) + " tokens, " +
                             std::to_string(hits.size()) + " blocks cached) needs " +
                             std::to_string(needed) + " new blocks of " +
                             std::to_string(spec_.block_size) + " tokens, " +
                             std::to_string(numAvailableBlocks() - hits_cached) + " available (" +
                             std::to_string(free_blocks_.size()) + " free, " +
                             std::to_string(num_cached_ - hits_cached) + " cached) of " +
                             std::to_string(spec_.num_blocks));
  }

  // Everything that allocates comes before the first block changes hands, so that running
  // out of memory (std::bad_alloc) leaves the cache as it was.
  Sequence sequence;
  sequence.tokens.assign(tokens.begin(), tokens.end());
  sequence.block_table.reserve(static_cast<size_t>(numBlocksFor(num_tokens)));
  Sequence& stored = sequences_.emplace(id, Sequence()).first->second;
  // Take the hits first so that allocating the rest cannot evict them.
  for (int32_t block : hits) {
    acquireBlock(block);
    sequence.block_table.push_back(block);
  }
  for (int64_t i = 0; i < needed; ++i) sequence.block_table.push_back(allocateBlock());
  for (int64_t p = static_cast<int64_t>(hits.size() * block_size); p < num_tokens; ++p) {
    const int32_t block = sequence.block_table[static_cast<size_t>(p / spec_.block_size)];
    block_tokens_[static_cast<size_t>(block) * block_size + static_cast<size_t>(p) % block_size] =
        tokens[static_cast<size_t>(p)];
  }
  sequence.num_committed = static_cast<int64_t>(hits.size() * block_size);
  counters_.prefix_query_tokens += num_tokens;
  counters_.prefix_hit_tokens += sequence.num_committed;
  *num_cached_tokens = sequence.num_committed;
  stored = std::move(sequence);
  return okStatus();
}

int64_t KvCache::newBlocksForAppend(const Sequence& sequence, int64_t count) const {
  if (count <= 0) return 0;
  const int64_t num_tokens = static_cast<int64_t>(sequence.tokens.size());
  int64_t needed = numBlocksFor(num_tokens + count) - numBlocksFor(num_tokens);
  // A write into a partly used shared last block copies it first.
  if (num_tokens % spec_.block_size != 0 && blocks_[sequence.block_table.back()].ref_count > 1) {
    ++needed;
  }
  return needed;
}

void KvCache::makeLastBlockWritable(Sequence& sequence) {
  const int32_t block = sequence.block_table.back();
  if (blocks_[block].ref_count > 1) {
    const int32_t copy = allocateBlock();
    copyBlock(block, copy);
    releaseBlock(block);  // does not reach 0: another sequence still holds it
    sequence.block_table.back() = copy;
  } else {
    // Sole owner of an indexed block (rolled back into it): the write changes its content,
    // so it leaves the index.
    unindexBlock(block);
  }
}

Status KvCache::appendTokens(int64_t id, std::span<const int32_t> tokens) {
  Sequence* sequence = nullptr;
  LLMC_RETURN_IF_ERROR(findSequence(id, "appendTokens", &sequence));
  const int64_t count = static_cast<int64_t>(tokens.size());
  if (count == 0) return okStatus();
  const int64_t needed = newBlocksForAppend(*sequence, count);
  if (needed > numAvailableBlocks()) return outOfBlocks(id, "appendTokens", needed);

  // Room first: after it nothing below allocates, so std::bad_alloc leaves the cache unchanged.
  sequence->tokens.reserve(sequence->tokens.size() + tokens.size());
  sequence->block_table.reserve(sequence->block_table.size() + static_cast<size_t>(needed));
  const size_t block_size = static_cast<size_t>(spec_.block_size);
  int64_t position = static_cast<int64_t>(sequence->tokens.size());
  if (position % spec_.block_size != 0) makeLastBlockWritable(*sequence);
  for (int32_t token : tokens) {
    if (position % spec_.block_size == 0) sequence->block_table.push_back(allocateBlock());
    const int32_t block = sequence->block_table.back();
    block_tokens_[static_cast<size_t>(block) * block_size +
                  static_cast<size_t>(position) % block_size] = token;
    sequence->tokens.push_back(token);
    ++position;
  }
  return okStatus();
}

Status KvCache::commitTokens(int64_t id, int64_t num_tokens) {
  Sequence* sequence = nullptr;
  LLMC_RETURN_IF_ERROR(findSequence(id, "commitTokens", &sequence));
  const int64_t total = static_cast<int64_t>(sequence->tokens.size());
  if (num_tokens < sequence->num_committed || num_tokens > total) {
    return invalidArgument("KvCache::commitTokens: sequence " + std::to_string(id) + " has " +
                           std::to_string(total) + " tokens, " +
                           std::to_string(sequence->num_committed) + " committed; cannot commit " +
                           std::to_string(num_tokens));
  }
  const int64_t first_block = sequence->num_committed / spec_.block_size;
  const int64_t end_block = num_tokens / spec_.block_size;  // full blocks only
  for (int64_t i = first_block; i < end_block; ++i) indexBlock(*sequence, static_cast<size_t>(i));
  sequence->num_committed = num_tokens;
  return okStatus();
}

Status KvCache::fork(int64_t parent, int64_t child) {
  const Sequence* source = nullptr;
  LLMC_RETURN_IF_ERROR(findSequence(parent, "fork", &source));
  if (sequences_.count(child) != 0) {
    return invalidArgument("KvCache::fork: child sequence " + std::to_string(child) +
                           " already exists");
  }
  // Copied and stored before the blocks are shared: std::bad_alloc leaves the cache unchanged.
  Sequence& copy = sequences_.emplace(child, *source).first->second;
  for (int32_t block : copy.block_table) acquireBlock(block);
  return okStatus();
}

Status KvCache::popTokens(int64_t id, int64_t count) {
  Sequence* sequence = nullptr;
  LLMC_RETURN_IF_ERROR(findSequence(id, "popTokens", &sequence));
  const int64_t total = static_cast<int64_t>(sequence->tokens.size());
  if (count < 0 || count > total) {
    return invalidArgument("KvCache::popTokens: cannot pop " + std::to_string(count) +
                           " tokens from sequence " + std::to_string(id) + " of " +
                           std::to_string(total) + " tokens");
  }
  const int64_t remaining = total - count;
  const size_t keep_blocks = static_cast<size_t>(numBlocksFor(remaining));
  while (sequence->block_table.size() > keep_blocks) {
    releaseBlock(sequence->block_table.back());
    sequence->block_table.pop_back();
  }
  // A block rolled back into stays indexed until a write (makeLastBlockWritable): its K/V
  // are intact until then.
  sequence->tokens.resize(static_cast<size_t>(remaining));
  sequence->num_committed = std::min(sequence->num_committed, remaining);
  return okStatus();
}

Status KvCache::removeSequence(int64_t id) {
  Sequence* sequence = nullptr;
  LLMC_RETURN_IF_ERROR(findSequence(id, "removeSequence", &sequence));
  // Last block first: the LRU list then evicts a chain from its tail, and a parent outlives
  // the children that need it.
  for (auto it = sequence->block_table.rbegin(); it != sequence->block_table.rend(); ++it) {
    releaseBlock(*it);
  }
  sequences_.erase(id);
  return okStatus();
}

// ---- Queries

Status KvCache::numTokens(int64_t id, int64_t* num_tokens) const {
  const Sequence* sequence = nullptr;
  LLMC_RETURN_IF_ERROR(findSequence(id, "numTokens", &sequence));
  *num_tokens = static_cast<int64_t>(sequence->tokens.size());
  return okStatus();
}

Status KvCache::numCommittedTokens(int64_t id, int64_t* num_tokens) const {
  const Sequence* sequence = nullptr;
  LLMC_RETURN_IF_ERROR(findSequence(id, "numCommittedTokens", &sequence));
  *num_tokens = sequence->num_committed;
  return okStatus();
}

Status KvCache::tokens(int64_t id, std::span<const int32_t>* tokens) const {
  const Sequence* sequence = nullptr;
  LLMC_RETURN_IF_ERROR(findSequence(id, "tokens", &sequence));
  *tokens = sequence->tokens;
  return okStatus();
}

Status KvCache::blockTable(int64_t id, std::span<const int32_t>* block_table) const {
  const Sequence* sequence = nullptr;
  LLMC_RETURN_IF_ERROR(findSequence(id, "blockTable", &sequence));
  *block_table = sequence->block_table;
  return okStatus();
}

Status KvCache::slotFor(int64_t id, int64_t position, KvSlot* slot) const {
  const Sequence* sequence = nullptr;
  LLMC_RETURN_IF_ERROR(findSequence(id, "slotFor", &sequence));
  const int64_t total = static_cast<int64_t>(sequence->tokens.size());
  if (position < 0 || position >= total) {
    return outOfRange("KvCache::slotFor: position " + std::to_string(position) +
                      " outside sequence " + std::to_string(id) + " of " + std::to_string(total) +
                      " tokens");
  }
  slot->block = sequence->block_table[static_cast<size_t>(position / spec_.block_size)];
  slot->offset = static_cast<int32_t>(position % spec_.block_size);
  return okStatus();
}

Status KvCache::blocksNeededToAppend(int64_t id, int64_t count, int64_t* num_blocks) const {
  const Sequence* sequence = nullptr;
  LLMC_RETURN_IF_ERROR(findSequence(id, "blocksNeededToAppend", &sequence));
  *num_blocks = newBlocksForAppend(*sequence, count);
  return okStatus();
}

KvCacheStats KvCache::stats() const {
  KvCacheStats stats = counters_;
  stats.free_blocks = static_cast<int64_t>(free_blocks_.size());
  stats.cached_blocks = num_cached_;
  stats.used_blocks = spec_.num_blocks - stats.free_blocks - stats.cached_blocks;
  return stats;
}

// ---- Introspection

int32_t KvCache::blockRefCount(int32_t block) const { return blocks_[block].ref_count; }

bool KvCache::isBlockIndexed(int32_t block) const { return blocks_[block].epoch != 0; }

Status KvCache::checkInvariants() const {
  auto broken = [](const std::string& what) { return internalError("KvCache: " + what); };
  const size_t num_blocks = blocks_.size();
  std::vector<int32_t> refs(num_blocks, 0);
  for (const auto& [id, sequence] : sequences_) {
    const std::string name = "sequence " + std::to_string(id);
    const int64_t total = static_cast<int64_t>(sequence.tokens.size());
    if (static_cast<int64_t>(sequence.block_table.size()) != numBlocksFor(total)) {
      return broken(name + " has " + std::to_string(sequence.block_table.size()) + " blocks for " +
                    std::to_string(total) + " tokens");
    }
    if (sequence.num_committed < 0 || sequence.num_committed > total) {
      return broken(name + " has a bad committed count");
    }
    for (int32_t block : sequence.block_table) ++refs[static_cast<size_t>(block)];
    for (int64_t p = 0; p < total; ++p) {
      const int32_t block = sequence.block_table[static_cast<size_t>(p / spec_.block_size)];
      if (blockTokens(block)[static_cast<size_t>(p % spec_.block_size)] !=
          sequence.tokens[static_cast<size_t>(p)]) {
        return broken(name + ": block " + std::to_string(block) + " disagrees at position " +
                      std::to_string(p));
      }
    }
  }
  std::vector<char> on_free_list(num_blocks, 0);
  for (int32_t block : free_blocks_) {
    if (on_free_list[static_cast<size_t>(block)]++) {
      return broken("block " + std::to_string(block) + " twice on the free list");
    }
  }
  int64_t lru_length = 0;
  for (int32_t block = lru_head_, prev = -1; block >= 0;
       prev = block, block = blocks_[block].lru_next) {
    if (blocks_[block].lru_prev != prev || !blocks_[block].in_lru || ++lru_length > num_cached_) {
      return broken("the LRU list is corrupt at block " + std::to_string(block));
    }
  }
  if (lru_length != num_cached_) return broken("the LRU list length differs from its count");
  for (size_t b = 0; b < num_blocks; ++b) {
    const Block& block = blocks_[b];
    const std::string name = "block " + std::to_string(b);
    if (block.ref_count != refs[b]) {
      return broken(name + " has ref_count " + std::to_string(block.ref_count) + " but " +
                    std::to_string(refs[b]) + " references");
    }
    const bool cached = block.ref_count == 0 && block.epoch != 0;
    if (block.in_lru != cached) return broken(name + " is wrongly (not) in the LRU list");
    if ((block.ref_count == 0 && !cached) != (on_free_list[b] != 0)) {
      return broken(name + " is wrongly (not) on the free list");
    }
    if (block.epoch != 0) {
      auto it = prefix_index_.find(block.hash);
      if (it == prefix_index_.end() || it->second != static_cast<int32_t>(b)) {
        return broken(name + " is indexed but not in the prefix index");
      }
    }
  }
  for (const auto& [hash, block] : prefix_index_) {
    if (blocks_[block].epoch == 0 || blocks_[block].hash != hash) {
      return broken("prefix index entry for block " + std::to_string(block) + " is stale");
    }
  }
  return okStatus();
}

}  // namespace llmc
