// RandomAccessSource: Get(i) equals the i-th element of sequential iteration for every
// supported source (range, from_tensors, from_tensor_slices, tf_record with record ranges,
// fixed-length records, npy in both byte orders), and clear errors for the unsupported sources,
// bad indexes, missing and corrupt files.
#include "core/data/ops/random_access_source.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sluice/dataset.h"
#include "core/data/ops/npy_reader.h"
#include "core/tensor/proto_convert.h"
#include "core/io/tfrecord_writer.h"
#include "gtest/gtest.h"
#include "tests/core/iterator_test_util.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using record_test::TempDir;
using record_test::NpyInt32Pairs;
using record_test::WriteWholeFile;
using testing_util::RunDataset;

Dataset DatasetOf(const proto::SourceDef& source) {
  proto::DatasetDef def;
  def.set_version(proto::DATASET_GRAPH_VERSION_1);
  *def.mutable_source() = source;
  absl::StatusOr<Dataset> ds = Dataset::FromDef(def);
  EXPECT_TRUE(ds.ok()) << ds.status();
  return ds.ok() ? *ds : Dataset::Range(0);
}

void ExpectSameElement(const Element& got, const Element& want, int64_t i) {
  std::vector<Tensor> g = got.Flatten(), w = want.Flatten();
  ASSERT_EQ(g.size(), w.size()) << "element " << i;
  for (size_t k = 0; k < g.size(); ++k) {
    EXPECT_TRUE(g[k].Equals(w[k])) << "element " << i << " leaf " << k;
  }
}

// Opens `source`, checks size() and every Get (in a scrambled order, so that no read relies on
// the previous one) against sequential iteration.
void ExpectMatchesSequential(const proto::SourceDef& source) {
  absl::StatusOr<std::vector<Element>> want = RunDataset(DatasetOf(source));
  ASSERT_TRUE(want.ok()) << want.status();
  absl::StatusOr<std::unique_ptr<RandomAccessSource>> ra = RandomAccessSource::Open(source);
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_EQ((*ra)->size(), static_cast<int64_t>(want->size()));
  const int64_t n = (*ra)->size();
  std::vector<int64_t> scrambled;
  for (int64_t i = 0; i < n; ++i) scrambled.push_back(n - 1 - i);
  for (int64_t i = 0; i < n; i += 2) std::swap(scrambled[static_cast<size_t>(i)],
                                                scrambled[static_cast<size_t>(n - 1 - i)]);
  for (int64_t i : scrambled) {
    absl::StatusOr<Element> got = (*ra)->Get(i);
    ASSERT_TRUE(got.ok()) << "element " << i << ": " << got.status();
    ExpectSameElement(*got, (*want)[static_cast<size_t>(i)], i);
  }
  EXPECT_EQ(CheckRandomAccess(source), absl::OkStatus());
}

std::vector<std::string> WriteTFRecordFiles(const TempDir& dir, const std::vector<int>& counts) {
  std::vector<std::string> names;
  for (size_t f = 0; f < counts.size(); ++f) {
    std::string bytes;
    for (int j = 0; j < counts[f]; ++j) {
      const std::string pad(static_cast<size_t>(j * 13 % 50), 'x');
      AppendTFRecord(absl::StrCat("f", f, "-", j, pad), &bytes);
    }
    names.push_back(dir.File(absl::StrCat("r", f, ".tfrecord")));
    WriteWholeFile(names.back(), bytes);
  }
  return names;
}

TEST(RandomAccessSourceTest, Range) {
  for (auto [start, stop, step] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {0, 10, 1}, {3, 20, 4}, {10, 0, -3}, {5, 5, 1}, {-7, 7, 5}}) {
    SCOPED_TRACE(testing::Message() << start << ", " << stop << ", " << step);
    ExpectMatchesSequential(Dataset::Range(start, stop, step).def().source());
  }
}

TEST(RandomAccessSourceTest, FromTensorsAndSlices) {
  Element pair =
      Element::Tuple({Element(Tensor::FromVector<int64_t>({1, 2, 3, 4, 5, 6}, Shape({3, 2}))),
                      Element(Tensor::FromStrings({"a", "b", "c"}, Shape({3})))});
  ExpectMatchesSequential(Dataset::FromTensors(pair).def().source());
  ExpectMatchesSequential(Dataset::FromTensorSlices(pair).def().source());
}

TEST(RandomAccessSourceTest, TFRecordOverAllFilesInOrder) {
  TempDir dir;
  const std::vector<std::string> files = WriteTFRecordFiles(dir, {5, 0, 12, 1, 7});
  ExpectMatchesSequential(Dataset::TFRecord(files).def().source());
}

TEST(RandomAccessSourceTest, TFRecordHonoursRecordRange) {
  TempDir dir;
  const std::vector<std::string> files = WriteTFRecordFiles(dir, {5, 0, 12, 1, 7});
  for (auto [start, count] : std::vector<std::pair<int64_t, int64_t>>{
           {3, 7}, {0, -1}, {5, -1}, {17, 3}, {24, 10}, {25, -1}, {100, 4}, {4, 0}}) {
    SCOPED_TRACE(testing::Message() << "start " << start << " count " << count);
    proto::SourceDef source = Dataset::TFRecord(files).def().source();
    source.mutable_tf_record()->mutable_record_range()->set_start(start);
    source.mutable_tf_record()->mutable_record_range()->set_count(count);
    ExpectMatchesSequential(source);
  }
}

TEST(RandomAccessSourceTest, FixedLengthRecords) {
  TempDir dir;
  std::vector<std::string> files;
  for (int f = 0; f < 3; ++f) {
    std::string bytes = "HDR";
    for (int r = 0; r < 4 + f * 3; ++r) bytes += absl::StrCat("r", f, r % 10, "x");  // 4 bytes
    bytes += "FT";
    files.push_back(dir.File(absl::StrCat("f", f, ".bin")));
    WriteWholeFile(files.back(), bytes);
  }
  proto::SourceDef source = Dataset::FixedLengthRecord(files, 4, 3, 2).def().source();
  ExpectMatchesSequential(source);
  source.mutable_fixed_length_record()->mutable_record_range()->set_start(2);
  source.mutable_fixed_length_record()->mutable_record_range()->set_count(9);
  ExpectMatchesSequential(source);
}

// A version 1.0 .npy file of little-endian int32 rows of shape (2,).
void WriteNpy(const std::string& path, int rows, int base) {
  WriteWholeFile(path, NpyInt32Pairs(rows, base));
}

TEST(RandomAccessSourceTest, NpyOverFiles) {
  TempDir dir;
  std::vector<std::string> files = {dir.File("a.npy"), dir.File("b.npy"), dir.File("c.npy")};
  WriteNpy(files[0], 3, 0);
  WriteNpy(files[1], 0, 100);
  WriteNpy(files[2], 5, 200);
  absl::StatusOr<proto::NpySource> npy = MakeNpySource(files);
  ASSERT_TRUE(npy.ok()) << npy.status();
  proto::SourceDef source;
  *source.mutable_npy() = *npy;
  ExpectMatchesSequential(source);
}

TEST(RandomAccessSourceTest, NpyBigEndianIsSwapped) {
  absl::StatusOr<proto::NpySource> npy =
      MakeNpySource({"tests/testdata/transforms/npy/i32_be.npy"});
  ASSERT_TRUE(npy.ok()) << npy.status();
  proto::SourceDef source;
  *source.mutable_npy() = *npy;
  ExpectMatchesSequential(source);
}

TEST(RandomAccessSourceTest, UnsupportedSourcesSayWhy) {
  struct Case {
    std::string expression;
    std::string name;
  };
  for (const Case& c : std::vector<Case>{
           {"text_line_dataset(['a.txt'])", "text_line_dataset"},
           {"csv_dataset(['a.csv'], record_defaults=[0])", "csv_dataset"},
           {"list_files('*.txt')", "list_files"},
           {"tf_record_dataset(['a.tfrecord'], compression_type='GZIP')", "GZIP"},
           {"fixed_length_record_dataset(['a.bin'], 4, compression_type='ZLIB')", "ZLIB"}}) {
    SCOPED_TRACE(c.expression);
    absl::StatusOr<Dataset> ds = Dataset::Parse(c.expression);
    ASSERT_TRUE(ds.ok()) << ds.status();
    absl::Status check = CheckRandomAccess(ds->def().source());
    EXPECT_EQ(check.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(check.message(), "has no random access")) << check;
    EXPECT_TRUE(absl::StrContains(check.message(), c.name)) << check;
    absl::StatusOr<std::unique_ptr<RandomAccessSource>> ra =
        RandomAccessSource::Open(ds->def().source());
    EXPECT_EQ(ra.status().code(), absl::StatusCode::kFailedPrecondition);
  }
  proto::SourceDef permuted;
  *permuted.mutable_permuted()->mutable_source() = Dataset::Range(5).def().source();
  EXPECT_EQ(CheckRandomAccess(permuted).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckRandomAccess(proto::SourceDef()).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(RandomAccessSourceTest, BadIndexIsInvalidArgument) {
  auto ra = RandomAccessSource::Open(Dataset::Range(5).def().source());
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ((*ra)->Get(5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*ra)->Get(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RandomAccessSourceTest, MissingFileIsNotFoundNamingIt) {
  TempDir dir;
  const std::string missing = dir.File("missing.tfrecord");
  auto ra = RandomAccessSource::Open(Dataset::TFRecord({missing}).def().source());
  EXPECT_EQ(ra.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(ra.status().message(), missing)) << ra.status();
  auto fixed = RandomAccessSource::Open(Dataset::FixedLengthRecord({missing}, 4).def().source());
  EXPECT_EQ(fixed.status().code(), absl::StatusCode::kNotFound);
}

TEST(RandomAccessSourceTest, CorruptRecordIsDataLossNamingFileAndRecord) {
  TempDir dir;
  const std::vector<std::string> files = WriteTFRecordFiles(dir, {4});
  auto ra = RandomAccessSource::Open(Dataset::TFRecord(files).def().source());
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE((*ra)->Get(2).ok());
  // Flip a data byte of record 2 in place (same size; the open descriptor sees it).
  std::string bytes = record_test::ReadWholeFile(files[0]);
  const std::string needle = "f0-2";
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1] = 'Z';
  {
    FILE* f = std::fopen(files[0].c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  absl::StatusOr<Element> got = (*ra)->Get(2);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(got.status().message(), files[0])) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "record 2")) << got.status();
  EXPECT_TRUE((*ra)->Get(1).ok());
}

// Record indexes are cached per process; a file rewritten since is indexed again.
TEST(RandomAccessSourceTest, ReopeningAChangedFileSeesItsNewRecords) {
  TempDir dir;
  std::vector<std::string> files = WriteTFRecordFiles(dir, {5});
  const proto::SourceDef source = Dataset::TFRecord(files).def().source();
  auto first = RandomAccessSource::Open(source);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->size(), 5);
  auto again = RandomAccessSource::Open(source);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->size(), 5);
  files = WriteTFRecordFiles(dir, {8});
  ExpectMatchesSequential(source);
}

TEST(RandomAccessSourceTest, BadArgumentsAreInvalidArgument) {
  EXPECT_EQ(RandomAccessSource::Open(Dataset::Range(0, 5, 0).def().source()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RandomAccessSource::Open(Dataset::TFRecord({}).def().source()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
