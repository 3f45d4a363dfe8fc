// A worker reports a finished task at once, woken by the task's buffer (worker/worker_server.h),
// not at its next heartbeat and not by polling. The worker here heartbeats once an hour: its
// first heartbeat registers it and hands it the task of a job whose worker died; after that,
// the coordinator can learn what the task delivered only from a heartbeat the task's end
// triggers.
#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "sluice/service.h"
#include "sluice/strategy.h"
#include "tests/worker/in_process_cluster.h"
#include "worker/worker_server.h"

namespace sluice {
namespace {

// The job's status as the coordinator has it, or nullptr.
const proto::JobStatus* FindJob(const proto::GetStatusResponse& status, const std::string& name) {
  for (const proto::JobStatus& j : status.jobs()) {
    if (j.job_name() == name) return &j;
  }
  return nullptr;
}

TEST(ServiceFinishReportTest, AFinishedTaskIsReportedWithoutWaitingForTheNextHeartbeat) {
  // Worker 0 heartbeats as usual (a job needs a live worker to be made); the next ones once an
  // hour.
  int started = 0;
  Cluster cluster(1, /*worker_timeout=*/absl::Milliseconds(500), size_t{64} << 20,
                  [&started](WorkerServerOptions* w) {
                    if (started++ == 0) return;
                    w->heartbeat_interval = absl::Hours(1);
                    w->heartbeat_jitter = 0;
                  });
  constexpr int64_t kSteps = 30;
  const Dataset ds = Dataset::Range(kSteps * 4).Batch(4);
  ServiceOptions options;
  options.coordinator_address = cluster.address();
  options.job_name = "report";
  options.sharding_policy = ServiceShardingPolicy::kOff;
  options.num_tasks = 1;
  auto strategy = MirroredStrategy::Create({"CPU:0"});
  ASSERT_TRUE(strategy.ok());
  // The job is made with its task on worker 0, which then stops: once the coordinator has
  // declared it dead, the task waits for a worker.
  auto dist = DistributeDatasetFromService(*strategy, ds, options);
  ASSERT_TRUE(dist.ok()) << dist.status();
  cluster.worker(0)->Stop();
  bool dead = false;
  for (int i = 0; i < 6000 && !dead; ++i) {
    proto::GetStatusResponse status;
    ASSERT_TRUE(cluster.coordinator().GetStatus({}, &status).ok());
    ASSERT_EQ(status.workers_size(), 1);
    dead = !status.workers(0).alive();
    if (!dead) absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(dead);
  // Worker 1's first heartbeat registers it and hands it the task; its next is an hour away.
  cluster.AddWorker();
  auto it = dist->MakeIterator();
  ASSERT_TRUE(it.ok()) << it.status();
  int64_t read = 0;
  for (; read <= kSteps; ++read) {
    auto x = it->GetNext();
    if (!x.ok()) {
      ASSERT_EQ(x.status().code(), absl::StatusCode::kOutOfRange) << x.status();
      break;
    }
  }
  ASSERT_EQ(read, kSteps);
  // The consumer has read the end: the worker's report of what the task delivered (which only
  // worker heartbeats carry) arrives well within the hour (bounded wait).
  int64_t delivered = 0;
  for (int i = 0; i < 6000 && delivered < kSteps; ++i) {
    proto::GetStatusResponse status;
    ASSERT_TRUE(cluster.coordinator().GetStatus({}, &status).ok());
    const proto::JobStatus* job = FindJob(status, "report");
    ASSERT_NE(job, nullptr);
    delivered = job->steps_delivered();
    if (delivered < kSteps) absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(delivered, kSteps);
}

// Likewise a task's first step (worker/worker_server.h): the coordinator's failure policy
// counts a worker's death against a task only while the task has produced no step there, so
// the worker says so at once instead of at its next heartbeat, an hour away here.
TEST(ServiceFinishReportTest, ATasksFirstStepIsReportedWithoutWaitingForTheNextHeartbeat) {
  int started = 0;
  Cluster cluster(1, /*worker_timeout=*/absl::Milliseconds(500), size_t{64} << 20,
                  [&started](WorkerServerOptions* w) {
                    if (started++ == 0) return;
                    w->heartbeat_interval = absl::Hours(1);
                    w->heartbeat_jitter = 0;
                  });
  const Dataset ds = Dataset::Range(400).Batch(4);
  ServiceOptions options;
  options.coordinator_address = cluster.address();
  options.job_name = "first-step";
  options.sharding_policy = ServiceShardingPolicy::kOff;
  options.num_tasks = 1;
  auto strategy = MirroredStrategy::Create({"CPU:0"});
  ASSERT_TRUE(strategy.ok());
  auto dist = DistributeDatasetFromService(*strategy, ds, options);
  ASSERT_TRUE(dist.ok()) << dist.status();
  cluster.worker(0)->Stop();
  int64_t before = -1;
  for (int i = 0; i < 6000 && before < 0; ++i) {
    proto::GetStatusResponse status;
    ASSERT_TRUE(cluster.coordinator().GetStatus({}, &status).ok());
    ASSERT_EQ(status.workers_size(), 1);
    if (!status.workers(0).alive()) {
      const proto::JobStatus* job = FindJob(status, "first-step");
      ASSERT_NE(job, nullptr);
      before = job->steps_produced();  // worker 0's, final now
    } else {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  ASSERT_GE(before, 0) << "worker 0 was never declared dead";
  // Worker 1's first heartbeat registers it and hands it the task; no consumer reads, and its
  // next regular heartbeat is an hour away: only the first-step report can raise the count.
  cluster.AddWorker();
  int64_t produced = before;
  for (int i = 0; i < 6000 && produced <= before; ++i) {
    proto::GetStatusResponse status;
    ASSERT_TRUE(cluster.coordinator().GetStatus({}, &status).ok());
    const proto::JobStatus* job = FindJob(status, "first-step");
    ASSERT_NE(job, nullptr);
    produced = job->steps_produced();
    if (produced <= before) absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_GT(produced, before);
}

}  // namespace
}  // namespace sluice
