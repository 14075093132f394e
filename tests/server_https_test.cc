// TLS on the HTTP front (HttpServerOptions::tls, wired from the gRPC port's --tls_* settings)
// over loopback, with Beast/Asio TLS clients that verify the server against the test CA:
// HTTPS answers as the plaintext front does (health, the same transcript), a plaintext request
// to the TLS port gets no HTTP answer and the server keeps serving, an unfinished handshake is
// cut at the request timeout, WebSocket streaming over wss://, mutual TLS, certificate
// rotation (a broken file keeps the old certificate; open connections keep theirs), and bad
// files failing the start. Certificates: tests/test_certs.h.
#include <openssl/ssl.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/http_server.h"
#include "server/jasper_server.h"
#include "tests/http_test_util.h"
#include "tests/server_test_util.h"
#include "tests/test_certs.h"

namespace jasper::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace ssl = boost::asio::ssl;
namespace fs = std::filesystem;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;
using ::jasper::test_util::Body;
using ::jasper::test_util::Certs;
using ::jasper::test_util::FormPost;
using ::jasper::test_util::kSlowdown;
using ::jasper::test_util::ReadFileBytes;
using ::jasper::test_util::ReplaceFile;
using ::jasper::test_util::Socket;
using ::jasper::test_util::WsOutcome;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const fs::path kRoot = JASPER_SOURCE_DIR;
constexpr char kWav[] = "models/quartznet_en_tts_small/samples/sample_1.wav";
constexpr char kHealth[] = "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";
constexpr int kTimeoutMs = 1500;

// A TLS client context that trusts `ca_pem` only, with a client certificate when given.
std::unique_ptr<ssl::context> ClientContext(const std::string& ca_pem,
                                            const std::string& cert_pem = "",
                                            const std::string& key_pem = "") {
  auto context = std::make_unique<ssl::context>(ssl::context::tls_client);
  context->add_certificate_authority(asio::buffer(ca_pem));
  context->set_verify_mode(ssl::verify_peer);
  if (!cert_pem.empty()) {
    context->use_certificate_chain(asio::buffer(cert_pem));
    context->use_private_key(asio::buffer(key_pem), ssl::context::pem);
  }
  return context;
}

// Sets SNI and the server-name check (localhost, as the test certificates say) on a client.
void VerifyLocalhost(TlsStream& stream) {
  SSL_set_tlsext_host_name(stream.native_handle(), "localhost");
  stream.set_verify_callback(ssl::host_name_verification("localhost"));
}

// One HTTPS connection to 127.0.0.1:port. Every step is asynchronous with a deadline, so a
// server that never answers fails the step instead of hanging the test.
class HttpsClient {
 public:
  struct Reply {
    int status = 0;  // 0: no response (error() says why)
    std::string body;
  };

  // Connects and does the TLS handshake; error() is set when either fails.
  HttpsClient(int port, ssl::context& context) : stream_(io_, context) {
    VerifyLocalhost(stream_);
    const asio::ip::tcp::endpoint server(asio::ip::make_address("127.0.0.1"),
                                         static_cast<uint16_t>(port));
    error_ = Run([&](auto done) { beast::get_lowest_layer(stream_).async_connect(server, done); });
    if (!error_) {
      error_ = Run([&](auto done) { stream_.async_handshake(ssl::stream_base::client, done); });
    }
  }

  // Sends `raw` (a whole request) and reads one response.
  Reply Request(const std::string& raw) {
    Reply reply;
    if (error_) return reply;
    error_ = Run([&](auto done) { asio::async_write(stream_, asio::buffer(raw), done); });
    http::response<http::string_body> response;
    if (!error_) {
      error_ = Run([&](auto done) { http::async_read(stream_, buffer_, response, done); });
    }
    if (error_) return reply;
    reply.status = static_cast<int>(response.result_int());
    reply.body = response.body();
    return reply;
  }

  const beast::error_code& error() const { return error_; }

 private:
  // Starts one asynchronous step with a completion handler and runs it to its end.
  template <class Start>
  beast::error_code Run(Start start) {
    beast::error_code result = asio::error::would_block;
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(20 * kSlowdown));
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    io_.restart();
    io_.run();
    return result;
  }

  asio::io_context io_;
  TlsStream stream_;
  beast::flat_buffer buffer_;
  beast::error_code error_;
};

// GET /health over a new HTTPS connection trusting `ca_pem` (and presenting a client
// certificate when given): its status, 0 when the handshake or the request failed.
int HealthStatus(int port, const std::string& ca_pem, const std::string& cert_pem = "",
                 const std::string& key_pem = "") {
  auto context = ClientContext(ca_pem, cert_pem, key_pem);
  HttpsClient client(port, *context);
  return client.Request(kHealth).status;
}

class ServerHttpsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new Certs("jasper_https_test");
    if (!certs_->ok()) return;
    auto plain = JasperServer::Start(BaseOptions());
    ASSERT_TRUE(plain.ok()) << plain.status();
    plain_ = plain->release();
  }
  static void TearDownTestSuite() {
    delete plain_;
    plain_ = nullptr;
    delete certs_;
    certs_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(certs_->ok()) << certs_->error();
    ASSERT_NE(plain_, nullptr);
  }

  // The shipped model, gRPC and HTTP on picked loopback ports, plaintext.
  static ServerOptions BaseOptions() {
    ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.http_address = "127.0.0.1:0";
    o.model_dir = (kRoot / "models/quartznet_en_tts_small").string();
    o.warmup = false;
    o.shutdown_grace_ms = 0;
    o.http_request_timeout_ms = kTimeoutMs;
    return o;
  }
  // BaseOptions with the server certificate (signed by `ca`).
  static ServerOptions TlsOptions() {
    ServerOptions o = BaseOptions();
    o.tls_cert_file = certs_->Path("server.pem");
    o.tls_key_file = certs_->Path("server.key");
    return o;
  }
  static std::unique_ptr<JasperServer> StartServer(const ServerOptions& options) {
    auto server = JasperServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  // The plaintext front's transcript (json) of the test WAV.
  static std::string PlainTranscript() {
    Socket s(plain_->http_port());
    s.Send(FormPost({{"file", "a.wav", ReadFileBytes(kRoot / kWav)}}));
    const std::string r = s.ReadResponse();
    EXPECT_THAT(r, StartsWith("HTTP/1.1 200")) << r;
    const auto j = nlohmann::json::parse(Body(r), nullptr, /*allow_exceptions=*/false);
    return j.is_object() ? j.value("text", "") : "";
  }

  inline static Certs* certs_ = nullptr;
  inline static JasperServer* plain_ = nullptr;
};

TEST_F(ServerHttpsTest, HttpsAnswersAsThePlaintextFrontDoes) {
  const std::string want = PlainTranscript();
  ASSERT_FALSE(want.empty());
  auto server = StartServer(TlsOptions());
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  auto context = ClientContext(certs_->Pem("ca.pem"));
  HttpsClient client(port, *context);
  ASSERT_FALSE(client.error()) << client.error().message();
  const HttpsClient::Reply health = client.Request(kHealth);
  EXPECT_EQ(health.status, 200) << client.error().message();
  EXPECT_THAT(health.body, HasSubstr("SERVING"));
  // Same connection (keep-alive): a transcription, equal to the plaintext front's.
  const HttpsClient::Reply r =
      client.Request(FormPost({{"file", "a.wav", ReadFileBytes(kRoot / kWav)}}));
  ASSERT_EQ(r.status, 200) << r.body << client.error().message();
  EXPECT_EQ(nlohmann::json::parse(r.body)["text"], want);
  // A response sent before the request was read (413 from Content-Length), then the TLS close.
  HttpsClient large(port, *context);
  const HttpsClient::Reply too_large = large.Request(
      "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
      "multipart/form-data; boundary=b\r\nContent-Length: 999999999\r\n\r\n");
  EXPECT_EQ(too_large.status, 413) << large.error().message();
  // A client that trusts another CA refuses the server.
  EXPECT_EQ(HealthStatus(port, certs_->Pem("ca2.pem")), 0);
}

TEST_F(ServerHttpsTest, PlaintextToTheTlsPortGetsNoHttpAndTheServerKeepsServing) {
  auto server = StartServer(TlsOptions());
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  // A plaintext request is not a TLS ClientHello: the handshake fails, the connection closes.
  const auto start = std::chrono::steady_clock::now();
  const std::string answer = test_util::HttpRaw(port, kHealth);
  EXPECT_THAT(answer, Not(HasSubstr("HTTP/1.1"))) << answer;
  EXPECT_THAT(answer, Not(HasSubstr("SERVING")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4 * kSlowdown));
  // A connection that never starts its handshake is closed after the request timeout.
  {
    Socket idle(port);
    ASSERT_TRUE(idle.connected());
    const auto idle_start = std::chrono::steady_clock::now();
    EXPECT_TRUE(idle.PeerCloses());
    EXPECT_GE(std::chrono::steady_clock::now() - idle_start,
              std::chrono::milliseconds(kTimeoutMs - 200));
  }
  EXPECT_EQ(HealthStatus(port, certs_->Pem("ca.pem")), 200);
}

TEST_F(ServerHttpsTest, WebSocketStreamsOverWss) {
  const std::string want = PlainTranscript();
  ASSERT_FALSE(want.empty());
  auto server = StartServer(TlsOptions());
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  auto context = ClientContext(certs_->Pem("ca.pem"));
  asio::io_context io;
  beast::websocket::stream<TlsStream> ws(io, *context);
  beast::get_lowest_layer(ws).connect(
      asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  VerifyLocalhost(ws.next_layer());
  ws.next_layer().handshake(ssl::stream_base::client);
  const WsOutcome out = test_util::StreamOverWebSocket(
      ws, absl::StrCat("localhost:", port),
      R"({"streamingConfig": {"config": {}, "interimResults": true}})",
      ReadFileBytes(kRoot / kWav));
  EXPECT_EQ(out.finals, want);
  EXPECT_GT(out.interims, 0);
  EXPECT_EQ(out.close_code, 1000);
  EXPECT_EQ(out.error, "");
}

TEST_F(ServerHttpsTest, MutualTlsRequiresAClientCertificateFromTheClientCa) {
  ServerOptions o = TlsOptions();
  o.tls_client_ca_file = certs_->Path("client_ca.pem");
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  const std::string ca = certs_->Pem("ca.pem");
  EXPECT_EQ(HealthStatus(port, ca, certs_->Pem("client.pem"), certs_->Pem("client.key")), 200);
  // Without a certificate, or with one from another CA: no response (under TLS 1.3 the server's
  // refusal arrives after the client's side of the handshake, so the request fails).
  EXPECT_EQ(HealthStatus(port, ca), 0);
  EXPECT_EQ(HealthStatus(port, ca, certs_->Pem("rogue.pem"), certs_->Pem("rogue.key")), 0);
  // The server still serves certified clients.
  EXPECT_EQ(HealthStatus(port, ca, certs_->Pem("client.pem"), certs_->Pem("client.key")), 200);
}

TEST_F(ServerHttpsTest, RotatedCertificateIsServedToNewConnections) {
  // The server reads its files from names of its own, which the test rotates.
  const std::string cert = certs_->Path("https_live.pem");
  const std::string key = certs_->Path("https_live.key");
  fs::copy_file(certs_->Path("server.pem"), cert, fs::copy_options::overwrite_existing);
  fs::copy_file(certs_->Path("server.key"), key, fs::copy_options::overwrite_existing);
  ServerOptions o = BaseOptions();
  o.tls_cert_file = cert;
  o.tls_key_file = key;
  o.tls_reload_interval_s = 1;
  o.http_request_timeout_ms = 60000 * kSlowdown;  // the kept connection must stay open
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  const std::string ca = certs_->Pem("ca.pem");
  auto old_context = ClientContext(ca);
  HttpsClient kept(port, *old_context);  // opened before the rotation, kept alive
  ASSERT_EQ(kept.Request(kHealth).status, 200) << kept.error().message();

  // A broken certificate file: the reload fails, the previous certificate stays in use.
  const std::string broken = certs_->Path("broken.pem");
  std::ofstream(broken) << "-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n";
  ReplaceFile(broken, cert);
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  EXPECT_EQ(HealthStatus(port, ca), 200);

  // Rotate to a pair from another CA.
  ReplaceFile(certs_->Path("server2.key"), key);
  ReplaceFile(certs_->Path("server2.pem"), cert);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15 * kSlowdown);
  bool rotated = false;
  while (!rotated && std::chrono::steady_clock::now() < until) {
    rotated = HealthStatus(port, certs_->Pem("ca2.pem")) == 200;
    if (!rotated) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_TRUE(rotated) << "the new certificate was not served within 15 s";
  EXPECT_EQ(HealthStatus(port, ca), 0);  // new connections no longer get the old one
  // The connection opened before the rotation keeps its context and is still served.
  const HttpsClient::Reply again = kept.Request(kHealth);
  EXPECT_EQ(again.status, 200) << kept.error().message();
}

TEST_F(ServerHttpsTest, UnusableKeyOrCertificateFailsTheStart) {
  // A key file with a PEM block that is not a key: passes the gRPC port's PEM check, not ours.
  const std::string garbage = certs_->Path("garbage.key");
  std::ofstream(garbage) << "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
  ServerOptions o = TlsOptions();
  o.tls_key_file = garbage;
  absl::Status s = JasperServer::Start(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("tls_key_file '", garbage, "'")));
  // A real key of another certificate.
  o.tls_key_file = certs_->Path("server2.key");
  s = JasperServer::Start(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("does not match"));
  EXPECT_THAT(s.message(), HasSubstr(certs_->Path("server2.key")));

  // The HttpServer itself, without the gRPC port's checks in front.
  HttpServerOptions h;
  h.address = "127.0.0.1:0";
  h.tls = HttpTlsOptions{certs_->Path("server.pem"), certs_->Path("server2.key"), "", 60};
  auto handler = [](HttpRequest, HttpResponder respond) { respond(HttpResponse()); };
  s = HttpServer::Start(h, handler).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("does not match"));
  h.tls->cert_file = certs_->Path("no_such.pem");
  s = HttpServer::Start(h, handler).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("tls_cert_file '", h.tls->cert_file, "'")));
  h.tls->cert_file = certs_->Path("server.key");  // a key where the certificate belongs
  s = HttpServer::Start(h, handler).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tls_cert_file"));
  h.tls = HttpTlsOptions{certs_->Path("server.pem"), certs_->Path("server.key"),
                         certs_->Path("garbage.key"), 60};  // a client CA file with no CA
  s = HttpServer::Start(h, handler).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tls_client_ca_file"));
  // The right pair starts.
  h.tls = HttpTlsOptions{certs_->Path("server.pem"), certs_->Path("server.key"), "", 60};
  auto ok = HttpServer::Start(h, handler);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(HealthStatus((*ok)->port(), certs_->Pem("ca.pem")), 200);
}

}  // namespace
}  // namespace jasper::server
