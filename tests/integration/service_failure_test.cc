// Multi-process fault test: a sluice-worker killed with SIGKILL in the middle of an epoch, while
// 2 consumer processes (2 replicas each) read through it. The coordinator declares it dead
// after --worker_timeout and hands its task to a live worker; the consumers reconnect and the
// job runs to completion. What docs/SERVICE.md guarantees, and this test asserts:
//  - coordinated reads, static policy, deterministic pipeline: every element exactly once, in
//    the same steps as without the failure, identical step counts;
//  - coordinated DYNAMIC: the job completes, each element exactly once (the dead worker's
//    splits are handed out again, by position), in an order that depends on timing;
//  - independent reads: the job completes, each element at least once and at most twice (the
//    killed worker's task is replayed from its start).
// The consumers are paused (SIGSTOP) around the kill so that it lands mid-epoch whatever the
// machine's speed: workers send at most the consumers' (small) receive budgets and buffer
// little ahead of them. Which
// consumer gets how many steps of an independent job is a race (each step goes to whichever
// asks first: a consumer whose process starts late may get few or none), so the pause waits for
// step 20 of whichever consumer prints it first, and the worker killed is one that holds an
// unfinished task at the pause.
#include <signal.h>

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/data/distribute/rebatch.h"
#include "gtest/gtest.h"
#include "tests/integration/process_cluster.h"
#include "tests/integration/step_model.h"

namespace sluice {
namespace {

constexpr int64_t kBatch = 4;
constexpr int64_t kConsumers = 2;
constexpr int64_t kReplicas = 2;

// kEveryElementOnce: each element exactly once, in an order the policy does not fix (DYNAMIC
// hands splits to whichever worker asks first).
enum class Promise { kExactlyOnce, kEveryElementOnce, kAtMostOnce, kAtLeastOnce };

struct FailureCase {
  std::string name;
  std::string policy;
  std::string read_mode;
  Promise promise;
  int copies = 1;  // tasks producing each element (OFF: every task produces everything)
  // range(elements): independent consumers race for steps, so the job must be long enough that
  // none runs it dry between the pause's trigger (step 20) and the SIGSTOP.
  int64_t elements = 600;
};

// Waits until one of `consumers` prints `needle` on stdout; returns its index. A consumer that
// ends without printing it (another took the steps) is skipped; an error when all have, or after
// `timeout`.
absl::StatusOr<size_t> WaitForAnyOutput(const std::vector<std::unique_ptr<Subprocess>>& consumers,
                                        const std::string& needle, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<bool> closed(consumers.size(), false);
  std::string outputs;
  while (absl::Now() < deadline) {
    size_t open = 0;
    for (size_t c = 0; c < consumers.size(); ++c) {
      if (closed[c]) continue;
      absl::StatusOr<std::string> line =
          consumers[c]->WaitForOutput(SubprocessStream::kStdout, needle, absl::Milliseconds(2));
      if (line.ok()) return c;
      if (line.status().code() == absl::StatusCode::kFailedPrecondition) {
        closed[c] = true;
        absl::StrAppend(&outputs, "\nconsumer ", c, ": ", line.status().message());
      } else {
        ++open;
      }
    }
    if (open == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("every consumer ended without printing '", needle, "'", outputs));
    }
  }
  return absl::DeadlineExceededError(
      absl::StrCat("no consumer printed '", needle, "' within ", absl::FormatDuration(timeout)));
}

// Test names (CTest lists each case by its printed parameter).
void PrintTo(const FailureCase& c, std::ostream* os) { *os << c.name; }

class ServiceFailureTest : public ::testing::TestWithParam<FailureCase> {};

TEST_P(ServiceFailureTest, WorkerKilledMidEpochJobRunsToCompletion) {
  const FailureCase& fc = GetParam();
  auto cluster_or = ProcessCluster::Start({.num_workers = 3,
                                           .worker_timeout = absl::Seconds(1),
                                           .heartbeat_interval = absl::Milliseconds(100),
                                           .worker_buffer_bytes = 512});
  ASSERT_TRUE(cluster_or.ok()) << cluster_or.status();
  ProcessCluster& cluster = **cluster_or;
  const std::string job = absl::StrCat("failover-", fc.name);

  std::vector<std::unique_ptr<Subprocess>> consumers;
  for (int64_t c = 0; c < kConsumers; ++c) {
    auto p = StartSluicectl(
        {"run", "--coordinator=" + cluster.coordinator(), "--job=" + job,
         absl::StrCat("--pipeline=range(", fc.elements, ").batch(", kBatch, ")"),
         "--devices=CPU:0,CPU:1", absl::StrCat("--consumer_index=", c),
         absl::StrCat("--num_consumers=", kConsumers), "--sharding_policy=" + fc.policy,
         "--read_mode=" + fc.read_mode, "--format=json", "--retry_deadline=60s",
         // A few steps per stream, as the workers' 512-byte buffers: the job cannot run ahead
         // of the paused consumers (the 64 MiB default would take this small job at once).
         "--receive_budget_bytes=1024"});
    ASSERT_TRUE(p.ok()) << p.status();
    consumers.push_back(*std::move(p));
  }

  // Mid-epoch: a consumer has printed step 20. Pause both consumers, kill a worker that holds an
  // unfinished task, resume.
  auto first = WaitForAnyOutput(consumers, "{\"step\": 20,", absl::Seconds(60));
  ASSERT_TRUE(first.ok()) << first.status() << "\n" << consumers[0]->stderr_text()
                          << consumers[1]->stderr_text() << cluster.Logs();
  for (auto& p : consumers) ASSERT_TRUE(p->Signal(SIGSTOP).ok());
  int victim = -1;
  {
    auto status = cluster.Status();
    ASSERT_TRUE(status.ok()) << status.status();
    bool job_listed = false;
    for (const proto::JobStatus& j : status->jobs()) {
      if (j.job_name() != job) continue;
      job_listed = true;
      EXPECT_FALSE(j.finished());
      for (const proto::TaskInfo& t : j.tasks()) {
        if (t.finished() || victim >= 0) continue;
        for (int w = 0; w < cluster.num_workers(); ++w) {
          if (t.worker_address() == cluster.worker_address(w)) victim = w;
        }
      }
    }
    ASSERT_TRUE(job_listed) << status->DebugString();
    ASSERT_GE(victim, 0) << "no worker holds an unfinished task at the pause: "
                         << status->DebugString();
  }
  ASSERT_TRUE(cluster.KillWorker(victim).ok());
  for (auto& p : consumers) ASSERT_TRUE(p->Signal(SIGCONT).ok());

  std::vector<std::vector<ModelStep>> views;
  for (int64_t c = 0; c < kConsumers; ++c) {
    auto r = consumers[c]->Wait(absl::Seconds(120));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->exit_code, 0) << "consumer " << c << ": " << r->Describe() << "\n"
                               << r->stderr_text << cluster.Logs();
    auto steps = ParseRunJson(r->stdout_text);
    ASSERT_TRUE(steps.ok()) << steps.status();
    views.push_back(*std::move(steps));
  }

  std::map<int64_t, int> count;
  for (const auto& view : views) {
    for (const ModelStep& step : view) {
      for (const auto& piece : step) {
        for (int64_t v : piece) ++count[v];
      }
    }
  }
  for (const auto& [v, n] : count) {
    EXPECT_TRUE(v >= 0 && v < fc.elements) << v;
    // At least once: only the killed worker's task is replayed (from its start, on another
    // worker), so no element comes more than twice.
    const int most = fc.promise == Promise::kAtLeastOnce ? 2 * fc.copies : fc.copies;
    EXPECT_LE(n, most) << "element " << v << " delivered " << n << " times";
  }
  if (fc.promise != Promise::kAtMostOnce) {
    for (int64_t v = 0; v < fc.elements; ++v) {
      EXPECT_GE(count[v], fc.copies) << "element " << v << " lost";
    }
  }

  if (fc.read_mode == "coordinated") {
    ASSERT_EQ(views[0].size(), views[1].size());
  }
  if (fc.promise == Promise::kExactlyOnce) {
    // The very steps of a run without failure: DATA's are the single pipeline's, OFF's the
    // round-robin of its tasks, each the whole pipeline; cut by TF's rule.
    auto period = CoordinatedPieceSizes(kBatch, kConsumers, kReplicas);
    ASSERT_TRUE(period.ok());
    std::vector<int64_t> all;
    for (int64_t i = 0; i < fc.elements; ++i) all.push_back(i);
    const std::vector<std::vector<ModelStep>> tasks(
        static_cast<size_t>(fc.copies), TaskSteps(all, *period, kConsumers * kReplicas));
    const auto want = RoundRobin(tasks);
    auto global = JoinConsumers(views);
    ASSERT_TRUE(global.ok()) << global.status();
    EXPECT_EQ(*global, want) << DescribeSteps(*global);
  }

  // The coordinator saw the worker die; the job finished on the others.
  bool done = false;
  proto::GetStatusResponse last;
  for (int i = 0; i < 300 && !done; ++i) {
    auto status = cluster.Status();
    ASSERT_TRUE(status.ok()) << status.status();
    last = *status;
    bool worker_dead = false, job_finished = false;
    for (const proto::WorkerStatus& w : status->workers()) {
      if (w.address() == cluster.worker_address(victim)) worker_dead = !w.alive();
    }
    for (const proto::JobStatus& j : status->jobs()) {
      if (j.job_name() == job) job_finished = j.finished();
    }
    done = worker_dead && job_finished;
    if (!done) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(done) << last.DebugString() << cluster.Logs();
  for (const proto::JobStatus& j : last.jobs()) {
    for (const proto::TaskInfo& t : j.tasks()) {
      EXPECT_NE(t.worker_address(), cluster.worker_address(victim)) << "task " << t.task_id();
    }
  }

  absl::Status stopped = cluster.StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

INSTANTIATE_TEST_SUITE_P(
    Failures, ServiceFailureTest,
    ::testing::Values(FailureCase{"CoordinatedData", "DATA", "coordinated", Promise::kExactlyOnce},
                      FailureCase{"CoordinatedOff", "OFF", "coordinated", Promise::kExactlyOnce,
                                  /*copies=*/3},
                      FailureCase{"CoordinatedDynamic", "DYNAMIC", "coordinated",
                                  Promise::kEveryElementOnce},
                      FailureCase{"IndependentData", "DATA", "independent",
                                  Promise::kAtLeastOnce, /*copies=*/1, /*elements=*/4800}),
    [](const ::testing::TestParamInfo<FailureCase>& info) { return info.param.name; });

}  // namespace
}  // namespace sluice
