// Liveness across the coordinator's own stalls (CoordinatorOptions::liveness_interval; issue
// 32, "Storms and locks"): time the coordinator itself did not run (its process paused or
// starved, its lock held by a slow request) is not counted as the workers' silence, so a
// stall never declares deaths; a worker silent for worker_timeout of running time still dies.
// Fake clock, no network: the "stall" is the clock moving with no liveness check run.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/util/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/worker_liveness.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class CoordinatorStallTest : public ::testing::Test {
 protected:
  CoordinatorStallTest() {
    CoordinatorOptions o;
    o.clock = &clock_;
    o.worker_timeout = absl::Seconds(10);
    o.liveness_interval = absl::Seconds(1);
    o.log = [this](absl::string_view line) { log_.emplace_back(line); };
    coordinator_ = Coordinator::Create(o).value();
  }

  void Heartbeat(const std::string& address) {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(address);
    proto::WorkerHeartbeatResponse resp;
    absl::Status s = coordinator_->WorkerHeartbeat(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
  }

  // The ticker runs `ticks` times, one liveness_interval apart; `heartbeating` heartbeat
  // before each tick.
  void Tick(int ticks, const std::vector<std::string>& heartbeating) {
    for (int i = 0; i < ticks; ++i) {
      clock_.Advance(absl::Seconds(1));
      for (const std::string& w : heartbeating) Heartbeat(w);
      coordinator_->CheckWorkerLiveness();
    }
  }

  std::vector<bool> Alive() {
    proto::GetStatusRequest req;
    proto::GetStatusResponse resp;
    EXPECT_TRUE(coordinator_->GetStatus(req, &resp).ok());
    std::vector<bool> alive;
    for (const auto& w : resp.workers()) alive.push_back(w.alive());
    return alive;
  }

  int64_t LogLinesWith(const std::string& needle) const {
    int64_t n = 0;
    for (const std::string& line : log_) n += absl::StrContains(line, needle) ? 1 : 0;
    return n;
  }

  FakeClock clock_;
  std::vector<std::string> log_;
  std::unique_ptr<Coordinator> coordinator_;
};

// The coordinator stalls for three worker timeouts (no tick, no request): when it runs again,
// every worker is still alive, and those that heartbeat go on living; one that stays silent
// dies a full worker_timeout of running time later, not before.
TEST_F(CoordinatorStallTest, AStallOfTheCoordinatorItselfDeclaresNoDeaths) {
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  Tick(3, {"w1:1", "w2:1"});
  clock_.Advance(absl::Seconds(30));  // stalled: nobody could be heard
  coordinator_->CheckWorkerLiveness();
  EXPECT_THAT(Alive(), ElementsAre(true, true));
  EXPECT_EQ(LogLinesWith("is dead"), 0);
  EXPECT_EQ(LogLinesWith("coordinator stalled"), 1);
  // Running again: w2 stays silent. It had been silent 1 s before the stall; it dies once it
  // has been silent worker_timeout of running time.
  Tick(8, {"w1:1"});
  EXPECT_THAT(Alive(), ElementsAre(true, true));
  Tick(2, {"w1:1"});
  EXPECT_THAT(Alive(), ElementsAre(true, false));
  EXPECT_EQ(LogLinesWith("is dead"), 1);
}

// Without a stall, silence counts as before: ticks one interval apart see no stall.
TEST_F(CoordinatorStallTest, SilenceWhileTheCoordinatorRunsStillKills) {
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  Tick(11, {"w1:1"});
  EXPECT_THAT(Alive(), ElementsAre(true, false));
  EXPECT_EQ(LogLinesWith("coordinator stalled"), 0);
}

TEST(WorkerLivenessExcuseTest, AStallMovesEveryWatchedHeartbeatLaterAtMostToNow) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  WorkerLiveness l;
  l.Heartbeat(1, t0);
  l.Heartbeat(2, t0 + absl::Seconds(8));
  l.Heartbeat(3, t0 + absl::Seconds(2));
  l.Unwatch(3);
  l.Excuse(absl::Seconds(5), t0 + absl::Seconds(10));
  EXPECT_EQ(*l.LastHeartbeat(1), t0 + absl::Seconds(5));
  EXPECT_EQ(*l.LastHeartbeat(2), t0 + absl::Seconds(10));  // capped at now
  EXPECT_EQ(*l.LastHeartbeat(3), t0 + absl::Seconds(2));   // not watched: unchanged
  EXPECT_THAT(l.SilentSince(t0 + absl::Seconds(4)), IsEmpty());
  EXPECT_THAT(l.SilentSince(t0 + absl::Seconds(10)), ElementsAre(1, 2));
}

}  // namespace
}  // namespace sluice
