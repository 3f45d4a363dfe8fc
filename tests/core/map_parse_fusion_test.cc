// Map-and-parse fusion (core/data/deferred_check_blocks.h, SerializedRowsFn): a parallel map
// pulling a TFRecord file on the pool hands its fn on serialized rows to the block's deferred
// check, which verifies the records and maps them straight from the reader's buffers instead
// of copying each into a string first. These tests pin what users rely on: the rows come in
// file order whatever the calls' timing, each exactly once; an fn error or a corrupted record
// stands at its row; a map destroyed mid-batch stops cleanly; buffers go back to the budget.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/data/deferred_check_blocks.h"
#include "core/data/executor.h"
#include "core/data/iterator.h"
#include "core/data/op_iterator.h"
#include "core/data/ops/example_parser.h"
#include "core/data/ops/map_iterator.h"
#include "core/io/tfrecord_writer.h"
#include "core/tensor/host_memory.h"
#include "core/util/status_macros.h"
#include "gtest/gtest.h"
#include "proto/example.pb.h"
#include "sluice/dataset.h"
#include "tests/core/record_test_util.h"
#include "tests/core/scoped_process_limits.h"

namespace sluice {
namespace {

using record_test::TFRecordOffset;

// Writes `records` to `file`.
void WriteRecords(const std::string& file, const std::vector<std::string>& records) {
  auto w = TFRecordWriter::Open(file);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const std::string& r : records) ASSERT_TRUE((*w)->Write(r).ok());
  ASSERT_TRUE((*w)->Close().ok());
}

std::unique_ptr<Iterator> Source(const std::string& files) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat("tf_record_dataset(", files, ")"));
  EXPECT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
  EXPECT_TRUE(it.ok()) << it.status();
  return *std::move(it);
}

// The fn of these maps: a record is its own output, except that one starting with "BAD" is an
// element error. The block fn fails on any block holding such a record (so the map falls back
// to rows, as for parse_example), and the rows fn likewise, after a seeded random delay of up
// to 2 ms per call, so that calls finish out of order.
struct EchoFns {
  explicit EchoFns(uint64_t seed) : rng(seed) {}
  ElementFn fn = [](Element e) -> absl::StatusOr<Element> {
    if (absl::StartsWith(e.leaf().string_at(0), "BAD")) {
      return absl::InvalidArgumentError(absl::StrCat("bad row ", e.leaf().string_at(0)));
    }
    return e;
  };
  ElementFn block_fn = [](Element e) -> absl::StatusOr<Element> {
    for (int64_t i = 0; i < e.leaf().num_elements(); ++i) {
      if (absl::StartsWith(e.leaf().string_at(i), "BAD")) {
        return absl::InvalidArgumentError("a bad row");
      }
    }
    return e;
  };
  SerializedRowsFn RowsFn() {
    return [this](const std::vector<absl::string_view>& rows,
                  const RowCheck& check) -> absl::StatusOr<Element> {
      calls.fetch_add(1);
      int delay_us;
      {
        std::lock_guard<std::mutex> lock(mu);
        delay_us = static_cast<int>(rng() % 2000);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      std::vector<std::string> out;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (check != nullptr) RETURN_IF_ERROR(check(i));
        if (absl::StartsWith(rows[i], "BAD")) return absl::InvalidArgumentError("a bad row");
        out.emplace_back(rows[i]);
      }
      const int64_t n = static_cast<int64_t>(out.size());
      return Element(Tensor::FromStrings(std::move(out), Shape({n})));
    };
  }
  std::mutex mu;
  std::mt19937_64 rng;
  std::atomic<int64_t> calls{0};
};

// In input order, with calls finishing in random order: every row exactly once, in file
// order, the "BAD" rows as element errors at their positions, then the corrupted record's
// DATA_LOSS naming it; and the rows fn did the mapping (the fusion is not vacuous).
TEST(MapParseFusionTest, RowsComeInOrderWithErrorsAtTheirRows) {
  record_test::TempDir dir;
  const uint64_t seed = 5150;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::vector<std::string> records;
  for (int i = 0; i < 3000; ++i) {
    const bool bad = rng() % 97 == 0;
    records.push_back(absl::StrCat(bad ? "BAD" : "row", i, ":",
                                   std::string(static_cast<size_t>(rng() % 600), 'x')));
  }
  const std::string file = dir.path() + "/a.tfrecord";
  WriteRecords(file, records);
  // The same file with record 2500's data corrupted.
  std::string bytes = record_test::ReadWholeFile(file);
  const size_t bad_at = TFRecordOffset(bytes, 2500);
  bytes[bad_at + 12 + 1] ^= 0x10;
  const std::string corrupt = dir.path() + "/b.tfrecord";
  record_test::WriteWholeFile(corrupt, bytes);

  for (const std::string& f : {file, corrupt}) {
    for (const int64_t parallelism : {2, 3, 5}) {
      for (const int64_t ask : {1, 7, 256}) {
        SCOPED_TRACE(absl::StrCat(f, " parallelism ", parallelism, " ask ", ask));
        EchoFns fns(seed + static_cast<uint64_t>(parallelism * 1000 + ask));
        std::unique_ptr<Iterator> map =
            NewMapIterator("op 1 (map)", Source(absl::StrCat("['", f, "']")), fns.fn,
                           parallelism, /*deterministic=*/true, fns.block_fn,
                           /*autotune=*/false, fns.RowsFn());
        int64_t next = 0;  // the next record expected
        absl::Status end;
        for (int guard = 0; guard < 10000; ++guard) {
          Element block;
          int64_t n = 0;
          bool eos = false;
          absl::Status s = map->GetNextBlock(ask, &block, &n, &eos);
          if (IsElementError(s)) {
            ASSERT_LT(next, static_cast<int64_t>(records.size()));
            EXPECT_TRUE(absl::StartsWith(records[next], "BAD")) << "error at row " << next;
            EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("BAD", next, ":"))) << s;
            ++next;
            continue;
          }
          if (!s.ok() || eos) {
            end = s;
            break;
          }
          ASSERT_GE(n, 1);
          ASSERT_LE(n, ask);
          for (int64_t i = 0; i < n; ++i, ++next) {
            ASSERT_LT(next, static_cast<int64_t>(records.size()));
            ASSERT_EQ(block.leaf().string_at(i), records[next]) << "row " << next;
          }
        }
        if (f == file) {
          EXPECT_TRUE(end.ok()) << end;
          EXPECT_EQ(next, static_cast<int64_t>(records.size()));
        } else {
          EXPECT_EQ(end.code(), absl::StatusCode::kDataLoss) << end;
          EXPECT_TRUE(absl::StrContains(end.message(), absl::StrCat("byte offset ", bad_at)))
              << end;
          EXPECT_EQ(next, 2500);
        }
        EXPECT_GT(fns.calls.load(), 0);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// The source's check itself: with a rows fn it maps the verified rows from views of the
// records' bytes (mapped), stops before a corrupted record with its DATA_LOSS and the rows
// before it; when the rows fn fails it builds the rows' block as without one (not mapped).
// The read buffers go back to the memory budget either way.
TEST(MapParseFusionTest, TheCheckMapsVerifiedRowsOrBuildsThemWhenTheFnFails) {
  record_test::TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 300; ++i) records.push_back(absl::StrCat("record ", i, std::string(i, 'y')));
  const std::string file = dir.path() + "/a.tfrecord";
  WriteRecords(file, records);
  std::string bytes = record_test::ReadWholeFile(file);
  const size_t bad_at = TFRecordOffset(bytes, 233);
  bytes[bad_at + 12 + 2] ^= 0x01;
  record_test::WriteWholeFile(file, bytes);
  const int64_t before = ProcessMemoryBudget().in_use();
  for (const std::pair<bool, bool>& mode : {std::pair{false, true}, std::pair{false, false},
                                           std::pair{true, true}}) {
    const bool fail = mode.first;
    const bool use_check = mode.second;
    SCOPED_TRACE(fail ? "rows fn fails" : use_check ? "rows fn maps" : "rows fn maps unchecked");
    std::vector<std::string> seen;
    // As a parse does: each row verified (when a check is given) before it is read; what it
    // read counts only when it succeeds. A fn that skips its check is verified after it.
    SerializedRowsFn rows_fn = [&](const std::vector<absl::string_view>& rows,
                                   const RowCheck& check) -> absl::StatusOr<Element> {
      if (fail) return absl::InvalidArgumentError("no");
      std::vector<std::string> read;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (check != nullptr && use_check) RETURN_IF_ERROR(check(i));
        read.emplace_back(rows[i]);
      }
      seen.insert(seen.end(), read.begin(), read.end());
      return Element(Tensor::FromStrings({"mapped"}, Shape({1})));
    };
    {
      std::unique_ptr<Iterator> it = Source(absl::StrCat("['", file, "']"));
      auto* source = dynamic_cast<DeferredCheckBlockSource*>(it.get());
      ASSERT_NE(source, nullptr);
      int64_t row = 0;  // rows before this block
      absl::Status s;
      for (int guard = 0; guard < 300 && s.ok(); ++guard) {
        Element block;
        int64_t n = 0;
        bool end = false;
        DeferredCheckBlockSource::BlockCheck check;
        ASSERT_TRUE(source->GetNextBlockDeferringChecks(64, &block, &n, &end, &check).ok());
        ASSERT_FALSE(end);
        ASSERT_GE(n, 1);
        ASSERT_NE(check, nullptr);
        int64_t good = -1;
        bool mapped = fail;
        const size_t seen_before = seen.size();
        s = check(&block, &good, rows_fn, &mapped);
        EXPECT_EQ(mapped, !fail && good > 0);
        EXPECT_EQ(good, s.ok() ? n : 233 - row);
        if (fail && good > 0) {  // the rows themselves
          ASSERT_EQ(block.leaf().num_elements(), good);
          for (int64_t i = 0; i < good; ++i) {
            EXPECT_EQ(block.leaf().string_at(i), records[static_cast<size_t>(row + i)]);
          }
        } else if (good > 0) {
          EXPECT_EQ(block.leaf().string_at(0), "mapped");
          // (A fn that skips its check read the bad row too, in a call whose result was
          // dropped: only the checking fn's reads are exactly the verified rows.)
          if (use_check) {
            EXPECT_EQ(seen.size() - seen_before, static_cast<size_t>(good));
          }
        }
        row += good;
      }
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("byte offset ", bad_at))) << s;
      EXPECT_EQ(row, 233);
    }
    if (!fail && use_check) {
      ASSERT_EQ(seen.size(), 233u);
      for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], records[i]);
    }
    EXPECT_EQ(ProcessMemoryBudget().in_use(), before);
  }
}

// A map destroyed mid-batch, while rows fn calls are running on the pool, waits for them and
// returns every buffer and block to the memory budget; nothing runs after it is gone.
TEST(MapParseFusionTest, DestroyedMidBatchStopsAndReturnsItsMemory) {
  record_test::TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 5000; ++i) records.push_back(absl::StrCat("row", i, std::string(500, 'z')));
  const std::string file = dir.path() + "/a.tfrecord";
  WriteRecords(file, records);
  const int64_t before = ProcessMemoryBudget().in_use();
  for (int stop_after = 0; stop_after < 4; ++stop_after) {
    SCOPED_TRACE(stop_after);
    EchoFns fns(77 + static_cast<uint64_t>(stop_after));
    {
      std::unique_ptr<Iterator> map =
          NewMapIterator("op 1 (map)", Source(absl::StrCat("['", file, "']")), fns.fn, 4,
                         /*deterministic=*/true, fns.block_fn, /*autotune=*/false,
                         fns.RowsFn());
      for (int i = 0; i < stop_after; ++i) {
        Element block;
        int64_t n = 0;
        bool eos = false;
        ASSERT_TRUE(map->GetNextBlock(256, &block, &n, &eos).ok());
        ASSERT_FALSE(eos);
      }
    }
    const int64_t calls = fns.calls.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(fns.calls.load(), calls) << "a rows fn ran after the map was destroyed";
    EXPECT_EQ(ProcessMemoryBudget().in_use(), before);
  }
}

// The fused parse allocates its output through the memory budget like the unfused one: under a
// per-element limit the run ends with RESOURCE_EXHAUSTED naming the limit, after as many rows
// as the sequential map's run, and everything charged goes back to the budget.
// The fused parse's row check (RowCheck): ExampleParser::ParseBatch calls it on each row, in
// order, before it reads the row, and stops with its error at the first row it fails.
TEST(MapParseFusionTest, ParseBatchChecksEachRowBeforeReadingIt) {
  proto::Example ex;
  (*ex.mutable_features()->mutable_feature())["label"].mutable_int64_list()->add_value(7);
  const std::string good = ex.SerializeAsString();
  size_t pos = 0;
  absl::StatusOr<proto::ParseExampleFn> fn = ExampleParser::ParseFeatureSpec(
      "{'label': FixedLenFeature([], tf.int64)}", &pos);
  ASSERT_TRUE(fn.ok()) << fn.status();
  absl::StatusOr<ExampleParser> parser = ExampleParser::Create(*fn);
  ASSERT_TRUE(parser.ok()) << parser.status();
  // Row 2 is garbage the parser would reject; the check rejects row 1 first.
  const std::vector<absl::string_view> rows = {good, good, "\xff\xff garbage", good};
  std::vector<size_t> checked;
  absl::StatusOr<Element> e = parser->ParseBatch(rows, [&](size_t i) {
    checked.push_back(i);
    return i == 1 ? absl::DataLossError("row 1 is corrupt") : absl::OkStatus();
  });
  EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss) << e.status();
  EXPECT_EQ(checked, (std::vector<size_t>{0, 1}));
  // Every row passing: all checked, in order, and the parse is the unchecked one's.
  checked.clear();
  const std::vector<absl::string_view> three = {good, good, good};
  e = parser->ParseBatch(three, [&](size_t i) {
    checked.push_back(i);
    return absl::OkStatus();
  });
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(checked, (std::vector<size_t>{0, 1, 2}));
  absl::StatusOr<Element> plain = parser->ParseBatch(three);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(e->Flatten()[0].Equals(plain->Flatten()[0]));
}

TEST(MapParseFusionTest, TheFusedParseHonoursTheMemoryBudget) {
  record_test::TempDir dir;
  const std::string file = dir.path() + "/a.tfrecord";
  std::vector<std::string> records;
  for (int i = 0; i < 600; ++i) {
    proto::Example ex;
    auto& f = *ex.mutable_features()->mutable_feature();
    f["image"].mutable_bytes_list()->add_value(std::string(1000 + i, 'q'));
    f["label"].mutable_int64_list()->add_value(i);
    records.push_back(ex.SerializeAsString());
  }
  WriteRecords(file, records);
  const std::string spec =
      "parse_example({'image': FixedLenFeature([], tf.string), "
      "'label': FixedLenFeature([], tf.int64, default_value=-1)})";
  const int64_t before = ProcessMemoryBudget().in_use();
  for (const int64_t limit : {int64_t{1} << 30, int64_t{60000}}) {
    SCOPED_TRACE(limit);
    ScopedProcessLimits limits({.process_bytes = int64_t{1} << 40, .element_bytes = limit});
    std::vector<std::pair<int64_t, absl::Status>> runs;  // rows, end
    for (const std::string calls : {"", ", num_parallel_calls=2", ", num_parallel_calls=4"}) {
      absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat(
          "tf_record_dataset(['", file, "'], buffer_size=8192).map(", spec, calls,
          ").batch(100)"));
      ASSERT_TRUE(ds.ok()) << ds.status();
      absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
      ASSERT_TRUE(it.ok()) << it.status();
      int64_t rows = 0;
      absl::Status end;
      for (int guard = 0; guard < 100; ++guard) {
        Element e;
        bool eos = false;
        end = (*it)->GetNext(&e, &eos);
        if (!end.ok() || eos) break;
        rows += e.Flatten()[0].shape().dim(0);
      }
      runs.emplace_back(rows, end);
    }
    for (const auto& [rows, end] : runs) {
      EXPECT_EQ(rows, runs[0].first);
      EXPECT_EQ(end.code(), runs[0].second.code()) << end;
    }
    if (limit == 60000) {
      // Not vacuous: the limit bites (a parallel map's slice of 50 or 25 parsed rows of ~1.3 KB,
      // or the batch of 100, is over it), and the error names what was refused.
      for (const auto& [rows, end] : runs) {
        EXPECT_EQ(end.code(), absl::StatusCode::kResourceExhausted) << end;
        EXPECT_TRUE(absl::StrContains(end.message(), "60000 bytes")) << end;
      }
    } else {
      EXPECT_TRUE(runs[0].second.ok()) << runs[0].second;
      EXPECT_EQ(runs[0].first, 600);
    }
  }
  EXPECT_EQ(ProcessMemoryBudget().in_use(), before);
}

}  // namespace
}  // namespace sluice
