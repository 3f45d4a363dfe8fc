// Data roots: a worker (and the coordinator) reads only files under its configured folders. A
// pipeline naming another file, escaping with '..', or reaching out through a symlink (also one
// that list_files matches and interleave opens) fails with PERMISSION_DENIED naming the path;
// the consumer sees that error and the worker keeps serving.
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "core/data/data_roots.h"
#include "gtest/gtest.h"
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

}  // namespace
}  // namespace sluice
