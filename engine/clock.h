// Clock: the time source of the scheduler and the streaming sessions, so that batching
// deadlines and latencies can be tested with a fake clock instead of sleeps.
//
// RealClock wraps absl::Now() and absl::Mutex::AwaitWithDeadline. FakeClock only moves when a
// test calls Advance(); threads waiting on it wake when a deadline is reached.
//
// Thread-safety: every method of both implementations is thread-safe.
#ifndef JASPER_ENGINE_CLOCK_H_
#define JASPER_ENGINE_CLOCK_H_

#include <atomic>
#include <cstdint>
#include <set>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace jasper {

class Clock {
 public:
  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;

  // Like mu->AwaitWithDeadline(cond, deadline), on this clock's time: blocks until `cond` is
  // true or Now() >= deadline. The caller holds *mu. Returns the value of `cond` on return.
  // `cond` must only read state guarded by *mu.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                 absl::Time deadline) = 0;

  // A mutex passed to AwaitWithDeadline must be registered for as long as it may be waited
  // on (a fake clock wakes the waiters of registered mutexes when it advances). Must not be
  // called with *mu held. No-ops on the real clock.
  virtual void RegisterMutex(absl::Mutex* mu) { (void)mu; }
  virtual void UnregisterMutex(absl::Mutex* mu) { (void)mu; }

  // The process-wide real clock (never destroyed).
  static Clock* Real();
};

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override {
    return mu->AwaitWithDeadline(cond, deadline);
  }
};

// A manual clock for tests. Starts at `start` and moves only in Advance()/SetTime().
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24));

  absl::Time Now() const override;
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override;
  void RegisterMutex(absl::Mutex* mu) override;
  void UnregisterMutex(absl::Mutex* mu) override;

  // Moves time forward by `d` (>= 0) and wakes the threads whose deadline has passed.
  void Advance(absl::Duration d);

  // Number of threads currently blocked in AwaitWithDeadline with a deadline in the future.
  int waiters() const;
  // Blocks (really) until at least `n` threads are blocked in AwaitWithDeadline. Lets a test
  // know that a worker has reached its batching wait before it advances the clock.
  void BlockUntilWaiters(int n) const;

 private:
  std::atomic<int64_t> now_ns_;  // since the Unix epoch
  // Lock order: registry_mu_ -> a registered mutex -> waiters_mu_.
  absl::Mutex registry_mu_;
  std::multiset<absl::Mutex*> registered_ ABSL_GUARDED_BY(registry_mu_);
  mutable absl::Mutex waiters_mu_;
  int waiters_ ABSL_GUARDED_BY(waiters_mu_) = 0;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_CLOCK_H_
