// Consumers that leave, with the real binaries (issue 15, docs/SERVICE.md "Consumers that
// leave"): two consumers of a coordinated job; consumer 1 reads a step and then hangs
// (SIGSTOP: attached, then silent). Workers buffer only a few steps, so before the coordinator
// declared consumers gone consumer 0 waited for it forever; now, after --consumer_timeout,
// the coordinator declares consumer 1 gone, the workers stop holding steps for it, and
// consumer 0 reads every one of its steps to the end.
//
// Every wait is bounded; every process is stopped (ProcessCluster, Subprocess destructors).
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/process_cluster.h"
#include "tests/integration/step_model.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kSteps = 500;  // range(4000).batch(8)

// What consumer `c` of range(4000).batch(8), read coordinated (DATA) by 2 consumers x 2
// replicas, must print, step by step, written from the README's guarantee rather than from the
// service's code: global step s is the single pipeline's batch s, [8s, 8s + 8), cut into four
// pieces of two (8 rows over 4 replicas), and consumer c takes pieces 2c and 2c + 1.
std::vector<ModelStep> ExpectedSteps(int64_t c) {
  std::vector<ModelStep> out;
  for (int64_t s = 0; s < kSteps; ++s) {
    ModelStep step;
    for (int64_t r = 0; r < 2; ++r) {
      const int64_t first = 8 * s + 2 * (2 * c + r);
      step.push_back({first, first + 1});
    }
    out.push_back(std::move(step));
  }
  return out;
}

// Checks that `stdout_text` (sluicectl run --format=json) holds exactly ExpectedSteps(c).
void ExpectEveryStepOf(int64_t c, const std::string& stdout_text) {
  absl::StatusOr<std::vector<ModelStep>> got = ParseRunJson(stdout_text);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<ModelStep> want = ExpectedSteps(c);
  ASSERT_EQ(got->size(), want.size()) << "consumer " << c << " printed "
                                      << DescribeSteps(*got);
  for (size_t s = 0; s < want.size(); ++s) {
    ASSERT_EQ((*got)[s], want[s]) << "consumer " << c << ", step " << s << ": got "
                                  << DescribeSteps({(*got)[s]}) << ", want "
                                  << DescribeSteps({want[s]});
  }
}

TEST(ConsumerGoneTest, AConsumerThatHangsNoLongerHoldsTheOthersBack) {
  ProcessClusterOptions o;
  o.num_workers = 2;
  o.worker_buffer_bytes = 512;  // a few steps ahead: a consumer that stops holds the others
  o.coordinator_flags = {"--consumer_timeout=2s", "--finished_job_ttl=1h"};
  auto started = ProcessCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  ProcessCluster& c = **started;
  std::vector<std::unique_ptr<Subprocess>> consumers;
  for (int i = 0; i < 2; ++i) {
    auto p = StartSluicectl({"run", "--coordinator=" + c.coordinator(), "--job=leave",
                             "--pipeline=range(4000).batch(8)", "--devices=CPU:0,CPU:1",
                             absl::StrCat("--consumer_index=", i), "--num_consumers=2",
                             "--sharding_policy=DATA", "--read_mode=coordinated",
                             "--format=json", "--retry_deadline=90s",
                             // A few steps per stream, so that a consumer that stops holds the
                             // others (the 64 MiB default would take the whole job at once).
                             "--receive_budget_bytes=1024"});
    ASSERT_TRUE(p.ok()) << p.status();
    consumers.push_back(*std::move(p));
  }
  // Consumer 1 has attached and read a step; then it hangs.
  auto first = consumers[1]->WaitForOutput(SubprocessStream::kStdout, "\"step\": 0,",
                                           absl::Seconds(60));
  ASSERT_TRUE(first.ok()) << first.status() << c.Logs();
  ASSERT_TRUE(consumers[1]->Signal(SIGSTOP).ok());
  absl::SleepFor(absl::Milliseconds(50));  // output in flight lands
  const std::string before = consumers[1]->stdout_text();
  ASSERT_LT(std::count(before.begin(), before.end(), '\n'), kSteps);

  // Consumer 0 reads every one of its steps to the end, in order.
  auto done = consumers[0]->Wait(absl::Seconds(120));
  ASSERT_TRUE(done.ok()) << done.status() << c.Logs();
  EXPECT_EQ(done->exit_code, 0) << done->stderr_text << c.Logs();
  ExpectEveryStepOf(0, done->stdout_text);
  EXPECT_THAT(c.Logs(), HasSubstr("consumer 1 of job 1 is gone"));
  // Consumer 1 stays stopped; the Subprocess destructor kills it. The servers stop cleanly.
  ASSERT_TRUE(consumers[1]->Signal(SIGKILL).ok());
  absl::Status stopped = c.StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

// Waits (bounded) until worker `address` has sent `n` heartbeats' worth of reports after now:
// its last heartbeat, as the coordinator lists it, is newer than this call, n times over.
void WaitForWorkerHeartbeats(ProcessCluster& c, const std::string& address, int n) {
  for (int k = 0; k < n; ++k) {
    const absl::Time since = absl::Now();
    bool seen = false;
    for (int i = 0; i < 3000 && !seen; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
      auto status = c.Status();
      ASSERT_TRUE(status.ok()) << status.status();
      for (const proto::WorkerStatus& w : status->workers()) {
        if (w.address() != address || w.seconds_since_heartbeat() < 0) continue;
        seen = absl::Now() - absl::Seconds(w.seconds_since_heartbeat()) > since;
      }
    }
    ASSERT_TRUE(seen) << "no heartbeat from " << address << c.Logs();
  }
}

// The chaos failure (bench/RESULTS.md, "Chaos test runs", seed 10226424), made deterministic:
// consumer 1 of a coordinated job comes late, so each worker detaches it (it has not attached
// within 10 s) and consumer 0 reads every step and exits. Then worker 0 is killed, and only
// then does consumer 1 start. A detached consumer used to count as having the end of the task,
// so both workers had reported their tasks finished: worker 0's task was never moved and
// consumer 1 could not read it. Now the task moves to worker 1 and consumer 1 reads every step
// (worker 1's own task from its retention window, which holds this small task whole, or through
// a replay).
TEST(ConsumerGoneTest, ALateConsumerGetsEveryStepOfATaskWhoseWorkerDied) {
  ProcessClusterOptions o;
  o.num_workers = 2;
  o.worker_timeout = absl::Seconds(2);
  o.worker_buffer_bytes = 512;  // a few steps ahead: the producers wait for consumer 1
  o.coordinator_flags = {"--consumer_timeout=1h", "--finished_job_ttl=1h"};
  auto started = ProcessCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  ProcessCluster& c = **started;
  auto consumer = [&](int i) {
    return StartSluicectl({"run", "--coordinator=" + c.coordinator(), "--job=late",
                           "--pipeline=range(4000).batch(8)", "--devices=CPU:0,CPU:1",
                           absl::StrCat("--consumer_index=", i), "--num_consumers=2",
                           "--sharding_policy=DATA", "--read_mode=coordinated",
                           "--format=json", "--retry_deadline=120s"});
  };
  auto first = consumer(0);
  ASSERT_TRUE(first.ok()) << first.status();
  auto done0 = (*first)->Wait(absl::Seconds(120));
  ASSERT_TRUE(done0.ok()) << done0.status() << c.Logs();
  ASSERT_EQ(done0->exit_code, 0) << done0->stderr_text << c.Logs();
  ExpectEveryStepOf(0, done0->stdout_text);
  if (HasFatalFailure()) return;
  // Whatever worker 0 reports about its task after consumer 0's end has reached the
  // coordinator before it dies.
  WaitForWorkerHeartbeats(c, c.worker_address(0), 3);
  ASSERT_TRUE(c.KillWorker(0).ok());

  auto second = consumer(1);
  ASSERT_TRUE(second.ok()) << second.status();
  auto done1 = (*second)->Wait(absl::Seconds(180));
  ASSERT_TRUE(done1.ok()) << done1.status() << c.Logs();
  EXPECT_EQ(done1->exit_code, 0) << done1->stderr_text << c.Logs();
  // Every step, with its values: the late consumer's pieces of each global step, in order.
  ExpectEveryStepOf(1, done1->stdout_text);
  absl::Status stopped = c.StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace sluice
