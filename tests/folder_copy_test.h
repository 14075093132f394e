// FolderCopyTest: a per-test copy of a shipped model sub-folder (itn/, punct/, punct_cnn/) in the
// temp directory, for tests that damage files and check the loader's error. Subclasses copy the
// folder in SetUp (CopyFolder) and give LoadStatus(); the copy is removed after each test. Also
// helpers of the text-model tests: ReadManifest, ReadTsv, and the token classifiers' reference
// logits (ReadLogitsFixture, ExpectLogitsNear).
#ifndef JASPER_TESTS_FOLDER_COPY_TEST_H_
#define JASPER_TESTS_FOLDER_COPY_TEST_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/text/token_classifier.h"
#include "nlohmann/json.hpp"

namespace jasper::test_util {

class FolderCopyTest : public ::testing::Test {
 protected:
  // Copies the whole of `from` to a fresh folder named after the test.
  void CopyFolder(const std::filesystem::path& from) {
    const ::testing::UnitTest* unit = ::testing::UnitTest::GetInstance();
    dir_ = std::filesystem::temp_directory_path() /
           ("folder_copy_" + std::to_string(unit->random_seed()) + "_" +
            unit->current_test_info()->test_suite_name() + "_" + unit->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::copy(from, dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const char* name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary | std::ios::trunc) << bytes;
  }
  std::string Read(const char* name) {
    std::ifstream in(dir_ / name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::filesystem::path dir_;
};

// DIR/punct.json (or another manifest) parsed; a discarded value when it is not JSON.
inline nlohmann::json ReadManifest(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// The lines of a tab-separated fixture, each split into its `columns` fields; a line with another
// count fails the test (and is skipped).
inline std::vector<std::vector<std::string>> ReadTsv(const std::filesystem::path& path,
                                                     size_t columns) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cols = absl::StrSplit(line, '\t');
    EXPECT_EQ(cols.size(), columns) << path << ": " << line;
    if (cols.size() == columns) rows.push_back(std::move(cols));
  }
  return rows;
}

// Space-separated floats (a fixture's column); a field that is not a number fails the test.
inline std::vector<float> ParseFloats(const std::string& text) {
  std::vector<float> out;
  for (absl::string_view field : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    float v = 0;
    EXPECT_TRUE(absl::SimpleAtof(field, &v)) << field;
    out.push_back(v);
  }
  return out;
}

// One line of a token classifier's reference fixture (tools/train_punct.py and
// train_punct_bert.py --fixture): the words, and PyTorch's mark and case logits [T x 4].
struct LogitsReference {
  std::vector<std::string> words;
  std::vector<float> marks, cases;
};

inline std::vector<LogitsReference> ReadLogitsFixture(const std::filesystem::path& path) {
  std::vector<LogitsReference> out;
  for (const std::vector<std::string>& cols : ReadTsv(path, 3)) {
    LogitsReference r{absl::StrSplit(cols[0], ' ', absl::SkipEmpty()), ParseFloats(cols[1]),
                      ParseFloats(cols[2])};
    EXPECT_EQ(r.marks.size(), r.words.size() * TokenClassifier::kClasses) << cols[0];
    EXPECT_EQ(r.cases.size(), r.words.size() * TokenClassifier::kClasses) << cols[0];
    out.push_back(std::move(r));
  }
  return out;
}

// `model`'s logits for r.words against r's, within `relative` x max(1, |reference|).
inline void ExpectLogitsNear(const TokenClassifier& model, const LogitsReference& r, float relative,
                             const std::string& label) {
  const TokenClassifier::Logits got = model.Forward(r.words);
  ASSERT_EQ(got.marks.size(), r.marks.size()) << label;
  ASSERT_EQ(got.cases.size(), r.cases.size()) << label;
  for (size_t i = 0; i < r.marks.size(); ++i) {
    EXPECT_NEAR(got.marks[i], r.marks[i], relative * std::max(1.0f, std::abs(r.marks[i])))
        << label << " value " << i;
    EXPECT_NEAR(got.cases[i], r.cases[i], relative * std::max(1.0f, std::abs(r.cases[i])))
        << label << " value " << i;
  }
}

}  // namespace jasper::test_util

#endif  // JASPER_TESTS_FOLDER_COPY_TEST_H_
