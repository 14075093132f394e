#include "server/serving_engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/backend_factory.h"
#include "engine/status_macros.h"
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
    case 0:  // ENCODING_UNSPECIFIED: a WAV header decides, else 16-bit PCM
    case 1:  // LINEAR_PCM
      config->format.encoding = AudioEncoding::kLinearPcm16;
      break;
    case 3:  // MULAW
      config->format.encoding = AudioEncoding::kMulaw;
      break;
    case 20:  // ALAW
      config->format.encoding = AudioEncoding::kAlaw;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported audio encoding ", encoding,
                       "; supported: LINEAR_PCM (with or without a WAV header), MULAW, ALAW"));
  }
  if (audio_channel_count < 0 || audio_channel_count > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "only mono audio is supported (audio_channel_count = ", audio_channel_count, ")"));
  }
  if (sample_rate_hertz < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample_rate_hertz = ", sample_rate_hertz, " is negative"));
  }
  config->format.sample_rate_hz = sample_rate_hertz;
  config->format.channels = 1;
  return config->format.Validate();
}

absl::StatusOr<std::unique_ptr<ServingEngine>> ServingEngine::Create(const ServerOptions& options) {
  JASPER_RETURN_IF_ERROR(options.Validate());
  absl::StatusOr<Device> device = ParseDevice(options.device);
  if (!device.ok()) return device.status();

  std::unique_ptr<ServingEngine> engine(new ServingEngine());
  engine->options_ = options;
  absl::StatusOr<std::shared_ptr<const Model>> model = Model::Load(options.model_dir);
  if (!model.ok()) {
    return absl::Status(
        model.status().code(),
        absl::StrCat("loading model from '", options.model_dir, "': ", model.status().message()));
  }
  engine->model_ = *std::move(model);
  engine->model_name_ = options.model_name;
  if (engine->model_name_.empty()) engine->model_name_ = engine->model_->config().name;
  if (engine->model_name_.empty()) {
    engine->model_name_ =
        std::filesystem::path(options.model_dir).lexically_normal().filename().string();
    if (engine->model_name_.empty()) {
      engine->model_name_ =
          std::filesystem::path(options.model_dir).lexically_normal().parent_path().filename();
    }
  }

  if (!options.lm_file.empty()) {
    absl::StatusOr<std::shared_ptr<const NgramLm>> lm;
    if (absl::EndsWith(options.lm_file, ".arpa")) {
      std::ifstream in(options.lm_file, std::ios::binary);
      if (!in) return absl::NotFoundError(absl::StrCat("cannot read lm_file ", options.lm_file));
      std::stringstream text;
      text << in.rdbuf();
      lm = NgramLm::FromArpa(text.str());
    } else {
      lm = NgramLm::LoadBinary(options.lm_file);
    }
    if (!lm.ok()) return lm.status();
    engine->lm_ = *std::move(lm);
  } else {
    engine->lm_ = engine->model_->language_model();  // the model folder's, if it has one
  }

  BackendOptions backend_options;
  backend_options.device = *device;
  // Beam search (the server's default or a request's) reads every label's log-probability.
  backend_options.keep_log_probs = true;
  backend_options.cpu_threads = options.cpu_threads;
  absl::StatusOr<kernels::Precision> precision = ParseGpuPrecision(options.gpu_precision);
  if (!precision.ok()) return precision.status();
  backend_options.gpu_precision = *precision;
  backend_options.cuda_graphs = options.cuda_graphs;
  backend_options.max_batch = options.scheduler.max_batch_size;
  std::vector<std::unique_ptr<Backend>> replicas;
  std::vector<const Backend*> backends;  // owned by the scheduler below; for the metrics
  // The first replica tells which device "auto" chose; num_workers = 0 then means one replica
  // per core on the CPU backend, one on CUDA.
  int num_workers = std::max(1, options.num_workers);
  for (int i = 0; i < num_workers; ++i) {
    absl::StatusOr<std::unique_ptr<Backend>> backend =
        CreateBackend(engine->model_, backend_options);
    if (!backend.ok()) return backend.status();
    if (i == 0) {
      engine->device_name_ = (*backend)->name();
      num_workers = options.ResolvedNumWorkers(absl::StartsWith(engine->device_name_, "cpu"),
                                               std::thread::hardware_concurrency());
    }
    backends.push_back(backend->get());
    replicas.push_back(*std::move(backend));
  }
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(std::move(replicas), options.scheduler);
  if (!scheduler.ok()) return scheduler.status();
  engine->delivery_ = std::make_unique<SerialExecutor>();
  engine->scheduler_ = *std::move(scheduler);
  engine->metrics_ = std::make_unique<ServerMetrics>(
      engine->model_->config().featurizer.window_stride_s, num_workers);
  engine->scheduler_->SetObserver(engine->metrics_.get());
  // GPU backends only; the scheduler keeps the backends until it is destroyed, after the
  // HTTP exporter (JasperServer) stops scraping.
  engine->metrics_->AddDeviceMemoryGauges(std::move(backends));
  {
    ServingEngine* e = engine.get();
    MetricsRegistry* r = engine->metrics_->registry();
    r->AddCallbackGauge("jasper_scheduler_queue_depth", "Windows waiting in the scheduler queue.",
                        {}, [e] {
                          return std::vector<GaugeSample>{
                              {{}, static_cast<double>(e->scheduler_->Stats().queue_depth)}};
                        });
    r->AddCallbackGauge("jasper_scheduler_running_windows",
                        "Windows in batches the backends are running now.", {}, [e] {
                          return std::vector<GaugeSample>{
                              {{}, static_cast<double>(e->scheduler_->Stats().running)}};
                        });
    r->AddCallbackGauge(
        "jasper_admitted_calls",
        "Recognition calls admitted now (streaming + offline, both APIs; the "
        "max_concurrent_streams limit applies to this).",
        {}, [e] {
          return std::vector<GaugeSample>{{{}, static_cast<double>(e->active_calls())}};
        });
    engine->idle_memory_releases_counter_ =
        r->AddCounter("jasper_idle_memory_releases_total",
                      "Times free heap memory was returned to the OS after "
                      "idle_memory_release_ms without calls.")
            ->Get();
    r->AddGauge("jasper_max_concurrent_streams", "The max_concurrent_streams limit.")
        ->Get()
        ->Set(options.max_concurrent_streams);
    r->AddGauge("jasper_max_queued_windows", "The max_queued_windows limit.")
        ->Get()
        ->Set(options.scheduler.max_queued_windows);
    r->AddGauge("jasper_build_info", "Always 1; labels describe the served model and device.",
                {"model", "device"})
        ->WithLabels({engine->model_name_, engine->device_name_})
        ->Set(1);
  }
  engine->timers_ = std::make_unique<TimerQueue>();

  // Window sizes must fit the model's encoder frame: check now rather than at the first call.
  CallConfig probe;
  probe.format.sample_rate_hz = engine->model_sample_rate_hz();
  StreamSession::Callbacks callbacks;
  callbacks.on_done = [](absl::Status) {};
  absl::StatusOr<std::unique_ptr<StreamSession>> session =
      engine->CreateSession(probe, /*streaming=*/true, std::move(callbacks));
  if (!session.ok()) return session.status();
  (*session)->Cancel();
  spdlog::info("model '{}' from {} ({} labels, {} Hz) on device {}: {} worker(s){}{}",
               engine->model_name_, options.model_dir, engine->model_->config().labels.size(),
               engine->model_sample_rate_hz(), engine->device_name_, num_workers,
               options.num_workers == 0 ? " (auto)" : "",
               absl::StartsWith(engine->device_name_, "cpu")
                   ? absl::StrCat(", ", backend_options.cpu_threads, " intra-op thread(s) each")
                   : absl::StrCat(", ", options.gpu_precision));
  return engine;
}

ServingEngine::~ServingEngine() {
  if (scheduler_) scheduler_->Shutdown();
  if (scheduler_) scheduler_->SetObserver(nullptr);
  timers_.reset();
  scheduler_.reset();
  delivery_.reset();  // after the scheduler's workers: runs what they posted
}

absl::Status ServingEngine::Warmup(double seconds, absl::Duration timeout) {
  struct State {
    absl::Notification done;
    absl::Status status;
    absl::Mutex mu;
    bool space ABSL_GUARDED_BY(mu) = false;
  };
  auto state = std::make_shared<State>();
  CallConfig config;
  config.format.encoding = AudioEncoding::kLinearPcm16;
  config.format.sample_rate_hz = model_sample_rate_hz();
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
  const int samples = static_cast<int>(seconds * model_sample_rate_hz());
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
  const size_t piece = 2 * static_cast<size_t>(model_sample_rate_hz()) / 10;
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
                                                               bool streaming) const {
  if (!config.model.empty() && config.model != model_name_) {
    return absl::NotFoundError(absl::StrCat("model '", config.model,
                                            "' not found; this server serves '", model_name_, "'"));
  }
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
  options.max_stream_duration_ms = options_.max_stream_duration_ms;
  // The session rounds it up to whole encoder frames (Model::EncoderFramesCeil).
  if (config.endpoint_silence_ms > 0) {
    options.endpoint_silence_ms = std::min(60000, config.endpoint_silence_ms);
  }
  const std::string decoder = config.decoder.empty() ? options_.decoder : config.decoder;
  if (decoder != "greedy" && decoder != "beam") {
    return absl::InvalidArgumentError(
        absl::StrCat("decoder: '", config.decoder, "' is not one of greedy, beam"));
  }
  options.decoder.beam = decoder == "beam" || !config.boost_phrases.empty();
  options.decoder.beam_options = options_.beam;
  options.decoder.lm = lm_;
  if (!config.boost_phrases.empty()) {
    absl::StatusOr<std::shared_ptr<const PhraseBoost>> boost =
        PhraseBoost::Create(config.boost_phrases, model_->config().labels, options_.boost_limits);
    if (!boost.ok()) return boost.status();
    options.decoder.boost = *std::move(boost);
  }
  return options;
}

absl::StatusOr<std::unique_ptr<StreamSession>> ServingEngine::CreateSession(
    const CallConfig& config, bool streaming, StreamSession::Callbacks callbacks) const {
  return CreateSessionImpl(config, streaming, std::move(callbacks), /*observe=*/true);
}

absl::StatusOr<std::unique_ptr<StreamSession>> ServingEngine::CreateSessionImpl(
    const CallConfig& config, bool streaming, StreamSession::Callbacks callbacks,
    bool observe) const {
  absl::StatusOr<StreamingOptions> options = SessionOptions(config, streaming);
  if (!options.ok()) return options.status();
  if (observe && metrics_ != nullptr) {
    // Results of one session arrive one at a time (the delivery executor), so the audio
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
  return StreamSession::Create(model_, scheduler_.get(), delivery_.get(), *options, config.format,
                               std::move(callbacks));
}

}  // namespace jasper::server
