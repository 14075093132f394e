// TaskPool: a fixed set of threads that run posted tasks, and Strands: queues of tasks that run
// in the order posted, one at a time, on whichever of the pool's threads is free.
//
// The engine has two pools (server/serving_engine.h): the front-end pool, where each session's
// audio work (decoding, resampling, cutting windows, featurizing, submitting them) runs on the
// session's front-end strand, and the delivery pool, where each session's results go to the
// server on the session's delivery strand. Strands take turns: a thread runs one task of a
// strand, then puts the strand at the back of the pool's queue if it has more, so a strand with
// a long backlog (a long offline request) delays another strand's next task by at most one task
// per thread, and one strand whose task is slow holds up only that strand and one thread.
// Each strand has a Priority (engine/streaming/priority.h): a free thread takes a turn of an
// interactive strand before any bulk strand's, so a stream's audio work never queues behind an
// offline request's.
//
// Ownership: the pool owns its threads and the queue of strands that have tasks; a strand owns
// its tasks and is shared (std::shared_ptr) by its user and, while it has tasks, by the pool.
// The pool must outlive every Post() to its strands. Destruction runs every task posted before
// it (and the tasks those post), then joins; a task posted after the threads have been joined
// runs on the posting thread (only during an owner's teardown, when pools post to each other).
// Thread-safety: thread-safe; Post() may be called from any thread, including from a task.
#ifndef JASPER_ENGINE_STREAMING_TASK_POOL_H_
#define JASPER_ENGINE_STREAMING_TASK_POOL_H_

#include <array>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/streaming/priority.h"

namespace jasper {

class TaskPool {
 public:
  class Strand;

  // `threads` is clamped to [1, 256].
  explicit TaskPool(int threads);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // A new, empty strand of this pool.
  std::shared_ptr<Strand> NewStrand(Priority priority = Priority::kInteractive);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  friend class Strand;
  // Queues a strand that has tasks (or runs it here once every thread has exited).
  void Schedule(std::shared_ptr<Strand> strand);
  void Loop();
  // Whether a strand waits in ready_. Requires mu_.
  bool AnyReady() const {
    for (const auto& queue : ready_) {
      if (!queue.empty()) return true;
    }
    return false;
  }

  // std::mutex rather than absl::Mutex: see engine/streaming/clock.h (ThreadSanitizer).
  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_: strands with tasks, in turn, one queue per Priority (interactive first).
  std::array<std::deque<std::shared_ptr<Strand>>, kNumPriorities> ready_;
  bool stop_ = false;     // guarded by mu_
  int live_threads_ = 0;  // guarded by mu_; threads not yet exited (0: run posts inline)
  std::vector<std::thread> threads_;
};

class TaskPool::Strand : public std::enable_shared_from_this<Strand> {
 public:
  // Runs `fn` on a pool thread after every task posted to this strand before it, never at the
  // same time as another task of this strand.
  void Post(std::function<void()> fn);

 private:
  friend class TaskPool;
  Strand(TaskPool* pool, Priority priority) : pool_(pool), priority_(priority) {}
  // Runs the oldest task; true when more wait (the caller queues the strand again).
  bool RunOne();

  TaskPool* const pool_;
  const Priority priority_;
  std::mutex mu_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool scheduled_ = false;                   // guarded by mu_: queued in the pool or running a task
};

}  // namespace jasper

#endif  // JASPER_ENGINE_STREAMING_TASK_POOL_H_
