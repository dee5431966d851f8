#include "scheduler.h"

namespace llmc::serve {

namespace {

double secondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Scheduler::Scheduler(std::unique_ptr<BatchGenerator> generator, size_t max_queue, Metrics* metrics,
                     DriftMonitor* drift)
    : generator_(std::move(generator)), max_queue_(max_queue), metrics_(metrics), drift_(drift) {
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

SubmitResult Scheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_ || stop_) return SubmitResult::kShuttingDown;
    if (incoming_.size() + waiting_.load() >= max_queue_) return SubmitResult::kQueueFull;
    incoming_.push_back(std::move(job));
    ++active_;
  }
  cv_.notify_one();
  return SubmitResult::kQueued;
}

void Scheduler::drain(Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
    deadline_ = deadline;
  }
  cv_.notify_all();
}

bool Scheduler::idle() const { return active_.load() == 0; }

void Scheduler::finish(Job* job, Status status, GenerationResult* result) {
  const auto now = Clock::now();
  std::function<void()> notify;
  std::string reason;
  size_t prompt_tokens = job->prompt.size();
  if (drift_ && result) drift_->add(result->entropies, result->model_logprobs);
  {
    std::lock_guard<std::mutex> lock(job->mu);
    job->done = true;
    job->status = status;
    if (result) job->result = std::move(*result);
    notify = job->notify;
    if (status.ok())
      reason = job->result.finish_reason == FinishReason::kLength ? "length" : "stop";
    else if (status.code() == StatusCode::kCancelled)
      reason = job->cancel_reason.load() == CancelReason::kStopString ? "stop" : "cancelled";
    if (result) {
      metrics_->add("vllm:prefix_cache_queries_total", static_cast<double>(prompt_tokens));
      metrics_->add("vllm:prefix_cache_hits_total",
                    static_cast<double>(job->result.prompt_tokens_cached));
    }
  }
  if (!reason.empty()) {
    metrics_->add("vllm:request_success_total", 1, "finished_reason=\"" + reason + "\"");
    metrics_->observe("vllm:e2e_request_latency_seconds", secondsBetween(job->arrival, now));
  }
  --active_;
  if (notify) notify();
}

void Scheduler::admit(std::shared_ptr<Job> job) {
  if (job->cancel.load()) {
    finish(job.get(), Status(StatusCode::kCancelled, "cancelled before it started"), nullptr);
    return;
  }
  Job* raw = job.get();
  SampledTokenCallback on_token = [this, raw](const SampledToken& token) {
    const auto now = Clock::now();
    std::function<void()> notify;
    {
      std::lock_guard<std::mutex> lock(raw->mu);
      if (raw->has_token)
        metrics_->observe("vllm:inter_token_latency_seconds", secondsBetween(raw->last_token, now));
      else
        metrics_->observe("vllm:time_to_first_token_seconds", secondsBetween(raw->arrival, now));
      raw->has_token = true;
      raw->last_token = now;
      raw->tokens.push_back(token.id);
      raw->logprobs.push_back(token.logprob);
      raw->top_logprobs.push_back(token.top_logprobs);
      notify = raw->notify;
    }
    metrics_->add("vllm:generation_tokens_total", 1);
    if (notify) notify();
    return !raw->cancel.load();
  };
  int64_t id = 0;
  Status status = generator_->submit(job->prompt, job->options, on_token, &id);
  if (!status.ok()) {
    finish(raw, status, nullptr);
    return;
  }
  job->admitted = Clock::now();
  metrics_->observe("vllm:request_queue_time_seconds", secondsBetween(job->arrival, job->admitted));
  metrics_->add("vllm:prompt_tokens_total", static_cast<double>(job->prompt.size()));
  running_[id] = std::move(job);
}

void Scheduler::updateGauges() {
  waiting_.store(generator_->numWaiting());
  metrics_->set("vllm:num_requests_running", static_cast<double>(generator_->numRunning()));
  size_t queued = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued = incoming_.size();
  }
  metrics_->set("vllm:num_requests_waiting",
                static_cast<double>(queued + generator_->numWaiting()));
  BatchStats stats = generator_->stats();
  metrics_->set("vllm:kv_cache_usage_perc", stats.kv_blocks
                                                ? static_cast<double>(stats.kv_blocks_used) /
                                                      static_cast<double>(stats.kv_blocks)
                                                : 0.0);
  if (stats.preemptions > preemptions_seen_) {
    metrics_->add("vllm:num_preemptions_total",
                  static_cast<double>(stats.preemptions - preemptions_seen_));
    preemptions_seen_ = stats.preemptions;
  }
}

void Scheduler::loop() {
  for (;;) {
    std::deque<std::shared_ptr<Job>> arrived;
    bool expired = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] { return stop_ || !incoming_.empty() || !generator_->idle(); };
      if (draining_)
        cv_.wait_until(lock, deadline_, ready);
      else
        cv_.wait(lock, ready);
      if (stop_) break;
      arrived.swap(incoming_);
      expired = draining_ && Clock::now() >= deadline_;
    }
    for (auto& job : arrived) admit(std::move(job));
    if (expired) break;
    // Jobs the access layer cancelled leave at this step, even before their first token (a
    // waiting or prefilling sequence gives its blocks back at once).
    for (auto& [id, job] : running_) {
      if (job->cancel.load() && cancel_sent_.insert(id).second) (void)generator_->cancel(id);
    }
    if (!generator_->idle()) {
      std::vector<BatchGenerator::Finished> finished;
      Status status = generator_->step(&finished);
      if (!status.ok()) {
        // A step that failed outside the engine run (which fails only its own requests, in
        // `finished`) would fail again: every job ends with the error and leaves the batch.
        for (auto& [id, job] : running_) {
          (void)generator_->cancel(id);
          finish(job.get(), status, nullptr);
        }
        running_.clear();
      }
      for (auto& f : finished) {
        cancel_sent_.erase(f.request_id);
        auto it = running_.find(f.request_id);
        if (it == running_.end()) continue;  // already ended (a failed step)
        finish(it->second.get(), f.status, &f.result);
        running_.erase(it);
      }
    }
    updateGauges();
  }
  // Stopped, or the drain's deadline passed: whatever has not finished is cancelled.
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(incoming_);
    stop_ = true;
  }
  for (auto& job : left)
    finish(job.get(), Status(StatusCode::kCancelled, "the server is shutting down"), nullptr);
  for (auto& [id, job] : running_) {
    GenerationResult partial;
    {
      std::lock_guard<std::mutex> lock(job->mu);
      partial.tokens = job->tokens;
    }
    finish(job.get(), Status(StatusCode::kCancelled, "the server is shutting down"), &partial);
  }
  running_.clear();
  updateGauges();
}

}  // namespace llmc::serve
