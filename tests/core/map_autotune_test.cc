// AUTOTUNE's hill-climb in the parallel map (core/data/ops/map_iterator.h): a map whose fn is
// the bottleneck raises its parallelism from 1, and reports it; the elements stay the same.
#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "core/data/ops/map_iterator.h"
#include "core/data/ops/source_iterators.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

double ChosenParallelism(const std::string& label) {
  for (const auto& [op, parallelism] : AutotunedMapParallelism()) {
    if (op == label) return parallelism;
  }
  return 0;
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
  std::unique_ptr<Iterator> it =
      NewMapIterator(label, *NewRangeIterator("source (range)", 0, 3000, 1), slow,
                     /*num_parallel_calls=*/4, /*deterministic=*/true, nullptr,
                     /*autotune=*/true);
  EXPECT_EQ(ChosenParallelism(label), 1);  // starts at one unit at a time
  for (int64_t i = 0; i < 3000; ++i) {
    Element e;
    bool end = false;
    ASSERT_TRUE(it->GetNext(&e, &end).ok());
    ASSERT_FALSE(end);
    ASSERT_EQ(e.leaf().data<int64_t>()[0], i);
  }
  Element e;
  bool end = false;
  ASSERT_TRUE(it->GetNext(&e, &end).ok());
  EXPECT_TRUE(end);
  const double chosen = ChosenParallelism(label);
  EXPECT_GT(chosen, 1);
  EXPECT_LE(chosen, 4);
  it.reset();
  EXPECT_EQ(ChosenParallelism(label), 0);  // gone with the map
}

TEST(MapAutotuneTest, ASlowFnRaisesTheParallelismWithinAFewElements) {
  // Each call keeps a thread busy for 3 ms, an image decode's cost: AUTOTUNE's periods end on
  // time as well as on outputs, so the map runs more than one call at a time long before 256
  // outputs (the output-counted period). The 48 calls take at least 48 * 3 ms / 4 = 36 ms of
  // mapping, several 10 ms periods, even on an idle machine with 4 threads.
  ElementFn slow = [](Element e) -> absl::StatusOr<Element> {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3);
    while (std::chrono::steady_clock::now() < until) {
    }
    return e;
  };
  const std::string label = "op 1 (map, slow autotune test)";
  std::unique_ptr<Iterator> it =
      NewMapIterator(label, *NewRangeIterator("source (range)", 0, 48, 1), slow,
                     /*num_parallel_calls=*/4, /*deterministic=*/true, nullptr,
                     /*autotune=*/true);
  double chosen = 0;
  for (int64_t i = 0; i < 48; ++i) {
    Element e;
    bool end = false;
    ASSERT_TRUE(it->GetNext(&e, &end).ok());
    ASSERT_FALSE(end);
    ASSERT_EQ(e.leaf().data<int64_t>()[0], i);
    chosen = ChosenParallelism(label);
  }
  EXPECT_GT(chosen, 1);
}

}  // namespace
}  // namespace sluice
