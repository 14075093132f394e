// CallLink: the handle through which engine callbacks, timers and the drain signal reach a
// call object that gRPC may delete at any time. Callbacks hold a shared_ptr<CallLink<T>>; the
// call detaches itself in OnDone before it is deleted, after which every With() is a no-op.
//
// Ownership: does not own the target. Thread-safety: thread-safe. With() runs `fn` without the
// link's lock held (only a count of running callbacks is kept under it), so callbacks of one
// call never wait for each other here (they meet only on the call's own mutex) and a callback
// never holds a lock another call needs; Detach() waits for running With()s to return. `fn`
// must not block and must not call Detach().
#ifndef JASPER_SERVER_CALL_LINK_H_
#define JASPER_SERVER_CALL_LINK_H_

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/streaming/stream_session.h"
#include "server/serving_engine.h"

namespace jasper::server {

template <typename T>
class CallLink {
 public:
  explicit CallLink(T* target) : target_(target) {}

  // Calls fn(T*) unless detached.
  template <typename F>
  void With(F&& fn) ABSL_LOCKS_EXCLUDED(mu_) {
    T* target = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (target_ == nullptr) return;
      target = target_;
      ++running_;
    }
    fn(target);
    absl::MutexLock lock(&mu_);
    --running_;
  }

  // No With() starts a callback after this; returns once the running ones have returned.
  void Detach() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    target_ = nullptr;
    const auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ == 0; };
    mu_.Await(absl::Condition(&idle));
  }

 private:
  absl::Mutex mu_;
  T* target_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;  // callbacks inside With() now
};

// The session callbacks of a call core T (offline or streaming): each reaches T's
// OnSessionResult / OnSpaceAvailable / OnSessionDone through `link`, so a callback that comes
// after the call was deleted does nothing. T declares this function a friend.
template <typename T>
RecognitionSession::Callbacks SessionCallbacks(std::shared_ptr<CallLink<T>> link) {
  RecognitionSession::Callbacks callbacks;
  callbacks.on_result = [link](const SessionResult& r) {
    link->With([&r](T* call) { call->OnSessionResult(r); });
  };
  callbacks.on_space_available = [link] { link->With([](T* call) { call->OnSpaceAvailable(); }); };
  callbacks.on_done = [link](absl::Status s) {
    link->With([&s](T* call) { call->OnSessionDone(std::move(s)); });
  };
  return callbacks;
}

// The state every call core (OfflineCallCore, StreamCallCore) has: the engine, the API's name,
// the link its callbacks go through, the start time, and under one mutex the admission ticket,
// the session and the call's config. The core adds its own protocol state under the same mutex.
// Ownership: borrows the engine; owns the ticket and the session.
template <typename Core>
class CallCoreBase {
 protected:
  using Link = CallLink<Core>;

  CallCoreBase(ServingEngine* engine, const char* api, Core* self)
      : engine_(engine), api_(api), link_(std::make_shared<Link>(self)), started_(absl::Now()) {}
  ~CallCoreBase() = default;

  ServingEngine* const engine_;  // not owned
  const char* const api_;
  const std::shared_ptr<Link> link_;
  const absl::Time started_;

  absl::Mutex mu_;
  std::unique_ptr<CallTicket> ticket_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<RecognitionSession> session_ ABSL_GUARDED_BY(mu_);
  CallConfig config_ ABSL_GUARDED_BY(mu_);
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_CALL_LINK_H_
