// The autoscaling policy (server/scaling_policy.h) on a fake clock: grows an input-bound job,
// holds within the hysteresis band and before the cool-down, shrinks a trainer-bound job
// after it, stays within [min_workers, max_workers], does not flap between two counts, and
// the load reports it decides from are validated (server/job_load.h).
#include "server/scaling_policy.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/job_load.h"

namespace sluice {
namespace {

constexpr absl::Duration kInterval = absl::Seconds(10);

ScalingPolicyOptions Options() {
  ScalingPolicyOptions o;
  o.min_workers = 1;
  o.max_workers = 16;
  o.scale_in_cooldown = absl::Seconds(60);
  return o;
}

JobWindow Window(double wait, int64_t workers, double steps_per_second = 100) {
  JobWindow w;
  w.job_id = 1;
  w.measured = true;
  w.wait_fraction = wait;
  w.workers = workers;
  w.steps_per_second = steps_per_second;
  return w;
}

class ScalingPolicyTest : public ::testing::Test {
 protected:
  // One decision interval later.
  ScalingDecision Next(const std::vector<JobWindow>& windows, int64_t live) {
    now_ += kInterval;
    return policy_.Decide(now_, windows, live);
  }
  absl::Time now_ = absl::UnixEpoch() + absl::Hours(24);
  ScalingPolicy policy_{Options()};
};

TEST_F(ScalingPolicyTest, GrowsAnInputBoundJobByItsWait) {
  // 1 worker, trainer waiting 75% of its time: it could consume 4x as fast; 10% headroom.
  ScalingDecision d = Next({Window(0.75, 1)}, 1);
  EXPECT_EQ(d.jobs[0].bound, JobBound::kInputBound);
  EXPECT_EQ(d.jobs[0].desired_workers, 5);  // ceil(1 * 1.1 / 0.25)
  EXPECT_EQ(d.total_desired, 5);
  EXPECT_THAT(d.change, ::testing::HasSubstr("grow from 1 to 5"));
}

TEST_F(ScalingPolicyTest, WaitsForTheWorkersItAskedForBeforeGrowingAgain) {
  EXPECT_EQ(Next({Window(0.5, 1)}, 1).total_desired, 3);
  // Only 2 of the 3 arrived and the trainer still waits: hold, do not pile on.
  EXPECT_EQ(Next({Window(0.4, 2)}, 2).total_desired, 3);
  // All 3 serve it and it still waits: grow from there.
  EXPECT_EQ(Next({Window(0.2, 3)}, 3).total_desired, 5);  // ceil(3 * 1.1 / 0.8)
}

TEST_F(ScalingPolicyTest, HoldsWithinTheHysteresisBand) {
  EXPECT_EQ(Next({Window(0.5, 2)}, 2).total_desired, 5);
  for (int i = 0; i < 20; ++i) {
    // Between the shrink threshold (0.5%) and the target (2%): neither grow nor shrink, ever.
    ScalingDecision d = Next({Window(0.01, 5)}, 5);
    EXPECT_EQ(d.jobs[0].bound, JobBound::kBalanced);
    EXPECT_EQ(d.total_desired, 5) << "decision " << i;
  }
}

TEST_F(ScalingPolicyTest, ShrinksATrainerBoundJobOnlyAfterTheCooldown) {
  EXPECT_EQ(Next({Window(0.5, 2)}, 2).total_desired, 5);
  // Trainer-bound right after the change: the cool-down (60 s = 6 intervals) holds it.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Next({Window(0.0, 5)}, 5).total_desired, 5) << "decision " << i;
  }
  ScalingDecision d = Next({Window(0.0, 5)}, 5);
  EXPECT_EQ(d.jobs[0].bound, JobBound::kTrainerBound);
  EXPECT_EQ(d.total_desired, 4);
  EXPECT_THAT(d.change, ::testing::HasSubstr("shrink from 5 to 4"));
  // And again only a cool-down later.
  EXPECT_EQ(Next({Window(0.0, 4)}, 4).total_desired, 4);
}

TEST_F(ScalingPolicyTest, StaysWithinMinAndMaxWorkers) {
  ScalingPolicyOptions o = Options();
  o.min_workers = 2;
  o.max_workers = 6;
  o.scale_in_cooldown = absl::ZeroDuration();
  ScalingPolicy policy(o);
  absl::Time t = now_;
  // A starved trainer asks for far more than max: capped.
  for (int i = 0; i < 5; ++i) {
    t += kInterval;
    EXPECT_LE(policy.Decide(t, {Window(0.99, 6)}, 6).total_desired, 6);
  }
  // Trainer-bound for long: never under min.
  int64_t last = 6;
  for (int i = 0; i < 20; ++i) {
    t += kInterval;
    last = policy.Decide(t, {Window(0.0, last)}, last).total_desired;
    EXPECT_GE(last, 2);
  }
  EXPECT_EQ(last, 2);
  // No jobs: min.
  t += kInterval;
  EXPECT_EQ(policy.Decide(t, {}, 2).total_desired, 2);
}

TEST_F(ScalingPolicyTest, CapsAJobAtItsUsefulWorkers) {
  JobWindow w = Window(0.9, 1);
  w.max_useful_workers = 2;  // a static job with 2 unfinished tasks
  EXPECT_EQ(Next({w}, 1).jobs[0].desired_workers, 2);
}

TEST_F(ScalingPolicyTest, UnmeasuredWindowsHold) {
  JobWindow w = Window(0.9, 1);
  w.measured = false;
  ScalingDecision d = Next({w}, 1);
  EXPECT_EQ(d.jobs[0].bound, JobBound::kUnmeasured);
  EXPECT_EQ(d.total_desired, 1);
}

TEST_F(ScalingPolicyTest, DoesNotFlapBetweenTwoCounts) {
  ScalingPolicyOptions o = Options();
  ScalingPolicy policy(o);
  absl::Time t = now_;
  // A trainer whose demand needs exactly 3 workers: with 3 it is trainer-bound, with 2 input-
  // bound. Simulated for an hour of decisions.
  int64_t workers = 3;
  int changes = 0;
  int64_t previous = -1;
  for (int i = 0; i < 360; ++i) {
    t += kInterval;
    const double wait = workers >= 3 ? 0.0 : 0.3;
    const int64_t desired = policy.Decide(t, {Window(wait, workers, 100)}, workers).total_desired;
    if (previous != -1 && desired != previous) ++changes;
    previous = desired;
    workers = desired;
  }
  // One probe down (3 -> 2), back up with headroom (2 -> 4), down to the learned floor (3),
  // which then holds for the rest of the hour.
  EXPECT_LE(changes, 3);
  EXPECT_EQ(workers, 3);
}

TEST_F(ScalingPolicyTest, ForgetsTheFloorWhenDemandFalls) {
  ScalingPolicyOptions o = Options();
  o.scale_in_cooldown = absl::ZeroDuration();
  ScalingPolicy policy(o);
  absl::Time t = now_;
  t += kInterval;
  EXPECT_EQ(policy.Decide(t, {Window(0.0, 3, 100)}, 3).total_desired, 2);  // probe down
  t += kInterval;
  EXPECT_EQ(policy.Decide(t, {Window(0.3, 2, 70)}, 2).total_desired, 4);  // too few: back
  t += kInterval;
  EXPECT_EQ(policy.Decide(t, {Window(0.0, 4, 100)}, 4).total_desired, 3);  // to the floor
  t += kInterval;
  EXPECT_EQ(policy.Decide(t, {Window(0.0, 3, 100)}, 3).total_desired, 3);  // the floor holds
  // The trainer slows to half its rate (throttled): the floor no longer holds.
  t += kInterval;
  EXPECT_EQ(policy.Decide(t, {Window(0.0, 3, 50)}, 3).total_desired, 2);
}

TEST_F(ScalingPolicyTest, ABriefDipInTheTrainersRateKeepsTheFloor) {
  // Learn a floor of 3 (cool-down 60 s = 6 intervals).
  for (int i = 0; i < 7; ++i) Next({Window(0.0, 3, 100)}, 3);
  ASSERT_EQ(policy_.total_desired(), 2);  // the probe down, a cool-down after the start
  ASSERT_EQ(Next({Window(0.3, 2, 70)}, 2).total_desired, 4);  // too few: back up
  for (int i = 0; i < 6; ++i) Next({Window(0.0, 4, 100)}, 4);
  ASSERT_EQ(policy_.total_desired(), 3);  // down to the floor
  // A loaded trainer dips for two intervals (less than the cool-down), then recovers: the
  // floor holds for an hour.
  for (int i = 0; i < 360; ++i) {
    const double rate = i % 30 < 2 ? 50 : 100;
    EXPECT_EQ(Next({Window(0.0, 3, rate)}, 3).total_desired, 3) << "decision " << i;
  }
}

TEST_F(ScalingPolicyTest, ForgetsJobsThatEnded) {
  EXPECT_EQ(Next({Window(0.5, 2)}, 2).total_desired, 5);
  // The job ended: the total falls to min, but only after the cool-down.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Next({}, 5).total_desired, 5);
  EXPECT_EQ(Next({}, 5).total_desired, 1);
}

TEST(JobLoadTableTest, SumsReportsPerJob) {
  JobLoadTable t;
  t.AddConsumerReport(1, /*wait_us=*/250'000, /*steps=*/10, /*interval_us=*/1'000'000);
  t.AddConsumerReport(1, 750'000, 30, 1'000'000);
  t.AddTaskRate(1, 20, 1'000'000);
  const JobLoadWindow w = t.TakeWindow(1);
  EXPECT_EQ(w.consumer_reports, 2);
  EXPECT_DOUBLE_EQ(w.WaitFraction(), 0.5);
  EXPECT_DOUBLE_EQ(w.StepsPerSecond(), 20);
  EXPECT_DOUBLE_EQ(w.steps_produced, 20);
  // A new interval.
  EXPECT_EQ(t.TakeWindow(1).consumer_reports, 0);
}

TEST(JobLoadTableTest, RefusesOrClampsHostileReports) {
  JobLoadTable t;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  t.AddConsumerReport(1, -5, 1, 1'000'000);                  // negative wait
  t.AddConsumerReport(1, 0, -1, 1'000'000);                  // negative steps
  t.AddConsumerReport(1, 0, 1, -1'000'000);                  // negative interval
  t.AddConsumerReport(1, 0, int64_t{1} << 50, 1'000'000);    // an absurd rate
  t.AddConsumerReport(1, 0, 1, absl::ToInt64Microseconds(absl::Hours(2)));  // too long
  t.AddTaskRate(1, nan, 1'000'000);
  t.AddTaskRate(1, -3, 1'000'000);
  t.AddWorkerCpu(7, nan, 1'000'000);
  t.AddWorkerCpu(7, -0.5, 1'000'000);
  EXPECT_EQ(t.refused(), 9);
  EXPECT_EQ(t.TakeWindow(1).consumer_reports, 0);
  EXPECT_EQ(t.WorkerCpu(7), -1);
  // A wait longer than its interval counts as the whole interval; CPU over 1 as 1.
  t.AddConsumerReport(1, 5'000'000, 1, 1'000'000);
  t.AddWorkerCpu(7, 3.0, 1'000'000);
  EXPECT_EQ(t.clamped(), 2);
  EXPECT_DOUBLE_EQ(t.TakeWindow(1).WaitFraction(), 1.0);
  EXPECT_DOUBLE_EQ(t.WorkerCpu(7), 1.0);
  // An older client (no report) is neither counted nor refused.
  t.AddConsumerReport(1, 0, 0, 0);
  EXPECT_EQ(t.refused(), 9);
}

TEST(JobLoadTableTest, StaysBoundedByRunningJobsAndLiveWorkers) {
  JobLoadTable t;
  for (int64_t job = 1; job <= 100; ++job) t.AddConsumerReport(job, 0, 1, 1'000'000);
  for (int64_t w = 1; w <= 100; ++w) t.AddWorkerCpu(w, 0.5, 1'000'000);
  // Reports of the same jobs and workers reuse their entries.
  for (int i = 0; i < 1000; ++i) t.AddConsumerReport(1, 0, 1, 1'000'000);
  EXPECT_EQ(t.jobs_size(), 100u);
  t.RetainJobs({1, 2});
  t.RetainWorkers({5});
  EXPECT_EQ(t.jobs_size(), 2u);
  EXPECT_EQ(t.workers_size(), 1u);
}

}  // namespace
}  // namespace sluice
