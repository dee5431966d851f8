// The threads a CPU session's kernels run on (one pool per Session; docs/cpu.md).
//
// A kernel splits its work into tasks, each of which writes its own part of the outputs with
// the same arithmetic whatever thread runs it, so results are bit-identical for every thread
// count: parallelFor decides only which thread runs a task, never how a value is summed.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace llmc {

class ThreadPool {
 public:
  // `threads` counts the calling thread: a pool of 1 starts no thread and runs every task on
  // the caller. Values below 1 are taken as 1.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }

  // Calls fn(task) once for each task in [0, tasks) on the pool's threads and the caller, and
  // returns when every call has returned. Tasks are claimed one at a time in order, so a slow
  // thread (a busy VM neighbour) holds back only the task it runs. Called from inside a task,
  // or while another thread has the pool, the tasks run one after another on the caller. The
  // first exception a task throws is rethrown here after every task has finished.
  template <typename Fn>
  void parallelFor(int64_t tasks, Fn&& fn) {
    if (tasks <= 0) return;
    auto call = [](void* f, int64_t task) {
      (*static_cast<std::remove_reference_t<Fn>*>(f))(task);
    };
    run(tasks, call, static_cast<void*>(&fn));
  }

 private:
  using TaskFn = void (*)(void*, int64_t);
  void run(int64_t tasks, TaskFn call, void* fn);
  void work(int64_t tasks, TaskFn call, void* fn);
  void workerLoop();

  const int threads_;
  std::vector<std::thread> workers_;
  std::mutex busy_;  // held by the thread whose job the workers run
  // The job: written by the caller while no worker has joined, read by the workers that join.
  int64_t tasks_ = 0;
  TaskFn call_ = nullptr;
  void* fn_ = nullptr;
  std::atomic<int64_t> next_{0};  // the next unclaimed task
  // generation << 32 | kClosed | the workers that joined the job and have not finished. A
  // worker joins only while the job is open; the caller closes it when every task is claimed
  // and then waits for the joined ones alone, so a worker that the OS has not scheduled (a
  // busy machine) never holds up a job it did not take part in.
  std::atomic<uint64_t> state_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// parallelFor on `pool`, or on the caller alone when there is none (a plain call from a
// test).
template <typename Fn>
void parallelFor(ThreadPool* pool, int64_t tasks, Fn&& fn) {
  if (pool && pool->threads() > 1 && tasks > 1) {
    pool->parallelFor(tasks, std::forward<Fn>(fn));
    return;
  }
  for (int64_t task = 0; task < tasks; ++task) fn(task);
}

// The number of threads a session uses by default: the physical cores among the CPUs this
// process may run on (its affinity mask; SMT siblings count once), capped by the cgroup's CPU
// quota (cgroup v2 cpu.max or v1 cpu.cfs_quota_us, rounded up) when one is set. At least 1.
int defaultThreadCount();

// defaultThreadCount() threads for the kernels run outside a session (evaluateKernel: the
// compiler's constant folding and weight quantization, `llmc refit`), made on first use and
// kept for the process.
ThreadPool* sharedThreadPool();

// Makes defaultThreadCount() return `threads` (1..kMaxThreads) from now on, for the shared pool
// and every session that asks for the default: `--threads N` of `llmc compile` and `llmc
// verify`, whose calibration, quantization and engines all run in the process. Only before
// the shared pool is first made (it is never resized): false after, unless it has that size.
bool setDefaultThreadCount(int threads);

// The upper bound on SessionOptions::threads.
constexpr int kMaxThreads = 256;

}  // namespace llmc
