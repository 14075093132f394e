// Scheduler: one queue for every stream's windows and every offline request, in front of the
// backend replicas.
//
// A request (WindowRequest: the normalized features of one window) goes to the length bucket
// of its padded frame count. A worker takes the oldest queued request, then fills a batch with
// requests of the same bucket (oldest first) up to max_batch_size, waiting at most
// max_queue_delay_ms (counted from the oldest request's arrival) for the batch to fill. The
// batch is padded to its longest member and runs with each member's valid length, so the
// backend's masks keep padding out of real frames: a request's result does not depend on what
// it was batched with (up to float summation order in the GEMMs).
//
// Each request has a Priority (engine/streaming/priority.h). Interactive and bulk requests
// queue apart and never share a batch; a worker takes an interactive batch whenever one is
// queued, and a bulk batch only when none is (a worker waiting for a bulk batch to fill stops
// waiting when an interactive request arrives). So a stream's window waits for at most the
// batches already running, never for an offline request's queued windows.
//
// Admission is bounded: Submit() fails with RESOURCE_EXHAUSTED when max_queued_windows are
// waiting, and takes ownership of the request only when it returns OK.
//
// Shutdown() stops admission (UNAVAILABLE), lets the workers run every request already queued
// (without waiting for batches to fill), joins the workers, so that every accepted request's
// `done` has run exactly once when Shutdown() returns.
//
// Sessions featurize and deliver their results elsewhere (engine/streaming/task_pool.h): the
// scheduler batches.
//
// An optional SchedulerObserver (SetObserver) hears about every batch and every refused
// Submit(), for metrics; the engine knows nothing about how they are exported.
//
// Ownership: owns the backend replicas, the queue and one worker thread per replica. Borrows the
// Clock and the observer (both must outlive the scheduler, or the observer must be cleared with
// SetObserver(nullptr) first). Thread-safety: thread-safe; all methods may be called from any
// thread, including from a `done` callback (which runs on a worker thread, without any scheduler
// lock held).
#ifndef JASPER_ENGINE_STREAMING_SCHEDULER_H_
#define JASPER_ENGINE_STREAMING_SCHEDULER_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/features/features.h"
#include "engine/runtime/backend.h"
#include "engine/streaming/clock.h"
#include "engine/streaming/priority.h"
#include "engine/streaming/window_result.h"

namespace jasper {

struct SchedulerOptions {
  int max_batch_size = 8;        // [1, 256]
  int max_queue_delay_ms = 5;    // [0, 10000]; 0 = never wait for a batch to fill
  int max_queued_windows = 512;  // [1, 1000000]; queued, not yet running
  // Upper bounds (padded feature frames, strictly increasing, > 0) of the length buckets. A
  // request goes to the first bucket whose bound >= its padded frame count; longer requests
  // share one overflow bucket. The defaults fit the default streaming window (3.2 s = 336
  // padded frames) in one bucket and spread offline lengths up to 32 s.
  std::vector<int> bucket_frames = {96, 192, 352, 512, 800, 1600, 3200};

  // INVALID_ARGUMENT naming the field.
  absl::Status Validate() const;
};

struct WindowRequest {
  // Normalized log-mel features, [padded_frames, num_features], channels-last FP32. Frames at
  // or past valid_frames are ignored (masked). padded_frames selects the bucket.
  Features features;
  // Called exactly once (once Submit() accepted the request), on a worker thread, without any
  // scheduler lock held, with the result or the backend's error for this request. Queued
  // requests are never dropped: Shutdown() and the destructor run them first.
  std::function<void(absl::StatusOr<WindowResult>)> done;
  // Interactive requests run before bulk ones (see the top of this file).
  Priority priority = Priority::kInteractive;
};

struct SchedulerStats {
  int64_t queue_depth = 0;       // requests waiting now
  int64_t bulk_queue_depth = 0;  // of them, Priority::kBulk
  int64_t running = 0;           // requests in batches running now
  int64_t submitted = 0;         // accepted by Submit()
  int64_t rejected = 0;          // refused by Submit() (full queue, shut down, bad request)
  int64_t completed = 0;         // done(OK) called
  int64_t failed = 0;            // done(error) called
  int64_t batches = 0;
  double mean_batch_size = 0;
  int max_batch_size_seen = 0;
  double mean_queue_ms = 0;
  double mean_compute_ms = 0;            // per batch
  std::vector<int64_t> bucket_requests;  // accepted per bucket (last = overflow)
  int replicas = 0;
};

// What a worker reports to the observer after each batch.
struct BatchReport {
  int replica = 0;                             // index of the backend replica that ran it
  int batch_size = 0;                          // requests in the batch
  Priority priority = Priority::kInteractive;  // of every member
  int failed = 0;                              // of them, how many got an error
  double compute_ms = 0;         // backend wall time of the whole batch (incl. packing)
  int padded_frames = 0;         // the batch's padded length, feature frames
  int64_t valid_frames = 0;      // sum of the members' valid feature frames
  std::vector<double> queue_ms;  // [batch_size] each member's Submit() -> batch start
};

// Receives scheduler events, e.g. to export metrics. Called on scheduler worker threads and on
// Submit()'s caller, without any scheduler lock held, possibly concurrently: implementations
// must be thread-safe, fast and non-blocking, and must not call back into the scheduler.
class SchedulerObserver {
 public:
  virtual ~SchedulerObserver() = default;
  // After a batch ran, before its members' done callbacks.
  virtual void OnBatch(const BatchReport& report) = 0;
  // Submit() refused a request with `status` (queue full, shut down, invalid request).
  virtual void OnRejected(const absl::Status& status) = 0;
};

class Scheduler {
 public:
  // One worker thread per replica. `clock` == nullptr: the real clock. Errors:
  // INVALID_ARGUMENT (options, no replicas, a null replica).
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      std::vector<std::unique_ptr<Backend>> replicas, const SchedulerOptions& options,
      Clock* clock = nullptr);

  // Shutdown(), then destroys the replicas.
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Takes ownership of `request` (moves from it) only when it returns OK;
  // on error the request (and its `done`) is left untouched and `done` is never called.
  // Errors: RESOURCE_EXHAUSTED (max_queued_windows waiting), UNAVAILABLE (after Shutdown()
  // began), INVALID_ARGUMENT (no done, empty features, valid_frames outside
  // [1, padded_frames], data size != padded_frames * num_features, unknown priority).
  absl::Status Submit(WindowRequest& request);
  absl::Status Submit(WindowRequest&& request) { return Submit(request); }

  // Stops admission, runs the queued requests (no batching delay), joins the workers.
  // Idempotent.
  void Shutdown();

  SchedulerStats Stats() const;
  // Installs (or with nullptr removes) the observer; borrowed. Events already being reported
  // may still reach the previous observer, so clear it only once the scheduler is shut down.
  void SetObserver(SchedulerObserver* observer) {
    observer_.store(observer, std::memory_order_release);
  }
  Clock* clock() const { return clock_; }
  int num_replicas() const { return static_cast<int>(replicas_.size()); }
  const SchedulerOptions& options() const { return options_; }
  // The bucket a request of `padded_frames` goes to (bucket_frames.size() = overflow).
  int BucketOf(int padded_frames) const;

 private:
  struct Pending {
    WindowRequest request;
    absl::Time enqueued;
    int64_t seq = 0;
  };
  using Buckets = std::vector<std::deque<Pending>>;  // [bucket_frames.size() + 1], FIFO each

  Scheduler(std::vector<std::unique_ptr<Backend>> replicas, const SchedulerOptions& options,
            Clock* clock);
  void WorkerLoop(int replica);
  // Picks the next batch (blocks); empty when the worker should exit.
  std::vector<Pending> NextBatch();
  void RunBatch(int replica, Backend* backend, std::vector<Pending> batch);
  // Index of the bucket of `buckets` holding the oldest request, or -1. Requires mu_.
  static int OldestBucket(const Buckets& buckets);
  // Requests queued, all priorities. Requires mu_.
  int64_t Queued() const {
    int64_t n = 0;
    for (int64_t q : queued_by_priority_) n += q;
    return n;
  }

  const SchedulerOptions options_;
  Clock* const clock_;
  std::vector<std::unique_ptr<Backend>> replicas_;

  // std::mutex rather than absl::Mutex: see engine/streaming/clock.h (ThreadSanitizer).
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // queue changed or shutdown (with mu_)
  // All guarded by mu_:
  std::array<Buckets, kNumPriorities> queues_;  // by Priority
  std::array<int64_t, kNumPriorities> queued_by_priority_{};
  int64_t next_seq_ = 0;
  bool shutting_down_ = false;
  SchedulerStats stats_;
  std::atomic<SchedulerObserver*> observer_{nullptr};  // not guarded: atomic
  double sum_batch_sizes_ = 0;
  double sum_queue_ms_ = 0;
  double sum_compute_ms_ = 0;

  std::vector<std::thread> workers_;
  std::mutex shutdown_mu_;  // serializes Shutdown() callers while they join
  bool joined_ = false;     // guarded by shutdown_mu_
};

}  // namespace jasper

#endif  // JASPER_ENGINE_STREAMING_SCHEDULER_H_
