#include "engine/streaming/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/status_macros.h"

namespace jasper {

absl::Status SchedulerOptions::Validate() const {
  if (max_batch_size < 1 || max_batch_size > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_size must be in [1, 256], got ", max_batch_size));
  }
  if (max_queue_delay_ms < 0 || max_queue_delay_ms > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queue_delay_ms must be in [0, 10000], got ", max_queue_delay_ms));
  }
  if (max_queued_windows < 1 || max_queued_windows > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queued_windows must be in [1, 1000000], got ", max_queued_windows));
  }
  if (bucket_frames.size() > 64) {
    return absl::InvalidArgumentError("bucket_frames has more than 64 entries");
  }
  for (size_t i = 0; i < bucket_frames.size(); ++i) {
    if (bucket_frames[i] <= 0 || (i > 0 && bucket_frames[i] <= bucket_frames[i - 1])) {
      return absl::InvalidArgumentError("bucket_frames must be positive and strictly increasing");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    std::vector<std::unique_ptr<Backend>> replicas, const SchedulerOptions& options, Clock* clock) {
  JASPER_RETURN_IF_ERROR(options.Validate());
  if (replicas.empty()) return absl::InvalidArgumentError("Scheduler needs at least one replica");
  for (const auto& r : replicas) {
    if (r == nullptr) return absl::InvalidArgumentError("Scheduler: null backend replica");
  }
  return std::unique_ptr<Scheduler>(
      new Scheduler(std::move(replicas), options, clock ? clock : Clock::Real()));
}

Scheduler::Scheduler(std::vector<std::unique_ptr<Backend>> replicas,
                     const SchedulerOptions& options, Clock* clock)
    : options_(options), clock_(clock), replicas_(std::move(replicas)) {
  for (Buckets& q : queues_) q.resize(options_.bucket_frames.size() + 1);
  stats_.bucket_requests.assign(options_.bucket_frames.size() + 1, 0);
  stats_.replicas = static_cast<int>(replicas_.size());
  clock_->RegisterWaiter(&mu_, &work_cv_);
  workers_.reserve(replicas_.size());
  for (size_t i = 0; i < replicas_.size(); ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(static_cast<int>(i)); });
  }
}

Scheduler::~Scheduler() {
  Shutdown();
  clock_->UnregisterWaiter(&mu_, &work_cv_);
}

int Scheduler::BucketOf(int padded_frames) const {
  const auto& b = options_.bucket_frames;
  return static_cast<int>(std::lower_bound(b.begin(), b.end(), padded_frames) - b.begin());
}

absl::Status Scheduler::Submit(WindowRequest& request) {
  const Features& f = request.features;
  absl::Status invalid;
  if (!request.done) {
    invalid = absl::InvalidArgumentError("WindowRequest without a done callback");
  } else if (static_cast<int>(request.priority) < 0 ||
             static_cast<int>(request.priority) >= kNumPriorities) {
    invalid = absl::InvalidArgumentError(absl::StrCat("WindowRequest with an unknown priority ",
                                                      static_cast<int>(request.priority)));
  } else if (f.padded_frames <= 0 || f.num_features <= 0) {
    invalid = absl::InvalidArgumentError("WindowRequest with empty features");
  } else if (f.valid_frames < 1 || f.valid_frames > f.padded_frames) {
    invalid = absl::InvalidArgumentError(absl::StrCat("WindowRequest valid_frames ", f.valid_frames,
                                                      " outside [1, ", f.padded_frames, "]"));
  } else if (f.data.size() != static_cast<size_t>(f.padded_frames) * f.num_features) {
    invalid = absl::InvalidArgumentError(absl::StrCat("WindowRequest features hold ", f.data.size(),
                                                      " values, expected ", f.padded_frames, " x ",
                                                      f.num_features));
  }
  const int bucket = BucketOf(f.padded_frames);
  absl::Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!invalid.ok()) {
      refused = invalid;
    } else if (shutting_down_) {
      refused = absl::UnavailableError("scheduler is shut down");
    } else if (Queued() >= options_.max_queued_windows) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          "scheduler queue is full (", options_.max_queued_windows, " windows waiting)"));
    }
    if (!refused.ok()) {
      ++stats_.rejected;
    } else {
      Pending p;
      p.request = std::move(request);
      p.enqueued = clock_->Now();
      p.seq = next_seq_++;
      const int priority = static_cast<int>(p.request.priority);
      queues_[priority][bucket].push_back(std::move(p));
      ++queued_by_priority_[priority];
      ++stats_.submitted;
      ++stats_.bucket_requests[bucket];
      work_cv_.notify_all();
    }
  }
  if (!refused.ok()) {
    if (SchedulerObserver* observer = observer_.load(std::memory_order_acquire)) {
      observer->OnRejected(refused);
    }
  }
  return refused;
}

int Scheduler::OldestBucket(const Buckets& buckets) {
  int best = -1;
  int64_t best_seq = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].empty()) continue;
    if (best < 0 || buckets[i].front().seq < best_seq) {
      best = static_cast<int>(i);
      best_seq = buckets[i].front().seq;
    }
  }
  return best;
}

std::vector<Scheduler::Pending> Scheduler::NextBatch() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return Queued() > 0 || shutting_down_; });
    if (Queued() == 0) return {};  // shutting down with nothing left
    constexpr int kInteractive = static_cast<int>(Priority::kInteractive);
    const int priority =
        queued_by_priority_[kInteractive] > 0 ? kInteractive : static_cast<int>(Priority::kBulk);
    Buckets& buckets = queues_[priority];
    const int bucket = OldestBucket(buckets);
    std::deque<Pending>& q = buckets[bucket];
    const absl::Time deadline =
        q.front().enqueued + absl::Milliseconds(options_.max_queue_delay_ms);
    const int width = q.front().request.features.num_features;
    if (static_cast<int>(q.size()) < options_.max_batch_size && !shutting_down_ &&
        clock_->Now() < deadline) {
      // Wait for the batch to fill, the deadline, shutdown, or (for a bulk batch) an
      // interactive request; then look again (another worker may have taken these requests
      // meanwhile).
      const size_t want = static_cast<size_t>(options_.max_batch_size);
      clock_->WaitUntil(lock, work_cv_, deadline, [this, &q, priority, want] {
        return q.size() >= want || shutting_down_ ||
               (priority != kInteractive && queued_by_priority_[kInteractive] > 0);
      });
      continue;
    }
    std::vector<Pending> batch;
    batch.reserve(std::min<size_t>(q.size(), options_.max_batch_size));
    // Oldest first; requests of another feature width (a different model) stay queued.
    for (auto it = q.begin();
         it != q.end() && static_cast<int>(batch.size()) < options_.max_batch_size;) {
      if (it->request.features.num_features == width) {
        batch.push_back(std::move(*it));
        it = q.erase(it);
      } else {
        ++it;
      }
    }
    queued_by_priority_[priority] -= static_cast<int64_t>(batch.size());
    stats_.running += static_cast<int64_t>(batch.size());
    return batch;
  }
}

void Scheduler::WorkerLoop(int replica) {
  Backend* backend = replicas_[replica].get();
  for (;;) {
    std::vector<Pending> batch = NextBatch();
    if (batch.empty()) return;
    RunBatch(replica, backend, std::move(batch));
  }
}

namespace {

absl::Status RunOn(Backend* backend, const std::vector<const Features*>& members,
                   BackendOutput* out) {
  absl::StatusOr<PaddedFeatureBatch> padded = PaddedFeatureBatch::Pack(members);
  if (!padded.ok()) return padded.status();
  return backend->Run(padded->batch(), out);
}

WindowResult Extract(const BackendOutput& out, int b) {
  WindowResult r;
  const int n = out.lengths[b];
  const size_t base = static_cast<size_t>(b) * out.time;
  r.encoder_frames = n;
  r.ids.assign(out.ids.begin() + base, out.ids.begin() + base + n);
  r.best_log_probs.assign(out.best_log_probs.begin() + base, out.best_log_probs.begin() + base + n);
  if (out.log_probs.size() == static_cast<size_t>(out.batch) * out.time * out.vocab) {
    r.vocab = out.vocab;
    const auto first = out.log_probs.begin() + static_cast<std::ptrdiff_t>(base * out.vocab);
    r.log_probs.assign(first, first + static_cast<std::ptrdiff_t>(n) * out.vocab);
  }
  return r;
}

}  // namespace

void Scheduler::RunBatch(int replica, Backend* backend, std::vector<Pending> batch) {
  const absl::Time start = clock_->Now();
  std::vector<const Features*> members;
  members.reserve(batch.size());
  for (const Pending& p : batch) members.push_back(&p.request.features);

  std::vector<absl::StatusOr<WindowResult>> results;
  results.reserve(batch.size());
  BackendOutput out;
  absl::Status status = RunOn(backend, members, &out);
  if (status.ok() &&
      (out.batch != static_cast<int>(batch.size()) || out.lengths.size() != batch.size() ||
       out.ids.size() != static_cast<size_t>(out.batch) * out.time ||
       out.best_log_probs.size() != out.ids.size())) {
    status = absl::InternalError("backend returned an output of the wrong shape");
  }
  if (status.ok()) {
    for (size_t b = 0; b < batch.size(); ++b) results.push_back(Extract(out, static_cast<int>(b)));
  } else if (batch.size() > 1) {
    // Do not let one bad member fail the others: run each alone, each gets its own status.
    for (size_t b = 0; b < batch.size(); ++b) {
      BackendOutput single;
      absl::Status s = RunOn(backend, {members[b]}, &single);
      if (s.ok() &&
          (single.lengths.size() != 1 || single.ids.size() != single.best_log_probs.size() ||
           single.ids.size() < static_cast<size_t>(single.lengths[0]))) {
        s = absl::InternalError("backend returned an output of the wrong shape");
      }
      if (s.ok()) {
        results.push_back(Extract(single, 0));
      } else {
        results.push_back(s);
      }
    }
  } else {
    results.push_back(status);
  }
  const absl::Time end = clock_->Now();
  const double compute_ms = absl::ToDoubleMilliseconds(end - start);

  int64_t ok = 0;
  double queue_ms_sum = 0;
  SchedulerObserver* const observer = observer_.load(std::memory_order_acquire);
  BatchReport report;
  if (observer != nullptr) report.queue_ms.reserve(batch.size());
  for (size_t b = 0; b < batch.size(); ++b) {
    const double queue_ms = absl::ToDoubleMilliseconds(start - batch[b].enqueued);
    queue_ms_sum += queue_ms;
    if (observer != nullptr) {
      report.queue_ms.push_back(queue_ms);
      report.valid_frames += members[b]->valid_frames;
      report.padded_frames = std::max(report.padded_frames, members[b]->padded_frames);
    }
    if (results[b].ok()) {
      ++ok;
      results[b]->queue_ms = queue_ms;
      results[b]->compute_ms = compute_ms;
      results[b]->batch_size = static_cast<int>(batch.size());
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.running -= static_cast<int64_t>(batch.size());
    ++stats_.batches;
    sum_batch_sizes_ += static_cast<double>(batch.size());
    sum_queue_ms_ += queue_ms_sum;
    sum_compute_ms_ += compute_ms;
    stats_.max_batch_size_seen =
        std::max(stats_.max_batch_size_seen, static_cast<int>(batch.size()));
    stats_.completed += ok;
    stats_.failed += static_cast<int64_t>(batch.size()) - ok;
  }
  if (observer != nullptr) {
    report.replica = replica;
    report.batch_size = static_cast<int>(batch.size());
    report.priority = batch.front().request.priority;
    report.failed = static_cast<int>(static_cast<int64_t>(batch.size()) - ok);
    report.compute_ms = compute_ms;
    observer->OnBatch(report);
  }
  // Outside the lock: done may call Submit().
  for (size_t b = 0; b < batch.size(); ++b) {
    auto done = std::move(batch[b].request.done);
    done(std::move(results[b]));
  }
}

void Scheduler::Shutdown() {
  std::lock_guard<std::mutex> join_lock(shutdown_mu_);
  if (joined_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  joined_ = true;
}

SchedulerStats Scheduler::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerStats s = stats_;
  s.queue_depth = Queued();
  s.bulk_queue_depth = queued_by_priority_[static_cast<int>(Priority::kBulk)];
  if (stats_.batches > 0) {
    s.mean_batch_size = sum_batch_sizes_ / static_cast<double>(stats_.batches);
    s.mean_compute_ms = sum_compute_ms_ / static_cast<double>(stats_.batches);
  }
  const int64_t done = stats_.completed + stats_.failed;
  if (done > 0) s.mean_queue_ms = sum_queue_ms_ / static_cast<double>(done);
  return s;
}

}  // namespace jasper
