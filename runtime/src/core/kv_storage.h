// The KV cache as a backend sees it: the layout of its blocks (KvCacheSpec), where a token's
// K/V goes (KvSlot), and the block storage with the log of copies a mirror elsewhere must
// repeat (KvStorage). Core owns these so that a backend (runtime/src/<backend>) reads and writes
// the cache without naming the language-model layer that manages it (llm/kv_cache.h: KvCache,
// a KvStorage with sequences, a prefix index and eviction).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
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
  // Every page of the storage written once when it is allocated (MAP_POPULATE) instead of when
  // a block is first used: creation costs the whole cache's page faults, and later requests
  // none (GeneratorConfig::kv_cache_prefault).
  bool prefault = false;

  // Checks every field, including that the whole storage size fits in int64 and size_t.
  Status validate() const;
  // Checks the shape fields and the dtype (not num_blocks).
  Status validateShape() const;
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
inline bool isQuantizedKvDType(DType dtype) {
  return dtype == DType::kInt8 || dtype == DType::kUInt8;
}
// "int8", "fp8" or the dtype's name: how messages and the CLI name a cache's storage.
const char* kvDTypeName(DType dtype);

// Where a token's K/V lives.
struct KvSlot {
  int32_t block = -1;
  int32_t offset = -1;  // slot inside the block, < block_size
};

// The block storage: num_blocks blocks of spec.bytesPerBlock() bytes in one page-aligned
// anonymous mapping (zero until written). `block` and `layer` passed here must be in range.
class KvStorage {
 public:
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  const KvCacheSpec& spec() const { return spec_; }
  // K (or V) of one layer of one block: [num_kv_heads][block_size][head_dim] elements.
  void* keyData(int32_t block, int32_t layer) {
    return storage_ + block * spec_.bytesPerBlock() +
           (2 * int64_t{layer}) * spec_.bytesPerLayerKv();
  }
  void* valueData(int32_t block, int32_t layer) {
    return storage_ + block * spec_.bytesPerBlock() +
           (2 * int64_t{layer} + 1) * spec_.bytesPerLayerKv();
  }
  const void* keyData(int32_t block, int32_t layer) const {
    return const_cast<KvStorage*>(this)->keyData(block, layer);
  }
  const void* valueData(int32_t block, int32_t layer) const {
    return const_cast<KvStorage*>(this)->valueData(block, layer);
  }
  void* storage() { return storage_; }
  int64_t storageBytes() const { return spec_.bytesPerBlock() * spec_.num_blocks; }

  // A mirror of the storage elsewhere (a device backend's pools) repeats the copies the owner
  // makes between blocks (copy on write). Once recording is on, every copy (from, to) is kept
  // until takeBlockCopies() hands them over, in order.
  void recordBlockCopies() { record_copies_ = true; }
  std::vector<std::pair<int32_t, int32_t>> takeBlockCopies() { return std::move(block_copies_); }

 protected:
  // The storage is an anonymous mapping: its pages are zero until written and take memory only
  // once touched, so a session sized for a long context costs little until it is used.
  struct FreeBytes {
    size_t bytes = 0;
    void operator()(std::byte* p) const;
  };
  using StoragePtr = std::unique_ptr<std::byte, FreeBytes>;
  // Allocates the storage for a validated spec; kResourceExhausted when it cannot.
  static Status allocate(const KvCacheSpec& spec, StoragePtr* storage);
  // Takes `storage` over (from allocate()). Until then the caller's pointer owns it, so that
  // storage is freed exactly once whether the derived object's allocation or construction
  // fails.
  KvStorage(const KvCacheSpec& spec, StoragePtr& storage)
      : spec_(spec), storage_bytes_(storage.get_deleter().bytes), storage_(storage.release()) {}
  ~KvStorage();
  // Copies block `from` onto block `to` (every layer), logging it when recording.
  void copyBlockStorage(int32_t from, int32_t to);

  KvCacheSpec spec_;
  size_t storage_bytes_ = 0;
  std::byte* storage_ = nullptr;

 private:
  bool record_copies_ = false;
  std::vector<std::pair<int32_t, int32_t>> block_copies_;
};

}  // namespace llmc
