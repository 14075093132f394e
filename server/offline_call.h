// OfflineCall<Adapter>: the one Recognize (unary) reactor behind both APIs. The whole audio
// arrives in the request; it is pushed into a session in pieces as the session has room (from
// on_space_available, so nothing waits; a push only copies the piece: decoding and featurizing
// run on the session's front-end strand, never on the delivery strand), then Finish()ed; every
// final result becomes one result of the response. Long audio therefore runs through the same
// windows, batching and endpointing as streams do.
//
//   struct Adapter {
//     using Request = ...;  using Response = ...;
//     static constexpr const char* kApi = "...";
//     // Config and audio of the request.
//     static absl::StatusOr<CallConfig> ParseConfig(const Request&);
//     static absl::string_view Audio(const Request&);
//     static void AddResult(const SessionResult&, const CallConfig&, Response*);
//     // Called once, before Finish(OK).
//     static void Complete(const CallConfig&, double audio_s, double latency_ms, Response*);
//   };
//
// Ownership: gRPC owns the reactor (deleted in OnDone), the request and the response; the
// reactor owns its session and admission ticket (given back when the call is finished).
// Thread-safety: as StreamCall.
#ifndef JASPER_SERVER_OFFLINE_CALL_H_
#define JASPER_SERVER_OFFLINE_CALL_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/streaming/stream_session.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_callback.h"
#include "server/call_link.h"
#include "server/serving_engine.h"

namespace jasper::server {

class OfflineCallCore : protected CallCoreBase<OfflineCallCore> {
 public:
  virtual ~OfflineCallCore();

 protected:
  OfflineCallCore(ServingEngine* engine, const char* api);
  // Called by the shell's constructor.
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  void HandleCancel() ABSL_LOCKS_EXCLUDED(mu_);
  void HandleDone() ABSL_LOCKS_EXCLUDED(mu_);

  // Implemented by the shell; called with mu_ held.
  virtual absl::StatusOr<CallConfig> ParseConfigRequest() const = 0;
  virtual absl::string_view RequestAudio() const = 0;
  virtual void AddResult(const SessionResult& result, const CallConfig& config) = 0;
  virtual void Complete(const CallConfig& config, double audio_s, double latency_ms) = 0;
  virtual void DoFinish(grpc::Status status) = 0;

 private:
  friend RecognitionSession::Callbacks SessionCallbacks<>(std::shared_ptr<Link> link);

  void OnSessionResult(const SessionResult& result) ABSL_LOCKS_EXCLUDED(mu_);
  void OnSpaceAvailable() ABSL_LOCKS_EXCLUDED(mu_);
  void OnSessionDone(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // Pushes audio while the session accepts it; Finish()es the session after the last byte.
  void PushMoreLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Besides CallCoreBase's:
  absl::string_view audio_ ABSL_GUARDED_BY(mu_);  // into the request (owned by gRPC)
  size_t pushed_ ABSL_GUARDED_BY(mu_) = 0;
  bool input_done_ ABSL_GUARDED_BY(mu_) = false;
  double audio_processed_s_ ABSL_GUARDED_BY(mu_) = 0;
  // Per-channel recognition: the final results, added to the response in time order at the end.
  std::vector<SessionResult> channel_finals_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> error_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

template <typename Adapter>
class OfflineCall final : public grpc::ServerUnaryReactor, public OfflineCallCore {
 public:
  using Request = typename Adapter::Request;
  using Response = typename Adapter::Response;

  // `request` and `response` are owned by gRPC and live until OnDone.
  OfflineCall(ServingEngine* engine, const Request* request, Response* response)
      : OfflineCallCore(engine, Adapter::kApi), request_(request), response_(response) {
    Start();
  }

  void OnCancel() override { HandleCancel(); }
  void OnDone() override {
    HandleDone();
    delete this;
  }

 private:
  absl::StatusOr<CallConfig> ParseConfigRequest() const override {
    return Adapter::ParseConfig(*request_);
  }
  absl::string_view RequestAudio() const override { return Adapter::Audio(*request_); }
  void AddResult(const SessionResult& result, const CallConfig& config) override {
    Adapter::AddResult(result, config, response_);
  }
  void Complete(const CallConfig& config, double audio_s, double latency_ms) override {
    Adapter::Complete(config, audio_s, latency_ms, response_);
  }
  void DoFinish(grpc::Status status) override { this->Finish(std::move(status)); }

  const Request* const request_;
  Response* const response_;
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_OFFLINE_CALL_H_
