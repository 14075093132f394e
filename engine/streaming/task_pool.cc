#include "engine/streaming/task_pool.h"

#include <algorithm>
#include <utility>

namespace jasper {

TaskPool::TaskPool(int threads) {
  const int n = std::clamp(threads, 1, 256);
  threads_.reserve(static_cast<size_t>(n));
  live_threads_ = n;
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
}

TaskPool::~TaskPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();  // each runs the queue dry before it exits
}

std::shared_ptr<TaskPool::Strand> TaskPool::NewStrand(Priority priority) {
  return std::shared_ptr<Strand>(new Strand(this, priority));
}

void TaskPool::Schedule(std::shared_ptr<Strand> strand) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (live_threads_ > 0) {
      ready_[static_cast<int>(strand->priority_)].push_back(std::move(strand));
      cv_.notify_one();
      return;
    }
  }
  while (strand->RunOne()) {  // teardown only: no thread is left to run it
  }
}

void TaskPool::Loop() {
  for (;;) {
    std::shared_ptr<Strand> strand;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return AnyReady() || stop_; });
      if (!AnyReady()) {  // stopping with nothing left
        --live_threads_;
        return;
      }
      for (auto& queue : ready_) {  // interactive first
        if (queue.empty()) continue;
        strand = std::move(queue.front());
        queue.pop_front();
        break;
      }
    }
    if (strand->RunOne()) {
      std::lock_guard<std::mutex> lock(mu_);
      // Its next task waits for the turns of the other strands of its priority.
      ready_[static_cast<int>(strand->priority_)].push_back(std::move(strand));
      cv_.notify_one();
    }
  }
}

void TaskPool::Strand::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(fn));
    if (scheduled_) return;
    scheduled_ = true;
  }
  pool_->Schedule(shared_from_this());
}

bool TaskPool::Strand::RunOne() {
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn = std::move(tasks_.front());
    tasks_.pop_front();
  }
  fn();
  std::lock_guard<std::mutex> lock(mu_);
  if (tasks_.empty()) {
    scheduled_ = false;
    return false;
  }
  return true;
}

}  // namespace jasper
