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
#include "gtest/gtest.h"
#include "tests/seeded_rng.h"
#include "tests/worker/task_step_test_util.h"

namespace sluice {
namespace {

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
