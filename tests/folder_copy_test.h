// FolderCopyTest: a per-test copy of a shipped model sub-folder (itn/, punct/, punct_cnn/) in the
// temp directory, for tests that damage files and check the loader's error. Subclasses copy the
// folder in SetUp (CopyFolder) and give LoadStatus(); the copy is removed after each test. Also
// two helpers of the model-folder tests: ReadManifest and ParseFloats.
#ifndef JASPER_TESTS_FOLDER_COPY_TEST_H_
#define JASPER_TESTS_FOLDER_COPY_TEST_H_

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
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

}  // namespace jasper::test_util

#endif  // JASPER_TESTS_FOLDER_COPY_TEST_H_
