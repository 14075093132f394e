// ThreadSanitizer view of Debian's Abseil synchronization (linked only into TSan builds of the
// tests that use absl::Mutex, i.e. server_test; see tests/CMakeLists.txt).
//
// Debian's libabsl_synchronization is not built with -fsanitize=thread, so TSan cannot see
// absl::Mutex, absl::CondVar or absl::Notification order anything and reports every access they
// guard as a race. Instead of an instrumented rebuild of Abseil, this file interposes the
// library's out-of-line entry points (the executable's definitions win over the shared
// library's) and forwards each to the real one (dlsym(RTLD_NEXT)), wrapped in the same
// __tsan_mutex_* annotations Abseil itself emits when compiled with TSan: lock/unlock with
// read-lock and try-lock flags; Await/LockWhen/CondVar waits as "released, then re-acquired"
// with the library's internal condition evaluation inside an ignored region (as Abseil's own
// annotations do); Notification as release (Notify) / acquire (the waits and HasBeenNotified's
// atomic). Nothing here changes behaviour: every call still runs the real implementation.
//
// Thread-safety: stateless apart from lazily resolved function pointers (benign races on
// identical values, through atomics).
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

void* Real(const char* mangled) {
  void* fn = dlsym(RTLD_NEXT, mangled);
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found\n", mangled);
    std::abort();
  }
  return fn;
}

template <typename Fn>
Fn Resolve(std::atomic<void*>* slot, const char* mangled) {
  void* fn = slot->load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = Real(mangled);
    slot->store(fn, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(fn);
}

// Every caller is annotated, gRPC's own locking included (as an instrumented Abseil would
// be), but only at the outermost level: a wrapper reached from inside another wrapper's real
// call (Abseil calling itself, e.g. CondVar::WaitWithTimeout -> WaitWithDeadline) stays silent.
thread_local int wrapper_depth = 0;
struct DepthGuard {
  DepthGuard() { ++wrapper_depth; }
  ~DepthGuard() { --wrapper_depth; }
};

#define JASPER_REAL(type, mangled)           \
  static std::atomic<void*> slot{nullptr};   \
  auto real = Resolve<type>(&slot, mangled); \
  const bool annotate = wrapper_depth == 0;  \
  DepthGuard depth_guard

constexpr unsigned kRead = __tsan_mutex_read_lock;
constexpr unsigned kTry = __tsan_mutex_try_lock;
constexpr unsigned kTryFailed = __tsan_mutex_try_lock_failed;

// A wait that releases `mu` and re-acquires it before returning (Await, CondVar::Wait): TSan
// sees an unlock now and a lock at the end; the library's own condition checks run ignored.
void BeginWait(void* mu, unsigned flags) {
  __tsan_mutex_pre_unlock(mu, flags);
  __tsan_mutex_post_unlock(mu, flags);
  __tsan_mutex_pre_lock(mu, flags);
}
void EndWait(void* mu, unsigned flags) { __tsan_mutex_post_lock(mu, flags, 0); }

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  JASPER_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  if (annotate) __tsan_mutex_pre_lock(this, 0);
  real(this);
  if (annotate) __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::Unlock() {
  JASPER_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  if (annotate) __tsan_mutex_pre_unlock(this, 0);
  real(this);
  if (annotate) __tsan_mutex_post_unlock(this, 0);
}

bool Mutex::TryLock() {
  JASPER_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  if (annotate) __tsan_mutex_pre_lock(this, kTry);
  const bool ok = real(this);
  if (annotate) __tsan_mutex_post_lock(this, kTry | (ok ? 0 : kTryFailed), 0);
  return ok;
}

void Mutex::ReaderLock() {
  JASPER_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  if (annotate) __tsan_mutex_pre_lock(this, kRead);
  real(this);
  if (annotate) __tsan_mutex_post_lock(this, kRead, 0);
}

void Mutex::ReaderUnlock() {
  JASPER_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  if (annotate) __tsan_mutex_pre_unlock(this, kRead);
  real(this);
  if (annotate) __tsan_mutex_post_unlock(this, kRead);
}

bool Mutex::ReaderTryLock() {
  JASPER_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  if (annotate) __tsan_mutex_pre_lock(this, kRead | kTry);
  const bool ok = real(this);
  if (annotate) __tsan_mutex_post_lock(this, kRead | kTry | (ok ? 0 : kTryFailed), 0);
  return ok;
}

void Mutex::LockWhen(const Condition& cond) {
  JASPER_REAL(void (*)(Mutex*, const Condition&),
              "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  if (annotate) __tsan_mutex_pre_lock(this, 0);
  real(this, cond);
  if (annotate) __tsan_mutex_post_lock(this, 0, 0);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  JASPER_REAL(bool (*)(Mutex*, const Condition&, Duration),
              "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  if (annotate) __tsan_mutex_pre_lock(this, 0);
  const bool r = real(this, cond, timeout);
  if (annotate) __tsan_mutex_post_lock(this, 0, 0);
  return r;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  JASPER_REAL(bool (*)(Mutex*, const Condition&, Time),
              "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  if (annotate) __tsan_mutex_pre_lock(this, 0);
  const bool r = real(this, cond, deadline);
  if (annotate) __tsan_mutex_post_lock(this, 0, 0);
  return r;
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  JASPER_REAL(void (*)(Mutex*, const Condition&),
              "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  if (annotate) __tsan_mutex_pre_lock(this, kRead);
  real(this, cond);
  if (annotate) __tsan_mutex_post_lock(this, kRead, 0);
}

void Mutex::Await(const Condition& cond) {
  JASPER_REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  if (annotate) BeginWait(this, 0);
  real(this, cond);
  if (annotate) EndWait(this, 0);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  JASPER_REAL(bool (*)(Mutex*, const Condition&, Duration),
              "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  if (annotate) BeginWait(this, 0);
  const bool r = real(this, cond, timeout);
  if (annotate) EndWait(this, 0);
  return r;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  JASPER_REAL(bool (*)(Mutex*, const Condition&, Time),
              "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  if (annotate) BeginWait(this, 0);
  const bool r = real(this, cond, deadline);
  if (annotate) EndWait(this, 0);
  return r;
}

void CondVar::Wait(Mutex* mu) {
  JASPER_REAL(void (*)(CondVar*, Mutex*), "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  if (annotate) BeginWait(mu, 0);
  real(this, mu);
  if (annotate) EndWait(mu, 0);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  JASPER_REAL(bool (*)(CondVar*, Mutex*, Duration),
              "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  if (annotate) BeginWait(mu, 0);
  const bool r = real(this, mu, timeout);
  if (annotate) EndWait(mu, 0);
  return r;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  JASPER_REAL(bool (*)(CondVar*, Mutex*, Time),
              "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  if (annotate) BeginWait(mu, 0);
  const bool r = real(this, mu, deadline);
  if (annotate) EndWait(mu, 0);
  return r;
}

// The notified flag sits right after the Mutex (notification.h); HasBeenNotified() reads it
// with an (instrumented, inline) acquire load, so the release is recorded on it too.
void Notification::Notify() {
  JASPER_REAL(void (*)(Notification*), "_ZN4absl7debian312Notification6NotifyEv");
  if (annotate) __tsan_release(this);
  if (annotate) __tsan_release(reinterpret_cast<char*>(this) + sizeof(Mutex));
  real(this);
}

void Notification::WaitForNotification() const {
  JASPER_REAL(void (*)(const Notification*),
              "_ZNK4absl7debian312Notification19WaitForNotificationEv");
  real(this);
  if (annotate) __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  JASPER_REAL(bool (*)(const Notification*, Duration),
              "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool r = real(this, timeout);
  if (annotate && r) __tsan_acquire(const_cast<Notification*>(this));
  return r;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  JASPER_REAL(bool (*)(const Notification*, Time),
              "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool r = real(this, deadline);
  if (annotate && r) __tsan_acquire(const_cast<Notification*>(this));
  return r;
}

ABSL_NAMESPACE_END
}  // namespace absl
