// The arguments of every llmc subcommand: one strict integer parser and one strict float
// parser (no option accepts "2.9", "0x10", "nan" or an out-of-range value), and the files
// they name, read by core/file_io.h.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "cli.h"
#include "core/file_io.h"

namespace llmc::cli {

namespace {

std::string formatNumber(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  // The shortest of %g's forms that reads back the same (0.5, not 0.50000000000000000).
  for (int precision = 1; precision < 17; ++precision) {
    char shorter[32];
    std::snprintf(shorter, sizeof(shorter), "%.*g", precision, value);
    if (std::strtod(shorter, nullptr) == value) return shorter;
  }
  return buffer;
}

Status valueError(std::string_view option, const std::string& text, const std::string& expected) {
  return invalidArgument(std::string(option) + " takes " + expected + ", got '" + text + "'");
}

std::string integerRange(int64_t min, int64_t max) {
  return "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

std::string floatRange(double min, double max) {
  if (std::isinf(min) && std::isinf(max)) return "a finite number";
  if (std::isinf(max)) return "a number >= " + formatNumber(min);
  if (std::isinf(min)) return "a number <= " + formatNumber(max);
  return "a number in [" + formatNumber(min) + ", " + formatNumber(max) + "]";
}

}  // namespace

bool parseInteger(std::string_view text, int64_t min, int64_t max, int64_t* out) {
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  if (i == text.size()) return false;
  // Accumulate toward the negative side, which holds every int64_t.
  int64_t value = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c < '0' || c > '9') return false;
    const int digit = c - '0';
    if (value < (std::numeric_limits<int64_t>::min() + digit) / 10) return false;
    value = value * 10 - digit;
  }
  if (!negative) {
    if (value == std::numeric_limits<int64_t>::min()) return false;
    value = -value;
  }
  if (value < min || value > max) return false;
  *out = value;
  return true;
}

Status parseIntOption(std::string_view option, const std::string& text, int64_t min, int64_t max,
                      int64_t* out) {
  if (!parseInteger(text, min, max, out)) return valueError(option, text, integerRange(min, max));
  return okStatus();
}

Status parseFloatOption(std::string_view option, const std::string& text, double min, double max,
                        double* out) {
  // from_chars: no leading spaces, no hexadecimal; it does read "inf" and "nan", refused below.
  std::string_view digits = text;
  if (!digits.empty() && digits[0] == '+') digits.remove_prefix(1);
  double value = 0;
  const char* first = digits.data();
  const char* last = first + digits.size();
  const auto [end, error] = std::from_chars(first, last, value, std::chars_format::general);
  const bool signed_twice = digits.size() < text.size() && !digits.empty() && digits[0] == '-';
  if (digits.empty() || signed_twice || error != std::errc() || end != last ||
      !std::isfinite(value) || value < min || value > max)
    return valueError(option, text, floatRange(min, max));
  *out = value;
  return okStatus();
}

Status intOption(const std::vector<std::string>& args, size_t* i, int64_t min, int64_t max,
                 int64_t* out) {
  const std::string& option = args[*i];
  if (*i + 1 >= args.size())
    return invalidArgument(option + " needs a value (" + integerRange(min, max) + ")");
  return parseIntOption(option, args[++*i], min, max, out);
}

Status floatOption(const std::vector<std::string>& args, size_t* i, double min, double max,
                   double* out) {
  const std::string& option = args[*i];
  if (*i + 1 >= args.size())
    return invalidArgument(option + " needs a value (" + floatRange(min, max) + ")");
  return parseFloatOption(option, args[++*i], min, max, out);
}

Status loadTokenizerFile(const std::string& path, std::unique_ptr<Tokenizer>* out) {
  std::string json;
  LLMC_RETURN_IF_ERROR(readFile(path, "--tokenizer", &json));
  Status status = Tokenizer::fromJson(json, out);
  return status.ok() ? status : status.withContext("--tokenizer " + path);
}

}  // namespace llmc::cli

namespace llmc::cli {

// Exit codes and error lines, shared by every subcommand.

int exitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kOutOfRange:
    case StatusCode::kDataLoss:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kUnimplemented: return kExitBadInput;
    default: return kExitFailure;
  }
}

int reportError(const std::string& command, const Status& status) {
  std::fprintf(stderr, "llmc %s: error: %s\n", command.c_str(), status.message().c_str());
  return exitCodeFor(status);
}

int usageError(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "llmc %s: error: %s (see llmc --help)\n", command.c_str(), message.c_str());
  return kExitBadInput;
}

int usageError(const std::string& command, const Status& status) {
  return usageError(command, status.message());
}

}  // namespace llmc::cli

#ifndef LLMC_HAVE_COMPILER
int llmc::cli::runCompile(const std::vector<std::string>&) {
  return usageError("compile",
                    "this llmc was built without the compiler (-DLLMC_BUILD_COMPILER=OFF)");
}
int llmc::cli::runVerify(const std::vector<std::string>&) {
  return usageError("verify",
                    "this llmc was built without the compiler (-DLLMC_BUILD_COMPILER=OFF)");
}
#endif

#ifndef LLMC_HAVE_SERVE
int llmc::cli::runServe(const std::vector<std::string>&) {
  return usageError("serve", "this llmc was built without the service (-DLLMC_BUILD_SERVE=OFF)");
}
#endif
