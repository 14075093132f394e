// Scheduler tests (std::mutex, not absl::Mutex: see engine/streaming/clock.h): batching by length
// bucket, max batch size, max queue delay (fake clock, no sleeps), bounded admission, shutdown
// semantics, done exactly once, and batch independence through the real CPU backend.
#include "engine/streaming/scheduler.h"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/audio/wav.h"
#include "engine/features/features.h"
#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/cpu_backend.h"
#include "engine/streaming/clock.h"
#include "gtest/gtest.h"
#include "tests/test_files.h"

namespace jasper {
namespace {

constexpr int kWidth = 4;

// Features whose frame t holds `marker * 1000 + t` in channel 0, so that the fake backend's
// output tells which request (and frame) it came from.
Features MakeFeatures(int marker, int valid_frames, int padded_frames) {
  Features f;
  f.num_features = kWidth;
  f.valid_frames = valid_frames;
  f.padded_frames = padded_frames;
  f.data.assign(static_cast<size_t>(padded_frames) * kWidth, 0.0f);
  for (int t = 0; t < valid_frames; ++t)
    f.data[static_cast<size_t>(t) * kWidth] = marker * 1000 + t;
  return f;
}

struct BatchRecord {
  int batch = 0;
  int time = 0;
  std::vector<int> lengths;
  std::vector<int> markers;
};

// A backend that subsamples by 2 and outputs, per encoder frame t, the channel-0 value of input
// frame 2t as the id. Can be paused (Run blocks until resumed) and poisoned (a batch containing
// the poison marker fails).
class FakeBackend : public Backend {
 public:
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<BatchRecord> batches;  // guarded by mu
    bool paused = false;               // guarded by mu
    int running = 0;                   // guarded by mu
    int poison_marker = -1;
  };
  explicit FakeBackend(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  absl::Status Run(const FeatureBatch& in, BackendOutput* out) override {
    BatchRecord rec;
    rec.batch = in.batch;
    rec.time = in.time;
    bool poisoned = false;
    for (int b = 0; b < in.batch; ++b) {
      rec.lengths.push_back(in.lengths[b]);
      const int marker =
          static_cast<int>(in.data[static_cast<size_t>(b) * in.time * in.features]) / 1000;
      rec.markers.push_back(marker);
      if (marker == shared_->poison_marker) poisoned = true;
    }
    {
      std::unique_lock<std::mutex> lock(shared_->mu);
      shared_->batches.push_back(rec);
      ++shared_->running;
      shared_->cv.notify_all();
      shared_->cv.wait(lock, [this] { return !shared_->paused; });
      --shared_->running;
    }
    if (poisoned) return absl::InternalError("poisoned batch");
    out->batch = in.batch;
    out->time = (in.time + 1) / 2;
    out->vocab = 1;
    out->lengths.resize(in.batch);
    out->ids.assign(static_cast<size_t>(out->batch) * out->time, -1);
    out->best_log_probs.assign(out->ids.size(), 0.0f);
    for (int b = 0; b < in.batch; ++b) {
      out->lengths[b] = (in.lengths[b] + 1) / 2;
      for (int t = 0; t < out->lengths[b]; ++t) {
        out->ids[static_cast<size_t>(b) * out->time + t] =
            static_cast<int>(in.data[(static_cast<size_t>(b) * in.time + 2 * t) * in.features]);
        out->best_log_probs[static_cast<size_t>(b) * out->time + t] = -0.25f;
      }
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "fake"; }

 private:
  std::shared_ptr<Shared> shared_;
};

// Collects done callbacks; counts calls per request id.
class Results {
 public:
  std::function<void(absl::StatusOr<WindowResult>)> Done(int id) {
    return [this, id](absl::StatusOr<WindowResult> r) {
      std::lock_guard<std::mutex> lock(mu_);
      ++calls_[id];
      results_[id] = std::move(r);
      cv_.notify_all();
    };
  }
  void WaitFor(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this, n] {
      int total = 0;
      for (const auto& [id, c] : calls_) total += c;
      return total >= n;
    });
  }
  int Calls(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_.count(id) ? calls_[id] : 0;
  }
  int Total() {
    std::lock_guard<std::mutex> lock(mu_);
    int total = 0;
    for (const auto& [id, c] : calls_) total += c;
    return total;
  }
  absl::StatusOr<WindowResult> Get(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    return results_.at(id);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, int> calls_;                             // guarded by mu_
  std::map<int, absl::StatusOr<WindowResult>> results_;  // guarded by mu_
};

class SchedulerTest : public ::testing::Test {
 protected:
  void Start(SchedulerOptions options, int replicas = 1) {
    std::vector<std::unique_ptr<Backend>> backends;
    for (int i = 0; i < replicas; ++i) backends.push_back(std::make_unique<FakeBackend>(shared_));
    auto s = Scheduler::Create(std::move(backends), options, &clock_);
    ASSERT_TRUE(s.ok()) << s.status();
    scheduler_ = *std::move(s);
  }
  absl::Status Submit(int id, int valid, int padded, Priority priority = Priority::kInteractive) {
    WindowRequest r;
    r.features = MakeFeatures(id, valid, padded);
    r.done = results_.Done(id);
    r.priority = priority;
    return scheduler_->Submit(std::move(r));
  }
  void Pause() {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->paused = true;
  }
  void Resume() {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->paused = false;
    shared_->cv.notify_all();
  }
  void WaitRunning(int n) {
    std::unique_lock<std::mutex> lock(shared_->mu);
    shared_->cv.wait(lock, [this, n] { return shared_->running >= n; });
  }
  std::vector<BatchRecord> Batches() {
    std::lock_guard<std::mutex> lock(shared_->mu);
    return shared_->batches;
  }
  // Occupies the (single) worker with a paused batch so that what is submitted next queues up.
  void OccupyWorker(int marker) {
    Pause();
    ASSERT_TRUE(Submit(marker, 2, 2).ok());
    clock_.BlockUntilWaiters(1);
    clock_.Advance(absl::Milliseconds(scheduler_->options().max_queue_delay_ms));
    WaitRunning(1);
  }

  FakeClock clock_;
  std::shared_ptr<FakeBackend::Shared> shared_ = std::make_shared<FakeBackend::Shared>();
  Results results_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, OptionsValidateNamesTheField) {
  SchedulerOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.max_batch_size = 0;
  EXPECT_NE(o.Validate().message().find("max_batch_size"), std::string::npos);
  o = SchedulerOptions();
  o.max_queue_delay_ms = -1;
  EXPECT_NE(o.Validate().message().find("max_queue_delay_ms"), std::string::npos);
  o = SchedulerOptions();
  o.max_queued_windows = 0;
  EXPECT_NE(o.Validate().message().find("max_queued_windows"), std::string::npos);
  o = SchedulerOptions();
  o.bucket_frames = {100, 50};
  EXPECT_NE(o.Validate().message().find("bucket_frames"), std::string::npos);
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Scheduler::Create({}, SchedulerOptions()).ok());
}

TEST_F(SchedulerTest, BucketOf) {
  SchedulerOptions o;
  o.bucket_frames = {100, 200};
  Start(o);
  EXPECT_EQ(scheduler_->BucketOf(1), 0);
  EXPECT_EQ(scheduler_->BucketOf(100), 0);
  EXPECT_EQ(scheduler_->BucketOf(101), 1);
  EXPECT_EQ(scheduler_->BucketOf(200), 1);
  EXPECT_EQ(scheduler_->BucketOf(201), 2);  // overflow
}

TEST_F(SchedulerTest, BatchesByBucketAndPadsToLongestMember) {
  SchedulerOptions o;
  o.max_batch_size = 4;
  o.max_queue_delay_ms = 100;
  o.bucket_frames = {64, 128};
  Start(o);
  OccupyWorker(99);
  // Short (bucket 0) and long (bucket 1) requests, interleaved.
  ASSERT_TRUE(Submit(1, 30, 48).ok());
  ASSERT_TRUE(Submit(2, 100, 112).ok());
  ASSERT_TRUE(Submit(3, 60, 64).ok());
  ASSERT_TRUE(Submit(4, 20, 32).ok());
  ASSERT_TRUE(Submit(5, 128, 128).ok());
  Resume();
  // The oldest (1) waits for its bucket to fill, up to its deadline.
  clock_.BlockUntilWaiters(1);
  clock_.Advance(absl::Milliseconds(100));
  results_.WaitFor(6);
  const std::vector<BatchRecord> batches = Batches();
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[1].markers, (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(batches[1].lengths, (std::vector<int>{30, 60, 20}));
  EXPECT_EQ(batches[1].time, 64);  // padded to the longest member, not to the bucket bound
  EXPECT_EQ(batches[2].markers, (std::vector<int>{2, 5}));
  EXPECT_EQ(batches[2].time, 128);
  // Each result is its own request's frames, trimmed to its valid length.
  for (int id : {1, 2, 3, 4, 5}) {
    absl::StatusOr<WindowResult> r = results_.Get(id);
    ASSERT_TRUE(r.ok()) << r.status();
    const int valid = std::map<int, int>{{1, 30}, {2, 100}, {3, 60}, {4, 20}, {5, 128}}[id];
    EXPECT_EQ(r->encoder_frames, (valid + 1) / 2);
    ASSERT_EQ(r->ids.size(), static_cast<size_t>((valid + 1) / 2));
    for (int t = 0; t < r->encoder_frames; ++t) EXPECT_EQ(r->ids[t], id * 1000 + 2 * t);
    EXPECT_EQ(r->batch_size, (id == 2 || id == 5) ? 2 : 3);
  }
  const SchedulerStats stats = scheduler_->Stats();
  EXPECT_EQ(stats.batches, 3);
  EXPECT_EQ(stats.completed, 6);
  EXPECT_EQ(stats.max_batch_size_seen, 3);
  EXPECT_EQ(stats.bucket_requests, (std::vector<int64_t>{4, 2, 0}));
}

TEST_F(SchedulerTest, MaxBatchSizeSplitsABucket) {
  SchedulerOptions o;
  o.max_batch_size = 2;
  o.max_queue_delay_ms = 50;
  o.bucket_frames = {64};
  Start(o);
  OccupyWorker(99);
  for (int id = 1; id <= 5; ++id) ASSERT_TRUE(Submit(id, 10, 16).ok());
  Resume();
  // Two full batches go at once; the fifth request waits for its deadline.
  results_.WaitFor(5);
  clock_.BlockUntilWaiters(1);
  EXPECT_EQ(results_.Calls(5), 0);
  clock_.Advance(absl::Milliseconds(50));
  results_.WaitFor(6);
  const std::vector<BatchRecord> batches = Batches();
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[1].markers, (std::vector<int>{1, 2}));
  EXPECT_EQ(batches[2].markers, (std::vector<int>{3, 4}));
  EXPECT_EQ(batches[3].markers, (std::vector<int>{5}));
}

TEST_F(SchedulerTest, MaxQueueDelayOnTheFakeClock) {
  SchedulerOptions o;
  o.max_batch_size = 8;
  o.max_queue_delay_ms = 5;
  Start(o);
  ASSERT_TRUE(Submit(1, 10, 16).ok());
  clock_.BlockUntilWaiters(1);
  clock_.Advance(absl::Milliseconds(4));
  clock_.BlockUntilWaiters(1);  // still waiting: 4 ms < 5 ms
  EXPECT_EQ(results_.Calls(1), 0);
  clock_.Advance(absl::Milliseconds(1));
  results_.WaitFor(1);
  absl::StatusOr<WindowResult> r = results_.Get(1);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->queue_ms, 5.0);
  EXPECT_EQ(r->batch_size, 1);
}

TEST_F(SchedulerTest, ZeroDelayRunsAtOnce) {
  SchedulerOptions o;
  o.max_queue_delay_ms = 0;
  Start(o);
  ASSERT_TRUE(Submit(1, 10, 16).ok());
  results_.WaitFor(1);  // no clock advance needed
  EXPECT_EQ(clock_.waiters(), 0);
}

TEST_F(SchedulerTest, FullQueueRejectsWithoutTakingOwnership) {
  SchedulerOptions o;
  o.max_queued_windows = 3;
  o.max_queue_delay_ms = 10;
  Start(o);
  OccupyWorker(99);
  for (int id = 1; id <= 3; ++id) ASSERT_TRUE(Submit(id, 10, 16).ok());
  WindowRequest extra;
  extra.features = MakeFeatures(4, 10, 16);
  extra.done = results_.Done(4);
  const absl::Status s = scheduler_->Submit(std::move(extra));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  // Not taken: the request is intact and can be submitted again later.
  EXPECT_TRUE(extra.done != nullptr);
  EXPECT_EQ(extra.features.data.size(), 16u * kWidth);
  EXPECT_EQ(scheduler_->Stats().rejected, 1);
  EXPECT_EQ(scheduler_->Stats().queue_depth, 3);
  Resume();
  clock_.BlockUntilWaiters(1);
  clock_.Advance(absl::Milliseconds(10));
  results_.WaitFor(4);
  ASSERT_TRUE(scheduler_->Submit(std::move(extra)).ok());
  clock_.BlockUntilWaiters(1);
  clock_.Advance(absl::Milliseconds(10));
  results_.WaitFor(5);
  EXPECT_EQ(results_.Calls(4), 1);
}

TEST_F(SchedulerTest, InvalidRequestIsRejected) {
  Start(SchedulerOptions());
  WindowRequest r;
  r.features = MakeFeatures(1, 10, 16);
  EXPECT_EQ(scheduler_->Submit(r).code(), absl::StatusCode::kInvalidArgument);  // no done
  r.done = results_.Done(1);
  r.features.valid_frames = 17;
  EXPECT_EQ(scheduler_->Submit(r).code(), absl::StatusCode::kInvalidArgument);
  r.features.valid_frames = 10;
  r.features.data.pop_back();
  EXPECT_EQ(scheduler_->Submit(r).code(), absl::StatusCode::kInvalidArgument);
  r.features = MakeFeatures(1, 10, 16);
  r.priority = static_cast<Priority>(kNumPriorities);
  EXPECT_EQ(scheduler_->Submit(r).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(r.done != nullptr);
}

TEST_F(SchedulerTest, InteractiveRequestsGoFirstAndNeverShareABatchWithBulk) {
  SchedulerOptions o;
  o.max_batch_size = 2;
  o.max_queue_delay_ms = 100;
  o.bucket_frames = {64};
  Start(o);
  OccupyWorker(99);
  // Bulk requests queue first (two full batches and a half one), then interactive ones.
  for (int id = 1; id <= 5; ++id) ASSERT_TRUE(Submit(id, 10, 16, Priority::kBulk).ok());
  ASSERT_TRUE(Submit(6, 10, 16).ok());
  ASSERT_TRUE(Submit(7, 10, 16).ok());
  ASSERT_TRUE(Submit(8, 10, 16).ok());
  SchedulerStats stats = scheduler_->Stats();
  EXPECT_EQ(stats.queue_depth, 8);
  EXPECT_EQ(stats.bulk_queue_depth, 5);
  Resume();
  // The full interactive batch goes at once; the half one (8) waits for its deadline, and the
  // full bulk batches wait behind it.
  results_.WaitFor(3);
  clock_.BlockUntilWaiters(1);
  EXPECT_EQ(results_.Calls(8), 0);
  EXPECT_EQ(results_.Calls(1), 0);
  clock_.Advance(absl::Milliseconds(100));
  results_.WaitFor(9);
  const std::vector<BatchRecord> batches = Batches();
  ASSERT_EQ(batches.size(), 6u);
  EXPECT_EQ(batches[1].markers, (std::vector<int>{6, 7}));
  EXPECT_EQ(batches[2].markers, (std::vector<int>{8}));
  EXPECT_EQ(batches[3].markers, (std::vector<int>{1, 2}));
  EXPECT_EQ(batches[4].markers, (std::vector<int>{3, 4}));
  EXPECT_EQ(batches[5].markers, (std::vector<int>{5}));
  stats = scheduler_->Stats();
  EXPECT_EQ(stats.queue_depth, 0);
  EXPECT_EQ(stats.bulk_queue_depth, 0);
  EXPECT_EQ(stats.completed, 9);
}

TEST_F(SchedulerTest, AWorkerWaitingForABulkBatchTakesAnInteractiveRequest) {
  SchedulerOptions o;
  o.max_batch_size = 4;
  o.max_queue_delay_ms = 100;
  Start(o);
  ASSERT_TRUE(Submit(1, 10, 16, Priority::kBulk).ok());
  clock_.BlockUntilWaiters(1);  // the worker waits for the bulk batch to fill
  clock_.Advance(absl::Milliseconds(50));
  ASSERT_TRUE(Submit(2, 10, 16).ok());
  // The worker now waits for the interactive request's batch (deadline 150 ms), not the bulk
  // one's (100 ms): at 100 ms nothing has run.
  clock_.BlockUntilWaiters(1);
  clock_.Advance(absl::Milliseconds(50));
  clock_.BlockUntilWaiters(1);
  EXPECT_EQ(results_.Total(), 0);
  clock_.Advance(absl::Milliseconds(50));
  results_.WaitFor(2);
  const std::vector<BatchRecord> batches = Batches();
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].markers, (std::vector<int>{2}));
  EXPECT_EQ(batches[1].markers, (std::vector<int>{1}));
}

TEST_F(SchedulerTest, ShutdownDrainsQueuedWorkThenRefuses) {
  SchedulerOptions o;
  o.max_queue_delay_ms = 10000;  // would wait 10 s (fake) for a full batch
  o.max_batch_size = 64;
  Start(o);
  for (int id = 1; id <= 10; ++id) ASSERT_TRUE(Submit(id, 10, 16).ok());
  scheduler_->Shutdown();  // no clock advance: shutdown must not wait for the batch deadline
  EXPECT_EQ(results_.Total(), 10);
  for (int id = 1; id <= 10; ++id) {
    EXPECT_EQ(results_.Calls(id), 1);
    EXPECT_TRUE(results_.Get(id).ok());
  }
  EXPECT_EQ(Submit(11, 10, 16).code(), absl::StatusCode::kUnavailable);
  scheduler_->Shutdown();  // idempotent
  scheduler_.reset();
  EXPECT_EQ(results_.Calls(11), 0);
}

TEST_F(SchedulerTest, DestructorDrainsToo) {
  SchedulerOptions o;
  o.max_queue_delay_ms = 10000;
  Start(o);
  for (int id = 1; id <= 3; ++id) ASSERT_TRUE(Submit(id, 10, 16).ok());
  scheduler_.reset();
  EXPECT_EQ(results_.Total(), 3);
}

TEST_F(SchedulerTest, FailingBatchMemberDoesNotFailTheOthers) {
  SchedulerOptions o;
  o.max_queue_delay_ms = 10;
  shared_->poison_marker = 2;
  Start(o);
  OccupyWorker(99);
  for (int id = 1; id <= 3; ++id) ASSERT_TRUE(Submit(id, 10, 16).ok());
  Resume();
  clock_.BlockUntilWaiters(1);
  clock_.Advance(absl::Milliseconds(10));
  results_.WaitFor(4);
  EXPECT_TRUE(results_.Get(1).ok());
  EXPECT_EQ(results_.Get(2).status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(results_.Get(3).ok());
  EXPECT_EQ(scheduler_->Stats().failed, 1);
}

// Many threads, two replicas, the real clock: every accepted request's done runs exactly once.
TEST(SchedulerConcurrencyTest, DoneExactlyOnceUnderLoad) {
  auto shared = std::make_shared<FakeBackend::Shared>();
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::make_unique<FakeBackend>(shared));
  backends.push_back(std::make_unique<FakeBackend>(shared));
  SchedulerOptions o;
  o.max_queue_delay_ms = 1;
  o.max_queued_windows = 64;
  o.bucket_frames = {16, 32};
  auto s = Scheduler::Create(std::move(backends), o);
  ASSERT_TRUE(s.ok());
  std::unique_ptr<Scheduler> scheduler = *std::move(s);
  constexpr int kThreads = 4, kPerThread = 300;
  std::vector<std::atomic<int>> calls(kThreads * kPerThread);
  std::atomic<int> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int id = t * kPerThread + i;
        WindowRequest r;
        r.features = MakeFeatures(id, 1 + id % 40, 40);
        r.done = [&calls, id](absl::StatusOr<WindowResult> res) {
          EXPECT_TRUE(res.ok());
          calls[id].fetch_add(1);
        };
        if (scheduler->Submit(std::move(r)).ok()) accepted.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  scheduler->Shutdown();
  int total = 0;
  for (auto& c : calls) {
    EXPECT_LE(c.load(), 1);
    total += c.load();
  }
  EXPECT_EQ(total, accepted.load());
  const SchedulerStats stats = scheduler->Stats();
  EXPECT_EQ(stats.completed, accepted.load());
  EXPECT_EQ(stats.submitted + stats.rejected, kThreads * kPerThread);
  EXPECT_EQ(stats.queue_depth, 0);
}

// ---------------------------------------------------------------------------------------------
// Batch independence through the real CPU backend.

using test_util::SourcePath;

TEST(SchedulerCpuTest, ResultsDoNotDependOnBatchMates) {
  absl::StatusOr<std::shared_ptr<const Model>> model =
      Model::Load(SourcePath("tests/fixtures/quartznet_small/model"));
  if (!model.ok()) GTEST_SKIP() << "fixture model not available: " << model.status();
  const Featurizer* featurizer = &(*model)->featurizer();
  absl::StatusOr<Audio> fox = ReadWavFile(SourcePath("tests/fixtures/audio/fox.wav"));
  ASSERT_TRUE(fox.ok()) << fox.status();
  // Windows of different lengths cut from the audio.
  std::vector<Features> windows;
  for (int len : {16000, 3200, 45000, 8000, 24000, 1600}) {
    const int n = std::min<int>(len, static_cast<int>(fox->samples.size()));
    const int start = static_cast<int>(fox->samples.size()) - n;
    absl::StatusOr<Features> f =
        featurizer->Compute(absl::MakeConstSpan(fox->samples).subspan(start, n));
    ASSERT_TRUE(f.ok());
    windows.push_back(*std::move(f));
  }
  const auto run_all = [&](int max_batch, std::vector<WindowResult>* out) {
    BackendOptions bo;
    bo.device = Device::kCpu;
    auto backend = CreateCpuBackend(*model, bo);
    ASSERT_TRUE(backend.ok());
    std::vector<std::unique_ptr<Backend>> replicas;
    replicas.push_back(*std::move(backend));
    SchedulerOptions o;
    o.max_batch_size = max_batch;
    o.max_queue_delay_ms = 1000;
    o.bucket_frames = {100000};  // one bucket: very different lengths batch together
    FakeClock clock;
    auto s = Scheduler::Create(std::move(replicas), o, &clock);
    ASSERT_TRUE(s.ok());
    Results results;
    for (size_t i = 0; i < windows.size(); ++i) {
      WindowRequest r;
      r.features = windows[i];
      r.done = results.Done(static_cast<int>(i));
      ASSERT_TRUE((*s)->Submit(std::move(r)).ok());
    }
    (*s)->Shutdown();  // runs everything queued, in batches of up to max_batch
    for (size_t i = 0; i < windows.size(); ++i) {
      absl::StatusOr<WindowResult> r = results.Get(static_cast<int>(i));
      ASSERT_TRUE(r.ok()) << r.status();
      out->push_back(*r);
    }
  };
  std::vector<WindowResult> alone, batched;
  run_all(1, &alone);
  run_all(8, &batched);
  ASSERT_EQ(alone.size(), windows.size());
  ASSERT_EQ(batched.size(), windows.size());
  for (size_t i = 0; i < windows.size(); ++i) {
    EXPECT_EQ(alone[i].batch_size, 1);
    EXPECT_EQ(batched[i].batch_size, static_cast<int>(windows.size()));
    ASSERT_EQ(alone[i].encoder_frames, batched[i].encoder_frames);
    EXPECT_EQ(alone[i].ids, batched[i].ids) << "window " << i;
    for (int t = 0; t < alone[i].encoder_frames; ++t) {
      EXPECT_NEAR(alone[i].best_log_probs[t], batched[i].best_log_probs[t], 1e-5)
          << "window " << i << " frame " << t;
    }
  }
}

}  // namespace
}  // namespace jasper
