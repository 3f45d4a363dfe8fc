// The coordinator's autoscaling end to end without a network (docs/AUTOSCALING.md): client
// heartbeats' wait reports and worker heartbeats' rates become a job's load and a desired
// number of workers in GetStatus, once per scaling_interval on a fake clock; a hostile report
// is refused and counted, and a process that does not hold the consumer index is not heard.
// Also the client's input wait meter and the worker's load meter, on fake clocks.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/input_wait_meter.h"
#include "core/util/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "worker/worker_load_meter.h"

namespace sluice {
namespace {

constexpr absl::Duration kScalingInterval = absl::Seconds(10);

class CoordinatorScalingTest : public ::testing::Test {
 protected:
  CoordinatorScalingTest() {
    CoordinatorOptions options;
    options.clock = &clock_;
    options.worker_timeout = absl::Hours(1);  // the fake clock jumps; nobody dies here
    options.consumer_timeout = absl::Hours(1);
    options.idle_job_ttl = absl::Hours(10);
    options.scaling_interval = kScalingInterval;
    options.scaling.min_workers = 1;
    options.scaling.max_workers = 8;
    options.scaling.scale_in_cooldown = absl::Seconds(30);
    options.log = [](absl::string_view) {};
    coordinator_ = Coordinator::Create(options).value();
  }

  void WorkerHeartbeat(const std::string& address, double cpu = 0, double task_rate = 0) {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(address);
    req.set_cpu_busy_fraction(cpu);
    req.set_report_interval_us(absl::ToInt64Microseconds(kScalingInterval));
    proto::WorkerHeartbeatResponse resp;
    // Twice: the second lists the tasks the first handed out (a request that lists none gets
    // every task of the worker), with their rates.
    ASSERT_TRUE(coordinator_->WorkerHeartbeat(req, &resp).ok());
    for (const proto::TaskDef& t : resp.new_tasks()) {
      req.add_active_task_ids(t.task_id());
      proto::TaskProgress* p = req.add_task_progress();
      p->set_task_id(t.task_id());
      p->set_steps_per_second(task_rate);
    }
    ASSERT_TRUE(coordinator_->WorkerHeartbeat(req, &resp).ok());
  }

  int64_t CreateJob(int64_t num_consumers = 1) {
    proto::RegisterDatasetRequest reg;
    reg.set_wire_version(proto::WIRE_VERSION_1);
    reg.set_pipeline("range(100000).batch(4)");
    proto::RegisterDatasetResponse reg_resp;
    EXPECT_TRUE(coordinator_->RegisterDataset(reg, &reg_resp).ok());
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.mutable_options()->set_dataset_id(reg_resp.dataset_id());
    req.mutable_options()->set_num_consumers(num_consumers);
    req.mutable_options()->set_replicas_per_consumer(1);
    req.mutable_options()->set_sharding_policy(proto::SHARDING_RANGES);
    proto::GetOrCreateJobResponse resp;
    absl::Status s = coordinator_->GetOrCreateJob(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp.job_id();
  }

  // One consumer heartbeat carrying a report of one interval; returns the secret to send next.
  uint64_t ClientReport(int64_t job, double wait_fraction, int64_t steps, uint64_t secret,
                        int64_t consumer = 0) {
    proto::ClientHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(job);
    req.set_consumer_index(consumer);
    req.set_consumer_secret(secret);
    const int64_t interval = absl::ToInt64Microseconds(kScalingInterval);
    req.set_report_interval_us(interval);
    req.set_input_wait_us(static_cast<int64_t>(wait_fraction * static_cast<double>(interval)));
    req.set_steps_consumed(steps);
    proto::ClientHeartbeatResponse resp;
    absl::Status s = coordinator_->ClientHeartbeat(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp.consumer_secret();
  }

  // Advances one decision interval and lets the ticker decide.
  void Decide() {
    clock_.Advance(kScalingInterval);
    coordinator_->CheckWorkerLiveness();
  }

  proto::GetStatusResponse Status() {
    proto::GetStatusResponse resp;
    EXPECT_TRUE(coordinator_->GetStatus({}, &resp).ok());
    return resp;
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(CoordinatorScalingTest, AnInputBoundJobWantsMoreWorkers) {
  WorkerHeartbeat("w1:1");
  const int64_t job = CreateJob();
  coordinator_->CheckWorkerLiveness();  // the first window starts
  uint64_t secret = 0;
  // Three intervals: the first sees the job's worker count for the first time and the second
  // is their warm-up (both unmeasured).
  for (int i = 0; i < 3; ++i) {
    WorkerHeartbeat("w1:1", /*cpu=*/0.9, /*task_rate=*/5);
    secret = ClientReport(job, /*wait_fraction=*/0.6, /*steps=*/50, secret);
    Decide();
  }
  const proto::GetStatusResponse status = Status();
  ASSERT_EQ(status.jobs_size(), 1);
  const proto::JobLoad& load = status.jobs(0).load();
  EXPECT_EQ(load.bound(), "input-bound");
  EXPECT_NEAR(load.wait_fraction(), 0.6, 1e-6);
  EXPECT_NEAR(load.steps_per_second(), 5.0, 1e-6);
  EXPECT_EQ(load.workers(), 1);
  EXPECT_NEAR(load.worker_cpu_busy(), 0.9, 1e-6);
  EXPECT_GT(load.produced_steps_per_second(), 0);
  EXPECT_EQ(load.desired_workers(), 3);  // ceil(1 * 1.1 / 0.4)
  EXPECT_EQ(status.scaling().desired_workers(), 3);
  EXPECT_EQ(status.scaling().live_workers(), 1);
  EXPECT_EQ(status.scaling().decisions(), 3);
  EXPECT_NE(status.scaling().last_change().find("grow from 1 to 3"), std::string::npos)
      << status.scaling().last_change();
}

TEST_F(CoordinatorScalingTest, ATrainerBoundJobShrinksAfterTheCooldown) {
  WorkerHeartbeat("w1:1");
  WorkerHeartbeat("w2:1");
  WorkerHeartbeat("w3:1");
  const int64_t job = CreateJob();
  coordinator_->CheckWorkerLiveness();
  uint64_t secret = 0;
  std::vector<int64_t> desired;
  for (int i = 0; i < 6; ++i) {
    for (const char* w : {"w1:1", "w2:1", "w3:1"}) WorkerHeartbeat(w, 0.1, 2);
    secret = ClientReport(job, /*wait_fraction=*/0.0, /*steps=*/60, secret);
    Decide();
    desired.push_back(Status().scaling().desired_workers());
  }
  // 3 at first (the pool as it is), held through the 30 s cool-down, then one less.
  EXPECT_EQ(desired.front(), 3);
  EXPECT_EQ(desired.back(), 2);
  EXPECT_EQ(Status().jobs(0).load().bound(), "trainer-bound");
}

TEST_F(CoordinatorScalingTest, HostileReportsAreCountedAndChangeNothing) {
  WorkerHeartbeat("w1:1");
  const int64_t job = CreateJob();
  uint64_t secret = ClientReport(job, 0.0, 1, 0);
  proto::ClientHeartbeatRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_job_id(job);
  req.set_consumer_secret(secret);
  req.set_report_interval_us(1'000'000);
  req.set_input_wait_us(-7);
  proto::ClientHeartbeatResponse resp;
  // The heartbeat is still answered: a bad report is not a bad heartbeat.
  EXPECT_TRUE(coordinator_->ClientHeartbeat(req, &resp).ok());
  req.set_input_wait_us(0);
  req.set_steps_consumed(int64_t{1} << 60);
  EXPECT_TRUE(coordinator_->ClientHeartbeat(req, &resp).ok());
  proto::WorkerHeartbeatRequest w;
  w.set_wire_version(proto::WIRE_VERSION_1);
  w.set_worker_address("w1:1");
  w.set_report_interval_us(1'000'000);
  w.set_cpu_busy_fraction(std::numeric_limits<double>::quiet_NaN());
  proto::WorkerHeartbeatResponse wr;
  EXPECT_TRUE(coordinator_->WorkerHeartbeat(w, &wr).ok());
  EXPECT_EQ(Status().scaling().reports_refused(), 3);
}

TEST_F(CoordinatorScalingTest, OnlyTheConsumerIndexHolderIsHeard) {
  WorkerHeartbeat("w1:1");
  const int64_t job = CreateJob();
  coordinator_->CheckWorkerLiveness();
  uint64_t secret = 0;
  for (int i = 0; i < 2; ++i) {
    WorkerHeartbeat("w1:1", 0.5, 5);
    secret = ClientReport(job, /*wait_fraction=*/0.0, /*steps=*/50, secret);
    // Another process claiming the same consumer index says it starves: not heard.
    ClientReport(job, /*wait_fraction=*/1.0, /*steps=*/0, /*secret=*/12345);
    Decide();
  }
  EXPECT_EQ(Status().jobs(0).load().wait_fraction(), 0.0);
  EXPECT_EQ(Status().jobs(0).load().consumers_reporting(), 1);
}

TEST(InputWaitMeterTest, ReportsTheWaitOfEachIntervalIncludingOneUnderWay) {
  FakeClock clock;
  InputWaitMeter meter(&clock);
  meter.BeginWait();
  clock.Advance(absl::Milliseconds(300));
  meter.EndWait(/*got_step=*/true);
  clock.Advance(absl::Milliseconds(500));  // the trainer computes
  meter.BeginWait();
  clock.Advance(absl::Milliseconds(200));  // still waiting when the heartbeat reports
  InputWaitMeter::Report r = meter.TakeReport();
  EXPECT_EQ(r.interval_us, 1'000'000);
  EXPECT_EQ(r.wait_us, 500'000);
  EXPECT_EQ(r.steps, 1);
  clock.Advance(absl::Milliseconds(100));
  meter.EndWait(true);  // the wait's rest belongs to the next interval only
  clock.Advance(absl::Milliseconds(900));
  r = meter.TakeReport();
  EXPECT_EQ(r.interval_us, 1'000'000);
  EXPECT_EQ(r.wait_us, 100'000);
  EXPECT_EQ(r.steps, 1);
}

// A FakeClock that counts its reads.
class CountingClock final : public Clock {
 public:
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    ++reads_;
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  int reads() const {
    absl::MutexLock lock(&mu_);
    return reads_;
  }

 private:
  mutable absl::Mutex mu_;
  mutable int reads_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::UnixEpoch() + absl::Hours(24);
};

// The step sources time only the calls that block (BeginWait just before blocking, EndCall at
// every return): a step that was ready costs no clock read, and still counts as a step.
TEST(InputWaitMeterTest, CallsThatFindTheirStepReadyCountStepsWithoutReadingTheClock) {
  CountingClock clock;
  InputWaitMeter meter(&clock);
  const int reads_at_start = clock.reads();
  for (int i = 0; i < 1000; ++i) {
    meter.EndCall(/*got_step=*/true);
    clock.Advance(absl::Milliseconds(1));  // the trainer computes
  }
  meter.EndCall(/*got_step=*/false);  // the end of data is no step
  EXPECT_EQ(clock.reads(), reads_at_start) << "a ready step read the clock";
  InputWaitMeter::Report r = meter.TakeReport();
  EXPECT_EQ(r.steps, 1000);
  EXPECT_EQ(r.wait_us, 0);
  EXPECT_EQ(r.interval_us, 1'000'000);
}

TEST(InputWaitMeterTest, AWaitBegunTwiceInOneCallCountsFromItsFirstBeginUntilEndCall) {
  FakeClock clock;
  InputWaitMeter meter(&clock);
  meter.BeginWait();  // the call blocks for its step
  clock.Advance(absl::Milliseconds(100));
  meter.BeginWait();  // woken without a step, it blocks again: still the same wait
  clock.Advance(absl::Milliseconds(50));
  meter.EndCall(/*got_step=*/true);
  clock.Advance(absl::Milliseconds(850));  // the trainer computes; ready steps need no wait
  meter.EndCall(/*got_step=*/true);
  InputWaitMeter::Report r = meter.TakeReport();
  EXPECT_EQ(r.wait_us, 150'000);
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.interval_us, 1'000'000);
}

// What the interrupt of StepsCountedWhileReportsAreTakenAreEachReportedOnce does: count a step
// or take a report on `interrupted_meter`, adding up what it did.
InputWaitMeter* interrupted_meter = nullptr;
std::atomic<bool> interrupt_takes_reports{false};
std::atomic<int64_t> interrupt_steps{0};
std::atomic<int64_t> interrupt_reported{0};
std::atomic<int64_t> interrupts{0};

void OnInterrupt(int) {
  if (interrupt_takes_reports.load()) {
    interrupt_reported.fetch_add(interrupted_meter->TakeReport().steps);
  } else {
    interrupted_meter->EndCall(/*got_step=*/true);
    interrupt_steps.fetch_add(1);
  }
  interrupts.fetch_add(1);
}

// The trainer counts ready steps without the meter's lock while the heartbeat thread takes
// reports: every step lands in exactly one report. A count lost or doubled by that race (a
// report read between an increment's read and write, or an increment between a report's read
// and reset of the count) has a window of a few instructions, which two threads on a loaded
// 2-core machine almost never hit together (two threads racing for 200,000 steps did not catch
// a planted split increment in 3 runs). So the race is made to happen at every instruction:
// this thread takes report after report while a signal (every 20 µs, from a thread that only
// sends it) interrupts it wherever it is and counts a step, kInterrupts times; then it counts
// step after step while the signal takes a report. Every step counted must be reported once.
// The handlers rely on EndCall of a ready step taking no lock (input_wait_meter.h): the
// interrupted TakeReport holds the meter's lock.
TEST(InputWaitMeterTest, StepsCountedWhileReportsAreTakenAreEachReportedOnce) {
  constexpr int64_t kInterrupts = 10'000;  // per half
  InputWaitMeter meter;
  interrupted_meter = &meter;
  struct sigaction action = {}, previous = {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &action, &previous), 0);
  const pthread_t self = pthread_self();
  std::atomic<bool> stop{false};
  std::thread interrupter([&] {
    while (!stop.load()) {
      pthread_kill(self, SIGUSR1);
      absl::SleepFor(absl::Microseconds(20));
    }
  });
  int64_t steps = 0, reported = 0;
  // Steps counted amid reports (this thread's first TakeReport also makes its lock identity
  // before any handler takes the lock).
  interrupt_takes_reports = false;
  for (const int64_t end = interrupts.load() + kInterrupts; interrupts.load() < end;) {
    reported += meter.TakeReport().steps;
  }
  // Reports taken amid counts.
  interrupt_takes_reports = true;
  for (const int64_t end = interrupts.load() + kInterrupts; interrupts.load() < end;) {
    meter.EndCall(/*got_step=*/true);
    ++steps;
  }
  stop = true;
  interrupter.join();  // its last signal is handled before join returns
  sigaction(SIGUSR1, &previous, nullptr);
  reported += meter.TakeReport().steps;
  EXPECT_EQ(reported + interrupt_reported.load(), steps + interrupt_steps.load())
      << steps << " + " << interrupt_steps.load() << " steps counted, " << reported << " + "
      << interrupt_reported.load() << " reported";
}

TEST(WorkerLoadMeterTest, ReportsCpuBusyAndPerTaskRates) {
  FakeClock clock;
  double cpu = 10;
  WorkerLoadMeter meter(&clock, [&] { return cpu; }, /*cores=*/4);
  clock.Advance(absl::Seconds(2));
  cpu += 4;  // 2 of 4 cores busy for 2 s
  proto::WorkerHeartbeatRequest req;
  proto::TaskProgress* p = req.add_task_progress();
  p->set_task_id(1);
  p->set_steps_produced(30);
  meter.Fill(&req);
  EXPECT_DOUBLE_EQ(req.cpu_busy_fraction(), 0.5);
  EXPECT_EQ(req.report_interval_us(), 2'000'000);
  EXPECT_EQ(req.cpu_cores(), 4);
  EXPECT_DOUBLE_EQ(req.task_progress(0).steps_per_second(), 15);
  clock.Advance(absl::Seconds(1));
  req.mutable_task_progress(0)->set_steps_produced(40);
  meter.Fill(&req);
  EXPECT_DOUBLE_EQ(req.task_progress(0).steps_per_second(), 10);
  EXPECT_DOUBLE_EQ(req.cpu_busy_fraction(), 0.0);
}

}  // namespace
}  // namespace sluice
