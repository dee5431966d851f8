// The file reader behind every user-named file (core/file_io.h): POSIX calls, so that no
// iostream exception (libstdc++ throws from a read of a directory) can escape.
#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>

namespace llmc {

namespace {

// Calls read() until `size` bytes arrived or the file ended; false (errno set) on an error.
bool readFully(int fd, char* data, size_t size, size_t* got) {
  *got = 0;
  while (*got < size) {
    const ssize_t n = ::read(fd, data + *got, size - *got);
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    *got += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string describeFile(std::string_view what, const std::string& path) {
  return what.empty() ? path : std::string(what) + " " + path;
}

Status openFileForReading(const std::string& path, std::string_view what, int* fd,
                          int64_t* size_bytes) {
  const std::string name = describeFile(what, path);
  if (path.empty()) return invalidArgument(std::string(what) + ": the file name is empty");
  const int opened = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (opened < 0) {
    const int error = errno;
    if (error == EISDIR) return invalidArgument(name + ": is a directory, not a file");
    std::string message = name + ": cannot open: " + std::strerror(error);
    return error == ENOENT || error == ENOTDIR ? notFound(std::move(message))
                                               : invalidArgument(std::move(message));
  }
  struct stat st;
  if (::fstat(opened, &st) != 0) {
    const int error = errno;
    ::close(opened);
    return invalidArgument(name + ": cannot open: " + std::strerror(error));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(opened);
    return invalidArgument(name + ": is a directory, not a file");
  }
  *fd = opened;
  *size_bytes = S_ISREG(st.st_mode) ? static_cast<int64_t>(st.st_size) : -1;
  return okStatus();
}

namespace {

// readFile's body, for std::string and std::vector<uint8_t> alike (one copy of the bytes).
template <class Buffer>
Status readFileInto(const std::string& path, std::string_view what, Buffer* bytes, int64_t offset,
                    int64_t length) {
  int fd = -1;
  int64_t size = -1;
  LLMC_RETURN_IF_ERROR(openFileForReading(path, what, &fd, &size));
  const std::string name = describeFile(what, path);
  auto fail = [&](Status status) {
    ::close(fd);
    return status;
  };
  auto badRange = [&](int64_t file_bytes) {
    return fail(outOfRange(name + ": the range [" + std::to_string(offset) + ", +" +
                           std::to_string(length) + ") lies outside the file (" +
                           std::to_string(file_bytes) + " bytes)"));
  };
  if (offset < 0 || length < -1) return badRange(size);
  try {
    if (size >= 0) {
      if (offset > size || (length >= 0 && length > size - offset)) return badRange(size);
      if (length < 0) length = size - offset;
      if (offset > 0 && ::lseek(fd, static_cast<off_t>(offset), SEEK_SET) != offset)
        return fail(dataLoss(name + ": seek failed: " + std::strerror(errno)));
      bytes->resize(static_cast<size_t>(length));
      size_t got = 0;
      if (!readFully(fd, reinterpret_cast<char*>(bytes->data()), bytes->size(), &got))
        return fail(dataLoss(name + ": read failed: " + std::strerror(errno)));
      if (got != bytes->size())
        return fail(dataLoss(name + ": read " + std::to_string(got) + " of " +
                             std::to_string(length) + " bytes: the file shrank while read"));
    } else {
      // A pipe or a device: its size is what it delivers.
      bytes->clear();
      char buffer[1 << 16];
      int64_t position = 0;
      for (;;) {
        size_t got = 0;
        if (!readFully(fd, buffer, sizeof(buffer), &got))
          return fail(dataLoss(name + ": read failed: " + std::strerror(errno)));
        const int64_t begin = std::max<int64_t>(offset - position, 0);
        int64_t end = static_cast<int64_t>(got);
        if (length >= 0) end = std::min<int64_t>(end, offset + length - position);
        if (end > begin) bytes->insert(bytes->end(), buffer + begin, buffer + end);
        position += static_cast<int64_t>(got);
        if (got < sizeof(buffer) || (length >= 0 && position >= offset + length)) break;
      }
      if (offset > position || (length >= 0 && static_cast<int64_t>(bytes->size()) != length))
        return badRange(position);
    }
  } catch (const std::exception&) {  // std::bad_alloc, std::length_error
    return fail(resourceExhausted(name + ": out of memory reading the file"));
  }
  ::close(fd);
  return okStatus();
}

}  // namespace

Status readFile(const std::string& path, std::string_view what, std::string* bytes, int64_t offset,
                int64_t length) {
  return readFileInto(path, what, bytes, offset, length);
}

Status readFile(const std::string& path, std::string_view what, std::vector<uint8_t>* bytes) {
  return readFileInto(path, what, bytes, 0, -1);
}

Status checkDirectory(const std::string& path, std::string_view what) {
  const std::string name = describeFile(what, path);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    std::string message = name + ": cannot open: " + std::strerror(error);
    return error == ENOENT || error == ENOTDIR ? notFound(std::move(message))
                                               : invalidArgument(std::move(message));
  }
  if (!S_ISDIR(st.st_mode)) return invalidArgument(name + ": is not a directory");
  return okStatus();
}

}  // namespace llmc
