// The cross-trainer window (worker/cross_trainer_window.h): trainers of a shared job read one
// production at their own pace. Lossless mode: every trainer reads every step, in order, and
// the slowest holds the producer. Skipping mode: a trainer that falls behind the window skips
// to its start (a gap its skipped_steps counts), never a duplicate. Either way each step is
// produced once and the window never holds more than its bytes.
#include "worker/cross_trainer_window.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/rpc/trainer_id.h"
#include "tests/seeded_rng.h"
#include "tests/worker/task_step_test_util.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr size_t kStepBytes = 100;

CrossTrainerWindowOptions Window(int64_t steps, bool lossless) {
  CrossTrainerWindowOptions o;
  o.window_bytes = static_cast<size_t>(steps) * kStepBytes;
  o.lossless = lossless;
  return o;
}

// Reads up to `max_steps` steps now (no wait); their task steps, or {-1} at the end.
std::vector<int64_t> ReadNow(CrossTrainerWindow* w, int64_t trainer, size_t max_steps = 1) {
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  absl::Status s = w->Next(trainer, max_steps, size_t{1} << 30, absl::Now(), &steps, &end);
  EXPECT_TRUE(s.ok()) << s;
  if (end) return {-1};
  std::vector<int64_t> out;
  for (const auto& step : steps) out.push_back(step->task_step);
  return out;
}

// Pushes steps next.. while the window admits them; returns how many it took.
int64_t PushWhileRoom(CrossTrainerWindow* w, int64_t* next) {
  int64_t taken = 0;
  while (true) {
    absl::StatusOr<bool> ok = w->TryPush(MakeStep(*next, kStepBytes), [] {});
    EXPECT_TRUE(ok.ok()) << ok.status();
    if (!ok.ok() || !*ok) return taken;
    ++*next;
    ++taken;
  }
}

int64_t SkippedOf(const CrossTrainerWindow& w, const std::string& id) {
  for (const auto& t : w.stats().trainers) {
    if (t.trainer_id == id) return t.skipped_steps;
  }
  ADD_FAILURE() << "no trainer " << id;
  return -1;
}

// The header's worked example, step by step.
TEST(CrossTrainerWindowTest, SkippingModeWorkedExample) {
  CrossTrainerWindow w(Window(3, /*lossless=*/false));
  auto a = w.Join("A");
  auto b = w.Join("B");
  ASSERT_TRUE(a.ok() && b.ok());
  int64_t next = 0;
  EXPECT_EQ(PushWhileRoom(&w, &next), 3);  // 0, 1, 2; nobody read step 0
  EXPECT_TRUE(w.stats().producer_waiting);
  EXPECT_EQ(ReadNow(&w, *a, 2), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(PushWhileRoom(&w, &next), 2);  // 3 evicts 0, 4 evicts 1; A has not read 2
  EXPECT_EQ(ReadNow(&w, *b), (std::vector<int64_t>{2}));  // B skips 0 and 1
  EXPECT_EQ(SkippedOf(w, "B"), 2);
  EXPECT_EQ(SkippedOf(w, "A"), 0);
  EXPECT_EQ(w.stats().steps_evicted, 2);
  EXPECT_EQ(w.stats().steps_produced, 5);
}

TEST(CrossTrainerWindowTest, LosslessModeHoldsTheProducerForTheSlowestTrainer) {
  CrossTrainerWindow w(Window(3, /*lossless=*/true));
  auto a = w.Join("A");
  auto b = w.Join("B");
  ASSERT_TRUE(a.ok() && b.ok());
  int64_t next = 0;
  EXPECT_EQ(PushWhileRoom(&w, &next), 3);
  EXPECT_EQ(ReadNow(&w, *a, 3), (std::vector<int64_t>{0, 1, 2}));
  // A read everything, B nothing: no room.
  absl::Notification space;
  absl::StatusOr<bool> pushed = w.TryPush(MakeStep(3, kStepBytes), [&] { space.Notify(); });
  ASSERT_TRUE(pushed.ok());
  EXPECT_FALSE(*pushed);
  EXPECT_FALSE(space.HasBeenNotified());
  EXPECT_EQ(ReadNow(&w, *b), (std::vector<int64_t>{0}));
  EXPECT_TRUE(space.HasBeenNotified());  // B moved: the producer is woken
  EXPECT_EQ(PushWhileRoom(&w, &next), 1);  // only step 0 could leave
  EXPECT_EQ(ReadNow(&w, *b, 3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(SkippedOf(w, "B"), 0);
}

TEST(CrossTrainerWindowTest, LosslessModeWaitsForTheExpectedTrainers) {
  CrossTrainerWindowOptions o = Window(2, /*lossless=*/true);
  o.expected_trainers = 2;
  CrossTrainerWindow w(o);
  auto a = w.Join("A");
  ASSERT_TRUE(a.ok());
  int64_t next = 0;
  EXPECT_EQ(PushWhileRoom(&w, &next), 2);
  EXPECT_EQ(ReadNow(&w, *a, 2), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(PushWhileRoom(&w, &next), 0);  // B is expected: step 0 stays for it
  auto b = w.Join("B");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(ReadNow(&w, *b, 2), (std::vector<int64_t>{0, 1}));  // it starts at step 0
  EXPECT_EQ(PushWhileRoom(&w, &next), 2);
}

// The same trainer_id twice is two consumers of one trainer: they split its steps (each step
// to one of them), and the trainer count does not grow.
TEST(CrossTrainerWindowTest, SameTrainerIdSplitsThatTrainersSteps) {
  CrossTrainerWindowOptions o = Window(4, /*lossless=*/true);
  o.max_trainers = 2;
  CrossTrainerWindow w(o);
  auto a1 = w.Join("A");
  auto a2 = w.Join("A");
  auto b = w.Join("B");
  ASSERT_TRUE(a1.ok() && a2.ok() && b.ok());
  EXPECT_EQ(*a1, *a2);
  EXPECT_EQ(w.stats().trainers.size(), 2u);
  std::vector<int64_t> seen_a, seen_b;
  int64_t next = 0;
  for (int round = 0; round < 10; ++round) {
    PushWhileRoom(&w, &next);
    for (int64_t s : ReadNow(&w, round % 2 == 0 ? *a1 : *a2)) seen_a.push_back(s);
    for (int64_t s : ReadNow(&w, *b)) seen_b.push_back(s);
  }
  std::vector<int64_t> want(seen_b.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<int64_t>(i);
  EXPECT_EQ(seen_b, want);
  EXPECT_EQ(seen_a, want);  // each step once, whichever of A's consumers asked
}

TEST(CrossTrainerWindowTest, TrainerIdsAreBoundedClientInput) {
  CrossTrainerWindowOptions o = Window(2, false);
  o.max_trainers = 2;
  o.max_trainer_id_bytes = 8;
  CrossTrainerWindow w(o);
  EXPECT_EQ(w.Join("").status().code(), absl::StatusCode::kInvalidArgument);
  absl::Status too_long = w.Join("123456789").status();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("'123456789'"), std::string::npos) << too_long;
  EXPECT_NE(too_long.message().find("8 allowed"), std::string::npos) << too_long;
  EXPECT_EQ(w.Join(std::string("a\0b", 3)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.Join("a b").status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(w.Join("t1").ok());
  ASSERT_TRUE(w.Join("t2").ok());
  absl::Status third = w.Join("t3").status();
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.message().find("'t3'"), std::string::npos) << third;
  EXPECT_TRUE(w.Join("t1").ok());  // a known trainer is not a new one
  w.RemoveTrainer("t1");
  EXPECT_TRUE(w.Join("t3").ok());
}

TEST(CrossTrainerWindowTest, RemovedTrainerNoLongerHoldsTheProducer) {
  CrossTrainerWindow w(Window(2, /*lossless=*/true));
  auto a = w.Join("A");
  auto gone = w.Join("gone");
  ASSERT_TRUE(a.ok() && gone.ok());
  int64_t next = 0;
  PushWhileRoom(&w, &next);
  ReadNow(&w, *a, 2);
  EXPECT_EQ(PushWhileRoom(&w, &next), 0);
  w.RemoveTrainer("gone");
  EXPECT_EQ(PushWhileRoom(&w, &next), 2);
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  EXPECT_EQ(w.Next(*gone, 1, 1 << 20, absl::Now(), &steps, &end).code(),
            absl::StatusCode::kNotFound);
}

TEST(CrossTrainerWindowTest, WakesWaitingStreamsAndEndsForEveryTrainer) {
  CrossTrainerWindow w(Window(4, /*lossless=*/false));
  auto a = w.Join("A");
  auto b = w.Join("B");
  ASSERT_TRUE(a.ok() && b.ok());
  int woken = 0;
  EXPECT_TRUE(w.NotifyWhenReady(*a, 1, [&] { ++woken; }));
  EXPECT_TRUE(w.NotifyWhenReady(*b, 2, [&] { ++woken; }));
  w.CancelNotify(2);
  ASSERT_TRUE(w.Push(MakeStep(0, kStepBytes)).ok());
  EXPECT_EQ(woken, 1);
  EXPECT_FALSE(w.NotifyWhenReady(*a, 1, [&] { ++woken; }));  // a step is there
  w.Finish(absl::OkStatus());
  EXPECT_EQ(ReadNow(&w, *a), (std::vector<int64_t>{0}));
  EXPECT_EQ(ReadNow(&w, *a), (std::vector<int64_t>{-1}));
  EXPECT_EQ(ReadNow(&w, *b), (std::vector<int64_t>{0}));
  EXPECT_EQ(ReadNow(&w, *b), (std::vector<int64_t>{-1}));
  w.ConfirmEnd(*a);
  EXPECT_FALSE(w.drained());
  w.ConfirmEnd(*b);
  EXPECT_TRUE(w.drained());
}

// Lossless with expected trainers: the task is not drained while one is still awaited (it
// would be stopped, and the trainer joining later could not read the steps kept for it).
TEST(CrossTrainerWindowTest, ALosslessWindowIsNotDrainedBeforeItsExpectedTrainersJoined) {
  CrossTrainerWindowOptions o = Window(4, /*lossless=*/true);
  o.expected_trainers = 2;
  CrossTrainerWindow w(o);
  auto a = w.Join("A");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(w.Push(MakeStep(0, kStepBytes)).ok());
  w.Finish(absl::OkStatus());
  EXPECT_EQ(ReadNow(&w, *a), (std::vector<int64_t>{0}));
  EXPECT_EQ(ReadNow(&w, *a), (std::vector<int64_t>{-1}));
  w.ConfirmEnd(*a);
  EXPECT_FALSE(w.drained()) << "B is still expected";
  auto b = w.Join("B");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(ReadNow(&w, *b), (std::vector<int64_t>{0}));
  EXPECT_EQ(ReadNow(&w, *b), (std::vector<int64_t>{-1}));
  w.ConfirmEnd(*b);
  EXPECT_TRUE(w.drained());
}

TEST(CrossTrainerWindowTest, PipelineErrorReachesEveryTrainerAfterItsSteps) {
  CrossTrainerWindow w(Window(4, /*lossless=*/true));
  auto a = w.Join("A");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(w.Push(MakeStep(0, kStepBytes)).ok());
  w.Finish(absl::DataLossError("corrupt record in f.tfrecord at offset 12"));
  EXPECT_EQ(ReadNow(&w, *a), (std::vector<int64_t>{0}));
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  EXPECT_EQ(w.Next(*a, 1, 1 << 20, absl::Now(), &steps, &end).code(),
            absl::StatusCode::kDataLoss);
}

// The worker stops a failed task when the coordinator moves it or fails its job, maybe before
// a trainer read the error: that trainer still gets it (StepBuffer's test of the same).
TEST(CrossTrainerWindowTest, AFailedTaskClosedBeforeATrainerReadTheErrorStillGivesTheError) {
  for (const bool failed : {true, false}) {
    CrossTrainerWindow w(Window(4, /*lossless=*/true));
    auto a = w.Join("A");
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(w.Push(MakeStep(0, kStepBytes)).ok());
    if (failed) w.Finish(absl::ResourceExhaustedError("op 2 (batch): over the memory limit"));
    w.Close();
    std::vector<std::shared_ptr<const TaskStep>> steps;
    bool end = false;
    absl::Status s = w.Next(*a, 1, 1 << 20, absl::Now(), &steps, &end);
    EXPECT_EQ(s.code(), failed ? absl::StatusCode::kResourceExhausted
                               : absl::StatusCode::kUnavailable)
        << s;
  }
}

// The data plane's limits: a step over the stream's credit waits (its cost said), the frame
// takes what fits; draining serves what the window holds, then UNAVAILABLE.
TEST(CrossTrainerWindowTest, HonoursStreamLimitsAndDrains) {
  CrossTrainerWindow w(Window(4, /*lossless=*/false));
  auto a = w.Join("A");
  ASSERT_TRUE(a.ok());
  for (int64_t i = 0; i < 3; ++i) ASSERT_TRUE(w.Push(MakeStep(i, kStepBytes)).ok());
  StepLimits limits;
  limits.max_steps = 8;
  limits.first_max = kStepBytes - 1;
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  size_t blocked = 0;
  ASSERT_TRUE(w.Next(*a, limits, absl::Now(), &steps, &end, &blocked).ok());
  EXPECT_TRUE(steps.empty());
  EXPECT_EQ(blocked, kStepBytes);
  EXPECT_FALSE(w.ReadyWithin(*a, limits));
  limits.first_max = kStepBytes;
  limits.max_cost = 2 * kStepBytes;
  EXPECT_TRUE(w.ReadyWithin(*a, limits));
  ASSERT_TRUE(w.Next(*a, limits, absl::Now(), &steps, &end, &blocked).ok());
  EXPECT_EQ(steps.size(), 2u);  // max_cost
  w.StopProducing();
  EXPECT_EQ(w.Push(MakeStep(3, kStepBytes)).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(ReadNow(&w, *a), (std::vector<int64_t>{2}));
  EXPECT_EQ(w.Next(*a, 1, 1 << 20, absl::Now(), &steps, &end).code(),
            absl::StatusCode::kUnavailable);
}

// Three trainers at different speeds on their own threads, the producer on another: the
// property users rely on, under real concurrency.
void RunThreeTrainers(bool lossless, uint64_t seed) {
  constexpr int64_t kSteps = 400;
  constexpr int64_t kWindowSteps = 8;
  CrossTrainerWindow w(Window(kWindowSteps, lossless));
  std::vector<int64_t> slots;
  for (const char* id : {"fast", "medium", "slow"}) {
    auto slot = w.Join(id);
    ASSERT_TRUE(slot.ok()) << slot.status();
    slots.push_back(*slot);
  }
  std::atomic<size_t> max_held{0};
  std::thread producer([&] {
    for (int64_t i = 0; i < kSteps; ++i) {
      ASSERT_TRUE(w.Push(MakeStep(i, kStepBytes)).ok());
      const size_t held = w.stats().bytes;
      size_t m = max_held.load();
      while (held > m && !max_held.compare_exchange_weak(m, held)) {
      }
    }
    w.Finish(absl::OkStatus());
  });
  std::vector<std::vector<int64_t>> seen(3);
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      SeededRng rng(seed + static_cast<uint64_t>(r));
      // Trainer r yields (1 << 2r) - 1 times per step on average: the slow one is ~16x the
      // fast one, without timing anything.
      const int64_t max_yields = 2 * ((int64_t{1} << (2 * r)) - 1);
      for (int64_t guard = 0; guard < 100 * kSteps; ++guard) {
        std::vector<std::shared_ptr<const TaskStep>> steps;
        bool end = false;
        absl::Status s = w.Next(slots[static_cast<size_t>(r)], 1, 1 << 20,
                                absl::Now() + absl::Seconds(30), &steps, &end);
        ASSERT_TRUE(s.ok()) << s;
        if (end) return;
        for (const auto& step : steps) seen[static_cast<size_t>(r)].push_back(step->task_step);
        for (int64_t y = rng.In(0, max_yields); y > 0; --y) std::this_thread::yield();
      }
      ADD_FAILURE() << "trainer " << r << " never saw the end";
    });
  }
  producer.join();
  for (auto& t : readers) t.join();
  const CrossTrainerWindow::Stats stats = w.stats();
  EXPECT_EQ(stats.steps_produced, kSteps);  // produced once for all three
  EXPECT_LE(max_held.load(), kWindowSteps * kStepBytes);
  for (size_t r = 0; r < 3; ++r) {
    const std::vector<int64_t>& s = seen[r];
    // Strictly increasing: no duplicate, the shared order.
    for (size_t i = 1; i < s.size(); ++i) ASSERT_LT(s[i - 1], s[i]) << "trainer " << r;
    const int64_t gaps = kSteps - static_cast<int64_t>(s.size());
    EXPECT_EQ(stats.trainers[r].skipped_steps, gaps) << "trainer " << r;
    EXPECT_EQ(stats.trainers[r].steps_read, static_cast<int64_t>(s.size()));
    if (lossless) {
      EXPECT_EQ(gaps, 0) << "trainer " << r;
    }
  }
}

TEST(CrossTrainerWindowTest, ThreeTrainersLosslessEachReadEveryStepOnce) {
  constexpr uint64_t kSeed = 29;
  SCOPED_TRACE(absl::StrCat("seed ", kSeed));
  RunThreeTrainers(/*lossless=*/true, kSeed);
}

TEST(CrossTrainerWindowTest, ThreeTrainersSkippingNeverSeeADuplicate) {
  constexpr uint64_t kSeed = 2929;
  SCOPED_TRACE(absl::StrCat("seed ", kSeed));
  RunThreeTrainers(/*lossless=*/false, kSeed);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// What a reader's stream takes now (up to `max_steps`, within `unacked_bytes`): its task steps,
// or {-2} when it waits for an acknowledgement. *status: Next's.
std::vector<int64_t> ReadAs(CrossTrainerWindow* w, int64_t trainer, int64_t reader,
                            size_t max_steps, size_t unacked_bytes = size_t{1} << 30,
                            absl::Status* status = nullptr) {
  StepLimits limits;
  limits.max_steps = max_steps;
  limits.unacked_bytes = unacked_bytes;
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  size_t blocked = 0;
  absl::Status s = w->Next(trainer, reader, limits, absl::Now(), &steps, &end, &blocked);
  if (status != nullptr) *status = s;
  if (blocked == kBlockedOnAcknowledgement) return {-2};
  std::vector<int64_t> out;
  for (const auto& step : steps) out.push_back(step->task_step);
  return out;
}

const CrossTrainerWindow::TrainerStats& StatsOf(const CrossTrainerWindow::Stats& s,
                                                const std::string& id) {
  for (const auto& t : s.trainers) {
    if (t.trainer_id == id) return t;
  }
  ADD_FAILURE() << "no trainer " << id;
  return s.trainers.front();
}

// The class comment's worked example: a broken stream's unacknowledged steps go back to its
// trainer, and the trainer reads each step exactly once; the other trainer is not affected.
TEST(CrossTrainerWindowConsumersTest, ABrokenStreamsStepsGoBackToItsTrainerExactlyOnce) {
  CrossTrainerWindow w(Window(100, /*lossless=*/false));
  const int64_t a = *w.Join("A");
  const int64_t b = *w.Join("B");
  int64_t next = 0;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(*w.TryPush(MakeStep(next++, kStepBytes), [] {}));
  constexpr uint64_t kKey = 77;
  absl::StatusOr<int64_t> first = w.Attach(a, kKey, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(ReadAs(&w, a, *first, 3), (std::vector<int64_t>{0, 1, 2}));
  w.Acknowledge(*first, 1);  // step 0 arrived and was acknowledged
  EXPECT_EQ(StatsOf(w.stats(), "A").unacked_steps, 2);
  // Its call breaks having delivered 1 (step 1 arrived, 2 did not); it attaches again.
  absl::StatusOr<int64_t> second = w.Attach(a, kKey, 2);
  ASSERT_TRUE(second.ok());
  absl::Status old;
  ReadAs(&w, a, *first, 1, size_t{1} << 30, &old);
  EXPECT_EQ(old.code(), absl::StatusCode::kCancelled);  // the old stream is superseded
  EXPECT_EQ(StatsOf(w.stats(), "A").returned_steps, 1);
  // Another consumer of A reads first: it gets the returned step 2, then the cursor's.
  absl::StatusOr<int64_t> other = w.Attach(a, 78, 0);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(ReadAs(&w, a, *other, 2), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ReadAs(&w, a, *second, 100), (std::vector<int64_t>{4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(w.stats().steps_redelivered, 1);
  EXPECT_EQ(StatsOf(w.stats(), "A").steps_read, 10);  // each step once
  // B reads its own sequence from 0.
  absl::StatusOr<int64_t> rb = w.Attach(b, 90, 0);
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(ReadAs(&w, b, *rb, 100), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(CrossTrainerWindowConsumersTest, EvictedStepsStayUntilAcknowledgedAndBoundTheConsumer) {
  // A window of 2 steps: steps the consumer holds unacknowledged survive their eviction.
  CrossTrainerWindow w(Window(2, /*lossless=*/false));
  const int64_t a = *w.Join("A");
  int64_t next = 0;
  PushWhileRoom(&w, &next);
  const int64_t r = *w.Attach(a, 5, 0);
  // Its window is 3 steps' bytes: it gets 3 and then waits for an acknowledgement.
  const size_t unacked = 3 * kStepBytes;
  EXPECT_EQ(ReadAs(&w, a, r, 2, unacked), (std::vector<int64_t>{0, 1}));
  PushWhileRoom(&w, &next);  // evicts 0 and 1
  EXPECT_EQ(ReadAs(&w, a, r, 5, unacked), (std::vector<int64_t>{2}));
  StepLimits limits;
  limits.unacked_bytes = unacked;
  EXPECT_FALSE(w.ReadyWithin(a, limits, r));
  EXPECT_EQ(ReadAs(&w, a, r, 5, unacked), (std::vector<int64_t>{-2}));
  w.Acknowledge(r, 1);
  EXPECT_EQ(ReadAs(&w, a, r, 5, unacked), (std::vector<int64_t>{3}));
  EXPECT_GE(w.stats().steps_evicted, 2);
  // Reconnecting having received 1: 1, 2, 3 come back although 1 left the window.
  const int64_t r2 = *w.Attach(a, 5, 1);
  PushWhileRoom(&w, &next);
  EXPECT_EQ(ReadAs(&w, a, r2, 3), (std::vector<int64_t>{1, 2, 3}));
}

TEST(CrossTrainerWindowConsumersTest, ConsumerKeysAreBoundedClientInput) {
  CrossTrainerWindowOptions o = Window(10, false);
  o.max_consumers = 2;
  CrossTrainerWindow w(o);
  const int64_t a = *w.Join("A");
  const int64_t b = *w.Join("B");
  EXPECT_EQ(w.Attach(a, 1, -3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.Attach(7, 1, 0).status().code(), absl::StatusCode::kNotFound);
  const int64_t r1 = *w.Attach(a, 1, 0);
  ASSERT_TRUE(w.Attach(a, 2, 0).ok());
  absl::Status third = w.Attach(a, 3, 0).status();
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.message().find("consumer_id 3"), absl::string_view::npos) << third;
  // A key reading for A cannot read for B.
  absl::Status cross = w.Attach(b, 2, 0).status();
  EXPECT_EQ(cross.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cross.message().find("trainer 'A'"), absl::string_view::npos) << cross;
  // A released consumer holding nothing is forgotten: its place is free.
  w.Release(r1);
  EXPECT_TRUE(w.Attach(a, 3, 0).ok());
  EXPECT_EQ(w.Attach(b, 4, 0).status().code(), absl::StatusCode::kResourceExhausted);
  // Removing a trainer forgets its consumers (and what they held).
  w.RemoveTrainer("A");
  EXPECT_TRUE(w.Attach(b, 4, 0).ok());
  EXPECT_TRUE(w.Attach(*w.Join("C"), 5, 0).ok());
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Trainers that leave (worker/cross_trainer_window.h): one with no reader open for
// drop_departed_after is dropped, so a lossless producer is not held forever; one that comes
// back in time is kept. A lossless window of 2 steps, a fake clock (the producer's retry time
// says when to look again), trainers A and B each with a stream; the window holds steps 0 and
// 1, which A has read and B has not.
// A window of `steps` steps whose departures are timed on the fake clock `now`, 10 s.
CrossTrainerWindowOptions DepartingWindow(int64_t steps, bool lossless,
                                          std::shared_ptr<absl::Time> now) {
  CrossTrainerWindowOptions o = Window(steps, lossless);
  o.drop_departed_after = absl::Seconds(10);
  o.now = [now] { return *now; };
  return o;
}

class CrossTrainerWindowDepartureTest : public ::testing::Test {
 protected:
  CrossTrainerWindowDepartureTest() : w_(DepartingWindow(2, /*lossless=*/true, now_)) {
    a_ = *w_.Join("A");
    b_ = *w_.Join("B");
    ra_ = *w_.Attach(a_, 1, 0);
    rb_ = *w_.Attach(b_, 2, 0);
    EXPECT_EQ(PushWhileRoom(&w_, &next_), 2);
    EXPECT_EQ(ReadAs(&w_, a_, ra_, 2), (std::vector<int64_t>{0, 1}));
  }
  std::shared_ptr<absl::Time> now_ = std::make_shared<absl::Time>(absl::FromUnixSeconds(1000));
  CrossTrainerWindow w_;
  int64_t a_ = 0, b_ = 0, ra_ = 0, rb_ = 0;
  int64_t next_ = 0;
};

TEST_F(CrossTrainerWindowDepartureTest, ADepartedTrainerIsDroppedAndReleasesALosslessProducer) {
  absl::Time retry = absl::InfinitePast();
  // B, with a stream open, holds the producer (lossless): no retry time.
  EXPECT_FALSE(*w_.TryPush(MakeStep(next_, kStepBytes), [] {}, &retry));
  EXPECT_EQ(retry, absl::InfiniteFuture());
  // B's stream goes: it falls due 10 s later, and until then it still holds the producer.
  w_.Release(rb_);
  EXPECT_EQ(w_.stats().trainers[1].open_readers, 0);
  *now_ += absl::Seconds(9);
  EXPECT_FALSE(*w_.TryPush(MakeStep(next_, kStepBytes), [] {}, &retry));
  EXPECT_EQ(retry, absl::FromUnixSeconds(1010));
  *now_ += absl::Seconds(1);
  EXPECT_TRUE(*w_.TryPush(MakeStep(next_++, kStepBytes), [] {}, &retry));
  const CrossTrainerWindow::Stats s = w_.stats();
  EXPECT_EQ(s.trainers_dropped, 1);
  ASSERT_EQ(s.trainers.size(), 1u);
  EXPECT_EQ(s.trainers[0].trainer_id, "A");
  // Listed for the coordinator (the worker's heartbeats carry the list).
  EXPECT_THAT(s.dropped_trainer_ids, ElementsAre("B"));
  // Its old stream learns it is gone; coming back, it is refused, naming it and why: reading
  // on from the window's oldest step would hide the step it never read (0).
  std::vector<std::shared_ptr<const TaskStep>> steps;
  bool end = false;
  EXPECT_EQ(w_.Next(b_, rb_, StepLimits(), absl::Now(), &steps, &end).code(),
            absl::StatusCode::kNotFound);
  const absl::Status back = w_.Join("B").status();
  EXPECT_EQ(back.code(), absl::StatusCode::kFailedPrecondition) << back;
  EXPECT_THAT(back.message(), HasSubstr("'B'"));
  EXPECT_THAT(back.message(), HasSubstr("dropped"));
  EXPECT_THAT(back.message(), HasSubstr("new trainer_id"));
  // Under a new id it joins at the oldest step the window holds.
  const int64_t c = *w_.Join("C");
  const int64_t rc = *w_.Attach(c, 3, 0);
  EXPECT_EQ(ReadAs(&w_, c, rc, 1), (std::vector<int64_t>{1}));
}

// The dropped ids a window remembers are bounded: the oldest is forgotten (and may join again
// as a new trainer) beyond kMaxDroppedTrainersPerWindow.
TEST(CrossTrainerWindowDroppedTest, RemembersTheLastDroppedIdsOnly) {
  auto now = std::make_shared<absl::Time>(absl::FromUnixSeconds(1000));
  CrossTrainerWindowOptions o = DepartingWindow(1000, /*lossless=*/false, now);
  o.max_trainers = kMaxTrainersPerJob;
  CrossTrainerWindow w(o);
  int64_t next = 0;
  const size_t total = kMaxDroppedTrainersPerWindow + 3;
  for (size_t i = 0; i < total; ++i) {
    const std::string id = absl::StrCat("t", i);
    const int64_t slot = *w.Join(id);
    w.Release(*w.Attach(slot, 0, 0));
    *now += absl::Seconds(11);
    ASSERT_TRUE(*w.TryPush(MakeStep(next++, kStepBytes), [] {}));  // drops it
  }
  const CrossTrainerWindow::Stats s = w.stats();
  EXPECT_EQ(s.trainers_dropped, static_cast<int64_t>(total));
  ASSERT_EQ(s.dropped_trainer_ids.size(), kMaxDroppedTrainersPerWindow);
  EXPECT_EQ(s.dropped_trainer_ids.front(), "t3");
  EXPECT_EQ(s.dropped_trainer_ids.back(), absl::StrCat("t", total - 1));
  EXPECT_EQ(w.Join("t3").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(w.Join("t0").ok());  // forgotten
}

// A producer already waiting when the trainer holding it departs is woken, and its next try
// says when to look again (else it would wait for reads that never come, and never drop it).
TEST_F(CrossTrainerWindowDepartureTest, AProducerWaitingWhenATrainerDepartsLearnsWhenToRetry) {
  absl::Time retry = absl::InfinitePast();
  bool woken = false;
  EXPECT_FALSE(*w_.TryPush(MakeStep(next_, kStepBytes), [&woken] { woken = true; }, &retry));
  EXPECT_EQ(retry, absl::InfiniteFuture());  // B reads: nothing falls due
  w_.Release(rb_);
  EXPECT_TRUE(woken);
  EXPECT_FALSE(*w_.TryPush(MakeStep(next_, kStepBytes), [] {}, &retry));
  EXPECT_EQ(retry, absl::FromUnixSeconds(1010));
  *now_ = retry;
  EXPECT_TRUE(*w_.TryPush(MakeStep(next_, kStepBytes), [] {}, &retry));
  EXPECT_EQ(w_.stats().trainers_dropped, 1);
}

TEST_F(CrossTrainerWindowDepartureTest, ATrainerBackInTimeIsKept) {
  // B's call breaks before it read anything; it calls again 9 s later.
  w_.Release(rb_);
  *now_ += absl::Seconds(9);
  const int64_t rb2 = *w_.Attach(b_, 2, 0);
  *now_ += absl::Seconds(60);
  absl::Time retry;
  EXPECT_FALSE(*w_.TryPush(MakeStep(next_, kStepBytes), [] {}, &retry));  // B holds it
  EXPECT_EQ(w_.stats().trainers_dropped, 0);
  // And it reads on from where it was, nothing lost.
  EXPECT_EQ(ReadAs(&w_, b_, rb2, 2), (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(*w_.TryPush(MakeStep(next_, kStepBytes), [] {}, &retry));
}

// A dead consumer (worker/cross_trainer_window.h): a keyed consumer whose stream is gone for
// drop_departed_after, while its trainer has another consumer reading, hands its unacknowledged
// steps to that consumer; before then it would get them back itself. A skipping window of 4
// steps, a fake clock, trainer A with consumers 1 and 2.
class CrossTrainerWindowDeadConsumerTest : public ::testing::Test {
 protected:
  CrossTrainerWindowDeadConsumerTest() : w_(DepartingWindow(4, /*lossless=*/false, now_)) {
    a_ = *w_.Join("A");
    r1_ = *w_.Attach(a_, 1, 0);
    EXPECT_EQ(PushWhileRoom(&w_, &next_), 4);
    EXPECT_EQ(ReadAs(&w_, a_, r1_, 2), (std::vector<int64_t>{0, 1}));  // never acknowledged
  }
  std::shared_ptr<absl::Time> now_ = std::make_shared<absl::Time>(absl::FromUnixSeconds(1000));
  CrossTrainerWindow w_;
  int64_t a_ = 0, r1_ = 0;
  int64_t next_ = 0;
};

TEST_F(CrossTrainerWindowDeadConsumerTest, ItsUnacknowledgedStepsGoToTheTrainersOtherConsumer) {
  const int64_t r2 = *w_.Attach(a_, 2, 0);
  w_.Release(r1_);  // consumer 1's process died
  *now_ += absl::Seconds(9);
  EXPECT_EQ(ReadAs(&w_, a_, r2, 1), (std::vector<int64_t>{2}));  // not dead yet
  EXPECT_EQ(w_.stats().consumers_dead, 0);
  *now_ += absl::Seconds(1);
  EXPECT_EQ(ReadAs(&w_, a_, r2, 8), (std::vector<int64_t>{0, 1, 3}));
  const CrossTrainerWindow::Stats s = w_.stats();
  EXPECT_EQ(s.consumers_dead, 1);
  EXPECT_EQ(s.steps_handed_over, 2);
  EXPECT_EQ(s.steps_redelivered, 2);
  EXPECT_EQ(s.trainers_dropped, 0);
  // Consumer 1 coming back later is a new consumer: it is owed nothing, and A reads on.
  const int64_t r1 = *w_.Attach(a_, 1, 2);
  EXPECT_EQ(ReadAs(&w_, a_, r1, 8), (std::vector<int64_t>{}));
  EXPECT_TRUE(*w_.TryPush(MakeStep(next_++, kStepBytes), [] {}, nullptr));
  EXPECT_EQ(ReadAs(&w_, a_, r1, 8), (std::vector<int64_t>{4}));
}

TEST_F(CrossTrainerWindowDeadConsumerTest, ATrainerWithoutAnotherConsumerKeepsThemUntilOneComes) {
  w_.Release(r1_);
  *now_ += absl::Seconds(12);
  EXPECT_EQ(w_.stats().consumers_dead, 0);  // no one to hand them to
  // A second consumer of A arrives after consumer 1 fell due: it reads 0 and 1 first.
  const int64_t r2 = *w_.Attach(a_, 2, 0);
  EXPECT_EQ(ReadAs(&w_, a_, r2, 8), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(w_.stats().steps_handed_over, 2);
}

TEST_F(CrossTrainerWindowDeadConsumerTest, AConsumerBackInTimeGetsItsOwnStepsBack) {
  const int64_t r2 = *w_.Attach(a_, 2, 0);
  w_.Release(r1_);
  *now_ += absl::Seconds(9);
  const int64_t r1 = *w_.Attach(a_, 1, 0);  // it received none of 0, 1
  *now_ += absl::Seconds(60);
  EXPECT_EQ(ReadAs(&w_, a_, r1, 2), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(ReadAs(&w_, a_, r2, 8), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w_.stats().consumers_dead, 0);
}

}  // namespace
}  // namespace sluice
