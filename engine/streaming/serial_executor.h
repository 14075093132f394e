// SerialExecutor: one thread that runs posted functions in order, one at a time. Sessions
// deliver their results to the server through it (StreamSession), so that no caller-facing
// method runs user callbacks on the caller's thread and the scheduler only batches.
//
// Ownership: owns its thread and the queued functions. Destruction runs every function posted
// before it, then joins; a function posted during destruction runs on the posting thread
// (which only happens if an owner destroys the executor while others still post: a bug).
// Thread-safety: thread-safe; Post() may be called from any thread, including from a posted
// function.
#ifndef JASPER_ENGINE_STREAMING_SERIAL_EXECUTOR_H_
#define JASPER_ENGINE_STREAMING_SERIAL_EXECUTOR_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace jasper {

class SerialExecutor {
 public:
  SerialExecutor();
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  // Runs `fn` on the executor's thread after the functions posted before it.
  void Post(std::function<void()> fn);

 private:
  void Loop();

  // std::mutex rather than absl::Mutex: see engine/streaming/clock.h (ThreadSanitizer).
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::thread thread_;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_STREAMING_SERIAL_EXECUTOR_H_
