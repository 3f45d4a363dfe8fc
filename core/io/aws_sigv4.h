// AWS Signature Version 4 (the `Authorization: AWS4-HMAC-SHA256 ...` header S3, GCS's XML API
// with HMAC keys and S3-compatible stores check), and the credentials it signs with.
//
//   SigV4Request r{.method = "GET", .canonical_uri = "/bucket/key", .headers = {{"host", h}, ...},
//                  .payload_hash = kEmptySha256};
//   const std::string authorization = SigV4Authorization(credentials, scope, r);
//
// The signer follows AWS's "Create a signed AWS API request": canonical request (method, URI,
// sorted and encoded query, lower-cased sorted headers with trimmed values, signed-header list,
// payload hash), string to sign, a key derived from the secret by the date, region and service,
// and HMAC-SHA256. Every header given is signed. The canonical URI is used as given (S3 does not
// normalise or re-encode paths), so it must already be URI-encoded (UriEncode(key, false)).
// Checked against AWS's published test vectors in tests/core/aws_sigv4_test.cc.
//
// Thread safety: functions only; thread-safe.
#ifndef SLUICE_CORE_AWS_SIGV4_H_
#define SLUICE_CORE_AWS_SIGV4_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sluice {

// SHA-256 of the empty payload, hex: what a GET or HEAD signs as its payload hash.
inline constexpr char kEmptySha256[] =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // sent as x-amz-security-token when set
  // No key: requests go unsigned (public buckets).
  bool anonymous() const { return access_key_id.empty(); }
};

// The environment as a function (tests pass a map); "" for an unset variable.
using EnvLookup = std::function<std::string(const std::string& name)>;
// getenv(3).
EnvLookup ProcessEnvironment();

// Credentials as the AWS SDKs look them up: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
// AWS_SESSION_TOKEN, else the profile AWS_PROFILE (default "default") of the shared credentials
// file AWS_SHARED_CREDENTIALS_FILE (default $HOME/.aws/credentials). Anonymous when neither has
// a key. INVALID_ARGUMENT naming the variable or the file when a key comes without its secret.
absl::StatusOr<AwsCredentials> LoadAwsCredentials(const EnvLookup& env);
// The [profile] section of an INI credentials file's text (aws_access_key_id,
// aws_secret_access_key, aws_session_token); anonymous when the profile is absent.
AwsCredentials ParseAwsCredentialsFile(absl::string_view text, absl::string_view profile);

struct SigV4Scope {
  std::string region;    // "us-east-1"; GCS: "auto"
  std::string service;   // "s3"
  std::string amz_date;  // the request time as AmzDate() writes it: "20150830T123600Z"
};

struct SigV4Request {
  std::string method;         // "GET"
  std::string canonical_uri;  // URI-encoded path, "/" at least
  // Query parameters, not encoded; encoded and sorted by the signer.
  std::vector<std::pair<std::string, std::string>> query;
  // Every header to sign (names in any case); must include host and x-amz-date.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_hash = kEmptySha256;  // hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
};

// "YYYYMMDDTHHMMSSZ" in UTC.
std::string AmzDate(absl::Time t);
// RFC 3986 percent-encoding as AWS wants it: everything but A-Z a-z 0-9 - _ . ~ is %XX
// (upper-case hex); '/' is kept unless `encode_slash`.
std::string UriEncode(absl::string_view s, bool encode_slash);
// Lower-case hex SHA-256.
std::string Sha256Hex(absl::string_view data);

// The steps, exposed for the test vectors.
std::string SigV4CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);
std::string SigV4SignedHeaders(const SigV4Request& request);
std::string SigV4CanonicalRequest(const SigV4Request& request);
std::string SigV4StringToSign(const SigV4Scope& scope, absl::string_view canonical_request);
// Hex HMAC-SHA256 of `string_to_sign` under the key derived from `secret` for `scope`.
std::string SigV4Signature(absl::string_view secret, const SigV4Scope& scope,
                           absl::string_view string_to_sign);
// The Authorization header's value.
std::string SigV4Authorization(const AwsCredentials& credentials, const SigV4Scope& scope,
                               const SigV4Request& request);

}  // namespace sluice

#endif  // SLUICE_CORE_AWS_SIGV4_H_
