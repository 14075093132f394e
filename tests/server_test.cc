// End-to-end tests of jasper-server: a real server in-process on 127.0.0.1 (picked port) and
// real gRPC clients, for both APIs (jasper.asr.v1 and the Riva-compatible one), health, the
// model listings, every error status the server documents, draining on shutdown, and
// concurrent streams. Each test is bounded by call deadlines of a few seconds.
//
// Model: tests/fixtures/quartznet_small/model, else the first model under models/, else a tiny
// random model written to a temp dir. Audio: tests/fixtures/audio/*.wav, else synthetic.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/io/safetensors.h"
#include "engine/model/model_config.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "jasper/asr/v1/asr.grpc.pb.h"
#include "riva/proto/riva_asr.grpc.pb.h"
#include "server/jasper_server.h"
#include "tests/model_test_util.h"
#include "tests/server_test_util.h"

namespace jasper::server {
namespace {

namespace pb = ::jasper::asr::v1;
namespace rasr = ::nvidia::riva::asr;
namespace fs = std::filesystem;
using ::jasper::test_util::AudioChunks;
using ::jasper::test_util::DeadlineIn;
using ::jasper::test_util::kSlowdown;
using ::jasper::test_util::StreamAudio;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------
// Fixtures: model and audio.

// test_util::ServerTestModelDir(), else a tiny random QuartzNet-like model in a temp dir.
std::string TestModelDir() {
  static const std::string dir = [] {
    if (std::string found = test_util::ServerTestModelDir(); !found.empty()) return found;
    const fs::path tmp = fs::temp_directory_path() / "jasper_server_test_model";
    fs::create_directories(tmp);
    ModelConfig config = test_util::SeparableConfig();
    config.name = "random_tiny";
    std::ofstream(tmp / "model.json") << ModelConfigToJson(config);
    std::ofstream(tmp / "model.safetensors", std::ios::binary)
        << SerializeSafetensors(test_util::MakeTensors(config, 1));
    return tmp.string();
  }();
  return dir;
}

void PutLe(std::string* out, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A 16-bit PCM WAV file of `seconds` of a warbling tone with noise.
std::string SyntheticWav(double seconds, int rate = 16000, int channels = 1) {
  const int frames = static_cast<int>(seconds * rate);
  std::string data;
  uint32_t noise = 12345;
  for (int i = 0; i < frames; ++i) {
    const double t = static_cast<double>(i) / rate;
    noise = noise * 1664525u + 1013904223u;
    const double v = 0.3 * std::sin(2 * M_PI * (300 + 200 * std::sin(2 * M_PI * 3 * t)) * t) +
                     0.05 * ((noise >> 16) / 32768.0 - 1.0);
    for (int c = 0; c < channels; ++c) PutLe(&data, static_cast<uint16_t>(v * 32767), 2);
  }
  std::string wav = "RIFF";
  PutLe(&wav, 36 + data.size(), 4);
  wav += "WAVEfmt ";
  PutLe(&wav, 16, 4);
  PutLe(&wav, 1, 2);
  PutLe(&wav, channels, 2);
  PutLe(&wav, rate, 4);
  PutLe(&wav, rate * channels * 2, 4);
  PutLe(&wav, channels * 2, 2);
  PutLe(&wav, 16, 2);
  wav += "data";
  PutLe(&wav, data.size(), 4);
  return wav + data;
}

// test_util::ServerTestWav(), else a synthetic one.
std::string TestWav() {
  static const std::string wav =
      fs::exists(test_util::ServerTestWavPath()) ? test_util::ServerTestWav() : SyntheticWav(2.5);
  return wav;
}

// ---------------------------------------------------------------------------------------------
// Clients.

template <typename Response>
struct StreamOutcome {
  grpc::Status status;
  std::vector<Response> responses;
};

// Runs one bidi stream: writes `requests` on a thread (then half-closes when asked), reads
// every response on this one.
template <typename Stub, typename Request, typename Response>
StreamOutcome<Response> RunStream(Stub* stub, const std::vector<Request>& requests,
                                  bool half_close = true) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  auto stream = stub->StreamingRecognize(&context);
  std::thread writer([&] {
    for (const Request& r : requests) {
      if (!stream->Write(r)) return;
    }
    if (half_close) stream->WritesDone();
  });
  StreamOutcome<Response> out;
  Response response;
  while (stream->Read(&response)) out.responses.push_back(response);
  writer.join();
  out.status = stream->Finish();
  return out;
}

pb::StreamingRecognizeRequest JasperConfig(bool interim = true, const std::string& model = "",
                                           bool events = false) {
  pb::StreamingRecognizeRequest r;
  auto* sc = r.mutable_streaming_config();
  sc->set_interim_results(interim);
  sc->set_enable_speech_events(events);
  sc->mutable_config()->set_language_code("en-US");
  sc->mutable_config()->set_enable_word_time_offsets(true);
  sc->mutable_config()->set_model(model);
  r.set_request_id("req-1");
  return r;
}

std::vector<pb::StreamingRecognizeRequest> JasperRequests(const std::string& wav,
                                                          bool interim = true) {
  std::vector<pb::StreamingRecognizeRequest> requests = {JasperConfig(interim)};
  for (const std::string& c : AudioChunks(wav)) requests.push_back(StreamAudio(c));
  return requests;
}

std::vector<rasr::StreamingRecognizeRequest> RivaRequests(const std::string& wav) {
  std::vector<rasr::StreamingRecognizeRequest> requests(1);
  // What stock Riva clients send: no encoding, no sample rate, header in the first chunk.
  auto* sc = requests[0].mutable_streaming_config();
  sc->set_interim_results(true);
  sc->mutable_config()->set_language_code("en-US");
  sc->mutable_config()->set_enable_word_time_offsets(true);
  requests[0].mutable_id()->set_value("riva-7");
  for (const std::string& c : AudioChunks(wav)) {
    rasr::StreamingRecognizeRequest r;
    r.set_audio_content(c);
    requests.push_back(r);
  }
  return requests;
}

class Server {
 public:
  explicit Server(ServerOptions options) {
    options.listen_address = "127.0.0.1:0";
    options.model_dir = TestModelDir();
    auto server = JasperServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return;
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    asr_ = pb::Asr::NewStub(channel_);
    riva_ = rasr::RivaSpeechRecognition::NewStub(channel_);
  }
  JasperServer* server() { return server_.get(); }
  pb::Asr::Stub* asr() { return asr_.get(); }
  rasr::RivaSpeechRecognition::Stub* riva() { return riva_.get(); }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }

  // grpc.health.v1.Health/Check for `service`: 1 = SERVING, 2 = NOT_SERVING.
  int HealthStatus(const std::string& service = "") {
    return test_util::HealthCheck(channel_, service);
  }

 private:
  std::unique_ptr<JasperServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Asr::Stub> asr_;
  std::unique_ptr<rasr::RivaSpeechRecognition::Stub> riva_;
};

ServerOptions MainOptions() {
  ServerOptions o;
  o.max_concurrent_streams = 32;
  o.max_message_bytes = 1 << 20;
  o.idle_timeout_ms = 10000;
  return o;
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new Server(MainOptions()); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static Server* server_;
};
Server* ServerTest::server_ = nullptr;

std::string FinalText(const std::vector<pb::StreamingRecognizeResponse>& responses) {
  std::string text;
  for (const auto& r : responses) {
    for (const auto& res : r.results()) {
      if (res.is_final() && res.alternatives_size() > 0) text += res.alternatives(0).transcript();
    }
  }
  return text;
}

// ---------------------------------------------------------------------------------------------
// Happy paths.

TEST_F(ServerTest, HealthIsServing) {
  EXPECT_EQ(server_->HealthStatus(), 1);
  EXPECT_EQ(server_->HealthStatus("jasper.asr.v1.Asr"), 1);
  EXPECT_EQ(server_->HealthStatus("nvidia.riva.asr.RivaSpeechRecognition"), 1);
}

TEST_F(ServerTest, ListModels) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  pb::ListModelsResponse response;
  ASSERT_TRUE(server_->asr()->ListModels(&context, pb::ListModelsRequest(), &response).ok());
  ASSERT_EQ(response.models_size(), 1);
  const pb::ModelInfo& m = response.models(0);
  EXPECT_EQ(m.name(), server_->server()->engine()->model_name());
  EXPECT_EQ(m.language_code(), "en-US");
  EXPECT_TRUE(m.supports_streaming());
  EXPECT_TRUE(m.is_default());
  EXPECT_EQ(m.device(), "cpu");
  EXPECT_GT(m.labels_size(), 0);
}

TEST_F(ServerTest, GetRivaSpeechRecognitionConfigListsOnlineAndOffline) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  rasr::RivaSpeechRecognitionConfigResponse response;
  ASSERT_TRUE(server_->riva()
                  ->GetRivaSpeechRecognitionConfig(
                      &context, rasr::RivaSpeechRecognitionConfigRequest(), &response)
                  .ok());
  std::set<std::string> types;
  for (const auto& c : response.model_config()) {
    types.insert(c.parameters().at("type"));
    EXPECT_EQ(c.parameters().at("language_code"), "en-US");
    EXPECT_EQ(c.model_name(), server_->server()->engine()->model_name());
  }
  EXPECT_EQ(types, (std::set<std::string>{"online", "offline"}));

  grpc::ClientContext unknown_context;
  rasr::RivaSpeechRecognitionConfigRequest unknown;
  unknown.set_model_name("nope");
  EXPECT_EQ(server_->riva()
                ->GetRivaSpeechRecognitionConfig(&unknown_context, unknown, &response)
                .error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServerTest, RecognizeWav) {
  pb::RecognizeRequest request;
  request.mutable_config()->set_language_code("en-US");
  request.mutable_config()->set_enable_word_time_offsets(true);
  request.set_audio(TestWav());
  request.set_request_id("offline-1");
  pb::RecognizeResponse response;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  grpc::Status status = server_->asr()->Recognize(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_GE(response.results_size(), 1);
  EXPECT_FALSE(response.results(0).alternatives(0).transcript().empty());
  EXPECT_GT(response.results(0).alternatives(0).words_size(), 0);
  EXPECT_GT(response.audio_duration(), 1.0f);
  EXPECT_EQ(response.request_id(), "offline-1");
}

TEST_F(ServerTest, StreamingWithInterimResults) {
  auto out =
      RunStream<pb::Asr::Stub, pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>(
          server_->asr(), JasperRequests(TestWav()));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  int interim_before_final = 0, finals = 0;
  float last_processed = 0;
  for (const auto& r : out.responses) {
    ASSERT_EQ(r.results_size(), 1);
    const auto& res = r.results(0);
    EXPECT_EQ(r.request_id(), "req-1");
    EXPECT_GE(res.audio_processed(), last_processed - 1e-3f);
    last_processed = res.audio_processed();
    if (res.is_final()) {
      ++finals;
      EXPECT_GT(res.alternatives(0).words_size(), 0);
    } else if (finals == 0) {
      ++interim_before_final;
      EXPECT_GT(res.stability(), 0.0f);
      EXPECT_EQ(res.alternatives(0).words_size(), 0);
    }
  }
  EXPECT_GT(interim_before_final, 0);
  EXPECT_GE(finals, 1);
  EXPECT_TRUE(out.responses.back().results(0).is_final());
  EXPECT_FALSE(FinalText(out.responses).empty());
}

TEST_F(ServerTest, SpeechEventsAndForceFinal) {
  const std::vector<std::string> chunks = AudioChunks(TestWav());
  std::vector<pb::StreamingRecognizeRequest> requests = {JasperConfig(false, "", true)};
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i == chunks.size() / 2) {
      pb::StreamingRecognizeRequest force;
      force.mutable_force_final();
      requests.push_back(force);
    }
    requests.push_back(StreamAudio(chunks[i]));
  }
  auto out =
      RunStream<pb::Asr::Stub, pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>(
          server_->asr(), requests);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  std::vector<int> final_utterances;
  int begins = 0, ends = 0;
  for (const auto& r : out.responses) {
    if (r.has_speech_event()) {
      EXPECT_EQ(r.results_size(), 0);
      begins += r.speech_event().type() == pb::SPEECH_ACTIVITY_BEGIN;
      ends += r.speech_event().type() == pb::SPEECH_ACTIVITY_END;
      EXPECT_LE(ends, begins);
      continue;
    }
    ASSERT_EQ(r.results_size(), 1);
    EXPECT_TRUE(r.results(0).is_final());  // interim_results = false
    final_utterances.push_back(r.results(0).utterance_index());
  }
  // The force-final ends utterance 0 in the middle of the audio; the rest is another one.
  ASSERT_GE(final_utterances.size(), 2u);
  for (size_t i = 1; i < final_utterances.size(); ++i) {
    EXPECT_GT(final_utterances[i], final_utterances[i - 1]);
  }
  EXPECT_GE(begins, 1);
  EXPECT_EQ(begins, ends);
}

TEST_F(ServerTest, RivaRecognizeWavWithoutEncoding) {
  rasr::RecognizeRequest request;
  request.mutable_config()->set_language_code("en-US");  // no encoding, no rate
  request.set_audio(TestWav());
  request.mutable_id()->set_value("r-1");
  rasr::RecognizeResponse response;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  grpc::Status status = server_->riva()->Recognize(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_GE(response.results_size(), 1);
  EXPECT_FALSE(response.results(0).alternatives(0).transcript().empty());
  EXPECT_GT(response.results(0).audio_processed(), 1.0f);
  EXPECT_EQ(response.id().value(), "r-1");
}

TEST_F(ServerTest, RivaStreamingWavWithoutEncoding) {
  auto out = RunStream<rasr::RivaSpeechRecognition::Stub, rasr::StreamingRecognizeRequest,
                       rasr::StreamingRecognizeResponse>(server_->riva(), RivaRequests(TestWav()));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  int finals = 0;
  std::string text;
  for (const auto& r : out.responses) {
    EXPECT_EQ(r.id().value(), "riva-7");
    ASSERT_EQ(r.results_size(), 1);
    if (r.results(0).is_final()) {
      ++finals;
      text += r.results(0).alternatives(0).transcript();
      EXPECT_GT(r.results(0).alternatives(0).words_size(), 0);
    }
  }
  EXPECT_GE(finals, 1);
  EXPECT_FALSE(text.empty());
}

TEST_F(ServerTest, ConcurrentStreamsAllComplete) {
  constexpr int kStreams = 8;
  std::vector<grpc::Status> statuses(kStreams);
  std::vector<std::string> texts(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      auto out =
          RunStream<pb::Asr::Stub, pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>(
              server_->asr(), JasperRequests(TestWav(), i % 2));
      statuses[i] = out.status;
      texts[i] = FinalText(out.responses);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) {
    EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].error_message();
    EXPECT_FALSE(texts[i].empty()) << i;
  }
  // Every call releases its admission slot (in OnDone, just after the client saw its status).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5 * kSlowdown);
  while (server_->server()->engine()->active_calls() > 0 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(server_->server()->engine()->active_calls(), 0);
}

// ---------------------------------------------------------------------------------------------
// Errors.

TEST_F(ServerTest, AudioBeforeConfigIsInvalidArgument) {
  auto out =
      RunStream<pb::Asr::Stub, pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>(
          server_->asr(), {StreamAudio(TestWav().substr(0, 3200))});
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("config"));
}

TEST_F(ServerTest, MissingConfigIsInvalidArgument) {
  auto out =
      RunStream<pb::Asr::Stub, pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>(
          server_->asr(), {});
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServerTest, SecondConfigIsInvalidArgument) {
  auto out =
      RunStream<pb::Asr::Stub, pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>(
          server_->asr(), {JasperConfig(), JasperConfig()});
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// Stereo is averaged into one channel: a stereo WAV (both channels the same) and raw stereo
// with audio_channel_count 2 give the mono file's transcript. More than 8 channels are refused
// at once. (Per-channel recognition: server_channels_test.)
TEST_F(ServerTest, StereoIsDownmixedAndTooManyChannelsAreRefused) {
  const std::string mono = TestWav();
  const std::string stereo = SyntheticWav(2.0, 16000, /*channels=*/2);
  const auto recognize = [this](const std::string& audio, int channels, int rate,
                                grpc::Status* status) {
    pb::RecognizeRequest request;
    request.mutable_config()->set_audio_channel_count(channels);
    request.mutable_config()->set_sample_rate_hertz(rate);
    request.set_audio(audio);
    pb::RecognizeResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn());
    *status = server_->asr()->Recognize(&context, request, &response);
    std::string text;
    for (const auto& r : response.results()) text += r.alternatives(0).transcript();
    return text;
  };
  // The mono WAV's samples duplicated into two channels, as a WAV and raw.
  const size_t data = mono.find("data") + 8;  // the test WAV has a plain 44-byte header
  std::string raw_stereo;
  for (size_t i = data; i + 1 < mono.size(); i += 2)
    raw_stereo += mono.substr(i, 2) + mono.substr(i, 2);
  grpc::Status status;
  const std::string mono_text = recognize(mono, 0, 0, &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(recognize(raw_stereo, 2, 16000, &status), mono_text);
  EXPECT_TRUE(status.ok()) << status.error_message();
  // A stereo WAV header, Riva style (no encoding set), streamed: transcribed.
  auto out = RunStream<rasr::RivaSpeechRecognition::Stub, rasr::StreamingRecognizeRequest,
                       rasr::StreamingRecognizeResponse>(server_->riva(), RivaRequests(stereo));
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
  // Nine channels: refused at once.
  recognize(std::string(3600, '\0'), 9, 16000, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("audio_channel_count must be in [0, 8]"));
}

TEST_F(ServerTest, RawAudioWithoutRateIsInvalidArgument) {
  std::vector<pb::StreamingRecognizeRequest> requests = {JasperConfig(),
                                                         StreamAudio(std::string(3200, '\1'))};
  auto out =
      RunStream<pb::Asr::Stub, pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>(
          server_->asr(), requests);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServerTest, UnknownModelIsNotFound) {
  auto out =
      RunStream<pb::Asr::Stub, pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>(
          server_->asr(), {JasperConfig(true, "no-such-model")});
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(out.status.error_message(), HasSubstr("no-such-model"));

  rasr::RecognizeRequest request;
  request.mutable_config()->set_model("no-such-model");
  request.set_audio(TestWav());
  rasr::RecognizeResponse response;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  EXPECT_EQ(server_->riva()->Recognize(&context, request, &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServerTest, OversizeMessageIsResourceExhausted) {
  pb::RecognizeRequest request;
  request.mutable_config()->set_sample_rate_hertz(16000);
  request.set_audio(std::string((1 << 20) + 1024, '\0'));
  pb::RecognizeResponse response;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  EXPECT_EQ(server_->asr()->Recognize(&context, request, &response).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  // The same limit holds for each message of a stream.
  std::vector<pb::StreamingRecognizeRequest> requests = {
      JasperConfig(), StreamAudio(TestWav().substr(0, 3200)),
      StreamAudio(std::string((1 << 20) + 1024, '\0'))};
  auto out =
      RunStream<pb::Asr::Stub, pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>(
          server_->asr(), requests);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << out.status.error_message();
}

TEST(ServerLimitsTest, TooManyStreamsIsResourceExhausted) {
  ServerOptions options = MainOptions();
  options.max_concurrent_streams = 2;
  Server server(options);
  ASSERT_NE(server.server(), nullptr);
  using Stream =
      grpc::ClientReaderWriter<pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>;
  grpc::ClientContext c1, c2, c3;
  for (auto* c : {&c1, &c2, &c3}) c->set_deadline(DeadlineIn());
  std::unique_ptr<Stream> s1 = server.asr()->StreamingRecognize(&c1);
  std::unique_ptr<Stream> s2 = server.asr()->StreamingRecognize(&c2);
  ASSERT_TRUE(s1->Write(JasperConfig()));
  ASSERT_TRUE(s2->Write(JasperConfig()));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5 * kSlowdown);
  while (server.server()->engine()->active_calls() < 2 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(server.server()->engine()->active_calls(), 2);
  std::unique_ptr<Stream> s3 = server.asr()->StreamingRecognize(&c3);
  pb::StreamingRecognizeResponse response;
  EXPECT_FALSE(s3->Read(&response));
  grpc::Status status = s3->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("max_concurrent_streams"));
  // The open streams still work, and their slots come back when they end.
  for (Stream* s : {s1.get(), s2.get()}) {
    for (const std::string& chunk : AudioChunks(TestWav()))
      ASSERT_TRUE(s->Write(StreamAudio(chunk)));
    s->WritesDone();
    while (s->Read(&response)) {
    }
    EXPECT_TRUE(s->Finish().ok());
  }
  auto out =
      RunStream<pb::Asr::Stub, pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>(
          server.asr(), JasperRequests(TestWav()));
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
}

TEST(ServerLimitsTest, IdleStreamIsOutOfRange) {
  ServerOptions options = MainOptions();
  options.idle_timeout_ms = 300;
  Server server(options);
  ASSERT_NE(server.server(), nullptr);
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  auto stream = server.asr()->StreamingRecognize(&context);
  ASSERT_TRUE(stream->Write(JasperConfig()));
  ASSERT_TRUE(stream->Write(StreamAudio(TestWav().substr(0, 6400))));
  // Then nothing: the server ends the stream.
  const auto start = std::chrono::steady_clock::now();
  pb::StreamingRecognizeResponse response;
  while (stream->Read(&response)) {
  }
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OUT_OF_RANGE) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("idle_timeout_ms"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5 * kSlowdown));
}

// After the last call ends and idle_memory_release_ms pass without calls, the heap's free
// memory goes back to the OS once; an open call holds it off; 0 disables; bad values are refused.
TEST(ServerLimitsTest, IdleMemoryIsReleasedOnlyWhenNoCallIsOpen) {
  ServerOptions bad = MainOptions();
  bad.model_dir = "models/any";
  bad.idle_memory_release_ms = -1;
  EXPECT_THAT(bad.Validate().message(), HasSubstr("idle_memory_release_ms"));

  ServerOptions options = MainOptions();
  options.idle_memory_release_ms = 100;
  Server server(options);
  ASSERT_NE(server.server(), nullptr);
  ServingEngine* engine = server.server()->engine();
  const int64_t before = engine->idle_memory_releases();
  auto wait_for_release = [&](int64_t count) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5 * kSlowdown);
    while (engine->idle_memory_releases() < count && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return engine->idle_memory_releases();
  };
  // A stream held open (config only) for well over the delay: no release meanwhile.
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  auto stream = server.asr()->StreamingRecognize(&context);
  ASSERT_TRUE(stream->Write(JasperConfig()));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(engine->idle_memory_releases(), before);
  // An offline call in between ends while the stream is open: still no release.
  auto out =
      RunStream<pb::Asr::Stub, pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>(
          server.asr(), JasperRequests(TestWav()));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(engine->idle_memory_releases(), before);
  // The last call ends: one release after the delay, and only one while idle.
  stream->WritesDone();
  pb::StreamingRecognizeResponse response;
  while (stream->Read(&response)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(wait_for_release(before + 1), before + 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(engine->idle_memory_releases(), before + 1);

  ServerOptions off = MainOptions();
  off.idle_memory_release_ms = 0;
  Server quiet(off);
  ASSERT_NE(quiet.server(), nullptr);
  auto done =
      RunStream<pb::Asr::Stub, pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>(
          quiet.asr(), JasperRequests(TestWav()));
  ASSERT_TRUE(done.status.ok()) << done.status.error_message();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(quiet.server()->engine()->idle_memory_releases(), 0);
}

// A port another server holds is refused (gRPC's default SO_REUSEPORT would let both start
// and split the connections between them).
TEST(ServerLimitsTest, PortInUseIsUnavailable) {
  Server first(MainOptions());
  ASSERT_NE(first.server(), nullptr);
  ServerOptions options = MainOptions();
  options.model_dir = TestModelDir();
  options.listen_address = absl::StrCat("127.0.0.1:", first.server()->port());
  absl::StatusOr<std::unique_ptr<JasperServer>> second = JasperServer::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_EQ(first.HealthStatus(), 1);
}

TEST(ServerLimitsTest, UnknownGpuPrecisionIsRefused) {
  ServerOptions options = MainOptions();
  options.model_dir = "models/any";
  EXPECT_TRUE(options.Validate().ok());
  options.gpu_precision = "int8";
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(options.Validate().message(), HasSubstr("gpu_precision"));
}

TEST(ServerShutdownTest, NewCallsUnavailableOpenStreamsGetFinals) {
  ServerOptions options = MainOptions();
  options.shutdown_grace_ms = 5000;
  Server server(options);
  ASSERT_NE(server.server(), nullptr);
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  auto stream = server.asr()->StreamingRecognize(&context);
  ASSERT_TRUE(stream->Write(JasperConfig(/*interim=*/true)));
  for (const std::string& chunk : AudioChunks(TestWav()))
    ASSERT_TRUE(stream->Write(StreamAudio(chunk)));
  // Wait until the audio is being recognized (an interim result), without half-closing.
  pb::StreamingRecognizeResponse response;
  ASSERT_TRUE(stream->Read(&response));
  // An admitted call of the test's own keeps the drain open (Shutdown waits for it, up to the
  // grace) while the new call below is made: without it, the open stream's finals end the last
  // call within milliseconds, gRPC's own shutdown begins, and a new call racing it is CANCELLED
  // by gRPC rather than refused by the engine (seen in CI).
  auto hold = server.server()->engine()->Admit(nullptr);
  ASSERT_TRUE(hold.ok()) << hold.status();

  std::thread shutdown([&] { server.server()->Shutdown(); });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5 * kSlowdown);
  while (!server.server()->engine()->draining() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(server.HealthStatus(), 2);  // NOT_SERVING
  {
    auto out =
        RunStream<pb::Asr::Stub, pb::StreamingRecognizeRequest, pb::StreamingRecognizeResponse>(
            server.asr(), JasperRequests(TestWav()));
    EXPECT_EQ(out.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  hold->reset();  // lets the shutdown go on
  bool got_final = false;
  while (stream->Read(&response)) {
    got_final |= response.results_size() > 0 && response.results(0).is_final();
  }
  grpc::Status status = stream->Finish();
  shutdown.join();
  EXPECT_TRUE(got_final);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("shutting down"));
}

}  // namespace
}  // namespace jasper::server
