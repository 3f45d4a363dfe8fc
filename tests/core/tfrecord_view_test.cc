// TFRecordReader::ReadRecordView, the framing a parallel map does under its read lock: views
// into refcounted read buffers must give exactly ReadRecord's records and errors (records
// straddling two reads, corruption and truncation at buffer edges), stay valid while the reader
// reads on, keep their buffers charged to the memory budget until the last view goes, and a
// buffer the budget refuses must be an error naming the file.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/io/input_stream.h"
#include "core/io/tfrecord_reader.h"
#include "core/io/tfrecord_writer.h"
#include "core/tensor/host_memory.h"
#include "gtest/gtest.h"
#include "tests/core/record_test_util.h"
#include "tests/core/scoped_process_limits.h"

namespace sluice {
namespace {

using record_test::ReadWholeFile;
using record_test::TempDir;
using record_test::WriteWholeFile;

constexpr uint64_t kSeed = 2727;

// Records of 0..3000 bytes (some larger than the small buffers below), seeded.
std::vector<std::string> RandomRecords(int n) {
  std::mt19937_64 rng(kSeed);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string r(rng() % 3001, '\0');
    for (char& c : r) c = static_cast<char>(rng());
    out.push_back(std::move(r));
  }
  return out;
}

// Byte offsets of the records of a well-framed file.
std::vector<uint64_t> Offsets(const std::vector<std::string>& records) {
  std::vector<uint64_t> out;
  uint64_t at = 0;
  for (const std::string& r : records) {
    out.push_back(at);
    at += kTFRecordHeaderBytes + r.size() + kTFRecordFooterBytes;
  }
  return out;
}

// What a reader yields: its records, then how it ended.
struct ReaderRun {
  std::vector<std::string> records;
  absl::Status end;
};

// A reader over `bytes`, from the file (size known: truncation found before reading) or from a
// stream (size unknown: found when the read comes up short).
std::unique_ptr<TFRecordReader> Reader(const std::string& bytes, size_t buffer_size,
                                       bool from_file, const TempDir& dir) {
  TFRecordReaderOptions o;
  o.buffer_size = buffer_size;
  o.map_local_file = false;  // the read buffers are under test (mapped: tfrecord_mapped_test)
  if (!from_file) {
    return TFRecordReader::FromStream(NewStringStream(dir.File("in.tfrecord"), bytes), o);
  }
  WriteWholeFile(dir.File("in.tfrecord"), bytes);
  absl::StatusOr<std::unique_ptr<TFRecordReader>> r =
      TFRecordReader::Open(dir.File("in.tfrecord"), o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : nullptr;
}

ReaderRun ReadAllRecords(TFRecordReader* r) {
  ReaderRun run;
  for (int i = 0; i < 100000; ++i) {
    std::string rec;
    run.end = r->ReadRecord(&rec);
    if (!run.end.ok()) return run;
    run.records.push_back(std::move(rec));
  }
  run.end = absl::InternalError("too many records");
  return run;
}

// Reads every record as a view, keeping every buffer until the end (so a buffer written again
// while a view holds it shows as a wrong record), and verifies each with CheckData as the map
// does; a failed check ends the run with its error.
ReaderRun ReadAllViews(TFRecordReader* r, size_t* buffers = nullptr) {
  struct Held {
    absl::string_view data;
    TFRecordReader::UncheckedData unchecked;
  };
  std::vector<Held> held;
  std::vector<std::shared_ptr<const void>> owners;
  std::shared_ptr<const void> owner;
  ReaderRun run;
  for (int i = 0; i < 100000 && run.end.ok(); ++i) {
    Held h;
    run.end = r->ReadRecordView(&h.data, &h.unchecked, &owner);
    if (!run.end.ok()) break;
    if (owners.empty() || owners.back() != owner) owners.push_back(owner);
    held.push_back(h);
  }
  for (const Held& h : held) {
    absl::Status c = TFRecordReader::CheckData(h.data, h.unchecked, r->filename());
    if (!c.ok()) {
      run.end = c;
      break;
    }
    run.records.emplace_back(h.data);
  }
  if (buffers != nullptr) *buffers = owners.size();
  return run;
}

// Views give ReadRecord's records for buffers smaller than, about as large as and larger than
// the records, so records straddle reads (copied whole into the next buffer) or come in strings
// of their own, and stay valid after the reader moved on and after it is gone.
TEST(TFRecordViewTest, ViewsAreReadRecordsRecordsAcrossBufferEdges) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  TempDir dir;
  const std::vector<std::string> want = RandomRecords(300);
  const std::string bytes = record_test::FramedTFRecords(want, dir);
  for (const size_t buffer : {64, 1000, 4096, 10000}) {
    for (const bool from_file : {true, false}) {
      SCOPED_TRACE(absl::StrCat("buffer ", buffer, from_file ? ", file" : ", stream"));
      std::unique_ptr<TFRecordReader> r = Reader(bytes, buffer, from_file, dir);
      ASSERT_NE(r, nullptr);
      size_t buffers = 0;
      const ReaderRun views = ReadAllViews(r.get(), &buffers);
      r.reset();
      EXPECT_EQ(views.end.code(), absl::StatusCode::kOutOfRange) << views.end;
      ASSERT_EQ(views.records.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(views.records[i], want[i]) << i;
      // Not vacuous: many reads, many edges (with 64 bytes, nearly every record is a string of
      // its own).
      EXPECT_GT(buffers, std::min(want.size(), bytes.size() / buffer) / 2);
    }
  }
}

// Corruption of a header, its length checksum, the data or its checksum, and cuts, in every
// record of a file read in 4000-byte buffers (so at and around every buffer edge): views end
// with exactly ReadRecord's error (code, offset, file, reason) after exactly its records.
TEST(TFRecordViewTest, CorruptionAndTruncationAtBufferEdgesGiveReadRecordsErrors) {
  TempDir dir;
  const std::vector<std::string> records = RandomRecords(40);
  const std::string good = record_test::FramedTFRecords(records, dir);
  const std::vector<uint64_t> offsets = Offsets(records);
  constexpr size_t kBuffer = 4000;
  std::vector<std::pair<std::string, std::string>> cases;  // name, bytes
  for (size_t k = 0; k < records.size(); ++k) {
    const uint64_t at = offsets[k];
    const size_t len = records[k].size();
    for (const uint64_t flip : {at, at + 7, at + 9, at + 12 + len / 2, at + 12 + len}) {
      if (flip >= good.size() || (len == 0 && flip == at + 12)) continue;
      std::string bad = good;
      bad[flip] = static_cast<char>(bad[flip] ^ 0x11);
      cases.push_back({absl::StrCat("record ", k, " byte ", flip - at, " flipped"), bad});
    }
    for (uint64_t cut = at + 1; cut < at + 12 + len + 4; cut += 1 + len / 7) {
      cases.push_back({absl::StrCat("record ", k, " cut after ", cut - at), good.substr(0, cut)});
    }
  }
  int failures_seen = 0;
  for (const auto& [name, bytes] : cases) {
    for (const bool from_file : {true, false}) {
      SCOPED_TRACE(absl::StrCat(name, from_file ? ", file" : ", stream"));
      std::unique_ptr<TFRecordReader> a = Reader(bytes, kBuffer, from_file, dir);
      const ReaderRun want = ReadAllRecords(a.get());
      std::unique_ptr<TFRecordReader> b = Reader(bytes, kBuffer, from_file, dir);
      const ReaderRun got = ReadAllViews(b.get());
      ASSERT_EQ(got.end, want.end);
      ASSERT_EQ(got.records, want.records);
      if (want.end.code() == absl::StatusCode::kDataLoss) ++failures_seen;
    }
  }
  EXPECT_EQ(failures_seen, 2 * static_cast<int>(cases.size()));
}

// A buffer stays charged to the process's budget while a view holds it, after the reader is
// gone, and all of it comes back when the last view goes.
TEST(TFRecordViewTest, BuffersStayChargedWhileViewsLiveAndComeBack) {
  TempDir dir;
  const std::string bytes = record_test::FramedTFRecords(RandomRecords(50), dir);
  const int64_t before = ProcessMemoryBudget().in_use();
  std::shared_ptr<const void> first_owner;
  {
    std::unique_ptr<TFRecordReader> r = Reader(bytes, 8192, /*from_file=*/true, dir);
    absl::string_view data;
    TFRecordReader::UncheckedData unchecked;
    ASSERT_TRUE(r->ReadRecordView(&data, &unchecked, &first_owner).ok());
    EXPECT_GE(ProcessMemoryBudget().in_use(), before + 8192);
    std::shared_ptr<const void> owner;
    for (int i = 0; i < 49; ++i) ASSERT_TRUE(r->ReadRecordView(&data, &unchecked, &owner).ok());
    EXPECT_NE(owner, first_owner);  // the reader moved on to other buffers
  }
  EXPECT_GE(ProcessMemoryBudget().in_use(), before + 8192);  // the first view's buffer
  first_owner.reset();
  EXPECT_EQ(ProcessMemoryBudget().in_use(), before);
}

// The budget refusing a read buffer is RESOURCE_EXHAUSTED naming the file, from ReadRecordView
// and ReadRecord alike, and charges nothing.
TEST(TFRecordViewTest, RefusedBufferIsAnErrorNamingTheFile) {
  TempDir dir;
  const std::string bytes = record_test::FramedTFRecords(RandomRecords(5), dir);
  for (const bool view : {true, false}) {
    const int64_t before = ProcessMemoryBudget().in_use();
    absl::Status s;
    {
      std::unique_ptr<TFRecordReader> r = Reader(bytes, 1 << 20, /*from_file=*/true, dir);
      ScopedProcessLimits small({.process_bytes = before + (512 << 10),
                                 .element_bytes = 1 << 30});
      std::string record;
      absl::string_view data;
      TFRecordReader::UncheckedData unchecked;
      std::shared_ptr<const void> owner;
      s = view ? r->ReadRecordView(&data, &unchecked, &owner) : r->ReadRecord(&record);
    }
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), dir.File("in.tfrecord"))) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "read buffer")) << s;
    EXPECT_EQ(ProcessMemoryBudget().in_use(), before);
  }
}

}  // namespace
}  // namespace sluice
