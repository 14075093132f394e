// Accuracy gate for the shipped default model (models/quartznet_en_tts_small) on the committed
// held-out set (tests/fixtures/heldout: held-out voices x held-out sentences, never seen in
// training). A numerical regression in any kernel, the featurizer or the decoder moves the
// transcripts and fails here:
//   - WER over the 30 utterances must stay at or below the threshold committed in
//     tests/fixtures/heldout/accuracy_threshold.json (just above what the model reaches);
//   - the C++ transcripts must match PyTorch's (torch_results.json) utterance by utterance;
//   - log-probabilities for two utterances must equal PyTorch's (relative L2 <= 1e-4), both
//     from PyTorch's features (encoder alone) and from the WAV (featurizer + encoder);
//   - batching must not change a transcript (padding is masked).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/audio/wav.h"
#include "engine/features/features.h"
#include "engine/io/safetensors.h"
#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "engine/streaming/recognizer.h"
#include "gtest/gtest.h"
#include "tests/edit_distance.h"

namespace jasper {
namespace {

const std::string kModelDir = absl::StrCat(JASPER_SOURCE_DIR, "/models/quartznet_en_tts_small");
const std::string kHeldout = absl::StrCat(JASPER_SOURCE_DIR, "/tests/fixtures/heldout");

std::vector<std::string> Words(const std::string& text) {
  return absl::StrSplit(text, ' ', absl::SkipEmpty());
}

double RelativeL2(const float* actual, const float* expected, size_t n) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(actual[i]) - expected[i];
    diff += d * d;
    norm += static_cast<double>(expected[i]) * expected[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

struct Utterance {
  std::string file;
  std::string ref;
  std::string torch_hyp;
  std::vector<float> audio;
};

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing " << path;
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json();
}

class AccuracyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::shared_ptr<const Model>> model = Model::Load(kModelDir);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = new std::shared_ptr<const Model>(*model);
    BackendOptions options;
    options.device = Device::kCpu;
    options.keep_log_probs = true;
    absl::StatusOr<std::unique_ptr<OfflineRecognizer>> recognizer =
        OfflineRecognizer::Create(*model_, options);
    ASSERT_TRUE(recognizer.ok()) << recognizer.status();
    recognizer_ = recognizer->release();

    const nlohmann::json results = ReadJson(kHeldout + "/torch_results.json");
    utterances_ = new std::vector<Utterance>();
    for (const nlohmann::json& u : results.at("utterances")) {
      Utterance utt;
      utt.file = u.at("file").get<std::string>();
      utt.ref = u.at("ref").get<std::string>();
      utt.torch_hyp = u.at("hyp").get<std::string>();
      absl::StatusOr<Audio> audio = ReadWavFile(kHeldout + "/" + utt.file);
      ASSERT_TRUE(audio.ok()) << utt.file << ": " << audio.status();
      ASSERT_EQ(audio->channels, 1);
      ASSERT_EQ(audio->sample_rate, (*model_)->config().featurizer.sample_rate);
      utt.audio = std::move(audio->samples);
      utterances_->push_back(std::move(utt));
    }
  }
  static void TearDownTestSuite() {
    delete recognizer_;
    delete model_;
    delete utterances_;
  }

  static std::shared_ptr<const Model>* model_;
  static OfflineRecognizer* recognizer_;
  static std::vector<Utterance>* utterances_;
};

std::shared_ptr<const Model>* AccuracyTest::model_ = nullptr;
OfflineRecognizer* AccuracyTest::recognizer_ = nullptr;
std::vector<Utterance>* AccuracyTest::utterances_ = nullptr;

TEST_F(AccuracyTest, TranscriptsAsPytorchAndWerWithinThreshold) {
  ASSERT_EQ(utterances_->size(), 30u);
  // The transcripts.tsv references are the same as torch_results.json's.
  std::ifstream tsv(kHeldout + "/transcripts.tsv");
  std::string line;
  int rows = 0;
  while (std::getline(tsv, line)) {
    std::vector<std::string> cols = absl::StrSplit(line, '\t');
    ASSERT_EQ(cols.size(), 2u) << line;
    ASSERT_LT(rows, 30);
    EXPECT_EQ(cols[0], (*utterances_)[rows].file);
    EXPECT_EQ(cols[1], (*utterances_)[rows].ref);
    ++rows;
  }
  EXPECT_EQ(rows, 30);

  int edits = 0, ref_words = 0, differ_from_torch = 0;
  for (const Utterance& utt : *utterances_) {
    absl::StatusOr<std::vector<Transcript>> out =
        recognizer_->RecognizeBatch({absl::MakeConstSpan(utt.audio)});
    ASSERT_TRUE(out.ok()) << out.status();
    const std::string& hyp = (*out)[0].text;
    if (hyp != utt.torch_hyp) {
      ++differ_from_torch;
      ADD_FAILURE() << utt.file << ": C++ '" << hyp << "' vs PyTorch '" << utt.torch_hyp << "'";
    }
    edits += test_util::EditDistance(Words(hyp), Words(utt.ref));
    ref_words += static_cast<int>(Words(utt.ref).size());
  }
  const double wer = static_cast<double>(edits) / ref_words;
  const nlohmann::json threshold = ReadJson(kHeldout + "/accuracy_threshold.json");
  const double max_wer = threshold.at("max_wer").get<double>();
  const double torch_wer = ReadJson(kHeldout + "/torch_results.json").at("wer").get<double>();
  std::printf("held-out WER %.2f%% (PyTorch %.2f%%, threshold %.2f%%), %d differ from PyTorch\n",
              wer * 100, torch_wer * 100, max_wer * 100, differ_from_torch);
  EXPECT_LE(wer, max_wer);
  EXPECT_NEAR(wer, torch_wer, 1e-9);
  // The threshold must stay "just above" what the model reaches, or it guards nothing.
  EXPECT_LE(max_wer, torch_wer + 0.05) << "accuracy_threshold.json is too loose";
}

TEST_F(AccuracyTest, BatchingDoesNotChangeTranscripts) {
  std::vector<absl::Span<const float>> batch;
  for (const Utterance& utt : *utterances_) batch.push_back(absl::MakeConstSpan(utt.audio));
  absl::StatusOr<std::vector<Transcript>> out = recognizer_->RecognizeBatch(batch);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), utterances_->size());
  for (size_t i = 0; i < out->size(); ++i) {
    EXPECT_EQ((*out)[i].text, (*utterances_)[i].torch_hyp) << (*utterances_)[i].file;
  }
}

TEST_F(AccuracyTest, LogProbsEqualPytorch) {
  absl::StatusOr<SafetensorsFile> golden =
      SafetensorsFile::ReadFile(kHeldout + "/torch_logprobs.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const int vocab = (*model_)->config().num_outputs();
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(absl::StrCat("utterance ", i));
    absl::StatusOr<std::vector<float>> features = golden->GetFloat(absl::StrCat("features_", i));
    absl::StatusOr<std::vector<float>> expected = golden->GetFloat(absl::StrCat("logprobs_", i));
    ASSERT_TRUE(features.ok()) << features.status();
    ASSERT_TRUE(expected.ok()) << expected.status();
    const int enc_len = static_cast<int>(expected->size()) / vocab;
    ASSERT_EQ(static_cast<size_t>(enc_len) * vocab, expected->size());

    // Encoder + decoder alone, from PyTorch's features.
    const int num_features = (*model_)->config().feat_in;
    Features f;
    f.num_features = num_features;
    f.padded_frames = static_cast<int>(features->size()) / num_features;
    f.data = *features;
    const nlohmann::json meta =
        nlohmann::json::parse(golden->metadata().at(absl::StrCat("utt_", i)));
    f.valid_frames = meta.at("seq_len").get<int>();
    BackendOutput out;
    ASSERT_TRUE(recognizer_->RecognizeFeatures({f}, &out).ok());
    ASSERT_EQ(out.lengths[0], enc_len);
    EXPECT_LE(RelativeL2(out.log_probs.data(), expected->data(), expected->size()), 1e-4);

    // The whole pipeline from the WAV (the featurizer included).
    const Utterance& utt = (*utterances_)[i];
    ASSERT_EQ(meta.at("file").get<std::string>(), utt.file);
    BackendOutput from_wav;
    ASSERT_TRUE(recognizer_->RecognizeBatch({absl::MakeConstSpan(utt.audio)}, &from_wav).ok());
    ASSERT_EQ(from_wav.lengths[0], enc_len);
    EXPECT_LE(RelativeL2(from_wav.log_probs.data(), expected->data(), expected->size()), 1e-4);
  }
}

}  // namespace
}  // namespace jasper
