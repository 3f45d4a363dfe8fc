// The channels a service client dials with: ServiceOptions.security (TLS, client certificate,
// token) made into a ChannelFactory for the coordinator and every worker. docs/SERVICE.md,
// "Security".
//
// Thread safety: the factory may be called from any thread.
#ifndef SLUICE_CLIENT_SERVICE_SECURITY_H_
#define SLUICE_CLIENT_SERVICE_SECURITY_H_

#include "absl/status/statusor.h"
#include "client/service_step_source.h"
#include "sluice/service.h"

namespace sluice {

// LimitedChannel(address, limits) when `security` asks for nothing; else channels with TLS
// credentials and/or the token on every call, otherwise the same (`limits`, a connection of
// their own). NOT_FOUND naming an unreadable file, INVALID_ARGUMENT for a file that is not PEM
// or a certificate without its key.
absl::StatusOr<ChannelFactory> ServiceChannelFactory(const ServiceSecurity& security,
                                                     const ChannelLimits& limits = {});

}  // namespace sluice

#endif  // SLUICE_CLIENT_SERVICE_SECURITY_H_
