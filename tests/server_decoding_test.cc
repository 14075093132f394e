// Beam-search decoding and word boosting through the real server over loopback gRPC (issue 22),
// on the shipped model: RecognitionConfig.decoder per request, speech_contexts on both APIs
// (a boosted word that greedy decoding misspells comes out right, other words stay),
// max_alternatives (N-best) on both APIs and through the CLI's calls, and the INVALID_ARGUMENT
// cases (no call is opened for them).
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/calls.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "jasper/asr/v1/asr.grpc.pb.h"
#include "riva/proto/riva_asr.grpc.pb.h"
#include "server/jasper_server.h"
#include "tests/server_test_util.h"
#include "tests/shipped_model_server.h"

namespace jasper::server {
namespace {

namespace pb = ::jasper::asr::v1;
namespace rasr = ::nvidia::riva::asr;
namespace fs = std::filesystem;
using ::jasper::test_util::DeadlineIn;
using ::jasper::test_util::ReadFileBytes;
using ::testing::HasSubstr;

const fs::path kRoot = JASPER_SOURCE_DIR;

class ServerDecodingTest : public test_util::ShippedModelServerTest {
 protected:
  // Recognize `wav` with our API; the transcript, or the status's message prefixed "ERROR ".
  static std::string Recognize(const std::string& wav, const std::string& decoder,
                               const std::string& boost_phrase = "", float boost = 0,
                               grpc::StatusCode* code = nullptr) {
    pb::RecognizeRequest request;
    request.mutable_config()->set_decoder(decoder);
    if (!boost_phrase.empty() || boost != 0) {
      pb::SpeechContext* context = request.mutable_config()->add_speech_contexts();
      context->add_phrases(boost_phrase);
      context->set_boost(boost);
    }
    request.set_audio(ReadFileBytes(kRoot / wav));
    pb::RecognizeResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn());
    const grpc::Status status = asr_->Recognize(&context, request, &response);
    if (code != nullptr) *code = status.error_code();
    if (!status.ok()) return "ERROR " + status.error_message();
    std::string text;
    for (const auto& r : response.results()) text += r.alternatives(0).transcript();
    return text;
  }

  // Recognize on either API's stub with the test deadline.
  template <typename Stub, typename Request, typename Response>
  static grpc::Status Call(Stub* stub, const Request& request, Response* response) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn());
    return stub->Recognize(&context, request, response);
  }
};

constexpr char kRevocation[] = "tests/fixtures/heldout/heldout_01.wav";  // "if the revocation..."

TEST_F(ServerDecodingTest, BeamPerRequestAndBoostingFixesAWord) {
  const std::string greedy = Recognize(kRevocation, "");
  EXPECT_THAT(greedy, HasSubstr("evocation"));  // the shipped model misses the "r"
  EXPECT_THAT(greedy, ::testing::Not(HasSubstr("revocation")));
  const std::string beam = Recognize(kRevocation, "beam");
  EXPECT_THAT(beam, ::testing::Not(HasSubstr("ERROR")));
  // Boosting the word (speech_contexts alone switches to beam search) fixes it and leaves
  // the other words as beam search without it had them.
  const std::string boosted = Recognize(kRevocation, "", "Revocation", 6.0f);
  EXPECT_THAT(boosted, HasSubstr("revocation"));
  const std::string unrelated = Recognize(kRevocation, "", "dedicated interconnect", 6.0f);
  EXPECT_EQ(unrelated, beam);
  // The sample both decoders get right stays right.
  EXPECT_EQ(Recognize("models/quartznet_en_tts_small/samples/sample_1.wav", "beam"),
            "to prevent this");
}

TEST_F(ServerDecodingTest, RivaSpeechContextsBoostToo) {
  rasr::RecognizeRequest request;
  rasr::SpeechContext* context = request.mutable_config()->add_speech_contexts();
  context->add_phrases("revocation");
  context->set_boost(6.0f);
  request.set_audio(ReadFileBytes(kRoot / kRevocation));
  rasr::RecognizeResponse response;
  const grpc::Status status = Call(riva_, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_GE(response.results_size(), 1);
  EXPECT_THAT(response.results(0).alternatives(0).transcript(), HasSubstr("revocation"));
}

// max_alternatives: the first alternative is the beam transcript of one alternative; the others
// differ from it and from each other; confidences are on the same [0, 1] scale; words come with
// each when asked for. On both APIs.
TEST_F(ServerDecodingTest, MaxAlternativesGivesDistinctHypothesesOnBothApis) {
  pb::RecognizeRequest request;
  request.mutable_config()->set_max_alternatives(4);
  request.mutable_config()->set_enable_word_time_offsets(true);
  request.set_audio(ReadFileBytes(kRoot / kRevocation));
  pb::RecognizeResponse response;
  const grpc::Status status = Call(asr_, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.results_size(), 1);
  const auto& result = response.results(0);
  ASSERT_GE(result.alternatives_size(), 2);
  ASSERT_LE(result.alternatives_size(), 4);
  // Alternatives switch to beam search: the first is what beam search gives alone.
  EXPECT_EQ(result.alternatives(0).transcript(), Recognize(kRevocation, "beam"));
  for (int i = 0; i < result.alternatives_size(); ++i) {
    const auto& a = result.alternatives(i);
    EXPECT_GE(a.confidence(), 0.0f);
    EXPECT_LE(a.confidence(), 1.0f);
    EXPECT_GT(a.words_size(), 0) << i;
    for (int j = i + 1; j < result.alternatives_size(); ++j) {
      EXPECT_NE(a.transcript(), result.alternatives(j).transcript()) << i << " " << j;
    }
  }
  // Riva: the same alternatives.
  rasr::RecognizeRequest riva_request;
  riva_request.mutable_config()->set_max_alternatives(4);
  riva_request.set_audio(ReadFileBytes(kRoot / kRevocation));
  rasr::RecognizeResponse riva_response;
  const grpc::Status riva_status = Call(riva_, riva_request, &riva_response);
  ASSERT_TRUE(riva_status.ok()) << riva_status.error_message();
  ASSERT_EQ(riva_response.results_size(), 1);
  ASSERT_EQ(riva_response.results(0).alternatives_size(), result.alternatives_size());
  for (int i = 0; i < result.alternatives_size(); ++i) {
    EXPECT_EQ(riva_response.results(0).alternatives(i).transcript(),
              result.alternatives(i).transcript());
  }
  // One alternative (0 or 1) stays greedy and single.
  request.mutable_config()->set_max_alternatives(1);
  pb::RecognizeResponse one;
  ASSERT_TRUE(Call(asr_, request, &one).ok());
  ASSERT_EQ(one.results_size(), 1);
  EXPECT_EQ(one.results(0).alternatives_size(), 1);
  EXPECT_EQ(one.results(0).alternatives(0).transcript(), Recognize(kRevocation, ""));
}

// The CLI's calls (jasper-client --max_alternatives) collect the alternatives after the first,
// offline and streaming, numbered by result and rank.
TEST_F(ServerDecodingTest, TheClientCollectsAlternatives) {
  absl::StatusOr<client::AudioFile> file =
      client::LoadAudioFile((kRoot / kRevocation).string(), /*raw_sample_rate_hz=*/0);
  ASSERT_TRUE(file.ok()) << file.status();
  client::CallOptions options;
  options.max_alternatives = 3;
  for (bool streaming : {false, true}) {
    const client::CallResult r = streaming ? client::RunStreaming(asr_, *file, options, nullptr)
                                           : client::RunOffline(asr_, *file, options, nullptr);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.transcript, Recognize(kRevocation, "beam")) << streaming;
    ASSERT_EQ(r.alternatives.size(), 2u) << streaming;
    EXPECT_EQ(r.alternatives[0].result, 0);
    EXPECT_EQ(r.alternatives[0].rank, 2);
    EXPECT_EQ(r.alternatives[1].rank, 3);
    EXPECT_NE(r.alternatives[0].transcript, r.transcript);
  }
}

TEST_F(ServerDecodingTest, BadDecodingRequestsAreInvalidArgument) {
  grpc::StatusCode code;
  EXPECT_THAT(Recognize(kRevocation, "viterbi", "", 0, &code), HasSubstr("decoder"));
  EXPECT_EQ(code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(Recognize(kRevocation, "", "", 3.0f, &code), HasSubstr("phrase 0"));
  EXPECT_EQ(code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(Recognize(kRevocation, "", "!!! 42", 3.0f, &code), HasSubstr("no letters"));
  EXPECT_EQ(code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(Recognize(kRevocation, "", "word", NAN, &code), HasSubstr("finite"));
  EXPECT_EQ(code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(Recognize(kRevocation, "", "word", 500.0f, &code), HasSubstr("beyond"));
  EXPECT_EQ(code, grpc::StatusCode::INVALID_ARGUMENT);
  pb::RecognizeRequest request;
  request.mutable_config()->set_max_alternatives(11);
  request.set_audio(ReadFileBytes(kRoot / kRevocation));
  pb::RecognizeResponse response;
  const grpc::Status status = Call(asr_, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("max_alternatives must be in [0, 10]"));
  // The server is fine afterwards.
  EXPECT_EQ(Recognize("models/quartznet_en_tts_small/samples/sample_1.wav", ""), "to prevent this");
}

}  // namespace
}  // namespace jasper::server
