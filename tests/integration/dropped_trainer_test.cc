// A trainer of a shared job that a worker drops (--drop_departed_trainers_after), end to end
// with real processes (docs/SERVICE.md, "Trainers that leave"): the worker tells the
// coordinator, which journals it, so that after a coordinator restart (SIGKILL, a new process
// replaying --work_dir) `sluicectl status` still lists it as dropped and the trainer coming back
// gets a clear FAILED_PRECONDITION naming it, while a new trainer id still joins and reads.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/process_cluster.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const char* const kPipeline = "--pipeline=range(1000000000000).batch(4)";

class DroppedTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ProcessClusterOptions o;
    o.num_workers = 1;
    o.work_dir = true;
    // A window of 8 steps of 32 bytes: full soon after a trainer stops reading, so that the
    // producer looks for departed trainers (it retries when one falls due).
    o.worker_flags = {"--cross_trainer_window_bytes=256", "--drop_departed_trainers_after=1s"};
    auto cluster = ProcessCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  absl::StatusOr<SubprocessResult> RunTrainer(const std::string& trainer_id) {
    return RunSluicectl({"run", "--coordinator=" + cluster_->coordinator(), kPipeline,
                         "--job=sweep", "--trainer_id=" + trainer_id, "--steps=5",
                         "--devices=CPU:0", "--format=json"});
  }

  // The one job's status once `done` holds for it, polled every 100 ms for at most 60 s (the
  // drop takes 1 s plus a heartbeat of 100 ms; a coordinator restart a second or two).
  proto::JobStatus WaitForJob(const std::function<bool(const proto::JobStatus&)>& done) {
    proto::JobStatus last;
    for (int i = 0; i < 600; ++i) {
      auto status = cluster_->Status();
      if (status.ok() && status->jobs_size() == 1) {
        last = status->jobs(0);
        if (done(last)) return last;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    ADD_FAILURE() << "the job's status never got there: " << last.DebugString()
                  << cluster_->Logs();
    return last;
  }

  std::unique_ptr<ProcessCluster> cluster_;
};

TEST_F(DroppedTrainerTest, ADroppedTrainerSurvivesARestartAndIsRefusedWhenItComesBack) {
  auto early = RunTrainer("early");
  ASSERT_TRUE(early.ok()) << early.status();
  ASSERT_EQ(early->exit_code, 0) << early->Describe() << early->stderr_text << cluster_->Logs();
  // It exited: its stream is gone, and 1 s later the worker drops it and reports it.
  proto::JobStatus job =
      WaitForJob([](const proto::JobStatus& j) { return j.dropped_trainer_ids_size() > 0; });
  EXPECT_THAT(job.dropped_trainer_ids(), ElementsAre("early"));
  EXPECT_THAT(job.trainer_ids(), IsEmpty());  // its place in max_trainers is free

  ASSERT_TRUE(cluster_->KillCoordinator().ok());
  ASSERT_TRUE(cluster_->RestartCoordinator().ok()) << cluster_->Logs();
  job = WaitForJob([](const proto::JobStatus&) { return true; });
  EXPECT_THAT(job.dropped_trainer_ids(), ElementsAre("early"));
  EXPECT_THAT(job.trainer_ids(), IsEmpty());
  auto status = RunSluicectl({"status", "--coordinator=" + cluster_->coordinator()});
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->exit_code, 0) << status->stderr_text;
  EXPECT_THAT(status->stdout_text, HasSubstr("TRAINERS"));
  EXPECT_THAT(status->stdout_text, ::testing::ContainsRegex("early +dropped"));

  // Back after the drop: refused, naming it and what to do.
  auto back = RunTrainer("early");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_NE(back->exit_code, 0) << back->stdout_text;
  EXPECT_THAT(back->stderr_text, HasSubstr("dropped this trainer"));
  EXPECT_THAT(back->stderr_text, HasSubstr("'early'"));
  EXPECT_THAT(back->stderr_text, HasSubstr("new trainer_id"));
  // The job still serves a new trainer.
  auto late = RunTrainer("late");
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->exit_code, 0) << late->Describe() << late->stderr_text << cluster_->Logs();
  job = WaitForJob([](const proto::JobStatus& j) { return j.trainer_ids_size() == 1; });
  EXPECT_THAT(job.trainer_ids(), ElementsAre("late"));
  EXPECT_THAT(job.dropped_trainer_ids(), ElementsAre("early"));
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace sluice
