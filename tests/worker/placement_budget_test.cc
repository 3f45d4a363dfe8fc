// The producer's budget while it builds steps in a consumer's shared-memory ring
// (StepBuffer::CapBytes, StepPlacement::producer_budget, TaskRunner::AttachPlacement): the
// buffer admits steps only within its cap, a cap that rises wakes the producer, and a runner
// placing in a ring runs ahead of its stream by at most half the ring, so that every step it
// makes finds room there (before, a producer far ahead filled the ring with queued steps and
// made the next ones in ordinary memory, which then went by TCP). Its own binary: quick to
// build alone.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/rpc/shm_ring.h"
#include "core/rpc/shm_segment.h"
#include "core/tensor/step_output_allocator.h"
#include "gtest/gtest.h"
#include "tests/worker/task_step_test_util.h"
#include "worker/step_buffer.h"
#include "worker/step_placement.h"
#include "worker/task_runner.h"

namespace sluice {
namespace {

using Steps = std::vector<std::shared_ptr<const TaskStep>>;

TEST(PlacementBudgetTest, CapBytesBoundsWhatTheProducerBuffersAndRaisingItWakesTheProducer) {
  StepBuffer b({.max_bytes = 1000, .num_consumers = 1});
  absl::StatusOr<int64_t> g = b.Attach(0, 0);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::Time retry_at;
  size_t room = 0;
  std::atomic<int> woken{0};
  b.CapBytes(250);
  EXPECT_EQ(b.stats().max_bytes, 250u);
  const Steps block = {MakeStep(0), MakeStep(1), MakeStep(2), MakeStep(3)};  // 100 bytes each
  absl::StatusOr<size_t> taken = b.TryPushSteps(block, [&] { ++woken; }, &retry_at, &room);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 2u);  // a third would make 300 > 250
  EXPECT_EQ(room, 50u);
  EXPECT_TRUE(b.stats().producer_waiting_for_space);
  // Lowering it further wakes nobody; lifting it wakes the waiting producer once, and the
  // buffer's own budget still applies.
  b.CapBytes(100);
  EXPECT_EQ(woken.load(), 0);
  b.CapBytes(std::numeric_limits<size_t>::max());
  EXPECT_EQ(woken.load(), 1);
  EXPECT_EQ(b.stats().max_bytes, 1000u);
  taken = b.TryPushSteps(absl::MakeConstSpan(block).subspan(2), [&] { ++woken; }, &retry_at,
                         &room);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 2u);
  EXPECT_EQ(room, 600u);
  EXPECT_EQ(b.buffered_steps(), 4u);
  // A cap below what is buffered keeps the steps and admits nothing more.
  b.CapBytes(150);
  taken = b.TryPushSteps(Steps{MakeStep(4)}, [&] { ++woken; }, &retry_at, &room);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 0u);
  EXPECT_EQ(room, 0u);
  EXPECT_EQ(b.buffered_steps(), 4u);
}

// Waits (bounded) until `runner`'s producer waits for room in its buffer or has pushed its
// last step (`steps`).
bool WaitUntilProducerWaits(TaskRunner* runner, int64_t steps) {
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!runner->buffer()->stats().producer_waiting_for_space &&
         runner->buffer()->stats().steps_produced < steps) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// A runner whose buffer could hold 1 MiB places 1000-byte steps in a 64 KiB ring while its
// stream reads nothing: it stops at half the ring (32 KiB) and every step it made is in the
// ring; once detached, its own budget applies again at once.
TEST(PlacementBudgetTest, RunnerPlacingInARingRunsAheadByHalfTheRingOnly) {
  constexpr size_t kRing = size_t{1} << 16;
  auto segment = ShmSegment::Create(kRing);
  ASSERT_TRUE(segment.ok()) << segment.status();
  auto writer = std::make_shared<ShmRingWriter>(*segment);
  auto placement = std::make_shared<StepPlacement>(writer);
  EXPECT_EQ(placement->producer_budget(), kRing / 2);
  TaskRunnerOptions options;
  options.buffer_bytes = size_t{1} << 20;
  auto attached = std::make_shared<absl::Notification>();
  auto produced = std::make_shared<std::atomic<int64_t>>(0);
  auto in_heap = std::make_shared<std::atomic<int64_t>>(0);  // steps after the first
  constexpr int64_t kSteps = 200;
  std::shared_ptr<TaskRunner> runner =
      TaskRunner::StartWith(OneConsumerTask(), options, [=](TaskStep* step, bool* end) {
        attached->WaitForNotificationWithTimeout(absl::Seconds(60));
        const int64_t i = produced->load();
        if (i == kSteps) {
          *end = true;
          return absl::OkStatus();
        }
        std::shared_ptr<TensorBuffer> b = AllocateStepOutput(1000);
        if (b == nullptr) {
          b = TensorBuffer::AllocateHost(1000);
          // Step 0's slice may have read the placement before it was attached.
          if (i > 0) in_heap->fetch_add(1);
        }
        std::memset(b->data(), static_cast<uint8_t>(i), 1000);
        step->task_step = i;
        step->num_real_pieces = 1;
        step->pieces = {{*Tensor::Wrap(DType::kUInt8, Shape({1000}), b)}};
        step->bytes = 1000;
        produced->store(i + 1);
        *end = false;
        return absl::OkStatus();
      });
  ASSERT_TRUE(runner->AttachPlacement(placement));
  EXPECT_EQ(runner->buffer()->stats().max_bytes, kRing / 2);
  attached->Notify();
  auto reader = runner->OpenReader(0, 0);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE(WaitUntilProducerWaits(runner.get(), kSteps));
  // 32 x 1000 bytes fit 32 KiB; the producer may hold one more it made but could not push.
  EXPECT_EQ(runner->buffer()->stats().bytes, 32000u);
  EXPECT_GE(produced->load(), 32);
  EXPECT_LE(produced->load(), 33);
  EXPECT_EQ(in_heap->load(), 0);

  // Reading a frame makes room for as many more, built in the ring too.
  std::vector<std::shared_ptr<const TaskStep>> taken;
  bool end = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  ASSERT_TRUE((*reader)->Next(16, size_t{1} << 20, deadline, &taken, &end).ok());
  ASSERT_EQ(taken.size(), 16u);
  taken.clear();  // acknowledged and released, as far as the ring is concerned
  while (produced->load() < 48 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
  ASSERT_TRUE(WaitUntilProducerWaits(runner.get(), kSteps));
  EXPECT_EQ(runner->buffer()->stats().bytes, 32000u);
  EXPECT_LE(produced->load(), 49);
  EXPECT_EQ(in_heap->load(), 0);

  // Detached: the buffer's own budget again, and the waiting producer goes on without a read.
  runner->DetachPlacement(placement.get());
  EXPECT_EQ(runner->buffer()->stats().max_bytes, options.buffer_bytes);
  while (produced->load() < kSteps && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(produced->load(), kSteps);
  // Every step arrives once, in order, with its bytes.
  int64_t next = 16;
  while (!end && absl::Now() < deadline) {
    std::vector<std::shared_ptr<const TaskStep>> steps;
    ASSERT_TRUE((*reader)->Next(64, size_t{1} << 20, deadline, &steps, &end).ok());
    for (const auto& step : steps) {
      EXPECT_EQ(step->task_step, next);
      EXPECT_EQ(static_cast<const uint8_t*>(step->pieces[0][0].raw_data())[999],
                static_cast<uint8_t>(next));
      ++next;
    }
  }
  EXPECT_TRUE(end);
  EXPECT_EQ(next, kSteps);
}

}  // namespace
}  // namespace sluice
