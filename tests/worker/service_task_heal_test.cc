// Errors that heal (docs/SERVICE.md, "Failure policy"; issue 32), end to end on an in-process
// cluster: a task whose pipeline meets a transient error is given back and runs again (its
// consumers read every element once), an error local to one worker moves the task instead of
// failing the job, the same error on two workers fails it, and a slow pipeline build does not
// make its worker look dead. Builds are delayed or failed through WorkerServerOptions::
// executor.check_graph, which every pipeline build (and every DYNAMIC split) passes through.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/grpc_coordinator_service.h"
#include "sluice/service.h"
#include "tests/worker/in_process_cluster.h"
#include "worker/worker_server.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

using GraphCheck = std::function<absl::Status(const proto::DatasetDef&)>;

// Tunes the cluster's workers: worker i (in start order) gets check(i) as its graph check.
std::function<void(WorkerServerOptions*)> CheckPerWorker(std::function<GraphCheck(int)> check) {
  auto next = std::make_shared<std::atomic<int>>(0);
  return [next, check](WorkerServerOptions* o) { o->executor.check_graph = check((*next)++); };
}

// Deaths the coordinator declared while tasks ran (each leaves a TaskWorkerLostUpdate).
int64_t TaskWorkerLosses(Coordinator& coordinator) {
  int64_t n = 0;
  const proto::StateSnapshot snapshot = coordinator.Snapshot();
  for (const proto::Update& u : snapshot.updates()) n += u.has_task_worker_lost();
  return n;
}

ServiceOptions Options(const std::string& name) {
  ServiceOptions options;
  options.job_name = name;
  options.sharding_policy = ServiceShardingPolicy::kData;
  // Generous against what it waits out (a heartbeat interval of 100 ms, then a reconnect),
  // short enough that a wedged task (the bug) fails the test instead of hanging it.
  options.retry_deadline = absl::Seconds(30);
  return options;
}

// The "Why" of issue 32: a task whose pipeline ends with UNAVAILABLE (the coordinator down
// longer than GetSplit retries, a store unreachable) used to keep that error in its buffer
// forever: never reported, never moved, its consumers retrying until their deadline.
TEST(TaskHealClusterTest, ATaskThatMeetsATransientErrorIsGivenBackAndItsJobReadsEveryElementOnce) {
  auto transient_left = std::make_shared<std::atomic<int>>(1);
  Cluster cluster(2, absl::Seconds(10), size_t{64} << 20,
                  CheckPerWorker([transient_left](int) -> GraphCheck {
                    return [transient_left](const proto::DatasetDef&) {
                      if (transient_left->fetch_sub(1) > 0) {
                        return absl::UnavailableError("test: the store is unreachable");
                      }
                      return absl::OkStatus();
                    };
                  }));
  constexpr int64_t kN = 200;
  auto results = ConsumeAll(cluster.address(), Dataset::Range(kN).Batch(4),
                            Options("transient"), 2, 2);
  EXPECT_LE(transient_left->load(), 0);  // the error was met
  for (const Consumed& r : results) ASSERT_TRUE(r.status.ok()) << r.status;
  ExpectExactlyOnce(results, kN);
  EXPECT_EQ(TaskWorkerLosses(cluster.coordinator()), 0);  // no death counted
}

// The same, mid-stream in a DYNAMIC job: a split's build fails transiently after the task has
// delivered steps.
TEST(TaskHealClusterTest, ADynamicTaskWhoseSplitFailsTransientlyMidStreamRunsAgain) {
  auto builds = std::make_shared<std::atomic<int>>(0);
  Cluster cluster(2, absl::Seconds(10), size_t{64} << 20,
                  CheckPerWorker([builds](int) -> GraphCheck {
                    return [builds](const proto::DatasetDef&) {
                      if (builds->fetch_add(1) == 6) {
                        return absl::UnavailableError("test: GetSplit gave up");
                      }
                      return absl::OkStatus();
                    };
                  }));
  constexpr int64_t kN = 400;
  ServiceOptions options = Options("dynamic-transient");
  options.sharding_policy = ServiceShardingPolicy::kDynamic;
  auto results = ConsumeAll(cluster.address(), Dataset::Range(kN).Batch(4), options, 2, 2);
  EXPECT_GT(builds->load(), 6);
  for (const Consumed& r : results) ASSERT_TRUE(r.status.ok()) << r.status;
  ExpectExactlyOnce(results, kN);
}

// An error local to one worker (its memory taken by another job, its data root, a plugin it
// lacks) used to fail the whole job; now the task moves to a worker that can run it.
TEST(TaskHealClusterTest, AnErrorLocalToOneWorkerMovesTheTaskInsteadOfFailingTheJob) {
  Cluster cluster(2, absl::Seconds(10), size_t{64} << 20,
                  CheckPerWorker([](int worker) -> GraphCheck {
                    return [worker](const proto::DatasetDef&) {
                      if (worker == 0) {
                        return absl::ResourceExhaustedError(
                            "test: this worker's memory is taken by another job");
                      }
                      return absl::OkStatus();
                    };
                  }));
  constexpr int64_t kN = 200;
  auto results =
      ConsumeAll(cluster.address(), Dataset::Range(kN).Batch(4), Options("local"), 2, 2);
  for (const Consumed& r : results) ASSERT_TRUE(r.status.ok()) << r.status;
  ExpectExactlyOnce(results, kN);
}

// The same deterministic error on two workers is the pipeline's own: the job fails with it,
// naming both workers.
TEST(TaskHealClusterTest, TheSameErrorOnTwoWorkersFailsTheJob) {
  Cluster cluster(2, absl::Seconds(10), size_t{64} << 20,
                  CheckPerWorker([](int) -> GraphCheck {
                    return [](const proto::DatasetDef&) {
                      return absl::InvalidArgumentError("test: the pipeline is wrong everywhere");
                    };
                  }));
  auto results =
      ConsumeAll(cluster.address(), Dataset::Range(200).Batch(4), Options("everywhere"), 1, 2);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].status.code(), absl::StatusCode::kInvalidArgument) << results[0].status;
  EXPECT_THAT(std::string(results[0].status.message()),
              HasSubstr("the pipeline is wrong everywhere"));
}

// A slow pipeline build (a remote listing, a plugin loading) used to run on the heartbeat
// thread under the worker's lock: heartbeats stopped, and the coordinator declared the worker
// dead. The build is held here for three worker timeouts.
TEST(TaskHealClusterTest, ASlowPipelineBuildDoesNotMakeItsWorkerLookDead) {
  const absl::Duration worker_timeout = absl::Seconds(1);
  auto held = std::make_shared<std::atomic<bool>>(false);
  Cluster cluster(1, worker_timeout, size_t{64} << 20,
                  CheckPerWorker([held, worker_timeout](int) -> GraphCheck {
                    return [held, worker_timeout](const proto::DatasetDef&) {
                      if (!held->exchange(true)) absl::SleepFor(3 * worker_timeout);
                      return absl::OkStatus();
                    };
                  }));
  constexpr int64_t kN = 100;
  auto results =
      ConsumeAll(cluster.address(), Dataset::Range(kN).Batch(4), Options("slow-build"), 1, 1);
  EXPECT_TRUE(held->load());
  for (const Consumed& r : results) ASSERT_TRUE(r.status.ok()) << r.status;
  ExpectExactlyOnce(results, kN);
  EXPECT_EQ(TaskWorkerLosses(cluster.coordinator()), 0);
}

}  // namespace
}  // namespace sluice
