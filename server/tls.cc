#include "server/tls.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/status_macros.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "server/http_server.h"

namespace jasper::server {
namespace {

// Checks that `path` is readable and holds a PEM block whose label contains `label`.
absl::Status CheckPemFile(const char* flag, const std::string& path, const char* label) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "' cannot be read"));
  std::ostringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const size_t begin = s.find("-----BEGIN ");
  if (begin == std::string::npos || s.find(label, begin) == std::string::npos ||
      s.find("-----END ", begin) == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path, "' holds no PEM ", label, " block"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions& options) {
  if (options.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  JASPER_RETURN_IF_ERROR(CheckPemFile("tls_cert_file", options.tls_cert_file, "CERTIFICATE"));
  JASPER_RETURN_IF_ERROR(CheckPemFile("tls_key_file", options.tls_key_file, "PRIVATE KEY"));
  const bool mutual = !options.tls_client_ca_file.empty();
  if (mutual) {
    JASPER_RETURN_IF_ERROR(
        CheckPemFile("tls_client_ca_file", options.tls_client_ca_file, "CERTIFICATE"));
  }
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      options.tls_key_file, options.tls_cert_file, mutual ? options.tls_client_ca_file : "",
      static_cast<unsigned int>(options.tls_reload_interval_s));
  grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  if (mutual) {
    tls.watch_root_certs();
    tls.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(tls);
}

bool IsLoopbackAddress(const std::string& listen_address) {
  if (absl::StartsWith(listen_address, "unix:") ||
      absl::StartsWith(listen_address, "unix-abstract:")) {
    return true;  // a local socket
  }
  std::string host;
  int port = 0;
  if (!SplitHostPort(listen_address, &host, &port).ok()) return false;
  host = absl::AsciiStrToLower(host);
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace jasper::server
