// HttpServer: the HTTP/1.1 front of jasper-server (--http_listen), on Boost.Beast over
// Boost.Asio (docs/HTTP.md says why this library). Asynchronous: a few I/O threads serve every
// connection, and a handler answers whenever it is ready (recognition runs on the engine's
// pools, never on an I/O thread), so a slow request holds no thread.
//
// Per connection: keep-alive, one request at a time. The request head is limited to
// max_header_bytes (431), the body to max_body_bytes (413, checked against Content-Length
// before the body is read, and while a chunked body arrives); `Expect: 100-continue` is
// answered before the body is read. A request must arrive whole within request_timeout_ms of
// its first byte (or of the connection's idle start), else the connection is closed; the
// handler's own time is not limited here. Connections beyond max_connections get 503 and are
// closed. Errors the server answers itself carry an OpenAI-style JSON body
// ({"error": {"message", "type", "code"}}).
//
// TLS: with HttpServerOptions::tls set, every connection is HTTPS (and WebSockets WSS): TLS 1.2
// or newer, the handshake done (within request_timeout_ms) before the first request is read,
// mutual TLS when a client CA is given (server/http_tls.h), certificates re-read when their
// files change (new connections get the new ones, open connections keep theirs).
//
// Ownership: owns its acceptor, connections and I/O threads; the handler must outlive the
// server. Thread-safety: the handler runs on I/O threads, several at once; a Responder may be
// called from any thread, exactly once. Stop() and the destructor from any thread but an I/O
// thread.
#ifndef JASPER_SERVER_HTTP_SERVER_H_
#define JASPER_SERVER_HTTP_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace jasper::server {

struct HttpRequest {
  std::string method;                                        // "GET", "POST", ...
  std::string path;                                          // the target without its query
  std::string query;                                         // after '?', undecoded
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;

  // The first header of that (lower-case) name; "" when absent.
  absl::string_view Header(absl::string_view lower_name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  bool close = false;  // close the connection after this response (else keep-alive)
};

// {"error": {"message": ..., "type": ..., "code": ...}} with `status`.
HttpResponse JsonError(int status, absl::string_view message, absl::string_view type,
                       absl::string_view code);

// Sends the response; call exactly once, from any thread.
using HttpResponder = std::function<void(HttpResponse)>;
using HttpHandler = std::function<void(HttpRequest, HttpResponder)>;

// One accepted WebSocket connection (RFC 6455) of the HTTP front. Messages arrive whole
// (fragments reassembled), at most HttpServerOptions::max_websocket_message_bytes (larger: the
// connection is closed with 1009). Pings are answered by the library.
// Thread-safety: thread-safe (calls are posted to the connection's strand); at most one Read and
// one Write outstanding; callbacks run on an I/O thread. After the server stops, calls do
// nothing and their callbacks never run.
class WebSocket {
 public:
  virtual ~WebSocket() = default;
  // done(ok, is_text, data): ok false when the peer closed the connection or it failed.
  virtual void Read(std::function<void(bool ok, bool is_text, std::string data)> done) = 0;
  virtual void Write(bool is_text, std::string data, std::function<void(bool ok)> done) = 0;
  // Sends a close frame (`reason` cut to 123 bytes); the connection then ends.
  virtual void Close(int code, std::string reason) = 0;
};

// Called on an I/O thread once the handshake of an upgrade request to one of the
// websocket_paths is done. Returns what the connection keeps alive until it ends (the call
// object; it should hold the WebSocket weakly).
using WebSocketHandler =
    std::function<std::shared_ptr<void>(const HttpRequest&, std::weak_ptr<WebSocket>)>;

// TLS of an HttpServer (server/http_tls.h builds the OpenSSL context from it).
struct HttpTlsOptions {
  std::string cert_file;       // PEM certificate chain (leaf first)
  std::string key_file;        // PEM private key of the leaf
  std::string client_ca_file;  // PEM CA bundle: mutual TLS, a client certificate is required
                               // and verified against it; empty: no client certificates
  // At most this often (on a new connection), the files' modification times are checked, and
  // the context is rebuilt when one changed (a failed rebuild keeps the previous one).
  int reload_interval_s = 60;
};

// Checks that `tls` names a readable certificate chain and a private key that matches it (and
// a readable client CA bundle, when set), by building the context HttpServer::Start would.
// INVALID_ARGUMENT naming the file otherwise.
absl::Status CheckHttpTls(const HttpTlsOptions& tls);

struct HttpServerOptions {
  std::string address;  // "host:port" or "[v6]:port"; port 0 picks one
  int threads = 2;      // I/O threads
  int64_t max_body_bytes = 25 << 20;
  int max_header_bytes = 16 << 10;
  int request_timeout_ms = 30000;
  int max_connections = 64;
  // Paths where a WebSocket upgrade is accepted (others: 404 for upgrades).
  std::vector<std::string> websocket_paths;
  int64_t max_websocket_message_bytes = 1 << 20;
  // Set: HTTPS / WSS on every connection; absent: plaintext.
  std::optional<HttpTlsOptions> tls;
};

class HttpServer {
 public:
  struct Impl;  // http_server.cc
  // Binds and starts serving. Errors: INVALID_ARGUMENT (malformed address or options, or TLS
  // files that cannot be used: the message names the file), UNAVAILABLE (cannot resolve or
  // bind).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           HttpHandler handler,
                                                           WebSocketHandler websocket = nullptr);
  // Stop(), then joins the I/O threads (responses not yet sent are dropped).
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Stops accepting connections; open ones are served until they close. Idempotent.
  void StopAccepting();

  int port() const { return port_; }

 private:
  HttpServer() = default;

  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::vector<std::thread> threads_;
};

// Splits "host:port" / "[v6]:port" into host (brackets removed) and port. INVALID_ARGUMENT when
// the port is missing or not in [0, 65535], or the host is empty.
absl::Status SplitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace jasper::server

#endif  // JASPER_SERVER_HTTP_SERVER_H_
