// Engine file container: checksums, assembly and header checks.
#include "core/engine_file.h"

#include <cstdio>
#include <fstream>

#include <cstring>

namespace llmc {

namespace {
constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t mixRound(uint64_t acc, uint64_t lane) {
  acc += lane * kPrime2;
  acc = rotl(acc, 31);
  return acc * kPrime1;
}
}  // namespace

uint64_t checksum64(const void* data, size_t size_bytes) {
  // Four independent lanes so the loop is not one long dependency chain.
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t lanes[4] = {kPrime1 + kPrime2, kPrime2, 0, 0 - kPrime1};
  size_t i = 0;
  for (; i + 32 <= size_bytes; i += 32) {
    for (int l = 0; l < 4; ++l) {
      uint64_t word;
      std::memcpy(&word, p + i + 8 * l, 8);
      lanes[l] = mixRound(lanes[l], word);
    }
  }
  uint64_t h = rotl(lanes[0], 1) + rotl(lanes[1], 7) + rotl(lanes[2], 12) + rotl(lanes[3], 18);
  h += size_bytes;
  for (; i < size_bytes; ++i) h = rotl(h ^ (p[i] * kPrime3), 11) * kPrime1;
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  h ^= h >> 32;
  return h;
}

Status writeEngineFile(const std::string& path, std::span<const uint8_t> bytes) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return invalidArgument(path + ": cannot write the engine file");
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::remove(temporary.c_str());
      return internalError(path + ": write failed (disk full?)");
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return invalidArgument(path + ": cannot create the engine file");
  }
  return okStatus();
}

void assembleEngineFile(std::span<const uint8_t> flatbuffer, std::span<const uint8_t> weights,
                        std::vector<uint8_t>* file) {
  EngineFileHeader header{};
  std::memcpy(header.magic, kEngineMagic, sizeof(kEngineMagic));
  header.format_major = kEngineFormatMajor;
  header.format_minor = kEngineFormatMinor;
  header.header_bytes = sizeof(EngineFileHeader);
  header.flatbuffer_offset = sizeof(EngineFileHeader);
  header.flatbuffer_size = flatbuffer.size();
  uint64_t fb_end = header.flatbuffer_offset + header.flatbuffer_size;
  header.weights_offset =
      weights.empty() ? 0
                      : (fb_end + kWeightsAlignment - 1) / kWeightsAlignment * kWeightsAlignment;
  header.weights_size = weights.size();
  header.flatbuffer_checksum = checksum64(flatbuffer.data(), flatbuffer.size());
  header.weights_checksum = checksum64(weights.data(), weights.size());

  uint64_t total = weights.empty() ? fb_end : header.weights_offset + header.weights_size;
  file->assign(total, 0);
  std::memcpy(file->data(), &header, sizeof(header));
  if (!flatbuffer.empty())
    std::memcpy(file->data() + header.flatbuffer_offset, flatbuffer.data(), flatbuffer.size());
  if (!weights.empty())
    std::memcpy(file->data() + header.weights_offset, weights.data(), weights.size());
}

Status checkEngineHeader(const void* file, size_t file_size, const std::string& what,
                         EngineFileHeader* header) {
  if (file_size < sizeof(EngineFileHeader)) {
    return dataLoss(what + ": file is " + std::to_string(file_size) +
                    " bytes, shorter than the 64-byte engine header (truncated or not an engine)");
  }
  std::memcpy(header, file, sizeof(EngineFileHeader));
  if (std::memcmp(header->magic, kEngineMagic, sizeof(kEngineMagic)) != 0)
    return invalidArgument(what + ": not an llmc engine (bad magic bytes)");
  if (header->format_major != kEngineFormatMajor || header->format_minor > kEngineFormatMinor) {
    return failedPrecondition(
        what + ": engine format " + std::to_string(header->format_major) + "." +
        std::to_string(header->format_minor) + " cannot be read by this runtime (reads " +
        std::to_string(kEngineFormatMajor) + ".0 to " + std::to_string(kEngineFormatMajor) + "." +
        std::to_string(kEngineFormatMinor) + "); recompile the model with a matching llmc");
  }
  if (header->header_bytes != sizeof(EngineFileHeader))
    return dataLoss(what + ": header size field is " + std::to_string(header->header_bytes) +
                    ", expected 64");
  auto inFile = [&](uint64_t offset, uint64_t size) {
    return offset <= file_size && size <= file_size - offset;
  };
  if (header->flatbuffer_offset < sizeof(EngineFileHeader) ||
      !inFile(header->flatbuffer_offset, header->flatbuffer_size) || header->flatbuffer_size == 0) {
    return dataLoss(what + ": plan section [" + std::to_string(header->flatbuffer_offset) + ", +" +
                    std::to_string(header->flatbuffer_size) + ") lies outside the " +
                    std::to_string(file_size) + "-byte file (truncated?)");
  }
  if (header->flatbuffer_offset % 8 != 0)  // the verifier checks alignment relative to this
    return dataLoss(what + ": plan section is not 8-byte aligned");
  if (header->weights_offset > file_size)
    return dataLoss(what + ": weights section starts past the end of the " +
                    std::to_string(file_size) + "-byte file (truncated?)");
  if (header->weights_size != 0) {
    if (header->weights_offset % kWeightsAlignment != 0)
      return dataLoss(what + ": weights section is not 65536-byte aligned");
    if (header->weights_offset < header->flatbuffer_offset + header->flatbuffer_size)
      return dataLoss(what + ": weights section overlaps the plan section");
    if (!inFile(header->weights_offset, header->weights_size)) {
      return dataLoss(what + ": weights section [" + std::to_string(header->weights_offset) +
                      ", +" + std::to_string(header->weights_size) + ") lies outside the " +
                      std::to_string(file_size) + "-byte file (truncated?)");
    }
  }
  return okStatus();
}

}  // namespace llmc
