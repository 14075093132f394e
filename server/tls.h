// Transport security of the gRPC port: plaintext, TLS, or mutual TLS, from ServerOptions.
//
// TLS: tls_cert_file (PEM chain) and tls_key_file (PEM private key). mTLS: also
// tls_client_ca_file (PEM CA bundle); every client must then present a certificate that chains
// to it, or its handshake fails. gRPC's FileWatcherCertificateProvider re-reads the files every
// tls_reload_interval_s: a rotated certificate (replace the files, ideally by rename, key and
// certificate together) is used for new connections from the next reload on; a pair that does
// not match, or that cannot be parsed, is logged by gRPC and the previous one stays in use.
// The HTTP front serves the same files with OpenSSL directly (server/http_tls.h).
//
// Thread-safety: pure functions.
#ifndef JASPER_SERVER_TLS_H_
#define JASPER_SERVER_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "server/server_options.h"

namespace jasper::server {

// Insecure credentials when options.tls_cert_file is empty, else TLS / mTLS credentials.
// Errors: INVALID_ARGUMENT (a file that is unreadable or holds no PEM block of the right kind).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions& options);

// Whether the host of a "host:port" listen address is a loopback address (127.0.0.0/8, ::1,
// localhost). "0.0.0.0", "[::]" and other hosts are not.
bool IsLoopbackAddress(const std::string& listen_address);

}  // namespace jasper::server

#endif  // JASPER_SERVER_TLS_H_
