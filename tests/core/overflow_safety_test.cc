// Issue 25, adversarial findings (tests/adversarial/FOUND.md §2, §3, §1): pipelines whose
// arguments overflow int64 arithmetic (a range whose length does not fit, a reshape of an empty
// tensor to an overflowing shape, num_parallel_calls = 2^62) or size work from a hint
// (interleave's cycle_length = 1e9) must end with an error naming the op, or be served exactly;
// never crash the process or end early with OK.
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/data/executor.h"
#include "core/data/memory_budget.h"
#include "core/data/iterator.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

// The elements' leaves as int64 values (flattened; strings parsed as integers), or the first
// error; at most `max` elements.
struct Outcome {
  std::vector<std::vector<int64_t>> elements;
  absl::Status end;
};

Outcome RunInProcess(const std::string& expression, int max = 1000) {
  Outcome run;
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  if (!ds.ok()) {
    run.end = ds.status();
    return run;
  }
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
  if (!it.ok()) {
    run.end = it.status();
    return run;
  }
  for (int i = 0; i < max; ++i) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    if (!s.ok()) {
      run.end = s;
      return run;
    }
    if (end) return run;
    std::vector<int64_t> values;
    for (const Tensor& t : e.Flatten()) {
      for (int64_t j = 0; j < t.num_elements(); ++j) {
        if (t.dtype() == DType::kInt64) values.push_back(t.data<int64_t>()[j]);
        if (t.dtype() == DType::kInt32) values.push_back(t.data<int32_t>()[j]);
        if (t.dtype() == DType::kString) {  // lines of text files holding integers
          int64_t v = 0;
          EXPECT_TRUE(absl::SimpleAtoi(t.string_at(j), &v)) << t.string_at(j);
          values.push_back(v);
        }
      }
    }
    run.elements.push_back(std::move(values));
  }
  run.end = absl::FailedPreconditionError("more elements than the loop's bound");
  return run;
}

absl::Status ValidateExpression(const std::string& expression) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  if (!ds.ok()) return ds.status();
  return ds->Validate();
}

TEST(OverflowSafetyTest, RangeWhoseLengthDoesNotFitInInt64IsRefusedNamingRange) {
  const std::string expr =
      "range(-9223372036854775808, 9223372036854775807).batch(4611686018427387904)";
  absl::Status v = ValidateExpression(expr);
  EXPECT_EQ(v.code(), absl::StatusCode::kInvalidArgument) << v;
  EXPECT_TRUE(absl::StrContains(v.message(), "range(-9223372036854775808")) << v;
  // The executor (which a worker and the in-process path run) refuses it too.
  Outcome run = RunInProcess(expr);
  EXPECT_TRUE(run.elements.empty());
  EXPECT_EQ(run.end.code(), absl::StatusCode::kInvalidArgument) << run.end;
  EXPECT_TRUE(absl::StrContains(run.end.message(), "range")) << run.end;
}

TEST(OverflowSafetyTest, RangeOfMaximalLengthStillServes) {
  Outcome run = RunInProcess("range(-9223372036854775807, 0).take(2)");
  ASSERT_TRUE(run.end.ok()) << run.end;
  ASSERT_EQ(run.elements.size(), 2u);
  EXPECT_EQ(run.elements[0], std::vector<int64_t>{-9223372036854775807});
  Outcome tail = RunInProcess("range(9223372036854775805, 9223372036854775807).batch(4)");
  ASSERT_TRUE(tail.end.ok()) << tail.end;
  ASSERT_EQ(tail.elements.size(), 1u);
  EXPECT_EQ(tail.elements[0], (std::vector<int64_t>{9223372036854775805, 9223372036854775806}));
}

// A batch of 2^62 int64 values is 2^65 bytes: the bulk range->batch block must be refused
// before it is allocated (its byte count wrapped to 0 and the writes faulted), naming the
// batch that asked for it and the range.
TEST(OverflowSafetyTest, RangeBlockTooLargeIsRefusedNamingBatchAndRange) {
  MemoryBudget& budget = ProcessMemoryBudget();
  const MemoryLimits saved = budget.limits();
  MemoryLimits small = saved;
  small.element_bytes = int64_t{1} << 20;
  budget.SetLimits(small);
  Outcome run = RunInProcess("range(9223372036854775807).batch(4611686018427387904)");
  Outcome padded = RunInProcess("range(1000000000).padded_batch(1000000)");
  Outcome fits = RunInProcess("range(100000).batch(100000)");
  budget.SetLimits(saved);
  EXPECT_TRUE(run.elements.empty());
  EXPECT_EQ(run.end.code(), absl::StatusCode::kResourceExhausted) << run.end;
  EXPECT_TRUE(absl::StrContains(run.end.message(), "batch")) << run.end;
  EXPECT_TRUE(absl::StrContains(run.end.message(), "range")) << run.end;
  EXPECT_EQ(padded.end.code(), absl::StatusCode::kResourceExhausted) << padded.end;
  EXPECT_TRUE(absl::StrContains(padded.end.message(), "padded_batch")) << padded.end;
  // A batch under the limit is served whole.
  ASSERT_TRUE(fits.end.ok()) << fits.end;
  ASSERT_EQ(fits.elements.size(), 1u);
  ASSERT_EQ(fits.elements[0].size(), 100000u);
  EXPECT_EQ(fits.elements[0][99999], 99999);
}

TEST(OverflowSafetyTest, ReshapeOfEmptyTensorToOverflowingShapeNamesReshape) {
  for (const std::string shape : {"[4294967296, 4294967296]", "[4611686018427387904, 4]"}) {
    const std::string expr = absl::StrCat(
        "from_tensors(tf.constant([], dtype=tf.float32, shape=(0,))).repeat(2).map(reshape(",
        shape, ")).batch(2)");
    absl::Status v = ValidateExpression(expr);
    EXPECT_EQ(v.code(), absl::StatusCode::kInvalidArgument) << v;
    EXPECT_TRUE(absl::StrContains(v.message(), "reshape")) << v;
    Outcome run = RunInProcess(expr);
    EXPECT_TRUE(run.elements.empty()) << expr;
    EXPECT_EQ(run.end.code(), absl::StatusCode::kInvalidArgument) << run.end;
    EXPECT_TRUE(absl::StrContains(run.end.message(), "reshape")) << run.end;
  }
}

// num_parallel_calls is a hint: a huge one (TF accepts it) gives the same elements as 1.
TEST(OverflowSafetyTest, MapWithHugeNumParallelCallsServesEveryElement) {
  for (const char* n : {"4611686018427387904", "10000000000", "9223372036854775807"}) {
    Outcome run = RunInProcess(absl::StrCat("range(1000000000000).map(cast(tf.int32), "
                                        "num_parallel_calls=",
                                        n, ").take(7).batch(2)"));
    ASSERT_TRUE(run.end.ok()) << n << ": " << run.end;
    ASSERT_EQ(run.elements.size(), 4u) << n;
    EXPECT_EQ(run.elements[0], (std::vector<int64_t>{0, 1})) << n;
    EXPECT_EQ(run.elements[3], (std::vector<int64_t>{6})) << n;
  }
  Outcome plain = RunInProcess(
      "range(1000).map(cast(tf.int32), num_parallel_calls=4611686018427387904).batch(10)");
  ASSERT_TRUE(plain.end.ok()) << plain.end;
  ASSERT_EQ(plain.elements.size(), 100u);
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(plain.elements[i][0], i * 10);
}

std::string WriteLines(const std::string& path, int first, int n) {
  std::ofstream f(path);
  for (int i = first; i < first + n; ++i) f << i << "\n";
  return path;
}

TEST(OverflowSafetyTest, InterleaveWithHugeCycleLengthReadsItsFiles) {
  record_test::TempDir dir;
  const std::string a = WriteLines(dir.File("a.txt"), 0, 5);
  const std::string b = WriteLines(dir.File("b.txt"), 100, 3);
  const std::string c = WriteLines(dir.File("c.txt"), 200, 4);
  Outcome one = RunInProcess(absl::StrCat("from_tensor_slices(['", a,
                                          "']).interleave(lambda f: text_line_dataset(f), "
                                          "cycle_length=1000000000)"));
  ASSERT_TRUE(one.end.ok()) << one.end;
  ASSERT_EQ(one.elements.size(), 5u);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(one.elements[i][0], i);
  // Over three files the order is the one of a cycle as long as the files (all open at once).
  auto expr = [&](const std::string& cycle, const std::string& block,
                  const std::string& extra = "") {
    return absl::StrCat("from_tensor_slices(['", a, "', '", b, "', '", c,
                        "']).interleave(lambda f: text_line_dataset(f), cycle_length=", cycle,
                        ", block_length=", block, extra, ")");
  };
  for (const char* block : {"1", "2"}) {
    Outcome huge = RunInProcess(expr("1000000000", block));
    Outcome exact = RunInProcess(expr("3", block));
    ASSERT_TRUE(huge.end.ok()) << huge.end;
    ASSERT_TRUE(exact.end.ok()) << exact.end;
    EXPECT_EQ(huge.elements.size(), 12u);
    EXPECT_EQ(huge.elements, exact.elements) << "block_length " << block;
  }
  // Parallel, and with a huge block_length (read-ahead is bounded, the order is TF's).
  Outcome parallel = RunInProcess(expr("1000000000", "1", ", num_parallel_calls=2"));
  ASSERT_TRUE(parallel.end.ok()) << parallel.end;
  EXPECT_EQ(parallel.elements, RunInProcess(expr("3", "1")).elements);
  Outcome whole = RunInProcess(expr("3", "1000000000", ", num_parallel_calls=3"));
  ASSERT_TRUE(whole.end.ok()) << whole.end;
  std::vector<int64_t> in_order;
  for (const auto& e : whole.elements) in_order.push_back(e[0]);
  EXPECT_EQ(in_order, (std::vector<int64_t>{0, 1, 2, 3, 4, 100, 101, 102, 200, 201, 202, 203}));
  // And a cycle shorter than the files, as before.
  Outcome two = RunInProcess(expr("2", "1"));
  ASSERT_TRUE(two.end.ok()) << two.end;
  std::vector<int64_t> firsts;
  for (const auto& e : two.elements) firsts.push_back(e[0]);
  EXPECT_EQ(firsts, (std::vector<int64_t>{0, 100, 1, 101, 2, 102, 3, 4, 200, 201, 202, 203}));
}

}  // namespace
}  // namespace sluice
