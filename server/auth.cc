#include "server/auth.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace jasper::server {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // volatile keeps the compiler from turning the loop into an early-exit comparison.
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    diff = diff | (x ^ static_cast<unsigned char>(b[i]));
  }
  return diff == 0;
}

absl::StatusOr<ApiKeys> ApiKeys::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read api_keys_file '", path, "'"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  absl::StatusOr<ApiKeys> keys = Parse(text.str());
  if (!keys.ok()) {
    return absl::Status(keys.status().code(),
                        absl::StrCat("api_keys_file '", path, "': ", keys.status().message()));
  }
  return keys;
}

absl::StatusOr<ApiKeys> ApiKeys::Parse(absl::string_view text) {
  ApiKeys keys;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    bool printable = line.size() >= 8 && line.size() <= 512;
    for (char c : line) printable = printable && c > 0x20 && c < 0x7f;
    if (!printable) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number,
                       ": a key must be 8 to 512 printable ASCII characters without spaces"));
    }
    keys.keys_.emplace_back(line);
  }
  if (keys.keys_.empty()) {
    return absl::InvalidArgumentError("no keys (every call would be refused)");
  }
  return keys;
}

bool ApiKeys::Matches(absl::string_view key) const {
  bool match = false;
  for (const std::string& k : keys_) match |= ConstantTimeEquals(key, k);  // no early exit
  return match && !key.empty();
}

absl::string_view ApiKeys::KeyFromAuthorization(absl::string_view value) {
  value = absl::StripAsciiWhitespace(value);
  if (value.size() < 7 || !absl::EqualsIgnoreCase(value.substr(0, 7), "bearer ")) return {};
  return absl::StripAsciiWhitespace(value.substr(7));
}

namespace {

// Modification time (ns) and size of `path`; false when it cannot be stat'ed.
bool StatFile(const std::string& path, int64_t* mtime_ns, int64_t* size) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  *mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  *size = static_cast<int64_t>(st.st_size);
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ApiKeyStore>> ApiKeyStore::Open(const std::string& path) {
  std::unique_ptr<ApiKeyStore> store(new ApiKeyStore(path));
  int64_t mtime_ns = -1;
  int64_t size = -1;
  (void)StatFile(path, &mtime_ns, &size);
  absl::StatusOr<ApiKeys> keys = ApiKeys::Load(path);
  if (!keys.ok()) return keys.status();
  absl::MutexLock lock(&store->mu_);
  store->keys_ = std::make_shared<const ApiKeys>(*std::move(keys));
  store->mtime_ns_ = mtime_ns;
  store->size_ = size;
  return store;
}

std::shared_ptr<const ApiKeys> ApiKeyStore::Current() const {
  absl::MutexLock lock(&mu_);
  return keys_;
}

bool ApiKeyStore::ReloadIfChanged() {
  int64_t mtime_ns = -1;
  int64_t size = -1;
  if (!StatFile(path_, &mtime_ns, &size)) return false;  // e.g. mid-rotation; keep the keys
  {
    absl::MutexLock lock(&mu_);
    if (mtime_ns == mtime_ns_ && size == size_) return false;
    mtime_ns_ = mtime_ns;
    size_ = size;
  }
  absl::StatusOr<ApiKeys> keys = ApiKeys::Load(path_);
  if (!keys.ok()) {
    spdlog::error("API keys not reloaded (the previous keys stay in force): {}",
                  std::string(keys.status().message()));
    return false;
  }
  spdlog::info("API keys reloaded from {}: {} keys", path_, keys->size());
  absl::MutexLock lock(&mu_);
  keys_ = std::make_shared<const ApiKeys>(*std::move(keys));
  return true;
}

}  // namespace jasper::server
