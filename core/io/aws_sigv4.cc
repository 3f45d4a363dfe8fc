#include "core/io/aws_sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace sluice {
namespace {

std::string Hmac(absl::string_view key, absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

// Trims and collapses runs of spaces, as the canonical header value wants.
std::string CanonicalHeaderValue(absl::string_view v) {
  v = absl::StripAsciiWhitespace(v);
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = true;
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> SortedHeaders(const SigV4Request& r) {
  std::vector<std::pair<std::string, std::string>> h;
  for (const auto& [name, value] : r.headers) {
    h.emplace_back(absl::AsciiStrToLower(name), CanonicalHeaderValue(value));
  }
  std::stable_sort(h.begin(), h.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return h;
}

std::string DateOf(const SigV4Scope& scope) { return scope.amz_date.substr(0, 8); }

std::string CredentialScope(const SigV4Scope& scope) {
  return absl::StrCat(DateOf(scope), "/", scope.region, "/", scope.service, "/aws4_request");
}

}  // namespace

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) {
    const char* v = std::getenv(name.c_str());
    return v == nullptr ? std::string() : std::string(v);
  };
}

AwsCredentials ParseAwsCredentialsFile(absl::string_view text, absl::string_view profile) {
  AwsCredentials c;
  bool in_profile = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      in_profile = absl::StripAsciiWhitespace(line.substr(1, line.size() - 2)) == profile;
      continue;
    }
    if (!in_profile) continue;
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    const std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, eq)));
    const std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    if (key == "aws_access_key_id") c.access_key_id = value;
    if (key == "aws_secret_access_key") c.secret_access_key = value;
    if (key == "aws_session_token") c.session_token = value;
  }
  return c;
}

absl::StatusOr<AwsCredentials> LoadAwsCredentials(const EnvLookup& env) {
  AwsCredentials c;
  c.access_key_id = env("AWS_ACCESS_KEY_ID");
  c.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
  c.session_token = env("AWS_SESSION_TOKEN");
  if (!c.access_key_id.empty()) {
    if (c.secret_access_key.empty()) {
      return absl::InvalidArgumentError(
          "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
    }
    return c;
  }
  std::string file = env("AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty()) {
    const std::string home = env("HOME");
    if (home.empty()) return AwsCredentials{};
    file = absl::StrCat(home, "/.aws/credentials");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return AwsCredentials{};
  std::stringstream ss;
  ss << in.rdbuf();
  std::string profile = env("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  AwsCredentials from_file = ParseAwsCredentialsFile(ss.str(), profile);
  if (!from_file.access_key_id.empty() && from_file.secret_access_key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("profile [", profile, "] of ", file,
                                                   " has aws_access_key_id but no "
                                                   "aws_secret_access_key"));
  }
  return from_file;
}

std::string AmzDate(absl::Time t) {
  return absl::FormatTime("%Y%m%dT%H%M%SZ", t, absl::UTCTimeZone());
}

std::string UriEncode(absl::string_view s, bool encode_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (c == '/' && !encode_slash)) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

std::string SigV4CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> q;
  for (const auto& [k, v] : query) q.emplace_back(UriEncode(k, true), UriEncode(v, true));
  std::sort(q.begin(), q.end());
  std::vector<std::string> parts;
  for (const auto& [k, v] : q) parts.push_back(absl::StrCat(k, "=", v));
  return absl::StrJoin(parts, "&");
}

std::string SigV4SignedHeaders(const SigV4Request& request) {
  std::vector<std::string> names;
  for (const auto& [name, unused] : SortedHeaders(request)) names.push_back(name);
  return absl::StrJoin(names, ";");
}

std::string SigV4CanonicalRequest(const SigV4Request& request) {
  std::string headers;
  for (const auto& [name, value] : SortedHeaders(request)) {
    absl::StrAppend(&headers, name, ":", value, "\n");
  }
  return absl::StrCat(request.method, "\n", request.canonical_uri, "\n",
                      SigV4CanonicalQuery(request.query), "\n", headers, "\n",
                      SigV4SignedHeaders(request), "\n", request.payload_hash);
}

std::string SigV4StringToSign(const SigV4Scope& scope, absl::string_view canonical_request) {
  return absl::StrCat("AWS4-HMAC-SHA256\n", scope.amz_date, "\n", CredentialScope(scope), "\n",
                      Sha256Hex(canonical_request));
}

std::string SigV4Signature(absl::string_view secret, const SigV4Scope& scope,
                           absl::string_view string_to_sign) {
  const std::string k_date = Hmac(absl::StrCat("AWS4", secret), DateOf(scope));
  const std::string k_region = Hmac(k_date, scope.region);
  const std::string k_service = Hmac(k_region, scope.service);
  const std::string k_signing = Hmac(k_service, "aws4_request");
  return absl::BytesToHexString(Hmac(k_signing, string_to_sign));
}

std::string SigV4Authorization(const AwsCredentials& credentials, const SigV4Scope& scope,
                               const SigV4Request& request) {
  const std::string signature =
      SigV4Signature(credentials.secret_access_key, scope,
                     SigV4StringToSign(scope, SigV4CanonicalRequest(request)));
  return absl::StrCat("AWS4-HMAC-SHA256 Credential=", credentials.access_key_id, "/",
                      CredentialScope(scope), ", SignedHeaders=", SigV4SignedHeaders(request),
                      ", Signature=", signature);
}

}  // namespace sluice
