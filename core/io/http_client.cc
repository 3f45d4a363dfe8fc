#include "core/io/http_client.h"

#include <curl/curl.h>
#include <sys/socket.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "core/io/url.h"
#include "core/util/backoff.h"

namespace sluice {
namespace {

// Where WriteBody puts a response body, and how much it may hold (0: no limit).
struct BodySink {
  std::string* body = nullptr;
  size_t limit = 0;
  bool overflowed = false;
};

size_t WriteBody(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<BodySink*>(user);
  if (sink->limit != 0 && sink->body->size() + size * count > sink->limit) {
    sink->overflowed = true;
    return 0;  // curl ends the transfer (CURLE_WRITE_ERROR)
  }
  sink->body->append(data, size * count);
  return size * count;
}

size_t WriteHeader(char* data, size_t size, size_t count, void* user) {
  auto* response = static_cast<HttpResponse*>(user);
  absl::string_view line(data, size * count);
  if (absl::StartsWith(line, "HTTP/")) {
    // A new response (after a 100 Continue or a redirect): forget the previous headers.
    response->headers.clear();
    return size * count;
  }
  const size_t colon = line.find(':');
  if (colon != absl::string_view::npos) {
    response->headers[absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, colon)))] =
        std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return size * count;
}

// What the socket callback checks for one request: the addresses it may connect to.
struct SocketGuard {
  const std::vector<IpAddress>* allowed = nullptr;
  bool refused = false;
  std::string refused_address;
};

// CURLOPT_OPENSOCKETFUNCTION: opens the socket only for an allowed address. Whatever curl
// parsed or resolved, this is the last word on where a connection goes.
curl_socket_t OpenCheckedSocket(void* user, curlsocktype /*purpose*/, curl_sockaddr* address) {
  auto* guard = static_cast<SocketGuard*>(user);
  absl::StatusOr<IpAddress> ip = IpAddress::FromSockaddr(&address->addr, address->addrlen);
  bool ok = false;
  if (ip.ok()) {
    for (const IpAddress& a : *guard->allowed) ok |= a == *ip;
  }
  if (!ok) {
    guard->refused = true;
    guard->refused_address = ip.ok() ? ip->ToString() : "a non-IP address";
    return CURL_SOCKET_BAD;
  }
  return ::socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

// "host:port:addr,addr" for CURLOPT_RESOLVE, so that curl uses the checked addresses for a name
// instead of resolving it again. Empty for an IP-literal host (curl resolves nothing then).
std::string ResolveEntry(const HttpRequest& request) {
  absl::StatusOr<Url> u = ParseUrl(request.url);
  if (!u.ok() || IpAddress::Parse(u->host).ok()) return "";
  std::string entry = absl::StrCat(u->host, ":", u->EffectivePort(), ":");
  for (size_t i = 0; i < request.connect_to.size(); ++i) {
    const IpAddress& a = request.connect_to[i];
    absl::StrAppend(&entry, i > 0 ? "," : "", a.v6 ? "[" : "", a.ToString(), a.v6 ? "]" : "");
  }
  return entry;
}

class CurlHttpClient : public HttpClient {
 public:
  explicit CurlHttpClient(const CurlHttpClientOptions& options) : options_(options) {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  }
  ~CurlHttpClient() override {
    absl::MutexLock lock(&mu_);
    for (CURL* h : idle_) curl_easy_cleanup(h);
  }

  absl::StatusOr<HttpResponse> Send(const HttpRequest& request) override {
    CURL* h = Take();
    if (h == nullptr) return absl::InternalError("curl_easy_init failed");
    HttpResponse response;
    curl_slist* headers = nullptr;
    for (const auto& [name, value] : request.headers) {
      headers = curl_slist_append(headers, absl::StrCat(name, ": ", value).c_str());
    }
    // No "Expect: 100-continue" and no Accept header of curl's own.
    headers = curl_slist_append(headers, "Expect:");
    // A body is bytes, not the form curl's POST would declare (a server would parse it as one).
    if (request.method == "PUT" || request.method == "POST") {
      bool typed = false;
      for (const auto& entry : request.headers) {
        typed |= absl::AsciiStrToLower(entry.first) == "content-type";
      }
      if (!typed) headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
    }
    curl_slist* resolve = nullptr;
    SocketGuard guard;
    guard.allowed = &request.connect_to;
    if (!request.connect_to.empty()) {
      if (const std::string entry = ResolveEntry(request); !entry.empty()) {
        resolve = curl_slist_append(resolve, entry.c_str());
        curl_easy_setopt(h, CURLOPT_RESOLVE, resolve);
      }
      curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, OpenCheckedSocket);
      curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, &guard);
    }
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(options_.connect_timeout)));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
                     static_cast<long>(absl::ToInt64Seconds(options_.stall_timeout)));
    if (request.method == "HEAD") {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (request.method == "PUT" || request.method == "POST") {
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, request.body.data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                       static_cast<curl_off_t>(request.body.size()));
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    } else if (request.method == "DELETE") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    } else {
      curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    }
    BodySink sink{&response.body, request.max_response_bytes};
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, WriteHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &response);
    const CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(headers);
    curl_slist_free_all(resolve);
    if (rc != CURLE_OK) {
      curl_easy_cleanup(h);  // its connection may be in any state
      if (guard.refused) {
        return absl::PermissionDeniedError(
            absl::StrCat(request.method, " ", RedactUrl(request.url), ": refused a connection to ",
                         guard.refused_address, " (not an address that was checked)"));
      }
      if (sink.overflowed) {
        return absl::ResourceExhaustedError(absl::StrCat(
            request.method, " ", RedactUrl(request.url), ": the response body passed ",
            request.max_response_bytes, " bytes (not a store's answer; ended the transfer)"));
      }
      return absl::UnavailableError(absl::StrCat(request.method, " ", RedactUrl(request.url),
                                                 ": ", curl_easy_strerror(rc)));
    }
    Give(h);
    response.status = static_cast<int>(status);
    return response;
  }

 private:
  CURL* Take() {
    {
      absl::MutexLock lock(&mu_);
      if (!idle_.empty()) {
        CURL* h = idle_.back();
        idle_.pop_back();
        curl_easy_reset(h);  // options only; the connection cache stays
        return h;
      }
    }
    return curl_easy_init();
  }
  void Give(CURL* h) {
    absl::MutexLock lock(&mu_);
    if (static_cast<int>(idle_.size()) < options_.max_idle_handles) {
      idle_.push_back(h);
      return;
    }
    curl_easy_cleanup(h);
  }

  const CurlHttpClientOptions options_;
  absl::Mutex mu_;
  std::vector<CURL*> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::shared_ptr<HttpClient> NewCurlHttpClient(const CurlHttpClientOptions& options) {
  return std::make_shared<CurlHttpClient>(options);
}

bool IsRetryableHttpStatus(int status) { return status >= 500 || status == 429; }

absl::StatusOr<HttpResponse> SendWithRetries(HttpClient& client, const HttpRequest& request,
                                             const RetryOptions& options) {
  Backoff backoff(options.initial_backoff, options.max_backoff);
  absl::StatusOr<HttpResponse> last = absl::UnavailableError("no attempt made");
  const int attempts = std::max(1, options.max_attempts);
  for (int k = 0; k < attempts; ++k) {
    if (k > 0) {
      const absl::Duration wait = backoff.Next();
      if (options.sleep) {
        options.sleep(wait);
      } else {
        absl::SleepFor(wait);
      }
    }
    last = client.Send(request);
    if (last.ok() && !IsRetryableHttpStatus(last->status)) return last;
    if (!last.ok() && !absl::IsUnavailable(last.status())) return last;
  }
  if (!last.ok()) {
    return absl::UnavailableError(
        absl::StrCat(last.status().message(), " (after ", attempts, " attempts)"));
  }
  return last;
}

}  // namespace sluice
