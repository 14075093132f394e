#include "engine/text/manifest_files.h"

#include <cstdint>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace jasper {

absl::Status CheckListedFile(const std::filesystem::path& path, const nlohmann::json& files,
                             absl::string_view manifest_name) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(path.string(), ": ", ec.message()));
  const std::string name = path.filename().string();
  if (!files.is_object() || !files.contains(name) || !files[name].is_object() ||
      !files[name].contains("bytes") || !files[name]["bytes"].is_number_unsigned()) {
    return absl::InvalidArgumentError(
        absl::StrCat(manifest_name, ": files.", name, ".bytes: required (a byte count)"));
  }
  const uint64_t want = files[name]["bytes"].get<uint64_t>();
  if (want != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", bytes, " bytes, ",
                                                   manifest_name, " says ", want,
                                                   " (a truncated or replaced file)"));
  }
  return absl::OkStatus();
}

}  // namespace jasper
