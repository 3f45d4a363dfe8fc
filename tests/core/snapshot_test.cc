// Distributed snapshots in one process (core/data/ops/snapshot_*.h, save_chunks, load): chunks
// written once per split and committed whole, the manifest, load's order and spec, FILE
// sharding of a loaded snapshot, wait=True following a snapshot being written, and bad input:
// incomplete, corrupt (bit flips, truncation, garbage manifests, huge counts, random bytes) and
// other-spec snapshots give DATA_LOSS / FAILED_PRECONDITION naming the file, never a crash.
// The save through the service: tests/worker/service_snapshot_test.cc.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/data/distribute/auto_shard.h"
#include "core/data/executor.h"
#include "core/data/ops/snapshot_chunk.h"
#include "core/data/ops/snapshot_manifest.h"
#include "core/io/tfrecord_writer.h"
#include "core/tensor/proto_convert.h"
#include "core/tensor/raw_element.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "sluice/snapshot.h"
#include "tests/core/iterator_test_util.h"
#include "tests/core/record_test_util.h"
#include "tests/seeded_rng.h"

namespace sluice {
namespace {

using record_test::ReadWholeFile;
using record_test::TempDir;
using record_test::WriteWholeFile;
using testing_util::RunDataset;
using testing_util::Scalars;

std::string Quoted(const std::string& s) { return "'" + s + "'"; }

// The snapshot format the helpers write: each test runs for every format loads read (1:
// ElementProto records, written by saves before format 2; 2: raw element records).
int64_t g_format = kSnapshotFormatVersion;

class SnapshotTest : public testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { g_format = GetParam(); }
  void TearDown() override { g_format = kSnapshotFormatVersion; }
};

INSTANTIATE_TEST_SUITE_P(Formats, SnapshotTest, testing::Values(1, 2),
                         [](const testing::TestParamInfo<int64_t>& i) {
                           return absl::StrCat("Format", i.param);
                         });

// One chunk record of `e` in the current format, framed.
void AppendChunkRecord(const Element& e, std::string* out) {
  std::string record;
  if (g_format == 2) {
    SerializeRawElement(e, &record);
  } else {
    record = ElementToProto(e).SerializeAsString();
  }
  AppendTFRecord(record, out);
}

// The manifest a save starts with: the spec of `ds`, not done.
void StartManifest(const std::string& dir, const Dataset& ds, const std::string& compression = "") {
  ASSERT_TRUE(MakeLocalDirectories(SnapshotChunksDirectory(dir)).ok());
  proto::SnapshotManifest m;
  m.set_format_version(g_format);
  *m.mutable_element_spec() = ElementSpecToProto(*ds.element_spec());
  m.set_compression_type(compression);
  m.set_fingerprint(ds.Fingerprint());
  ASSERT_TRUE(WriteSnapshotManifest(dir, m).ok());
}

// Runs `piece`.save_chunks(dir) in this process (what a worker does for one split); returns
// the (chunk name, count) it yields.
std::pair<std::string, int64_t> WriteChunk(const std::string& dir, const std::string& piece,
                                           const std::string& compression = "") {
  absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat(
      piece, ".save_chunks(", Quoted(dir), compression.empty() ? "" : ", compression=",
      compression.empty() ? "" : Quoted(compression), ", format_version=", g_format, ")"));
  EXPECT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<std::vector<Element>> out = RunDataset(*ds);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok() || out->size() != 1) return {"", 0};
  const Element& e = (*out)[0];
  return {e.children()[0].leaf().string_at(0), e.children()[1].leaf().data<int64_t>()[0]};
}

// Marks the snapshot done listing `chunks` (name -> count).
void FinishManifest(const std::string& dir, const std::map<std::string, int64_t>& chunks) {
  absl::StatusOr<proto::SnapshotManifest> m = ReadSnapshotManifest(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  int64_t total = 0;
  for (const auto& [name, count] : chunks) {
    proto::SnapshotChunk* c = m->add_chunks();
    c->set_name(name);
    c->set_num_elements(count);
    total += count;
  }
  m->set_num_elements(total);
  m->set_done(true);
  ASSERT_TRUE(WriteSnapshotManifest(dir, *m).ok());
}

// A finished snapshot of range(0, 40) in four splits of 10; returns the chunks.
std::map<std::string, int64_t> SaveRange40(const std::string& dir,
                                           const std::string& compression = "") {
  StartManifest(dir, *Dataset::Parse("range(40)"), compression);
  std::map<std::string, int64_t> chunks;
  for (int i = 0; i < 4; ++i) {
    auto [name, count] =
        WriteChunk(dir, absl::StrCat("range(", i * 10, ", ", i * 10 + 10, ")"), compression);
    chunks[name] = count;
  }
  FinishManifest(dir, chunks);
  return chunks;
}

std::string ChunkPath(const std::string& dir, const std::string& name) {
  return SnapshotChunksDirectory(dir) + "/" + name;
}

absl::StatusOr<std::vector<Element>> LoadAll(const std::string& dir, bool wait = false) {
  absl::StatusOr<Dataset> ds = LoadSnapshot(dir, wait);
  if (!ds.ok()) return ds.status();
  return RunDataset(*ds);
}

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST_P(SnapshotTest, RoundTripKeepsEveryElementOnceInChunkNameOrder) {
  TempDir tmp;
  const std::map<std::string, int64_t> chunks = SaveRange40(tmp.path());
  ASSERT_EQ(chunks.size(), 4u);
  for (const auto& [name, count] : chunks) {
    EXPECT_TRUE(IsSnapshotChunkName(name)) << name;
    EXPECT_EQ(count, 10);
  }
  absl::StatusOr<std::vector<Element>> got = LoadAll(tmp.path());
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<int64_t> values = Scalars(*got);
  EXPECT_EQ(Sorted(values), testing_util::Iota(40));
  // Deterministic by chunk: chunks in name order, each chunk's elements in written order.
  std::vector<int64_t> expected;
  for (const auto& [name, count] : chunks) {
    absl::StatusOr<std::unique_ptr<SnapshotChunkReader>> r = SnapshotChunkReader::Open(
        ChunkPath(tmp.path(), name), Compression::kNone, g_format,
        *Dataset::Parse("range(1)")->element_spec());
    ASSERT_TRUE(r.ok());
    Element e;
    bool end = false;
    while ((*r)->Next(&e, &end).ok() && !end) expected.push_back(e.leaf().data<int64_t>()[0]);
  }
  EXPECT_EQ(values, expected);
  // The chunks hold records of the manifest's format: format 2 a raw record (its first word
  // is the component count, 1), format 1 an ElementProto (its first byte field 1's tag).
  const std::string first = ReadWholeFile(ChunkPath(tmp.path(), chunks.begin()->first));
  ASSERT_GT(first.size(), kTFRecordHeaderBytes + 8);
  uint64_t word = 0;
  std::memcpy(&word, first.data() + kTFRecordHeaderBytes, 8);
  if (g_format == 2) {
    EXPECT_EQ(word, 1u);
  } else {
    EXPECT_EQ(first[kTFRecordHeaderBytes], 0x0a);
  }
  // The same order on every load, and through the pipeline syntax.
  absl::StatusOr<Dataset> parsed = Dataset::Parse("load(" + Quoted(tmp.path()) + ").batch(8)");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->element_spec()->leaf().ToString(),
            "TensorSpec(shape=(None,), dtype=tf.int64, name=None)");
  absl::StatusOr<std::vector<Element>> again = LoadAll(tmp.path());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Scalars(*again), values);
}

TEST_P(SnapshotTest, CompressedChunksRoundTrip) {
  TempDir tmp;
  SaveRange40(tmp.path(), "GZIP");
  absl::StatusOr<std::vector<Element>> got = LoadAll(tmp.path());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Sorted(Scalars(*got)), testing_util::Iota(40));
}

TEST_P(SnapshotTest, ElementSpecComesFromTheManifestForNestedElements) {
  TempDir tmp;
  const std::string piece =
      "from_tensor_slices({'x': [[1.0, 2.0], [3.0, 4.0]], 'label': ['a', 'b']})";
  StartManifest(tmp.path(), *Dataset::Parse(piece));
  auto [name, count] = WriteChunk(tmp.path(), piece);
  FinishManifest(tmp.path(), {{name, count}});
  absl::StatusOr<Dataset> ds = LoadSnapshot(tmp.path());
  ASSERT_TRUE(ds.ok()) << ds.status();
  const ElementSpec want = *Dataset::Parse(piece)->element_spec();
  ASSERT_TRUE(ds->element_spec()->SameStructure(want));
  EXPECT_EQ(ds->element_spec()->Flatten(), want.Flatten());
  absl::StatusOr<std::vector<Element>> got = RunDataset(*ds);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[1].children()[1].leaf().string_at(0), "b");
}

TEST_P(SnapshotTest, ACommittedChunkIsNotWrittenAgain) {
  TempDir tmp;
  StartManifest(tmp.path(), *Dataset::Parse("range(10)"));
  auto first = WriteChunk(tmp.path(), "range(10)");
  EXPECT_EQ(first.second, 10);
  const std::string bytes = ReadWholeFile(ChunkPath(tmp.path(), first.first));
  // The same split again (its worker died after the commit): the same name, reported as
  // committed before, and the file untouched.
  auto second = WriteChunk(tmp.path(), "range(10)");
  EXPECT_EQ(second.first, first.first);
  EXPECT_EQ(second.second, -1);
  EXPECT_EQ(ReadWholeFile(ChunkPath(tmp.path(), first.first)), bytes);
  // Another split: another chunk.
  EXPECT_NE(WriteChunk(tmp.path(), "range(10, 20)").first, first.first);
}

TEST_P(SnapshotTest, AFailedSplitLeavesNoChunk) {
  TempDir tmp;
  StartManifest(tmp.path(), *Dataset::Parse("range(10)"));
  // take(3) of a file that does not exist: the input fails, nothing is committed.
  absl::StatusOr<Dataset> ds = Dataset::Parse(
      "tf_record_dataset(" + Quoted(tmp.File("missing.tfrecord")) + ").save_chunks(" +
      Quoted(tmp.path()) + ")");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_FALSE(RunDataset(*ds).ok());
  EXPECT_TRUE(std::filesystem::is_empty(SnapshotChunksDirectory(tmp.path())));
}

TEST_P(SnapshotTest, FileShardingSplitsTheChunks) {
  TempDir tmp;
  SaveRange40(tmp.path());
  absl::StatusOr<Dataset> ds = LoadSnapshot(tmp.path());
  ASSERT_TRUE(ds.ok());
  std::vector<int64_t> all;
  for (int shard = 0; shard < 2; ++shard) {
    absl::StatusOr<Dataset> part = ShardByFile(*ds, 2, shard);
    ASSERT_TRUE(part.ok()) << part.status();
    absl::StatusOr<std::vector<Element>> got = RunDataset(*part);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->size(), 20u);  // two chunks of 10
    for (int64_t v : Scalars(*got)) all.push_back(v);
  }
  EXPECT_EQ(Sorted(all), testing_util::Iota(40));
}

TEST_P(SnapshotTest, WaitFollowsASnapshotBeingWritten) {
  TempDir tmp;
  const std::string dir = tmp.path();
  StartManifest(dir, *Dataset::Parse("range(40)"));
  auto first = WriteChunk(dir, "range(0, 10)");
  absl::StatusOr<Dataset> ds = LoadSnapshot(dir, /*wait=*/true);
  ASSERT_TRUE(ds.ok()) << ds.status();
  // wait=False refuses the unfinished snapshot, naming its manifest.
  absl::StatusOr<Dataset> now = LoadSnapshot(dir);
  EXPECT_TRUE(absl::IsFailedPrecondition(now.status())) << now.status();
  EXPECT_TRUE(absl::StrContains(now.status().message(), SnapshotManifestPath(dir)));

  std::atomic<bool> writer_done{false};
  std::thread writer([&] {
    std::map<std::string, int64_t> chunks = {first};
    for (int i = 1; i < 4; ++i) {
      chunks.insert(WriteChunk(dir, absl::StrCat("range(", i * 10, ", ", i * 10 + 10, ")")));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FinishManifest(dir, chunks);
    writer_done = true;
  });
  absl::StatusOr<std::vector<Element>> got = RunDataset(*ds);
  writer.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(writer_done);
  EXPECT_EQ(Sorted(Scalars(*got)), testing_util::Iota(40));
}

TEST(SnapshotLockTest, RefusesASecondSave) {
  TempDir tmp;
  ASSERT_TRUE(AcquireSnapshotLock(tmp.path(), "fp-1").ok());
  absl::Status second = AcquireSnapshotLock(tmp.path(), "fp-2");
  EXPECT_TRUE(absl::IsAlreadyExists(second)) << second;
  EXPECT_TRUE(absl::StrContains(second.message(), SnapshotLockPath(tmp.path())));
  EXPECT_TRUE(absl::StrContains(second.message(), "fp-1"));
  ASSERT_TRUE(ReleaseSnapshotLock(tmp.path()).ok());
  EXPECT_TRUE(AcquireSnapshotLock(tmp.path(), "fp-2").ok());
}

// --- Bad input. ---

TEST_P(SnapshotTest, MissingOrIncompleteSnapshotIsRefusedNamingTheManifest) {
  TempDir tmp;
  absl::StatusOr<Dataset> none = Dataset::Parse("load(" + Quoted(tmp.path()) + ")");
  EXPECT_TRUE(absl::IsNotFound(none.status())) << none.status();
  EXPECT_TRUE(absl::StrContains(none.status().message(), SnapshotManifestPath(tmp.path())));

  StartManifest(tmp.path(), *Dataset::Parse("range(3)"));
  absl::StatusOr<Dataset> partial = Dataset::Parse("load(" + Quoted(tmp.path()) + ")");
  EXPECT_TRUE(absl::IsFailedPrecondition(partial.status())) << partial.status();
}

// Loads (expecting the parse to succeed) and returns the iteration's status.
absl::Status LoadStatus(const std::string& dir) {
  absl::StatusOr<std::vector<Element>> got = LoadAll(dir);
  return got.status();
}

TEST_P(SnapshotTest, BitFlippedChunkIsDataLossNamingTheFile) {
  TempDir tmp;
  const auto chunks = SaveRange40(tmp.path());
  const std::string victim = ChunkPath(tmp.path(), chunks.begin()->first);
  std::string bytes = ReadWholeFile(victim);
  bytes[bytes.size() / 2] ^= 0x10;
  WriteWholeFile(victim, bytes);
  absl::Status s = LoadStatus(tmp.path());
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), victim)) << s;
}

TEST_P(SnapshotTest, TruncatedChunkIsDataLossNamingTheFile) {
  TempDir tmp;
  const auto chunks = SaveRange40(tmp.path());
  const std::string victim = ChunkPath(tmp.path(), chunks.rbegin()->first);
  std::string bytes = ReadWholeFile(victim);
  // Inside a record, then at a record boundary (the manifest's count catches that one).
  WriteWholeFile(victim, bytes.substr(0, bytes.size() - 3));
  absl::Status s = LoadStatus(tmp.path());
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), victim)) << s;

  std::string one_record;
  AppendChunkRecord(Element::Leaf(Tensor::Scalar<int64_t>(7)), &one_record);
  WriteWholeFile(victim, one_record);
  s = LoadStatus(tmp.path());
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), victim)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "holds 1 elements")) << s;
}

TEST_P(SnapshotTest, MissingChunkIsNotFoundNamingIt) {
  TempDir tmp;
  const auto chunks = SaveRange40(tmp.path());
  const std::string victim = ChunkPath(tmp.path(), chunks.begin()->first);
  std::filesystem::remove(victim);
  absl::Status s = LoadStatus(tmp.path());
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), victim)) << s;
}

TEST_P(SnapshotTest, ChunkOfAnotherSpecIsFailedPrecondition) {
  TempDir tmp;
  const auto chunks = SaveRange40(tmp.path());
  const std::string victim = ChunkPath(tmp.path(), chunks.begin()->first);
  std::string bytes;
  for (int i = 0; i < 10; ++i) {
    AppendChunkRecord(Element::Leaf(Tensor::StringScalar("x")), &bytes);
  }
  WriteWholeFile(victim, bytes);
  absl::Status s = LoadStatus(tmp.path());
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), victim)) << s;
}

TEST_P(SnapshotTest, ManifestRewrittenWithAnotherSpecIsFailedPrecondition) {
  TempDir tmp;
  SaveRange40(tmp.path());
  absl::StatusOr<Dataset> ds = LoadSnapshot(tmp.path());
  ASSERT_TRUE(ds.ok());
  absl::StatusOr<proto::SnapshotManifest> m = ReadSnapshotManifest(tmp.path());
  ASSERT_TRUE(m.ok());
  *m->mutable_element_spec() = ElementSpecToProto(*Dataset::Parse("from_tensors('a')")->element_spec());
  ASSERT_TRUE(WriteSnapshotManifest(tmp.path(), *m).ok());
  absl::StatusOr<std::vector<Element>> got = RunDataset(*ds);
  EXPECT_TRUE(absl::IsFailedPrecondition(got.status())) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), SnapshotManifestPath(tmp.path())));
}

TEST_P(SnapshotTest, ManifestGarbageAndHugeCountsAreDataLoss) {
  TempDir tmp;
  const auto chunks = SaveRange40(tmp.path());
  const std::string manifest = SnapshotManifestPath(tmp.path());
  const std::string good = ReadWholeFile(manifest);
  auto expect_data_loss = [&](const std::string& bytes, const std::string& what) {
    WriteWholeFile(manifest, bytes);
    absl::StatusOr<Dataset> ds = LoadSnapshot(tmp.path());
    EXPECT_TRUE(absl::IsDataLoss(ds.status())) << what << ": " << ds.status();
    EXPECT_TRUE(absl::StrContains(ds.status().message(), manifest)) << what;
  };
  expect_data_loss("", "empty");
  expect_data_loss("not a manifest at all", "text");
  expect_data_loss(good.substr(0, good.size() - 1), "truncated");
  std::string flipped = good;
  flipped[20] ^= 1;
  expect_data_loss(flipped, "bit flip");
  std::string huge_length = good;
  for (int i = 0; i < 8; ++i) huge_length[i] = '\xff';
  expect_data_loss(huge_length, "length field 2^64-1");

  absl::StatusOr<proto::SnapshotManifest> m = ParseSnapshotManifest(
      good.substr(kTFRecordHeaderBytes, good.size() - kTFRecordHeaderBytes - kTFRecordFooterBytes),
      manifest);
  ASSERT_TRUE(m.ok()) << m.status();
  auto framed = [](const proto::SnapshotManifest& x) {
    std::string out;
    AppendTFRecord(x.SerializeAsString(), &out);
    return out;
  };
  proto::SnapshotManifest huge = *m;
  huge.mutable_chunks(0)->set_num_elements(int64_t{1} << 62);
  expect_data_loss(framed(huge), "a chunk count that does not add up");
  huge.set_num_elements(huge.num_elements() - 10 + (int64_t{1} << 62));
  WriteWholeFile(manifest, framed(huge));
  // Consistent but false counts: the chunk holds 10, not 2^62; nothing is allocated by them.
  absl::Status s = LoadStatus(tmp.path());
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  proto::SnapshotManifest negative = *m;
  negative.mutable_chunks(0)->set_num_elements(-5);
  expect_data_loss(framed(negative), "a negative count");
  proto::SnapshotManifest escape = *m;
  escape.mutable_chunks(0)->set_name("../../etc/passwd");
  expect_data_loss(framed(escape), "a chunk name with a path");
  proto::SnapshotManifest version = *m;
  version.set_format_version(99);
  expect_data_loss(framed(version), "an unknown format version");
}

// Random bytes, random bit flips and truncations of chunks and manifest (seeded, printed):
// every load ends in OK or a clean error, never a crash or a hang.
TEST_P(SnapshotTest, RandomCorruptionNeverCrashes) {
  const uint64_t seed = 20261205;
  std::cout << "seed " << seed << "\n";
  SeededRng rng(seed);
  TempDir tmp;
  const auto chunks = SaveRange40(tmp.path());
  const std::string manifest = SnapshotManifestPath(tmp.path());
  std::vector<std::string> files = {manifest};
  for (const auto& [name, count] : chunks) files.push_back(ChunkPath(tmp.path(), name));
  std::vector<std::string> originals;
  for (const std::string& f : files) originals.push_back(ReadWholeFile(f));
  for (int round = 0; round < 200; ++round) {
    const size_t which = static_cast<size_t>(rng.In(0, static_cast<int64_t>(files.size()) - 1));
    std::string bytes = originals[which];
    switch (rng.In(0, 2)) {
      case 0:
        for (int k = 0, n = static_cast<int>(rng.In(1, 4)); k < n; ++k) {
          bytes[static_cast<size_t>(rng.In(0, static_cast<int64_t>(bytes.size()) - 1))] ^=
              static_cast<char>(1 << rng.In(0, 7));
        }
        break;
      case 1:
        bytes.resize(static_cast<size_t>(rng.In(0, static_cast<int64_t>(bytes.size()) - 1)));
        break;
      default:
        bytes.clear();
        for (int64_t k = 0, n = rng.In(0, 256); k < n; ++k) {
          bytes.push_back(static_cast<char>(rng.Next()));
        }
    }
    WriteWholeFile(files[which], bytes);
    absl::StatusOr<std::vector<Element>> got = LoadAll(tmp.path());
    if (!got.ok()) {
      const absl::StatusCode c = got.status().code();
      EXPECT_TRUE(c == absl::StatusCode::kDataLoss || c == absl::StatusCode::kFailedPrecondition ||
                  c == absl::StatusCode::kNotFound)
          << "round " << round << ": " << got.status();
    } else {
      EXPECT_EQ(got->size(), 40u) << "round " << round;
    }
    WriteWholeFile(files[which], originals[which]);
  }
}


// A raw record whose checksum is good but whose header claims 2^62 int64s (the spec's
// dimension is unknown, so only the record's size bounds it): DATA_LOSS naming the chunk and
// the element, before anything is allocated for it.
TEST(SnapshotRawFormatTest, HostileRecordBehindAGoodChecksumIsDataLossNamingTheChunk) {
  TempDir tmp;
  g_format = 2;
  StartManifest(tmp.path(), *Dataset::Parse("range(40).batch(10)"));  // int64 (None,)
  const std::string name = SnapshotChunkName(std::string(32, 'a'));
  std::string bytes;
  for (int i = 0; i < 4; ++i) {
    Tensor t = Tensor::Allocate(DType::kInt64, Shape({10}));
    std::string record;
    SerializeRawElement(Element::Leaf(t), &record);
    if (i == 3) {
      const uint64_t dim = uint64_t{1} << 62;  // words: count | header | dim | data
      record.replace(16, 8, reinterpret_cast<const char*>(&dim), 8);
    }
    AppendTFRecord(record, &bytes);
  }
  WriteWholeFile(ChunkPath(tmp.path(), name), bytes);
  FinishManifest(tmp.path(), {{name, 4}});
  absl::StatusOr<std::vector<Element>> got = LoadAll(tmp.path());
  EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), ChunkPath(tmp.path(), name)))
      << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "element 3")) << got.status();
  g_format = kSnapshotFormatVersion;
}

// --- load(wait=True): a snapshot that stops growing, a save that failed. ---

TEST_P(SnapshotTest, WaitGivesUpWhenTheSnapshotStopsGrowingNamingWhatIsMissing) {
  TempDir tmp;
  const std::string dir = tmp.path();
  StartManifest(dir, *Dataset::Parse("range(40)"));
  WriteChunk(dir, "range(0, 10)");
  // The timeout is what the test waits out: 0.3 s without a change after the first chunk.
  absl::StatusOr<Dataset> ds =
      Dataset::Parse("load(" + Quoted(dir) + ", wait=True, timeout=0.3)");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_TRUE(absl::StrContains(ds->ToExpression(), "wait=True, timeout=0.3"))
      << ds->ToExpression();
  absl::StatusOr<std::vector<Element>> got = RunDataset(*ds);
  EXPECT_TRUE(absl::IsDeadlineExceeded(got.status())) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), dir)) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "1 chunks (10 elements) read"))
      << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "no save holds")) << got.status();

  // A save still holds the lock (it may have died): the message says so.
  ASSERT_TRUE(AcquireSnapshotLock(dir, "fp-of-the-save").ok());
  got = RunDataset(*ds);
  EXPECT_TRUE(absl::IsDeadlineExceeded(got.status())) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "fp-of-the-save holds")) << got.status();
}

TEST_P(SnapshotTest, WaitStopsAtOnceWhenTheSaveFailed) {
  TempDir tmp;
  const std::string dir = tmp.path();
  StartManifest(dir, *Dataset::Parse("range(40)"));
  WriteChunk(dir, "range(0, 10)");
  absl::StatusOr<proto::SnapshotManifest> m = ReadSnapshotManifest(dir);
  ASSERT_TRUE(m.ok());
  m->set_save_error("UNAVAILABLE: the coordinator went away");
  ASSERT_TRUE(WriteSnapshotManifest(dir, *m).ok());
  // The default timeout (10 minutes): the failure is reported without waiting for it.
  absl::StatusOr<std::vector<Element>> got = LoadAll(dir, /*wait=*/true);
  EXPECT_TRUE(absl::IsFailedPrecondition(got.status())) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "the coordinator went away"))
      << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), dir)) << got.status();
  // wait=False says it too.
  absl::StatusOr<Dataset> now = LoadSnapshot(dir);
  EXPECT_TRUE(absl::IsFailedPrecondition(now.status())) << now.status();
  EXPECT_TRUE(absl::StrContains(now.status().message(), "its save failed")) << now.status();
}

TEST(SnapshotLoadTimeoutTest, ArgumentsAreCheckedAndRoundTrip) {
  g_format = 2;
  TempDir tmp;
  StartManifest(tmp.path(), *Dataset::Parse("range(3)"));
  const std::string dir = Quoted(tmp.path());
  absl::StatusOr<Dataset> none = Dataset::Parse("load(" + dir + ", wait=True, timeout=None)");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(absl::StrContains(none->ToExpression(), "timeout=None")) << none->ToExpression();
  absl::StatusOr<Dataset> again = Dataset::Parse(none->ToExpression());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->Fingerprint(), none->Fingerprint());
  EXPECT_TRUE(absl::IsInvalidArgument(Dataset::Parse("load(" + dir + ", timeout=5)").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      Dataset::Parse("load(" + dir + ", wait=True, timeout=-1)").status()));
  SnapshotLoadOptions options;
  options.wait = true;
  options.timeout_seconds = 2.5;
  absl::StatusOr<Dataset> cc = LoadSnapshot(tmp.path(), options);
  ASSERT_TRUE(cc.ok()) << cc.status();
  EXPECT_TRUE(absl::StrContains(cc->ToExpression(), "timeout=2.5")) << cc->ToExpression();
}

}  // namespace
}  // namespace sluice
