#include "engine/model/default_model_dir.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <vector>

namespace jasper {
namespace {

namespace fs = std::filesystem;

bool IsModelDir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "model.json", ec);
}

}  // namespace

std::string FindDefaultModelDir() {
  std::error_code ec;
  const fs::path exe = fs::canonical("/proc/self/exe", ec);
  std::vector<fs::path> roots;
  if (!ec) {
    const fs::path bin = exe.parent_path();
    roots.push_back(bin / ".." / "share" / "jasper-serve" / "models");  // installed
    roots.push_back(bin / ".." / "models");                             // unpacked archive
    roots.push_back(bin / ".." / ".." / "models");                      // build/<dir>/
  }
  roots.push_back("models");
  for (const fs::path& root : roots) {
    if (IsModelDir(root)) return root.lexically_normal().string();
    std::vector<fs::path> found;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      if (entry.is_directory(ec) && IsModelDir(entry.path())) found.push_back(entry.path());
    }
    if (!found.empty()) return std::min_element(found.begin(), found.end())->lexically_normal();
  }
  return "";
}

}  // namespace jasper
