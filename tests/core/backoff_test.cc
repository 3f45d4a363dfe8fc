#include "core/util/backoff.h"

#include <vector>

#include "gtest/gtest.h"

namespace sluice {
namespace {

// The values Next() computes (no clock is involved).
TEST(BackoffTest, DoublesUpToTheMaximumWithinHalfToFullOfEachStep) {
  const absl::Duration initial = absl::Milliseconds(20);
  Backoff backoff(initial, absl::Milliseconds(100));
  const std::vector<absl::Duration> steps = {absl::Milliseconds(20), absl::Milliseconds(40),
                                             absl::Milliseconds(80), absl::Milliseconds(100),
                                             absl::Milliseconds(100)};
  for (absl::Duration d : steps) {
    const absl::Duration wait = backoff.Next();
    EXPECT_GE(wait, d / 2);
    EXPECT_LE(wait, d);
  }
  backoff.Reset();
  const absl::Duration first = backoff.Next();
  EXPECT_GE(first, initial / 2);
  EXPECT_LE(first, initial);
}

TEST(BackoffTest, RetriesOfDifferentProcessesAreSpreadNotInLockstep) {
  // Two clients that failed at the same instant: their waits differ (nanosecond jitter over a
  // range of milliseconds; equal sequences have probability ~0).
  Backoff a(absl::Milliseconds(20), absl::Seconds(1));
  Backoff b(absl::Milliseconds(20), absl::Seconds(1));
  std::vector<absl::Duration> wa, wb;
  for (int i = 0; i < 8; ++i) {
    wa.push_back(a.Next());
    wb.push_back(b.Next());
  }
  EXPECT_NE(wa, wb);
}

}  // namespace
}  // namespace sluice
