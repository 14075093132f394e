#include "engine/streaming/serial_executor.h"

#include <utility>

namespace jasper {

SerialExecutor::SerialExecutor() : thread_([this] { Loop(); }) {}

SerialExecutor::~SerialExecutor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();  // runs what was posted before it stops
}

void SerialExecutor::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) {
      queue_.push_back(std::move(fn));
      cv_.notify_one();
      return;
    }
  }
  fn();  // only reachable during destruction
}

void SerialExecutor::Loop() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return !queue_.empty() || stop_; });
      if (queue_.empty()) return;  // stopping with nothing left
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

}  // namespace jasper
