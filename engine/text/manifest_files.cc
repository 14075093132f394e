#include "engine/text/manifest_files.h"

#include <algorithm>
#include <cmath>
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

absl::StatusOr<std::string> ManifestFileName(const nlohmann::json& manifest, const char* key,
                                             const std::filesystem::path& manifest_path) {
  if (!manifest.contains(key) || !manifest[key].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(manifest_path.string(), ": ", key, ": required (a file name in the folder)"));
  }
  std::string name = manifest[key].get<std::string>();
  if (name.empty() || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(manifest_path.string(), ": ", key, ": a file name in the folder, not a path"));
  }
  return name;
}

bool JsonIntIn(const nlohmann::json& v, int64_t lo, int64_t hi) {
  return v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
}

absl::StatusOr<std::vector<float>> ReadFiniteTensor(const SafetensorsFile& file,
                                                    const std::filesystem::path& path,
                                                    const std::string& name,
                                                    const std::vector<int64_t>& shape) {
  auto invalid = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", what));
  };
  const TensorView* view = file.Find(name);
  if (view == nullptr) return invalid(absl::StrCat("no tensor ", name));
  if (view->shape != shape) {
    std::string want, got;
    for (int64_t d : shape) absl::StrAppend(&want, want.empty() ? "" : ",", d);
    for (int64_t d : view->shape) absl::StrAppend(&got, got.empty() ? "" : ",", d);
    return invalid(absl::StrCat(name, ": shape [", got, "], want [", want, "]"));
  }
  absl::StatusOr<std::vector<float>> values = file.GetFloat(name);
  if (!values.ok()) return invalid(values.status().message());
  if (!std::all_of(values->begin(), values->end(), [](float v) { return std::isfinite(v); })) {
    return invalid(absl::StrCat(name, ": a value is not finite"));
  }
  return values;
}

}  // namespace jasper
