// Garbage collection in the coordinator (docs/SERVICE.md, "Scale of the control plane"):
// finished jobs' state (tasks, progress reports, consumers' completions, RANGES plans,
// versions) goes at finished_job_ttl, dead workers (and their liveness and arrival stamps) at
// dead_worker_ttl, so that every table returns to its size before the jobs and workers came.
// No network; a fake clock.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/util/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"

namespace sluice {
namespace {

std::string Describe(const Coordinator::TableSizes& t) {
  return absl::StrCat("workers ", t.workers, " jobs ", t.jobs, " tasks ", t.tasks,
                      " arrivals ", t.heartbeat_arrivals, " liveness ", t.liveness,
                      " dead_since ", t.dead_since, " finished_at ", t.finished_at,
                      " consumer_seen ", t.consumer_seen, " completed_by ", t.completed_by,
                      " ranges_jobs ", t.ranges_jobs, " failed_jobs ", t.failed_jobs,
                      " progress ", t.progress_tasks, " version_jobs ", t.version_jobs,
                      " version_workers ", t.version_workers, " datasets ", t.datasets,
                      " owners ", t.owners, " job_activity ", t.job_activity, " unused_since ",
                      t.unused_since, " max_worker_tasks ", t.max_worker_tasks);
}

class GarbageCollectionTest : public ::testing::Test {
 protected:
  GarbageCollectionTest() {
    CoordinatorOptions o;
    o.clock = &clock_;
    o.worker_timeout = absl::Seconds(10);
    o.finished_job_ttl = absl::Minutes(1);
    o.dead_worker_ttl = absl::Minutes(2);
    o.unused_dataset_ttl = absl::Minutes(1);  // the datasets go too (refcounted by their jobs)
    o.log = [](absl::string_view) {};
    coordinator_ = Coordinator::Create(o).value();
  }

  // A worker's heartbeat reporting its tasks (with progress) as a real worker does.
  proto::WorkerHeartbeatResponse Beat(const std::string& address, std::vector<int64_t> active,
                                      std::vector<int64_t> finished) {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(address);
    for (int64_t t : active) req.add_active_task_ids(t);
    for (int64_t t : finished) req.add_finished_task_ids(t);
    for (const auto* list : {&active, &finished}) {
      for (int64_t t : *list) {
        proto::TaskProgress* p = req.add_task_progress();
        p->set_task_id(t);
        p->set_steps_produced(3);
      }
    }
    proto::WorkerHeartbeatResponse resp;
    absl::Status s = coordinator_->WorkerHeartbeat(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  void Consumer(int64_t job, int64_t index, std::vector<int64_t> completed) {
    proto::ClientHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(job);
    req.set_consumer_index(index);
    for (int64_t t : completed) req.add_completed_task_ids(t);
    proto::ClientHeartbeatResponse resp;
    absl::Status s = coordinator_->ClientHeartbeat(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
  }

  int64_t Job(const std::string& pipeline, proto::ShardingPolicy policy, int64_t consumers,
              int64_t num_tasks) {
    proto::RegisterDatasetRequest reg;
    reg.set_wire_version(proto::WIRE_VERSION_1);
    reg.set_pipeline(pipeline);
    proto::RegisterDatasetResponse reg_resp;
    EXPECT_TRUE(coordinator_->RegisterDataset(reg, &reg_resp).ok());
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    proto::JobOptions* o = req.mutable_options();
    o->set_dataset_id(reg_resp.dataset_id());
    o->set_num_consumers(consumers);
    o->set_replicas_per_consumer(1);
    o->set_sharding_policy(policy);
    o->set_num_tasks(num_tasks);
    proto::GetOrCreateJobResponse resp;
    absl::Status s = coordinator_->GetOrCreateJob(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp.job_id();
  }

  static std::vector<int64_t> Ids(const proto::WorkerHeartbeatResponse& r) {
    std::vector<int64_t> out;
    for (const auto& t : r.new_tasks()) out.push_back(t.task_id());
    return out;
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(GarbageCollectionTest, EveryTableReturnsToItsBaselineAfterJobsFinishAndWorkersDie) {
  const Coordinator::TableSizes baseline = coordinator_->TEST_TableSizes();
  Beat("w1:1", {}, {});
  Beat("w2:1", {}, {});
  const int64_t coordinated = Job("range(40).batch(4)", proto::SHARDING_OFF, 2, 2);
  const int64_t ranges = Job("range(40).batch(4)", proto::SHARDING_RANGES, 1, 0);
  const std::vector<int64_t> on1 = Ids(Beat("w1:1", {}, {}));
  const std::vector<int64_t> on2 = Ids(Beat("w2:1", {}, {}));
  ASSERT_EQ(on1.size() + on2.size(), 3u);  // two coordinated tasks, one range
  // Consumers report ends (one of two consumers: kept in completed_by), workers report
  // progress, then every task finishes on its worker.
  Consumer(coordinated, 0, on1);
  Consumer(coordinated, 1, {});
  Consumer(ranges, 0, {});
  Beat("w1:1", on1, {});
  Beat("w2:1", on2, {});
  const Coordinator::TableSizes busy = coordinator_->TEST_TableSizes();
  EXPECT_EQ(busy.jobs, 2u);
  EXPECT_EQ(busy.progress_tasks, 3u);
  EXPECT_GE(busy.completed_by, 1u);
  EXPECT_EQ(busy.ranges_jobs, 1u);
  Beat("w1:1", {}, on1);
  Beat("w2:1", {}, on2);
  // Finished tasks keep no pipeline (a long RANGES job would keep one per range).
  int created = 0;
  const proto::StateSnapshot snapshot = coordinator_->Snapshot();
  for (const proto::Update& u : snapshot.updates()) {
    if (!u.has_create_task()) continue;
    ++created;
    EXPECT_EQ(u.create_task().dataset().ByteSizeLong(), 0u) << u.create_task().task_id();
  }
  EXPECT_EQ(created, 3);

  // The jobs are removed finished_job_ttl later; the workers, still heartbeating their
  // finished tasks (with progress) until told to stop them, leave no report behind.
  for (int i = 0; i < 7; ++i) {
    clock_.Advance(absl::Seconds(9));
    Beat("w1:1", {}, on1);
    Beat("w2:1", {}, on2);
    coordinator_->CheckWorkerLiveness();
  }
  Coordinator::TableSizes after_jobs = coordinator_->TEST_TableSizes();
  EXPECT_EQ(after_jobs.jobs, 0u) << Describe(after_jobs);
  EXPECT_EQ(after_jobs.tasks, 0u);
  EXPECT_EQ(after_jobs.progress_tasks, 0u) << Describe(after_jobs);
  EXPECT_EQ(after_jobs.completed_by, 0u);
  EXPECT_EQ(after_jobs.workers, 2u);

  // The workers fall silent: dead after worker_timeout, forgotten dead_worker_ttl later.
  clock_.Advance(absl::Seconds(11));
  coordinator_->CheckWorkerLiveness();
  EXPECT_EQ(coordinator_->TEST_TableSizes().dead_since, 2u);
  clock_.Advance(absl::Minutes(1));
  coordinator_->CheckWorkerLiveness();
  EXPECT_EQ(coordinator_->TEST_TableSizes().workers, 2u) << "not yet: dead_worker_ttl is 2 min";
  clock_.Advance(absl::Minutes(1));
  coordinator_->CheckWorkerLiveness();
  const Coordinator::TableSizes end = coordinator_->TEST_TableSizes();
  EXPECT_TRUE(end == baseline) << "baseline: " << Describe(baseline) << "\nend: " << Describe(end);

  // A forgotten worker's address registers again, as a new worker.
  Beat("w1:1", {}, {});
  proto::GetStatusResponse status;
  ASSERT_TRUE(coordinator_->GetStatus(proto::GetStatusRequest(), &status).ok());
  ASSERT_EQ(status.workers_size(), 1);
  EXPECT_EQ(status.workers(0).worker_id(), 3);
  EXPECT_TRUE(status.workers(0).alive());
}

// Only finished jobs are looked at for collection (not every job on every request): a job
// that finishes among unfinished ones still goes exactly finished_job_ttl after it finished,
// and the unfinished ones stay.
TEST_F(GarbageCollectionTest, AFinishedJobAmongUnfinishedOnesIsRemovedAtItsTtl) {
  Beat("w1:1", {}, {});
  std::vector<int64_t> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(Job("range(40).batch(4)", proto::SHARDING_OFF, 1, 1));
  const proto::WorkerHeartbeatResponse assigned = Beat("w1:1", {}, {});
  ASSERT_EQ(assigned.new_tasks_size(), 4);
  const int64_t done_job = jobs[2];
  int64_t done_task = 0;
  std::vector<int64_t> running;
  for (const proto::TaskDef& t : assigned.new_tasks()) {
    if (t.job_id() == done_job) {
      done_task = t.task_id();
    } else {
      running.push_back(t.task_id());
    }
  }
  ASSERT_NE(done_task, 0);
  clock_.Advance(absl::Seconds(5));
  Beat("w1:1", running, {done_task});  // the job finishes now
  EXPECT_EQ(coordinator_->TEST_TableSizes().finished_at, 1u);
  for (int i = 0; i < 11; ++i) {  // 55 s: not yet
    clock_.Advance(absl::Seconds(5));
    Beat("w1:1", running, {});
  }
  for (int64_t j : jobs) Consumer(j, 0, {});  // all still there
  clock_.Advance(absl::Seconds(5));  // 60 s: finished_job_ttl
  Beat("w1:1", running, {});
  for (int64_t j : jobs) {
    proto::ClientHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(j);
    req.set_consumer_index(0);
    proto::ClientHeartbeatResponse resp;
    const absl::Status s = coordinator_->ClientHeartbeat(req, &resp);
    if (j == done_job) {
      EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
      EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("was finished and removed"));
    } else {
      EXPECT_TRUE(s.ok()) << "job " << j << ": " << s;
    }
  }
  const Coordinator::TableSizes after = coordinator_->TEST_TableSizes();
  EXPECT_EQ(after.jobs, 3u) << Describe(after);
  EXPECT_EQ(after.finished_at, 0u) << Describe(after);
}

TEST_F(GarbageCollectionTest, ADeadWorkerThatATaskNamesIsKept) {
  // The failure policy counts the workers that died running a task: the task names them, so
  // they stay until the task's job is removed.
  Beat("w1:1", {}, {});
  const int64_t job = Job("range(40).batch(4)", proto::SHARDING_OFF, 1, 1);
  (void)job;
  const std::vector<int64_t> tasks = Ids(Beat("w1:1", {}, {}));
  ASSERT_EQ(tasks.size(), 1u);
  clock_.Advance(absl::Seconds(11));
  coordinator_->CheckWorkerLiveness();  // dead with the task unfinished: the task names it
  Beat("w2:1", {}, {});                 // takes the task over
  for (int i = 0; i < 30; ++i) {
    clock_.Advance(absl::Seconds(9));
    Beat("w2:1", tasks, {});
    coordinator_->CheckWorkerLiveness();
  }
  EXPECT_EQ(coordinator_->TEST_TableSizes().workers, 2u);
  Beat("w2:1", {}, tasks);  // finished: the job goes at finished_job_ttl, then worker 1
  for (int i = 0; i < 30; ++i) {
    clock_.Advance(absl::Seconds(9));
    Beat("w2:1", {}, {});
    coordinator_->CheckWorkerLiveness();
  }
  const Coordinator::TableSizes end = coordinator_->TEST_TableSizes();
  EXPECT_EQ(end.workers, 1u) << Describe(end);
  EXPECT_EQ(end.jobs, 0u);
}

}  // namespace
}  // namespace sluice
