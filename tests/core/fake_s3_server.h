// FakeS3: an HttpClient that answers as an S3 bucket would (HEAD, ranged GET, ListObjectsV2 with
// pages) from memory, records every request, and fails on demand (HTTP statuses or transport
// errors for the next N requests), so that the object-store file system is tested without a
// network. The end-to-end test against a real S3-compatible server is tests/storage/.
//
// Thread safety: thread-safe.
#ifndef SLUICE_TESTS_CORE_FAKE_S3_SERVER_H_
#define SLUICE_TESTS_CORE_FAKE_S3_SERVER_H_

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/io/http_client.h"

namespace sluice {
namespace testing_util {

class FakeS3 : public HttpClient {
 public:
  // Objects are keyed by "bucket/key"; `origin` is the endpoint requests must go to
  // (path-style).
  explicit FakeS3(std::string origin) : origin_(std::move(origin)) {}

  void Put(const std::string& bucket_key, std::string bytes) {
    absl::MutexLock lock(&mu_);
    objects_[bucket_key] = std::move(bytes);
  }
  // The next `n` requests get HTTP `status` (0: a transport error) instead of an answer.
  void FailNext(int n, int status) {
    absl::MutexLock lock(&mu_);
    for (int i = 0; i < n; ++i) failures_.push_back(status);
  }
  // Every request for "bucket/key" is answered with `status` and `code` as S3's error XML.
  void Deny(const std::string& bucket_key, int status, const std::string& code) {
    absl::MutexLock lock(&mu_);
    denied_[bucket_key] = {status, code};
  }
  std::vector<HttpRequest> requests() const {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

  absl::StatusOr<HttpResponse> Send(const HttpRequest& request) override {
    absl::MutexLock lock(&mu_);
    requests_.push_back(request);
    if (!failures_.empty()) {
      const int status = failures_.front();
      failures_.pop_front();
      if (status == 0) return absl::UnavailableError(absl::StrCat(request.url, ": reset"));
      return Error(status, "SlowDown");
    }
    if (!absl::StartsWith(request.url, origin_ + "/")) return Error(400, "WrongEndpoint");
    std::string path = request.url.substr(origin_.size() + 1);
    std::string query;
    if (const size_t q = path.find('?'); q != std::string::npos) {
      query = path.substr(q + 1);
      path = path.substr(0, q);
    }
    path = Decode(path);
    if (auto it = denied_.find(path); it != denied_.end()) {
      return Error(it->second.first, it->second.second);
    }
    if (!query.empty()) return List(path, query);
    auto it = objects_.find(path);
    if (it == objects_.end()) return Error(404, "NoSuchKey");
    HttpResponse r;
    r.headers["content-length"] = absl::StrCat(it->second.size());
    r.headers["last-modified"] = "Wed, 02 Dec 2026 10:00:00 GMT";
    if (request.method == "HEAD") {
      r.status = 200;
      return r;
    }
    std::string range;
    for (const auto& [name, value] : request.headers) {
      if (absl::AsciiStrToLower(name) == "range") range = value;
    }
    if (range.empty()) {
      r.status = 200;
      r.body = it->second;
      return r;
    }
    uint64_t first = 0, last = 0;
    std::vector<std::string> parts = absl::StrSplit(range.substr(6), '-');
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &first) ||
        !absl::SimpleAtoi(parts[1], &last)) {
      return Error(400, "InvalidRange");
    }
    if (first >= it->second.size()) return Error(416, "InvalidRange");
    last = std::min<uint64_t>(last, it->second.size() - 1);
    r.status = 206;
    r.body = it->second.substr(first, last - first + 1);
    r.headers["content-range"] = absl::StrCat("bytes ", first, "-", last, "/", it->second.size());
    return r;
  }

 private:
  static std::string Decode(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      int v = 0;
      if (s[i] == '%' && i + 2 < s.size() && absl::SimpleHexAtoi(s.substr(i + 1, 2), &v)) {
        out.push_back(static_cast<char>(v));
        i += 2;
      } else {
        out.push_back(s[i]);
      }
    }
    return out;
  }

  static HttpResponse Error(int status, const std::string& code) {
    HttpResponse r;
    r.status = status;
    r.body = absl::StrCat("<?xml version=\"1.0\"?><Error><Code>", code,
                          "</Code><Message>fake says ", code, "</Message></Error>");
    return r;
  }

  // ListObjectsV2 over "bucket" with prefix, max-keys and continuation-token (an index).
  HttpResponse List(const std::string& bucket, const std::string& query)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::map<std::string, std::string> q;
    for (absl::string_view kv : absl::StrSplit(query, '&')) {
      std::vector<std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      q[p[0]] = p.size() > 1 ? Decode(p[1]) : "";
    }
    if (q["list-type"] != "2") return Error(400, "NotV2");
    size_t max_keys = 1000, start = 0;
    (void)absl::SimpleAtoi(q["max-keys"], &max_keys);
    (void)absl::SimpleAtoi(q["continuation-token"], &start);
    std::vector<std::string> keys;
    const std::string prefix = absl::StrCat(bucket, "/", q["prefix"]);
    for (const auto& [name, unused] : objects_) {
      if (absl::StartsWith(name, prefix)) keys.push_back(name.substr(bucket.size() + 1));
    }
    HttpResponse r;
    r.status = 200;
    r.body = "<?xml version=\"1.0\"?><ListBucketResult>";
    size_t i = start;
    for (; i < keys.size() && i < start + max_keys; ++i) {
      std::string escaped = absl::StrReplaceAll(keys[i], {{"&", "&amp;"}});
      absl::StrAppend(&r.body, "<Contents><Key>", escaped, "</Key></Contents>");
    }
    if (i < keys.size()) {
      absl::StrAppend(&r.body, "<IsTruncated>true</IsTruncated><NextContinuationToken>", i,
                      "</NextContinuationToken>");
    } else {
      absl::StrAppend(&r.body, "<IsTruncated>false</IsTruncated>");
    }
    absl::StrAppend(&r.body, "</ListBucketResult>");
    return r;
  }

  const std::string origin_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> objects_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::pair<int, std::string>> denied_ ABSL_GUARDED_BY(mu_);
  std::deque<int> failures_ ABSL_GUARDED_BY(mu_);
  std::vector<HttpRequest> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing_util
}  // namespace sluice

#endif  // SLUICE_TESTS_CORE_FAKE_S3_SERVER_H_
