// IpAddress and its class: which addresses a worker may fetch data from without being told to.
//
//   absl::StatusOr<IpAddress> a = IpAddress::Parse("169.254.169.254");
//   ClassifyAddress(*a);   // AddressClass::kLinkLocal: the cloud metadata service
//
// Only kPublic addresses are reachable by default (core/io/remote_access.h). The rest:
//   kLoopback     127.0.0.0/8, ::1
//   kLinkLocal    169.254.0.0/16, fe80::/10 (cloud metadata services live here)
//   kPrivate      10/8, 172.16/12, 192.168/16, 100.64/10 (CGNAT), fc00::/7 (ULA, also AWS's
//                 fd00:ec2::254), fec0::/10 (site-local), 64:ff9b:1::/48 (local NAT64)
//   kUnspecified  0.0.0.0/8, ::
//   kMulticast    224.0.0.0/4, ff00::/8, and 255.255.255.255
//   kReserved     240.0.0.0/4, 192.0.0.0/24, 198.18.0.0/15, 100::/64, 2001::/32 (Teredo: its
//                 IPv4 part is obscured), ::/96 other than :: and ::1
// An IPv6 address that embeds an IPv4 address (mapped ::ffff:0:0/96, NAT64 64:ff9b::/96, 6to4
// 2002::/16) has the class of the embedded address: "::ffff:169.254.169.254" is link-local.
//
// Thread safety: value type; pure functions.
#ifndef SLUICE_CORE_IO_IP_ADDRESS_H_
#define SLUICE_CORE_IO_IP_ADDRESS_H_

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice {

struct IpAddress {
  bool v6 = false;
  // IPv4 in bytes[0..3]; IPv6 in all 16. Network byte order.
  std::array<uint8_t, 16> bytes = {};

  // A dotted quad or an IPv6 address (no brackets, no zone), as inet_pton(3) reads them.
  // INVALID_ARGUMENT otherwise.
  static absl::StatusOr<IpAddress> Parse(absl::string_view text);
  // From an AF_INET / AF_INET6 socket address. INVALID_ARGUMENT for other families.
  static absl::StatusOr<IpAddress> FromSockaddr(const sockaddr* sa, socklen_t len);

  // "1.2.3.4" or the canonical IPv6 text (no brackets).
  std::string ToString() const;
  friend bool operator==(const IpAddress& a, const IpAddress& b) {
    return a.v6 == b.v6 && a.bytes == b.bytes;
  }
};

enum class AddressClass {
  kPublic,
  kLoopback,
  kLinkLocal,
  kPrivate,
  kUnspecified,
  kMulticast,
  kReserved,
};

AddressClass ClassifyAddress(const IpAddress& address);
// "public", "loopback", "link-local", ... for messages.
const char* AddressClassName(AddressClass c);

}  // namespace sluice

#endif  // SLUICE_CORE_IO_IP_ADDRESS_H_
