// HttpClient: one HTTP request and its whole response, behind an interface so that the object
// stores (core/io/object_store_file_system.h) are tested with a fake transport; the real one is
// libcurl (NewCurlHttpClient), reusing connections across requests. SendWithRetries adds the
// retry policy every remote read uses: transport failures, HTTP 5xx and 429 are retried with
// jittered exponential backoff.
//
// The curl transport follows no redirect (a 3xx is returned as it is, so that a server cannot
// send a worker to an address nobody checked), speaks only http and https, ignores the
// http_proxy/https_proxy environment, and, for a request with `connect_to`, connects to those
// addresses only (core/io/remote_access.h checks them). Errors name the URL without userinfo or
// query (RedactUrl).
//
// Thread safety: HttpClient implementations are thread-safe.
#ifndef SLUICE_CORE_HTTP_CLIENT_H_
#define SLUICE_CORE_HTTP_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/io/ip_address.h"

namespace sluice {

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, PUT, POST or DELETE
  std::string url;
  // Sent with PUT and POST (Content-Length set from it; Content-Type application/octet-stream
  // unless `headers` give one).
  std::string body;
  // When not 0: a response body longer than this ends the transfer with RESOURCE_EXHAUSTED
  // naming the URL (a server's answer to a write is small; a hostile one is not kept).
  size_t max_response_bytes = 0;
  // Sent as given (a "Host" entry replaces the one derived from the URL).
  std::vector<std::pair<std::string, std::string>> headers;
  // When not empty: the only addresses the connection for the URL's host may go to; the host is
  // not resolved again, and a connection to any other address fails with PERMISSION_DENIED.
  std::vector<IpAddress> connect_to;
};

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

class HttpClient {
 public:
  virtual ~HttpClient() = default;
  // The response, whatever its HTTP status (a redirect included). UNAVAILABLE naming the URL
  // when no response came (connection refused or reset, DNS, timeouts); PERMISSION_DENIED when
  // the connection would go to an address not in `connect_to`; RESOURCE_EXHAUSTED when the body
  // passed `max_response_bytes`.
  virtual absl::StatusOr<HttpResponse> Send(const HttpRequest& request) = 0;
};

struct CurlHttpClientOptions {
  // Connecting may take this long.
  absl::Duration connect_timeout = absl::Seconds(10);
  // A transfer slower than 1 KiB/s for this long is abandoned (UNAVAILABLE, retried).
  absl::Duration stall_timeout = absl::Seconds(30);
  // Idle easy handles (each keeps its connections) kept for reuse.
  int max_idle_handles = 32;
};
std::shared_ptr<HttpClient> NewCurlHttpClient(const CurlHttpClientOptions& options = {});

struct RetryOptions {
  // Attempts in all, the first included.
  int max_attempts = 6;
  // Backoff before retry k (k >= 1) is uniform in [d/2, d], d = min(max_backoff,
  // initial_backoff * 2^(k-1)) (core/util/backoff.h), so that many workers retrying a throttled store
  // spread out.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  // How to wait (tests record the waits instead). Null: absl::SleepFor.
  std::function<void(absl::Duration)> sleep;
};

// True for the statuses worth another attempt: 5xx and 429.
bool IsRetryableHttpStatus(int status);

// Sends `request` until it gets a response that is not retryable or `options.max_attempts` are
// spent. Returns the last response (even a retryable one, so the caller can say what it was),
// or UNAVAILABLE naming the URL and the attempts when the last attempt had no response.
absl::StatusOr<HttpResponse> SendWithRetries(HttpClient& client, const HttpRequest& request,
                                             const RetryOptions& options);

}  // namespace sluice

#endif  // SLUICE_CORE_HTTP_CLIENT_H_
