// Tasks reach their workers when they exist, not at the worker's next heartbeat
// (docs/SERVICE.md, "Assignment watch"). The workers here heartbeat once an hour (and the
// coordinator's worker timeout is as long): after its registering heartbeat a worker only
// heartbeats when its assignment watch is answered or a task of its own finishes. Every job
// below is made after the workers' last heartbeat, so without the watch its consumers would
// wait an hour for their first step and fail after retry_deadline without progress.
#include <atomic>
#include <future>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "sluice/service.h"
#include "tests/worker/in_process_cluster.h"
#include "worker/worker_server.h"

namespace sluice {
namespace {

constexpr absl::Duration kHour = absl::Hours(1);

void HeartbeatHourly(WorkerServerOptions* w) {
  w->heartbeat_interval = kHour;
  w->heartbeat_jitter = 0;
}

ServiceOptions Options(const std::string& job) {
  ServiceOptions o;
  o.job_name = job;
  // Bounds the wait for a task that never reaches its worker: the failure is an error, not a
  // hang. Under the coordinator's max_assignment_watch (30 s), after which an expired watch
  // would be watched again and answered as a poll: the test then fails instead of passing
  // late. Generous for what it waits out with the watch (milliseconds).
  o.retry_deadline = absl::Seconds(20);
  return o;
}

TEST(ServiceAssignmentWatchTest, JobsMadeAfterTheLastHeartbeatAreReadExactlyOnce) {
  Cluster cluster(2, /*worker_timeout=*/kHour, size_t{64} << 20, HeartbeatHourly);
  // Several jobs one after the other: each watch is answered, and watched again from the
  // version of the heartbeat it caused.
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    auto results = ConsumeAll(cluster.address(), Dataset::Range(60).Batch(4),
                              Options(absl::StrCat("static-", round)), /*consumers=*/2,
                              /*replicas=*/1);
    for (const Consumed& r : results) ASSERT_TRUE(r.status.ok()) << r.status;
    ExpectExactlyOnce(results, 60);
  }
}

TEST(ServiceAssignmentWatchTest, RangesMadeAsWorkersFinishReachTheOtherWorkerToo) {
  Cluster cluster(2, /*worker_timeout=*/kHour, size_t{64} << 20, HeartbeatHourly);
  // RANGES: one range per worker at a time; the ranges made when one worker finishes its range
  // go to whichever has room, the idle one included, which learns it through its watch.
  ServiceOptions o = Options("ranges");
  o.sharding_policy = ServiceShardingPolicy::kRanges;
  o.order.range_steps = 2;
  auto results = ConsumeAll(cluster.address(), Dataset::Range(96).Batch(4), o, /*consumers=*/1,
                            /*replicas=*/2);
  ASSERT_TRUE(results[0].status.ok()) << results[0].status;
  ExpectExactlyOnce(results, 96);
}

TEST(ServiceAssignmentWatchTest, AConsumersFirstCallBringsItsTaskToAWorkerThatWatchesNothing) {
  // No watch, heartbeats hourly on the workers and on the consumers: after registering, a
  // worker hears of a new task only when a consumer's stream asks it for one
  // (WorkerServer::FindTask fetches the assignment and waits for it). Nothing on the path to
  // the first step waits for a timer: without that fetch the stream is refused, and each
  // retry is refused again until retry_deadline fails the consumer.
  Cluster cluster(2, /*worker_timeout=*/kHour, size_t{64} << 20, [](WorkerServerOptions* w) {
    HeartbeatHourly(w);
    w->watch_assignments = false;
  });
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    ServiceOptions o = Options(absl::StrCat("unwatched-", round));
    o.heartbeat_interval = kHour;
    auto results = ConsumeAll(cluster.address(), Dataset::Range(40).Batch(4), o,
                              /*consumers=*/2, /*replicas=*/1);
    for (const Consumed& r : results) ASSERT_TRUE(r.status.ok()) << r.status;
    ExpectExactlyOnce(results, 40);
  }
}

TEST(ServiceAssignmentWatchTest, AWorkerCutOffFromItsCoordinatorRefusesAnUnknownTaskAtOnce) {
  // A stream for a task this worker does not know waits for a heartbeat's answer, but none is
  // coming while the coordinator is unreachable (nothing listens on port 1; heartbeats and
  // their backoff an hour apart): the lookup must not hold its open-pool thread for
  // unknown_task_wait (an hour here), which streams of known tasks need.
  std::atomic<bool> logged_failure{false};
  absl::Notification heartbeat_failed;
  WorkerServerOptions w;
  w.coordinator_address = "127.0.0.1:1";
  HeartbeatHourly(&w);
  w.max_backoff = kHour;
  w.unknown_task_wait = kHour;
  w.rpc_deadline = absl::Seconds(30);
  w.log = [&](absl::string_view line) {
    if (absl::StrContains(line, "failed") && !logged_failure.exchange(true)) {
      heartbeat_failed.Notify();
    }
  };
  auto worker = WorkerServer::Start(w);
  ASSERT_TRUE(worker.ok()) << worker.status();
  // The first heartbeat goes at start and fails within its rpc_deadline.
  ASSERT_TRUE(heartbeat_failed.WaitForNotificationWithTimeout(2 * w.rpc_deadline));
  auto lookup = std::async(std::launch::async, [&] { return (*worker)->FindTask(1, 1).status(); });
  // Nothing to wait out: a minute is generous; a lookup still waiting then waits for the hour.
  const bool answered = lookup.wait_for(std::chrono::minutes(1)) == std::future_status::ready;
  (*worker)->Stop();  // ends a lookup still waiting
  ASSERT_TRUE(answered) << "FindTask waited for a heartbeat answer while heartbeats fail";
  EXPECT_EQ(lookup.get().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace sluice
