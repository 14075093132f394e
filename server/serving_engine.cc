#include "server/serving_engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "engine/runtime/backend.h"
#include "engine/status_macros.h"
#include "engine/streaming/channel_sessions.h"
#include "kernels/cpu_features.h"
#include "spdlog/spdlog.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace jasper::server {
namespace {

// Returns the heap's free pages to the OS; true when something was released. A no-op without
// glibc (other allocators return memory on their own schedule).
bool ReleaseFreeHeapMemory() {
#if defined(__GLIBC__)
  return malloc_trim(0) != 0;
#else
  return false;
#endif
}

}  // namespace

CallTicket::~CallTicket() { engine_->Release(id_); }

absl::Status SetAudioFormat(int encoding, int sample_rate_hertz, int audio_channel_count,
                            CallConfig* config) {
  switch (encoding) {
    case 0:  // ENCODING_UNSPECIFIED: a WAV header or a compressed container decides, else PCM
    case 1:  // LINEAR_PCM
      config->format.encoding = AudioEncoding::kLinearPcm16;
      break;
    case 3:  // MULAW
      config->format.encoding = AudioEncoding::kMulaw;
      break;
    case 20:  // ALAW
      config->format.encoding = AudioEncoding::kAlaw;
      break;
    case 2:  // FLAC
      config->format.encoding = AudioEncoding::kFlac;
      break;
    case 4:  // OGGOPUS: an Ogg stream of Opus (or Vorbis)
      config->format.encoding = AudioEncoding::kOggOpus;
      break;
    case 8:  // MP3 (jasper.asr.v1 only; Google's number)
      config->format.encoding = AudioEncoding::kMp3;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported audio encoding ", encoding,
                       "; supported: LINEAR_PCM (with or without a WAV header), MULAW, ALAW, FLAC, "
                       "OGGOPUS, MP3"));
  }
  if (audio_channel_count < 0 || audio_channel_count > kMaxInputChannels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "audio_channel_count must be in [0, ", kMaxInputChannels, "], got ", audio_channel_count));
  }
  if (sample_rate_hertz < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample_rate_hertz = ", sample_rate_hertz, " is negative"));
  }
  config->format.sample_rate_hz = sample_rate_hertz;
  config->format.channels = std::max(1, audio_channel_count);  // a WAV header overrides it
  return config->format.Validate();
}

absl::StatusOr<std::unique_ptr<ServingEngine>> ServingEngine::Create(const ServerOptions& options) {
  JASPER_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<ServingEngine> engine(new ServingEngine());
  engine->options_ = options;
  // Sessions of every model run their audio work and deliver their results on these; they
  // must exist before any scheduler runs.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  engine->frontend_ = std::make_unique<TaskPool>(options.ResolvedFrontendThreads(cores));
  engine->delivery_ = std::make_unique<TaskPool>(options.ResolvedDeliveryThreads());
  JASPER_RETURN_IF_ERROR(engine->LoadModels());
  engine->RegisterMetrics();
  engine->timers_ = std::make_unique<TimerQueue>();
  for (const auto& m : engine->models_) {
    // Window sizes must fit each model's encoder frame: check now rather than at the first call.
    absl::StatusOr<StreamingOptions> session_options =
        engine->SessionOptions(CallConfig{}, *m, /*streaming=*/true);
    if (!session_options.ok()) return session_options.status();
    if (absl::Status s = StreamSession::CheckOptions(*m->model, *session_options); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("model '", m->name, "': ", s.message()));
    }
    engine->LogModel(*m);
  }
  return engine;
}

absl::Status ServingEngine::LoadModels() {
  std::vector<std::string> dirs = {options_.model_dir};
  dirs.insert(dirs.end(), options_.extra_model_dirs.begin(), options_.extra_model_dirs.end());
  for (size_t i = 0; i < dirs.size(); ++i) {
    // model_name and lm_file name the default model's; the others use their folders'.
    absl::StatusOr<std::unique_ptr<ServedModel>> served = LoadServedModel(
        dirs[i], i == 0 ? options_.model_name : "", i == 0 ? options_.lm_file : "", options_);
    if (!served.ok()) return served.status();
    for (const auto& other : models_) {
      if (other->name == (*served)->name) {
        return absl::InvalidArgumentError(absl::StrCat(
            "two model folders are named '", other->name, "' (", other->dir, " and ", dirs[i],
            "); give them distinct names in model.json (or --model_name for the default)"));
      }
    }
    models_.push_back(*std::move(served));
  }
  return absl::OkStatus();
}

void ServingEngine::RegisterMetrics() {
  // One set of metrics for all models; replicas are numbered across them in folder order.
  int replicas = 0;
  std::vector<const Backend*> backends;
  for (const auto& m : models_) {
    replicas += m->num_workers;
    backends.insert(backends.end(), m->backends.begin(), m->backends.end());
  }
  metrics_ = std::make_unique<ServerMetrics>(default_model().feature_frame_s(), replicas);
  int first_replica = 0;
  for (const auto& m : models_) {
    m->SetObserver(metrics_->ObserverFor(first_replica, m->feature_frame_s()));
    first_replica += m->num_workers;
  }
  // GPU backends only; the schedulers keep the backends until they are destroyed, after the
  // HTTP exporter (JasperServer) stops scraping.
  metrics_->AddDeviceMemoryGauges(std::move(backends));
  MetricsRegistry* r = metrics_->registry();
  const auto sum_stats = [this](int64_t SchedulerStats::*field) {
    int64_t total = 0;
    for (const auto& m : models_) total += m->scheduler->Stats().*field;
    return std::vector<GaugeSample>{{{}, static_cast<double>(total)}};
  };
  r->AddCallbackGauge("jasper_scheduler_queue_depth",
                      "Windows waiting in the schedulers' queues (all models).", {},
                      [sum_stats] { return sum_stats(&SchedulerStats::queue_depth); });
  r->AddCallbackGauge("jasper_scheduler_bulk_queue_depth",
                      "Of the windows waiting, the bulk ones (offline calls' windows, which wait "
                      "behind the streams'; all models).",
                      {}, [sum_stats] { return sum_stats(&SchedulerStats::bulk_queue_depth); });
  r->AddCallbackGauge("jasper_scheduler_running_windows",
                      "Windows in batches the backends are running now (all models).", {},
                      [sum_stats] { return sum_stats(&SchedulerStats::running); });
  r->AddCallbackGauge("jasper_admitted_calls",
                      "Recognition calls admitted now (streaming + offline, both APIs; the "
                      "max_concurrent_streams limit applies to this).",
                      {}, [this] {
                        return std::vector<GaugeSample>{{{}, static_cast<double>(active_calls())}};
                      });
  idle_memory_releases_counter_ =
      r->AddCounter("jasper_idle_memory_releases_total",
                    "Times free heap memory was returned to the OS after "
                    "idle_memory_release_ms without calls.")
          ->Get();
  r->AddGauge("jasper_max_concurrent_streams", "The max_concurrent_streams limit.")
      ->Get()
      ->Set(options_.max_concurrent_streams);
  r->AddGauge("jasper_max_queued_windows", "The max_queued_windows limit (per model).")
      ->Get()
      ->Set(options_.scheduler.max_queued_windows);
  GaugeFamily* threads =
      r->AddGauge("jasper_engine_threads",
                  "Threads of the engine's pools (frontend: audio work; delivery: "
                  "results to the calls).",
                  {"pool"});
  threads->WithLabels({"frontend"})->Set(frontend_->threads());
  threads->WithLabels({"delivery"})->Set(delivery_->threads());
  GaugeFamily* info =
      r->AddGauge("jasper_build_info", "Always 1; one series per served model and its device.",
                  {"model", "device"});
  for (const auto& m : models_) info->WithLabels({m->name, m->device_name})->Set(1);
}

void ServingEngine::LogModel(const ServedModel& m) const {
  spdlog::info(
      "model '{}'{} from {} ({} labels, {} Hz{}, {} decoding) on device {}: {} worker(s){}{}",
      m.name, &m == &default_model() ? " (default)" : "", m.dir, m.model->config().labels.size(),
      m.sample_rate_hz(), m.lm != nullptr ? ", with an LM" : "", DefaultDecoder(m), m.device_name,
      m.num_workers, options_.num_workers == 0 ? " (auto)" : "",
      absl::StartsWith(m.device_name, "cpu")
          ? absl::StrCat(", ", options_.cpu_threads, " intra-op thread(s) each, ", m.precision,
                         " (", kernels::DescribeCpuFeatures(), ")")
          : absl::StrCat(", ", m.precision));
}

ServingEngine::~ServingEngine() {
  ShutdownSchedulers();
  timers_.reset();
  models_.clear();
  // After the schedulers' workers: run what they posted (front-end tasks post deliveries, and
  // delivered callbacks may post audio work: a pool posted to after its threads are gone runs
  // the task on the posting thread).
  frontend_.reset();
  delivery_.reset();
}

void ServingEngine::ShutdownSchedulers() {
  for (const auto& m : models_) m->Shutdown();
}

absl::StatusOr<const ServedModel*> ServingEngine::FindModel(const std::string& name) const {
  if (name.empty()) return models_.front().get();
  std::string served;
  for (const auto& m : models_) {
    if (m->name == name) return m.get();
    absl::StrAppend(&served, served.empty() ? "'" : ", '", m->name, "'");
  }
  return absl::NotFoundError(
      absl::StrCat("model '", name, "' not found; this server serves ", served));
}

std::string ServingEngine::DefaultDecoder(const ServedModel& model) const {
  return options_.decoder.empty() ? model.model->config().decoder_or_greedy() : options_.decoder;
}

absl::Status ServingEngine::Warmup(double seconds, absl::Duration timeout) {
  for (const auto& m : models_) {
    if (absl::Status s = WarmupModel(*m, seconds, timeout); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("model '", m->name, "': ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ServingEngine::WarmupModel(const ServedModel& served, double seconds,
                                        absl::Duration timeout) {
  struct State {
    absl::Notification done;
    absl::Status status;
    absl::Mutex mu;
    bool space ABSL_GUARDED_BY(mu) = false;
  };
  auto state = std::make_shared<State>();
  CallConfig config;
  config.model = served.name;
  config.format.encoding = AudioEncoding::kLinearPcm16;
  config.format.sample_rate_hz = served.sample_rate_hz();
  StreamSession::Callbacks callbacks;
  callbacks.on_space_available = [state] {
    absl::MutexLock lock(&state->mu);
    state->space = true;
  };
  callbacks.on_done = [state](absl::Status s) {
    state->status = std::move(s);
    state->done.Notify();
  };
  absl::StatusOr<std::unique_ptr<StreamSession>> session =
      CreateSessionImpl(config, /*streaming=*/false, std::move(callbacks), /*observe=*/false);
  if (!session.ok()) return session.status();
  const int samples = static_cast<int>(seconds * served.sample_rate_hz());
  std::vector<uint8_t> bytes(2 * static_cast<size_t>(samples));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> noise(-64, 64);
  for (int i = 0; i < samples; ++i) {
    const uint16_t v = static_cast<uint16_t>(static_cast<int16_t>(noise(rng)));
    bytes[2 * i] = static_cast<uint8_t>(v & 0xff);
    bytes[2 * i + 1] = static_cast<uint8_t>(v >> 8);
  }
  // Push in pieces the session accepts, waiting for on_space_available when it is full (the
  // warm-up runs on main's thread before serving, so it may block).
  size_t pos = 0;
  const size_t piece = 2 * static_cast<size_t>(served.sample_rate_hz()) / 10;
  const absl::Time deadline = absl::Now() + timeout;
  while (pos < bytes.size()) {
    {
      absl::MutexLock lock(&state->mu);
      state->space = false;
    }
    if (!(*session)->CanAcceptAudio()) {
      absl::MutexLock lock(&state->mu);
      if (!state->mu.AwaitWithDeadline(absl::Condition(&state->space), deadline)) {
        (*session)->Cancel();
        return absl::DeadlineExceededError("warm-up timed out");
      }
      continue;
    }
    const size_t n = std::min(piece, bytes.size() - pos);
    JASPER_RETURN_IF_ERROR((*session)->PushAudio(absl::MakeConstSpan(bytes.data() + pos, n)));
    pos += n;
  }
  JASPER_RETURN_IF_ERROR((*session)->Finish());
  if (!state->done.WaitForNotificationWithDeadline(deadline)) {
    (*session)->Cancel();
    return absl::DeadlineExceededError("warm-up timed out");
  }
  return state->status;
}

absl::StatusOr<std::unique_ptr<CallTicket>> ServingEngine::Admit(std::function<void()> on_drain) {
  absl::MutexLock lock(&mu_);
  if (draining_) return absl::UnavailableError("server is shutting down");
  if (static_cast<int>(calls_.size()) >= options_.max_concurrent_streams) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "too many concurrent streams (max_concurrent_streams = ", options_.max_concurrent_streams,
        ")"));
  }
  const uint64_t id = next_id_++;
  calls_.emplace(id, std::move(on_drain));
  ++call_generation_;
  return std::unique_ptr<CallTicket>(new CallTicket(this, id));
}

void ServingEngine::Release(uint64_t id) {
  const int delay_ms = options_.idle_memory_release_ms;
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    calls_.erase(id);
    if (!calls_.empty() || delay_ms <= 0 || draining_ || timers_ == nullptr) return;
    generation = ++call_generation_;
  }
  timers_->Schedule(absl::Now() + absl::Milliseconds(delay_ms),
                    [this, generation] { MaybeReleaseIdleMemory(generation); });
}

void ServingEngine::MaybeReleaseIdleMemory(uint64_t generation) {
  {
    absl::MutexLock lock(&mu_);
    if (generation != call_generation_ || !calls_.empty()) return;  // calls came since
  }
  // Sessions free their buffers when their calls end; glibc keeps the freed pages in its
  // arenas (one per thread that allocated) until trimmed. Runs on the timer thread, off
  // every call's path.
  const bool released = ReleaseFreeHeapMemory();
  spdlog::debug("idle for {} ms: free heap memory {}returned to the OS",
                options_.idle_memory_release_ms, released ? "" : "not ");
  {
    absl::MutexLock lock(&mu_);
    ++idle_memory_releases_;
  }
  if (idle_memory_releases_counter_ != nullptr) idle_memory_releases_counter_->Increment();
}

int64_t ServingEngine::idle_memory_releases() const {
  absl::MutexLock lock(&mu_);
  return idle_memory_releases_;
}

void ServingEngine::StartDraining() {
  std::vector<std::function<void()>> listeners;
  {
    absl::MutexLock lock(&mu_);
    if (draining_) return;
    draining_ = true;
    for (auto& [id, fn] : calls_) {
      if (fn) listeners.push_back(fn);
    }
  }
  for (auto& fn : listeners) fn();
}

bool ServingEngine::AwaitNoCalls(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.empty(); };
  return mu_.AwaitWithDeadline(absl::Condition(&none), deadline);
}

int ServingEngine::active_calls() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(calls_.size());
}

bool ServingEngine::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

absl::StatusOr<StreamingOptions> ServingEngine::SessionOptions(const CallConfig& config,
                                                               const ServedModel& served,
                                                               bool streaming) const {
  if (!config.language_code.empty()) {
    const std::string want = absl::AsciiStrToLower(config.language_code);
    const std::string have = absl::AsciiStrToLower(options_.language_code);
    const std::string have_primary = have.substr(0, have.find('-'));
    if (want != have && want != have_primary) {
      return absl::NotFoundError(absl::StrCat("no model for language_code '", config.language_code,
                                              "'; this server serves '", options_.language_code,
                                              "'"));
    }
  }
  StreamingOptions options = options_.streaming;
  options.interim_results = streaming && config.interim_results;
  options.priority =
      !streaming && options_.prioritize_streams ? Priority::kBulk : Priority::kInteractive;
  options.max_stream_duration_ms = options_.max_stream_duration_ms;
  // The session rounds it up to whole encoder frames (Model::EncoderFramesCeil).
  if (config.endpoint_silence_ms > 0) {
    options.endpoint_silence_ms = std::min(60000, config.endpoint_silence_ms);
  }
  const std::string decoder = config.decoder.empty() ? DefaultDecoder(served) : config.decoder;
  if (decoder != "greedy" && decoder != "beam") {
    return absl::InvalidArgumentError(
        absl::StrCat("decoder: '", config.decoder, "' is not one of greedy, beam"));
  }
  options.decoder.max_alternatives = std::max(1, config.max_alternatives);
  options.decoder.beam =
      decoder == "beam" || !config.boost_phrases.empty() || options.decoder.max_alternatives > 1;
  options.decoder.beam_options = options_.beam;
  using Stage = CallConfig::Stage;
  options.inverse_text_normalization =
      config.itn == Stage::kOn ||
      (config.itn == Stage::kIfAvailable && served.model->inverse_normalizer() != nullptr);
  options.automatic_punctuation =
      config.punctuation == Stage::kOn ||
      (config.punctuation == Stage::kIfAvailable && served.model->punctuator() != nullptr);
  options.decoder.lm = served.lm;
  if (!config.boost_phrases.empty()) {
    absl::StatusOr<std::shared_ptr<const PhraseBoost>> boost = PhraseBoost::Create(
        config.boost_phrases, served.model->config().labels, options_.boost_limits);
    if (!boost.ok()) return boost.status();
    options.decoder.boost = *std::move(boost);
  }
  return options;
}

absl::StatusOr<std::unique_ptr<RecognitionSession>> ServingEngine::CreateSession(
    const CallConfig& config, bool streaming, RecognitionSession::Callbacks callbacks) const {
  if (!config.separate_channels || config.format.channels < 2) {
    return CreateSessionImpl(config, streaming, std::move(callbacks), /*observe=*/true);
  }
  return ChannelSessions::Create(
      config.format.channels,
      [this, &config, streaming](int channel, RecognitionSession::Callbacks inner) {
        CallConfig one = config;
        one.format.channel = channel;
        return CreateSessionImpl(one, streaming, std::move(inner), /*observe=*/true);
      },
      std::move(callbacks));
}

absl::StatusOr<std::unique_ptr<StreamSession>> ServingEngine::CreateSessionImpl(
    const CallConfig& config, bool streaming, RecognitionSession::Callbacks callbacks,
    bool observe) const {
  absl::StatusOr<const ServedModel*> served = FindModel(config.model);
  if (!served.ok()) return served.status();
  absl::StatusOr<StreamingOptions> options = SessionOptions(config, **served, streaming);
  if (!options.ok()) return options.status();
  if (observe && metrics_ != nullptr) {
    // Results of one session arrive one at a time (its delivery strand), so the audio
    // covered so far needs no lock; the atomic only keeps the state safe to share.
    ServerMetrics* metrics = metrics_.get();
    auto covered_s = std::make_shared<std::atomic<double>>(0.0);
    callbacks.on_result = [metrics, streaming, covered_s,
                           inner = std::move(callbacks.on_result)](const SessionResult& r) {
      metrics->OnResult(streaming, r.is_final, r.processing_latency_ms);
      const double before = covered_s->load(std::memory_order_relaxed);
      if (r.audio_processed_s > before) {
        covered_s->store(r.audio_processed_s, std::memory_order_relaxed);
        metrics->AddAudio(streaming, r.audio_processed_s - before);
      }
      if (inner) inner(r);
    };
  }
  return StreamSession::Create((*served)->model, (*served)->scheduler.get(), frontend_.get(),
                               delivery_.get(), *options, config.format, std::move(callbacks));
}

}  // namespace jasper::server
