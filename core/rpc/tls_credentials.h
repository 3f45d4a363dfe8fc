// gRPC TLS credentials from PEM files: what the coordinator and workers serve with, and what
// every client (consumers, sluicectl, a worker dialing the coordinator) dials with.
//
//   TlsServerFiles tls{.cert_file = "server.pem", .key_file = "server.key",
//                      .ca_file = "ca.pem", .client_auth = true};   // mTLS
//   ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds, MakeServerCredentials(tls));
//
// Files are read when the credentials are made (a rotated certificate takes a restart). No
// file content is ever logged or put in an error message; errors name the file.
//
// Thread safety: the functions are thread-safe.
#ifndef SLUICE_CORE_TLS_CREDENTIALS_H_
#define SLUICE_CORE_TLS_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace sluice {

// A server's TLS identity and how it checks clients. All empty: plaintext.
struct TlsServerFiles {
  // PEM certificate chain and private key of this server. Both or neither.
  std::string cert_file = {};
  std::string key_file = {};
  // PEM roots that client certificates must chain to (used with client_auth).
  std::string ca_file = {};
  // Mutual TLS: require a client certificate signed by ca_file; a client without one, or
  // with one from another CA, fails the handshake.
  bool client_auth = false;

  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// How a client dials a TLS server.
struct TlsChannelFiles {
  // Dial with TLS (also implied by any file below being set).
  bool enabled = false;
  // PEM roots the server's certificate must chain to; empty: gRPC's default roots.
  std::string ca_file = {};
  // The client's certificate chain and key, for servers that require mTLS. Both or neither.
  std::string cert_file = {};
  std::string key_file = {};

  bool on() const {
    return enabled || !ca_file.empty() || !cert_file.empty() || !key_file.empty();
  }
};

// The whole content of `path`. NOT_FOUND naming `what` ("--tls_cert") and the path when it
// cannot be read, INVALID_ARGUMENT when it is empty.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, const std::string& what);

// Plaintext credentials when !files.enabled(); else SSL server credentials. INVALID_ARGUMENT
// for a cert without a key (or the reverse), client_auth without ca_file, or a file that is
// not PEM of the expected kind; NOT_FOUND naming an unreadable file. client_auth without TLS
// is INVALID_ARGUMENT too.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsServerFiles& files);

// Insecure credentials when !files.on(); else SSL channel credentials. Same errors as above.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsChannelFiles& files);

}  // namespace sluice

#endif  // SLUICE_CORE_TLS_CREDENTIALS_H_
