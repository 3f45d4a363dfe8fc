// A consumer that stops cleanly releases its place in its job (Coordinator::ReleaseConsumer,
// docs/SERVICE.md "Consumers that release their job"; issue 28, part release): the last
// consumer's release ends an anonymous job at once (CANCELLED, journaled, its worker told to
// stop the task), a coordinated job's other consumers read on without the released one, named
// and shared jobs stay (rejoinable), hostile releases are refused naming what, and a replayed
// journal (or a snapshot) gives the same job states. That a job was released is the
// coordinator's fact (part relfield: FailJobUpdate.released, JobStatus.released), never its
// error's code: a job that failed with CANCELLED is not released, before or after a restart,
// and a journal written before the fact existed reads the same. No network; a fake clock.
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/util/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/coordinator_state.h"
#include "server/journal.h"

namespace sluice {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kWorker[] = "127.0.0.1:1";

class ConsumerReleaseTest : public ::testing::Test {
 protected:
  ConsumerReleaseTest()
      : dir_(absl::StrCat(::testing::TempDir(), "/sluice_consumer_release_", getpid(), "_",
                          ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::system(absl::StrCat("rm -rf '", dir_, "'").c_str());
    Start();
    proto::RegisterDatasetRequest reg;
    reg.set_wire_version(proto::WIRE_VERSION_1);
    reg.set_pipeline("range(1000000).repeat().batch(4)");
    proto::RegisterDatasetResponse resp;
    absl::Status s = coordinator_->RegisterDataset(reg, &resp);
    EXPECT_TRUE(s.ok()) << s;
    dataset_id_ = resp.dataset_id();
    Beat({});
  }
  ~ConsumerReleaseTest() override { std::system(absl::StrCat("rm -rf '", dir_, "'").c_str()); }

  // A coordinator on the journal in dir_ (replayed when there is one).
  void Start() {
    CoordinatorOptions o;
    o.clock = &clock_;
    o.work_dir = dir_;
    o.worker_timeout = absl::Seconds(10);
    o.consumer_timeout = absl::Seconds(60);
    o.log = [this](absl::string_view line) {
      absl::MutexLock lock(&log_mu_);
      log_.emplace_back(line);
    };
    coordinator_.reset();
    auto c = Coordinator::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = *std::move(c);
  }

  proto::WorkerHeartbeatResponse Beat(const std::vector<int64_t>& active) {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(kWorker);
    for (int64_t t : active) req.add_active_task_ids(t);
    proto::WorkerHeartbeatResponse resp;
    absl::Status s = coordinator_->WorkerHeartbeat(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  // A job of `consumers` coordinated consumers (anonymous when `name` is empty), its one task
  // handed to the worker.
  int64_t MakeJob(const std::string& name = "", int64_t consumers = 1, bool shared = false) {
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_name(name);
    proto::JobOptions* o = req.mutable_options();
    o->set_dataset_id(dataset_id_);
    o->set_num_consumers(consumers);
    o->set_replicas_per_consumer(1);
    o->set_sharding_policy(proto::SHARDING_OFF);
    o->set_num_tasks(1);
    if (shared) {
      o->set_read_mode(proto::READ_MODE_INDEPENDENT);
      o->mutable_cross_trainer()->set_enabled(true);
      req.set_trainer_id("trainer-a");
    }
    proto::GetOrCreateJobResponse resp;
    absl::Status s = coordinator_->GetOrCreateJob(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    if (task_of_.count(resp.job_id()) != 0) return resp.job_id();  // joined: no new task
    std::vector<int64_t> all;
    for (const auto& [job, task] : task_of_) all.push_back(task);
    const proto::WorkerHeartbeatResponse hb = Beat(all);
    for (const proto::TaskDef& t : hb.new_tasks()) {
      if (t.job_id() == resp.job_id()) task_of_[resp.job_id()] = t.task_id();
    }
    EXPECT_EQ(task_of_.count(resp.job_id()), 1u) << "job " << resp.job_id() << " has no task";
    return resp.job_id();
  }

  // A ClientHeartbeat of consumer `index` carrying `secret`; the secret it was handed.
  absl::StatusOr<uint64_t> Heartbeat(int64_t job, int64_t index = 0, uint64_t secret = 0) {
    proto::ClientHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(job);
    req.set_consumer_index(index);
    req.set_consumer_secret(secret);
    proto::ClientHeartbeatResponse resp;
    absl::Status s = coordinator_->ClientHeartbeat(req, &resp);
    if (!s.ok()) return s;
    return resp.consumer_secret();
  }

  // An anonymous job whose one consumer read (heartbeated) and released it: ended, released.
  int64_t MakeReleasedJob() {
    const int64_t job = MakeJob();
    absl::StatusOr<uint64_t> secret = Heartbeat(job);
    EXPECT_TRUE(secret.ok()) << secret.status();
    absl::StatusOr<bool> ended = Release(job, 0, secret.value_or(0));
    EXPECT_TRUE(ended.ok() && *ended) << ended.status();
    return job;
  }

  absl::StatusOr<bool> Release(int64_t job, int64_t index, uint64_t secret) {
    proto::ReleaseConsumerRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(job);
    req.set_consumer_index(index);
    req.set_consumer_secret(secret);
    proto::ReleaseConsumerResponse resp;
    absl::Status s = coordinator_->ReleaseConsumer(req, &resp);
    if (!s.ok()) return s;
    return resp.job_finished();
  }

  // The tasks the worker (holding every task made) is told to stop.
  std::set<int64_t> Stopped() {
    std::vector<int64_t> all;
    for (const auto& [job, task] : task_of_) all.push_back(task);
    const proto::WorkerHeartbeatResponse hb = Beat(all);
    return {hb.tasks_to_stop().begin(), hb.tasks_to_stop().end()};
  }

  // The consumers the worker is told are gone, as (job, index).
  std::set<std::pair<int64_t, int64_t>> Gone() {
    std::vector<int64_t> all;
    for (const auto& [job, task] : task_of_) all.push_back(task);
    const proto::WorkerHeartbeatResponse hb = Beat(all);
    std::set<std::pair<int64_t, int64_t>> out;
    for (const proto::ConsumerRef& c : hb.gone_consumers()) {
      out.emplace(c.job_id(), c.consumer_index());
    }
    return out;
  }

  // Job `job` as GetStatus reports it.
  proto::JobStatus StatusOf(int64_t job) {
    proto::GetStatusRequest req;
    req.set_page_token(absl::StrCat("j", job));
    req.set_page_size(1);
    proto::GetStatusResponse resp;
    absl::Status s = coordinator_->GetStatus(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    if (resp.jobs_size() != 1 || resp.jobs(0).job_id() != job) {
      ADD_FAILURE() << "GetStatus has no job " << job << ": " << resp.DebugString();
      return proto::JobStatus();
    }
    return resp.jobs(0);
  }

  // Job `job`'s end with `error` as the coordinator journals a failure (FailJobLocked,
  // JobEnd::kFailed: `released` false) or, with `released` unset, as a journal written before
  // FailJobUpdate.released holds any end.
  static proto::Update FailJob(int64_t job, const absl::Status& error,
                               std::optional<bool> released) {
    proto::Update u;
    u.mutable_fail_job()->set_job_id(job);
    u.mutable_fail_job()->set_code(static_cast<int>(error.code()));
    u.mutable_fail_job()->set_message(std::string(error.message()));
    if (released.has_value()) u.mutable_fail_job()->set_released(*released);
    return u;
  }

  // Stops the coordinator, appends `updates` to its journal in dir_ (one record each; with
  // `fresh`, to a new journal instead), and starts a coordinator on it: it replays them.
  void AppendAndRestart(const std::vector<proto::Update>& updates, bool fresh = false) {
    coordinator_.reset();
    if (fresh) std::system(absl::StrCat("rm -rf '", dir_, "'").c_str());
    {
      CoordinatorState replayed;
      JournalOptions o;
      o.dir = dir_;
      auto journal = Journal::Open(o, &replayed);
      ASSERT_TRUE(journal.ok()) << journal.status();
      for (const proto::Update& u : updates) {
        absl::Status s = (*journal)->Append({u});
        ASSERT_TRUE(s.ok()) << s;
      }
    }
    Start();
  }

  std::vector<std::string> Logged() {
    absl::MutexLock lock(&log_mu_);
    return log_;
  }

  std::string dir_;
  std::string dataset_id_;
  absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);  // the coordinators' log lines
  FakeClock clock_;
  std::unique_ptr<Coordinator> coordinator_;
  std::map<int64_t, int64_t> task_of_;  // job -> its task
};

// The consumer of an anonymous job exits cleanly: its job used to run on for consumer_timeout
// (60 s), its task buffering steps on the worker. Its release ends the job at once: CANCELLED
// naming the release (never an error anyone reads), its worker told to stop the task at its
// next heartbeat; another job is untouched; releasing again is OK.
TEST_F(ConsumerReleaseTest, TheLastConsumersReleaseEndsItsJobAtOnce) {
  const int64_t job = MakeJob();
  const int64_t other = MakeJob();
  absl::StatusOr<uint64_t> secret = Heartbeat(job);
  ASSERT_TRUE(secret.ok()) << secret.status();
  ASSERT_TRUE(Heartbeat(other).ok());
  EXPECT_TRUE(Stopped().empty());
  absl::StatusOr<bool> ended = Release(job, 0, *secret);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_TRUE(*ended);
  EXPECT_THAT(Stopped(), ElementsAre(task_of_[job]));
  const absl::Status after = Heartbeat(job).status();
  EXPECT_EQ(after.code(), absl::StatusCode::kCancelled) << after;
  EXPECT_THAT(after.message(), HasSubstr(absl::StrCat("job ", job, " was released")));
  EXPECT_TRUE(Heartbeat(other).ok());
  absl::StatusOr<bool> again = Release(job, 0, *secret);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(*again);
}

// A coordinated job of two consumers: the first to release no longer counts (its workers stop
// holding steps for it, as for a consumer declared gone) while the other reads on; the
// second's release ends the job.
TEST_F(ConsumerReleaseTest, ACoordinatedJobEndsWhenItsLastConsumerReleases) {
  const int64_t job = MakeJob("", 2);
  absl::StatusOr<uint64_t> first = Heartbeat(job, 0);
  absl::StatusOr<uint64_t> second = Heartbeat(job, 1);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(Gone().empty());
  absl::StatusOr<bool> ended = Release(job, 0, *first);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_FALSE(*ended);
  EXPECT_THAT(Gone(), ElementsAre(std::make_pair(job, int64_t{0})));
  EXPECT_TRUE(Stopped().empty());
  EXPECT_TRUE(Heartbeat(job, 1, *second).ok());
  ended = Release(job, 1, *second);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_TRUE(*ended);
  EXPECT_THAT(Stopped(), ElementsAre(task_of_[job]));
}

// A named job may be rejoined (a trainer restarted, a second iterator) and a shared one joined
// by other trainers: a release does not end them. They keep the rule they had: consumer_timeout
// after their last activity.
TEST_F(ConsumerReleaseTest, NamedAndSharedJobsStayRejoinable) {
  const int64_t named = MakeJob("eval");
  const int64_t shared = MakeJob("sweep", 1, /*shared=*/true);
  for (int64_t job : {named, shared}) {
    absl::StatusOr<uint64_t> secret = Heartbeat(job);
    ASSERT_TRUE(secret.ok()) << secret.status();
    absl::StatusOr<bool> ended = Release(job, 0, *secret);
    ASSERT_TRUE(ended.ok()) << ended.status();
    EXPECT_FALSE(*ended) << "job " << job;
  }
  EXPECT_TRUE(Stopped().empty());
  EXPECT_EQ(MakeJob("eval"), named);  // rejoined by name: the same job
  EXPECT_TRUE(Heartbeat(named).ok());
  EXPECT_TRUE(Heartbeat(shared).ok());
  // Then nobody comes: consumer_timeout ends both, as before.
  clock_.Advance(absl::Seconds(61));
  coordinator_->CheckWorkerLiveness();
  EXPECT_EQ(Heartbeat(named).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Heartbeat(shared).status().code(), absl::StatusCode::kFailedPrecondition);
}

// A release is client input: an unknown job, an index the job does not have, no secret or
// another process's secret are refused naming what, and none of them ends the job.
TEST_F(ConsumerReleaseTest, HostileReleasesAreRefusedAndEndNothing) {
  const int64_t job = MakeJob();
  absl::StatusOr<uint64_t> secret = Heartbeat(job);
  ASSERT_TRUE(secret.ok()) << secret.status();
  ASSERT_TRUE(Heartbeat(job, 0, *secret).ok());  // the claim is confirmed
  absl::Status s = Release(job + 100, 0, *secret).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("ReleaseConsumerRequest.job_id: no job ",
                                                  job + 100)));
  for (int64_t index : {int64_t{-1}, int64_t{1}, int64_t{1} << 62}) {
    s = Release(job, index, *secret).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("consumer_index ", index, " is outside [0, 1)"
                                                    " for job ", job)));
  }
  s = Release(job, 0, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(s.message(), HasSubstr("consumer_secret is 0"));
  s = Release(job, 0, *secret + 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("consumer 0 of job ", job)));
  proto::ReleaseConsumerRequest unversioned;
  unversioned.set_job_id(job);
  unversioned.set_consumer_secret(*secret);
  proto::ReleaseConsumerResponse resp;
  EXPECT_FALSE(coordinator_->ReleaseConsumer(unversioned, &resp).ok());
  EXPECT_TRUE(Stopped().empty());
  EXPECT_TRUE(Heartbeat(job, 0, *secret).ok());
}

// Releases are journaled: after a restart the released consumer is still gone for the
// workers, and a job its last consumer released is still ended, with the same error; a
// snapshot of the state carries both.
TEST_F(ConsumerReleaseTest, ReleasesSurviveARestartAndASnapshot) {
  const int64_t partly = MakeJob("", 2);
  const int64_t released = MakeJob();
  absl::StatusOr<uint64_t> first = Heartbeat(partly, 0);
  absl::StatusOr<uint64_t> only = Heartbeat(released, 0);
  ASSERT_TRUE(first.ok() && only.ok());
  ASSERT_TRUE(Release(partly, 0, *first).ok());
  ASSERT_TRUE(Release(released, 0, *only).ok());
  const absl::Status ended = Heartbeat(released).status();
  ASSERT_EQ(ended.code(), absl::StatusCode::kCancelled);

  CoordinatorState restored;
  ASSERT_TRUE(restored.Restore(coordinator_->Snapshot()).ok());
  EXPECT_THAT(restored.FindJob(partly)->released_consumers, ElementsAre(0));
  EXPECT_FALSE(restored.FindJob(partly)->finished);
  EXPECT_EQ(restored.FindJob(released)->error, ended);

  Start();  // replays the journal
  Beat({task_of_[partly]});
  EXPECT_THAT(Gone(), ElementsAre(std::make_pair(partly, int64_t{0})));
  EXPECT_EQ(Heartbeat(released).status(), ended);
  // The released consumer's process (its secret adopted after the restart) releases again:
  // nothing changes.
  absl::StatusOr<bool> again = Release(partly, 0, *first);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again);
  EXPECT_TRUE(Heartbeat(partly, 1).ok());
}

// Whether a job was released is a fact of the coordinator's, not its error's code: a job may
// fail with CANCELLED (a RANGES job whose plan's read was cancelled carries the planner's code
// into its error), and such a job must show failed. Here job `failing` ends with CANCELLED as
// the coordinator journals a failure, and job `released`'s consumer releases it: GetStatus
// says released only for the second; the release's log line says so, not "failed". Before
// JobStatus.released, sluicectl read every CANCELLED end as a release.
TEST_F(ConsumerReleaseTest, AJobThatFailedWithCancelledWasNotReleased) {
  const int64_t failing = MakeJob();
  const int64_t released = MakeReleasedJob();
  EXPECT_THAT(Logged(), Contains(absl::StrCat("job ", released,
                                              " released by its consumers: its tasks are stopped")));
  EXPECT_THAT(Logged(), Not(Contains(StartsWith(absl::StrCat("job ", released, " failed")))));
  AppendAndRestart({FailJob(failing,
                            absl::CancelledError(absl::StrCat(
                                "job ", failing,
                                " cannot make its ranges: read of /data/part-3: cancelled")),
                            false)});

  const proto::JobStatus f = StatusOf(failing);
  EXPECT_TRUE(f.finished());
  EXPECT_THAT(f.error(), StartsWith("CANCELLED: "));
  EXPECT_FALSE(f.released()) << f.DebugString();
  const proto::JobStatus r = StatusOf(released);
  EXPECT_TRUE(r.finished());
  EXPECT_THAT(r.error(), StartsWith("CANCELLED: "));
  EXPECT_THAT(r.error(), HasSubstr("was released by its consumers"));
  EXPECT_TRUE(r.released()) << r.DebugString();
  // Its consumer gets the error, as for any failure.
  const absl::Status seen = Heartbeat(failing).status();
  EXPECT_EQ(seen.code(), absl::StatusCode::kCancelled) << seen;
  EXPECT_THAT(seen.message(), HasSubstr("read of /data/part-3: cancelled"));
}

// A worker cannot fail a job with CANCELLED: its pipeline's CANCELLED is transient (it gives
// the task back, handed_back_tasks), and a failed_tasks report of it is refused naming the
// task, the job going on. So no task failure can read as a release either.
TEST_F(ConsumerReleaseTest, AWorkersCancelledReportIsRefusedAndFailsNothing) {
  const int64_t job = MakeJob();
  proto::WorkerHeartbeatRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_worker_address(kWorker);
  req.add_active_task_ids(task_of_[job]);
  proto::TaskFailure* f = req.add_failed_tasks();
  f->set_task_id(task_of_[job]);
  f->set_code(static_cast<int>(absl::StatusCode::kCancelled));
  f->set_message("read cancelled");
  proto::WorkerHeartbeatResponse resp;
  const absl::Status s = coordinator_->WorkerHeartbeat(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("failed_tasks: task ", task_of_[job])));
  EXPECT_FALSE(StatusOf(job).finished());
  EXPECT_TRUE(Heartbeat(job).ok());
}

// The job's end and its reason are journaled together: after a restart (the journal replayed,
// then again from a snapshot of the state) the released job is still released and the one
// that failed with CANCELLED still failed.
TEST_F(ConsumerReleaseTest, ReleasedAndFailedStaySoAfterARestartAndInASnapshot) {
  const int64_t failing = MakeJob();
  const int64_t released = MakeReleasedJob();
  AppendAndRestart({FailJob(failing, absl::CancelledError("cancelled"), false)});
  Start();  // and once more
  EXPECT_TRUE(StatusOf(released).released());
  EXPECT_FALSE(StatusOf(failing).released());
  EXPECT_THAT(StatusOf(failing).error(), StartsWith("CANCELLED: "));

  const proto::StateSnapshot snapshot = coordinator_->Snapshot();
  std::map<int64_t, bool> ends;  // the snapshot's job ends: job -> released
  for (const proto::Update& u : snapshot.updates()) {
    if (!u.has_fail_job()) continue;
    EXPECT_TRUE(u.fail_job().has_released()) << u.DebugString();
    ends[u.fail_job().job_id()] = u.fail_job().released();
  }
  EXPECT_EQ(ends, (std::map<int64_t, bool>{{failing, false}, {released, true}}));
  CoordinatorState restored;
  ASSERT_TRUE(restored.Restore(snapshot).ok());
  EXPECT_TRUE(restored.FindJob(released)->released);
  EXPECT_FALSE(restored.FindJob(failing)->released);
  EXPECT_EQ(restored.FindJob(failing)->error.code(), absl::StatusCode::kCancelled);
  // A coordinator whose journal is that snapshot.
  AppendAndRestart({snapshot.updates().begin(), snapshot.updates().end()}, /*fresh=*/true);
  EXPECT_TRUE(StatusOf(released).released());
  EXPECT_FALSE(StatusOf(failing).released());
}

// A journal written before FailJobUpdate.released (last session's coordinator wrote none)
// still loads: its release reads as released (every consumer of the job had released it, and
// the code is CANCELLED: what the old release wrote and nothing else did), a CANCELLED failure
// as failed, and so does a CANCELLED failure of a coordinated job one of whose two consumers
// had released its place (not every consumer had).
TEST_F(ConsumerReleaseTest, AJournalFromBeforeTheFieldReadsItsReleasesAsReleased) {
  const int64_t failing = MakeJob();
  const int64_t released = MakeReleasedJob();
  const int64_t half = MakeJob("", 2);
  absl::StatusOr<uint64_t> first = Heartbeat(half, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(Release(half, 0, *first).ok());

  // The same history as the old coordinator journaled it: no `released` on any job's end.
  proto::StateSnapshot old = coordinator_->Snapshot();
  int ends = 0;
  for (proto::Update& u : *old.mutable_updates()) {
    if (!u.has_fail_job()) continue;
    u.mutable_fail_job()->clear_released();
    ++ends;
  }
  ASSERT_EQ(ends, 1);
  std::vector<proto::Update> journal(old.updates().begin(), old.updates().end());
  journal.push_back(FailJob(failing, absl::CancelledError("cancelled"), std::nullopt));
  journal.push_back(FailJob(half, absl::CancelledError("cancelled"), std::nullopt));
  AppendAndRestart(journal, /*fresh=*/true);
  ASSERT_NE(coordinator_, nullptr);
  EXPECT_TRUE(StatusOf(released).released());
  EXPECT_FALSE(StatusOf(failing).released());
  EXPECT_TRUE(StatusOf(half).finished());
  EXPECT_FALSE(StatusOf(half).released());
  EXPECT_THAT(StatusOf(half).error(), StartsWith("CANCELLED: "));
  // Its snapshot writes what it read, so that the next restart reads the same.
  CoordinatorState restored;
  ASSERT_TRUE(restored.Restore(coordinator_->Snapshot()).ok());
  EXPECT_TRUE(restored.FindJob(released)->released);
  EXPECT_FALSE(restored.FindJob(failing)->released);
  EXPECT_FALSE(restored.FindJob(half)->released);
}

}  // namespace
}  // namespace sluice
