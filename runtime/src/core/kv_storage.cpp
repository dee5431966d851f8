// KvCacheSpec's layout arithmetic and checks, and KvStorage's allocation and block copies
// (core/kv_storage.h).
#include "core/kv_storage.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

namespace llmc {
namespace {

constexpr int32_t kMaxDim = 1 << 16;

Status checkDim(const char* name, int64_t value, int64_t max) {
  if (value < 1 || value > max) {
    return invalidArgument("KvCacheSpec: " + std::string(name) + " is " + std::to_string(value) +
                           ", expected 1.." + std::to_string(max));
  }
  return okStatus();
}

}  // namespace

const char* kvDTypeName(DType dtype) {
  if (dtype == DType::kUInt8) return "fp8";
  return dtypeName(dtype);
}

int64_t KvCacheSpec::kvScaleOffset() const {
  return (int64_t{num_kv_heads} * block_size * head_dim + 3) / 4 * 4;
}

int64_t KvCacheSpec::bytesPerLayerKv() const {
  if (isQuantizedKvDType(dtype)) return kvScaleOffset() + int64_t{num_kv_heads} * block_size * 4;
  return int64_t{num_kv_heads} * block_size * head_dim * static_cast<int64_t>(dtypeSize(dtype));
}

int64_t KvCacheSpec::bytesPerBlock() const { return int64_t{num_layers} * 2 * bytesPerLayerKv(); }

Status KvCacheSpec::validateShape() const {
  LLMC_RETURN_IF_ERROR(checkDim("num_layers", num_layers, kMaxDim));
  LLMC_RETURN_IF_ERROR(checkDim("num_kv_heads", num_kv_heads, kMaxDim));
  LLMC_RETURN_IF_ERROR(checkDim("head_dim", head_dim, kMaxDim));
  LLMC_RETURN_IF_ERROR(checkDim("block_size", block_size, 4096));
  if (dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBFloat16 &&
      !isQuantizedKvDType(dtype)) {
    return invalidArgument("KvCacheSpec: dtype " + std::string(dtypeName(dtype)) +
                           " is not supported, expected float32, float16, bfloat16, int8 or fp8");
  }
  return okStatus();
}

Status KvCacheSpec::validate() const {
  LLMC_RETURN_IF_ERROR(validateShape());
  LLMC_RETURN_IF_ERROR(checkDim("num_blocks", num_blocks, std::numeric_limits<int32_t>::max()));
  // Each of the four shape fields is below 2^16 (block_size 2^12, element 2^2), so one block
  // is below 2^63; the total is what can overflow.
  const int64_t max_bytes = static_cast<int64_t>(
      std::min<uint64_t>(std::numeric_limits<int64_t>::max(), std::numeric_limits<size_t>::max()));
  if (bytesPerBlock() > max_bytes / num_blocks) {
    return invalidArgument("KvCacheSpec: " + std::to_string(num_blocks) + " blocks of " +
                           std::to_string(bytesPerBlock()) + " bytes overflow the address space");
  }
  return okStatus();
}

Status KvStorage::allocate(const KvCacheSpec& spec, StoragePtr* storage) {
  const size_t bytes = static_cast<size_t>(spec.bytesPerBlock() * spec.num_blocks);
  // Whole pages (and so aligned far beyond what the kernels need); zero until written.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (bytes + page - 1) / page * page;
  if (rounded < bytes) return resourceExhausted("KV cache of " + std::to_string(bytes) + " bytes");
  const int populate = spec.prefault ? MAP_POPULATE : 0;
  void* memory =
      mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | populate, -1, 0);
  if (memory == MAP_FAILED) {
    return resourceExhausted("cannot allocate the KV cache: " + std::to_string(spec.num_blocks) +
                             " blocks of " + std::to_string(spec.bytesPerBlock()) + " bytes");
  }
  storage->reset(static_cast<std::byte*>(memory));
  storage->get_deleter().bytes = rounded;
  return okStatus();
}

void KvStorage::FreeBytes::operator()(std::byte* p) const {
  if (p) munmap(p, bytes);
}

KvStorage::~KvStorage() { FreeBytes{storage_bytes_}(storage_); }

void KvStorage::copyBlockStorage(int32_t from, int32_t to) {
  const size_t bytes = static_cast<size_t>(spec_.bytesPerBlock());
  std::memcpy(storage_ + static_cast<size_t>(to) * bytes,
              storage_ + static_cast<size_t>(from) * bytes, bytes);
  if (record_copies_) block_copies_.emplace_back(from, to);
}

}  // namespace llmc
