// Per-channel recognition (enable_separate_recognition_per_channel) through the real server over
// loopback gRPC, on the shipped model: a stereo file with a different sentence in each channel
// gives each channel's own transcript, tagged with its channel, on both APIs, offline and
// streaming (with interim results); audio with fewer channels than asked for is
// INVALID_ARGUMENT; without the flag the channels are still averaged into one.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/wav_header.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "jasper/asr/v1/asr.grpc.pb.h"
#include "riva/proto/riva_asr.grpc.pb.h"
#include "server/jasper_server.h"
#include "tests/server_test_util.h"
#include "tests/shipped_model_server.h"
#include "tests/test_files.h"

namespace jasper::server {
namespace {

namespace pb = ::jasper::asr::v1;
namespace rasr = ::nvidia::riva::asr;
namespace fs = std::filesystem;
using ::jasper::test_util::DeadlineIn;
using ::jasper::test_util::ReadFileBytes;
using ::testing::HasSubstr;

const fs::path kSamples = fs::path(JASPER_SOURCE_DIR) / "models/quartznet_en_tts_small/samples";

// The 16-bit samples of a mono WAV file (as bytes).
std::string Pcm(const fs::path& wav) {
  const std::string bytes = ReadFileBytes(wav);
  auto header = client::ParseWavHeader(bytes);
  EXPECT_TRUE(header.ok() && header->channels == 1 && header->bits_per_sample == 16);
  return bytes.substr(header->data_offset, header->data_bytes);
}

// Interleaves 16-bit mono PCM signals into one (the shorter ones padded with silence).
std::string Interleave(const std::vector<std::string>& channels) {
  size_t frames = 0;
  for (const std::string& c : channels) frames = std::max(frames, c.size() / 2);
  std::string out(frames * 2 * channels.size(), '\0');
  for (size_t f = 0; f < frames; ++f) {
    for (size_t c = 0; c < channels.size(); ++c) {
      if (2 * f + 1 < channels[c].size()) {
        out[(f * channels.size() + c) * 2] = channels[c][2 * f];
        out[(f * channels.size() + c) * 2 + 1] = channels[c][2 * f + 1];
      }
    }
  }
  return out;
}

// A 16 kHz 16-bit WAV file around interleaved PCM.
std::string Wav(const std::string& pcm, int channels) {
  auto le = [](uint32_t v, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    return s;
  };
  const uint32_t rate = 16000;
  return "RIFF" + le(36 + pcm.size(), 4) + "WAVEfmt " + le(16, 4) + le(1, 2) + le(channels, 2) +
         le(rate, 4) + le(rate * 2 * channels, 4) + le(2 * channels, 2) + le(16, 2) + "data" +
         le(pcm.size(), 4) + pcm;
}

class ServerChannelsTest : public test_util::ShippedModelServerTest {
 protected:
  // Recognize on our API: per channel tag, the final transcripts joined with spaces.
  static std::map<int, std::string> Ours(const std::string& audio, int channels, bool separate,
                                         grpc::Status* status, int rate = 0) {
    pb::RecognizeRequest request;
    request.mutable_config()->set_audio_channel_count(channels);
    request.mutable_config()->set_sample_rate_hertz(rate);
    request.mutable_config()->set_enable_separate_recognition_per_channel(separate);
    request.set_audio(audio);
    pb::RecognizeResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn());
    *status = asr_->Recognize(&context, request, &response);
    std::map<int, std::string> text;
    double last_start = -1;
    for (const auto& r : response.results()) {
      EXPECT_GE(r.audio_start(), last_start) << "results in time order";
      last_start = r.audio_start();
      std::string& t = text[r.channel_tag()];
      t += (t.empty() ? "" : " ") + r.alternatives(0).transcript();
    }
    return text;
  }
};

TEST_F(ServerChannelsTest, EachChannelIsRecognizedOnItsOwn) {
  const std::string one = Pcm(kSamples / "sample_1.wav");
  const std::string two = Pcm(kSamples / "sample_2.wav");
  grpc::Status status;
  const std::string text_one = Ours(Wav(one, 1), 0, false, &status)[1];
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::string text_two = Ours(Wav(two, 1), 0, false, &status)[1];
  ASSERT_FALSE(text_one.empty());
  ASSERT_FALSE(text_two.empty());
  ASSERT_NE(text_one, text_two);

  const std::string stereo = Interleave({one, two});
  // A stereo WAV, and the same samples raw with audio_channel_count 2.
  for (bool wav : {true, false}) {
    SCOPED_TRACE(wav ? "WAV" : "raw");
    const std::map<int, std::string> got =
        wav ? Ours(Wav(stereo, 2), 2, true, &status) : Ours(stereo, 2, true, &status, 16000);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(got, (std::map<int, std::string>{{1, text_one}, {2, text_two}}));
  }
  // The channels swapped: so are the tags.
  const std::map<int, std::string> swapped = Ours(Wav(Interleave({two, one}), 2), 2, true, &status);
  EXPECT_EQ(swapped, (std::map<int, std::string>{{1, text_two}, {2, text_one}}));
  // Three channels, the middle one silent: it has no result.
  const std::map<int, std::string> three =
      Ours(Wav(Interleave({one, std::string(), two}), 3), 3, true, &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(three, (std::map<int, std::string>{{1, text_one}, {3, text_two}}));
  // Without the flag: one downmixed channel, tag 1.
  const std::map<int, std::string> mixed = Ours(Wav(stereo, 2), 2, false, &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(mixed.size(), 1u);
  EXPECT_EQ(mixed.count(1), 1u);

  // Riva's API, streamed with interim results: each channel's finals, tagged; interim results
  // of both channels.
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  auto stream = riva_->StreamingRecognize(&context);
  rasr::StreamingRecognizeRequest config;
  config.mutable_streaming_config()->set_interim_results(true);
  config.mutable_streaming_config()->mutable_config()->set_audio_channel_count(2);
  config.mutable_streaming_config()->mutable_config()->set_enable_separate_recognition_per_channel(
      true);
  ASSERT_TRUE(stream->Write(config));
  const std::string file = Wav(stereo, 2);
  for (size_t pos = 0; pos < file.size(); pos += 6400) {
    rasr::StreamingRecognizeRequest audio;
    audio.set_audio_content(file.substr(pos, 6400));
    ASSERT_TRUE(stream->Write(audio));
  }
  stream->WritesDone();
  rasr::StreamingRecognizeResponse response;
  std::map<int, std::string> finals;
  std::map<int, int> interims;
  while (stream->Read(&response)) {
    for (const auto& r : response.results()) {
      if (!r.is_final()) {
        ++interims[r.channel_tag()];
        continue;
      }
      std::string& t = finals[r.channel_tag()];
      if (!r.alternatives(0).transcript().empty()) {
        t += (t.empty() ? "" : " ") + r.alternatives(0).transcript();
      }
    }
  }
  status = stream->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(finals, (std::map<int, std::string>{{1, text_one}, {2, text_two}}));
  EXPECT_GT(interims[1], 0);
  EXPECT_GT(interims[2], 0);
}

TEST_F(ServerChannelsTest, FewerChannelsThanAskedForIsInvalidArgument) {
  const std::string one = Pcm(kSamples / "sample_1.wav");
  grpc::Status status;
  // A stereo WAV, three channels asked for.
  Ours(Wav(Interleave({one, one}), 2), 3, true, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("channel 3"));
  EXPECT_THAT(status.error_message(), HasSubstr("has 2"));
  // A mono FLAC, two asked for (Riva's API).
  rasr::RecognizeRequest request;
  request.mutable_config()->set_audio_channel_count(2);
  request.mutable_config()->set_enable_separate_recognition_per_channel(true);
  request.set_audio(
      ReadFileBytes(fs::path(JASPER_SOURCE_DIR) / "tests/fixtures/codecs/sample_1.flac"));
  rasr::RecognizeResponse response;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn());
  status = riva_->Recognize(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("has 1"));
  // The server still serves.
  EXPECT_FALSE(Ours(Wav(one, 1), 0, false, &status)[1].empty());
  EXPECT_TRUE(status.ok());
}

}  // namespace
}  // namespace jasper::server
