// StreamSession: the per-stream state of streaming (and offline) recognition.
//
// Audio bytes -> AudioInput (decode, resample to the model rate) -> a bounded buffer ->
// windows of left context | chunk | right look-ahead (NeMo's buffered CTC inference), each
// featurized and normalized on its own -> Scheduler (batched with other streams' windows) ->
// in window order: the chunk's encoder frames go through the stream's GreedyCtcDecoder (final
// tokens); the look-ahead frames, decoded on a copy of the decoder, give interim text;
// endpointing on runs of blank frames splits the stream into utterances. See
// docs/STREAMING.md for the exact rules and every option.
//
// Offline recognition uses the same path: push all the audio (honouring CanAcceptAudio()),
// Finish(), collect the final results; long audio goes through the same windows.
//
// The logic lives in two plain values (engine/streaming/windower.h: buffer, window cutting,
// in-order reassembly; engine/streaming/stream_decoder.h: CTC over windows, endpointing, results);
// this class is the shell around them: locks, submission to the scheduler, delivery.
//
// Where the work runs (docs/STREAMING.md, "Threads"): the caller-facing methods only check the
// state, copy the bytes and enqueue them, so a gRPC reaction never does audio work. Decoding,
// resampling, cutting windows, featurizing them and submitting them to the scheduler run in
// order on the session's strand of the front-end TaskPool; CTC decoding of a window's result on
// the scheduler worker that ran it (the next cuts it allows go back to the front-end strand);
// callbacks on the session's strand of the delivery TaskPool, in order, one at a time.
//
// Ownership: shares the Model; borrows the Scheduler and both TaskPools (they must outlive the
// session's last callback, i.e. on_done, or the session's destruction, whichever is later; the
// pools must also outlive the scheduler's workers, whose window results post to them); owns
// everything else. The session's state lives in a shared object that in-flight windows and
// queued tasks keep alive, so the session may be destroyed at any time (destroying it before
// on_done cancels it without calling on_done).
//
// Thread-safety: thread-safe (internally synchronized). Callbacks are delivered in order, one
// at a time, on the delivery strand: never on the thread calling a session method, never while
// the session's lock is held, and never after on_done.
#ifndef JASPER_ENGINE_STREAMING_STREAM_SESSION_H_
#define JASPER_ENGINE_STREAMING_STREAM_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/audio/audio_input.h"
#include "engine/decoding/ctc.h"
#include "engine/model/model.h"
#include "engine/streaming/priority.h"
#include "engine/streaming/recognition_session.h"
#include "engine/streaming/scheduler.h"
#include "engine/streaming/stream_decoder.h"
#include "engine/streaming/task_pool.h"

namespace jasper {

struct StreamingOptions {
  // Window = left_context_ms | chunk_ms | right_context_ms of audio (3.2 s by default). All
  // three must be multiples of the model's encoder frame (20 ms for QuartzNet/Jasper); Create()
  // checks that. Final text of a chunk is known right_context_ms after the chunk's end.
  int chunk_ms = 800;           // [20, 30000]
  int left_context_ms = 1600;   // [0, 60000]
  int right_context_ms = 800;   // [0, 30000]
  bool interim_results = true;  // emit is_final=false results after each window
  // A run of blank frames this long after some speech ends the utterance (a final result).
  // 0 = off (one utterance per stream, plus ForceFinal()). [0, 60000]; rounded up to whole
  // encoder frames.
  int endpoint_silence_ms = 800;
  // Unprocessed audio the session holds: received and not yet cut into a window, plus bytes
  // received and not yet decoded (counted at the format's byte rate; at the model rate for a
  // WAV header not yet read). A push is accepted while this is below the bound (one push may
  // overshoot it), and always after CanAcceptAudio() or on_space_available said yes (the
  // count can rise by a few samples as the audio is decoded); it must be >= chunk_ms +
  // right_context_ms.
  int max_buffered_audio_ms = 10000;  // [.., 600000]
  // Audio beyond this (at the model rate) fails the stream with OUT_OF_RANGE.
  int64_t max_stream_duration_ms = 3600000;  // 1 h; [1000, 86400000]
  // Windows of this stream in the scheduler at once (more: audio waits in the buffer, which
  // is what makes a fast sender back off). [1, 64]
  int max_inflight_windows = 4;
  // Interactive (a live stream) or bulk (an offline request): the session's audio work, windows
  // and deliveries queue behind every interactive one when bulk (engine/streaming/priority.h).
  Priority priority = Priority::kInteractive;
  // Greedy CTC (default) or beam search with an LM and boosts (the backend must keep its
  // log-probabilities; the LM and boost are shared and must outlive the session).
  DecoderConfig decoder;
  // Results in written form ("$23.50", engine/text/inverse_normalizer.h) with the model's ITN
  // grammars: finals (words keep the times of the spoken words they replace) and interims.
  // Create() fails with FAILED_PRECONDITION when the model has none.
  bool inverse_text_normalization = false;
  // Punctuated, capitalized results (engine/text/punctuator.h) with the model's punctuation
  // model, after ITN: finals, and interims (whose last word gets no mark). Create() fails with
  // FAILED_PRECONDITION when the model has none.
  bool automatic_punctuation = false;

  // INVALID_ARGUMENT naming the field.
  absl::Status Validate() const;
};

// SessionResult: engine/streaming/stream_decoder.h.

class StreamSession final : public RecognitionSession {
 public:
  // Callbacks: RecognitionSession::Callbacks (the results' channel is 0; ChannelSessions
  // numbers the channels of its sessions).

  // `frontend` runs the session's audio work, `delivery` its callbacks (may be one pool in
  // tests; the server keeps them apart so that results never wait behind audio work).
  // Errors: INVALID_ARGUMENT (options, format, null model/scheduler/pool, window sizes not a
  // multiple of the model's encoder frame, missing on_done).
  static absl::StatusOr<std::unique_ptr<StreamSession>> Create(
      std::shared_ptr<const Model> model, Scheduler* scheduler, TaskPool* frontend,
      TaskPool* delivery, const StreamingOptions& options, const AudioFormat& format,
      Callbacks callbacks);
  ~StreamSession() override;

  // What Create() checks of `options` on `model` without making a session: the options'
  // ranges, window sizes that are whole encoder frames and that the featurizer accepts.
  static absl::Status CheckOptions(const Model& model, const StreamingOptions& options);

  StreamSession(const StreamSession&) = delete;
  StreamSession& operator=(const StreamSession&) = delete;

  // Appends audio: copies the bytes and queues them for the front-end strand; never decodes on
  // the caller's thread. Returns at once:
  //   RESOURCE_EXHAUSTED: pushed while !CanAcceptAudio() (this ends the session);
  //   FAILED_PRECONDITION: after Finish(); CANCELLED: after Cancel(); a session that already
  //   failed returns its error.
  // Errors found while processing the audio end the session with on_done(error) (and later
  // calls return it): INVALID_ARGUMENT for bad audio or format (see AudioInput), OUT_OF_RANGE
  // when the stream exceeds max_stream_duration_ms, UNAVAILABLE when the scheduler is shut
  // down, RESOURCE_EXHAUSTED when the scheduler's queue is full (server overloaded), backend
  // errors as they come.
  absl::Status PushAudio(absl::Span<const uint8_t> bytes) override;

  // Whether a push is allowed now (buffered_audio_ms() < max_buffered_audio_ms and the session
  // accepts audio). When it returns false, on_space_available follows once it is true again.
  bool CanAcceptAudio() const override;

  // Ends the current utterance now: the audio received so far is processed with whatever
  // right context exists, and a final result (even if empty) follows; the next audio starts a
  // new utterance. Queued after the audio pushed before it. Errors as PushAudio (except
  // RESOURCE_EXHAUSTED).
  absl::Status ForceFinal() override;

  // End of audio: processes the rest (the last window with the right context there is), emits
  // the last final result, then on_done(OK). A stream with no final result so far gets one
  // (possibly empty) final result. Queued after the audio pushed before it. Idempotent; errors
  // as PushAudio (except RESOURCE_EXHAUSTED).
  absl::Status Finish() override;

  // Drops everything; on_done(CANCELLED) unless on_done was already delivered or queued.
  // Safe at any time, any number of times.
  void Cancel() override;

  // Unprocessed audio held (see max_buffered_audio_ms), in ms at the model rate.
  int64_t buffered_audio_ms() const override;

  class Impl;  // engine/streaming/stream_session.cc

 private:
  explicit StreamSession(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_STREAMING_STREAM_SESSION_H_
