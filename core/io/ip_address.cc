#include "core/io/ip_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace sluice {
namespace {

// True when the first `bits` bits of `a` (length `n` bytes) equal those of `prefix`.
bool HasPrefix(const uint8_t* a, const uint8_t* prefix, int bits) {
  for (int i = 0; i < bits / 8; ++i) {
    if (a[i] != prefix[i]) return false;
  }
  if (bits % 8 == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - bits % 8));
  return (a[bits / 8] & mask) == (prefix[bits / 8] & mask);
}

bool V4In(const uint8_t* a, uint8_t p0, uint8_t p1, uint8_t p2, int bits) {
  const uint8_t prefix[4] = {p0, p1, p2, 0};
  return HasPrefix(a, prefix, bits);
}

AddressClass ClassifyV4(const uint8_t* a) {
  if (V4In(a, 0, 0, 0, 8)) return AddressClass::kUnspecified;
  if (V4In(a, 127, 0, 0, 8)) return AddressClass::kLoopback;
  if (V4In(a, 169, 254, 0, 16)) return AddressClass::kLinkLocal;
  if (V4In(a, 10, 0, 0, 8) || V4In(a, 172, 16, 0, 12) || V4In(a, 192, 168, 0, 16) ||
      V4In(a, 100, 64, 0, 10)) {
    return AddressClass::kPrivate;
  }
  if (a[0] == 255 && a[1] == 255 && a[2] == 255 && a[3] == 255) return AddressClass::kMulticast;
  if (V4In(a, 224, 0, 0, 4)) return AddressClass::kMulticast;
  if (V4In(a, 240, 0, 0, 4) || V4In(a, 192, 0, 0, 24) || V4In(a, 198, 18, 0, 15)) {
    return AddressClass::kReserved;
  }
  return AddressClass::kPublic;
}

bool V6In(const uint8_t* a, std::initializer_list<uint8_t> prefix_bytes, int bits) {
  uint8_t prefix[16] = {};
  int i = 0;
  for (uint8_t b : prefix_bytes) prefix[i++] = b;
  return HasPrefix(a, prefix, bits);
}

AddressClass ClassifyV6(const uint8_t* a) {
  static const uint8_t kZero[16] = {};
  if (std::memcmp(a, kZero, 16) == 0) return AddressClass::kUnspecified;
  if (std::memcmp(a, kZero, 15) == 0 && a[15] == 1) return AddressClass::kLoopback;
  // Embedded IPv4: mapped, NAT64 well-known prefix, 6to4.
  if (V6In(a, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 96)) return ClassifyV4(a + 12);
  if (V6In(a, {0x00, 0x64, 0xff, 0x9b}, 96)) return ClassifyV4(a + 12);
  if (V6In(a, {0x20, 0x02}, 16)) return ClassifyV4(a + 2);
  if (V6In(a, {}, 96)) return AddressClass::kReserved;  // IPv4-compatible (deprecated)
  if (V6In(a, {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48)) return AddressClass::kPrivate;
  if (V6In(a, {0xfe, 0x80}, 10)) return AddressClass::kLinkLocal;
  if (V6In(a, {0xfe, 0xc0}, 10) || V6In(a, {0xfc}, 7)) return AddressClass::kPrivate;
  if (V6In(a, {0xff}, 8)) return AddressClass::kMulticast;
  if (V6In(a, {0x01, 0x00}, 64) || V6In(a, {0x20, 0x01, 0x00, 0x00}, 32)) {
    return AddressClass::kReserved;
  }
  return AddressClass::kPublic;
}

}  // namespace

absl::StatusOr<IpAddress> IpAddress::Parse(absl::string_view text) {
  const std::string s(text);
  IpAddress out;
  if (inet_pton(AF_INET, s.c_str(), out.bytes.data()) == 1) return out;
  if (inet_pton(AF_INET6, s.c_str(), out.bytes.data()) == 1) {
    out.v6 = true;
    return out;
  }
  return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not an IP address"));
}

absl::StatusOr<IpAddress> IpAddress::FromSockaddr(const sockaddr* sa, socklen_t len) {
  IpAddress out;
  if (sa != nullptr && sa->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    std::memcpy(out.bytes.data(), &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, 4);
    return out;
  }
  if (sa != nullptr && sa->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    out.v6 = true;
    std::memcpy(out.bytes.data(), &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, 16);
    return out;
  }
  return absl::InvalidArgumentError("not an IPv4 or IPv6 socket address");
}

std::string IpAddress::ToString() const {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(v6 ? AF_INET6 : AF_INET, bytes.data(), text, sizeof(text));
  return text;
}

AddressClass ClassifyAddress(const IpAddress& address) {
  return address.v6 ? ClassifyV6(address.bytes.data()) : ClassifyV4(address.bytes.data());
}

const char* AddressClassName(AddressClass c) {
  switch (c) {
    case AddressClass::kPublic:
      return "public";
    case AddressClass::kLoopback:
      return "loopback";
    case AddressClass::kLinkLocal:
      return "link-local";
    case AddressClass::kPrivate:
      return "private-network";
    case AddressClass::kUnspecified:
      return "unspecified";
    case AddressClass::kMulticast:
      return "multicast/broadcast";
    case AddressClass::kReserved:
      return "reserved";
  }
  return "unknown";
}

}  // namespace sluice
