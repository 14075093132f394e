// Reading a model sub-folder's files (itn/itn.json, punct/punct.json): each file the manifest
// names must exist with the byte count it states, so a truncated or replaced file is a load
// error that names it rather than a wrong result later; tensors are checked for shape and
// finite values.
// Thread-safety: pure functions over their arguments (they read the file system).
#ifndef JASPER_ENGINE_TEXT_MANIFEST_FILES_H_
#define JASPER_ENGINE_TEXT_MANIFEST_FILES_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/io/safetensors.h"
#include "nlohmann/json.hpp"

namespace jasper {

// `files`: the manifest's "files" object ({"name": {"bytes": N, ...}}); `manifest_name`: the
// manifest's file name, for messages. NOT_FOUND when `path` does not exist; INVALID_ARGUMENT
// when the manifest has no byte count for it or the size differs.
absl::Status CheckListedFile(const std::filesystem::path& path, const nlohmann::json& files,
                             absl::string_view manifest_name);

// manifest[key] as a file name in the folder: a non-empty string without '/'. INVALID_ARGUMENT
// "MANIFEST_PATH: KEY: ..." otherwise.
absl::StatusOr<std::string> ManifestFileName(const nlohmann::json& manifest, const char* key,
                                             const std::filesystem::path& manifest_path);

// Whether `v` is an integer in [lo, hi].
bool JsonIntIn(const nlohmann::json& v, int64_t lo, int64_t hi);

// The tensor `name` of `file` (read from `path`) as FP32, which must have exactly `shape` and
// only finite values; INVALID_ARGUMENT naming the file and the tensor otherwise.
absl::StatusOr<std::vector<float>> ReadFiniteTensor(const SafetensorsFile& file,
                                                    const std::filesystem::path& path,
                                                    const std::string& name,
                                                    const std::vector<int64_t>& shape);

}  // namespace jasper

#endif  // JASPER_ENGINE_TEXT_MANIFEST_FILES_H_
