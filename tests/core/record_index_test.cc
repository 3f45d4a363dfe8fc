// The record index: offsets, caching next to the file or in a cache dir, reuse, staleness,
// corrupt index files, and errors for corrupt data.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/io/record_index.h"
#include "core/io/tfrecord_reader.h"
#include "core/io/tfrecord_writer.h"
#include "gtest/gtest.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using record_test::Fixture;
using record_test::ReadWholeFile;
using record_test::TempDir;
using record_test::WriteWholeFile;

void WriteRecords(const std::string& path, const std::vector<std::string>& records) {
  std::string bytes;
  for (const std::string& r : records) AppendTFRecord(r, &bytes);
  WriteWholeFile(path, bytes);
}

std::vector<std::string> Numbered(int n, size_t pad = 0) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("record-" + std::to_string(i) + std::string(pad, 'x'));
  return out;
}

// Sets the file's mtime explicitly so staleness does not depend on the clock's resolution.
void SetMtime(const std::string& path, int64_t seconds) {
  struct timespec times[2];
  times[0].tv_sec = times[1].tv_sec = seconds;
  times[0].tv_nsec = times[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

TEST(RecordIndexTest, OffsetsPointAtEveryRecord) {
  TempDir dir;
  const std::vector<std::string> records = Numbered(50, 300);
  WriteRecords(dir.File("d.tfrecord"), records);
  auto index = RecordIndex::Build(dir.File("d.tfrecord"));
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->num_records(), 50);
  auto reader = TFRecordReader::Open(dir.File("d.tfrecord"));
  ASSERT_TRUE(reader.ok());
  for (int64_t i : {49, 0, 17, 3, 48}) {
    ASSERT_TRUE((*reader)->Seek(index->offset(i)).ok());
    std::string rec;
    ASSERT_TRUE((*reader)->ReadRecord(&rec).ok());
    EXPECT_EQ(rec, records[static_cast<size_t>(i)]);
  }
}

TEST(RecordIndexTest, BuiltOnceThenLoadedAndRebuiltWhenStale) {
  TempDir dir;
  const std::string file = dir.File("d.tfrecord");
  WriteRecords(file, Numbered(10));
  SetMtime(file, 1000000);
  bool built = false;
  auto first = RecordIndex::LoadOrBuild(file, {}, &built);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(built);
  EXPECT_TRUE(std::filesystem::exists(file + ".sluice-idx"));
  EXPECT_EQ(RecordIndexPath(file, {}), file + ".sluice-idx");
  auto second = RecordIndex::LoadOrBuild(file, {}, &built);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(built);
  EXPECT_EQ(second->offsets(), first->offsets());
  // Same size, another mtime: stale.
  WriteRecords(file, Numbered(10));
  SetMtime(file, 2000000);
  auto third = RecordIndex::LoadOrBuild(file, {}, &built);
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(built);
  // Appended records (size changes, mtime forced equal to the cached one): stale too.
  WriteRecords(file, Numbered(12));
  SetMtime(file, 2000000);
  auto fourth = RecordIndex::LoadOrBuild(file, {}, &built);
  ASSERT_TRUE(fourth.ok());
  EXPECT_TRUE(built);
  EXPECT_EQ(fourth->num_records(), 12);
}

TEST(RecordIndexTest, CacheDirAndCorruptIndexFiles) {
  TempDir dir;
  TempDir cache;
  const std::string file = dir.File("d.tfrecord");
  WriteRecords(file, Numbered(7));
  RecordIndexOptions o;
  o.cache_dir = cache.path() + "/nested";
  bool built = false;
  ASSERT_TRUE(RecordIndex::LoadOrBuild(file, o, &built).ok());
  const std::string path = RecordIndexPath(file, o);
  EXPECT_TRUE(absl::StartsWith(path, o.cache_dir));
  EXPECT_TRUE(absl::EndsWith(path, "-d.tfrecord.sluice-idx"));
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(file + ".sluice-idx"));
  // A corrupt index file is reported by Load and rebuilt by LoadOrBuild.
  std::string bytes = ReadWholeFile(path);
  bytes[bytes.size() / 2] ^= 0x10;
  WriteWholeFile(path, bytes);
  auto loaded = RecordIndex::Load(path);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), path));
  auto rebuilt = RecordIndex::LoadOrBuild(file, o, &built);
  ASSERT_TRUE(rebuilt.ok());
  EXPECT_TRUE(built);
  EXPECT_EQ(rebuilt->num_records(), 7);
  // Another version is not read.
  bytes = ReadWholeFile(path);
  bytes[8] = 9;
  WriteWholeFile(path, bytes);
  EXPECT_TRUE(absl::StrContains(RecordIndex::Load(path).status().message(), "version"));
  // Not persisted: nothing written.
  TempDir cache2;
  o.cache_dir = cache2.path();
  o.persist = false;
  ASSERT_TRUE(RecordIndex::LoadOrBuild(file, o).ok());
  EXPECT_FALSE(std::filesystem::exists(RecordIndexPath(file, o)));
}

TEST(RecordIndexTest, CorruptOrTruncatedDataIsDataLossAndMissingIsNotFound) {
  TempDir dir;
  const std::string file = dir.File("d.tfrecord");
  WriteRecords(file, Numbered(5));
  std::string bytes = ReadWholeFile(file);
  WriteWholeFile(file, bytes.substr(0, bytes.size() - 3));
  auto truncated = RecordIndex::Build(file);
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(truncated.status().message(), "truncated record"));
  bytes[8] ^= 1;  // record 0's length crc
  WriteWholeFile(file, bytes);
  auto corrupt = RecordIndex::Build(file);
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(corrupt.status().message(), "byte offset 0"));
  EXPECT_EQ(RecordIndex::LoadOrBuild(dir.File("missing")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RecordIndexTest, TensorFlowFixture) {
  TempDir cache;
  RecordIndexOptions o;
  o.cache_dir = cache.path();
  auto index = RecordIndex::LoadOrBuild(Fixture("plain.tfrecord"), o);
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(index->offsets(), (std::vector<uint64_t>{0, 16, 33, 60, 1100}));
}

}  // namespace
}  // namespace sluice
