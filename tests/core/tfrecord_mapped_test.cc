// TFRecordReader on a mapped local file (TFRecordReaderOptions::map_local_file): the records,
// views and errors must be byte for byte those of the read path (corruption and truncation
// included, DATA_LOSS naming the file and offset), a view must stay valid after its reader is
// gone and the file deleted, and a file truncated while mapped must be DATA_LOSS, not SIGBUS.
#include <fcntl.h>
#include <sys/resource.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "core/data/executor.h"
#include "core/io/mapped_file.h"
#include "core/io/mapping_truncation_guard.h"
#include "core/io/tfrecord_reader.h"
#include "core/io/tfrecord_writer.h"
#include "core/util/thread_pool.h"
#include "gtest/gtest.h"
#include "proto/example.pb.h"
#include "sluice/dataset.h"
#include "tests/core/iterator_test_util.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using record_test::ReadWholeFile;
using record_test::TempDir;
using record_test::WriteWholeFile;

constexpr uint64_t kSeed = 2728;

// `n` records of 0..max_bytes bytes, seeded.
std::vector<std::string> RandomRecords(int n, size_t max_bytes) {
  std::mt19937_64 rng(kSeed);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string r(rng() % (max_bytes + 1), '\0');
    for (char& c : r) c = static_cast<char>(rng());
    out.push_back(std::move(r));
  }
  return out;
}

std::unique_ptr<TFRecordReader> OpenReader(const std::string& path, bool mapped) {
  TFRecordReaderOptions o;
  o.buffer_size = 4096;  // records larger than the read path's buffer too
  o.map_local_file = mapped;
  absl::StatusOr<std::unique_ptr<TFRecordReader>> r = TFRecordReader::Open(path, o);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return nullptr;
  EXPECT_EQ((*r)->mapped(), mapped) << path;
  return *std::move(r);
}

struct ReaderRun {
  std::vector<std::string> records;
  std::string end;  // how the run ended, as a status string
};

ReaderRun ReadAll(TFRecordReader* r) {
  ReaderRun run;
  for (int i = 0; i < 100000; ++i) {
    std::string rec;
    absl::Status s = r->ReadRecord(&rec);
    if (!s.ok()) {
      run.end = s.ToString();
      return run;
    }
    run.records.push_back(std::move(rec));
  }
  run.end = "too many records";
  return run;
}

// Views checked with CheckData as a parallel map's jobs do, after all were read.
ReaderRun ViewAll(TFRecordReader* r) {
  struct Held {
    absl::string_view data;
    TFRecordReader::UncheckedData unchecked;
    std::shared_ptr<const void> owner;
  };
  std::vector<Held> held;
  std::shared_ptr<const void> owner;
  ReaderRun run;
  for (int i = 0; i < 100000; ++i) {
    Held h;
    absl::Status s = r->ReadRecordView(&h.data, &h.unchecked, &owner);
    if (!s.ok()) {
      run.end = s.ToString();
      break;
    }
    h.owner = owner;
    held.push_back(h);
  }
  for (const Held& h : held) {
    absl::Status c = TFRecordReader::CheckData(h.data, h.unchecked, r->filename());
    if (!c.ok()) {
      run.end = c.ToString();
      break;
    }
    run.records.emplace_back(h.data);
  }
  return run;
}

void ExpectSameRuns(const std::string& path, const std::string& what) {
  SCOPED_TRACE(what);
  std::unique_ptr<TFRecordReader> read = OpenReader(path, false);
  std::unique_ptr<TFRecordReader> mapped = OpenReader(path, true);
  std::unique_ptr<TFRecordReader> mapped_views = OpenReader(path, true);
  ASSERT_TRUE(read && mapped && mapped_views);
  const ReaderRun expected = ReadAll(read.get());
  const ReaderRun got = ReadAll(mapped.get());
  EXPECT_EQ(got.records, expected.records);
  EXPECT_EQ(got.end, expected.end);
  const ReaderRun views = ViewAll(mapped_views.get());
  EXPECT_EQ(views.records, expected.records);
  EXPECT_EQ(views.end, expected.end);
}

TEST(TFRecordMappedTest, RecordsAndViewsAreTheReadPathsBytes) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  TempDir dir;
  const std::vector<std::string> records = RandomRecords(300, 9000);
  WriteWholeFile(dir.File("in.tfrecord"), record_test::FramedTFRecords(records, dir));
  std::unique_ptr<TFRecordReader> mapped = OpenReader(dir.File("in.tfrecord"), true);
  ASSERT_TRUE(mapped);
  const ReaderRun views = ViewAll(mapped.get());
  EXPECT_EQ(views.records, records);
  EXPECT_TRUE(absl::StrContains(views.end, "OUT_OF_RANGE")) << views.end;
  ExpectSameRuns(dir.File("in.tfrecord"), "clean file");

  // Skipping and seeking (what ranges and the record index do) land on the same records.
  std::unique_ptr<TFRecordReader> r = OpenReader(dir.File("in.tfrecord"), true);
  ASSERT_TRUE(r);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(r->SkipRecord().ok());
  std::string rec;
  ASSERT_TRUE(r->ReadRecord(&rec).ok());
  EXPECT_EQ(rec, records[7]);
  const uint64_t at = record_test::TFRecordOffset(ReadWholeFile(dir.File("in.tfrecord")), 123);
  ASSERT_TRUE(r->Seek(at).ok());
  ASSERT_TRUE(r->ReadRecord(&rec).ok());
  EXPECT_EQ(rec, records[123]);
}

TEST(TFRecordMappedTest, CorruptAndTruncatedFilesGiveTheReadPathsErrors) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  TempDir dir;
  const std::vector<std::string> records = RandomRecords(40, 3000);
  const std::string bytes = record_test::FramedTFRecords(records, dir);
  const std::string path = dir.File("bad.tfrecord");
  const size_t r5 = record_test::TFRecordOffset(bytes, 5);
  const size_t r6 = record_test::TFRecordOffset(bytes, 6);
  struct Case {
    std::string what;
    std::string bytes;
  };
  std::vector<Case> cases;
  {
    std::string b = bytes;
    b[r5 + 3] ^= 0x10;  // the length
    cases.push_back({"length corrupt", b});
  }
  {
    std::string b = bytes;
    b[r5 + kTFRecordHeaderBytes + 1] ^= 0x01;  // the data
    cases.push_back({"data corrupt", b});
  }
  {
    std::string b = bytes;
    b[r6 - 1] ^= 0x01;  // the data's checksum
    cases.push_back({"data crc corrupt", b});
  }
  for (size_t cut : {r5 + 5, r5 + kTFRecordHeaderBytes + 2, r6 - 2}) {
    cases.push_back({"truncated at " + std::to_string(cut), bytes.substr(0, cut)});
  }
  for (const Case& c : cases) {
    WriteWholeFile(path, c.bytes);
    ExpectSameRuns(path, c.what);
    std::unique_ptr<TFRecordReader> r = OpenReader(path, true);
    ASSERT_TRUE(r);
    const ReaderRun run = ReadAll(r.get());
    EXPECT_EQ(run.records.size(), 5u) << c.what;
    EXPECT_TRUE(absl::StrContains(run.end, "DATA_LOSS")) << run.end;
    EXPECT_TRUE(absl::StrContains(run.end, "byte offset " + std::to_string(r5))) << run.end;
    EXPECT_TRUE(absl::StrContains(run.end, path)) << run.end;
  }
}

TEST(TFRecordMappedTest, ViewOutlivesItsReaderAndTheFile) {
  TempDir dir;
  const std::vector<std::string> records = RandomRecords(50, 5000);
  const std::string path = dir.File("gone.tfrecord");
  WriteWholeFile(path, record_test::FramedTFRecords(records, dir));
  std::vector<absl::string_view> views;
  std::vector<TFRecordReader::UncheckedData> unchecked;
  std::shared_ptr<const void> owner;
  {
    std::unique_ptr<TFRecordReader> r = OpenReader(path, true);
    ASSERT_TRUE(r);
    for (size_t i = 0; i < records.size(); ++i) {
      absl::string_view v;
      TFRecordReader::UncheckedData u;
      ASSERT_TRUE(r->ReadRecordView(&v, &u, &owner).ok());
      views.push_back(v);
      unchecked.push_back(u);
    }
  }
  ASSERT_EQ(std::remove(path.c_str()), 0);
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_TRUE(TFRecordReader::CheckData(views[i], unchecked[i], path).ok()) << i;
    EXPECT_EQ(views[i], records[i]) << i;
  }
}

// Truncates `path` to `size` bytes in place, as another process would.
void TruncateInPlace(const std::string& path, off_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::ftruncate(fd, size), 0) << path;
  ::close(fd);
}

TEST(TFRecordMappedTest, FileTruncatedWhileMappedIsDataLossNotSigbus) {
  TempDir dir;
  const std::vector<std::string> records(64, std::string(4000, 'x'));
  const std::string path = dir.File("shrinks.tfrecord");
  WriteWholeFile(path, record_test::FramedTFRecords(records, dir));
  std::unique_ptr<TFRecordReader> r = OpenReader(path, true);
  ASSERT_TRUE(r);
  // Ten records read (and their pages touched) before the file loses all but 8 KiB.
  std::vector<absl::string_view> views;
  std::vector<TFRecordReader::UncheckedData> unchecked;
  std::shared_ptr<const void> owner;
  for (int i = 0; i < 10; ++i) {
    absl::string_view v;
    TFRecordReader::UncheckedData u;
    ASSERT_TRUE(r->ReadRecordView(&v, &u, &owner).ok());
    ASSERT_TRUE(TFRecordReader::CheckData(v, u, path).ok());
    views.push_back(v);
    unchecked.push_back(u);
  }
  TruncateInPlace(path, 8192);

  absl::string_view v;
  TFRecordReader::UncheckedData u;
  absl::Status s = r->ReadRecordView(&v, &u, &owner);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "truncated while it was read")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "byte offset " + std::to_string(10 * 4016))) << s;
  EXPECT_EQ(r->ReadRecordView(&v, &u, &owner).code(), absl::StatusCode::kDataLoss);  // sticky
  // Views read before: intact below the new end, DATA_LOSS (not garbage) past it.
  for (size_t i = 0; i < views.size(); ++i) {
    absl::Status c = TFRecordReader::CheckData(views[i], unchecked[i], path);
    if (unchecked[i].offset + 4016 <= 8192) {
      EXPECT_TRUE(c.ok()) << i << ": " << c;
      EXPECT_EQ(views[i], records[i]);
    } else {
      EXPECT_EQ(c.code(), absl::StatusCode::kDataLoss) << i;
    }
  }

  // ReadRecord (copying) on another mapped file, cut inside its first page: the bytes past the
  // new end read as zeros without a SIGBUS, and the reader finds the file shorter.
  const std::string path2 = dir.File("shrinks2.tfrecord");
  WriteWholeFile(path2, record_test::FramedTFRecords(records, dir));
  std::unique_ptr<TFRecordReader> copying = OpenReader(path2, true);
  ASSERT_TRUE(copying);
  std::string rec;
  ASSERT_TRUE(copying->ReadRecord(&rec).ok());
  TruncateInPlace(path2, 100);
  s = copying->ReadRecord(&rec);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "truncated while it was read")) << s;
}

// A TFRecord file of `n` Examples whose 'image' is 3000 bytes of fill(i).
template <typename Fill>
void WriteExamples(const std::string& path, int n, const Fill& fill) {
  auto w = TFRecordWriter::Open(path, Compression::kNone);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < n; ++i) {
    proto::Example ex;
    (*ex.mutable_features()->mutable_feature())["image"].mutable_bytes_list()->add_value(
        std::string(3000, fill(i)));
    ASSERT_TRUE((*w)->Write(ex.SerializeAsString()).ok());
  }
  ASSERT_TRUE((*w)->Close().ok());
}

// A parallel parse pipeline over many files keeps no file it has read mapped: when a batch
// starts with file k's records, files 0..k-1 are unmapped (their last blocks were checked,
// which closes them off the read lock, and their unmapping, scheduled on the pool then, has
// run once the pool ran what was scheduled before), and nothing is left mapped once the
// iterator is gone.
TEST(TFRecordMappedTest, AParallelMapUnmapsEachFileItHasRead) {
  TempDir dir;
  std::vector<std::string> paths;
  for (int k = 0; k < 5; ++k) {
    paths.push_back(dir.File(absl::StrCat("part-", k, ".tfrecord")));
    WriteExamples(paths.back(), 300, [k](int) { return static_cast<char>('a' + k); });
  }
  absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat(
      "tf_record_dataset(['", absl::StrJoin(paths, "', '"),
      "']).map(parse_example({'image': FixedLenFeature([], tf.string)}), "
      "num_parallel_calls=2).batch(10)"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  {
    absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds, {});
    ASSERT_TRUE(it.ok()) << it.status();
    int batches = 0;
    std::vector<bool> seen(paths.size(), false);
    for (; batches < 1000; ++batches) {
      Element e;
      bool end = false;
      ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
      if (end) break;
      const Tensor images = e.Flatten()[0];
      const size_t k = static_cast<size_t>(images.string_at(0)[0] - 'a');
      ASSERT_LT(k, paths.size());
      seen[k] = true;
      record_test::RunPoolClosuresScheduledSoFar(*ProcessThreadPool().value());
      for (size_t f = 0; f < k; ++f) {
        EXPECT_FALSE(record_test::MappingOf(paths[f]).has_value())
            << paths[f] << " still mapped at batch " << batches << " (file " << k << ")";
      }
    }
    EXPECT_EQ(batches, 150);
    EXPECT_EQ(seen, std::vector<bool>(paths.size(), true));
  }
  record_test::RunPoolClosuresScheduledSoFar(*ProcessThreadPool().value());
  for (const std::string& p : paths) EXPECT_FALSE(record_test::MappingOf(p).has_value()) << p;
}

// TFRecordReaderOptions::unmap_pool: the thread that drops a mapping's last reference (a view
// kept after its reader is gone) does not unmap it; the pool does, later. Without the option
// the drop unmaps at once.
TEST(TFRecordMappedTest, UnmapPoolUnmapsOnThePoolNotOnTheDroppingThread) {
  TempDir dir;
  const std::vector<std::string> records = RandomRecords(20, 5000);
  const std::string path = dir.File("unmapped-later.tfrecord");
  WriteWholeFile(path, record_test::FramedTFRecords(records, dir));
  // A view of the first record, its reader gone: the view holds the mapping alone.
  auto view_of_first = [&](ThreadPool* pool) {
    TFRecordReaderOptions o;
    o.unmap_pool = pool;
    absl::StatusOr<std::unique_ptr<TFRecordReader>> r = TFRecordReader::Open(path, o);
    EXPECT_TRUE(r.ok() && (*r)->mapped());
    absl::string_view v;
    TFRecordReader::UncheckedData u;
    std::shared_ptr<const void> owner;
    if (r.ok()) {
      EXPECT_TRUE((*r)->ReadRecordView(&v, &u, &owner).ok());
    }
    return owner;
  };
  std::shared_ptr<const void> owner = view_of_first(nullptr);
  ASSERT_TRUE(record_test::MappingOf(path).has_value());
  owner.reset();
  EXPECT_FALSE(record_test::MappingOf(path).has_value()) << "no pool: unmapped by the drop";

  const std::unique_ptr<ThreadPool> started = ThreadPool::Create(1, "a test pool").value();
  ThreadPool& pool = *started;
  absl::Notification busy_done;
  pool.Schedule([&busy_done] { busy_done.WaitForNotification(); });  // the pool runs nothing
  owner = view_of_first(&pool);
  owner.reset();
  EXPECT_TRUE(record_test::MappingOf(path).has_value()) << "unmapped by the dropping thread";
  busy_done.Notify();
  record_test::RunPoolClosuresScheduledSoFar(pool);
  EXPECT_FALSE(record_test::MappingOf(path).has_value()) << "the pool did not unmap it";
}

// As a user runs it: a parallel parse pipeline over a file that another process truncates while
// the pipeline reads it ends in DATA_LOSS naming the file; the process lives on.
TEST(TFRecordMappedTest, ParallelParsePipelineOverAFileTruncatedWhileReadIsDataLoss) {
  TempDir dir;
  const std::string path = dir.File("examples.tfrecord");
  WriteExamples(path, 2000, [](int i) { return static_cast<char>('a' + i % 26); });
  absl::StatusOr<Dataset> ds = Dataset::Parse(
      absl::StrCat("tf_record_dataset(['", path,
                   "']).map(parse_example({'image': FixedLenFeature([], tf.string)}), "
                   "num_parallel_calls=AUTOTUNE)"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds, {});
  ASSERT_TRUE(it.ok()) << it.status();
  Element first;
  bool end = false;
  ASSERT_TRUE((*it)->GetNext(&first, &end).ok());
  ASSERT_FALSE(end);
  TruncateInPlace(path, 64 << 10);
  absl::StatusOr<std::vector<Element>> rest = testing_util::Drain(it->get(), 5000);
  ASSERT_FALSE(rest.ok());
  EXPECT_EQ(rest.status().code(), absl::StatusCode::kDataLoss) << rest.status();
  EXPECT_TRUE(absl::StrContains(rest.status().message(), path)) << rest.status();
}

// The reader's next record, read as a view and checked as a parallel map's jobs do, is
// `expected`.
::testing::AssertionResult ReadsAsView(TFRecordReader* r, const std::string& path,
                                       absl::string_view expected,
                                       std::shared_ptr<const void>* owner) {
  absl::string_view v;
  TFRecordReader::UncheckedData u;
  absl::Status s = r->ReadRecordView(&v, &u, owner);
  if (s.ok()) s = TFRecordReader::CheckData(v, u, path);
  if (!s.ok()) return ::testing::AssertionFailure() << s;
  if (v != expected) return ::testing::AssertionFailure() << "not the record written there";
  return ::testing::AssertionSuccess();
}

// The pages a mapped reader hands out to fault in ahead (what a parallel map's jobs fault in off
// its read lock): each stretch starts where the last one ended (rounded down to a page) and
// ends at most kFaultAheadBytes past the reader's position, so the stretches follow one another
// without overlap and cover the file by its end; faulting them in changes no record.
TEST(TFRecordMappedTest, PagesAheadCoverTheFileOnceAheadOfTheReader) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  TempDir dir;
  const std::vector<std::string> records = RandomRecords(1500, 9000);  // ~6.7 MB
  const std::string path = dir.File("ahead.tfrecord");
  WriteWholeFile(path, record_test::FramedTFRecords(records, dir));
  const uint64_t size = ReadWholeFile(path).size();
  ASSERT_GT(size, 3 * TFRecordReader::kFaultAheadBytes);
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));

  std::unique_ptr<TFRecordReader> r = OpenReader(path, true);
  ASSERT_TRUE(r);
  std::shared_ptr<const void> owner;
  uint64_t covered = 0;  // the stretches so far cover [0, covered)
  int stretches = 0;
  for (size_t i = 0; i <= records.size(); ++i) {
    std::optional<TFRecordReader::PagesAhead> ahead = r->TakePagesAhead();
    if (ahead.has_value()) {
      const char* base = r->mapped_file() != nullptr
                             ? static_cast<const char*>(r->mapped_file()->data())
                             : nullptr;
      ASSERT_NE(base, nullptr);
      const uint64_t begin = static_cast<uint64_t>(ahead->bytes.data() - base);
      const uint64_t end = begin + ahead->bytes.size();
      EXPECT_EQ(begin % page, 0u) << i;
      EXPECT_EQ(begin, covered - covered % page) << i << ": a gap or an overlap";
      EXPECT_GT(end, covered) << i;
      EXPECT_LE(end, std::min(size, r->offset() + TFRecordReader::kFaultAheadBytes)) << i;
      EXPECT_NE(ahead->mapping, nullptr);
      TFRecordReader::FaultIn(*ahead);
      covered = end;
      ++stretches;
    }
    if (i == records.size()) break;
    ASSERT_TRUE(ReadsAsView(r.get(), path, records[i], &owner)) << i;
  }
  EXPECT_EQ(covered, size);
  EXPECT_GT(stretches, 3);
  EXPECT_FALSE(r->TakePagesAhead().has_value());  // nothing left

  // A reader that reads (not maps) has no pages to hand out.
  std::unique_ptr<TFRecordReader> read = OpenReader(path, false);
  ASSERT_TRUE(read);
  EXPECT_FALSE(read->TakePagesAhead().has_value());
  EXPECT_EQ(read->mapped_file(), nullptr);
}

// Faulting in pages of a file truncated since it was mapped is harmless (no SIGBUS: the pages
// past the new end read as zeros, the truncation guard's), and the reader reports the truncation.
TEST(TFRecordMappedTest, FaultingInATruncatedFileIsHarmless) {
  TempDir dir;
  const std::vector<std::string> records(200, std::string(4000, 'y'));
  const std::string path = dir.File("cut.tfrecord");
  WriteWholeFile(path, record_test::FramedTFRecords(records, dir));
  std::unique_ptr<TFRecordReader> r = OpenReader(path, true);
  ASSERT_TRUE(r);
  std::optional<TFRecordReader::PagesAhead> ahead = r->TakePagesAhead();
  ASSERT_TRUE(ahead.has_value());
  TruncateInPlace(path, 8192);
  TFRecordReader::FaultIn(*ahead);  // past the end: zeros, not SIGBUS
  absl::Status s;
  std::shared_ptr<const void> owner;
  for (int i = 0; i < 200 && s.ok(); ++i) {
    absl::string_view v;
    TFRecordReader::UncheckedData u;
    s = r->ReadRecordView(&v, &u, &owner);
    if (s.ok()) s = TFRecordReader::CheckData(v, u, path);
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

// Page faults taken by this thread so far.
int64_t ThreadPageFaults() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt + u.ru_majflt;
}

// Reads one byte of each page of `bytes`; returns the page faults that took.
int64_t FaultsTouching(absl::string_view bytes, uint64_t page) {
  const int64_t before = ThreadPageFaults();
  for (uint64_t at = 0; at < bytes.size(); at += page) {
    (void)*reinterpret_cast<const volatile char*>(bytes.data() + at);
  }
  return ThreadPageFaults() - before;
}

// What FaultIn is for: the pages it is given are mapped when it returns, so that the reader's
// reads of them (a parallel map's framing, under its read lock) take no page fault. On a kernel
// whose fault-around maps less than 64 KiB per fault (FaultIn's assumption) it is skipped.
TEST(TFRecordMappedTest, PagesFaultedInAreMappedBeforeTheReaderTouchesThem) {
  TempDir dir;
  const std::vector<std::string> records = RandomRecords(1500, 9000);  // ~6.7 MB
  const std::string path = dir.File("ahead.tfrecord");
  WriteWholeFile(path, record_test::FramedTFRecords(records, dir));
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  {
    absl::StatusOr<std::shared_ptr<MappedFile>> probe = MappedFile::Map(path);
    ASSERT_TRUE(probe.ok()) << probe.status();
    const uintptr_t base = reinterpret_cast<uintptr_t>((*probe)->bytes().data());
    const uintptr_t window = (base / (64 << 10) + 1) * (64 << 10);  // the first aligned 64 KiB
    ASSERT_LE(window + (64 << 10), base + (*probe)->size());
    const char* w = reinterpret_cast<const char*>(window);
    ASSERT_EQ(FaultsTouching(absl::string_view(w, page), page), 1);
    if (FaultsTouching(absl::string_view(w, 64 << 10), page) != 0) {
      GTEST_SKIP() << "this kernel's fault-around maps less than 64 KiB per fault";
    }
  }
  std::unique_ptr<TFRecordReader> r = OpenReader(path, true);
  ASSERT_TRUE(r);
  std::shared_ptr<const void> owner;
  int stretches = 0;
  for (size_t i = 0; i <= records.size(); ++i) {
    std::optional<TFRecordReader::PagesAhead> ahead = r->TakePagesAhead();
    if (ahead.has_value()) {
      TFRecordReader::FaultIn(*ahead);
      EXPECT_EQ(FaultsTouching(ahead->bytes, page), 0) << "stretch " << stretches;
      ++stretches;
    }
    if (i == records.size()) break;
    ASSERT_TRUE(ReadsAsView(r.get(), path, records[i], &owner)) << i;
  }
  EXPECT_GT(stretches, 3);  // the later stretches start anywhere in a 64 KiB window
}

// The policy of ReadRecordView's data checksum: with no UncheckedData it is verified in the read
// (a snapshot chunk's reader), giving ReadRecord's error at the corrupt record, sticky.
TEST(TFRecordMappedTest, CheckedViewsFailAtTheCorruptRecord) {
  TempDir dir;
  const std::vector<std::string> records = RandomRecords(20, 3000);
  std::string bytes = record_test::FramedTFRecords(records, dir);
  const size_t r7 = record_test::TFRecordOffset(bytes, 7);
  bytes[r7 + kTFRecordHeaderBytes + 2] ^= 0x04;
  const std::string path = dir.File("flip.tfrecord");
  WriteWholeFile(path, bytes);
  for (bool mapped : {true, false}) {
    SCOPED_TRACE(mapped ? "mapped" : "read");
    std::unique_ptr<TFRecordReader> r = OpenReader(path, mapped);
    ASSERT_TRUE(r);
    std::shared_ptr<const void> owner;
    absl::string_view v;
    for (int i = 0; i < 7; ++i) {
      ASSERT_TRUE(r->ReadRecordView(&v, nullptr, &owner).ok()) << i;
      EXPECT_EQ(v, records[i]) << i;
    }
    absl::Status s = r->ReadRecordView(&v, nullptr, &owner);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "byte offset " + std::to_string(r7))) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "data checksum mismatch")) << s;
    EXPECT_EQ(r->ReadRecordView(&v, nullptr, &owner).code(), absl::StatusCode::kDataLoss);
  }
}

// Views that outlive their readers cannot pin mappings without bound: each mapping holds a
// truncation guard slot while a view lives, and a file opened while every slot is held is read
// (same records) instead; once the views go, files are mapped again.
TEST(TFRecordMappedTest, MappingsHeldByViewsAreBounded) {
  TempDir dir;
  const std::vector<std::string> records = RandomRecords(5, 2000);
  const std::string path = dir.File("many.tfrecord");
  WriteWholeFile(path, record_test::FramedTFRecords(records, dir));
  std::vector<std::shared_ptr<const void>> held;  // one view's owner per reader, reader gone
  std::unique_ptr<TFRecordReader> unmapped;
  for (int i = 0; i <= kMaxGuardedRanges && unmapped == nullptr; ++i) {
    absl::StatusOr<std::unique_ptr<TFRecordReader>> r = TFRecordReader::Open(path);
    ASSERT_TRUE(r.ok()) << r.status();
    if (!(*r)->mapped()) {
      unmapped = *std::move(r);
      break;
    }
    std::shared_ptr<const void> owner;
    absl::string_view v;
    ASSERT_TRUE((*r)->ReadRecordView(&v, nullptr, &owner).ok());
    held.push_back(std::move(owner));
  }
  ASSERT_NE(unmapped, nullptr) << "more than kMaxGuardedRanges mappings alive";
  EXPECT_LE(held.size(), static_cast<size_t>(kMaxGuardedRanges));
  EXPECT_EQ(ReadAll(unmapped.get()).records, records);
  held.clear();
  std::unique_ptr<TFRecordReader> again = OpenReader(path, true);
  ASSERT_TRUE(again);
  EXPECT_EQ(ReadAll(again.get()).records, records);
}

// A SIGBUS outside every guarded mapping keeps its meaning: the process dies of it.
TEST(TFRecordMappedDeathTest, SigbusOutsideGuardedMappingsStillKills) {
  TempDir dir;
  const std::string path = dir.File("unguarded.bin");
  WriteWholeFile(path, std::string(3 * 4096, 'u'));
  EXPECT_EXIT(
      {
        std::string guarded_bytes(64, 'g');
        MappingTruncationGuard guard(guarded_bytes);  // installs the handler
        absl::StatusOr<std::shared_ptr<MappedFile>> m = MappedFile::Map(path);
        if (!m.ok()) std::_Exit(3);
        TruncateInPlace(path, 0);
        volatile char c = (*m)->bytes()[2 * 4096];
        (void)c;
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace sluice
