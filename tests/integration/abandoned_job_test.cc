// Jobs left without consumers, with the real binaries (issue 28, parts jobfree and release;
// docs/SERVICE.md, "Jobs left without consumers" and "Consumers that release their job"):
// `sluicectl bench` jobs of an endless pipeline run one after another on one worker, each
// abandoned: its consumer exits cleanly after --seconds, or is killed (SIGKILL) while it reads.
// Each job used to stay on the coordinator for idle_job_ttl (10 min), its task and the steps it
// buffered alive on the worker, so that the worker's memory grew with every job. Now a
// consumer that exits cleanly releases its job (ReleaseConsumer), which ends at once; the
// coordinator ends a job none of whose consumers has asked about it for --consumer_timeout
// (a killed consumer's), and the worker drops its task and frees its steps: the worker's tasks
// and the bytes charged to its memory budget return to their baseline. A consumer that reads
// for longer than the timeout keeps its job (its heartbeats do).
//
// Every wait is bounded and none bounds the service's speed; every process is stopped
// (ProcessCluster, Subprocess destructors).
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/integration/process_cluster.h"
#include "tests/observability/prometheus_text.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

// 2 MiB steps (262,144 int64 rows), endless.
constexpr char kPipeline[] = "--pipeline=range(1099511627776).batch(262144)";

// What the worker holds, from its /metrics.
struct Held {
  double tasks = 0;          // sluice_worker_tasks, every state
  double charged_bytes = 0;  // sluice_worker_memory_charged_bytes
};

absl::StatusOr<Held> ScrapeHeld(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(10);
  auto r = client.Get("/metrics");
  if (!r) return absl::UnavailableError(httplib::to_string(r.error()));
  absl::StatusOr<testing::PromText> text = testing::ParsePromText(r->body);
  if (!text.ok()) return text.status();
  if (text->Count("sluice_worker_memory_charged_bytes") != 1) {
    return absl::FailedPreconditionError(
        "the worker exports no sluice_worker_memory_charged_bytes");
  }
  return Held{text->Sum("sluice_worker_tasks"), text->Sum("sluice_worker_memory_charged_bytes")};
}

// Whether job `job_id` runs and its consumer has read a step of it (so it has heartbeated: its
// heartbeats tell it where its task is), within a bounded wait. A consumer killed before its
// first heartbeat leaves a job not read yet, which idle_job_ttl ends.
bool WaitForJobRead(ProcessCluster& c, int64_t job_id) {
  for (int i = 0; i < 3000; ++i) {
    auto status = c.Status();
    if (status.ok()) {
      for (const proto::JobStatus& job : status->jobs()) {
        if (job.job_id() == job_id && !job.finished() && job.steps_delivered() > 0) return true;
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

// A coordinator (with `coordinator_flags`) and one worker whose /metrics port is known.
struct MetricsCluster {
  std::string dir;
  std::unique_ptr<ProcessCluster> cluster;
  int metrics_port = 0;
  Held baseline;
};

void StartMetricsCluster(const std::vector<std::string>& coordinator_flags, MetricsCluster* m) {
  m->dir = absl::StrCat(::testing::TempDir(), "/abandoned_job_", getpid());
  ASSERT_EQ(system(absl::StrCat("mkdir -p ", m->dir).c_str()), 0);
  const std::string port_file = m->dir + "/worker.metrics";
  (void)unlink(port_file.c_str());
  ProcessClusterOptions o;
  o.num_workers = 1;
  o.worker_buffer_bytes = int64_t{16} << 20;  // 8 steps a task
  o.coordinator_flags = coordinator_flags;
  o.worker_flags = {"--metrics_port=0", "--metrics_port_file=" + port_file};
  auto started = ProcessCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  m->cluster = *std::move(started);
  for (int i = 0; i < 600 && m->metrics_port <= 0; ++i) {
    std::ifstream in(port_file);
    if (!(in >> m->metrics_port)) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_GT(m->metrics_port, 0) << "no metrics port file " << port_file
                                << m->cluster->Logs();
  absl::StatusOr<Held> baseline = ScrapeHeld(m->metrics_port);
  ASSERT_TRUE(baseline.ok()) << baseline.status();
  ASSERT_EQ(baseline->tasks, 0);
  m->baseline = *baseline;
}

// Liveness: waits (bounded; the bound is generous, not a speed requirement) until the worker
// holds no task and no more bytes than at its start; returns what it holds then.
Held WaitForWorkerBaseline(const MetricsCluster& m, int polls = 1200) {
  absl::StatusOr<Held> held = ScrapeHeld(m.metrics_port);
  for (int i = 0; i < polls; ++i) {
    held = ScrapeHeld(m.metrics_port);
    EXPECT_TRUE(held.ok()) << held.status();
    if (!held.ok()) return Held{-1, -1};
    if (held->tasks == 0 && held->charged_bytes <= m.baseline.charged_bytes) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return *held;
}

TEST(AbandonedJobTest, AbandonedJobsEndAndTheirWorkerFreesTheirSteps) {
  MetricsCluster m;
  // A live consumer heartbeats every 200 ms: 5 s of silence is far beyond any scheduling delay
  // of a loaded CI machine, and the clean consumers below read for longer than that.
  ASSERT_NO_FATAL_FAILURE(
      StartMetricsCluster({"--consumer_timeout=5s", "--finished_job_ttl=1h"}, &m));
  ProcessCluster& c = *m.cluster;

  constexpr int kJobs = 4;
  for (int i = 0; i < kJobs; ++i) {
    const std::vector<std::string> bench = {"bench", "--coordinator=" + c.coordinator(),
                                            kPipeline, "--devices=CPU:0",
                                            i % 2 == 0 ? "--seconds=8" : "--seconds=600"};
    if (i % 2 == 0) {
      // Reads for longer than --consumer_timeout (its heartbeats keep the job), then exits.
      auto r = RunSluicectl(bench);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->exit_code, 0) << r->stderr_text << c.Logs();
    } else {
      // Killed while it reads: it says nothing to anyone.
      auto p = StartSluicectl(bench);
      ASSERT_TRUE(p.ok()) << p.status();
      // Each bench makes one job: ids 1, 2, ...
      ASSERT_TRUE(WaitForJobRead(c, i + 1)) << (*p)->stderr_text() << c.Logs();
      ASSERT_TRUE((*p)->Signal(SIGKILL).ok());
      ASSERT_TRUE((*p)->Wait(absl::Seconds(30)).ok());
    }
  }

  // Liveness: the coordinator ends every job and the worker drops their tasks and frees their
  // steps.
  const Held held = WaitForWorkerBaseline(m);
  EXPECT_EQ(held.tasks, 0) << c.Logs();
  EXPECT_LE(held.charged_bytes, m.baseline.charged_bytes) << c.Logs();
  auto status = c.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->jobs_size(), kJobs) << status->DebugString() << c.Logs();
  for (const proto::JobStatus& job : status->jobs()) {
    EXPECT_TRUE(job.finished()) << "job " << job.job_id();
    if (job.job_id() % 2 == 1) {  // a clean exit: released
      EXPECT_THAT(job.error(), HasSubstr("CANCELLED")) << "job " << job.job_id();
      EXPECT_THAT(job.error(), HasSubstr("was released by its consumers"))
          << "job " << job.job_id();
    } else {  // killed
      EXPECT_THAT(job.error(), HasSubstr("no consumer left")) << "job " << job.job_id();
      EXPECT_THAT(job.error(), HasSubstr("consumer_timeout")) << "job " << job.job_id();
    }
  }
  absl::Status stopped = c.StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
  (void)system(absl::StrCat("rm -rf ", m.dir).c_str());
}

// A consumer that exits cleanly releases its job: with a consumer_timeout far longer than the
// test (600 s), each `sluicectl bench` job's task and steps leave the worker right after the
// bench exits, before the next job starts, so that the worker never holds more than the job
// that runs. Without the release each job would live its 600 s and the worker would hold
// every one of them (the waits below would run out).
TEST(AbandonedJobTest, ACleanExitReleasesItsJobAtOnce) {
  MetricsCluster m;
  ASSERT_NO_FATAL_FAILURE(
      StartMetricsCluster({"--consumer_timeout=600s", "--finished_job_ttl=1h"}, &m));
  ProcessCluster& c = *m.cluster;
  constexpr int kJobs = 3;
  for (int i = 0; i < kJobs; ++i) {
    auto r = RunSluicectl({"bench", "--coordinator=" + c.coordinator(), kPipeline,
                           "--devices=CPU:0", "--seconds=2"});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->exit_code, 0) << r->stderr_text << c.Logs();
    EXPECT_THAT(r->stderr_text, ::testing::Not(HasSubstr("could not release")));
    // At most 60 s (polls of 100 ms), a tenth of consumer_timeout.
    const Held held = WaitForWorkerBaseline(m, 600);
    EXPECT_EQ(held.tasks, 0) << "after job " << i + 1 << c.Logs();
    EXPECT_LE(held.charged_bytes, m.baseline.charged_bytes) << "after job " << i + 1;
  }
  auto status = c.Status();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->jobs_size(), kJobs) << status->DebugString() << c.Logs();
  for (const proto::JobStatus& job : status->jobs()) {
    EXPECT_TRUE(job.finished()) << "job " << job.job_id();
    EXPECT_GT(job.steps_delivered(), 0) << "job " << job.job_id();
    EXPECT_THAT(job.error(), HasSubstr("was released by its consumers"))
        << "job " << job.job_id();
  }
  // An operator sees them as released, not failed.
  auto shown = RunSluicectl({"status", "--coordinator=" + c.coordinator()});
  ASSERT_TRUE(shown.ok()) << shown.status();
  EXPECT_THAT(shown->stdout_text, HasSubstr("released"));
  EXPECT_THAT(shown->stdout_text, ::testing::Not(HasSubstr("failed")));
  absl::Status stopped = c.StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
  (void)system(absl::StrCat("rm -rf ", m.dir).c_str());
}

}  // namespace
}  // namespace sluice
