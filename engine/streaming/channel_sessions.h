// ChannelSessions: per-channel recognition of a multi-channel stream (Riva's and Google's
// enable_separate_recognition_per_channel). One StreamSession per channel, each made with
// AudioFormat::channel = its channel, so each decodes the same bytes and keeps its own
// channel; they are driven as one RecognitionSession:
//   - PushAudio / ForceFinal / Finish go to every channel's session (each copies the bytes:
//     N channels cost N times the decoding and N times the per-stream memory bound);
//   - CanAcceptAudio() is true when every channel's session can take audio (each one that
//     cannot is asked, so each will say on_space_available; the caller checks again then);
//   - results are passed on as they come, with SessionResult::channel set; utterance indices
//     count per channel;
//   - the first error of any channel cancels the others, and on_done comes once, after every
//     channel's session is done, with that error (else OK, or CANCELLED after Cancel()).
//
// Ownership: owns the channels' sessions. Thread-safety: thread-safe; callbacks of different
// channels may run at the same time (on their sessions' delivery strands), each channel's in
// order.
#ifndef JASPER_ENGINE_STREAMING_CHANNEL_SESSIONS_H_
#define JASPER_ENGINE_STREAMING_CHANNEL_SESSIONS_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/streaming/recognition_session.h"
#include "engine/streaming/stream_session.h"

namespace jasper {

class ChannelSessions final : public RecognitionSession {
 public:
  // Makes the session of channel `channel` (0-based) with the callbacks given.
  using SessionMaker = std::function<absl::StatusOr<std::unique_ptr<StreamSession>>(
      int channel, Callbacks callbacks)>;

  // `channels` in [2, kMaxInputChannels]. Errors: INVALID_ARGUMENT (channel count, no
  // on_done), and the first error of `make` (the sessions made before it are cancelled).
  static absl::StatusOr<std::unique_ptr<ChannelSessions>> Create(int channels,
                                                                 const SessionMaker& make,
                                                                 Callbacks callbacks);
  ~ChannelSessions() override;

  absl::Status PushAudio(absl::Span<const uint8_t> bytes) override;
  bool CanAcceptAudio() const override;
  absl::Status ForceFinal() override;
  absl::Status Finish() override;
  void Cancel() override;
  // The most any channel holds.
  int64_t buffered_audio_ms() const override;

  struct Join;  // channel_sessions.cc: what the channels' callbacks share

 private:
  ChannelSessions(std::shared_ptr<Join> join, std::vector<std::unique_ptr<StreamSession>> s);
  // Calls `fn` on every channel's session; the first error.
  absl::Status ForEach(absl::Status (StreamSession::*fn)());

  std::shared_ptr<Join> join_;
  std::vector<std::unique_ptr<StreamSession>> sessions_;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_STREAMING_CHANNEL_SESSIONS_H_
