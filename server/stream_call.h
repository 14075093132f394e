// StreamCall<Adapter>: the one StreamingRecognize reactor behind both APIs (jasper.asr.v1 and
// the Riva-compatible one). The protocol logic lives in StreamCallCore (stream_call.cc); an
// Adapter translates between its API's messages and the engine:
//
//   struct Adapter {
//     using Request = ...;  using Response = ...;
//     static constexpr const char* kApi = "...";                      // for logs
//     static RequestKind Classify(const Request&);
//     static absl::StatusOr<CallConfig> ParseConfig(const Request&);  // the first message
//     static absl::string_view Audio(const Request&);
//     static std::unique_ptr<Response> MakeResult(const SessionResult&, const CallConfig&);
//     // nullptr when the API has no speech events.
//     static std::unique_ptr<Response> MakeSpeechEvent(SpeechEventKind, double audio_s,
//                                                      int utterance_index, const CallConfig&);
//   };
//
// server/service_glue.h builds this adapter (and OfflineCall's) for both APIs from the fields
// they share plus a small per-API policy.
//
// Protocol: the first message must be a config (else INVALID_ARGUMENT); then audio and, where
// the API has it, force-final controls; half-close ends the audio. One read and one write in
// flight. The next read is posted only while the session can accept audio (otherwise from
// on_space_available), so a fast sender is held back by HTTP/2 flow control. Results go
// through a write queue in which an interim result not yet written is replaced by a newer one;
// finals are never dropped. The call is finished exactly once, after the session's on_done
// and the last queued write. No reaction blocks: session methods only copy and enqueue.
//
// Ownership: gRPC owns the reactor; it deletes itself in OnDone. It owns its session and its
// admission ticket (given back when the call is finished, the session having ended); engine
// callbacks reach it through a CallLink that OnDone detaches.
// Thread-safety: reactions, session callbacks (the session's delivery strand), timers and the
// drain signal may run concurrently; all state is guarded by one mutex. Audio work never runs
// under it: PushAudio/Finish/ForceFinal only copy and enqueue (engine/streaming/task_pool.h).
#ifndef JASPER_SERVER_STREAM_CALL_H_
#define JASPER_SERVER_STREAM_CALL_H_

#include <array>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/streaming/stream_session.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_callback.h"
#include "server/call_link.h"
#include "server/serving_engine.h"
#include "server/timer_queue.h"
#include "server/tsan_hand_off.h"

namespace jasper::server {

enum class RequestKind { kConfig, kAudio, kForceFinal, kEmpty };
enum class SpeechEventKind { kBegin, kEnd };

class StreamCallCore : protected CallCoreBase<StreamCallCore> {
 public:
  virtual ~StreamCallCore();

 protected:
  StreamCallCore(ServingEngine* engine, const char* api);

  // Called by the typed shell's constructor: admission, timers, the first read.
  void Start() ABSL_LOCKS_EXCLUDED(mu_);

  // The reactions, forwarded by the shell.
  void HandleReadDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  void HandleWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  void HandleCancel() ABSL_LOCKS_EXCLUDED(mu_);
  // Detaches the link and releases the session (and the ticket, if the call never finished);
  // the shell then deletes itself.
  void HandleDone() ABSL_LOCKS_EXCLUDED(mu_);

  // Implemented by the shell (called with mu_ held; must not block).
  virtual void DoStartRead() = 0;
  virtual void DoStartWrite(const google::protobuf::Message& response) = 0;
  virtual void DoFinish(grpc::Status status) = 0;
  virtual RequestKind ClassifyRequest() const = 0;
  virtual absl::StatusOr<CallConfig> ParseConfigRequest() const = 0;
  virtual absl::string_view RequestAudio() const = 0;
  virtual std::unique_ptr<google::protobuf::Message> MakeResult(const SessionResult& result,
                                                                const CallConfig& config) const = 0;
  virtual std::unique_ptr<google::protobuf::Message> MakeSpeechEvent(
      SpeechEventKind kind, double audio_s, int utterance_index,
      const CallConfig& config) const = 0;

 private:
  friend RecognitionSession::Callbacks SessionCallbacks<>(std::shared_ptr<Link> link);
  struct Outgoing {
    std::unique_ptr<google::protobuf::Message> message;
    bool interim = false;
    int channel = 0;  // of the result (per-channel recognition)
  };

  // Engine-side events (through the link).
  void OnSessionResult(const SessionResult& result) ABSL_LOCKS_EXCLUDED(mu_);
  void OnSpaceAvailable() ABSL_LOCKS_EXCLUDED(mu_);
  void OnSessionDone(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  void OnDrain() ABSL_LOCKS_EXCLUDED(mu_);
  void OnIdleTimer() ABSL_LOCKS_EXCLUDED(mu_);
  void OnDurationTimer() ABSL_LOCKS_EXCLUDED(mu_);

  void HandleFirstMessageLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PostReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleIdleTimerLocked(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a message; an interim result replaces the interim of the same channel queued last.
  void EnqueueLocked(std::unique_ptr<google::protobuf::Message> message, bool interim, int channel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the call with `status`: stops reading, drops queued results, cancels the session.
  void FailLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finish()es once the final status is known and no write is pending.
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Besides CallCoreBase's:
  bool read_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time read_posted_at_ ABSL_GUARDED_BY(mu_);
  bool reads_closed_ ABSL_GUARDED_BY(mu_) = false;  // half-close seen or reading stopped
  bool waiting_for_space_ ABSL_GUARDED_BY(mu_) = false;
  bool session_done_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Outgoing> queue_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<google::protobuf::Message> in_flight_ ABSL_GUARDED_BY(mu_);
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  // Per channel: 1 + the last utterance whose begin event was sent (0: none yet).
  std::array<int, kMaxInputChannels> speech_begun_ ABSL_GUARDED_BY(mu_) = {};
  // Set by FailLocked: the call's status; results are no longer sent.
  std::optional<absl::Status> error_ ABSL_GUARDED_BY(mu_);
  // Set by draining: replaces an OK end of the session (finals are still sent).
  std::optional<absl::Status> ok_override_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> final_status_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  TimerQueue::Id idle_timer_ ABSL_GUARDED_BY(mu_) = 0;
  TimerQueue::Id duration_timer_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t audio_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int results_sent_ ABSL_GUARDED_BY(mu_) = 0;
};

template <typename Adapter>
class StreamCall final
    : public grpc::ServerBidiReactor<typename Adapter::Request, typename Adapter::Response>,
      public StreamCallCore {
 public:
  using Request = typename Adapter::Request;
  using Response = typename Adapter::Response;

  explicit StreamCall(ServingEngine* engine) : StreamCallCore(engine, Adapter::kApi) { Start(); }

  void OnReadDone(bool ok) override {
    TsanConsume(&request_);  // parsed on gRPC's thread (server/tsan_hand_off.h)
    HandleReadDone(ok);
  }
  void OnWriteDone(bool ok) override { HandleWriteDone(ok); }
  void OnCancel() override { HandleCancel(); }
  void OnDone() override {
    HandleDone();
    delete this;
  }

 private:
  void DoStartRead() override { this->StartRead(&request_); }
  void DoStartWrite(const google::protobuf::Message& response) override {
    this->StartWrite(static_cast<const Response*>(&response));
  }
  void DoFinish(grpc::Status status) override { this->Finish(std::move(status)); }
  RequestKind ClassifyRequest() const override { return Adapter::Classify(request_); }
  absl::StatusOr<CallConfig> ParseConfigRequest() const override {
    return Adapter::ParseConfig(request_);
  }
  absl::string_view RequestAudio() const override { return Adapter::Audio(request_); }
  std::unique_ptr<google::protobuf::Message> MakeResult(const SessionResult& result,
                                                        const CallConfig& config) const override {
    return Adapter::MakeResult(result, config);
  }
  std::unique_ptr<google::protobuf::Message> MakeSpeechEvent(
      SpeechEventKind kind, double audio_s, int utterance_index,
      const CallConfig& config) const override {
    return Adapter::MakeSpeechEvent(kind, audio_s, utterance_index, config);
  }

  Request request_;  // the read buffer; reused only after it has been handled
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_STREAM_CALL_H_
