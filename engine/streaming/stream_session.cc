#include "engine/streaming/stream_session.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <iterator>
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
  JASPER_RETURN_IF_ERROR(range("priority", static_cast<int>(priority), 0, kNumPriorities - 1));
  JASPER_RETURN_IF_ERROR(decoder.Validate());
  return absl::OkStatus();
}

// The session's state. Shared by the StreamSession, every window in the scheduler and every
// queued task, so that results arriving after the session is gone are dropped safely. The
// windower and the stream decoder hold the stream's logic; this shell holds the lock, the input
// queue, the front-end work (on the session's front-end strand), the submission (with deferral
// when the scheduler is full) and the delivery (on the session's delivery strand).
//
// Who touches what: mu_ guards the state, the input queue, the windower's slots and counters,
// the decoder and the outbox. The windower's audio buffer is written (Append, Clear) only on
// the front-end strand, so the views that Cut() returns stay valid while that strand
// featurizes them outside mu_. input_, frame_cache_ and deferred_ belong to the front-end
// strand; callbacks_ to the delivery strand.
class StreamSession::Impl : public std::enable_shared_from_this<StreamSession::Impl> {
 public:
  Impl(std::shared_ptr<const Model> model, Scheduler* scheduler, TaskPool* frontend,
       TaskPool* delivery, const StreamingOptions& options, const WindowGeometry& geometry,
       const AudioFormat& format, std::unique_ptr<AudioInput> input, Callbacks callbacks);

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
  // What the caller handed over, processed in order on the front-end strand.
  struct Input {
    enum Kind { kAudio, kForceFinal, kFinish } kind = kAudio;
    std::vector<uint8_t> bytes;  // kAudio
    absl::Time arrival;          // when the call was made (latencies count from here)
  };
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
  // Queues an input arriving now for the front-end strand (the caller posts RunInput after
  // unlocking).
  void EnqueueInput(Input::Kind kind, absl::Span<const uint8_t> bytes = {});
  // Cuts what the windower allows, then processes the slots that are ready.
  void CutWindows(std::vector<Cut>* cuts);
  void ProcessReadySlots();
  void Fail(absl::Status status);
  absl::Status TerminalStatus() const;
  // Audio held and not yet cut (decoded, plus queued bytes at the estimated rate), samples.
  int64_t HeldSamples() const;
  void MaybeSignalSpace();
  void Emit(std::vector<SessionResult>* results);
  // Appends decoded audio; false (after failing the session) when the stream is too long.
  bool AppendAudio(const std::vector<float>& samples, absl::Time arrival);
  // Whether events wait and no drain is posted yet (then marks it posted): the caller posts
  // it with PostDrain() after unlocking.
  bool NeedDrain();

  // On the front-end strand, without mu_:
  // Processes the oldest queued input (one per RunInput posted). While compressed audio's
  // decoded output is pending (decode_pending_), the input waits: its post is owed
  // (deferred_input_posts_) and made again once RunDecodeMore has drained the decoder.
  void RunInput();
  // Decodes the next piece of pending compressed audio (AudioInput::Continue).
  void RunDecodeMore();
  // After a decode step, with mu_ held: records whether output is pending (then decoding goes
  // on once the windower has room: CutWindows posts RunDecodeMore), completes a deferred
  // Finish once nothing is pending, and returns how many owed RunInput posts to make.
  int AfterDecode(bool pending);
  // Cuts what a returned window allows and resubmits deferred windows.
  void RunCuts();
  // Frees the audio once the session has ended.
  void RunRelease();
  void Featurize(Cut* cut);
  // Featurizes `cuts` (while their views are valid) and submits them after the deferred ones.
  void SubmitCuts(std::vector<Cut> cuts);

  // Any thread, without mu_:
  // A window's result (from the scheduler, or at once for a window without frames).
  void OnWindowDone(int64_t seq, absl::StatusOr<WindowResult> result, bool from_scheduler);
  void PostFrontEnd(void (Impl::*task)());
  void PostDrain();
  void Drain();  // on the delivery strand

  // Immutable after Init().
  const std::shared_ptr<const Model> model_;
  Scheduler* const scheduler_;
  const std::shared_ptr<TaskPool::Strand> frontend_;
  const std::shared_ptr<TaskPool::Strand> delivery_;
  Clock* const clock_;
  const StreamingOptions options_;
  const int sample_rate_;
  // Model-rate samples per queued input byte (an estimate from the format: 16-bit or 8-bit
  // codes, the declared rate, or the model's when a WAV header will tell).
  const double samples_per_input_byte_;
  int64_t max_buffered_samples_ = 0, max_stream_samples_ = 0;
  int window_padded_frames_ = 0;

  // The front-end strand's.
  std::unique_ptr<AudioInput> input_;
  absl::Time pending_arrival_;  // arrival of the input whose decoded output is pending
  FrameCache frame_cache_;      // the previous window's log-mel rows (Featurize)
  std::vector<Cut> deferred_;

  // std::mutex rather than absl::Mutex: see engine/streaming/clock.h (ThreadSanitizer).
  mutable std::mutex mu_;
  // Everything below, except callbacks_, is guarded by mu_.
  State state_ = State::kActive;
  absl::Status terminal_;
  bool muted_ = false;  // session destroyed: deliver nothing
  std::deque<Input> inputs_;
  int64_t queued_input_bytes_ = 0;  // bytes of inputs_ and of the input being decoded
  // Compressed audio whose decoded output did not fit one call (AudioInput::has_pending()):
  // counts as a full buffer (HeldSamples) until drained.
  bool decode_pending_ = false;
  bool decode_stalled_ = false;   // pending, waiting for the windower to have room
  int deferred_input_posts_ = 0;  // RunInput posts owed (see RunInput)
  bool finish_deferred_ = false;  // Finish processed, its windower flush waits for the decode
  absl::Time finish_arrival_;
  Windower windower_;
  StreamDecoder decoder_;
  int in_scheduler_ = 0;  // windows Submit() accepted (or is accepting) whose done has not run
  int submitting_ = 0;    // front-end tasks inside Submit() (the destructor waits for 0)
  std::condition_variable submit_done_;  // submitting_ fell to 0
  bool release_posted_ = false;
  // Delivery.
  mutable bool space_wanted_ = false;
  // CanAcceptAudio() said yes, or on_space_available was queued, since the last push: the next
  // push is accepted even if the count has risen meanwhile (decoding can put a few more
  // samples on it than the bytes were counted at: the resampler releases its delay line).
  mutable bool push_granted_ = false;
  std::deque<Event> outbox_;
  bool drain_posted_ = false;
  Callbacks callbacks_;  // used only by Drain(), on the delivery strand
};

namespace {

// Options that need something of the model beyond its geometry.
absl::Status CheckTextOptions(const Model& model, const StreamingOptions& options) {
  if (options.inverse_text_normalization && model.inverse_normalizer() == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", model.config().name,
                     "' has no inverse text normalization grammars (model.json "
                     "inverse_text_normalization; tools/export_itn.py makes them)"));
  }
  if (options.automatic_punctuation && model.punctuator() == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", model.config().name,
                     "' has no punctuation model (model.json punctuation; "
                     "tools/build_punct.py makes one)"));
  }
  return absl::OkStatus();
}

// Compressed audio: queued bytes are counted as if they held this many samples per second of
// 32 kbit/s (a low-bitrate stream: the estimate errs toward holding fewer bytes).
constexpr double kCompressedBytesPerSecond = 4000.0;

double SamplesPerInputByte(const AudioFormat& format, int model_rate) {
  if (format.encoding == AudioEncoding::kFlac || format.encoding == AudioEncoding::kOggOpus ||
      format.encoding == AudioEncoding::kMp3) {
    return static_cast<double>(model_rate) / kCompressedBytesPerSecond;
  }
  const int bytes_per_sample = format.encoding == AudioEncoding::kLinearPcm16 ? 2 : 1;
  const int rate = format.sample_rate_hz > 0 ? format.sample_rate_hz : model_rate;
  const int channels = std::max(1, format.channels);
  return static_cast<double>(model_rate) /
         (static_cast<double>(rate) * bytes_per_sample * channels);
}

// Compressed audio decodes at most this much per front-end step (a quarter of the buffer, at
// least 1 s): the windower then holds at most max_buffered_audio_ms plus this.
int64_t DecodeSamplesPerCall(const StreamingOptions& options, int sample_rate) {
  return std::max<int64_t>(
      sample_rate, static_cast<int64_t>(options.max_buffered_audio_ms) * sample_rate / 4000);
}

}  // namespace

StreamSession::Impl::Impl(std::shared_ptr<const Model> model, Scheduler* scheduler,
                          TaskPool* frontend, TaskPool* delivery, const StreamingOptions& options,
                          const WindowGeometry& geometry, const AudioFormat& format,
                          std::unique_ptr<AudioInput> input, Callbacks callbacks)
    : model_(std::move(model)),
      scheduler_(scheduler),
      frontend_(frontend->NewStrand(options.priority)),
      delivery_(delivery->NewStrand(options.priority)),
      clock_(scheduler->clock()),
      options_(options),
      sample_rate_(geometry.sample_rate),
      samples_per_input_byte_(SamplesPerInputByte(format, geometry.sample_rate)),
      input_(std::move(input)),
      windower_(model_.get(), geometry, options.max_inflight_windows),
      decoder_(model_.get(), model_->EncoderFramesCeil(options.endpoint_silence_ms),
               options.interim_results, options.decoder,
               TextStages{options.inverse_text_normalization ? model_->inverse_normalizer().get()
                                                             : nullptr,
                          options.automatic_punctuation ? model_->punctuator().get() : nullptr}),
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
// Caller-facing calls: check, copy, enqueue.

absl::Status StreamSession::Impl::TerminalStatus() const {
  if (state_ == State::kDone) {
    if (terminal_.ok()) return absl::FailedPreconditionError("the stream has already finished");
    return terminal_;
  }
  return absl::FailedPreconditionError("audio after the end of the stream (Finish)");
}

int64_t StreamSession::Impl::HeldSamples() const {
  return windower_.unprocessed_samples() + (decode_pending_ ? max_buffered_samples_ : 0) +
         static_cast<int64_t>(static_cast<double>(queued_input_bytes_) * samples_per_input_byte_);
}

void StreamSession::Impl::EnqueueInput(Input::Kind kind, absl::Span<const uint8_t> bytes) {
  Input input;
  input.kind = kind;
  input.bytes.assign(bytes.begin(), bytes.end());
  input.arrival = clock_->Now();
  queued_input_bytes_ += static_cast<int64_t>(bytes.size());
  inputs_.push_back(std::move(input));
}

void StreamSession::Impl::PostFrontEnd(void (Impl::*task)()) {
  frontend_->Post([impl = shared_from_this(), task] { (impl.get()->*task)(); });
}

absl::Status StreamSession::Impl::PushAudio(absl::Span<const uint8_t> bytes) {
  absl::Status rejected;
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kActive) return TerminalStatus();
    if (HeldSamples() >= max_buffered_samples_ && !push_granted_) {
      rejected = absl::ResourceExhaustedError(
          absl::StrCat("audio pushed while the session's buffer is full (max_buffered_audio_ms = ",
                       options_.max_buffered_audio_ms, "); wait for on_space_available"));
      Fail(rejected);
      post = NeedDrain();
    } else {
      EnqueueInput(Input::kAudio, bytes);
      push_granted_ = false;
      if (HeldSamples() >= max_buffered_samples_) space_wanted_ = true;
    }
  }
  if (post) PostDrain();
  if (!rejected.ok()) return rejected;
  PostFrontEnd(&Impl::RunInput);
  return absl::OkStatus();
}

bool StreamSession::Impl::CanAcceptAudio() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kActive) return false;
  if (HeldSamples() < max_buffered_samples_ || push_granted_) {
    push_granted_ = true;
    return true;
  }
  space_wanted_ = true;
  return false;
}

int64_t StreamSession::Impl::buffered_audio_ms() const {
  std::lock_guard<std::mutex> lock(mu_);
  return HeldSamples() * 1000 / sample_rate_;
}

absl::Status StreamSession::Impl::ForceFinal() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kActive) return TerminalStatus();
    EnqueueInput(Input::kForceFinal);
  }
  PostFrontEnd(&Impl::RunInput);
  return absl::OkStatus();
}

absl::Status StreamSession::Impl::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kFinishing) return absl::OkStatus();
    if (state_ == State::kDone && terminal_.ok()) return absl::OkStatus();
    if (state_ != State::kActive) return TerminalStatus();
    state_ = State::kFinishing;
    EnqueueInput(Input::kFinish);
  }
  PostFrontEnd(&Impl::RunInput);
  return absl::OkStatus();
}

void StreamSession::Impl::Cancel(bool notify) {
  bool post = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!notify) {
      muted_ = true;
      // The owner may destroy the scheduler once the session is gone: wait for a front-end
      // task that is inside Submit() (a short, non-blocking call) to come out of it.
      submit_done_.wait(lock, [this] { return submitting_ == 0; });
    }
    if (state_ == State::kDone) return;
    outbox_.clear();  // drop results not yet delivered (muted: nothing is delivered anyway)
    Fail(absl::CancelledError(notify ? "the stream was cancelled" : "the session was destroyed"));
    post = NeedDrain();
  }
  if (post) PostDrain();
}

void StreamSession::Impl::Fail(absl::Status status) {
  if (state_ == State::kDone) return;
  state_ = State::kDone;
  terminal_ = status;
  inputs_.clear();
  queued_input_bytes_ = 0;
  Event e;
  e.kind = Event::kDone;
  e.status = std::move(status);
  outbox_.push_back(std::move(e));
  if (!release_posted_) {
    // The audio buffer is the front-end strand's to free (its views may be in use there).
    release_posted_ = true;
    PostFrontEnd(&Impl::RunRelease);
  }
}

bool StreamSession::Impl::AppendAudio(const std::vector<float>& samples, absl::Time arrival) {
  if (windower_.audio_end() + static_cast<int64_t>(samples.size()) > max_stream_samples_) {
    Fail(absl::OutOfRangeError(absl::StrCat("the stream exceeds max_stream_duration_ms = ",
                                            options_.max_stream_duration_ms)));
    return false;
  }
  windower_.Append(samples, arrival);
  return true;
}

// ---------------------------------------------------------------------------------------------
// The front-end strand.

void StreamSession::Impl::RunInput() {
  Input input;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kDone || inputs_.empty()) return;
    if (decode_pending_) {
      ++deferred_input_posts_;
      return;
    }
    input = std::move(inputs_.front());
    inputs_.pop_front();
    // The bytes stay counted in queued_input_bytes_ until their samples are in the windower:
    // HeldSamples() never dips while they are decoded, so flow control cannot let a push
    // through early.
  }
  const int64_t input_bytes = static_cast<int64_t>(input.bytes.size());
  std::vector<float> samples;
  absl::Status decoded;
  if (input.kind == Input::kAudio) {
    decoded = input_->Push(input.bytes, &samples);
  } else if (input.kind == Input::kFinish) {
    decoded = input_->Flush(&samples);
  }
  const bool pending = input_->has_pending();
  if (pending) pending_arrival_ = input.arrival;
  input.bytes = {};
  std::vector<Cut> cuts;
  bool post = false;
  int reposts = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kDone) return;  // cancelled or failed meanwhile (the count is reset)
    queued_input_bytes_ -= input_bytes;
    if (!decoded.ok()) {
      Fail(decoded);
    } else if (AppendAudio(samples, input.arrival)) {
      if (input.kind == Input::kForceFinal) {
        windower_.Flush(WindowSlot::Kind::kForceFinal, input.arrival);
      } else if (input.kind == Input::kFinish) {
        if (pending) {
          finish_deferred_ = true;
          finish_arrival_ = input.arrival;
        } else {
          windower_.Flush(WindowSlot::Kind::kFinish, input.arrival);
        }
      }
      reposts = AfterDecode(pending);
      CutWindows(&cuts);
    }
    post = NeedDrain();
  }
  if (post) PostDrain();
  for (int i = 0; i < reposts; ++i) PostFrontEnd(&Impl::RunInput);
  SubmitCuts(std::move(cuts));
}

int StreamSession::Impl::AfterDecode(bool pending) {
  decode_pending_ = pending;
  decode_stalled_ = pending;  // CutWindows resumes it when the windower has room
  if (pending) return 0;
  if (finish_deferred_) {
    finish_deferred_ = false;
    windower_.Flush(WindowSlot::Kind::kFinish, finish_arrival_);
  }
  const int reposts = deferred_input_posts_;
  deferred_input_posts_ = 0;
  return reposts;
}

void StreamSession::Impl::RunDecodeMore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kDone) return;
  }
  std::vector<float> samples;
  const absl::Status decoded = input_->Continue(&samples);
  const bool pending = input_->has_pending();
  std::vector<Cut> cuts;
  bool post = false;
  int reposts = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kDone) return;
    if (!decoded.ok()) {
      Fail(decoded);
    } else if (AppendAudio(samples, pending_arrival_)) {
      reposts = AfterDecode(pending);
      CutWindows(&cuts);
    }
    post = NeedDrain();
  }
  if (post) PostDrain();
  for (int i = 0; i < reposts; ++i) PostFrontEnd(&Impl::RunInput);
  SubmitCuts(std::move(cuts));
}

void StreamSession::Impl::RunCuts() {
  std::vector<Cut> cuts;
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kDone) return;
    CutWindows(&cuts);
    post = NeedDrain();
  }
  if (post) PostDrain();
  SubmitCuts(std::move(cuts));
}

void StreamSession::Impl::RunRelease() {
  deferred_.clear();
  input_.reset();
  frame_cache_ = FrameCache();
  std::lock_guard<std::mutex> lock(mu_);
  windower_.Clear();
}

void StreamSession::Impl::CutWindows(std::vector<Cut>* cuts) {
  if (state_ == State::kDone) return;
  std::vector<WindowCut> windows;
  windower_.Cut(clock_->Now(), &windows);
  for (WindowCut& w : windows) {
    Cut cut;
    cut.window = w;
    cuts->push_back(std::move(cut));
  }
  ProcessReadySlots();  // a marker with nothing before it in flight
  if (decode_stalled_ && windower_.unprocessed_samples() < max_buffered_samples_) {
    decode_stalled_ = false;
    PostFrontEnd(&Impl::RunDecodeMore);
  }
  MaybeSignalSpace();
}

void StreamSession::Impl::Featurize(Cut* cut) {
  if (cut->featurized) return;
  cut->featurized = true;
  // Consecutive windows overlap (left and right context): frames they share are computed once
  // (bitwise the same features as Compute()).
  absl::StatusOr<Features> f = model_->featurizer().ComputeStreaming(
      cut->window.audio, cut->window.first_sample, &frame_cache_);
  cut->window.audio = {};  // the view is not valid past the next Append()
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

void StreamSession::Impl::SubmitCuts(std::vector<Cut> cuts) {
  for (Cut& cut : cuts) Featurize(&cut);
  if (!deferred_.empty()) {
    cuts.insert(cuts.begin(), std::make_move_iterator(deferred_.begin()),
                std::make_move_iterator(deferred_.end()));
    deferred_.clear();
  }
  for (size_t i = 0; i < cuts.size(); ++i) {
    Cut& cut = cuts[i];
    if (cut.features.valid_frames <= 0) {
      // Too short to give features: a window without frames; nothing to run.
      OnWindowDone(cut.window.seq, WindowResult(), /*from_scheduler=*/false);
      continue;
    }
    WindowRequest request;
    request.features = std::move(cut.features);  // Submit() moves it only when it accepts
    request.priority = options_.priority;
    request.done = [impl = shared_from_this(),
                    seq = cut.window.seq](absl::StatusOr<WindowResult> result) {
      impl->OnWindowDone(seq, std::move(result), /*from_scheduler=*/true);
    };
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (state_ == State::kDone) return;
      ++in_scheduler_;  // before Submit(): its done may run before Submit() returns
      ++submitting_;
    }
    const absl::Status s = scheduler_->Submit(request);
    bool post = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--submitting_ == 0) submit_done_.notify_all();
      if (s.ok()) continue;
      cut.features = std::move(request.features);  // untouched on failure
      --in_scheduler_;
      if (state_ == State::kDone) return;
      // The scheduler's queue is full: if windows of ours are in it, retry when one of them
      // comes back (OnWindowDone posts RunCuts); otherwise none would, so the stream fails.
      if (absl::IsResourceExhausted(s) && in_scheduler_ > 0) {
        deferred_.assign(std::make_move_iterator(cuts.begin() + static_cast<std::ptrdiff_t>(i)),
                         std::make_move_iterator(cuts.end()));
        return;
      }
      Fail(s);
      post = NeedDrain();
    }
    if (post) PostDrain();
    return;
  }
}

void StreamSession::Impl::OnWindowDone(int64_t seq, absl::StatusOr<WindowResult> result,
                                       bool from_scheduler) {
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (from_scheduler) --in_scheduler_;
    if (state_ == State::kDone) return;
    if (!windower_.Complete(seq, std::move(result))) return;
    ProcessReadySlots();
    post = NeedDrain();
  }
  if (post) PostDrain();
  // A window came back: the windower may cut more, deferred windows may fit now. On the
  // front-end strand (when called from there, the task runs after the current one).
  PostFrontEnd(&Impl::RunCuts);
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
        Fail(absl::OkStatus());  // kDone with OK: on_done(OK) after the results
        return;
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
  if (space_wanted_ && state_ == State::kActive && HeldSamples() < max_buffered_samples_) {
    space_wanted_ = false;
    push_granted_ = true;
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
    std::shared_ptr<const Model> model, Scheduler* scheduler, TaskPool* frontend,
    TaskPool* delivery, const StreamingOptions& options, const AudioFormat& format,
    Callbacks callbacks) {
  if (model == nullptr) return absl::InvalidArgumentError("StreamSession: no model");
  if (scheduler == nullptr) return absl::InvalidArgumentError("StreamSession: no scheduler");
  if (frontend == nullptr || delivery == nullptr) {
    return absl::InvalidArgumentError("StreamSession: no front-end or delivery pool");
  }
  if (!callbacks.on_done) return absl::InvalidArgumentError("StreamSession: on_done is required");
  JASPER_RETURN_IF_ERROR(options.Validate());
  JASPER_RETURN_IF_ERROR(CheckTextOptions(*model, options));
  absl::StatusOr<std::unique_ptr<AudioInput>> input =
      AudioInput::Create(format, model->config().featurizer.sample_rate,
                         DecodeSamplesPerCall(options, model->config().featurizer.sample_rate));
  if (!input.ok()) return input.status();
  absl::StatusOr<WindowGeometry> geometry = WindowGeometry::Create(
      *model, options.chunk_ms, options.left_context_ms, options.right_context_ms);
  if (!geometry.ok()) return geometry.status();
  auto impl = std::make_shared<Impl>(std::move(model), scheduler, frontend, delivery, options,
                                     *geometry, format, *std::move(input), std::move(callbacks));
  JASPER_RETURN_IF_ERROR(impl->Init(*geometry));
  return std::unique_ptr<StreamSession>(new StreamSession(std::move(impl)));
}

absl::Status StreamSession::CheckOptions(const Model& model, const StreamingOptions& options) {
  JASPER_RETURN_IF_ERROR(options.Validate());
  JASPER_RETURN_IF_ERROR(CheckTextOptions(model, options));
  absl::StatusOr<WindowGeometry> geometry = WindowGeometry::Create(
      model, options.chunk_ms, options.left_context_ms, options.right_context_ms);
  if (!geometry.ok()) return geometry.status();
  return model.featurizer().PaddedFrames(static_cast<size_t>(geometry->window_samples())).status();
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
