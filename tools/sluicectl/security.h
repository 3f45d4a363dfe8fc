// sluicectl's security flags (--tls_ca, --tls_cert, --tls_key, --token_file), accepted by every
// command that takes --coordinator, and the channels they make. docs/SERVICE.md, "Security".
#ifndef SLUICE_CLIENT_SLUICECTL_SECURITY_H_
#define SLUICE_CLIENT_SLUICECTL_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "sluice/service.h"

namespace sluice {

// The flags' names, for the commands' accepted-flag lists.
inline constexpr const char* kSluicectlSecurityFlags[] = {"tls_ca", "tls_cert", "tls_key",
                                                          "token_file"};

// ServiceSecurity from the flags: TLS when --tls_ca or --tls_cert is set, the token read from
// --token_file. Errors name the flag and file.
absl::StatusOr<ServiceSecurity> SluicectlSecurity();

// A channel to `address` with SluicectlSecurity().
absl::StatusOr<std::shared_ptr<grpc::Channel>> SluicectlChannel(const std::string& address);

}  // namespace sluice

#endif  // SLUICE_CLIENT_SLUICECTL_SECURITY_H_
