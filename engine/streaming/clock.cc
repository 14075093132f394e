#include "engine/streaming/clock.h"

namespace jasper {

Clock* Clock::Real() {
  static Clock* const clock = new RealClock();
  return clock;
}

bool RealClock::WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                          absl::Time deadline, const std::function<bool()>& done) {
  return cv.wait_until(lock, absl::ToChronoTime(deadline), done);
}

FakeClock::FakeClock(absl::Time start) : now_ns_(absl::ToUnixNanos(start)) {}

absl::Time FakeClock::Now() const {
  return absl::FromUnixNanos(now_ns_.load(std::memory_order_acquire));
}

bool FakeClock::WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                          absl::Time deadline, const std::function<bool()>& done) {
  const int64_t deadline_ns = absl::ToUnixNanos(deadline);
  const auto finished = [&] {
    return done() || now_ns_.load(std::memory_order_acquire) >= deadline_ns;
  };
  if (finished()) return done();
  {
    std::lock_guard<std::mutex> w(waiters_mu_);
    ++waiters_;
  }
  waiters_cv_.notify_all();
  // Advance() moves the time, then locks our mutex (so it cannot slip in between the check
  // above and the wait) and notifies `cv`.
  cv.wait(lock, finished);
  {
    std::lock_guard<std::mutex> w(waiters_mu_);
    --waiters_;
  }
  return done();
}

void FakeClock::RegisterWaiter(std::mutex* mu, std::condition_variable* cv) {
  std::lock_guard<std::mutex> lock(registry_mu_);
  registered_.emplace(mu, cv);
}

void FakeClock::UnregisterWaiter(std::mutex* mu, std::condition_variable* cv) {
  std::lock_guard<std::mutex> lock(registry_mu_);
  auto it = registered_.find({mu, cv});
  if (it != registered_.end()) registered_.erase(it);
}

void FakeClock::Advance(absl::Duration d) {
  if (d < absl::ZeroDuration()) return;
  std::lock_guard<std::mutex> lock(registry_mu_);
  now_ns_.fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_acq_rel);
  for (const auto& [mu, cv] : registered_) {
    { std::lock_guard<std::mutex> waiter_lock(*mu); }
    cv->notify_all();
  }
}

int FakeClock::waiters() const {
  std::lock_guard<std::mutex> lock(waiters_mu_);
  return waiters_;
}

void FakeClock::BlockUntilWaiters(int n) const {
  std::unique_lock<std::mutex> lock(waiters_mu_);
  waiters_cv_.wait(lock, [&] { return waiters_ >= n; });
}

}  // namespace jasper
