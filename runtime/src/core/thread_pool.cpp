// ThreadPool (core/thread_pool.h): workers that spin briefly between jobs (a decode step runs
// one parallel region per matrix product, microseconds apart) and then sleep on the job
// counter; and the default thread count from the affinity mask, CPU topology and cgroup quota.
#include "core/thread_pool.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace llmc {

namespace {

// True inside a task: a nested parallelFor runs on its caller.
thread_local bool in_task = false;

// How long a worker spins for the next job before it sleeps on the state word: a decode step
// runs one parallel region per matrix product, tens of microseconds apart.
constexpr auto kSpin = std::chrono::microseconds(100);
constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kJoinedMask = kClosed - 1;

inline void cpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Spins (for kSpin), then sleeps, until done(state) holds; returns that state.
template <typename Done>
uint64_t waitFor(const std::atomic<uint64_t>& state, Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  uint64_t now = state.load(std::memory_order_acquire);
  for (int spins = 0; !done(now); now = state.load(std::memory_order_acquire), ++spins) {
    if ((spins & 63) == 63 && std::chrono::steady_clock::now() > until) {
      state.wait(now, std::memory_order_acquire);
    } else {
      cpuRelax();
    }
  }
  return now;
}

}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(threads < 1 ? 1 : threads) {
  workers_.reserve(static_cast<size_t>(threads_ - 1));
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { workerLoop(); });
}

ThreadPool::~ThreadPool() {
  if (workers_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(busy_);
    stop_.store(true, std::memory_order_relaxed);
    state_.fetch_add(uint64_t{1} << 32, std::memory_order_release);
  }
  state_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::work(int64_t tasks, TaskFn call, void* fn) {
  const bool was_in_task = in_task;
  in_task = true;
  for (int64_t task = next_.fetch_add(1, std::memory_order_relaxed); task < tasks;
       task = next_.fetch_add(1, std::memory_order_relaxed)) {
    try {
      call(fn, task);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
  in_task = was_in_task;
}

void ThreadPool::workerLoop() {
  uint64_t seen = 0;  // the last generation this worker looked at
  for (;;) {
    uint64_t state = waitFor(state_, [&](uint64_t s) { return (s >> 32) != seen; });
    seen = state >> 32;
    if (stop_.load(std::memory_order_relaxed)) return;
    // Join while the job is open; a closed job or a newer one is not this worker's to run.
    bool joined = false;
    while (!joined && !(state & kClosed) && (state >> 32) == seen)
      joined = state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel,
                                            std::memory_order_acquire);
    if (!joined) continue;
    work(tasks_, call_, fn_);
    const uint64_t after = state_.fetch_sub(1, std::memory_order_acq_rel) - 1;
    if ((after & kJoinedMask) == 0 && (after & kClosed)) state_.notify_all();
  }
}

void ThreadPool::run(int64_t tasks, TaskFn call, void* fn) {
  std::unique_lock<std::mutex> lock(busy_, std::try_to_lock);
  if (in_task || workers_.empty() || !lock.owns_lock()) {
    // Nested, single-threaded, or the pool is another thread's right now: run here.
    for (int64_t task = 0; task < tasks; ++task) call(fn, task);
    return;
  }
  // No worker is joined (the last job waited for them), so the fields are the caller's.
  tasks_ = tasks;
  call_ = call;
  fn_ = fn;
  error_ = nullptr;
  next_.store(0, std::memory_order_relaxed);
  const uint64_t generation = (state_.load(std::memory_order_relaxed) >> 32) + 1;
  state_.store(generation << 32, std::memory_order_release);
  state_.notify_all();
  work(tasks, call, fn);
  // Every task is claimed: close the job and wait for the workers that joined it.
  state_.fetch_or(kClosed, std::memory_order_acq_rel);
  waitFor(state_, [](uint64_t s) { return (s & kJoinedMask) == 0; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

namespace {

// The CPUs of the affinity mask, counted once per physical core (SMT siblings share a core:
// same package and core id in sysfs). Where sysfs does not say, every CPU counts.
int affinityCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? static_cast<int>(online) : 1;
  }
  std::set<std::pair<int, int>> cores;
  int cpus = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    ++cpus;
    const std::string topology = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    int package = -1, core = -1;
    std::ifstream(topology + "physical_package_id") >> package;
    std::ifstream(topology + "core_id") >> core;
    cores.emplace(package < 0 || core < 0 ? -1 - cpu : package, core < 0 ? cpu : core);
  }
  return cores.empty() ? std::max(cpus, 1) : static_cast<int>(cores.size());
}

// The CPUs the cgroup's quota allows (quota / period, rounded up), or 0 when unlimited or not
// found. cgroup v2: "0::/path" in /proc/self/cgroup and cpu.max ("max 100000" or "200000
// 100000"); v1: the cpu controller's cpu.cfs_quota_us (-1: none) and cpu.cfs_period_us.
int cgroupCpus() {
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    const size_t first = line.find(':');
    const size_t second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    double quota = -1, period = 0;
    if (controllers.empty()) {
      std::ifstream max("/sys/fs/cgroup" + path + "/cpu.max");
      std::string q;
      if (!(max >> q >> period) || q == "max") continue;
      quota = std::atof(q.c_str());
    } else {
      std::stringstream list(controllers);
      std::string controller;
      bool cpu = false;
      while (std::getline(list, controller, ',')) cpu = cpu || controller == "cpu";
      if (!cpu) continue;
      const std::string dir = "/sys/fs/cgroup/" + controllers + path;
      std::ifstream(dir + "/cpu.cfs_quota_us") >> quota;
      std::ifstream(dir + "/cpu.cfs_period_us") >> period;
    }
    if (quota > 0 && period > 0) return std::max(1, static_cast<int>(std::ceil(quota / period)));
  }
  return 0;
}

}  // namespace

namespace {
std::atomic<int> default_override{0};  // setDefaultThreadCount's count; 0: none
std::atomic<bool> shared_pool_made{false};
}  // namespace

int defaultThreadCount() {
  if (const int chosen = default_override.load(); chosen > 0) return chosen;
  static const int count = [] {
    int threads = affinityCores();
    const int quota = cgroupCpus();
    if (quota > 0) threads = std::min(threads, quota);
    return std::clamp(threads, 1, kMaxThreads);
  }();
  return count;
}

ThreadPool* sharedThreadPool() {
  // Never destroyed: a kernel may still run on it from another static's destructor.
  static ThreadPool* const pool = [] {
    shared_pool_made = true;
    return new ThreadPool(defaultThreadCount());
  }();
  return pool;
}

bool setDefaultThreadCount(int threads) {
  if (threads < 1 || threads > kMaxThreads) return false;
  if (shared_pool_made.load()) return sharedThreadPool()->threads() == threads;
  default_override = threads;
  return true;
}

}  // namespace llmc
