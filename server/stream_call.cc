#include "server/stream_call.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/status_map.h"
#include "spdlog/spdlog.h"

namespace jasper::server {

StreamCallCore::StreamCallCore(ServingEngine* engine, const char* api)
    : CallCoreBase(engine, api, this) {}

StreamCallCore::~StreamCallCore() = default;

void StreamCallCore::Start() {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<Link> link = link_;
  absl::StatusOr<std::unique_ptr<CallTicket>> ticket =
      engine_->Admit([link] { link->With([](StreamCallCore* call) { call->OnDrain(); }); });
  if (!ticket.ok()) {
    spdlog::debug("{} StreamingRecognize refused: {}", api_, ticket.status().ToString());
    FailLocked(ticket.status());
    return;
  }
  ticket_ = *std::move(ticket);
  duration_timer_ = engine_->timers()->Schedule(
      started_ + absl::Milliseconds(engine_->options().max_stream_duration_ms),
      [link] { link->With([](StreamCallCore* call) { call->OnDurationTimer(); }); });
  PostReadLocked();
}

void StreamCallCore::PostReadLocked() {
  read_in_flight_ = true;
  read_posted_at_ = absl::Now();
  const int idle_ms = engine_->options().idle_timeout_ms;
  if (idle_ms > 0 && idle_timer_ == 0) {
    ScheduleIdleTimerLocked(read_posted_at_ + absl::Milliseconds(idle_ms));
  }
  DoStartRead();
}

void StreamCallCore::ScheduleIdleTimerLocked(absl::Time deadline) {
  std::shared_ptr<Link> link = link_;
  idle_timer_ = engine_->timers()->Schedule(
      deadline, [link] { link->With([](StreamCallCore* call) { call->OnIdleTimer(); }); });
}

void StreamCallCore::HandleReadDone(bool ok) {
  absl::MutexLock lock(&mu_);
  read_in_flight_ = false;
  if (finished_ || reads_closed_) return;  // stopped reading: the message is dropped
  if (!ok) {
    // Half-close (or a broken call, which OnCancel handles).
    reads_closed_ = true;
    if (session_ == nullptr) {
      FailLocked(absl::InvalidArgumentError(
          "the stream ended before a streaming_config message was received"));
    } else if (absl::Status s = session_->Finish(); !s.ok()) {
      spdlog::debug("{} session Finish: {}", api_, s.ToString());  // on_done(error) follows
    }
    return;
  }
  if (session_ == nullptr) {
    HandleFirstMessageLocked();
    return;
  }
  switch (ClassifyRequest()) {
    case RequestKind::kConfig:
      FailLocked(absl::InvalidArgumentError(
          "streaming_config may only be sent in the first message of a stream"));
      return;
    case RequestKind::kAudio: {
      const absl::string_view audio = RequestAudio();
      audio_bytes_ += static_cast<int64_t>(audio.size());
      if (!audio.empty()) {
        absl::Status s = session_->PushAudio(
            absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(audio.data()), audio.size()));
        if (!s.ok()) {
          // The session has ended; its on_done(error) finishes the call.
          reads_closed_ = true;
          return;
        }
      }
      if (session_->CanAcceptAudio()) {
        PostReadLocked();
      } else {
        waiting_for_space_ = true;  // on_space_available posts the read
      }
      return;
    }
    case RequestKind::kForceFinal:
      if (!session_->ForceFinal().ok()) {
        reads_closed_ = true;
        return;
      }
      PostReadLocked();
      return;
    case RequestKind::kEmpty:
      PostReadLocked();
      return;
  }
}

void StreamCallCore::HandleFirstMessageLocked() {
  if (ClassifyRequest() != RequestKind::kConfig) {
    FailLocked(absl::InvalidArgumentError(
        "the first message of a stream must be a streaming_config (audio arrived before the "
        "config)"));
    return;
  }
  absl::StatusOr<CallConfig> config = ParseConfigRequest();
  if (!config.ok()) {
    FailLocked(config.status());
    return;
  }
  config_ = *std::move(config);
  absl::StatusOr<std::unique_ptr<RecognitionSession>> session =
      engine_->CreateSession(config_, /*streaming=*/true, SessionCallbacks(link_));
  if (!session.ok()) {
    FailLocked(session.status());
    return;
  }
  session_ = *std::move(session);
  PostReadLocked();
}

void StreamCallCore::OnSpaceAvailable() {
  absl::MutexLock lock(&mu_);
  if (!waiting_for_space_ || reads_closed_ || finished_) return;
  // Per-channel sessions say this per channel: read on only when all of them have room (a
  // channel still full says it again).
  if (!session_->CanAcceptAudio()) return;
  waiting_for_space_ = false;
  PostReadLocked();
}

void StreamCallCore::OnSessionResult(const SessionResult& result) {
  absl::MutexLock lock(&mu_);
  if (finished_ || error_.has_value()) return;
  const int channel = std::clamp(result.channel, 0, kMaxInputChannels - 1);
  int& begun = speech_begun_[channel];
  if (config_.speech_events && !result.transcript.empty() && result.utterance_index >= begun) {
    begun = result.utterance_index + 1;
    if (auto event = MakeSpeechEvent(SpeechEventKind::kBegin, result.audio_start_s,
                                     result.utterance_index, config_)) {
      EnqueueLocked(std::move(event), /*interim=*/false, channel);
    }
  }
  EnqueueLocked(MakeResult(result, config_), /*interim=*/!result.is_final, channel);
  if (config_.speech_events && result.is_final && begun == result.utterance_index + 1) {
    if (auto event = MakeSpeechEvent(SpeechEventKind::kEnd, result.audio_processed_s,
                                     result.utterance_index, config_)) {
      EnqueueLocked(std::move(event), /*interim=*/false, channel);
    }
  }
  WriteNextLocked();
}

void StreamCallCore::EnqueueLocked(std::unique_ptr<google::protobuf::Message> message, bool interim,
                                   int channel) {
  if (interim && !queue_.empty() && queue_.back().interim && queue_.back().channel == channel) {
    queue_.back().message = std::move(message);  // only the newest hypothesis matters
    return;
  }
  queue_.push_back({std::move(message), interim, channel});
}

void StreamCallCore::WriteNextLocked() {
  if (in_flight_ != nullptr || write_failed_ || finished_ || queue_.empty()) return;
  in_flight_ = std::move(queue_.front().message);
  queue_.pop_front();
  ++results_sent_;
  DoStartWrite(*in_flight_);
}

void StreamCallCore::HandleWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  in_flight_.reset();
  if (!ok) {
    write_failed_ = true;
    FailLocked(absl::CancelledError("the client stopped receiving results"));
    // FailLocked does nothing when the call already failed (e.g. OnCancel came first and the
    // session's on_done already arrived while this write was in flight): finish it here, or
    // the call never ends and server Shutdown() waits for it forever.
    MaybeFinishLocked();
    return;
  }
  WriteNextLocked();
  MaybeFinishLocked();
}

void StreamCallCore::OnSessionDone(absl::Status status) {
  absl::MutexLock lock(&mu_);
  session_done_ = true;
  reads_closed_ = true;
  waiting_for_space_ = false;
  if (error_.has_value()) {
    final_status_ = *error_;
  } else if (status.ok() && ok_override_.has_value()) {
    final_status_ = *ok_override_;
  } else {
    final_status_ = std::move(status);
  }
  MaybeFinishLocked();
}

void StreamCallCore::FailLocked(absl::Status status) {
  if (finished_ || error_.has_value()) return;
  error_ = status;
  reads_closed_ = true;
  waiting_for_space_ = false;
  queue_.clear();
  if (session_ != nullptr && !session_done_) {
    session_->Cancel();  // on_done(CANCELLED) follows and finishes with error_
  } else {
    final_status_ = std::move(status);
    MaybeFinishLocked();
  }
}

void StreamCallCore::MaybeFinishLocked() {
  if (finished_ || !final_status_.has_value() || in_flight_ != nullptr) return;
  if (!queue_.empty() && !write_failed_) return;
  finished_ = true;
  if (idle_timer_ != 0) engine_->timers()->Cancel(idle_timer_);
  if (duration_timer_ != 0) engine_->timers()->Cancel(duration_timer_);
  idle_timer_ = duration_timer_ = 0;
  const absl::Status& s = *final_status_;
  if (s.ok()) {
    spdlog::debug("{} stream done: {} audio bytes, {} messages sent", api_, audio_bytes_,
                  results_sent_);
  } else {
    spdlog::debug("{} stream ended: {}", api_, s.ToString());
  }
  // The session has ended (final_status_ is set only then): the admission slot comes back now,
  // not when gRPC gets round to OnDone, so a client that opens its next stream on seeing this
  // status is not refused for a slot this call no longer uses.
  ticket_.reset();
  DoFinish(ToGrpcStatus(s));
}

void StreamCallCore::HandleCancel() {
  absl::MutexLock lock(&mu_);
  FailLocked(absl::CancelledError("the call was cancelled"));
}

void StreamCallCore::OnDrain() {
  absl::MutexLock lock(&mu_);
  if (finished_ || error_.has_value()) return;
  if (session_ == nullptr) {
    FailLocked(absl::UnavailableError("server is shutting down"));
    return;
  }
  if (reads_closed_) return;  // the client already half-closed: finish normally
  // Stop taking audio, emit the finals for what arrived, then end with UNAVAILABLE so the
  // client knows the rest of its audio was not processed.
  reads_closed_ = true;
  waiting_for_space_ = false;
  ok_override_ = absl::UnavailableError(absl::StrFormat(
      "server is shutting down; the stream was ended after %d bytes of audio", audio_bytes_));
  (void)session_->Finish();
}

void StreamCallCore::OnIdleTimer() {
  absl::MutexLock lock(&mu_);
  idle_timer_ = 0;
  if (finished_ || reads_closed_) return;
  const absl::Duration idle = absl::Milliseconds(engine_->options().idle_timeout_ms);
  const absl::Time now = absl::Now();
  if (!read_in_flight_) {
    // The server is holding reads back (flow control): not the client's idleness.
    ScheduleIdleTimerLocked(now + idle);
    return;
  }
  if (now - read_posted_at_ < idle) {
    ScheduleIdleTimerLocked(read_posted_at_ + idle);
    return;
  }
  FailLocked(absl::OutOfRangeError(absl::StrCat(
      "no audio received for ", engine_->options().idle_timeout_ms,
      " ms (idle_timeout_ms); send audio close to real time or half-close the stream")));
}

void StreamCallCore::OnDurationTimer() {
  absl::MutexLock lock(&mu_);
  duration_timer_ = 0;
  FailLocked(absl::OutOfRangeError(absl::StrCat("the stream exceeded max_stream_duration_ms = ",
                                                engine_->options().max_stream_duration_ms, " ms")));
}

void StreamCallCore::HandleDone() {
  link_->Detach();  // waits for a callback in progress; none can start after this
  std::unique_ptr<RecognitionSession> session;
  std::unique_ptr<CallTicket> ticket;
  {
    absl::MutexLock lock(&mu_);
    if (idle_timer_ != 0) engine_->timers()->Cancel(idle_timer_);
    if (duration_timer_ != 0) engine_->timers()->Cancel(duration_timer_);
    idle_timer_ = duration_timer_ = 0;
    session = std::move(session_);
    ticket = std::move(ticket_);
  }
  // Destroying a session that has not delivered on_done cancels it silently.
}

}  // namespace jasper::server
