// Where a session's work runs (issue 28; engine/streaming/task_pool.h): the caller-facing calls
// only enqueue (no audio work on the caller's thread, which in the server is a gRPC reaction or a
// delivery callback), and one session's slow consumer holds back no other session's results.
// Interactive sessions go before bulk ones (engine/streaming/priority.h).
// Real components (tests/stream_session_test_util.h); each test makes its own pools.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/cpu_backend.h"
#include "engine/streaming/priority.h"
#include "engine/streaming/scheduler.h"
#include "engine/streaming/stream_session.h"
#include "engine/streaming/task_pool.h"
#include "gtest/gtest.h"
#include "tests/stream_session_test_util.h"

namespace jasper {
namespace {

using test_util::Collector;
using test_util::StreamSessionTest;
using test_util::ToPcm16;

// A latch a test opens once.
class Gate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return open_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

class StreamSessionThreadsTest : public StreamSessionTest {
 protected:
  // The final text of `samples` streamed through a session on the fixture's pools (streaming
  // differs from offline recognition past one window).
  std::string Streamed(const std::vector<float>& samples, StreamingOptions options = {}) {
    auto scheduler = MakeScheduler();
    Collector c;
    auto session = MakeSession(scheduler.get(), &c, options);
    EXPECT_TRUE(StreamAll(session.get(), &c, ToPcm16(samples), {3200}).ok());
    return c.FinalText();
  }

  // A 16 kHz PCM session on the given pools; null (and the test failed) when Create fails.
  std::unique_ptr<StreamSession> SessionOn(Scheduler* scheduler, TaskPool* frontend,
                                           TaskPool* delivery, const StreamingOptions& options,
                                           StreamSession::Callbacks callbacks) {
    auto session =
        StreamSession::Create(*model_, scheduler, frontend, delivery, options,
                              {AudioEncoding::kLinearPcm16, 16000, 1}, std::move(callbacks));
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? *std::move(session) : nullptr;
  }
};

// With the front-end pool's only thread held, PushAudio and Finish still return at once and
// nothing has been featurized or submitted: the audio waits, counted in the buffer, for the
// session's front-end strand. Released, the session runs to the transcript it gets otherwise.
TEST_F(StreamSessionThreadsTest, CallerFacingCallsOnlyEnqueue) {
  auto scheduler = MakeScheduler();
  TaskPool frontend(1);
  TaskPool delivery(1);
  Gate gate;
  auto blocker = frontend.NewStrand();
  blocker->Post([&gate] { gate.Wait(); });
  Collector c;
  StreamingOptions o;
  o.max_buffered_audio_ms = 20000;
  auto session = SessionOn(scheduler.get(), &frontend, &delivery, o, c.Callbacks());
  ASSERT_NE(session, nullptr);
  const std::vector<uint8_t> bytes = ToPcm16(*fox_);
  ASSERT_TRUE(session->PushAudio(bytes).ok());
  ASSERT_TRUE(session->Finish().ok());
  EXPECT_EQ(scheduler->Stats().submitted, 0);  // no window was cut on this thread
  EXPECT_GE(session->buffered_audio_ms(), static_cast<int64_t>(fox_->size() / 16) - 1);
  EXPECT_EQ(c.done_calls(), 0);
  gate.Open();
  ASSERT_TRUE(c.WaitDone().ok());
  EXPECT_GT(scheduler->Stats().submitted, 0);
  EXPECT_EQ(c.FinalText(), Streamed(*fox_, o));
}

// Session A's consumer blocks in its first result callback; session B, on the same pools, still
// gets all its results and its on_done (a single delivery thread would hold them behind A).
TEST_F(StreamSessionThreadsTest, ASlowConsumerHoldsBackNoOtherSession) {
  auto scheduler = MakeScheduler();
  TaskPool frontend(2);
  TaskPool delivery(2);
  Gate release_a;
  std::atomic<bool> a_blocked{false};
  Collector a;
  StreamSession::Callbacks a_callbacks = a.Callbacks();
  a_callbacks.on_result = [&, inner = a_callbacks.on_result](const SessionResult& r) {
    if (!a_blocked.exchange(true)) release_a.Wait();
    inner(r);
  };
  StreamingOptions o;
  o.endpoint_silence_ms = 0;
  auto session_a = SessionOn(scheduler.get(), &frontend, &delivery, o, std::move(a_callbacks));
  ASSERT_NE(session_a, nullptr);
  ASSERT_TRUE(session_a->PushAudio(ToPcm16(*hello_)).ok());
  ASSERT_TRUE(session_a->Finish().ok());
  while (!a_blocked.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  Collector b;
  auto session_b = SessionOn(scheduler.get(), &frontend, &delivery, o, b.Callbacks());
  ASSERT_NE(session_b, nullptr);
  std::future<absl::Status> b_done = std::async(
      std::launch::async, [&] { return StreamAll(session_b.get(), &b, ToPcm16(*fox_), {3200}); });
  const bool b_finished = b_done.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  EXPECT_TRUE(b_finished) << "session B's results waited behind session A's consumer";
  EXPECT_EQ(a.done_calls(), 0);  // A is still held
  release_a.Open();
  EXPECT_TRUE(b_done.get().ok());
  EXPECT_EQ(b.FinalText(), Streamed(*fox_, o));
  EXPECT_TRUE(a.WaitDone().ok());
  EXPECT_EQ(a.FinalText(), Streamed(*hello_, o));
}

// A session whose audio waits in a long backlog on the front-end strand (a long offline
// request pushed in pieces) takes turns with the others: a short stream started after it ends
// long before the backlog is through.
TEST_F(StreamSessionThreadsTest, ALongBacklogTakesTurnsWithShortStreams) {
  auto scheduler = MakeScheduler();
  TaskPool frontend(1);
  TaskPool delivery(1);
  Collector a;
  StreamingOptions long_options;
  long_options.max_buffered_audio_ms = 120000;
  long_options.endpoint_silence_ms = 0;
  auto session_a = SessionOn(scheduler.get(), &frontend, &delivery, long_options, a.Callbacks());
  ASSERT_NE(session_a, nullptr);
  const std::vector<uint8_t> fox = ToPcm16(*fox_);
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(session_a->PushAudio(fox).ok());  // ~85 s
  ASSERT_TRUE(session_a->Finish().ok());

  Collector b;
  auto session_b = SessionOn(scheduler.get(), &frontend, &delivery, {}, b.Callbacks());
  ASSERT_NE(session_b, nullptr);
  ASSERT_TRUE(StreamAll(session_b.get(), &b, ToPcm16(*hello_), {1600}).ok());
  EXPECT_EQ(a.done_calls(), 0) << "the short stream waited for the whole backlog";
  EXPECT_TRUE(a.WaitDone().ok());
}

// Records every batch the scheduler runs, in order (batches of one request in these tests).
class BatchLog : public SchedulerObserver {
 public:
  void OnBatch(const BatchReport& report) override {
    std::lock_guard<std::mutex> lock(mu_);
    batches_.push_back(report);
  }
  void OnRejected(const absl::Status&) override {}
  // The index of the first batch with fewer than `frames` valid feature frames (-1: none).
  int FirstShorterThan(int64_t frames) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < batches_.size(); ++i) {
      if (batches_[i].valid_frames < frames) return static_cast<int>(i);
    }
    return -1;
  }

 private:
  std::mutex mu_;
  std::vector<BatchReport> batches_;  // guarded by mu_
};

// The real CPU backend behind a gate: Run waits until the test opens it, so the scheduler's
// queue can be filled to a known depth before anything runs.
class GatedBackend : public Backend {
 public:
  GatedBackend(std::unique_ptr<Backend> inner, Gate* gate)
      : inner_(std::move(inner)), gate_(gate) {}
  absl::Status Run(const FeatureBatch& input, BackendOutput* output) override {
    gate_->Wait();
    return inner_->Run(input, output);
  }
  std::string name() const override { return inner_->name(); }

 private:
  std::unique_ptr<Backend> inner_;
  Gate* const gate_;
};

class StreamSessionPriorityTest : public StreamSessionThreadsTest {
 protected:
  // Six long sessions of priority `others` fill the scheduler's queue (one worker held at its
  // first batch, batches of one, each session at its limit of 4 windows in flight: 23 queued);
  // then a short stream queues its windows behind them and the worker is let go. Returns the
  // batches that ran before the stream's first window (the held one included); -1 when the
  // setup failed.
  int BatchesAheadOfAStream(Priority others) {
    constexpr int kLong = 6;
    constexpr int kInflight = 4;
    // Destroyed in reverse: the sessions, then the gate opened, then the scheduler (which the
    // observer and both pools outlive).
    Gate gate;
    TaskPool frontend(1);
    TaskPool delivery(1);
    BatchLog log;
    std::vector<std::unique_ptr<Backend>> backends;
    BackendOptions bo;
    bo.device = Device::kCpu;
    absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateCpuBackend(*model_, bo);
    if (!cpu.ok()) return -1;
    backends.push_back(std::make_unique<GatedBackend>(*std::move(cpu), &gate));
    SchedulerOptions so;
    so.max_batch_size = 1;
    so.max_queue_delay_ms = 0;
    absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
        Scheduler::Create(std::move(backends), so);
    if (!scheduler.ok()) return -1;
    (*scheduler)->SetObserver(&log);
    struct OpenOnExit {
      Gate* gate;
      ~OpenOnExit() { gate->Open(); }
    } open_on_exit{&gate};
    StreamingOptions long_options;
    long_options.priority = others;
    long_options.max_buffered_audio_ms = 60000;
    long_options.max_inflight_windows = kInflight;
    long_options.endpoint_silence_ms = 0;
    const std::vector<uint8_t> fox = ToPcm16(*fox_);
    std::vector<Collector> long_collectors(kLong);
    std::vector<std::unique_ptr<StreamSession>> long_sessions;
    for (int i = 0; i < kLong; ++i) {
      long_sessions.push_back(SessionOn(scheduler->get(), &frontend, &delivery, long_options,
                                        long_collectors[i].Callbacks()));
      if (long_sessions.back() == nullptr) return -1;
      for (int k = 0; k < 6; ++k) EXPECT_TRUE(long_sessions.back()->PushAudio(fox).ok());
      EXPECT_TRUE(long_sessions.back()->Finish().ok());
    }
    const auto wait_queued = [&](int64_t n) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while ((*scheduler)->Stats().queue_depth < n) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return true;
    };
    constexpr int kQueued = kLong * kInflight - 1;  // one is held in the worker
    if (!wait_queued(kQueued)) {
      ADD_FAILURE() << "the long sessions did not fill the queue";
      return -1;
    }
    Collector c;
    auto session = SessionOn(scheduler->get(), &frontend, &delivery, {}, c.Callbacks());
    EXPECT_NE(session, nullptr);
    EXPECT_TRUE(session->PushAudio(ToPcm16(*hello_)).ok());  // < 1 s: no window before Finish
    EXPECT_TRUE(session->Finish().ok());
    // Finish cuts the stream's audio into two windows (its chunk, then the tail).
    const bool queued = wait_queued(kQueued + 2);
    EXPECT_TRUE(queued) << "the stream's windows did not reach the scheduler";
    gate.Open();
    EXPECT_TRUE(c.WaitDone().ok());
    EXPECT_FALSE(c.FinalText().empty());
    for (Collector& l : long_collectors) EXPECT_TRUE(l.WaitDone().ok());
    (*scheduler)->Shutdown();
    (*scheduler)->SetObserver(nullptr);
    // The stream's windows (under 1 s of audio: < 100 frames) are the only short ones until the
    // long sessions' last windows (after 17 s of audio each; theirs are >= 160 frames before):
    // the batches before the first of them ran ahead of it.
    return queued ? log.FirstShorterThan(100) : -1;
  }
};

TEST_F(StreamSessionPriorityTest, AStreamsWindowGoesBeforeQueuedBulkWindows) {
  // With priorities, only the batch already running goes first.
  EXPECT_EQ(BatchesAheadOfAStream(Priority::kBulk), 1);
  // Control, one class (first come, first served): the whole queue (23 + the held one) goes
  // first.
  EXPECT_EQ(BatchesAheadOfAStream(Priority::kInteractive), 24);
}

}  // namespace
}  // namespace jasper
