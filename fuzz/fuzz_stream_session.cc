// Fuzz target: a StreamSession (engine/streaming/stream_session.h) fed an arbitrary sequence of
// requests, as the server would pass them on: streaming options and audio format from the "config"
// (any window sizes, rates and encodings, invalid ones included), then pushes of any size
// (honouring flow control or not), force-finals, Finish, Cancel and early destruction, in any
// order. Windows run through the real scheduler with a fake backend (fast, deterministic CTC ids
// derived from the features), so the session's buffering, window cutting, featurization and
// decoding are what is exercised.
//
// Checked: no crash, on_done exactly once (within 20 s of Finish/Cancel), no callback after
// on_done, calls after the end return errors.
//
// Input layout: [options: 8 bytes][format: 2 bytes] then repeated [op][args...].
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "engine/streaming/scheduler.h"
#include "engine/streaming/stream_session.h"
#include "engine/streaming/task_pool.h"
#include "fuzz/fuzz_input.h"

#ifndef JASPER_SOURCE_DIR
#error "JASPER_SOURCE_DIR must be defined (the fixture model is loaded from it)"
#endif

namespace {

// Subsamples by 2 (the fixture's factor); the id of encoder frame t comes from the features of
// input frame 2t, so the decoder sees varied tokens, blanks and repeats.
class FakeBackend : public jasper::Backend {
 public:
  explicit FakeBackend(int vocab) : vocab_(vocab) {}
  absl::Status Run(const jasper::FeatureBatch& in, jasper::BackendOutput* out) override {
    out->batch = in.batch;
    out->time = (in.time + 1) / 2;
    out->vocab = vocab_;
    out->lengths.resize(in.batch);
    out->ids.assign(static_cast<size_t>(out->batch) * out->time, -1);
    out->best_log_probs.assign(out->ids.size(), 0.0f);
    for (int b = 0; b < in.batch; ++b) {
      out->lengths[b] = (in.lengths[b] + 1) / 2;
      for (int t = 0; t < out->lengths[b]; ++t) {
        const float v = in.data[(static_cast<size_t>(b) * in.time + 2 * t) * in.features];
        const int id = static_cast<int>(v * 8.0f) % (2 * vocab_);
        const size_t k = static_cast<size_t>(b) * out->time + t;
        out->ids[k] = id < 0 ? vocab_ - 1 : (id >= vocab_ ? vocab_ - 1 : id);  // often blank
        out->best_log_probs[k] = -0.125f * static_cast<float>(t % 5);
      }
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "fake"; }

 private:
  int vocab_;
};

// The model is loaded once. The scheduler is per input: destroying it joins its threads, so
// every allocation an input caused is freed before the input ends. (A shared scheduler's
// worker could still be freeing a batch when the input returns; libFuzzer then saw more
// mallocs than frees in a third of the inputs and ran a leak check for each, a quarter of the
// run time.)
const std::shared_ptr<const jasper::Model>& GetModel() {
  static const auto* model = [] {
    absl::StatusOr<std::shared_ptr<const jasper::Model>> m = jasper::Model::Load(
        std::string(JASPER_SOURCE_DIR) + "/tests/fixtures/quartznet_small/model");
    if (!m.ok()) abort();
    return new std::shared_ptr<const jasper::Model>(*m);
  }();
  return *model;
}

std::unique_ptr<jasper::Scheduler> MakeScheduler(const jasper::Model& model) {
  std::vector<std::unique_ptr<jasper::Backend>> backends;
  backends.push_back(std::make_unique<FakeBackend>(model.config().num_outputs()));
  jasper::SchedulerOptions options;
  options.max_queue_delay_ms = 0;
  options.max_queued_windows = 64;
  absl::StatusOr<std::unique_ptr<jasper::Scheduler>> s =
      jasper::Scheduler::Create(std::move(backends), options);
  if (!s.ok()) abort();
  return *std::move(s);
}

// Callback recorder, shared with the callbacks so that late deliveries stay memory-safe.
struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  int after_done = 0;
  int space = 0;
  int finals = 0;

  jasper::StreamSession::Callbacks Make(const std::shared_ptr<Recorder>& self) {
    jasper::StreamSession::Callbacks cb;
    cb.on_result = [self](const jasper::SessionResult& r) {
      std::lock_guard<std::mutex> lock(self->mu);
      if (self->done > 0) ++self->after_done;
      if (r.is_final) ++self->finals;
    };
    cb.on_space_available = [self] {
      std::lock_guard<std::mutex> lock(self->mu);
      if (self->done > 0) ++self->after_done;
      ++self->space;
      self->cv.notify_all();
    };
    cb.on_done = [self](absl::Status status) {
      if (std::getenv("JASPER_FUZZ_VERBOSE") != nullptr) {
        std::fprintf(stderr, "on_done: %s\n", status.ToString().c_str());
      }
      std::lock_guard<std::mutex> lock(self->mu);
      ++self->done;
      self->cv.notify_all();
    };
    return cb;
  }
  bool WaitDone(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [this] { return done > 0; });
  }
  void WaitSpace(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    const int seen = space;
    cv.wait_for(lock, timeout, [this, seen] { return space > seen || done > 0; });
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::shared_ptr<const jasper::Model>& model = GetModel();
  jasper::fuzz::FuzzInput in(data, size);

  jasper::StreamingOptions options;
  static constexpr int kChunk[] = {20, 40, 160, 800, 30, 0};
  static constexpr int kContext[] = {0, 20, 160, 800, 1600, 10};
  static constexpr int kEndpoint[] = {0, 20, 100, 800, -1};
  static constexpr int kInflight[] = {1, 2, 4, 0};
  options.chunk_ms = in.Pick(kChunk);
  options.left_context_ms = in.Pick(kContext);
  options.right_context_ms = in.Pick(kContext);
  options.interim_results = (in.U8() & 1) != 0;
  options.endpoint_silence_ms = in.Pick(kEndpoint);
  switch (in.U8() % 4) {
    case 0:
      options.max_buffered_audio_ms = options.chunk_ms + options.right_context_ms;
      break;
    case 1:
      options.max_buffered_audio_ms = 1000;
      break;
    default:
      break;  // the default, 10 s
  }
  options.max_stream_duration_ms = (in.U8() & 1) ? 1000 : 3600000;
  options.max_inflight_windows = in.Pick(kInflight);

  // Compressed encodings last (the seeds' indices stay): their decode steps are bounded and
  // resumed as windows drain (StreamSession's RunDecodeMore).
  static constexpr jasper::AudioEncoding kEncodings[] = {
      jasper::AudioEncoding::kLinearPcm16, jasper::AudioEncoding::kMulaw,
      jasper::AudioEncoding::kAlaw,        jasper::AudioEncoding::kFlac,
      jasper::AudioEncoding::kOggOpus,     jasper::AudioEncoding::kMp3};
  static constexpr int kRates[] = {16000, 8000, 44100, 0, 48000, 5};
  jasper::AudioFormat format;
  format.encoding = in.Pick(kEncodings);
  format.sample_rate_hz = in.Pick(kRates);

  // Declared before the scheduler: its workers post to them until they are joined.
  auto delivery = std::make_unique<jasper::TaskPool>(1);
  auto frontend = std::make_unique<jasper::TaskPool>(1);
  std::unique_ptr<jasper::Scheduler> scheduler = MakeScheduler(*model);
  auto recorder = std::make_shared<Recorder>();
  absl::StatusOr<std::unique_ptr<jasper::StreamSession>> created =
      jasper::StreamSession::Create(model, scheduler.get(), frontend.get(), delivery.get(), options,
                                    format, recorder->Make(recorder));
  static const bool verbose = std::getenv("JASPER_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "create: %s\n", created.status().ToString().c_str());
  if (!created.ok()) return 0;
  std::unique_ptr<jasper::StreamSession> session = *std::move(created);

  bool ended = false;  // Finish() or Cancel() called
  while (!in.empty() && session != nullptr) {
    switch (in.U8() % 8) {
      case 0:
      case 1:
      case 2: {  // audio, honouring flow control
        const size_t n = in.U16() % 4096;
        const std::vector<uint8_t> bytes = in.Bytes(n);
        if (!session->CanAcceptAudio()) recorder->WaitSpace(std::chrono::milliseconds(200));
        if (session->CanAcceptAudio()) (void)session->PushAudio(bytes);
        break;
      }
      case 3: {  // audio regardless of flow control (a misbehaving caller)
        const std::vector<uint8_t> bytes = in.Bytes(in.U8());
        (void)session->PushAudio(bytes);
        break;
      }
      case 4:
        (void)session->ForceFinal();
        break;
      case 5:
        (void)session->Finish();
        ended = true;
        break;
      case 6:
        session->Cancel();
        ended = true;
        break;
      case 7:
        if (in.U8() % 4 == 0) session.reset();  // destroyed mid-stream
        break;
    }
    if (session != nullptr) (void)session->buffered_audio_ms();
  }
  if (session != nullptr) {
    if (!ended) (void)session->Finish();
    if (!recorder->WaitDone(std::chrono::seconds(20))) abort();  // on_done never came: a hang
    // After the end every call fails and nothing more is delivered.
    if (session->PushAudio(std::vector<uint8_t>(2, 0)).ok()) abort();
    session->Cancel();
    session.reset();
  }
  // Joins the workers, then runs every callback already posted and joins the delivery
  // thread: all of this input's callbacks have run after this.
  scheduler.reset();
  frontend.reset();
  delivery.reset();
  std::lock_guard<std::mutex> lock(recorder->mu);
  if (verbose) std::fprintf(stderr, "finals %d done %d\n", recorder->finals, recorder->done);
  if (recorder->done > 1 || recorder->after_done > 0) abort();
  return 0;
}
