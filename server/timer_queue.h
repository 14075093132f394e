// TimerQueue: one thread that runs callbacks at deadlines (idle and stream-duration limits of
// the calls). Condition-driven: the thread sleeps until the earliest deadline or a change; no
// polling.
//
// Ownership: owns its thread and the pending callbacks.
// Thread-safety: thread-safe. Callbacks run on the timer thread, one at a time, without the
// queue's lock held; they must not block (they may call Schedule/Cancel).
#ifndef JASPER_SERVER_TIMER_QUEUE_H_
#define JASPER_SERVER_TIMER_QUEUE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace jasper::server {

class TimerQueue {
 public:
  using Id = uint64_t;

  TimerQueue();
  // Stops the thread; pending callbacks are destroyed without running.
  ~TimerQueue();
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  // Runs `fn` at `deadline` (at once if it has passed). Returns an id for Cancel().
  Id Schedule(absl::Time deadline, std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes a pending timer; false when it already ran, is running or never existed.
  bool Cancel(Id id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  std::map<std::pair<absl::Time, Id>, std::function<void()>> timers_ ABSL_GUARDED_BY(mu_);
  std::map<Id, absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);
  Id next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool changed_ ABSL_GUARDED_BY(mu_) = false;  // an earlier timer was added, or stop
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_TIMER_QUEUE_H_
