// The backend registry (core/backend.h): filled once by registerBuiltinBackends(), then read.
#include "core/backend.h"

#include <deque>
#include <mutex>

namespace llmc {

namespace {

std::mutex& registryMutex() {
  static std::mutex mutex;
  return mutex;
}

// A deque: registering never moves an entry that a session points to.
std::deque<BackendInfo>& registry() {
  static std::deque<BackendInfo> backends;
  return backends;
}

void ensureBuiltins() {
  static std::once_flag once;
  std::call_once(once, registerBuiltinBackends);
}

bool targetMatches(const std::string& pattern, const std::string& target) {
  if (!pattern.empty() && pattern.back() == '-')
    return target.size() > pattern.size() && target.compare(0, pattern.size(), pattern) == 0;
  return target == pattern;
}

}  // namespace

void registerBackend(const BackendInfo& info) {
  std::lock_guard<std::mutex> lock(registryMutex());
  for (BackendInfo& known : registry())
    if (known.kind == info.kind) {
      known = info;
      return;
    }
  registry().push_back(info);
}

const BackendInfo* findBackend(Backend kind) {
  ensureBuiltins();
  std::lock_guard<std::mutex> lock(registryMutex());
  for (const BackendInfo& info : registry())
    if (info.kind == kind) return &info;
  return nullptr;
}

const BackendInfo* backendForTarget(const std::string& target) {
  ensureBuiltins();
  std::lock_guard<std::mutex> lock(registryMutex());
  for (const BackendInfo& info : registry())
    if (targetMatches(info.target, target)) return &info;
  return nullptr;
}

}  // namespace llmc
