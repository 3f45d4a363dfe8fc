// num_parallel_calls is a hint (README, "Parallelism hints are hints";
// core/data/ops/map_iterator.h): whatever N a pipeline asks for, the parallel map keeps at
// most MaxParallelCalls() units in flight (max(64, 4 x the process pool's threads)), so a huge
// N (TF accepts any positive value) neither pulls its whole input ahead of the consumer nor
// holds it. Asserted by counting the elements the map pulls from its input before its first
// output is returned: units are queued up to twice the parallelism, each at most 32 elements
// (kMaxUnit), so at most 2 x 32 x MaxParallelCalls() of them, far below the input's size.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/data/iterator.h"
#include "core/data/ops/map_iterator.h"
#include "core/data/ops/source_iterators.h"
#include "core/util/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/core/iterator_test_util.h"

namespace sluice {
namespace {

using testing_util::CountingIterator;

constexpr int64_t kInput = 1000000;
constexpr int64_t kMaxUnitElements = 32;  // map_iterator.cc's kMaxUnit

TEST(MapParallelismCapTest, AHugeNumParallelCallsPullsAtMostTheCappedUnitsAhead) {
  ASSERT_GE(MaxParallelCalls(), 64);
  ASSERT_GE(MaxParallelCalls(), 4 * int64_t{ProcessThreadPoolSize()});
  const int64_t bound = 2 * kMaxUnitElements * MaxParallelCalls();
  ASSERT_LT(bound, kInput);
  for (const int64_t n : {int64_t{1} << 30, int64_t{4611686018427387904}}) {
    SCOPED_TRACE(n);
    int64_t pulled = 0;
    auto range = NewRangeIterator("source (range)", 0, kInput, 1);
    ASSERT_TRUE(range.ok()) << range.status();
    ElementFn same = [](Element e) -> absl::StatusOr<Element> { return e; };
    std::unique_ptr<Iterator> it =
        NewMapIterator("op 1 (map)",
                       std::make_unique<CountingIterator>(*std::move(range), &pulled), same,
                       /*num_parallel_calls=*/n, /*deterministic=*/true);
    Element e;
    bool end = false;
    ASSERT_TRUE(it->GetNext(&e, &end).ok());
    ASSERT_FALSE(end);
    EXPECT_EQ(e.leaf().data<int64_t>()[0], 0);
    EXPECT_GT(pulled, 0);
    EXPECT_LE(pulled, bound) << "the map pulled " << pulled << " of " << kInput
                             << " elements ahead for num_parallel_calls=" << n;
    // The output is still every element in order.
    for (int64_t i = 1; i < 1000; ++i) {
      ASSERT_TRUE(it->GetNext(&e, &end).ok());
      ASSERT_FALSE(end);
      ASSERT_EQ(e.leaf().data<int64_t>()[0], i);
    }
  }
}

}  // namespace
}  // namespace sluice
