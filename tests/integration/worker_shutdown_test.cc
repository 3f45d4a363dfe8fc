// A worker busy in an expensive pipeline exits 0 soon after SIGTERM (issue 28: a worker took
// more than 30 s in 2 of 8 adversarial runs): the drain cancels its tasks' pipelines
// (core/data/cancellation.h) instead of waiting for the step in progress to finish.
//
// The pipeline, `range(10**12).filter(less(3)).batch(2)`, gives step 0 at once and then scans
// for a fourth element that never comes: once the consumer has step 0, the worker is inside a
// step that does not end by itself (~10^12 elements). Without cancellation the worker never
// exits; the wait for it is bounded by a generous multiple of its --drain_timeout.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/integration/process_cluster.h"

namespace sluice {
namespace {

// ProcessCluster's workers run with --drain_timeout=5s: the drain's own bound (half of it for
// the coordinator, the rest for streams to end). Everything after it (cancelling the step,
// freeing the pipeline, leaving main) takes one input pull per op; the rest of the bound is
// room for a loaded machine.
constexpr absl::Duration kDrainTimeout = absl::Seconds(5);
const absl::Duration kExitBound = 3 * kDrainTimeout + absl::Seconds(30);

// Starts a cluster of one worker and a consumer of the endless step; returns once the
// consumer has step 0 (the worker is then mid-step).
void StartBusyWorker(std::unique_ptr<ProcessCluster>* cluster,
                     std::unique_ptr<Subprocess>* consumer) {
  ProcessClusterOptions o;
  o.num_workers = 1;
  auto started = ProcessCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  *cluster = *std::move(started);
  auto p = StartSluicectl({"run", "--coordinator=" + (*cluster)->coordinator(), "--job=busy",
                           "--pipeline=range(1000000000000).filter(less(3)).batch(2)",
                           "--format=json", "--retry_deadline=120s"});
  ASSERT_TRUE(p.ok()) << p.status();
  *consumer = *std::move(p);
  auto first = (*consumer)->WaitForOutput(SubprocessStream::kStdout, "\"step\": 0",
                                          absl::Seconds(60));
  ASSERT_TRUE(first.ok()) << first.status() << (*cluster)->Logs();
}

TEST(WorkerShutdownTest, SigtermStopsAWorkerInTheMiddleOfAnEndlessStep) {
  std::unique_ptr<ProcessCluster> cluster;
  std::unique_ptr<Subprocess> consumer;
  ASSERT_NO_FATAL_FAILURE(StartBusyWorker(&cluster, &consumer));
  // The coordinator answers the drain: the worker closes its task (cancelling the step).
  const absl::Status stopped = cluster->TerminateWorker(0, kExitBound);
  EXPECT_TRUE(stopped.ok()) << stopped;
  ASSERT_TRUE(consumer->Signal(SIGKILL).ok());
  const absl::Status all = cluster->StopAll();
  EXPECT_TRUE(all.ok()) << all;
}

TEST(WorkerShutdownTest, SigtermWithoutACoordinatorStopsAWorkerInTheMiddleOfAnEndlessStep) {
  std::unique_ptr<ProcessCluster> cluster;
  std::unique_ptr<Subprocess> consumer;
  ASSERT_NO_FATAL_FAILURE(StartBusyWorker(&cluster, &consumer));
  // No coordinator to tell: the worker stops producing (cancelling the step) and serves what
  // it has buffered until the drain timeout.
  ASSERT_TRUE(cluster->KillCoordinator().ok());
  const absl::Status stopped = cluster->TerminateWorker(0, kExitBound);
  EXPECT_TRUE(stopped.ok()) << stopped;
  ASSERT_TRUE(consumer->Signal(SIGKILL).ok());
}

}  // namespace
}  // namespace sluice
