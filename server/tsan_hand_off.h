// Happens-before annotations for ThreadSanitizer where a hand-off goes through code TSan cannot
// see: Debian's gRPC core is not built with -fsanitize=thread.
//
// With a server interceptor registered (server/call_interceptor.cc), gRPC deserializes a
// received message and runs the interceptors on one thread, then completes the read through an
// extra batch in gRPC core, whose callback (the reactor's OnReadDone) may run on another
// thread. That ordering is real but invisible to TSan, which would report the reactor's first
// read of the message as a race with the parser's writes. The interceptor publishes the message
// (TsanPublish) once it has been parsed; the reaction consumes it (TsanConsume) before reading.
// Likewise the interceptor's own state: its hooks run on gRPC's threads, and gRPC destroys it
// (on yet another) after the last hook has returned: each interceptor publishes itself at
// construction and after every hook, and consumes itself first in every hook and in its
// destructor. And the server's own state: gRPC runs calls on threads it may have created for an
// earlier server, so JasperServer::Start publishes the interceptor factory (and with it all it
// built) before starting gRPC, CreateServerInterceptor consumes it, and ~CallInterceptor
// publishes back to JasperServer::Shutdown on the metrics object.
//
// The key of a hand-off must be known without reading the shared object: `this`, or an address
// the consumer computes. Reading a member to use as the key (say, the factory's metrics pointer)
// is itself an unordered read, and TSan reports it (CI, session 6).
//
// Both are no-ops outside TSan builds. Thread-safety: callable from any thread.
#ifndef JASPER_SERVER_TSAN_HAND_OFF_H_
#define JASPER_SERVER_TSAN_HAND_OFF_H_

#if defined(__SANITIZE_THREAD__)
#define JASPER_TSAN_HAND_OFF 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define JASPER_TSAN_HAND_OFF 1
#endif
#endif

#ifdef JASPER_TSAN_HAND_OFF
#include <sanitizer/tsan_interface.h>
#endif

namespace jasper::server {

// Everything this thread wrote before the call happens-before a later TsanConsume(`object`).
inline void TsanPublish([[maybe_unused]] const void* object) {
#ifdef JASPER_TSAN_HAND_OFF
  __tsan_release(const_cast<void*>(object));
#endif
}

// Orders this thread after every earlier TsanPublish(`object`).
inline void TsanConsume([[maybe_unused]] const void* object) {
#ifdef JASPER_TSAN_HAND_OFF
  __tsan_acquire(const_cast<void*>(object));
#endif
}

}  // namespace jasper::server

#endif  // JASPER_SERVER_TSAN_HAND_OFF_H_
