// Bounded state and admission in the coordinator (docs/SERVICE.md, "Bounded state" and
// "Admission"): workers' task lists hold unfinished tasks only, abandoned jobs of every kind
// are collected, unused datasets are removed (refcounted by their jobs), per-identity quotas
// refuse one caller with RESOURCE_EXHAUSTED naming the limit while others go on, the quotas
// survive a restart, and the status comes in pages. No network; a fake clock.
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "core/util/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

class BoundedStateTest : public ::testing::Test {
 protected:
  BoundedStateTest() { Reset(Options()); }

  CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.clock = &clock_;
    o.worker_timeout = absl::Seconds(10);
    o.finished_job_ttl = absl::Minutes(1);
    o.dead_worker_ttl = absl::Minutes(2);
    o.idle_job_ttl = absl::Minutes(3);
    o.unused_dataset_ttl = absl::Minutes(2);
    o.log = [this](absl::string_view line) { log_.emplace_back(line); };
    return o;
  }
  void Reset(CoordinatorOptions o) { coordinator_ = Coordinator::Create(std::move(o)).value(); }

  proto::WorkerHeartbeatResponse Beat(const std::string& address, std::vector<int64_t> active,
                                      std::vector<int64_t> finished) {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(address);
    for (int64_t t : active) req.add_active_task_ids(t);
    for (int64_t t : finished) req.add_finished_task_ids(t);
    proto::WorkerHeartbeatResponse resp;
    absl::Status s = coordinator_->WorkerHeartbeat(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  absl::StatusOr<std::string> Register(const std::string& pipeline,
                                       const std::string& caller = "") {
    proto::RegisterDatasetRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_pipeline(pipeline);
    proto::RegisterDatasetResponse resp;
    absl::Status s = coordinator_->RegisterDataset(req, &resp, caller);
    if (!s.ok()) return s;
    return resp.dataset_id();
  }

  absl::StatusOr<int64_t> Job(const std::string& dataset_id, const std::string& caller = "",
                              const std::string& name = "", int64_t consumers = 1) {
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_name(name);
    proto::JobOptions* o = req.mutable_options();
    o->set_dataset_id(dataset_id);
    o->set_num_consumers(consumers);
    o->set_replicas_per_consumer(1);
    o->set_sharding_policy(proto::SHARDING_OFF);
    o->set_num_tasks(1);
    proto::GetOrCreateJobResponse resp;
    absl::Status s = coordinator_->GetOrCreateJob(req, &resp, caller);
    if (!s.ok()) return s;
    return resp.job_id();
  }

  absl::Status Consumer(int64_t job) {
    proto::ClientHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(job);
    req.set_consumer_index(0);
    proto::ClientHeartbeatResponse resp;
    return coordinator_->ClientHeartbeat(req, &resp);
  }

  static std::vector<int64_t> Ids(const proto::WorkerHeartbeatResponse& r) {
    std::vector<int64_t> out;
    for (const auto& t : r.new_tasks()) out.push_back(t.task_id());
    return out;
  }

  // One job's whole life on worker `w`: registered (a dataset of its own), created, run and
  // finished. Returns the job id.
  int64_t OneJobLifetime(int i, const std::string& w) {
    absl::StatusOr<std::string> ds = Register(absl::StrCat("range(", 8 + i, ").batch(4)"));
    EXPECT_TRUE(ds.ok()) << ds.status();
    absl::StatusOr<int64_t> job = Job(*ds);
    EXPECT_TRUE(job.ok()) << job.status();
    const std::vector<int64_t> tasks = Ids(Beat(w, {}, {}));
    EXPECT_EQ(tasks.size(), 1u);
    Beat(w, {}, tasks);  // finished
    return *job;
  }

  FakeClock clock_;
  std::vector<std::string> log_;
  std::unique_ptr<Coordinator> coordinator_;
};

// A worker's list of tasks used to keep every task it ever finished until the job was
// removed, and every heartbeat walked it: a long-lived worker's list grew with every range it
// ran. Now it holds its unfinished tasks only; the finished ones still show in their job's
// status with the worker that ran them.
TEST_F(BoundedStateTest, WorkerTaskListsHoldOnlyUnfinishedTasks) {
  CoordinatorOptions o = Options();
  o.finished_job_ttl = absl::Hours(1);  // the finished jobs stay in the state
  Reset(o);
  Beat("w1:1", {}, {});
  for (int i = 0; i < 40; ++i) {
    OneJobLifetime(i, "w1:1");
    EXPECT_LE(coordinator_->TEST_TableSizes().max_worker_tasks, 1u) << "after job " << i;
  }
  const Coordinator::TableSizes sizes = coordinator_->TEST_TableSizes();
  EXPECT_EQ(sizes.jobs, 40u);
  EXPECT_EQ(sizes.max_worker_tasks, 0u);
  proto::GetStatusRequest all;
  all.set_page_size(1000);
  proto::GetStatusResponse status;
  ASSERT_TRUE(coordinator_->GetStatus(all, &status).ok());
  ASSERT_EQ(status.workers_size(), 1);
  EXPECT_EQ(status.workers(0).task_ids_size(), 0);
  ASSERT_EQ(status.jobs_size(), 40);
  EXPECT_EQ(status.jobs(7).tasks(0).worker_address(), "w1:1");  // where it ran
  EXPECT_TRUE(status.jobs(7).tasks(0).finished());

  // A snapshot of that state restores to the same (the finished tasks' workers included).
  const proto::StateSnapshot snapshot = coordinator_->Snapshot();
  CoordinatorState restored;
  ASSERT_TRUE(restored.Restore(snapshot).ok());
  EXPECT_EQ(restored.Snapshot().SerializeAsString(), snapshot.SerializeAsString());
  EXPECT_EQ(restored.workers().at(1).finished_tasks, 40);
  EXPECT_TRUE(restored.workers().at(1).task_ids.empty());
}

// Many job lifetimes (each with a dataset of its own, anonymous, one consumer that never
// heartbeats) leave nothing behind: jobs, tasks, datasets, owners and every side table return
// to their baseline once the TTLs pass.
TEST_F(BoundedStateTest, StateStaysBoundedOverManyJobLifetimes) {
  Beat("w1:1", {}, {});
  const Coordinator::TableSizes baseline = coordinator_->TEST_TableSizes();
  size_t most_jobs = 0, most_datasets = 0;
  for (int i = 0; i < 60; ++i) {
    OneJobLifetime(i, "w1:1");
    clock_.Advance(absl::Seconds(5));
    Beat("w1:1", {}, {});
    coordinator_->CheckWorkerLiveness();
    const Coordinator::TableSizes t = coordinator_->TEST_TableSizes();
    most_jobs = std::max(most_jobs, t.jobs);
    most_datasets = std::max(most_datasets, t.datasets);
  }
  // Jobs live finished_job_ttl (60 s) after finishing and datasets unused_dataset_ttl (2 min)
  // after: with one lifetime every 5 s, about 13 jobs and 38 datasets at once, never 60.
  EXPECT_LE(most_jobs, 14u);
  EXPECT_LE(most_datasets, 40u);
  for (int i = 0; i < 40; ++i) {
    clock_.Advance(absl::Seconds(5));
    Beat("w1:1", {}, {});
    coordinator_->CheckWorkerLiveness();
  }
  const Coordinator::TableSizes end = coordinator_->TEST_TableSizes();
  EXPECT_EQ(end.jobs, 0u);
  EXPECT_EQ(end.datasets, 0u);
  EXPECT_EQ(end.owners, 0u);
  EXPECT_TRUE(end == baseline) << "jobs " << end.jobs << " datasets " << end.datasets
                               << " owners " << end.owners << " job_activity "
                               << end.job_activity << " unused_since " << end.unused_since;
}

// An anonymous single-consumer job whose consumer went away (it never heartbeats) used to stay
// forever, its task running on its worker. Every kind of job is now failed as abandoned after
// idle_job_ttl without a consumer's word, its worker told to stop the task, and removed
// finished_job_ttl later. A job whose consumer heartbeats stays.
TEST_F(BoundedStateTest, AbandonedJobsOfEveryKindAreCollected) {
  Beat("w1:1", {}, {});
  absl::StatusOr<std::string> ds = Register("range(40).batch(4)");
  ASSERT_TRUE(ds.ok());
  absl::StatusOr<int64_t> abandoned = Job(*ds);
  absl::StatusOr<int64_t> named = Job(*ds, "", "named", /*consumers=*/2);
  absl::StatusOr<int64_t> alive = Job(*ds);
  ASSERT_TRUE(abandoned.ok() && named.ok() && alive.ok());
  const std::vector<int64_t> tasks = Ids(Beat("w1:1", {}, {}));
  ASSERT_EQ(tasks.size(), 3u);
  for (int i = 0; i < 40; ++i) {  // 200 s > idle_job_ttl (3 min)
    clock_.Advance(absl::Seconds(5));
    ASSERT_TRUE(Consumer(*alive).ok());
    Beat("w1:1", tasks, {});
    coordinator_->CheckWorkerLiveness();
  }
  for (int64_t job : {*abandoned, *named}) {
    const absl::Status s = Consumer(job);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("abandoned"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("idle_job_ttl"));
  }
  EXPECT_TRUE(Consumer(*alive).ok());
  // The worker is told to stop the abandoned jobs' tasks.
  const proto::WorkerHeartbeatResponse hb = Beat("w1:1", tasks, {});
  std::set<int64_t> stop(hb.tasks_to_stop().begin(), hb.tasks_to_stop().end());
  EXPECT_EQ(stop.size(), 2u);
  // Removed finished_job_ttl later; the name is free again.
  for (int i = 0; i < 13; ++i) {
    clock_.Advance(absl::Seconds(5));
    ASSERT_TRUE(Consumer(*alive).ok());
    Beat("w1:1", {tasks[2]}, {});
    coordinator_->CheckWorkerLiveness();
  }
  EXPECT_EQ(Consumer(*abandoned).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(coordinator_->TEST_TableSizes().jobs, 1u);
  absl::StatusOr<int64_t> again = Job(*ds, "", "named", 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(*again, *named);
}

// A job whose consumers read it and then all went away (exited, killed: no word) used to stay
// idle_job_ttl (10 min by default), its task and the steps it buffered alive on its worker,
// while a consumer that runs job after job piled up new ones (issue 28, part jobfree). Once a
// consumer has heartbeated, a job no consumer asked about for consumer_timeout has no
// consumer left: it fails naming consumer_timeout and its worker is told to stop its task. A
// job whose consumer still heartbeats, a job not read yet (idle_job_ttl still applies) and a
// named job a consumer rejoins within the timeout stay. Malformed heartbeats (a consumer index
// the job does not have) keep no job alive.
TEST_F(BoundedStateTest, AJobLeftWithoutConsumersEndsAfterConsumerTimeout) {
  CoordinatorOptions o = Options();
  o.consumer_timeout = absl::Seconds(60);
  Reset(o);
  Beat("w1:1", {}, {});
  absl::StatusOr<std::string> ds = Register("range(40).batch(4)");
  ASSERT_TRUE(ds.ok());
  absl::StatusOr<int64_t> left = Job(*ds);
  absl::StatusOr<int64_t> alive = Job(*ds);
  absl::StatusOr<int64_t> unread = Job(*ds);
  absl::StatusOr<int64_t> rejoined = Job(*ds, "", "rejoined");
  absl::StatusOr<int64_t> malformed = Job(*ds);
  ASSERT_TRUE(left.ok() && alive.ok() && unread.ok() && rejoined.ok() && malformed.ok());
  const std::vector<int64_t> tasks = Ids(Beat("w1:1", {}, {}));
  ASSERT_EQ(tasks.size(), 5u);
  ASSERT_TRUE(Consumer(*left).ok());
  ASSERT_TRUE(Consumer(*rejoined).ok());
  ASSERT_TRUE(Consumer(*malformed).ok());
  // 100 s: `left` silent all along, `rejoined` rejoins by name at 50 s and heartbeats again.
  for (int i = 0; i < 20; ++i) {
    clock_.Advance(absl::Seconds(5));
    ASSERT_TRUE(Consumer(*alive).ok());
    if (i == 9) {
      absl::StatusOr<int64_t> again = Job(*ds, "", "rejoined");
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_EQ(*again, *rejoined);
    }
    if (i >= 9) {
      ASSERT_TRUE(Consumer(*rejoined).ok());
    }
    proto::ClientHeartbeatRequest bad;  // an index the job does not have: not a consumer
    bad.set_wire_version(proto::WIRE_VERSION_1);
    bad.set_job_id(*malformed);
    bad.set_consumer_index(7);
    proto::ClientHeartbeatResponse ignored;
    EXPECT_FALSE(coordinator_->ClientHeartbeat(bad, &ignored).ok());  // then the job's end
    Beat("w1:1", tasks, {});
    coordinator_->CheckWorkerLiveness();
  }
  for (int64_t job : {*left, *malformed}) {
    const absl::Status s = Consumer(job);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << "job " << job << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("no consumer left"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("consumer_timeout"));
  }
  for (int64_t job : {*alive, *unread, *rejoined}) {
    EXPECT_TRUE(Consumer(job).ok()) << "job " << job;
  }
  // Only their tasks are stopped.
  const proto::WorkerHeartbeatResponse hb = Beat("w1:1", tasks, {});
  EXPECT_EQ(std::set<int64_t>(hb.tasks_to_stop().begin(), hb.tasks_to_stop().end()),
            (std::set<int64_t>{tasks[0], tasks[4]}));
}

// Datasets used to stay forever. A dataset is refcounted by the jobs that name it: while a job
// (finished or not) names it, it stays; unused_dataset_ttl after its last job is removed (or
// after it was registered, if no job came), it is removed; registering the graph again gives
// the same id.
TEST_F(BoundedStateTest, UnusedDatasetsAreRemovedAndJobsKeepTheirs) {
  Beat("w1:1", {}, {});
  absl::StatusOr<std::string> used = Register("range(40).batch(4)");
  absl::StatusOr<std::string> unused = Register("range(41).batch(4)");
  ASSERT_TRUE(used.ok() && unused.ok());
  absl::StatusOr<int64_t> job = Job(*used);
  ASSERT_TRUE(job.ok());
  const std::vector<int64_t> tasks = Ids(Beat("w1:1", {}, {}));
  for (int i = 0; i < 30; ++i) {  // 150 s > unused_dataset_ttl (2 min)
    clock_.Advance(absl::Seconds(5));
    ASSERT_TRUE(Consumer(*job).ok());
    Beat("w1:1", tasks, {});
    coordinator_->CheckWorkerLiveness();
  }
  EXPECT_EQ(coordinator_->TEST_TableSizes().datasets, 1u) << "the used one stays";
  // A job on the removed dataset: NOT_FOUND until it is registered again, same id.
  absl::StatusOr<int64_t> late = Job(*unused);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kNotFound) << late.status();
  absl::StatusOr<std::string> back = Register("range(41).batch(4)");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *unused);
  // The job finishes and is removed (60 s); its dataset goes unused_dataset_ttl after that.
  Beat("w1:1", {}, tasks);
  for (int i = 0; i < 12 + 23; ++i) {
    clock_.Advance(absl::Seconds(5));
    Beat("w1:1", {}, {});
    coordinator_->CheckWorkerLiveness();
  }
  EXPECT_EQ(coordinator_->TEST_TableSizes().jobs, 0u);
  EXPECT_EQ(coordinator_->TEST_TableSizes().datasets, 1u) << "not yet: 115 s unused";
  for (int i = 0; i < 30; ++i) {
    clock_.Advance(absl::Seconds(5));
    coordinator_->CheckWorkerLiveness();
  }
  EXPECT_EQ(coordinator_->TEST_TableSizes().datasets, 0u);
}

// One caller creating anonymous jobs and registering datasets in a loop is refused with
// RESOURCE_EXHAUSTED naming the limit and its flag, while other callers' jobs and every
// worker's heartbeats go on; a finished job frees its quota.
TEST_F(BoundedStateTest, PerIdentityQuotasRefuseOneCallerAndNotTheOthers) {
  CoordinatorOptions o = Options();
  o.max_jobs_per_identity = 3;
  o.max_datasets_per_identity = 4;
  o.max_dataset_bytes_per_identity = 0;  // checked on its own below
  Reset(o);
  Beat("w1:1", {}, {});
  absl::StatusOr<std::string> ds = Register("range(40).batch(4)", "greedy");
  ASSERT_TRUE(ds.ok());
  std::vector<int64_t> greedy_jobs;
  absl::Status refused;
  for (int i = 0; i < 100 && refused.ok(); ++i) {  // unbounded anonymous jobs, in intent
    absl::StatusOr<int64_t> job = Job(*ds, "greedy");
    if (job.ok()) {
      greedy_jobs.push_back(*job);
    } else {
      refused = job.status();
    }
    Beat("w1:1", {}, {});  // the worker's heartbeats are served throughout
  }
  EXPECT_EQ(greedy_jobs.size(), 3u);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("max_jobs_per_identity 3"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--max_jobs_per_identity"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("\"greedy\""));
  // Another caller is not refused, nor is getting an existing named job.
  absl::StatusOr<int64_t> other = Job(*ds, "polite");
  EXPECT_TRUE(other.ok()) << other.status();
  // Datasets: 4 per identity (the one above counts), others unaffected; one registered again
  // (deduplicated) costs nothing.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Register(absl::StrCat("range(", 50 + i, ")"), "greedy").ok());
  absl::StatusOr<std::string> fifth = Register("range(60)", "greedy");
  EXPECT_EQ(fifth.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(fifth.status().message()), HasSubstr("max_datasets_per_identity 4"));
  EXPECT_TRUE(Register("range(50)", "greedy").ok()) << "already registered: no new quota";
  EXPECT_TRUE(Register("range(60)", "polite").ok());
  // A finished job frees its quota.
  const std::vector<int64_t> tasks = Ids(Beat("w1:1", {}, {}));
  ASSERT_EQ(tasks.size(), 4u);
  Beat("w1:1", {}, {tasks[0]});
  EXPECT_TRUE(Job(*ds, "greedy").ok());
  EXPECT_EQ(Job(*ds, "greedy").status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(BoundedStateTest, DatasetBytesQuotaCountsTheSerializedGraphs) {
  std::string big = "from_tensor_slices([";
  for (int i = 0; i < 60; ++i) absl::StrAppend(&big, i == 0 ? "" : ", ", 1000 + i);
  big += "])";
  absl::StatusOr<Dataset> parsed = Dataset::Parse(big);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const int64_t bytes = static_cast<int64_t>(parsed->def().ByteSizeLong());
  CoordinatorOptions o = Options();
  o.max_dataset_bytes_per_identity = bytes + bytes / 2;  // one graph fits, two do not
  Reset(o);
  absl::StatusOr<std::string> first = Register(big, "bulk");
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::string> second = Register(big + ".repeat(2)", "bulk");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted) << second.status();
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr(absl::StrCat("max_dataset_bytes_per_identity ", bytes + bytes / 2)));
  EXPECT_TRUE(Register(big + ".repeat(2)", "other").ok());
}

// The quotas are journaled with the jobs and datasets (their owners): a restarted coordinator
// still counts what each identity holds.
TEST_F(BoundedStateTest, QuotasSurviveARestart) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/sluice_bounded_", getpid());
  ASSERT_EQ(std::system(absl::StrCat("rm -rf '", dir, "'; mkdir -p '", dir, "'").c_str()), 0);
  CoordinatorOptions o = Options();
  o.max_jobs_per_identity = 2;
  o.work_dir = dir;
  auto created = Coordinator::Create(o);
  ASSERT_TRUE(created.ok()) << created.status();
  coordinator_ = *std::move(created);
  Beat("w1:1", {}, {});
  absl::StatusOr<std::string> ds = Register("range(40).batch(4)", "a");
  ASSERT_TRUE(ds.ok());
  ASSERT_TRUE(Job(*ds, "a").ok());
  ASSERT_TRUE(Job(*ds, "a").ok());
  coordinator_.reset();
  created = Coordinator::Create(o);
  ASSERT_TRUE(created.ok()) << created.status();
  coordinator_ = *std::move(created);
  Beat("w1:1", {}, {});
  EXPECT_EQ(Job(*ds, "a").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Job(*ds, "b").ok());
  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
}

// GetStatus used to answer every worker and job (with every task) in one response, built under
// the coordinator's lock. It now answers pages of page_size entries, workers then jobs, that
// together list each once; a bad token is INVALID_ARGUMENT.
TEST_F(BoundedStateTest, StatusComesInPagesThatListEveryEntryOnce) {
  CoordinatorOptions o = Options();
  o.status_page_size = 4;
  o.max_status_page_size = 5;
  Reset(o);
  for (int w = 0; w < 3; ++w) Beat(absl::StrCat("w", w, ":1"), {}, {});
  absl::StatusOr<std::string> ds = Register("range(40).batch(4)");
  for (int j = 0; j < 8; ++j) ASSERT_TRUE(Job(*ds).ok());
  std::vector<int64_t> workers, jobs;
  proto::GetStatusRequest req;
  int pages = 0;
  for (; pages < 100; ++pages) {
    proto::GetStatusResponse page;
    ASSERT_TRUE(coordinator_->GetStatus(req, &page).ok());
    EXPECT_LE(page.workers_size() + page.jobs_size(), 4);
    EXPECT_EQ(page.num_datasets(), 1);
    for (const auto& w : page.workers()) workers.push_back(w.worker_id());
    for (const auto& j : page.jobs()) jobs.push_back(j.job_id());
    if (page.next_page_token().empty()) break;
    req.set_page_token(page.next_page_token());
  }
  EXPECT_EQ(pages + 1, 3);  // 11 entries, 4 a page
  EXPECT_THAT(workers, ::testing::ElementsAre(1, 2, 3));
  EXPECT_THAT(jobs, ::testing::ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
  // A larger page_size is capped by max_status_page_size.
  proto::GetStatusRequest big;
  big.set_page_size(1000);
  proto::GetStatusResponse capped;
  ASSERT_TRUE(coordinator_->GetStatus(big, &capped).ok());
  EXPECT_EQ(capped.workers_size() + capped.jobs_size(), 5);
  for (const char* token : {"x1", "j", "w-3", "jabc", "j99999999999999999999999"}) {
    proto::GetStatusRequest bad;
    bad.set_page_token(token);
    proto::GetStatusResponse out;
    EXPECT_EQ(coordinator_->GetStatus(bad, &out).code(), absl::StatusCode::kInvalidArgument)
        << token;
  }
  proto::GetStatusRequest negative;
  negative.set_page_size(-1);
  proto::GetStatusResponse out;
  EXPECT_EQ(coordinator_->GetStatus(negative, &out).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
