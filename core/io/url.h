// Url: a remote data URL taken apart and normalized, so that access rules (core/data/data_roots.h,
// core/io/remote_access.h) compare what will be fetched rather than how it was spelled.
//
//   ASSIGN_OR_RETURN(Url u, NormalizeUrl("HTTP://Example.COM:80/a/./b/%2e%2e/c//d?x=1"));
//   u.ToString();            // "http://example.com/a/c/d?x=1"
//   RedactUrl("https://user:pw@host/p?sig=abc");   // "https://host/p" (for errors and logs)
//
// Normalization (RFC 3986 section 6, plus what servers are known to collapse):
//   - scheme and host in lower case; one trailing dot of the host dropped;
//   - the port dropped when it is the scheme's default (http 80, https 443);
//   - a numeric IPv4 host in any form inet_aton(3) and URL parsers accept (decimal
//     "2852039166", hex "0xA9FEA9FE", octal "0251.0376.0251.0376", short "127.1") written as a
//     dotted quad; an IPv6 host ("[::ffff:a9fe:a9fe]") in its canonical inet_ntop(3) form;
//   - percent-encoded unreserved characters (ALPHA DIGIT - . _ ~) decoded, other escapes with
//     upper-case hex;
//   - empty path segments (duplicate slashes) removed and `.` / `..` segments applied.
// Refused with INVALID_ARGUMENT naming the redacted URL: no "scheme://", a bad escape ("%zz"),
// an IPv6 zone ("%25eth0"), a port that is not a number in [1, 65535], a host that ends in a
// number but is no IPv4 address ("1.2.3.999"), a `..` that climbs above the path's root (for
// path-style object stores that would name another bucket), and an encoded or literal
// backslash or an encoded slash in the path ("%2F", "%5C", "\"), which some servers turn into
// separators after the check.
//
// Thread safety: pure functions; thread-safe.
#ifndef SLUICE_CORE_IO_URL_H_
#define SLUICE_CORE_IO_URL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice {

struct Url {
  std::string scheme;    // lower case: "http", "s3"
  std::string userinfo;  // as given (never printed by ToString(false))
  std::string host;      // lower case; IPv6 without brackets; for s3:// and gs:// the bucket
  int port = 0;          // 0: none given, or the scheme's default
  std::string path;      // "/..." (or empty)
  std::string query;     // without '?'
  bool has_query = false;
  // Everything after the authority as given (path and query; the fragment dropped).
  std::string raw_path_and_query;

  // "scheme://[userinfo@]host[:port]path[?query]"; the userinfo only with `with_userinfo`.
  std::string ToString(bool with_userinfo = false) const;
  // The port a connection goes to: `port`, else the scheme's default (0 when it has none).
  int EffectivePort() const;
  // "host" or "[v6]", with ":port" when a non-default port is set.
  std::string Authority() const;
};

// `url` split into its parts, with no normalization (only the scheme lower-cased).
// INVALID_ARGUMENT naming the redacted URL when it has no "scheme://".
absl::StatusOr<Url> ParseUrl(absl::string_view url);

// `url` parsed and normalized as described above. INVALID_ARGUMENT as described above.
absl::StatusOr<Url> NormalizeUrl(absl::string_view url);

// `url` without userinfo, query and fragment, for errors and logs (a presigned URL's signature
// or a password must not end up there). Text without "scheme://" (a local path) comes back as
// given.
std::string RedactUrl(absl::string_view url);

// A numeric IPv4 host in any form inet_aton(3) accepts (1 to 4 parts, each decimal, 0x-hex or
// 0-octal; the last part fills the remaining bytes) as a dotted quad; an empty string when
// `host` is not one.
std::string CanonicalIpv4Host(absl::string_view host);

}  // namespace sluice

#endif  // SLUICE_CORE_IO_URL_H_
