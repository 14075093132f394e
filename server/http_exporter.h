// HttpExporter: the Prometheus listener of --metrics_address, on the HTTP front's server
// (server/http_server.h) with one route. `GET /metrics` (and HEAD) answers 200 with the text of
// `render()` (Content-Type `content_type`); any other path is 404, any other method 405, a
// malformed request 400, a request head over kMaxRequestBytes 431. Every response closes the
// connection (a scraper needs no keep-alive). One I/O thread; at most kMaxConnections
// connections (more get 503); a request must arrive within kConnectionTimeoutMs.
//
// Ownership: owns its server; owns `render` (called on the I/O thread, one call at a time;
// what it captures must outlive the exporter).
// Thread-safety: Start/port/destructor from any thread; the destructor stops the thread.
#ifndef JASPER_SERVER_HTTP_EXPORTER_H_
#define JASPER_SERVER_HTTP_EXPORTER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/http_server.h"

namespace jasper::server {

class HttpExporter {
 public:
  static constexpr int kMaxConnections = 16;
  static constexpr int kMaxRequestBytes = 8192;
  static constexpr int kConnectionTimeoutMs = 10000;

  // Binds `address` ("host:port", "[v6]:port"; port 0 picks one) and starts serving.
  // Errors: INVALID_ARGUMENT (malformed address), UNAVAILABLE (cannot resolve or bind).
  static absl::StatusOr<std::unique_ptr<HttpExporter>> Start(const std::string& address,
                                                             std::string content_type,
                                                             std::function<std::string()> render);
  HttpExporter(const HttpExporter&) = delete;
  HttpExporter& operator=(const HttpExporter&) = delete;

  // The bound port.
  int port() const { return server_->port(); }

 private:
  HttpExporter() = default;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_HTTP_EXPORTER_H_
