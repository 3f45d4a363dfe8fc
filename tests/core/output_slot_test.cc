// batch()'s output slots and pooled buffers (core/data/ops/output_slot.h,
// core/data/ops/batch_buffer_pool.h), as a consumer relies on them:
//  - a parallel map in input order writes its elements' rows of the batch in place, from the
//    first batch's second element on, and the batches are the same bytes as a sequential
//    map's and as those of a map whose outputs cannot be written in place (a prefetch
//    between), with element errors in their places;
//  - a row not written in place is copied into the batch as its element arrives, and the
//    element's own tensor released;
//  - a batch the consumer holds is never written again, also while the batches after it
//    reuse the memory of released ones; the batch handed out is referenced by its holder
//    alone (no hidden reference that would make the Python handout copy it);
//  - the pool reuses only released buffers of the same size, keeps at most max_idle of them,
//    and the budget is charged while it holds them and given back when it goes.
// Seeds are fixed and printed in failure messages.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/executor.h"
#include "core/data/ops/batch_buffer_pool.h"
#include "core/data/ops/output_slot.h"
#include "core/tensor/host_memory.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/core/pipeline_outcomes.h"
#include "tests/seeded_rng.h"

namespace sluice {
namespace {

using pipeline_outcomes::Outcomes;
using pipeline_outcomes::Pipeline;
using pipeline_outcomes::RandomJpeg;
using pipeline_outcomes::Strings;

// `n` uint8 images of h x w x 3 random pixels, as one tensor whose rows are the elements.
Tensor RandomImages(SeededRng& rng, int64_t n, int64_t h, int64_t w) {
  Tensor t = Tensor::Allocate(DType::kUInt8, Shape({n, h, w, 3}));
  uint8_t* p = t.mutable_data<uint8_t>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = static_cast<uint8_t>(rng.Next());
  return t;
}

// Drains `ds`: each batch's bytes as they were when it was handed out, and, with `hold`, the
// batches themselves (still held); without, each batch is dropped once the next one is out,
// and each must be referenced by the consumer alone when handed out.
void Drain(const Dataset& ds, bool hold, std::vector<std::string>* bytes_then,
           std::vector<Element>* held) {
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(ds);
  ASSERT_TRUE(it.ok()) << it.status();
  Element previous;
  for (int i = 0; i < 1000; ++i) {
    Element e;
    bool end = false;
    ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
    if (end) return;
    const std::vector<Tensor> leaves = e.Flatten();
    const Tensor& t = leaves[0];
    bytes_then->emplace_back(static_cast<const char*>(t.raw_data()), t.byte_size());
    if (hold) {
      held->push_back(std::move(e));
      continue;
    }
    // The element's leaf and this copy of it.
    EXPECT_EQ(t.buffer().use_count(), 2) << "batch " << i << " has another holder";
    previous = std::move(e);
  }
}

TEST(OutputSlotTest, ParallelMapWritesItsRowsInPlaceWithTheSameBytes) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    SeededRng rng(seed);
    // 300 x 300 x 3 inputs (270 KB) make units of one element, so at most 2 * 2 elements are
    // pulled ahead of a batch's first row; the rest of its 16 rows are pulled after it offered
    // them. Outputs of 128 x 96 x 3 float32 (147 KB) are large enough to be offered.
    const Dataset source = Dataset::FromTensorSlices(Element(RandomImages(rng, 64, 300, 300)));
    const std::string rrc = absl::StrCat("random_resized_crop([128, 96], seed=", seed, ")");
    const std::string flip = absl::StrCat("random_flip_left_right(seed=", seed + 10, ")");
    const std::vector<std::string> fns = {rrc, flip};
    const std::string what = absl::StrCat("seed ", seed);
    const BatchSlotCounts before = BatchSlotCountsSoFar();
    const std::vector<std::string> parallel =
        Outcomes(Pipeline(source, fns, ", num_parallel_calls=2", ".batch(16)"), true);
    const BatchSlotCounts after = BatchSlotCountsSoFar();
    // The first batch has its rows offered once its first element is out (so >= 11 in place:
    // 2 x 2 elements may be pulled before), each later one >= 12.
    EXPECT_GE(after.rows_in_place - before.rows_in_place, 11 + 3 * 12) << what;
    ASSERT_EQ(parallel.size(), 4u) << what;
    EXPECT_TRUE(parallel == Outcomes(Pipeline(source, fns, "", ".batch(16)"), true)) << what;
    EXPECT_TRUE(parallel ==
                Outcomes(Pipeline(source, fns, ", num_parallel_calls=2", ".prefetch(2).batch(16)"),
                         false))
        << what;
    // Out of order the rows are not written in place (an element could finish after its batch
    // was handed out), and the multiset of rows is the same.
    const BatchSlotCounts unordered_before = BatchSlotCountsSoFar();
    Outcomes(Pipeline(source, fns, ", num_parallel_calls=2, deterministic=False", ".batch(16)"),
             true);
    EXPECT_EQ(BatchSlotCountsSoFar().rows_in_place, unordered_before.rows_in_place) << what;
  }
}

TEST(OutputSlotTest, ParallelMapWithBadImagesGivesTheSequentialOutcomes) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SeededRng rng(seed);
    std::vector<std::string> images;
    for (int i = 0; i < 80; ++i) {
      std::string jpeg = RandomJpeg(rng);
      if (rng.Chance(6)) jpeg.resize(jpeg.size() / 3);  // truncated: an element error
      if (rng.Chance(3)) jpeg = "not an image";
      images.push_back(std::move(jpeg));
    }
    const Dataset source = Dataset::FromTensorSlices(Element(Strings(images)));
    const std::vector<std::string> fns = {
        absl::StrCat("random_resized_crop([128, 96], seed=", seed, ")"),
        "normalize(mean=[127.5], std=[3.0])"};
    const BatchSlotCounts before = BatchSlotCountsSoFar();
    for (const std::string tail : {".batch(8)", ".batch(8).ignore_errors()",
                                   ".ignore_errors().batch(8)"}) {
      const std::string what = absl::StrCat("seed ", seed, tail);
      const std::vector<std::string> parallel =
          Outcomes(Pipeline(source, fns, ", num_parallel_calls=3", tail), true);
      ASSERT_GE(parallel.size(), 2u) << what;
      EXPECT_TRUE(parallel == Outcomes(Pipeline(source, fns, "", tail), true)) << what;
      EXPECT_TRUE(parallel == Outcomes(Pipeline(source, fns, "", tail), false)) << what;
    }
    // The parallel map wrote rows in place around the errors.
    EXPECT_GT(BatchSlotCountsSoFar().rows_in_place, before.rows_in_place) << "seed " << seed;
  }
}

TEST(OutputSlotTest, HeldBatchesAreNeverWrittenAgainAndReleasedOnesAreReused) {
  SeededRng rng(11);
  // Elements of 64 KB and more are stacked into pooled buffers, with or without a map.
  // A sequential and a parallel map of elements that are stacked into pooled buffers.
  const Dataset source = Dataset::FromTensorSlices(Element(RandomImages(rng, 40, 160, 160)));
  for (const std::string args : {"", ", num_parallel_calls=2"}) {
    const Dataset ds =
        Pipeline(source, {"random_resized_crop([128, 96], seed=3)"}, args, ".batch(4)");
    std::vector<std::string> then;
    std::vector<Element> held;
    Drain(ds, /*hold=*/true, &then, &held);
    ASSERT_EQ(held.size(), 10u);
    for (size_t i = 0; i < held.size(); ++i) {
      const std::vector<Tensor> leaves = held[i].Flatten();
      const Tensor& t = leaves[0];
      EXPECT_EQ(std::string(static_cast<const char*>(t.raw_data()), t.byte_size()), then[i])
          << "batch " << i << " changed while its consumer held it";
    }
    // Dropping each batch before asking for the one after the next: every batch from the
    // third on is written into a released one's memory, with the same bytes.
    const BatchSlotCounts before = BatchSlotCountsSoFar();
    std::vector<std::string> batches;
    Drain(ds, /*hold=*/false, &batches, nullptr);
    const BatchSlotCounts after = BatchSlotCountsSoFar();
    EXPECT_GE(after.buffers_reused - before.buffers_reused, 7) << args;
    EXPECT_EQ(batches, then) << args;
  }
}

// The rows `slots` offers `input` for rows 0 .. n - 1 of its current batch, each taken as the
// map below would take it; stops at the first row not offered.
std::vector<Tensor> OfferedRows(const Iterator* input, BatchSlots* slots, int64_t n) {
  std::vector<Tensor> rows;
  for (int64_t r = 0; r < n; ++r) {
    const ScopedSlotOffer offer = slots->Offer(r);
    std::optional<OutputSlot> slot = TakeSlotOffer(input);
    if (!slot.has_value()) break;
    rows.push_back(slot->row);
  }
  return rows;
}

TEST(OutputSlotTest, RowsWrittenForOtherRowsAreReadBeforeAnyIsOverwritten) {
  // Four rows of 64 KB (the smallest offered), each row r written in place as the value r;
  // the column then hands them out in a rotated order, as if each element had come out one
  // row later than its slot: row r must get the bytes written into row r - 1.
  constexpr int64_t kRows = 4, kValues = BatchSlots::kMinBytes / 4;
  const Iterator* input = reinterpret_cast<const Iterator*>(&kRows);  // an address, never used
  BatchSlots slots(input, kRows, "test batch");
  slots.Learn(Element(Tensor::Allocate(DType::kInt32, Shape({kValues}))));
  ASSERT_EQ(slots.leaf(), 0);
  slots.BeginBatch();
  std::vector<Tensor> written = OfferedRows(input, &slots, kRows);
  ASSERT_EQ(written.size(), static_cast<size_t>(kRows));
  for (int64_t r = 0; r < kRows; ++r) {
    int32_t* p = written[static_cast<size_t>(r)].mutable_data<int32_t>();
    for (int64_t i = 0; i < kValues; ++i) p[i] = static_cast<int32_t>(r);
  }
  std::vector<Tensor> column;
  for (int64_t r = 0; r < kRows; ++r) column.push_back(written[(r + kRows - 1) % kRows]);
  std::optional<Tensor> stacked = slots.Stacked(0, column);
  ASSERT_TRUE(stacked.has_value());
  for (int64_t r = 0; r < kRows; ++r) {
    const int32_t* p = stacked->Index(r).data<int32_t>();
    EXPECT_EQ(p[0], (r + kRows - 1) % kRows) << "row " << r;
    EXPECT_EQ(p[kValues - 1], (r + kRows - 1) % kRows) << "row " << r;
  }
}

TEST(OutputSlotTest, TheFirstBatchsRowsAreOfferedFromItsSecondElement) {
  // One batch of 16: its leaf is known once its first element is, and from then on its rows
  // are offered (written in place by random_resized_crop), not only from the second batch on.
  SeededRng rng(21);
  const Dataset source = Dataset::FromTensorSlices(Element(RandomImages(rng, 16, 300, 300)));
  const std::vector<std::string> fns = {"random_resized_crop([128, 96], seed=5)"};
  BatchSlotCounts before = BatchSlotCountsSoFar();
  const std::vector<std::string> sequential =
      Outcomes(Pipeline(source, fns, "", ".batch(16)"), true);
  BatchSlotCounts after = BatchSlotCountsSoFar();
  EXPECT_EQ(after.rows_in_place - before.rows_in_place, 15);  // all but the first element
  EXPECT_EQ(after.rows_copied - before.rows_copied, 1);
  // In parallel, at most 2 x 2 elements (units of one 270 KB element) are pulled before the
  // first one is out, without rows.
  before = BatchSlotCountsSoFar();
  const std::vector<std::string> parallel =
      Outcomes(Pipeline(source, fns, ", num_parallel_calls=2", ".batch(16)"), true);
  after = BatchSlotCountsSoFar();
  EXPECT_GE(after.rows_in_place - before.rows_in_place, 11);
  ASSERT_EQ(parallel.size(), 1u);
  EXPECT_TRUE(parallel == sequential);
}

// An element (int32 of `values` values, all `v`; a string label; an empty float32), as an
// image, its key and an empty box list would be.
Element Filled(int64_t values, int32_t v) {
  Tensor t = Tensor::Allocate(DType::kInt32, Shape({values}));
  int32_t* p = t.mutable_data<int32_t>();
  for (int64_t i = 0; i < values; ++i) p[i] = v;
  return Element::Tuple({Element(std::move(t)), Element(Tensor::StringScalar("label")),
                         Element(Tensor::Allocate(DType::kFloat32, Shape({0, 4})))});
}

TEST(OutputSlotTest, RowsNotWrittenInPlaceArePlacedAsTheirElementsArrive) {
  // Elements whose fn did not write their row (no slot taken): each is copied into its row as
  // it arrives, its own tensor released, and the batch is the same values, counted as copied.
  constexpr int64_t kRows = 4, kValues = BatchSlots::kMinBytes / 4;
  const Iterator* input = reinterpret_cast<const Iterator*>(&kRows);  // an address, never used
  BatchSlots slots(input, kRows, "test batch");
  const BatchSlotCounts before = BatchSlotCountsSoFar();
  std::vector<Tensor> column;
  for (int64_t r = 0; r < kRows; ++r) {
    Element e = Filled(kValues, static_cast<int32_t>(100 + r));
    if (r == 0) slots.Learn(e);
    ASSERT_EQ(slots.leaf(), 0);
    const Tensor own = e.Flatten()[0];
    slots.Place(r, &e);
    const std::vector<Tensor> leaves = e.Flatten();
    ASSERT_EQ(leaves.size(), 3u);
    EXPECT_NE(leaves[0].raw_data(), own.raw_data()) << "row " << r << " was not placed";
    EXPECT_EQ(own.buffer().use_count(), 1) << "row " << r << ": the element still holds its own";
    EXPECT_EQ(leaves[0].data<int32_t>()[0], 100 + r);
    EXPECT_EQ(leaves[0].data<int32_t>()[kValues - 1], 100 + r);
    EXPECT_EQ(leaves[1].string_at(0), "label");
    column.push_back(leaves[0]);
  }
  std::optional<Tensor> stacked = slots.Stacked(0, column);
  ASSERT_TRUE(stacked.has_value());
  for (int64_t r = 0; r < kRows; ++r) {
    EXPECT_EQ(stacked->Index(r).raw_data(), column[static_cast<size_t>(r)].raw_data()) << r;
    EXPECT_EQ(stacked->Index(r).data<int32_t>()[kValues - 1], 100 + r) << "row " << r;
  }
  const BatchSlotCounts after = BatchSlotCountsSoFar();
  EXPECT_EQ(after.rows_copied - before.rows_copied, kRows);
  EXPECT_EQ(after.rows_in_place - before.rows_in_place, 0);

  // An element carrying a row written for another position is left to Stacked, and so is
  // every element after it in the batch (Stacked reads such rows before it writes any).
  slots.BeginBatch();
  const std::vector<Tensor> rows = OfferedRows(input, &slots, kRows);
  ASSERT_EQ(rows.size(), static_cast<size_t>(kRows));
  Element first(rows[1]);  // row 1's tensor, come out as row 0
  slots.Place(0, &first);
  EXPECT_EQ(first.leaf().raw_data(), rows[1].raw_data());
  Element second = Filled(kValues, 7);
  const void* own = second.Flatten()[0].raw_data();
  slots.Place(1, &second);
  EXPECT_EQ(second.Flatten()[0].raw_data(), own) << "placed over the row the first element carries";
}

TEST(BatchBufferPoolTest, ReusesOnlyReleasedBuffersOfTheSameSize) {
  auto pool = BatchBufferPool::Create(1);
  const Shape shape({4, 1000});
  absl::StatusOr<Tensor> a = pool->Take(DType::kFloat32, shape, "test");
  ASSERT_TRUE(a.ok()) << a.status();
  const void* a_data = a->raw_data();
  absl::StatusOr<Tensor> b = pool->Take(DType::kFloat32, shape, "test");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(b->raw_data(), a_data);  // `a` is held
  Tensor view = a->Index(2);
  *a = Tensor();
  absl::StatusOr<Tensor> c = pool->Take(DType::kFloat32, shape, "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE(c->raw_data(), a_data);  // a view of `a` is held
  view = Tensor();
  absl::StatusOr<Tensor> other_size = pool->Take(DType::kFloat32, Shape({3, 1000}), "test");
  ASSERT_TRUE(other_size.ok()) << other_size.status();
  EXPECT_NE(other_size->raw_data(), a_data);
  absl::StatusOr<Tensor> d = pool->Take(DType::kInt32, shape, "test");  // same bytes
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->raw_data(), a_data);
  EXPECT_EQ(pool->reused(), 1);
  EXPECT_EQ(pool->allocated(), 4);
  EXPECT_FALSE(pool->Take(DType::kString, shape, "test").ok());
  EXPECT_FALSE(pool->Take(DType::kFloat32, Shape({-1, 4}), "test").ok());
}

TEST(BatchBufferPoolTest, IdleBuffersStayChargedUntilThePoolGoes) {
  constexpr int64_t kBytes = 1 << 20;
  const int64_t base = ProcessMemoryBudget().in_use();
  auto pool = BatchBufferPool::Create(1);
  {
    absl::StatusOr<Tensor> a = pool->Take(DType::kUInt8, Shape({kBytes}), "test");
    absl::StatusOr<Tensor> b = pool->Take(DType::kUInt8, Shape({kBytes}), "test");
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_GE(ProcessMemoryBudget().in_use() - base, 2 * kBytes);
  }
  // One kept (max_idle 1), the other freed.
  EXPECT_GE(ProcessMemoryBudget().in_use() - base, kBytes);
  EXPECT_LT(ProcessMemoryBudget().in_use() - base, 2 * kBytes);
  // A buffer held past the pool's end is freed when dropped.
  absl::StatusOr<Tensor> outlives = pool->Take(DType::kUInt8, Shape({kBytes}), "test");
  ASSERT_TRUE(outlives.ok());
  pool.reset();
  outlives->mutable_data<uint8_t>()[kBytes - 1] = 7;
  *outlives = Tensor();
  EXPECT_EQ(ProcessMemoryBudget().in_use(), base);
}

}  // namespace
}  // namespace sluice
