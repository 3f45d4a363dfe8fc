// The failure policy's quarantine (docs/SERVICE.md, "Failure policy"; CoordinatorOptions::
// max_task_worker_deaths and task_death_window) through the Coordinator, with a fake clock and
// no network: a task is quarantined only on evidence that it kills workers, that is
// max_task_worker_deaths distinct workers declared dead within task_death_window of being
// handed it, none having reported a step of it, with no step of it produced in between.
// Workers that die while making progress (preemption) never fail a job.
// Errors that heal (TaskHealTest): a task given back after a transient error runs again with no
// death counted; a deterministic error moves the task, and fails its job only when a second
// worker reports the same error or no worker is left to try.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/util/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "tests/server/journal_test_util.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

class TaskQuarantineTest : public ::testing::Test {
 protected:
  TaskQuarantineTest() { coordinator_ = Coordinator::Create(Options()).value(); }

  CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.clock = &clock_;
    o.worker_timeout = absl::Seconds(10);
    // The tests' consumers heartbeat once and stay silent through minutes of worker deaths;
    // a job left without consumers would end (consumer_timeout) before the evidence is in.
    o.consumer_timeout = absl::Hours(1);
    o.log = [this](absl::string_view line) { log_.emplace_back(line); };
    return o;
  }

  // The job "poison": one task (SHARDING_OFF) over a small pipeline; its task id.
  int64_t PoisonJob() {
    proto::RegisterDatasetRequest reg;
    reg.set_wire_version(proto::WIRE_VERSION_1);
    reg.set_pipeline("range(10).batch(2)");
    proto::RegisterDatasetResponse ds;
    EXPECT_TRUE(coordinator_->RegisterDataset(reg, &ds).ok());
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_name("poison");
    req.mutable_options()->set_dataset_id(ds.dataset_id());
    req.mutable_options()->set_num_consumers(1);
    req.mutable_options()->set_replicas_per_consumer(1);
    req.mutable_options()->set_sharding_policy(proto::SHARDING_OFF);
    proto::GetOrCreateJobResponse job;
    absl::Status s = coordinator_->GetOrCreateJob(req, &job);
    EXPECT_TRUE(s.ok()) << s;
    job_id_ = job.job_id();
    proto::ClientHeartbeatRequest creq;
    creq.set_wire_version(proto::WIRE_VERSION_1);
    creq.set_job_id(job_id_);
    proto::ClientHeartbeatResponse cresp;
    EXPECT_TRUE(coordinator_->ClientHeartbeat(creq, &cresp).ok());
    return cresp.tasks_size() == 1 ? cresp.tasks(0).task_id() : -1;
  }

  // A heartbeat from `address` listing `active` tasks, with `steps` steps produced of each.
  proto::WorkerHeartbeatResponse Heartbeat(const std::string& address,
                                           std::vector<int64_t> active = {},
                                           int64_t steps = 0) {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(address);
    for (int64_t t : active) {
      req.add_active_task_ids(t);
      proto::TaskProgress* p = req.add_task_progress();
      p->set_task_id(t);
      p->set_steps_produced(steps);
    }
    proto::WorkerHeartbeatResponse resp;
    absl::Status s = coordinator_->WorkerHeartbeat(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  // `address` heartbeats and is handed `task` (asserted).
  void HandTo(const std::string& address, int64_t task) {
    proto::WorkerHeartbeatResponse r = Heartbeat(address);
    ASSERT_EQ(r.new_tasks_size(), 1) << address;
    ASSERT_EQ(r.new_tasks(0).task_id(), task) << address;
  }

  // Every worker falls silent for longer than worker_timeout; the coordinator declares the
  // silent ones dead.
  void Silence() {
    clock_.Advance(absl::Seconds(11));
    coordinator_->CheckWorkerLiveness();
  }

  // The poison job's error (OK while it runs).
  absl::Status JobError() {
    proto::ClientHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(job_id_);
    proto::ClientHeartbeatResponse resp;
    return coordinator_->ClientHeartbeat(req, &resp);
  }

  int64_t LogLinesWith(const std::string& needle) const {
    int64_t n = 0;
    for (const std::string& line : log_) n += absl::StrContains(line, needle) ? 1 : 0;
    return n;
  }

  FakeClock clock_;
  std::vector<std::string> log_;
  std::unique_ptr<Coordinator> coordinator_;
  int64_t job_id_ = 0;
};

// A task that kills every worker it is handed to before its first step is quarantined at the
// third distinct worker: its job fails with FAILED_PRECONDITION naming the task, each worker
// and how it died, and no worker gets it again. A drained worker is no evidence.
TEST_F(TaskQuarantineTest, ATaskWhoseWorkersDieBeforeItsFirstStepIsQuarantined) {
  ASSERT_EQ(coordinator_->options().max_task_worker_deaths, 3);
  ASSERT_EQ(coordinator_->options().task_death_window, absl::Seconds(60));
  Heartbeat("w0:1");
  const int64_t task = PoisonJob();
  HandTo("w0:1", task);
  {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address("w0:1");
    req.set_draining(true);
    req.add_active_task_ids(task);
    proto::WorkerHeartbeatResponse resp;
    ASSERT_TRUE(coordinator_->WorkerHeartbeat(req, &resp).ok());
  }
  for (int i = 1; i <= 3; ++i) {
    HandTo(absl::StrCat("w", i, ":1"), task);
    Silence();
    if (i < 3) {
      EXPECT_TRUE(JobError().ok()) << "death " << i << ": " << JobError();
    }
  }
  absl::Status error = JobError();
  EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition) << error;
  EXPECT_THAT(error.message(),
              HasSubstr(absl::StrCat("job ", job_id_, " (poison): task ", task,
                                     " (index 0) is quarantined: 3 workers died soon after they "
                                     "were handed it, none having produced a step of it")));
  for (int i = 1; i <= 3; ++i) {
    EXPECT_THAT(error.message(),
                HasSubstr(absl::StrCat("(w", i, ":1): silent from 0 after it was handed the "
                                       "task, no step of it produced")));
  }
  EXPECT_THAT(error.message(), HasSubstr("max_task_worker_deaths 3, task_death_window 1m"));
  EXPECT_THAT(error.message(), Not(HasSubstr("w0:1")));
  EXPECT_THAT(Heartbeat("w4:1").new_tasks(), IsEmpty());
  EXPECT_EQ(coordinator_->TEST_TableSizes().task_runs, 0u);  // nothing kept for a failed job
}

// Preemption: workers that die after reporting steps of the task are no evidence, however
// many die.
TEST_F(TaskQuarantineTest, WorkersThatDieWhileTheTaskMakesProgressNeverQuarantineIt) {
  Heartbeat("w1:1");
  const int64_t task = PoisonJob();
  for (int i = 1; i <= 6; ++i) {
    const std::string w = absl::StrCat("w", i, ":1");
    HandTo(w, task);
    Heartbeat(w, {task}, /*steps=*/1);
    Silence();
  }
  EXPECT_TRUE(JobError().ok()) << JobError();
  EXPECT_EQ(LogLinesWith("counts against it"), 0);
  HandTo("w9:1", task);
}

// GetStatus shows the failure policy's view of each task's current run (TaskInfo.
// progressed_on_worker): whether the worker holding it reported a step of it since it was
// handed the task. The job's steps_produced is no such signal: it keeps the counts of the
// workers that ran the task before (FailurePolicyTest killed a new worker on it before that
// worker's first step, 1 in ~10 under load, and that death rightly counted against the task).
TEST_F(TaskQuarantineTest, GetStatusShowsWhetherTheTasksCurrentWorkerProducedAStep) {
  auto status = [this]() {
    proto::GetStatusRequest req;
    proto::GetStatusResponse resp;
    EXPECT_TRUE(coordinator_->GetStatus(req, &resp).ok());
    EXPECT_EQ(resp.jobs_size(), 1);
    EXPECT_EQ(resp.jobs(0).tasks_size(), 1);
    return resp.jobs(0);
  };
  Heartbeat("w1:1");
  const int64_t task = PoisonJob();
  EXPECT_FALSE(status().tasks(0).progressed_on_worker());
  HandTo("w1:1", task);
  EXPECT_FALSE(status().tasks(0).progressed_on_worker());
  Heartbeat("w1:1", {task}, /*steps=*/5);
  EXPECT_TRUE(status().tasks(0).progressed_on_worker());
  Silence();
  HandTo("w2:1", task);
  const proto::JobStatus moved = status();
  EXPECT_EQ(moved.tasks(0).worker_address(), "w2:1");
  EXPECT_EQ(moved.steps_produced(), 5);  // w1's
  EXPECT_FALSE(moved.tasks(0).progressed_on_worker());
  Heartbeat("w2:1", {task}, /*steps=*/0);
  EXPECT_FALSE(status().tasks(0).progressed_on_worker());
  Heartbeat("w2:1", {task}, /*steps=*/1);
  EXPECT_TRUE(status().tasks(0).progressed_on_worker());
}

// "With no progress in between": a step of the task on any worker clears the evidence so far.
TEST_F(TaskQuarantineTest, AStepOnAnyWorkerClearsTheEvidence) {
  Heartbeat("w1:1");
  const int64_t task = PoisonJob();
  for (int i = 1; i <= 2; ++i) {
    HandTo(absl::StrCat("w", i, ":1"), task);
    Silence();
  }
  EXPECT_EQ(LogLinesWith("counts against it"), 2);
  HandTo("w3:1", task);
  Heartbeat("w3:1", {task}, /*steps=*/1);
  EXPECT_EQ(LogLinesWith("no longer count against it"), 1);
  Silence();
  for (int i = 4; i <= 5; ++i) {
    HandTo(absl::StrCat("w", i, ":1"), task);
    Silence();
  }
  EXPECT_TRUE(JobError().ok()) << JobError();  // 2 since the step, not 4
  HandTo("w6:1", task);
  Silence();
  absl::Status error = JobError();
  EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition) << error;
  for (const char* w : {"w4:1", "w5:1", "w6:1"}) EXPECT_THAT(error.message(), HasSubstr(w));
  for (const char* w : {"w1:1", "w2:1", "w3:1"}) EXPECT_THAT(error.message(), Not(HasSubstr(w)));
}

// The same worker dying twice with the task (it came back in between) is one piece of
// evidence: distinct workers count.
TEST_F(TaskQuarantineTest, TheSameWorkerDyingTwiceCountsOnce) {
  Heartbeat("w1:1");
  const int64_t task = PoisonJob();
  HandTo("w1:1", task);
  Silence();
  HandTo("w1:1", task);  // back (a restarted process at the same address), handed it again
  Silence();
  HandTo("w2:1", task);
  Silence();
  EXPECT_EQ(LogLinesWith("counts against it"), 2);
  EXPECT_TRUE(JobError().ok()) << JobError();  // w1 and w2: two workers
  HandTo("w3:1", task);
  Silence();
  EXPECT_EQ(JobError().code(), absl::StatusCode::kFailedPrecondition);
}

// A worker last heard from more than task_death_window after it was handed the task is no
// evidence, even without a step (a slow pipeline that was then preempted); nor is a worker
// that was assigned the task but never told (it died before its next heartbeat).
TEST_F(TaskQuarantineTest, LateDeathsAndTasksNeverHandedOverAreNoEvidence) {
  Heartbeat("w1:1");
  const int64_t task = PoisonJob();  // assigned to w1, which never heartbeats again
  Silence();
  HandTo("w2:1", task);
  for (int beat = 0; beat < 13; ++beat) {  // 65 s of heartbeats, no step
    clock_.Advance(absl::Seconds(5));
    Heartbeat("w2:1", {task});
  }
  Silence();
  EXPECT_EQ(LogLinesWith("counts against it"), 0);
  for (int i = 3; i <= 4; ++i) {
    HandTo(absl::StrCat("w", i, ":1"), task);
    clock_.Advance(absl::Seconds(59));  // within the window: still evidence
    Heartbeat(absl::StrCat("w", i, ":1"), {task});
    Silence();
  }
  EXPECT_EQ(LogLinesWith("counts against it"), 2);
  EXPECT_TRUE(JobError().ok()) << JobError();
  HandTo("w5:1", task);
  Silence();
  absl::Status error = JobError();
  EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition) << error;
  EXPECT_THAT(error.message(), HasSubstr("(w3:1): silent from 59s after it was handed the task"));
  EXPECT_THAT(error.message(), Not(HasSubstr("w1:1")));
  EXPECT_THAT(error.message(), Not(HasSubstr("w2:1")));
}

// With a journal: the evidence survives a restart (journaled, replayed), while a run the
// restarted coordinator did not see handed over is no evidence (its timing is not state), so
// a restart can only make the rule more lenient.
TEST_F(TaskQuarantineTest, EvidenceSurvivesARestartAndRunsFromBeforeItDoNotCount) {
  journal_test::FakeFileSystem fs;
  CoordinatorOptions o = Options();
  o.work_dir = "/journal";
  o.journal_fs = &fs;
  {
    auto c = Coordinator::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = *std::move(c);
  }
  Heartbeat("w1:1");
  const int64_t task = PoisonJob();
  for (int i = 1; i <= 2; ++i) {
    HandTo(absl::StrCat("w", i, ":1"), task);
    Silence();
  }
  HandTo("w3:1", task);
  // Restart: the journal is replayed into a new coordinator.
  coordinator_.reset();
  {
    auto c = Coordinator::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = *std::move(c);
  }
  coordinator_->CheckWorkerLiveness();  // w3 counts from now
  Silence();                            // w3 dies: handed the task before the restart
  EXPECT_TRUE(JobError().ok()) << JobError();
  HandTo("w4:1", task);
  Silence();
  absl::Status error = JobError();
  EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition) << error;
  for (const char* w : {"w1:1", "w2:1", "w4:1"}) EXPECT_THAT(error.message(), HasSubstr(w));
  EXPECT_THAT(error.message(), Not(HasSubstr("w3:1")));
}

// 0 turns the rule off: no evidence is even recorded.
TEST_F(TaskQuarantineTest, ZeroNeverQuarantines) {
  CoordinatorOptions o = Options();
  o.max_task_worker_deaths = 0;
  coordinator_ = Coordinator::Create(o).value();
  Heartbeat("w1:1");
  const int64_t task = PoisonJob();
  for (int i = 1; i <= 5; ++i) {
    HandTo(absl::StrCat("w", i, ":1"), task);
    Silence();
  }
  EXPECT_TRUE(JobError().ok()) << JobError();
  EXPECT_EQ(LogLinesWith("counts against it"), 0);
  HandTo("w9:1", task);
}

// Errors that heal: the same fixture, reports instead of deaths.
using TaskHealTest = TaskQuarantineTest;

// A heartbeat from `address` that gives `task` back after a transient error (code `code`).
proto::WorkerHeartbeatRequest GiveBack(const std::string& address, int64_t task,
                                       absl::StatusCode code = absl::StatusCode::kUnavailable) {
  proto::WorkerHeartbeatRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_worker_address(address);
  proto::TaskFailure* back = req.add_handed_back_tasks();
  back->set_task_id(task);
  back->set_code(static_cast<int>(code));
  back->set_message(absl::StrCat("GetSplit for task ", task, " from the coordinator: ",
                                 "failed to connect"));
  return req;
}

// A heartbeat from `address` reporting that `task` failed with (code, message).
proto::WorkerHeartbeatRequest Fail(const std::string& address, int64_t task, absl::StatusCode code,
                                   const std::string& message) {
  proto::WorkerHeartbeatRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_worker_address(address);
  req.add_active_task_ids(task);
  proto::TaskFailure* f = req.add_failed_tasks();
  f->set_task_id(task);
  f->set_code(static_cast<int>(code));
  f->set_message(message);
  return req;
}

// The "Why" of issue 32: a coordinator down longer than GetSplit retries ended the task's
// buffer with UNAVAILABLE, which was never reported, so the task never moved. Now the worker
// gives it back: it runs again on another worker, no death and no evidence counted.
TEST_F(TaskHealTest, ATaskGivenBackAfterATransientErrorRunsAgainWithNoDeathCounted) {
  Heartbeat("w1:1");
  const int64_t task = PoisonJob();  // one task: made with one live worker
  Heartbeat("w2:1");
  HandTo("w1:1", task);
  proto::WorkerHeartbeatResponse resp;
  ASSERT_TRUE(coordinator_->WorkerHeartbeat(GiveBack("w1:1", task), &resp).ok());
  for (const proto::TaskDef& t : resp.new_tasks()) EXPECT_NE(t.task_id(), task);
  HandTo("w2:1", task);
  // A stale give-back (the task moved since) changes nothing.
  ASSERT_TRUE(coordinator_->WorkerHeartbeat(GiveBack("w1:1", task), &resp).ok());
  EXPECT_THAT(Heartbeat("w2:1", {task}).tasks_to_stop(), IsEmpty());
  // Given back again and again: it goes on moving, never counted against the task.
  for (int i = 0; i < 5; ++i) {
    const std::string from = i % 2 == 0 ? "w2:1" : "w1:1";
    const std::string to = i % 2 == 0 ? "w1:1" : "w2:1";
    ASSERT_TRUE(coordinator_->WorkerHeartbeat(GiveBack(from, task), &resp).ok());
    HandTo(to, task);
  }
  EXPECT_TRUE(JobError().ok()) << JobError();
  EXPECT_EQ(LogLinesWith("counts against it"), 0);
  EXPECT_EQ(LogLinesWith("is dead"), 0);
  EXPECT_GE(LogLinesWith("gave it back after a transient error"), 6);
  const proto::StateSnapshot snapshot = coordinator_->Snapshot();
  for (const proto::Update& u : snapshot.updates()) {
    EXPECT_FALSE(u.has_task_worker_lost()) << u.ShortDebugString();
    EXPECT_FALSE(u.has_fail_job()) << u.ShortDebugString();
  }
}

// Alone, a worker that gives a task back gets it again at its next heartbeat (which paces
// the retries); a give-back with a code that is not transient is refused.
TEST_F(TaskHealTest, ALoneWorkerGetsItsGivenBackTaskAgain) {
  Heartbeat("w1:1");
  const int64_t task = PoisonJob();
  HandTo("w1:1", task);
  proto::WorkerHeartbeatResponse resp;
  absl::Status refused = coordinator_->WorkerHeartbeat(
      GiveBack("w1:1", task, absl::StatusCode::kInvalidArgument), &resp);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("handed_back_tasks"));
  resp.Clear();
  ASSERT_TRUE(coordinator_->WorkerHeartbeat(GiveBack("w1:1", task), &resp).ok());
  ASSERT_EQ(resp.new_tasks_size(), 1);
  EXPECT_EQ(resp.new_tasks(0).task_id(), task);
  EXPECT_TRUE(JobError().ok()) << JobError();
}

// Errors local to one worker (its memory, its data root, a plugin it lacks) move the task;
// different errors on two workers move it on to a third; with nobody left to try, the job
// fails with the last error.
TEST_F(TaskHealTest, ADeterministicErrorMovesTheTaskUntilNoWorkerIsLeftToTry) {
  Heartbeat("w1:1");
  const int64_t task = PoisonJob();
  Heartbeat("w2:1");
  Heartbeat("w3:1");
  HandTo("w1:1", task);
  proto::WorkerHeartbeatResponse resp;
  ASSERT_TRUE(coordinator_
                  ->WorkerHeartbeat(Fail("w1:1", task, absl::StatusCode::kResourceExhausted,
                                         "batch: over --max_process_bytes"),
                                    &resp)
                  .ok());
  EXPECT_THAT(resp.tasks_to_stop(), ::testing::ElementsAre(task));
  EXPECT_TRUE(JobError().ok()) << JobError();
  HandTo("w2:1", task);
  ASSERT_TRUE(coordinator_
                  ->WorkerHeartbeat(Fail("w2:1", task, absl::StatusCode::kNotFound,
                                         "plugin libmy_op.so not found"),
                                    &resp)
                  .ok());
  EXPECT_TRUE(JobError().ok()) << JobError();
  HandTo("w3:1", task);
  // A fourth worker joins after the task left; w3 fails it differently; w4 gets it.
  Heartbeat("w4:1");
  ASSERT_TRUE(coordinator_
                  ->WorkerHeartbeat(Fail("w3:1", task, absl::StatusCode::kPermissionDenied,
                                         "outside --data_root"),
                                    &resp)
                  .ok());
  EXPECT_TRUE(JobError().ok()) << JobError();
  HandTo("w4:1", task);
  ASSERT_TRUE(coordinator_
                  ->WorkerHeartbeat(Fail("w4:1", task, absl::StatusCode::kDataLoss,
                                         "corrupt record at offset 12"),
                                    &resp)
                  .ok());
  absl::Status error = JobError();
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss) << error;
  EXPECT_THAT(error.message(), HasSubstr("corrupt record at offset 12"));
  EXPECT_THAT(error.message(), HasSubstr("no other live worker is left to try it"));
  EXPECT_THAT(error.message(), HasSubstr("3 other worker(s)"));
}

// One worker's deterministic error, with no other worker: the job fails at once, as before.
TEST_F(TaskHealTest, ALoneWorkersDeterministicErrorFailsTheJobAtOnce) {
  Heartbeat("w1:1");
  const int64_t task = PoisonJob();
  HandTo("w1:1", task);
  proto::WorkerHeartbeatResponse resp;
  ASSERT_TRUE(coordinator_
                  ->WorkerHeartbeat(Fail("w1:1", task, absl::StatusCode::kInvalidArgument,
                                         "map: no such column"),
                                    &resp)
                  .ok());
  absl::Status error = JobError();
  EXPECT_EQ(error.code(), absl::StatusCode::kInvalidArgument) << error;
  EXPECT_THAT(error.message(), HasSubstr("w1:1"));
}

// A task refused at one worker's memory limit of one element (TaskFailure.element_limit_bytes)
// is refused the same way by every worker with a limit as low, whatever else they hold (one
// that holds the job's other task may report its process limit instead, hiding the cause: the
// flake ServiceMemoryLimitTest had). It moves only to a worker known to have a larger limit
// (a worker that reports none counts as any); with none, the job fails at once with the
// refusal.
TEST_F(TaskHealTest, AnElementLimitRefusalMovesTheTaskOnlyToAWorkerWithALargerLimit) {
  // A heartbeat from `address` reporting its element limit, optionally failing `task`.
  auto beat = [this](const std::string& address, int64_t limit, int64_t task = 0) {
    proto::WorkerHeartbeatRequest req;
    if (task == 0) {
      req.set_wire_version(proto::WIRE_VERSION_1);
      req.set_worker_address(address);
    } else {
      req = Fail(address, task, absl::StatusCode::kResourceExhausted,
                 absl::StrCat("op 2 (batch): a batch of 1000000000 elements needs more than the "
                              "memory limit of one element, ", limit,
                              " bytes (--max_element_bytes)"));
      req.mutable_failed_tasks(0)->set_element_limit_bytes(limit);
    }
    req.set_max_element_bytes(limit);
    proto::WorkerHeartbeatResponse resp;
    EXPECT_TRUE(coordinator_->WorkerHeartbeat(req, &resp).ok());
    return resp;
  };
  constexpr int64_t k64MiB = int64_t{64} << 20;
  beat("w1:1", k64MiB);
  const int64_t task = PoisonJob();
  beat("w2:1", k64MiB);           // as low: never tried
  beat("w3:1", int64_t{1} << 30);  // larger: tried
  EXPECT_THAT(beat("w1:1", k64MiB).new_tasks(), ::testing::SizeIs(1));
  EXPECT_THAT(beat("w1:1", k64MiB, task).tasks_to_stop(), ::testing::ElementsAre(task));
  EXPECT_TRUE(JobError().ok()) << JobError();
  EXPECT_THAT(beat("w2:1", k64MiB).new_tasks(), IsEmpty());
  ASSERT_EQ(beat("w3:1", int64_t{1} << 30).new_tasks_size(), 1);
  // w3 refuses it too, at its own limit: no worker with a larger one is left.
  beat("w3:1", int64_t{1} << 30, task);
  absl::Status error = JobError();
  EXPECT_EQ(error.code(), absl::StatusCode::kResourceExhausted) << error;
  EXPECT_THAT(error.message(), HasSubstr("(--max_element_bytes)"));
  EXPECT_THAT(error.message(), HasSubstr("no other live worker has a memory limit of one "
                                         "element above 1073741824 bytes"));
  EXPECT_THAT(beat("w2:1", k64MiB).new_tasks(), IsEmpty());
}

// With every worker at the same limit the first refusal fails the job: no retry elsewhere.
TEST_F(TaskHealTest, AnElementLimitRefusalFailsTheJobAtOnceWhenNoWorkerHasALargerLimit) {
  constexpr int64_t k64MiB = int64_t{64} << 20;
  auto beat = [this](const std::string& address) {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(address);
    req.set_max_element_bytes(k64MiB);
    proto::WorkerHeartbeatResponse resp;
    EXPECT_TRUE(coordinator_->WorkerHeartbeat(req, &resp).ok());
    return resp;
  };
  beat("w1:1");
  const int64_t task = PoisonJob();
  beat("w2:1");
  ASSERT_EQ(beat("w1:1").new_tasks_size(), 1);
  proto::WorkerHeartbeatRequest failed =
      Fail("w1:1", task, absl::StatusCode::kResourceExhausted, "op 2 (batch): over the limit");
  failed.mutable_failed_tasks(0)->set_element_limit_bytes(k64MiB);
  failed.set_max_element_bytes(k64MiB);
  proto::WorkerHeartbeatResponse resp;
  ASSERT_TRUE(coordinator_->WorkerHeartbeat(failed, &resp).ok());
  absl::Status error = JobError();
  EXPECT_EQ(error.code(), absl::StatusCode::kResourceExhausted) << error;
  EXPECT_THAT(error.message(), HasSubstr("op 2 (batch): over the limit"));
  EXPECT_THAT(error.message(), HasSubstr("above 67108864 bytes"));
  EXPECT_THAT(beat("w2:1").new_tasks(), IsEmpty());
}

}  // namespace
}  // namespace sluice
