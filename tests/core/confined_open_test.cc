// Local opens confined to the data roots at open time (core/io/confined_open.h): a symbolic link
// inside a root that points out of it, one made after the graph was checked, or a folder swapped
// for a link, are all refused when the file is opened, with openat2 RESOLVE_BENEATH and with the
// O_NOFOLLOW walk used where openat2 is missing.
#include "core/io/confined_open.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "core/data/data_roots.h"
#include "core/io/local_file_system.h"
#include "core/io/record_index.h"
#include "core/io/tfrecord_writer.h"
#include "gtest/gtest.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

bool Openat2Available() {
  absl::StatusOr<int> fd = OpenBeneath("/", ".", O_PATH, 0, BeneathMethod::kOpenat2);
  if (fd.ok()) ::close(*fd);
  return fd.ok();
}

std::string ReadAll(FileSystem& fs, const std::string& path) {
  absl::StatusOr<std::unique_ptr<InputStream>> in = fs.NewInputStream(path);
  if (!in.ok()) return "error: " + in.status().ToString();
  std::string buf(100, '\0');
  absl::StatusOr<size_t> n = (*in)->Read(buf.data(), buf.size());
  if (!n.ok()) return "error: " + n.status().ToString();
  return buf.substr(0, *n);
}

class ConfinedOpenTest : public ::testing::TestWithParam<BeneathMethod> {
 protected:
  void SetUp() override {
    if (GetParam() == BeneathMethod::kOpenat2 && !Openat2Available()) {
      GTEST_SKIP() << "openat2 is not available on this kernel";
    }
    char real[PATH_MAX];
    ASSERT_NE(::realpath(dir_.path().c_str(), real), nullptr);
    base_ = real;
    root_ = base_ + "/root";
    outside_ = base_ + "/outside";
    std::filesystem::create_directories(root_ + "/sub");
    std::filesystem::create_directories(outside_);
    record_test::WriteWholeFile(root_ + "/a.txt", "inside\n");
    record_test::WriteWholeFile(root_ + "/sub/b.txt", "inside b\n");
    record_test::WriteWholeFile(outside_ + "/secret.txt", "secret\n");
    confinement_.confined = true;
    confinement_.roots = {root_};
    confinement_.method = GetParam();
    fs_ = NewLocalFileSystem(confinement_);
  }

  record_test::TempDir dir_;
  std::string base_, root_, outside_;
  LocalConfinement confinement_;
  std::shared_ptr<FileSystem> fs_;
};

TEST_P(ConfinedOpenTest, FilesInsideOpen) {
  EXPECT_EQ(ReadAll(*fs_, root_ + "/a.txt"), "inside\n");
  EXPECT_EQ(ReadAll(*fs_, "file://" + root_ + "/sub/b.txt"), "inside b\n");
  EXPECT_EQ(ReadAll(*fs_, root_ + "/sub/../a.txt"), "inside\n");
  absl::StatusOr<FileStat> st = fs_->Stat(root_ + "/a.txt");
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->size, 7u);
  EXPECT_EQ(fs_->NewInputStream(root_ + "/none.txt").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(ConfinedOpenTest, PathsOutsideEveryRootAreRefused) {
  for (const std::string& path :
       {outside_ + "/secret.txt", root_ + "/../outside/secret.txt", std::string("/etc/passwd")}) {
    absl::Status s = fs_->NewInputStream(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << path << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
    EXPECT_EQ(fs_->Stat(path).status().code(), absl::StatusCode::kPermissionDenied) << path;
  }
}

TEST_P(ConfinedOpenTest, ASymlinkInsideThatPointsOutIsRefusedAtOpenTime) {
  ASSERT_EQ(::symlink((outside_ + "/secret.txt").c_str(), (root_ + "/link.txt").c_str()), 0);
  ASSERT_EQ(::symlink(outside_.c_str(), (root_ + "/linkdir").c_str()), 0);
  for (const std::string& path : {root_ + "/link.txt", root_ + "/linkdir/secret.txt"}) {
    absl::Status s = fs_->NewInputStream(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << path << ": " << s;
    EXPECT_EQ(fs_->NewRandomAccessFile(path).status().code(),
              absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(fs_->Stat(path).status().code(), absl::StatusCode::kPermissionDenied);
  }
  // Below the root the kernel is the judge, whatever the parent resolution saw: a relative
  // path through the link is refused by openat2 (EXDEV) or by the walk (O_NOFOLLOW).
  absl::StatusOr<int> fd = OpenBeneath(root_, "linkdir/secret.txt", O_RDONLY, 0, GetParam());
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied) << fd.status();
  fd = OpenBeneath(root_, "link.txt", O_RDONLY, 0, GetParam());
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied) << fd.status();
  fd = OpenBeneath(root_, "../outside/secret.txt", O_RDONLY, 0, GetParam());
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied) << fd.status();
}

TEST_P(ConfinedOpenTest, ASymlinkSwappedInAfterTheCheckIsRefused) {
  absl::StatusOr<DataRoots> roots = DataRoots::Create({root_});
  ASSERT_TRUE(roots.ok()) << roots.status();
  // Checked while it is a plain file (graph time) ...
  ASSERT_TRUE(roots->CheckPath(root_ + "/a.txt").ok());
  ASSERT_TRUE(roots->CheckPath(root_ + "/sub/b.txt").ok());
  // ... then replaced by a link out, and a folder by a link to a folder outside.
  ASSERT_EQ(std::remove((root_ + "/a.txt").c_str()), 0);
  ASSERT_EQ(::symlink((outside_ + "/secret.txt").c_str(), (root_ + "/a.txt").c_str()), 0);
  std::filesystem::remove_all(root_ + "/sub");
  record_test::WriteWholeFile(outside_ + "/b.txt", "secret b\n");
  ASSERT_EQ(::symlink(outside_.c_str(), (root_ + "/sub").c_str()), 0);
  for (const std::string& path : {root_ + "/a.txt", root_ + "/sub/b.txt"}) {
    const std::string got = ReadAll(*fs_, path);
    EXPECT_TRUE(absl::StartsWith(got, "error: PERMISSION_DENIED")) << path << ": " << got;
    EXPECT_FALSE(absl::StrContains(got, "secret\n")) << got;
  }
}

TEST_P(ConfinedOpenTest, LinksThatStayInsideFollowOnlyWithOpenat2) {
  ASSERT_EQ(::symlink("sub/b.txt", (root_ + "/inner.txt").c_str()), 0);
  absl::StatusOr<int> fd = OpenBeneath(root_, "inner.txt", O_RDONLY, 0, GetParam());
  if (GetParam() == BeneathMethod::kComponentWalk) {
    EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied) << fd.status();
  } else {
    ASSERT_TRUE(fd.ok()) << fd.status();
    ::close(*fd);
  }
}

TEST_P(ConfinedOpenTest, CreatesStayInsideToo) {
  absl::StatusOr<int> fd = OpenConfined(confinement_, root_ + "/new.cache",
                                        O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_TRUE(fd.ok()) << fd.status();
  ::close(*fd);
  ASSERT_EQ(::symlink((outside_ + "/planted").c_str(), (root_ + "/planted").c_str()), 0);
  fd = OpenConfined(confinement_, root_ + "/planted", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied) << fd.status();
  EXPECT_FALSE(std::filesystem::exists(outside_ + "/planted"));
}

TEST_P(ConfinedOpenTest, ConfinedWithoutLocalRootsOpensNothingAndUnconfinedOpensAnything) {
  LocalConfinement none{.confined = true, .roots = {}, .method = GetParam()};
  EXPECT_EQ(OpenConfined(none, root_ + "/a.txt", O_RDONLY).status().code(),
            absl::StatusCode::kPermissionDenied);
  absl::StatusOr<int> fd = OpenConfined(LocalConfinement{}, outside_ + "/secret.txt", O_RDONLY);
  ASSERT_TRUE(fd.ok()) << fd.status();
  ::close(*fd);
}

INSTANTIATE_TEST_SUITE_P(Methods, ConfinedOpenTest,
                         ::testing::Values(BeneathMethod::kOpenat2, BeneathMethod::kComponentWalk),
                         [](const ::testing::TestParamInfo<BeneathMethod>& info) {
                           return info.param == BeneathMethod::kOpenat2 ? "Openat2" : "Walk";
                         });

// Record index caches live where the server puts them (--index_cache_dir, $TMPDIR), outside the
// data roots when the data is read-only: confinement must not turn every load into a rebuild.
TEST(ConfinedIndexCacheTest, AnIndexCacheOutsideTheRootsStillServes) {
  record_test::TempDir dir;
  char real[PATH_MAX];
  ASSERT_NE(::realpath(dir.path().c_str(), real), nullptr);
  const std::string root = std::string(real) + "/root";
  const std::string cache = std::string(real) + "/cache";
  std::filesystem::create_directories(root);
  std::string bytes;
  for (const char* r : {"a", "bb", "ccc"}) AppendTFRecord(r, &bytes);
  record_test::WriteWholeFile(root + "/a.tfrecord", bytes);
  SetProcessLocalConfinement({.confined = true, .roots = {root}, .method = BeneathMethod::kAuto});
  RecordIndexOptions o;
  o.cache_dir = cache;
  bool built = false;
  absl::StatusOr<RecordIndex> first = RecordIndex::LoadOrBuild(root + "/a.tfrecord", o, &built);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(built);
  absl::StatusOr<RecordIndex> second = RecordIndex::LoadOrBuild(root + "/a.tfrecord", o, &built);
  SetProcessLocalConfinement({});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(built) << "the cached index in " << cache << " was not loaded";
}

}  // namespace
}  // namespace sluice
