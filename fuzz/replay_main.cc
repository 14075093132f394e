// A main() for the fuzz targets when libFuzzer is not linked (GCC builds, the normal test
// suite): runs LLVMFuzzerTestOneInput once on every file named on the command line, and on
// every file inside named folders. This replays the committed corpora and every crash
// reproducer in fuzz/regressions/ as ordinary tests (any sanitizer the build has applies).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int RunFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int files = 0, errors = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      std::vector<std::filesystem::path> paths;
      for (const auto& e : std::filesystem::recursive_directory_iterator(arg, ec)) {
        if (e.is_regular_file()) paths.push_back(e.path());
      }
      std::sort(paths.begin(), paths.end());
      for (const auto& p : paths) {
        errors += RunFile(p);
        ++files;
      }
    } else {
      errors += RunFile(arg);
      ++files;
    }
  }
  std::printf("replayed %d inputs, %d unreadable\n", files, errors);
  return errors == 0 && files > 0 ? 0 : 1;
}
