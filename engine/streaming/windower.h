// Windower: a stream's audio buffer, its cutting into windows (left context | chunk | right
// look-ahead, NeMo's buffered CTC inference) and the in-order reassembly of the windows'
// results. A plain value: no locks, no threads, no clock (the caller passes the times), so it
// is unit-tested on its own; StreamSession holds one under its lock.
//
// Units: samples at the model rate and encoder frames (Model::samples_per_encoder_frame()),
// both counted from the start of the stream.
//
// Ownership: borrows the Model (must outlive the windower); owns the buffer and the slots.
// Thread-safety: not thread-safe (a per-stream value).
#ifndef JASPER_ENGINE_STREAMING_WINDOWER_H_
#define JASPER_ENGINE_STREAMING_WINDOWER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/model/model.h"
#include "engine/streaming/window_result.h"

namespace jasper {

// The window sizes in samples, checked against the model's encoder frame.
struct WindowGeometry {
  int64_t chunk_samples = 0;
  int64_t left_samples = 0;
  int64_t right_samples = 0;
  int64_t samples_per_frame = 0;  // Model::samples_per_encoder_frame()
  int sample_rate = 0;

  // INVALID_ARGUMENT naming the field when a size is not a whole number of encoder frames.
  static absl::StatusOr<WindowGeometry> Create(const Model& model, int chunk_ms,
                                               int left_context_ms, int right_context_ms);
  int64_t window_samples() const { return left_samples + chunk_samples + right_samples; }
};

// One entry of the in-order pipeline: a window sent to the backend, or a flush marker.
struct WindowSlot {
  enum class Kind { kWindow, kForceFinal, kFinish };
  Kind kind = Kind::kWindow;
  int64_t first_frame = 0;              // global encoder frame of the chunk's first frame
  int chunk_offset = 0;                 // index of that frame in the window's output
  int chunk_frames = 0;                 // frames of the chunk (final tokens)
  int lookahead_frames = 0;             // frames after the chunk (interim tokens)
  bool before_flush = false;            // the last window before a ForceFinal/Finish marker
  absl::Time audio_time;                // when the audio it needed was all there
  absl::StatusOr<WindowResult> result;  // windows only, once Complete()d
};

// A window to featurize and run: its audio [first_sample, first_sample + audio.size()).
struct WindowCut {
  int64_t seq = 0;
  int64_t first_sample = 0;
  // A view into the windower's buffer (no copy), valid until the windower's next Append() or
  // Clear(), or its destruction.
  absl::Span<const float> audio;
};

class Windower {
 public:
  // `max_inflight` windows may be cut and not yet Complete()d at once.
  Windower(const Model* model, const WindowGeometry& geometry, int max_inflight);

  // Appends audio that arrived at `now`.
  void Append(absl::Span<const float> samples, absl::Time now);
  // Ends the current utterance (kForceFinal) or the stream (kFinish) after all audio appended
  // so far: the windows before it are cut with the right context there is, then a marker slot.
  void Flush(WindowSlot::Kind kind, absl::Time now);
  // Cuts every window that can be cut now (its right context arrived, or a flush allows it)
  // while fewer than max_inflight are out, and queues the markers they reach; appends the
  // cuts (views into the buffer: see WindowCut). Marks audio no later window needs as
  // dropped; its memory is reused by a later Append(). `now` stands in for an arrival time not
  // recorded.
  void Cut(absl::Time now, std::vector<WindowCut>* cuts);
  // The result of window `seq`; false when no such window is out.
  bool Complete(int64_t seq, absl::StatusOr<WindowResult> result);
  // The next slot in stream order once it is ready (a completed window or a marker).
  std::optional<WindowSlot> PopReady();
  // Forgets all audio and slots (the stream ended).
  void Clear();

  // Audio received and not yet cut into a chunk (what flow control bounds).
  int64_t unprocessed_samples() const;
  int64_t audio_end() const { return audio_end_; }  // samples received so far
  int inflight() const { return inflight_; }        // cut, not yet completed
  int64_t buffered_samples() const {                // held in memory (context included)
    return static_cast<int64_t>(buffer_.size() - buffer_offset_);
  }

 private:
  struct FlushMark {
    int64_t sample = 0;  // process audio up to here
    WindowSlot::Kind kind = WindowSlot::Kind::kForceFinal;
    absl::Time time;
  };
  struct Pending {
    WindowSlot slot;
    bool ready = false;
  };

  absl::Time ArrivalTime(int64_t sample, absl::Time fallback) const;
  void Trim();

  const Model* const model_;
  const WindowGeometry geometry_;
  const int max_inflight_;
  // Samples [buffer_start_, audio_end_) are in buffer_ from buffer_offset_ on.
  std::vector<float> buffer_;
  size_t buffer_offset_ = 0;
  int64_t buffer_start_ = 0;
  int64_t audio_end_ = 0;
  std::deque<std::pair<int64_t, absl::Time>> arrivals_;  // end sample, time
  int64_t next_frame_ = 0;                               // the next chunk starts here
  std::deque<FlushMark> flush_marks_;
  std::map<int64_t, Pending> pipeline_;  // by sequence number
  int64_t next_seq_ = 0;
  int inflight_ = 0;
};

}  // namespace jasper

#endif  // JASPER_ENGINE_STREAMING_WINDOWER_H_
