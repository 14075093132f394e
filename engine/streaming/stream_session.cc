#include "engine/streaming/stream_session.h"

#include <deque>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/features/features.h"
#include "engine/status_macros.h"
#include "engine/streaming/stream_decoder.h"
#include "engine/streaming/windower.h"

namespace jasper {

absl::Status StreamingOptions::Validate() const {
  const auto range = [](const char* name, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be in [", lo, ", ", hi, "], got ", v));
    }
    return absl::OkStatus();
  };
  JASPER_RETURN_IF_ERROR(range("chunk_ms", chunk_ms, 20, 30000));
  JASPER_RETURN_IF_ERROR(range("left_context_ms", left_context_ms, 0, 60000));
  JASPER_RETURN_IF_ERROR(range("right_context_ms", right_context_ms, 0, 30000));
  JASPER_RETURN_IF_ERROR(range("endpoint_silence_ms", endpoint_silence_ms, 0, 60000));
  if (absl::Status s = range("max_buffered_audio_ms", max_buffered_audio_ms,
                             static_cast<int64_t>(chunk_ms) + right_context_ms, 600000);
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(), " (it must hold at least chunk_ms + right_context_ms)"));
  }
  JASPER_RETURN_IF_ERROR(range("max_stream_duration_ms", max_stream_duration_ms, 1000, 86400000));
  JASPER_RETURN_IF_ERROR(range("max_inflight_windows", max_inflight_windows, 1, 64));
  JASPER_RETURN_IF_ERROR(decoder.Validate());
  return absl::OkStatus();
}

// The session's state. Shared by the StreamSession and every window in the scheduler, so that
// results arriving after the session is gone are dropped safely. The windower and the stream
// decoder hold the stream's logic; this shell holds the locks, the submission (with deferral
// when the scheduler is full) and the delivery.
class StreamSession::Impl : public std::enable_shared_from_this<StreamSession::Impl> {
 public:
  Impl(std::shared_ptr<const Model> model, Scheduler* scheduler, SerialExecutor* delivery,
       const StreamingOptions& options, const WindowGeometry& geometry,
       std::unique_ptr<AudioInput> input, Callbacks callbacks);

  // The window's padded size (the featurizer may reject the geometry); called once by Create().
  absl::Status Init(const WindowGeometry& geometry);

  absl::Status PushAudio(absl::Span<const uint8_t> bytes);
  bool CanAcceptAudio() const;
  absl::Status ForceFinal();
  absl::Status Finish();
  // notify: deliver on_done(CANCELLED) (Cancel()) or not (destruction).
  void Cancel(bool notify);
  int64_t buffered_audio_ms() const;

 private:
  enum class State { kActive, kFinishing, kDone };
  // A window cut under the lock, featurized and submitted outside it.
  struct Cut {
    WindowCut window;
    Features features;  // set once featurized (kept when deferred: scheduler queue was full)
    bool featurized = false;
  };
  struct Event {
    enum Kind { kResult, kSpace, kDone } kind = kResult;
    SessionResult result;
    absl::Status status;
  };

  // All with mu_ held:
  // Cuts what the windower allows, then processes the slots that are ready.
  void CutWindows(std::vector<Cut>* cuts);
  void ProcessReadySlots();
  void Fail(absl::Status status);
  absl::Status TerminalStatus() const;
  void MaybeSignalSpace();
  void Emit(std::vector<SessionResult>* results);
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
  SerialExecutor* const delivery_;
  Clock* const clock_;
  const StreamingOptions options_;
  const int sample_rate_;
  int64_t max_buffered_samples_ = 0, max_stream_samples_ = 0;
  int window_padded_frames_ = 0;

  // Serializes the caller-facing calls that decode audio (AudioInput is single-threaded).
  // std::mutex rather than absl::Mutex: see engine/streaming/clock.h (ThreadSanitizer).
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
  Windower windower_;
  StreamDecoder decoder_;
  int unsubmitted_ = 0;  // cut, not yet handed to the scheduler
  std::vector<Cut> deferred_;
  // Delivery.
  mutable bool space_wanted_ = false;
  std::deque<Event> outbox_;
  bool drain_posted_ = false;
  Callbacks callbacks_;  // used only by Drain(), which runs on the delivery executor
};

StreamSession::Impl::Impl(std::shared_ptr<const Model> model, Scheduler* scheduler,
                          SerialExecutor* delivery, const StreamingOptions& options,
                          const WindowGeometry& geometry, std::unique_ptr<AudioInput> input,
                          Callbacks callbacks)
    : model_(std::move(model)),
      scheduler_(scheduler),
      delivery_(delivery),
      clock_(scheduler->clock()),
      options_(options),
      sample_rate_(geometry.sample_rate),
      input_(std::move(input)),
      windower_(model_.get(), geometry, options.max_inflight_windows),
      decoder_(model_.get(), model_->EncoderFramesCeil(options.endpoint_silence_ms),
               options.interim_results, options.decoder),
      callbacks_(std::move(callbacks)) {}

absl::Status StreamSession::Impl::Init(const WindowGeometry& geometry) {
  max_buffered_samples_ =
      static_cast<int64_t>(options_.max_buffered_audio_ms) * sample_rate_ / 1000;
  max_stream_samples_ = options_.max_stream_duration_ms * sample_rate_ / 1000;
  // The padded size of a full window; every window is padded to it (one bucket).
  absl::StatusOr<int> padded =
      model_->featurizer().PaddedFrames(static_cast<size_t>(geometry.window_samples()));
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

bool StreamSession::Impl::AppendAudio(const std::vector<float>& samples, absl::Time now) {
  if (windower_.audio_end() + static_cast<int64_t>(samples.size()) > max_stream_samples_) {
    Fail(absl::OutOfRangeError(absl::StrCat("the stream exceeds max_stream_duration_ms = ",
                                            options_.max_stream_duration_ms)));
    return false;
  }
  windower_.Append(samples, now);
  return true;
}

absl::Status StreamSession::Impl::PushAudio(absl::Span<const uint8_t> bytes) {
  std::lock_guard<std::mutex> api(api_mu_);
  bool post = false;
  absl::Status rejected;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kActive) return TerminalStatus();
    if (windower_.unprocessed_samples() >= max_buffered_samples_) {
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
      if (windower_.unprocessed_samples() >= max_buffered_samples_) space_wanted_ = true;
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
  if (windower_.unprocessed_samples() < max_buffered_samples_) return true;
  space_wanted_ = true;
  return false;
}

int64_t StreamSession::Impl::buffered_audio_ms() const {
  std::lock_guard<std::mutex> lock(mu_);
  return windower_.unprocessed_samples() * 1000 / sample_rate_;
}

absl::Status StreamSession::Impl::ForceFinal() {
  std::lock_guard<std::mutex> api(api_mu_);
  std::vector<Cut> cuts;
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kActive) return TerminalStatus();
    windower_.Flush(WindowSlot::Kind::kForceFinal, clock_->Now());
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
      windower_.Flush(WindowSlot::Kind::kFinish, now);
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
      windower_.Clear();
      deferred_.clear();
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
  windower_.Clear();
  deferred_.clear();
  Event e;
  e.kind = Event::kDone;
  e.status = std::move(status);
  outbox_.push_back(std::move(e));
}

// ---------------------------------------------------------------------------------------------
// Windows.

void StreamSession::Impl::CutWindows(std::vector<Cut>* cuts) {
  if (state_ == State::kDone) return;
  std::vector<WindowCut> windows;
  windower_.Cut(clock_->Now(), &windows);
  for (WindowCut& w : windows) {
    Cut cut;
    cut.window = std::move(w);
    cuts->push_back(std::move(cut));
    ++unsubmitted_;
  }
  ProcessReadySlots();  // a marker with nothing before it in flight
  MaybeSignalSpace();
}

void StreamSession::Impl::Featurize(Cut* cut) const {
  if (cut->featurized) return;
  cut->featurized = true;
  absl::StatusOr<Features> f;
  {
    // Consecutive windows overlap (left and right context): frames they share are computed
    // once (bitwise the same features as Compute()).
    std::lock_guard<std::mutex> lock(frame_cache_mu_);
    f = model_->featurizer().ComputeStreaming(cut->window.audio, cut->window.first_sample,
                                              &frame_cache_);
  }
  cut->window.audio = {};
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
    if (cut.features.valid_frames <= 0) {
      // Too short to give features: a window without frames; nothing to run.
      {
        std::lock_guard<std::mutex> lock(mu_);
        --unsubmitted_;
      }
      OnWindowDone(cut.window.seq, WindowResult());
      continue;
    }
    WindowRequest request;
    request.features = cut.features;
    request.done = [impl = shared_from_this(),
                    seq = cut.window.seq](absl::StatusOr<WindowResult> result) {
      impl->OnWindowDone(seq, std::move(result));
    };
    const absl::Status s = scheduler_->Submit(request);
    bool post = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --unsubmitted_;
      if (s.ok()) continue;
      const int rest = static_cast<int>(cuts.size() - i - 1);
      unsubmitted_ -= rest;
      if (state_ == State::kDone) return absl::OkStatus();
      // The scheduler's queue is full: if windows of ours are in it, retry when one of them
      // comes back (OnWindowDone); otherwise nothing would, so the stream fails.
      const int in_scheduler =
          windower_.inflight() - static_cast<int>(deferred_.size()) - unsubmitted_ - rest - 1;
      if (absl::IsResourceExhausted(s) && in_scheduler > 0) {
        for (size_t j = i; j < cuts.size(); ++j) deferred_.push_back(std::move(cuts[j]));
        return absl::OkStatus();
      }
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
    if (!windower_.Complete(seq, std::move(result))) return;
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
  std::vector<SessionResult> results;
  while (state_ != State::kDone) {
    std::optional<WindowSlot> slot = windower_.PopReady();
    if (!slot) break;
    const absl::Time now = clock_->Now();
    switch (slot->kind) {
      case WindowSlot::Kind::kWindow:
        if (!slot->result.ok()) {
          Emit(&results);
          Fail(slot->result.status());
          return;
        }
        if (absl::Status s = decoder_.DecodeWindow(*slot, *slot->result, now, &results); !s.ok()) {
          Emit(&results);
          Fail(s);
          return;
        }
        break;
      case WindowSlot::Kind::kForceFinal:
        decoder_.EndUtterance(/*finish=*/false, slot->first_frame, slot->audio_time, now, &results);
        break;
      case WindowSlot::Kind::kFinish: {
        decoder_.EndUtterance(/*finish=*/true, slot->first_frame, slot->audio_time, now, &results);
        Emit(&results);
        state_ = State::kDone;
        terminal_ = absl::OkStatus();
        windower_.Clear();
        Event e;
        e.kind = Event::kDone;
        outbox_.push_back(std::move(e));
        break;
      }
    }
  }
  Emit(&results);
}

// ---------------------------------------------------------------------------------------------
// Delivery.

void StreamSession::Impl::Emit(std::vector<SessionResult>* results) {
  for (SessionResult& r : *results) {
    Event e;
    e.kind = Event::kResult;
    e.result = std::move(r);
    outbox_.push_back(std::move(e));
  }
  results->clear();
}

void StreamSession::Impl::MaybeSignalSpace() {
  if (space_wanted_ && state_ == State::kActive &&
      windower_.unprocessed_samples() < max_buffered_samples_) {
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
  delivery_->Post([impl = shared_from_this()] { impl->Drain(); });
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
    std::shared_ptr<const Model> model, Scheduler* scheduler, SerialExecutor* delivery,
    const StreamingOptions& options, const AudioFormat& format, Callbacks callbacks) {
  if (model == nullptr) return absl::InvalidArgumentError("StreamSession: no model");
  if (scheduler == nullptr) return absl::InvalidArgumentError("StreamSession: no scheduler");
  if (delivery == nullptr) {
    return absl::InvalidArgumentError("StreamSession: no delivery executor");
  }
  if (!callbacks.on_done) return absl::InvalidArgumentError("StreamSession: on_done is required");
  JASPER_RETURN_IF_ERROR(options.Validate());
  absl::StatusOr<std::unique_ptr<AudioInput>> input =
      AudioInput::Create(format, model->config().featurizer.sample_rate);
  if (!input.ok()) return input.status();
  absl::StatusOr<WindowGeometry> geometry = WindowGeometry::Create(
      *model, options.chunk_ms, options.left_context_ms, options.right_context_ms);
  if (!geometry.ok()) return geometry.status();
  auto impl = std::make_shared<Impl>(std::move(model), scheduler, delivery, options, *geometry,
                                     *std::move(input), std::move(callbacks));
  JASPER_RETURN_IF_ERROR(impl->Init(*geometry));
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
