// TFRecord framing, CRC32C, the reader and the writer, against files TensorFlow wrote
// (tests/testdata/tfrecord, tools/golden/gen_tfrecord_fixtures.py).
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/util/crc32c.h"
#include "core/io/tfrecord_reader.h"
#include "core/io/tfrecord_writer.h"
#include "gtest/gtest.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using record_test::BigRecords;
using record_test::Fixture;
using record_test::Golden;
using record_test::HexList;
using record_test::ReadWholeFile;
using record_test::TempDir;
using record_test::WriteWholeFile;

absl::StatusOr<std::vector<std::string>> ReadAll(const std::string& path, Compression c,
                                                 size_t buffer_size = 0) {
  TFRecordReaderOptions o;
  o.compression = c;
  o.buffer_size = buffer_size;
  absl::StatusOr<std::unique_ptr<TFRecordReader>> r = TFRecordReader::Open(path, o);
  if (!r.ok()) return r.status();
  std::vector<std::string> out;
  for (int i = 0; i < 100000; ++i) {
    std::string rec;
    absl::Status s = (*r)->ReadRecord(&rec);
    if (absl::IsOutOfRange(s)) return out;
    if (!s.ok()) return s;
    out.push_back(std::move(rec));
  }
  return absl::InternalError("too many records");
}

std::vector<std::string> BasicRecords() { return HexList(Golden()["basic_records"]); }

absl::Status WriteAll(const std::string& path, const std::vector<std::string>& records,
                      Compression c) {
  auto w = TFRecordWriter::Open(path, c);
  if (!w.ok()) return w.status();
  for (const std::string& r : records) {
    absl::Status s = (*w)->Write(r);
    if (!s.ok()) return s;
  }
  return (*w)->Close();
}

TEST(Crc32cTest, KnownValues) {
  // RFC 3720 B.4 test vectors.
  EXPECT_EQ(crc32c::Value("123456789"), 0xe3069283u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c::Value(zeros), 0x8a9136aau);
  std::string ones(32, '\xff');
  EXPECT_EQ(crc32c::Value(ones), 0x62a8ab43u);
  EXPECT_EQ(crc32c::Value(""), 0u);
}

TEST(Crc32cTest, HardwareAndPortableAgreeOnEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  // Past 3 * 256 bytes the hardware path runs three interleaved lanes and combines them.
  std::string data(4000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t start = 0; start < 9; ++start) {
    for (size_t n = 0; start + n <= data.size(); n += (n < 300 ? 7 : 61)) {
      ASSERT_EQ(crc32c::Extend(0, data.data() + start, n),
                crc32c::ExtendPortable(0, data.data() + start, n))
          << start << " " << n;
    }
  }
  // Extending in two pieces equals one pass.
  uint32_t a = crc32c::Value(data.data(), 100);
  EXPECT_EQ(crc32c::Extend(a, data.data() + 100, 3900), crc32c::Value(data));
  EXPECT_EQ(crc32c::Value(data), crc32c::ExtendPortable(0, data.data(), data.size()));
}

TEST(Crc32cTest, MaskRoundTripsAndDiffers) {
  for (uint32_t v : {0u, 1u, 0xe3069283u, 0xffffffffu}) {
    EXPECT_EQ(crc32c::Unmask(crc32c::Mask(v)), v);
    EXPECT_NE(crc32c::Mask(v), v);
  }
}

TEST(TFRecordReaderTest, ReadsFilesWrittenByTensorFlow) {
  const std::vector<std::string> expected = BasicRecords();
  ASSERT_EQ(expected.size(), 5u);
  EXPECT_EQ(HexList(Golden()["read"]["plain.tfrecord"]), expected);  // the golden itself
  for (auto [file, c] : std::vector<std::pair<std::string, Compression>>{
           {"plain.tfrecord", Compression::kNone},
           {"gzip.tfrecord.gz", Compression::kGzip},
           {"zlib.tfrecord.zlib", Compression::kZlib}}) {
    for (size_t buffer : {size_t{0}, size_t{64}, size_t{1000}}) {
      absl::StatusOr<std::vector<std::string>> got = ReadAll(Fixture(file), c, buffer);
      ASSERT_TRUE(got.ok()) << file << ": " << got.status();
      EXPECT_EQ(*got, expected) << file << " buffer " << buffer;
    }
  }
}

TEST(TFRecordReaderTest, ReadsBigCompressedRecordsAcrossBuffers) {
  const std::vector<std::string> expected = BigRecords();
  ASSERT_TRUE(Golden()["big_read_ok"].bool_value());
  for (auto [file, c] : std::vector<std::pair<std::string, Compression>>{
           {"big.tfrecord.gz", Compression::kGzip}, {"big.tfrecord.zlib", Compression::kZlib}}) {
    absl::StatusOr<std::vector<std::string>> got = ReadAll(Fixture(file), c, 4096);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == expected) << file;
  }
}

TEST(TFRecordReaderTest, EmptyFilesHaveNoRecords) {
  auto plain = ReadAll(Fixture("empty.tfrecord"), Compression::kNone);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(plain->empty());
  auto gz = ReadAll(Fixture("empty.tfrecord.gz"), Compression::kGzip);
  ASSERT_TRUE(gz.ok()) << gz.status();
  EXPECT_TRUE(gz->empty());
}

TEST(TFRecordReaderTest, MissingFileIsNotFoundNamingIt) {
  auto r = TFRecordReader::Open("/nonexistent/dir/data.tfrecord");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "/nonexistent/dir/data.tfrecord"));
}

TEST(TFRecordWriterTest, OutputIsByteIdenticalToTensorFlows) {
  TempDir dir;
  for (auto [file, c] : std::vector<std::pair<std::string, Compression>>{
           {"plain.tfrecord", Compression::kNone},
           {"gzip.tfrecord.gz", Compression::kGzip},
           {"zlib.tfrecord.zlib", Compression::kZlib}}) {
    ASSERT_TRUE(WriteAll(dir.File(file), BasicRecords(), c).ok());
    EXPECT_TRUE(ReadWholeFile(dir.File(file)) == ReadWholeFile(Fixture(file))) << file;
  }
  for (auto [file, c] : std::vector<std::pair<std::string, Compression>>{
           {"big.tfrecord.gz", Compression::kGzip}, {"big.tfrecord.zlib", Compression::kZlib}}) {
    ASSERT_TRUE(WriteAll(dir.File(file), BigRecords(), c).ok());
    EXPECT_TRUE(ReadWholeFile(dir.File(file)) == ReadWholeFile(Fixture(file))) << file;
  }
  for (auto [file, c] : std::vector<std::pair<std::string, Compression>>{
           {"empty.tfrecord", Compression::kNone}, {"empty.tfrecord.gz", Compression::kGzip}}) {
    ASSERT_TRUE(WriteAll(dir.File(file), {}, c).ok());
    EXPECT_TRUE(ReadWholeFile(dir.File(file)) == ReadWholeFile(Fixture(file))) << file;
  }
}

TEST(TFRecordWriterTest, AppendTFRecordMatchesTheFileFraming) {
  std::string framed;
  for (const std::string& r : BasicRecords()) AppendTFRecord(r, &framed);
  EXPECT_TRUE(framed == ReadWholeFile(Fixture("plain.tfrecord")));
}

TEST(TFRecordWriterTest, UnwritablePathNamesIt) {
  auto w = TFRecordWriter::Open("/nonexistent/dir/out.tfrecord");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(w.status().message(), "/nonexistent/dir/out.tfrecord"));
}

// Offsets of the records of plain.tfrecord.
std::vector<uint64_t> PlainOffsets() {
  std::vector<uint64_t> out;
  uint64_t at = 0;
  for (const std::string& r : BasicRecords()) {
    out.push_back(at);
    at += 16 + r.size();
  }
  out.push_back(at);
  return out;
}

TEST(TFRecordReaderTest, CorruptLengthChecksumIsDataLossAtItsOffset) {
  TempDir dir;
  std::string bytes = ReadWholeFile(Fixture("plain.tfrecord"));
  const uint64_t at = PlainOffsets()[2];
  bytes[at + 9] ^= 0x01;  // the length's crc
  WriteWholeFile(dir.File("bad.tfrecord"), bytes);
  auto got = ReadAll(dir.File("bad.tfrecord"), Compression::kNone);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(got.status().message(),
                                absl::StrCat("corrupted record at byte offset ", at, " of file ",
                                             dir.File("bad.tfrecord"),
                                             " (length checksum mismatch)")))
      << got.status();
}

TEST(TFRecordReaderTest, CorruptDataIsDataLossAtItsOffsetAfterTheGoodRecords) {
  TempDir dir;
  std::string bytes = ReadWholeFile(Fixture("plain.tfrecord"));
  const uint64_t at = PlainOffsets()[3];
  bytes[at + 12 + 100] ^= 0x40;  // inside record 3's data
  WriteWholeFile(dir.File("bad.tfrecord"), bytes);
  TFRecordReaderOptions o;
  auto r = TFRecordReader::Open(dir.File("bad.tfrecord"), o);
  ASSERT_TRUE(r.ok());
  std::string rec;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*r)->ReadRecord(&rec).ok());
  absl::Status s = (*r)->ReadRecord(&rec);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("byte offset ", at)));
  EXPECT_TRUE(absl::StrContains(s.message(), "data checksum mismatch"));
  // Sticky.
  EXPECT_EQ((*r)->ReadRecord(&rec).code(), absl::StatusCode::kDataLoss);
  // The data crc itself corrupted: same error.
  bytes = ReadWholeFile(Fixture("plain.tfrecord"));
  bytes[PlainOffsets()[4] - 1] ^= 0x01;
  WriteWholeFile(dir.File("bad2.tfrecord"), bytes);
  auto got = ReadAll(dir.File("bad2.tfrecord"), Compression::kNone);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
}

// ReadRecordUnchecked (a parallel map's reads, checked off its lock) reads the same records
// without verifying their data, goes on past a corrupted one, and CheckData then reports it
// with ReadRecord's exact error; every good record passes CheckData.
TEST(TFRecordReaderTest, UncheckedReadsLeaveTheSameDataCheckToCheckData) {
  TempDir dir;
  std::string bytes = ReadWholeFile(Fixture("plain.tfrecord"));
  const uint64_t at = PlainOffsets()[3];
  bytes[at + 12 + 100] ^= 0x40;  // inside record 3's data
  WriteWholeFile(dir.File("bad.tfrecord"), bytes);
  auto checked = TFRecordReader::Open(dir.File("bad.tfrecord"));
  auto unchecked = TFRecordReader::Open(dir.File("bad.tfrecord"));
  ASSERT_TRUE(checked.ok() && unchecked.ok());
  const std::vector<std::string> want = BasicRecords();
  std::string a, b;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    TFRecordReader::UncheckedData data;
    ASSERT_TRUE((*unchecked)->ReadRecordUnchecked(&b, &data).ok());
    EXPECT_EQ(data.offset, PlainOffsets()[i]);
    const absl::Status check = TFRecordReader::CheckData(b, data, (*unchecked)->filename());
    if (i < 3) {
      ASSERT_TRUE((*checked)->ReadRecord(&a).ok());
      EXPECT_EQ(a, b);
      EXPECT_TRUE(check.ok()) << check;
    } else if (i > 3) {  // the checked reader stopped at record 3; this one went on
      EXPECT_EQ(b, want[i]);
      EXPECT_TRUE(check.ok()) << check;
    } else {
      const absl::Status s = (*checked)->ReadRecord(&a);
      ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss);
      EXPECT_EQ(check, s);  // the same code and message: offset, file, "data checksum mismatch"
      EXPECT_NE(b, want[i]);
    }
  }
  TFRecordReader::UncheckedData data;
  EXPECT_EQ((*unchecked)->ReadRecordUnchecked(&b, &data).code(), absl::StatusCode::kOutOfRange);
}

TEST(TFRecordReaderTest, TruncatedFinalRecordIsDataLoss) {
  TempDir dir;
  const std::string bytes = ReadWholeFile(Fixture("plain.tfrecord"));
  const std::vector<uint64_t> offsets = PlainOffsets();
  // Every cut inside the last record (header, data, footer) fails; a cut at a record boundary
  // just ends the file.
  for (uint64_t cut = offsets[4]; cut <= bytes.size(); ++cut) {
    WriteWholeFile(dir.File("t.tfrecord"), bytes.substr(0, cut));
    auto got = ReadAll(dir.File("t.tfrecord"), Compression::kNone);
    if (cut == offsets[4] || cut == bytes.size()) {
      ASSERT_TRUE(got.ok()) << cut << " " << got.status();
      EXPECT_EQ(got->size(), cut == bytes.size() ? 5u : 4u);
    } else {
      ASSERT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << cut;
      EXPECT_TRUE(absl::StrContains(got.status().message(),
                                    absl::StrCat("truncated record at byte offset ", offsets[4])))
          << got.status();
    }
  }
}

TEST(TFRecordReaderTest, CorruptAndTruncatedCompressedFilesAreDataLoss) {
  TempDir dir;
  const std::string gz = ReadWholeFile(Fixture("big.tfrecord.gz"));
  WriteWholeFile(dir.File("cut.gz"), gz.substr(0, gz.size() / 2));
  auto cut = ReadAll(dir.File("cut.gz"), Compression::kGzip);
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss) << cut.status();
  std::string bad = gz;
  bad[bad.size() / 2] ^= 0x55;
  bad[bad.size() / 2 + 1] ^= 0x55;
  WriteWholeFile(dir.File("bad.gz"), bad);
  auto corrupt = ReadAll(dir.File("bad.gz"), Compression::kGzip);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss) << corrupt.status();
  EXPECT_TRUE(absl::StrContains(corrupt.status().message(), dir.File("bad.gz")));
  // A plain file read as GZIP.
  auto wrong = ReadAll(Fixture("plain.tfrecord"), Compression::kGzip);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kDataLoss);
}

TEST(TFRecordReaderTest, SkipAndSeekFollowTheOffsets) {
  auto r = TFRecordReader::Open(Fixture("plain.tfrecord"));
  ASSERT_TRUE(r.ok());
  const std::vector<uint64_t> offsets = PlainOffsets();
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ((*r)->offset(), offsets[i]);
    ASSERT_TRUE((*r)->SkipRecord().ok());
  }
  EXPECT_TRUE(absl::IsOutOfRange((*r)->SkipRecord()));
  ASSERT_TRUE((*r)->Seek(offsets[2]).ok());
  std::string rec;
  ASSERT_TRUE((*r)->ReadRecord(&rec).ok());
  EXPECT_EQ(rec, BasicRecords()[2]);
  // Compressed files cannot seek.
  TFRecordReaderOptions o;
  o.compression = Compression::kGzip;
  auto gz = TFRecordReader::Open(Fixture("gzip.tfrecord.gz"), o);
  ASSERT_TRUE(gz.ok());
  EXPECT_EQ((*gz)->Seek(0).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*gz)->SkipRecord().ok());
  ASSERT_TRUE((*gz)->ReadRecord(&rec).ok());
  EXPECT_EQ(rec, "a");
}

TEST(TFRecordReaderTest, UnknownCompressionTypeIsInvalid) {
  EXPECT_EQ(ParseCompressionType("gzip").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseCompressionType("GZIP"), Compression::kGzip);
  EXPECT_EQ(*ParseCompressionType(""), Compression::kNone);
}

}  // namespace
}  // namespace sluice
