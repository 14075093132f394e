// The token-CNN punctuator (engine/text/punct_cnn.h): its logits against PyTorch's for the same
// F16 weights on held-out passages (tests/fixtures/punct/cnn_reference.tsv, written by
// tools/train_punct.py --fixture when it exported the shipped punct_cnn/ folder), and the folder's
// checks: sizes, shapes, vocabularies, the manifest's network description.
#include "engine/text/punct_cnn.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "engine/text/punctuator.h"
#include "tests/folder_copy_test.h"

namespace jasper {
namespace {

namespace fs = std::filesystem;

fs::path Shipped() {
  return fs::path(JASPER_SOURCE_DIR) / "models/quartznet_en_tts_small/punct_cnn";
}

nlohmann::json Manifest(const fs::path& dir) { return test_util::ReadManifest(dir / "punct.json"); }

TEST(TokenCnnTest, LogitsMatchPyTorch) {
  absl::StatusOr<std::unique_ptr<const TokenCnn>> cnn =
      TokenCnn::Load(Shipped(), Manifest(Shipped()));
  ASSERT_TRUE(cnn.ok()) << cnn.status();
  std::ifstream in(fs::path(JASPER_SOURCE_DIR) / "tests/fixtures/punct/cnn_reference.tsv");
  std::string line;
  int passages = 0;
  while (std::getline(in, line)) {
    std::vector<std::string> cols = absl::StrSplit(line, '\t');
    ASSERT_EQ(cols.size(), 3u);
    const std::vector<std::string> words = absl::StrSplit(cols[0], ' ', absl::SkipEmpty());
    const std::vector<float> marks = test_util::ParseFloats(cols[1]),
                             cases = test_util::ParseFloats(cols[2]);
    ASSERT_EQ(marks.size(), words.size() * TokenCnn::kClasses);
    ASSERT_EQ(cases.size(), words.size() * TokenCnn::kClasses);
    // Poisoned first: every output must be written by Forward.
    TokenCnn::Logits got{std::vector<float>(marks.size(), NAN),
                         std::vector<float>(cases.size(), NAN)};
    got = (*cnn)->Forward(words);
    ASSERT_EQ(got.marks.size(), marks.size());
    ASSERT_EQ(got.cases.size(), cases.size());
    for (size_t i = 0; i < marks.size(); ++i) {
      EXPECT_NEAR(got.marks[i], marks[i], 2e-3 * std::max(1.0f, std::abs(marks[i])))
          << "passage " << passages << " value " << i;
      EXPECT_NEAR(got.cases[i], cases[i], 2e-3 * std::max(1.0f, std::abs(cases[i])))
          << "passage " << passages << " value " << i;
    }
    ++passages;
  }
  EXPECT_GE(passages, 10);
}

class CnnFolderTest : public test_util::FolderCopyTest {
 protected:
  void SetUp() override { CopyFolder(Shipped()); }
  absl::Status LoadStatus() { return Punctuator::Load(dir_.string()).status(); }
};

TEST_F(CnnFolderTest, TheCopyLoadsAndMissingFilesAreNotFound) {
  ASSERT_TRUE(LoadStatus().ok()) << LoadStatus();
  fs::remove(dir_ / "suffixes.txt");
  EXPECT_EQ(LoadStatus().code(), absl::StatusCode::kNotFound) << LoadStatus();
}

TEST_F(CnnFolderTest, TruncatedOrGarbageWeightsAreRejected) {
  const std::string weights = Read("cnn.safetensors");
  Write("cnn.safetensors", weights.substr(0, weights.size() / 2));
  absl::Status s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("bytes"), std::string::npos) << s;
  Write("cnn.safetensors", std::string(weights.size(), 'x'));
  EXPECT_EQ(LoadStatus().code(), absl::StatusCode::kInvalidArgument) << LoadStatus();
}

TEST_F(CnnFolderTest, ANetworkThatDoesNotMatchTheWeightsIsRejected) {
  const std::string manifest = Read("punct.json");
  const nlohmann::json m = Manifest(dir_);
  const std::string channels = std::to_string(m["cnn"]["channels"].get<int>());
  for (const std::string& bad :
       {absl::StrReplaceAll(manifest, {{"\"channels\": " + channels, "\"channels\": 7"}}),
        absl::StrReplaceAll(manifest, {{"\"kernel\": 5", "\"kernel\": 4"}}),
        absl::StrReplaceAll(manifest, {{"\"kernel\": 5", "\"kernel\": 3"}}),
        absl::StrReplaceAll(manifest, {{"\"method\": \"token_cnn\"", "\"method\": \"rnn\""}}),
        absl::StrReplaceAll(manifest, {{"\"weights\": \"cnn.safetensors\"",
                                        "\"weights\": \"../cnn.safetensors\""}})}) {
    ASSERT_NE(bad, manifest);
    Write("punct.json", bad);
    const absl::Status s = LoadStatus();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
}

TEST_F(CnnFolderTest, BadVocabulariesAreRejected) {
  const std::string vocab = Read("vocab.txt");
  // Same size (the manifest's byte check passes); the content check must not.
  std::string swapped = vocab;
  swapped.replace(0, 12, "<unk>\n<pad>\n");
  Write("vocab.txt", swapped);
  absl::Status s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("<pad>"), std::string::npos) << s;
  // The last two words run together: one row fewer than the embedding has.
  std::string merged = vocab;
  merged[merged.rfind('\n', merged.size() - 2)] = 'z';
  Write("vocab.txt", merged);
  s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace jasper
