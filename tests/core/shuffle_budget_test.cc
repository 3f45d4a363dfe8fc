// The memory budget refuses a huge shuffle buffer itself (core/data/budgeted_vector.h): the
// adversarial suite's case gen-6, `from_tensors([1, 2, 3]).repeat().shuffle(1000000000)`, once
// failed with "op 5 (prefetch): out of memory (std::bad_alloc) outside the memory budget's
// checks" because the buffer's std::vector, grown by doubling outside the budget, ran the
// process out of memory before the budget refused the elements.
//
// The allocation check is real: the pipeline runs in a child process (a threadsafe death test
// re-executes this binary) whose private writable memory (RLIMIT_DATA) is what it holds at the
// start plus the budget's limit plus a slack of kSlack, so memory the budget does not see makes
// the heap refuse first. With the buffer in a std::vector the child peaks at ~1.5x the limit
// (the old and the doubled storage at once) and its GetNext returns the bad_alloc error.
#include <sys/resource.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/data/budgeted_vector.h"
#include "core/data/executor.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/core/scoped_process_limits.h"

namespace sluice {
namespace {

// The budget's limit in the child: the buffer is refused after ~286k elements, just past a
// power of two (2^18 slots), where a doubling vector holds 2^18 + 2^19 slots at once.
constexpr int64_t kLimit = int64_t{96} << 20;
// Room beyond the budget for the child's own allocations while it runs (malloc's rounding, the
// chunk list, the parser's graph): small next to the ~50 MiB a doubling costs here.
constexpr int64_t kSlack = int64_t{16} << 20;

// VmData of /proc/self/status in bytes (what RLIMIT_DATA counts), or -1.
int64_t DataBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "VmData:")) continue;
    int64_t kb = 0;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits += c;
    }
    if (absl::SimpleAtoi(digits, &kb)) return kb * 1024;
  }
  return -1;
}

// The child: runs the pipeline under the limits, prints its status, exits 0 when the budget
// refused it by name, 1 otherwise.
void RunHugeShuffleUnderDataLimit(const std::string& expression) {
  ScopedProcessLimits limits({.process_bytes = kLimit, .element_bytes = kLimit / 4});
  absl::StatusOr<Dataset> dataset = Dataset::Parse(expression);
  if (!dataset.ok()) {
    std::cerr << "parse: " << dataset.status() << std::endl;
    std::_Exit(2);
  }
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*dataset);
  if (!it.ok()) {
    std::cerr << "build: " << it.status() << std::endl;
    std::_Exit(2);
  }
  const int64_t base = DataBytes();
  const rlim_t cap = static_cast<rlim_t>(base + kLimit + kSlack);
  const struct rlimit limit = {cap, cap};
  if (base < 0 || setrlimit(RLIMIT_DATA, &limit) != 0) {
    std::cerr << "cannot set RLIMIT_DATA" << std::endl;
    std::_Exit(2);
  }
  Element e;
  bool end = false;
  const absl::Status s = (*it)->GetNext(&e, &end);
  std::cerr << "GetNext: " << s << std::endl;
  const bool refused_by_budget = s.code() == absl::StatusCode::kResourceExhausted &&
                                 absl::StrContains(s.message(), "(shuffle)") &&
                                 absl::StrContains(s.message(), "--memory_limit") &&
                                 !absl::StrContains(s.message(), "bad_alloc");
  std::_Exit(refused_by_budget ? 0 : 1);
}

TEST(ShuffleBudgetTest, HugeBufferIsRefusedByTheBudgetBeforeTheHeapRunsOut) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // As the worker runs it: behind a prefetch, on the process's pool.
  EXPECT_EXIT(RunHugeShuffleUnderDataLimit(
                  "from_tensors([1, 2, 3]).repeat().shuffle(1000000000, seed=53).batch(2)"
                  ".prefetch(1)"),
              ::testing::ExitedWithCode(0), "op 2 \\(shuffle\\).*--memory_limit");
  // And on the caller's thread.
  EXPECT_EXIT(RunHugeShuffleUnderDataLimit(
                  "from_tensors([1, 2, 3]).repeat().shuffle(1000000000, seed=53)"),
              ::testing::ExitedWithCode(0), "op 2 \\(shuffle\\).*--memory_limit");
}

TEST(ShuffleBudgetTest, SmallBufferShufflesEveryElementOnceAndGivesItsMemoryBack) {
  const int64_t before = ProcessMemoryBudget().in_use();
  {
    absl::StatusOr<Dataset> dataset = Dataset::Parse("range(10000).shuffle(10, seed=1)");
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*dataset);
    ASSERT_TRUE(it.ok()) << it.status();
    std::vector<bool> seen(10000, false);
    for (int i = 0; i < 10000; ++i) {
      Element e;
      bool end = false;
      ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
      ASSERT_FALSE(end);
      const int64_t v = *e.leaf().data<int64_t>();
      ASSERT_FALSE(seen[v]) << v;
      seen[v] = true;
    }
    Element e;
    bool end = false;
    ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
    EXPECT_TRUE(end);
  }
  EXPECT_EQ(ProcessMemoryBudget().in_use(), before);
}

struct Counted {
  std::unique_ptr<int64_t> value;  // moves only, as Element slots are moved
};

TEST(BudgetedVectorTest, ChargesEachChunkBeforeAllocatingItAndGivesItBack) {
  MemoryBudget budget(MemoryLimits{.process_bytes = int64_t{8} << 20, .element_bytes = 1 << 20});
  MemoryReservation held("op 2 (shuffle)", &budget);
  {
    BudgetedVector<Counted> v(&held, /*chunk_slots=*/1000);
    EXPECT_EQ(v.capacity(), 0);  // nothing up front, whatever the bound
    for (int64_t i = 0; i < 2500; ++i) {
      ASSERT_TRUE(v.PushBack(Counted{std::make_unique<int64_t>(i)}).ok());
    }
    EXPECT_EQ(v.capacity(), 3000);
    EXPECT_EQ(held.bytes(), 3000 * static_cast<int64_t>(sizeof(Counted)));
    EXPECT_EQ(*v[1234].value, 1234);
    for (int i = 0; i < 1000; ++i) v.PopBack();
    EXPECT_EQ(v.size(), 1500);
    EXPECT_EQ(*v.back().value, 1499);
    EXPECT_EQ(v.capacity(), 2000);  // one chunk beyond the one in use is freed
  }
  EXPECT_EQ(held.bytes(), 0);
}

TEST(BudgetedVectorTest, RefusalNamesTheOpAndAddsNothing) {
  MemoryBudget budget(MemoryLimits{.process_bytes = 4 << 20, .element_bytes = 1 << 20});
  MemoryReservation held("op 2 (shuffle)", &budget);
  BudgetedVector<Counted> v(&held, /*chunk_slots=*/int64_t{1} << 20);  // 8 MiB a chunk
  const absl::Status s = v.PushBack(Counted{std::make_unique<int64_t>(1)});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "op 2 (shuffle)")) << s;
  EXPECT_EQ(v.size(), 0);
  EXPECT_EQ(v.capacity(), 0);
  EXPECT_EQ(budget.in_use(), 0);
}

}  // namespace
}  // namespace sluice
