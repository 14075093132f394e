// jasper-client's WebSocket transport (client/ws_stream.h) against the real server's HTTP front
// over loopback: the same transcripts and latencies as its gRPC streaming calls, and the same
// status codes for the same failures (bad key, unknown model, deadline, nothing listening).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/calls.h"
#include "client/latency_stats.h"
#include "client/ws_stream.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "jasper/asr/v1/asr.grpc.pb.h"
#include "server/jasper_server.h"

namespace jasper::client {
namespace {

namespace pb = ::jasper::asr::v1;
namespace fs = std::filesystem;
using ::jasper::server::JasperServer;

const fs::path kRoot = JASPER_SOURCE_DIR;
constexpr char kKey[] = "client-ws-test-key";

class ClientWsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    keys_file_ = new std::string(
        (fs::temp_directory_path() / absl::StrCat("client_ws_test_keys_", getpid())).string());
    std::ofstream(*keys_file_) << kKey << "\n";
    server::ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.http_address = "127.0.0.1:0";
    o.model_dir = (kRoot / "models/quartznet_en_tts_small").string();
    o.api_keys_file = *keys_file_;
    o.warmup = false;
    auto server = JasperServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    ChannelSecurity security;
    security.api_key = kKey;
    auto channel = CreateClientChannel(absl::StrCat("127.0.0.1:", server_->port()), security,
                                       grpc::ChannelArguments());
    ASSERT_TRUE(channel.ok());
    stub_ = pb::Asr::NewStub(*channel).release();
  }
  static void TearDownTestSuite() {
    delete stub_;
    delete server_;
    std::remove(keys_file_->c_str());
    delete keys_file_;
  }

  static StreamOpener WsOpener(const std::string& key, int port = 0) {
    WebSocketTarget target;
    target.address = absl::StrCat("127.0.0.1:", port != 0 ? port : server_->http_port());
    target.security.api_key = key;
    return [target](std::chrono::system_clock::time_point deadline) {
      return OpenWebSocketStream(target, deadline);
    };
  }

  static AudioFile Load(const fs::path& path) {
    auto file = LoadAudioFile(path.string(), /*raw_sample_rate_hz=*/0);
    EXPECT_TRUE(file.ok()) << file.status();
    return file.ok() ? *file : AudioFile();
  }

  static inline std::string* keys_file_ = nullptr;
  static inline JasperServer* server_ = nullptr;
  static inline pb::Asr::Stub* stub_ = nullptr;
};

TEST_F(ClientWsTest, SameTranscriptsAndLatenciesAsGrpc) {
  const fs::path files[] = {kRoot / "models/quartznet_en_tts_small/samples/sample_1.wav",
                            kRoot / "models/quartznet_en_tts_small/samples/sample_2.wav",
                            kRoot / "tests/fixtures/codecs/sample_1.flac"};
  CallOptions options;
  options.interim_results = true;
  options.word_time_offsets = true;
  options.force_final_every_ms = 1500;  // a force_final control travels too
  for (const fs::path& path : files) {
    SCOPED_TRACE(path.filename().string());
    const AudioFile file = Load(path);
    LoadStats grpc_stats;
    LoadStats ws_stats;
    const CallResult want = RunStreaming(stub_, file, options, &grpc_stats);
    const CallResult got = RunStreamingOn(WsOpener(kKey), file, options, &ws_stats);
    ASSERT_TRUE(want.status.ok()) << want.status.error_message();
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    EXPECT_FALSE(got.transcript.empty());
    EXPECT_EQ(got.transcript, want.transcript);
    EXPECT_EQ(got.final_results, want.final_results);
    ASSERT_EQ(got.words.size(), want.words.size());
    for (size_t i = 0; i < got.words.size(); ++i) {
      EXPECT_EQ(got.words[i].start_time(), want.words[i].start_time());
      EXPECT_EQ(got.words[i].end_time(), want.words[i].end_time());
    }
    if (file.compressed == pb::ENCODING_UNSPECIFIED) {
      EXPECT_GT(got.interim_results, 0);
    }
    // Both reports count the call as OK and measured its final latencies.
    EXPECT_EQ(ws_stats.failed_calls(), 0);
    EXPECT_NE(ws_stats.ReportJson(1.0).find("\"final\""), std::string::npos)
        << ws_stats.ReportJson(1.0);
  }
}

// A loopback port that was free a moment ago (bound, then closed).
int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST_F(ClientWsTest, FailuresHaveTheGrpcCodes) {
  const AudioFile file = Load(kRoot / "models/quartznet_en_tts_small/samples/sample_1.wav");
  // A wrong API key: refused at the handshake (close 4016).
  CallResult r = RunStreamingOn(WsOpener("wrong-key"), file, {}, nullptr);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << r.status.error_message();
  EXPECT_NE(r.status.error_message().find("API key"), std::string::npos)
      << r.status.error_message();
  // An unknown model: the error frame's code and message, as gRPC says them.
  CallOptions unknown;
  unknown.model = "no-such-model";
  const CallResult want = RunStreaming(stub_, file, unknown, nullptr);
  r = RunStreamingOn(WsOpener(kKey), file, unknown, nullptr);
  EXPECT_NE(want.status.error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(r.status.error_code(), want.status.error_code()) << r.status.error_message();
  EXPECT_EQ(r.status.error_message(), want.status.error_message());
  // A deadline shorter than the real-time audio.
  CallOptions slow;
  slow.simulate_realtime = true;
  slow.timeout_ms = 300;
  r = RunStreamingOn(WsOpener(kKey), file, slow, nullptr);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << r.status.error_message();
  // Nothing listens on the port: UNAVAILABLE.
  r = RunStreamingOn(WsOpener(kKey, UnusedPort()), file, {}, nullptr);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  // A server that answers the upgrade with an HTTP error (a route that is not a WebSocket).
  WebSocketTarget wrong_path;
  wrong_path.address = absl::StrCat("127.0.0.1:", server_->http_port());
  wrong_path.path = "/v1/models";
  r = RunStreamingOn(
      [&](std::chrono::system_clock::time_point d) { return OpenWebSocketStream(wrong_path, d); },
      file, {}, nullptr);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  // A malformed address.
  WebSocketTarget bad;
  bad.address = "127.0.0.1";
  auto opened = OpenWebSocketStream(bad, std::chrono::system_clock::now());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument);
  // The server still serves.
  r = RunStreamingOn(WsOpener(kKey), file, {}, nullptr);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_FALSE(r.transcript.empty());
}

}  // namespace
}  // namespace jasper::client
