#include "worker/step_buffer.h"

#include <atomic>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/worker/task_step_test_util.h"

namespace sluice {
namespace {

// Reads one step for `consumer`, waiting as long as it takes (bounded by the test's producer).
int64_t NextStep(StepBuffer* b, int64_t consumer, int64_t gen, bool* end = nullptr) {
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool e = false;
  for (int i = 0; i < 10000; ++i) {
    absl::Status s = b->Next(consumer, gen, 1, 1 << 30, absl::Now() + absl::Seconds(1), &steps, &e);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return -2;
    if (e) {
      if (end) *end = true;
      return -1;
    }
    if (!steps.empty()) return steps[0]->task_step;
  }
  ADD_FAILURE() << "no step";
  return -3;
}

// StepLimits::frame_kind keeps apart steps that must not share a frame (a stream's steps built
// in its shared-memory ring and those in ordinary memory): here steps of byte counts 100 and
// 200 ("kinds"), pushed 100, 100, 200, 200, 100. A frame stops before a step of another kind;
// a frame continued (frame_first) refuses a first step of another kind as one that costs too
// much (no step, its cost in blocked_cost), so the stream sends what it has; nothing is lost.
TEST(StepBufferTest, SameFrameKeepsStepsOfAnotherKindForTheNextFrame) {
  for (const bool independent : {false, true}) {
    SCOPED_TRACE(independent ? "independent" : "coordinated");
    StepBuffer b({.max_bytes = 1 << 20, .num_consumers = 1, .independent = independent});
    int64_t g = 0;
    if (!independent) {
      absl::StatusOr<int64_t> attached = b.Attach(0, 0);
      ASSERT_TRUE(attached.ok()) << attached.status();
      g = *attached;
    }
    const size_t kinds[] = {100, 100, 200, 200, 100};
    for (int64_t i = 0; i < 5; ++i) ASSERT_TRUE(b.Push(MakeStep(i, kinds[i])).ok());
    StepLimits limits;
    limits.max_steps = 64;
    limits.frame_kind = [](const TaskStep& step) { return static_cast<int>(step.bytes); };
    auto take = [&](const TaskStep* frame_first, size_t* blocked) {
      StepLimits l = limits;
      l.frame_first = frame_first;
      std::vector<std::shared_ptr<const TaskStep>> steps;
      bool end = false;
      EXPECT_TRUE(b.Next(0, g, l, absl::InfinitePast(), &steps, &end, blocked).ok());
      std::vector<int64_t> out;
      for (const auto& s : steps) out.push_back(s->task_step);
      return out;
    };
    size_t blocked = 0;
    EXPECT_EQ(take(nullptr, &blocked), (std::vector<int64_t>{0, 1}));
    auto kind_100 = MakeStep(99, 100);
    EXPECT_EQ(take(kind_100.get(), &blocked), (std::vector<int64_t>{}));
    EXPECT_EQ(blocked, 200u);  // step 2, refused as the continuation of a frame of kind 100
    EXPECT_EQ(take(nullptr, &blocked), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(take(kind_100.get(), &blocked), (std::vector<int64_t>{4}));
  }
}

// Next() asks a step's frame kind once per step it looks at, and the kind of the frame it
// continues once (not again for each step that may join: the stream's kind is a walk of the
// step's tensors with a dynamic_cast, and a frame takes up to 64 steps).
TEST(StepBufferTest, FrameKindIsAskedOncePerStepAndOnceForTheFrame) {
  StepBuffer b({.max_bytes = 1 << 20, .num_consumers = 1});
  absl::StatusOr<int64_t> g = b.Attach(0, 0);
  ASSERT_TRUE(g.ok()) << g.status();
  for (int64_t i = 0; i < 20; ++i) ASSERT_TRUE(b.Push(MakeStep(i, 100)).ok());
  int asked = 0;
  StepLimits limits;
  limits.max_steps = 10;
  limits.frame_kind = [&asked](const TaskStep& step) {
    ++asked;
    return static_cast<int>(step.bytes);
  };
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  ASSERT_TRUE(b.Next(0, *g, limits, absl::InfinitePast(), &steps, &end).ok());
  EXPECT_EQ(steps.size(), 10u);
  EXPECT_EQ(asked, 11);  // steps 0 to 10 (step 10 is the frame's 11th: max_steps)
  asked = 0;
  auto first = MakeStep(99, 100);
  limits.frame_first = first.get();
  ASSERT_TRUE(b.Next(0, *g, limits, absl::InfinitePast(), &steps, &end).ok());
  EXPECT_EQ(steps.size(), 10u);
  EXPECT_EQ(asked, 11);  // frame_first once, steps 10 to 19
}

TEST(StepBufferTest, BoundedInBytesButAdmitsOneLargeStep) {
  StepBuffer b({.max_bytes = 250, .num_consumers = 1});
  ASSERT_TRUE(b.Push(MakeStep(0, 1000)).ok());  // larger than the budget, admitted when empty
  EXPECT_EQ(b.buffered_steps(), 1u);
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    EXPECT_TRUE(b.Push(MakeStep(1, 100)).ok());
    pushed = true;
  });
  auto gen = b.Attach(0, 0);
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(NextStep(&b, 0, *gen), 0);
  producer.join();
  EXPECT_TRUE(pushed);
  EXPECT_LE(b.buffered_bytes(), 250u);
}

TEST(StepBufferTest, ProducerBlocksUntilEveryConsumerAdvances) {
  StepBuffer b({.max_bytes = 300, .num_consumers = 2});
  auto g0 = b.Attach(0, 0);
  auto g1 = b.Attach(1, 0);
  ASSERT_TRUE(g0.ok() && g1.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b.Push(MakeStep(i)).ok());
  absl::Notification pushed;
  std::thread producer([&] {
    EXPECT_TRUE(b.Push(MakeStep(3)).ok());
    pushed.Notify();
  });
  // Consumer 0 reads everything buffered; the producer stays blocked: consumer 1 still holds
  // step 0.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(NextStep(&b, 0, *g0), i);
  EXPECT_FALSE(pushed.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  EXPECT_EQ(b.buffered_steps(), 3u);
  EXPECT_EQ(NextStep(&b, 1, *g1), 0);  // releases step 0
  pushed.WaitForNotification();
  producer.join();
  EXPECT_EQ(NextStep(&b, 0, *g0), 3);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(NextStep(&b, 1, *g1), i);
  EXPECT_EQ(b.buffered_steps(), 0u);
  b.Finish(absl::OkStatus());
  bool end = false;
  EXPECT_EQ(NextStep(&b, 0, *g0, &end), -1);
  EXPECT_TRUE(end);
  b.ConfirmEnd(0, *g0);
  EXPECT_FALSE(b.drained());  // consumer 1 has not seen the end yet
  EXPECT_EQ(NextStep(&b, 1, *g1, &end), -1);
  // Handed to consumer 1's stream is not received: only its confirmation counts (a worker
  // frozen before the frame left must not report the task finished).
  EXPECT_FALSE(b.drained());
  b.ConfirmEnd(1, *g1 + 1);  // a superseded stream's confirmation is ignored
  EXPECT_FALSE(b.drained());
  b.ConfirmEnd(1, *g1);
  EXPECT_TRUE(b.drained());
}

// A consumer that confirmed the end has every step handed to it: the steps kept for its
// reconnect (handed out, not acknowledged) go then. Kept, a step built in the consumer's
// shared-memory ring is copied out of it into fresh memory when the stream ends
// (worker/step_placement.h), only to be freed.
TEST(StepBufferTest, AConfirmedEndDropsTheStepsKeptForAReconnect) {
  StepBuffer b({.max_bytes = 1 << 20, .num_consumers = 1});
  auto g = b.Attach(0, 0);
  ASSERT_TRUE(g.ok());
  std::vector<std::weak_ptr<const TaskStep>> pushed;
  for (int i = 0; i < 3; ++i) {
    std::shared_ptr<const TaskStep> step = MakeStep(i);
    pushed.push_back(step);
    ASSERT_TRUE(b.Push(std::move(step)).ok());
  }
  b.Finish(absl::OkStatus());
  StepLimits limits;
  limits.max_steps = 8;
  limits.unacked_bytes = 1 << 20;  // the stream's window: what is handed out is kept
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  for (int i = 0; i < 4 && !end; ++i) {
    std::vector<std::shared_ptr<const TaskStep>> more;
    ASSERT_TRUE(b.Next(0, *g, limits, absl::Now() + absl::Seconds(10), &more, &end).ok());
    steps.insert(steps.end(), more.begin(), more.end());
  }
  ASSERT_TRUE(end);
  ASSERT_EQ(steps.size(), 3u);
  steps.clear();  // the stream sent them
  for (const auto& step : pushed) EXPECT_FALSE(step.expired()) << "not kept for a reconnect";
  b.ConfirmEnd(0, *g);
  EXPECT_TRUE(b.drained());
  for (size_t i = 0; i < pushed.size(); ++i) {
    EXPECT_TRUE(pushed[i].expired()) << "step " << i << " still held after the confirmed end";
  }
}

TEST(StepBufferTest, ReattachRereadsRetainedStepsAndSupersedesOldStream) {
  StepBuffer b({.max_bytes = 1 << 20, .num_consumers = 2});
  auto g0 = b.Attach(0, 0);
  auto g1 = b.Attach(1, 0);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(b.Push(MakeStep(i)).ok());
  EXPECT_EQ(NextStep(&b, 0, *g0), 0);
  EXPECT_EQ(NextStep(&b, 0, *g0), 1);
  // Consumer 0's stream broke after step 0 arrived: it comes back asking for step 1.
  auto g0b = b.Attach(0, 1);
  ASSERT_TRUE(g0b.ok());
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  EXPECT_EQ(b.Next(0, *g0, 1, 1 << 20, absl::Now(), &steps, &end).code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(NextStep(&b, 0, *g0b), 1);
  // Consumer 1 moves to step 3: steps 0..2 are released once consumer 0 passes them too.
  auto g1b = b.Attach(1, 3);
  EXPECT_EQ(NextStep(&b, 0, *g0b), 2);
  EXPECT_EQ(b.Attach(1, 0).status().code(), absl::StatusCode::kOutOfRange);
  (void)g1;
  (void)g1b;
}

TEST(StepBufferTest, ProducerSkipsStepsEveryConsumerIsPast) {
  StepBuffer b({.max_bytes = 150, .num_consumers = 2});
  auto g0 = b.Attach(0, 5);
  auto g1 = b.Attach(1, 7);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(b.Push(MakeStep(i)).ok());  // never blocks
  EXPECT_EQ(b.buffered_steps(), 1u);  // only step 5
  EXPECT_EQ(NextStep(&b, 0, *g0), 5);
  (void)g1;
}

TEST(StepBufferTest, UnattachedConsumerIsDetachedAfterTheProducerWaited) {
  StepBuffer b({.max_bytes = 100,
                .num_consumers = 2,
                .detach_unattached_after = absl::ZeroDuration()});
  auto g0 = b.Attach(0, 0);
  ASSERT_TRUE(b.Push(MakeStep(0)).ok());
  std::thread producer([&] { EXPECT_TRUE(b.Push(MakeStep(1)).ok()); });
  EXPECT_EQ(NextStep(&b, 0, *g0), 0);
  producer.join();  // consumer 1 never attached and no longer holds step 0
  EXPECT_EQ(NextStep(&b, 0, *g0), 1);
  EXPECT_EQ(b.Attach(1, 0).status().code(), absl::StatusCode::kOutOfRange);
}

// The chaos failure (bench/RESULTS.md, "Chaos test runs", seed 10226424): a consumer detached
// for lateness has NOT read the task, so the buffer is not drained for it (the worker must not
// report the task finished: if it died, nobody would move the task). Only its own confirmed
// end counts, here through a replay (the steps it wants were released), or the coordinator
// declaring it gone (Detach).
TEST(StepBufferTest, AConsumerDetachedForLatenessDoesNotCountAsHavingTheEnd) {
  StepBuffer b({.max_bytes = 100,
                .num_consumers = 2,
                .detach_unattached_after = absl::ZeroDuration()});
  auto g0 = b.Attach(0, 0);
  ASSERT_TRUE(b.Push(MakeStep(0)).ok());
  std::thread producer([&] { EXPECT_TRUE(b.Push(MakeStep(1)).ok()); });
  EXPECT_EQ(NextStep(&b, 0, *g0), 0);
  producer.join();  // consumer 1 detached
  b.Finish(absl::OkStatus());
  EXPECT_EQ(NextStep(&b, 0, *g0), 1);
  bool end = false;
  EXPECT_EQ(NextStep(&b, 0, *g0, &end), -1);
  EXPECT_TRUE(end);
  b.ConfirmEnd(0, *g0);
  EXPECT_FALSE(b.drained());  // consumer 1 has read nothing here
  EXPECT_EQ(b.Attach(1, 0).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_FALSE(b.drained());
  EXPECT_EQ(b.stats().confirmed_ends, std::vector<int64_t>{0});
  b.ConfirmEndReplayed(1);  // it read the task through a replay, to its end
  EXPECT_TRUE(b.drained());
  EXPECT_EQ(b.stats().confirmed_ends, (std::vector<int64_t>{0, 1}));
}

TEST(StepBufferTest, AConsumerDetachedForLatenessThenDeclaredGoneCounts) {
  StepBuffer b({.max_bytes = 100,
                .num_consumers = 2,
                .detach_unattached_after = absl::ZeroDuration()});
  auto g0 = b.Attach(0, 0);
  ASSERT_TRUE(b.Push(MakeStep(0)).ok());
  std::thread producer([&] { EXPECT_TRUE(b.Push(MakeStep(1)).ok()); });
  EXPECT_EQ(NextStep(&b, 0, *g0), 0);
  producer.join();
  b.Finish(absl::OkStatus());
  EXPECT_EQ(NextStep(&b, 0, *g0), 1);
  EXPECT_EQ(NextStep(&b, 0, *g0), -1);
  b.ConfirmEnd(0, *g0);
  EXPECT_FALSE(b.drained());
  b.Detach(1);  // the coordinator declared it gone
  EXPECT_TRUE(b.drained());
  // Only consumer 0 read the end here (what the worker reports to the coordinator).
  EXPECT_EQ(b.stats().confirmed_ends, std::vector<int64_t>{0});
}

// The order in which the test above used to hang (1 run in ~700 under load): the producer
// blocks first, detaches the unattached consumer, which frees nothing, and must then wait for
// the consumer instead of detaching again and again holding the lock (with a zero delay it spun
// forever and the consumer never got in). The pause only makes that order likely; either order
// must pass.
TEST(StepBufferTest, AProducerBlockedAfterDetachingWaitsForTheConsumer) {
  StepBuffer b({.max_bytes = 100,
                .num_consumers = 2,
                .detach_unattached_after = absl::ZeroDuration()});
  auto g0 = b.Attach(0, 0);
  ASSERT_TRUE(b.Push(MakeStep(0)).ok());
  std::thread producer([&] { EXPECT_TRUE(b.Push(MakeStep(1)).ok()); });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(NextStep(&b, 0, *g0), 0);
  producer.join();
  EXPECT_EQ(NextStep(&b, 0, *g0), 1);
}

// A consumer that attached, read and vanished (the coordinator declared it gone): Detach makes
// the buffer stop holding steps for it, so that the other consumer reads on past the budget;
// its stream still open is superseded (CANCELLED, not a silent end of task), and it can
// reattach at a step still buffered (from memory) but not at one released meanwhile.
TEST(StepBufferTest, ADetachedConsumerNoLongerHoldsStepsAndItsOldStreamIsSuperseded) {
  StepBuffer b({.max_bytes = 300, .num_consumers = 2});
  auto g0 = b.Attach(0, 0);
  auto g1 = b.Attach(1, 0);
  ASSERT_TRUE(g0.ok() && g1.ok());
  for (int64_t i = 0; i < 3; ++i) ASSERT_TRUE(b.Push(MakeStep(i)).ok());
  EXPECT_EQ(NextStep(&b, 1, *g1), 0);  // consumer 1 reads one step, then vanishes
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(NextStep(&b, 0, *g0), i);
  // Full: consumer 1 holds steps 1 and 2. Consumer 1 is declared gone.
  b.Detach(1);
  EXPECT_EQ(b.buffered_steps(), 0u);
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  absl::Status old = b.Next(1, *g1, 1, 1 << 30, absl::Now() + absl::Seconds(5), &steps, &end);
  EXPECT_EQ(old.code(), absl::StatusCode::kCancelled) << old;
  EXPECT_FALSE(end);
  // Consumer 0 reads on: the producer is not blocked by consumer 1 any more.
  for (int64_t i = 3; i < 10; ++i) {
    ASSERT_TRUE(b.Push(MakeStep(i)).ok());
    EXPECT_EQ(NextStep(&b, 0, *g0), i);
  }
  ASSERT_TRUE(b.Push(MakeStep(10)).ok());
  // Consumer 1 comes back: step 1 was released, step 10 is still in memory.
  EXPECT_EQ(b.Attach(1, 1).status().code(), absl::StatusCode::kOutOfRange);
  auto back = b.Attach(1, 10);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(NextStep(&b, 1, *back), 10);
}

TEST(StepBufferTest, IndependentModeHandsEachStepToExactlyOneConsumer) {
  StepBuffer b({.max_bytes = 1000, .num_consumers = 1, .independent = true});
  constexpr int kSteps = 200;
  std::thread producer([&] {
    for (int i = 0; i < kSteps; ++i) ASSERT_TRUE(b.Push(MakeStep(i)).ok());
    b.Finish(absl::OkStatus());
  });
  std::vector<std::vector<int64_t>> got(3);
  std::vector<std::thread> consumers;
  for (int c = 0; c < 3; ++c) {
    consumers.emplace_back([&, c] {
      auto g = b.Attach(c, 0);
      ASSERT_TRUE(g.ok());
      for (int i = 0; i <= kSteps; ++i) {
        bool end = false;
        int64_t s = NextStep(&b, c, *g, &end);
        if (end || s < 0) break;
        got[c].push_back(s);
      }
    });
  }
  producer.join();
  for (auto& t : consumers) t.join();
  std::multiset<int64_t> all;
  for (const auto& v : got) all.insert(v.begin(), v.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(all.count(i), 1u) << i;
  for (const auto& v : got) EXPECT_TRUE(std::is_sorted(v.begin(), v.end()));
  EXPECT_FALSE(b.drained());  // the end was handed out, not yet confirmed
  b.ConfirmEnd(2, 0);
  EXPECT_TRUE(b.drained());
}

TEST(StepBufferTest, ErrorsArriveAfterTheStepsBeforeThem) {
  StepBuffer b({.num_consumers = 1});
  auto g = b.Attach(0, 0);
  ASSERT_TRUE(b.Push(MakeStep(0)).ok());
  b.Finish(absl::InvalidArgumentError("bad record"));
  EXPECT_EQ(NextStep(&b, 0, *g), 0);
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  absl::Status s = b.Next(0, *g, 1, 1, absl::Now(), &steps, &end);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "bad record");
}

TEST(StepBufferTest, CloseWakesABlockedProducerAndConsumers) {
  StepBuffer b({.max_bytes = 10, .num_consumers = 2});
  auto g0 = b.Attach(0, 0);
  auto g1 = b.Attach(1, 0);
  ASSERT_TRUE(b.Push(MakeStep(0)).ok());
  absl::Status push_status;
  std::thread producer([&] { push_status = b.Push(MakeStep(1)); });  // blocked by consumer 1
  absl::Notification read_first;
  absl::Status next_status;
  std::thread consumer([&] {
    EXPECT_EQ(NextStep(&b, 0, *g0), 0);
    read_first.Notify();
    std::vector<std::shared_ptr<const TaskStep>> steps;
    bool end = false;
    next_status = b.Next(0, *g0, 1, 1, absl::InfiniteFuture(), &steps, &end);
  });
  read_first.WaitForNotification();
  b.Close();
  producer.join();
  consumer.join();
  EXPECT_EQ(push_status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(next_status.code(), absl::StatusCode::kUnavailable);
  (void)g1;
}

// A worker stops a task whose pipeline failed as soon as the coordinator moves it or fails
// its job (the heartbeat that reported the error), which can be before a consumer's stream read
// the error: the stream must still get the error, with its code (RESOURCE_EXHAUSTED naming the
// op and the limit), not UNAVAILABLE "task closed", which the consumer would retry until its
// deadline (AdversarialTest gen-10 under load). A transient error or a task stopped while it
// runs stays UNAVAILABLE: read it elsewhere.
TEST(StepBufferTest, AFailedTaskClosedBeforeItsConsumerReadTheErrorStillGivesTheError) {
  const absl::Status limit = absl::ResourceExhaustedError(
      "op 5 (rebatch): a piece of 1000000000 rows needs more than the memory limit of one "
      "element, 201326592 bytes (--max_element_bytes)");
  for (const bool independent : {false, true}) {
    SCOPED_TRACE(independent ? "independent" : "coordinated");
    struct Case {
      absl::Status pipeline;  // OK: still running when closed
      absl::StatusCode want;
    };
    for (const Case& c : {Case{limit, absl::StatusCode::kResourceExhausted},
                          Case{absl::UnavailableError("split provider: coordinator down"),
                               absl::StatusCode::kUnavailable},
                          Case{absl::OkStatus(), absl::StatusCode::kUnavailable}}) {
      SCOPED_TRACE(c.pipeline.ToString());
      StepBuffer b({.num_consumers = 1, .independent = independent});
      auto g = b.Attach(independent ? 7 : 0, 0);
      ASSERT_TRUE(g.ok()) << g.status();
      ASSERT_TRUE(b.Push(MakeStep(0)).ok());
      if (!c.pipeline.ok()) b.Finish(c.pipeline);
      b.Close();
      std::vector<std::shared_ptr<const TaskStep>> steps;
      bool end = false;
      absl::Status s =
          b.Next(independent ? 7 : 0, *g, 1, 1 << 30, absl::Now(), &steps, &end);
      EXPECT_EQ(s.code(), c.want) << s;
      if (c.want == absl::StatusCode::kResourceExhausted) {
        EXPECT_EQ(s.message(), limit.message());
      } else {
        EXPECT_EQ(s.message(), "task closed on this worker");
      }
      EXPECT_TRUE(steps.empty());
      EXPECT_FALSE(end);
    }
  }
}

TEST(StepBufferTest, StopProducingServesWhatIsBufferedThenUnavailable) {
  StepBuffer b({.max_bytes = 150, .num_consumers = 1});
  auto g = b.Attach(0, 0);
  ASSERT_TRUE(b.Push(MakeStep(0)).ok());
  absl::Status push_status;
  std::thread producer([&] { push_status = b.Push(MakeStep(1)); });  // blocks: over budget
  absl::SleepFor(absl::Milliseconds(20));
  b.StopProducing();
  producer.join();
  EXPECT_EQ(push_status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(NextStep(&b, 0, *g), 0);
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  EXPECT_EQ(b.Next(0, *g, 1, 1, absl::Now(), &steps, &end).code(), absl::StatusCode::kUnavailable);
}

// The producer asks producer_stopped() before each step it builds (without the buffer's lock):
// it turns true with StopProducing() and with Close(), and then TryPush takes nothing more.
TEST(StepBufferTest, ProducerStoppedTurnsTrueOnStopProducingAndOnClose) {
  for (const bool close : {false, true}) {
    StepBuffer b({.max_bytes = 1 << 20});
    absl::Time retry_at;
    EXPECT_FALSE(b.producer_stopped());
    ASSERT_TRUE(b.TryPush(MakeStep(0), [] {}, &retry_at).ok());
    EXPECT_FALSE(b.producer_stopped());
    if (close) {
      b.Close("test");
    } else {
      b.StopProducing();
    }
    EXPECT_TRUE(b.producer_stopped()) << (close ? "Close" : "StopProducing");
    EXPECT_EQ(b.TryPush(MakeStep(1), [] {}, &retry_at).status().code(),
              absl::StatusCode::kCancelled);
  }
}

}  // namespace
}  // namespace sluice
