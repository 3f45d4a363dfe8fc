// The producer's budget while it builds steps in a consumer's shared-memory ring
// (StepBuffer::Cap, StepPlacement::buffer_caps, TaskRunner::AttachPlacement): the
// buffer admits steps only within its cap, a cap that rises wakes the producer, the retention
// window shrinks to its cap, and a runner placing in a ring runs ahead of its stream by at
// most half the ring (and retains at most a quarter), so that every step it makes finds room
// there (before, a producer far ahead filled the ring with queued steps and made the next ones
// in ordinary memory, which then went by TCP). Its own binary: quick to build alone.
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
#include "core/rpc/step_frame.h"
#include "core/tensor/step_output_allocator.h"
#include "gtest/gtest.h"
#include "tests/worker/task_step_test_util.h"
#include "worker/step_buffer.h"
#include "worker/step_placement.h"
#include "worker/task_runner.h"

namespace sluice {
namespace {

using Steps = std::vector<std::shared_ptr<const TaskStep>>;

TEST(PlacementBudgetTest, CapBoundsWhatTheProducerBuffersAndRaisingItWakesTheProducer) {
  StepBuffer b({.max_bytes = 1000, .num_consumers = 1});
  absl::StatusOr<int64_t> g = b.Attach(0, 0);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::Time retry_at;
  size_t room = 0;
  std::atomic<int> woken{0};
  b.Cap({.buffered_bytes = 250});
  EXPECT_EQ(b.stats().max_bytes, 250u);
  const Steps block = {MakeStep(0), MakeStep(1), MakeStep(2), MakeStep(3)};  // 100 bytes each
  absl::StatusOr<size_t> taken = b.TryPushSteps(block, [&] { ++woken; }, &retry_at, &room);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 2u);  // a third would make 300 > 250
  EXPECT_EQ(room, 50u);
  EXPECT_TRUE(b.stats().producer_waiting_for_space);
  // Lowering it further wakes nobody; lifting it wakes the waiting producer once, and the
  // buffer's own budget still applies.
  b.Cap({.buffered_bytes = 100});
  EXPECT_EQ(woken.load(), 0);
  b.Cap({});
  EXPECT_EQ(woken.load(), 1);
  EXPECT_EQ(b.stats().max_bytes, 1000u);
  taken = b.TryPushSteps(absl::MakeConstSpan(block).subspan(2), [&] { ++woken; }, &retry_at,
                         &room);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 2u);
  EXPECT_EQ(room, 600u);
  EXPECT_EQ(b.buffered_steps(), 4u);
  // A cap below what is buffered keeps the steps and admits nothing more.
  b.Cap({.buffered_bytes = 150});
  taken = b.TryPushSteps(Steps{MakeStep(4)}, [&] { ++woken; }, &retry_at, &room);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 0u);
  EXPECT_EQ(room, 0u);
  EXPECT_EQ(b.buffered_steps(), 4u);
}

// The retention cap trims the window at once (oldest first) and bounds it after; a consumer
// attaching below the trimmed window is OUT_OF_RANGE (it reads the task elsewhere), one inside
// it is served from memory; lifting the cap gives the window its own size again.
TEST(PlacementBudgetTest, CapTrimsTheRetentionWindowAndBoundsIt) {
  StepBuffer b({.max_bytes = 1 << 20, .num_consumers = 1, .retention_bytes = 1000});
  absl::StatusOr<int64_t> g = b.Attach(0, 0);
  ASSERT_TRUE(g.ok()) << g.status();
  for (int64_t i = 0; i < 8; ++i) ASSERT_TRUE(b.Push(MakeStep(i)).ok());  // 100 bytes each
  Steps steps;
  bool end = false;
  ASSERT_TRUE(b.Next(0, *g, 8, 1 << 20, absl::InfinitePast(), &steps, &end).ok());
  ASSERT_EQ(steps.size(), 8u);
  EXPECT_EQ(b.stats().retained_steps, 8u);
  b.Cap({.retained_bytes = 250});
  EXPECT_EQ(b.stats().retained_steps, 2u);  // steps 6 and 7
  EXPECT_EQ(b.retained_bytes(), 200u);
  EXPECT_EQ(b.stats().retention_capacity, 250u);
  EXPECT_EQ(b.Attach(0, 5).status().code(), absl::StatusCode::kOutOfRange);
  g = b.Attach(0, 6);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(b.Next(0, *g, 8, 1 << 20, absl::InfinitePast(), &steps, &end).ok());
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0]->task_step, 6);
  // Steps released later keep the window within the cap.
  for (int64_t i = 8; i < 12; ++i) ASSERT_TRUE(b.Push(MakeStep(i)).ok());
  ASSERT_TRUE(b.Next(0, *g, 8, 1 << 20, absl::InfinitePast(), &steps, &end).ok());
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(b.stats().retained_steps, 2u);  // steps 10 and 11
  b.Cap({});
  EXPECT_EQ(b.stats().retention_capacity, 1000u);
  for (int64_t i = 12; i < 20; ++i) ASSERT_TRUE(b.Push(MakeStep(i)).ok());
  ASSERT_TRUE(b.Next(0, *g, 8, 1 << 20, absl::InfinitePast(), &steps, &end).ok());
  EXPECT_EQ(b.stats().retained_steps, 10u);  // steps 10 to 19
}

// Cap's steps: the buffer queues fewer steps than the cap whatever their bytes (a block is
// taken up to it, *room_steps says what is left, and a release wakes the producer), and the
// retention window keeps at most the capped number of steps; lifting the caps lifts both.
TEST(PlacementBudgetTest, CapInStepsBoundsTheQueueAndTheRetentionWindow) {
  StepBuffer b({.max_bytes = 1 << 20, .num_consumers = 1, .retention_bytes = 1 << 20});
  absl::StatusOr<int64_t> g = b.Attach(0, 0);
  ASSERT_TRUE(g.ok()) << g.status();
  b.Cap({.buffered_steps = 3, .retained_steps = 2});
  absl::Time retry_at;
  size_t room = 0;
  size_t room_steps = 0;
  std::atomic<int> woken{0};
  Steps block;
  for (int64_t i = 0; i < 5; ++i) block.push_back(MakeStep(i));  // 100 bytes each
  absl::StatusOr<size_t> taken =
      b.TryPushSteps(block, [&] { ++woken; }, &retry_at, &room, &room_steps);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 3u);
  EXPECT_EQ(room_steps, 0u);
  EXPECT_EQ(room, (1u << 20) - 300);
  EXPECT_TRUE(b.stats().producer_waiting_for_space);
  Steps steps;
  bool end = false;
  ASSERT_TRUE(b.Next(0, *g, 2, 1 << 20, absl::InfinitePast(), &steps, &end).ok());
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(woken.load(), 1);
  taken = b.TryPushSteps(absl::MakeConstSpan(block).subspan(3), [&] { ++woken; }, &retry_at,
                         &room, &room_steps);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 2u);
  EXPECT_EQ(room_steps, 0u);
  EXPECT_EQ(b.buffered_steps(), 3u);
  ASSERT_TRUE(b.Next(0, *g, 8, 1 << 20, absl::InfinitePast(), &steps, &end).ok());
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(b.stats().retained_steps, 2u);  // steps 3 and 4 of the 5 released
  EXPECT_EQ(b.Attach(0, 2).status().code(), absl::StatusCode::kOutOfRange);
  g = b.Attach(0, 3);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(b.Next(0, *g, 8, 1 << 20, absl::InfinitePast(), &steps, &end).ok());
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0]->task_step, 3);
  b.Cap({});
  Steps more;
  for (int64_t i = 5; i < 15; ++i) more.push_back(MakeStep(i));
  taken = b.TryPushSteps(more, [&] { ++woken; }, &retry_at, &room, &room_steps);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 10u);
  EXPECT_EQ(room_steps, std::numeric_limits<size_t>::max());
  ASSERT_TRUE(b.Next(0, *g, 10, 1 << 20, absl::InfinitePast(), &steps, &end).ok());
  EXPECT_EQ(b.stats().retained_steps, 12u);  // steps 3 to 14
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

// A runner whose producer, once `attached` is notified, makes `steps` steps of `step_bytes`
// bytes (step i's bytes all i), each built in the ring of the placement attached to it while
// that has room, else on the heap (counted in `in_heap` after step 0, whose slice may have read
// the placement before it was attached).
struct PlacingRunner {
  PlacingRunner(const TaskRunnerOptions& options, int64_t steps, size_t step_bytes) {
    runner = TaskRunner::StartWith(
        OneConsumerTask(), options,
        [attached = attached, produced = produced, in_heap = in_heap, steps, step_bytes](
            TaskStep* step, bool* end) {
          attached->WaitForNotificationWithTimeout(absl::Seconds(60));
          const int64_t i = produced->load();
          if (i == steps) {
            *end = true;
            return absl::OkStatus();
          }
          std::shared_ptr<TensorBuffer> b = AllocateStepOutput(step_bytes);
          if (b == nullptr) {
            b = TensorBuffer::AllocateHost(step_bytes);
            if (i > 0) in_heap->fetch_add(1);
          }
          std::memset(b->data(), static_cast<uint8_t>(i), step_bytes);
          step->task_step = i;
          step->num_real_pieces = 1;
          step->pieces = {{*Tensor::Wrap(DType::kUInt8,
                                         Shape({static_cast<int64_t>(step_bytes)}), b)}};
          step->bytes = step_bytes;
          produced->store(i + 1);
          *end = false;
          return absl::OkStatus();
        });
  }
  const std::shared_ptr<absl::Notification> attached = std::make_shared<absl::Notification>();
  const std::shared_ptr<std::atomic<int64_t>> produced = std::make_shared<std::atomic<int64_t>>(0);
  const std::shared_ptr<std::atomic<int64_t>> in_heap = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<TaskRunner> runner;
};

// What a stream and its consumer do with the steps a frame takes: the worker sends them (in
// the ring: their header alone), the consumer decodes the frame, drops its steps at once and
// says so (its next grant's shm_released).
void SendAndRelease(ShmRingWriter* writer, ShmRingReader* reader, const Steps& steps) {
  StepFrameEncoder encoder;
  encoder.set_shared_payload(writer);
  std::vector<WireStepView> views;
  for (const auto& s : steps) views.push_back(WireStepView{s->task_step, -1, 1, &s->pieces[0], 1});
  grpc::ByteBuffer bb;
  ASSERT_TRUE(encoder.Encode(views, false, absl::OkStatus(), &bb).ok());
  StepFrameDecoder decoder(nullptr, nullptr);
  decoder.set_shared_payload(reader);
  StepFrame frame;
  ASSERT_TRUE(decoder.Decode(bb, &frame).ok());
  ASSERT_EQ(frame.steps.size(), steps.size());
  frame.steps.clear();
  ASSERT_TRUE(writer->Release(reader->released()).ok());
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
  EXPECT_EQ(placement->buffer_caps().buffered_bytes, kRing / 2);
  TaskRunnerOptions options;
  options.buffer_bytes = size_t{1} << 20;
  constexpr int64_t kSteps = 200;
  PlacingRunner placing(options, kSteps, 1000);
  const std::shared_ptr<TaskRunner>& runner = placing.runner;
  ASSERT_TRUE(runner->AttachPlacement(placement));
  EXPECT_EQ(runner->buffer()->stats().max_bytes, kRing / 2);
  EXPECT_EQ(runner->buffer()->stats().retention_capacity, kRing / 4);
  placing.attached->Notify();
  auto reader = runner->OpenReader(0, 0);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE(WaitUntilProducerWaits(runner.get(), kSteps));
  // 32 x 1000 bytes fit 32 KiB; the producer may hold one more it made but could not push.
  EXPECT_EQ(runner->buffer()->stats().bytes, 32000u);
  EXPECT_GE(placing.produced->load(), 32);
  EXPECT_LE(placing.produced->load(), 33);
  EXPECT_EQ(placing.in_heap->load(), 0);

  // Each step read, sent and released makes room for one more, built in the ring too: the
  // ring (64 regions) holds the queue (32), the one the producer holds and the retained steps
  // (16, a quarter of the ring; without that cap, the 64 MiB the task's options retain would
  // keep every region sent). Frames of one step: a frame of several that wraps around the
  // ring's end is copied into a region of its own, which a ring this small may not have.
  ShmRingReader ring_reader(*segment);  // the same mapping stands in for the consumer's
  int64_t next = 0;
  bool end = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (next < 128 && absl::Now() < deadline) {
    Steps taken;
    ASSERT_TRUE((*reader)->Next(1, size_t{1} << 20, deadline, &taken, &end).ok());
    ASSERT_FALSE(end);
    for (const auto& step : taken) EXPECT_EQ(step->task_step, next++);
    SendAndRelease(writer.get(), &ring_reader, taken);
  }
  ASSERT_EQ(next, 128);
  ASSERT_TRUE(WaitUntilProducerWaits(runner.get(), kSteps));
  EXPECT_EQ(runner->buffer()->stats().bytes, 32000u);
  EXPECT_LE(placing.produced->load(), 161);
  EXPECT_EQ(placing.in_heap->load(), 0);
  EXPECT_LE(runner->buffer()->retained_bytes(), kRing / 4);

  // Detached: the buffer's own budget again, and the waiting producer goes on without a read.
  runner->DetachPlacement(placement.get());
  EXPECT_EQ(runner->buffer()->stats().max_bytes, options.buffer_bytes);
  EXPECT_EQ(runner->buffer()->stats().retention_capacity, options.retention_bytes);
  while (placing.produced->load() < kSteps && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(placing.produced->load(), kSteps);
  // Every step arrives once, in order, with its bytes.
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

// Small steps in a large ring: the runner runs ahead of its stream by StepPlacement::
// kAheadSteps steps, not by half the ring (4 MiB: 65536 of these steps), and retains at most
// kRetainedSteps of those read, so that what it holds in the ring stays a few hundred KiB that
// the ring writer's early wrap keeps writing over. Every step is still built in the ring, read
// once and in order.
TEST(PlacementBudgetTest, RunnerPlacingSmallStepsRunsAheadByItsStepsNotByTheRing) {
  constexpr size_t kRing = size_t{8} << 20;
  constexpr size_t kAhead = StepPlacement::kAheadSteps;
  constexpr size_t kStepBytes = 64;
  auto segment = ShmSegment::Create(kRing);
  ASSERT_TRUE(segment.ok()) << segment.status();
  auto writer = std::make_shared<ShmRingWriter>(*segment);
  auto placement = std::make_shared<StepPlacement>(writer);
  EXPECT_EQ(placement->buffer_caps().buffered_steps, kAhead);
  TaskRunnerOptions options;
  options.buffer_bytes = size_t{64} << 20;
  options.retention_bytes = size_t{64} << 20;
  const int64_t kSteps = 4 * static_cast<int64_t>(kAhead);
  PlacingRunner placing(options, kSteps, kStepBytes);
  const std::shared_ptr<TaskRunner>& runner = placing.runner;
  ASSERT_TRUE(runner->AttachPlacement(placement));
  placing.attached->Notify();
  auto reader = runner->OpenReader(0, 0);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE(WaitUntilProducerWaits(runner.get(), kSteps));
  EXPECT_EQ(runner->buffer()->stats().steps, kAhead);
  // The producer may hold one more it made but could not push (not a block more).
  EXPECT_GE(placing.produced->load(), static_cast<int64_t>(kAhead));
  EXPECT_LE(placing.produced->load(), static_cast<int64_t>(kAhead) + 1);
  EXPECT_EQ(placing.in_heap->load(), 0);

  // Ten steps read make room for ten: the producer makes ten more (its block cut to the room
  // in steps), not a block of 64 that the buffer would take only ten of.
  ShmRingReader ring_reader(*segment);  // the same mapping stands in for the consumer's
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  bool end = false;
  Steps ten;
  ASSERT_TRUE((*reader)->Next(10, size_t{1} << 20, deadline, &ten, &end).ok());
  ASSERT_EQ(ten.size(), 10u);
  ASSERT_TRUE(WaitUntilProducerWaits(runner.get(), kSteps));
  EXPECT_EQ(runner->buffer()->stats().steps, kAhead);
  EXPECT_LE(placing.produced->load(), static_cast<int64_t>(kAhead) + 10 + 1);
  SendAndRelease(writer.get(), &ring_reader, ten);
  int64_t next = 10;
  while (!end && absl::Now() < deadline) {
    Steps taken;
    ASSERT_TRUE((*reader)->Next(64, size_t{1} << 20, deadline, &taken, &end).ok());
    for (const auto& step : taken) {
      EXPECT_EQ(step->task_step, next);
      EXPECT_EQ(static_cast<const uint8_t*>(step->pieces[0][0].raw_data())[kStepBytes - 1],
                static_cast<uint8_t>(next));
      ++next;
    }
    if (!taken.empty()) SendAndRelease(writer.get(), &ring_reader, taken);
    EXPECT_LE(runner->buffer()->stats().steps, kAhead);
    EXPECT_LE(runner->buffer()->stats().retained_steps, StepPlacement::kRetainedSteps);
  }
  EXPECT_TRUE(end);
  EXPECT_EQ(next, kSteps);
  EXPECT_EQ(placing.in_heap->load(), 0);
  runner->DetachPlacement(placement.get());
}

}  // namespace
}  // namespace sluice
