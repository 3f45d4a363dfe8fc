// Jobs shared across trainers, end to end with real processes (docs/SERVICE.md, "Shared
// jobs"): a sluice-coordinator, one sluice-worker (one task: one element sequence) with a
// small --cross_trainer_window_bytes, and `sluicectl run --trainer_id=...` trainers reading an
// infinite pipeline at different speeds (paused with SIGSTOP while the others read on).
//  - lossless: every trainer sees exactly the same gap-free, duplicate-free sequence, and the
//    worker produced each step once (its counters, through the coordinator's status, say so);
//  - skipping: a slow trainer sees a skip, never a duplicate, and the worker's per-trainer
//    skipped-steps count equals the gap it saw.
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/process_cluster.h"
#include "tests/integration/step_model.h"

namespace sluice {
namespace {

// Steps of range(...).batch(4): int64, 32 payload bytes each. The window holds 8 of them.
constexpr int64_t kBatch = 4;
constexpr int64_t kWindowSteps = 8;
const char* const kPipeline = "--pipeline=range(1000000000000).batch(4)";

class SharedJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ProcessClusterOptions o;
    o.num_workers = 1;
    o.worker_flags = {absl::StrCat("--cross_trainer_window_bytes=", kWindowSteps * kBatch * 8)};
    auto cluster = ProcessCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  // A trainer reading `steps` steps of the shared job as `trainer_id` (steps < 0: to the end
  // of a finite `pipeline`).
  std::unique_ptr<Subprocess> Trainer(const std::string& trainer_id, int64_t steps,
                                      const std::vector<std::string>& extra,
                                      const std::string& pipeline = kPipeline) {
    std::vector<std::string> args = {"run",
                                     "--coordinator=" + cluster_->coordinator(),
                                     pipeline,
                                     "--job=sweep",
                                     "--trainer_id=" + trainer_id,
                                     "--devices=CPU:0",
                                     "--format=json",
                                     // A few steps in flight: a paused trainer holds little.
                                     "--receive_budget_bytes=512"};
    if (steps >= 0) args.push_back(absl::StrCat("--steps=", steps));
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = StartSluicectl(args);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }

  // The first element of each step the trainer printed (its steps are batches of 4
  // consecutive values, checked here).
  std::vector<int64_t> Steps(Subprocess* p) {
    auto r = p->Wait(absl::Seconds(120));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    EXPECT_EQ(r->exit_code, 0) << r->Describe() << "\n" << r->stderr_text << cluster_->Logs();
    auto steps = ParseRunJson(r->stdout_text);
    EXPECT_TRUE(steps.ok()) << steps.status();
    if (!steps.ok()) return {};
    std::vector<int64_t> firsts;
    for (const ModelStep& step : *steps) {
      EXPECT_EQ(step.size(), 1u);
      if (step.empty() || step[0].size() != static_cast<size_t>(kBatch)) {
        ADD_FAILURE() << "a step of " << (step.empty() ? 0 : step[0].size()) << " values";
        continue;
      }
      for (int64_t i = 1; i < kBatch; ++i) EXPECT_EQ(step[0][i], step[0][0] + i);
      firsts.push_back(step[0][0] / kBatch);  // the step's index in the element sequence
    }
    return firsts;
  }

  // The job's trainer reports, waiting (bounded) until `done` holds for them.
  proto::JobStatus WaitForJob(const std::function<bool(const proto::JobStatus&)>& done,
                              absl::Duration poll = absl::Milliseconds(100)) {
    proto::JobStatus last;
    // Heartbeats every 100 ms carry the reports: polls for 60 s is far more than needed.
    const int polls = static_cast<int>(absl::Seconds(60) / poll);
    for (int i = 0; i < polls; ++i) {
      auto status = cluster_->Status();
      if (status.ok() && status->jobs_size() == 1) {
        last = status->jobs(0);
        if (done(last)) return last;
      }
      absl::SleepFor(poll);
    }
    ADD_FAILURE() << "the job's status never got there: " << last.DebugString();
    return last;
  }

  static int64_t Read(const proto::JobStatus& j, const std::string& id) {
    for (const auto& t : j.trainer_progress()) {
      if (t.trainer_id() == id) return t.steps_read();
    }
    return -1;
  }
  static int64_t Skipped(const proto::JobStatus& j, const std::string& id) {
    for (const auto& t : j.trainer_progress()) {
      if (t.trainer_id() == id) return t.skipped_steps();
    }
    return -1;
  }

  std::unique_ptr<ProcessCluster> cluster_;
};

TEST_F(SharedJobTest, LosslessTrainersAtDifferentSpeedsEachSeeEveryStepOnce) {
  constexpr int64_t kSteps = 200;
  const std::vector<std::string> lossless = {"--cross_trainer_mode=lossless",
                                             "--expected_trainers=3"};
  std::vector<std::string> ids = {"fast", "medium", "slow"};
  std::vector<std::unique_ptr<Subprocess>> trainers;
  for (const std::string& id : ids) trainers.push_back(Trainer(id, kSteps, lossless));
  for (const auto& t : trainers) ASSERT_NE(t, nullptr);
  // Different speeds: "slow" is paused three times as long as "medium", "fast" never.
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(trainers[2]->Signal(SIGSTOP).ok());
    ASSERT_TRUE(trainers[1]->Signal(SIGSTOP).ok());
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(trainers[1]->Signal(SIGCONT).ok());
    absl::SleepFor(absl::Milliseconds(200));
    ASSERT_TRUE(trainers[2]->Signal(SIGCONT).ok());
    absl::SleepFor(absl::Milliseconds(100));
  }
  std::vector<int64_t> want(kSteps);
  for (int64_t i = 0; i < kSteps; ++i) want[static_cast<size_t>(i)] = i;
  for (size_t t = 0; t < trainers.size(); ++t) {
    EXPECT_EQ(Steps(trainers[t].get()), want) << "trainer " << ids[t];
  }
  const proto::JobStatus job = WaitForJob([&](const proto::JobStatus& j) {
    return Read(j, "fast") >= kSteps && Read(j, "medium") >= kSteps && Read(j, "slow") >= kSteps;
  });
  // Each step produced once for the three trainers (3 x kSteps if each had its own job): what
  // they read, plus what their clients took beyond it when they exited (a receive budget of
  // 512 bytes: a few steps) and what the window and the producer's pending step held.
  EXPECT_GE(job.steps_produced(), kSteps);
  EXPECT_LE(job.steps_produced(), kSteps + kWindowSteps + 32);
  for (const std::string& id : ids) EXPECT_EQ(Skipped(job, id), 0) << id;
  EXPECT_EQ(job.trainer_ids_size(), 3);
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST_F(SharedJobTest, SlowTrainerInSkippingModeSeesACountedSkipAndNoDuplicate) {
  // Far more than it reads before the pause below takes effect (it reads thousands of steps a
  // second, and the pause follows its first reads by a heartbeat and a poll), so that it is
  // still reading when "fast" runs ahead.
  constexpr int64_t kSlowSteps = 30000;
  constexpr int64_t kFastSteps = 300;
  std::unique_ptr<Subprocess> slow = Trainer("slow", kSlowSteps, {});
  ASSERT_NE(slow, nullptr);
  // Once it reads, pause it while "fast" reads far past the window.
  WaitForJob([](const proto::JobStatus& j) { return Read(j, "slow") >= 5; },
             absl::Milliseconds(10));
  ASSERT_TRUE(slow->Signal(SIGSTOP).ok());
  std::unique_ptr<Subprocess> fast = Trainer("fast", kFastSteps, {});
  ASSERT_NE(fast, nullptr);
  const std::vector<int64_t> fast_steps = Steps(fast.get());
  ASSERT_TRUE(slow->Signal(SIGCONT).ok());
  const std::vector<int64_t> slow_steps = Steps(slow.get());
  ASSERT_EQ(fast_steps.size(), static_cast<size_t>(kFastSteps));
  ASSERT_EQ(slow_steps.size(), static_cast<size_t>(kSlowSteps));
  // Both are increasing subsequences of the one element sequence: no duplicate, no reorder.
  for (size_t i = 1; i < fast_steps.size(); ++i) ASSERT_EQ(fast_steps[i], fast_steps[i - 1] + 1);
  for (size_t i = 1; i < slow_steps.size(); ++i) ASSERT_LT(slow_steps[i - 1], slow_steps[i]);
  // The slow one joined first (at step 0) and fell behind: its gaps are its skip.
  EXPECT_EQ(slow_steps.front(), 0);
  const int64_t gap = slow_steps.back() + 1 - kSlowSteps;
  EXPECT_GT(gap, 0) << "the slow trainer saw no skip";
  const proto::JobStatus job = WaitForJob([&](const proto::JobStatus& j) {
    return Read(j, "slow") >= kSlowSteps && Read(j, "fast") >= kFastSteps;
  });
  // The worker counted the same skip (steps it handed out beyond what was printed are after
  // the last printed one, so they add no gap).
  EXPECT_EQ(Skipped(job, "slow"), gap) << job.DebugString();
  // ("fast" saw no gap, checked above; once it exited it stays a trainer of the window until
  // the job ends, and the steps "slow" then drove past it count as its due skip.)
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

// A finite shared job ends for every trainer only once that trainer has read it: with
// expected_trainers, a trainer that joins after the others have read the whole dataset (it fits
// the window) still reads every step, then its end. Trainers started together on a finite
// dataset each read all of it (a trainer that finished first must not end the job's task for
// those still reading).
TEST_F(SharedJobTest, EveryLosslessTrainerOfAFiniteJobReadsItToItsEndWhenEverItJoins) {
  constexpr int64_t kSteps = kWindowSteps;  // the whole dataset fits the window
  const std::string pipeline = absl::StrCat("--pipeline=range(", kSteps * kBatch, ").batch(4)");
  const std::vector<std::string> lossless = {"--cross_trainer_mode=lossless",
                                             "--expected_trainers=3"};
  std::vector<int64_t> want(kSteps);
  for (int64_t i = 0; i < kSteps; ++i) want[static_cast<size_t>(i)] = i;
  std::unique_ptr<Subprocess> a = Trainer("a", -1, lossless, pipeline);
  std::unique_ptr<Subprocess> b = Trainer("b", -1, lossless, pipeline);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(Steps(a.get()), want) << "trainer a";
  EXPECT_EQ(Steps(b.get()), want) << "trainer b";
  // "c" joins after both have read to the end.
  std::unique_ptr<Subprocess> c = Trainer("c", -1, lossless, pipeline);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(Steps(c.get()), want) << "trainer c";
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

// Skipping mode, finite dataset: a trainer that finished first does not end the task for one
// still reading (paused here until the first exited); it skips to what the window holds and
// reads to the end.
TEST_F(SharedJobTest, ATrainerStillReadingAFiniteJobIsNotCutOffByOneThatFinished) {
  // Far more than "slow" reads before the pause below takes effect (as in the test above).
  constexpr int64_t kSteps = 20000;
  const std::string pipeline = absl::StrCat("--pipeline=range(", kSteps * kBatch, ").batch(4)");
  std::unique_ptr<Subprocess> slow = Trainer("slow", -1, {}, pipeline);
  ASSERT_NE(slow, nullptr);
  WaitForJob([](const proto::JobStatus& j) { return Read(j, "slow") >= 5; },
             absl::Milliseconds(10));
  ASSERT_TRUE(slow->Signal(SIGSTOP).ok());
  // "fast" joins where the window is and reads to the end; then "slow" goes on.
  std::unique_ptr<Subprocess> fast = Trainer("fast", -1, {}, pipeline);
  ASSERT_NE(fast, nullptr);
  const std::vector<int64_t> fast_steps = Steps(fast.get());
  ASSERT_TRUE(slow->Signal(SIGCONT).ok());
  const std::vector<int64_t> slow_steps = Steps(slow.get());
  for (const auto* steps : {&fast_steps, &slow_steps}) {
    ASSERT_FALSE(steps->empty());
    for (size_t i = 1; i < steps->size(); ++i) ASSERT_LT((*steps)[i - 1], (*steps)[i]);
    EXPECT_EQ(steps->back(), kSteps - 1) << "a trainer did not read to the end";
  }
  EXPECT_LT(slow_steps.front(), fast_steps.front()) << "slow read before fast joined";
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace sluice
