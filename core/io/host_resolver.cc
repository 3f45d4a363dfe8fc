#include "core/io/host_resolver.h"

#include <netdb.h>
#include <sys/socket.h>

#include "absl/strings/str_cat.h"

namespace sluice {
namespace {

class SystemHostResolver : public HostResolver {
 public:
  absl::StatusOr<std::vector<IpAddress>> Resolve(const std::string& host) override {
    addrinfo hints = {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
    if (rc != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot resolve host ", host, ": ", gai_strerror(rc)));
    }
    std::vector<IpAddress> out;
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
      absl::StatusOr<IpAddress> ip = IpAddress::FromSockaddr(a->ai_addr, a->ai_addrlen);
      if (!ip.ok()) continue;
      bool seen = false;
      for (const IpAddress& o : out) seen |= o == *ip;
      if (!seen) out.push_back(*ip);
    }
    freeaddrinfo(found);
    if (out.empty()) {
      return absl::UnavailableError(absl::StrCat("host ", host, " has no IP address"));
    }
    return out;
  }
};

}  // namespace

std::shared_ptr<HostResolver> NewSystemHostResolver() {
  return std::make_shared<SystemHostResolver>();
}

}  // namespace sluice
