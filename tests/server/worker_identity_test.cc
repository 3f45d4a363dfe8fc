// What a worker may say about itself and nothing else (issue 32, "Identity" and
// "Incarnations"), on the coordinator alone (fake clock, no network):
// - a new process incarnation at a known address is the death of the old process (its tasks
//   move at once) plus a new registration, and that heartbeat's reports (finished tasks) are
//   not heeded: a restarted worker, or a caller forging the address, cannot finish the old
//   process's tasks and skip their data;
// - a replaced incarnation is refused (FAILED_PRECONDITION), so two processes sharing an
//   address never merge into one worker;
// - TaskProgress.ended_consumers counts only for tasks the reporting worker holds or held.
// The role checks and the certificate binding of the address are in
// tests/security/roles_test.cc.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/util/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"

namespace sluice {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

class WorkerIdentityTest : public ::testing::Test {
 protected:
  WorkerIdentityTest() {
    CoordinatorOptions options;
    options.clock = &clock_;
    options.worker_timeout = absl::Seconds(10);
    options.log = [this](absl::string_view line) { log_.emplace_back(line); };
    coordinator_ = Coordinator::Create(options).value();
  }

  std::string Register(const std::string& pipeline) {
    proto::RegisterDatasetRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_pipeline(pipeline);
    proto::RegisterDatasetResponse resp;
    absl::Status s = coordinator_->RegisterDataset(req, &resp);
    EXPECT_TRUE(s.ok()) << pipeline << ": " << s;
    return resp.dataset_id();
  }

  static proto::WorkerHeartbeatRequest Request(const std::string& address, uint64_t incarnation,
                                               std::vector<int64_t> finished = {}) {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(address);
    req.set_process_incarnation(incarnation);
    for (int64_t t : finished) req.add_finished_task_ids(t);
    return req;
  }

  absl::StatusOr<proto::WorkerHeartbeatResponse> Send(const proto::WorkerHeartbeatRequest& req) {
    proto::WorkerHeartbeatResponse resp;
    absl::Status s = coordinator_->WorkerHeartbeat(req, &resp);
    if (!s.ok()) return s;
    return resp;
  }

  proto::WorkerHeartbeatResponse Heartbeat(const std::string& address, uint64_t incarnation,
                                           std::vector<int64_t> finished = {}) {
    absl::StatusOr<proto::WorkerHeartbeatResponse> resp =
        Send(Request(address, incarnation, std::move(finished)));
    EXPECT_TRUE(resp.ok()) << address << " incarnation " << incarnation << ": "
                           << resp.status();
    return resp.ok() ? *resp : proto::WorkerHeartbeatResponse();
  }

  // A job of `consumers` consumers and one task, made while only w1:1 (incarnation 1) is up,
  // so that the task is w1's: {job id, task id}.
  std::pair<int64_t, int64_t> OneTaskOnW1(int64_t consumers) {
    const std::string ds = Register("range(10).batch(2)");
    Heartbeat("w1:1", 1);
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_name("job");
    req.mutable_options()->set_dataset_id(ds);
    req.mutable_options()->set_num_consumers(consumers);
    req.mutable_options()->set_replicas_per_consumer(1);
    req.mutable_options()->set_sharding_policy(proto::SHARDING_OFF);
    req.mutable_options()->set_num_tasks(1);
    proto::GetOrCreateJobResponse job;
    absl::Status s = coordinator_->GetOrCreateJob(req, &job);
    EXPECT_TRUE(s.ok()) << s;
    const proto::WorkerHeartbeatResponse assigned = Heartbeat("w1:1", 1);
    EXPECT_EQ(assigned.new_tasks_size(), 1);
    if (!s.ok() || assigned.new_tasks_size() != 1) return {-1, -1};
    return {job.job_id(), assigned.new_tasks(0).task_id()};
  }

  proto::ClientHeartbeatResponse Client(int64_t job_id, int64_t consumer = 0) {
    proto::ClientHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(job_id);
    req.set_consumer_index(consumer);
    proto::ClientHeartbeatResponse resp;
    absl::Status s = coordinator_->ClientHeartbeat(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  proto::GetStatusResponse Status() {
    proto::GetStatusResponse resp;
    EXPECT_TRUE(coordinator_->GetStatus(proto::GetStatusRequest(), &resp).ok());
    return resp;
  }

  FakeClock clock_;
  std::vector<std::string> log_;
  std::unique_ptr<Coordinator> coordinator_;
};

// The scenario of the issue: a worker restarted within worker_timeout at the same address (or
// any caller claiming that address) reports the old process's task finished. Before
// incarnations the task was finished and the rest of its data skipped silently.
TEST_F(WorkerIdentityTest, ANewIncarnationIsADeathAndCannotFinishTheOldProcesssTasks) {
  const auto [job, task] = OneTaskOnW1(/*consumers=*/1);
  ASSERT_GT(task, 0);
  Heartbeat("w2:1", 7);
  const proto::WorkerHeartbeatResponse restarted = Heartbeat("w1:1", 2, /*finished=*/{task});
  EXPECT_FALSE(Client(job).job_finished()) << "a new process's report finished the old one's task";
  EXPECT_THAT(log_, Contains(HasSubstr("worker 1 (w1:1) restarted")));
  // The task moved at once, as on a death (no wait for worker_timeout), to the other worker.
  EXPECT_THAT(restarted.new_tasks(), IsEmpty());
  const proto::WorkerHeartbeatResponse w2 = Heartbeat("w2:1", 7);
  ASSERT_EQ(w2.new_tasks_size(), 1);
  EXPECT_EQ(w2.new_tasks(0).task_id(), task);
  EXPECT_EQ(Client(job).tasks(0).worker_address(), "w2:1");
  // The new process is a live worker: it gets the next job's task.
  const proto::GetStatusResponse status = Status();
  ASSERT_EQ(status.workers_size(), 2);
  EXPECT_TRUE(status.workers(0).alive());
}

// Alone, a restarted worker gets its old tasks back as new ones (from the start), never
// resumed as if the old process still held them.
TEST_F(WorkerIdentityTest, ARestartedLoneWorkerIsHandedItsTasksAnew) {
  const auto [job, task] = OneTaskOnW1(/*consumers=*/1);
  ASSERT_GT(task, 0);
  const proto::WorkerHeartbeatResponse restarted = Heartbeat("w1:1", 2, /*finished=*/{task});
  ASSERT_EQ(restarted.new_tasks_size(), 1);
  EXPECT_EQ(restarted.new_tasks(0).task_id(), task);
  EXPECT_FALSE(Client(job).job_finished());
  // The new process's own report of it, later, counts.
  Heartbeat("w1:1", 2, /*finished=*/{task});
  EXPECT_TRUE(Client(job).job_finished());
}

TEST_F(WorkerIdentityTest, AReplacedIncarnationIsRefusedSoTwoProcessesNeverMerge) {
  const auto [job, task] = OneTaskOnW1(/*consumers=*/1);
  ASSERT_GT(task, 0);
  Heartbeat("w1:1", 2);  // a second process at the same address
  absl::StatusOr<proto::WorkerHeartbeatResponse> old = Send(Request("w1:1", 1, {task}));
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old.status().message(), HasSubstr("w1:1"));
  EXPECT_THAT(old.status().message(), HasSubstr("replaced by a newer process"));
  EXPECT_FALSE(Client(job).job_finished());
  // The newer one goes on undisturbed: still one worker, alive, not restarted again.
  Heartbeat("w1:1", 2);
  const proto::GetStatusResponse status = Status();
  ASSERT_EQ(status.workers_size(), 1);
  EXPECT_TRUE(status.workers(0).alive());
  int restarts = 0;
  for (const std::string& line : log_) restarts += line.find("restarted") != std::string::npos;
  EXPECT_EQ(restarts, 1);
}

// Workers that predate incarnations (0) are not checked: the heartbeats of one process.
TEST_F(WorkerIdentityTest, NoIncarnationIsNotARestart) {
  const auto [job, task] = OneTaskOnW1(/*consumers=*/1);
  ASSERT_GT(task, 0);
  Heartbeat("w1:1", 0, /*finished=*/{task});
  EXPECT_TRUE(Client(job).job_finished());
  EXPECT_THAT(log_, Not(Contains(HasSubstr("restarted"))));
}

// A worker that never held the task reports its consumers ended: before, any caller could end
// a coordinated task (and its job) this way.
TEST_F(WorkerIdentityTest, EndedConsumersCountOnlyFromAWorkerThatHeldTheTask) {
  const auto [job, task] = OneTaskOnW1(/*consumers=*/2);
  ASSERT_GT(task, 0);
  Heartbeat("w2:1", 7);
  proto::WorkerHeartbeatRequest forged = Request("w2:1", 7);
  proto::TaskProgress* progress = forged.add_task_progress();
  progress->set_task_id(task);
  progress->add_ended_consumers(0);
  progress->add_ended_consumers(1);
  ASSERT_TRUE(Send(forged).ok());
  EXPECT_FALSE(Client(job, 0).job_finished()) << "w2 ended consumers of w1's task";
  // The same report from the task's worker counts.
  proto::WorkerHeartbeatRequest real = forged;
  real.set_worker_address("w1:1");
  real.set_process_incarnation(1);
  ASSERT_TRUE(Send(real).ok());
  EXPECT_TRUE(Client(job, 0).job_finished());
}

}  // namespace
}  // namespace sluice
