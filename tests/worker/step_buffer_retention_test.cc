// The step buffer's retention window (worker/step_buffer.h, "Retention window"): steps every
// consumer is past stay in memory, up to retention_bytes, for a consumer that attaches late or
// reconnects; beyond the window it gets OUT_OF_RANGE (the task runner then replays). Every
// consumer reads every step exactly once, in order, and the buffer never holds more than
// max_bytes + retention_bytes.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/worker/task_step_test_util.h"
#include "worker/step_buffer.h"

namespace sluice {
namespace {

// What the buffer holds in all, buffered and retained.
size_t HeldBytes(const StepBuffer& b) {
  const StepBuffer::Stats s = b.stats();
  return s.bytes + s.retained_bytes;
}

// Reads one step (or the end: -1) for `consumer`, waiting for the test's producer.
int64_t NextStep(StepBuffer* b, int64_t consumer, int64_t gen) {
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  for (int i = 0; i < 10000; ++i) {
    absl::Status s =
        b->Next(consumer, gen, 1, 1 << 30, absl::Now() + absl::Seconds(1), &steps, &end);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return -2;
    if (end) return -1;
    if (!steps.empty()) return steps[0]->task_step;
  }
  ADD_FAILURE() << "no step";
  return -3;
}

// Consumer 1 of 2 never attaches: the producer, blocked on it, detaches it (it is late) and
// consumer 0 reads the whole task. Returns once consumer 0 has confirmed the end.
void ConsumerZeroReadsEverything(StepBuffer* b, int64_t steps, size_t max_held) {
  auto g0 = b->Attach(0, 0);
  ASSERT_TRUE(g0.ok()) << g0.status();
  std::thread producer([&] {
    for (int64_t i = 0; i < steps; ++i) ASSERT_TRUE(b->Push(MakeStep(i)).ok());
    b->Finish(absl::OkStatus());
  });
  for (int64_t i = 0; i < steps; ++i) {
    EXPECT_EQ(NextStep(b, 0, *g0), i);
    EXPECT_LE(HeldBytes(*b), max_held);
  }
  EXPECT_EQ(NextStep(b, 0, *g0), -1);
  producer.join();
  b->ConfirmEnd(0, *g0);
}

TEST(StepBufferRetentionTest, ALateConsumerWithinTheWindowReadsEveryStepFromMemory) {
  constexpr int64_t kSteps = 20;
  StepBuffer b({.max_bytes = 300,
                .num_consumers = 2,
                .detach_unattached_after = absl::ZeroDuration(),
                .retention_bytes = kSteps * 100});
  ConsumerZeroReadsEverything(&b, kSteps, 300 + kSteps * 100);
  // Consumer 1 was detached (late) and every step released: all of them are in the window, and
  // the task is not drained (consumer 1 has not read it).
  EXPECT_EQ(b.stats().steps, 0u);
  EXPECT_EQ(b.stats().retained_steps, static_cast<size_t>(kSteps));
  EXPECT_EQ(b.retained_bytes(), static_cast<size_t>(kSteps * 100));
  EXPECT_FALSE(b.drained());

  // It comes: served from memory, every step once, in order, then the end.
  auto g1 = b.Attach(1, 0);
  ASSERT_TRUE(g1.ok()) << g1.status();
  EXPECT_EQ(b.stats().retention_hits, 1);
  EXPECT_EQ(b.stats().retained_steps, 0u);  // buffered again for it
  for (int64_t i = 0; i < kSteps; ++i) {
    EXPECT_EQ(NextStep(&b, 1, *g1), i);
    EXPECT_LE(HeldBytes(b), 300u + kSteps * 100);
  }
  EXPECT_EQ(NextStep(&b, 1, *g1), -1);
  EXPECT_FALSE(b.drained());
  b.ConfirmEnd(1, *g1);
  EXPECT_TRUE(b.drained());
  // No consumer can need the window any more: it is emptied.
  EXPECT_EQ(b.retained_bytes(), 0u);
  EXPECT_EQ(b.stats().confirmed_ends, (std::vector<int64_t>{0, 1}));
}

TEST(StepBufferRetentionTest, ALateConsumerBeyondTheWindowIsOutOfRange) {
  constexpr int64_t kSteps = 20;
  StepBuffer b({.max_bytes = 300,
                .num_consumers = 2,
                .detach_unattached_after = absl::ZeroDuration(),
                .retention_bytes = 250});  // two steps of 100
  ConsumerZeroReadsEverything(&b, kSteps, 300 + 250);
  EXPECT_EQ(b.stats().retained_steps, 2u);
  EXPECT_EQ(b.retained_bytes(), 200u);
  // Step 0 left the window: the caller replays (the message names what is still kept).
  absl::StatusOr<int64_t> g1 = b.Attach(1, 0);
  EXPECT_EQ(g1.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(g1.status().message().find("the first retained 18"), std::string::npos)
      << g1.status();
  EXPECT_EQ(b.stats().retention_hits, 0);
  // Its replay's end counts here.
  b.ConfirmEndReplayed(1);
  EXPECT_TRUE(b.drained());
  EXPECT_EQ(b.retained_bytes(), 0u);
}

TEST(StepBufferRetentionTest, NoWindowKeepsNothing) {
  StepBuffer b({.max_bytes = 300,
                .num_consumers = 2,
                .detach_unattached_after = absl::ZeroDuration()});
  ConsumerZeroReadsEverything(&b, 5, 300);
  EXPECT_EQ(b.retained_bytes(), 0u);
  EXPECT_EQ(b.stats().retention_capacity, 0u);
  EXPECT_EQ(b.Attach(1, 4).status().code(), absl::StatusCode::kOutOfRange);
}

// Retained steps are not charged to the budget: with the buffer full of retained steps the
// producer still fills max_bytes of new ones without waiting (all on this thread: a Push that
// waited would never return).
TEST(StepBufferRetentionTest, RetainedStepsNeverBlockTheProducer) {
  StepBuffer b({.max_bytes = 300, .num_consumers = 1, .retention_bytes = 300});
  auto g = b.Attach(0, 0);
  ASSERT_TRUE(g.ok());
  for (int64_t round = 0; round < 5; ++round) {
    for (int64_t i = 0; i < 3; ++i) ASSERT_TRUE(b.Push(MakeStep(round * 3 + i)).ok());
    EXPECT_EQ(b.buffered_bytes(), 300u);
    EXPECT_EQ(b.retained_bytes(), round == 0 ? 0u : 300u);
    EXPECT_LE(HeldBytes(b), 600u);
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(NextStep(&b, 0, *g), round * 3 + i);
    EXPECT_EQ(b.buffered_bytes(), 0u);
    EXPECT_EQ(b.retained_bytes(), 300u);
  }
  // The window holds the newest released steps: 12, 13, 14.
  EXPECT_EQ(b.Attach(0, 11).status().code(), absl::StatusCode::kOutOfRange);
  auto again = b.Attach(0, 12);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(NextStep(&b, 0, *again), 12);
}

// A step larger than the window is not kept (and takes the older ones with it: the window
// always ends where the buffer starts).
TEST(StepBufferRetentionTest, AStepLargerThanTheWindowIsNotKept) {
  StepBuffer b({.max_bytes = 1000, .num_consumers = 1, .retention_bytes = 250});
  auto g = b.Attach(0, 0);
  ASSERT_TRUE(b.Push(MakeStep(0)).ok());
  ASSERT_TRUE(b.Push(MakeStep(1, 400)).ok());
  ASSERT_TRUE(b.Push(MakeStep(2)).ok());
  EXPECT_EQ(NextStep(&b, 0, *g), 0);
  EXPECT_EQ(b.retained_bytes(), 100u);
  EXPECT_EQ(NextStep(&b, 0, *g), 1);
  EXPECT_EQ(b.retained_bytes(), 0u);
  EXPECT_EQ(NextStep(&b, 0, *g), 2);
  EXPECT_EQ(b.retained_bytes(), 100u);
  EXPECT_EQ(b.Attach(0, 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(b.Attach(0, 2).ok());
}

// A stream that broke with steps in flight, after the other consumer read past them: the
// consumer reconnects at the first step it did not receive and reads on from memory. Those
// steps count in the buffer again while it catches up, so the producer waits until it has
// caught up to within the budget (never beyond max_bytes + retention_bytes), and the other
// consumer reads everything already buffered meanwhile.
TEST(StepBufferRetentionTest, AReconnectingConsumerReadsTheStepsItLostFromMemory) {
  StepBuffer b({.max_bytes = 300, .num_consumers = 2, .retention_bytes = 500});
  auto g0 = b.Attach(0, 0);
  auto g1 = b.Attach(1, 0);
  ASSERT_TRUE(g0.ok() && g1.ok());
  for (int64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(b.Push(MakeStep(i)).ok());
    EXPECT_EQ(NextStep(&b, 0, *g0), i);
    EXPECT_EQ(NextStep(&b, 1, *g1), i);
  }
  // Both are at step 8; consumer 1 received only steps 0..4 (5, 6, 7 were in flight).
  for (int64_t i = 8; i < 11; ++i) ASSERT_TRUE(b.Push(MakeStep(i)).ok());  // full
  EXPECT_EQ(b.retained_bytes(), 500u);  // steps 3..7
  auto back = b.Attach(1, 5);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(b.stats().retention_hits, 1);
  EXPECT_EQ(b.buffered_bytes(), 600u);  // 5..10
  EXPECT_EQ(b.retained_bytes(), 200u);  // 3, 4
  EXPECT_LE(HeldBytes(b), 800u);
  // Its old stream is superseded.
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  EXPECT_EQ(b.Next(1, *g1, 1, 1 << 20, absl::Now(), &steps, &end).code(),
            absl::StatusCode::kCancelled);

  absl::Notification pushed;
  std::thread producer([&] {
    EXPECT_TRUE(b.Push(MakeStep(11)).ok());
    pushed.Notify();
  });
  // Consumer 0 reads what is buffered (8, 9, 10) while consumer 1 catches up.
  for (int64_t i = 8; i < 11; ++i) EXPECT_EQ(NextStep(&b, 0, *g0), i);
  for (int64_t i = 5; i < 9; ++i) {
    EXPECT_FALSE(pushed.HasBeenNotified());  // steps i..10 buffered: no room for step 11
    EXPECT_EQ(NextStep(&b, 1, *back), i);
    EXPECT_LE(HeldBytes(b), 800u);
  }
  // Caught up to within the budget (9 and 10 buffered): step 11 goes in.
  pushed.WaitForNotification();
  producer.join();
  for (int64_t i = 9; i < 12; ++i) EXPECT_EQ(NextStep(&b, 1, *back), i);
  EXPECT_EQ(NextStep(&b, 0, *g0), 11);
  EXPECT_LE(HeldBytes(b), 800u);
}

// A consumer that asks for a step below the window reads the task elsewhere (a replay): its
// old cursor here must not hold the others back (before, an attached consumer that replayed
// kept its old position here for good, and the others stalled once the producer was a
// budget ahead of it).
TEST(StepBufferRetentionTest, AConsumerSentToAReplayNoLongerHoldsSteps) {
  StepBuffer b({.max_bytes = 300, .num_consumers = 2, .retention_bytes = 100});
  auto g0 = b.Attach(0, 0);
  auto g1 = b.Attach(1, 0);
  for (int64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(b.Push(MakeStep(i)).ok());
    EXPECT_EQ(NextStep(&b, 0, *g0), i);
    EXPECT_EQ(NextStep(&b, 1, *g1), i);
  }
  ASSERT_TRUE(b.Push(MakeStep(4)).ok());
  EXPECT_EQ(NextStep(&b, 1, *g1), 4);  // consumer 1 is at 5; consumer 0 at 4
  EXPECT_EQ(b.stats().cursors, (std::vector<int64_t>{4, 5}));
  // Consumer 1 received only up to step 1: steps 2.. are gone but for step 3.
  EXPECT_EQ(b.Attach(1, 2).status().code(), absl::StatusCode::kOutOfRange);
  ASSERT_EQ(b.stats().cursors, (std::vector<int64_t>{4, -1}));
  // Consumer 0 reads on past the budget without consumer 1 (all on this thread).
  for (int64_t i = 5; i < 12; ++i) {
    ASSERT_TRUE(b.Push(MakeStep(i)).ok());
    if (i == 5) {
      EXPECT_EQ(NextStep(&b, 0, *g0), 4);
    }
    EXPECT_EQ(NextStep(&b, 0, *g0), i);
  }
  b.Finish(absl::OkStatus());
  EXPECT_EQ(NextStep(&b, 0, *g0), -1);
  b.ConfirmEnd(0, *g0);
  EXPECT_FALSE(b.drained());  // consumer 1 has not confirmed an end
  b.ConfirmEndReplayed(1);
  EXPECT_TRUE(b.drained());
}

// Random schedules on one thread: three consumers read at their own pace and their streams
// break (losing up to 3 steps in flight); a break either resumes from the buffer or the window
// or goes to a replay (modelled: it gets the rest of the steps from the producer's sequence).
// Every consumer gets every step exactly once, in order, and the buffer never holds more than
// max_bytes + retention_bytes.
TEST(StepBufferRetentionTest, RandomSchedulesKeepEveryStepOnceAndTheBound) {
  constexpr int64_t kSteps = 60;
  constexpr int kConsumers = 3;
  constexpr size_t kMax = 500;
  constexpr size_t kWindow = 300;
  int64_t hits = 0;
  int64_t replays = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    std::mt19937 rng(seed);
    auto draw = [&rng](uint32_t n) { return static_cast<int64_t>(rng() % n); };
    StepBuffer b({.max_bytes = kMax,
                  .num_consumers = kConsumers,
                  .detach_unattached_after = absl::InfiniteDuration(),
                  .retention_bytes = kWindow});
    std::vector<size_t> sizes;
    for (int64_t i = 0; i < kSteps; ++i) sizes.push_back(50 + 25 * draw(5));  // 50..150
    std::vector<int64_t> gen(kConsumers);
    std::vector<std::vector<int64_t>> received(kConsumers);
    std::vector<bool> done(kConsumers, false);       // read the end here, or replaying
    for (int c = 0; c < kConsumers; ++c) {
      auto g = b.Attach(c, 0);
      ASSERT_TRUE(g.ok());
      gen[c] = *g;
    }
    int64_t pushed = 0;
    bool finished = false;
    for (int op = 0; op < 100000; ++op) {
      if (finished && std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
      const int64_t kind = draw(10);
      const int c = static_cast<int>(draw(kConsumers));
      if (kind < 3) {  // the producer, when it would not wait
        if (pushed < kSteps) {
          if (b.buffered_steps() == 0 || b.buffered_bytes() + sizes[pushed] <= kMax) {
            ASSERT_TRUE(b.Push(MakeStep(pushed, sizes[pushed])).ok());
            ++pushed;
          }
        } else if (!finished) {
          b.Finish(absl::OkStatus());
          finished = true;
        }
      } else if (kind < 9) {  // consumer c reads what is there
        if (done[c]) continue;
        std::vector<std::shared_ptr<const TaskStep>> steps;
        bool end = false;
        ASSERT_TRUE(
            b.Next(c, gen[c], 1 + draw(3), 1 << 20, absl::InfinitePast(), &steps, &end).ok());
        for (const auto& s : steps) received[c].push_back(s->task_step);
        if (end) {
          b.ConfirmEnd(c, gen[c]);
          done[c] = true;
        }
      } else {  // consumer c's stream breaks; it lost up to 3 steps in flight
        if (done[c]) continue;
        const int64_t lost = std::min<int64_t>(draw(4), received[c].size());
        received[c].resize(received[c].size() - lost);
        const int64_t start = static_cast<int64_t>(received[c].size());
        const int64_t hits_before = b.stats().retention_hits;
        absl::StatusOr<int64_t> g = b.Attach(c, start);
        if (g.ok()) {
          gen[c] = *g;
          hits += b.stats().retention_hits - hits_before;
        } else {
          ASSERT_EQ(g.status().code(), absl::StatusCode::kOutOfRange) << g.status();
          // The replay: the producer's sequence from `start` on, then its end.
          for (int64_t s = start; s < kSteps; ++s) received[c].push_back(s);
          b.ConfirmEndReplayed(c);
          done[c] = true;
          ++replays;
        }
      }
      const StepBuffer::Stats st = b.stats();
      ASSERT_LE(st.bytes + st.retained_bytes, kMax + kWindow);
      ASSERT_LE(st.retained_bytes, kWindow);
    }
    ASSERT_TRUE(finished);
    for (int c = 0; c < kConsumers; ++c) {
      ASSERT_TRUE(done[c]) << "consumer " << c;
      ASSERT_EQ(received[c].size(), static_cast<size_t>(kSteps)) << "consumer " << c;
      for (int64_t s = 0; s < kSteps; ++s) ASSERT_EQ(received[c][s], s) << "consumer " << c;
    }
    EXPECT_TRUE(b.drained());
    EXPECT_EQ(b.retained_bytes(), 0u);
  }
  // The schedules exercise both ways back.
  EXPECT_GT(hits, 0);
  EXPECT_GT(replays, 0);
}

}  // namespace
}  // namespace sluice
