// The compute layer: one thread runs every step of one BatchGenerator. Requests arrive from the
// access threads through a bounded queue (full: the caller answers 429), join the batch at a
// step boundary, and leave it when they finish or are cancelled; their tokens go back through
// each request's own mailbox, whose `notify` wakes the connection that waits on it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "drift_monitor.h"
#include "llmc/batch_generator.h"
#include "metrics.h"

namespace llmc::serve {

using Clock = std::chrono::steady_clock;

enum class SubmitResult { kQueued, kQueueFull, kShuttingDown };
// Why the access layer cancelled a job (the finish reason the metrics count).
enum class CancelReason { kNone, kClientGone, kStopString };

// One sequence to generate (one choice of one prompt). The access layer fills the inputs,
// the scheduler the rest under `mu`.
struct Job {
  std::vector<int32_t> prompt;
  GenerationOptions options;

  std::mutex mu;
  std::vector<int32_t> tokens;  // every token so far (the access layer keeps its own cursor)
  std::vector<float> logprobs;  // of each token (sampling.h's convention)
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;  // each token's top N
  bool done = false;
  Status status;                    // set with done: ok, kCancelled, or the error that ended it
  GenerationResult result;          // set with done
  std::function<void()> notify;     // called (outside mu) after new tokens and when done
  std::atomic<bool> cancel{false};  // set by the access layer: stop at the next token
  std::atomic<CancelReason> cancel_reason{CancelReason::kNone};

  Clock::time_point arrival = Clock::now();
  Clock::time_point admitted, last_token;
  bool has_token = false;
};

class Scheduler {
 public:
  // `drift` (may be null) gets every finished request's token statistics.
  Scheduler(std::unique_ptr<BatchGenerator> generator, size_t max_queue, Metrics* metrics,
            DriftMonitor* drift);
  ~Scheduler();  // stops the thread; jobs still queued or running end with kCancelled

  // Queues a job (nothing is queued unless kQueued).
  SubmitResult submit(std::shared_ptr<Job> job);
  // Refuses new jobs from now on; the jobs queued or running finish normally until
  // `deadline`, when those left are cancelled.
  void drain(Clock::time_point deadline);
  // True once nothing is queued or running.
  bool idle() const;

 private:
  void loop();
  void finish(Job* job, Status status, GenerationResult* result);
  void admit(std::shared_ptr<Job> job);
  void updateGauges();

  std::unique_ptr<BatchGenerator> generator_;
  size_t max_queue_;
  Metrics* metrics_;
  DriftMonitor* drift_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> incoming_;
  bool stop_ = false;
  bool draining_ = false;
  Clock::time_point deadline_;
  std::atomic<size_t> active_{0};   // queued + running
  std::atomic<size_t> waiting_{0};  // admitted to the generator, not yet running
  std::unordered_map<int64_t, std::shared_ptr<Job>> running_;  // scheduler thread only
  std::unordered_set<int64_t> cancel_sent_;                    // ids passed to cancel()
  int64_t preemptions_seen_ = 0;                               // scheduler thread only
  std::thread thread_;
};

}  // namespace llmc::serve
