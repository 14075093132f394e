#include "server/server_options.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/status_macros.h"
#include "server/http_server.h"

namespace jasper::server {
namespace {

absl::Status CheckRange(const char* name, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " = ", value, " is outside [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ServerOptions::Validate() const {
  if (listen_address.empty()) return absl::InvalidArgumentError("listen_address is empty");
  if (model_dir.empty()) return absl::InvalidArgumentError("model_dir is empty");
  if (extra_model_dirs.size() > 16) {
    return absl::InvalidArgumentError("extra_model_dirs names more than 16 folders");
  }
  for (const std::string& dir : extra_model_dirs) {
    if (dir.empty()) return absl::InvalidArgumentError("extra_model_dirs has an empty entry");
  }
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("device = '", device, "' is not one of auto, cpu, cuda"));
  }
  if (gpu_precision != "fp32" && gpu_precision != "fp16" && gpu_precision != "bf16") {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu_precision = '", gpu_precision, "' is not one of fp32, fp16, bf16"));
  }
  if (cpu_precision != "auto" && cpu_precision != "fp32" && cpu_precision != "bf16" &&
      cpu_precision != "int8") {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu_precision = '", cpu_precision, "' is not one of auto, fp32, bf16, int8"));
  }
  JASPER_RETURN_IF_ERROR(CheckRange("num_workers", num_workers, 0, 64));
  JASPER_RETURN_IF_ERROR(CheckRange("cpu_threads", cpu_threads, 1, 256));
  JASPER_RETURN_IF_ERROR(CheckRange("frontend_threads", frontend_threads, 0, 64));
  JASPER_RETURN_IF_ERROR(CheckRange("delivery_threads", delivery_threads, 0, 64));
  JASPER_RETURN_IF_ERROR(CheckRange("max_concurrent_streams", max_concurrent_streams, 1, 100000));
  JASPER_RETURN_IF_ERROR(CheckRange("max_message_bytes", max_message_bytes, 4096, 1 << 30));
  JASPER_RETURN_IF_ERROR(
      CheckRange("max_stream_duration_ms", max_stream_duration_ms, 1000, 86400000));
  JASPER_RETURN_IF_ERROR(CheckRange("idle_timeout_ms", idle_timeout_ms, 0, 3600000));
  JASPER_RETURN_IF_ERROR(CheckRange("shutdown_grace_ms", shutdown_grace_ms, 0, 600000));
  JASPER_RETURN_IF_ERROR(CheckRange("idle_memory_release_ms", idle_memory_release_ms, 0, 3600000));
  if (!metrics_address.empty()) {
    std::string host;
    int port = 0;
    if (absl::Status s = SplitHostPort(metrics_address, &host, &port); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("metrics_address: ", s.message()));
    }
  }
  if (!http_address.empty()) {
    std::string host;
    int port = 0;
    if (absl::Status s = SplitHostPort(http_address, &host, &port); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("http_listen: ", s.message()));
    }
  }
  if (http_max_body_bytes < 1024 || http_max_body_bytes > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "http_max_body_bytes must be in [1024, 1073741824], got ", http_max_body_bytes));
  }
  JASPER_RETURN_IF_ERROR(CheckRange("http_max_connections", http_max_connections, 1, 10000));
  JASPER_RETURN_IF_ERROR(
      CheckRange("http_request_timeout_ms", http_request_timeout_ms, 100, 3600000));
  JASPER_RETURN_IF_ERROR(CheckRange("http_threads", http_threads, 1, 64));
  if (tls_cert_file.empty() != tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert_file and tls_key_file must be given together (TLS needs both)");
  }
  if (!tls_client_ca_file.empty() && tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_client_ca_file (mutual TLS) needs tls_cert_file and tls_key_file");
  }
  JASPER_RETURN_IF_ERROR(CheckRange("tls_reload_interval_s", tls_reload_interval_s, 1, 86400));
  if (!decoder.empty() && decoder != "greedy" && decoder != "beam") {
    return absl::InvalidArgumentError(absl::StrCat(
        "decoder = '", decoder, "' is not one of greedy, beam (or empty: each model's)"));
  }
  JASPER_RETURN_IF_ERROR(beam.Validate());
  JASPER_RETURN_IF_ERROR(CheckRange("max_boost_phrases", boost_limits.max_phrases, 1, 100000));
  JASPER_RETURN_IF_ERROR(
      CheckRange("max_boost_phrase_chars", boost_limits.max_phrase_chars, 1, 10000));
  if (!(boost_limits.max_abs_boost > 0 && boost_limits.max_abs_boost <= 1000)) {
    return absl::InvalidArgumentError("max_abs_boost must be in (0, 1000]");
  }
  JASPER_RETURN_IF_ERROR(scheduler.Validate());
  return streaming.Validate();
}

int ServerOptions::ResolvedNumWorkers(bool cpu_backend, unsigned cores) const {
  if (num_workers > 0) return num_workers;
  if (!cpu_backend) return 1;
  return static_cast<int>(std::clamp<unsigned>(cores, 1, 64));
}

int ServerOptions::ResolvedFrontendThreads(unsigned cores) const {
  if (frontend_threads > 0) return frontend_threads;
  return static_cast<int>(std::clamp<unsigned>(cores / 2, 2, 8));
}

std::string ServerOptions::ToString() const {
  std::string out;
  absl::StrAppendFormat(
      &out, "listen_address=%s model_dir=%s model_name=%s extra_model_dirs=%s language_code=%s\n",
      listen_address, model_dir, model_name, absl::StrJoin(extra_model_dirs, ","), language_code);
  absl::StrAppendFormat(&out,
                        "device=%s gpu_precision=%s cpu_precision=%s cuda_graphs=%s "
                        "num_workers=%d cpu_threads=%d frontend_threads=%d delivery_threads=%d "
                        "prioritize_streams=%s warmup=%d\n",
                        device, gpu_precision, cpu_precision, cuda_graphs ? "true" : "false",
                        num_workers, cpu_threads, frontend_threads, delivery_threads,
                        prioritize_streams ? "true" : "false", warmup);
  absl::StrAppendFormat(&out,
                        "max_concurrent_streams=%d max_message_bytes=%d max_stream_duration_ms=%d "
                        "idle_timeout_ms=%d shutdown_grace_ms=%d idle_memory_release_ms=%d\n",
                        max_concurrent_streams, max_message_bytes, max_stream_duration_ms,
                        idle_timeout_ms, shutdown_grace_ms, idle_memory_release_ms);
  absl::StrAppendFormat(&out,
                        "metrics_address=%s http_listen=%s http_max_body_bytes=%d "
                        "http_max_connections=%d http_request_timeout_ms=%d http_threads=%d "
                        "tls_cert_file=%s tls_key_file=%s "
                        "tls_client_ca_file=%s tls_reload_interval_s=%d api_keys_file=%s\n",
                        metrics_address.empty() ? "(off)" : metrics_address,
                        http_address.empty() ? "(off)" : http_address, http_max_body_bytes,
                        http_max_connections, http_request_timeout_ms, http_threads,
                        tls_cert_file.empty() ? "(plaintext)" : tls_cert_file, tls_key_file,
                        tls_client_ca_file, tls_reload_interval_s,
                        api_keys_file.empty() ? "(no auth)" : api_keys_file);
  absl::StrAppendFormat(&out,
                        "scheduler: max_batch_size=%d max_queue_delay_ms=%d max_queued_windows=%d "
                        "bucket_frames=[%s]\n",
                        scheduler.max_batch_size, scheduler.max_queue_delay_ms,
                        scheduler.max_queued_windows, absl::StrJoin(scheduler.bucket_frames, ","));
  absl::StrAppendFormat(&out,
                        "streaming: chunk_ms=%d left_context_ms=%d right_context_ms=%d "
                        "endpoint_silence_ms=%d max_buffered_audio_ms=%d max_inflight_windows=%d",
                        streaming.chunk_ms, streaming.left_context_ms, streaming.right_context_ms,
                        streaming.endpoint_silence_ms, streaming.max_buffered_audio_ms,
                        streaming.max_inflight_windows);
  absl::StrAppendFormat(&out,
                        "\ndecoding: decoder=%s beam_width=%d lm_weight=%.3f word_bonus=%.3f "
                        "lm=%s max_boost_phrases=%d max_boost_phrase_chars=%d max_abs_boost=%.1f",
                        decoder.empty() ? "(each model's default)" : decoder, beam.beam_width,
                        beam.lm_weight, beam.word_bonus,
                        lm_file.empty() ? "(model folder's)" : lm_file, boost_limits.max_phrases,
                        boost_limits.max_phrase_chars, boost_limits.max_abs_boost);
  return out;
}

}  // namespace jasper::server
