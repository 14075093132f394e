#include "server/call_interceptor.h"

#include <atomic>
#include <string>

#include "absl/strings/match.h"
#include "google/protobuf/message.h"
#include "grpc/grpc.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/interceptor.h"
#include "server/tsan_hand_off.h"
#include "spdlog/spdlog.h"

namespace jasper::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

class CallInterceptor final : public grpc::experimental::Interceptor {
 public:
  CallInterceptor(grpc::experimental::ServerRpcInfo* info, ServerMetrics* metrics,
                  std::shared_ptr<const ApiKeys> keys)
      : info_(info),
        metrics_(metrics),
        keys_(std::move(keys)),
        method_(info->method() != nullptr ? info->method() : ""),
        active_(metrics->CallStarted(method_)) {
    TsanPublish(this);  // gRPC may run the hooks on another thread: see Intercept
  }

  ~CallInterceptor() override {
    TsanConsume(this);  // hooks ran on gRPC's threads; gRPC destroys this after the last one
    if (!ended_.exchange(true)) metrics_->CallEnded(active_);
    // A call that never sent a status (torn down by the transport) counts as cancelled.
    if (!recorded_.exchange(true)) metrics_->CallFinished(method_, GRPC_STATUS_CANCELLED);
    TsanPublish(metrics_);  // consumed by JasperServer::Shutdown once gRPC has shut down
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    // First, before any member is read: ordered after the constructor and the earlier hooks,
    // which may have run on other threads (and, through them, after JasperServer::Start).
    TsanConsume(this);
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA) &&
        keys_ != nullptr) {
      CheckKey(*methods->GetRecvInitialMetadata());
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      void* message = methods->GetRecvMessage();
      // The handler still runs for a refused call: hand it an empty request, so that no audio
      // of an unauthenticated client reaches the engine. Only the ASR services get here (health
      // and reflection are never refused), and their requests are protobuf messages.
      if (message != nullptr && unauthenticated_.load()) {
        static_cast<google::protobuf::Message*>(message)->Clear();
      }
      TsanPublish(message);  // the reaction that reads it may run on another thread
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        !recorded_.exchange(true)) {
      const int code = unauthenticated_.load()
                           ? GRPC_STATUS_UNAUTHENTICATED
                           : static_cast<int>(methods->GetSendStatus().error_code());
      metrics_->CallFinished(method_, code);
      // The call is over once its status goes out (the client may see it before this object
      // is destroyed).
      if (!ended_.exchange(true)) metrics_->CallEnded(active_);
    }
    TsanPublish(this);
    methods->Proceed();
  }

 private:
  void CheckKey(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
    bool present = false;
    bool valid = false;
    for (const auto& [key, value] : metadata) {
      const absl::string_view k(key.data(), key.size());
      const absl::string_view v(value.data(), value.size());
      if (k == "x-api-key") {
        present = true;
        valid |= keys_->Matches(v);
      } else if (k == "authorization") {
        present = true;
        valid |= keys_->Matches(ApiKeys::KeyFromAuthorization(v));
      }
    }
    if (valid) return;
    unauthenticated_ = true;
    const char* message = present
                              ? "invalid API key"
                              : "missing API key: send metadata 'authorization: Bearer <key>' or "
                                "'x-api-key: <key>'";
    spdlog::debug("{}: {}", method_, message);
    // Ends the call with UNAUTHENTICATED now: the client gets this status and message; the
    // handler still runs but sees a cancelled call and reads nothing.
    grpc_call_cancel_with_status(info_->server_context()->c_call(), GRPC_STATUS_UNAUTHENTICATED,
                                 message, nullptr);
  }

  grpc::experimental::ServerRpcInfo* const info_;
  ServerMetrics* const metrics_;
  const std::shared_ptr<const ApiKeys> keys_;  // null: no authentication
  const std::string method_;
  const ServerMetrics::ActiveCall active_;
  std::atomic<bool> unauthenticated_{false};
  std::atomic<bool> recorded_{false};
  std::atomic<bool> ended_{false};
};

}  // namespace

bool CallInterceptorFactory::IsOpenMethod(absl::string_view full_method) {
  return absl::StartsWith(full_method, "/grpc.health.v1.Health/") ||
         absl::StartsWith(full_method, "/grpc.reflection.v1alpha.ServerReflection/") ||
         absl::StartsWith(full_method, "/grpc.reflection.v1.ServerReflection/");
}

grpc::experimental::Interceptor* CallInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  // Every call enters jasper code here first, then through Intercept(), on threads gRPC may
  // have created for an earlier server. JasperServer::Start publishes this factory (and with it
  // everything it built) before it starts gRPC; consumed here before any member is read, since
  // reading one (even to name it as the hand-off's key) would itself be the racy access
  // (server/tsan_hand_off.h).
  TsanConsume(this);
  const bool check = keys_ != nullptr && info->method() != nullptr && !IsOpenMethod(info->method());
  return new CallInterceptor(info, metrics_, check ? keys_->Current() : nullptr);
}

}  // namespace jasper::server
