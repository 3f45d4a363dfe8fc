#include "server/coordinator_state.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Small update builders.
proto::Update RegisterDataset(const std::string& id) {
  proto::Update u;
  u.mutable_register_dataset()->set_dataset_id(id);
  u.mutable_register_dataset()->mutable_dataset()->mutable_source()->mutable_range()->set_stop(10);
  return u;
}
proto::Update RegisterWorker(int64_t id, const std::string& address) {
  proto::Update u;
  u.mutable_register_worker()->set_worker_id(id);
  u.mutable_register_worker()->set_address(address);
  return u;
}
proto::Update WorkerDied(int64_t id) {
  proto::Update u;
  u.mutable_worker_died()->set_worker_id(id);
  return u;
}
proto::Update CreateJob(int64_t id, const std::string& name, const std::string& dataset,
                        proto::ShardingPolicy policy = proto::SHARDING_DATA,
                        int64_t split_source_size = 0, int64_t split_size = 0) {
  proto::Update u;
  proto::CreateJobUpdate* c = u.mutable_create_job();
  c->set_job_id(id);
  c->set_job_name(name);
  c->mutable_options()->set_dataset_id(dataset);
  c->mutable_options()->set_num_consumers(1);
  c->mutable_options()->set_replicas_per_consumer(1);
  c->mutable_options()->set_sharding_policy(policy);
  c->set_split_source_size(split_source_size);
  c->set_split_size(split_size);
  return u;
}
proto::Update CreateTask(int64_t id, int64_t job, int64_t index, int64_t worker) {
  proto::Update u;
  proto::CreateTaskUpdate* c = u.mutable_create_task();
  c->set_task_id(id);
  c->set_job_id(job);
  c->set_task_index(index);
  c->set_worker_id(worker);
  c->set_step_sharded(true);
  return u;
}
proto::Update AssignTask(int64_t task, int64_t worker) {
  proto::Update u;
  u.mutable_assign_task()->set_task_id(task);
  u.mutable_assign_task()->set_worker_id(worker);
  return u;
}
proto::Update FinishTask(int64_t task) {
  proto::Update u;
  u.mutable_finish_task()->set_task_id(task);
  return u;
}
proto::Update FinishJob(int64_t job) {
  proto::Update u;
  u.mutable_finish_job()->set_job_id(job);
  return u;
}
proto::Update ProduceSplit(int64_t job, int64_t task, int64_t index, int64_t begin, int64_t end) {
  proto::Update u;
  proto::ProduceSplitUpdate* p = u.mutable_produce_split();
  p->set_job_id(job);
  p->set_task_id(task);
  p->set_split_index(index);
  p->set_begin(begin);
  p->set_end(end);
  return u;
}

proto::Update TaskWorkerLost(int64_t task, int64_t worker) {
  proto::Update u;
  u.mutable_task_worker_lost()->set_task_id(task);
  u.mutable_task_worker_lost()->set_worker_id(worker);
  return u;
}
proto::Update PoisonEvidence(int64_t task, int64_t worker, const std::string& evidence) {
  proto::Update u;
  u.mutable_task_poison_evidence()->set_task_id(task);
  u.mutable_task_poison_evidence()->set_worker_id(worker);
  u.mutable_task_poison_evidence()->set_evidence(evidence);
  return u;
}
proto::Update TaskProgressed(int64_t task) {
  proto::Update u;
  u.mutable_task_progressed()->set_task_id(task);
  return u;
}
proto::Update FailJob(int64_t job, absl::StatusCode code, const std::string& message) {
  proto::Update u;
  u.mutable_fail_job()->set_job_id(job);
  u.mutable_fail_job()->set_code(static_cast<int>(code));
  u.mutable_fail_job()->set_message(message);
  return u;
}

void ApplyAll(CoordinatorState& state, const std::vector<proto::Update>& updates) {
  for (const proto::Update& u : updates) ASSERT_TRUE(state.Apply(u).ok()) << u.DebugString();
}

// Everything observable, as text, to compare two states.
std::string Dump(const CoordinatorState& s) {
  std::string out = absl::StrCat("datasets=", s.num_datasets(), "\n");
  for (const auto& [id, w] : s.workers()) {
    absl::StrAppend(&out, "worker ", id, " ", w.address, " alive=", w.alive, " tasks=",
                    absl::StrJoin(w.task_ids, ","), " finished_tasks=", w.finished_tasks, "\n");
  }
  for (const auto& [id, j] : s.jobs()) {
    absl::StrAppend(&out, "job ", id, " ", j.name, " tasks=", absl::StrJoin(j.task_ids, ","),
                    " finished=", j.finished, " cursor=", j.split_cursor,
                    " error=", j.error.ToString(), "\n");
  }
  for (const auto& [id, t] : s.tasks()) {
    absl::StrAppend(&out, "task ", id, " job=", t.job_id, " index=", t.index,
                    " worker=", t.worker_id, " finished=", t.finished,
                    " splits=", absl::StrJoin(t.split_indices, ","),
                    " lost_on=", absl::StrJoin(t.lost_on_workers, ","),
                    " completed_by=", absl::StrJoin(t.completed_by, ","), " poison=");
    for (const auto& d : t.poison_deaths) absl::StrAppend(&out, d.worker_id, ":", d.evidence, ";");
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::vector<proto::Update> TwoWorkerJob() {
  return {RegisterDataset("ds-a"),        RegisterWorker(1, "w1:1"),
          RegisterWorker(2, "w2:1"),      CreateJob(1, "train", "ds-a"),
          CreateTask(1, 1, 0, 1),         CreateTask(2, 1, 1, 2)};
}

TEST(CoordinatorStateTest, RegistersDatasetsWorkersJobsAndTasks) {
  CoordinatorState s;
  ApplyAll(s, TwoWorkerJob());
  ASSERT_NE(s.FindDataset("ds-a"), nullptr);
  EXPECT_EQ(s.FindDataset("ds-b"), nullptr);
  EXPECT_EQ(s.num_datasets(), 1u);
  ASSERT_NE(s.FindWorkerByAddress("w2:1"), nullptr);
  EXPECT_EQ(s.FindWorkerByAddress("w2:1")->id, 2);
  EXPECT_EQ(s.FindJobByName("train")->id, 1);
  EXPECT_EQ(s.FindJobByName(""), nullptr);
  EXPECT_THAT(s.FindJob(1)->task_ids, ElementsAre(1, 2));
  EXPECT_THAT(s.FindWorker(1)->task_ids, ElementsAre(1));
  EXPECT_THAT(s.FindWorker(2)->task_ids, ElementsAre(2));
  EXPECT_TRUE(s.FindTask(2)->step_sharded);
  EXPECT_EQ(s.NextWorkerId(), 3);
  EXPECT_EQ(s.NextJobId(), 2);
  EXPECT_EQ(s.NextTaskId(), 3);
  EXPECT_EQ(s.NumUnfinishedTasks(1), 1);
}

TEST(CoordinatorStateTest, RejectsUpdatesThatDoNotFitAndStaysUnchanged) {
  CoordinatorState s;
  ApplyAll(s, TwoWorkerJob());
  const std::string before = Dump(s);
  EXPECT_EQ(s.Apply(RegisterDataset("ds-a")).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Apply(RegisterWorker(7, "w7:1")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Apply(RegisterWorker(3, "w1:1")).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Apply(CreateJob(2, "other", "ds-missing")).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.Apply(CreateJob(2, "train", "ds-a")).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Apply(CreateJob(5, "x", "ds-a")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Apply(CreateTask(3, 9, 0, 1)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.Apply(CreateTask(3, 1, 5, 1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Apply(CreateTask(3, 1, 2, 9)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Apply(AssignTask(9, 1)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.Apply(FinishJob(1)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Apply(ProduceSplit(1, 1, 0, 0, 1)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Apply(WorkerDied(9)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.Apply(proto::Update()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Dump(s), before);
}

TEST(CoordinatorStateTest, DeadWorkerLosesUnfinishedTasksOnlyAndComesBackWithItsId) {
  CoordinatorState s;
  ApplyAll(s, TwoWorkerJob());
  ApplyAll(s, {CreateTask(3, 1, 2, 2), FinishTask(2), WorkerDied(2)});
  EXPECT_FALSE(s.FindWorker(2)->alive);
  EXPECT_EQ(s.FindTask(3)->worker_id, 0);  // unfinished: waits for another worker
  EXPECT_EQ(s.FindTask(2)->worker_id, 2);  // finished: stays where it ran
  // The worker's list holds unfinished tasks only; the finished one is counted, so that the
  // worker is not forgotten while it names the worker.
  EXPECT_THAT(s.FindWorker(2)->task_ids, IsEmpty());
  EXPECT_EQ(s.FindWorker(2)->finished_tasks, 1);
  // A dead worker takes no tasks.
  EXPECT_EQ(s.Apply(AssignTask(3, 2)).code(), absl::StatusCode::kFailedPrecondition);
  ApplyAll(s, {AssignTask(3, 1)});
  EXPECT_THAT(s.FindWorker(1)->task_ids, ElementsAre(1, 3));
  EXPECT_EQ(s.NumUnfinishedTasks(1), 2);

  ApplyAll(s, {RegisterWorker(2, "w2:1")});
  EXPECT_TRUE(s.FindWorker(2)->alive);
  EXPECT_EQ(s.NextWorkerId(), 3);
  // Alive already: registering again does not fit.
  EXPECT_EQ(s.Apply(RegisterWorker(2, "w2:1")).code(), absl::StatusCode::kFailedPrecondition);
}

// Datasets are refcounted by the jobs naming them: one a job names cannot be removed; once
// its last job is removed it is unused again and can be. Owners are charged for their
// unfinished jobs and their datasets (and bytes) until those finish or go.
TEST(CoordinatorStateTest, DatasetsAreRefcountedAndOwnersCharged) {
  CoordinatorState s;
  proto::Update ds = RegisterDataset("ds-a");
  ds.mutable_register_dataset()->set_owner("alice");
  proto::Update job = CreateJob(1, "train", "ds-a");
  job.mutable_create_job()->set_owner("bob");
  ApplyAll(s, {ds, RegisterWorker(1, "w1:1"), job, CreateTask(1, 1, 0, 1)});
  EXPECT_TRUE(s.unused_datasets().empty());
  EXPECT_EQ(s.Usage("alice").datasets, 1);
  EXPECT_GT(s.Usage("alice").dataset_bytes, 0);
  EXPECT_EQ(s.Usage("bob").unfinished_jobs, 1);
  proto::Update remove;
  remove.mutable_remove_dataset()->set_dataset_id("ds-a");
  EXPECT_EQ(s.Apply(remove).code(), absl::StatusCode::kFailedPrecondition);
  ApplyAll(s, {FinishTask(1), FinishJob(1)});
  EXPECT_EQ(s.Usage("bob").unfinished_jobs, 0);
  EXPECT_TRUE(s.unused_datasets().empty()) << "a finished job still names it";
  proto::Update remove_job;
  remove_job.mutable_remove_job()->set_job_id(1);
  ApplyAll(s, {remove_job});
  EXPECT_EQ(s.FindWorker(1)->finished_tasks, 0);
  EXPECT_THAT(s.unused_datasets(), ElementsAre("ds-a"));
  ApplyAll(s, {remove});
  EXPECT_EQ(s.FindDataset("ds-a"), nullptr);
  EXPECT_EQ(s.Usage("alice").datasets, 0);
  EXPECT_EQ(s.num_owners(), 0u);
  EXPECT_EQ(s.Apply(remove).code(), absl::StatusCode::kNotFound);
}

TEST(CoordinatorStateTest, AssignTaskMovesATaskBetweenWorkers) {
  CoordinatorState s;
  ApplyAll(s, TwoWorkerJob());
  ApplyAll(s, {AssignTask(1, 2)});
  EXPECT_THAT(s.FindWorker(1)->task_ids, IsEmpty());
  EXPECT_THAT(s.FindWorker(2)->task_ids, ElementsAre(2, 1));
  EXPECT_EQ(s.FindTask(1)->worker_id, 2);
  ApplyAll(s, {AssignTask(1, 0)});
  EXPECT_EQ(s.FindTask(1)->worker_id, 0);
  EXPECT_THAT(s.FindWorker(2)->task_ids, ElementsAre(2));
}

TEST(CoordinatorStateTest, JobFinishesOnlyWhenEveryTaskFinished) {
  CoordinatorState s;
  ApplyAll(s, TwoWorkerJob());
  ApplyAll(s, {FinishTask(1)});
  EXPECT_EQ(s.Apply(FinishJob(1)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(s.FindJob(1)->finished);
  ApplyAll(s, {FinishTask(2), FinishJob(1)});
  EXPECT_TRUE(s.FindJob(1)->finished);
  EXPECT_EQ(s.NumUnfinishedTasks(1), 0);
  // No new task for a finished job, no assignment of a finished task.
  EXPECT_EQ(s.Apply(CreateTask(3, 1, 2, 1)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Apply(AssignTask(1, 2)).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CoordinatorStateTest, SplitsAdvanceTheCursorInOrderUntilExhausted) {
  CoordinatorState s;
  ApplyAll(s, {RegisterDataset("ds-a"), RegisterWorker(1, "w1:1"), RegisterWorker(2, "w2:1"),
               CreateJob(1, "", "ds-a", proto::SHARDING_DYNAMIC, /*split_source_size=*/10,
                         /*split_size=*/4),
               CreateTask(1, 1, 0, 1), CreateTask(2, 1, 1, 2)});
  const CoordinatorState::Job* job = s.FindJob(1);
  EXPECT_FALSE(job->splits_exhausted());
  ApplyAll(s, {ProduceSplit(1, 1, 0, 0, 4), ProduceSplit(1, 2, 1, 4, 8)});
  // A gap, a repeated index, an overrun and a task of no such job do not fit.
  EXPECT_EQ(s.Apply(ProduceSplit(1, 1, 2, 9, 10)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Apply(ProduceSplit(1, 1, 1, 8, 10)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Apply(ProduceSplit(1, 1, 2, 8, 11)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Apply(ProduceSplit(1, 7, 2, 8, 10)).code(), absl::StatusCode::kNotFound);
  ApplyAll(s, {ProduceSplit(1, 1, 2, 8, 10)});
  EXPECT_TRUE(job->splits_exhausted());
  EXPECT_THAT(s.FindTask(1)->split_indices, ElementsAre(0, 2));
  EXPECT_THAT(s.FindTask(2)->split_indices, ElementsAre(1));
  ASSERT_EQ(job->splits.size(), 3u);
  EXPECT_EQ(job->splits[1].begin, 4);
  EXPECT_EQ(job->splits[1].end, 8);
  EXPECT_EQ(job->splits[1].task_id, 2);
}

TEST(CoordinatorStateTest, ReplayingTheSameUpdatesRebuildsTheSameState) {
  std::vector<proto::Update> log = TwoWorkerJob();
  for (const proto::Update& u :
       {CreateJob(2, "dyn", "ds-a", proto::SHARDING_DYNAMIC, 5, 2), CreateTask(3, 2, 0, 1),
        ProduceSplit(2, 3, 0, 0, 2), WorkerDied(1), AssignTask(3, 2), AssignTask(1, 2),
        FinishTask(2), RegisterWorker(1, "w1:1"), ProduceSplit(2, 3, 1, 2, 4)}) {
    log.push_back(u);
  }
  CoordinatorState a;
  CoordinatorState b;
  ApplyAll(a, log);
  // Through the wire format, as a journal would store it.
  for (const proto::Update& u : log) {
    proto::Update copy;
    ASSERT_TRUE(copy.ParseFromString(u.SerializeAsString()));
    ASSERT_TRUE(b.Apply(copy).ok());
  }
  EXPECT_EQ(Dump(a), Dump(b));
  EXPECT_EQ(a.FindTask(3)->worker_id, 2);
  EXPECT_THAT(a.FindTask(3)->split_indices, ElementsAre(0, 1));
}

proto::Update ConsumerCompleted(int64_t task, int64_t consumer) {
  proto::Update u;
  u.mutable_consumer_completed_task()->set_task_id(task);
  u.mutable_consumer_completed_task()->set_consumer_index(consumer);
  return u;
}

// Consumers' reports of a task read to its end: kept once each, sorted; a bad one is an error
// naming it and changes nothing.
TEST(CoordinatorStateTest, ConsumersCompletedTasksAreKeptOnceEach) {
  CoordinatorState state;
  proto::Update job = CreateJob(1, "train", "ds-a");
  job.mutable_create_job()->mutable_options()->set_num_consumers(3);
  ApplyAll(state, {RegisterDataset("ds-a"), RegisterWorker(1, "w1:1"), job,
                   CreateTask(1, 1, 0, 1)});
  ApplyAll(state, {ConsumerCompleted(1, 2), ConsumerCompleted(1, 0), ConsumerCompleted(1, 2)});
  EXPECT_THAT(state.FindTask(1)->completed_by, ElementsAre(0, 2));
  EXPECT_EQ(state.Apply(ConsumerCompleted(9, 0)).code(), absl::StatusCode::kNotFound);
  absl::Status bad = state.Apply(ConsumerCompleted(1, 3));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("consumer index 3 outside [0, 3)"));
  EXPECT_EQ(state.Apply(ConsumerCompleted(1, -1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(state.FindTask(1)->completed_by, ElementsAre(0, 2));
  EXPECT_FALSE(state.FindTask(1)->finished);  // reports alone do not finish it
}

// Failure policy: a task's lost workers are counted, and a failed job is finished with its
// error, its unfinished tasks finished with it (nobody runs them again). Both survive a
// snapshot.
TEST(CoordinatorStateTest, LostWorkersAreCountedAndAFailedJobIsFinishedWithItsError) {
  CoordinatorState state;
  ApplyAll(state, TwoWorkerJob());
  ApplyAll(state, {TaskWorkerLost(1, 1), WorkerDied(1), AssignTask(1, 2), TaskWorkerLost(1, 2),
                   FinishTask(2)});
  EXPECT_THAT(state.FindTask(1)->lost_on_workers, ElementsAre(1, 2));
  EXPECT_FALSE(state.FindJob(1)->finished);

  // Bad failures change nothing.
  EXPECT_EQ(state.Apply(FailJob(9, absl::StatusCode::kInternal, "x")).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(state.Apply(FailJob(1, absl::StatusCode::kOk, "x")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(state.Apply(TaskWorkerLost(1, 7)).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(state.FindJob(1)->finished);
  EXPECT_THAT(state.FindTask(1)->lost_on_workers, ElementsAre(1, 2));

  ASSERT_TRUE(state.Apply(FailJob(1, absl::StatusCode::kResourceExhausted, "too big")).ok());
  EXPECT_TRUE(state.FindJob(1)->finished);
  EXPECT_EQ(state.FindJob(1)->error,
            absl::Status(absl::StatusCode::kResourceExhausted, "too big"));
  EXPECT_TRUE(state.FindTask(1)->finished);
  EXPECT_EQ(state.NumUnfinishedTasks(2), 0);
  // Once failed (finished), it cannot fail again.
  EXPECT_EQ(state.Apply(FailJob(1, absl::StatusCode::kInternal, "again")).code(),
            absl::StatusCode::kFailedPrecondition);
  // And it can be removed like any finished job.
  CoordinatorState restored;
  ASSERT_TRUE(restored.Restore(state.Snapshot()).ok());
  EXPECT_EQ(Dump(restored), Dump(state));
  proto::Update remove;
  remove.mutable_remove_job()->set_job_id(1);
  EXPECT_TRUE(state.Apply(remove).ok());
}

std::vector<int64_t> PoisonWorkers(const CoordinatorState& state, int64_t task) {
  std::vector<int64_t> out;
  for (const auto& d : state.FindTask(task)->poison_deaths) out.push_back(d.worker_id);
  return out;
}

// Failure policy: the evidence against a task names each worker once (the same worker dying
// twice with it is one piece), only workers the task was lost on, and is cleared when the task
// makes progress; it survives a snapshot and a replay through the wire format.
TEST(CoordinatorStateTest, PoisonEvidenceNamesDistinctWorkersUntilTheTaskMakesProgress) {
  CoordinatorState state;
  ApplyAll(state, TwoWorkerJob());
  ApplyAll(state, {RegisterWorker(3, "w3:1")});
  std::vector<proto::Update> log = {
      TaskWorkerLost(1, 1), PoisonEvidence(1, 1, "w1 fast"), WorkerDied(1), AssignTask(1, 2),
      TaskWorkerLost(1, 2), PoisonEvidence(1, 2, "w2 fast"), WorkerDied(2),
      RegisterWorker(1, "w1:1"), AssignTask(1, 1), TaskWorkerLost(1, 1),
      PoisonEvidence(1, 1, "w1 again"), WorkerDied(1)};
  ApplyAll(state, log);
  EXPECT_THAT(state.FindTask(1)->lost_on_workers, ElementsAre(1, 2, 1));
  EXPECT_THAT(PoisonWorkers(state, 1), ElementsAre(1, 2));
  EXPECT_EQ(state.FindTask(1)->poison_deaths[0].evidence, "w1 fast");

  // Evidence about a death the task does not record, or an unknown task, changes nothing.
  absl::Status bad = state.Apply(PoisonEvidence(1, 3, "w3"));
  EXPECT_EQ(bad.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(bad.message(), HasSubstr("task 1 was not lost on worker 3"));
  EXPECT_EQ(state.Apply(PoisonEvidence(9, 1, "x")).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(state.Apply(TaskProgressed(9)).code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(PoisonWorkers(state, 1), ElementsAre(1, 2));

  // A snapshot and a replay of the journal's records give the same state.
  CoordinatorState restored;
  ASSERT_TRUE(restored.Restore(state.Snapshot()).ok());
  EXPECT_EQ(Dump(restored), Dump(state));
  CoordinatorState replayed;
  ApplyAll(replayed, TwoWorkerJob());
  ApplyAll(replayed, {RegisterWorker(3, "w3:1")});
  for (const proto::Update& u : log) {
    proto::Update copy;
    ASSERT_TRUE(copy.ParseFromString(u.SerializeAsString()));
    ASSERT_TRUE(replayed.Apply(copy).ok());
  }
  EXPECT_EQ(Dump(replayed), Dump(state));

  // Progress clears the evidence, not the record of the deaths; new evidence starts over.
  ApplyAll(state, {AssignTask(1, 3), TaskProgressed(1)});
  EXPECT_THAT(state.FindTask(1)->poison_deaths, IsEmpty());
  EXPECT_THAT(state.FindTask(1)->lost_on_workers, ElementsAre(1, 2, 1));
  ApplyAll(state, {TaskWorkerLost(1, 3), PoisonEvidence(1, 3, "w3 fast")});
  EXPECT_THAT(PoisonWorkers(state, 1), ElementsAre(3));
  CoordinatorState again;
  ASSERT_TRUE(again.Restore(state.Snapshot()).ok());
  EXPECT_EQ(Dump(again), Dump(state));
}

// MakeRanges walks ranges_jobs() instead of every job: it must name exactly the ranges jobs
// that exist, in id order, after creation, removal and a snapshot round trip.
TEST(CoordinatorStateTest, RangesJobsNamesExactlyTheRangesJobsThatExist) {
  CoordinatorState s;
  ASSERT_TRUE(s.Apply(RegisterDataset("d")).ok());
  proto::Update ranges3 = CreateJob(3, "r3", "d", proto::SHARDING_RANGES);
  ranges3.mutable_create_job()->set_ranges(true);
  ranges3.mutable_create_job()->set_num_ranges(0);  // no range to make: can finish at once
  proto::Update ranges1 = CreateJob(1, "r1", "d", proto::SHARDING_RANGES);
  ranges1.mutable_create_job()->set_ranges(true);
  ranges1.mutable_create_job()->set_num_ranges(4);
  ASSERT_TRUE(s.Apply(ranges1).ok());
  ASSERT_TRUE(s.Apply(CreateJob(2, "data", "d")).ok());
  ASSERT_TRUE(s.Apply(ranges3).ok());
  // A RANGES request that fell back to DATA (ranges false) is not a ranges job.
  ASSERT_TRUE(s.Apply(CreateJob(4, "fell_back", "d", proto::SHARDING_RANGES)).ok());
  EXPECT_THAT(s.ranges_jobs(), ElementsAre(1, 3));

  CoordinatorState restored;
  ASSERT_TRUE(restored.Restore(s.Snapshot()).ok());
  EXPECT_THAT(restored.ranges_jobs(), ElementsAre(1, 3));

  proto::Update finish;
  finish.mutable_finish_job()->set_job_id(3);
  ASSERT_TRUE(s.Apply(finish).ok());
  proto::Update remove;
  remove.mutable_remove_job()->set_job_id(3);
  ASSERT_TRUE(s.Apply(remove).ok());
  EXPECT_THAT(s.ranges_jobs(), ElementsAre(1));
}

}  // namespace
}  // namespace sluice
