// Only the process holding a consumer index speaks for it (server/consumer_claims.h): once the
// holder has sent its secret back, another caller heartbeating as that index cannot report its
// tasks completed (before, any caller could finish a coordinated task, and end its job, this
// way); the holder's reports count; a client that never sends a secret works as before; a claim
// lapses after the holder's silence so that a restarted consumer takes over; a coordinator that
// lost its claims (a restart) adopts the secret a consumer carries.
#include "server/consumer_claims.h"

#include <cstdint>
#include <memory>
#include <string>

#include "core/util/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"

namespace sluice {
namespace {

constexpr absl::Duration kExpiry = absl::Seconds(60);

TEST(ConsumerClaimsTest, TheFirstCallerHoldsTheIndexUntilItFallsSilent) {
  uint64_t next = 100;
  ConsumerClaims claims([&] { return next++; });
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const ConsumerClaims::Verdict first = claims.Check(1, 0, 0, t0, kExpiry);
  EXPECT_TRUE(first.holder);
  EXPECT_EQ(first.secret, 100u);
  // Each index of each job has its own secret.
  EXPECT_EQ(claims.Check(1, 1, 0, t0, kExpiry).secret, 101u);
  EXPECT_EQ(claims.Check(2, 0, 0, t0, kExpiry).secret, 102u);
  // Until the secret comes back, a caller without one is taken for the holder (a client that
  // predates secrets), and handed the same secret; a wrong secret is not.
  const ConsumerClaims::Verdict legacy = claims.Check(1, 0, 0, t0 + absl::Seconds(1), kExpiry);
  EXPECT_TRUE(legacy.holder);
  EXPECT_EQ(legacy.secret, 100u);
  EXPECT_FALSE(claims.Check(1, 0, 555, t0 + absl::Seconds(1), kExpiry).holder);
  // The holder, with its secret (the claim is confirmed); anyone else (none, a guess) is
  // answered but not the holder.
  EXPECT_TRUE(claims.Check(1, 0, 100, t0 + absl::Seconds(59), kExpiry).holder);
  const ConsumerClaims::Verdict other = claims.Check(1, 0, 0, t0 + absl::Seconds(60), kExpiry);
  EXPECT_FALSE(other.holder);
  EXPECT_EQ(other.secret, 0u);
  EXPECT_FALSE(claims.Check(1, 0, 101, t0 + absl::Seconds(60), kExpiry).holder);
  // Silent for the expiry since its last heartbeat (59 s): the next caller takes over.
  const ConsumerClaims::Verdict taken =
      claims.Check(1, 0, 0, t0 + absl::Seconds(59) + kExpiry, kExpiry);
  EXPECT_TRUE(taken.holder);
  EXPECT_EQ(taken.secret, 103u);
  EXPECT_FALSE(claims.Check(1, 0, 100, t0 + absl::Seconds(120), kExpiry).holder);
  claims.ForgetJob(1);
  EXPECT_EQ(claims.size(), 1u);  // job 2's
}

TEST(ConsumerClaimsTest, AnUnclaimedIndexAdoptsTheSecretTheCallerCarries) {
  ConsumerClaims claims([] { return 7; });
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const ConsumerClaims::Verdict adopted = claims.Check(3, 2, 0xfeed, t0, kExpiry);
  EXPECT_TRUE(adopted.holder);
  EXPECT_EQ(adopted.secret, 0xfeedu);
  EXPECT_FALSE(claims.Check(3, 2, 0, t0, kExpiry).holder);
}

TEST(ConsumerClaimsTest, TheDefaultSecretsAreNeitherZeroNorRepeated) {
  ConsumerClaims claims;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const uint64_t a = claims.Check(1, 0, 0, t0, kExpiry).secret;
  const uint64_t b = claims.Check(1, 1, 0, t0, kExpiry).secret;
  EXPECT_NE(a, 0u);
  EXPECT_NE(b, 0u);
  EXPECT_NE(a, b);
}

class ConsumerReportsTest : public ::testing::Test {
 protected:
  ConsumerReportsTest() { coordinator_ = MakeCoordinator(); }

  std::unique_ptr<Coordinator> MakeCoordinator() {
    CoordinatorOptions options;
    options.clock = &clock_;
    options.worker_timeout = absl::Hours(1);
    options.consumer_timeout = kExpiry;
    return Coordinator::Create(options).value();
  }

  void Worker(const std::string& address) {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(address);
    proto::WorkerHeartbeatResponse resp;
    ASSERT_TRUE(coordinator_->WorkerHeartbeat(req, &resp).ok());
  }

  // A coordinated job of two consumers and one task: {job id, task id}; consumer 0 has
  // heartbeated (its secret in s0_).
  std::pair<int64_t, int64_t> TwoConsumersOneTask() {
    proto::RegisterDatasetRequest reg;
    reg.set_wire_version(proto::WIRE_VERSION_1);
    reg.set_pipeline("range(10).batch(2)");
    proto::RegisterDatasetResponse dataset;
    EXPECT_TRUE(coordinator_->RegisterDataset(reg, &dataset).ok());
    Worker("w1:1");
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_name("job");
    req.mutable_options()->set_dataset_id(dataset.dataset_id());
    req.mutable_options()->set_num_consumers(2);
    req.mutable_options()->set_replicas_per_consumer(1);
    req.mutable_options()->set_sharding_policy(proto::SHARDING_OFF);
    req.mutable_options()->set_num_tasks(1);
    proto::GetOrCreateJobResponse job;
    EXPECT_TRUE(coordinator_->GetOrCreateJob(req, &job).ok());
    const proto::ClientHeartbeatResponse tasks = Client(job.job_id(), 0, 0);
    s0_ = tasks.consumer_secret();
    EXPECT_EQ(tasks.tasks_size(), 1);
    return {job.job_id(), tasks.tasks_size() == 1 ? tasks.tasks(0).task_id() : -1};
  }

  proto::ClientHeartbeatResponse Client(int64_t job, int64_t consumer, uint64_t secret,
                                        std::vector<int64_t> completed = {}) {
    proto::ClientHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(job);
    req.set_consumer_index(consumer);
    req.set_consumer_secret(secret);
    for (int64_t t : completed) req.add_completed_task_ids(t);
    proto::ClientHeartbeatResponse resp;
    absl::Status s = coordinator_->ClientHeartbeat(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coordinator_;
  uint64_t s0_ = 0;
};

// The scenario: a caller heartbeats as another consumer's index and reports the task
// completed; with the real other consumer's report the task (and the job) would end early.
TEST_F(ConsumerReportsTest, AnotherCallerCannotReportAsAConsumersIndex) {
  const auto [job, task] = TwoConsumersOneTask();
  ASSERT_GT(task, 0);
  const uint64_t s0 = s0_;
  const uint64_t s1 = Client(job, 1, 0).consumer_secret();
  ASSERT_NE(s0, 0u);
  ASSERT_NE(s1, 0u);
  ASSERT_NE(s0, s1);
  // Each consumer's next heartbeat carries its secret back (TaskStreams does).
  EXPECT_EQ(Client(job, 0, s0).consumer_secret(), s0);
  EXPECT_EQ(Client(job, 1, s1).consumer_secret(), s1);
  // The forger (no secret, or a guess) is answered (it learns the task list, as any trainer
  // may) but is not handed the secret and its report is not heeded.
  const proto::ClientHeartbeatResponse forged = Client(job, 1, 0, {task});
  EXPECT_EQ(forged.consumer_secret(), 0u);
  Client(job, 1, s0, {task});
  EXPECT_FALSE(Client(job, 0, s0, {task}).job_finished())
      << "a caller without consumer 1's secret completed its task";
  // Consumer 1 itself: both consumers have completed it.
  EXPECT_TRUE(Client(job, 1, s1, {task}).job_finished());
}

TEST_F(ConsumerReportsTest, AClientWithoutSecretsReportsAsBefore) {
  const auto [job, task] = TwoConsumersOneTask();
  ASSERT_GT(task, 0);
  Client(job, 1, 0);
  EXPECT_FALSE(Client(job, 0, 0, {task}).job_finished());
  EXPECT_TRUE(Client(job, 1, 0, {task}).job_finished());
}

TEST_F(ConsumerReportsTest, ARestartedConsumerTakesItsIndexOnceTheOldProcessIsSilent) {
  const auto [job, task] = TwoConsumersOneTask();
  ASSERT_GT(task, 0);
  const uint64_t s0 = s0_;
  const uint64_t old = Client(job, 1, 0).consumer_secret();
  Client(job, 1, old);  // confirmed; then consumer 1's process dies
  clock_.Advance(kExpiry / 2);
  Client(job, 0, s0);  // consumer 0 lives on
  EXPECT_EQ(Client(job, 1, 0).consumer_secret(), 0u) << "taken while the holder may live";
  clock_.Advance(kExpiry / 2);  // consumer 1 restarts; its old process said nothing since
  const uint64_t restarted = Client(job, 1, 0).consumer_secret();
  EXPECT_NE(restarted, 0u);
  EXPECT_NE(restarted, old);
  EXPECT_FALSE(Client(job, 0, s0, {task}).job_finished());
  EXPECT_TRUE(Client(job, 1, restarted, {task}).job_finished());
}

TEST_F(ConsumerReportsTest, ARestartedCoordinatorAdoptsTheSecretsConsumersCarry) {
  const auto [job, task] = TwoConsumersOneTask();
  ASSERT_GT(task, 0);
  const uint64_t s1 = Client(job, 1, 0).consumer_secret();
  // The claims are not journaled: a fresh coordinator (as after a restart) takes the holder's
  // secret back from its next heartbeat, and the index is then held.
  coordinator_ = MakeCoordinator();
  const auto [job2, task2] = TwoConsumersOneTask();
  ASSERT_GT(task2, 0);
  EXPECT_EQ(Client(job2, 1, s1).consumer_secret(), s1);
  EXPECT_EQ(Client(job2, 1, 0).consumer_secret(), 0u);
}

}  // namespace
}  // namespace sluice
