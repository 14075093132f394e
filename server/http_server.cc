#include "server/http_server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>  // ssl_stream, and the WebSocket's TLS teardown
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <set>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/http_tls.h"
#include "spdlog/spdlog.h"

namespace jasper::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

absl::Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  std::string h;
  std::string p;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("address '", address, "' is not [IPv6]:port"));
    }
    h = address.substr(1, close - 1);
    p = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("address '", address, "' has no :port"));
    }
    h = address.substr(0, colon);
    p = address.substr(colon + 1);
    if (h.find(':') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", address, "': write IPv6 hosts as [host]:port"));
    }
  }
  int port_number = -1;
  if (h.empty() || !absl::SimpleAtoi(p, &port_number) || port_number < 0 || port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", address, "' is not host:port with a port in [0, 65535]"));
  }
  *host = h;
  *port = port_number;
  return absl::OkStatus();
}

absl::string_view HttpRequest::Header(absl::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return {};
}

HttpResponse JsonError(int status, absl::string_view message, absl::string_view type,
                       absl::string_view code) {
  HttpResponse r;
  r.status = status;
  nlohmann::json error = {{"message", std::string(message)},
                          {"type", std::string(type)},
                          {"param", nullptr},
                          {"code", std::string(code)}};
  r.body = nlohmann::json{{"error", error}}.dump();
  return r;
}

// What responders share with the server: whether it still runs (then its io_context is alive),
// and the connections waiting for a handler's response (held here, so that a responder called
// after the server is gone touches nothing of it). Connections of either stream type.
struct HttpToken {
  std::mutex mu;
  bool alive = true;
  std::set<std::shared_ptr<void>> waiting;
  std::set<std::shared_ptr<void>> websockets;  // open ones (dropped when they end)
};

struct HttpServer::Impl {
  Impl(const HttpServerOptions& o, HttpHandler h, WebSocketHandler w)
      : options(o),
        handler(std::move(h)),
        ws_handler(std::move(w)),
        acceptor(asio::make_strand(io)) {}

  void Accept();
  // Serves an accepted socket as a Connection<Stream> (TLS streams with `tls_context`).
  template <class Stream>
  void Serve(tcp::socket socket, std::shared_ptr<asio::ssl::context> tls_context);

  const HttpServerOptions options;
  const HttpHandler handler;
  const WebSocketHandler ws_handler;
  const std::shared_ptr<HttpToken> token = std::make_shared<HttpToken>();
  // Before io: connections destroyed with the io_context's pending handlers still count down.
  std::atomic<int> connections{0};
  std::atomic<bool> accepting{true};
  asio::io_context io;
  // Keeps io.run() going while no connection is open.
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work{
      asio::make_work_guard(io)};
  tcp::acceptor acceptor;
  std::unique_ptr<HttpTlsContextSource> tls;  // set: every connection is TLS
};

namespace {

namespace websocket = boost::beast::websocket;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// Whether connections over Stream are TLS (else plaintext beast::tcp_stream).
template <class Stream>
inline constexpr bool kIsTls = !std::is_same_v<Stream, beast::tcp_stream>;

// How long a closing TLS connection waits for the peer's close_notify.
constexpr auto kTlsShutdownTimeout = std::chrono::seconds(1);

// A new connection's stream over `socket`; TLS streams use `tls_context`.
template <class Stream>
Stream MakeStream(tcp::socket socket, asio::ssl::context* tls_context) {
  if constexpr (kIsTls<Stream>) {
    return Stream(beast::tcp_stream(std::move(socket)), *tls_context);
  } else {
    return Stream(std::move(socket));
  }
}

// Stream: beast::tcp_stream (ws://) or TlsStream (wss://, the TLS handshake already done).
template <class Stream>
class WsConnection : public WebSocket, public std::enable_shared_from_this<WsConnection<Stream>> {
 public:
  using std::enable_shared_from_this<WsConnection<Stream>>::shared_from_this;

  WsConnection(Stream stream, std::shared_ptr<asio::ssl::context> tls_context,
               HttpServer::Impl* server)
      : tls_context_(std::move(tls_context)),
        ws_(std::move(stream)),
        server_(server),
        token_(server->token) {
    server_->connections.fetch_add(1);
  }
  ~WsConnection() override { server_->connections.fetch_sub(1); }

  void Accept(http::request<http::string_body> req, HttpRequest request) {
    ws_.read_message_max(static_cast<uint64_t>(server_->options.max_websocket_message_bytes));
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    auto self = shared_from_this();
    ws_.async_accept(req, [self, request = std::move(request)](beast::error_code ec) {
      if (ec) return;
      {
        std::lock_guard<std::mutex> lock(self->token_->mu);
        if (!self->token_->alive) return;
        self->token_->websockets.insert(self);
      }
      self->owner_ = self->server_->ws_handler(request, self);
    });
  }

  void Read(std::function<void(bool, bool, std::string)> done) override {
    Post([self = shared_from_this(), done = std::move(done)]() mutable {
      self->ws_.async_read(self->in_, [self, done = std::move(done)](beast::error_code ec, size_t) {
        if (ec) {
          done(false, false, std::string());
          return self->End();
        }
        std::string data = beast::buffers_to_string(self->in_.data());
        self->in_.consume(self->in_.size());
        done(true, self->ws_.got_text(), std::move(data));
      });
    });
  }

  void Write(bool is_text, std::string data, std::function<void(bool)> done) override {
    Post([self = shared_from_this(), is_text, data = std::make_shared<std::string>(std::move(data)),
          done = std::move(done)]() mutable {
      self->ws_.text(is_text);
      self->ws_.async_write(asio::buffer(*data),
                            [self, data, done = std::move(done)](beast::error_code ec, size_t) {
                              done(!ec);
                              if (ec) self->End();
                            });
    });
  }

  void Close(int code, std::string reason) override {
    if (reason.size() > 123) reason.resize(123);
    Post([self = shared_from_this(), code, reason = std::move(reason)] {
      websocket::close_reason why(static_cast<websocket::close_code>(code), reason);
      self->ws_.async_close(why, [self](beast::error_code) { self->End(); });
    });
  }

 private:
  // Runs `fn` on the connection's strand, unless the server has stopped.
  template <typename F>
  void Post(F&& fn) {
    std::lock_guard<std::mutex> lock(token_->mu);
    if (!token_->alive) return;
    asio::post(ws_.get_executor(), std::forward<F>(fn));
  }
  // The connection is over: the handler's object goes (on this I/O thread), the server forgets it.
  void End() {
    owner_.reset();
    std::lock_guard<std::mutex> lock(token_->mu);
    token_->websockets.erase(shared_from_this());
  }

  // Before ws_: the OpenSSL objects of a TLS stream use it until they are gone (null: plain).
  const std::shared_ptr<asio::ssl::context> tls_context_;
  websocket::stream<Stream> ws_;
  beast::flat_buffer in_;
  HttpServer::Impl* const server_;
  const std::shared_ptr<HttpToken> token_;
  std::shared_ptr<void> owner_;  // the handler's (the call), on the strand
};

// One HTTP connection. Stream: beast::tcp_stream (http://) or TlsStream (https://).
template <class Stream>
class Connection : public std::enable_shared_from_this<Connection<Stream>> {
 public:
  using std::enable_shared_from_this<Connection<Stream>>::shared_from_this;

  Connection(tcp::socket socket, std::shared_ptr<asio::ssl::context> tls_context,
             HttpServer::Impl* server)
      : tls_context_(std::move(tls_context)),
        stream_(MakeStream<Stream>(std::move(socket), tls_context_.get())),
        server_(server) {
    server_->connections.fetch_add(1);
  }
  ~Connection() { server_->connections.fetch_sub(1); }

  // Serves requests, after the TLS handshake on a TLS stream (which must end within the request
  // timeout, else the connection closes). `refuse`: the connection limit was reached: one 503,
  // then close.
  void Start(bool refuse) {
    if constexpr (kIsTls<Stream>) {
      Lowest().expires_after(std::chrono::milliseconds(server_->options.request_timeout_ms));
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = shared_from_this(), refuse](beast::error_code ec) {
                                if (ec) {  // not TLS, a certificate refused, a timeout, ...
                                  spdlog::debug("HTTP TLS handshake: {}", ec.message());
                                  return;  // the socket closes with this connection
                                }
                                self->Serve(refuse);
                              });
    } else {
      Serve(refuse);
    }
  }

 private:
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  void Serve(bool refuse) {
    if (!refuse) return ReadHeader();
    Send(JsonError(503, "too many HTTP connections; retry later", "server_error",
                   "too_many_connections"),
         /*keep_alive=*/false);
  }

  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(server_->options.max_header_bytes));
    parser_->body_limit(static_cast<uint64_t>(server_->options.max_body_bytes));
    Lowest().expires_after(std::chrono::milliseconds(server_->options.request_timeout_ms));
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Connection::OnHeader, shared_from_this()));
  }

  void OnHeader(beast::error_code ec, size_t) {
    if (ec == http::error::body_limit) return TooLarge();  // Content-Length over the limit
    if (ec) return Fail(ec);
    const auto& req = parser_->get();
    if (const auto length = parser_->content_length();
        length && *length > static_cast<uint64_t>(server_->options.max_body_bytes)) {
      return TooLarge();
    }
    if (absl::EqualsIgnoreCase(std::string(req[http::field::expect]), "100-continue")) {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_,
                                                                     req.version());
      http::async_write(stream_, *cont,
                        [self = shared_from_this(), cont](beast::error_code e, size_t) {
                          if (e) return self->Fail(e);
                          self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Connection::OnRequest, shared_from_this()));
  }

  void TooLarge() {
    Send(JsonError(413,
                   absl::StrCat("the request body is over --http_max_body_bytes = ",
                                server_->options.max_body_bytes),
                   "invalid_request_error", "request_too_large"),
         /*keep_alive=*/false);
  }

  void OnRequest(beast::error_code ec, size_t) {
    if (ec == http::error::body_limit) return TooLarge();
    if (ec) return Fail(ec);
    http::request<http::string_body> req = parser_->release();
    HttpRequest request;
    const bool upgrade = websocket::is_upgrade(req);
    request.method = std::string(req.method_string());
    const std::string target(req.target());
    const size_t q = target.find('?');
    request.path = target.substr(0, q);
    if (q != std::string::npos) request.query = target.substr(q + 1);
    for (const auto& field : req) {
      request.headers.emplace_back(absl::AsciiStrToLower(std::string(field.name_string())),
                                   std::string(field.value()));
    }
    if (upgrade) {
      const auto& paths = server_->options.websocket_paths;
      if (server_->ws_handler == nullptr ||
          std::find(paths.begin(), paths.end(), request.path) == paths.end()) {
        return Send(JsonError(404, absl::StrCat("no WebSocket route ", request.path.substr(0, 128)),
                              "invalid_request_error", "not_found"),
                    false);
      }
      Lowest().expires_never();  // the WebSocket's own timeouts apply from here
      auto ws = std::make_shared<WsConnection<Stream>>(std::move(stream_), tls_context_, server_);
      ws->Accept(std::move(req), std::move(request));
      return;  // this HTTP connection object ends here; the stream is the WebSocket's
    }
    request.body = std::move(req.body());
    const bool keep_alive = req.keep_alive();
    // The handler's time is its own (recognition of a long file): no timeout while it runs.
    Lowest().expires_never();
    std::shared_ptr<HttpToken> token = server_->token;
    {
      std::lock_guard<std::mutex> lock(token->mu);
      token->waiting.insert(shared_from_this());
    }
    std::weak_ptr<Connection> weak = shared_from_this();
    server_->handler(std::move(request), [token, weak, keep_alive](HttpResponse response) {
      const bool keep = keep_alive && !response.close;
      std::lock_guard<std::mutex> lock(token->mu);
      std::shared_ptr<Connection> self = weak.lock();
      if (!token->alive || self == nullptr) return;  // the server has stopped
      token->waiting.erase(self);
      asio::post(self->stream_.get_executor(), [self, keep, r = std::move(response)]() mutable {
        self->Send(std::move(r), keep);
      });
    });
  }

  void Send(HttpResponse r, bool keep_alive) {
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(r.status), 11);
    res->set(http::field::server, "jasper-serve");
    res->set(http::field::content_type, r.content_type);
    for (const auto& [name, value] : r.headers) res->set(name, value);
    res->body() = std::move(r.body);
    res->keep_alive(keep_alive);
    res->prepare_payload();
    Lowest().expires_after(std::chrono::milliseconds(server_->options.request_timeout_ms));
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res, keep_alive](beast::error_code ec, size_t) {
                        if (ec) return self->Fail(ec);
                        if (!keep_alive) return self->Close();
                        self->ReadHeader();
                      });
  }

  // Plaintext: a lingering close: stop sending, then read and drop what the client still sends
  // (up to 1 s) before the socket closes, so that a response sent before the whole request was
  // read is not destroyed by the TCP reset that closing on unread data causes.
  // TLS: send close_notify and wait (up to kTlsShutdownTimeout) for the peer's.
  void Close() {
    if constexpr (kIsTls<Stream>) {
      Lowest().expires_after(kTlsShutdownTimeout);
      stream_.async_shutdown([self = shared_from_this()](beast::error_code) {
        // Done, timed out or failed: the socket closes with this connection.
      });
    } else {
      beast::error_code ignored;
      Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      Lowest().expires_after(std::chrono::seconds(1));
      Drain();
    }
  }
  void Drain() {
    auto sink = std::make_shared<std::array<char, 4096>>();
    Lowest().async_read_some(asio::buffer(*sink),
                             [self = shared_from_this(), sink](beast::error_code ec, size_t) {
                               if (!ec) self->Drain();  // else: EOF, timeout or error: done
                             });
  }

  void Fail(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == asio::error::eof) return Close();
    if (ec == asio::error::operation_aborted || ec == beast::error::timeout ||
        ec == asio::error::connection_reset || ec == asio::ssl::error::stream_truncated) {
      return;  // the socket closes with this connection (truncated: TCP closed without TLS's end)
    }
    if (ec == http::error::header_limit) {
      return Send(JsonError(431, "the request head is too large", "invalid_request_error",
                            "request_header_too_large"),
                  false);
    }
    // A malformed request: 400, then close.
    if (ec.category() == http::make_error_code(http::error::bad_target).category()) {
      return Send(JsonError(400, absl::StrCat("malformed HTTP request: ", ec.message()),
                            "invalid_request_error", "bad_request"),
                  false);
    }
    spdlog::debug("HTTP connection: {}", ec.message());
    Close();
  }

  // Before stream_: a TLS stream's OpenSSL objects use it until they are gone (null: plain).
  const std::shared_ptr<asio::ssl::context> tls_context_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpServer::Impl* const server_;  // outlives every connection (see ~HttpServer)
};

}  // namespace

template <class Stream>
void HttpServer::Impl::Serve(tcp::socket socket, std::shared_ptr<asio::ssl::context> tls_context) {
  auto connection =
      std::make_shared<Connection<Stream>>(std::move(socket), std::move(tls_context), this);
  connection->Start(/*refuse=*/connections.load() > options.max_connections);
}

void HttpServer::Impl::Accept() {
  acceptor.async_accept(asio::make_strand(io),
                        [self = this](beast::error_code ec, tcp::socket socket) {
                          if (!self->accepting.load()) return;
                          if (!ec) {
                            // Results are small messages: send each at once (no Nagle wait
                            // for the ACK of the one before, which delayed ACKs make ~40 ms).
                            beast::error_code ignored;
                            socket.set_option(tcp::no_delay(true), ignored);
                          }
                          if (!ec && self->tls != nullptr) {
                            // The current certificate (reloaded first when its files changed).
                            self->Serve<TlsStream>(std::move(socket), self->tls->Current());
                          } else if (!ec) {
                            self->Serve<beast::tcp_stream>(std::move(socket), nullptr);
                          }
                          self->Accept();
                        });
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              HttpHandler handler,
                                                              WebSocketHandler websocket) {
  if (options.threads < 1 || options.threads > 64) {
    return absl::InvalidArgumentError("http threads must be in [1, 64]");
  }
  if (options.max_body_bytes < 1024 || options.max_header_bytes < 1024 ||
      options.request_timeout_ms < 100 || options.max_connections < 1) {
    return absl::InvalidArgumentError("HTTP limits out of range");
  }
  std::string host;
  int port = 0;
  if (absl::Status s = SplitHostPort(options.address, &host, &port); !s.ok()) return s;
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->impl_ = std::make_unique<Impl>(options, std::move(handler), std::move(websocket));
  Impl& impl = *server->impl_;
  if (options.tls.has_value()) {
    absl::StatusOr<std::unique_ptr<HttpTlsContextSource>> tls =
        HttpTlsContextSource::Create(*options.tls);
    if (!tls.ok()) return tls.status();
    impl.tls = *std::move(tls);
  }
  beast::error_code ec;
  tcp::resolver resolver(impl.io);
  const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec || endpoints.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", options.address, ": ", ec ? ec.message() : "no address"));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  impl.acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl.acceptor.bind(endpoint, ec);
  if (!ec) impl.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.address, ": ", ec.message()));
  }
  server->port_ = impl.acceptor.local_endpoint().port();
  impl.Accept();
  for (int i = 0; i < options.threads; ++i) {
    server->threads_.emplace_back([io = &impl.io] { io->run(); });
  }
  return server;
}

void HttpServer::StopAccepting() {
  if (!impl_->accepting.exchange(false)) return;
  asio::post(impl_->acceptor.get_executor(), [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
  });
}

HttpServer::~HttpServer() {
  StopAccepting();
  {
    std::lock_guard<std::mutex> lock(impl_->token->mu);
    impl_->token->alive = false;  // responders called from now on send nothing
  }
  impl_->work.reset();
  impl_->io.stop();
  for (std::thread& t : threads_) t.join();
  std::set<std::shared_ptr<void>> waiting;
  std::set<std::shared_ptr<void>> websockets;
  {
    std::lock_guard<std::mutex> lock(impl_->token->mu);
    waiting.swap(impl_->token->waiting);
    websockets.swap(impl_->token->websockets);
  }
  waiting.clear();  // while the io_context is alive
  websockets.clear();
  // Pending handlers (and the connections they hold) are destroyed with the io_context.
  impl_.reset();
}

}  // namespace jasper::server
