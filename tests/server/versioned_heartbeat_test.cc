// Versioned heartbeat answers (docs/SERVICE.md, "Versioned heartbeats"): a caller that sends
// back the version of the last answer it applied gets only what changed since; an unknown
// version (none, another incarnation after a restart, too old) gets a full answer. No
// network; a fake clock.
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/util/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "tests/server/server_test_util.h"
#include "server/heartbeat_versions.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<int64_t> TaskIds(const proto::ClientHeartbeatResponse& r) {
  std::vector<int64_t> out;
  for (const proto::TaskInfo& t : r.tasks()) out.push_back(t.task_id());
  return out;
}

std::vector<int64_t> NewTaskIds(const proto::WorkerHeartbeatResponse& r) {
  std::vector<int64_t> out;
  for (const proto::TaskDef& t : r.new_tasks()) out.push_back(t.task_id());
  return out;
}

class VersionedHeartbeatTest : public ::testing::Test {
 protected:
  CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.clock = &clock_;
    o.worker_timeout = absl::Seconds(10);
    o.ranges_per_worker = 1;
    o.log = [](absl::string_view) {};
    return o;
  }

  void Use(std::unique_ptr<Coordinator> c) { coordinator_ = std::move(c); }

  proto::WorkerHeartbeatResponse Worker(const std::string& address,
                                        std::vector<int64_t> active = {},
                                        std::vector<int64_t> finished = {},
                                        const proto::WorkerHeartbeatResponse* known = nullptr) {
    proto::WorkerHeartbeatRequest req = server_test::HeartbeatRequestFrom(address, known);
    for (int64_t t : active) req.add_active_task_ids(t);
    for (int64_t t : finished) req.add_finished_task_ids(t);
    return server_test::HeartbeatExpectingOk(*coordinator_, req);
  }

  proto::ClientHeartbeatResponse Client(int64_t job_id,
                                        const proto::ClientHeartbeatResponse* known = nullptr) {
    proto::ClientHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(job_id);
    req.set_consumer_index(0);
    if (known != nullptr) {
      req.set_known_incarnation(known->incarnation());
      req.set_known_version(known->version());
    }
    proto::ClientHeartbeatResponse resp;
    absl::Status s = coordinator_->ClientHeartbeat(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  std::string Register(const std::string& pipeline) {
    proto::RegisterDatasetRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_pipeline(pipeline);
    proto::RegisterDatasetResponse resp;
    EXPECT_TRUE(coordinator_->RegisterDataset(req, &resp).ok());
    return resp.dataset_id();
  }

  int64_t Job(const std::string& name, proto::JobOptions o) {
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_name(name);
    *req.mutable_options() = std::move(o);
    proto::GetOrCreateJobResponse resp;
    absl::Status s = coordinator_->GetOrCreateJob(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp.job_id();
  }

  static proto::JobOptions Static(const std::string& ds, int64_t num_tasks) {
    proto::JobOptions o;
    o.set_dataset_id(ds);
    o.set_num_consumers(1);
    o.set_replicas_per_consumer(1);
    o.set_sharding_policy(proto::SHARDING_OFF);
    o.set_num_tasks(num_tasks);
    return o;
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(VersionedHeartbeatTest, AClientGetsOnlyTheTasksThatChangedSinceItsVersion) {
  Use(Coordinator::Create(Options()).value());
  Worker("w1:1");
  const std::string ds = Register("range(100).batch(10)");  // 10 steps
  proto::JobOptions o = Static(ds, 0);
  o.set_sharding_policy(proto::SHARDING_RANGES);
  o.mutable_order()->set_range_steps(2);  // 5 ranges, one at a time on the one worker
  const int64_t job = Job("ranges", o);

  // No version: a full answer (the one range made so far).
  const proto::ClientHeartbeatResponse first = Client(job);
  EXPECT_FALSE(first.delta());
  ASSERT_EQ(first.tasks_size(), 1);
  const int64_t range0 = first.tasks(0).task_id();
  EXPECT_NE(first.incarnation(), 0u);

  // Nothing changed: a delta with no task.
  const proto::ClientHeartbeatResponse second = Client(job, &first);
  EXPECT_TRUE(second.delta());
  EXPECT_THAT(TaskIds(second), IsEmpty());
  EXPECT_THAT(second.removed_task_ids(), IsEmpty());
  EXPECT_EQ(second.num_tasks(), 5);

  // The worker finishes range 0: range 1 is made. Exactly that one is new, range 0 leaves.
  const proto::WorkerHeartbeatResponse w = Worker("w1:1");
  ASSERT_THAT(NewTaskIds(w), ElementsAre(range0));
  const proto::WorkerHeartbeatResponse w2 = Worker("w1:1", {}, {range0}, &w);
  ASSERT_EQ(w2.new_tasks_size(), 1);
  const int64_t range1 = w2.new_tasks(0).task_id();
  const proto::ClientHeartbeatResponse third = Client(job, &second);
  EXPECT_TRUE(third.delta());
  EXPECT_THAT(TaskIds(third), ElementsAre(range1));
  EXPECT_EQ(third.tasks(0).task_index(), 1);
  EXPECT_EQ(third.tasks(0).worker_address(), "w1:1");
  EXPECT_THAT(third.removed_task_ids(), ElementsAre(range0));
  EXPECT_EQ(third.num_tasks_created(), 2);

  // An old version still known gets every change since it, a full answer lists the same.
  const proto::ClientHeartbeatResponse from_first = Client(job, &first);
  EXPECT_TRUE(from_first.delta());
  EXPECT_THAT(TaskIds(from_first), ElementsAre(range1));
  EXPECT_THAT(TaskIds(Client(job)), ElementsAre(range1));
}

TEST_F(VersionedHeartbeatTest, AMovedTaskIsTheOnlyOneInTheDelta) {
  Use(Coordinator::Create(Options()).value());
  Worker("w1:1");
  Worker("w2:1");
  const int64_t job = Job("static", Static(Register("range(40).batch(2)"), 4));
  const proto::ClientHeartbeatResponse first = Client(job);
  ASSERT_EQ(first.tasks_size(), 4);
  std::vector<int64_t> on_w2;
  for (const proto::TaskInfo& t : first.tasks()) {
    if (t.worker_address() == "w2:1") on_w2.push_back(t.task_id());
  }
  ASSERT_EQ(on_w2.size(), 2u);
  // w2 falls silent and dies: its two tasks move to w1, the others did not change.
  clock_.Advance(absl::Seconds(6));
  Worker("w1:1");
  clock_.Advance(absl::Seconds(6));
  Worker("w1:1");
  const proto::ClientHeartbeatResponse moved = Client(job, &first);
  EXPECT_TRUE(moved.delta());
  EXPECT_THAT(TaskIds(moved), ElementsAre(on_w2[0], on_w2[1]));
  for (const proto::TaskInfo& t : moved.tasks()) EXPECT_EQ(t.worker_address(), "w1:1");
}

TEST_F(VersionedHeartbeatTest, AWorkerWithAnUnchangedAssignmentGetsNoTaskAgain) {
  Use(Coordinator::Create(Options()).value());
  Worker("w1:1");
  const std::string ds = Register("range(40).batch(2)");
  Job("a", Static(ds, 1));
  const proto::WorkerHeartbeatResponse first = Worker("w1:1");
  ASSERT_EQ(first.new_tasks_size(), 1);
  const int64_t a = first.new_tasks(0).task_id();
  // Even a request that does not list the task gets nothing: its version says it has it.
  const proto::WorkerHeartbeatResponse second = Worker("w1:1", {}, {}, &first);
  EXPECT_THAT(NewTaskIds(second), IsEmpty());
  // Without a version, the unlisted task comes again (the request is all there is).
  EXPECT_THAT(NewTaskIds(Worker("w1:1")), ElementsAre(a));
  // A new assignment: exactly the new task.
  Job("b", Static(ds, 1));
  const proto::WorkerHeartbeatResponse third = Worker("w1:1", {a}, {}, &second);
  ASSERT_EQ(third.new_tasks_size(), 1);
  EXPECT_NE(third.new_tasks(0).task_id(), a);
  EXPECT_THAT(NewTaskIds(Worker("w1:1", {a}, {}, &third)), IsEmpty());
}

TEST_F(VersionedHeartbeatTest, ARestartedCoordinatorAnswersInFull) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/sluice_versions_", getpid());
  std::system(absl::StrCat("rm -rf ", dir).c_str());
  CoordinatorOptions o = Options();
  o.work_dir = dir;
  auto c = Coordinator::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  Use(*std::move(c));
  Worker("w1:1");
  const int64_t job = Job("static", Static(Register("range(40).batch(2)"), 2));
  const proto::ClientHeartbeatResponse first = Client(job);
  const proto::WorkerHeartbeatResponse w = Worker("w1:1");
  ASSERT_EQ(w.new_tasks_size(), 2);
  EXPECT_TRUE(Client(job, &first).delta());

  coordinator_.reset();  // a restart: the journal brings the job back
  auto again = Coordinator::Create(o);
  ASSERT_TRUE(again.ok()) << again.status();
  Use(*std::move(again));
  const proto::ClientHeartbeatResponse after = Client(job, &first);
  EXPECT_FALSE(after.delta());
  EXPECT_NE(after.incarnation(), first.incarnation());
  EXPECT_EQ(after.tasks_size(), 2);
  // The worker's version is unknown too: it gets its unlisted tasks again.
  EXPECT_EQ(Worker("w1:1", {}, {}, &w).new_tasks_size(), 2);
  std::system(absl::StrCat("rm -rf ", dir).c_str());
}

TEST(HeartbeatVersionsTest, ACallerOlderThanTheLogGetsAFullAnswer) {
  HeartbeatVersions v(7);
  v.TaskChanged(1, 10);
  const uint64_t after_first = v.version();
  EXPECT_THAT(*v.JobChangesSince(1, after_first), IsEmpty());
  EXPECT_FALSE(v.JobChangesSince(1, 0).has_value());
  for (size_t i = 0; i < HeartbeatVersions::kMaxJobLog; ++i) v.TaskChanged(1, 11);
  EXPECT_FALSE(v.JobChangesSince(1, after_first).has_value()) << "dropped from the log";
  EXPECT_THAT(*v.JobChangesSince(1, v.version() - 1), ElementsAre(11));
  EXPECT_THAT(*v.JobChangesSince(2, after_first), IsEmpty()) << "another job: no change";
  v.Reset(8);
  EXPECT_FALSE(v.JobChangesSince(1, after_first).has_value()) << "before this incarnation";
  EXPECT_EQ(v.tracked_jobs(), 0u);
}

}  // namespace
}  // namespace sluice
