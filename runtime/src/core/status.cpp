// Status codes, names and constructors.
#include "llmc/status.h"

namespace llmc {

const char* statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kCancelled: return "CANCELLED";
  }
  return "UNKNOWN";
}

std::string Status::toString() const {
  if (ok()) return "OK";
  return std::string(statusCodeName(code_)) + ": " + message_;
}

Status Status::withContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

Status invalidArgument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
Status notFound(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status outOfRange(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
Status unimplemented(std::string m) { return Status(StatusCode::kUnimplemented, std::move(m)); }
Status dataLoss(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
Status failedPrecondition(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
Status resourceExhausted(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
Status internalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
Status unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
Status cancelled(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }

}  // namespace llmc
