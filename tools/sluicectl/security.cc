#include "tools/sluicectl/security.h"

#include "absl/flags/flag.h"
#include "client/service_security.h"
#include "core/util/status_macros.h"
#include "core/rpc/token_auth.h"

ABSL_FLAG(std::string, tls_ca, "",
          "Service mode: PEM CA certificates the coordinator's and workers' certificates must "
          "chain to; turns TLS on.");
ABSL_FLAG(std::string, tls_cert, "",
          "Service mode: this client's PEM certificate, for a service requiring client "
          "certificates (mTLS); needs --tls_key.");
ABSL_FLAG(std::string, tls_key, "", "Service mode: the private key of --tls_cert.");
ABSL_FLAG(std::string, token_file, "",
          "Service mode: file holding the token sent on every call: the service's shared token, "
          "or with per-role tokens the trainer token (register, run, element-spec) or the "
          "admin token (status, register).");

namespace sluice {

absl::StatusOr<ServiceSecurity> SluicectlSecurity() {
  ServiceSecurity s;
  s.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  s.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  s.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  s.tls = !s.tls_ca_file.empty() || !s.tls_cert_file.empty();
  if (const std::string path = absl::GetFlag(FLAGS_token_file); !path.empty()) {
    ASSIGN_OR_RETURN(s.token, ReadTokenFile(path));
  }
  return s;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> SluicectlChannel(const std::string& address) {
  ASSIGN_OR_RETURN(ServiceSecurity security, SluicectlSecurity());
  ASSIGN_OR_RETURN(ChannelFactory channels, ServiceChannelFactory(security));
  return channels(address);
}

}  // namespace sluice
