// What the step buffer keeps for a consumer it cannot trust to acknowledge (worker/step_buffer.h):
// an independent consumer that never acknowledges holds at most its window of steps, and the
// others read on; a coordinated consumer whose call broke after the worker handed it steps gets
// them again from memory, exactly once, even with no retention window (steps are kept until
// acknowledged, not dropped once handed to gRPC). Single-threaded: no timing involved.
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/worker/task_step_test_util.h"
#include "worker/step_buffer.h"

namespace sluice {
namespace {

// Takes what Next() gives at once (no wait): the task steps, or none.
std::vector<int64_t> Take(StepBuffer* b, int64_t consumer, int64_t gen, const StepLimits& limits,
                          size_t* blocked_cost = nullptr) {
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  size_t blocked = 0;
  absl::Status s = b->Next(consumer, gen, limits, absl::InfinitePast(), &steps, &end, &blocked);
  EXPECT_TRUE(s.ok()) << s;
  if (blocked_cost != nullptr) *blocked_cost = blocked;
  std::vector<int64_t> out;
  for (const auto& step : steps) out.push_back(step->task_step);
  return out;
}

std::vector<int64_t> Range(int64_t from, int64_t to) {
  std::vector<int64_t> v;
  for (int64_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

TEST(StepBufferPeerBoundsTest, IndependentConsumerThatNeverAcknowledgesStopsAtItsWindow) {
  StepBufferOptions options;
  options.independent = true;
  options.max_bytes = 1000;
  StepBuffer b(options);
  auto silent = b.Attach(/*consumer=*/7, 0);
  auto other = b.Attach(/*consumer=*/9, 0);
  ASSERT_TRUE(silent.ok() && other.ok());
  for (int64_t i = 0; i < 20; ++i) ASSERT_TRUE(b.Push(MakeStep(i, 8)).ok());

  StepLimits limits;
  limits.max_steps = 64;
  limits.unacked_bytes = 80;  // the consumer's window: 10 steps of 8 bytes
  // Credit for everything, but only its window of unacknowledged steps.
  EXPECT_EQ(Take(&b, 7, *silent, limits), Range(0, 10));
  size_t blocked = 0;
  EXPECT_TRUE(Take(&b, 7, *silent, limits, &blocked).empty());
  EXPECT_EQ(blocked, kBlockedOnAcknowledgement);
  // Another consumer is not held back by it.
  EXPECT_EQ(Take(&b, 9, *other, limits), Range(10, 20));
  // Once it acknowledges, it gets steps again.
  for (int64_t i = 20; i < 25; ++i) ASSERT_TRUE(b.Push(MakeStep(i, 8)).ok());
  b.Acknowledge(7, 10);
  EXPECT_EQ(Take(&b, 7, *silent, limits), Range(20, 25));
}

TEST(StepBufferPeerBoundsTest, AnyWindowIsCappedAtTheBuffersBound) {
  StepBufferOptions options;
  options.independent = true;
  options.max_bytes = 16;  // 2 steps: a consumer keeps at most 4 x 16 bytes unacknowledged
  options.max_unacked_bytes = 0;
  StepBuffer b(options);
  auto g = b.Attach(7, 0);
  ASSERT_TRUE(g.ok());
  StepLimits limits;
  limits.max_steps = 64;
  limits.unacked_bytes = size_t{1} << 40;  // whatever window it claims
  std::vector<int64_t> got;
  int64_t pushed = 0;
  absl::Time retry_at;
  // The producer offers steps until the buffer refuses one; the consumer takes what it may.
  while (pushed < 20) {
    absl::StatusOr<bool> taken = b.TryPush(MakeStep(pushed, 8), [] {}, &retry_at);
    ASSERT_TRUE(taken.ok()) << taken.status();
    if (!*taken) break;
    ++pushed;
    for (int64_t t : Take(&b, 7, *g, limits)) got.push_back(t);
  }
  EXPECT_EQ(got, Range(0, 8));
  // The ninth step waits in the buffer, and the producer stops: nothing grows any more.
  EXPECT_EQ(pushed, 9);
  EXPECT_EQ(b.buffered_bytes(), 72u);
}

TEST(StepBufferPeerBoundsTest, CoordinatedStepsHandedOutComeBackUntilAcknowledged) {
  StepBufferOptions options;
  options.num_consumers = 2;
  options.retention_bytes = 0;  // no retention window: only the in-flight steps
  StepBuffer b(options);
  auto c0 = b.Attach(0, 0);
  auto c1 = b.Attach(1, 0);
  ASSERT_TRUE(c0.ok() && c1.ok());
  for (int64_t i = 0; i < 6; ++i) ASSERT_TRUE(b.Push(MakeStep(i, 8)).ok());
  StepLimits limits;
  limits.max_steps = 64;
  limits.unacked_bytes = 1000;
  EXPECT_EQ(Take(&b, 1, *c1, limits), Range(0, 6));
  // Consumer 0's call is handed steps 0..3 (written to gRPC), but only 0 and 1 arrive before
  // it breaks. Both cursors are past 0..3: they are released from the buffer.
  EXPECT_EQ(Take(&b, 0, *c0, limits), Range(0, 6));
  b.Acknowledge(0, 2);
  EXPECT_EQ(b.buffered_steps(), 0u);
  // Its next call starts at step 2 and reads 2..5 again, from memory, exactly once.
  auto again = b.Attach(0, 2);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Take(&b, 0, *again, limits), Range(2, 6));
  // Acknowledged steps are gone: a start below them is a replay (OUT_OF_RANGE).
  b.Acknowledge(0, 6);
  auto below = b.Attach(0, 1);
  EXPECT_EQ(below.status().code(), absl::StatusCode::kOutOfRange) << below.status();
}

TEST(StepBufferPeerBoundsTest, CoordinatedInFlightStepsAreBoundedByTheWindow) {
  StepBufferOptions options;
  options.num_consumers = 1;
  options.retention_bytes = 0;
  StepBuffer b(options);
  auto c0 = b.Attach(0, 0);
  ASSERT_TRUE(c0.ok());
  for (int64_t i = 0; i < 10; ++i) ASSERT_TRUE(b.Push(MakeStep(i, 8)).ok());
  StepLimits limits;
  limits.max_steps = 64;
  limits.unacked_bytes = 32;  // a consumer that never acknowledges: the last 4 steps are kept
  EXPECT_EQ(Take(&b, 0, *c0, limits), Range(0, 10));
  EXPECT_EQ(b.Attach(0, 5).status().code(), absl::StatusCode::kOutOfRange);
  auto c0b = b.Attach(0, 10);
  ASSERT_TRUE(c0b.ok());
  // A consumer's call broke with the last 4 steps lost: still served from memory.
  for (int64_t i = 10; i < 20; ++i) ASSERT_TRUE(b.Push(MakeStep(i, 8)).ok());
  EXPECT_EQ(Take(&b, 0, *c0b, limits), Range(10, 20));
  auto back = b.Attach(0, 16);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(Take(&b, 0, *back, limits), Range(16, 20));
}

}  // namespace
}  // namespace sluice
