// CallLink: the handle through which engine callbacks, timers and the drain signal reach a
// call object that gRPC may delete at any time. Callbacks hold a shared_ptr<CallLink<T>>; the
// call detaches itself in OnDone before it is deleted, after which every With() is a no-op.
//
// Ownership: does not own the target. Thread-safety: thread-safe. With() runs `fn` under the
// link's lock, so Detach() waits for a running With() to return; `fn` must not block and must
// not call Detach().
#ifndef JASPER_SERVER_CALL_LINK_H_
#define JASPER_SERVER_CALL_LINK_H_

#include "absl/synchronization/mutex.h"

namespace jasper::server {

template <typename T>
class CallLink {
 public:
  explicit CallLink(T* target) : target_(target) {}

  // Calls fn(T*) unless detached.
  template <typename F>
  void With(F&& fn) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (target_ != nullptr) fn(target_);
  }

  void Detach() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    target_ = nullptr;
  }

 private:
  absl::Mutex mu_;
  T* target_ ABSL_GUARDED_BY(mu_);
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_CALL_LINK_H_
