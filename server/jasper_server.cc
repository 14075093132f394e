#include "server/jasper_server.h"

#include <chrono>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
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
  std::unique_ptr<JasperServer> server(new JasperServer());
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

  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, grpc::InsecureServerCredentials(),
                           &server->port_);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.RegisterService(server->asr_service_.get());
  builder.RegisterService(server->riva_service_.get());
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
      "(port {})",
      options.listen_address, server->port_);
  return server;
}

void JasperServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (server_ == nullptr) return;
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
  engine_->scheduler()->Shutdown();
  spdlog::info("shutdown complete");
}

void JasperServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

JasperServer::~JasperServer() {
  Shutdown();
  server_.reset();
  riva_service_.reset();
  asr_service_.reset();
  engine_.reset();
}

}  // namespace jasper::server
