// HttpExporter: a minimal HTTP/1.1 server for Prometheus scrapes. `GET /metrics` (and HEAD)
// answers 200 with the text of `render()` (Content-Type: the exposition format 0.0.4); any
// other path is 404, any other method 405, a malformed request 400, a request head over
// kMaxRequestBytes 431. Every response closes the connection.
//
// One thread runs a poll() loop over the listening socket and at most kMaxConnections
// connections (further connections wait in the kernel's backlog); a connection that has not
// sent its request head and received its response within kConnectionTimeoutMs is closed. No
// request body, keep-alive or chunked encoding: a scraper needs none of them.
//
// Ownership: owns its sockets and its thread; owns `render` (called on the exporter's thread,
// one call at a time; what it captures must outlive the exporter).
// Thread-safety: Start/port/destructor from any thread; the destructor stops and joins.
#ifndef JASPER_SERVER_HTTP_EXPORTER_H_
#define JASPER_SERVER_HTTP_EXPORTER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace jasper::server {

class HttpExporter {
 public:
  static constexpr int kMaxConnections = 16;
  static constexpr int kMaxRequestBytes = 8192;
  static constexpr int kConnectionTimeoutMs = 10000;
  // After the response, how long to wait for the client to close before closing anyway.
  static constexpr int kLingerMs = 1000;

  // Binds `address` ("host:port", "[v6]:port"; port 0 picks one) and starts serving.
  // Errors: INVALID_ARGUMENT (malformed address), UNAVAILABLE (cannot resolve or bind).
  static absl::StatusOr<std::unique_ptr<HttpExporter>> Start(const std::string& address,
                                                             std::string content_type,
                                                             std::function<std::string()> render);
  // Stops serving, closes every socket, joins the thread.
  ~HttpExporter();

  HttpExporter(const HttpExporter&) = delete;
  HttpExporter& operator=(const HttpExporter&) = delete;

  // The bound port.
  int port() const { return port_; }

 private:
  struct Connection;
  HttpExporter() = default;
  void Loop();
  // Builds the response for a complete request head.
  std::string Respond(const std::string& head);

  std::string content_type_;
  std::function<std::string()> render_;
  int listen_fd_ = -1;
  int wake_read_fd_ = -1;
  int wake_write_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// Splits "host:port" / "[v6]:port" into host (brackets removed) and port. INVALID_ARGUMENT when
// the port is missing or not in [0, 65535], or the host is empty.
absl::Status SplitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace jasper::server

#endif  // JASPER_SERVER_HTTP_EXPORTER_H_
