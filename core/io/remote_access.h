// RemoteAccessPolicy: which network endpoints remote reads may connect to (http(s):// files, and
// the endpoints behind s3:// and gs://), decided on the address that is actually connected to.
//
//   ASSIGN_OR_RETURN(auto policy,
//                    RemoteAccessPolicy::Create({.allowed = {"http://127.0.0.1:9000"}}));
//   std::shared_ptr<HttpClient> http = NewGuardedHttpClient(NewCurlHttpClient(), policy);
//
// The rule: a URL's host is resolved (an IP literal in any spelling is read as core/io/url.h
// normalizes it), and every address it resolves to must be public (core/io/ip_address.h):
// loopback, link-local (the cloud metadata services at 169.254.169.254 and fd00:ec2::254),
// private-network, CGNAT, unspecified, multicast and reserved addresses are refused with
// PERMISSION_DENIED, before any connection, unless an allowed endpoint names the URL's scheme,
// host and port exactly (after normalization). Allowed endpoints come from the URL data roots
// (core/data/data_roots.h, `--data_root=http://minio.internal:9000/datasets`): a root names a
// server the operator trusts, whatever its addresses are. A name is compared as a name: a root
// "http://localhost:9000" does not allow "http://127.0.0.1:9000".
//
// The guarded client (NewGuardedHttpClient) pins the transport to the addresses it checked
// (HttpRequest::connect_to): the transport never resolves the name again, so a DNS answer that
// changes between the check and the connection (DNS rebinding) cannot move it elsewhere.
// Redirects are never followed (core/io/http_client.h), and environment proxies are not used.
//
// PERMISSION_DENIED messages name the URL without userinfo or query (RedactUrl), the host, the
// address and its class, and the flag that would allow it, e.g.
//   "http://169.254.169.254/latest/meta-data: refused: 169.254.169.254 is a link-local address;
//    remote reads reach only public addresses unless a data root names the endpoint
//    (--data_root=http://169.254.169.254/...)"
//
// Thread safety: RemoteAccessPolicy is immutable after Create and thread-safe; the process
// policy may be replaced at any time.
#ifndef SLUICE_CORE_IO_REMOTE_ACCESS_H_
#define SLUICE_CORE_IO_REMOTE_ACCESS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/io/host_resolver.h"
#include "core/io/http_client.h"
#include "core/io/ip_address.h"
#include "core/io/url.h"

namespace sluice {

struct RemoteAccessOptions {
  // URLs whose scheme, host and port may be connected to whatever their addresses are; only
  // http:// and https:// entries count (a path is ignored here; data roots check paths). Empty:
  // public addresses only.
  std::vector<std::string> allowed;
  // Names to addresses. Null: NewSystemHostResolver().
  std::shared_ptr<HostResolver> resolver;
};

// Where a checked URL may be fetched from.
struct AdmittedUrl {
  // The URL with its authority normalized (a numeric host as a dotted quad), path and query as
  // given: what the transport must request.
  std::string url;
  std::string host;  // normalized; IPv6 without brackets
  int port = 0;      // the port connected to (defaults applied)
  // The checked addresses; the transport connects to no other.
  std::vector<IpAddress> addresses;
};

class RemoteAccessPolicy {
 public:
  // INVALID_ARGUMENT naming an allowed entry that is not a well-formed URL.
  static absl::StatusOr<std::shared_ptr<const RemoteAccessPolicy>> Create(
      RemoteAccessOptions options);

  // `url` (http:// or https://) checked as described above. PERMISSION_DENIED for a refused
  // address, INVALID_ARGUMENT for a malformed URL or another scheme, UNAVAILABLE when the host
  // does not resolve. Resolves names through the resolver (no other side effect).
  absl::StatusOr<AdmittedUrl> Admit(absl::string_view url) const;

  // The normalized scheme://host:port of every allowed entry, for messages.
  std::vector<std::string> allowed() const;

 private:
  struct Endpoint {
    std::string scheme;
    std::string host;
    int port = 0;
  };
  RemoteAccessPolicy(std::vector<Endpoint> allowed, std::shared_ptr<HostResolver> resolver)
      : allowed_(std::move(allowed)), resolver_(std::move(resolver)) {}
  bool Allowed(const Url& u) const;

  const std::vector<Endpoint> allowed_;
  const std::shared_ptr<HostResolver> resolver_;
};

// The policy of this process's built-in remote file systems (core/io/file_system.h), read at
// each request. Until set: public addresses only, names resolved with getaddrinfo. Servers
// set it from their --data_root (InstallProcessDataRoots in core/data/data_roots.h).
void SetProcessRemoteAccessPolicy(std::shared_ptr<const RemoteAccessPolicy> policy);
std::shared_ptr<const RemoteAccessPolicy> ProcessRemoteAccessPolicy();

// An HttpClient that admits each request's URL through `policy` (null: the process policy at
// each request) and sends it through `transport` pinned to the admitted addresses. A refused
// URL returns the policy's error and `transport` is not called.
std::shared_ptr<HttpClient> NewGuardedHttpClient(std::shared_ptr<HttpClient> transport,
                                                 std::shared_ptr<const RemoteAccessPolicy> policy);

}  // namespace sluice

#endif  // SLUICE_CORE_IO_REMOTE_ACCESS_H_
