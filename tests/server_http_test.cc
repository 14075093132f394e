// The HTTP front (server/http_server.h, server/openai_api.h) over loopback, with raw sockets so
// every byte on the wire is the test's: transcription equal to the gRPC API's, keep-alive,
// Expect: 100-continue, and each limit with its status (413 body, 431 head, 400 malformed,
// 404/405 routes, connection limit 503, request timeout closes), multipart errors as JSON;
// and the multipart parser itself.
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "jasper/asr/v1/asr.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "server/jasper_server.h"
#include "server/multipart.h"
#include "tests/http_test_util.h"
#include "tests/server_test_util.h"

namespace jasper::server {
namespace {

namespace fs = std::filesystem;
using ::jasper::test_util::Body;
using ::jasper::test_util::DeadlineIn;
using ::jasper::test_util::FormPost;
using ::jasper::test_util::ReadFileBytes;
using ::jasper::test_util::Socket;
using ::jasper::test_util::WsOutcome;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const fs::path kRoot = JASPER_SOURCE_DIR;
constexpr char kWav[] = "models/quartznet_en_tts_small/samples/sample_1.wav";
constexpr int64_t kMaxBody = 256 << 10;
constexpr int kMaxConnections = 6;
constexpr int kTimeoutMs = 1500;

class ServerHttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.http_address = "127.0.0.1:0";
    o.model_dir = (kRoot / "models/quartznet_en_tts_small").string();
    o.warmup = false;
    o.http_max_body_bytes = kMaxBody;
    o.http_max_connections = kMaxConnections;
    o.http_request_timeout_ms = kTimeoutMs;
    auto server = JasperServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() { delete server_; }
  static int port() { return server_->http_port(); }

  // The gRPC API's transcript of `wav`: verbatim (both APIs' default), or written and
  // punctuated.
  static std::string GrpcTranscript(const std::string& wav, bool verbatim = true) {
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    auto stub = asr::v1::Asr::NewStub(channel);
    asr::v1::RecognizeRequest request;
    request.set_audio(wav);
    request.mutable_config()->set_inverse_text_normalization(!verbatim);
    request.mutable_config()->set_enable_automatic_punctuation(!verbatim);
    asr::v1::RecognizeResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn());
    EXPECT_TRUE(stub->Recognize(&context, request, &response).ok());
    std::string text;
    for (const auto& r : response.results()) text += r.alternatives(0).transcript();
    return text;
  }

  inline static JasperServer* server_ = nullptr;
};

TEST_F(ServerHttpTest, TranscribesAsGrpcDoesAndKeepsTheConnection) {
  const std::string wav = ReadFileBytes(kRoot / kWav);
  const std::string want = GrpcTranscript(wav);
  ASSERT_FALSE(want.empty());
  Socket s(port());
  ASSERT_TRUE(s.connected());
  for (const char* format : {"json", "text", "verbose_json"}) {
    s.Send(FormPost({{"file", "a.wav", wav}, {"response_format", "", format}}));
    const std::string r = s.ReadResponse();  // same connection: keep-alive
    ASSERT_THAT(r, StartsWith("HTTP/1.1 200")) << format << ": " << r.substr(0, 300);
    if (std::string(format) == "text") {
      EXPECT_EQ(Body(r), want + "\n");
    } else {
      EXPECT_EQ(nlohmann::json::parse(Body(r))["text"], want) << format;
    }
  }
  s.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(Body(s.ReadResponse()), HasSubstr("SERVING"));
}

// jasper's form fields ask for written form and punctuation, as the gRPC fields of the same
// names do; "false" is the default.
TEST_F(ServerHttpTest, FormFieldsAskForWrittenFormAndPunctuation) {
  const std::string wav = ReadFileBytes(kRoot / kWav);
  const std::string written = GrpcTranscript(wav, /*verbatim=*/false);
  ASSERT_FALSE(written.empty());
  EXPECT_NE(written, GrpcTranscript(wav));  // capitals and a closing mark at least
  Socket s(port());
  s.Send(FormPost({{"file", "a.wav", wav},
                   {"inverse_text_normalization", "", "true"},
                   {"enable_automatic_punctuation", "", "true"},
                   {"response_format", "", "text"}}));
  EXPECT_EQ(Body(s.ReadResponse()), written + "\n");
  s.Send(FormPost({{"file", "a.wav", wav},
                   {"inverse_text_normalization", "", "false"},
                   {"enable_automatic_punctuation", "", "false"},
                   {"response_format", "", "text"}}));
  EXPECT_EQ(Body(s.ReadResponse()), GrpcTranscript(wav) + "\n");
  s.Send(FormPost({{"file", "a.wav", wav}, {"enable_automatic_punctuation", "", "yes"}}));
  const std::string r = s.ReadResponse();
  EXPECT_THAT(r, StartsWith("HTTP/1.1 400")) << r;
  EXPECT_THAT(r, HasSubstr("enable_automatic_punctuation must be true or false"));
}

TEST_F(ServerHttpTest, AnswersExpect100ContinueBeforeTheBody) {
  const std::string wav = ReadFileBytes(kRoot / kWav);
  std::string request = FormPost({{"file", "a.wav", wav}}, "Expect: 100-continue\r\n");
  const size_t head_end = request.find("\r\n\r\n") + 4;
  Socket s(port());
  s.Send(request.substr(0, head_end));
  EXPECT_THAT(s.ReadResponse(), StartsWith("HTTP/1.1 100 Continue"));
  s.Send(request.substr(head_end));
  EXPECT_THAT(s.ReadResponse(), StartsWith("HTTP/1.1 200"));
}

TEST_F(ServerHttpTest, LimitsAnswerWithTheirStatus) {
  {  // A body over http_max_body_bytes: 413 from its Content-Length, before it is sent.
    Socket s(port());
    s.Send(
        absl::StrCat("POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     "multipart/form-data; boundary=b\r\nContent-Length: ",
                     kMaxBody + 1, "\r\n\r\n"));
    const std::string r = s.ReadResponse();
    EXPECT_THAT(r, StartsWith("HTTP/1.1 413"));
    EXPECT_THAT(Body(r), HasSubstr("request_too_large"));
  }
  {  // A chunked body that grows past the limit: 413 too.
    Socket s(port());
    s.Send(
        "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        "Content-Type: multipart/form-data; boundary=b\r\n\r\n");
    const std::string chunk(64 << 10, 'a');
    for (int i = 0; i < 5; ++i) s.Send(absl::StrCat("10000\r\n", chunk, "\r\n"));
    EXPECT_THAT(s.ReadResponse(), StartsWith("HTTP/1.1 413"));
  }
  {  // A head over the header limit (16 KiB): 431.
    Socket s(port());
    s.Send(absl::StrCat("GET /health HTTP/1.1\r\nX-Big: ", std::string(20000, 'x'), "\r\n\r\n"));
    EXPECT_THAT(s.ReadResponse(), StartsWith("HTTP/1.1 431"));
  }
  {  // Not HTTP: 400.
    Socket s(port());
    s.Send("HELLO THERE\r\n\r\n");
    EXPECT_THAT(s.ReadResponse(), StartsWith("HTTP/1.1 400"));
  }
  {  // Routes: 404, and 405 with Allow.
    Socket s(port());
    s.Send("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_THAT(s.ReadResponse(), StartsWith("HTTP/1.1 404"));
    s.Send("GET /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string r = s.ReadResponse();
    EXPECT_THAT(r, StartsWith("HTTP/1.1 405"));
    EXPECT_THAT(r, HasSubstr("Allow: POST"));
  }
  {  // A request that never completes: the connection is closed after the timeout.
    Socket s(port());
    s.Send("GET /health HTTP/1.1\r\nHost:");
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(s.PeerCloses());
    EXPECT_GE(std::chrono::steady_clock::now() - start,
              std::chrono::milliseconds(kTimeoutMs - 200));
  }
}

TEST_F(ServerHttpTest, ConnectionsBeyondTheLimitGet503) {
  std::vector<std::unique_ptr<Socket>> open;
  for (int i = 0; i < kMaxConnections; ++i) {
    open.push_back(std::make_unique<Socket>(port()));
    open.back()->Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_THAT(open.back()->ReadResponse(), StartsWith("HTTP/1.1 200"));  // accepted, held
  }
  Socket extra(port());
  EXPECT_THAT(extra.ReadResponse(), StartsWith("HTTP/1.1 503"));
  open.clear();
  // Once they are closed, connections are served again.
  for (int attempt = 0; attempt < 50; ++attempt) {
    Socket s(port());
    s.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    if (s.ReadResponse().rfind("HTTP/1.1 200", 0) == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "no connection served after the others closed";
}

TEST_F(ServerHttpTest, BadFormsAreJsonErrors) {
  const std::string wav = ReadFileBytes(kRoot / kWav);
  struct Case {
    std::vector<std::vector<std::string>> fields;
    const char* status;
    const char* message;
  };
  const Case cases[] = {
      {{{"model", "", "quartznet_en_tts_small"}}, "400", "no 'file' part"},
      {{{"file", "a.wav", wav}, {"response_format", "", "xml"}}, "400", "response_format"},
      {{{"file", "a.wav", wav}, {"model", "", "whisper-1"}}, "404", "not found"},
      {{{"file", "a.wav", wav}, {"language", "", "de"}}, "400", "language"},
      {{{"file", "notes.txt", "just some text, not audio"}}, "400", "not audio"},
      {{{"file", "a.wav", wav}, {"timestamp_granularities[]", "", "word"}}, "400", "verbose_json"},
      {{{"file", "a.wav", wav.substr(0, 30)}}, "400", "WAV"},
  };
  Socket s(port());
  for (const Case& c : cases) {
    s.Send(FormPost(c.fields));
    const std::string r = s.ReadResponse();
    EXPECT_THAT(r, StartsWith(absl::StrCat("HTTP/1.1 ", c.status))) << c.message << ": " << r;
    const auto j = nlohmann::json::parse(Body(r), nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << r;
    EXPECT_THAT(j["error"]["message"].get<std::string>(), HasSubstr(c.message));
  }
  // Not multipart at all.
  s.Send(
      "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 2\r\n\r\n{}");
  EXPECT_THAT(s.ReadResponse(), StartsWith("HTTP/1.1 400"));
}

// A WebSocket stream (/v1/stream) with Beast's client: config, audio in 100 ms frames, end; the
// finals are the gRPC API's, the close is 1000. A bad config: error JSON, then close 4003.
WsOutcome StreamOverWebSocket(int port, const std::string& start, const std::string& audio) {
  namespace beast = boost::beast;
  boost::asio::io_context io;
  boost::asio::ip::tcp::resolver resolver(io);
  beast::websocket::stream<beast::tcp_stream> ws(io);
  beast::get_lowest_layer(ws).expires_after(std::chrono::seconds(60));
  beast::get_lowest_layer(ws).connect(resolver.resolve("127.0.0.1", std::to_string(port)));
  return test_util::StreamOverWebSocket(ws, absl::StrCat("127.0.0.1:", port), start, audio);
}

TEST_F(ServerHttpTest, WebSocketStreamsAsGrpcDoes) {
  const std::string wav = ReadFileBytes(kRoot / kWav);
  const std::string want = GrpcTranscript(wav);
  const WsOutcome ok = StreamOverWebSocket(
      port(), R"({"streamingConfig": {"config": {}, "interimResults": true}})", wav);
  EXPECT_EQ(ok.finals, want);
  EXPECT_GT(ok.interims, 0);
  EXPECT_EQ(ok.close_code, 1000);
  EXPECT_EQ(ok.error, "");
  const WsOutcome bad =
      StreamOverWebSocket(port(), R"({"streamingConfig": {"config": {"decoder": "x"}}})", wav);
  EXPECT_EQ(bad.close_code, 4003);
  EXPECT_EQ(bad.error, "INVALID_ARGUMENT");
  const WsOutcome not_json = StreamOverWebSocket(port(), "hello", wav);
  EXPECT_EQ(not_json.close_code, 4003);
  // An upgrade to another path is 404 (plain HTTP answer).
  Socket s(port());
  s.Send(
      "GET /v1/elsewhere HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
  EXPECT_THAT(s.ReadResponse(), StartsWith("HTTP/1.1 404"));
}

TEST(MultipartTest, ParsesPartsAndRefusesBrokenForms) {
  absl::StatusOr<std::string> b =
      FormBoundary("multipart/form-data; charset=utf-8; boundary=\"x y\"");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, "x y");
  EXPECT_FALSE(FormBoundary("application/json").ok());
  EXPECT_FALSE(FormBoundary("multipart/form-data").ok());
  EXPECT_FALSE(
      FormBoundary(absl::StrCat("multipart/form-data; boundary=", std::string(71, 'b'))).ok());

  const std::string body =
      "preamble\r\n--x y\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--x y\r\n"
      "Content-Disposition: form-data; name=\"file\"; filename=\"f.wav\"\r\nContent-Type: "
      "audio/wav\r\n\r\nbin\r\nary\r\n--x y--\r\nepilogue";
  absl::StatusOr<std::vector<FormPart>> parts = ParseMultipart(body, "x y");
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].name, "a");
  EXPECT_EQ((*parts)[0].data, "1");
  EXPECT_EQ((*parts)[1].filename, "f.wav");
  EXPECT_EQ((*parts)[1].content_type, "audio/wav");
  EXPECT_EQ((*parts)[1].data, "bin\r\nary");

  for (const char* bad :
       {"", "--x y\r\n\r\n", "--x y\r\nContent-Disposition: form-data\r\n\r\nv",
        "--x y\r\nContent-Disposition: form-data; name=a\r\n\r\nno end", "--x yjunk"}) {
    EXPECT_EQ(ParseMultipart(bad, "x y").status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  std::string many;
  for (int i = 0; i <= kMaxFormParts; ++i) {
    absl::StrAppend(&many, "--x y\r\nContent-Disposition: form-data; name=p\r\n\r\nv\r\n");
  }
  absl::StrAppend(&many, "--x y--");
  EXPECT_THAT(std::string(ParseMultipart(many, "x y").status().message()), HasSubstr("more than"));
}

}  // namespace
}  // namespace jasper::server
