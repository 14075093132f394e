// jasper-server: the gRPC speech recognition server. Every limit is a flag (`--help` lists
// them with their defaults; docs/API.md explains each one and the status it returns).
//
// SIGTERM/SIGINT: health NOT_SERVING, new calls UNAVAILABLE, open streams get their final
// results within --shutdown_grace_ms, then the server shuts down.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/model/default_model_dir.h"
#include "engine/streaming/scheduler.h"
#include "engine/streaming/stream_session.h"
#include "server/jasper_server.h"
#include "server/server_options.h"
#include "spdlog/spdlog.h"

namespace {
const jasper::server::ServerOptions kDefaults;
}  // namespace

// Serving.
ABSL_FLAG(std::string, listen, kDefaults.listen_address,
          "host:port to listen on (loopback by default; 0.0.0.0:PORT for the network).");
ABSL_FLAG(std::string, model_dir, "",
          absl::StrCat("Model folder (model.json + model.safetensors). Default: the first "
                       "model folder under ",
                       jasper::kDefaultModelSearchPath, "."));
ABSL_FLAG(std::string, model_name, "",
          "Name clients use in RecognitionConfig.model (default: model.json's name).");
ABSL_FLAG(std::vector<std::string>, extra_model_dirs, {},
          "More model folders served beside --model_dir (the default), comma-separated; a "
          "request picks one by its model field (the folder's model.json name).");
ABSL_FLAG(std::string, language_code, kDefaults.language_code, "BCP-47 language of the models.");
ABSL_FLAG(std::string, device, kDefaults.device, "auto, cpu or cuda.");
ABSL_FLAG(std::string, gpu_precision, kDefaults.gpu_precision,
          "GPU activations and GEMM operands: fp32, fp16 or bf16 (FP32 accumulation).");
ABSL_FLAG(std::string, cpu_precision, kDefaults.cpu_precision,
          "CPU GEMM operands: auto (bf16 where the CPU has AMX or is an AMD one with AVX-512 BF16, "
          "else fp32), fp32, bf16 (AMX "
          "tiles, FP32 accumulation) or int8 (AMX-INT8 or AVX-512 VNNI; needs each model "
          "folder's int8_calibration.json: jasper-transcribe --calibrate_int8).");
ABSL_FLAG(bool, cuda_graphs, kDefaults.cuda_graphs,
          "GPU only: replay each batch shape's whole forward as one CUDA graph (captured on its "
          "second batch).");
ABSL_FLAG(int, num_workers, kDefaults.num_workers,
          "Backend replicas (scheduler worker threads); 0: one per core on the CPU backend (at "
          "most 64), 1 on CUDA. [0, 64]");
ABSL_FLAG(int, cpu_threads, kDefaults.cpu_threads,
          "Intra-op threads per CPU replica (each sub-block split among them; ignored by CUDA). "
          "[1, 256]");
ABSL_FLAG(int, frontend_threads, kDefaults.frontend_threads,
          "Threads for the calls' audio work (decoding, resampling, featurizing), apart from "
          "result delivery; 0: half the cores, clamped to [2, 8]. [0, 64]");
ABSL_FLAG(int, delivery_threads, kDefaults.delivery_threads,
          "Threads delivering results to the calls (one strand per call); 0: 2. [0, 64]");
ABSL_FLAG(bool, prioritize_streams, kDefaults.prioritize_streams,
          "Offline (Recognize) calls' work waits behind the streams' (false: first come, first "
          "served).");
ABSL_FLAG(bool, warmup, kDefaults.warmup, "Run a forward pass before serving.");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error.");

// Limits.
ABSL_FLAG(int, max_concurrent_streams, kDefaults.max_concurrent_streams,
          "Open calls (streaming + offline, both APIs); more: RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_message_bytes, kDefaults.max_message_bytes,
          "Largest request message; larger: RESOURCE_EXHAUSTED. Bounds offline audio.");
ABSL_FLAG(int64_t, max_stream_duration_ms, kDefaults.max_stream_duration_ms,
          "Longest stream (audio and wall time); longer: OUT_OF_RANGE.");
ABSL_FLAG(int, idle_timeout_ms, kDefaults.idle_timeout_ms,
          "A stream waiting this long for a client message ends with OUT_OF_RANGE (0: off).");
ABSL_FLAG(int, shutdown_grace_ms, kDefaults.shutdown_grace_ms,
          "On SIGTERM/SIGINT, time open streams get to receive their final results.");
ABSL_FLAG(int, idle_memory_release_ms, kDefaults.idle_memory_release_ms,
          "With no call open for this long, free heap memory goes back to the OS (0: off).");

// Metrics and security.
ABSL_FLAG(std::string, metrics_address, kDefaults.metrics_address,
          "host:port for Prometheus metrics over HTTP (GET /metrics), e.g. 127.0.0.1:9464. "
          "Empty: off.");
ABSL_FLAG(std::string, http_listen, kDefaults.http_address,
          "host:port of the HTTP front: OpenAI-compatible POST /v1/audio/transcriptions, GET "
          "/v1/models, /metrics, /health, WebSocket /v1/stream (docs/HTTP.md). HTTPS/WSS with "
          "the --tls_* flags (the gRPC port's certificate and client CA), else plaintext. "
          "Empty: off.");
ABSL_FLAG(int64_t, http_max_body_bytes, kDefaults.http_max_body_bytes,
          "HTTP: largest request body (uploaded file and form), bytes; larger: 413.");
ABSL_FLAG(int, http_max_connections, kDefaults.http_max_connections,
          "HTTP: open connections at most; more get 503.");
ABSL_FLAG(int, http_request_timeout_ms, kDefaults.http_request_timeout_ms,
          "HTTP: a request must arrive whole within this, else the connection closes.");
ABSL_FLAG(int, http_threads, kDefaults.http_threads, "HTTP: I/O threads.");
ABSL_FLAG(std::string, tls_cert_file, kDefaults.tls_cert_file,
          "PEM certificate chain for TLS on the gRPC port and the --http_listen front (with "
          "--tls_key_file). Empty: plaintext.");
ABSL_FLAG(std::string, tls_key_file, kDefaults.tls_key_file, "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, tls_client_ca_file, kDefaults.tls_client_ca_file,
          "PEM CA bundle: require and verify client certificates signed by it (mutual TLS).");
ABSL_FLAG(int, tls_reload_interval_s, kDefaults.tls_reload_interval_s,
          "Seconds between re-reads of the TLS files and --api_keys_file (rotation without "
          "restart).");
ABSL_FLAG(std::string, api_keys_file, kDefaults.api_keys_file,
          "File of API keys, one per line ('#' comments). Set: calls need 'authorization: "
          "Bearer <key>' or 'x-api-key: <key>' (health and reflection stay open). Empty: no "
          "auth.");

// Batching (engine/streaming/scheduler.h).
ABSL_FLAG(int, max_batch_size, kDefaults.scheduler.max_batch_size, "Windows per batch.");
ABSL_FLAG(int, max_queue_delay_ms, kDefaults.scheduler.max_queue_delay_ms,
          "Longest wait for a batch to fill.");
ABSL_FLAG(int, max_queued_windows, kDefaults.scheduler.max_queued_windows,
          "Queued windows; more: RESOURCE_EXHAUSTED (overloaded).");
ABSL_FLAG(std::string, bucket_frames, "",
          "Comma-separated length-bucket bounds in feature frames (empty: the default).");

// Streaming (engine/streaming/stream_session.h).
ABSL_FLAG(int, chunk_ms, kDefaults.streaming.chunk_ms, "Audio decoded per window.");
ABSL_FLAG(int, left_context_ms, kDefaults.streaming.left_context_ms,
          "Past audio in front of each chunk.");
ABSL_FLAG(int, right_context_ms, kDefaults.streaming.right_context_ms,
          "Look-ahead after each chunk (final text lags by this much).");
ABSL_FLAG(int, endpoint_silence_ms, kDefaults.streaming.endpoint_silence_ms,
          "Blank output this long ends an utterance (0: off). Per call: "
          "EndpointingConfig.stop_history.");
ABSL_FLAG(int, max_buffered_audio_ms, kDefaults.streaming.max_buffered_audio_ms,
          "Unprocessed audio held per stream before reads pause (flow control).");
ABSL_FLAG(int, max_inflight_windows, kDefaults.streaming.max_inflight_windows,
          "Windows of one stream in the scheduler at once.");

// Decoding (engine/decoding/ctc_decoder.h, ctc_beam.h).
ABSL_FLAG(std::string, decoder, kDefaults.decoder,
          "greedy or beam (CTC prefix beam search with --lm) for every model; empty: each model's "
          "model.json default_decoder (greedy when it names none). Per call: "
          "RecognitionConfig.decoder (jasper API); speech_contexts always use beam.");
ABSL_FLAG(int, beam_width, kDefaults.beam.beam_width, "Beam search: hypotheses kept. [1, 256]");
ABSL_FLAG(double, lm_weight, kDefaults.beam.lm_weight,
          "Beam search: weight of the LM's log-probability. [0, 10]");
ABSL_FLAG(double, word_bonus, kDefaults.beam.word_bonus,
          "Beam search: score per word, with an LM. [-20, 20]");
ABSL_FLAG(std::string, lm, "",
          "Beam search: word n-gram LM of the default model, ARPA (*.arpa) or binary "
          "(tools/build_lm.py). Empty: the model folder's (model.json language_model), if "
          "any; none: no LM.");
ABSL_FLAG(int, max_boost_phrases, kDefaults.boost_limits.max_phrases,
          "speech_contexts phrases per call (more: INVALID_ARGUMENT).");
ABSL_FLAG(int, max_boost_phrase_chars, kDefaults.boost_limits.max_phrase_chars,
          "Characters per boosted phrase, normalized (more: INVALID_ARGUMENT).");
ABSL_FLAG(double, max_abs_boost, kDefaults.boost_limits.max_abs_boost,
          "Largest |boost| of a speech_contexts phrase (more: INVALID_ARGUMENT).");

int main(int argc, char** argv) {
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "server/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "gRPC streaming speech recognition for Jasper/QuartzNet CTC models.\n"
      "Serves jasper.asr.v1.Asr and nvidia.riva.asr.RivaSpeechRecognition, plus "
      "grpc.health.v1 and reflection, on one port.\nUsage: jasper-server --model_dir=DIR "
      "[flags]");
  absl::ParseCommandLine(argc, argv);
  spdlog::set_level(spdlog::level::from_str(absl::GetFlag(FLAGS_log_level)));

  // Block the stop signals in every thread (threads inherit the mask); main waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  jasper::server::ServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.model_dir = absl::GetFlag(FLAGS_model_dir);
  if (options.model_dir.empty()) options.model_dir = jasper::FindDefaultModelDir();
  if (options.model_dir.empty()) {
    spdlog::error("no --model_dir given and no model folder under {}",
                  jasper::kDefaultModelSearchPath);
    return 2;
  }
  options.model_name = absl::GetFlag(FLAGS_model_name);
  options.extra_model_dirs = absl::GetFlag(FLAGS_extra_model_dirs);
  options.language_code = absl::GetFlag(FLAGS_language_code);
  options.device = absl::GetFlag(FLAGS_device);
  options.gpu_precision = absl::GetFlag(FLAGS_gpu_precision);
  options.cpu_precision = absl::GetFlag(FLAGS_cpu_precision);
  options.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  options.num_workers = absl::GetFlag(FLAGS_num_workers);
  options.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  options.frontend_threads = absl::GetFlag(FLAGS_frontend_threads);
  options.delivery_threads = absl::GetFlag(FLAGS_delivery_threads);
  options.prioritize_streams = absl::GetFlag(FLAGS_prioritize_streams);
  options.warmup = absl::GetFlag(FLAGS_warmup);
  options.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_stream_duration_ms = absl::GetFlag(FLAGS_max_stream_duration_ms);
  options.idle_timeout_ms = absl::GetFlag(FLAGS_idle_timeout_ms);
  options.shutdown_grace_ms = absl::GetFlag(FLAGS_shutdown_grace_ms);
  options.idle_memory_release_ms = absl::GetFlag(FLAGS_idle_memory_release_ms);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  options.http_address = absl::GetFlag(FLAGS_http_listen);
  options.http_max_body_bytes = absl::GetFlag(FLAGS_http_max_body_bytes);
  options.http_max_connections = absl::GetFlag(FLAGS_http_max_connections);
  options.http_request_timeout_ms = absl::GetFlag(FLAGS_http_request_timeout_ms);
  options.http_threads = absl::GetFlag(FLAGS_http_threads);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  options.tls_reload_interval_s = absl::GetFlag(FLAGS_tls_reload_interval_s);
  options.api_keys_file = absl::GetFlag(FLAGS_api_keys_file);
  options.scheduler.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  options.scheduler.max_queue_delay_ms = absl::GetFlag(FLAGS_max_queue_delay_ms);
  options.scheduler.max_queued_windows = absl::GetFlag(FLAGS_max_queued_windows);
  if (const std::string buckets = absl::GetFlag(FLAGS_bucket_frames); !buckets.empty()) {
    options.scheduler.bucket_frames.clear();
    for (absl::string_view part : absl::StrSplit(buckets, ',', absl::SkipWhitespace())) {
      int v = 0;
      if (!absl::SimpleAtoi(part, &v)) {
        spdlog::error("--bucket_frames: '{}' is not an integer", std::string(part));
        return 2;
      }
      options.scheduler.bucket_frames.push_back(v);
    }
  }
  options.streaming.chunk_ms = absl::GetFlag(FLAGS_chunk_ms);
  options.streaming.left_context_ms = absl::GetFlag(FLAGS_left_context_ms);
  options.streaming.right_context_ms = absl::GetFlag(FLAGS_right_context_ms);
  options.streaming.endpoint_silence_ms = absl::GetFlag(FLAGS_endpoint_silence_ms);
  options.decoder = absl::GetFlag(FLAGS_decoder);
  options.beam.beam_width = absl::GetFlag(FLAGS_beam_width);
  options.beam.lm_weight = static_cast<float>(absl::GetFlag(FLAGS_lm_weight));
  options.beam.word_bonus = static_cast<float>(absl::GetFlag(FLAGS_word_bonus));
  options.lm_file = absl::GetFlag(FLAGS_lm);
  options.boost_limits.max_phrases = absl::GetFlag(FLAGS_max_boost_phrases);
  options.boost_limits.max_phrase_chars = absl::GetFlag(FLAGS_max_boost_phrase_chars);
  options.boost_limits.max_abs_boost = static_cast<float>(absl::GetFlag(FLAGS_max_abs_boost));
  options.streaming.max_buffered_audio_ms = absl::GetFlag(FLAGS_max_buffered_audio_ms);
  options.streaming.max_inflight_windows = absl::GetFlag(FLAGS_max_inflight_windows);
  if (absl::Status s = options.Validate(); !s.ok()) {
    spdlog::error("invalid options: {}", s.ToString());
    return 2;
  }
  spdlog::info("options:\n{}", options.ToString());

  absl::StatusOr<std::unique_ptr<jasper::server::JasperServer>> server =
      jasper::server::JasperServer::Start(options);
  if (!server.ok()) {
    spdlog::error("cannot start: {}", server.status().ToString());
    return 1;
  }
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  spdlog::info("received signal {}", signal_number);
  (*server)->Shutdown();
  (*server)->Wait();
  server->reset();
  return 0;
}
