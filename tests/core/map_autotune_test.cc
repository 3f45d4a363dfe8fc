// AUTOTUNE in the parallel map (core/data/ops/map_iterator.h): a map starts at tf.data's
// default parallelism (the pool's size), and one whose fn is the bottleneck raises it from
// there up to its num_parallel_calls, and reports it; the elements stay the same, and the map
// holds at most twice its current parallelism in units.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "core/data/iterator.h"
#include "core/data/ops/map_iterator.h"
#include "core/data/ops/source_iterators.h"
#include "core/util/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/core/iterator_test_util.h"

namespace sluice {
namespace {

using testing_util::CountingIterator;

double ChosenParallelism(const std::string& label) {
  for (const auto& [op, parallelism] : AutotunedMapParallelism()) {
    if (op == label) return parallelism;
  }
  return 0;
}

// The iterator's next output is the scalar `want`, or its end where `want` is -1.
::testing::AssertionResult NextIs(Iterator* it, int64_t want) {
  Element e;
  bool end = false;
  const absl::Status s = it->GetNext(&e, &end);
  if (!s.ok()) return ::testing::AssertionFailure() << s;
  if (end != (want < 0)) return ::testing::AssertionFailure() << "end: " << end;
  if (!end && e.leaf().data<int64_t>()[0] != want) {
    return ::testing::AssertionFailure() << e.leaf().data<int64_t>()[0] << ", not " << want;
  }
  return ::testing::AssertionSuccess();
}

// A num_parallel_calls above where AUTOTUNE starts, so that the climb shows.
int64_t AboveTheStart() { return AutotuneInitialParallelism(MaxParallelCalls()) + 2; }

TEST(MapAutotuneTest, StartsAtThePoolsSizeAsTfDataDoes) {
  const int64_t pool = ProcessThreadPoolSize();
  EXPECT_EQ(AutotuneInitialParallelism(64), std::min<int64_t>(pool, 16));
  EXPECT_EQ(AutotuneInitialParallelism(1000), std::min<int64_t>(pool, 16));
  EXPECT_EQ(AutotuneInitialParallelism(2), std::min<int64_t>(pool, 2));  // never above the most
  EXPECT_EQ(AutotuneInitialParallelism(0), 1);
}

TEST(MapAutotuneTest, ASlowFnRaisesTheParallelismAndTheOutputStaysInOrder) {
  // Each call blocks for 100 µs without using the CPU (as a read waiting on storage would): the
  // consumer, which does nothing else, spends nearly all of each period waiting for (or itself
  // running) fn calls, however loaded the machine is. A busy-wait would make that share depend
  // on how the machine's cores are shared out, and the map would not be the bottleneck on a
  // machine where the consumer's thread is the one that waits for a core.
  ElementFn slow = [](Element e) -> absl::StatusOr<Element> {
    absl::SleepFor(absl::Microseconds(100));
    return e;
  };
  const std::string label = "op 1 (map, autotune test)";
  const int64_t most = AboveTheStart();
  const int64_t start = AutotuneInitialParallelism(most);
  std::unique_ptr<Iterator> it =
      NewMapIterator(label, *NewRangeIterator("source (range)", 0, 3000, 1), slow,
                     /*num_parallel_calls=*/most, /*deterministic=*/true, nullptr,
                     /*autotune=*/true);
  EXPECT_EQ(ChosenParallelism(label), start);
  for (int64_t i = 0; i < 3000; ++i) {
    ASSERT_TRUE(NextIs(it.get(), i));
  }
  EXPECT_TRUE(NextIs(it.get(), -1));
  const double chosen = ChosenParallelism(label);
  EXPECT_GT(chosen, start);
  EXPECT_LE(chosen, most);
  it.reset();
  EXPECT_EQ(ChosenParallelism(label), 0);  // gone with the map
}

TEST(MapAutotuneTest, ASlowFnRaisesTheParallelismWithinAFewElements) {
  // Each call keeps a thread busy for 3 ms, an image decode's cost: AUTOTUNE's periods end on
  // time as well as on outputs, so the map runs more than one call at a time long before 256
  // outputs (the output-counted period). The 48 calls take at least 48 * 3 ms / (P + 2) of
  // mapping (P the pool's threads; P + 2 at most at once, and the consumer's thread): with
  // P = 2, 36 ms, several 10 ms periods even on an idle machine.
  ElementFn slow = [](Element e) -> absl::StatusOr<Element> {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3);
    while (std::chrono::steady_clock::now() < until) {
    }
    return e;
  };
  const std::string label = "op 1 (map, slow autotune test)";
  const int64_t most = AboveTheStart();
  const int64_t start = AutotuneInitialParallelism(most);
  std::unique_ptr<Iterator> it =
      NewMapIterator(label, *NewRangeIterator("source (range)", 0, 48, 1), slow,
                     /*num_parallel_calls=*/most, /*deterministic=*/true, nullptr,
                     /*autotune=*/true);
  double chosen = 0;
  for (int64_t i = 0; i < 48; ++i) {
    ASSERT_TRUE(NextIs(it.get(), i));
    chosen = ChosenParallelism(label);
  }
  EXPECT_GT(chosen, start);
}

TEST(MapAutotuneTest, AMapHoldsAtMostTwiceItsCurrentParallelismInUnits) {
  // Units of at most 32 elements (map_iterator.cc's kMaxUnit), at most 2 x the parallelism
  // AUTOTUNE has chosen so far held or being mapped: what a map pulls ahead of its consumer is
  // bounded by where AUTOTUNE stands, not by num_parallel_calls. A consumer slower than the
  // fn (it sleeps 20 µs per element) rarely waits, so the map mostly stays where it started,
  // below num_parallel_calls; the bound is read after each output, and AUTOTUNE never lowers.
  constexpr int64_t kMaxUnitElements = 32;
  const std::string label = "op 1 (map, bounded autotune test)";
  const int64_t most = AboveTheStart();
  int64_t pulled = 0;
  ElementFn same = [](Element e) -> absl::StatusOr<Element> { return e; };
  std::unique_ptr<Iterator> it = NewMapIterator(
      label,
      std::make_unique<CountingIterator>(*NewRangeIterator("source (range)", 0, 4000, 1),
                                         &pulled),
      same, /*num_parallel_calls=*/most, /*deterministic=*/true, nullptr, /*autotune=*/true);
  int64_t most_ahead = 0;
  for (int64_t i = 0; i < 4000; ++i) {
    ASSERT_TRUE(NextIs(it.get(), i));
    const int64_t ahead = pulled - (i + 1);
    most_ahead = std::max(most_ahead, ahead);
    ASSERT_LE(ahead, 2 * kMaxUnitElements * static_cast<int64_t>(ChosenParallelism(label)))
        << "after output " << i << " at parallelism " << ChosenParallelism(label);
    absl::SleepFor(absl::Microseconds(20));
  }
  EXPECT_TRUE(NextIs(it.get(), -1));
  EXPECT_GT(most_ahead, 0);
}

}  // namespace
}  // namespace sluice
