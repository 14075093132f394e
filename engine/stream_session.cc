#include "engine/stream_session.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/features.h"
#include "kernels/sub_block.h"

namespace jasper {

absl::Status StreamingOptions::Validate() const {
  const auto range = [](const char* name, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be in [", lo, ", ", hi, "], got ", v));
    }
    return absl::OkStatus();
  };
  if (absl::Status s = range("chunk_ms", chunk_ms, 20, 30000); !s.ok()) return s;
  if (absl::Status s = range("left_context_ms", left_context_ms, 0, 60000); !s.ok()) return s;
  if (absl::Status s = range("right_context_ms", right_context_ms, 0, 30000); !s.ok()) return s;
  if (absl::Status s = range("endpoint_silence_ms", endpoint_silence_ms, 0, 60000); !s.ok()) {
    return s;
  }
  if (absl::Status s = range("max_buffered_audio_ms", max_buffered_audio_ms,
                             static_cast<int64_t>(chunk_ms) + right_context_ms, 600000);
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(), " (it must hold at least chunk_ms + right_context_ms)"));
  }
  if (absl::Status s = range("max_stream_duration_ms", max_stream_duration_ms, 1000, 86400000);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = range("max_inflight_windows", max_inflight_windows, 1, 64); !s.ok()) {
    return s;
  }
  return absl::OkStatus();
}

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Encoder frames the model produces for `feature_frames` valid input frames (NeMo's lengths
// through every sub-block's conv; strided convs shrink them).
int EncoderFrames(const Model& model, int feature_frames) {
  int n = feature_frames;
  for (const FoldedBlock& block : model.blocks()) {
    for (const FoldedSubBlock& sub : block.sub_blocks) {
      n = kernels::ConvOutputLength(sub.desc, n);
    }
  }
  return n;
}

}  // namespace

// The session's state. Shared by the StreamSession and every window in the scheduler, so that
// results arriving after the session is gone are dropped safely.
class StreamSession::Impl : public std::enable_shared_from_this<StreamSession::Impl> {
 public:
  Impl(std::shared_ptr<const Model> model, Scheduler* scheduler, const StreamingOptions& options,
       std::unique_ptr<AudioInput> input, Callbacks callbacks);

  // Geometry checks that need the model; called once by Create().
  absl::Status Init();

  absl::Status PushAudio(absl::Span<const uint8_t> bytes);
  bool CanAcceptAudio() const;
  absl::Status ForceFinal();
  absl::Status Finish();
  // notify: deliver on_done(CANCELLED) (Cancel()) or not (destruction).
  void Cancel(bool notify);
  int64_t buffered_audio_ms() const;

 private:
  enum class State { kActive, kFinishing, kDone };
  enum class SlotKind { kWindow, kForceFinal, kFinish };
  enum class EndReason { kEndpoint, kForceFinal, kFinish };

  // One entry of the in-order pipeline: a window sent to the scheduler, or a marker.
  struct Slot {
    SlotKind kind = SlotKind::kWindow;
    bool ready = false;
    int64_t first_frame = 0;    // global encoder frame of the chunk's first frame
    int chunk_offset = 0;       // index of that frame in the window's output
    int chunk_frames = 0;       // frames of the chunk (final tokens)
    int lookahead_frames = 0;   // frames after the chunk (interim tokens)
    bool before_flush = false;  // the last window before a ForceFinal/Finish marker
    absl::Time audio_time;      // when the audio it needed was all there
    absl::StatusOr<WindowResult> result;
  };
  struct FlushMark {
    int64_t sample = 0;  // process audio up to here
    SlotKind kind = SlotKind::kForceFinal;
    absl::Time time;
  };
  // A window cut under the lock, featurized and submitted outside it.
  struct Cut {
    int64_t seq = 0;
    int64_t first_sample = 0;  // the window's first sample in the stream
    std::vector<float> audio;
    Features features;  // set when deferred (scheduler queue was full)
    bool featurized = false;
  };
  struct Event {
    enum Kind { kResult, kSpace, kDone } kind = kResult;
    SessionResult result;
    absl::Status status;
  };

  // All with mu_ held:
  void CutWindows(std::vector<Cut>* cuts);
  void TrimBuffer();
  absl::Time ArrivalTime(int64_t sample) const;
  void ProcessReadySlots();
  void ProcessWindow(const Slot& slot, const WindowResult& r);
  void EndUtterance(EndReason reason, int64_t end_frame, absl::Time audio_time);
  void Fail(absl::Status status);
  absl::Status TerminalStatus() const;
  void MaybeSignalSpace();
  int64_t UnprocessedSamples() const;
  // Appends decoded audio; false (after failing the session) when the stream is too long.
  bool AppendAudio(const std::vector<float>& samples, absl::Time now);
  // Whether events wait and no drain is posted yet (then marks it posted): the caller posts
  // it with PostDrain() after unlocking.
  bool NeedDrain();

  // Without mu_:
  void Featurize(Cut* cut) const;
  // Returns the error that ended the session, if submitting did.
  absl::Status SubmitCuts(std::vector<Cut> cuts);
  void OnWindowDone(int64_t seq, absl::StatusOr<WindowResult> result);
  void PostDrain();
  void Drain();

  // Immutable after Init().
  const std::shared_ptr<const Model> model_;
  Scheduler* const scheduler_;
  Clock* const clock_;
  const StreamingOptions options_;
  const int blank_id_;
  int sample_rate_ = 0;
  int64_t samples_per_frame_ = 0;  // encoder frame (hop x subsampling)
  double ms_per_frame_ = 0;
  int64_t chunk_samples_ = 0, left_samples_ = 0, right_samples_ = 0;
  int64_t max_buffered_samples_ = 0, max_stream_samples_ = 0;
  int endpoint_frames_ = 0;  // 0 = off
  int window_padded_frames_ = 0;

  // Serializes the caller-facing calls that decode audio (AudioInput is single-threaded).
  // std::mutex rather than absl::Mutex: see engine/clock.h (ThreadSanitizer).
  std::mutex api_mu_;                  // acquired before mu_
  std::unique_ptr<AudioInput> input_;  // guarded by api_mu_

  // The previous window's log-mel rows (Featurize). A leaf lock, taken without mu_.
  mutable std::mutex frame_cache_mu_;
  mutable FrameCache frame_cache_;  // guarded by frame_cache_mu_

  mutable std::mutex mu_;
  // Everything below, except callbacks_, is guarded by mu_.
  State state_ = State::kActive;
  absl::Status terminal_;
  bool muted_ = false;  // session destroyed: deliver nothing
  // Audio at the model rate: samples [buffer_start_, audio_end_) are in buffer_ from
  // buffer_offset_ on.
  std::vector<float> buffer_;
  size_t buffer_offset_ = 0;
  int64_t buffer_start_ = 0;
  int64_t audio_end_ = 0;
  std::deque<std::pair<int64_t, absl::Time>> arrivals_;  // end, time
  int64_t next_frame_ = 0;                               // the next chunk starts at this frame
  std::deque<FlushMark> flush_marks_;
  std::map<int64_t, Slot> pipeline_;  // by sequence number
  int64_t next_seq_ = 0;
  int inflight_ = 0;     // windows cut and not yet returned
  int unsubmitted_ = 0;  // cut, not yet handed to the scheduler
  std::vector<Cut> deferred_;
  // Decoding.
  GreedyCtcDecoder decoder_;
  std::vector<CtcToken> tokens_;  // the current utterance's
  int blank_run_ = 0;
  int64_t utterance_start_frame_ = 0;
  int64_t processed_frames_ = 0;
  int utterance_index_ = 0;
  bool any_final_ = false;
  std::string last_interim_;
  // Delivery.
  mutable bool space_wanted_ = false;
  std::deque<Event> outbox_;
  bool drain_posted_ = false;
  Callbacks callbacks_;  // used only by Drain(), which runs on the scheduler's callback thread
};

StreamSession::Impl::Impl(std::shared_ptr<const Model> model, Scheduler* scheduler,
                          const StreamingOptions& options, std::unique_ptr<AudioInput> input,
                          Callbacks callbacks)
    : model_(std::move(model)),
      scheduler_(scheduler),
      clock_(scheduler->clock()),
      options_(options),
      blank_id_(model_->config().blank_id()),
      input_(std::move(input)),
      decoder_(model_->config().blank_id()),
      callbacks_(std::move(callbacks)) {}

absl::Status StreamSession::Impl::Init() {
  const FeaturizerConfig& fc = model_->featurizer().config();
  sample_rate_ = fc.sample_rate;
  samples_per_frame_ = static_cast<int64_t>(fc.HopLength()) * model_->config().subsampling_factor();
  ms_per_frame_ = 1000.0 * static_cast<double>(samples_per_frame_) / sample_rate_;
  const auto to_samples = [&](const char* name, int64_t ms, int64_t* out) {
    const int64_t scaled = ms * sample_rate_;
    if (scaled % 1000 != 0 || (scaled / 1000) % samples_per_frame_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, " = ", ms,
                                                     " must be a multiple of the model's ",
                                                     ms_per_frame_, " ms encoder frame"));
    }
    *out = scaled / 1000;
    return absl::OkStatus();
  };
  if (absl::Status s = to_samples("chunk_ms", options_.chunk_ms, &chunk_samples_); !s.ok()) {
    return s;
  }
  if (absl::Status s = to_samples("left_context_ms", options_.left_context_ms, &left_samples_);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = to_samples("right_context_ms", options_.right_context_ms, &right_samples_);
      !s.ok()) {
    return s;
  }
  max_buffered_samples_ =
      static_cast<int64_t>(options_.max_buffered_audio_ms) * sample_rate_ / 1000;
  max_stream_samples_ = options_.max_stream_duration_ms * sample_rate_ / 1000;
  endpoint_frames_ =
      options_.endpoint_silence_ms == 0
          ? 0
          : static_cast<int>(std::ceil(options_.endpoint_silence_ms / ms_per_frame_ - 1e-9));
  // The padded size of a full window; every window is padded to it (one bucket).
  absl::StatusOr<int> padded = model_->featurizer().PaddedFrames(
      static_cast<size_t>(left_samples_ + chunk_samples_ + right_samples_));
  if (!padded.ok()) return padded.status();
  window_padded_frames_ = *padded;
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Caller-facing calls.

absl::Status StreamSession::Impl::TerminalStatus() const {
  if (state_ == State::kDone) {
    if (terminal_.ok()) return absl::FailedPreconditionError("the stream has already finished");
    return terminal_;
  }
  return absl::FailedPreconditionError("audio after the end of the stream (Finish)");
}

int64_t StreamSession::Impl::UnprocessedSamples() const {
  return std::max<int64_t>(0, audio_end_ - next_frame_ * samples_per_frame_);
}

bool StreamSession::Impl::AppendAudio(const std::vector<float>& samples, absl::Time now) {
  if (audio_end_ + static_cast<int64_t>(samples.size()) > max_stream_samples_) {
    Fail(absl::OutOfRangeError(absl::StrCat("the stream exceeds max_stream_duration_ms = ",
                                            options_.max_stream_duration_ms)));
    return false;
  }
  if (samples.empty()) return true;
  buffer_.insert(buffer_.end(), samples.begin(), samples.end());
  audio_end_ += static_cast<int64_t>(samples.size());
  arrivals_.emplace_back(audio_end_, now);
  return true;
}

absl::Status StreamSession::Impl::PushAudio(absl::Span<const uint8_t> bytes) {
  std::lock_guard<std::mutex> api(api_mu_);
  bool post = false;
  absl::Status rejected;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kActive) return TerminalStatus();
    if (UnprocessedSamples() >= max_buffered_samples_) {
      rejected = absl::ResourceExhaustedError(
          absl::StrCat("audio pushed while the session's buffer is full (max_buffered_audio_ms = ",
                       options_.max_buffered_audio_ms, "); wait for on_space_available"));
      Fail(rejected);
      post = NeedDrain();
    }
  }
  if (!rejected.ok()) {
    if (post) PostDrain();
    return rejected;
  }
  std::vector<float> samples;
  const absl::Status decoded = input_->Push(bytes, &samples);
  std::vector<Cut> cuts;
  absl::Status result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kActive) return TerminalStatus();  // cancelled meanwhile
    if (!decoded.ok()) {
      Fail(decoded);
      result = decoded;
    } else if (!AppendAudio(samples, clock_->Now())) {
      result = terminal_;
    } else {
      CutWindows(&cuts);
      if (UnprocessedSamples() >= max_buffered_samples_) space_wanted_ = true;
    }
    post = NeedDrain();
  }
  if (post) PostDrain();
  if (absl::Status s = SubmitCuts(std::move(cuts)); !s.ok() && result.ok()) result = s;
  return result;
}

bool StreamSession::Impl::CanAcceptAudio() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kActive) return false;
  if (UnprocessedSamples() < max_buffered_samples_) return true;
  space_wanted_ = true;
  return false;
}

int64_t StreamSession::Impl::buffered_audio_ms() const {
  std::lock_guard<std::mutex> lock(mu_);
  return UnprocessedSamples() * 1000 / sample_rate_;
}

absl::Status StreamSession::Impl::ForceFinal() {
  std::lock_guard<std::mutex> api(api_mu_);
  std::vector<Cut> cuts;
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kActive) return TerminalStatus();
    flush_marks_.push_back({audio_end_, SlotKind::kForceFinal, clock_->Now()});
    CutWindows(&cuts);
    post = NeedDrain();
  }
  if (post) PostDrain();
  return SubmitCuts(std::move(cuts));
}

absl::Status StreamSession::Impl::Finish() {
  std::lock_guard<std::mutex> api(api_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kFinishing) return absl::OkStatus();
    if (state_ == State::kDone && terminal_.ok()) return absl::OkStatus();
    if (state_ != State::kActive) return TerminalStatus();
  }
  std::vector<float> samples;
  const absl::Status flushed = input_->Flush(&samples);
  std::vector<Cut> cuts;
  absl::Status result;
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kActive) return TerminalStatus();
    const absl::Time now = clock_->Now();
    if (!flushed.ok()) {
      Fail(flushed);
      result = flushed;
    } else if (!AppendAudio(samples, now)) {
      result = terminal_;
    } else {
      state_ = State::kFinishing;
      flush_marks_.push_back({audio_end_, SlotKind::kFinish, now});
      CutWindows(&cuts);
    }
    post = NeedDrain();
  }
  if (post) PostDrain();
  if (absl::Status s = SubmitCuts(std::move(cuts)); !s.ok() && result.ok()) result = s;
  return result;
}

void StreamSession::Impl::Cancel(bool notify) {
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!notify) muted_ = true;
    if (state_ == State::kDone) return;
    if (notify) {
      outbox_.clear();  // drop results not yet delivered
      Fail(absl::CancelledError("the stream was cancelled"));
    } else {
      state_ = State::kDone;
      terminal_ = absl::CancelledError("the session was destroyed");
      pipeline_.clear();
      deferred_.clear();
      flush_marks_.clear();
      outbox_.clear();
    }
    post = NeedDrain();
  }
  if (post) PostDrain();
}

void StreamSession::Impl::Fail(absl::Status status) {
  if (state_ == State::kDone) return;
  state_ = State::kDone;
  terminal_ = status;
  pipeline_.clear();
  deferred_.clear();
  flush_marks_.clear();
  buffer_.clear();
  buffer_offset_ = 0;
  Event e;
  e.kind = Event::kDone;
  e.status = std::move(status);
  outbox_.push_back(std::move(e));
}

// ---------------------------------------------------------------------------------------------
// Windows.

absl::Time StreamSession::Impl::ArrivalTime(int64_t sample) const {
  for (const auto& [end, time] : arrivals_) {
    if (end >= sample) return time;
  }
  return arrivals_.empty() ? clock_->Now() : arrivals_.back().second;
}

void StreamSession::Impl::CutWindows(std::vector<Cut>* cuts) {
  while (state_ != State::kDone) {
    const int64_t s = next_frame_ * samples_per_frame_;  // chunk start
    const FlushMark* mark = flush_marks_.empty() ? nullptr : &flush_marks_.front();
    if (mark != nullptr && s >= mark->sample) {
      // Everything before the mark is cut: the marker follows those windows in order.
      Slot slot;
      slot.kind = mark->kind;
      slot.ready = true;
      slot.first_frame = next_frame_;
      slot.audio_time = mark->time;
      pipeline_.emplace(next_seq_++, std::move(slot));
      flush_marks_.pop_front();
      continue;
    }
    if (inflight_ >= options_.max_inflight_windows) break;
    const int64_t chunk_end = s + chunk_samples_;
    const int64_t window_start = std::max<int64_t>(0, s - left_samples_);
    const int chunk_offset = static_cast<int>((s - window_start) / samples_per_frame_);
    Slot slot;
    slot.first_frame = next_frame_;
    slot.chunk_offset = chunk_offset;
    int64_t window_end = 0;
    if (mark != nullptr && chunk_end >= mark->sample) {
      // The last window before a flush: a partial chunk, no right context, all its frames.
      window_end = mark->sample;
      const int total = EncoderFrames(
          *model_, model_->featurizer().ValidFrames(static_cast<int>(window_end - window_start)));
      slot.chunk_frames = std::max(0, total - chunk_offset);
      slot.lookahead_frames = 0;
      slot.before_flush = true;
      next_frame_ =
          std::max(next_frame_ + slot.chunk_frames, CeilDiv(mark->sample, samples_per_frame_));
      slot.audio_time = std::max(ArrivalTime(window_end), mark->time);
    } else {
      if (mark != nullptr) {
        window_end = std::min(chunk_end + right_samples_, mark->sample);
      } else {
        window_end = chunk_end + right_samples_;
        if (audio_end_ < window_end) break;  // wait for the right context
      }
      slot.chunk_frames = static_cast<int>(chunk_samples_ / samples_per_frame_);
      slot.lookahead_frames = static_cast<int>((window_end - chunk_end) / samples_per_frame_);
      next_frame_ += slot.chunk_frames;
      slot.audio_time = ArrivalTime(window_end);
      if (mark != nullptr) slot.audio_time = std::max(slot.audio_time, mark->time);
    }
    Cut cut;
    cut.seq = next_seq_++;
    cut.first_sample = window_start;
    const size_t from = buffer_offset_ + static_cast<size_t>(window_start - buffer_start_);
    const size_t to = buffer_offset_ + static_cast<size_t>(window_end - buffer_start_);
    cut.audio.assign(buffer_.begin() + from, buffer_.begin() + to);
    pipeline_.emplace(cut.seq, std::move(slot));
    ++inflight_;
    cuts->push_back(std::move(cut));
    ++unsubmitted_;
  }
  TrimBuffer();
  ProcessReadySlots();  // a marker with nothing before it in flight
  MaybeSignalSpace();
}

void StreamSession::Impl::TrimBuffer() {
  // Keep the left context of the next chunk; processed audio before it is dropped.
  const int64_t keep_from =
      std::min(audio_end_, std::max<int64_t>(0, next_frame_ * samples_per_frame_ - left_samples_));
  if (keep_from > buffer_start_) {
    buffer_offset_ += static_cast<size_t>(keep_from - buffer_start_);
    buffer_start_ = keep_from;
  }
  // Compact when the dead prefix dominates (amortized O(1) per sample).
  if (buffer_offset_ > 0 && buffer_offset_ >= buffer_.size() / 2) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(buffer_offset_));
    buffer_offset_ = 0;
  }
  while (arrivals_.size() > 1 && arrivals_.front().first < buffer_start_) arrivals_.pop_front();
}

void StreamSession::Impl::Featurize(Cut* cut) const {
  if (cut->featurized) return;
  cut->featurized = true;
  absl::StatusOr<Features> f;
  {
    // Consecutive windows overlap (left and right context): frames they share are computed
    // once (bitwise the same features as Compute()).
    std::lock_guard<std::mutex> lock(frame_cache_mu_);
    f = model_->featurizer().ComputeStreaming(cut->audio, cut->first_sample, &frame_cache_);
  }
  cut->audio = {};
  if (!f.ok()) {
    cut->features = Features();  // too short to featurize: a window without frames
    return;
  }
  cut->features = *std::move(f);
  if (cut->features.padded_frames < window_padded_frames_) {
    // Every window has the same padded size, so windows share a scheduler bucket.
    cut->features.data.resize(
        static_cast<size_t>(window_padded_frames_) * cut->features.num_features,
        static_cast<float>(model_->featurizer().config().pad_value));
    cut->features.padded_frames = window_padded_frames_;
  }
}

absl::Status StreamSession::Impl::SubmitCuts(std::vector<Cut> cuts) {
  for (size_t i = 0; i < cuts.size(); ++i) {
    Cut& cut = cuts[i];
    Featurize(&cut);
    absl::Status s;
    if (cut.features.valid_frames <= 0) {
      // Too short to give features: a window without frames; nothing to run.
      {
        std::lock_guard<std::mutex> lock(mu_);
        --unsubmitted_;
      }
      OnWindowDone(cut.seq, WindowResult());
      continue;
    }
    WindowRequest request;
    request.features = cut.features;
    request.done = [impl = shared_from_this(), seq = cut.seq](absl::StatusOr<WindowResult> result) {
      impl->OnWindowDone(seq, std::move(result));
    };
    s = scheduler_->Submit(request);
    bool post = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --unsubmitted_;
      if (s.ok()) continue;
      if (state_ == State::kDone) {
        unsubmitted_ -= static_cast<int>(cuts.size() - i - 1);
        return absl::OkStatus();
      }
      // The scheduler's queue is full: if windows of ours are in it, retry when one of them
      // comes back (OnWindowDone); otherwise nothing would, so the stream fails.
      const int in_scheduler = inflight_ - static_cast<int>(deferred_.size()) - unsubmitted_ - 1;
      if (absl::IsResourceExhausted(s) && in_scheduler > 0) {
        unsubmitted_ -= static_cast<int>(cuts.size() - i - 1);
        for (size_t j = i; j < cuts.size(); ++j) deferred_.push_back(std::move(cuts[j]));
        return absl::OkStatus();
      }
      unsubmitted_ -= static_cast<int>(cuts.size() - i - 1);
      Fail(s);
      post = NeedDrain();
    }
    if (post) PostDrain();
    return s;
  }
  return absl::OkStatus();
}

void StreamSession::Impl::OnWindowDone(int64_t seq, absl::StatusOr<WindowResult> result) {
  std::vector<Cut> cuts;
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kDone) return;
    auto it = pipeline_.find(seq);
    if (it == pipeline_.end()) return;
    it->second.ready = true;
    it->second.result = std::move(result);
    --inflight_;
    ProcessReadySlots();
    if (state_ != State::kDone) {
      cuts.swap(deferred_);
      unsubmitted_ += static_cast<int>(cuts.size());
      CutWindows(&cuts);
    }
    post = NeedDrain();
  }
  if (post) PostDrain();
  SubmitCuts(std::move(cuts)).IgnoreError();  // a failure ends the session (on_done)
}

void StreamSession::Impl::ProcessReadySlots() {
  while (state_ != State::kDone && !pipeline_.empty() && pipeline_.begin()->second.ready) {
    Slot slot = std::move(pipeline_.begin()->second);
    pipeline_.erase(pipeline_.begin());
    switch (slot.kind) {
      case SlotKind::kWindow:
        if (!slot.result.ok()) {
          Fail(slot.result.status());
          return;
        }
        ProcessWindow(slot, *slot.result);
        break;
      case SlotKind::kForceFinal:
        EndUtterance(EndReason::kForceFinal, slot.first_frame, slot.audio_time);
        break;
      case SlotKind::kFinish: {
        EndUtterance(EndReason::kFinish, slot.first_frame, slot.audio_time);
        state_ = State::kDone;
        terminal_ = absl::OkStatus();
        Event e;
        e.kind = Event::kDone;
        outbox_.push_back(std::move(e));
        break;
      }
    }
  }
}

void StreamSession::Impl::ProcessWindow(const Slot& slot, const WindowResult& r) {
  const int total = std::min<int>(r.encoder_frames, static_cast<int>(r.ids.size()));
  const int begin = std::min(slot.chunk_offset, total);
  const int end = std::min(total, slot.chunk_offset + slot.chunk_frames);
  for (int j = begin; j < end; ++j) {
    const int64_t frame = slot.first_frame + (j - slot.chunk_offset);
    decoder_.Feed(absl::MakeConstSpan(&r.ids[j], 1), absl::MakeConstSpan(&r.best_log_probs[j], 1),
                  static_cast<int>(frame), &tokens_);
    blank_run_ = r.ids[j] == blank_id_ ? blank_run_ + 1 : 0;
    processed_frames_ = frame + 1;
    if (endpoint_frames_ > 0 && !tokens_.empty() && blank_run_ >= endpoint_frames_) {
      EndUtterance(EndReason::kEndpoint, frame + 1, slot.audio_time);
    }
  }
  if (!options_.interim_results || slot.before_flush) return;
  // Interim: the look-ahead frames decoded on a copy of the decoder.
  GreedyCtcDecoder lookahead = decoder_;
  std::vector<CtcToken> tokens = tokens_;
  const size_t committed = tokens.size();
  const int la_end = std::min(total, end + slot.lookahead_frames);
  for (int j = end; j < la_end; ++j) {
    const int64_t frame = slot.first_frame + (j - slot.chunk_offset);
    lookahead.Feed(absl::MakeConstSpan(&r.ids[j], 1), absl::MakeConstSpan(&r.best_log_probs[j], 1),
                   static_cast<int>(frame), &tokens);
  }
  const std::vector<std::string>& labels = model_->config().labels;
  std::string text = TokensToText(tokens, labels);
  if (text.empty() || text == last_interim_) return;
  last_interim_ = text;
  Event e;
  e.kind = Event::kResult;
  SessionResult& res = e.result;
  res.transcript = std::move(text);
  res.is_final = false;
  res.stability = tokens.size() > committed ? 0.5f : 0.9f;
  const std::vector<WordInfo> words = TokensToWords(tokens, labels, ms_per_frame_);
  float sum = 0;
  for (const WordInfo& w : words) sum += w.confidence;
  res.confidence = words.empty() ? 0.0f : sum / static_cast<float>(words.size());
  res.utterance_index = utterance_index_;
  res.audio_start_s = static_cast<double>(utterance_start_frame_) * ms_per_frame_ / 1000.0;
  res.audio_processed_s = static_cast<double>(processed_frames_) * ms_per_frame_ / 1000.0;
  res.processing_latency_ms = absl::ToDoubleMilliseconds(clock_->Now() - slot.audio_time);
  outbox_.push_back(std::move(e));
}

void StreamSession::Impl::EndUtterance(EndReason reason, int64_t end_frame, absl::Time audio_time) {
  const bool emit = reason != EndReason::kFinish || !tokens_.empty() || !any_final_;
  if (emit) {
    const std::vector<std::string>& labels = model_->config().labels;
    Event e;
    e.kind = Event::kResult;
    SessionResult& res = e.result;
    res.transcript = TokensToText(tokens_, labels);
    res.is_final = true;
    res.stability = 1.0f;
    res.words = TokensToWords(tokens_, labels, ms_per_frame_);
    float sum = 0;
    for (const WordInfo& w : res.words) sum += w.confidence;
    res.confidence = res.words.empty() ? 0.0f : sum / static_cast<float>(res.words.size());
    res.utterance_index = utterance_index_;
    res.audio_start_s = static_cast<double>(utterance_start_frame_) * ms_per_frame_ / 1000.0;
    res.audio_processed_s =
        static_cast<double>(std::max(processed_frames_, end_frame)) * ms_per_frame_ / 1000.0;
    res.processing_latency_ms = absl::ToDoubleMilliseconds(clock_->Now() - audio_time);
    outbox_.push_back(std::move(e));
    ++utterance_index_;
    any_final_ = true;
  }
  decoder_.Reset();
  tokens_.clear();
  blank_run_ = 0;
  last_interim_.clear();
  utterance_start_frame_ = std::max(processed_frames_, end_frame);
}

// ---------------------------------------------------------------------------------------------
// Delivery.

void StreamSession::Impl::MaybeSignalSpace() {
  if (space_wanted_ && state_ == State::kActive && UnprocessedSamples() < max_buffered_samples_) {
    space_wanted_ = false;
    Event e;
    e.kind = Event::kSpace;
    outbox_.push_back(std::move(e));
  }
}

bool StreamSession::Impl::NeedDrain() {
  if (outbox_.empty() || drain_posted_) return false;
  drain_posted_ = true;
  return true;
}

void StreamSession::Impl::PostDrain() {
  scheduler_->Post([impl = shared_from_this()] { impl->Drain(); });
}

void StreamSession::Impl::Drain() {
  for (;;) {
    Event e;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (muted_) outbox_.clear();
      if (outbox_.empty()) {
        drain_posted_ = false;
        return;
      }
      e = std::move(outbox_.front());
      outbox_.pop_front();
    }
    switch (e.kind) {
      case Event::kResult:
        if (callbacks_.on_result) callbacks_.on_result(e.result);
        break;
      case Event::kSpace:
        if (callbacks_.on_space_available) callbacks_.on_space_available();
        break;
      case Event::kDone: {
        std::function<void(absl::Status)> on_done = std::move(callbacks_.on_done);
        callbacks_ = Callbacks();  // nothing is delivered after on_done
        if (on_done) on_done(std::move(e.status));
        break;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// StreamSession.

absl::StatusOr<std::unique_ptr<StreamSession>> StreamSession::Create(
    std::shared_ptr<const Model> model, Scheduler* scheduler, const StreamingOptions& options,
    const AudioFormat& format, Callbacks callbacks) {
  if (model == nullptr) return absl::InvalidArgumentError("StreamSession: no model");
  if (scheduler == nullptr) return absl::InvalidArgumentError("StreamSession: no scheduler");
  if (!callbacks.on_done) return absl::InvalidArgumentError("StreamSession: on_done is required");
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<AudioInput>> input =
      AudioInput::Create(format, model->config().featurizer.sample_rate);
  if (!input.ok()) return input.status();
  auto impl = std::make_shared<Impl>(std::move(model), scheduler, options, *std::move(input),
                                     std::move(callbacks));
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  return std::unique_ptr<StreamSession>(new StreamSession(std::move(impl)));
}

StreamSession::StreamSession(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

StreamSession::~StreamSession() { impl_->Cancel(/*notify=*/false); }

absl::Status StreamSession::PushAudio(absl::Span<const uint8_t> bytes) {
  return impl_->PushAudio(bytes);
}
bool StreamSession::CanAcceptAudio() const { return impl_->CanAcceptAudio(); }
absl::Status StreamSession::ForceFinal() { return impl_->ForceFinal(); }
absl::Status StreamSession::Finish() { return impl_->Finish(); }
void StreamSession::Cancel() { impl_->Cancel(/*notify=*/true); }
int64_t StreamSession::buffered_audio_ms() const { return impl_->buffered_audio_ms(); }

}  // namespace jasper
