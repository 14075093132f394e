// Where a session's work runs (issue 28; engine/streaming/task_pool.h): the caller-facing calls
// only enqueue (no audio work on the caller's thread, which in the server is a gRPC reaction or a
// delivery callback), and one session's slow consumer holds back no other session's results.
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

}  // namespace
}  // namespace jasper
