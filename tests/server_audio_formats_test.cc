// Compressed audio through the real server over loopback gRPC, on the shipped model: FLAC,
// Ogg Opus, Ogg Vorbis and MP3 files on both APIs (Recognize, sniffed or labelled) and
// streamed by the CLI's calls; FLAC transcribes exactly as its WAV, the lossy codecs within a
// small character error; mislabelled and corrupt audio is INVALID_ARGUMENT.
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
#include "tests/stream_session_test_util.h"

namespace jasper::server {
namespace {

namespace pb = ::jasper::asr::v1;
namespace rasr = ::nvidia::riva::asr;
namespace fs = std::filesystem;
using ::jasper::test_util::Cer;
using ::jasper::test_util::DeadlineIn;
using ::jasper::test_util::ReadFileBytes;
using ::testing::HasSubstr;

const fs::path kRoot = JASPER_SOURCE_DIR;
const fs::path kSamples = kRoot / "models/quartznet_en_tts_small/samples";
const fs::path kCodecs = kRoot / "tests/fixtures/codecs";

class ServerAudioFormatsTest : public test_util::ShippedModelServerTest {
 protected:
  // Recognize on our API; the transcript, or "ERROR <message>" (and *code).
  static std::string Ours(const fs::path& file, pb::AudioEncoding encoding,
                          grpc::StatusCode* code = nullptr) {
    pb::RecognizeRequest request;
    request.mutable_config()->set_encoding(encoding);
    request.set_audio(ReadFileBytes(file));
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
  // The same on the Riva API.
  static std::string Riva(const fs::path& file, nvidia::riva::AudioEncoding encoding,
                          grpc::StatusCode* code = nullptr) {
    rasr::RecognizeRequest request;
    request.mutable_config()->set_encoding(encoding);
    request.set_audio(ReadFileBytes(file));
    rasr::RecognizeResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn());
    const grpc::Status status = riva_->Recognize(&context, request, &response);
    if (code != nullptr) *code = status.error_code();
    if (!status.ok()) return "ERROR " + status.error_message();
    std::string text;
    for (const auto& r : response.results()) text += r.alternatives(0).transcript();
    return text;
  }
};

struct Case {
  const char* file;
  const char* wav;
  pb::AudioEncoding ours;            // as our API's client labels it
  nvidia::riva::AudioEncoding riva;  // as a Riva client labels it
  double max_cer;                    // against the WAV's transcript (0: identical)
  bool on_riva = true;               // false: untagged MP3 needs the MP3 label, which Riva lacks
};

const Case kCases[] = {
    {"sample_1.flac", "sample_1.wav", pb::ENCODING_UNSPECIFIED, nvidia::riva::FLAC, 0.0},
    {"sample_2_44k_stereo.flac", "sample_2.wav", pb::FLAC, nvidia::riva::ENCODING_UNSPECIFIED, 0.0},
    {"sample_1.opus", "sample_1.wav", pb::OGGOPUS, nvidia::riva::OGGOPUS, 0.25},
    {"sample_2_44k_stereo.opus", "sample_2.wav", pb::ENCODING_UNSPECIFIED, nvidia::riva::OGGOPUS,
     0.25},
    {"sample_2_44k_stereo.ogg", "sample_2.wav", pb::OGGOPUS, nvidia::riva::LINEAR_PCM, 0.25},
    {"sample_1.mp3", "sample_1.wav", pb::ENCODING_UNSPECIFIED, nvidia::riva::ENCODING_UNSPECIFIED,
     0.25},
    {"sample_2_44k_stereo_bare.mp3", "sample_2.wav", pb::MP3, nvidia::riva::ENCODING_UNSPECIFIED,
     0.25, false},
};

TEST_F(ServerAudioFormatsTest, CompressedFilesTranscribeOnBothApisAndStreaming) {
  for (const Case& c : kCases) {
    const std::string want = Ours(kSamples / c.wav, pb::ENCODING_UNSPECIFIED);
    ASSERT_FALSE(want.empty());
    ASSERT_THAT(want, ::testing::Not(HasSubstr("ERROR"))) << c.wav;
    const std::string ours = Ours(kCodecs / c.file, c.ours);
    ASSERT_THAT(ours, ::testing::Not(HasSubstr("ERROR"))) << c.file;
    std::printf("%-30s wav '%s' decoded '%s'\n", c.file, want.c_str(), ours.c_str());
    if (c.max_cer == 0) {
      EXPECT_EQ(ours, want) << c.file;
    } else {
      EXPECT_LE(Cer(ours, want), c.max_cer) << c.file << ": '" << ours << "'";
    }
    if (c.on_riva) {
      EXPECT_EQ(Riva(kCodecs / c.file, c.riva), ours) << c.file;
    }
    // The CLI's calls: the file as it is, offline and streamed in 4 KiB pieces.
    absl::StatusOr<client::AudioFile> file =
        client::LoadAudioFile((kCodecs / c.file).string(), /*raw_sample_rate_hz=*/0);
    ASSERT_TRUE(file.ok()) << file.status();
    for (bool streaming : {false, true}) {
      const client::CallResult r = streaming ? client::RunStreaming(asr_, *file, {}, nullptr)
                                             : client::RunOffline(asr_, *file, {}, nullptr);
      ASSERT_TRUE(r.status.ok()) << c.file << ": " << r.status.error_message();
      EXPECT_EQ(r.transcript, ours) << c.file << (streaming ? " streaming" : " offline");
    }
  }
}

TEST_F(ServerAudioFormatsTest, MislabelledAndCorruptAudioIsInvalidArgument) {
  grpc::StatusCode code = grpc::StatusCode::OK;
  EXPECT_THAT(Riva(kSamples / "sample_1.wav", nvidia::riva::FLAC, &code),
              HasSubstr("must start with \"fLaC\""));
  EXPECT_EQ(code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(Ours(kCodecs / "sample_1.flac", pb::OGGOPUS, &code), HasSubstr("Ogg page"));
  EXPECT_EQ(code, grpc::StatusCode::INVALID_ARGUMENT);
  // Labelled MP3, an untagged file decodes (unlabelled it would be read as raw PCM).
  EXPECT_THAT(Ours(kCodecs / "sample_2_44k_stereo_bare.mp3", pb::MP3),
              ::testing::Not(HasSubstr("ERROR")));
  // A FLAC file cut inside its metadata.
  const std::string flac = ReadFileBytes(kCodecs / "sample_1.flac");
  pb::RecognizeRequest request;
  request.set_audio(flac.substr(0, 40));
  pb::RecognizeResponse response;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  const grpc::Status status = asr_->Recognize(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("FLAC"));
  // The server goes on serving.
  EXPECT_THAT(Ours(kCodecs / "sample_1.flac", pb::FLAC), ::testing::Not(HasSubstr("ERROR")));
}

}  // namespace
}  // namespace jasper::server
