#include "server/offline_call.h"

#include <algorithm>
#include <utility>

#include "server/status_map.h"
#include "spdlog/spdlog.h"

namespace jasper::server {
namespace {

// Bytes handed to the session per push: small enough that one push (decode + resample) is
// quick, large enough that a file needs few of them.
constexpr size_t kPushBytes = 64 * 1024;

}  // namespace

OfflineCallCore::OfflineCallCore(ServingEngine* engine, const char* api)
    : CallCoreBase(engine, api, this) {}

OfflineCallCore::~OfflineCallCore() = default;

void OfflineCallCore::Start() {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::unique_ptr<CallTicket>> ticket = engine_->Admit(nullptr);
  if (!ticket.ok()) {
    FinishLocked(ticket.status());
    return;
  }
  ticket_ = *std::move(ticket);
  absl::StatusOr<CallConfig> config = ParseConfigRequest();
  if (!config.ok()) {
    FinishLocked(config.status());
    return;
  }
  config_ = *std::move(config);
  audio_ = RequestAudio();
  if (audio_.empty()) {
    FinishLocked(absl::InvalidArgumentError("the request has no audio"));
    return;
  }
  absl::StatusOr<std::unique_ptr<RecognitionSession>> session =
      engine_->CreateSession(config_, /*streaming=*/false, SessionCallbacks(link_));
  if (!session.ok()) {
    FinishLocked(session.status());
    return;
  }
  session_ = *std::move(session);
  PushMoreLocked();
}

void OfflineCallCore::PushMoreLocked() {
  while (!input_done_ && !finished_ && pushed_ < audio_.size() && session_->CanAcceptAudio()) {
    const size_t n = std::min(kPushBytes, audio_.size() - pushed_);
    absl::Status s = session_->PushAudio(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(audio_.data()) + pushed_, n));
    pushed_ += n;
    if (!s.ok()) {
      input_done_ = true;  // the session has failed; on_done(error) follows
      return;
    }
  }
  if (!input_done_ && pushed_ >= audio_.size()) {
    input_done_ = true;
    (void)session_->Finish();  // an error here also arrives as on_done(error)
  }
}

void OfflineCallCore::OnSpaceAvailable() {
  absl::MutexLock lock(&mu_);
  if (session_ != nullptr) PushMoreLocked();
}

void OfflineCallCore::OnSessionResult(const SessionResult& result) {
  absl::MutexLock lock(&mu_);
  if (finished_ || !result.is_final) return;
  audio_processed_s_ = std::max(audio_processed_s_, result.audio_processed_s);
  if (result.transcript.empty()) return;
  if (config_.separate_channels) {
    channel_finals_.push_back(result);  // the channels' results interleave: ordered at the end
  } else {
    AddResult(result, config_);
  }
}

void OfflineCallCore::OnSessionDone(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (error_.has_value()) status = *error_;
  if (status.ok()) {
    // Per-channel results in the order they were spoken (ties: by channel), each channel's
    // own in utterance order.
    std::stable_sort(channel_finals_.begin(), channel_finals_.end(),
                     [](const SessionResult& a, const SessionResult& b) {
                       return a.audio_start_s != b.audio_start_s ? a.audio_start_s < b.audio_start_s
                                                                 : a.channel < b.channel;
                     });
    for (const SessionResult& r : channel_finals_) AddResult(r, config_);
    Complete(config_, audio_processed_s_, absl::ToDoubleMilliseconds(absl::Now() - started_));
  }
  FinishLocked(std::move(status));
}

void OfflineCallCore::FinishLocked(absl::Status status) {
  if (finished_) return;
  finished_ = true;
  if (!status.ok()) spdlog::debug("{} Recognize ended: {}", api_, status.ToString());
  // No session, or it has delivered on_done: the slot comes back before the client can see the
  // status (see StreamCallCore::MaybeFinishLocked).
  ticket_.reset();
  DoFinish(ToGrpcStatus(status));
}

void OfflineCallCore::HandleCancel() {
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  error_ = absl::CancelledError("the call was cancelled");
  if (session_ != nullptr) {
    session_->Cancel();  // on_done(CANCELLED) finishes the call
  } else {
    FinishLocked(*error_);
  }
}

void OfflineCallCore::HandleDone() {
  link_->Detach();
  std::unique_ptr<RecognitionSession> session;
  std::unique_ptr<CallTicket> ticket;
  {
    absl::MutexLock lock(&mu_);
    session = std::move(session_);
    ticket = std::move(ticket_);
  }
}

}  // namespace jasper::server
