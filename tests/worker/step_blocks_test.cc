// Small steps handed to the step buffer in blocks (worker/task_runner.h): StepBuffer::
// TryPushSteps takes a block exactly as TryPush would take each of its steps in turn, and a
// task's steps pushed in blocks all arrive, in order, before its end. Its own binary: quick to
// build alone.
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/worker/task_step_test_util.h"
#include "worker/step_buffer.h"
#include "worker/task_runner.h"

namespace sluice {
namespace {

using Steps = std::vector<std::shared_ptr<const TaskStep>>;

// The task steps of what one Next() hands `consumer` now (empty: none ready).
std::vector<int64_t> TakeReady(StepBuffer* b, int64_t consumer, int64_t generation) {
  Steps steps;
  bool end = false;
  EXPECT_TRUE(b->Next(consumer, generation, 64, 1 << 30, absl::InfinitePast(), &steps, &end).ok());
  std::vector<int64_t> out;
  for (const auto& s : steps) out.push_back(s->task_step);
  return out;
}

TEST(StepBlocksTest, TryPushStepsTakesThePrefixThatFitsTheBudget) {
  StepBuffer b({.max_bytes = 250, .num_consumers = 1});
  absl::StatusOr<int64_t> g = b.Attach(0, 0);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::Time retry_at;
  size_t room = 0;
  std::atomic<int> woken{0};
  const Steps block = {MakeStep(0), MakeStep(1), MakeStep(2), MakeStep(3)};
  absl::StatusOr<size_t> taken = b.TryPushSteps(block, [&] { ++woken; }, &retry_at, &room);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 2u);  // 100 + 100 bytes; a third step would make 300 > 250
  EXPECT_EQ(b.buffered_steps(), 2u);
  EXPECT_TRUE(b.stats().producer_waiting_for_space);
  EXPECT_EQ(woken.load(), 0);
  EXPECT_EQ(room, 50u);  // what the producer's next block may fill
  // Reading releases both: room, and the producer's wake-up, once.
  EXPECT_EQ(TakeReady(&b, 0, *g), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(woken.load(), 1);
  taken =
      b.TryPushSteps(absl::MakeConstSpan(block).subspan(2), [&] { ++woken; }, &retry_at, &room);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 2u);
  EXPECT_FALSE(b.stats().producer_waiting_for_space);
  EXPECT_EQ(TakeReady(&b, 0, *g), (std::vector<int64_t>{2, 3}));
}

TEST(StepBlocksTest, TryPushStepsStopsAtAStepOutOfSequenceAndAfterTheProducerStopped) {
  StepBuffer b({.max_bytes = 1 << 20, .num_consumers = 1});
  absl::Time retry_at;
  size_t room = 0;
  absl::StatusOr<size_t> taken =
      b.TryPushSteps(Steps{MakeStep(0), MakeStep(2), MakeStep(3)}, [] {}, &retry_at, &room);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 1u);
  taken = b.TryPushSteps(Steps{MakeStep(2)}, [] {}, &retry_at, &room);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kInternal) << taken.status();
  EXPECT_EQ(b.buffered_steps(), 1u);
  b.StopProducing();
  taken = b.TryPushSteps(Steps{MakeStep(1)}, [] {}, &retry_at, &room);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kCancelled) << taken.status();
  EXPECT_EQ(b.buffered_steps(), 1u);
}

// range(1001).batch(2): 501 small, quick steps, pushed in blocks; the reader gets every one in
// order ([2i, 2i + 1], the last [1000]) and then the end (a block the producer still held when
// the pipeline ended is pushed before the end).
TEST(StepBlocksTest, ATasksStepsPushedInBlocksAllArriveInOrderBeforeItsEnd) {
  proto::TaskDef task = OneConsumerTask();
  *task.mutable_dataset() = Dataset::Range(1001).Batch(2).def();
  absl::StatusOr<std::shared_ptr<TaskRunner>> runner = TaskRunner::Start(task, {});
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto reader = (*runner)->OpenReader(0, 0);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<std::vector<int64_t>> got;
  bool end = false;
  for (int i = 0; i < 100000 && !end; ++i) {
    Steps steps;
    absl::Status s = (*reader)->Next(64, 1 << 20, absl::Now() + absl::Seconds(1), &steps, &end);
    ASSERT_TRUE(s.ok()) << s;
    for (const auto& step : steps) {
      const Tensor& t = step->pieces[0][0];
      got.emplace_back(t.data<int64_t>(), t.data<int64_t>() + t.num_elements());
    }
  }
  ASSERT_TRUE(end);
  ASSERT_EQ(got.size(), 501u);
  for (int64_t i = 0; i < 500; ++i) {
    EXPECT_EQ(got[i], (std::vector<int64_t>{2 * i, 2 * i + 1})) << "step " << i;
  }
  EXPECT_EQ(got[500], (std::vector<int64_t>{1000}));
}

// A step made into a block reaches a reader waiting for it while the runner makes the next one,
// however long that takes: here step 2 is made only once the reader has received step 1 (a
// source fed by the trainer's progress). Step 0 goes alone (a task's first step); step 1,
// made at once, starts a block that step 2 would close. The reader waits by a Next with a
// deadline, and by NotifyWhenReady as the worker's streams do; each registration pushes the
// block held (StepReader::PushHeldSteps). Without that push step 1 would wait for step 2, and
// step 2 for the reader: the reader gives up after kStuck (a liveness bound only).
TEST(StepBlocksTest, AWaitingReaderGetsTheStepsOfABlockWhileTheNextStepIsMade) {
  constexpr absl::Duration kStuck = absl::Seconds(30);
  for (const bool notified : {false, true}) {
    SCOPED_TRACE(notified ? "NotifyWhenReady" : "Next with a deadline");
    auto step_1_received = std::make_shared<absl::Notification>();
    std::shared_ptr<TaskRunner> runner = TaskRunner::StartWith(
        OneConsumerTask(), TaskRunnerOptions{},
        [step_1_received, made = int64_t{0}](TaskStep* step, bool* end) mutable {
          if (made == 2) step_1_received->WaitForNotificationWithTimeout(kStuck);
          *end = made == 3;
          if (*end) return absl::OkStatus();
          step->task_step = made;
          step->num_real_pieces = 1;
          step->pieces = {{Tensor::Scalar<int64_t>(made)}};
          step->bytes = 8;
          ++made;
          return absl::OkStatus();
        });
    auto reader = runner->OpenReader(0, 0);
    ASSERT_TRUE(reader.ok()) << reader.status();
    std::vector<int64_t> got;
    bool end = false;
    const absl::Time give_up = absl::Now() + kStuck;
    while (!end && absl::Now() < give_up) {
      absl::Notification ready;
      if (notified && (*reader)->NotifyWhenReady([&ready] { ready.Notify(); }) &&
          !ready.WaitForNotificationWithTimeout(give_up - absl::Now())) {
        (*reader)->CancelNotify();
        break;
      }
      Steps steps;
      absl::Status s = (*reader)->Next(64, 1 << 20, notified ? absl::InfinitePast() : give_up,
                                       &steps, &end);
      ASSERT_TRUE(s.ok()) << s;
      for (const auto& step : steps) got.push_back(step->task_step);
      if (got.size() >= 2 && !step_1_received->HasBeenNotified()) step_1_received->Notify();
    }
    // Lets the producer go, whatever happened.
    if (!step_1_received->HasBeenNotified()) step_1_received->Notify();
    EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 2}));
    EXPECT_TRUE(end);
  }
}

}  // namespace
}  // namespace sluice
