#include "engine/clock.h"

#include <vector>

namespace jasper {

Clock* Clock::Real() {
  static Clock* const clock = new RealClock();
  return clock;
}

FakeClock::FakeClock(absl::Time start) : now_ns_(absl::ToUnixNanos(start)) {}

absl::Time FakeClock::Now() const {
  return absl::FromUnixNanos(now_ns_.load(std::memory_order_acquire));
}

bool FakeClock::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                  absl::Time deadline) {
  const int64_t deadline_ns = absl::ToUnixNanos(deadline);
  struct Wait {
    const absl::Condition* cond;
    const std::atomic<int64_t>* now_ns;
    int64_t deadline_ns;
    bool operator()() const {
      return cond->Eval() || now_ns->load(std::memory_order_acquire) >= deadline_ns;
    }
  };
  const Wait wait{&cond, &now_ns_, deadline_ns};
  if (wait()) return cond.Eval();
  {
    absl::MutexLock lock(&waiters_mu_);
    ++waiters_;
  }
  // Advance() locks and unlocks every registered mutex after moving time, which makes absl
  // re-evaluate this condition.
  mu->Await(absl::Condition(&wait));
  {
    absl::MutexLock lock(&waiters_mu_);
    --waiters_;
  }
  return cond.Eval();
}

void FakeClock::RegisterMutex(absl::Mutex* mu) {
  absl::MutexLock lock(&registry_mu_);
  registered_.insert(mu);
}

void FakeClock::UnregisterMutex(absl::Mutex* mu) {
  absl::MutexLock lock(&registry_mu_);
  auto it = registered_.find(mu);
  if (it != registered_.end()) registered_.erase(it);
}

void FakeClock::Advance(absl::Duration d) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  absl::MutexLock lock(&registry_mu_);
  now_ns_.fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_acq_rel);
  for (absl::Mutex* mu : registered_) {
    mu->Lock();
    mu->Unlock();  // re-evaluates the conditions of the threads waiting on *mu
  }
}

int FakeClock::waiters() const {
  absl::MutexLock lock(&waiters_mu_);
  return waiters_;
}

void FakeClock::BlockUntilWaiters(int n) const {
  absl::MutexLock lock(&waiters_mu_);
  const auto enough = [this, n]()
                          ABSL_EXCLUSIVE_LOCKS_REQUIRED(waiters_mu_) { return waiters_ >= n; };
  waiters_mu_.Await(absl::Condition(&enough));
}

}  // namespace jasper
