// ServerMetrics: jasper-server's Prometheus metrics (the names are listed in docs/API.md,
// "Metrics"). Fed by the scheduler (as its SchedulerObserver: batches, queue wait, backend busy
// time, refused windows), by ServingEngine (result latencies, audio seconds) and by the call
// interceptor (calls by method and status, active calls and streams). Scrape-time gauges
// (queue depth, open calls) are added by whoever owns the state they read
// (ServingEngine::Create), and so are the device-memory gauges (AddDeviceMemoryGauges), which
// exist only when a backend runs on a GPU.
//
// Ownership: owns the MetricsRegistry and its series.
// Thread-safety: thread-safe; every On*/Add* method is lock-free except the first use of a new
// label combination (CallStarted/CallFinished take a family mutex briefly).
#ifndef JASPER_SERVER_SERVER_METRICS_H_
#define JASPER_SERVER_SERVER_METRICS_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/runtime/backend.h"
#include "engine/streaming/scheduler.h"
#include "server/metrics.h"

namespace jasper::server {

class ServerMetrics final : public SchedulerObserver {
 public:
  // `feature_frame_s`: audio seconds per feature frame (the featurizer's hop), to turn the
  // scheduler's frame counts into seconds. `replicas`: backend replicas (utilisation).
  ServerMetrics(double feature_frame_s, int replicas);

  MetricsRegistry* registry() { return &registry_; }
  std::string Render() const { return registry_.Render(); }

  // SchedulerObserver (one scheduler: replicas numbered from 0, frames of feature_frame_s).
  void OnBatch(const BatchReport& report) override;
  void OnRejected(const absl::Status& status) override;
  // An observer for one of several schedulers (one per served model) sharing these metrics:
  // its replica i is reported as replica first_replica + i, its frames last feature_frame_s.
  // It forwards to this object, which must outlive it.
  std::unique_ptr<SchedulerObserver> ObserverFor(int first_replica, double feature_frame_s);

  // A session produced a result; `latency_ms` is SessionResult::processing_latency_ms.
  void OnResult(bool streaming, bool is_final, double latency_ms);
  // A session's results now cover `seconds` more audio.
  void AddAudio(bool streaming, double seconds);

  // gRPC calls, by "/package.Service/Method" (unknown services are reported as "other").
  // CallStarted returns the active-calls gauge the caller must decrement (Add(-1)) when the
  // call ends; streaming calls of the ASR APIs also count in jasper_active_streams.
  struct ActiveCall {
    Gauge* calls = nullptr;
    Gauge* streams = nullptr;  // null unless a StreamingRecognize call
  };
  ActiveCall CallStarted(absl::string_view full_method);
  void CallEnded(const ActiveCall& active);
  // `code`: grpc::StatusCode as an int.
  void CallFinished(absl::string_view full_method, int code);

  // Exports the device memory of backend replicas (backends[i] is replica i; not owned, null
  // entries are skipped) as scrape-time gauges: jasper_gpu_memory_used_bytes and
  // jasper_gpu_memory_total_bytes {device} (once per device, however many replicas share it)
  // and jasper_backend_device_memory_bytes {replica}. Each scrape calls every backend's
  // DeviceMemory() (lock-free; nothing is added to the inference path). Registers nothing, and
  // returns false, when no backend reports device memory now (CPU backends), so a CPU server
  // exports none of these families. Call at most once. The backends must outlive every
  // Render() (ServingEngine: the HTTP exporter stops before the scheduler is destroyed).
  bool AddDeviceMemoryGauges(std::vector<const Backend*> backends);

  // Splits "/package.Service/Method" into a bounded (service, method) label pair.
  static std::pair<std::string, std::string> MethodLabels(absl::string_view full_method);

 private:
  class ModelObserver;
  void RecordBatch(const BatchReport& report, int first_replica, double feature_frame_s);

  const double feature_frame_s_;
  MetricsRegistry registry_;

  GaugeFamily* active_calls_;
  GaugeFamily* active_streams_;
  CounterFamily* calls_total_;
  CounterFamily* calls_rejected_;
  Histogram* queue_wait_s_;
  Histogram* batch_size_;
  Histogram* batch_compute_s_;
  Counter* batches_;
  Counter* windows_ok_;
  Counter* windows_failed_;
  CounterFamily* windows_rejected_;
  CounterFamily* backend_busy_s_;
  std::vector<Counter*> busy_by_replica_;  // series of backend_busy_s_, looked up once
  Counter* backend_busy_total_s_;
  Counter* backend_audio_s_;
  Histogram* partial_latency_s_;
  Histogram* final_latency_streaming_s_;
  Histogram* final_latency_offline_s_;
  Counter* audio_streaming_s_;
  Counter* audio_offline_s_;
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_SERVER_METRICS_H_
