#include "client/service_security.h"

#include "core/rpc/grpc_security.h"
#include "core/util/status_macros.h"

namespace sluice {

absl::StatusOr<ChannelFactory> ServiceChannelFactory(const ServiceSecurity& security,
                                                     const ChannelLimits& limits) {
  ChannelSecurity c;
  c.tls.enabled = security.tls;
  c.tls.ca_file = security.tls_ca_file;
  c.tls.cert_file = security.tls_cert_file;
  c.tls.key_file = security.tls_key_file;
  c.tls_server_name = security.tls_server_name;
  c.token = security.token;
  c.limits = limits;
  if (!c.tls.on() && c.token.empty()) {
    return ChannelFactory(
        [limits](const std::string& address) { return LimitedChannel(address, limits); });
  }
  ASSIGN_OR_RETURN(GrpcChannelFactory channels, MakeChannelFactory(c));
  return ChannelFactory(std::move(channels));
}

}  // namespace sluice
