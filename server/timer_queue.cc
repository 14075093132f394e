#include "server/timer_queue.h"

namespace jasper::server {

TimerQueue::TimerQueue() : thread_([this] { Loop(); }) {}

TimerQueue::~TimerQueue() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    changed_ = true;
  }
  thread_.join();
}

TimerQueue::Id TimerQueue::Schedule(absl::Time deadline, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  const Id id = next_id_++;
  if (timers_.empty() || deadline < timers_.begin()->first.first) changed_ = true;
  timers_.emplace(std::make_pair(deadline, id), std::move(fn));
  deadlines_.emplace(id, deadline);
  return id;
}

bool TimerQueue::Cancel(Id id) {
  absl::MutexLock lock(&mu_);
  auto it = deadlines_.find(id);
  if (it == deadlines_.end()) return false;
  timers_.erase(std::make_pair(it->second, id));
  deadlines_.erase(it);
  return true;
}

void TimerQueue::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    changed_ = false;
    if (timers_.empty()) {
      mu_.Await(absl::Condition(&changed_));
      continue;
    }
    auto first = timers_.begin();
    if (absl::Now() < first->first.first) {
      mu_.AwaitWithDeadline(absl::Condition(&changed_), first->first.first);
      continue;
    }
    std::function<void()> fn = std::move(first->second);
    deadlines_.erase(first->first.second);
    timers_.erase(first);
    mu_.Unlock();
    fn();
    fn = nullptr;  // destroy captures outside the lock too
    mu_.Lock();
  }
}

}  // namespace jasper::server
