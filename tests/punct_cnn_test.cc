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
  const std::vector<test_util::LogitsReference> refs = test_util::ReadLogitsFixture(
      fs::path(JASPER_SOURCE_DIR) / "tests/fixtures/punct/cnn_reference.tsv");
  for (size_t p = 0; p < refs.size(); ++p) {
    test_util::ExpectLogitsNear(**cnn, refs[p], 2e-3f, "passage " + std::to_string(p));
  }
  EXPECT_GE(refs.size(), 10u);
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
