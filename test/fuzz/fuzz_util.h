// Helpers shared by the fuzz targets: a failed property that stops the fuzzer with a message,
// and a private scratch directory for targets whose parser reads files by name.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace llmc::fuzz {

// A property of the parser does not hold: say which, then stop (libFuzzer saves the input).
[[noreturn]] inline void fail(std::string_view what) {
  std::fprintf(stderr, "fuzz: property failed: %.*s\n", static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  __builtin_trap();
}

// A directory of this process's own under $TMPDIR (or /tmp), removed at exit: targets write
// the fuzz input there as a file and hand its path to the reader under test.
inline const std::string& scratchDirectory() {
  // Never destroyed: the exit handler that removes the directory runs after static destructors.
  static const std::string* directory = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto* path = new std::string(std::string(tmp && *tmp ? tmp : "/tmp") + "/llmc-fuzz-XXXXXX");
    if (!mkdtemp(path->data())) fail("cannot create a scratch directory");
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratchDirectory(), ignored);
    });
    return path;
  }();
  return *directory;
}

// Writes `bytes` to `path` (replacing it); a failure is the harness's, so it stops the run.
inline void writeScratchFile(const std::string& path, const void* bytes, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot write a scratch file");
  const char* data = static_cast<const char*>(bytes);
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written <= 0) fail("cannot write a scratch file");
    data += written;
    size -= static_cast<size_t>(written);
  }
  ::close(fd);
}

}  // namespace llmc::fuzz
