#include "core/io/url.h"

#include <arpa/inet.h>

#include <cstdint>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

int DefaultPort(absl::string_view scheme) {
  if (scheme == "http") return 80;
  if (scheme == "https") return 443;
  return 0;
}

// Schemes whose host is a network host (an address or a DNS name), not a bucket.
bool HostIsNetworkHost(absl::string_view scheme) { return scheme == "http" || scheme == "https"; }

absl::Status Bad(absl::string_view url, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("malformed URL ", RedactUrl(url), ": ", why));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsUnreserved(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
         c == '~';
}

// One part of a numeric IPv4 host: decimal, 0x-hex or 0-octal. False when it is none of them
// or exceeds 2^32.
bool ParseIpv4Part(absl::string_view part, uint64_t* value) {
  if (part.empty()) return false;
  int base = 10;
  if (part.size() >= 2 && part[0] == '0' && (part[1] == 'x' || part[1] == 'X')) {
    base = 16;
    part.remove_prefix(2);
  } else if (part.size() >= 2 && part[0] == '0') {
    base = 8;
    part.remove_prefix(1);
  }
  uint64_t v = 0;
  for (char c : part) {
    const int d = HexValue(c);
    if (d < 0 || d >= base) return false;
    v = v * base + d;
    if (v > 0xffffffffULL) return false;
  }
  *value = v;
  return true;
}

// True when the last label of `host` is a number (decimal or 0x-hex): such a host is an IPv4
// address to URL parsers, or malformed; never a name.
bool EndsInNumber(absl::string_view host) {
  const size_t dot = host.rfind('.');
  absl::string_view last = dot == absl::string_view::npos ? host : host.substr(dot + 1);
  if (last.empty()) return false;
  if (last.size() >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X')) {
    for (char c : last.substr(2)) {
      if (HexValue(c) < 0) return false;
    }
    return true;
  }
  for (char c : last) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

absl::StatusOr<std::string> NormalizeHost(absl::string_view url, const Url& u) {
  std::string host = absl::AsciiStrToLower(u.host);
  if (host.find('%') != std::string::npos) {
    return Bad(url, "the host may not hold '%' (escapes or an IPv6 zone)");
  }
  if (!host.empty() && host.find(':') != std::string::npos) {
    in6_addr a;
    if (inet_pton(AF_INET6, host.c_str(), &a) != 1) return Bad(url, "an invalid IPv6 host");
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &a, text, sizeof(text));
    return std::string(text);
  }
  if (absl::EndsWith(host, ".")) host.pop_back();
  if (host.empty()) return Bad(url, "no host");
  if (!HostIsNetworkHost(u.scheme)) return host;
  for (char c : host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') {
      return Bad(url, absl::StrCat("the host holds '", std::string(1, c), "'"));
    }
  }
  const std::string v4 = CanonicalIpv4Host(host);
  if (!v4.empty()) return v4;
  if (EndsInNumber(host)) return Bad(url, "the host ends in a number but is no IPv4 address");
  return host;
}

// Decodes escaped unreserved characters, upper-cases the other escapes.
absl::StatusOr<std::string> NormalizeEscapes(absl::string_view url, absl::string_view path) {
  std::string out;
  out.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (c == '\\') return Bad(url, "a backslash in the path");
    if (c != '%') {
      out.push_back(c);
      continue;
    }
    if (i + 2 >= path.size()) return Bad(url, "a bad escape");
    const int hi = HexValue(path[i + 1]);
    const int lo = HexValue(path[i + 2]);
    if (hi < 0 || lo < 0) return Bad(url, "a bad escape");
    const char decoded = static_cast<char>(hi * 16 + lo);
    if (decoded == '/' || decoded == '\\') {
      return Bad(url, "an encoded slash or backslash in the path");
    }
    if (IsUnreserved(decoded)) {
      out.push_back(decoded);
    } else {
      absl::StrAppend(&out, "%", std::string(1, "0123456789ABCDEF"[hi]),
                      std::string(1, "0123456789ABCDEF"[lo]));
    }
    i += 2;
  }
  return out;
}

absl::StatusOr<std::string> NormalizePath(absl::string_view url, absl::string_view raw) {
  ASSIGN_OR_RETURN(std::string path, NormalizeEscapes(url, raw));
  std::vector<std::string> kept;
  const std::vector<std::string> segments = absl::StrSplit(path, '/');
  for (const std::string& s : segments) {
    if (s.empty() || s == ".") continue;
    if (s == "..") {
      if (kept.empty()) return Bad(url, "'..' climbs above the root of the path");
      kept.pop_back();
      continue;
    }
    kept.push_back(s);
  }
  if (kept.empty()) return path.empty() ? std::string() : std::string("/");
  std::string out = absl::StrCat("/", absl::StrJoin(kept, "/"));
  const bool folder = absl::EndsWith(path, "/") || absl::EndsWith(path, "/.") ||
                      absl::EndsWith(path, "/..");
  if (folder) out.push_back('/');
  return out;
}

}  // namespace

std::string CanonicalIpv4Host(absl::string_view host) {
  if (host.empty()) return "";
  const std::vector<absl::string_view> parts = absl::StrSplit(host, '.');
  if (parts.size() > 4) return "";
  uint64_t value = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    uint64_t v = 0;
    if (!ParseIpv4Part(parts[i], &v)) return "";
    const bool last = i + 1 == parts.size();
    if (!last) {
      if (v > 255) return "";
      value = (value << 8) | v;
      continue;
    }
    const int rest_bytes = 4 - static_cast<int>(i);
    if (rest_bytes < 4 && v >= (uint64_t{1} << (8 * rest_bytes))) return "";
    value = (value << (8 * rest_bytes)) | v;
  }
  return absl::StrCat((value >> 24) & 255, ".", (value >> 16) & 255, ".", (value >> 8) & 255, ".",
                      value & 255);
}

std::string Url::ToString(bool with_userinfo) const {
  std::string out = absl::StrCat(scheme, "://");
  if (with_userinfo && !userinfo.empty()) absl::StrAppend(&out, userinfo, "@");
  absl::StrAppend(&out, Authority(), path);
  if (has_query) absl::StrAppend(&out, "?", query);
  return out;
}

int Url::EffectivePort() const { return port != 0 ? port : DefaultPort(scheme); }

std::string Url::Authority() const {
  std::string out = host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host;
  if (port != 0 && port != DefaultPort(scheme)) absl::StrAppend(&out, ":", port);
  return out;
}

absl::StatusOr<Url> ParseUrl(absl::string_view url) {
  const size_t sep = url.find("://");
  if (sep == absl::string_view::npos || sep == 0) return Bad(url, "no scheme://");
  Url u;
  u.scheme = absl::AsciiStrToLower(url.substr(0, sep));
  for (char c : u.scheme) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') {
      return Bad(url, "an invalid scheme");
    }
  }
  absl::string_view rest = url.substr(sep + 3);
  if (const size_t hash = rest.find('#'); hash != absl::string_view::npos) {
    rest = rest.substr(0, hash);
  }
  const size_t end = rest.find_first_of("/?");
  absl::string_view authority = rest.substr(0, end);
  u.raw_path_and_query = end == absl::string_view::npos ? "" : std::string(rest.substr(end));
  if (const size_t at = authority.rfind('@'); at != absl::string_view::npos) {
    u.userinfo = std::string(authority.substr(0, at));
    authority.remove_prefix(at + 1);
  }
  absl::string_view port;
  if (absl::StartsWith(authority, "[")) {
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) return Bad(url, "an unclosed '[' in the host");
    u.host = std::string(authority.substr(1, close - 1));
    absl::string_view after = authority.substr(close + 1);
    if (!after.empty() && !absl::ConsumePrefix(&after, ":")) return Bad(url, "junk after ']'");
    port = after;
  } else {
    const size_t colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != absl::string_view::npos) port = authority.substr(colon + 1);
  }
  if (!port.empty()) {
    for (char c : port) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return Bad(url, "a bad port");
    }
    if (port.size() > 5 || !absl::SimpleAtoi(port, &u.port) || u.port < 1 || u.port > 65535) {
      return Bad(url, "a port outside [1, 65535]");
    }
  }
  absl::string_view path_and_query = u.raw_path_and_query;
  const size_t q = path_and_query.find('?');
  u.path = std::string(path_and_query.substr(0, q));
  if (q != absl::string_view::npos) {
    u.has_query = true;
    u.query = std::string(path_and_query.substr(q + 1));
  }
  return u;
}

absl::StatusOr<Url> NormalizeUrl(absl::string_view url) {
  ASSIGN_OR_RETURN(Url u, ParseUrl(url));
  ASSIGN_OR_RETURN(u.host, NormalizeHost(url, u));
  if (u.port == DefaultPort(u.scheme)) u.port = 0;
  ASSIGN_OR_RETURN(u.path, NormalizePath(url, u.path));
  return u;
}

std::string RedactUrl(absl::string_view url) {
  const size_t sep = url.find("://");
  if (sep == absl::string_view::npos || sep == 0) return std::string(url);
  absl::string_view rest = url.substr(sep + 3);
  rest = rest.substr(0, rest.find_first_of("?#"));
  const size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  if (const size_t at = authority.rfind('@'); at != absl::string_view::npos) {
    authority.remove_prefix(at + 1);
  }
  return absl::StrCat(url.substr(0, sep + 3), authority,
                      slash == absl::string_view::npos ? "" : rest.substr(slash));
}

}  // namespace sluice
