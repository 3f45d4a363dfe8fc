// CursorCounts (worker/cursor_counts.h): the lowest of a multiset of cursors, against a
// std::multiset on random schedules (forward moves, inserts below the minimum, cursors far
// ahead and far behind), and the work it does per step read against the number of cursors.
#include "worker/cursor_counts.h"

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(CursorCountsTest, TheHeaderExample) {
  CursorCounts counts;
  EXPECT_EQ(counts.min(), CursorCounts::kNone);
  counts.Insert(3);
  counts.Insert(3);
  counts.Insert(5);
  EXPECT_EQ(counts.min(), 3);
  counts.Move(3, 4);
  EXPECT_EQ(counts.min(), 3);
  counts.Move(3, 4);
  EXPECT_EQ(counts.min(), 4);
  EXPECT_EQ(counts.size(), 3);
  counts.Erase(4);
  counts.Erase(4);
  EXPECT_EQ(counts.min(), 5);
  counts.Erase(5);
  EXPECT_EQ(counts.min(), CursorCounts::kNone);
  EXPECT_EQ(counts.size(), 0);
}

TEST(CursorCountsTest, FarCursorsRejoinTheCountsWhenReached) {
  CursorCounts counts;
  const int64_t far = 10 * CursorCounts::kMaxGap;
  counts.Insert(0);
  counts.Insert(far);      // far ahead: kept apart
  counts.Insert(far + 1);
  EXPECT_EQ(counts.min(), 0);
  // The low cursor walks up to the far ones one step at a time: the counts reach them.
  for (int64_t c = 0; c < far + 5; ++c) {
    counts.Move(c, c + 1);
    EXPECT_EQ(counts.min(), std::min(c + 1, far)) << c;
  }
  counts.Erase(far);
  EXPECT_EQ(counts.min(), far + 1);
  counts.Erase(far + 1);
  EXPECT_EQ(counts.min(), far + 5);
  // Far behind the minimum: the counted cursors are set apart, the new one is the minimum.
  counts.Insert(far + 5 + 3 * CursorCounts::kMaxGap);
  counts.Insert(1);
  EXPECT_EQ(counts.min(), 1);
  counts.Erase(1);
  EXPECT_EQ(counts.min(), far + 5);
  counts.Erase(far + 5);
  EXPECT_EQ(counts.min(), far + 5 + 3 * CursorCounts::kMaxGap);
}

// Random schedules: each round moves a random cursor forward by 1..3, or (rarely) removes one,
// inserts one below the minimum, or one far ahead; min() and size() match a std::multiset.
TEST(CursorCountsTest, RandomSchedulesMatchAMultiset) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    CursorCounts counts;
    std::multiset<int64_t> model;
    std::vector<int64_t> cursors;
    for (int i = 0; i < 50; ++i) {
      const int64_t c = static_cast<int64_t>(rng() % 20);
      cursors.push_back(c);
      counts.Insert(c);
      model.insert(c);
    }
    for (int round = 0; round < 20000; ++round) {
      const uint32_t op = rng() % 100;
      if (op < 90 && !cursors.empty()) {
        const size_t i = rng() % cursors.size();
        const int64_t to = cursors[i] + 1 + static_cast<int64_t>(rng() % 3);
        counts.Move(cursors[i], to);
        model.erase(model.find(cursors[i]));
        model.insert(to);
        cursors[i] = to;
      } else if (op < 94 && !cursors.empty()) {
        const size_t i = rng() % cursors.size();
        counts.Erase(cursors[i]);
        model.erase(model.find(cursors[i]));
        cursors.erase(cursors.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (op < 98) {
        const int64_t low = model.empty() ? 0 : *model.begin();
        const int64_t c = std::max<int64_t>(0, low - static_cast<int64_t>(rng() % 30));
        cursors.push_back(c);
        counts.Insert(c);
        model.insert(c);
      } else {
        const int64_t high = model.empty() ? 0 : *model.rbegin();
        const int64_t c = high + static_cast<int64_t>(rng() % (3 * CursorCounts::kMaxGap));
        cursors.push_back(c);
        counts.Insert(c);
        model.insert(c);
      }
      ASSERT_EQ(counts.min(), model.empty() ? CursorCounts::kNone : *model.begin())
          << "seed " << seed << " round " << round;
      ASSERT_EQ(counts.size(), static_cast<int64_t>(model.size()));
    }
  }
}

// N cursors reading S steps each, one step at a time in rounds: the work per step read is a
// constant, the same for 1 and for 4,096 cursors.
TEST(CursorCountsTest, WorkPerStepReadDoesNotGrowWithTheNumberOfCursors) {
  constexpr int64_t kSteps = 64;
  for (int64_t n : {1, 16, 256, 4096}) {
    CursorCounts counts;
    for (int64_t c = 0; c < n; ++c) counts.Insert(0);
    const int64_t before = counts.TEST_ops();
    for (int64_t step = 0; step < kSteps; ++step) {
      for (int64_t c = 0; c < n; ++c) counts.Move(step, step + 1);
    }
    EXPECT_EQ(counts.min(), kSteps);
    const double per_read =
        static_cast<double>(counts.TEST_ops() - before) / static_cast<double>(kSteps * n);
    EXPECT_LE(per_read, 4.0) << n << " cursors";
  }
}

}  // namespace
}  // namespace sluice
