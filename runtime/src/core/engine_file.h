// The engine file container: a fixed 64-byte header, the FlatBuffer (EngineDef), then the
// weights section on a 65536-byte boundary. Shared by the compiler's serializer (writer)
// and the runtime's loader (reader); the header alone locates everything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "llmc/status.h"

namespace llmc {

inline constexpr char kEngineMagic[8] = {'L', 'L', 'M', 'C', 'E', 'N', 'G', '\0'};
inline constexpr uint16_t kEngineFormatMajor = 1;
// 1.1: tokenizer_json; 1.2: llm config; 1.3: weight recipes; 1.4: tokenizer and generation
// configs; 1.5: drift baseline
inline constexpr uint16_t kEngineFormatMinor = 5;
inline constexpr uint64_t kWeightsAlignment = 65536;  // a page on every platform
inline constexpr uint64_t kTensorAlignment = 64;

// Little-endian on disk; llmc only targets little-endian hosts.
struct EngineFileHeader {
  char magic[8];
  uint16_t format_major;
  uint16_t format_minor;
  uint32_t header_bytes;  // sizeof(EngineFileHeader)
  uint64_t flatbuffer_offset;
  uint64_t flatbuffer_size;
  uint64_t weights_offset;  // multiple of kWeightsAlignment (or 0 with weights_size 0)
  uint64_t weights_size;
  uint64_t flatbuffer_checksum;  // checksum64() of the FlatBuffer bytes
  uint64_t weights_checksum;     // checksum64() of the weights bytes
};
static_assert(sizeof(EngineFileHeader) == 64, "the engine header is 64 bytes");

// A fast 64-bit checksum for detecting corruption (not a cryptographic hash).
uint64_t checksum64(const void* data, size_t size_bytes);

// Lays out header + FlatBuffer + padding + weights into `file`.
// Writes an engine file through a temporary file and a rename, so that a failure never leaves a
// partial engine at `path` (llmc compile, llmc refit).
Status writeEngineFile(const std::string& path, std::span<const uint8_t> bytes);

void assembleEngineFile(std::span<const uint8_t> flatbuffer, std::span<const uint8_t> weights,
                        std::vector<uint8_t>* file);

// Checks the header against the file size: magic, version rule (same major, older or equal
// minor), section bounds and alignment. `what` names the file in messages.
Status checkEngineHeader(const void* file, size_t file_size, const std::string& what,
                         EngineFileHeader* header);

}  // namespace llmc
