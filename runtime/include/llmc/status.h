// llmc::Status: the error value every fallible runtime call returns. No exception
// and no abort crosses the public API; a Status names what failed and where.
#pragma once

#include <string>
#include <utility>

namespace llmc {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,     // bad input from the caller: shapes, names, options
  kNotFound = 2,            // a file, tensor or kernel that does not exist
  kOutOfRange = 3,          // a dimension outside its declared min/max, an index out of bounds
  kUnimplemented = 4,       // a kernel, dtype or feature llmc does not have
  kDataLoss = 5,            // a corrupted or truncated file
  kFailedPrecondition = 6,  // e.g. an engine whose format version this runtime cannot read
  kResourceExhausted = 7,   // out of memory, KV cache full
  kInternal = 8,            // a broken invariant of llmc itself
  kUnavailable = 9,         // a value not known yet (used by shape-only evaluation)
  kCancelled = 10,          // the caller stopped the operation (e.g. a generation callback)
};

const char* statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message"
  std::string toString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status withContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status okStatus() { return Status(); }
Status invalidArgument(std::string message);
Status notFound(std::string message);
Status outOfRange(std::string message);
Status unimplemented(std::string message);
Status dataLoss(std::string message);
Status failedPrecondition(std::string message);
Status resourceExhausted(std::string message);
Status internalError(std::string message);
Status unavailable(std::string message);
Status cancelled(std::string message);

}  // namespace llmc

#define LLMC_STATUS_CONCAT_INNER(a, b) a##b
#define LLMC_STATUS_CONCAT(a, b) LLMC_STATUS_CONCAT_INNER(a, b)

// Evaluates `expr` (a Status) and returns it from the enclosing function if not ok.
#define LLMC_RETURN_IF_ERROR(expr)                                      \
  do {                                                                  \
    ::llmc::Status LLMC_STATUS_CONCAT(llmc_status_, __LINE__) = (expr); \
    if (!LLMC_STATUS_CONCAT(llmc_status_, __LINE__).ok())               \
      return LLMC_STATUS_CONCAT(llmc_status_, __LINE__);                \
  } while (0)
