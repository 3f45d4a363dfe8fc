// Map-and-batch fusion (core/data/ops/batch_destinations.h): a parallel map in input order
// under batch() parses its blocks straight into the batch's stacked tensors, strings included,
// from pooled memory (core/data/ops/string_batch_pool.h). What users rely on, pinned here:
// the batches are byte for byte what a sequential map then batch gives, in the same order
// (element errors, a corrupted record, ignore_errors(), drop_remainder, the partial last batch,
// empty and missing strings and defaults), for random pipelines; out of order
// (deterministic=False) the same rows; the fusion is not vacuous (batches are handed out as
// written in place); a batch the consumer holds is never written again while later batches
// reuse released memory; the pools give back every byte they charged.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/executor.h"
#include "core/data/iterator.h"
#include "core/data/op_iterator.h"
#include "core/data/ops/batch_destinations.h"
#include "core/data/ops/string_batch_pool.h"
#include "core/tensor/host_memory.h"
#include "gtest/gtest.h"
#include "proto/example.pb.h"
#include "sluice/dataset.h"
#include "tests/core/pipeline_outputs.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using pipeline_test::Drain;
using pipeline_test::Outputs;

// A record: an Example with 'image' (bytes of random length, 0 included, sometimes missing),
// 'label' (int64, sometimes missing: default 7) and 'xy' (two floats); rarely bytes that are
// no Example, or a label of two values (both element errors of parse_example).
std::string RandomRecord(std::mt19937_64& rng, int i, bool errors) {
  if (errors && rng() % 151 == 0) return absl::StrCat("not an example ", i);
  proto::Example ex;
  auto& f = *ex.mutable_features()->mutable_feature();
  if (rng() % 13 != 0) {
    std::string image(static_cast<size_t>(rng() % 5 == 0 ? 0 : rng() % 700), '\0');
    for (char& c : image) c = static_cast<char>(rng());
    f["image"].mutable_bytes_list()->add_value(image);
  }
  if (rng() % 11 != 0) {
    auto* label = f["label"].mutable_int64_list();
    label->add_value(static_cast<int64_t>(rng()));
    if (errors && rng() % 173 == 0) label->add_value(1);
  }
  auto* xy = f["xy"].mutable_float_list();
  xy->add_value(static_cast<float>(i) * 0.5f);
  xy->add_value(static_cast<float>(rng() % 1000) / 7.0f);
  return ex.SerializeAsString();
}

// `files` TFRecord files of random records in `dir`; returns their names quoted for an
// expression. With `corrupt`, one record's data in the middle of the last file is flipped
// (DATA_LOSS at that record).
std::string WriteFiles(const record_test::TempDir& dir, std::mt19937_64& rng, int files,
                       int records, bool errors, bool corrupt) {
  std::vector<std::string> names;
  for (int f = 0; f < files; ++f) {
    const std::string path = dir.File(absl::StrCat("part-", f, ".tfrecord"));
    auto w = TFRecordWriter::Open(path);
    EXPECT_TRUE(w.ok()) << w.status();
    for (int i = 0; i < records; ++i) {
      EXPECT_TRUE((*w)->Write(RandomRecord(rng, f * records + i, errors)).ok());
    }
    EXPECT_TRUE((*w)->Close().ok());
    if (corrupt && f == files - 1) {
      std::string bytes = record_test::ReadWholeFile(path);
      const size_t at = record_test::TFRecordOffset(bytes, records / 2);
      bytes[at + 12 + 3] ^= 0x20;
      record_test::WriteWholeFile(path, bytes);
    }
    names.push_back(absl::StrCat("'", path, "'"));
  }
  return absl::StrCat("[", absl::StrJoin(names, ", "), "]");
}

// WriteFiles without errors, from a printed seed.
std::string CleanFiles(const record_test::TempDir& dir, uint64_t seed, int files, int records) {
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  return WriteFiles(dir, rng, files, records, /*errors=*/false, /*corrupt=*/false);
}

constexpr char kParse[] =
    "parse_example({'image': FixedLenFeature([], tf.string, default_value=''), "
    "'label': FixedLenFeature([], tf.int64, default_value=7), "
    "'xy': FixedLenFeature([2], tf.float32)})";

// The fused path against a sequential map then batch (per-element path, as TF describes
// batch), for random pipelines: files, records, batch size, drop_remainder, parallelism or
// AUTOTUNE, errors or none, a corrupted record or none, ignore_errors() after the batch.
TEST(FusedMapBatchTest, RandomPipelinesMatchSequentialMapThenBatchByteForByte) {
  const uint64_t seed = 27940;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const FusedBatchCounts before = FusedBatchCountsSoFar();
  int64_t outputs = 0;
  for (int round = 0; round < 24; ++round) {
    record_test::TempDir dir;
    const bool errors = round % 3 == 1;
    const bool corrupt = round % 4 == 3;
    const int files = 1 + static_cast<int>(rng() % 3);
    const int records = 50 + static_cast<int>(rng() % 900);
    const std::string names = WriteFiles(dir, rng, files, records, errors, corrupt);
    const int64_t batch = 1 + static_cast<int64_t>(rng() % 300);
    const bool drop = rng() % 2 == 0;
    const bool ignore = errors && rng() % 2 == 0;
    const std::string calls =
        rng() % 3 == 0 ? "AUTOTUNE" : absl::StrCat(2 + static_cast<int>(rng() % 3));
    const std::string tail = absl::StrCat(".batch(", batch, drop ? ", drop_remainder=True" : "",
                                          ")", ignore ? ".ignore_errors()" : "");
    const std::string source = absl::StrCat("tf_record_dataset(", names, ")");
    const std::string fused =
        absl::StrCat(source, ".map(", kParse, ", num_parallel_calls=", calls, ")", tail);
    const std::string sequential = absl::StrCat(source, ".map(", kParse, ")", tail);
    SCOPED_TRACE(absl::StrCat("round ", round, ": ", fused));
    SetBulkPathsEnabled(false);
    const Outputs want = Drain(sequential, /*hold=*/false);
    SetBulkPathsEnabled(true);
    const bool hold = round % 2 == 0;
    const Outputs got = Drain(fused, hold);
    outputs += static_cast<int64_t>(want.outputs.size());
    ASSERT_EQ(got.outputs.size(), want.outputs.size());
    for (size_t i = 0; i < want.outputs.size(); ++i) {
      ASSERT_EQ(got.outputs[i], want.outputs[i]) << "output " << i;
    }
    // Again: the element order is the same from run to run.
    const Outputs again = Drain(fused, !hold);
    ASSERT_EQ(again.outputs, want.outputs);
  }
  const FusedBatchCounts after = FusedBatchCountsSoFar();
  std::printf("fused batches in place %lld, concatenated %lld\n",
              static_cast<long long>(after.in_place - before.in_place),
              static_cast<long long>(after.concatenated - before.concatenated));
  EXPECT_GT(after.in_place - before.in_place, 50);
  EXPECT_GT(outputs, 200);
}

// Without errors every full batch after the first few (before the batch has seen a block, and
// the blocks the map read ahead meanwhile) is handed out as written in place.
TEST(FusedMapBatchTest, FullBatchesAreWrittenInPlace) {
  record_test::TempDir dir;
  const std::string names = CleanFiles(dir, 27941, 2, 3000);
  for (const std::string calls : {"2", "3", "AUTOTUNE"}) {
    SCOPED_TRACE(calls);
    const std::string p = absl::StrCat("tf_record_dataset(", names, ").map(", kParse,
                                       ", num_parallel_calls=", calls, ").batch(100)");
    const FusedBatchCounts before = FusedBatchCountsSoFar();
    const Outputs got = Drain(p, /*hold=*/false);
    ASSERT_EQ(got.outputs.size(), 60u);
    const FusedBatchCounts after = FusedBatchCountsSoFar();
    EXPECT_GE(after.in_place - before.in_place, 60 - 4);
  }
}

// Out of order the map writes no rows in place (a block could be handed out in another
// batch); the rows are the same multiset.
TEST(FusedMapBatchTest, OutOfOrderGivesTheSameRows) {
  record_test::TempDir dir;
  const std::string names = CleanFiles(dir, 27942, 3, 700);
  const std::string source = absl::StrCat("tf_record_dataset(", names, ")");
  auto rows = [](const std::string& expression) {
    std::vector<std::string> out;
    const Outputs run = Drain(absl::StrCat(expression, ".unbatch().batch(1)"), false);
    for (const std::string& s : run.outputs) out.push_back(s);
    std::sort(out.begin(), out.end());
    return out;
  };
  const std::vector<std::string> want = rows(absl::StrCat(source, ".map(", kParse, ").batch(64)"));
  const std::vector<std::string> got = rows(absl::StrCat(
      source, ".map(", kParse, ", num_parallel_calls=3, deterministic=False).batch(64)"));
  EXPECT_EQ(got, want);
  EXPECT_EQ(want.size(), 2100u);
}

// A block of the dict {'a': int64 rows, 's': string rows}.
Element BlockOf(const std::vector<Tensor>& rows) {
  return Element::Dict({{"a", Element(rows[0])}, {"s", Element(rows[1])}});
}

// BatchDestinations places rows where the batch stacks them: rows [p, p + n) of the map's
// output are rows [p % B, p % B + n) of batch p / B (counted from the last restart), none that
// span two batches, lie behind the batch being built or too far ahead of it.
TEST(FusedMapBatchTest, DestinationsAreTheBatchRowsOfEachPosition) {
  BatchDestinations d(10, "op 2 (batch)");
  EXPECT_FALSE(d.RowsFor(0, 5).has_value());  // nothing learnt yet
  const Element block = Element::Dict(
      {{"a", Element(Tensor::FromVector<int64_t>({1, 2}))},
       {"s", Element(Tensor::FromStrings({"x", "y"}, Shape({2})))}});
  d.Learn(block);
  d.Handed(0);
  EXPECT_EQ(d.StartBatch(), 0);
  std::optional<std::vector<Tensor>> first = d.RowsFor(0, 4);
  std::optional<std::vector<Tensor>> second = d.RowsFor(4, 6);
  std::optional<std::vector<Tensor>> next = d.RowsFor(13, 2);
  ASSERT_TRUE(first.has_value() && second.has_value() && next.has_value());
  EXPECT_FALSE(d.RowsFor(8, 4).has_value());  // spans batches 0 and 1
  EXPECT_FALSE(d.RowsFor(10 * (BatchDestinations::kMaxAhead + 1), 1).has_value());
  // Written in place: batch 0 is the rows the fn wrote, no copy.
  for (auto* rows : {&*first, &*second}) {
    for (int64_t i = 0; i < (*rows)[0].num_elements(); ++i) {
      (*rows)[0].mutable_data<int64_t>()[i] = 100 + i;
      *(*rows)[1].mutable_string(i) = absl::StrCat("s", i);
    }
  }
  std::vector<Element> blocks;
  for (auto* rows : {&*first, &*second}) {
    blocks.push_back(BlockOf(*rows));
  }
  std::optional<Element> batch = d.Assemble(0, blocks);
  ASSERT_TRUE(batch.has_value());
  const std::vector<Tensor> leaves = batch->Flatten();
  EXPECT_TRUE((*first)[0].IsRowsOf(leaves[0], 0));
  EXPECT_TRUE((*second)[0].IsRowsOf(leaves[0], 4));
  EXPECT_TRUE((*second)[1].IsRowsOf(leaves[1], 4));
  EXPECT_FALSE((*second)[0].IsRowsOf(leaves[0], 3));
  EXPECT_EQ(leaves[1].string_at(5), "s1");
  // Blocks in the wrong order are not in place: the batch concatenates them instead.
  d.Handed(10);
  EXPECT_EQ(d.StartBatch(), 10);
  std::optional<std::vector<Tensor>> a = d.RowsFor(10, 5);
  std::optional<std::vector<Tensor>> b = d.RowsFor(15, 5);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_TRUE((*next)[0].IsRowsOf((*a)[0].Slice(0, 5), 3));  // position 13: batch 1, row 3
  std::vector<Element> swapped = {BlockOf(*b), BlockOf(*a)};
  EXPECT_FALSE(d.Assemble(10, swapped).has_value());
  // A batch starting off the predicted grid (after an error) moves the prediction there.
  d.Handed(23);
  EXPECT_EQ(d.StartBatch(), 23);
  EXPECT_FALSE(d.RowsFor(20, 3).has_value());
  EXPECT_EQ(d.ClampToBatch(30, 8), 3);  // batches now end at 33, 43, ...
  std::optional<std::vector<Tensor>> c = d.RowsFor(33, 10);
  ASSERT_TRUE(c.has_value());
  d.Handed(33);
  EXPECT_EQ(d.StartBatch(), 33);
  EXPECT_TRUE(d.Assemble(33, {BlockOf(*c)}).has_value());
}

// Batches too large to prepare ahead of their rows are not fused (nothing is allocated for a
// batch size far beyond the data), and still batch as before.
TEST(FusedMapBatchTest, HugeBatchSizesAreNotPreparedAhead) {
  BatchDestinations d(int64_t{1} << 40, "op 2 (batch)");
  d.Learn(Element(Tensor::FromVector<int64_t>({1, 2})));
  EXPECT_FALSE(d.fusing());
  d.Handed(0);
  EXPECT_FALSE(d.RowsFor(0, 2).has_value());
  record_test::TempDir dir;
  const std::string names = CleanFiles(dir, 27943, 1, 300);
  const std::string source = absl::StrCat("tf_record_dataset(", names, ")");
  const Outputs want = Drain(absl::StrCat(source, ".map(", kParse, ").batch(1000000000)"), false);
  const Outputs got = Drain(
      absl::StrCat(source, ".map(", kParse, ", num_parallel_calls=2).batch(1000000000)"), false);
  ASSERT_EQ(got.outputs.size(), 1u);
  EXPECT_EQ(got.outputs, want.outputs);
}

// The string pool reuses a vector only once every tensor viewing it is gone, keeps the
// characters of its strings, and gives back every byte it charged.
TEST(FusedMapBatchTest, StringPoolReusesReleasedBatchesOnly) {
  const int64_t in_use = ProcessMemoryBudget().in_use();
  {
    std::shared_ptr<StringBatchPool> pool = StringBatchPool::Create(1);
    absl::StatusOr<Tensor> a = pool->Take(Shape({4}), "test");
    ASSERT_TRUE(a.ok()) << a.status();
    a->mutable_string(2)->assign(std::string(1000, 'q'));
    const char* chars = a->string_at(2).data();
    Tensor view = a->Slice(2, 3);
    *a = Tensor();
    absl::StatusOr<Tensor> b = pool->Take(Shape({4}), "test");  // `view` still holds a's
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(pool->reused(), 0);
    EXPECT_EQ(view.string_at(0), std::string(1000, 'q'));
    view = Tensor();
    absl::StatusOr<Tensor> c = pool->Take(Shape({4}), "test");
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(pool->reused(), 1);
    const std::string shorter(900, 'r');
    c->mutable_string(2)->assign(shorter.data(), shorter.size());
    EXPECT_EQ(c->string_at(2).data(), chars);  // the same characters, no allocation
    // The pool may go first; its tensors still free their strings and charges.
    pool.reset();
  }
  EXPECT_EQ(ProcessMemoryBudget().in_use(), in_use);
}

}  // namespace
}  // namespace sluice
