// Framing a mapped TFRecord file a block at a time (TFRecordReader::FrameMappedRecords): the
// serial part of a parallel map over TFRecord files, done under its read lock, in one pass over
// the records' headers that leaves their data and data checksums to the parsing threads. What
// users rely on, pinned here: the same records, in the same order, as reading them one by one,
// and the same errors at the same records (a corrupted length, a truncated record, a data
// checksum failure naming the file and offset), whatever the block sizes; and parallel maps
// over such files (with and without the map-and-parse fusion, record ranges, empty files,
// ignore_errors()) give exactly what the sequential map gives.
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "core/data/executor.h"
#include "core/data/iterator.h"
#include "core/data/op_iterator.h"
#include "core/data/ops/map_iterator.h"
#include "core/io/tfrecord_reader.h"
#include "core/util/thread_pool.h"
#include "gtest/gtest.h"
#include "proto/example.pb.h"
#include "sluice/dataset.h"
#include "tests/core/pipeline_outputs.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using record_test::TFRecordOffset;

// Records of random lengths (0 included, now and then a few KB, so that a block's records
// straddle pages) with random bytes.
std::vector<std::string> RandomRecords(std::mt19937_64& rng, int n) {
  std::vector<std::string> records;
  for (int i = 0; i < n; ++i) {
    const uint64_t kind = rng() % 10;
    const size_t length = kind == 0 ? 0 : kind == 1 ? 2000 + rng() % 6000 : rng() % 700;
    std::string r(length, '\0');
    for (char& c : r) c = static_cast<char>(rng());
    records.push_back(std::move(r));
  }
  return records;
}

void WriteRecords(const std::string& path, const std::vector<std::string>& records) {
  auto w = TFRecordWriter::Open(path);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const std::string& r : records) ASSERT_TRUE((*w)->Write(r).ok());
  ASSERT_TRUE((*w)->Close().ok());
}

// How a test damages a file: the kinds of bad input the framing must report as the reader does.
enum class Damage { kNone, kData, kDataChecksum, kLength, kTruncatedData, kTruncatedHeader };

constexpr Damage kDamages[] = {Damage::kNone,          Damage::kData,
                               Damage::kDataChecksum,  Damage::kLength,
                               Damage::kTruncatedData, Damage::kTruncatedHeader};

// `bytes` (a TFRecord file) with record `k` damaged as `damage` says.
std::string Damaged(std::string bytes, int64_t k, Damage damage, const std::string& record) {
  const size_t at = TFRecordOffset(bytes, k);
  switch (damage) {
    case Damage::kNone:
      break;
    case Damage::kData:  // a data byte (or, for an empty record, its checksum)
      bytes[at + 12 + record.size() / 2] ^= 0x40;
      break;
    case Damage::kDataChecksum:
      bytes[at + 12 + record.size() + 1] ^= 0x01;
      break;
    case Damage::kLength:
      bytes[at + 2] ^= 0x08;
      break;
    case Damage::kTruncatedData:  // the file ends inside the record
      bytes.resize(at + 12 + record.size() / 2);
      break;
    case Damage::kTruncatedHeader:
      bytes.resize(at + 5);
      break;
  }
  return bytes;
}

// What reading a file gives: the records, where each starts, and the status that ended it
// (OUT_OF_RANGE at a clean end; a data checksum failure as CheckData reports it).
struct Read {
  std::vector<std::string> records;
  std::vector<uint64_t> offsets;
  absl::Status end;
};

// One ReadRecordView per record, each record's data checked as a parallel map's check does.
Read ReadOneByOne(const std::string& path) {
  Read out;
  auto r = TFRecordReader::Open(path);
  EXPECT_TRUE(r.ok() && (*r)->mapped()) << r.status();
  std::shared_ptr<const void> owner;
  for (;;) {
    absl::string_view data;
    TFRecordReader::UncheckedData unchecked;
    out.end = (*r)->ReadRecordView(&data, &unchecked, &owner);
    if (!out.end.ok()) return out;
    out.end = TFRecordReader::CheckData(data, unchecked, path);
    if (!out.end.ok()) return out;
    out.records.emplace_back(data);
    out.offsets.push_back(unchecked.offset);
  }
}

// FrameMappedRecords in blocks of random sizes and byte limits, then each framed record's data
// checked in order; checks the limits each call kept to.
Read ReadFramed(const std::string& path, std::mt19937_64& rng) {
  Read out;
  auto r = TFRecordReader::Open(path);
  EXPECT_TRUE(r.ok() && (*r)->mapped()) << r.status();
  std::shared_ptr<const void> owner;
  std::vector<TFRecordReader::FramedRecord> framed;
  for (;;) {
    const int64_t max_records = 1 + static_cast<int64_t>(rng() % 300);
    const int64_t max_bytes = rng() % 4 == 0 ? 0 : static_cast<int64_t>(rng() % 200000);
    framed.clear();
    int64_t bytes = 0;
    absl::Status s = (*r)->FrameMappedRecords(max_records, max_bytes, &framed, &bytes, &owner);
    EXPECT_LE(static_cast<int64_t>(framed.size()), max_records);
    int64_t sum = 0;
    for (size_t i = 0; i < framed.size(); ++i) {
      // Stopped after the record that went over max_bytes, not before nor later.
      EXPECT_LE(sum, max_bytes) << "record " << out.records.size() + i << " framed past the limit";
      sum += static_cast<int64_t>(framed[i].data.size());
    }
    EXPECT_EQ(sum, bytes);
    if (s.ok()) {
      EXPECT_TRUE(static_cast<int64_t>(framed.size()) == max_records || bytes > max_bytes)
          << "stopped early: " << framed.size() << " of " << max_records;
    }
    for (const TFRecordReader::FramedRecord& f : framed) {
      EXPECT_TRUE(f.unchecked.crc_follows_data);
      absl::Status c = TFRecordReader::CheckData(f.data, f.unchecked, path);
      if (!c.ok()) {
        out.end = c;
        return out;
      }
      out.records.emplace_back(f.data);
      out.offsets.push_back(f.unchecked.offset);
    }
    if (!s.ok()) {
      out.end = s;
      return out;
    }
  }
}

TEST(TFRecordFramingTest, FramesWhatReadRecordViewReadsWithTheSameErrorsAtTheSameRecords) {
  const uint64_t seed = 2712;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  record_test::TempDir dir;
  for (int round = 0; round < 12; ++round) {
    const std::vector<std::string> records = RandomRecords(rng, 1 + static_cast<int>(rng() % 700));
    const std::string clean = dir.File(absl::StrCat("clean-", round, ".tfrecord"));
    WriteRecords(clean, records);
    const std::string bytes = record_test::ReadWholeFile(clean);
    for (const Damage damage : kDamages) {
      const int64_t k = static_cast<int64_t>(rng() % records.size());
      const std::string path = dir.File(absl::StrCat("damaged-", round, "-", int(damage)));
      record_test::WriteWholeFile(path, Damaged(bytes, k, damage, records[k]));
      SCOPED_TRACE(absl::StrCat("round ", round, ", damage ", int(damage), " at record ", k));
      const Read want = ReadOneByOne(path);
      const Read got = ReadFramed(path, rng);
      ASSERT_EQ(got.records.size(), want.records.size());
      for (size_t i = 0; i < want.records.size(); ++i) {
        ASSERT_EQ(got.records[i], want.records[i]) << "record " << i;
        ASSERT_EQ(got.offsets[i], want.offsets[i]) << "record " << i;
        ASSERT_EQ(got.records[i], records[i]) << "record " << i;
      }
      EXPECT_EQ(got.end, want.end);
      if (damage == Damage::kNone) {
        EXPECT_TRUE(absl::IsOutOfRange(got.end)) << got.end;
        EXPECT_EQ(got.records.size(), records.size());
      } else {
        // The damaged record ends the read, with its offset and file named.
        EXPECT_EQ(got.end.code(), absl::StatusCode::kDataLoss) << got.end;
        EXPECT_EQ(static_cast<int64_t>(got.records.size()), k);
        EXPECT_TRUE(absl::StrContains(
            got.end.message(), absl::StrCat("byte offset ", TFRecordOffset(bytes, k))))
            << got.end;
        EXPECT_TRUE(absl::StrContains(got.end.message(), path)) << got.end;
      }
    }
  }
}

TEST(TFRecordFramingTest, AReaderThatReadsRatherThanMapsDoesNotFrame) {
  record_test::TempDir dir;
  const std::string path = dir.File("a.tfrecord");
  WriteRecords(path, {"a", "b"});
  TFRecordReaderOptions o;
  o.map_local_file = false;
  auto r = TFRecordReader::Open(path, o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<TFRecordReader::FramedRecord> framed;
  int64_t bytes = 0;
  std::shared_ptr<const void> owner;
  absl::Status s = (*r)->FrameMappedRecords(10, 1000, &framed, &bytes, &owner);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(framed.empty());
  // And it still reads.
  std::string record;
  EXPECT_TRUE((*r)->ReadRecord(&record).ok());
  EXPECT_EQ(record, "a");
}

// Random files (some empty, one maybe damaged) read through a parallel map that pulls them on
// the pool, as blocks of random sizes: the same records, in order, and the same terminal
// error, as the sequential map reading record by record (each verified as it is read). The map's
// fn is the identity; with a rows fn the check maps the rows from views of the records
// (map-and-parse fusion), without one it copies them into the block.
TEST(RecordFramingPipelineTest, ParallelMapsReadWhatTheSourceReadsRecordByRecord) {
  const uint64_t seed = 9127;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const ElementFn identity = [](Element e) -> absl::StatusOr<Element> { return e; };
  const SerializedRowsFn rows_fn = [](const std::vector<absl::string_view>& rows,
                                      const RowCheck& check) -> absl::StatusOr<Element> {
    std::vector<std::string> out;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (check != nullptr) {
        absl::Status s = check(i);
        if (!s.ok()) return s;
      }
      out.emplace_back(rows[i]);
    }
    const int64_t n = static_cast<int64_t>(out.size());
    return Element(Tensor::FromStrings(std::move(out), Shape({n})));
  };
  for (int round = 0; round < 16; ++round) {
    record_test::TempDir dir;
    const int files = 1 + static_cast<int>(rng() % 4);
    const Damage damage = kDamages[rng() % std::size(kDamages)];
    const int damaged_file = static_cast<int>(rng() % files);
    std::vector<std::string> names;
    for (int f = 0; f < files; ++f) {
      const int n = rng() % 5 == 0 ? 0 : 1 + static_cast<int>(rng() % 900);
      const std::vector<std::string> records = RandomRecords(rng, n);
      names.push_back(dir.File(absl::StrCat("part-", f, ".tfrecord")));
      WriteRecords(names.back(), records);
      if (f == damaged_file && n > 0) {
        const int64_t k = static_cast<int64_t>(rng() % n);
        record_test::WriteWholeFile(
            names.back(), Damaged(record_test::ReadWholeFile(names.back()), k, damage,
                                  records[k]));
      }
    }
    const std::string source =
        absl::StrCat("tf_record_dataset(['", absl::StrJoin(names, "', '"), "'])");
    const int64_t parallelism = 2 + static_cast<int64_t>(rng() % 3);
    const bool autotune = rng() % 2 == 0;
    const bool fused = rng() % 2 == 0;
    SCOPED_TRACE(absl::StrCat("round ", round, ": ", source, ", damage ", int(damage),
                              " in file ", damaged_file, ", parallelism ", parallelism,
                              autotune ? " (AUTOTUNE)" : "", fused ? ", rows fn" : ""));
    auto open = [&]() {
      absl::StatusOr<Dataset> ds = Dataset::Parse(source);
      EXPECT_TRUE(ds.ok()) << ds.status();
      absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
      EXPECT_TRUE(it.ok()) << it.status();
      return *std::move(it);
    };
    // The reference: the sequential map, element by element (each record read and verified
    // on its own).
    std::vector<std::string> want;
    absl::Status want_end;
    {
      std::unique_ptr<Iterator> it = NewMapIterator("op 1 (map)", open(), identity, 1,
                                                    /*deterministic=*/true, identity);
      for (int guard = 0; guard < 10000; ++guard) {
        Element e;
        bool end = false;
        want_end = it->GetNext(&e, &end);
        if (!want_end.ok() || end) break;
        want.emplace_back(e.leaf().string_at(0));
      }
    }
    std::unique_ptr<Iterator> map =
        NewMapIterator("op 1 (map)", open(), identity, parallelism, /*deterministic=*/true,
                       identity, autotune, fused ? rows_fn : nullptr);
    std::vector<std::string> got;
    absl::Status got_end;
    for (int guard = 0; guard < 10000; ++guard) {
      const int64_t ask = 1 + static_cast<int64_t>(rng() % 400);
      Element block;
      int64_t n = 0;
      bool end = false;
      got_end = map->GetNextBlock(ask, &block, &n, &end);
      if (!got_end.ok() || end) break;
      ASSERT_GE(n, 1);
      ASSERT_LE(n, ask);
      for (int64_t i = 0; i < n; ++i) got.emplace_back(block.leaf().string_at(i));
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "record " << i;
    EXPECT_EQ(got_end, want_end);
  }
}

// An Example per record: 'image' bytes of random length and an int64 'label'.
std::vector<std::string> RandomExamples(std::mt19937_64& rng, int n) {
  std::vector<std::string> records;
  for (int i = 0; i < n; ++i) {
    proto::Example ex;
    auto& f = *ex.mutable_features()->mutable_feature();
    std::string image(static_cast<size_t>(rng() % 3000), '\0');
    for (char& c : image) c = static_cast<char>(rng());
    f["image"].mutable_bytes_list()->add_value(image);
    f["label"].mutable_int64_list()->add_value(static_cast<int64_t>(rng() % 1000));
    records.push_back(ex.SerializeAsString());
  }
  return records;
}

// The bench's pipeline, tf_record_dataset(files).map(parse_example, AUTOTUNE or N).batch(B),
// on random files (a record range or none, one file damaged or none, ignore_errors() after the
// batch or not): batch for batch and error for error what the sequential map gives.
TEST(RecordFramingPipelineTest, ParseExamplePipelinesMatchTheSequentialMap) {
  const uint64_t seed = 31337;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const std::string parse =
      "parse_example({'image': FixedLenFeature([], tf.string), "
      "'label': FixedLenFeature([], tf.int64, default_value=0)})";
  for (int round = 0; round < 12; ++round) {
    record_test::TempDir dir;
    const int files = 1 + static_cast<int>(rng() % 3);
    const Damage damage = kDamages[rng() % std::size(kDamages)];
    std::vector<std::string> names;
    int64_t total = 0;
    for (int f = 0; f < files; ++f) {
      const int n = 1 + static_cast<int>(rng() % 700);
      total += n;
      const std::vector<std::string> records = RandomExamples(rng, n);
      names.push_back(dir.File(absl::StrCat("part-", f, ".tfrecord")));
      WriteRecords(names.back(), records);
      if (f == files - 1) {
        const int64_t k = static_cast<int64_t>(rng() % n);
        record_test::WriteWholeFile(
            names.back(), Damaged(record_test::ReadWholeFile(names.back()), k, damage,
                                  records[k]));
      }
    }
    std::string range;
    if (rng() % 3 == 0 && damage == Damage::kNone) {  // a range needs the files indexed
      range = absl::StrCat(", start_record=", rng() % total, ", num_records=",
                           static_cast<int64_t>(rng() % total) - 1);
    }
    const std::string source =
        absl::StrCat("tf_record_dataset(['", absl::StrJoin(names, "', '"), "']", range, ")");
    const std::string calls =
        rng() % 2 == 0 ? "AUTOTUNE" : absl::StrCat(2 + static_cast<int>(rng() % 3));
    const std::string tail = absl::StrCat(".batch(", 1 + rng() % 300, ")",
                                          rng() % 2 == 0 ? ".ignore_errors()" : "");
    const std::string parallel =
        absl::StrCat(source, ".map(", parse, ", num_parallel_calls=", calls, ")", tail);
    SCOPED_TRACE(absl::StrCat("round ", round, ", damage ", int(damage), ": ", parallel));
    const pipeline_test::Outputs want =
        pipeline_test::Drain(absl::StrCat(source, ".map(", parse, ")", tail), /*hold=*/false);
    const pipeline_test::Outputs got = pipeline_test::Drain(parallel, /*hold=*/false);
    ASSERT_EQ(got.outputs.size(), want.outputs.size());
    for (size_t i = 0; i < want.outputs.size(); ++i) {
      ASSERT_EQ(got.outputs[i], want.outputs[i]) << "output " << i;
    }
  }
}

// A parallel map over TFRecord files drained on the pool's only thread: its pull jobs queue
// behind the consumer, which must read the blocks itself rather than wait for them. Every
// batch comes, as the sequential map gives it.
TEST(RecordFramingPipelineTest, AParallelMapDrainedOnThePoolsOnlyThreadReadsEveryBlock) {
  if (!SetProcessThreadPoolSize(1).ok()) {
    GTEST_SKIP() << "the process's pool already runs; run this test in its own process "
                    "(ctest does)";
  }
  const uint64_t seed = 4242;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  record_test::TempDir dir;
  std::vector<std::string> names;
  for (int f = 0; f < 2; ++f) {
    names.push_back(dir.File(absl::StrCat("part-", f, ".tfrecord")));
    WriteRecords(names.back(), RandomExamples(rng, 300));
  }
  const std::string source =
      absl::StrCat("tf_record_dataset(['", absl::StrJoin(names, "', '"), "'])");
  const std::string parse =
      "parse_example({'image': FixedLenFeature([], tf.string), "
      "'label': FixedLenFeature([], tf.int64, default_value=0)})";
  const pipeline_test::Outputs want =
      pipeline_test::Drain(absl::StrCat(source, ".map(", parse, ").batch(7)"), /*hold=*/false);
  ASSERT_EQ(want.outputs.size(), 86u);  // 600 / 7, rounded up
  for (const std::string calls : {"2", "AUTOTUNE"}) {
    pipeline_test::Outputs got;
    absl::Notification done;
    ProcessThreadPool().value()->Schedule([&] {
      got = pipeline_test::Drain(
          absl::StrCat(source, ".map(", parse, ", num_parallel_calls=", calls, ").batch(7)"),
          /*hold=*/false);
      done.Notify();
    });
    // A liveness bound only: the pool's one thread would wait for work queued behind itself.
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(120)))
        << "deadlocked: the consumer on the pool's only thread waits for a queued pull";
    EXPECT_EQ(got.outputs, want.outputs) << calls;
  }
}

}  // namespace
}  // namespace sluice
