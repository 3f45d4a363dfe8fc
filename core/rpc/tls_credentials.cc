#include "core/rpc/tls_credentials.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

// Loads a PEM file and checks that it holds a block of the expected kind ("CERTIFICATE",
// "PRIVATE KEY"), so that a swapped or truncated file is reported here, naming it, rather
// than as an opaque handshake failure later.
absl::StatusOr<std::string> ReadPem(const std::string& path, const std::string& what,
                                    const std::string& kind) {
  ASSIGN_OR_RETURN(std::string pem, ReadSecretFile(path, what));
  if (!absl::StrContains(pem, "-----BEGIN ") || !absl::StrContains(pem, kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, ": not a PEM file holding a ", kind));
  }
  return pem;
}

}  // namespace

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read ", path));
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) return absl::NotFoundError(absl::StrCat(what, ": cannot read ", path));
  std::string s = std::move(content).str();
  if (s.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", path, " is empty"));
  return s;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsServerFiles& files) {
  if (!files.enabled()) {
    if (files.client_auth) {
      return absl::InvalidArgumentError(
          "TLS client authentication (--tls_client_auth) needs a server certificate and key "
          "(--tls_cert, --tls_key)");
    }
    return grpc::InsecureServerCredentials();
  }
  if (files.cert_file.empty() || files.key_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS needs both a certificate (--tls_cert) and its private key (--tls_key)");
  }
  if (files.client_auth && files.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "TLS client authentication (--tls_client_auth) needs the CA that signs client "
        "certificates (--tls_ca)");
  }
  grpc::SslServerCredentialsOptions options(
      files.client_auth ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                        : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(files.cert_file, "--tls_cert", "CERTIFICATE"));
  ASSIGN_OR_RETURN(pair.private_key, ReadPem(files.key_file, "--tls_key", "PRIVATE KEY"));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!files.ca_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem(files.ca_file, "--tls_ca", "CERTIFICATE"));
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsChannelFiles& files) {
  if (!files.on()) return grpc::InsecureChannelCredentials();
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError(
        "a TLS client certificate needs both the certificate and its private key");
  }
  grpc::SslCredentialsOptions options;
  if (!files.ca_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem(files.ca_file, "--tls_ca", "CERTIFICATE"));
  }
  if (!files.cert_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_cert_chain,
                     ReadPem(files.cert_file, "TLS client certificate", "CERTIFICATE"));
    ASSIGN_OR_RETURN(options.pem_private_key,
                     ReadPem(files.key_file, "TLS client key", "PRIVATE KEY"));
  }
  return grpc::SslCredentials(options);
}

}  // namespace sluice
