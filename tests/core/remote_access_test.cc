// Remote reads are opt-in (core/io/remote_access.h): a URL whose host is, or resolves to, a
// loopback, link-local (cloud metadata), private or otherwise non-public address is
// PERMISSION_DENIED before any connection is tried, unless a data root names the endpoint. Names
// resolve through a fake resolver and every transport here fails the test if called, so no test
// sends a packet anywhere; the one test with a real socket listens on 127.0.0.1 only.
#include "core/io/remote_access.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/io/file_system.h"
#include "core/io/object_store_file_system.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/core/fake_host_resolver.h"
#include "tests/core/iterator_test_util.h"
#include "tests/core/loopback_http_server.h"

namespace sluice {
namespace {

using testing_util::FakeHostResolver;
using testing_util::NoConnectionTransport;
using testing_util::TestPolicy;

// Hostile URLs: every way of naming the metadata service, loopback and private networks that a
// test of this rule should cover.
const std::vector<std::string>& HostileUrls() {
  static const auto* urls = new std::vector<std::string>{
      "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
      "http://2852039166/latest/meta-data/",
      "http://0xA9FEA9FE/latest/meta-data/",
      "http://0251.0376.0251.0376/latest/",
      "http://169.254.43518/latest/",
      "http://[::ffff:169.254.169.254]/latest/",
      "http://[::ffff:a9fe:a9fe]/latest/",
      "http://[fd00:ec2::254]/latest/",
      "http://[fe80::1]/",
      "http://metadata.google.internal/computeMetadata/v1/",  // resolves to 169.254.169.254
      "http://rebind.example.com/",                            // one public, one link-local
      "http://localhost:8080/admin",
      "http://api.localhost/",
      "http://127.0.0.1:2379/v2/keys",
      "http://127.1/",
      "http://[::1]:9000/",
      "http://0/",
      "http://0.0.0.0:10250/pods",
      "http://10.0.0.1/",
      "http://172.16.5.4:8080/",
      "http://192.168.0.1/",
      "http://100.64.0.1/",
      "http://kubernetes.default.svc/api",  // resolves to 10.96.0.1
      "https://user:pass@169.254.169.254/x?token=abc",
  };
  return *urls;
}

std::shared_ptr<FakeHostResolver> ClusterResolver() {
  auto r = std::make_shared<FakeHostResolver>();
  r->Set("metadata.google.internal", {"169.254.169.254"});
  r->Set("rebind.example.com", {"93.184.216.34", "169.254.169.254"});
  r->Set("kubernetes.default.svc", {"10.96.0.1"});
  r->Set("minio.internal", {"10.1.2.3"});
  return r;
}

TEST(RemoteAccessTest, NonPublicAddressesAreRefusedByDefault) {
  auto resolver = ClusterResolver();
  auto policy = TestPolicy(resolver);
  for (const std::string& url : HostileUrls()) {
    absl::StatusOr<AdmittedUrl> a = policy->Admit(url);
    ASSERT_FALSE(a.ok()) << url << " was admitted";
    EXPECT_EQ(a.status().code(), absl::StatusCode::kPermissionDenied) << url << ": " << a.status();
    EXPECT_TRUE(absl::StrContains(a.status().message(), "--data_root=")) << a.status();
    EXPECT_FALSE(absl::StrContains(a.status().message(), "pass")) << a.status();
    EXPECT_FALSE(absl::StrContains(a.status().message(), "token=abc")) << a.status();
  }
  // localhost is loopback without asking the resolver.
  for (const std::string& asked : resolver->asked()) {
    EXPECT_FALSE(absl::EndsWith(asked, "localhost")) << asked;
  }
}

TEST(RemoteAccessTest, ErrorsSayWhatTheAddressIsAndHowToAllowIt) {
  auto policy = TestPolicy(ClusterResolver());
  absl::Status s = policy->Admit("http://metadata.google.internal/computeMetadata/v1/").status();
  EXPECT_TRUE(absl::StrContains(s.message(), "http://metadata.google.internal/computeMetadata/v1/"))
      << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "resolved to 169.254.169.254")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "link-local")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--data_root=http://metadata.google.internal/..."))
      << s;
  s = policy->Admit("http://0xA9FEA9FE:8080/x").status();
  EXPECT_TRUE(absl::StrContains(s.message(), "169.254.169.254 is a link-local address")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--data_root=http://169.254.169.254:8080/...")) << s;
}

TEST(RemoteAccessTest, PublicAddressesPassPinnedToWhatWasChecked) {
  auto resolver = ClusterResolver();
  resolver->Set("data.example.org", {"93.184.216.34", "2606:2800:220:1::1"});
  auto policy = TestPolicy(resolver);
  absl::StatusOr<AdmittedUrl> a = policy->Admit("https://Data.Example.ORG:443/a/b?x=%2e");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->url, "https://data.example.org/a/b?x=%2e");
  EXPECT_EQ(a->host, "data.example.org");
  EXPECT_EQ(a->port, 443);
  ASSERT_EQ(a->addresses.size(), 2u);
  EXPECT_EQ(a->addresses[0].ToString(), "93.184.216.34");
  EXPECT_EQ(a->addresses[1].ToString(), "2606:2800:220:1::1");
  // A numeric host is rewritten to the address it means.
  a = policy->Admit("http://1572395042/x");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->url, "http://93.184.216.34/x");
}

TEST(RemoteAccessTest, ADataRootAllowsExactlyTheEndpointItNames) {
  auto policy = TestPolicy(ClusterResolver(), {"http://127.0.0.1:9000/bucket",
                                               "http://minio.internal:9000", "https://[::1]:8443/"});
  for (const char* ok :
       {"http://127.0.0.1:9000/other/path", "HTTP://127.0.0.1:9000/bucket/k",
        "http://minio.internal:9000/b/k", "https://[::1]:8443/x"}) {
    absl::StatusOr<AdmittedUrl> a = policy->Admit(ok);
    EXPECT_TRUE(a.ok()) << ok << ": " << a.status();
  }
  for (const char* refused :
       {"http://127.0.0.1:9001/bucket", "https://127.0.0.1:9000/bucket",
        "http://localhost:9000/bucket", "http://127.0.0.2:9000/", "http://10.1.2.3:9000/",
        "http://minio.internal/b", "http://[::1]:8443/x", "http://169.254.169.254/"}) {
    EXPECT_EQ(policy->Admit(refused).status().code(), absl::StatusCode::kPermissionDenied)
        << refused;
  }
  EXPECT_EQ(policy->allowed().size(), 3u);
}

TEST(RemoteAccessTest, OtherSchemesAndMalformedUrlsAreInvalid) {
  auto policy = TestPolicy(ClusterResolver());
  EXPECT_EQ(policy->Admit("ftp://example.org/x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(policy->Admit("http://1.2.3.999/").status().code(),
            absl::StatusCode::kInvalidArgument);
  RemoteAccessOptions bad;
  bad.allowed = {"http://h:0/"};
  EXPECT_EQ(RemoteAccessPolicy::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// End to end through the file systems: a refused URL fails before the transport is called.
TEST(RemoteAccessTest, HttpFileSystemRefusesBeforeAnyConnection) {
  auto transport = std::make_shared<NoConnectionTransport>();
  HttpFileSystemOptions o;
  o.http = transport;
  o.access = TestPolicy(ClusterResolver());
  o.retry.sleep = [](absl::Duration) {};
  std::shared_ptr<FileSystem> fs = NewHttpFileSystem(o);
  for (const std::string& url : HostileUrls()) {
    absl::Status s = fs->NewInputStream(url).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << url << ": " << s;
    EXPECT_EQ(fs->Stat(url).status().code(), absl::StatusCode::kPermissionDenied) << url;
    EXPECT_EQ(fs->Glob(url).status().code(), absl::StatusCode::kPermissionDenied) << url;
  }
  EXPECT_EQ(transport->calls(), 0);
}

TEST(RemoteAccessTest, ObjectStoreOnALoopbackEndpointNeedsARoot) {
  auto transport = std::make_shared<NoConnectionTransport>();
  ObjectStoreOptions o;
  o.endpoint = "http://127.0.0.1:5000";
  o.http = transport;
  o.access = TestPolicy(ClusterResolver());
  o.retry.sleep = [](absl::Duration) {};
  absl::Status s = NewObjectStoreFileSystem(o)->Stat("s3://bucket/key").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "s3://bucket/key")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--data_root=http://127.0.0.1:5000/...")) << s;
  o.endpoint = "http://[fd00:ec2::254]";
  EXPECT_EQ(NewObjectStoreFileSystem(o)->Glob("s3://bucket/*").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(transport->calls(), 0);
}

// The default (no policy given, nothing installed): a pipeline in this process that names the
// metadata service fails with PERMISSION_DENIED and never reaches the transport.
TEST(RemoteAccessTest, PipelinesInProcessAreRefusedByTheProcessPolicy) {
  SetProcessRemoteAccessPolicy(nullptr);  // back to the default
  auto transport = std::make_shared<NoConnectionTransport>();
  HttpFileSystemOptions o;
  o.http = transport;
  RegisterFileSystem("http", NewHttpFileSystem(o));
  for (const std::string& url :
       {std::string("http://169.254.169.254/latest/meta-data/"),
        std::string("http://2852039166/latest/"), std::string("http://[::ffff:127.0.0.1]:80/")}) {
    absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat("text_line_dataset('", url, "')"));
    ASSERT_TRUE(ds.ok()) << ds.status();
    absl::StatusOr<std::vector<Element>> got = testing_util::RunDataset(*ds);
    ASSERT_FALSE(got.ok()) << url;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << got.status();
  }
  EXPECT_EQ(transport->calls(), 0);
  RegisterFileSystem("http", NewHttpFileSystem({}));
}

// A loopback listener that counts the connections it accepts, without answering them.
class LoopbackListener {
 public:
  LoopbackListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
        ::listen(fd_, 4) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1";
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  ~LoopbackListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }
  // Connections waiting to be accepted now (none are ever accepted).
  bool HasPendingConnection() const {
    pollfd p = {fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// The curl transport connects only to the addresses a request was pinned to, whatever its URL
// says: a URL naming 127.0.0.1 pinned to 127.0.0.2 is refused at the socket, and nothing reaches
// the listener on 127.0.0.1.
TEST(CurlTransportTest, ConnectsOnlyToPinnedAddresses) {
  LoopbackListener listener;
  ASSERT_NE(listener.port(), 0);
  std::shared_ptr<HttpClient> curl = NewCurlHttpClient({.connect_timeout = absl::Seconds(5)});
  HttpRequest r;
  r.url = absl::StrCat("http://127.0.0.1:", listener.port(), "/x?secret=1");
  r.connect_to = {*IpAddress::Parse("127.0.0.2")};
  absl::StatusOr<HttpResponse> got = curl->Send(r);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "127.0.0.1")) << got.status();
  EXPECT_FALSE(absl::StrContains(got.status().message(), "secret")) << got.status();
  EXPECT_FALSE(listener.HasPendingConnection());
}

// Redirects are not followed: a server that answers with a redirect to another address gets
// its 302 back as an error, and the redirect's target sees no connection (even one a data root
// allows: each hop would need its own check).
TEST(CurlTransportTest, RedirectsAreNotFollowed) {
  testing_util::LoopbackHttpServer target("secret\n");
  ASSERT_NE(target.port(), 0);
  testing_util::LoopbackHttpServer redirector(
      "", absl::StrCat("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:", target.port(),
                       "/secret\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"));
  ASSERT_NE(redirector.port(), 0);
  HttpFileSystemOptions o;
  o.access = TestPolicy(std::make_shared<FakeHostResolver>(),
                        {absl::StrCat("http://127.0.0.1:", redirector.port()),
                         absl::StrCat("http://127.0.0.1:", target.port())});
  o.retry.sleep = [](absl::Duration) {};
  std::shared_ptr<FileSystem> fs = NewHttpFileSystem(o);
  const std::string url = absl::StrCat("http://127.0.0.1:", redirector.port(), "/data.txt");
  absl::StatusOr<std::unique_ptr<InputStream>> in = fs->NewInputStream(url);
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), absl::StatusCode::kInvalidArgument) << in.status();
  EXPECT_TRUE(absl::StrContains(in.status().message(), "HTTP 302")) << in.status();
  EXPECT_GT(redirector.connections(), 0);
  EXPECT_EQ(target.connections(), 0);
}

}  // namespace
}  // namespace sluice
