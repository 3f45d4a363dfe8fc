// fixed_length_record_dataset's reader against TF's behaviour on the fixtures
// (tools/golden/gen_tfrecord_fixtures.py).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/io/fixed_length_record_reader.h"
#include "gtest/gtest.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using record_test::Fixture;
using record_test::Golden;
using record_test::HexList;
using record_test::TempDir;
using record_test::WriteWholeFile;

struct ReadResult {
  std::vector<std::string> records;
  absl::Status status;  // the error that ended reading, OK at a clean end
};

ReadResult ReadAll(const std::string& path, int64_t record_bytes, int64_t header,
                   int64_t footer, Compression c = Compression::kNone) {
  FixedLengthRecordOptions o;
  o.record_bytes = record_bytes;
  o.header_bytes = header;
  o.footer_bytes = footer;
  o.compression = c;
  ReadResult out;
  auto r = FixedLengthRecordReader::Open(path, o);
  if (!r.ok()) {
    out.status = r.status();
    return out;
  }
  for (int i = 0; i < 10000; ++i) {
    std::string rec;
    absl::Status s = (*r)->ReadRecord(&rec);
    if (absl::IsOutOfRange(s)) return out;
    if (!s.ok()) {
      out.status = s;
      return out;
    }
    out.records.push_back(rec);
  }
  out.status = absl::InternalError("too many records");
  return out;
}

TEST(FixedLengthRecordReaderTest, ReadsAsTensorFlowDoes) {
  const JsonValue& g = Golden()["fixed"];
  ReadResult plain = ReadAll(Fixture("fixed.bin"), 4, 3, 2);
  ASSERT_TRUE(plain.status.ok()) << plain.status;
  EXPECT_EQ(plain.records, HexList(g["fixed.bin"]["records"]));
  ReadResult gz = ReadAll(Fixture("fixed.bin.gz"), 4, 3, 2, Compression::kGzip);
  ASSERT_TRUE(gz.status.ok()) << gz.status;
  EXPECT_EQ(gz.records, HexList(g["fixed.bin.gz"]["records"]));
  // header 3, no footer: the body is 16 bytes, 4 records (the last reads the "footer").
  ReadResult nofooter = ReadAll(Fixture("fixed_partial.bin"), 4, 3, 0);
  ASSERT_TRUE(nofooter.status.ok()) << nofooter.status;
  EXPECT_EQ(nofooter.records, HexList(g["fixed_partial_no_footer"]["records"]));
}

TEST(FixedLengthRecordReaderTest, BodyNotAMultipleIsTensorFlowsError) {
  const JsonValue& g = Golden()["fixed"]["fixed_partial.bin"];
  ASSERT_EQ(g["error"].string_value(), "InvalidArgumentError");
  ReadResult r = ReadAll(Fixture("fixed_partial.bin"), 4, 3, 2);
  EXPECT_TRUE(r.records.empty());  // TF fails before the first record of the file
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  const std::string expected =
      "Excluding the header (3 bytes) and footer (2 bytes), input file \"" +
      Fixture("fixed_partial.bin") +
      "\" has body length 14 bytes, which is not an exact multiple of the record length (4 "
      "bytes).";
  EXPECT_EQ(r.status.message(), expected);
  EXPECT_TRUE(absl::StrContains(g["message"].string_value(), expected));
}

TEST(FixedLengthRecordReaderTest, CompressedShortBodyYieldsWholeRecordsThenDataLoss) {
  TempDir dir;
  // fixed_partial.bin's layout (3 records + 2 stray body bytes) as a gzip file of one stored
  // block, built by hand so the test does not depend on a compressor.
  std::string body = "HDR";
  for (int i = 0; i < 12; ++i) body.push_back(static_cast<char>(i));
  body += "\xaa\xbb";
  body += "FT";
  std::string gz("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10);
  gz.push_back('\x01');  // final stored block
  uint16_t n = static_cast<uint16_t>(body.size());
  gz.push_back(static_cast<char>(n & 0xff));
  gz.push_back(static_cast<char>(n >> 8));
  gz.push_back(static_cast<char>(~n & 0xff));
  gz.push_back(static_cast<char>((~n >> 8) & 0xff));
  gz += body;
  // crc32 (IEEE) of body, computed bitwise.
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : body) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
  }
  crc = ~crc;
  for (int k = 0; k < 4; ++k) gz.push_back(static_cast<char>((crc >> (8 * k)) & 0xff));
  uint32_t size = static_cast<uint32_t>(body.size());
  for (int k = 0; k < 4; ++k) gz.push_back(static_cast<char>((size >> (8 * k)) & 0xff));
  WriteWholeFile(dir.File("p.gz"), gz);
  ReadResult r = ReadAll(dir.File("p.gz"), 4, 3, 2, Compression::kGzip);
  EXPECT_EQ(r.records.size(), 3u);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss) << r.status;
  EXPECT_TRUE(absl::StrContains(r.status.message(), "has body length 14 bytes")) << r.status;
}

TEST(FixedLengthRecordReaderTest, EmptyFileAndHeaderOnlyFile) {
  TempDir dir;
  WriteWholeFile(dir.File("empty.bin"), "");
  ReadResult e = ReadAll(dir.File("empty.bin"), 4, 0, 0);
  EXPECT_TRUE(e.status.ok());
  EXPECT_TRUE(e.records.empty());
  WriteWholeFile(dir.File("hf.bin"), "HDRFT");
  ReadResult hf = ReadAll(dir.File("hf.bin"), 4, 3, 2);
  EXPECT_TRUE(hf.status.ok());
  EXPECT_TRUE(hf.records.empty());
  ReadResult shorter = ReadAll(dir.File("hf.bin"), 4, 4, 4);
  EXPECT_EQ(shorter.status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(FixedLengthRecordReaderTest, SeekToRecordAndErrors) {
  FixedLengthRecordOptions o;
  o.record_bytes = 4;
  o.header_bytes = 3;
  o.footer_bytes = 2;
  auto r = FixedLengthRecordReader::Open(Fixture("fixed.bin"), o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->num_records(), 5);
  ASSERT_TRUE((*r)->SeekToRecord(3).ok());
  std::string rec;
  ASSERT_TRUE((*r)->ReadRecord(&rec).ok());
  EXPECT_EQ(rec, std::string("\x0c\x0d\x0e\x0f", 4));
  o.record_bytes = 0;
  EXPECT_EQ(FixedLengthRecordReader::Open(Fixture("fixed.bin"), o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.record_bytes = 4;
  auto missing = FixedLengthRecordReader::Open("/nonexistent/x.bin", o);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "/nonexistent/x.bin"));
}

}  // namespace
}  // namespace sluice
