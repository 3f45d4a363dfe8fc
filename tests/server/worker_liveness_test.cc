#include "server/worker_liveness.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(WorkerLivenessTest, SilentWorkersComeOldestFirstAndOnlyTheWatchedOnes) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  WorkerLiveness l;
  l.Heartbeat(1, t0);
  l.Heartbeat(2, t0 + absl::Seconds(1));
  l.Heartbeat(3, t0 + absl::Seconds(2));
  EXPECT_THAT(l.SilentSince(t0 - absl::Seconds(1)), IsEmpty());
  EXPECT_THAT(l.SilentSince(t0 + absl::Seconds(1)), ElementsAre(1, 2));
  // A later heartbeat moves a worker to the back; an earlier one (a late arrival stamp) is
  // ignored.
  l.Heartbeat(1, t0 + absl::Seconds(5));
  l.Heartbeat(3, t0);
  EXPECT_THAT(l.SilentSince(t0 + absl::Seconds(10)), ElementsAre(2, 3, 1));
  EXPECT_EQ(*l.LastHeartbeat(3), t0 + absl::Seconds(2));
  // Unwatched (dead): no longer silent, its time still known; a heartbeat watches it again.
  l.Unwatch(2);
  EXPECT_FALSE(l.watched(2));
  EXPECT_THAT(l.SilentSince(t0 + absl::Seconds(10)), ElementsAre(3, 1));
  EXPECT_EQ(*l.LastHeartbeat(2), t0 + absl::Seconds(1));
  l.Heartbeat(2, t0 + absl::Seconds(6));
  EXPECT_THAT(l.SilentSince(t0 + absl::Seconds(10)), ElementsAre(3, 1, 2));
  EXPECT_EQ(l.num_watched(), 3u);
  l.Forget(3);
  EXPECT_FALSE(l.LastHeartbeat(3).has_value());
  EXPECT_EQ(l.num_watched(), 2u);
}

}  // namespace
}  // namespace sluice
