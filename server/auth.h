// API keys: the optional call authentication of jasper-server (--api_keys_file).
//
// File format: one key per line; leading/trailing whitespace is ignored, as are empty lines and
// lines starting with '#'. A key is 8 to 512 printable ASCII characters without spaces (what
// gRPC metadata can carry). A client sends one as `authorization: Bearer <key>` or
// `x-api-key: <key>`. Keys are compared in constant time (the time depends only on the
// configured keys' lengths, never on how much of a guess matches).
//
// ApiKeyStore keeps the current ApiKeys of a file and re-reads the file when it changes
// (ReloadIfChanged(), called periodically by JasperServer), so keys can be rotated without a
// restart; a changed file that does not parse keeps the previous keys (and logs why).
//
// Thread-safety: ApiKeys is immutable after Load(); thread-safe. ApiKeyStore: thread-safe.
#ifndef JASPER_SERVER_AUTH_H_
#define JASPER_SERVER_AUTH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace jasper::server {

class ApiKeys {
 public:
  // Errors: NOT_FOUND / PERMISSION_DENIED (unreadable file), INVALID_ARGUMENT (a malformed key,
  // naming its line but not its text; a file without any key).
  static absl::StatusOr<ApiKeys> Load(const std::string& path);
  static absl::StatusOr<ApiKeys> Parse(absl::string_view text);

  // Whether `key` equals one of the keys (constant time, every key compared).
  bool Matches(absl::string_view key) const;
  // The key from a header value: "Bearer <key>" (scheme case-insensitive) for `authorization`,
  // the value itself for `x-api-key`. Empty when the authorization value is not a bearer token.
  static absl::string_view KeyFromAuthorization(absl::string_view value);

  size_t size() const { return keys_.size(); }

 private:
  std::vector<std::string> keys_;
};

class ApiKeyStore {
 public:
  // Loads `path` (errors as ApiKeys::Load).
  static absl::StatusOr<std::unique_ptr<ApiKeyStore>> Open(const std::string& path);

  // The keys in force; never null.
  std::shared_ptr<const ApiKeys> Current() const ABSL_LOCKS_EXCLUDED(mu_);
  // Re-reads the file when its modification time or size changed since the last read. True
  // when new keys are in force.
  bool ReloadIfChanged() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit ApiKeyStore(std::string path) : path_(std::move(path)) {}
  const std::string path_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const ApiKeys> keys_ ABSL_GUARDED_BY(mu_);
  int64_t mtime_ns_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t size_ ABSL_GUARDED_BY(mu_) = -1;
};

// Whether `a` equals `b`; the running time depends on b.size() only (b: the secret).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace jasper::server

#endif  // JASPER_SERVER_AUTH_H_
