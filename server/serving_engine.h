// ServingEngine: what both gRPC services share. The served models (server/served_model.h: the
// default from model_dir, then extra_model_dirs; each with its scheduler and backend replicas),
// admission control (max_concurrent_streams over all models, draining), the timer thread, and
// the translation of a call's configuration (CallConfig, filled by either API's adapter) into
// a StreamSession on the model it names.
//
// Memory: when the last open call ends and no call comes for idle_memory_release_ms, the timer
// thread returns the heap's free pages to the OS (glibc malloc_trim), so resident memory goes
// back down after a load peak.
//
// Threads: each call's audio work runs on its strand of the front-end pool, its results go out
// on its strand of the delivery pool (docs/STREAMING.md, Threads), so delivery never waits
// behind a call's audio work and no call's work waits behind another's for more than a turn.
//
// Metrics: owns the ServerMetrics, which observes the scheduler and every session created by
// CreateSession() (result latencies, audio seconds); see server/server_metrics.h. On GPU
// backends it also exports their device memory (read at scrape time from the scheduler's
// backends, so Render() must not outlive the scheduler: JasperServer stops its exporter first).
//
// Ownership: owns the served models (and through them the schedulers and backends), the two
// task pools, the timer queue and the metrics. Outlives every call (JasperServer destroys the gRPC
// server first). Thread-safety: thread-safe.
#ifndef JASPER_SERVER_SERVING_ENGINE_H_
#define JASPER_SERVER_SERVING_ENGINE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/audio/audio_input.h"
#include "engine/decoding/ngram_lm.h"
#include "engine/model/model.h"
#include "engine/streaming/scheduler.h"
#include "engine/streaming/stream_session.h"
#include "engine/streaming/task_pool.h"
#include "server/served_model.h"
#include "server/server_metrics.h"
#include "server/server_options.h"
#include "server/timer_queue.h"

namespace jasper::server {

// A call's recognition settings, API-independent.
struct CallConfig {
  std::string model;          // empty: the default model
  std::string language_code;  // empty: the model's
  AudioFormat format;         // rate 0 allowed for LINEAR_PCM with a WAV header
  // Per-channel recognition (enable_separate_recognition_per_channel with
  // audio_channel_count > 1): format.channels sessions, one per channel (ChannelSessions);
  // results carry their channel. Else the channels are averaged into one.
  bool separate_channels = false;
  bool interim_results = false;
  bool word_time_offsets = false;
  bool speech_events = false;
  int endpoint_silence_ms = 0;             // <= 0: the server default
  std::string decoder;                     // "", "greedy" or "beam" ("": the server's --decoder)
  std::vector<BoostPhrase> boost_phrases;  // speech_contexts: decoded with beam search
  // Alternatives per final result, [0, DecoderConfig::kMaxAlternatives] (0 and 1: one); more
  // than one selects beam search.
  int max_alternatives = 0;
  // A text stage of results: kOff; kIfAvailable when the model has what it needs; kOn required
  // (a model without it is FAILED_PRECONDITION).
  enum class Stage { kOff, kIfAvailable, kOn };
  // Written form (engine/text/inverse_normalizer.h): kIfAvailable is Riva's
  // verbatim_transcripts = false.
  Stage itn = Stage::kOff;
  // Punctuation and capitals (engine/text/punctuator.h), after ITN: kOn is both gRPC APIs'
  // enable_automatic_punctuation and the HTTP form field of that name.
  Stage punctuation = Stage::kOff;
  std::string request_id;
};

// Fills config->format from a request's encoding (the value of nvidia.riva.AudioEncoding or
// jasper.asr.v1.AudioEncoding, which share their numbers), sample rate and channel count.
// INVALID_ARGUMENT: an encoding other than unspecified/LINEAR_PCM/MULAW/ALAW, a channel count
// outside [0, 8] (0 means 1; channels are averaged into one), a negative or out-of-range rate,
// mu-law/A-law without a rate.
absl::Status SetAudioFormat(int encoding, int sample_rate_hertz, int audio_channel_count,
                            CallConfig* config);

class ServingEngine;

// Admission of one call; releases its slot when destroyed. Not thread-safe (owned by a call).
class CallTicket {
 public:
  ~CallTicket();
  CallTicket(const CallTicket&) = delete;
  CallTicket& operator=(const CallTicket&) = delete;

 private:
  friend class ServingEngine;
  CallTicket(ServingEngine* engine, uint64_t id) : engine_(engine), id_(id) {}
  ServingEngine* engine_;
  uint64_t id_;
};

class ServingEngine {
 public:
  // Loads every model folder (LoadServedModel: backend replicas per model on options.device,
  // a scheduler each). Errors: invalid options, model load errors, device errors, two folders
  // under one name (INVALID_ARGUMENT).
  static absl::StatusOr<std::unique_ptr<ServingEngine>> Create(const ServerOptions& options);
  // Stops the schedulers (runs what is queued) and the timers.
  ~ServingEngine();

  // Runs `seconds` of quiet noise through a session of each model (features, batching,
  // backend, decoding) and waits for its final result. Blocks: call it before serving, never
  // from a reaction.
  absl::Status Warmup(double seconds, absl::Duration timeout);
  // Stops every model's scheduler: queued windows run, new ones are refused. Idempotent.
  void ShutdownSchedulers();

  // Admits a call: UNAVAILABLE while draining, RESOURCE_EXHAUSTED when
  // max_concurrent_streams calls are open. `on_drain` (may be empty) runs once when draining
  // starts, on the thread calling StartDraining(), without engine locks held.
  absl::StatusOr<std::unique_ptr<CallTicket>> Admit(std::function<void()> on_drain)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Refuses new calls from now on and runs every admitted call's on_drain. Idempotent.
  void StartDraining() ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until no call is admitted or `deadline`; true when none is left.
  bool AwaitNoCalls(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  int active_calls() const ABSL_LOCKS_EXCLUDED(mu_);
  // Times free heap memory was handed back to the OS after idle_memory_release_ms without
  // calls (also the jasper_idle_memory_releases_total counter).
  int64_t idle_memory_releases() const ABSL_LOCKS_EXCLUDED(mu_);
  bool draining() const ABSL_LOCKS_EXCLUDED(mu_);

  // Checks the model and language a call asks for (NOT_FOUND naming what is served), builds
  // its session options on that model (`streaming` false: offline, no interim results) and
  // creates the session: a StreamSession, or ChannelSessions for config.separate_channels.
  absl::StatusOr<std::unique_ptr<RecognitionSession>> CreateSession(
      const CallConfig& config, bool streaming, RecognitionSession::Callbacks callbacks) const;

  // The model a request names (empty: the default); NOT_FOUND naming the served ones.
  absl::StatusOr<const ServedModel*> FindModel(const std::string& name) const;
  // The decoder a call on `model` that names none gets: the server's --decoder, else the model
  // folder's default_decoder, else "greedy".
  std::string DefaultDecoder(const ServedModel& model) const;
  // Every served model, the default first; never empty.
  const std::vector<std::unique_ptr<ServedModel>>& models() const { return models_; }
  const ServedModel& default_model() const { return *models_.front(); }

  const ServerOptions& options() const { return options_; }
  // The default model's name.
  const std::string& model_name() const { return default_model().name; }
  const std::string& language_code() const { return options_.language_code; }
  // "cpu" or "cuda:N" (the default model's first replica's).
  const std::string& device_name() const { return default_model().device_name; }
  ServerMetrics* metrics() const { return metrics_.get(); }
  TimerQueue* timers() const { return timers_.get(); }

 private:
  friend class CallTicket;
  ServingEngine() = default;
  // Create()'s steps: every model folder (default first; distinct names), then the metrics
  // that observe them, then (per model) the start-up log line.
  absl::Status LoadModels();
  void RegisterMetrics();
  void LogModel(const ServedModel& m) const;
  void Release(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Timer callback: releases free heap memory when no call came and went since `generation`.
  void MaybeReleaseIdleMemory(uint64_t generation) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status WarmupModel(const ServedModel& served, double seconds, absl::Duration timeout);
  // The session options of a call on `served` (the model the call names); INVALID_ARGUMENT /
  // NOT_FOUND for a bad decoder, boost list or language.
  absl::StatusOr<StreamingOptions> SessionOptions(const CallConfig& config,
                                                  const ServedModel& served, bool streaming) const;
  // CreateSession; `observe` false keeps the session out of the metrics (warm-up).
  absl::StatusOr<std::unique_ptr<StreamSession>> CreateSessionImpl(
      const CallConfig& config, bool streaming, RecognitionSession::Callbacks callbacks,
      bool observe) const;

  ServerOptions options_;
  // Declared before the models: it observes their schedulers, so it must be destroyed after.
  std::unique_ptr<ServerMetrics> metrics_;
  // Sessions run their audio work on frontend_ and deliver their results on delivery_ (one
  // strand each per session; server_options.h sizes them). Declared before the models: the
  // schedulers' workers post to them until they are joined, so they are destroyed after them.
  std::unique_ptr<TaskPool> frontend_;
  std::unique_ptr<TaskPool> delivery_;
  std::vector<std::unique_ptr<ServedModel>> models_;  // the default first
  std::unique_ptr<TimerQueue> timers_;

  mutable absl::Mutex mu_;
  std::map<uint64_t, std::function<void()>> calls_ ABSL_GUARDED_BY(mu_);  // id -> on_drain
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  // Bumped by every Admit and every release that leaves no call open; an idle-release timer
  // only acts if it is unchanged.
  uint64_t call_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t idle_memory_releases_ ABSL_GUARDED_BY(mu_) = 0;
  Counter* idle_memory_releases_counter_ = nullptr;  // owned by metrics_
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_SERVING_ENGINE_H_
