// Mapped snapshot chunks (core/data/ops/snapshot_chunk.h SnapshotChunkReadOptions,
// core/io/tfrecord_reader.h, core/tensor/charged_view.h): an uncompressed local chunk is
// mapped, not read; its aligned numeric components come out as views of the mapping that equal
// the read path byte for byte, are charged to the memory budget, and keep the mapping alive
// after the dataset is gone; a chunk truncated or corrupted is DATA_LOSS naming the file and
// the byte offset (or both sizes, when the manifest lists the chunk's size).
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/data/executor.h"
#include "core/data/ops/snapshot_chunk.h"
#include "core/data/ops/snapshot_manifest.h"
#include "core/io/confined_open.h"
#include "core/io/tfrecord_reader.h"
#include "core/tensor/host_memory.h"
#include "core/tensor/proto_convert.h"
#include "core/util/crc32c.h"
#include "core/util/status_macros.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "sluice/snapshot.h"
#include "tests/core/record_test_util.h"
#include "tests/seeded_rng.h"

namespace sluice {
namespace {

using record_test::MappingOf;
using record_test::ReadWholeFile;
using record_test::TempDir;
using record_test::WriteWholeFile;

constexpr uint64_t kSeed = 20261205;

ElementSpec MixedSpec() {
  auto leaf = [](DType d) { return ElementSpec(TensorSpec{d, Shape({kUnknownDim})}); };
  return ElementSpec::Tuple({leaf(DType::kUInt8), leaf(DType::kFloat32), leaf(DType::kInt64),
                             leaf(DType::kString), leaf(DType::kBool)});
}

// Element `i`: every component's length and bytes drawn from `rng`, so records have many sizes
// (and their components many offsets in the file).
Element MixedElement(SeededRng& rng) {
  const auto n = [&](int64_t hi) { return rng.In(0, hi); };
  std::vector<uint8_t> bytes(static_cast<size_t>(n(5000)));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng.Next());
  std::vector<float> floats(static_cast<size_t>(n(300)));
  for (float& f : floats) f = static_cast<float>(rng.In(-1000000, 1000000)) / 7.0f;
  std::vector<int64_t> ints(static_cast<size_t>(n(40)));
  for (int64_t& v : ints) v = static_cast<int64_t>(rng.Next());
  std::vector<std::string> strings(static_cast<size_t>(n(6)));
  for (std::string& s : strings) {
    s.resize(static_cast<size_t>(n(100)));
    for (char& c : s) c = static_cast<char>(rng.Next());
  }
  std::vector<bool> bools(static_cast<size_t>(n(9)));
  Tensor b = Tensor::Allocate(DType::kBool, Shape({static_cast<int64_t>(bools.size())}));
  for (size_t k = 0; k < bools.size(); ++k) {
    static_cast<uint8_t*>(b.mutable_raw_data())[k] = static_cast<uint8_t>(rng.Next() & 1);
  }
  const int64_t ns = static_cast<int64_t>(strings.size());
  return Element::Tuple({Element(Tensor::FromVector(bytes)), Element(Tensor::FromVector(floats)),
                         Element(Tensor::FromVector(ints)),
                         Element(Tensor::FromStrings(std::move(strings), Shape({ns}))),
                         Element(std::move(b))});
}

// A finished snapshot of `chunks` chunks of `per_chunk` mixed elements (format 2, no
// compression), its manifest listing each chunk's size when `list_sizes`. Returns the chunk
// paths in load order.
std::vector<std::string> SaveMixed(const std::string& dir, int chunks, int per_chunk,
                                   bool list_sizes) {
  std::cout << "seed " << kSeed << "\n";
  SeededRng rng(kSeed);
  EXPECT_TRUE(MakeLocalDirectories(SnapshotChunksDirectory(dir)).ok());
  proto::SnapshotManifest m;
  m.set_format_version(kSnapshotFormatVersion);
  *m.mutable_element_spec() = ElementSpecToProto(MixedSpec());
  std::map<std::string, int64_t> names;
  for (int c = 0; c < chunks; ++c) {
    const std::string name = SnapshotChunkName(absl::StrCat("a", c));
    auto w = SnapshotChunkWriter::Create(dir, name, Compression::kNone, kSnapshotFormatVersion);
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return {};
    for (int i = 0; i < per_chunk; ++i) EXPECT_TRUE((*w)->Append(MixedElement(rng)).ok());
    EXPECT_TRUE((*w)->Commit().ok());
    names[name] = per_chunk;
  }
  std::vector<std::string> paths;
  for (const auto& [name, count] : names) {
    const std::string path = absl::StrCat(SnapshotChunksDirectory(dir), "/", name);
    proto::SnapshotChunk* c = m.add_chunks();
    c->set_name(name);
    c->set_num_elements(count);
    if (list_sizes) c->set_num_bytes(static_cast<int64_t>(ReadWholeFile(path).size()));
    m.set_num_elements(m.num_elements() + count);
    paths.push_back(path);
  }
  m.set_done(true);
  EXPECT_TRUE(WriteSnapshotManifest(dir, m).ok());
  return paths;
}

// Whether numeric `t`'s bytes lie in `range` (strings never do: a string tensor owns them).
bool Inside(const Tensor& t, const std::optional<std::pair<uintptr_t, uintptr_t>>& range) {
  if (t.dtype() == DType::kString || t.byte_size() == 0) return false;
  const auto p = reinterpret_cast<uintptr_t>(t.raw_data());
  return range.has_value() && p >= range->first && p < range->second;
}

std::vector<Element> ReadChunk(const std::string& path, bool map) {
  SnapshotChunkReadOptions options;
  options.map = map;
  auto r = SnapshotChunkReader::Open(path, Compression::kNone, kSnapshotFormatVersion,
                                     MixedSpec(), options);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  EXPECT_EQ((*r)->mapped(), map);
  std::vector<Element> out;
  while (true) {
    Element e;
    bool end = false;
    absl::Status s = (*r)->Next(&e, &end);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok() || end) return out;
    out.push_back(std::move(e));
  }
}

// Same dtype, shape and bytes (strings: the same strings).
void ExpectSameBytes(const Tensor& a, const Tensor& b, const std::string& where) {
  ASSERT_EQ(a.dtype(), b.dtype()) << where;
  ASSERT_EQ(a.shape(), b.shape()) << where;
  if (a.dtype() == DType::kString) {
    for (int64_t i = 0; i < a.num_elements(); ++i) {
      EXPECT_EQ(a.string_at(i), b.string_at(i)) << where << " string " << i;
    }
    return;
  }
  ASSERT_EQ(a.byte_size(), b.byte_size()) << where;
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()), 0) << where;
}

TEST(SnapshotMappedTest, ViewsEqualTheReadPathByteForByte) {
  TempDir tmp;
  const std::vector<std::string> chunks = SaveMixed(tmp.path(), 3, 60, /*list_sizes=*/true);
  ASSERT_EQ(chunks.size(), 3u);
  int views = 0, copies = 0;
  for (const std::string& path : chunks) {
    const std::vector<Element> read = ReadChunk(path, /*map=*/false);
    const std::vector<Element> mapped = ReadChunk(path, /*map=*/true);
    const auto range = MappingOf(path);
    ASSERT_TRUE(range.has_value()) << path << " is not mapped while its views live";
    ASSERT_EQ(read.size(), 60u);
    ASSERT_EQ(mapped.size(), read.size());
    for (size_t i = 0; i < read.size(); ++i) {
      const std::vector<Tensor> a = read[i].Flatten(), b = mapped[i].Flatten();
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < a.size(); ++k) {
        const std::string where = absl::StrCat(path, " element ", i, " component ", k);
        ExpectSameBytes(a[k], b[k], where);
        if (a[k].dtype() == DType::kString || a[k].byte_size() == 0) continue;
        EXPECT_FALSE(Inside(a[k], range)) << where << ": the read path views the file";
        // A view exactly where the bytes are aligned for the dtype in the file; int64 data
        // of format 2 never is (records start 4 bytes past an 8-byte boundary).
        const bool view = Inside(b[k], range);
        EXPECT_EQ(view, b[k].dtype() != DType::kInt64) << where;
        if (view) {
          EXPECT_EQ(reinterpret_cast<uintptr_t>(b[k].raw_data()) % DTypeSize(b[k].dtype()), 0u)
              << where;
        }
        (view ? views : copies)++;
      }
    }
  }
  std::cout << views << " components viewed, " << copies << " copied\n";
  EXPECT_GT(views, 100);
  EXPECT_GT(copies, 50);
  // Through load(): the same elements as the read path, in the same order.
  absl::StatusOr<Dataset> ds = LoadSnapshot(tmp.path(), false);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto it = MakeIterator(*ds);
  ASSERT_TRUE(it.ok()) << it.status();
  for (const std::string& path : chunks) {
    for (const Element& want : ReadChunk(path, /*map=*/false)) {
      Element got;
      bool end = false;
      ASSERT_TRUE((*it)->GetNext(&got, &end).ok());
      ASSERT_FALSE(end);
      const std::vector<Tensor> a = want.Flatten(), b = got.Flatten();
      for (size_t k = 0; k < a.size(); ++k) ExpectSameBytes(a[k], b[k], path);
    }
  }
}

TEST(SnapshotMappedTest, AViewOutlivesTheDatasetAndKeepsTheMappingAlive) {
  TempDir tmp;
  const std::vector<std::string> chunks = SaveMixed(tmp.path(), 1, 20, /*list_sizes=*/true);
  ASSERT_EQ(chunks.size(), 1u);
  const std::vector<Element> want = ReadChunk(chunks[0], /*map=*/false);
  std::vector<Tensor> kept;  // the uint8 component of every element
  {
    absl::StatusOr<Dataset> ds = LoadSnapshot(tmp.path(), false);
    ASSERT_TRUE(ds.ok()) << ds.status();
    auto it = MakeIterator(*ds);
    ASSERT_TRUE(it.ok()) << it.status();
    while (true) {
      Element e;
      bool end = false;
      ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
      if (end) break;
      kept.push_back(e.Flatten()[0]);
    }
  }  // the iterator, its reader and the dataset are gone
  ASSERT_EQ(kept.size(), want.size());
  const auto range = MappingOf(chunks[0]);
  ASSERT_TRUE(range.has_value()) << "the views no longer keep the mapping";
  int views = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    ExpectSameBytes(kept[i], want[i].Flatten()[0], absl::StrCat("element ", i));
    if (kept[i].byte_size() > 0) views += Inside(kept[i], range);
  }
  EXPECT_GT(views, 10);
  kept.clear();
  EXPECT_FALSE(MappingOf(chunks[0]).has_value()) << "the last view is gone, the mapping is not";
}

TEST(SnapshotMappedTest, ViewsAreChargedToTheMemoryBudget) {
  TempDir tmp;
  const std::vector<std::string> chunks = SaveMixed(tmp.path(), 1, 30, /*list_sizes=*/true);
  MemoryBudget& budget = ProcessMemoryBudget();
  const int64_t before = budget.in_use();
  int64_t viewed = 0;
  {
    const std::vector<Element> mapped = ReadChunk(chunks[0], /*map=*/true);
    const auto range = MappingOf(chunks[0]);
    for (const Element& e : mapped) {
      for (const Tensor& t : e.Flatten()) {
        if (Inside(t, range)) viewed += static_cast<int64_t>(t.byte_size());
      }
    }
    ASSERT_GT(viewed, 10000);
    EXPECT_GE(budget.in_use() - before, viewed);
  }
  EXPECT_EQ(budget.in_use(), before);
  // A view larger than one element may be is refused as a copy would be, naming the chunk.
  const MemoryLimits limits = budget.limits();
  MemoryLimits small = limits;
  small.element_bytes = 4000;
  budget.SetLimits(small);
  auto r = SnapshotChunkReader::Open(chunks[0], Compression::kNone, kSnapshotFormatVersion,
                                     MixedSpec());
  ASSERT_TRUE(r.ok());
  absl::Status s;
  for (int i = 0; i < 30 && s.ok(); ++i) {
    Element e;
    bool end = false;
    s = (*r)->Next(&e, &end);
  }
  budget.SetLimits(limits);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), chunks[0])) << s;
}

absl::Status LoadStatus(const std::string& dir, bool wait = false) {
  SnapshotLoadOptions options;
  options.wait = wait;
  options.timeout_seconds = 60;  // never reached: the snapshot is done
  absl::StatusOr<Dataset> ds = LoadSnapshot(dir, options);
  if (!ds.ok()) return ds.status();
  auto it = MakeIterator(*ds);
  if (!it.ok()) return it.status();
  while (true) {
    Element e;
    bool end = false;
    RETURN_IF_ERROR((*it)->GetNext(&e, &end));
    if (end) return absl::OkStatus();
  }
}

// The byte offset of each record of a chunk file.
std::vector<uint64_t> RecordOffsets(const std::string& bytes) {
  std::vector<uint64_t> offsets;
  uint64_t at = 0;
  while (at + kTFRecordHeaderBytes <= bytes.size()) {
    offsets.push_back(at);
    uint64_t length;
    std::memcpy(&length, bytes.data() + at, 8);
    at += kTFRecordHeaderBytes + length + kTFRecordFooterBytes;
  }
  return offsets;
}

// A snapshot of two chunks of 20 elements, and chunk `which`: its path, bytes and the offset
// of each of its records.
struct Victim {
  std::string path;
  std::string bytes;
  std::vector<uint64_t> offsets;
};
Victim SaveTwoChunks(const std::string& dir, int which) {
  const std::vector<std::string> chunks = SaveMixed(dir, 2, 20, /*list_sizes=*/true);
  Victim v;
  v.path = chunks.at(static_cast<size_t>(which));
  v.bytes = ReadWholeFile(v.path);
  v.offsets = RecordOffsets(v.bytes);
  EXPECT_EQ(v.offsets.size(), 20u);
  return v;
}

TEST(SnapshotMappedTest, TruncatedChunkIsDataLossNamingItBeforeItIsRead) {
  TempDir tmp;
  const auto [victim, bytes, offsets] = SaveTwoChunks(tmp.path(), 1);
  ASSERT_EQ(offsets.size(), 20u);
  // At a record boundary: the manifest's size says so before a record is read.
  WriteWholeFile(victim, bytes.substr(0, offsets[10]));
  absl::Status s = LoadStatus(tmp.path());
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), victim)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("has ", offsets[10], " bytes but its "
                                                          "manifest says ", bytes.size())))
      << s;
  // Inside a record, read while the snapshot is followed (wait=True lists no sizes): the
  // mapped reader stops at that record's offset.
  const uint64_t cut = offsets[13] + 40;
  WriteWholeFile(victim, bytes.substr(0, cut));
  s = LoadStatus(tmp.path(), /*wait=*/true);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(
      s.message(), absl::StrCat("truncated record at byte offset ", offsets[13], " of file ",
                                victim)))
      << s;
  // Inside the header of the last record.
  WriteWholeFile(victim, bytes.substr(0, offsets[19] + 5));
  s = LoadStatus(tmp.path(), /*wait=*/true);
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("truncated record at byte offset ",
                                                          offsets[19])))
      << s;
}

TEST(SnapshotMappedTest, CorruptChunkIsDataLossNamingTheFileAndOffset) {
  TempDir tmp;
  const auto [victim, bytes, offsets] = SaveTwoChunks(tmp.path(), 0);
  ASSERT_EQ(offsets.size(), 20u);
  // A flipped data byte in record 7, then a flipped length byte of record 12.
  std::string flipped = bytes;
  flipped[offsets[7] + kTFRecordHeaderBytes + 3] ^= 0x04;
  WriteWholeFile(victim, flipped);
  absl::Status s = LoadStatus(tmp.path());
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(),
                                absl::StrCat("corrupted record at byte offset ", offsets[7],
                                             " of file ", victim, " (data checksum mismatch)")))
      << s;
  flipped = bytes;
  flipped[offsets[12] + 1] ^= 0x01;
  WriteWholeFile(victim, flipped);
  s = LoadStatus(tmp.path());
  EXPECT_TRUE(absl::StrContains(s.message(),
                                absl::StrCat("corrupted record at byte offset ", offsets[12],
                                             " of file ", victim, " (length checksum mismatch)")))
      << s;
  // A length that claims more than the file holds, behind a good length checksum.
  flipped = bytes;
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(flipped.data() + offsets[15], &huge, 8);
  const uint32_t crc = crc32c::Mask(crc32c::Value(flipped.data() + offsets[15], 8));
  std::memcpy(flipped.data() + offsets[15] + 8, &crc, 4);
  WriteWholeFile(victim, flipped);
  s = LoadStatus(tmp.path());
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(),
                                absl::StrCat("truncated record at byte offset ", offsets[15])))
      << s;
}

TEST(SnapshotMappedTest, ANegativeChunkSizeInTheManifestIsDataLoss) {
  TempDir tmp;
  SaveMixed(tmp.path(), 1, 2, /*list_sizes=*/true);
  absl::StatusOr<proto::SnapshotManifest> m = ReadSnapshotManifest(tmp.path());
  ASSERT_TRUE(m.ok());
  m->mutable_chunks(0)->set_num_bytes(-3);
  ASSERT_TRUE(WriteSnapshotManifest(tmp.path(), *m).ok());
  absl::Status s = LoadStatus(tmp.path());
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), SnapshotManifestPath(tmp.path()))) << s;
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A chunk is mapped through the process's confinement (--data_root): outside the roots the
// open is refused as a read would be, and nothing is mapped.
TEST(SnapshotMappedTest, MappingKeepsTheDataRootConfinement) {
  TempDir tmp, elsewhere;
  const std::vector<std::string> chunks = SaveMixed(tmp.path(), 1, 3, /*list_sizes=*/true);
  char resolved[PATH_MAX];
  ASSERT_NE(::realpath(elsewhere.path().c_str(), resolved), nullptr);
  const LocalConfinement before = ProcessLocalConfinement();
  SetProcessLocalConfinement(LocalConfinement{.confined = true, .roots = {resolved}});
  absl::StatusOr<std::unique_ptr<SnapshotChunkReader>> r = SnapshotChunkReader::Open(
      chunks[0], Compression::kNone, kSnapshotFormatVersion, MixedSpec());
  SetProcessLocalConfinement(before);
  EXPECT_TRUE(absl::IsPermissionDenied(r.status())) << r.status();
  EXPECT_FALSE(MappingOf(chunks[0]).has_value());
  // Inside the roots it maps.
  ASSERT_NE(::realpath(tmp.path().c_str(), resolved), nullptr);
  SetProcessLocalConfinement(LocalConfinement{.confined = true, .roots = {resolved}});
  r = SnapshotChunkReader::Open(chunks[0], Compression::kNone, kSnapshotFormatVersion,
                                MixedSpec());
  SetProcessLocalConfinement(before);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)->mapped());
}

// A chunk that another process truncates in place while it is mapped: the reader, shared with
// tf_record_dataset (core/io/tfrecord_reader.h), reports DATA_LOSS naming the chunk and the
// process lives on (the separate mapped reader chunks used before raised SIGBUS here).
TEST(SnapshotMappedTest, ChunkTruncatedWhileMappedIsDataLossNotSigbus) {
  TempDir tmp;
  const std::vector<std::string> chunks = SaveMixed(tmp.path(), 1, 200, /*list_sizes=*/true);
  ASSERT_EQ(chunks.size(), 1u);
  ASSERT_GT(ReadWholeFile(chunks[0]).size(), 64u << 10);
  auto r = SnapshotChunkReader::Open(chunks[0], Compression::kNone, kSnapshotFormatVersion,
                                     MixedSpec());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*r)->mapped());
  Element e;
  bool end = false;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*r)->Next(&e, &end).ok() && !end) << i;
  ASSERT_EQ(::truncate(chunks[0].c_str(), 16 << 10), 0) << chunks[0];
  absl::Status s;
  for (int i = 0; i < 200 && s.ok() && !end; ++i) s = (*r)->Next(&e, &end);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), chunks[0])) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "truncated while it was read")) << s;
}

}  // namespace
}  // namespace sluice
