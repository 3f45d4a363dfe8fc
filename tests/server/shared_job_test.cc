// Jobs shared across trainers (proto JobOptions.cross_trainer) on the coordinator: a trainer_id
// is client input (checked, bounded per job), the same id twice is one trainer, and the
// trainers admitted survive a restart from the journal (the bound still holds after it).
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/obs/metrics.h"
#include "server/coordinator.h"
#include "server/coordinator_metrics.h"
#include "server/coordinator_state.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

void Quiet(absl::string_view) {}

class SharedJobTest : public ::testing::Test {
 protected:
  SharedJobTest()
      : dir_(absl::StrCat(::testing::TempDir(), "/sluice_shared_job_", getpid(), "_",
                          ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::system(absl::StrCat("rm -rf '", dir_, "'").c_str());
    Start();
    proto::RegisterDatasetRequest reg;
    reg.set_wire_version(proto::WIRE_VERSION_1);
    reg.set_pipeline("range(1000).repeat().batch(4)");
    proto::RegisterDatasetResponse resp;
    absl::Status s = coordinator_->RegisterDataset(reg, &resp);
    EXPECT_TRUE(s.ok()) << s;
    dataset_id_ = resp.dataset_id();
    proto::WorkerHeartbeatRequest hb;
    hb.set_wire_version(proto::WIRE_VERSION_1);
    hb.set_worker_address("127.0.0.1:1");
    proto::WorkerHeartbeatResponse hb_resp;
    s = coordinator_->WorkerHeartbeat(hb, &hb_resp);
    EXPECT_TRUE(s.ok()) << s;
  }

  void Start() {
    CoordinatorOptions o;
    o.work_dir = dir_;
    o.log = Quiet;
    coordinator_.reset();
    auto c = Coordinator::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = *std::move(c);
  }

  proto::JobOptions Shared(int64_t max_trainers) {
    proto::JobOptions o;
    o.set_dataset_id(dataset_id_);
    o.set_num_consumers(1);
    o.set_replicas_per_consumer(1);
    o.set_read_mode(proto::READ_MODE_INDEPENDENT);
    o.mutable_cross_trainer()->set_enabled(true);
    o.mutable_cross_trainer()->set_max_trainers(max_trainers);
    return o;
  }

  absl::StatusOr<int64_t> Join(const proto::JobOptions& options, const std::string& trainer) {
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_name("sweep");
    *req.mutable_options() = options;
    req.set_trainer_id(trainer);
    proto::GetOrCreateJobResponse resp;
    absl::Status s = coordinator_->GetOrCreateJob(req, &resp);
    if (!s.ok()) return s;
    return resp.job_id();
  }

  std::vector<std::string> Trainers() {
    proto::GetStatusRequest req;
    proto::GetStatusResponse resp;
    EXPECT_TRUE(coordinator_->GetStatus(req, &resp).ok());
    if (resp.jobs_size() != 1) return {};
    return {resp.jobs(0).trainer_ids().begin(), resp.jobs(0).trainer_ids().end()};
  }

  std::string dir_;
  std::string dataset_id_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(SharedJobTest, TrainersShareOneJobWithinTheirBound) {
  auto a = Join(Shared(2), "trainer-a");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = Join(Shared(2), "trainer-b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*a, *b);  // one production for both
  auto a_again = Join(Shared(2), "trainer-a");  // a second consumer of trainer-a
  ASSERT_TRUE(a_again.ok()) << a_again.status();
  EXPECT_THAT(Trainers(), ElementsAre("trainer-a", "trainer-b"));
  absl::Status c = Join(Shared(2), "trainer-c").status();
  EXPECT_EQ(c.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.message(), HasSubstr("'trainer-c'"));
  EXPECT_THAT(c.message(), HasSubstr("maximum of 2"));
}

TEST_F(SharedJobTest, AdmittedTrainersSurviveARestart) {
  ASSERT_TRUE(Join(Shared(2), "trainer-a").ok());
  ASSERT_TRUE(Join(Shared(2), "trainer-b").ok());
  Start();  // replays the journal
  EXPECT_THAT(Trainers(), ElementsAre("trainer-a", "trainer-b"));
  EXPECT_TRUE(Join(Shared(2), "trainer-b").ok());
  EXPECT_EQ(Join(Shared(2), "trainer-c").status().code(), absl::StatusCode::kResourceExhausted);
}

// A journal snapshot (written every snapshot_every records) carries the trainers too.
TEST_F(SharedJobTest, AdmittedTrainersAreInTheStateSnapshot) {
  auto job = Join(Shared(3), "trainer-a");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(Join(Shared(3), "trainer-b").ok());
  CoordinatorState restored;
  ASSERT_TRUE(restored.Restore(coordinator_->Snapshot()).ok());
  ASSERT_NE(restored.FindJob(*job), nullptr);
  EXPECT_THAT(restored.FindJob(*job)->trainer_ids, ElementsAre("trainer-a", "trainer-b"));
}

// A worker's heartbeat saying it dropped trainers from task `task_id`'s window.
absl::Status ReportDropped(Coordinator* coordinator, const std::string& worker_address,
                           int64_t task_id, const std::vector<std::string>& dropped) {
  proto::WorkerHeartbeatRequest hb;
  hb.set_wire_version(proto::WIRE_VERSION_1);
  hb.set_worker_address(worker_address);
  hb.add_active_task_ids(task_id);
  proto::TaskProgress* p = hb.add_task_progress();
  p->set_task_id(task_id);
  for (const std::string& id : dropped) p->add_dropped_trainer_ids(id);
  proto::WorkerHeartbeatResponse resp;
  return coordinator->WorkerHeartbeat(hb, &resp);
}

// Trainers a worker dropped (--drop_departed_trainers_after) are journaled: out of the job's
// trainers (their place in max_trainers is free), listed as dropped, refused if they come back,
// and all of it after a restart and in a snapshot.
TEST_F(SharedJobTest, DroppedTrainersAreJournaledAndRefusedWhenTheyComeBack) {
  auto job = Join(Shared(2), "trainer-a");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(Join(Shared(2), "trainer-b").ok());
  proto::GetStatusRequest req;
  proto::GetStatusResponse status;
  ASSERT_TRUE(coordinator_->GetStatus(req, &status).ok());
  ASSERT_EQ(status.jobs_size(), 1);
  ASSERT_GE(status.jobs(0).tasks_size(), 1);
  const int64_t task = status.jobs(0).tasks(0).task_id();
  // Another worker's report about this task, and ids that are no trainer of it, change nothing.
  ASSERT_TRUE(ReportDropped(coordinator_.get(), "127.0.0.1:2", task, {"trainer-a"}).ok());
  ASSERT_TRUE(ReportDropped(coordinator_.get(), "127.0.0.1:1", task, {"never-joined"}).ok());
  EXPECT_THAT(Trainers(), ElementsAre("trainer-a", "trainer-b"));
  // The task's worker dropped trainer-a (it repeats the list in every heartbeat).
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(ReportDropped(coordinator_.get(), "127.0.0.1:1", task, {"trainer-a"}).ok());
  }
  auto check = [&](const char* when) {
    SCOPED_TRACE(when);
    EXPECT_THAT(Trainers(), ElementsAre("trainer-b"));
    proto::GetStatusResponse r;
    ASSERT_TRUE(coordinator_->GetStatus(req, &r).ok());
    ASSERT_EQ(r.jobs_size(), 1);
    EXPECT_THAT(r.jobs(0).dropped_trainer_ids(), ElementsAre("trainer-a"));
    absl::Status back = Join(Shared(2), "trainer-a").status();
    EXPECT_EQ(back.code(), absl::StatusCode::kFailedPrecondition) << back;
    EXPECT_THAT(back.message(), HasSubstr("'trainer-a'"));
    EXPECT_THAT(back.message(), HasSubstr("dropped"));
    EXPECT_THAT(back.message(), HasSubstr("new trainer_id"));
  };
  check("before a restart");
  Start();  // replays the journal
  check("after a restart");
  {
    MetricsRegistry registry;
    CoordinatorMetrics metrics(coordinator_.get(), &registry);
    const std::string text = registry.Scrape();
    EXPECT_THAT(text, HasSubstr(absl::StrCat("sluice_coordinator_job_trainers{job=\"", *job,
                                             "\",name=\"sweep\",state=\"dropped\"} 1")))
        << text;
    EXPECT_THAT(text, HasSubstr(absl::StrCat("sluice_coordinator_job_trainers{job=\"", *job,
                                             "\",name=\"sweep\",state=\"joined\"} 1")))
        << text;
  }
  // Its place is free: a new trainer fits within max_trainers 2.
  ASSERT_TRUE(Join(Shared(2), "trainer-c").ok());
  EXPECT_THAT(Trainers(), ElementsAre("trainer-b", "trainer-c"));
  CoordinatorState restored;
  ASSERT_TRUE(restored.Restore(coordinator_->Snapshot()).ok());
  ASSERT_NE(restored.FindJob(*job), nullptr);
  EXPECT_THAT(restored.FindJob(*job)->trainer_ids, ElementsAre("trainer-b", "trainer-c"));
  EXPECT_THAT(restored.FindJob(*job)->dropped_trainer_ids, ElementsAre("trainer-a"));
}

TEST_F(SharedJobTest, TrainerIdsAreCheckedClientInput) {
  const std::string too_long(129, 'x');
  absl::Status s = Join(Shared(4), too_long).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("GetOrCreateJobRequest.trainer_id"));
  EXPECT_THAT(s.message(), HasSubstr("128 allowed"));
  EXPECT_EQ(Join(Shared(4), "tab\there").status().code(), absl::StatusCode::kInvalidArgument);
  s = Join(Shared(4), "").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("needs one"));
  proto::JobOptions plain = Shared(4);
  plain.clear_cross_trainer();
  s = Join(plain, "trainer-a").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not shared"));
  EXPECT_EQ(Join(Shared(65), "trainer-a").status().code(), absl::StatusCode::kInvalidArgument);
  proto::JobOptions coordinated = Shared(4);
  coordinated.set_read_mode(proto::READ_MODE_COORDINATED);
  s = Join(coordinated, "trainer-a").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("READ_MODE_INDEPENDENT"));
  EXPECT_THAT(Trainers(), ElementsAre());  // nothing was created by a refused request
}

}  // namespace
}  // namespace sluice
