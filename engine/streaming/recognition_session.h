// RecognitionSession: what a call drives to recognize one stream of audio, whatever runs it:
// a StreamSession (one channel, or all channels mixed into one) or ChannelSessions (one
// StreamSession per channel, for per-channel recognition). The contract of every method and
// callback is StreamSession's (engine/streaming/stream_session.h); results name their channel
// (SessionResult::channel).
//
// Ownership: the caller owns the session; destroying it before on_done cancels it without
// calling on_done. Thread-safety: implementations are thread-safe; callbacks are never called
// on the thread calling a session method, nor while a lock of the session is held.
#ifndef JASPER_ENGINE_STREAMING_RECOGNITION_SESSION_H_
#define JASPER_ENGINE_STREAMING_RECOGNITION_SESSION_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/streaming/stream_decoder.h"

namespace jasper {

class RecognitionSession {
 public:
  struct Callbacks {
    std::function<void(const SessionResult&)> on_result;
    // The buffer fell below max_buffered_audio_ms after CanAcceptAudio() had been false: the
    // server may post its next read (after checking CanAcceptAudio() again).
    std::function<void()> on_space_available;
    // Exactly once, after the last result: OK after Finish() drained, CANCELLED after
    // Cancel(), or the error that ended the session.
    std::function<void(absl::Status)> on_done;
  };

  virtual ~RecognitionSession() = default;

  virtual absl::Status PushAudio(absl::Span<const uint8_t> bytes) = 0;
  virtual bool CanAcceptAudio() const = 0;
  virtual absl::Status ForceFinal() = 0;
  virtual absl::Status Finish() = 0;
  virtual void Cancel() = 0;
  virtual int64_t buffered_audio_ms() const = 0;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_STREAMING_RECOGNITION_SESSION_H_
