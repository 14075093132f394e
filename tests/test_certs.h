// Certificates for the TLS tests (security_test, server_https_test), made per test run with the
// `openssl` CLI (tools/install_deps.sh installs it) under a fresh temporary folder: CAs `ca`,
// `ca2`, `client_ca`, `rogue_ca`; server leaves `server` (signed by ca) and `server2` (ca2);
// client leaves `client` (client_ca) and `rogue` (rogue_ca). Leaves are EC P-256 for
// CN=localhost with SANs localhost and 127.0.0.1; each NAME has NAME.pem and NAME.key.
// Header-only; thread-compatible.
#ifndef JASPER_TESTS_TEST_CERTS_H_
#define JASPER_TESTS_TEST_CERTS_H_

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "tests/test_files.h"

namespace jasper::test_util {

class Certs {
 public:
  // Creates the CAs and leaves under a fresh folder named after `prefix` and the process. ok()
  // false (with the failing command in error()) when openssl is missing or fails.
  explicit Certs(const std::string& prefix = "jasper_certs") {
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat(prefix, "_", ::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    ok_ = Ca("ca") && Leaf("server", "ca", "serverAuth") && Ca("ca2") &&
          Leaf("server2", "ca2", "serverAuth") && Ca("client_ca") &&
          Leaf("client", "client_ca", "clientAuth") && Ca("rogue_ca") &&
          Leaf("rogue", "rogue_ca", "clientAuth");
  }
  ~Certs() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  Certs(const Certs&) = delete;
  Certs& operator=(const Certs&) = delete;

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string Pem(const std::string& name) const { return ReadFileBytes(dir_ / name); }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  bool Run(const std::string& command) {
    const std::string full =
        absl::StrCat("cd '", dir_.string(), "' && ", command, " 2>>openssl.log >/dev/null");
    if (std::system(full.c_str()) != 0) {
      error_ = absl::StrCat("failed: ", command, "\n", ReadFileBytes(dir_ / "openssl.log"));
      return false;
    }
    return true;
  }
  bool Ca(const std::string& name) {
    return Run(absl::StrCat(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
        "-subj /CN=",
        name, " -keyout ", name, ".key -out ", name, ".pem"));
  }
  bool Leaf(const std::string& name, const std::string& ca, const std::string& usage) {
    std::ofstream(dir_ / (name + ".ext"))
        << "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=" << usage
        << "\nbasicConstraints=CA:FALSE\n";
    return Run(absl::StrCat("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                            "-nodes -subj /CN=localhost -keyout ",
                            name, ".key -out ", name, ".csr")) &&
           Run(absl::StrCat("openssl x509 -req -in ", name, ".csr -CA ", ca, ".pem -CAkey ", ca,
                            ".key -CAcreateserial -days 2 -extfile ", name, ".ext -out ", name,
                            ".pem"));
  }

  std::filesystem::path dir_;
  bool ok_ = false;
  std::string error_;
};

// Copies `from` over `to` atomically (write a temp file, rename).
inline void ReplaceFile(const std::string& from, const std::string& to) {
  const std::string tmp = to + ".tmp";
  std::filesystem::copy_file(from, tmp, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::rename(tmp, to);
}

}  // namespace jasper::test_util

#endif  // JASPER_TESTS_TEST_CERTS_H_
