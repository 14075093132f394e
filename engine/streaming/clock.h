// Clock: the time source of the scheduler and the streaming sessions, so that batching
// deadlines and latencies can be tested with a fake clock instead of sleeps.
//
// RealClock wraps absl::Now() and std::condition_variable::wait_until. FakeClock only moves when
// a test calls Advance(); threads waiting on it wake when their deadline is reached.
//
// Waiting uses std::mutex / std::condition_variable rather than absl::Mutex: Debian's Abseil
// is not built with ThreadSanitizer, so TSan cannot see absl::Mutex's synchronization and
// reports every access it guards as a race; pthread-based primitives are intercepted.
//
// Thread-safety: every method of both implementations is thread-safe.
#ifndef JASPER_ENGINE_STREAMING_CLOCK_H_
#define JASPER_ENGINE_STREAMING_CLOCK_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace jasper {

class Clock {
 public:
  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;

  // Like cv.wait_until(lock, deadline, done) on this clock's time: blocks until `done()` is
  // true (checked whenever `cv` is notified) or Now() >= deadline. `lock` holds the mutex that
  // guards what `done` reads and that `cv` is used with. Returns done() on return.
  virtual bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                         absl::Time deadline, const std::function<bool()>& done) = 0;

  // A (mutex, condition variable) pair used with WaitUntil must be registered for as long as
  // it may be waited on: a fake clock locks the mutex and notifies the condition variable of
  // every registered pair when it advances. Must not be called with `mu` held. No-ops on the
  // real clock.
  virtual void RegisterWaiter(std::mutex* mu, std::condition_variable* cv) {
    (void)mu;
    (void)cv;
  }
  virtual void UnregisterWaiter(std::mutex* mu, std::condition_variable* cv) {
    (void)mu;
    (void)cv;
  }

  // The process-wide real clock (never destroyed).
  static Clock* Real();
};

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                 absl::Time deadline, const std::function<bool()>& done) override;
};

// A manual clock for tests. Starts at `start` and moves only in Advance().
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24));

  absl::Time Now() const override;
  bool WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                 absl::Time deadline, const std::function<bool()>& done) override;
  void RegisterWaiter(std::mutex* mu, std::condition_variable* cv) override;
  void UnregisterWaiter(std::mutex* mu, std::condition_variable* cv) override;

  // Moves time forward by `d` (negative: no-op) and wakes the registered waiters.
  void Advance(absl::Duration d);

  // Number of threads currently blocked in WaitUntil.
  int waiters() const;
  // Blocks (really) until at least `n` threads are blocked in WaitUntil. Lets a test know that
  // a worker has reached its batching wait before it advances the clock.
  void BlockUntilWaiters(int n) const;

 private:
  std::atomic<int64_t> now_ns_;  // since the Unix epoch
  // Lock order: registry_mu_ -> a registered mutex -> waiters_mu_.
  std::mutex registry_mu_;
  std::multiset<std::pair<std::mutex*, std::condition_variable*>> registered_;  // registry_mu_
  mutable std::mutex waiters_mu_;
  mutable std::condition_variable waiters_cv_;
  int waiters_ = 0;  // guarded by waiters_mu_
};

}  // namespace jasper

#endif  // JASPER_ENGINE_STREAMING_CLOCK_H_
