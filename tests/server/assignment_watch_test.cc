// Assignment watches (docs/SERVICE.md, "Assignment watch"): the registry (AssignmentWatchers:
// answered once, bounded, expired, closed) and the coordinator's WatchAssignment, which answers
// a worker's watch when a task is assigned to it after the version it watches from, so that
// the task does not wait for the worker's next heartbeat. No network; a fake clock.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/util/clock.h"
#include "gtest/gtest.h"
#include "server/assignment_watchers.h"
#include "server/coordinator.h"
#include "tests/server/server_test_util.h"

namespace sluice {
namespace {

// Records a watch's answer; answered more than once fails the test.
struct Answer {
  std::optional<bool> changed;
  AssignmentWatchers::Done Callback() {
    return [this](bool c) {
      EXPECT_FALSE(changed.has_value()) << "a watch was answered twice";
      changed = c;
    };
  }
};

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(AssignmentWatchersTest, NotifyAnswersOnlyThatWorkersWatchesTrue) {
  AssignmentWatchers w(16);
  Answer a, b;
  ASSERT_TRUE(w.Add(1, kT0, a.Callback()).ok());
  ASSERT_TRUE(w.Add(2, kT0, b.Callback()).ok());
  w.Notify(1);
  EXPECT_EQ(a.changed, true);
  EXPECT_FALSE(b.changed.has_value());
  w.Notify(1);  // nothing left for it: no second answer
  EXPECT_EQ(w.size(), 1u);
  w.NotifyAll();
  EXPECT_EQ(b.changed, true);
  EXPECT_EQ(w.size(), 0u);
}

TEST(AssignmentWatchersTest, ExpiresAtTheDeadlineWithFalse) {
  AssignmentWatchers w(16);
  Answer early, late;
  ASSERT_TRUE(w.Add(1, kT0 + absl::Seconds(1), early.Callback()).ok());
  ASSERT_TRUE(w.Add(2, kT0 + absl::Seconds(5), late.Callback()).ok());
  w.ExpireUntil(kT0);
  EXPECT_FALSE(early.changed.has_value());
  w.ExpireUntil(kT0 + absl::Seconds(1));
  EXPECT_EQ(early.changed, false);
  EXPECT_FALSE(late.changed.has_value());
  w.ExpireUntil(kT0 + absl::Seconds(5));
  EXPECT_EQ(late.changed, false);
  EXPECT_EQ(w.size(), 0u);
}

TEST(AssignmentWatchersTest, BoundedOverallAndPerWorker) {
  AssignmentWatchers w(3);
  Answer a1, a2, a3, b1, c1;
  ASSERT_TRUE(w.Add(1, kT0, a1.Callback()).ok());
  ASSERT_TRUE(w.Add(1, kT0, a2.Callback()).ok());
  // A third watch of worker 1 supersedes its oldest (answered false), the count stays 2.
  ASSERT_TRUE(w.Add(1, kT0, a3.Callback()).ok());
  EXPECT_EQ(a1.changed, false);
  EXPECT_FALSE(a2.changed.has_value());
  EXPECT_EQ(w.size(), AssignmentWatchers::kMaxPerWorker);
  ASSERT_TRUE(w.Add(2, kT0, b1.Callback()).ok());
  // Full: another worker's watch is refused, and its callback never runs.
  absl::StatusOr<uint64_t> refused = w.Add(3, kT0, c1.Callback());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("max_assignment_watches 3"), std::string::npos)
      << refused.status();
  EXPECT_FALSE(c1.changed.has_value());
  EXPECT_EQ(w.size(), 3u);
}

TEST(AssignmentWatchersTest, CancelAndCloseAnswerFalseAndCloseRefusesNewWatches) {
  AssignmentWatchers w(16);
  Answer a, b, c;
  absl::StatusOr<uint64_t> id = w.Add(1, kT0, a.Callback());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(w.Add(1, kT0, b.Callback()).ok());
  w.Cancel(*id);
  EXPECT_EQ(a.changed, false);
  EXPECT_FALSE(b.changed.has_value());
  w.Cancel(*id);  // already answered: nothing
  w.Close();
  EXPECT_EQ(b.changed, false);
  EXPECT_EQ(w.Add(1, kT0, c.Callback()).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(c.changed.has_value());
}

class CoordinatorWatchTest : public ::testing::Test {
 protected:
  CoordinatorWatchTest() {
    CoordinatorOptions o;
    o.clock = &clock_;
    o.log = [](absl::string_view) {};
    o.max_assignment_watch = absl::Seconds(30);
    coordinator_ = Coordinator::Create(o).value();
  }

  proto::WorkerHeartbeatResponse Heartbeat(const std::string& address,
                                           const proto::WorkerHeartbeatResponse* known) {
    proto::WorkerHeartbeatRequest req = server_test::HeartbeatRequestFrom(address, known);
    req.set_process_incarnation(kIncarnation);
    return server_test::HeartbeatExpectingOk(*coordinator_, req);
  }

  absl::StatusOr<uint64_t> Watch(const std::string& address,
                                 const proto::WorkerHeartbeatResponse& known, Answer* answer,
                                 int64_t wait_ms = 0, uint64_t incarnation = kIncarnation) {
    proto::WatchAssignmentRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(address);
    req.set_process_incarnation(incarnation);
    req.set_known_incarnation(known.incarnation());
    req.set_known_version(known.version());
    req.set_wait_ms(wait_ms);
    return coordinator_->WatchAssignment(req, answer->Callback());
  }

  int64_t CreateJob() {
    proto::RegisterDatasetRequest reg;
    reg.set_wire_version(proto::WIRE_VERSION_1);
    reg.set_pipeline("range(20).batch(4)");
    proto::RegisterDatasetResponse ds;
    EXPECT_TRUE(coordinator_->RegisterDataset(reg, &ds).ok());
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    proto::JobOptions* o = req.mutable_options();
    o->set_dataset_id(ds.dataset_id());
    o->set_num_consumers(1);
    o->set_replicas_per_consumer(1);
    o->set_sharding_policy(proto::SHARDING_OFF);
    o->set_num_tasks(1);
    proto::GetOrCreateJobResponse resp;
    absl::Status s = coordinator_->GetOrCreateJob(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp.job_id();
  }

  static constexpr uint64_t kIncarnation = 0x5eed;
  FakeClock clock_;
  std::unique_ptr<Coordinator> coordinator_;
};

// The point of the watch: a job made after the worker's last heartbeat answers the watch while
// the job is created (no heartbeat in between, no time passing), and the worker's next
// heartbeat, from the version it watched, carries the task.
TEST_F(CoordinatorWatchTest, ATaskAssignedAfterTheLastHeartbeatAnswersTheWatchAtOnce) {
  const proto::WorkerHeartbeatResponse registered = Heartbeat("w1:1", nullptr);
  EXPECT_EQ(registered.new_tasks_size(), 0);
  Answer answer;
  absl::StatusOr<uint64_t> id = Watch("w1:1", registered, &answer);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_NE(*id, 0u);
  EXPECT_FALSE(answer.changed.has_value()) << "nothing changed yet";
  EXPECT_EQ(coordinator_->assignment_watches(), 1u);

  const int64_t job = CreateJob();
  EXPECT_EQ(answer.changed, true) << "the watch was not answered when the task was assigned";
  EXPECT_EQ(coordinator_->assignment_watches(), 0u);
  const proto::WorkerHeartbeatResponse next = Heartbeat("w1:1", &registered);
  ASSERT_EQ(next.new_tasks_size(), 1);
  EXPECT_EQ(next.new_tasks(0).job_id(), job);

  // Up to date again: the next watch waits, and runs out at its deadline with false.
  Answer idle;
  ASSERT_TRUE(Watch("w1:1", next, &idle, /*wait_ms=*/2000).ok());
  EXPECT_FALSE(idle.changed.has_value());
  clock_.Advance(absl::Seconds(1));
  coordinator_->CheckWorkerLiveness();
  EXPECT_FALSE(idle.changed.has_value());
  clock_.Advance(absl::Seconds(1));
  coordinator_->CheckWorkerLiveness();
  EXPECT_EQ(idle.changed, false);
}

TEST_F(CoordinatorWatchTest, AStaleVersionOrIncarnationIsAnsweredAtOnce) {
  const proto::WorkerHeartbeatResponse registered = Heartbeat("w1:1", nullptr);
  CreateJob();
  // Watching from before the job: answered at once, nothing registered.
  Answer stale;
  absl::StatusOr<uint64_t> id = Watch("w1:1", registered, &stale);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, 0u);
  EXPECT_EQ(stale.changed, true);
  // Another coordinator incarnation's version: unknown, answered at once too.
  proto::WorkerHeartbeatResponse other = Heartbeat("w1:1", &registered);
  other.set_incarnation(other.incarnation() + 1);
  Answer foreign;
  ASSERT_TRUE(Watch("w1:1", other, &foreign).ok());
  EXPECT_EQ(foreign.changed, true);
  EXPECT_EQ(coordinator_->assignment_watches(), 0u);
}

TEST_F(CoordinatorWatchTest, RefusesUnknownWorkersReplacedProcessesAndBadRequests) {
  const proto::WorkerHeartbeatResponse registered = Heartbeat("w1:1", nullptr);
  Answer a;
  EXPECT_EQ(Watch("w9:9", registered, &a).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<uint64_t> replaced =
      Watch("w1:1", registered, &a, /*wait_ms=*/0, /*incarnation=*/kIncarnation + 1);
  EXPECT_EQ(replaced.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Watch("w1:1", registered, &a, /*wait_ms=*/-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  proto::WatchAssignmentRequest no_address;
  no_address.set_wire_version(proto::WIRE_VERSION_1);
  EXPECT_EQ(coordinator_->WatchAssignment(no_address, a.Callback()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(a.changed.has_value());
  EXPECT_EQ(coordinator_->assignment_watches(), 0u);
}

TEST_F(CoordinatorWatchTest, AWorkersDeathAndClosingAnswerItsWatch) {
  const proto::WorkerHeartbeatResponse w1 = Heartbeat("w1:1", nullptr);
  const proto::WorkerHeartbeatResponse w2 = Heartbeat("w2:2", nullptr);
  Answer dies, stays;
  ASSERT_TRUE(Watch("w1:1", w1, &dies).ok());
  ASSERT_TRUE(Watch("w2:2", w2, &stays).ok());
  // w1 falls silent past the worker timeout (default 10 s) while w2 heartbeats: w1's
  // assignment changed (it is dead), w2's did not.
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(absl::Seconds(1));
    Heartbeat("w2:2", &w2);
  }
  coordinator_->CheckWorkerLiveness();
  EXPECT_EQ(dies.changed, true);
  EXPECT_FALSE(stays.changed.has_value());
  coordinator_->CloseAssignmentWatches();
  EXPECT_EQ(stays.changed, false);
}

}  // namespace
}  // namespace sluice
