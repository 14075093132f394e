// Shared by the StreamSession tests (stream_session_test.cc, stream_session_window_test.cc):
// PCM16 helpers, a callback Collector that checks the delivery rules, and the
// StreamSessionTest fixture with real components (the fixture model, the CPU backend, the
// scheduler, espeak-ng samples from tests/fixtures/audio, made by tools/make_test_audio.sh).
// Header-only. Collector is thread-safe (callbacks arrive on scheduler threads); the rest
// is thread-compatible.
#ifndef JASPER_TESTS_STREAM_SESSION_TEST_UTIL_H_
#define JASPER_TESTS_STREAM_SESSION_TEST_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "engine/audio/wav.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/cpu_backend.h"
#include "engine/streaming/clock.h"
#include "engine/streaming/recognizer.h"
#include "engine/streaming/scheduler.h"
#include "engine/streaming/stream_session.h"
#include "engine/streaming/task_pool.h"
#include "gtest/gtest.h"
#include "tests/edit_distance.h"
#include "tests/test_files.h"

namespace jasper::test_util {

inline std::vector<uint8_t> ToPcm16(const std::vector<float>& x) {
  std::vector<uint8_t> out;
  out.reserve(x.size() * 2);
  for (float v : x) {
    const int s = static_cast<int>(std::lround(std::clamp(v, -1.0f, 1.0f) * 32767.0f));
    out.push_back(static_cast<uint8_t>(s & 0xFF));
    out.push_back(static_cast<uint8_t>((s >> 8) & 0xFF));
  }
  return out;
}

// The samples PCM16 bytes decode to (what the session sees).
inline std::vector<float> FromPcm16(const std::vector<uint8_t>& b) {
  std::vector<float> x(b.size() / 2);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int16_t>(b[2 * i] | (b[2 * i + 1] << 8)) / 32768.0f;
  }
  return x;
}

inline double Cer(const std::string& hyp, const std::string& ref) {
  return ref.empty() ? (hyp.empty() ? 0.0 : 1.0)
                     : static_cast<double>(EditDistance(hyp, ref)) / ref.size();
}

// Records every callback; checks the delivery rules (nothing after on_done, done once, never
// two callbacks at once).
class Collector {
 public:
  StreamSession::Callbacks Callbacks() {
    StreamSession::Callbacks cb;
    cb.on_result = [this](const SessionResult& r) {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_calls_ > 0) ++after_done_;
      (r.is_final ? finals_ : interims_).push_back(r);
      cv_.notify_all();
    };
    cb.on_space_available = [this] {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_calls_ > 0) ++after_done_;
      ++space_;
      cv_.notify_all();
    };
    cb.on_done = [this](absl::Status s) {
      std::lock_guard<std::mutex> lock(mu_);
      ++done_calls_;
      status_ = s;
      cv_.notify_all();
    };
    return cb;
  }
  // Every wait gives up after kWaitLimit (a generous bound, sanitizer builds included), so a
  // broken session fails its test instead of hanging the suite.
  static constexpr std::chrono::seconds kWaitLimit{180};

  // on_done's status; DEADLINE_EXCEEDED when on_done has not come within kWaitLimit.
  absl::Status WaitDone() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, kWaitLimit, [this] { return done_calls_ > 0; })) {
      ADD_FAILURE() << "on_done did not come within " << kWaitLimit.count() << " s";
      return absl::DeadlineExceededError("test wait: no on_done");
    }
    return status_;
  }
  void WaitFinals(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, kWaitLimit,
                      [this, n] { return finals_.size() >= n || done_calls_ > 0; })) {
      ADD_FAILURE() << n << " final results did not come within " << kWaitLimit.count() << " s";
    }
  }
  // False when `n` interim results have not come within 30 s (or the session ended first).
  bool WaitInterims(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(30),
                 [this, n] { return interims_.size() >= n || done_calls_ > 0; });
    return interims_.size() >= n;
  }
  void WaitSpace() { (void)WaitSpaceAfter(0); }
  // Waits for an on_space_available beyond the first `seen` (or the end of the session);
  // false (and the test failed) when neither came within kWaitLimit.
  bool WaitSpaceAfter(int seen) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, kWaitLimit,
                      [this, seen] { return space_ > seen || done_calls_ > 0; })) {
      ADD_FAILURE() << "on_space_available did not come within " << kWaitLimit.count() << " s";
      return false;
    }
    return true;
  }
  int spaces() {
    std::lock_guard<std::mutex> lock(mu_);
    return space_;
  }
  std::vector<SessionResult> finals() {
    std::lock_guard<std::mutex> lock(mu_);
    return finals_;
  }
  std::vector<SessionResult> interims() {
    std::lock_guard<std::mutex> lock(mu_);
    return interims_;
  }
  std::string FinalText() {
    std::vector<std::string> parts;
    for (const SessionResult& r : finals()) {
      if (!r.transcript.empty()) parts.push_back(r.transcript);
    }
    return absl::StrJoin(parts, " ");
  }
  int done_calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_calls_;
  }
  int after_done() {
    std::lock_guard<std::mutex> lock(mu_);
    return after_done_;
  }

 private:
  std::mutex mu_;  // not absl::Mutex: see engine/streaming/clock.h (ThreadSanitizer)
  std::condition_variable cv_;
  // Guarded by mu_:
  std::vector<SessionResult> finals_;
  std::vector<SessionResult> interims_;
  int space_ = 0;
  int done_calls_ = 0;
  int after_done_ = 0;
  absl::Status status_;
};

class StreamSessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::shared_ptr<const Model>> model =
        Model::Load(SourcePath("tests/fixtures/quartznet_small/model"));
    if (model.ok()) model_ = new std::shared_ptr<const Model>(*model);
    absl::StatusOr<Audio> fox = ReadWavFile(SourcePath("tests/fixtures/audio/fox.wav"));
    absl::StatusOr<Audio> hello = ReadWavFile(SourcePath("tests/fixtures/audio/hello.wav"));
    if (fox.ok() && hello.ok()) {
      fox_ = new std::vector<float>(fox->samples);
      hello_ = new std::vector<float>(hello->samples);
    }
  }

  void SetUp() override {
    if (model_ == nullptr || fox_ == nullptr) GTEST_SKIP() << "fixture model or audio missing";
  }

  std::unique_ptr<Scheduler> MakeScheduler(SchedulerOptions options = {}, Clock* clock = nullptr,
                                           int replicas = 1) {
    std::vector<std::unique_ptr<Backend>> backends;
    for (int i = 0; i < replicas; ++i) {
      BackendOptions bo;
      bo.device = Device::kCpu;
      auto b = CreateCpuBackend(*model_, bo);
      EXPECT_TRUE(b.ok()) << b.status();
      backends.push_back(*std::move(b));
    }
    auto s = Scheduler::Create(std::move(backends), options, clock);
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  }

  std::unique_ptr<StreamSession> MakeSession(Scheduler* scheduler, Collector* collector,
                                             StreamingOptions options = {},
                                             AudioFormat format = {AudioEncoding::kLinearPcm16,
                                                                   16000, 1}) {
    auto s = StreamSession::Create(*model_, scheduler, &frontend_, &delivery_, options, format,
                                   collector->Callbacks());
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  // Streams `bytes` in pieces (sizes cycled), honouring CanAcceptAudio, then Finish; returns
  // the final status.
  static absl::Status StreamAll(StreamSession* session, Collector* collector,
                                const std::vector<uint8_t>& bytes,
                                const std::vector<size_t>& pieces) {
    size_t pos = 0, k = 0;
    while (pos < bytes.size()) {
      // As the server does: push only after CanAcceptAudio() or a new on_space_available.
      for (;;) {
        const int seen = collector->spaces();
        if (session->CanAcceptAudio() || collector->done_calls() > 0) break;
        if (!collector->WaitSpaceAfter(seen)) {
          return absl::DeadlineExceededError("test wait: no on_space_available");
        }
      }
      const size_t n = std::min(pieces[k++ % pieces.size()], bytes.size() - pos);
      absl::Status s = session->PushAudio(absl::MakeConstSpan(bytes).subspan(pos, n));
      if (!s.ok()) return s;
      pos += n;
    }
    if (absl::Status s = session->Finish(); !s.ok()) return s;
    return collector->WaitDone();
  }

  std::string Offline(const std::vector<float>& samples) {
    BackendOptions bo;
    bo.device = Device::kCpu;
    auto rec = OfflineRecognizer::Create(*model_, bo);
    EXPECT_TRUE(rec.ok());
    auto t = (*rec)->RecognizeBatch({absl::MakeConstSpan(samples)});
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? (*t)[0].text : "";
  }

  static std::vector<float> Silence(double seconds) {
    return std::vector<float>(static_cast<size_t>(16000 * seconds), 0.0f);
  }
  static std::vector<float> Concat(std::initializer_list<std::vector<float>> parts) {
    std::vector<float> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  }

  // The same finals: text, utterance, audio covered, words and their times.
  static void ExpectSameFinals(const std::vector<SessionResult>& got,
                               const std::vector<SessionResult>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].transcript, want[i].transcript) << i;
      EXPECT_EQ(got[i].utterance_index, want[i].utterance_index) << i;
      EXPECT_EQ(got[i].audio_processed_s, want[i].audio_processed_s) << i;
      ASSERT_EQ(got[i].words.size(), want[i].words.size()) << i;
      for (size_t w = 0; w < want[i].words.size(); ++w) {
        EXPECT_EQ(got[i].words[w].word, want[i].words[w].word);
        EXPECT_EQ(got[i].words[w].start_ms, want[i].words[w].start_ms);
        EXPECT_EQ(got[i].words[w].end_ms, want[i].words[w].end_ms);
      }
    }
  }

  inline static std::shared_ptr<const Model>* model_ = nullptr;
  inline static std::vector<float>* fox_ = nullptr;
  inline static std::vector<float>* hello_ = nullptr;
  // Sessions run their audio work on frontend_ and deliver on delivery_. Fixture members, so
  // they outlive the schedulers the tests make (their workers post to them until joined).
  TaskPool frontend_{2};
  TaskPool delivery_{1};
};

}  // namespace jasper::test_util

#endif  // JASPER_TESTS_STREAM_SESSION_TEST_UTIL_H_
