// StepBuffer::NotifyWhenReady (worker/step_buffer.h): a push wakes only the streams it is for
// (coordinated consumers whose cursor is the pushed step; one waiting stream in independent
// mode), each registration fires at most once, and the end, Close, a superseding Attach and
// CancelNotify behave as documented. Callbacks count; no thread or timing is involved.
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/task_step_test_util.h"
#include "worker/step_buffer.h"

namespace sluice {
namespace {

// Takes what Next() gives at once.
std::vector<int64_t> Take(StepBuffer* b, int64_t consumer, int64_t generation) {
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  EXPECT_TRUE(b->Next(consumer, generation, 64, 1 << 20, absl::InfinitePast(), &steps, &end).ok());
  std::vector<int64_t> out;
  for (const auto& s : steps) out.push_back(s->task_step);
  return out;
}

TEST(StepBufferNotifyTest, PushWakesOnlyTheConsumersAtThatStep) {
  StepBuffer b({.num_consumers = 3});
  auto g0 = b.Attach(0, 0);
  auto g1 = b.Attach(1, 0);
  auto g2 = b.Attach(2, 2);  // resumed: wants task step 2 first
  ASSERT_TRUE(g0.ok() && g1.ok() && g2.ok());
  int calls[3] = {0, 0, 0};
  EXPECT_TRUE(b.NotifyWhenReady(0, *g0, [&] { ++calls[0]; }));
  EXPECT_TRUE(b.NotifyWhenReady(1, *g1, [&] { ++calls[1]; }));
  EXPECT_TRUE(b.NotifyWhenReady(2, *g2, [&] { ++calls[2]; }));

  ASSERT_TRUE(b.Push(MakeStep(0, 8)).ok());
  EXPECT_EQ(calls[0], 1);
  EXPECT_EQ(calls[1], 1);
  EXPECT_EQ(calls[2], 0);  // step 0 is not for it

  // One-shot: the next push wakes nobody until they register again; a consumer with a step
  // buffered for it cannot register (it calls Next instead).
  ASSERT_TRUE(b.Push(MakeStep(1, 8)).ok());
  EXPECT_EQ(calls[0], 1);
  EXPECT_EQ(calls[1], 1);
  EXPECT_FALSE(b.NotifyWhenReady(1, *g1, [&] { ++calls[1]; }));
  EXPECT_EQ(Take(&b, 0, *g0), (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(b.NotifyWhenReady(0, *g0, [&] { ++calls[0]; }));

  ASSERT_TRUE(b.Push(MakeStep(2, 8)).ok());
  EXPECT_EQ(calls[0], 2);
  EXPECT_EQ(calls[1], 1);
  EXPECT_EQ(calls[2], 1);
}

TEST(StepBufferNotifyTest, IndependentPushWakesOneStreamAndAnUntakenStepPassesOn) {
  StepBuffer b({.independent = true});
  auto a = b.Attach(0, 0);
  auto c = b.Attach(0, 0);
  ASSERT_TRUE(a.ok() && c.ok());
  int calls_a = 0, calls_c = 0;
  EXPECT_TRUE(b.NotifyWhenReady(0, *a, [&] { ++calls_a; }));
  EXPECT_TRUE(b.NotifyWhenReady(0, *c, [&] { ++calls_c; }));
  ASSERT_TRUE(b.Push(MakeStep(0, 8)).ok());
  EXPECT_EQ(calls_a + calls_c, 1);
  EXPECT_EQ(calls_a, 1);  // in the order registered
  // The woken stream goes away without taking the step: the other one is woken for it.
  b.CancelNotify(0, *a);
  EXPECT_EQ(calls_c, 1);
  EXPECT_EQ(Take(&b, 0, *c), (std::vector<int64_t>{0}));
}

TEST(StepBufferNotifyTest, TheEndCloseAndSupersedingWakeAndCancelSilences) {
  {
    StepBuffer b({.num_consumers = 2});
    auto g0 = b.Attach(0, 0);
    auto g1 = b.Attach(1, 0);
    int calls = 0;
    EXPECT_TRUE(b.NotifyWhenReady(0, *g0, [&] { ++calls; }));
    EXPECT_TRUE(b.NotifyWhenReady(1, *g1, [&] { ++calls; }));
    b.Finish(absl::OkStatus());
    EXPECT_EQ(calls, 2);
    // Ended: Next returns at once, so nothing registers.
    EXPECT_FALSE(b.NotifyWhenReady(0, *g0, [&] { ++calls; }));
  }
  {
    StepBuffer b({.num_consumers = 1});
    auto g = b.Attach(0, 0);
    int calls = 0;
    EXPECT_TRUE(b.NotifyWhenReady(0, *g, [&] { ++calls; }));
    b.Close();
    EXPECT_EQ(calls, 1);
  }
  {
    StepBuffer b({.num_consumers = 1});
    auto old_gen = b.Attach(0, 0);
    int calls = 0;
    EXPECT_TRUE(b.NotifyWhenReady(0, *old_gen, [&] { ++calls; }));
    auto new_gen = b.Attach(0, 0);  // the old stream is superseded: woken to see it
    EXPECT_EQ(calls, 1);
    EXPECT_FALSE(b.NotifyWhenReady(0, *old_gen, [&] { ++calls; }));
    EXPECT_TRUE(b.NotifyWhenReady(0, *new_gen, [&] { ++calls; }));
    b.CancelNotify(0, *new_gen);
    ASSERT_TRUE(b.Push(MakeStep(0, 8)).ok());
    EXPECT_EQ(calls, 1);
  }
}

// The change callback (what wakes a WorkerServer's heartbeat thread to report a finished task):
// called on every event that can finish the task, after the buffer's lock is released (it
// reads the buffer here, which would deadlock under the lock), before the call returns.
TEST(StepBufferNotifyTest, OnChangeRunsWithoutTheLockOnEveryEventThatCanFinishTheTask) {
  std::vector<bool> drained_seen;
  StepBuffer* self = nullptr;
  StepBuffer b({.max_bytes = 1000, .num_consumers = 3},
               [&] { drained_seen.push_back(self->drained()); });
  self = &b;
  auto g0 = b.Attach(0, 0);
  ASSERT_TRUE(g0.ok());
  ASSERT_TRUE(b.Push(MakeStep(0, 8)).ok());
  EXPECT_TRUE(drained_seen.empty());  // steps and attaches do not call it
  b.Finish(absl::OkStatus());
  EXPECT_EQ(drained_seen, std::vector<bool>({false}));
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  ASSERT_TRUE(b.Next(0, *g0, 5, 1 << 20, absl::Now(), &steps, &end).ok());
  ASSERT_TRUE(b.Next(0, *g0, 5, 1 << 20, absl::Now(), &steps, &end).ok());
  ASSERT_TRUE(end);
  b.ConfirmEnd(0, *g0);
  EXPECT_EQ(drained_seen, std::vector<bool>({false, false}));
  b.Detach(1);  // declared gone
  EXPECT_EQ(drained_seen, std::vector<bool>({false, false, false}));
  b.Detach(2);  // the last one: drained when the callback runs
  EXPECT_EQ(drained_seen, std::vector<bool>({false, false, false, true}));
}

}  // namespace
}  // namespace sluice
