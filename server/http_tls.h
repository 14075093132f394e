// The OpenSSL server context of the HTTP front's TLS (HttpServerOptions::tls), and its rotation.
//
// MakeHttpTlsContext builds a boost::asio::ssl::context: TLS 1.2 or newer only (SSLv2/v3,
// TLS 1.0 and 1.1 off), the PEM certificate chain and private key (which must match), and with a
// client CA bundle mutual TLS (verify_peer | verify_fail_if_no_peer_cert against that bundle,
// whose names are sent in the CertificateRequest).
//
// HttpTlsContextSource hands each new connection the current context. At most every
// reload_interval_s (checked when a connection asks), it compares the files' modification
// times (and inode and size, so a rename of a new file over the old one counts) with those of
// the last load; if one changed it builds a new context, which new connections get from then
// on. Connections hold their context by shared_ptr, so open ones keep theirs. A new context
// that cannot be built (a file half-written, a key that does not match its certificate) is
// logged as a warning and the previous one stays in use; it is tried again once a file changes
// again. Replace the files by rename, key and certificate together.
//
// Ownership: HttpTlsContextSource owns the current context, shared with the connections.
// Thread-safety: Current() is thread-safe; MakeHttpTlsContext is a pure function.
#ifndef JASPER_SERVER_HTTP_TLS_H_
#define JASPER_SERVER_HTTP_TLS_H_

#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "server/http_server.h"

namespace jasper::server {

// The context for `tls`. INVALID_ARGUMENT naming the file that cannot be read or used (or the
// key that does not match the certificate).
absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeHttpTlsContext(
    const HttpTlsOptions& tls);

class HttpTlsContextSource {
 public:
  // Loads the files once. Errors: MakeHttpTlsContext's.
  static absl::StatusOr<std::unique_ptr<HttpTlsContextSource>> Create(const HttpTlsOptions& tls);

  // The context for a new connection (reloaded first when due and a file changed).
  std::shared_ptr<boost::asio::ssl::context> Current();

  // Whether client certificates are required (mutual TLS).
  bool mutual() const { return !tls_.client_ca_file.empty(); }

 private:
  // What identifies a file's version; equal stamps: unchanged.
  struct Stamp {
    bool exists = false;
    uint64_t device = 0;
    uint64_t inode = 0;
    int64_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const Stamp& o) const {
      return exists == o.exists && device == o.device && inode == o.inode && size == o.size &&
             mtime_ns == o.mtime_ns;
    }
  };

  explicit HttpTlsContextSource(const HttpTlsOptions& tls) : tls_(tls) {}
  std::vector<Stamp> Stamps() const;  // cert, key, client CA (when set)

  const HttpTlsOptions tls_;
  std::mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> current_;  // guarded by mu_
  std::vector<Stamp> stamps_;                           // of the last load attempt; mu_
  std::chrono::steady_clock::time_point last_check_;    // mu_
};

}  // namespace jasper::server

#endif  // JASPER_SERVER_HTTP_TLS_H_
