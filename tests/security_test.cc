// Security of the gRPC port over loopback: TLS, mutual TLS, certificate rotation (reload),
// API keys (missing / wrong / right, both header forms; health stays open), and the option
// checks. Certificates are generated per test run with the `openssl` CLI (tests/test_certs.h)
// into a temporary folder. The HTTP front's TLS: tests/server_https_test.cc.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/calls.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "jasper/asr/v1/asr.grpc.pb.h"
#include "server/auth.h"
#include "server/jasper_server.h"
#include "server/tls.h"
#include "tests/server_test_util.h"
#include "tests/test_certs.h"

namespace jasper::server {
namespace {

namespace pb = ::jasper::asr::v1;
namespace fs = std::filesystem;
using ::jasper::test_util::Certs;
using ::jasper::test_util::DeadlineIn;
using ::jasper::test_util::HealthCheck;
using ::jasper::test_util::kSlowdown;
using ::jasper::test_util::ReplaceFile;
using ::testing::HasSubstr;
using ::testing::Not;

// ---------------------------------------------------------------------------------------------
// Clients.

std::shared_ptr<grpc::ChannelCredentials> TlsClient(const std::string& ca_pem,
                                                    const std::string& key_pem = "",
                                                    const std::string& cert_pem = "") {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ca_pem;
  o.pem_private_key = key_pem;
  o.pem_cert_chain = cert_pem;
  return grpc::SslCredentials(o);
}

std::shared_ptr<grpc::Channel> Channel(int port,
                                       const std::shared_ptr<grpc::ChannelCredentials>& creds) {
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  // Fresh connections per channel: a rotated certificate must be seen by a new channel.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), creds, args);
}

// ListModels with optional metadata; the call's status.
grpc::Status ListModels(const std::shared_ptr<grpc::Channel>& channel,
                        const std::vector<std::pair<std::string, std::string>>& metadata = {},
                        int deadline_s = 10) {
  auto stub = pb::Asr::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(deadline_s));
  for (const auto& [k, v] : metadata) context.AddMetadata(k, v);
  pb::ListModelsResponse response;
  return stub->ListModels(&context, pb::ListModelsRequest(), &response);
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new Certs("jasper_security_test");
    model_dir_ = test_util::ServerTestModelDir();
  }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(certs_->ok()) << certs_->error();
    if (model_dir_.empty()) GTEST_SKIP() << "no model";
  }
  static ServerOptions BaseOptions() {
    ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.model_dir = model_dir_;
    o.warmup = false;
    o.shutdown_grace_ms = 0;
    return o;
  }
  static std::unique_ptr<JasperServer> StartServer(const ServerOptions& options) {
    auto server = JasperServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }
  static Certs* certs_;
  static std::string model_dir_;
};
Certs* SecurityTest::certs_ = nullptr;
std::string SecurityTest::model_dir_;

// ---------------------------------------------------------------------------------------------
// TLS.

TEST_F(SecurityTest, TlsWorksAndPlaintextClientFails) {
  ServerOptions o = BaseOptions();
  o.tls_cert_file = certs_->Path("server.pem");
  o.tls_key_file = certs_->Path("server.key");
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto tls = Channel(server->port(), TlsClient(certs_->Pem("ca.pem")));
  grpc::Status s = ListModels(tls);
  EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_EQ(HealthCheck(tls), 1);
  // Streaming works over TLS too.
  {
    auto stub = pb::Asr::NewStub(tls);
    grpc::ClientContext c;
    c.set_deadline(DeadlineIn(20));
    auto stream = stub->StreamingRecognize(&c);
    ASSERT_TRUE(stream->Write(test_util::StreamConfig(false)));
    for (const std::string& chunk : test_util::AudioChunks(test_util::ServerTestWav())) {
      ASSERT_TRUE(stream->Write(test_util::StreamAudio(chunk)));
    }
    stream->WritesDone();
    pb::StreamingRecognizeResponse r;
    int finals = 0;
    while (stream->Read(&r)) finals += r.results_size() > 0 && r.results(0).is_final();
    EXPECT_TRUE(stream->Finish().ok());
    EXPECT_GE(finals, 1);
  }
  // A plaintext client cannot talk to the TLS port.
  auto plain = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                                   grpc::InsecureChannelCredentials());
  EXPECT_EQ(ListModels(plain, {}, 3).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A client that trusts another CA refuses the server.
  auto wrong_ca = Channel(server->port(), TlsClient(certs_->Pem("ca2.pem")));
  EXPECT_EQ(ListModels(wrong_ca, {}, 3).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecurityTest, MutualTlsRequiresAClientCertificateFromTheClientCa) {
  ServerOptions o = BaseOptions();
  o.tls_cert_file = certs_->Path("server.pem");
  o.tls_key_file = certs_->Path("server.key");
  o.tls_client_ca_file = certs_->Path("client_ca.pem");
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  const std::string ca = certs_->Pem("ca.pem");
  auto with_cert =
      Channel(server->port(), TlsClient(ca, certs_->Pem("client.key"), certs_->Pem("client.pem")));
  grpc::Status s = ListModels(with_cert);
  EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  auto no_cert = Channel(server->port(), TlsClient(ca));
  EXPECT_EQ(ListModels(no_cert, {}, 3).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_LT(HealthCheck(no_cert), 0);  // mTLS guards health checks too (transport level)
  auto rogue =
      Channel(server->port(), TlsClient(ca, certs_->Pem("rogue.key"), certs_->Pem("rogue.pem")));
  EXPECT_EQ(ListModels(rogue, {}, 3).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecurityTest, RotatedCertificateIsPickedUpAfterReload) {
  // The server reads its files from a folder of its own, which the test rotates.
  const std::string cert = certs_->Path("live.pem");
  const std::string key = certs_->Path("live.key");
  fs::copy_file(certs_->Path("server.pem"), cert, fs::copy_options::overwrite_existing);
  fs::copy_file(certs_->Path("server.key"), key, fs::copy_options::overwrite_existing);
  ServerOptions o = BaseOptions();
  o.tls_cert_file = cert;
  o.tls_key_file = key;
  o.tls_reload_interval_s = 1;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(ListModels(Channel(server->port(), TlsClient(certs_->Pem("ca.pem")))).ok());

  // Rotate to a certificate from another CA (key first; gRPC only takes a matching pair).
  ReplaceFile(certs_->Path("server2.key"), key);
  ReplaceFile(certs_->Path("server2.pem"), cert);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15 * kSlowdown);
  bool rotated = false;
  while (!rotated && std::chrono::steady_clock::now() < until) {
    rotated = ListModels(Channel(server->port(), TlsClient(certs_->Pem("ca2.pem"))), {}, 2).ok();
    if (!rotated) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_TRUE(rotated) << "the new certificate was not served within 15 s";
  // New connections no longer get the old certificate.
  EXPECT_EQ(
      ListModels(Channel(server->port(), TlsClient(certs_->Pem("ca.pem"))), {}, 3).error_code(),
      grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecurityTest, BadTlsFilesFailStartWithClearErrors) {
  ServerOptions o = BaseOptions();
  o.tls_cert_file = certs_->Path("missing.pem");
  o.tls_key_file = certs_->Path("server.key");
  absl::Status s = JasperServer::Start(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tls_cert_file"));
  o.tls_cert_file = certs_->Path("server.key");  // a key where the certificate belongs
  s = JasperServer::Start(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("CERTIFICATE"));
}

TEST(SecurityOptionsTest, ValidateChecksTheTlsSettings) {
  ServerOptions o;
  o.model_dir = "m";
  EXPECT_TRUE(o.Validate().ok());
  o.tls_cert_file = "c.pem";
  EXPECT_THAT(o.Validate().message(), HasSubstr("together"));
  o.tls_key_file = "k.pem";
  EXPECT_TRUE(o.Validate().ok());
  o.tls_reload_interval_s = 0;
  EXPECT_THAT(o.Validate().message(), HasSubstr("tls_reload_interval_s"));
  o.tls_reload_interval_s = 60;
  o.tls_cert_file.clear();
  o.tls_key_file.clear();
  o.tls_client_ca_file = "ca.pem";
  EXPECT_THAT(o.Validate().message(), HasSubstr("tls_client_ca_file"));
}

TEST(SecurityOptionsTest, LoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:50051"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:1"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:50051"));
  EXPECT_TRUE(IsLoopbackAddress("unix:/tmp/x.sock"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:50051"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:50051"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.7:50051"));
}

// ---------------------------------------------------------------------------------------------
// API keys.

TEST(ApiKeysTest, ParseAndMatch) {
  auto keys = ApiKeys::Parse("# comment\n\n  key-one-12345  \nkey-two-67890\r\n");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_TRUE(keys->Matches("key-one-12345"));
  EXPECT_TRUE(keys->Matches("key-two-67890"));
  EXPECT_FALSE(keys->Matches("key-one-1234"));
  EXPECT_FALSE(keys->Matches("key-one-123456"));
  EXPECT_FALSE(keys->Matches(""));
  EXPECT_EQ(ApiKeys::KeyFromAuthorization("Bearer abc"), "abc");
  EXPECT_EQ(ApiKeys::KeyFromAuthorization("bearer   abc "), "abc");
  EXPECT_EQ(ApiKeys::KeyFromAuthorization("Basic abc"), "");
  EXPECT_EQ(ApiKeys::Parse("# only comments\n").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status bad = ApiKeys::Parse("good-key-123\nshort\n").status();
  EXPECT_THAT(bad.message(), HasSubstr("line 2"));
  EXPECT_THAT(bad.message(), Not(HasSubstr("short")));  // never echo secrets
  EXPECT_EQ(ApiKeys::Load("/nonexistent/keys").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abd", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abcd", "abc"));
}

class ApiKeyServerTest : public SecurityTest {
 protected:
  void SetUp() override {
    SecurityTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    keys_file_ = certs_->Path("api_keys.txt");
    std::ofstream(keys_file_) << "# test keys\nright-key-0001\nother-key-0002\n";
  }
  std::string keys_file_;
};

TEST_F(ApiKeyServerTest, MissingOrWrongKeyIsUnauthenticatedRightKeyWorks) {
  ServerOptions o = BaseOptions();
  o.api_keys_file = keys_file_;
  o.metrics_address = "127.0.0.1:0";
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                                     grpc::InsecureChannelCredentials());
  grpc::Status missing = ListModels(channel);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED) << missing.error_message();
  EXPECT_THAT(missing.error_message(), HasSubstr("missing API key"));
  grpc::Status wrong = ListModels(channel, {{"authorization", "Bearer wrong-key-0000"}});
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(wrong.error_message(), HasSubstr("invalid API key"));
  EXPECT_EQ(ListModels(channel, {{"x-api-key", "right-key-000"}}).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(ListModels(channel, {{"authorization", "Bearer right-key-0001"}}).ok());
  EXPECT_TRUE(ListModels(channel, {{"x-api-key", "other-key-0002"}}).ok());
  // Health checks need no key (Kubernetes probes).
  EXPECT_EQ(HealthCheck(channel), 1);
  EXPECT_EQ(HealthCheck(channel, "jasper.asr.v1.Asr"), 1);

  // Streaming: refused without a key before any audio is processed; works with one.
  auto stub = pb::Asr::NewStub(channel);
  {
    grpc::ClientContext c;
    c.set_deadline(DeadlineIn(10));
    auto stream = stub->StreamingRecognize(&c);
    stream->Write(test_util::StreamConfig());
    stream->WritesDone();
    pb::StreamingRecognizeResponse r;
    while (stream->Read(&r)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext c;
    c.set_deadline(DeadlineIn(20));
    c.AddMetadata("authorization", "Bearer right-key-0001");
    auto stream = stub->StreamingRecognize(&c);
    ASSERT_TRUE(stream->Write(test_util::StreamConfig(false)));
    for (const std::string& chunk : test_util::AudioChunks(test_util::ServerTestWav())) {
      ASSERT_TRUE(stream->Write(test_util::StreamAudio(chunk)));
    }
    stream->WritesDone();
    pb::StreamingRecognizeResponse r;
    while (stream->Read(&r)) {
    }
    grpc::Status s = stream->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  // An offline request without a key: refused, and none of its audio reaches the engine.
  auto windows_run = [&] {
    return test_util::MetricValue(
        test_util::HttpBody(test_util::HttpGet(server->metrics_port(), "/metrics")),
        "jasper_scheduler_windows_total{result=\"ok\"}");
  };
  const double windows_before = windows_run();
  {
    grpc::ClientContext c;
    c.set_deadline(DeadlineIn(10));
    pb::RecognizeRequest request;
    request.mutable_config()->set_language_code("en-US");
    request.set_audio(test_util::ServerTestWav());
    pb::RecognizeResponse response;
    EXPECT_EQ(stub->Recognize(&c, request, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let any stray work finish
  EXPECT_EQ(windows_run(), windows_before);
  // Refusals are counted by status.
  const std::string metrics =
      test_util::HttpBody(test_util::HttpGet(server->metrics_port(), "/metrics"));
  EXPECT_EQ(
      test_util::MetricValue(metrics,
                             "jasper_grpc_calls_rejected_total{grpc_service=\"jasper.asr.v1.Asr\","
                             "grpc_method=\"ListModels\",grpc_code=\"UNAUTHENTICATED\"}"),
      3)
      << metrics;
  EXPECT_EQ(
      test_util::MetricValue(metrics,
                             "jasper_grpc_calls_total{grpc_service=\"jasper.asr.v1.Asr\","
                             "grpc_method=\"StreamingRecognize\",grpc_code=\"UNAUTHENTICATED\"}"),
      1);
  EXPECT_EQ(test_util::MetricValue(metrics,
                                   "jasper_grpc_calls_total{grpc_service=\"jasper.asr.v1.Asr\","
                                   "grpc_method=\"Recognize\",grpc_code=\"UNAUTHENTICATED\"}"),
            1);
  EXPECT_EQ(test_util::MetricValue(metrics, "jasper_audio_seconds_total{mode=\"offline\"}"), 0);
  // Every admission slot comes back (the refused stream's too), once the calls' OnDone ran.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5 * kSlowdown);
  while (server->engine()->active_calls() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(server->engine()->active_calls(), 0);
}

TEST_F(ApiKeyServerTest, TlsAndApiKeysTogether) {
  ServerOptions o = BaseOptions();
  o.api_keys_file = keys_file_;
  o.tls_cert_file = certs_->Path("server.pem");
  o.tls_key_file = certs_->Path("server.key");
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto channel = Channel(server->port(), TlsClient(certs_->Pem("ca.pem")));
  EXPECT_EQ(ListModels(channel).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(ListModels(channel, {{"x-api-key", "right-key-0001"}}).ok());
  EXPECT_EQ(HealthCheck(channel), 1);
}

// The CLI client's channel (client/calls.h): mTLS with a client certificate plus an API key.
TEST_F(ApiKeyServerTest, ClientChannelWithMutualTlsAndApiKey) {
  ServerOptions o = BaseOptions();
  o.api_keys_file = keys_file_;
  o.tls_cert_file = certs_->Path("server.pem");
  o.tls_key_file = certs_->Path("server.key");
  o.tls_client_ca_file = certs_->Path("client_ca.pem");
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  client::ChannelSecurity security;
  security.tls_ca_file = certs_->Path("ca.pem");
  security.tls_cert_file = certs_->Path("client.pem");
  security.tls_key_file = certs_->Path("client.key");
  security.tls_server_name = "localhost";
  security.api_key = "right-key-0001";
  const std::string address = absl::StrCat("127.0.0.1:", server->port());
  auto channel = client::CreateClientChannel(address, security, grpc::ChannelArguments());
  ASSERT_TRUE(channel.ok()) << channel.status();
  grpc::Status s = ListModels(*channel);
  EXPECT_TRUE(s.ok()) << s.error_message();
  security.api_key = "wrong-key-0000";
  channel = client::CreateClientChannel(address, security, grpc::ChannelArguments());
  ASSERT_TRUE(channel.ok());
  EXPECT_EQ(ListModels(*channel).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  security.tls_key_file.clear();
  EXPECT_EQ(
      client::CreateClientChannel(address, security, grpc::ChannelArguments()).status().code(),
      absl::StatusCode::kInvalidArgument);
  security.tls_key_file = certs_->Path("nope.key");
  EXPECT_EQ(
      client::CreateClientChannel(address, security, grpc::ChannelArguments()).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(ApiKeyServerTest, RotatedKeysFileIsPickedUp) {
  ServerOptions o = BaseOptions();
  o.api_keys_file = keys_file_;
  o.tls_reload_interval_s = 1;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                                     grpc::InsecureChannelCredentials());
  EXPECT_TRUE(ListModels(channel, {{"x-api-key", "right-key-0001"}}).ok());
  // A broken file keeps the old keys.
  std::ofstream(keys_file_ + ".new") << "# nothing\n";
  fs::rename(keys_file_ + ".new", keys_file_);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_TRUE(ListModels(channel, {{"x-api-key", "right-key-0001"}}).ok());
  // A new key replaces the old one.
  std::ofstream(keys_file_ + ".new") << "rotated-key-0003\n";
  fs::rename(keys_file_ + ".new", keys_file_);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10 * kSlowdown);
  bool rotated = false;
  while (!rotated && std::chrono::steady_clock::now() < until) {
    rotated = ListModels(channel, {{"x-api-key", "rotated-key-0003"}}).ok();
    if (!rotated) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(rotated);
  EXPECT_EQ(ListModels(channel, {{"x-api-key", "right-key-0001"}}).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(ApiKeyServerTest, BadKeysFileFailsStart) {
  ServerOptions o = BaseOptions();
  o.api_keys_file = certs_->Path("no_such_keys.txt");
  EXPECT_EQ(JasperServer::Start(o).status().code(), absl::StatusCode::kNotFound);
  std::ofstream(certs_->Path("empty_keys.txt")) << "# nothing\n";
  o.api_keys_file = certs_->Path("empty_keys.txt");
  EXPECT_EQ(JasperServer::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace jasper::server
