// The process memory budget (core/data/memory_budget.h): accounting, limits, and the ops that
// reserve against it failing with RESOURCE_EXHAUSTED naming the op and the size instead of
// taking the process down, then giving every byte back.
#include "core/data/memory_budget.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/util/status_context.h"
#include "sluice/dataset.h"
#include "core/data/executor.h"
#include "core/data/ops/prefetch_iterator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/scoped_process_limits.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

// Runs `pipeline` in-process to its end or first error; the elements it yielded.
absl::Status Drain(const std::string& pipeline, int64_t* count = nullptr) {
  absl::StatusOr<Dataset> d = Dataset::Parse(pipeline);
  if (!d.ok()) return d.status();
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*d);
  if (!it.ok()) return it.status();
  int64_t n = 0;
  while (true) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    if (!s.ok()) return s;
    if (end) break;
    ++n;
  }
  if (count != nullptr) *count = n;
  return absl::OkStatus();
}

TEST(ParseByteSizeTest, UnitsArePowersOf1024AndPlainNumbersAreBytes) {
  EXPECT_EQ(*ParseByteSize("1000000", "--f"), 1000000);
  EXPECT_EQ(*ParseByteSize("1e9", "--f"), 1000000000);
  EXPECT_EQ(*ParseByteSize("4GiB", "--f"), int64_t{4} << 30);
  EXPECT_EQ(*ParseByteSize("512m", "--f"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("2K", "--f"), 2048);
  EXPECT_EQ(*ParseByteSize("10B", "--f"), 10);
  for (const char* bad : {"", "GiB", "-1", "lots", "1e30", "nan"}) {
    absl::StatusOr<int64_t> v = ParseByteSize(bad, "--memory_limit");
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(v.status().message()), HasSubstr("--memory_limit"));
  }
}

TEST(DefaultMemoryLimitsTest, LeaveRoomOnTheMachine) {
  const MemoryLimits l = DefaultMemoryLimits();
  EXPECT_GT(l.process_bytes, 0);
  EXPECT_EQ(l.element_bytes, l.process_bytes / 4);
}

TEST(MemoryBudgetTest, ReservesUpToTheLimitAndNamesWhatWentOver) {
  MemoryBudget budget(MemoryLimits{.process_bytes = 1000, .element_bytes = 100});
  ASSERT_TRUE(budget.Reserve(600, "op 1 (shuffle)").ok());
  ASSERT_TRUE(budget.Reserve(400, "op 1 (shuffle)").ok());
  absl::Status s = budget.Reserve(1, "op 3 (cache)");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "op 3 (cache): needs 1 more bytes, but 1000 of the process's memory limit of 1000 "
            "bytes are in use (--memory_limit)");
  budget.Release(1000);
  EXPECT_EQ(budget.in_use(), 0);

  s = budget.CheckElement(101, "op 2 (batch)", "a batch of 7 elements");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "op 2 (batch): a batch of 7 elements needs more than the memory limit of one "
            "element, 100 bytes (--max_element_bytes)");
  EXPECT_TRUE(budget.CheckElement(100, "x", "y").ok());
}

// The coordinator retries a task refused at a worker's element limit only on a worker with a
// larger one: the refusal carries the limit, through the contexts ops and tasks add to it; a
// process-limit refusal (it depends on what else the process holds) carries none.
TEST(MemoryBudgetTest, AnElementLimitRefusalCarriesItsLimitThroughAddedContext) {
  MemoryBudget budget(MemoryLimits{.process_bytes = 1000, .element_bytes = 100});
  const absl::Status element = budget.CheckElement(101, "op 2 (batch)", "a batch");
  EXPECT_EQ(RefusedElementLimit(element), 100);
  EXPECT_EQ(RefusedElementLimit(budget.Refusal(101, "op 1 (map)", "a tensor")), 100);
  const absl::Status wrapped = WithContext("task 3 (job 1, index 0/2)", element);
  EXPECT_EQ(wrapped.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(wrapped.message(), absl::StrCat("task 3 (job 1, index 0/2): ", element.message()));
  EXPECT_EQ(RefusedElementLimit(wrapped), 100);
  EXPECT_EQ(RefusedElementLimit(budget.Reserve(1001, "op 3 (cache)")), std::nullopt);
  EXPECT_EQ(RefusedElementLimit(budget.Refusal(99, "op 3 (cache)", "x")), std::nullopt);
  EXPECT_EQ(RefusedElementLimit(absl::ResourceExhaustedError("x")), std::nullopt);

  // Through a pipeline: the refusal a worker reports for its task keeps the limit.
  ScopedProcessLimits limits({.process_bytes = int64_t{256} << 20, .element_bytes = 4 << 20});
  // batch over a source with blocks (range) refuses the block it asks for, not an element.
  for (const char* pipeline : {"from_tensors([1]).repeat().batch(1000000000)",
                               "range(2000000000).batch(1000000000)",
                               "range(4).map(one_hot(100000000000))"}) {
    SCOPED_TRACE(pipeline);
    EXPECT_EQ(RefusedElementLimit(Drain(pipeline)), 4 << 20);
  }
  EXPECT_EQ(RefusedElementLimit(Drain("range(10000000).shuffle(10000000, seed=1)")), std::nullopt);
}

TEST(MemoryReservationTest, TakesChunksGivesThemBackAndFailsWithoutHoldingMore) {
  MemoryBudget budget(MemoryLimits{.process_bytes = int64_t{8} << 20, .element_bytes = 1 << 20});
  {
    MemoryReservation r("op 1 (batch)", &budget);
    ASSERT_TRUE(r.Grow(10).ok());
    EXPECT_EQ(r.bytes(), 10);
    EXPECT_EQ(budget.in_use(), 1 << 20);  // one chunk for many small elements
    // The element limit: 1 MiB.
    absl::Status s = r.GrowElement(1 << 20, "a batch of 3 elements");
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(r.bytes(), 10);
    // The process limit, exactly reachable despite the chunk rounding.
    ASSERT_TRUE(r.Grow((int64_t{8} << 20) - 10).ok());
    EXPECT_EQ(budget.in_use(), int64_t{8} << 20);
    EXPECT_EQ(r.Grow(1).code(), absl::StatusCode::kResourceExhausted);
    r.Shrink(int64_t{7} << 20);
    EXPECT_LT(budget.in_use(), int64_t{4} << 20);
    EXPECT_GE(budget.in_use(), r.bytes());
  }
  EXPECT_EQ(budget.in_use(), 0);
}

TEST(ElementFootprintTest, CountsPayloadsAndTheStructureAroundThem) {
  const Element scalar(Tensor::Scalar<int64_t>(1));
  const Element pair = Element::Tuple({scalar, scalar});
  EXPECT_GT(ElementFootprint(scalar), 8 + 256);  // the heap cost measured per scalar element
  EXPECT_GT(ElementFootprint(pair), 2 * ElementFootprint(scalar));
  const Tensor big = Tensor::Allocate(DType::kFloat32, Shape({1000}));
  EXPECT_EQ(TensorFootprint(big) - AllocationFootprint(DType::kFloat32, 0), 4000);
  EXPECT_EQ(AllocationFootprint(DType::kFloat32, int64_t{1} << 62),
            std::numeric_limits<int64_t>::max());
}

TEST(OpsInTheBudgetTest, AHugeBatchIsResourceExhaustedNamingTheOpNotACrash) {
  ScopedProcessLimits limits({.process_bytes = int64_t{256} << 20, .element_bytes = 4 << 20});
  absl::Status s = Drain("from_tensors([1]).repeat().batch(1000000000)");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(s.message(),
            "op 2 (batch): a batch of 1000000000 elements needs more than the memory limit of "
            "one element, 4194304 bytes (--max_element_bytes)");
  EXPECT_EQ(ProcessMemoryBudget().in_use(), 0);
  // The same op within the limit, and a batch request larger than the data (TF's partial
  // batch), are fine: the limit is on what is gathered, not on what is asked for.
  int64_t n = 0;
  EXPECT_TRUE(Drain("range(100000).batch(1000)", &n).ok());
  EXPECT_EQ(n, 100);
  EXPECT_TRUE(Drain("range(10).batch(10000000000)", &n).ok());
  EXPECT_EQ(n, 1);
  EXPECT_EQ(ProcessMemoryBudget().in_use(), 0);
}

TEST(OpsInTheBudgetTest, PaddedShapesAndOneHotAreCheckedBeforeTheyAllocate) {
  ScopedProcessLimits limits({.process_bytes = int64_t{256} << 20, .element_bytes = 4 << 20});
  absl::Status s =
      Drain("from_tensor_slices([[1], [2], [3], [4]]).padded_batch(2, padded_shapes=[100000000000])");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("op 1 (padded_batch): component 0 padded to "
                                                  "[100000000000] for 2 elements needs more"));
  s = Drain("range(4).map(one_hot(100000000000))");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("one_hot(100000000000)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--max_element_bytes"));
  EXPECT_EQ(ProcessMemoryBudget().in_use(), 0);
}

TEST(OpsInTheBudgetTest, BuffersCountAgainstTheProcessLimitAndAreGivenBack) {
  ScopedProcessLimits limits({.process_bytes = 8 << 20, .element_bytes = 4 << 20});
  // ~370 bytes a scalar element: 100k of them is ~37 MB, over the 8 MiB limit.
  for (const char* pipeline : {"range(100000).shuffle(100000, seed=1)", "range(100000).cache()"}) {
    SCOPED_TRACE(pipeline);
    absl::Status s = Drain(pipeline);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("op 1 ("));
    EXPECT_THAT(std::string(s.message()), HasSubstr("of the process's memory limit of 8388608"));
    EXPECT_EQ(ProcessMemoryBudget().in_use(), 0);
  }
  int64_t n = 0;
  ASSERT_TRUE(Drain("range(1000).shuffle(1000, seed=1).cache().repeat(2)", &n).ok());
  EXPECT_EQ(n, 2000);
  EXPECT_EQ(ProcessMemoryBudget().in_use(), 0);
}

// Issue 25's pipelines, in-process: each ends in RESOURCE_EXHAUSTED naming its op and the limit
// it would pass, before the memory is taken (the first two used to abort with std::bad_alloc or
// grow to 24 GB), and every byte is given back.
TEST(OpsInTheBudgetTest, HugeBatchesAndBuffersFailEarlyNamingTheirOp) {
  ScopedProcessLimits limits({.process_bytes = int64_t{1} << 30, .element_bytes = 256 << 20});
  const std::vector<std::pair<std::string, std::string>> cases = {
      // The bulk range->batch path: one block of the whole batch, refused before allocation.
      {"range(100000000000).batch(10000000000)",
       "op 1 (batch): a batch of 10000000000 elements: source (range): a tensor of shape "
       "(10000000000,) and dtype int64 needs 80000000000 bytes, more than the memory limit of "
       "one element, 268435456 bytes (--max_element_bytes)"},
      // Through a bulk map: the block it would cast is refused the same way.
      {"range(100000000000).map(cast(tf.int32)).batch(3000000000)",
       "op 2 (batch): a batch of 3000000000 elements: source (range): a tensor of shape "
       "(3000000000,) and dtype int64 needs 24000000000 bytes, more than the memory limit of "
       "one element"},
      // Per element: the outer batch stops once what it gathered passes the element limit.
      {"range(100000000000).batch(100000).batch(100000)",
       "op 2 (batch): a batch of 100000 elements needs more than the memory limit of one "
       "element, 268435456 bytes (--max_element_bytes)"},
      // rebatch gathers slices of many input batches into one piece: it stops once the piece
      // passes the element limit (it grew until the process limit, then failed elsewhere).
      {"range(100000000000).batch(2).rebatch(1000000000)",
       "op 2 (rebatch): a piece of 1000000000 rows needs more than the memory limit of one "
       "element, 268435456 bytes (--max_element_bytes)"},
      // A buffer: the structure of the buffered elements and their payloads, against the
      // process limit.
      {"range(100000000000).shuffle(100000000000, seed=1)",
       " of the process's memory limit of 1073741824 bytes are in use (--memory_limit)"},
  };
  for (const auto& [pipeline, message] : cases) {
    SCOPED_TRACE(pipeline);
    absl::Status s = Drain(pipeline);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
    EXPECT_EQ(ProcessMemoryBudget().in_use(), 0);
  }
}

// A cycle_length far above the inputs is TF's to accept (tests/core/overflow_safety_test.cc);
// one that really keeps opening inputs is charged for each (memory and a file descriptor) and
// fails naming interleave once the process's budget or open-input cap is spent, giving
// everything back (it failed with "Too many open files" in a source, or ran the process out).
TEST(OpsInTheBudgetTest, AHugeCycleThatKeepsOpeningInputsFailsNamingInterleave) {
  ScopedProcessLimits limits({.process_bytes = 64 << 20, .element_bytes = 16 << 20});
  const std::string file = ::testing::TempDir() + "/one_line.txt";
  {
    std::ofstream f(file);
    f << "line\n";
  }
  absl::Status s = Drain(absl::StrCat("from_tensor_slices(['", file,
                                      "']).repeat().interleave(lambda f: text_line_dataset(f), "
                                      "cycle_length=100000000000)"));
  // Whichever comes first on this machine: the open-file cap or the memory budget; both are
  // the interleave's own RESOURCE_EXHAUSTED, not a source failing to open its file.
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("(interleave)"));
  EXPECT_THAT(std::string(s.message()),
              ::testing::AnyOf(HasSubstr("RLIMIT_NOFILE"), HasSubstr("--memory_limit")));
  EXPECT_EQ(ProcessMemoryBudget().in_use(), 0);
}

// Yields float32 vectors of the given lengths, allocated as a source does (refusable), then
// the end.
class SizedElements : public Iterator {
 public:
  explicit SizedElements(std::vector<int64_t> lengths) : lengths_(std::move(lengths)) {}
  absl::Status GetNext(Element* out, bool* end_of_sequence) override {
    *end_of_sequence = next_ == lengths_.size();
    if (*end_of_sequence) return absl::OkStatus();
    absl::StatusOr<Tensor> t =
        Tensor::TryAllocate(DType::kFloat32, Shape({lengths_[next_++]}), "source (sized)");
    if (!t.ok()) return t.status();
    *out = Element(*std::move(t));
    return absl::OkStatus();
  }

 private:
  const std::vector<int64_t> lengths_;
  size_t next_ = 0;
};

TEST(OpsInTheBudgetTest, APrefetchQueueOverTheLimitFailsTheProducerAfterWhatItQueued) {
  ScopedProcessLimits limits({.process_bytes = 8 << 20, .element_bytes = 4 << 20});
  // Two 4 MiB elements and the queue's structure do not fit in 8 MiB: the producer queues the
  // first two (the consumer holds the second when the third is asked for) and then fails, with
  // the allocator's refusal, whatever the consumer's speed.
  {
    PrefetchIterator it(
        std::make_unique<SizedElements>(std::vector<int64_t>{1, 1 << 20, 1 << 20, 1}), 8,
        "op 2 (prefetch)");
    Element e;
    bool end = false;
    ASSERT_TRUE(it.GetNext(&e, &end).ok());
    ASSERT_FALSE(end);
    EXPECT_EQ(e.leaf().num_elements(), 1);
    ASSERT_TRUE(it.GetNext(&e, &end).ok());
    EXPECT_EQ(e.leaf().num_elements(), 1 << 20);
    absl::Status s = it.GetNext(&e, &end);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("source (sized): a tensor of shape (1048576,) and dtype float32 needs "
                          "4194304 bytes, but "));
    EXPECT_THAT(std::string(s.message()), HasSubstr("of the process's memory limit of 8388608"));
    EXPECT_EQ(it.GetNext(&e, &end).code(), absl::StatusCode::kResourceExhausted);  // sticky
  }
  EXPECT_EQ(ProcessMemoryBudget().in_use(), 0);
}

}  // namespace
}  // namespace sluice
