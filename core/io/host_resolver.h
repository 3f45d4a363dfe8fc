// HostResolver: a DNS name to the addresses a connection may use, behind an interface so that
// the remote-access checks (core/io/remote_access.h) are tested with names that resolve where a
// test says, without a DNS query.
//
// Thread safety: implementations are thread-safe.
#ifndef SLUICE_CORE_IO_HOST_RESOLVER_H_
#define SLUICE_CORE_IO_HOST_RESOLVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/ip_address.h"

namespace sluice {

class HostResolver {
 public:
  virtual ~HostResolver() = default;
  // Every address of `host` (a name, never an IP literal), in the order to try them.
  // UNAVAILABLE naming the host when it does not resolve (retried like any transport error);
  // never an empty list.
  virtual absl::StatusOr<std::vector<IpAddress>> Resolve(const std::string& host) = 0;
};

// getaddrinfo(3), TCP, IPv4 and IPv6.
std::shared_ptr<HostResolver> NewSystemHostResolver();

}  // namespace sluice

#endif  // SLUICE_CORE_IO_HOST_RESOLVER_H_
