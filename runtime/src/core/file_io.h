// The one way llmc reads a file named by a user (models, engines, tokenizers, tensors,
// calibration and weights files): a Status that names the argument and the path, never an
// exception or an abort, whatever the path is (missing, a directory, unreadable).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "llmc/status.h"

namespace llmc {

// "<what> <path>" (just "<path>" when `what` is empty): how file errors name their file.
// `what` is the option or argument the path came from ("--tokenizer", "model", "engine").
std::string describeFile(std::string_view what, const std::string& path);

// Opens `path` for reading and returns its descriptor in *fd and its size in *size_bytes (-1
// when it is not a regular file, e.g. a pipe). NOT_FOUND when it does not exist,
// INVALID_ARGUMENT when it is a directory or cannot be opened (permissions). The caller closes
// the descriptor.
Status openFileForReading(const std::string& path, std::string_view what, int* fd,
                          int64_t* size_bytes);

// Reads `path` into *bytes: the whole file, or `length` bytes from `offset` (length -1: to the
// end). Errors as openFileForReading's, DATA_LOSS for a failed read and OUT_OF_RANGE for a range
// outside the file.
Status readFile(const std::string& path, std::string_view what, std::string* bytes,
                int64_t offset = 0, int64_t length = -1);
Status readFile(const std::string& path, std::string_view what, std::vector<uint8_t>* bytes);

// Checks that `path` is a directory that can be listed (--calib-dir).
Status checkDirectory(const std::string& path, std::string_view what);

}  // namespace llmc
