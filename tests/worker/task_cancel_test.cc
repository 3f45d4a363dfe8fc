// A task stopped in the middle of a step stops pulling its pipeline (worker/task_runner.h): the
// coordinator's tasks_to_stop, a drain and the job's end Close() the runner or StopProducing(),
// which cancel the pipeline (core/data/cancellation.h) instead of letting the step run on.
//
// The task's pipeline, `range(10**12).filter(less(3)).batch(2)`, makes step 0 at once and then
// scans ~10^12 elements for the rest of step 1: the runner is stopped in that scan. Asserted:
// the source hands out at most one element after the stop (the pull that had passed its check),
// the runner's destructor returns (without cancellation it waits for the scan to end), and the
// CANCELLED the pipeline returns is not reported as the task's error (the coordinator would
// fail the job).
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/data/op_profile.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "worker/task_runner.h"

namespace sluice {
namespace {

// A hang, not slowness: the pipeline checks per element (microseconds).
constexpr absl::Duration kHang = absl::Seconds(120);
constexpr int64_t kPulledBeforeStop = 20000;

int64_t SourceElements(const OpProfile& profile) {
  for (const OpProfile::OpStats& s : profile.Snapshot()) {
    if (s.position == 0) return s.elements;
  }
  return 0;
}

proto::TaskDef EndlessStepTask() {
  absl::StatusOr<Dataset> ds = Dataset::Parse("range(1000000000000).filter(less(3)).batch(2)");
  EXPECT_TRUE(ds.ok()) << ds.status();
  proto::TaskDef t;
  t.set_task_id(100);
  t.set_job_id(7);
  t.set_num_tasks(1);
  if (ds.ok()) *t.mutable_dataset() = ds->def();
  t.mutable_job()->set_num_consumers(1);
  t.mutable_job()->set_replicas_per_consumer(1);
  t.mutable_job()->set_sharding_policy(proto::SHARDING_OFF);
  return t;
}

enum class Stop { kClose, kStopProducing };

void StopMidStepAndExpectThePipelineStopped(Stop how) {
  SetBulkPathsEnabled(false);  // element by element: the source's count is the pulls
  auto profile = std::make_shared<OpProfile>();
  TaskRunnerOptions options;
  options.executor.profile = profile;
  absl::StatusOr<std::shared_ptr<TaskRunner>> runner =
      TaskRunner::Start(EndlessStepTask(), options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  const absl::Time give_up = absl::Now() + kHang;
  while (SourceElements(*profile) < kPulledBeforeStop && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_GE(SourceElements(*profile), kPulledBeforeStop) << "the task never got going";
  EXPECT_EQ((*runner)->buffer()->stats().steps_produced, 1);  // step 1 is in progress

  if (how == Stop::kClose) {
    (*runner)->Close("the test stopped the task");
  } else {
    (*runner)->StopProducing();
  }
  const int64_t at_stop = SourceElements(*profile);
  EXPECT_TRUE((*runner)->DeterministicError().ok()) << (*runner)->DeterministicError();
  EXPECT_TRUE((*runner)->TransientError().ok()) << (*runner)->TransientError();

  // The destructor waits for the step in progress: it returns once that step noticed.
  absl::Notification destroyed;
  std::thread destroy([&] {
    runner->reset();
    destroyed.Notify();
  });
  if (!destroyed.WaitForNotificationWithTimeout(kHang)) {
    std::cerr << "FATAL: the stopped task's runner was not destroyed within "
              << absl::FormatDuration(kHang) << "; source elements pulled since the stop: "
              << SourceElements(*profile) - at_stop << std::endl;
    std::abort();
  }
  destroy.join();
  const int64_t after = SourceElements(*profile) - at_stop;
  std::cout << "source elements pulled after the stop: " << after << std::endl;
  EXPECT_LE(after, 1);
  SetBulkPathsEnabled(true);
}

TEST(TaskCancelTest, ClosedTaskStopsPullingMidStep) {
  StopMidStepAndExpectThePipelineStopped(Stop::kClose);
}

TEST(TaskCancelTest, TaskThatStopsProducingStopsPullingMidStep) {
  StopMidStepAndExpectThePipelineStopped(Stop::kStopProducing);
}

}  // namespace
}  // namespace sluice
