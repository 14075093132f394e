// Test helpers for files in the source tree: the path of a checked-in file and a whole file's
// bytes. Header-only, no gRPC; shared by the engine and server tests. Thread-compatible.
#ifndef JASPER_TESTS_TEST_FILES_H_
#define JASPER_TESTS_TEST_FILES_H_

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace jasper::test_util {

// JASPER_SOURCE_DIR/rel (JASPER_SOURCE_DIR is defined for every test target).
inline std::string SourcePath(const std::string& rel) {
  return std::string(JASPER_SOURCE_DIR) + "/" + rel;
}

// The file's bytes; empty when it cannot be read (callers assert on non-empty).
inline std::string ReadFileBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace jasper::test_util

#endif  // JASPER_TESTS_TEST_FILES_H_
