// Test doubles for the remote-access checks (core/io/remote_access.h): FakeHostResolver answers
// names from a table (no DNS query leaves the test), and NoConnectionTransport fails the test
// if anything reaches it, proving that a refused URL was refused before any connection.
//
// Thread safety: thread-safe.
#ifndef SLUICE_TESTS_CORE_FAKE_HOST_RESOLVER_H_
#define SLUICE_TESTS_CORE_FAKE_HOST_RESOLVER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/io/host_resolver.h"
#include "core/io/http_client.h"
#include "core/io/remote_access.h"
#include "gtest/gtest.h"

namespace sluice {
namespace testing_util {

// A public address for names in tests that use a fake transport: nothing ever connects to it.
inline constexpr char kFakePublicAddress[] = "93.184.216.34";

class FakeHostResolver : public HostResolver {
 public:
  // `fallback`: the address of names not in the table; empty: they do not resolve.
  explicit FakeHostResolver(std::string fallback = kFakePublicAddress)
      : fallback_(std::move(fallback)) {}

  void Set(const std::string& host, std::vector<std::string> addresses) {
    absl::MutexLock lock(&mu_);
    table_[host] = std::move(addresses);
  }
  std::vector<std::string> asked() const {
    absl::MutexLock lock(&mu_);
    return asked_;
  }

  absl::StatusOr<std::vector<IpAddress>> Resolve(const std::string& host) override {
    absl::MutexLock lock(&mu_);
    asked_.push_back(host);
    auto it = table_.find(host);
    std::vector<std::string> texts;
    if (it != table_.end()) {
      texts = it->second;
    } else if (!fallback_.empty()) {
      texts = {fallback_};
    }
    if (texts.empty()) return absl::UnavailableError(absl::StrCat("no such host ", host));
    std::vector<IpAddress> out;
    for (const std::string& t : texts) {
      absl::StatusOr<IpAddress> a = IpAddress::Parse(t);
      if (!a.ok()) return a.status();
      out.push_back(*a);
    }
    return out;
  }

 private:
  const std::string fallback_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::vector<std::string>> table_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> asked_ ABSL_GUARDED_BY(mu_);
};

// A policy resolving through `resolver` and allowing `allowed` endpoints.
inline std::shared_ptr<const RemoteAccessPolicy> TestPolicy(
    std::shared_ptr<HostResolver> resolver, std::vector<std::string> allowed = {}) {
  RemoteAccessOptions o;
  o.allowed = std::move(allowed);
  o.resolver = std::move(resolver);
  absl::StatusOr<std::shared_ptr<const RemoteAccessPolicy>> p =
      RemoteAccessPolicy::Create(std::move(o));
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : nullptr;
}

// Fails the test on every call: a connection would have been tried.
class NoConnectionTransport : public HttpClient {
 public:
  absl::StatusOr<HttpResponse> Send(const HttpRequest& request) override {
    ADD_FAILURE() << "a request reached the transport: " << request.method << " " << request.url;
    absl::MutexLock lock(&mu_);
    ++calls_;
    return absl::UnavailableError("NoConnectionTransport was called");
  }
  int calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  mutable absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace testing_util
}  // namespace sluice

#endif  // SLUICE_TESTS_CORE_FAKE_HOST_RESOLVER_H_
