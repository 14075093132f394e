// Checks that a model sub-folder's manifest (itn/itn.json, punct/punct.json) lists: each file it
// names must exist with the byte count the manifest states, so a truncated or replaced file is a
// load error that names it rather than a wrong result later.
// Thread-safety: a pure function over its arguments (it reads the file system).
#ifndef JASPER_ENGINE_TEXT_MANIFEST_FILES_H_
#define JASPER_ENGINE_TEXT_MANIFEST_FILES_H_

#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace jasper {

// `files`: the manifest's "files" object ({"name": {"bytes": N, ...}}); `manifest_name`: the
// manifest's file name, for messages. NOT_FOUND when `path` does not exist; INVALID_ARGUMENT
// when the manifest has no byte count for it or the size differs.
absl::Status CheckListedFile(const std::filesystem::path& path, const nlohmann::json& files,
                             absl::string_view manifest_name);

}  // namespace jasper

#endif  // JASPER_ENGINE_TEXT_MANIFEST_FILES_H_
