// Data roots: a worker (and the coordinator) reads only files under its configured folders. A
// pipeline naming another file, escaping with '..', or reaching out through a symlink (also one
// that list_files matches and interleave opens) fails with PERMISSION_DENIED naming the path;
// the consumer sees that error and the worker keeps serving. URLs are compared normalized
// (percent-encoded dots, duplicate slashes, case, default ports), and a worker with no roots at
// all still refuses the cloud metadata service, loopback and private networks, before any
// connection (the http transport here fails the test if it is called).
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "core/data/data_roots.h"
#include "core/io/file_system.h"
#include "core/io/object_store_file_system.h"
#include "core/io/remote_access.h"
#include "gtest/gtest.h"
#include "tests/core/fake_host_resolver.h"
#include "tests/security/secure_cluster.h"
#include "tests/security/test_certs.h"

namespace sluice {
namespace {

class DataRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = MakeTempDir("sluice-roots-");
    ASSERT_FALSE(base_.empty());
    root_ = base_ + "/data";
    outside_ = base_ + "/private";
    ASSERT_EQ(mkdir(root_.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((root_ + "/sub").c_str(), 0755), 0);
    ASSERT_EQ(mkdir(outside_.c_str(), 0755), 0);
    ASSERT_TRUE(WriteFile(root_ + "/a.txt", "1\n2\n3\n4\n"));
    ASSERT_TRUE(WriteFile(root_ + "/sub/b.txt", "5\n6\n"));
    ASSERT_TRUE(WriteFile(outside_ + "/secret.txt", "top\nsecret\n"));
    ASSERT_EQ(symlink((outside_ + "/secret.txt").c_str(), (root_ + "/link.txt").c_str()), 0);
    ASSERT_EQ(symlink(outside_.c_str(), (root_ + "/linkdir").c_str()), 0);
    auto roots = DataRoots::Create({root_});
    ASSERT_TRUE(roots.ok()) << roots.status();
    roots_ = *roots;
  }
  void TearDown() override { RemoveTree(base_); }

  absl::Status Check(const std::string& pipeline) {
    auto ds = Dataset::Parse(pipeline);
    EXPECT_TRUE(ds.ok()) << pipeline << ": " << ds.status();
    if (!ds.ok()) return ds.status();
    return roots_.CheckDataset(ds->def());
  }

  std::string base_, root_, outside_;
  DataRoots roots_;
};

TEST_F(DataRootsTest, PathsInsideAreAllowedAndOthersDenied) {
  EXPECT_TRUE(roots_.CheckPath(root_ + "/a.txt").ok());
  EXPECT_TRUE(roots_.CheckPath(root_ + "/sub/b.txt").ok());
  EXPECT_TRUE(roots_.CheckPath(root_ + "/not-yet-written.cache").ok());
  EXPECT_TRUE(roots_.CheckPath(root_ + "/sub/../a.txt").ok());
  for (const std::string& path :
       {outside_ + "/secret.txt", root_ + "/../private/secret.txt", root_ + "/link.txt",
        root_ + "/linkdir/secret.txt", root_ + "/missing/../../private/secret.txt",
        std::string("/etc/passwd"), root_ + "x/a.txt"}) {
    absl::Status s = roots_.CheckPath(path);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << path << ": " << s;
    EXPECT_NE(s.message().find(path), std::string::npos) << s;   // names the path
    EXPECT_NE(s.message().find(root_), std::string::npos) << s;  // and the roots
  }
}

TEST_F(DataRootsTest, RelativePathsResolveAgainstTheWorkingDirectory) {
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(chdir(root_.c_str()), 0);
  const absl::Status inside = roots_.CheckPath("sub/b.txt");
  const absl::Status escape = roots_.CheckPath("../private/secret.txt");
  ASSERT_EQ(chdir(cwd), 0);
  EXPECT_TRUE(inside.ok()) << inside;
  EXPECT_EQ(escape.code(), absl::StatusCode::kPermissionDenied) << escape;
}

TEST_F(DataRootsTest, GraphsAreWalkedWhole) {
  EXPECT_TRUE(Check("text_line_dataset(['" + root_ + "/a.txt', '" + root_ + "/sub/b.txt'])").ok());
  EXPECT_TRUE(Check("range(10)").ok());
  EXPECT_TRUE(Check("list_files('" + root_ + "/*.txt')").ok());
  EXPECT_TRUE(Check("range(4).cache('" + root_ + "/c.cache')").ok());
  for (const std::string& pipeline :
       {"text_line_dataset(['" + root_ + "/a.txt', '" + outside_ + "/secret.txt'])",
        "tf_record_dataset(['" + outside_ + "/x.tfrecord'])",
        "list_files('" + outside_ + "/*.txt')",
        "list_files('" + root_ + "/*/../../private/*')",
        "range(4).cache('" + outside_ + "/c.cache')"}) {
    absl::Status s = Check(pipeline);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << pipeline << ": " << s;
  }
}

TEST_F(DataRootsTest, UnrestrictedAndBadRoots) {
  EXPECT_TRUE(DataRoots().CheckPath("/etc/passwd").ok());
  EXPECT_EQ(DataRoots::Create({base_ + "/nope"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DataRoots::Create({root_ + "/a.txt"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DataRootsTest, WorkerRefusesFilesOutsideItsRootsAndKeepsServing) {
  auto cluster = SecureCluster::Start({.num_workers = 1, .worker_roots = roots_});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ServiceOptions o;
  o.retry_deadline = absl::Seconds(5);
  o.sharding_policy = ServiceShardingPolicy::kOff;

  auto inside = Dataset::Parse("text_line_dataset(['" + root_ + "/a.txt']).batch(2)");
  ASSERT_TRUE(inside.ok());
  ReadResult ok = ReadAll((*cluster)->address(), *inside, o);
  ASSERT_TRUE(ok.status.ok()) << ok.status;
  EXPECT_EQ(ok.elements, 4);

  for (const std::string& pipeline :
       {"text_line_dataset(['" + outside_ + "/secret.txt']).batch(2)",
        "text_line_dataset(['" + root_ + "/link.txt']).batch(2)",
        // Names that only exist at run time: interleave opens what list_files matched.
        "list_files('" + root_ + "/*.txt').interleave(lambda f: text_line_dataset(f), "
        "cycle_length=1).batch(2)",
        "from_tensor_slices(['" + outside_ + "/secret.txt']).interleave(text_line_dataset, "
        "cycle_length=1).batch(2)"}) {
    auto ds = Dataset::Parse(pipeline);
    ASSERT_TRUE(ds.ok()) << pipeline << ": " << ds.status();
    ReadResult r = ReadAll((*cluster)->address(), *ds, o);
    EXPECT_EQ(r.status.code(), absl::StatusCode::kPermissionDenied) << pipeline << ": "
                                                                     << r.status;
    EXPECT_NE(r.status.message().find("outside the data roots"), std::string::npos) << r.status;
    EXPECT_EQ(r.status.message().find("secret\n"), std::string::npos);  // no content leaks
  }
  // Still serving.
  ReadResult again = ReadAll((*cluster)->address(), *inside, o);
  ASSERT_TRUE(again.status.ok()) << again.status;
  EXPECT_EQ(again.elements, 4);
}

TEST_F(DataRootsTest, CoordinatorRefusesToRegisterFilesOutsideItsRoots) {
  auto cluster = SecureCluster::Start({.num_workers = 1, .coordinator_roots = roots_});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ServiceOptions o;
  o.retry_deadline = absl::Seconds(5);
  o.sharding_policy = ServiceShardingPolicy::kFile;
  auto outside = Dataset::Parse("text_line_dataset(['" + outside_ + "/secret.txt']).batch(2)");
  ASSERT_TRUE(outside.ok());
  ReadResult r = ReadAll((*cluster)->address(), *outside, o);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kPermissionDenied) << r.status;
  EXPECT_NE(r.status.message().find(outside_ + "/secret.txt"), std::string::npos) << r.status;
  auto inside = Dataset::Parse("text_line_dataset(['" + root_ + "/a.txt']).batch(2)");
  ASSERT_TRUE(inside.ok());
  ReadResult ok = ReadAll((*cluster)->address(), *inside, o);
  ASSERT_TRUE(ok.status.ok()) << ok.status;
  EXPECT_EQ(ok.elements, 4);
}

TEST(DataRootsUrlNormalizationTest, UrlsAreComparedNormalizedNotAsText) {
  absl::StatusOr<DataRoots> roots =
      DataRoots::Create({"s3://bucket/data", "HTTPS://Files.Example.com:443/pub/"});
  ASSERT_TRUE(roots.ok()) << roots.status();
  EXPECT_EQ(roots->roots(),
            (std::vector<std::string>{"s3://bucket/data/", "https://files.example.com/pub/"}));
  for (const char* inside :
       {"s3://bucket/data/a", "S3://BUCKET/data/a", "s3://bucket/data//x/./y",
        "s3://bucket/data/x/../y", "s3://bucket/data/%7ex", "https://files.example.com/pub/a",
        "https://files.example.com:443/pub/a", "https://FILES.example.com./pub//a",
        "https://files.example.com/pub/a?sig=1"}) {
    absl::Status s = roots->CheckPath(inside);
    EXPECT_TRUE(s.ok()) << inside << ": " << s;
  }
  for (const char* outside :
       {"s3://bucket/data/%2e%2e/secret", "s3://bucket/data/%2E%2E/secret",
        "s3://bucket/data/.%2e/secret", "s3://bucket/data/x/../../secret",
        "s3://bucket/database/a", "s3://bucket/dat%61base/a", "s3://bucket//data/../x",
        "s3://bucket/data/..%2fsecret", "s3://bucket/data/..%5csecret",
        "s3://bucket/data/..\\secret", "s3://bucket/../data/a", "s3://other/data/a",
        "https://files.example.com:8443/pub/a", "http://files.example.com/pub/a",
        "https://files.example.com/pub/%2e%2e/private", "https://files.example.com/public/a",
        "https://evil.com@files.example.com.evil.com/pub/a"}) {
    absl::Status s = roots->CheckPath(outside);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << outside << ": " << s;
  }
  absl::Status s = roots->CheckPath("https://user:hunter2@files.example.com/private?token=t0p");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(s.message(), "https://files.example.com/private")) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), "hunter2")) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), "t0p")) << s;
  EXPECT_EQ(roots->CheckPattern("s3://bucket/data/*/%2e%2e/%2e%2e/x*").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(roots->CheckPattern("s3://bucket/data/train-*").ok());
  for (const char* bad :
       {"s3://bucket/../x", "http://h:99999/", "https://user:pw@host/x", "http://h/x?y=1"}) {
    EXPECT_EQ(DataRoots::Create({bad}).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

// The default deployment: a worker with no --data_root. Pipelines naming the metadata service,
// loopback or private addresses (numeric tricks included) fail with PERMISSION_DENIED, no request
// reaches the transport, and the worker keeps serving.
TEST(RemoteReadsTest, AWorkerWithoutRootsRefusesNonPublicAddressesBeforeConnecting) {
  SetProcessRemoteAccessPolicy(nullptr);  // the process default: public addresses only
  auto transport = std::make_shared<testing_util::NoConnectionTransport>();
  HttpFileSystemOptions http;
  http.http = transport;
  RegisterFileSystem("http", NewHttpFileSystem(http));
  RegisterFileSystem("https", NewHttpFileSystem(http));

  auto cluster = SecureCluster::Start({.num_workers = 1});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ServiceOptions o;
  o.retry_deadline = absl::Seconds(5);
  o.sharding_policy = ServiceShardingPolicy::kOff;
  for (const char* url :
       {"http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://2852039166/latest/meta-data/", "http://0xA9FEA9FE/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/latest/", "http://[fd00:ec2::254]/latest/",
        "http://localhost:8500/v1/kv/", "http://127.1:2379/v2/keys", "http://10.0.0.1/",
        "https://user:hunter2@192.168.1.1/x?sig=t0p"}) {
    auto ds = Dataset::Parse(std::string("text_line_dataset(['") + url + "']).batch(2)");
    ASSERT_TRUE(ds.ok()) << url << ": " << ds.status();
    ReadResult r = ReadAll((*cluster)->address(), *ds, o);
    EXPECT_EQ(r.status.code(), absl::StatusCode::kPermissionDenied) << url << ": " << r.status;
    EXPECT_TRUE(absl::StrContains(r.status.message(), "--data_root=")) << r.status;
    EXPECT_FALSE(absl::StrContains(r.status.message(), "hunter2")) << r.status;
    EXPECT_FALSE(absl::StrContains(r.status.message(), "t0p")) << r.status;
  }
  EXPECT_EQ(transport->calls(), 0);
  auto ok = Dataset::Parse("range(6).batch(2)");
  ASSERT_TRUE(ok.ok());
  ReadResult again = ReadAll((*cluster)->address(), *ok, o);
  ASSERT_TRUE(again.status.ok()) << again.status;
  EXPECT_EQ(again.elements, 6);
  RegisterFileSystem("http", NewHttpFileSystem({}));
  RegisterFileSystem("https", NewHttpFileSystem({}));
}

// A name that resolves to the metadata service is refused on the address, not the name; a root
// naming the endpoint is how an operator allows a private server.
TEST(RemoteReadsTest, NamesAreJudgedByTheirAddressesAndRootsAllowEndpoints) {
  auto resolver = std::make_shared<testing_util::FakeHostResolver>();
  resolver->Set("metadata.google.internal", {"169.254.169.254"});
  resolver->Set("minio.internal", {"10.1.2.3"});
  auto transport = std::make_shared<testing_util::NoConnectionTransport>();
  absl::StatusOr<DataRoots> roots = DataRoots::Create({"http://minio.internal:9000/datasets"});
  ASSERT_TRUE(roots.ok()) << roots.status();
  HttpFileSystemOptions http;
  http.http = transport;
  http.access = testing_util::TestPolicy(resolver, roots->roots());
  http.retry.sleep = [](absl::Duration) {};
  std::shared_ptr<FileSystem> fs = NewHttpFileSystem(http);
  EXPECT_EQ(fs->Stat("http://metadata.google.internal/computeMetadata/v1/").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(fs->Stat("http://minio.internal:9001/datasets/a").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(transport->calls(), 0);
  // The endpoint the root names is admitted, at its private address, and only under the root's
  // path at graph time.
  absl::StatusOr<AdmittedUrl> admitted =
      http.access->Admit("http://minio.internal:9000/datasets/a");
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->addresses[0].ToString(), "10.1.2.3");
  EXPECT_TRUE(roots->CheckPath("http://minio.internal:9000/datasets/a").ok());
  EXPECT_EQ(roots->CheckPath("http://minio.internal:9000/other/a").code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace sluice
