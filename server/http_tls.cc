#include "server/http_tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace jasper::server {
namespace {

namespace ssl = boost::asio::ssl;

absl::Status FileError(const char* flag, const std::string& path, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "' ", why));
}

// Whether `path` holds a PEM private key (unencrypted: no passphrase is ever asked for).
bool HoldsPrivateKey(const std::string& path) {
  BIO* bio = BIO_new_file(path.c_str(), "r");
  if (bio == nullptr) return false;
  auto no_passphrase = [](char*, int, int, void*) { return 0; };
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, no_passphrase, nullptr);
  BIO_free(bio);
  EVP_PKEY_free(key);
  return key != nullptr;
}

}  // namespace

absl::StatusOr<std::shared_ptr<ssl::context>> MakeHttpTlsContext(const HttpTlsOptions& tls) {
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError("HTTP TLS needs a certificate file and a key file");
  }
  if (tls.reload_interval_s < 1 || tls.reload_interval_s > 86400) {
    return absl::InvalidArgumentError("tls_reload_interval_s must be in [1, 86400]");
  }
  const struct {
    const char* flag;
    const std::string& path;
  } files[] = {{"tls_cert_file", tls.cert_file},
               {"tls_key_file", tls.key_file},
               {"tls_client_ca_file", tls.client_ca_file}};
  for (const auto& f : files) {
    if (!f.path.empty() && !std::ifstream(f.path))
      return FileError(f.flag, f.path, "cannot be read");
  }
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = context->native_handle();
  boost::system::error_code ec;
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                           ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                           ssl::context::no_tlsv1_1 | ssl::context::single_dh_use,
                       ec);
  if (ec || SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1) {
    ERR_clear_error();
    return absl::InternalError("cannot restrict the HTTP TLS context to TLS 1.2+");
  }
  // An encrypted key fails to load instead of OpenSSL prompting on the terminal.
  context->set_password_callback(
      [](size_t, ssl::context::password_purpose) { return std::string(); }, ec);
  context->use_certificate_chain_file(tls.cert_file, ec);
  if (ec) {
    ERR_clear_error();
    return FileError("tls_cert_file", tls.cert_file,
                     absl::StrCat("holds no usable PEM certificate chain: ", ec.message()));
  }
  context->use_private_key_file(tls.key_file, ssl::context::pem, ec);
  if (ec || SSL_CTX_check_private_key(native) != 1) {
    const std::string why = ec ? ec.message() : "key values mismatch";
    ERR_clear_error();
    if (HoldsPrivateKey(tls.key_file)) {
      ERR_clear_error();
      return FileError("tls_key_file", tls.key_file,
                       absl::StrCat("does not match the certificate of tls_cert_file '",
                                    tls.cert_file, "' (", why, ")"));
    }
    ERR_clear_error();
    return FileError("tls_key_file", tls.key_file,
                     absl::StrCat("holds no usable (unencrypted) PEM private key: ", why));
  }
  // Sessions resumed under mutual TLS need a session id context (else the handshake fails).
  static constexpr unsigned char kSessionContext[] = "jasper-http";
  SSL_CTX_set_session_id_context(native, kSessionContext, sizeof(kSessionContext) - 1);
  if (!tls.client_ca_file.empty()) {
    context->load_verify_file(tls.client_ca_file, ec);
    if (ec) {
      ERR_clear_error();
      return FileError("tls_client_ca_file", tls.client_ca_file,
                       absl::StrCat("holds no usable PEM CA certificate: ", ec.message()));
    }
    // The CA names go in the CertificateRequest, so clients pick the right certificate.
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca_file.c_str())) {
      SSL_CTX_set_client_CA_list(native, names);  // takes ownership
    }
    context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, ec);
    if (ec) {
      ERR_clear_error();
      return absl::InternalError(
          absl::StrCat("cannot require client certificates: ", ec.message()));
    }
  }
  ERR_clear_error();
  return context;
}

absl::Status CheckHttpTls(const HttpTlsOptions& tls) { return MakeHttpTlsContext(tls).status(); }

absl::StatusOr<std::unique_ptr<HttpTlsContextSource>> HttpTlsContextSource::Create(
    const HttpTlsOptions& tls) {
  std::unique_ptr<HttpTlsContextSource> source(new HttpTlsContextSource(tls));
  source->stamps_ = source->Stamps();  // before the load: a change during it is seen later
  absl::StatusOr<std::shared_ptr<ssl::context>> context = MakeHttpTlsContext(tls);
  if (!context.ok()) return context.status();
  source->current_ = *std::move(context);
  source->last_check_ = std::chrono::steady_clock::now();
  return source;
}

std::vector<HttpTlsContextSource::Stamp> HttpTlsContextSource::Stamps() const {
  std::vector<Stamp> stamps;
  for (const std::string* path : {&tls_.cert_file, &tls_.key_file, &tls_.client_ca_file}) {
    if (path->empty()) continue;
    Stamp s;
    struct stat st {};
    if (::stat(path->c_str(), &st) == 0) {
      s.exists = true;
      s.device = static_cast<uint64_t>(st.st_dev);
      s.inode = static_cast<uint64_t>(st.st_ino);
      s.size = static_cast<int64_t>(st.st_size);
      s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    }
    stamps.push_back(s);
  }
  return stamps;
}

std::shared_ptr<ssl::context> HttpTlsContextSource::Current() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - last_check_ < std::chrono::seconds(tls_.reload_interval_s)) return current_;
  last_check_ = now;
  std::vector<Stamp> stamps = Stamps();
  if (stamps == stamps_) return current_;
  stamps_ = std::move(stamps);
  absl::StatusOr<std::shared_ptr<ssl::context>> next = MakeHttpTlsContext(tls_);
  if (!next.ok()) {
    spdlog::warn(
        "HTTP TLS: the changed files cannot be loaded ({}); keeping the previous "
        "certificate",
        std::string(next.status().message()));
    return current_;
  }
  current_ = *std::move(next);
  spdlog::info("HTTP TLS: reloaded the certificate from {}", tls_.cert_file);
  return current_;
}

}  // namespace jasper::server
