// Replays a fuzz target's seed corpus, plus a fixed set of mutations of every seed, without
// libFuzzer: the regression test that runs under ctest with any compiler (and under
// ASan/UBSan when the build has -DLLMC_SANITIZE=address,undefined).
//
// Usage: <name>_replay [--no-mutations] [--verbose] PATH...
// Each PATH is a file or a directory (read recursively, in sorted order). Every input is
// copied into a heap buffer of exactly its size, so that a sanitizer sees any over-read.
// When an input crashes, its description is printed and the bytes are written to
// ./replay-crash-input for `<name>_fuzzer replay-crash-input` or a debugger.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);
// Provided by the sanitizer runtimes when one is linked; called before a sanitizer exits.
extern "C" __attribute__((weak)) void __sanitizer_set_death_callback(void (*callback)(void));

namespace {

// Truncations are tried at every length up to this bound, then at a few longer lengths.
constexpr size_t kAllTruncationsUpTo = 256;
constexpr size_t kSampledTruncations = 32;
constexpr int kSingleMutations = 256;   // bit flips, byte overwrites, insertions, deletions
constexpr int kStackedMutations = 128;  // 2 to 8 mutations applied together
constexpr uint64_t kSeed = 0x6c6c6d63'66757a7aull;  // fixed: every run replays the same inputs

// What is running now, for the crash report. Plain arrays: read from a signal handler.
char g_description[512];
const uint8_t* g_input = nullptr;
size_t g_input_size = 0;

void writeAll(int fd, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t written = write(fd, bytes, size);
    if (written <= 0) return;
    bytes += written;
    size -= static_cast<size_t>(written);
  }
}

// Async-signal-safe: only write/open/close.
void reportCurrentInput() {
  static const char kHeader[] = "\n==== fuzz replay: crash on input: ";
  writeAll(2, kHeader, sizeof(kHeader) - 1);
  writeAll(2, g_description, strnlen(g_description, sizeof(g_description)));
  static const char kSaved[] = "\n==== the input is saved as ./replay-crash-input\n";
  int fd = open("replay-crash-input", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    if (g_input_size > 0) writeAll(fd, g_input, g_input_size);
    close(fd);
    writeAll(2, kSaved, sizeof(kSaved) - 1);
  }
}

void onSignal(int signal_number) {
  reportCurrentInput();
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

uint64_t g_executions = 0;

void runOne(const std::vector<uint8_t>& input, const std::string& description, bool verbose) {
  std::snprintf(g_description, sizeof(g_description), "%s", description.c_str());
  if (verbose) std::fprintf(stderr, "%s (%zu bytes)\n", description.c_str(), input.size());
  // An exact-size copy: the vector's capacity could hide an over-read.
  std::unique_ptr<uint8_t[]> exact(new uint8_t[input.size()]);
  if (!input.empty()) std::memcpy(exact.get(), input.data(), input.size());
  g_input = exact.get();
  g_input_size = input.size();
  LLVMFuzzerTestOneInput(exact.get(), input.size());
  g_input = nullptr;
  g_input_size = 0;
  ++g_executions;
}

const uint8_t kInterestingBytes[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, '0', '9', ' ', '\n'};

// Applies one random edit; returns what it did.
std::string mutate(std::vector<uint8_t>& bytes, std::mt19937_64& rng) {
  auto pick = [&](uint64_t bound) { return static_cast<size_t>(rng() % bound); };
  switch (bytes.empty() ? 2 : rng() % 4) {
    case 0: {  // flip one bit
      size_t position = pick(bytes.size());
      int bit = static_cast<int>(rng() % 8);
      bytes[position] ^= static_cast<uint8_t>(1u << bit);
      return "flip bit " + std::to_string(bit) + " of byte " + std::to_string(position);
    }
    case 1: {  // overwrite a byte with an interesting or random value
      size_t position = pick(bytes.size());
      uint8_t value = rng() % 2 ? kInterestingBytes[pick(sizeof(kInterestingBytes))]
                                : static_cast<uint8_t>(rng());
      bytes[position] = value;
      return "set byte " + std::to_string(position) + " to " + std::to_string(value);
    }
    case 2: {  // insert a byte
      size_t position = pick(bytes.size() + 1);
      uint8_t value = kInterestingBytes[pick(sizeof(kInterestingBytes))];
      bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(position), value);
      return "insert " + std::to_string(value) + " at " + std::to_string(position);
    }
    default: {  // delete a byte
      size_t position = pick(bytes.size());
      bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(position));
      return "delete byte " + std::to_string(position);
    }
  }
}

void replaySeed(const std::vector<uint8_t>& seed, const std::string& name, bool mutations,
                bool verbose) {
  runOne(seed, name, verbose);
  if (!mutations) return;
  // Seeded from the content, so a seed's mutations do not depend on which other seeds exist.
  uint64_t hash = kSeed;
  for (uint8_t byte : seed) hash = (hash ^ byte) * 0x100000001b3ull;
  std::mt19937_64 rng(hash);

  size_t all_up_to = std::min(seed.size(), kAllTruncationsUpTo);
  for (size_t length = 0; length < all_up_to; ++length) {
    std::vector<uint8_t> cut(seed.begin(), seed.begin() + static_cast<std::ptrdiff_t>(length));
    runOne(cut, name + ": truncated to " + std::to_string(length) + " bytes", verbose);
  }
  if (seed.size() > kAllTruncationsUpTo) {
    for (size_t i = 0; i < kSampledTruncations; ++i) {
      size_t length =
          kAllTruncationsUpTo + static_cast<size_t>(rng() % (seed.size() - kAllTruncationsUpTo));
      std::vector<uint8_t> cut(seed.begin(), seed.begin() + static_cast<std::ptrdiff_t>(length));
      runOne(cut, name + ": truncated to " + std::to_string(length) + " bytes", verbose);
    }
  }
  for (int i = 0; i < kSingleMutations; ++i) {
    std::vector<uint8_t> mutated = seed;
    std::string what = mutate(mutated, rng);
    runOne(mutated, name + ": " + what, verbose);
  }
  for (int i = 0; i < kStackedMutations; ++i) {
    std::vector<uint8_t> mutated = seed;
    std::string what;
    int count = 2 + static_cast<int>(rng() % 7);
    for (int m = 0; m < count; ++m) what += (m ? ", " : "") + mutate(mutated, rng);
    runOne(mutated, name + ": " + what, verbose);
  }
}

bool readFile(const std::filesystem::path& path, std::vector<uint8_t>* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  bytes->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  bool mutations = true, verbose = false;
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--no-mutations") {
      mutations = false;
    } else if (arg == "--verbose") {
      verbose = true;
    } else if (arg.rfind("-", 0) == 0) {
      std::fprintf(stderr, "usage: %s [--no-mutations] [--verbose] PATH...\n", argv[0]);
      return 2;
    } else if (std::filesystem::is_directory(arg)) {
      std::vector<std::filesystem::path> found;
      for (const auto& entry : std::filesystem::recursive_directory_iterator(arg))
        if (entry.is_regular_file()) found.push_back(entry.path());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (std::filesystem::is_regular_file(arg)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "%s: no such file or directory\n", arg.c_str());
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "%s: no inputs to replay\n", argv[0]);
    return 2;
  }

  // A sanitizer's own report is better than ours: only install signal handlers without one.
  if (__sanitizer_set_death_callback) {
    __sanitizer_set_death_callback(reportCurrentInput);
  } else {
    for (int signal_number : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT})
      std::signal(signal_number, onSignal);
  }

  for (const auto& file : files) {
    std::vector<uint8_t> seed;
    if (!readFile(file, &seed)) {
      std::fprintf(stderr, "%s: cannot read\n", file.c_str());
      return 2;
    }
    replaySeed(seed, file.filename().string(), mutations, verbose);
  }
  std::printf("replayed %llu inputs from %zu seed files\n",
              static_cast<unsigned long long>(g_executions), files.size());
  return 0;
}
