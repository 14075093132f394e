// JasperServer: the whole server in one object, used by main.cc and by the in-process tests.
// Loads the engine, warms it up, then listens with both ASR services, the gRPC health service
// (SERVING from the start, since the warm-up ran before the port opened) and server reflection.
//
// Shutdown(): health NOT_SERVING; new calls get UNAVAILABLE; open streams stop reading, get
// their final results and end; after shutdown_grace_ms, grpc::Server::Shutdown cancels what is
// left; then the scheduler drains. Idempotent; the destructor calls it.
//
// Optional parts, from ServerOptions: TLS / mTLS on the gRPC port (server/tls.h), API-key
// authentication and per-call metrics in one interceptor (server/call_interceptor.h), and the
// Prometheus endpoint (server/http_exporter.h) when metrics_address is set, and the HTTP front
// (server/http_server.h with server/openai_api.h's routes) when http_address is set.
//
// Ownership: owns the engine, the services, the grpc::Server, the metrics exporter and the
// thread that re-reads the API keys file.
// Thread-safety: Shutdown() and Wait() may be called from any thread (not from a reaction).
#ifndef JASPER_SERVER_JASPER_SERVER_H_
#define JASPER_SERVER_JASPER_SERVER_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "server/asr_service.h"
#include "server/http_exporter.h"
#include "server/http_server.h"
#include "server/riva_service.h"
#include "server/server_options.h"
#include "server/serving_engine.h"

namespace jasper::server {

class JasperServer {
 public:
  // Errors: invalid options, model/device errors, a failed warm-up, a port that cannot be
  // bound (UNAVAILABLE).
  static absl::StatusOr<std::unique_ptr<JasperServer>> Start(const ServerOptions& options);
  ~JasperServer();

  // The bound port (the picked one when listen_address asked for port 0).
  int port() const { return port_; }
  // The metrics listener's bound port; 0 without metrics_address.
  int metrics_port() const;
  // The HTTP front's bound port; 0 without http_address.
  int http_port() const;
  ServingEngine* engine() const { return engine_.get(); }

  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until the gRPC server has shut down.
  void Wait();

 private:
  JasperServer() = default;

  std::unique_ptr<ServingEngine> engine_;
  std::unique_ptr<AsrService> asr_service_;
  std::unique_ptr<RivaService> riva_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpExporter> exporter_;
  std::unique_ptr<HttpServer> http_;  // the HTTP front (server/openai_api.h)
  // Re-reads the API keys file every tls_reload_interval_s (only with api_keys_file).
  // std::mutex (not absl::Mutex): see engine/streaming/clock.h (ThreadSanitizer).
  std::mutex reload_mu_;
  std::condition_variable reload_cv_;
  bool stop_reloading_ = false;  // guarded by reload_mu_
  std::thread key_reloader_;
  int port_ = 0;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_JASPER_SERVER_H_
