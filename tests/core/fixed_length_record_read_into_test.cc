// FixedLengthRecordReader::ReadRecordInto: records written where the caller says, straight from
// the file for large records of an uncompressed file, the same records ReadRecord gives, and a
// destination's error skipping its record.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/io/fixed_length_record_reader.h"
#include "gtest/gtest.h"
#include "tests/core/random_record_files.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using record_test::RandomBytes;
using record_test::TempDir;
using record_test::WriteGzip;
using record_test::WriteWholeFile;

constexpr uint32_t kSeed = 20261205;

struct Layout {
  size_t record_bytes;
  size_t records;
  size_t header;
  size_t footer;
};

// header, records, footer; the records returned.
std::vector<std::string> WriteRecords(const std::string& path, const Layout& l, bool gzip,
                                      std::mt19937* rng) {
  std::vector<std::string> records;
  std::string data = RandomBytes(l.header, rng);
  for (size_t i = 0; i < l.records; ++i) {
    records.push_back(RandomBytes(l.record_bytes, rng));
    data += records.back();
  }
  data += RandomBytes(l.footer, rng);
  if (gzip) {
    WriteGzip(path, data);
  } else {
    WriteWholeFile(path, data);
  }
  return records;
}

std::unique_ptr<FixedLengthRecordReader> Open(const std::string& path, const Layout& l,
                                              bool gzip) {
  FixedLengthRecordOptions o;
  o.record_bytes = static_cast<int64_t>(l.record_bytes);
  o.header_bytes = static_cast<int64_t>(l.header);
  o.footer_bytes = static_cast<int64_t>(l.footer);
  o.compression = gzip ? Compression::kGzip : Compression::kNone;
  auto r = FixedLengthRecordReader::Open(path, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : nullptr;
}

// Every record through ReadRecordInto, then its status at the end.
std::vector<std::string> ReadAllInto(FixedLengthRecordReader* r, absl::Status* end) {
  std::vector<std::string> out;
  for (int i = 0; i < 1000; ++i) {
    std::string rec;
    *end = r->ReadRecordInto([&rec](size_t n) -> absl::StatusOr<char*> {
      rec.assign(n, '\x5a');  // not zeros: every byte must be written
      return rec.data();
    });
    if (!end->ok()) return out;
    out.push_back(rec);
  }
  return out;
}

const Layout kLayouts[] = {
    {FixedLengthRecordReader::kDirectReadBytes, 5, 3, 2},  // straight from the file
    {70000, 4, 0, 0},                                       // larger than a read buffer
    {300000, 3, 17, 9},                                     // larger than the buffer size
    {4, 50, 3, 2},                                          // buffered
    {1000, 9, 0, 5},                                        // buffered
};

// Calls check(reader, records) for a fresh file of each layout, uncompressed and gzipped.
void ForEachLayout(uint32_t seed,
                   const std::function<void(FixedLengthRecordReader*,
                                            const std::vector<std::string>&)>& check) {
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  TempDir dir;
  for (bool gzip : {false, true}) {
    for (const Layout& l : kLayouts) {
      SCOPED_TRACE(testing::Message() << "record_bytes " << l.record_bytes << " gzip " << gzip);
      const std::string path = dir.File("r.bin");
      std::vector<std::string> want = WriteRecords(path, l, gzip, &rng);
      auto r = Open(path, l, gzip);
      ASSERT_NE(r, nullptr);
      check(r.get(), want);
    }
  }
}

TEST(FixedLengthRecordReadIntoTest, GivesTheRecordsReadRecordGives) {
  ForEachLayout(kSeed, [](FixedLengthRecordReader* r, const std::vector<std::string>& want) {
    absl::Status end;
    EXPECT_EQ(ReadAllInto(r, &end), want);
    EXPECT_TRUE(absl::IsOutOfRange(end)) << end;
  });
}

TEST(FixedLengthRecordReadIntoTest, ReadRecordGivesTheSameRecords) {
  ForEachLayout(kSeed, [](FixedLengthRecordReader* r, const std::vector<std::string>& want) {
    std::vector<std::string> strings;
    std::string rec;
    absl::Status s;
    while (strings.size() < 1000 && (s = r->ReadRecord(&rec)).ok()) strings.push_back(rec);
    EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
    EXPECT_EQ(strings, want);
  });
}

TEST(FixedLengthRecordReadIntoTest, ADestinationsErrorSkipsItsRecord) {
  ForEachLayout(kSeed + 1, [](FixedLengthRecordReader* r, const std::vector<std::string>& want) {
    absl::Status refused = r->ReadRecordInto([](size_t n) -> absl::StatusOr<char*> {
      return absl::ResourceExhaustedError(std::to_string(n) + " bytes refused");
    });
    EXPECT_EQ(refused, absl::ResourceExhaustedError(std::to_string(want[0].size()) +
                                                    " bytes refused"));
    absl::Status end;
    EXPECT_EQ(ReadAllInto(r, &end), std::vector<std::string>(want.begin() + 1, want.end()));
    EXPECT_TRUE(absl::IsOutOfRange(end)) << end;
  });
}

TEST(FixedLengthRecordReadIntoTest, AFileShrunkWhileReadIsDataLoss) {
  std::mt19937 rng(kSeed + 2);
  TempDir dir;
  const Layout l{70000, 3, 0, 0};
  const std::string path = dir.File("r.bin");
  std::vector<std::string> want = WriteRecords(path, l, false, &rng);
  auto r = Open(path, l, false);
  ASSERT_NE(r, nullptr);
  // The file loses its last record and a half after it was opened (sized).
  WriteWholeFile(path, want[0] + want[1].substr(0, 1000));
  std::string rec;
  ASSERT_TRUE(r->ReadRecord(&rec).ok());
  EXPECT_EQ(rec, want[0]);
  absl::Status s = r->ReadRecord(&rec);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("truncated record 1 of " + path), std::string::npos) << s;
  EXPECT_EQ(r->ReadRecord(&rec), s);  // sticky
}

}  // namespace
}  // namespace sluice
