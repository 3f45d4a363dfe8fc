// FileSystem: URL schemes pick the file system, and every reader (tf_record, fixed-length, text
// line, CSV, npy, the random-access sources) and list_files read through it: the same pipelines
// over an in-memory fake registered as "mem://" give what they give over local files, errors name
// the URL, and file:// URLs are local files.
#include "core/io/file_system.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/data/data_roots.h"
#include "proto/dataset.pb.h"
#include "sluice/dataset.h"
#include "core/data/ops/npy_reader.h"
#include "core/data/ops/random_access_source.h"
#include "core/format/tensor_format.h"
#include "core/io/tfrecord_writer.h"
#include "gtest/gtest.h"
#include "tests/core/iterator_test_util.h"
#include "tests/core/memory_file_system.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using record_test::TempDir;
using record_test::NpyInt32Pairs;
using record_test::WriteWholeFile;
using testing_util::MemoryFileSystem;
using testing_util::RunDataset;

// Runs `expression` and renders each element, so that runs over two file systems compare.
absl::StatusOr<std::vector<std::string>> Render(const std::string& expression) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  if (!ds.ok()) return ds.status();
  absl::StatusOr<std::vector<Element>> got = RunDataset(*ds);
  if (!got.ok()) return got.status();
  std::vector<std::string> out;
  for (const Element& e : *got) {
    out.push_back(FormatElementRepr(e));
  }
  return out;
}

std::string TFRecords(int file, int n) {
  std::string bytes;
  for (int j = 0; j < n; ++j) AppendTFRecord(absl::StrCat("f", file, "-", j), &bytes);
  return bytes;
}

// The same files in a local folder and in a fresh "mem://data/" fake.
class FileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = std::make_shared<MemoryFileSystem>();
    RegisterFileSystem("mem", mem_);
  }
  void TearDown() override { RegisterFileSystem("mem", std::make_shared<MemoryFileSystem>()); }

  void PutBoth(const std::string& name, const std::string& bytes) {
    WriteWholeFile(dir_.File(name), bytes);
    mem_->Put("mem://data/" + name, bytes);
  }
  std::string Local(const std::string& name) { return dir_.File(name); }
  static std::string Mem(const std::string& name) { return "mem://data/" + name; }

  // Runs `make(local name)` and `make(mem name)` and expects the same non-empty elements.
  template <typename Make>
  void ExpectSameRun(Make make) {
    absl::StatusOr<std::vector<std::string>> local =
        Render(make([this](const std::string& n) { return Local(n); }));
    ASSERT_TRUE(local.ok()) << local.status();
    const int64_t opens_before = mem_->opens();
    absl::StatusOr<std::vector<std::string>> remote =
        Render(make([](const std::string& n) { return Mem(n); }));
    ASSERT_TRUE(remote.ok()) << remote.status();
    EXPECT_FALSE(local->empty());
    EXPECT_EQ(*remote, *local);
    EXPECT_GT(mem_->opens(), opens_before) << "the reads did not go through the file system";
  }

  TempDir dir_;
  std::shared_ptr<MemoryFileSystem> mem_;
};

TEST(UrlTest, SchemesAndLocalPaths) {
  EXPECT_EQ(UrlScheme("s3://bucket/key"), "s3");
  EXPECT_EQ(UrlScheme("GS://bucket/key"), "gs");
  EXPECT_EQ(UrlScheme("https://host/a"), "https");
  EXPECT_EQ(UrlScheme("/data/a.tfrecord"), "");
  EXPECT_EQ(UrlScheme("relative/dir://x"), "");
  EXPECT_EQ(UrlScheme("://x"), "");
  EXPECT_TRUE(IsLocalPath("/data/x"));
  EXPECT_TRUE(IsLocalPath("file:///data/x"));
  EXPECT_FALSE(IsLocalPath("s3://b/x"));
  EXPECT_EQ(LocalPathOf("file:///data/x"), "/data/x");
  EXPECT_EQ(LocalPathOf("/data/x"), "/data/x");
}

TEST(UrlTest, GlobHelpers) {
  EXPECT_EQ(GlobListPrefix("s3://b/train/part-*.tfrecord"), "s3://b/train/");
  EXPECT_EQ(GlobListPrefix("s3://b/tr*/x"), "s3://b/");
  EXPECT_EQ(GlobListPrefix("s3://b/exact"), "s3://b/exact");
  EXPECT_TRUE(GlobMatches("s3://b/train/*.rec", "s3://b/train/a.rec"));
  EXPECT_FALSE(GlobMatches("s3://b/train/*.rec", "s3://b/train/sub/a.rec"));
  EXPECT_TRUE(GlobMatches("s3://b/t?ain/[ab].rec", "s3://b/train/b.rec"));
}

TEST(UrlTest, UnknownSchemeIsInvalidArgumentNamingTheUrl) {
  absl::StatusOr<FileSystem*> fs = FileSystemFor("nosuch://bucket/key");
  ASSERT_FALSE(fs.ok());
  EXPECT_EQ(fs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(fs.status().message(), "nosuch://bucket/key"));
  absl::StatusOr<std::vector<std::string>> r = Render("tf_record_dataset('nosuch://b/x')");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(FileSystemTest, TFRecordAndListFilesGoThroughTheFileSystem) {
  for (int f = 0; f < 3; ++f) PutBoth(absl::StrCat("r", f, ".tfrecord"), TFRecords(f, 4 + f));
  PutBoth("other.txt", "not a record file");
  ExpectSameRun([](auto name) {
    return absl::StrCat("tf_record_dataset(['", name("r0.tfrecord"), "', '", name("r2.tfrecord"),
                        "'])");
  });
  ExpectSameRun([](auto name) {
    return absl::StrCat("list_files('", name("r*.tfrecord"),
                        "').interleave(lambda f: tf_record_dataset(f), cycle_length=2)");
  });
  const int64_t globs = mem_->globs();
  absl::StatusOr<std::vector<std::string>> names = Render("list_files('mem://data/r*.tfrecord')");
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(names->size(), 3u);
  EXPECT_GT(mem_->globs(), globs);
}

TEST_F(FileSystemTest, ListFilesStarStaysInOneSegment) {
  mem_->Put("mem://data/a.rec", "");
  mem_->Put("mem://data/sub/b.rec", "");
  absl::StatusOr<std::vector<std::string>> names = GlobFiles("mem://data/*.rec");
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, std::vector<std::string>{"mem://data/a.rec"});
  absl::StatusOr<std::vector<std::string>> none = Render("list_files('mem://data/*.none')");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(none.status().message(), "mem://data/*.none"));
}

TEST_F(FileSystemTest, TextLineCsvAndFixedLength) {
  PutBoth("a.txt", "one\ntwo\r\nthree");
  PutBoth("b.csv", "1,x\n2,y\n3,z\n");
  std::string fixed = "HDR";
  for (int i = 0; i < 6; ++i) fixed += absl::StrCat("r", i, "!");
  fixed += "FT";
  PutBoth("c.bin", fixed);
  ExpectSameRun([](auto name) { return absl::StrCat("text_line_dataset('", name("a.txt"), "')"); });
  ExpectSameRun([](auto name) {
    return absl::StrCat("csv_dataset('", name("b.csv"), "', record_defaults=[0, ''])");
  });
  ExpectSameRun([](auto name) {
    return absl::StrCat("fixed_length_record_dataset('", name("c.bin"),
                        "', 3, header_bytes=3, footer_bytes=2)");
  });
}

TEST_F(FileSystemTest, NpyIsReadWholeFromARemoteStore) {
  PutBoth("a.npy", NpyInt32Pairs(3, 0));
  PutBoth("b.npy", NpyInt32Pairs(2, 100));
  ExpectSameRun([](auto name) {
    return absl::StrCat("npy_dataset(['", name("a.npy"), "', '", name("b.npy"), "'])");
  });
  mem_->Put("mem://data/short.npy", NpyInt32Pairs(3, 0).substr(0, 100));
  absl::StatusOr<std::vector<std::string>> r = Render("npy_dataset('mem://data/short.npy')");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "truncated")) << r.status();
}

TEST_F(FileSystemTest, RandomAccessSourcesReadRanges) {
  PutBoth("r0.tfrecord", TFRecords(0, 5));
  PutBoth("r1.tfrecord", TFRecords(1, 3));
  for (const auto& [names, tag] :
       {std::pair{std::vector<std::string>{Local("r0.tfrecord"), Local("r1.tfrecord")}, "local"},
        std::pair{std::vector<std::string>{Mem("r0.tfrecord"), Mem("r1.tfrecord")}, "mem"}}) {
    proto::SourceDef source = Dataset::TFRecord(names).def().source();
    absl::StatusOr<std::unique_ptr<RandomAccessSource>> ra = RandomAccessSource::Open(source);
    ASSERT_TRUE(ra.ok()) << tag << ": " << ra.status();
    ASSERT_EQ((*ra)->size(), 8) << tag;
    absl::StatusOr<Element> e = (*ra)->Get(6);
    ASSERT_TRUE(e.ok()) << tag << ": " << e.status();
    EXPECT_EQ(e->leaf().string_at(0), "f1-1") << tag;
  }
}

TEST_F(FileSystemTest, MissingFilesAreNotFoundNamingTheUrl) {
  for (const std::string& expr :
       {std::string("tf_record_dataset('mem://data/missing.tfrecord')"),
        std::string("text_line_dataset('mem://data/missing.txt')"),
        std::string("csv_dataset('mem://data/missing.csv', record_defaults=[0])"),
        std::string("npy_dataset('mem://data/missing.npy')")}) {
    absl::StatusOr<std::vector<std::string>> r = Render(expr);
    ASSERT_FALSE(r.ok()) << expr;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << expr << ": " << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "mem://data/missing")) << r.status();
  }
}

TEST_F(FileSystemTest, FileUrlsAreLocalFiles) {
  PutBoth("r0.tfrecord", TFRecords(0, 3));
  absl::StatusOr<std::vector<std::string>> plain =
      Render(absl::StrCat("tf_record_dataset('", Local("r0.tfrecord"), "')"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<std::vector<std::string>> url =
      Render(absl::StrCat("tf_record_dataset('file://", Local("r0.tfrecord"), "')"));
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(*url, *plain);
  absl::StatusOr<std::vector<std::string>> listed =
      GlobFiles(absl::StrCat("file://", Local("r*.tfrecord")));
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(*listed, std::vector<std::string>{absl::StrCat("file://", Local("r0.tfrecord"))});
}

TEST(DataRootsUrlTest, UrlsOnlyUnderUrlRoots) {
  TempDir dir;
  absl::StatusOr<DataRoots> local_only = DataRoots::Create({dir.path()});
  ASSERT_TRUE(local_only.ok()) << local_only.status();
  absl::Status s = local_only->CheckPath("s3://bucket/data/a.tfrecord");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "s3://bucket/data/a.tfrecord")) << s;
  EXPECT_TRUE(local_only->CheckPath(absl::StrCat("file://", dir.path(), "/x")).ok());
  EXPECT_EQ(local_only->CheckPath("file:///etc/passwd").code(),
            absl::StatusCode::kPermissionDenied);

  absl::StatusOr<DataRoots> roots = DataRoots::Create({dir.path(), "s3://bucket/data"});
  ASSERT_TRUE(roots.ok()) << roots.status();
  EXPECT_TRUE(roots->CheckPath("s3://bucket/data/a.tfrecord").ok());
  EXPECT_TRUE(roots->CheckPattern("s3://bucket/data/train-*.tfrecord").ok());
  EXPECT_TRUE(roots->CheckPath(absl::StrCat(dir.path(), "/a")).ok());
  for (const std::string& denied :
       {std::string("s3://bucket/database/a"), std::string("s3://bucket/data/../secret/a"),
        std::string("s3://other/data/a"), std::string("gs://bucket/data/a"),
        std::string("https://bucket/data/a")}) {
    EXPECT_EQ(roots->CheckPath(denied).code(), absl::StatusCode::kPermissionDenied) << denied;
  }
  EXPECT_EQ(roots->CheckPattern("s3://bucket/d*/a").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(roots->CheckPattern("s3://bucket/data/*/../../x").code(),
            absl::StatusCode::kPermissionDenied);
  absl::StatusOr<Dataset> ds = Dataset::Parse(
      "list_files('s3://bucket/data/*.tfrecord').interleave(lambda f: tf_record_dataset(f))");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_TRUE(roots->CheckDataset(ds->def()).ok());
  EXPECT_EQ(local_only->CheckDataset(ds->def()).code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace sluice
