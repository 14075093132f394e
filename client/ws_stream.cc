#include "client/ws_stream.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace jasper::client {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = boost::beast::websocket;
namespace asr = ::jasper::asr::v1;
using tcp = boost::asio::ip::tcp;

// "host:port" or "[v6]:port" into host (without brackets) and port.
absl::Status SplitAddress(const std::string& address, std::string* host, std::string* port) {
  size_t colon;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not [IPv6]:port"));
    }
    *host = address.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = address.rfind(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("'", address, "' has no :port"));
    }
    *host = address.substr(0, colon);
  }
  *port = address.substr(colon + 1);
  int number = 0;
  if (host->empty() || !absl::SimpleAtoi(*port, &number) || number < 1 || number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not host:port"));
  }
  return absl::OkStatus();
}

bool UsesTls(const ChannelSecurity& s) {
  return s.tls || !s.tls_ca_file.empty() || !s.tls_cert_file.empty() || !s.tls_key_file.empty();
}

// TLS client context: the CA file (else the system's roots), the optional client certificate.
absl::StatusOr<std::shared_ptr<asio::ssl::context>> MakeTlsContext(const ChannelSecurity& s) {
  if (s.tls_cert_file.empty() != s.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file and --tls_key_file go together");
  }
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  ctx->set_options(asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                   asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
  beast::error_code ec;
  if (!s.tls_ca_file.empty()) {
    ctx->load_verify_file(s.tls_ca_file, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("--tls_ca_file: ", ec.message()));
  } else {
    ctx->set_default_verify_paths(ec);
  }
  if (!s.tls_cert_file.empty()) {
    ctx->use_certificate_chain_file(s.tls_cert_file, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("--tls_cert_file: ", ec.message()));
    ctx->use_private_key_file(s.tls_key_file, asio::ssl::context::pem, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("--tls_key_file: ", ec.message()));
  }
  ctx->set_verify_mode(asio::ssl::verify_peer);
  return ctx;
}

// The gRPC status a close frame stands for (docs/HTTP.md): 1000 OK, 4000 + c code c with the
// message of the error frame before it (else the close's reason).
grpc::Status StatusForClose(int close_code, const std::string& close_reason,
                            const std::string& error_message) {
  if (close_code == 1000) return grpc::Status::OK;
  if (close_code >= 4001 && close_code <= 4016) {
    return grpc::Status(static_cast<grpc::StatusCode>(close_code - 4000),
                        !error_message.empty() ? error_message : close_reason);
  }
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      absl::StrCat("the server closed the WebSocket with code ", close_code));
}

using PlainWs = websocket::stream<beast::tcp_stream>;
using TlsWs = websocket::stream<beast::ssl_stream<beast::tcp_stream>>;

template <typename Ws>
class WsRecognizeStream final : public RecognizeStream {
 public:
  static constexpr bool kTls = std::is_same_v<Ws, TlsWs>;

  explicit WsRecognizeStream(std::shared_ptr<asio::ssl::context> tls)
      : tls_(std::move(tls)), ws_(MakeWs()), deadline_timer_(io_), resolver_(io_) {}

  ~WsRecognizeStream() override { Stop(); }

  // Connects on the I/O thread (started here) and waits for the handshake's outcome.
  absl::Status Connect(const WebSocketTarget& target, std::chrono::system_clock::time_point at) {
    std::string host;
    std::string port;
    if (absl::Status s = SplitAddress(target.address, &host, &port); !s.ok()) return s;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              at - std::chrono::system_clock::now());
    thread_ = std::thread([this] { io_.run(); });
    std::promise<absl::Status> connected;
    std::future<absl::Status> outcome = connected.get_future();
    asio::post(io_, [&] {
      deadline_timer_.expires_at(deadline);
      deadline_timer_.async_wait([this](beast::error_code ec) {
        if (ec) return;  // cancelled
        deadline_hit_ = true;
        beast::get_lowest_layer(ws_).close();  // every pending operation ends with an error
      });
      beast::get_lowest_layer(ws_).expires_at(deadline);
      Handshake(host, port, target, &connected);
    });
    return outcome.get();
  }

  bool Write(const asr::StreamingRecognizeRequest& request) override {
    if (!request.audio_content().empty()) return Send(false, request.audio_content());
    std::string json;
    if (!google::protobuf::util::MessageToJsonString(request, &json).ok()) return false;
    return Send(true, std::move(json));
  }

  bool WritesDone() override { return Send(true, "{\"end\": true}"); }

  bool Read(asr::StreamingRecognizeResponse* response) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !responses_.empty() || read_done_; });
    if (responses_.empty()) return false;
    *response = std::move(responses_.front());
    responses_.pop_front();
    return true;
  }

  grpc::Status Finish() override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return read_done_; });
    }
    Stop();
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  Ws MakeWs() {
    if constexpr (kTls) {
      return Ws(io_, *tls_);
    } else {
      return Ws(io_);
    }
  }

  void Handshake(const std::string& host, const std::string& port, const WebSocketTarget& target,
                 std::promise<absl::Status>* connected) {
    auto fail = [this, connected](absl::string_view what, beast::error_code ec) {
      connected->set_value(
          deadline_hit_ ? absl::DeadlineExceededError(absl::StrCat(what, ": deadline exceeded"))
                        : absl::UnavailableError(absl::StrCat(what, ": ", ec.message())));
    };
    const std::string sni =
        target.security.tls_server_name.empty() ? host : target.security.tls_server_name;
    // The handshake's stages, each continuing the next; `connected` is set exactly once.
    beast::error_code ec;
    auto endpoints = resolver_.resolve(host, port, ec);
    if (ec) return fail(absl::StrCat("cannot resolve ", target.address), ec);
    beast::get_lowest_layer(ws_).async_connect(
        endpoints, [this, fail, sni, host, port, target, connected](beast::error_code ec,
                                                                    const tcp::endpoint&) {
          if (ec) return fail(absl::StrCat("cannot connect to ", target.address), ec);
          // Small frames (a force_final, the end message) go out at once, not after an ACK.
          beast::error_code ignored;
          beast::get_lowest_layer(ws_).socket().set_option(tcp::no_delay(true), ignored);
          auto upgrade = [this, fail, host, port, target, connected] {
            beast::get_lowest_layer(ws_).expires_never();  // the deadline timer covers the rest
            ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::client));
            const std::string key = target.security.api_key;
            ws_.set_option(websocket::stream_base::decorator([key](websocket::request_type& req) {
              req.set(beast::http::field::user_agent, "jasper-client");
              if (!key.empty()) req.set(beast::http::field::authorization, "Bearer " + key);
            }));
            ws_.read_message_max(16 << 20);
            ws_.async_handshake(absl::StrCat(host, ":", port), target.path,
                                [this, fail, connected](beast::error_code ec) {
                                  if (ec) return fail("WebSocket handshake", ec);
                                  connected->set_value(absl::OkStatus());
                                  ReadNext();
                                });
          };
          if constexpr (kTls) {
            SSL* ssl = ws_.next_layer().native_handle();
            if (!SSL_set_tlsext_host_name(ssl, sni.c_str())) {
              return fail("TLS server name", beast::error_code(static_cast<int>(ERR_get_error()),
                                                               asio::error::get_ssl_category()));
            }
            ws_.next_layer().set_verify_callback(asio::ssl::host_name_verification(sni));
            ws_.next_layer().async_handshake(asio::ssl::stream_base::client,
                                             [fail, upgrade](beast::error_code ec) {
                                               if (ec) return fail("TLS handshake", ec);
                                               upgrade();
                                             });
          } else {
            upgrade();
          }
        });
  }

  // Sends one frame from the (single) writing thread and waits until it is written.
  bool Send(bool text, std::string data) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return false;
    }
    std::promise<bool> written;
    std::future<bool> ok = written.get_future();
    asio::post(io_, [this, text, &data, &written] {
      ws_.text(text);
      ws_.async_write(asio::buffer(data),
                      [&written](beast::error_code ec, size_t) { written.set_value(!ec); });
    });
    return ok.get();
  }

  // The read loop, on the I/O thread: responses are queued; the close decides the status.
  void ReadNext() {
    ws_.async_read(in_, [this](beast::error_code ec, size_t) {
      if (ec) return EndRead(ec);
      const std::string text = beast::buffers_to_string(in_.data());
      in_.consume(in_.size());
      asr::StreamingRecognizeResponse response;
      google::protobuf::util::JsonParseOptions options;
      options.ignore_unknown_fields = true;
      // The server's error frame is {"error": {"code": ..., "message": ...}} (only it starts
      // so); every other text frame is a response. Parsed once, as what it is.
      const size_t key = text.find_first_not_of(" \t\r\n{");
      const nlohmann::json error =
          text.compare(key == std::string::npos ? text.size() : key, 7, "\"error\"") == 0
              ? nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false)
              : nlohmann::json();
      if (error.is_object() && error.contains("error") && error["error"].is_object()) {
        const nlohmann::json& e = error["error"];
        if (e.contains("message") && e["message"].is_string()) {
          error_message_ = e["message"].get<std::string>();
        }
      } else if (!ws_.got_text() ||
                 !google::protobuf::util::JsonStringToMessage(text, &response, options).ok()) {
        return EndWith(grpc::Status(grpc::StatusCode::INTERNAL,
                                    "the server sent a message that is not a response"));
      } else {
        std::lock_guard<std::mutex> lock(mu_);
        responses_.push_back(std::move(response));
        cv_.notify_all();
      }
      ReadNext();
    });
  }

  void EndRead(beast::error_code ec) {
    if (deadline_hit_) {
      return EndWith(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded"));
    }
    if (ec == websocket::error::closed) {
      return EndWith(StatusForClose(ws_.reason().code, std::string(ws_.reason().reason.c_str()),
                                    error_message_));
    }
    EndWith(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                         absl::StrCat("WebSocket connection lost: ", ec.message())));
  }

  void EndWith(grpc::Status status) {
    deadline_timer_.cancel();
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().close(ignored);
    std::lock_guard<std::mutex> lock(mu_);
    if (!read_done_) status_ = std::move(status);
    read_done_ = true;
    cv_.notify_all();
  }

  // Ends the I/O thread (idempotent): closes the socket on it, then lets it run out.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    if (!thread_.joinable()) return;
    asio::post(io_, [this] {
      deadline_timer_.cancel();
      resolver_.cancel();
      beast::error_code ignored;
      beast::get_lowest_layer(ws_).socket().close(ignored);
      EndWith(grpc::Status(grpc::StatusCode::CANCELLED, "the call was abandoned"));
      // The WebSocket's own timers (e.g. of a declined handshake) may still be armed: the
      // handlers left are dropped with the io_context, none of them needs to run.
      io_.stop();
    });
    guard_.reset();
    thread_.join();
  }

  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard_{
      asio::make_work_guard(io_)};
  const std::shared_ptr<asio::ssl::context> tls_;  // before ws_, which uses it
  Ws ws_;
  asio::steady_timer deadline_timer_;
  tcp::resolver resolver_;
  beast::flat_buffer in_;
  bool deadline_hit_ = false;  // I/O thread only
  std::string error_message_;  // I/O thread only: the error frame before a 40xx close
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<asr::StreamingRecognizeResponse> responses_;  // guarded by mu_
  bool read_done_ = false;                                 // guarded by mu_
  bool stopped_ = false;                                   // guarded by mu_
  grpc::Status status_;                                    // guarded by mu_
};

template <typename Ws>
absl::StatusOr<std::unique_ptr<RecognizeStream>> Open(
    const WebSocketTarget& target, std::chrono::system_clock::time_point deadline,
    std::shared_ptr<asio::ssl::context> tls) {
  auto stream = std::make_unique<WsRecognizeStream<Ws>>(std::move(tls));
  if (absl::Status s = stream->Connect(target, deadline); !s.ok()) return s;
  return std::unique_ptr<RecognizeStream>(std::move(stream));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RecognizeStream>> OpenWebSocketStream(
    const WebSocketTarget& target, std::chrono::system_clock::time_point deadline) {
  if (!UsesTls(target.security)) return Open<PlainWs>(target, deadline, nullptr);
  absl::StatusOr<std::shared_ptr<asio::ssl::context>> tls = MakeTlsContext(target.security);
  if (!tls.ok()) return tls.status();
  return Open<TlsWs>(target, deadline, *std::move(tls));
}

}  // namespace jasper::client
