// The transformer punctuator (engine/text/punct_transformer.h) and its tokenizer
// (engine/text/wordpiece.h): logits against PyTorch's for the same F16 weights
// (tests/fixtures/punct/bert_reference.tsv, written by tools/train_punct_bert.py --fixture when it
// exported the shipped punct_bert/ folder: held-out passages, one longer than a window, and odd
// words), the windows of a long passage against the same words run alone, concurrent use, the
// tokenizer's rules on a small vocabulary, and the folder's checks.
#include "engine/text/punct_transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "engine/io/safetensors.h"
#include "engine/text/punctuator.h"
#include "engine/text/wordpiece.h"
#include "kernels/cpu_features.h"
#include "tests/folder_copy_test.h"

namespace jasper {
namespace {

namespace fs = std::filesystem;

fs::path Shipped() {
  return fs::path(JASPER_SOURCE_DIR) / "models/quartznet_en_tts_small/punct_bert";
}

const TokenTransformer& Model() {
  static const TokenTransformer* model = [] {
    absl::StatusOr<std::unique_ptr<const TokenTransformer>> m =
        TokenTransformer::Load(Shipped(), test_util::ReadManifest(Shipped() / "punct.json"));
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? m->release() : nullptr;
  }();
  return *model;
}

std::vector<test_util::LogitsReference> References() {
  return test_util::ReadLogitsFixture(fs::path(JASPER_SOURCE_DIR) /
                                      "tests/fixtures/punct/bert_reference.tsv");
}

void ExpectLogitsMatchPyTorch() {
  const std::vector<test_util::LogitsReference> refs = References();
  ASSERT_GE(refs.size(), 12u);
  bool windowed = false;
  for (size_t p = 0; p < refs.size(); ++p) {
    windowed |= refs[p].words.size() > 64;
    // FP32 with another summation order than PyTorch's, through 3 layers: 2e-3 relative.
    test_util::ExpectLogitsNear(Model(), refs[p], 2e-3f, "passage " + std::to_string(p));
  }
  EXPECT_TRUE(windowed) << "no reference passage is longer than a window";
}

// Every level of code this CPU runs (the GEMM, attention and GELU each have AVX-512, AVX2 and
// portable versions), each forced in turn.
TEST(TokenTransformerTest, LogitsMatchPyTorchOnEveryIsa) {
  for (kernels::CpuIsa isa :
       {kernels::CpuIsa::kAvx512, kernels::CpuIsa::kAvx2, kernels::CpuIsa::kBaseline}) {
    SCOPED_TRACE(kernels::CpuIsaName(isa));
    if (kernels::GetCpuFeatures().best < isa) {
      std::printf("SKIPPED for %s: this CPU lacks it\n", kernels::CpuIsaName(isa));
      continue;
    }
    const kernels::CpuIsa previous = kernels::SetCpuIsaCap(isa);
    ExpectLogitsMatchPyTorch();
    kernels::SetCpuIsaCap(previous);
  }
}

// BF16 linear layers (Load's precision; Punctuator::DefaultPrecision picks it where it is
// faster) on every BF16 path this CPU has, each forced in turn: logits near PyTorch's FP32 ones
// (inputs and weights rounded to 8 significant bits, through 3 layers) and the same decisions
// as FP32 for nearly every word.
TEST(TokenTransformerTest, Bf16LogitsStayNearFp32OnEveryPath) {
  absl::StatusOr<std::unique_ptr<const TokenTransformer>> bf16 = TokenTransformer::Load(
      Shipped(), test_util::ReadManifest(Shipped() / "punct.json"), kernels::Precision::kBf16);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  const std::vector<test_util::LogitsReference> refs = References();
  for (kernels::CpuIsa isa :
       {kernels::CpuIsa::kAmx, kernels::CpuIsa::kAvx512, kernels::CpuIsa::kBaseline}) {
    SCOPED_TRACE(kernels::CpuIsaName(isa));
    if (kernels::GetCpuFeatures().best < isa) {
      std::printf("SKIPPED for %s: this CPU lacks it\n", kernels::CpuIsaName(isa));
      continue;
    }
    const kernels::CpuIsa previous = kernels::SetCpuIsaCap(isa);
    std::printf("BF16 GEMM on %s: %s\n", kernels::CpuIsaName(isa),
                kernels::HasBf16Gemm() ? "AMX or vdpbf16ps" : "portable loops");
    int words = 0, same = 0;
    float worst = 0.0f;
    for (size_t p = 0; p < refs.size(); ++p) {
      test_util::ExpectLogitsNear(**bf16, refs[p], 0.06f, "passage " + std::to_string(p));
      const TokenClassifier::Logits got = (*bf16)->Forward(refs[p].words);
      const TokenClassifier::Logits want = Model().Forward(refs[p].words);
      const int k = TokenClassifier::kClasses;
      for (size_t w = 0; w < refs[p].words.size(); ++w) {
        auto argmax = [&](const std::vector<float>& v) {
          return std::max_element(v.begin() + w * k, v.begin() + (w + 1) * k) - v.begin();
        };
        ++words;
        same += argmax(got.marks) == argmax(want.marks) && argmax(got.cases) == argmax(want.cases);
      }
      for (size_t i = 0; i < got.marks.size(); ++i) {
        worst = std::max(worst, std::abs(got.marks[i] - refs[p].marks[i]));
        worst = std::max(worst, std::abs(got.cases[i] - refs[p].cases[i]));
      }
    }
    std::printf(
        "BF16 vs PyTorch FP32: max |d logit| %.4f; decisions as FP32's for %d of %d words\n", worst,
        same, words);
    EXPECT_GE(same, words * 98 / 100);
    kernels::SetCpuIsaCap(previous);
  }
}

// 150 words run in windows of cores of 48 (+-8 words of context): the first core's words see
// words 0-55, exactly as those 56 words do alone (one window); the second core's see 40-103.
TEST(TokenTransformerTest, WindowsOfALongPassageAreTheShortPassagesTheyContain) {
  std::vector<std::string> words;
  for (const test_util::LogitsReference& r : References())
    words.insert(words.end(), r.words.begin(), r.words.end());
  ASSERT_GE(words.size(), 150u);
  words.resize(150);
  const TokenClassifier::Logits all = Model().Forward(words);
  const std::vector<std::string> first(words.begin(), words.begin() + 56);
  const std::vector<std::string> second(words.begin() + 40, words.begin() + 104);
  const TokenClassifier::Logits a = Model().Forward(first), b = Model().Forward(second);
  const int k = TokenClassifier::kClasses;
  for (int i = 0; i < 48 * k; ++i) {
    EXPECT_EQ(all.marks[i], a.marks[i]) << i;
    EXPECT_EQ(all.cases[i], a.cases[i]) << i;
  }
  for (int i = 48 * k; i < 96 * k; ++i) {
    EXPECT_EQ(all.marks[i], b.marks[i - 40 * k]) << i;
    EXPECT_EQ(all.cases[i], b.cases[i - 40 * k]) << i;
  }
}

TEST(TokenTransformerTest, ConcurrentCallsGiveTheSerialResults) {
  const std::vector<test_util::LogitsReference> refs = References();
  std::vector<TokenClassifier::Logits> serial;
  for (const test_util::LogitsReference& r : refs) serial.push_back(Model().Forward(r.words));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (size_t i = 0; i < refs.size(); ++i) {
          const TokenClassifier::Logits got = Model().Forward(refs[(i + t) % refs.size()].words);
          const TokenClassifier::Logits& want = serial[(i + t) % refs.size()];
          mismatches[t] += got.marks != want.marks || got.cases != want.cases;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

class WordPieceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = fs::temp_directory_path() /
            absl::StrCat("wordpiece_", ::testing::UnitTest::GetInstance()->random_seed(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    Write(
        "[PAD]\n[UNK]\n[CLS]\n[SEP]\nun\n##aff\n##able\ndon\n'\nt\n$\n5\n##0\ne\n-\nmail\n"
        "caf\n##\xc3\xa9\nx\n##x\n");
  }
  void TearDown() override { fs::remove(path_); }
  void Write(const std::string& text) { std::ofstream(path_, std::ios::binary) << text; }
  std::vector<int> Ids(const WordPiece& wp, const std::string& word, int max_pieces = 7) {
    std::vector<int> ids = {-7};  // appended to, never replaced
    wp.Tokenize(word, max_pieces, &ids);
    EXPECT_EQ(ids.front(), -7);
    return std::vector<int>(ids.begin() + 1, ids.end());
  }
  fs::path path_;
};

TEST_F(WordPieceTest, LongestPiecesPunctuationApartUnknownPartsAsOneUnk) {
  absl::StatusOr<WordPiece> wp = WordPiece::Load(path_);
  ASSERT_TRUE(wp.ok()) << wp.status();
  EXPECT_EQ(wp->size(), 20);
  EXPECT_EQ(wp->unk(), 1);
  EXPECT_EQ(wp->cls(), 2);
  EXPECT_EQ(wp->sep(), 3);
  EXPECT_EQ(Ids(*wp, "unaffable"), (std::vector<int>{4, 5, 6}));
  EXPECT_EQ(Ids(*wp, "UnAffable"), (std::vector<int>{4, 5, 6}));  // ASCII lower-cased
  EXPECT_EQ(Ids(*wp, "don't"), (std::vector<int>{7, 8, 9}));
  EXPECT_EQ(Ids(*wp, "$500"), (std::vector<int>{10, 11, 12, 12}));
  EXPECT_EQ(Ids(*wp, "e-mail"), (std::vector<int>{13, 14, 15}));
  EXPECT_EQ(Ids(*wp, "caf\xc3\xa9"), (std::vector<int>{16, 17}));  // UTF-8 kept as is
  EXPECT_EQ(Ids(*wp, "unx"), (std::vector<int>{4, 19}));
  EXPECT_EQ(Ids(*wp, "unq"), (std::vector<int>{1}));  // no "##q": the whole part is [UNK]
  EXPECT_EQ(Ids(*wp, "unq-e"), (std::vector<int>{1, 14, 13}));
  EXPECT_EQ(Ids(*wp, "xxxxxxxxxx", 3), (std::vector<int>{18, 19, 19}));  // capped
  EXPECT_EQ(Ids(*wp, "#"), (std::vector<int>{1}));
  EXPECT_EQ(Ids(*wp, ""), (std::vector<int>{1}));
}

TEST_F(WordPieceTest, BadVocabulariesAreRejected) {
  for (const std::string& bad :
       {std::string("[UNK]\n[CLS]\n"), std::string("[UNK]\n[CLS]\n\n[SEP]\n"),
        std::string("[UNK]\n[CLS]\n[SEP]\n[CLS]\n")}) {
    Write(bad);
    EXPECT_EQ(WordPiece::Load(path_).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(WordPiece::Load(path_.string() + ".absent").status().code(),
            absl::StatusCode::kNotFound);
}

class TransformerFolderTest : public test_util::FolderCopyTest {
 protected:
  void SetUp() override { CopyFolder(Shipped()); }
  absl::Status LoadStatus() { return Punctuator::Load(dir_.string()).status(); }
};

TEST_F(TransformerFolderTest, TheCopyLoadsAndMissingFilesAreNotFound) {
  ASSERT_TRUE(LoadStatus().ok()) << LoadStatus();
  fs::remove(dir_ / "vocab.txt");
  EXPECT_EQ(LoadStatus().code(), absl::StatusCode::kNotFound) << LoadStatus();
}

// The shipped weights are F16 (the word embeddings then stay F16 in memory); the same values
// stored as F32 take the FP32 path and give the same logits.
TEST_F(TransformerFolderTest, F32WeightsGiveTheSameLogitsAsF16) {
  absl::StatusOr<SafetensorsFile> f16 =
      SafetensorsFile::ReadFile((dir_ / "encoder.safetensors").string());
  ASSERT_TRUE(f16.ok()) << f16.status();
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> tensors;
  for (const auto& [name, view] : f16->tensors()) {
    ASSERT_EQ(view.dtype, DType::kF16) << name;
    tensors[name] = {view.shape, *f16->GetFloat(name)};
  }
  const std::string f32 = SerializeSafetensors(tensors);
  Write("encoder.safetensors", f32);
  nlohmann::json manifest = test_util::ReadManifest(dir_ / "punct.json");
  manifest["files"]["encoder.safetensors"]["bytes"] = f32.size();
  Write("punct.json", manifest.dump(2));
  absl::StatusOr<std::unique_ptr<const TokenTransformer>> m =
      TokenTransformer::Load(dir_, manifest);
  ASSERT_TRUE(m.ok()) << m.status();
  for (const test_util::LogitsReference& r : References()) {
    const TokenClassifier::Logits want = Model().Forward(r.words), got = (*m)->Forward(r.words);
    EXPECT_EQ(got.marks, want.marks);
    EXPECT_EQ(got.cases, want.cases);
  }
  EXPECT_TRUE(LoadStatus().ok()) << LoadStatus();
}

TEST_F(TransformerFolderTest, TruncatedWeightsAreRejected) {
  const std::string weights = Read("encoder.safetensors");
  Write("encoder.safetensors", weights.substr(0, weights.size() / 2));
  const absl::Status s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("bytes"), std::string::npos) << s;
}

TEST_F(TransformerFolderTest, ANetworkThatDoesNotMatchTheWeightsIsRejected) {
  const std::string manifest = Read("punct.json");
  const nlohmann::json m = test_util::ReadManifest(dir_ / "punct.json");
  const std::string layers = std::to_string(m["transformer"]["layers"].get<int>());
  for (const std::string& bad :
       {absl::StrReplaceAll(manifest, {{"\"layers\": " + layers, "\"layers\": 9"}}),
        absl::StrReplaceAll(manifest, {{"\"hidden\": 384", "\"hidden\": 768"}}),
        absl::StrReplaceAll(manifest, {{"\"heads\": 12", "\"heads\": 7"}}),
        absl::StrReplaceAll(manifest, {{"\"intermediate\": 1536", "\"intermediate\": 1024"}}),
        absl::StrReplaceAll(manifest, {{"\"window_words\": 64", "\"window_words\": 600"}}),
        absl::StrReplaceAll(manifest, {{"\"context_words\": 8", "\"context_words\": 20"}}),
        absl::StrReplaceAll(manifest, {{"\"method\": \"token_transformer\"", "\"method\": \"x\""}}),
        absl::StrReplaceAll(manifest, {{"\"weights\": \"encoder.safetensors\"",
                                        "\"weights\": \"../encoder.safetensors\""}})}) {
    ASSERT_NE(bad, manifest);
    Write("punct.json", bad);
    const absl::Status s = LoadStatus();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
}

}  // namespace
}  // namespace jasper
