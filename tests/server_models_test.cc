// Several models in one server (ServerOptions::extra_model_dirs), over loopback gRPC: each
// request runs on the model its config names (the same transcript as a server that serves that
// model alone), both APIs list every model, unknown names get NOT_FOUND naming the served ones,
// the metrics number replicas across models, bad folder lists fail at start, INT8 serves
// calibrated folders only, and a call without a decoder gets the server's, else its model's
// default_decoder.
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "jasper/asr/v1/asr.grpc.pb.h"
#include "kernels/cpu_features.h"
#include "riva/proto/riva_asr.grpc.pb.h"
#include "server/jasper_server.h"
#include "tests/edit_distance.h"
#include "tests/server_test_util.h"

namespace jasper::server {
namespace {

namespace pb = ::jasper::asr::v1;
namespace rasr = ::nvidia::riva::asr;
namespace fs = std::filesystem;
using ::jasper::test_util::AudioChunks;
using ::jasper::test_util::DeadlineIn;
using ::jasper::test_util::ReadFileBytes;
using ::testing::HasSubstr;

const fs::path kRoot = JASPER_SOURCE_DIR;
const std::string kShipped = (kRoot / "models/quartznet_en_tts_small").string();
const std::string kQuartz = (kRoot / "tests/fixtures/quartznet_small/model").string();
const std::string kJasper = (kRoot / "tests/fixtures/jasper_dr_small/model").string();
constexpr char kWav[] = "tests/fixtures/heldout/heldout_01.wav";

// A started server and stubs on it.
struct Running {
  std::unique_ptr<JasperServer> server;
  std::unique_ptr<pb::Asr::Stub> asr;
  std::unique_ptr<rasr::RivaSpeechRecognition::Stub> riva;
};

ServerOptions Options(const std::string& model_dir, std::vector<std::string> extra = {}) {
  ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.model_dir = model_dir;
  o.extra_model_dirs = std::move(extra);
  o.num_workers = 1;
  o.warmup = false;
  return o;
}

std::unique_ptr<Running> Start(const ServerOptions& options) {
  auto server = JasperServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  auto r = std::make_unique<Running>();
  r->server = *std::move(server);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", r->server->port()),
                                     grpc::InsecureChannelCredentials());
  r->asr = pb::Asr::NewStub(channel);
  r->riva = rasr::RivaSpeechRecognition::NewStub(channel);
  return r;
}

// The transcript of kWav offline on `model` ("" = the default) with `decoder` ("" = not named),
// or "ERROR <code> <message>".
std::string Recognize(pb::Asr::Stub* asr, const std::string& model,
                      const std::string& decoder = "") {
  pb::RecognizeRequest request;
  request.mutable_config()->set_model(model);
  request.mutable_config()->set_decoder(decoder);
  request.set_audio(ReadFileBytes(kRoot / kWav));
  pb::RecognizeResponse response;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  const grpc::Status status = asr->Recognize(&context, request, &response);
  if (!status.ok()) return absl::StrCat("ERROR ", status.error_code(), " ", status.error_message());
  std::string text;
  for (const auto& r : response.results()) text += r.alternatives(0).transcript();
  return text;
}

// The final transcripts of kWav streamed on `model` through the Riva API.
std::string StreamRiva(rasr::RivaSpeechRecognition::Stub* riva, const std::string& model) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  auto stream = riva->StreamingRecognize(&context);
  rasr::StreamingRecognizeRequest config;
  config.mutable_streaming_config()->mutable_config()->set_model(model);
  config.mutable_streaming_config()->set_interim_results(true);
  EXPECT_TRUE(stream->Write(config));
  for (const std::string& chunk : AudioChunks(ReadFileBytes(kRoot / kWav))) {
    rasr::StreamingRecognizeRequest audio;
    audio.set_audio_content(chunk);
    if (!stream->Write(audio)) break;
  }
  stream->WritesDone();
  std::string text;
  rasr::StreamingRecognizeResponse response;
  while (stream->Read(&response)) {
    for (const auto& r : response.results()) {
      if (r.is_final() && r.alternatives_size() > 0) text += r.alternatives(0).transcript();
    }
  }
  const grpc::Status status = stream->Finish();
  if (!status.ok()) return absl::StrCat("ERROR ", status.error_code(), " ", status.error_message());
  return text;
}

class ServerModelsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    multi_ = Start(Options(kShipped, {kQuartz, kJasper})).release();
    ASSERT_NE(multi_, nullptr);
  }
  static void TearDownTestSuite() {
    delete multi_;
    multi_ = nullptr;
  }
  inline static Running* multi_ = nullptr;
};

TEST_F(ServerModelsTest, EachRequestRunsOnTheModelItNames) {
  // What each model says when a server serves it alone.
  for (const std::string& dir : {kShipped, kQuartz, kJasper}) {
    std::unique_ptr<Running> alone = Start(Options(dir));
    ASSERT_NE(alone, nullptr);
    const std::string name = alone->server->engine()->model_name();
    const std::string expected = Recognize(alone->asr.get(), "");
    ASSERT_THAT(expected, ::testing::Not(HasSubstr("ERROR"))) << name;
    EXPECT_EQ(Recognize(multi_->asr.get(), name), expected) << name;
    EXPECT_EQ(StreamRiva(multi_->riva.get(), name), StreamRiva(alone->riva.get(), "")) << name;
  }
  // No name: the default (the first folder).
  EXPECT_EQ(Recognize(multi_->asr.get(), ""),
            Recognize(multi_->asr.get(), "quartznet_en_tts_small"));
}

TEST_F(ServerModelsTest, ModelsAreListedByBothApis) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  pb::ListModelsResponse models;
  ASSERT_TRUE(multi_->asr->ListModels(&context, pb::ListModelsRequest(), &models).ok());
  ASSERT_EQ(models.models_size(), 3);
  EXPECT_EQ(models.models(0).name(), "quartznet_en_tts_small");
  EXPECT_TRUE(models.models(0).is_default());
  EXPECT_EQ(models.models(1).name(), "quartznet_small");
  EXPECT_FALSE(models.models(1).is_default());
  EXPECT_EQ(models.models(2).name(), "jasper_dr_small");
  EXPECT_FALSE(models.models(2).is_default());
  for (const auto& m : models.models()) EXPECT_EQ(m.labels_size(), 28) << m.name();

  grpc::ClientContext all_context;
  all_context.set_deadline(DeadlineIn());
  rasr::RivaSpeechRecognitionConfigResponse all;
  ASSERT_TRUE(multi_->riva
                  ->GetRivaSpeechRecognitionConfig(&all_context,
                                                   rasr::RivaSpeechRecognitionConfigRequest(), &all)
                  .ok());
  std::set<std::string> listed;
  for (const auto& c : all.model_config()) {
    listed.insert(absl::StrCat(c.model_name(), "/", c.parameters().at("type")));
  }
  EXPECT_EQ(listed, (std::set<std::string>{"quartznet_en_tts_small/online",
                                           "quartznet_en_tts_small/offline",
                                           "quartznet_small/online", "quartznet_small/offline",
                                           "jasper_dr_small/online", "jasper_dr_small/offline"}));

  grpc::ClientContext one_context;
  one_context.set_deadline(DeadlineIn());
  rasr::RivaSpeechRecognitionConfigRequest one_request;
  one_request.set_model_name("jasper_dr_small");
  rasr::RivaSpeechRecognitionConfigResponse one;
  ASSERT_TRUE(multi_->riva->GetRivaSpeechRecognitionConfig(&one_context, one_request, &one).ok());
  ASSERT_EQ(one.model_config_size(), 2);
  for (const auto& c : one.model_config()) EXPECT_EQ(c.model_name(), "jasper_dr_small");
}

TEST_F(ServerModelsTest, UnknownModelIsNotFoundNamingTheServedOnes) {
  const std::string out = Recognize(multi_->asr.get(), "nope");
  EXPECT_THAT(out, HasSubstr(absl::StrCat("ERROR ", grpc::StatusCode::NOT_FOUND)));
  EXPECT_THAT(out, HasSubstr("'quartznet_en_tts_small', 'quartznet_small', 'jasper_dr_small'"));
  EXPECT_THAT(StreamRiva(multi_->riva.get(), "nope"),
              HasSubstr(absl::StrCat("ERROR ", grpc::StatusCode::NOT_FOUND)));
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  rasr::RivaSpeechRecognitionConfigRequest request;
  request.set_model_name("nope");
  rasr::RivaSpeechRecognitionConfigResponse response;
  EXPECT_EQ(multi_->riva->GetRivaSpeechRecognitionConfig(&context, request, &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServerModelsTest, MetricsNumberReplicasAcrossModels) {
  ASSERT_THAT(Recognize(multi_->asr.get(), "jasper_dr_small"), ::testing::Not(HasSubstr("ERROR")));
  const std::string text = multi_->server->engine()->metrics()->Render();
  for (const char* name : {"quartznet_en_tts_small", "quartznet_small", "jasper_dr_small"}) {
    EXPECT_THAT(
        text, HasSubstr(absl::StrCat("jasper_build_info{model=\"", name, "\",device=\"cpu\"} 1")));
  }
  EXPECT_THAT(text, HasSubstr("jasper_backend_replicas 3"));
  // One worker per model: jasper_dr_small's replica is number 2.
  EXPECT_THAT(text, HasSubstr("jasper_backend_busy_seconds_total{replica=\"2\"}"));
  EXPECT_THAT(text,
              ::testing::Not(HasSubstr("jasper_backend_busy_seconds_total{replica=\"2\"} 0\n")));
}

TEST(ServerModelsStartTest, EachModelHasItsFoldersLmAndLmFileOverridesTheDefaults) {
  auto both = JasperServer::Start(Options(kShipped, {kQuartz}));
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_NE((*both)->engine()->models()[0]->lm, nullptr);  // the shipped folder's lm.bin
  EXPECT_EQ((*both)->engine()->models()[1]->lm, nullptr);  // the fixture declares none
  ServerOptions none = Options(kShipped);
  none.lm_file = "none";
  auto without = JasperServer::Start(none);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ((*without)->engine()->default_model().lm, nullptr);
  ServerOptions missing = Options(kShipped);
  missing.lm_file = "/nonexistent/lm.bin";
  EXPECT_EQ(JasperServer::Start(missing).status().code(), absl::StatusCode::kNotFound);
}

// model.json default_decoder: the shipped model's weights in a folder that says "beam" decode
// with beam search and the folder's LM when neither the call nor the server names a decoder.
TEST(ServerModelsStartTest, ACallWithoutADecoderGetsTheServersElseItsModelsDefault) {
  const fs::path dir = fs::path(::testing::TempDir()) / "jasper_default_decoder_beam";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* file : {"model.safetensors", "lm.bin"}) {
    fs::copy_file(fs::path(kShipped) / file, dir / file);
  }
  std::string json = ReadFileBytes(fs::path(kShipped) / "model.json");
  const std::string name_key = "\"name\": \"quartznet_en_tts_small\",";
  ASSERT_NE(json.find(name_key), std::string::npos);
  json.replace(json.find(name_key), name_key.size(),
               "\"name\": \"beam_by_default\", \"default_decoder\": \"beam\",");
  for (const char* folder_key :
       {"\"inverse_text_normalization\": \"itn\",", "\"punctuation\": \"punct_bert\","}) {
    ASSERT_NE(json.find(folder_key), std::string::npos) << folder_key;
    json.erase(json.find(folder_key), std::string(folder_key).size());
  }
  {
    std::ofstream out(dir / "model.json");
    out << json;
  }

  std::unique_ptr<Running> r = Start(Options(kShipped, {dir.string()}));
  ASSERT_NE(r, nullptr);
  const std::string greedy = Recognize(r->asr.get(), "quartznet_en_tts_small", "greedy");
  const std::string beam = Recognize(r->asr.get(), "quartznet_en_tts_small", "beam");
  ASSERT_NE(greedy, beam) << "the clip must tell the decoders apart";
  EXPECT_EQ(beam, "if the revocation is successful");
  EXPECT_EQ(Recognize(r->asr.get(), "quartznet_en_tts_small", ""), greedy);  // names none
  EXPECT_EQ(Recognize(r->asr.get(), "beam_by_default", ""), beam);
  EXPECT_EQ(Recognize(r->asr.get(), "beam_by_default", "greedy"), greedy);  // the call's
  r.reset();

  ServerOptions greedy_server = Options(kShipped, {dir.string()});
  greedy_server.decoder = "greedy";  // the server's --decoder outranks the folder
  r = Start(greedy_server);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(Recognize(r->asr.get(), "beam_by_default", ""), greedy);
  EXPECT_EQ(Recognize(r->asr.get(), "beam_by_default", "beam"), beam);
  r.reset();

  json.replace(json.find("\"beam\","), 7, "\"fast\",");
  {
    std::ofstream out(dir / "model.json");
    out << json;
  }
  const absl::Status bad = JasperServer::Start(Options(kShipped, {dir.string()})).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("default_decoder"));
  fs::remove_all(dir);
}

// --cpu_precision=int8: every served folder needs its INT8 calibration (the shipped one has it;
// the fixtures do not), else the start fails saying how to make one. Where the CPU has no INT8
// GEMM, the start fails as well.
TEST(ServerModelsStartTest, Int8ServesCalibratedFoldersOnly) {
  ServerOptions int8 = Options(kShipped);
  int8.cpu_precision = "int8";
  if (!kernels::HasInt8Gemm()) {
    EXPECT_EQ(JasperServer::Start(int8).status().code(), absl::StatusCode::kFailedPrecondition);
    GTEST_SKIP() << "no INT8 GEMM here: " << kernels::DescribeCpuFeatures();
  }
  std::unique_ptr<Running> server = Start(int8);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->server->engine()->default_model().precision, "int8");
  ServerOptions fp32_options = Options(kShipped);
  fp32_options.cpu_precision = "fp32";
  std::unique_ptr<Running> fp32 = Start(fp32_options);
  ASSERT_NE(fp32, nullptr);
  // Offline and streamed, INT8 transcribes this held-out file as FP32 does, up to one word (the
  // shipped model is weak: some of its frames are near ties that INT8's rounding can flip).
  auto words = [](const std::string& text) -> std::vector<std::string> {
    return absl::StrSplit(text, ' ', absl::SkipEmpty());
  };
  for (const auto& [got, want] :
       {std::make_pair(Recognize(server->asr.get(), ""), Recognize(fp32->asr.get(), "")),
        std::make_pair(StreamRiva(server->riva.get(), ""), StreamRiva(fp32->riva.get(), ""))}) {
    ASSERT_THAT(want, ::testing::Not(HasSubstr("ERROR")));
    ASSERT_THAT(got, ::testing::Not(HasSubstr("ERROR")));
    EXPECT_GE(words(want).size(), 4u) << want;
    EXPECT_LE(test_util::EditDistance(words(got), words(want)), 1) << got << " vs " << want;
  }

  ServerOptions uncalibrated = Options(kShipped, {kQuartz});
  uncalibrated.cpu_precision = "int8";
  auto refused = JasperServer::Start(uncalibrated);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--calibrate_int8"));
}

TEST(ServerModelsStartTest, BadFolderListsFailAtStart) {
  // The same folder twice: one name for two models.
  auto twice = JasperServer::Start(Options(kQuartz, {kQuartz}));
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("'quartznet_small'"));
  // A folder that is not a model: the error names it.
  auto missing = JasperServer::Start(Options(kQuartz, {"/nonexistent/model"}));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/model"));
  // An empty entry, and more than 16.
  EXPECT_EQ(JasperServer::Start(Options(kQuartz, {""})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      JasperServer::Start(Options(kQuartz, std::vector<std::string>(17, kJasper))).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace jasper::server
