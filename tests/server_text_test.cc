// The text stages of results through the real server over loopback gRPC (issue 30), on the
// shipped model (which names its ITN grammars and punctuation model in model.json) beside the
// fixture model (which has neither): written-form transcripts when asked for on our API (offline
// and streaming, finals and interims), Riva's verbatim_transcripts semantics, word times that
// span the spoken words a written word replaces; then punctuation and capitals after ITN on both
// APIs (enable_automatic_punctuation), words and times one to one; FAILED_PRECONDITION for a
// model without grammars or punctuation model.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/text/inverse_normalizer.h"
#include "engine/text/punctuator.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "jasper/asr/v1/asr.grpc.pb.h"
#include "riva/proto/riva_asr.grpc.pb.h"
#include "tests/folder_copy_test.h"
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
// espeak-ng sentences with numbers (tests/fixtures/itn/*.wav, 16 kHz mono; README there).
const char* const kNumberWavs[] = {"dollars.wav", "phone.wav", "time.wav", "years.wav"};

struct Words {
  std::string transcript;
  std::vector<std::string> finals;
  std::vector<std::vector<std::string>> final_words;  // each final's words
  std::vector<std::string> words;
  std::vector<int64_t> start_ms, end_ms;
};

class ServerTextTest : public test_util::ShippedModelServerTest {
 protected:
  static void SetUpTestSuite() {
    ServerOptions o = ShippedOptions();
    o.extra_model_dirs = {test_util::ServerTestModelDir()};  // quartznet_small: no grammars
    o.decoder = "beam";  // with the folder's LM the shipped model spells the numbers right
    StartServer(o);
    auto itn = InverseNormalizer::Load((ShippedModelDir() / "itn").string());
    ASSERT_TRUE(itn.ok()) << itn.status();
    itn_ = itn->release();
    // The punctuation folder the shipped model.json names.
    const nlohmann::json manifest = test_util::ReadManifest(ShippedModelDir() / "model.json");
    ASSERT_TRUE(manifest.contains("punctuation") && manifest["punctuation"].is_string());
    auto punct =
        Punctuator::Load((ShippedModelDir() / manifest["punctuation"].get<std::string>()).string());
    ASSERT_TRUE(punct.ok()) << punct.status();
    punct_ = punct->release();
  }
  static void TearDownTestSuite() {
    ShippedModelServerTest::TearDownTestSuite();
    delete itn_;
    delete punct_;
  }

  // Recognize on our API with word times; the finals joined.
  static Words Ours(const fs::path& wav, bool itn, grpc::Status* status = nullptr,
                    const std::string& model = "", bool punctuation = false) {
    pb::RecognizeRequest request;
    request.mutable_config()->set_enable_word_time_offsets(true);
    request.mutable_config()->set_inverse_text_normalization(itn);
    request.mutable_config()->set_enable_automatic_punctuation(punctuation);
    request.mutable_config()->set_model(model);
    request.set_audio(ReadFileBytes(wav));
    pb::RecognizeResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn());
    const grpc::Status s = asr_->Recognize(&context, request, &response);
    if (status != nullptr) *status = s;
    EXPECT_TRUE(status != nullptr || s.ok()) << s.error_message();
    Words out;
    for (const auto& r : response.results()) {
      if (!out.transcript.empty()) out.transcript += " ";
      out.transcript += r.alternatives(0).transcript();
      out.finals.push_back(r.alternatives(0).transcript());
      out.final_words.emplace_back();
      for (const auto& w : r.alternatives(0).words()) {
        out.final_words.back().push_back(w.word());
        out.words.push_back(w.word());
        out.start_ms.push_back(w.start_time());
        out.end_ms.push_back(w.end_time());
      }
    }
    return out;
  }

  // Riva Recognize; verbatim_transcripts as given (Riva's default is false).
  static std::string Riva(const fs::path& wav, bool verbatim, const std::string& model = "",
                          bool punctuation = false) {
    rasr::RecognizeRequest request;
    request.mutable_config()->set_verbatim_transcripts(verbatim);
    request.mutable_config()->set_enable_automatic_punctuation(punctuation);
    request.mutable_config()->set_model(model);
    request.set_audio(ReadFileBytes(wav));
    rasr::RecognizeResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn());
    const grpc::Status s = riva_->Recognize(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::string text;
    for (const auto& r : response.results()) {
      if (!text.empty()) text += " ";
      text += r.alternatives(0).transcript();
    }
    return text;
  }

  // StreamingRecognize on our API with interim results: the transcripts in order, finals
  // prefixed "F ".
  static std::vector<std::string> Stream(const fs::path& wav, bool itn, bool punctuation = false) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn());
    auto stream = asr_->StreamingRecognize(&context);
    pb::StreamingRecognizeRequest config = test_util::StreamConfig(/*interim=*/true);
    config.mutable_streaming_config()->mutable_config()->set_inverse_text_normalization(itn);
    config.mutable_streaming_config()->mutable_config()->set_enable_automatic_punctuation(
        punctuation);
    EXPECT_TRUE(stream->Write(config));
    for (const std::string& chunk : test_util::AudioChunks(ReadFileBytes(wav))) {
      EXPECT_TRUE(stream->Write(test_util::StreamAudio(chunk)));
    }
    stream->WritesDone();
    std::vector<std::string> out;
    pb::StreamingRecognizeResponse response;
    while (stream->Read(&response)) {
      for (const auto& r : response.results()) {
        if (r.alternatives_size() == 0) continue;
        out.push_back((r.is_final() ? "F " : "I ") + r.alternatives(0).transcript());
      }
    }
    const grpc::Status s = stream->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
    return out;
  }

  static inline const InverseNormalizer* itn_ = nullptr;
  static inline const Punctuator* punct_ = nullptr;
};

// The written transcript is the normalizer's output for the spoken one, and each written word
// starts where a spoken word starts and ends where a (later or same) spoken word ends.
TEST_F(ServerTextTest, OfflineResultsAreWrittenWithWordTimesOfTheirSpokenWords) {
  int converted = 0;
  for (const char* name : kNumberWavs) {
    const fs::path wav = kRoot / "tests/fixtures/itn" / name;
    const Words spoken = Ours(wav, /*itn=*/false);
    const Words written = Ours(wav, /*itn=*/true);
    ASSERT_FALSE(spoken.words.empty()) << name;
    EXPECT_EQ(written.transcript, itn_->NormalizeText(spoken.transcript)) << name;
    if (written.transcript != spoken.transcript) ++converted;
    size_t next = 0;  // the first spoken word not yet covered
    for (size_t i = 0; i < written.words.size(); ++i) {
      ASSERT_LT(next, spoken.words.size()) << name;
      EXPECT_EQ(written.start_ms[i], spoken.start_ms[next]) << name << " " << written.words[i];
      size_t last = next;
      while (last + 1 < spoken.words.size() && spoken.end_ms[last] < written.end_ms[i]) ++last;
      EXPECT_EQ(written.end_ms[i], spoken.end_ms[last]) << name << " " << written.words[i];
      next = last + 1;
    }
    EXPECT_EQ(next, spoken.words.size()) << name;
  }
  EXPECT_GE(converted, 3);  // the model hears most of the numbers; they come out as digits
}

TEST_F(ServerTextTest, TheDollarSentenceReadsAsWritten) {
  const Words written = Ours(kRoot / "tests/fixtures/itn/dollars.wav", /*itn=*/true);
  EXPECT_THAT(written.transcript, HasSubstr("$23"));
  EXPECT_THAT(written.words, ::testing::Contains("$23"));
}

// Finals are never dropped, so they pair up with a verbatim run's; interims may be replaced by
// newer ones before they go out, so they are only checked to be written.
TEST_F(ServerTextTest, StreamingFinalsAndInterimsAreWrittenToo) {
  const fs::path wav = kRoot / "tests/fixtures/itn/dollars.wav";
  auto finals = [](const std::vector<std::string>& results) {
    std::vector<std::string> out;
    for (const std::string& r : results) {
      if (r[0] == 'F') out.push_back(r.substr(2));
    }
    return out;
  };
  const std::vector<std::string> spoken = Stream(wav, /*itn=*/false);
  const std::vector<std::string> written = Stream(wav, /*itn=*/true);
  const std::vector<std::string> spoken_finals = finals(spoken);
  const std::vector<std::string> written_finals = finals(written);
  ASSERT_FALSE(spoken_finals.empty());
  ASSERT_EQ(written_finals.size(), spoken_finals.size());
  for (size_t i = 0; i < spoken_finals.size(); ++i) {
    EXPECT_EQ(written_finals[i], itn_->NormalizeText(spoken_finals[i]));
  }
  EXPECT_THAT(absl::StrJoin(written_finals, " "), HasSubstr("$23"));
  int interims_with_digits = 0;
  for (const std::string& r : written) {
    if (r[0] == 'I' && r.find_first_of("0123456789") != std::string::npos) ++interims_with_digits;
    if (r[0] == 'I') {
      EXPECT_EQ(r.find("twenty three"), std::string::npos) << r;
    }
  }
  EXPECT_GE(interims_with_digits, 1);
}

// Riva: verbatim_transcripts = false (the proto default) asks for written form where the model
// has grammars; true keeps the spoken words.
TEST_F(ServerTextTest, RivaVerbatimTranscriptsSwitchesIt) {
  const fs::path wav = kRoot / "tests/fixtures/itn/dollars.wav";
  const std::string spoken = Ours(wav, false).transcript;
  EXPECT_EQ(Riva(wav, /*verbatim=*/true), spoken);
  EXPECT_EQ(Riva(wav, /*verbatim=*/false), itn_->NormalizeText(spoken));
  EXPECT_NE(itn_->NormalizeText(spoken), spoken);
  // A model without grammars stays verbatim for Riva's default.
  const std::string fox = Riva(test_util::ServerTestWavPath(), false, "quartznet_small");
  EXPECT_EQ(fox, Riva(test_util::ServerTestWavPath(), true, "quartznet_small"));
}

TEST_F(ServerTextTest, OursOnAModelWithoutGrammarsIsFailedPrecondition) {
  grpc::Status status;
  Ours(test_util::ServerTestWavPath(), /*itn=*/true, &status, "quartznet_small");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("inverse text normalization"));
  // The same request without it works.
  Ours(test_util::ServerTestWavPath(), /*itn=*/false, &status, "quartznet_small");
  EXPECT_TRUE(status.ok()) << status.error_message();
}

// Punctuation runs after ITN on each final: its words are the punctuator's output for the written
// words (a written token such as "may 3" is one word to it), times unchanged; its text is them
// joined.
TEST_F(ServerTextTest, OfflinePunctuationFollowsWrittenFormWordForWord) {
  for (const char* name : kNumberWavs) {
    const fs::path wav = kRoot / "tests/fixtures/itn" / name;
    const Words written = Ours(wav, /*itn=*/true);
    const Words punctuated = Ours(wav, /*itn=*/true, nullptr, "", /*punctuation=*/true);
    ASSERT_EQ(punctuated.finals.size(), written.finals.size()) << name;
    for (size_t i = 0; i < written.finals.size(); ++i) {
      EXPECT_EQ(punctuated.finals[i],
                absl::StrJoin(punct_->Punctuate(written.final_words[i], true), " "))
          << name;
      const char last = punctuated.finals[i].back();
      EXPECT_TRUE(last == '.' || last == '?') << punctuated.finals[i];
    }
    ASSERT_EQ(punctuated.words.size(), written.words.size()) << name;
    for (size_t i = 0; i < written.words.size(); ++i) {
      EXPECT_EQ(absl::AsciiStrToLower(punctuated.words[i].substr(0, written.words[i].size())),
                absl::AsciiStrToLower(written.words[i]))
          << name;
      EXPECT_EQ(punctuated.start_ms[i], written.start_ms[i]) << name;
      EXPECT_EQ(punctuated.end_ms[i], written.end_ms[i]) << name;
    }
  }
  // Without ITN the spoken words are punctuated.
  const fs::path wav = kRoot / "tests/fixtures/itn/dollars.wav";
  const Words spoken = Ours(wav, /*itn=*/false);
  const Words spoken_punctuated = Ours(wav, /*itn=*/false, nullptr, "", /*punctuation=*/true);
  ASSERT_EQ(spoken_punctuated.finals.size(), spoken.finals.size());
  for (size_t i = 0; i < spoken.finals.size(); ++i) {
    EXPECT_EQ(spoken_punctuated.finals[i], punct_->PunctuateText(spoken.finals[i]));
  }
}

// Streaming finals are punctuated like offline ones; interims start with a capital and leave
// their last word without a mark.
TEST_F(ServerTextTest, StreamingFinalsAndInterimsArePunctuated) {
  const fs::path wav = kRoot / "tests/fixtures/itn/years.wav";
  const std::vector<std::string> plain = Stream(wav, /*itn=*/true);
  const std::vector<std::string> punctuated = Stream(wav, /*itn=*/true, /*punctuation=*/true);
  std::vector<std::string> plain_finals, punctuated_finals;
  int interims = 0;
  for (const std::string& r : plain) {
    if (r[0] == 'F') plain_finals.push_back(r.substr(2));
  }
  for (const std::string& r : punctuated) {
    if (r[0] == 'F') {
      punctuated_finals.push_back(r.substr(2));
      continue;
    }
    ++interims;
    ASSERT_GT(r.size(), 2u);
    EXPECT_FALSE(absl::ascii_islower(r[2])) << r;
    EXPECT_TRUE(r.back() != '.' && r.back() != '?' && r.back() != ',') << r;
  }
  EXPECT_GE(interims, 1);
  ASSERT_FALSE(plain_finals.empty());
  ASSERT_EQ(punctuated_finals.size(), plain_finals.size());
  for (size_t i = 0; i < plain_finals.size(); ++i) {
    EXPECT_EQ(punctuated_finals[i], punct_->PunctuateText(plain_finals[i]));
  }
}

// Riva's enable_automatic_punctuation, with its default written form: digits, capitals, marks.
TEST_F(ServerTextTest, RivaAutomaticPunctuationGivesPunctuatedWrittenText) {
  const fs::path wav = kRoot / "tests/fixtures/itn/dollars.wav";
  const std::string text = Riva(wav, /*verbatim=*/false, "", /*punctuation=*/true);
  const Words ours = Ours(wav, /*itn=*/true, nullptr, "", /*punctuation=*/true);
  EXPECT_EQ(text, ours.transcript);
  EXPECT_THAT(text, HasSubstr("$23"));
  ASSERT_FALSE(text.empty());
  EXPECT_TRUE(absl::ascii_isupper(text[0])) << text;
  EXPECT_TRUE(text.back() == '.' || text.back() == '?') << text;
}

TEST_F(ServerTextTest, PunctuationOnAModelWithoutOneIsFailedPrecondition) {
  grpc::Status status;
  Ours(test_util::ServerTestWavPath(), /*itn=*/false, &status, "quartznet_small",
       /*punctuation=*/true);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("punctuation"));
}

}  // namespace
}  // namespace jasper::server
