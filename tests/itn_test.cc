// Inverse text normalization (engine/text/inverse_normalizer.h): agreement with NeMo's own
// InverseNormalizer on the committed spoken/written set (tests/fixtures/itn/itn_en.tsv, made by
// tools/export_itn.py --fixture), spans that cover the spoken words, the grammar folder's
// checks, and concurrent use of one instance.
#include "engine/text/inverse_normalizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "tests/folder_copy_test.h"

namespace jasper {
namespace {

namespace fs = std::filesystem;

fs::path ShippedItn() { return fs::path(JASPER_SOURCE_DIR) / "models/quartznet_en_tts_small/itn"; }

struct Case {
  std::string spoken;
  std::string written;
};

std::vector<Case> Fixture(const char* name = "itn_en.tsv") {
  std::ifstream in(fs::path(JASPER_SOURCE_DIR) / "tests/fixtures/itn" / name);
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> parts = absl::StrSplit(line, '\t');
    if (parts.size() != 2) continue;
    cases.push_back({parts[0], parts[1]});
  }
  return cases;
}

const InverseNormalizer& Shipped() {
  static const InverseNormalizer* itn = [] {
    absl::StatusOr<std::unique_ptr<const InverseNormalizer>> loaded =
        InverseNormalizer::Load(ShippedItn().string());
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status();
      return static_cast<const InverseNormalizer*>(nullptr);
    }
    return loaded->release();
  }();
  return *itn;
}

// Every word in exactly one span, in order.
void ExpectCovers(const std::vector<WrittenSpan>& spans, const std::vector<std::string>& words) {
  int next = 0;
  for (const WrittenSpan& s : spans) {
    while (next < static_cast<int>(words.size()) && words[next].empty()) ++next;
    EXPECT_EQ(s.first_word, next);
    EXPECT_GE(s.num_words, 1);
    next = s.first_word + s.num_words;
  }
  while (next < static_cast<int>(words.size()) && words[next].empty()) ++next;
  EXPECT_EQ(next, static_cast<int>(words.size()));
}

// Agreement with NeMo's written forms in `file`; returns how many NeMo changed.
int ExpectAgreement(const char* file, double min_rate) {
  const std::vector<Case> cases = Fixture(file);
  EXPECT_GE(cases.size(), 300u);
  if (cases.empty()) return 0;
  int agree = 0;
  int changed = 0;
  std::string disagreements;
  for (const Case& c : cases) {
    const std::vector<std::string> words = absl::StrSplit(c.spoken, ' ', absl::SkipEmpty());
    const std::vector<WrittenSpan> spans = Shipped().Normalize(words);
    ExpectCovers(spans, words);
    const std::string written = JoinWritten(spans);
    EXPECT_EQ(written, Shipped().NormalizeText(c.spoken));
    if (written == c.written) {
      ++agree;
    } else {
      disagreements +=
          "\n  spoken:  " + c.spoken + "\n  NeMo:    " + c.written + "\n  ours:    " + written;
    }
    if (c.written != c.spoken) ++changed;
  }
  const double rate = static_cast<double>(agree) / cases.size();
  std::printf("ITN agreement with NeMo on %s: %d / %zu (%.2f %%); NeMo changed %d of them%s\n",
              file, agree, cases.size(), 100.0 * rate, changed, disagreements.c_str());
  EXPECT_GE(rate, min_rate) << disagreements;
  return changed;
}

TEST(InverseNormalizerTest, AgreesWithNemoOnTheCommittedSet) {
  EXPECT_GE(ExpectAgreement("itn_en.tsv", 0.99),
            250);  // the grammars at work, not only pass-through
}

// Random strings of the set's words (tools/export_itn.py --strings-fixture): where taggings tie
// in weight, the search must pick NeMo's (StringTransducer breaks ties toward the later
// candidate; the earlier one agreed on 98.5 % of such strings).
TEST(InverseNormalizerTest, BreaksTiesAsNemoOnRandomWordStrings) {
  EXPECT_GE(ExpectAgreement("itn_en_strings.tsv", 0.995), 250);
}

TEST(InverseNormalizerTest, WrittenTokensSpanTheirSpokenWords) {
  const std::vector<std::string> words = absl::StrSplit(
      "doctor lee paid twenty three dollars fifty cents on may third nineteen ninety eight", ' ');
  const std::vector<WrittenSpan> spans = Shipped().Normalize(words);
  ASSERT_EQ(spans.size(), 6u) << JoinWritten(spans);
  EXPECT_EQ(spans[0].text, "dr.");
  EXPECT_EQ(spans[0].num_words, 1);
  EXPECT_EQ(spans[3].text, "$23.50");
  EXPECT_EQ(spans[3].first_word, 3);
  EXPECT_EQ(spans[3].num_words, 5);  // twenty three dollars fifty cents
  EXPECT_EQ(spans[4].text, "on");
  EXPECT_EQ(spans[5].text, "may 3 1998");
  EXPECT_EQ(spans[5].first_word, 9);
  EXPECT_EQ(spans[5].num_words, 5);
  EXPECT_EQ(JoinWritten(spans), "dr. lee paid $23.50 on may 3 1998");
}

TEST(InverseNormalizerTest, EmptyAndOddInput) {
  EXPECT_TRUE(Shipped().Normalize({}).empty());
  EXPECT_EQ(Shipped().NormalizeText(""), "");
  EXPECT_EQ(Shipped().NormalizeText("   "), "");
  // Empty words are skipped as spaces would be; spans index the caller's vector.
  const std::vector<std::string> words = {"", "twenty", "", "one", ""};
  const std::vector<WrittenSpan> spans = Shipped().Normalize(words);
  ExpectCovers(spans, words);
  EXPECT_EQ(JoinWritten(spans), "21");
  // Bytes no grammar knows come back unchanged (never a crash, never lost words).
  for (const std::string text : {"caf\xc3\xa9 at noon", "x{y} \"z\" tokens { name", "\x01\x02"}) {
    const std::vector<std::string> odd = absl::StrSplit(text, ' ', absl::SkipEmpty());
    const std::vector<WrittenSpan> got = Shipped().Normalize(odd);
    ExpectCovers(got, odd);
    EXPECT_FALSE(JoinWritten(got).empty()) << text;
  }
}

TEST(InverseNormalizerTest, OneInstanceServesManyThreads) {
  const std::vector<Case> cases = Fixture();
  std::vector<std::string> expected;
  for (const Case& c : cases) expected.push_back(Shipped().NormalizeText(c.spoken));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < cases.size(); i += 2) {
        if (Shipped().NormalizeText(cases[i].spoken) != expected[i]) ++mismatches[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

class ItnFolderTest : public test_util::FolderCopyTest {
 protected:
  void SetUp() override { CopyFolder(ShippedItn()); }
  absl::Status LoadStatus() { return InverseNormalizer::Load(dir_.string()).status(); }
};

TEST_F(ItnFolderTest, TheCopyLoads) {
  absl::StatusOr<std::unique_ptr<const InverseNormalizer>> itn =
      InverseNormalizer::Load(dir_.string());
  ASSERT_TRUE(itn.ok()) << itn.status();
  EXPECT_NE((*itn)->provenance().find("nemo_text_processing"), std::string::npos);
  EXPECT_EQ((*itn)->NormalizeText("twenty one"), "21");
}

TEST_F(ItnFolderTest, MissingFilesAreNotFound) {
  fs::remove(dir_ / "verbalizer.fst");
  EXPECT_EQ(LoadStatus().code(), absl::StatusCode::kNotFound) << LoadStatus();
  fs::remove(dir_ / "itn.json");
  EXPECT_EQ(LoadStatus().code(), absl::StatusCode::kNotFound) << LoadStatus();
  EXPECT_EQ(InverseNormalizer::Load((dir_ / "nowhere").string()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ItnFolderTest, TruncatedOrGarbageFstsAreRejected) {
  const std::string tagger = Read("tagger.fst");
  Write("tagger.fst", tagger.substr(0, tagger.size() / 2));
  absl::Status s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("bytes"), std::string::npos) << s;
  // Same size, not an FST.
  Write("tagger.fst", std::string(tagger.size(), 'x'));
  s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("OpenFst"), std::string::npos) << s;
}

TEST_F(ItnFolderTest, ALabelListThatDoesNotMatchTheTaggerIsRejected) {
  const std::string labels = Read("tagger_labels.json");
  // Same size: the load's byte check passes, the content check must not.
  Write("tagger_labels.json", "[1" + std::string(labels.size() - 3, ' ') + "]\n");
  absl::Status s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  Write("tagger_labels.json", "[" + std::string(labels.size() - 3, ' ') + "]\n");
  s = LoadStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;  // labels the tagger writes
  EXPECT_NE(s.message().find("output label"), std::string::npos) << s;
}

TEST_F(ItnFolderTest, MalformedManifestsAreRejected) {
  const std::string manifest = Read("itn.json");
  for (const std::string& bad :
       {std::string("{"), std::string("[]"),
        manifest.substr(0, manifest.find("\"format_version\"")) + "\"format_version\": 1, " +
            manifest.substr(manifest.find("\"language\"")),
        std::string(R"({"format_version": 2, "input_case": "cased", "files": {}})"),
        std::string(R"({"format_version": 2, "input_case": "lower_cased"})"),
        std::string(R"({"format_version": 2, "input_case": "lower_cased", "files": {}})"),
        std::string(R"({"format_version": 2, "input_case": "lower_cased",
                        "max_permutations_per_split": 0, "files": {}})")}) {
    Write("itn.json", bad);
    const absl::Status s = LoadStatus();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << "\n" << s;
  }
}

}  // namespace
}  // namespace jasper
