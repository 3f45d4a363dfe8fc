#include "core/io/remote_access.h"

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

// "localhost" and its subdomains are loopback whatever a resolver says (RFC 6761).
bool IsLocalhostName(absl::string_view host) {
  return host == "localhost" || absl::EndsWith(host, ".localhost");
}

// The host as an IP address when it is a literal (normalized hosts only).
absl::StatusOr<IpAddress> LiteralAddress(const std::string& host) { return IpAddress::Parse(host); }

std::string RootExample(const Url& u) {
  return absl::StrCat(u.scheme, "://", u.Authority(), "/...");
}

class GuardedHttpClient : public HttpClient {
 public:
  GuardedHttpClient(std::shared_ptr<HttpClient> transport,
                    std::shared_ptr<const RemoteAccessPolicy> policy)
      : transport_(std::move(transport)), policy_(std::move(policy)) {}

  absl::StatusOr<HttpResponse> Send(const HttpRequest& request) override {
    std::shared_ptr<const RemoteAccessPolicy> policy =
        policy_ != nullptr ? policy_ : ProcessRemoteAccessPolicy();
    ASSIGN_OR_RETURN(AdmittedUrl admitted, policy->Admit(request.url));
    HttpRequest pinned = request;
    pinned.url = std::move(admitted.url);
    pinned.connect_to = std::move(admitted.addresses);
    return transport_->Send(pinned);
  }

 private:
  const std::shared_ptr<HttpClient> transport_;
  const std::shared_ptr<const RemoteAccessPolicy> policy_;
};

struct ProcessPolicy {
  absl::Mutex mu;
  std::shared_ptr<const RemoteAccessPolicy> policy ABSL_GUARDED_BY(mu);
};

ProcessPolicy& Process() {
  static ProcessPolicy* p = new ProcessPolicy();
  return *p;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const RemoteAccessPolicy>> RemoteAccessPolicy::Create(
    RemoteAccessOptions options) {
  std::vector<Endpoint> allowed;
  for (const std::string& entry : options.allowed) {
    absl::StatusOr<Url> u = NormalizeUrl(entry);
    if (!u.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("allowed endpoint ", RedactUrl(entry), ": ", u.status().message()));
    }
    if (u->scheme != "http" && u->scheme != "https") continue;
    allowed.push_back({u->scheme, u->host, u->EffectivePort()});
  }
  if (options.resolver == nullptr) options.resolver = NewSystemHostResolver();
  return std::shared_ptr<const RemoteAccessPolicy>(
      new RemoteAccessPolicy(std::move(allowed), std::move(options.resolver)));
}

bool RemoteAccessPolicy::Allowed(const Url& u) const {
  for (const Endpoint& e : allowed_) {
    if (e.scheme == u.scheme && e.host == u.host && e.port == u.EffectivePort()) return true;
  }
  return false;
}

std::vector<std::string> RemoteAccessPolicy::allowed() const {
  std::vector<std::string> out;
  for (const Endpoint& e : allowed_) {
    Url u;
    u.scheme = e.scheme;
    u.host = e.host;
    u.port = e.port;
    out.push_back(absl::StrCat(u.scheme, "://", u.Authority()));
  }
  return out;
}

absl::StatusOr<AdmittedUrl> RemoteAccessPolicy::Admit(absl::string_view url) const {
  ASSIGN_OR_RETURN(Url u, NormalizeUrl(url));
  if (u.scheme != "http" && u.scheme != "https") {
    return absl::InvalidArgumentError(
        absl::StrCat(RedactUrl(url), ": remote reads use http:// or https://"));
  }
  const bool allowed = Allowed(u);
  const std::string named = RedactUrl(url);
  auto refuse = [&](const std::string& what, AddressClass c) {
    return absl::PermissionDeniedError(absl::StrCat(
        named, ": refused: ", what, " is a ", AddressClassName(c),
        " address; remote reads reach only public addresses unless a data root names the "
        "endpoint (--data_root=",
        RootExample(u), ")"));
  };
  AdmittedUrl out;
  out.host = u.host;
  out.port = u.EffectivePort();
  if (absl::StatusOr<IpAddress> literal = LiteralAddress(u.host); literal.ok()) {
    out.addresses = {*literal};
  } else {
    if (IsLocalhostName(u.host) && !allowed) return refuse(u.host, AddressClass::kLoopback);
    absl::StatusOr<std::vector<IpAddress>> resolved = resolver_->Resolve(u.host);
    if (!resolved.ok()) {
      return absl::Status(resolved.status().code(),
                          absl::StrCat(named, ": ", resolved.status().message()));
    }
    if (resolved->empty()) {
      return absl::UnavailableError(absl::StrCat(named, ": ", u.host, " has no address"));
    }
    out.addresses = *std::move(resolved);
  }
  if (!allowed) {
    for (const IpAddress& a : out.addresses) {
      const AddressClass c = ClassifyAddress(a);
      if (c == AddressClass::kPublic) continue;
      const std::string what = a.ToString() == u.host
                                   ? u.host
                                   : absl::StrCat(u.host, " (resolved to ", a.ToString(), ")");
      return refuse(what, c);
    }
  }
  out.url = absl::StrCat(u.scheme, "://", u.userinfo.empty() ? "" : u.userinfo + "@",
                         u.Authority(), u.raw_path_and_query);
  return out;
}

void SetProcessRemoteAccessPolicy(std::shared_ptr<const RemoteAccessPolicy> policy) {
  ProcessPolicy& p = Process();
  absl::MutexLock lock(&p.mu);
  p.policy = std::move(policy);
}

std::shared_ptr<const RemoteAccessPolicy> ProcessRemoteAccessPolicy() {
  ProcessPolicy& p = Process();
  absl::MutexLock lock(&p.mu);
  if (p.policy == nullptr) {
    // No allowed entries: Create cannot fail.
    p.policy = *RemoteAccessPolicy::Create({});
  }
  return p.policy;
}

std::shared_ptr<HttpClient> NewGuardedHttpClient(
    std::shared_ptr<HttpClient> transport, std::shared_ptr<const RemoteAccessPolicy> policy) {
  return std::make_shared<GuardedHttpClient>(std::move(transport), std::move(policy));
}

}  // namespace sluice
