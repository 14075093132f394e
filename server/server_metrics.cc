#include "server/server_metrics.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace jasper::server {
namespace {

constexpr const char* kKnownServices[] = {
    "jasper.asr.v1.Asr",
    "nvidia.riva.asr.RivaSpeechRecognition",
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
};

std::string CodeName(int code) {
  if (code < 0 || code > 16) return "UNKNOWN";
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

std::vector<double> LatencyBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
          0.5,   0.75, 1.0,   1.5,  2.5,   5.0, 10.0, 30.0};
}

// The device memory each device reports, one reading per device (the last replica's).
std::map<int, DeviceMemoryInfo> ReadDevices(const std::vector<const Backend*>& backends) {
  std::map<int, DeviceMemoryInfo> devices;
  for (const Backend* backend : backends) {
    if (backend == nullptr) continue;
    std::optional<DeviceMemoryInfo> info = backend->DeviceMemory();
    if (info.has_value() && info->total_bytes > 0) devices[info->device] = *info;
  }
  return devices;
}

}  // namespace

ServerMetrics::ServerMetrics(double feature_frame_s, int replicas)
    : feature_frame_s_(feature_frame_s) {
  MetricsRegistry& r = registry_;
  active_calls_ = r.AddGauge("jasper_grpc_calls_active", "gRPC calls in progress, by method.",
                             {"grpc_service", "grpc_method"});
  active_streams_ =
      r.AddGauge("jasper_active_streams",
                 "StreamingRecognize calls in progress, by API (jasper, riva).", {"api"});
  calls_total_ =
      r.AddCounter("jasper_grpc_calls_total", "gRPC calls finished, by method and status code.",
                   {"grpc_service", "grpc_method", "grpc_code"});
  calls_rejected_ =
      r.AddCounter("jasper_grpc_calls_rejected_total",
                   "gRPC calls that ended with a status other than OK, by method and status code.",
                   {"grpc_service", "grpc_method", "grpc_code"});
  queue_wait_s_ =
      r.AddHistogram("jasper_scheduler_queue_wait_seconds",
                     "Time a window waited in the scheduler queue before its batch "
                     "started.",
                     {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0})
          ->Get();
  batch_size_ = r.AddHistogram("jasper_scheduler_batch_size", "Windows per backend batch.",
                               {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256})
                    ->Get();
  batch_compute_s_ = r.AddHistogram("jasper_backend_batch_seconds", "Backend wall time per batch.",
                                    ExponentialBuckets(0.001, 2.0, 14))
                         ->Get();
  batches_ = r.AddCounter("jasper_scheduler_batches_total", "Batches run by the backends.")->Get();
  CounterFamily* windows =
      r.AddCounter("jasper_scheduler_windows_total",
                   "Windows (streaming and offline) run, by result.", {"result"});
  windows_ok_ = windows->WithLabels({"ok"});
  windows_failed_ = windows->WithLabels({"error"});
  windows_rejected_ = r.AddCounter(
      "jasper_scheduler_windows_rejected_total",
      "Windows the scheduler refused (queue full: RESOURCE_EXHAUSTED; shut down: UNAVAILABLE).",
      {"code"});
  backend_busy_s_ = r.AddCounter("jasper_backend_busy_seconds_total",
                                 "Seconds each backend replica spent running batches "
                                 "(utilisation = rate of this).",
                                 {"replica"});
  for (int i = 0; i < replicas; ++i) {
    busy_by_replica_.push_back(backend_busy_s_->WithLabels({std::to_string(i)}));
  }
  active_streams_->WithLabels({"jasper"});
  active_streams_->WithLabels({"riva"});
  backend_busy_total_s_ = r.AddCounter("jasper_backend_busy_seconds_all_total",
                                       "Seconds all backend replicas together spent running "
                                       "batches.")
                              ->Get();
  backend_audio_s_ = r.AddCounter("jasper_backend_audio_seconds_total",
                                  "Audio seconds the backends processed, counting each "
                                  "streaming window's context (overlap) every time.")
                         ->Get();
  r.AddGauge("jasper_backend_replicas", "Backend replicas (scheduler workers).")
      ->Get()
      ->Set(replicas);
  HistogramFamily* partial =
      r.AddHistogram("jasper_partial_result_latency_seconds",
                     "Interim results: server time from the arrival of the last audio the result "
                     "needed to the result.",
                     LatencyBuckets());
  partial_latency_s_ = partial->Get();
  HistogramFamily* final_latency =
      r.AddHistogram("jasper_final_result_latency_seconds",
                     "Final results: server time from the arrival of the last audio (or the "
                     "half-close / force_final that released it) to the result, by mode.",
                     LatencyBuckets(), {"mode"});
  final_latency_streaming_s_ = final_latency->WithLabels({"streaming"});
  final_latency_offline_s_ = final_latency->WithLabels({"offline"});
  CounterFamily* audio =
      r.AddCounter("jasper_audio_seconds_total",
                   "Audio seconds recognized (covered by results), by mode.", {"mode"});
  audio_streaming_s_ = audio->WithLabels({"streaming"});
  audio_offline_s_ = audio->WithLabels({"offline"});
  // Lifetime real-time factor; for a window use
  // rate(jasper_audio_seconds_total[1m]) / rate(jasper_backend_busy_seconds_all_total[1m]).
  r.AddCallbackGauge(
      "jasper_realtime_factor",
      "Audio seconds recognized per second of backend compute since start (RTFx; higher is "
      "faster; 0 before any work).",
      {}, [this] {
        const double busy = backend_busy_total_s_->value();
        const double audio = audio_streaming_s_->value() + audio_offline_s_->value();
        return std::vector<GaugeSample>{{{}, busy > 0 ? audio / busy : 0.0}};
      });
}

bool ServerMetrics::AddDeviceMemoryGauges(std::vector<const Backend*> backends) {
  const bool any = std::any_of(backends.begin(), backends.end(), [](const Backend* b) {
    return b != nullptr && b->DeviceMemory().has_value();
  });
  if (!any) return false;
  MetricsRegistry& r = registry_;
  // One sample per device of the field `bytes` of its DeviceMemoryInfo.
  auto per_device = [backends](int64_t DeviceMemoryInfo::*bytes) {
    return [backends, bytes] {
      std::vector<GaugeSample> samples;
      for (const auto& [device, info] : ReadDevices(backends)) {
        samples.push_back({{std::to_string(device)}, static_cast<double>(info.*bytes)});
      }
      return samples;
    };
  };
  r.AddCallbackGauge("jasper_gpu_memory_used_bytes",
                     "GPU memory in use on the device (all processes; total - free as the "
                     "driver reports it). Only on GPU backends.",
                     {"device"}, per_device(&DeviceMemoryInfo::used_bytes));
  r.AddCallbackGauge("jasper_gpu_memory_total_bytes",
                     "GPU memory of the device. Only on GPU backends.", {"device"},
                     per_device(&DeviceMemoryInfo::total_bytes));
  r.AddCallbackGauge(
      "jasper_backend_device_memory_bytes",
      "Device memory each backend replica holds for its weights and workspaces "
      "(excluding the CUDA context). Only on GPU backends.",
      {"replica"}, [backends] {
        std::vector<GaugeSample> samples;
        for (size_t i = 0; i < backends.size(); ++i) {
          if (backends[i] == nullptr) continue;
          std::optional<DeviceMemoryInfo> info = backends[i]->DeviceMemory();
          if (!info.has_value()) continue;
          samples.push_back({{std::to_string(i)}, static_cast<double>(info->backend_bytes)});
        }
        return samples;
      });
  return true;
}

class ServerMetrics::ModelObserver final : public SchedulerObserver {
 public:
  ModelObserver(ServerMetrics* metrics, int first_replica, double feature_frame_s)
      : metrics_(metrics), first_replica_(first_replica), feature_frame_s_(feature_frame_s) {}
  void OnBatch(const BatchReport& report) override {
    metrics_->RecordBatch(report, first_replica_, feature_frame_s_);
  }
  void OnRejected(const absl::Status& status) override { metrics_->OnRejected(status); }

 private:
  ServerMetrics* const metrics_;
  const int first_replica_;
  const double feature_frame_s_;
};

std::unique_ptr<SchedulerObserver> ServerMetrics::ObserverFor(int first_replica,
                                                              double feature_frame_s) {
  return std::make_unique<ModelObserver>(this, first_replica, feature_frame_s);
}

void ServerMetrics::OnBatch(const BatchReport& report) { RecordBatch(report, 0, feature_frame_s_); }

void ServerMetrics::RecordBatch(const BatchReport& report, int first_replica,
                                double feature_frame_s) {
  batches_->Increment();
  batch_size_->Observe(report.batch_size);
  const double compute_s = report.compute_ms / 1000.0;
  batch_compute_s_->Observe(compute_s);
  for (double q : report.queue_ms) queue_wait_s_->Observe(q / 1000.0);
  windows_ok_->Increment(report.batch_size - report.failed);
  windows_failed_->Increment(report.failed);
  const int replica = first_replica + report.replica;
  Counter* busy = replica >= 0 && replica < static_cast<int>(busy_by_replica_.size())
                      ? busy_by_replica_[replica]
                      : backend_busy_s_->WithLabels({std::to_string(replica)});
  busy->Increment(compute_s);
  backend_busy_total_s_->Increment(compute_s);
  backend_audio_s_->Increment(static_cast<double>(report.valid_frames) * feature_frame_s);
}

void ServerMetrics::OnRejected(const absl::Status& status) {
  windows_rejected_->WithLabels({absl::StatusCodeToString(status.code())})->Increment();
}

void ServerMetrics::OnResult(bool streaming, bool is_final, double latency_ms) {
  const double s = std::max(0.0, latency_ms / 1000.0);
  if (!is_final) {
    partial_latency_s_->Observe(s);
  } else if (streaming) {
    final_latency_streaming_s_->Observe(s);
  } else {
    final_latency_offline_s_->Observe(s);
  }
}

void ServerMetrics::AddAudio(bool streaming, double seconds) {
  (streaming ? audio_streaming_s_ : audio_offline_s_)->Increment(seconds);
}

std::pair<std::string, std::string> ServerMetrics::MethodLabels(absl::string_view full_method) {
  // "/package.Service/Method"
  absl::string_view m = full_method;
  if (absl::ConsumePrefix(&m, "/")) {
    const size_t slash = m.find('/');
    if (slash != absl::string_view::npos) {
      const absl::string_view service = m.substr(0, slash);
      const absl::string_view method = m.substr(slash + 1);
      bool method_ok = !method.empty() && method.size() <= 64;
      for (char c : method) method_ok = method_ok && (absl::ascii_isalnum(c) || c == '_');
      for (const char* known : kKnownServices) {
        if (service == known && method_ok) return {std::string(service), std::string(method)};
      }
    }
  }
  return {"other", "other"};
}

ServerMetrics::ActiveCall ServerMetrics::CallStarted(absl::string_view full_method) {
  auto [service, method] = MethodLabels(full_method);
  ActiveCall active;
  active.calls = active_calls_->WithLabels({service, method});
  active.calls->Add(1);
  if (method == "StreamingRecognize") {
    const char* api = service == "jasper.asr.v1.Asr" ? "jasper" : "riva";
    active.streams = active_streams_->WithLabels({api});
    active.streams->Add(1);
  }
  return active;
}

void ServerMetrics::CallEnded(const ActiveCall& active) {
  if (active.calls != nullptr) active.calls->Add(-1);
  if (active.streams != nullptr) active.streams->Add(-1);
}

void ServerMetrics::CallFinished(absl::string_view full_method, int code) {
  auto [service, method] = MethodLabels(full_method);
  const std::string code_name = CodeName(code);
  calls_total_->WithLabels({service, method, code_name})->Increment();
  if (code != 0) calls_rejected_->WithLabels({service, method, code_name})->Increment();
}

}  // namespace jasper::server
