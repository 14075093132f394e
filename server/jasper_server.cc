#include "server/jasper_server.h"

#include <chrono>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/auth.h"
#include "server/call_interceptor.h"
#include "server/openai_api.h"
#include "server/tls.h"
#include "server/tsan_hand_off.h"
#include "spdlog/spdlog.h"

namespace jasper::server {
namespace {

constexpr const char* kServiceNames[] = {"jasper.asr.v1.Asr",
                                         "nvidia.riva.asr.RivaSpeechRecognition"};

void InitGrpcOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Both apply to every server built afterwards and are not thread-safe: once per process.
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<JasperServer>> JasperServer::Start(const ServerOptions& options) {
  InitGrpcOnce();
  JASPER_RETURN_IF_ERROR(options.Validate());
  // Security settings first: a bad file fails before the model loads.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options);
  if (!credentials.ok()) return credentials.status();
  // The HTTP front serves the same certificate (and client CA) as the gRPC port; its OpenSSL
  // context is built here once to refuse a key that does not match before the model loads.
  std::optional<HttpTlsOptions> http_tls;
  if (!options.http_address.empty() && !options.tls_cert_file.empty()) {
    http_tls = HttpTlsOptions{options.tls_cert_file, options.tls_key_file,
                              options.tls_client_ca_file, options.tls_reload_interval_s};
    JASPER_RETURN_IF_ERROR(CheckHttpTls(*http_tls));
  }
  std::shared_ptr<ApiKeyStore> keys;
  if (!options.api_keys_file.empty()) {
    absl::StatusOr<std::unique_ptr<ApiKeyStore>> opened = ApiKeyStore::Open(options.api_keys_file);
    if (!opened.ok()) return opened.status();
    keys = *std::move(opened);
    spdlog::info(
        "API keys: {} loaded from {} (re-read every {} s); health and reflection stay open",
        keys->Current()->size(), options.api_keys_file, options.tls_reload_interval_s);
  }
  std::unique_ptr<JasperServer> server(new JasperServer());
  if (keys != nullptr) {
    JasperServer* raw = server.get();
    const std::chrono::seconds interval(options.tls_reload_interval_s);
    server->key_reloader_ = std::thread([raw, keys, interval] {
      std::unique_lock<std::mutex> lock(raw->reload_mu_);
      while (!raw->reload_cv_.wait_for(lock, interval, [raw] { return raw->stop_reloading_; })) {
        lock.unlock();
        keys->ReloadIfChanged();
        lock.lock();
      }
    });
  }
  absl::StatusOr<std::unique_ptr<ServingEngine>> engine = ServingEngine::Create(options);
  if (!engine.ok()) return engine.status();
  server->engine_ = *std::move(engine);
  if (options.warmup) {
    const absl::Time start = absl::Now();
    if (absl::Status s = server->engine_->Warmup(2.0, absl::Seconds(120)); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("warm-up failed: ", s.message()));
    }
    spdlog::info("warm-up forward pass done in {:.0f} ms",
                 absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  server->asr_service_ = std::make_unique<AsrService>(server->engine_.get());
  server->riva_service_ = std::make_unique<RivaService>(server->engine_.get());

  if (options.tls_cert_file.empty() && !IsLoopbackAddress(options.listen_address)) {
    spdlog::warn(
        "listening on {} without TLS: calls{} travel in plaintext; set --tls_cert_file and "
        "--tls_key_file, or serve behind a TLS-terminating proxy",
        options.listen_address, keys != nullptr ? " and API keys" : "");
  }
  if (!options.metrics_address.empty()) {
    ServerMetrics* metrics = server->engine_->metrics();
    absl::StatusOr<std::unique_ptr<HttpExporter>> exporter =
        HttpExporter::Start(options.metrics_address, MetricsRegistry::kContentType,
                            [metrics] { return metrics->Render(); });
    if (!exporter.ok()) return exporter.status();
    server->exporter_ = *std::move(exporter);
  }

  if (!options.http_address.empty()) {
    HttpServerOptions h;
    h.address = options.http_address;
    h.threads = options.http_threads;
    h.max_body_bytes = options.http_max_body_bytes;
    h.max_connections = options.http_max_connections;
    h.request_timeout_ms = options.http_request_timeout_ms;
    h.tls = http_tls;
    ServerMetrics* metrics = server->engine_->metrics();
    h.websocket_paths = {kWebSocketStreamPath};
    ServingEngine* engine = server->engine_.get();
    absl::StatusOr<std::unique_ptr<HttpServer>> http = HttpServer::Start(
        h, MakeOpenAiHandler(engine, keys, [metrics] { return metrics->Render(); }),
        [engine, keys](const HttpRequest& request,
                       std::weak_ptr<WebSocket> socket) -> std::shared_ptr<void> {
          if (keys != nullptr && !HttpRequestHasKey(request, *keys->Current())) {
            if (auto s = socket.lock()) s->Close(4016, "missing or invalid API key");
            return nullptr;
          }
          return StartWebSocketStream(engine, std::move(socket));
        });
    if (!http.ok()) return http.status();
    server->http_ = *std::move(http);
    if (!http_tls.has_value() && !IsLoopbackAddress(options.http_address)) {
      spdlog::warn(
          "HTTP front on {} is plaintext: set --tls_cert_file and --tls_key_file, or put a "
          "TLS-terminating proxy in front of it",
          options.http_address);
    }
    spdlog::info(
        "serving {} (OpenAI /v1/audio/transcriptions, /v1/models, /metrics, /v1/stream) on {} "
        "(http port {})",
        !http_tls.has_value()              ? "HTTP, plaintext,"
        : http_tls->client_ca_file.empty() ? "HTTPS (TLS)"
                                           : "HTTPS (mutual TLS)",
        options.http_address, server->http_->port());
  }

  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, *credentials, &server->port_);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  auto factory = std::make_unique<CallInterceptorFactory>(server->engine_->metrics(), keys);
  const CallInterceptorFactory* const factory_key = factory.get();  // owned by gRPC from here
  interceptors.push_back(std::move(factory));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  // gRPC sets SO_REUSEPORT by default, so a second server on a port another gRPC server holds
  // would start and silently share its connections. Refuse the port instead (UNAVAILABLE).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(server->asr_service_.get());
  builder.RegisterService(server->riva_service_.get());
  // gRPC's threads reach the state built above through its uninstrumented core: the factory
  // consumes this for TSan in CreateServerInterceptor, the shutdown path on the metrics object
  // (server/tsan_hand_off.h).
  TsanPublish(factory_key);
  TsanPublish(server->engine_->metrics());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen_address));
  }
  grpc::HealthCheckServiceInterface* health = server->server_->GetHealthCheckService();
  if (health != nullptr) {
    health->SetServingStatus(true);
    for (const char* name : kServiceNames) health->SetServingStatus(name, true);
  }
  spdlog::info(
      "serving jasper.asr.v1.Asr and nvidia.riva.asr.RivaSpeechRecognition on {} "
      "(port {}), {}",
      options.listen_address, server->port_,
      options.tls_cert_file.empty()        ? "plaintext"
      : options.tls_client_ca_file.empty() ? "TLS"
                                           : "mutual TLS");
  return server;
}

void JasperServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (server_ == nullptr) return;
  if (http_ != nullptr) http_->StopAccepting();
  const ServerOptions& o = engine_->options();
  spdlog::info("shutting down: {} open calls, grace {} ms", engine_->active_calls(),
               o.shutdown_grace_ms);
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(false);  // every service NOT_SERVING
  }
  engine_->StartDraining();
  const absl::Time deadline = absl::Now() + absl::Milliseconds(o.shutdown_grace_ms);
  if (!engine_->AwaitNoCalls(deadline)) {
    spdlog::warn("{} calls still open after the grace period; cancelling them",
                 engine_->active_calls());
  }
  // Calls still open are cancelled at the deadline; unary calls already done return at once.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  TsanConsume(engine_->metrics());  // every call's last touch (~CallInterceptor) is done
  engine_->ShutdownSchedulers();
  spdlog::info("shutdown complete");
}

int JasperServer::metrics_port() const { return exporter_ != nullptr ? exporter_->port() : 0; }
int JasperServer::http_port() const { return http_ != nullptr ? http_->port() : 0; }

void JasperServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

JasperServer::~JasperServer() {
  Shutdown();
  {
    std::lock_guard<std::mutex> lock(reload_mu_);
    stop_reloading_ = true;
  }
  reload_cv_.notify_all();
  if (key_reloader_.joinable()) key_reloader_.join();
  http_.reset();      // its handler reads the engine; calls still open end with it
  exporter_.reset();  // its render callback reads the engine
  server_.reset();
  riva_service_.reset();
  asr_service_.reset();
  engine_.reset();
}

}  // namespace jasper::server
