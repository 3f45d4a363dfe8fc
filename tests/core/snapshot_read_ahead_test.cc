// load()'s read-ahead (core/data/ops/snapshot_read_ahead.h): mapped chunks' records verified on
// the pool and decoded by the consumer come out as the same elements, in the same order, with
// the same errors in the same places as reading them one after the other; the queue stays within
// its bounds; the consumer never waits for a unit no pool thread has started; an iterator
// destroyed with verifications in flight leaves nothing running or charged, and the views it
// handed out live on.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/data/executor.h"
#include "core/data/ops/snapshot_chunk.h"
#include "core/data/ops/snapshot_manifest.h"
#include "core/data/ops/snapshot_read_ahead.h"
#include "core/io/tfrecord_reader.h"
#include "core/tensor/host_memory.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "core/util/thread_pool.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "sluice/snapshot.h"
#include "tests/core/record_test_util.h"
#include "tests/seeded_rng.h"

namespace sluice {
namespace {

using record_test::ReadWholeFile;
using record_test::TempDir;
using record_test::TFRecordOffset;
using record_test::WriteWholeFile;

constexpr uint64_t kSeed = 20261205;

ElementSpec Spec() {
  return ElementSpec::Tuple({ElementSpec(TensorSpec{DType::kUInt8, Shape({kUnknownDim})}),
                             ElementSpec(TensorSpec{DType::kString, Shape({kUnknownDim})})});
}

// Bytes and strings of seeded sizes, so the records (and the components in them) have many
// sizes and offsets.
Element RandomElement(SeededRng& rng, int64_t max_bytes) {
  std::vector<uint8_t> bytes(static_cast<size_t>(rng.In(0, max_bytes)));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng.Next());
  std::vector<std::string> strings(static_cast<size_t>(rng.In(0, 5)));
  for (std::string& s : strings) {
    s.resize(static_cast<size_t>(rng.In(0, max_bytes / 2)));
    for (char& c : s) c = static_cast<char>(rng.Next());
  }
  const int64_t n = static_cast<int64_t>(strings.size());
  return Element::Tuple({Element(Tensor::FromVector(bytes)),
                         Element(Tensor::FromStrings(std::move(strings), Shape({n})))});
}

// A finished snapshot (format 2, uncompressed: mapped) of `chunks` chunks of `per_chunk`
// elements of up to about 2 * max_bytes bytes; the chunk paths in load order.
std::vector<std::string> Save(const std::string& dir, int chunks, int per_chunk,
                              int64_t max_bytes = 6000) {
  std::cout << "seed " << kSeed << "\n";
  SeededRng rng(kSeed);
  EXPECT_TRUE(MakeLocalDirectories(SnapshotChunksDirectory(dir)).ok());
  proto::SnapshotManifest m;
  m.set_format_version(kSnapshotFormatVersion);
  *m.mutable_element_spec() = ElementSpecToProto(Spec());
  std::vector<std::string> names;
  for (int c = 0; c < chunks; ++c) {
    names.push_back(SnapshotChunkName(absl::StrCat("ab", c)));
    auto w = SnapshotChunkWriter::Create(dir, names.back(), Compression::kNone,
                                         kSnapshotFormatVersion);
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return {};
    for (int i = 0; i < per_chunk; ++i) EXPECT_TRUE((*w)->Append(RandomElement(rng, max_bytes)).ok());
    EXPECT_TRUE((*w)->Commit().ok());
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> paths;
  for (const std::string& name : names) {
    paths.push_back(absl::StrCat(SnapshotChunksDirectory(dir), "/", name));
    proto::SnapshotChunk* c = m.add_chunks();
    c->set_name(name);
    c->set_num_elements(per_chunk);
    c->set_num_bytes(static_cast<int64_t>(ReadWholeFile(paths.back()).size()));
    m.set_num_elements(m.num_elements() + per_chunk);
  }
  m.set_done(true);
  EXPECT_TRUE(WriteSnapshotManifest(dir, m).ok());
  return paths;
}

struct Loaded {
  std::vector<Element> elements;
  absl::Status status;  // the error that ended the load, or OK at its end
};

// Every element of load(dir) with `parallelism` threads (1: no read-ahead), up to its end or
// its first error.
Loaded LoadAll(const std::string& dir, int parallelism) {
  Loaded out;
  SnapshotLoadOptions options;
  options.num_parallel_calls = parallelism;
  absl::StatusOr<Dataset> ds = LoadSnapshot(dir, options);
  if (!ds.ok()) {
    out.status = ds.status();
    return out;
  }
  auto it = MakeIterator(*ds);
  if (!it.ok()) {
    out.status = it.status();
    return out;
  }
  while (true) {
    Element e;
    bool end = false;
    out.status = (*it)->GetNext(&e, &end);
    if (!out.status.ok() || end) return out;
    out.elements.push_back(std::move(e));
  }
}

void ExpectSameElements(const std::vector<Element>& want, const std::vector<Element>& got,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    const std::vector<Tensor> a = want[i].Flatten(), b = got[i].Flatten();
    ASSERT_EQ(a.size(), b.size()) << what << " element " << i;
    for (size_t k = 0; k < a.size(); ++k) {
      EXPECT_TRUE(a[k].Equals(b[k])) << what << " element " << i << " component " << k;
    }
  }
}

TEST(SnapshotReadAheadTest, SameElementsInTheSameOrderAtAnyParallelism) {
  TempDir tmp;
  ASSERT_EQ(Save(tmp.path(), 5, 40).size(), 5u);
  const Loaded one = LoadAll(tmp.path(), 1);
  ASSERT_TRUE(one.status.ok()) << one.status;
  ASSERT_EQ(one.elements.size(), 200u);
  for (int parallelism : {2, 3, 8}) {
    const Loaded many = LoadAll(tmp.path(), parallelism);
    ASSERT_TRUE(many.status.ok()) << many.status;
    ExpectSameElements(one.elements, many.elements, absl::StrCat("parallelism ", parallelism));
  }
}

// A flipped header byte of a record (it no longer parses), a flipped payload byte (it parses;
// only the checksum, fused with the parse or verified on the pool, tells), a flipped length byte
// (the framing fails) and a chunk holding fewer records than the manifest says: each error
// comes after exactly the elements before it, naming the file and offset.
TEST(SnapshotReadAheadTest, ErrorsComeInTheirPlaceNamingTheChunk) {
  TempDir tmp;
  const std::vector<std::string> chunks = Save(tmp.path(), 3, 20);
  ASSERT_EQ(chunks.size(), 3u);
  const std::string victim = chunks[1];
  const std::string bytes = ReadWholeFile(victim);
  const Loaded clean = LoadAll(tmp.path(), 1);
  ASSERT_TRUE(clean.status.ok()) << clean.status;
  struct Case {
    std::string name;
    std::string file;
    size_t elements_before;
    std::string message;
  };
  std::string data_flip = bytes;
  data_flip[TFRecordOffset(bytes, 7) + kTFRecordHeaderBytes + 9] ^= 0x10;
  // The last data byte of record 9 (string bytes or padding): the record still parses, only its
  // checksum tells.
  std::string payload_flip = bytes;
  payload_flip[TFRecordOffset(bytes, 10) - kTFRecordFooterBytes - 1] ^= 0x01;
  std::string length_flip = bytes;
  length_flip[TFRecordOffset(bytes, 12) + 2] ^= 0x01;
  const std::vector<Case> cases = {
      {"data byte", data_flip, 20 + 7,
       absl::StrCat("corrupted record at byte offset ", TFRecordOffset(bytes, 7), " of file ",
                    victim, " (data checksum mismatch)")},
      {"payload byte", payload_flip, 20 + 9,
       absl::StrCat("corrupted record at byte offset ", TFRecordOffset(bytes, 9), " of file ",
                    victim, " (data checksum mismatch)")},
      {"length byte", length_flip, 20 + 12,
       absl::StrCat("corrupted record at byte offset ", TFRecordOffset(bytes, 12), " of file ",
                    victim, " (length checksum mismatch)")},
  };
  for (const Case& c : cases) {
    WriteWholeFile(victim, c.file);
    for (int parallelism : {1, 4}) {
      const std::string what = absl::StrCat(c.name, ", parallelism ", parallelism);
      const Loaded got = LoadAll(tmp.path(), parallelism);
      EXPECT_TRUE(absl::IsDataLoss(got.status)) << what << ": " << got.status;
      EXPECT_TRUE(absl::StrContains(got.status.message(), c.message)) << what << ": " << got.status;
      ExpectSameElements(std::vector<Element>(clean.elements.begin(),
                                              clean.elements.begin() + c.elements_before),
                         got.elements, what);
    }
  }
  // Fewer records than the manifest lists (and its size updated to match): the count check
  // comes after the chunk's last element.
  WriteWholeFile(victim, bytes.substr(0, TFRecordOffset(bytes, 15)));
  absl::StatusOr<proto::SnapshotManifest> m = ReadSnapshotManifest(tmp.path());
  ASSERT_TRUE(m.ok()) << m.status();
  m->mutable_chunks(1)->set_num_bytes(static_cast<int64_t>(TFRecordOffset(bytes, 15)));
  ASSERT_TRUE(WriteSnapshotManifest(tmp.path(), *m).ok());
  for (int parallelism : {1, 4}) {
    const Loaded got = LoadAll(tmp.path(), parallelism);
    EXPECT_TRUE(absl::IsDataLoss(got.status)) << got.status;
    EXPECT_TRUE(absl::StrContains(got.status.message(),
                                  absl::StrCat(victim, "' holds 15 elements but")))
        << got.status;
    EXPECT_EQ(got.elements.size(), 35u) << "parallelism " << parallelism;
  }
}

// Frames every record of a mapped chunk.
std::vector<SnapshotChunkReader::FramedRecord> FrameAll(SnapshotChunkReader* reader) {
  std::vector<SnapshotChunkReader::FramedRecord> records;
  while (true) {
    SnapshotChunkReader::FramedRecord r;
    bool end = false;
    EXPECT_TRUE(reader->NextRecord(&r, &end).ok());
    if (end) return records;
    records.push_back(r);
  }
}

// The queue's bounds: 2 * parallelism units of kUnitRecords records, and no more once their
// bytes reach the limit (one record always fits, however large).
TEST(SnapshotReadAheadTest, QueueStaysWithinItsUnitAndByteBounds) {
  TempDir tmp;
  // Small records (< 200 bytes): units end at kUnitRecords, not at kUnitBytes.
  const std::vector<std::string> chunks = Save(tmp.path(), 1, 250, /*max_bytes=*/60);
  ASSERT_EQ(chunks.size(), 1u);
  auto opened = SnapshotChunkReader::Open(chunks[0], Compression::kNone, kSnapshotFormatVersion,
                                          Spec());
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<SnapshotChunkReader> reader = *std::move(opened);
  ASSERT_TRUE(reader->mapped());
  const std::vector<SnapshotChunkReader::FramedRecord> records = FrameAll(reader.get());
  ASSERT_EQ(records.size(), 250u);
  const auto fill = [&](SnapshotReadAhead& ahead) {
    size_t queued = 0;
    while (ahead.HasRoom() && queued < records.size()) ahead.Add(reader, records[queued++]);
    ahead.Flush();
    return queued;
  };
  const std::unique_ptr<ThreadPool> started = ThreadPool::Create(2, "a test pool").value();
  ThreadPool& pool = *started;
  for (int parallelism : {1, 3}) {
    SnapshotReadAhead ahead(parallelism, 1 << 30, &pool);
    EXPECT_EQ(fill(ahead), 2 * parallelism * SnapshotReadAhead::kUnitRecords)
        << "parallelism " << parallelism;
  }
  {
    // A byte limit smaller than the first record: that one is queued, nothing after it.
    SnapshotReadAhead ahead(8, 1, &pool);
    EXPECT_EQ(fill(ahead), 1u);
    Element e;
    ASSERT_TRUE(ahead.TakeFront(&e).ok());
    EXPECT_TRUE(ahead.HasRoom());
  }
  {
    // The byte limit in between: records are queued while the queued bytes are under it.
    const size_t limit = records[0].data.size() + records[1].data.size() + 1;
    SnapshotReadAhead ahead(8, limit, &pool);
    EXPECT_EQ(fill(ahead), 3u);
  }
}

// A pool whose only thread is busy elsewhere (another pipeline's job): the consumer verifies the
// records itself instead of waiting for the pool, and gets every element in order.
TEST(SnapshotReadAheadTest, ConsumerVerifiesWhatNoPoolThreadStarted) {
  TempDir tmp;
  const std::vector<std::string> chunks = Save(tmp.path(), 1, 100, /*max_bytes=*/2000);
  ASSERT_EQ(chunks.size(), 1u);
  const Loaded want = LoadAll(tmp.path(), 1);
  ASSERT_TRUE(want.status.ok()) << want.status;
  auto opened = SnapshotChunkReader::Open(chunks[0], Compression::kNone, kSnapshotFormatVersion,
                                          Spec());
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<SnapshotChunkReader> reader = *std::move(opened);
  auto pool = ThreadPool::Create(1, "a test pool").value();
  absl::Notification release;
  // Generous: the loop below takes milliseconds; the wait only keeps a broken queue (one that
  // waits for the pool) from hanging the test forever, and then the test fails.
  const absl::Duration kBlockAtMost = absl::Seconds(30);
  std::atomic<bool> timed_out{false};
  pool->Schedule([&] { timed_out = !release.WaitForNotificationWithTimeout(kBlockAtMost); });
  std::vector<Element> got;
  {
    SnapshotReadAhead ahead(2, SnapshotReadAhead::kDefaultMaxBytesAhead, pool.get());
    bool end = false;
    while (!end || !ahead.empty()) {
      while (!end && ahead.HasRoom()) {
        SnapshotChunkReader::FramedRecord r;
        ASSERT_TRUE(reader->NextRecord(&r, &end).ok());
        if (!end) ahead.Add(reader, r);
      }
      ahead.Flush();
      if (ahead.empty()) break;
      Element e;
      ASSERT_TRUE(ahead.TakeFront(&e).ok());
      got.push_back(std::move(e));
    }
    release.Notify();
  }  // the queue goes with its jobs still queued behind the blocker: they must leave it alone
  pool.reset();  // runs those jobs, joins the thread
  EXPECT_FALSE(timed_out) << "the consumer waited for the pool";
  ExpectSameElements(want.elements, got, "verified by the consumer");
}

// An iterator destroyed while its verifications are queued or running: nothing is left charged to the
// memory budget once the elements taken are gone, and the views taken before outlive it.
TEST(SnapshotReadAheadTest, DestroyedMidReadLeavesNothingBehindAndViewsLive) {
  TempDir tmp;
  const std::vector<std::string> chunks = Save(tmp.path(), 4, 30);
  ASSERT_EQ(chunks.size(), 4u);
  // Read, not mapped: views in `want` would keep the chunks mapped.
  Loaded want;
  for (const std::string& chunk : chunks) {
    SnapshotChunkReadOptions read;
    read.map = false;
    auto r = SnapshotChunkReader::Open(chunk, Compression::kNone, kSnapshotFormatVersion, Spec(),
                                       read);
    ASSERT_TRUE(r.ok()) << r.status();
    while (true) {
      Element e;
      bool end = false;
      ASSERT_TRUE((*r)->Next(&e, &end).ok());
      if (end) break;
      want.elements.push_back(std::move(e));
    }
  }
  ASSERT_EQ(want.elements.size(), 120u);
  MemoryBudget& budget = ProcessMemoryBudget();
  const int64_t before = budget.in_use();
  for (int stop_after : {0, 1, 29, 30, 31, 77}) {
    std::vector<Element> taken;
    {
      SnapshotLoadOptions options;
      options.num_parallel_calls = 4;
      absl::StatusOr<Dataset> ds = LoadSnapshot(tmp.path(), options);
      ASSERT_TRUE(ds.ok()) << ds.status();
      auto it = MakeIterator(*ds);
      ASSERT_TRUE(it.ok()) << it.status();
      for (int i = 0; i < stop_after; ++i) {
        Element e;
        bool end = false;
        ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
        ASSERT_FALSE(end);
        taken.push_back(std::move(e));
      }
    }  // the iterator and its read-ahead are gone, verifications may have been in flight
    ExpectSameElements(std::vector<Element>(want.elements.begin(),
                                            want.elements.begin() + stop_after),
                       taken, absl::StrCat("stopped after ", stop_after));
    taken.clear();
    // The queue held views of the mapping, never elements: nothing of it is charged, and with
    // the last view gone no chunk stays mapped (no job left on the pool holds a reader).
    for (const std::string& chunk : chunks) {
      EXPECT_FALSE(record_test::MappingOf(chunk).has_value())
          << chunk << " still mapped, stopped after " << stop_after;
    }
    EXPECT_EQ(budget.in_use(), before) << "stopped after " << stop_after;
  }
}

// load(DIR, num_parallel_calls=N): checked, printed back, and the same elements at any N.
TEST(SnapshotReadAheadTest, NumParallelCallsIsCheckedAndRoundTrips) {
  TempDir tmp;
  ASSERT_EQ(Save(tmp.path(), 2, 10).size(), 2u);
  const std::string dir = absl::StrCat("'", tmp.path(), "'");
  absl::StatusOr<Dataset> two = Dataset::Parse("load(" + dir + ", num_parallel_calls=2)");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_TRUE(absl::StrContains(two->ToExpression(), "num_parallel_calls=2"))
      << two->ToExpression();
  absl::StatusOr<Dataset> again = Dataset::Parse(two->ToExpression());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->Fingerprint(), two->Fingerprint());
  // Sequential is the default: the graph of a plain load() is unchanged. AUTOTUNE round-trips.
  absl::StatusOr<Dataset> plain = Dataset::Parse("load(" + dir + ")");
  absl::StatusOr<Dataset> one = Dataset::Parse("load(" + dir + ", num_parallel_calls=1)");
  ASSERT_TRUE(plain.ok() && one.ok()) << plain.status() << one.status();
  EXPECT_EQ(plain->Fingerprint(), one->Fingerprint());
  EXPECT_NE(plain->Fingerprint(), two->Fingerprint());
  EXPECT_FALSE(absl::StrContains(plain->ToExpression(), "num_parallel_calls"));
  absl::StatusOr<Dataset> autotune =
      Dataset::Parse("load(" + dir + ", num_parallel_calls=tf.data.AUTOTUNE)");
  ASSERT_TRUE(autotune.ok()) << autotune.status();
  EXPECT_TRUE(absl::StrContains(autotune->ToExpression(), "num_parallel_calls=tf.data.AUTOTUNE"))
      << autotune->ToExpression();
  EXPECT_EQ(Dataset::Parse(autotune->ToExpression())->Fingerprint(), autotune->Fingerprint());
  for (const std::string bad : {"num_parallel_calls=0", "num_parallel_calls=-2",
                                "wait=True, num_parallel_calls=2"}) {
    absl::StatusOr<Dataset> ds = Dataset::Parse("load(" + dir + ", " + bad + ")");
    EXPECT_TRUE(absl::IsInvalidArgument(ds.status())) << bad << ": " << ds.status();
  }
  // C++: the option, and the elements it reads.
  SnapshotLoadOptions options;
  options.num_parallel_calls = 3;
  absl::StatusOr<Dataset> cc = LoadSnapshot(tmp.path(), options);
  ASSERT_TRUE(cc.ok()) << cc.status();
  EXPECT_TRUE(absl::StrContains(cc->ToExpression(), "num_parallel_calls=3"));
  const Loaded got = LoadAll(tmp.path(), 3);  // through the same option
  ASSERT_TRUE(got.status.ok()) << got.status;
  const Loaded want = LoadAll(tmp.path(), 1);
  ASSERT_TRUE(want.status.ok()) << want.status;
  ExpectSameElements(want.elements, got.elements, "num_parallel_calls=3");
}

}  // namespace
}  // namespace sluice
