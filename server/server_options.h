// ServerOptions: every limit and setting of jasper-server, each a named field with its default
// and the status a client gets when it is exceeded. main.cc maps one flag to each field;
// docs/API.md lists them.
//
// Plain value type; thread-compatible.
#ifndef JASPER_SERVER_SERVER_OPTIONS_H_
#define JASPER_SERVER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/streaming/scheduler.h"
#include "engine/streaming/stream_session.h"

namespace jasper::server {

struct ServerOptions {
  // host:port to listen on. Loopback by default; "0.0.0.0:50051" serves the network. Port 0
  // picks a free port (JasperServer::port() tells which).
  std::string listen_address = "127.0.0.1:50051";

  // Model folder (model.json + model.safetensors). Required (main.cc fills a default).
  std::string model_dir;
  // Name clients pass in RecognitionConfig.model; empty: model.json's name, else the folder's
  // base name.
  std::string model_name;
  // More model folders served beside model_dir (the default), each under its model.json name
  // (else its folder's base name); a request picks one by RecognitionConfig.model, and
  // ListModels / GetRivaSpeechRecognitionConfig list them all. Each gets its own backend
  // replicas (num_workers, cpu_threads, device as above) and scheduler; a folder's LM
  // (model.json language_model) serves its beam searches (lm_file applies to model_dir only).
  // Names must be distinct (INVALID_ARGUMENT at start). [0, 16] folders
  std::vector<std::string> extra_model_dirs;
  // BCP-47 language of the models. Requests naming another language get NOT_FOUND.
  std::string language_code = "en-US";

  // "auto" (CUDA when built and present, else CPU), "cpu" or "cuda".
  std::string device = "auto";
  // GPU only: "fp32" (CUDA cores, matches the CPU), "fp16" or "bf16" (tensor cores, FP32
  // accumulation; greedy transcripts equal FP32's on the parity fixtures). Ignored on the CPU.
  std::string gpu_precision = "fp32";
  // CPU only: "auto" (bf16 where the CPU has AMX or AMD's fast AVX-512 BF16, else fp32), "fp32",
  // or "bf16" (AMX tiles,
  // FP32 accumulation; vdpbf16ps on AVX-512 BF16 CPUs without AMX; refused at start without
  // either). See docs/PERFORMANCE.md for BF16's transcripts against FP32's.
  std::string cpu_precision = "auto";
  // GPU only: replay each batch shape's forward as one CUDA graph (BackendOptions::cuda_graphs).
  bool cuda_graphs = true;
  // Backend replicas = scheduler worker threads. 0 (default): automatic, one per core
  // (std::thread::hardware_concurrency(), clamped to [1, 64]) on the CPU backend, 1 on CUDA.
  // In a container set it: the count is the node's (or cpuset's) cores, not the CPU limit.
  // [0, 64]
  int num_workers = 0;
  // Intra-op threads per CPU replica (BackendOptions::cpu_threads): each sub-block's frames are
  // split among them. Default 1: with one replica per core, parallelism comes from replicas;
  // more threads lower one batch's latency. num_workers x cpu_threads should not exceed the
  // cores. Ignored by CUDA. [1, 256]
  int cpu_threads = 1;
  // Threads of the front-end pool, where every call's audio work runs (decoding, resampling,
  // cutting windows, featurizing; one strand per call, taking turns), apart from result
  // delivery and from gRPC's threads. 0 (default): automatic, half the cores, clamped to
  // [2, 8]. [0, 64]
  int frontend_threads = 0;
  // Threads of the delivery pool, where results go to the calls (one strand per call, so a
  // slow call holds up no other). 0 (default): automatic, 2. [0, 64]
  int delivery_threads = 0;
  // Offline (Recognize) calls run as bulk work: their windows, audio work and deliveries wait
  // behind every stream's (engine/streaming/priority.h), so long offline requests do not delay
  // the streams' partial and final results. false: one class, first come first served.
  bool prioritize_streams = true;

  // Streaming and offline calls open at once (both APIs together). Beyond it a new call gets
  // RESOURCE_EXHAUSTED at its start. [1, 100000]
  int max_concurrent_streams = 100;
  // Largest request message accepted (gRPC max receive size): an offline Recognize carries the
  // whole file, so this bounds offline audio (8 MiB = 4.3 min of 16 kHz 16-bit audio). Larger
  // messages fail with RESOURCE_EXHAUSTED. [4096, 1 GiB]
  int max_message_bytes = 8 << 20;
  // Longest stream, both as audio (the session's limit) and as wall time from the call's start.
  // Exceeding either ends the call with OUT_OF_RANGE. [1000, 86400000]
  int64_t max_stream_duration_ms = 3600000;
  // A stream with a read posted and no message (config, audio or control) for this long ends
  // with OUT_OF_RANGE. Time in which the server itself holds back reads (flow control) does
  // not count. 0 disables. [0, 3600000]
  int idle_timeout_ms = 30000;
  // On SIGTERM/SIGINT: health goes NOT_SERVING, new calls get UNAVAILABLE, open streams stop
  // reading, get their final results and end (UNAVAILABLE if the client had not half-closed);
  // after this long whatever is left is cancelled. [0, 600000]
  int shutdown_grace_ms = 10000;
  // When no call has been open for this long, the heap's free memory is handed back to the
  // operating system (glibc malloc_trim), so resident memory falls back towards its baseline
  // after a load peak instead of staying at the high-water mark. 0 disables. [0, 3600000]
  int idle_memory_release_ms = 1000;
  // Run a forward pass through the model before serving (health SERVING only after it).
  bool warmup = true;

  // Prometheus metrics: "host:port" of an HTTP listener serving GET /metrics (text format
  // 0.0.4), e.g. "127.0.0.1:9464" (port 0 picks one). Empty (default): no metrics listener.
  std::string metrics_address;

  // The HTTP front (server/http_server.h, docs/HTTP.md): "host:port" of a listener serving the
  // OpenAI-compatible POST /v1/audio/transcriptions, GET /v1/models, GET /metrics and
  // GET /health, and the WebSocket /v1/stream. HTTPS / WSS when tls_cert_file is set (the gRPC
  // port's certificate, client CA and reload interval), else plaintext (off loopback: put a
  // TLS proxy in front). Empty (default): off.
  std::string http_address;
  // Largest request body (an uploaded file and its form), bytes; over it: 413. [1 KiB, 1 GiB]
  int64_t http_max_body_bytes = 25 << 20;
  // Open HTTP connections; more get 503. With the body limit, bounds the HTTP front's
  // memory (about http_max_connections x http_max_body_bytes at worst). [1, 10000]
  int http_max_connections = 64;
  // A request (head and body) must arrive within this; then the connection closes.
  // [100, 3600000]
  int http_request_timeout_ms = 30000;
  int http_threads = 2;  // I/O threads of the HTTP front [1, 64]

  // Transport security of the gRPC port and of the HTTP front (http_address; metrics_address
  // stays plaintext). Both empty (default): plaintext. tls_cert_file (PEM certificate chain)
  // and tls_key_file (PEM private key) together: TLS. tls_client_ca_file (PEM CA bundle, needs
  // the other two): mutual TLS, every client must present a certificate signed by one of these
  // CAs. The files (and api_keys_file) are re-read every tls_reload_interval_s seconds (the
  // HTTP front: checked on a new connection at most that often), so rotated certificates and
  // keys are picked up without a restart. [1, 86400]
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  int tls_reload_interval_s = 60;

  // API keys, one per line ('#' comments; server/auth.h), re-read when the file changes.
  // Empty (default): no authentication.
  // Set: every call except grpc.health.v1 and reflection needs metadata
  // `authorization: Bearer <key>` or `x-api-key: <key>`, else UNAUTHENTICATED.
  std::string api_keys_file;

  // Decoding (engine/decoding/ctc_decoder.h): "greedy" or "beam" for every model; empty (the
  // default): each model's model.json default_decoder, greedy when it names none. A request may
  // ask for either (jasper.asr.v1 RecognitionConfig.decoder); a request with speech_contexts
  // (boosted phrases) is always decoded with beam search.
  std::string decoder;
  BeamOptions beam;  // beam_width, lm_weight, word_bonus, pruning
  // The default model's word n-gram LM for beam search: ARPA text (*.arpa) or the binary form;
  // "none": no LM; empty: the model folder's (model.json language_model), if any.
  std::string lm_file;
  // Per-request boosting limits; beyond them the call fails with INVALID_ARGUMENT.
  PhraseBoostLimits boost_limits;

  // Batching (engine/streaming/scheduler.h).
  SchedulerOptions scheduler;
  // Streaming windows, endpointing, buffering (engine/streaming/stream_session.h). Per-call
  // overrides: interim_results (from the request) and endpoint silence
  // (EndpointingConfig.stop_history).
  StreamingOptions streaming;

  // INVALID_ARGUMENT naming the field.
  absl::Status Validate() const;
  // num_workers with 0 resolved for the device the backend runs on: `cores` (clamped to
  // [1, 64]) when `cpu_backend`, else 1. `cores` is normally std::thread::hardware_concurrency().
  int ResolvedNumWorkers(bool cpu_backend, unsigned cores) const;
  // frontend_threads / delivery_threads with 0 resolved for `cores`.
  int ResolvedFrontendThreads(unsigned cores) const;
  int ResolvedDeliveryThreads() const { return delivery_threads > 0 ? delivery_threads : 2; }
  // One line per field, for the startup log.
  std::string ToString() const;
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_SERVER_OPTIONS_H_
