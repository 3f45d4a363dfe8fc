// Fault tests with the real binaries (issue 6: exactly once, deterministic, elastic, resumable).
//
// Every test runs K trainer processes (`sluicectl run --consumer_index=c --num_consumers=K`,
// 2 replicas each) side by side against a ProcessCluster, first a reference job with no fault,
// then the same job with faults injected mid-epoch, and asserts that
//  - every consumer printed exactly the reference's steps, element for element, and both runs
//    print the pipeline's own order, modelled in the test (step_model.h PipelineOrderViews:
//    range(N) for DATA, the seeded SHUFFLE_FULL permutation re-implemented from its
//    specification for RANGES), so a bug that changes the order for every run is caught too,
//  - across consumers every element of the dataset (`range(N).batch(B)`: unique ints) came
//    exactly once, and
//  - the coordinator lists the job finished afterwards (finished jobs stay listed for the
//    test's length; a job missing from the status is an error, not "finished").
// Every worker a fault hits holds an unfinished task of the job when it is hit (asserted).
// "Mid-epoch" is asserted, not hoped for: the consumers are paused (SIGSTOP) once consumer 0
// has printed a given step, the test checks that consumer 0 has printed > 0 and every consumer
// fewer than all steps, injects the fault, and continues them. Workers buffer at most a few
// steps ahead (small --buffer_bytes) and consumers hold at most a few steps per stream (a
// 1 KiB --receive_budget_bytes; the 64 MiB default would take this whole small job at once),
// so the job cannot finish behind the consumers' backs.
//
// Each test runs once per mode: DATA (coordinated SHARDING_DATA) and RANGES (coordinated
// SHARDING_RANGES with --seed and --shuffle=full). Nothing is skipped: every feature used here
// (RANGES, the coordinator's --work_dir journal, --save_state/--resume_state) has shipped, and a
// regression must fail, not skip.
//
// Every wait is bounded; every process is stopped (ProcessCluster, Subprocess destructors).
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "core/rpc/grpc_security.h"
#include "core/util/status_macros.h"
#include "tests/integration/process_cluster.h"
#include "tests/integration/step_model.h"

namespace sluice {
namespace {

constexpr int64_t kElements = 4000;
constexpr int64_t kBatch = 8;  // 2 consumers x 2 replicas: pieces of 2, 500 global steps
constexpr int kConsumers = 2;
const absl::Duration kRunTimeout = absl::Seconds(180);
const absl::Duration kWaitTimeout = absl::Seconds(120);

// ---------------------------------------------------------------------------------------------
// Modes.

struct Mode {
  std::string name;    // DATA or RANGES
  std::string policy;  // --sharding_policy
  std::vector<std::string> flags;  // extra sluicectl run flags
  std::optional<uint64_t> shuffle_seed;  // --shuffle=full --seed=S: the order's permutation
};

void PrintTo(const Mode& m, std::ostream* os) { *os << m.name; }

constexpr uint64_t kRangesSeed = 20261202;

Mode DataMode() { return {"Data", "DATA", {}, std::nullopt}; }
Mode RangesMode() {
  return {"Ranges", "RANGES",
          {absl::StrCat("--seed=", kRangesSeed), "--shuffle=full", "--range_steps=8"},
          kRangesSeed};
}

// The --worker_timeout of a cluster whose coordinator restarts and must see every worker again
// before it would declare one dead. A worker is heard from again at most this long after the
// restart: gRPC's reconnect backoff (kMaxReconnectBackoffMs, +20% jitter), then the worker's
// heartbeat backoff (capped at a quarter of the coordinator's --worker_timeout, +10% jitter)
// and a heartbeat interval. The timeout is twice that bound, so that a loaded machine still
// has every worker back in time: W = 2 * (reconnect + interval + 1.1 * W / 4), that is
// W = 2 * (reconnect + interval) / 0.45 (about 5.8 s).
absl::Duration RestartedWorkerTimeout(absl::Duration heartbeat_interval) {
  const absl::Duration reconnect = absl::Milliseconds(kMaxReconnectBackoffMs) * 1.2;
  return absl::Ceil((reconnect + heartbeat_interval) * 2 / 0.45, absl::Milliseconds(100));
}

ProcessClusterOptions FaultClusterOptions(int workers) {
  ProcessClusterOptions o;
  o.num_workers = workers;
  o.worker_timeout = absl::Seconds(2);
  o.heartbeat_interval = absl::Milliseconds(100);
  o.worker_buffer_bytes = 512;  // a few steps ahead at most: faults land mid-epoch
  o.work_dir = true;
  o.coordinator_flags.push_back("--ranges_per_worker=2");
  // Finished jobs stay listed for the whole test: WaitForJobFinished needs to see them.
  o.coordinator_flags.push_back("--finished_job_ttl=1h");
  return o;
}

// ---------------------------------------------------------------------------------------------
// Parsing and comparing consumers' output.

// One consumer's printed steps, by the step number it printed.
using View = std::map<int64_t, ModelStep>;

// A run prints its steps numbered 0, 1, ... in order (ParseRunJson checks it).
absl::StatusOr<View> ParseView(const std::string& stdout_text) {
  absl::StatusOr<std::vector<ModelStep>> steps = ParseRunJson(stdout_text);
  if (!steps.ok()) return steps.status();
  View view;
  for (size_t i = 0; i < steps->size(); ++i) view.emplace(static_cast<int64_t>(i), (*steps)[i]);
  return view;
}

std::string Describe(const ModelStep& step) {
  std::vector<std::string> pieces;
  for (const auto& piece : step) pieces.push_back(absl::StrCat("[", absl::StrJoin(piece, " "), "]"));
  return absl::StrJoin(pieces, " ");
}

// Every consumer's view equals the reference's, step for step.
void ExpectSameSteps(const std::vector<View>& want, const std::vector<View>& got,
                     const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t c = 0; c < want.size(); ++c) {
    EXPECT_EQ(want[c].size(), got[c].size()) << what << ": consumer " << c << " step count";
    int reported = 0;
    for (const auto& [step, w] : want[c]) {
      auto it = got[c].find(step);
      if (it == got[c].end()) {
        if (reported++ < 5) ADD_FAILURE() << what << ": consumer " << c << " lacks step " << step;
      } else if (it->second != w) {
        if (reported++ < 5) {
          ADD_FAILURE() << what << ": consumer " << c << " step " << step << ": got "
                        << Describe(it->second) << ", want " << Describe(w);
        }
      }
    }
    for (const auto& [step, g] : got[c]) {
      if (!want[c].contains(step) && reported++ < 5) {
        ADD_FAILURE() << what << ": consumer " << c << " has extra step " << step;
      }
    }
  }
}

// Every consumer printed the pipeline's own order (step_model.h PipelineOrderViews: range(N)
// for DATA, the seeded permutation's test-side model for RANGES), 2 replicas each.
void ExpectPipelineOrder(const Mode& mode, const std::vector<View>& got, const std::string& what) {
  std::vector<View> want;
  for (const std::vector<ModelStep>& steps :
       PipelineOrderViews(kElements, kBatch, static_cast<int64_t>(got.size()), 2,
                          mode.shuffle_seed)) {
    View view;
    for (size_t i = 0; i < steps.size(); ++i) view.emplace(static_cast<int64_t>(i), steps[i]);
    want.push_back(std::move(view));
  }
  ExpectSameSteps(want, got, what + " against the pipeline's order");
}

// Across the views, every element of range(elements) exactly once and nothing else.
void ExpectExactlyOnce(const std::vector<View>& views, int64_t elements,
                       const std::string& what) {
  std::map<int64_t, int> count;
  for (const View& view : views) {
    for (const auto& [step, s] : view) {
      for (const auto& piece : s) {
        for (int64_t v : piece) ++count[v];
      }
    }
  }
  int reported = 0;
  for (int64_t v = 0; v < elements; ++v) {
    auto it = count.find(v);
    const int n = it == count.end() ? 0 : it->second;
    if (n != 1 && reported++ < 10) {
      ADD_FAILURE() << what << ": element " << v << " delivered " << n << " times";
    }
  }
  for (const auto& [v, n] : count) {
    if ((v < 0 || v >= elements) && reported++ < 10) {
      ADD_FAILURE() << what << ": element " << v << " is not in the dataset";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The trainers: K `sluicectl run` processes of one job.

std::string Pipeline(int64_t elements) {
  return absl::StrCat("range(", elements, ").batch(", kBatch, ")");
}

class Trainers {
 public:
  // `per_consumer_flags(c)`: extra flags for consumer c (checkpoint files).
  static absl::StatusOr<std::unique_ptr<Trainers>> Start(
      const std::string& coordinator, const std::string& job, const Mode& mode,
      int consumers = kConsumers, int64_t elements = kElements,
      std::function<std::vector<std::string>(int)> per_consumer_flags = nullptr) {
    std::unique_ptr<Trainers> t(new Trainers());
    for (int c = 0; c < consumers; ++c) {
      std::vector<std::string> args = {"run",
                                       "--coordinator=" + coordinator,
                                       "--job=" + job,
                                       "--pipeline=" + Pipeline(elements),
                                       "--devices=CPU:0,CPU:1",
                                       absl::StrCat("--consumer_index=", c),
                                       absl::StrCat("--num_consumers=", consumers),
                                       "--sharding_policy=" + mode.policy,
                                       "--read_mode=coordinated",
                                       "--format=json",
                                       "--retry_deadline=90s",
                                       "--receive_budget_bytes=1024"};
      args.insert(args.end(), mode.flags.begin(), mode.flags.end());
      if (per_consumer_flags != nullptr) {
        std::vector<std::string> more = per_consumer_flags(c);
        args.insert(args.end(), more.begin(), more.end());
      }
      absl::StatusOr<std::unique_ptr<Subprocess>> p = StartSluicectl(args);
      if (!p.ok()) return p.status();
      t->consumers_.push_back(*std::move(p));
    }
    return t;
  }

  int size() const { return static_cast<int>(consumers_.size()); }

  // Complete lines consumer c has printed so far.
  int64_t PrintedSteps(int c) {
    const std::string out = consumers_[c]->stdout_text();
    return std::count(out.begin(), out.end(), '\n');
  }

  // Waits (bounded) until consumer c has printed `steps` steps.
  absl::Status WaitForSteps(int c, int64_t steps, absl::Duration timeout = kWaitTimeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (PrintedSteps(c) < steps) {
      if (!consumers_[c]->running()) {
        return absl::FailedPreconditionError(
            absl::StrCat("consumer ", c, " exited after ", PrintedSteps(c), " steps, before ",
                         steps, "; stderr:\n", consumers_[c]->stderr_text()));
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("consumer ", c, " printed ", PrintedSteps(c), " steps, not ", steps,
                         ", within ", absl::FormatDuration(timeout), "; stderr:\n",
                         consumers_[c]->stderr_text()));
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return absl::OkStatus();
  }

  absl::Status Signal(int sig) {
    for (auto& p : consumers_) {
      absl::Status s = p->Signal(sig);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Waits for every consumer to exit 0 and parses its steps.
  absl::StatusOr<std::vector<View>> Finish(absl::Duration timeout = kRunTimeout) {
    std::vector<View> views;
    const absl::Time deadline = absl::Now() + timeout;
    for (int c = 0; c < size(); ++c) {
      absl::StatusOr<SubprocessResult> r =
          consumers_[c]->Wait(std::max(deadline - absl::Now(), absl::Seconds(1)));
      if (!r.ok()) return r.status();
      if (r->exit_code != 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "consumer ", c, ": ", r->Describe(), " after ",
            std::count(r->stdout_text.begin(), r->stdout_text.end(), '\n'), " steps; stderr:\n",
            r->stderr_text));
      }
      absl::StatusOr<View> view = ParseView(r->stdout_text);
      if (!view.ok()) return view.status();
      views.push_back(*std::move(view));
    }
    return views;
  }

 private:
  Trainers() = default;
  std::vector<std::unique_ptr<Subprocess>> consumers_;
};

// A whole job with no fault.
absl::StatusOr<std::vector<View>> RunJob(const std::string& coordinator, const std::string& job,
                                         const Mode& mode) {
  absl::StatusOr<std::unique_ptr<Trainers>> t = Trainers::Start(coordinator, job, mode);
  if (!t.ok()) return t.status();
  return (*t)->Finish();
}

// Pauses the trainers once consumer 0 has printed `at` steps and checks that this is mid-epoch
// (consumer 0 printed > 0 steps, every consumer fewer than `total`). The caller continues them.
absl::Status PauseMidEpoch(Trainers& t, int64_t at, int64_t total) {
  absl::Status s = t.WaitForSteps(0, at);
  if (!s.ok()) return s;
  s = t.Signal(SIGSTOP);
  if (!s.ok()) return s;
  absl::SleepFor(absl::Milliseconds(50));  // output in flight lands
  std::vector<int64_t> printed;
  for (int c = 0; c < t.size(); ++c) printed.push_back(t.PrintedSteps(c));
  if (printed[0] <= 0 || *std::max_element(printed.begin(), printed.end()) >= total) {
    return absl::FailedPreconditionError(
        absl::StrCat("the fault would not land mid-epoch: consumers printed ",
                     absl::StrJoin(printed, ", "), " of ", total, " steps"));
  }
  return absl::OkStatus();
}

// Whether worker `address` holds an unfinished task of job `job` (the fault hits the job).
bool HoldsUnfinishedTask(const proto::GetStatusResponse& status, const std::string& job,
                         const std::string& address) {
  for (const proto::JobStatus& j : status.jobs()) {
    if (j.job_name() != job) continue;
    for (const proto::TaskInfo& t : j.tasks()) {
      if (t.worker_address() == address && !t.finished()) return true;
    }
  }
  return false;
}

// A running worker (not in `exclude`) that holds an unfinished task of job `job`: a fault
// there is sure to hit the job. NOT_FOUND when none does.
absl::StatusOr<int> WorkerWithUnfinishedTask(ProcessCluster& cluster, const std::string& job,
                                             const std::set<int>& exclude = {}) {
  absl::StatusOr<proto::GetStatusResponse> status = cluster.Status();
  if (!status.ok()) return status.status();
  for (int w = 0; w < cluster.num_workers(); ++w) {
    if (exclude.contains(w) || !cluster.worker_running(w)) continue;
    if (HoldsUnfinishedTask(*status, job, cluster.worker_address(w))) return w;
  }
  return absl::NotFoundError(absl::StrCat("no running worker holds an unfinished task of job ",
                                          job, ":\n", status->DebugString()));
}

// Waits (bounded) until the coordinator lists job `job` finished.
absl::Status WaitForJobFinished(ProcessCluster& cluster, const std::string& job) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::string last;
  while (absl::Now() < deadline) {
    absl::StatusOr<proto::GetStatusResponse> status = cluster.Status();
    if (status.ok()) {
      bool listed = false;
      for (const proto::JobStatus& j : status->jobs()) {
        if (j.job_name() != job) continue;
        listed = true;
        if (j.finished()) return absl::OkStatus();
      }
      // Listed until --finished_job_ttl (1h in these tests): missing means lost, not finished.
      if (!listed) {
        return absl::NotFoundError(absl::StrCat("job ", job, " is missing from the status:\n",
                                                status->DebugString()));
      }
      last = status->DebugString();
    } else {
      last = status.status().ToString();
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("job ", job, " not finished within 30s; last status:\n", last));
}

// Task id -> the address of the worker running it, for the job named `job`.
absl::StatusOr<std::map<int64_t, std::string>> TaskPlacement(ProcessCluster& cluster,
                                                            const std::string& job) {
  ASSIGN_OR_RETURN(proto::GetStatusResponse status, cluster.Status());
  std::map<int64_t, std::string> placement;
  for (const proto::JobStatus& j : status.jobs()) {
    if (j.job_name() != job) continue;
    for (const proto::TaskInfo& t : j.tasks()) placement[t.task_id()] = t.worker_address();
  }
  return placement;
}

int64_t Steps(const std::vector<View>& views) { return views.empty() ? 0 : views[0].size(); }

class FaultTest : public ::testing::TestWithParam<Mode> {};

// ---------------------------------------------------------------------------------------------

TEST_P(FaultTest, KillOneWorkerThenAnotherMidEpoch) {
  const Mode& mode = GetParam();
  auto cluster_or = ProcessCluster::Start(FaultClusterOptions(3));
  ASSERT_TRUE(cluster_or.ok()) << cluster_or.status();
  ProcessCluster& cluster = **cluster_or;

  auto want = RunJob(cluster.coordinator(), "reference", mode);
  ASSERT_TRUE(want.ok()) << want.status() << cluster.Logs();
  ExpectExactlyOnce(*want, kElements, "reference");
  ExpectPipelineOrder(mode, *want, "reference");
  const int64_t total = Steps(*want);
  ASSERT_GT(total, 100);

  auto t = Trainers::Start(cluster.coordinator(), "faults", mode);
  ASSERT_TRUE(t.ok()) << t.status();
  std::set<int> killed;
  for (int64_t at : {total / 5, total / 2}) {
    absl::Status mid = PauseMidEpoch(**t, at, total);
    ASSERT_TRUE(mid.ok()) << mid << cluster.Logs();
    // Each victim holds an unfinished task of the job at the kill (asserted: a kill that hits
    // no task would prove nothing).
    absl::StatusOr<int> victim = WorkerWithUnfinishedTask(cluster, "faults", killed);
    ASSERT_TRUE(victim.ok()) << victim.status();
    ASSERT_TRUE(cluster.KillWorker(*victim).ok());
    killed.insert(*victim);
    ASSERT_TRUE((*t)->Signal(SIGCONT).ok());
  }
  auto got = (*t)->Finish();
  ASSERT_TRUE(got.ok()) << got.status() << cluster.Logs();
  ExpectSameSteps(*want, *got, "after two worker kills");
  ExpectExactlyOnce(*got, kElements, "after two worker kills");
  ExpectPipelineOrder(mode, *got, "after two worker kills");
  absl::Status finished = WaitForJobFinished(cluster, "faults");
  EXPECT_TRUE(finished.ok()) << finished << cluster.Logs();
  absl::Status stopped = cluster.StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST_P(FaultTest, HungWorkerSigstopMidEpoch) {
  const Mode& mode = GetParam();
  auto cluster_or = ProcessCluster::Start(FaultClusterOptions(3));
  ASSERT_TRUE(cluster_or.ok()) << cluster_or.status();
  ProcessCluster& cluster = **cluster_or;

  auto want = RunJob(cluster.coordinator(), "reference", mode);
  ASSERT_TRUE(want.ok()) << want.status() << cluster.Logs();
  const int64_t total = Steps(*want);

  auto t = Trainers::Start(cluster.coordinator(), "faults", mode);
  ASSERT_TRUE(t.ok()) << t.status();
  absl::Status mid = PauseMidEpoch(**t, total / 3, total);
  ASSERT_TRUE(mid.ok()) << mid << cluster.Logs();
  absl::StatusOr<int> victim = WorkerWithUnfinishedTask(cluster, "faults");
  ASSERT_TRUE(victim.ok()) << victim.status();
  ASSERT_TRUE(cluster.StopWorker(*victim).ok());
  ASSERT_TRUE((*t)->Signal(SIGCONT).ok());
  // The job completes while the victim hangs (its tasks move after --worker_timeout); it comes
  // back only afterwards.
  auto got = (*t)->Finish();
  absl::Status finished = WaitForJobFinished(cluster, "faults");
  ASSERT_TRUE(cluster.ContinueWorker(*victim).ok());
  ASSERT_TRUE(got.ok()) << got.status() << cluster.Logs();
  ExpectSameSteps(*want, *got, "with a hung worker");
  ExpectExactlyOnce(*got, kElements, "with a hung worker");
  ExpectPipelineOrder(mode, *got, "with a hung worker");
  EXPECT_TRUE(finished.ok()) << finished << cluster.Logs();
  absl::Status stopped = cluster.StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST_P(FaultTest, TwoWorkersAddedMidEpoch) {
  const Mode& mode = GetParam();
  auto cluster_or = ProcessCluster::Start(FaultClusterOptions(1));
  ASSERT_TRUE(cluster_or.ok()) << cluster_or.status();
  ProcessCluster& cluster = **cluster_or;

  auto want = RunJob(cluster.coordinator(), "reference", mode);
  ASSERT_TRUE(want.ok()) << want.status() << cluster.Logs();
  const int64_t total = Steps(*want);

  auto t = Trainers::Start(cluster.coordinator(), "faults", mode);
  ASSERT_TRUE(t.ok()) << t.status();
  absl::Status mid = PauseMidEpoch(**t, total / 5, total);
  ASSERT_TRUE(mid.ok()) << mid << cluster.Logs();
  std::vector<std::string> added;
  for (int k = 0; k < 2; ++k) {
    auto i = cluster.AddWorker();
    ASSERT_TRUE(i.ok()) << i.status();
    added.push_back(cluster.worker_address(*i));
  }
  ASSERT_TRUE((*t)->Signal(SIGCONT).ok());
  // RANGES is elastic: the new workers take ranges of the running job. Watch the coordinator
  // while the consumers read (bounded by the job's end).
  std::set<std::string> got_work;
  for (int i = 0; i < 2000 && got_work.size() < added.size(); ++i) {
    auto status = cluster.Status();
    if (status.ok()) {
      for (const std::string& a : added) {
        if (HoldsUnfinishedTask(*status, "faults", a)) got_work.insert(a);
        for (const proto::JobStatus& j : status->jobs()) {
          if (j.job_name() != "faults") continue;
          for (const proto::TaskInfo& task : j.tasks()) {
            if (task.worker_address() == a) got_work.insert(a);
          }
        }
      }
    }
    if ((*t)->PrintedSteps(0) >= total) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  auto got = (*t)->Finish();
  ASSERT_TRUE(got.ok()) << got.status() << cluster.Logs();
  ExpectSameSteps(*want, *got, "with two workers added");
  ExpectExactlyOnce(*got, kElements, "with two workers added");
  ExpectPipelineOrder(mode, *got, "with two workers added");
  if (mode.policy == "RANGES") {
    EXPECT_EQ(got_work.size(), added.size())
        << "workers added mid-epoch that got ranges of the job: " << absl::StrJoin(got_work, ", ");
  } else {
    // DATA is not elastic: a job's tasks are made when it starts, one per worker then.
    EXPECT_TRUE(got_work.empty())
        << "workers added mid-epoch that got tasks of a DATA job: " << absl::StrJoin(got_work, ", ");
  }
  absl::Status stopped = cluster.StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST_P(FaultTest, WorkerSigtermDrainsMidEpoch) {
  const Mode& mode = GetParam();
  auto cluster_or = ProcessCluster::Start(FaultClusterOptions(3));
  ASSERT_TRUE(cluster_or.ok()) << cluster_or.status();
  ProcessCluster& cluster = **cluster_or;

  auto want = RunJob(cluster.coordinator(), "reference", mode);
  ASSERT_TRUE(want.ok()) << want.status() << cluster.Logs();
  const int64_t total = Steps(*want);

  auto t = Trainers::Start(cluster.coordinator(), "faults", mode);
  ASSERT_TRUE(t.ok()) << t.status();
  absl::Status mid = PauseMidEpoch(**t, total / 3, total);
  ASSERT_TRUE(mid.ok()) << mid << cluster.Logs();
  // SIGTERM lands while the consumers are paused; they continue while the worker drains.
  absl::Status drained = cluster.TerminateWorker(
      1, absl::Seconds(60), [&] { EXPECT_TRUE((*t)->Signal(SIGCONT).ok()); });
  EXPECT_TRUE(drained.ok()) << drained;
  auto got = (*t)->Finish();
  ASSERT_TRUE(got.ok()) << got.status() << cluster.Logs();
  ExpectSameSteps(*want, *got, "with a worker drained");
  ExpectExactlyOnce(*got, kElements, "with a worker drained");
  ExpectPipelineOrder(mode, *got, "with a worker drained");
  absl::Status finished = WaitForJobFinished(cluster, "faults");
  EXPECT_TRUE(finished.ok()) << finished << cluster.Logs();
  absl::Status stopped = cluster.StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

// Issue 32, "Incarnations": a worker killed and restarted at the same address well within
// worker_timeout (60 s here: the death can only be told by the new process incarnation) is the
// death of the old process plus a new worker. Its tasks move at once and the job is read
// exactly once; before incarnations the coordinator took the new process for the old one.
TEST_P(FaultTest, WorkerRestartedAtTheSameAddressMidEpoch) {
  const Mode& mode = GetParam();
  ProcessClusterOptions options = FaultClusterOptions(3);
  options.worker_timeout = absl::Seconds(60);
  auto cluster_or = ProcessCluster::Start(options);
  ASSERT_TRUE(cluster_or.ok()) << cluster_or.status();
  ProcessCluster& cluster = **cluster_or;

  auto want = RunJob(cluster.coordinator(), "reference", mode);
  ASSERT_TRUE(want.ok()) << want.status() << cluster.Logs();
  const int64_t total = Steps(*want);

  auto t = Trainers::Start(cluster.coordinator(), "faults", mode);
  ASSERT_TRUE(t.ok()) << t.status();
  absl::Status mid = PauseMidEpoch(**t, total / 3, total);
  ASSERT_TRUE(mid.ok()) << mid << cluster.Logs();
  absl::StatusOr<int> victim = WorkerWithUnfinishedTask(cluster, "faults");
  ASSERT_TRUE(victim.ok()) << victim.status();
  const std::string address = cluster.worker_address(*victim);
  // Task id -> worker of the job's unfinished tasks.
  auto unfinished = [&cluster]() -> absl::StatusOr<std::map<int64_t, std::string>> {
    ASSIGN_OR_RETURN(proto::GetStatusResponse status, cluster.Status());
    std::map<int64_t, std::string> out;
    for (const proto::JobStatus& j : status.jobs()) {
      if (j.job_name() != "faults") continue;
      for (const proto::TaskInfo& t : j.tasks()) {
        if (!t.finished()) out[t.task_id()] = t.worker_address();
      }
    }
    return out;
  };
  absl::StatusOr<std::map<int64_t, std::string>> before = unfinished();
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE(cluster.RestartWorker(*victim).ok()) << cluster.Logs();
  // Registered again (RestartWorker waited for that), the new process holds none of the old
  // one's tasks: they moved to the other workers at once (the consumers are paused, so none
  // finished meanwhile; RANGES may hand the new process new ranges).
  absl::StatusOr<std::map<int64_t, std::string>> after = unfinished();
  ASSERT_TRUE(after.ok()) << after.status();
  int moved = 0;
  for (const auto& [task, worker] : *before) {
    if (worker != address) continue;
    auto now = after->find(task);
    ASSERT_NE(now, after->end()) << "task " << task << " finished while the consumers paused";
    EXPECT_NE(now->second, address) << "task " << task << " stayed with the new process";
    ++moved;
  }
  EXPECT_GT(moved, 0);
  ASSERT_TRUE((*t)->Signal(SIGCONT).ok());
  auto got = (*t)->Finish();
  ASSERT_TRUE(got.ok()) << got.status() << cluster.Logs();
  ExpectSameSteps(*want, *got, "with a worker restarted at its address");
  ExpectExactlyOnce(*got, kElements, "with a worker restarted at its address");
  absl::Status finished = WaitForJobFinished(cluster, "faults");
  EXPECT_TRUE(finished.ok()) << finished << cluster.Logs();
  const std::string log = cluster.CoordinatorLog();
  EXPECT_NE(log.find(absl::StrCat("(", address, ") restarted")),
            std::string::npos)
      << cluster.Logs();
  absl::Status stopped = cluster.StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST_P(FaultTest, CoordinatorKilledAndRestartedMidEpoch) {
  const Mode& mode = GetParam();
  // The timeout derived from how fast workers come back (RestartedWorkerTimeout), not the
  // 2 s the other fault tests use to see a dead worker's tasks move soon.
  ProcessClusterOptions options = FaultClusterOptions(3);
  options.worker_timeout = RestartedWorkerTimeout(options.heartbeat_interval);
  auto cluster_or = ProcessCluster::Start(options);
  ASSERT_TRUE(cluster_or.ok()) << cluster_or.status();
  ProcessCluster& cluster = **cluster_or;

  auto want = RunJob(cluster.coordinator(), "reference", mode);
  ASSERT_TRUE(want.ok()) << want.status() << cluster.Logs();
  const int64_t total = Steps(*want);

  auto t = Trainers::Start(cluster.coordinator(), "faults", mode);
  ASSERT_TRUE(t.ok()) << t.status();
  absl::Status mid = PauseMidEpoch(**t, total / 3, total);
  ASSERT_TRUE(mid.ok()) << mid << cluster.Logs();
  auto placed = TaskPlacement(cluster, "faults");
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_FALSE(placed->empty());
  ASSERT_TRUE(cluster.KillCoordinator().ok());
  ASSERT_TRUE((*t)->Signal(SIGCONT).ok());
  // Down for longer than --worker_timeout: the new coordinator must not count the outage
  // against the workers, nor lose the job while workers and consumers reconnect.
  absl::SleepFor(options.worker_timeout + absl::Seconds(1));
  absl::Status restarted = cluster.RestartCoordinator();
  ASSERT_TRUE(restarted.ok()) << restarted << cluster.Logs();
  auto got = (*t)->Finish();
  ASSERT_TRUE(got.ok()) << got.status() << cluster.Logs();
  ExpectSameSteps(*want, *got, "with the coordinator restarted");
  ExpectExactlyOnce(*got, kElements, "with the coordinator restarted");
  ExpectPipelineOrder(mode, *got, "with the coordinator restarted");
  absl::Status finished = WaitForJobFinished(cluster, "faults");
  EXPECT_TRUE(finished.ok()) << finished << cluster.Logs();
  // Every worker reconnected before the restarted coordinator could call it dead (its backoff
  // and its channel's reconnect backoff stay under worker_timeout): no task moved, so nothing
  // was run again from its start elsewhere.
  auto after = TaskPlacement(cluster, "faults");
  ASSERT_TRUE(after.ok()) << after.status();
  for (const auto& [task, worker] : *placed) {
    EXPECT_EQ((*after)[task], worker)
        << "task " << task << " moved although its worker never stopped\n" << cluster.Logs();
  }
  absl::Status stopped = cluster.StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

// The same job (same seed) on 1, 2 and 4 workers: the very same steps.
TEST_P(FaultTest, SameStepsWithOneTwoAndFourWorkers) {
  const Mode& mode = GetParam();
  std::vector<View> first;
  for (int workers : {1, 2, 4}) {
    SCOPED_TRACE(absl::StrCat(workers, " workers"));
    auto cluster_or = ProcessCluster::Start(FaultClusterOptions(workers));
    ASSERT_TRUE(cluster_or.ok()) << cluster_or.status();
    ProcessCluster& cluster = **cluster_or;
    auto got = RunJob(cluster.coordinator(), "order", mode);
    ASSERT_TRUE(got.ok()) << got.status() << cluster.Logs();
    ExpectExactlyOnce(*got, kElements, absl::StrCat(workers, " workers"));
    ExpectPipelineOrder(mode, *got, absl::StrCat(workers, " workers"));
    if (first.empty()) {
      first = *got;
    } else {
      ExpectSameSteps(first, *got, absl::StrCat(workers, " workers against 1"));
    }
    absl::Status stopped = cluster.StopAll();
    EXPECT_TRUE(stopped.ok()) << stopped;
  }
}

// Checkpoint after some steps, stop the trainers, change the number of workers, resume: the
// union of the two runs is the uninterrupted run.
TEST_P(FaultTest, ResumeWithAnotherNumberOfWorkers) {
  const Mode& mode = GetParam();
  auto cluster_or = ProcessCluster::Start(FaultClusterOptions(2));
  ASSERT_TRUE(cluster_or.ok()) << cluster_or.status();
  ProcessCluster& cluster = **cluster_or;

  auto want = RunJob(cluster.coordinator(), "reference", mode);
  ASSERT_TRUE(want.ok()) << want.status() << cluster.Logs();
  const int64_t total = Steps(*want);
  const int64_t first_steps = total / 3;
  auto state_file = [&](int c) { return absl::StrCat(cluster.temp_dir(), "/state-", c); };

  // Part 1 on 2 workers: first_steps steps, then each trainer saves its state and exits.
  auto t1 = Trainers::Start(cluster.coordinator(), "part1", mode, kConsumers, kElements, [&](int c) {
    return std::vector<std::string>{absl::StrCat("--steps=", first_steps),
                                    "--save_state=" + state_file(c)};
  });
  ASSERT_TRUE(t1.ok()) << t1.status();
  auto part1 = (*t1)->Finish();
  ASSERT_TRUE(part1.ok()) << part1.status() << cluster.Logs();
  for (int c = 0; c < kConsumers; ++c) {
    ASSERT_EQ((*part1)[c].size(), static_cast<size_t>(first_steps)) << "consumer " << c;
  }

  // Part 2 on 3 workers (one more, one of the first two gone).
  ASSERT_TRUE(cluster.AddWorker().ok());
  ASSERT_TRUE(cluster.AddWorker().ok());
  ASSERT_TRUE(cluster.KillWorker(0).ok());
  auto t2 = Trainers::Start(cluster.coordinator(), "part2", mode, kConsumers, kElements, [&](int c) {
    return std::vector<std::string>{"--resume_state=" + state_file(c)};
  });
  ASSERT_TRUE(t2.ok()) << t2.status();
  auto part2 = (*t2)->Finish();
  ASSERT_TRUE(part2.ok()) << part2.status() << cluster.Logs();

  // The resumed run numbers its steps from the checkpoint on (or from 0: then shifted).
  std::vector<View> joined = *part1;
  for (int c = 0; c < kConsumers; ++c) {
    const View& p2 = (*part2)[c];
    const int64_t shift = !p2.empty() && p2.begin()->first == 0 ? first_steps : 0;
    for (const auto& [step, s] : p2) {
      EXPECT_TRUE(joined[c].emplace(step + shift, s).second)
          << "consumer " << c << ": step " << step + shift << " in both runs";
    }
  }
  ExpectSameSteps(*want, joined, "checkpoint + resume");
  ExpectExactlyOnce(joined, kElements, "checkpoint + resume");
  ExpectPipelineOrder(mode, joined, "checkpoint + resume");
  absl::Status stopped = cluster.StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

INSTANTIATE_TEST_SUITE_P(Modes, FaultTest, ::testing::Values(DataMode(), RangesMode()),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace sluice
