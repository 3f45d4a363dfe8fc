// The step buffer with many coordinated consumers (worker/step_buffer.h): steps are released
// exactly when the slowest cursor passes them, every consumer reads every step once, the
// wake-ups go to exactly the streams a change concerns, and the work a step costs on the
// consumers' cursors (StepBuffer::TEST_cursor_ops) does not grow with their number.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/task_step_test_util.h"
#include "worker/step_buffer.h"

namespace sluice {
namespace {

constexpr int64_t kDetachedCursor = INT64_MAX;

// The test's view of a coordinated buffer: each consumer's cursor, the live ones (not detached)
// in a multiset for their minimum, what each read, and the wake-ups registered and received.
class Model {
 public:
  explicit Model(int64_t consumers)
      : cursor_(static_cast<size_t>(consumers), 0), read_(static_cast<size_t>(consumers)) {
    for (int64_t c = 0; c < consumers; ++c) live_.insert(0);
  }
  // The first task step the buffer holds for consumers: below it, everything is released.
  int64_t first_held(int64_t pushed) const {
    return live_.empty() ? pushed : std::min(*live_.begin(), pushed);
  }
  int64_t cursor(int64_t c) const { return cursor_[static_cast<size_t>(c)]; }
  void Set(int64_t c, int64_t cursor) {
    int64_t& old = cursor_[static_cast<size_t>(c)];
    if (old != kDetachedCursor) live_.erase(live_.find(old));
    if (cursor != kDetachedCursor) live_.insert(cursor);
    old = cursor;
  }
  std::vector<int64_t>& read(int64_t c) { return read_[static_cast<size_t>(c)]; }

 private:
  std::vector<int64_t> cursor_;
  std::multiset<int64_t> live_;
  std::vector<std::vector<int64_t>> read_;
};

// 1,000 coordinated consumers reading in a random interleaving with a producer on TryPush
// (budget: 10 steps), all in one thread so that every state is checked:
//   - consumer kLate never attaches at first, is detached as late at the producer's first
//     refusal, and later joins from the retention window at step 0;
//   - consumers [100, 150) each Detach at a random cursor; consumer kRejoin (one of them)
//     attaches again at its cursor once it has been released, served from the window;
//   - after every action the buffer holds exactly the steps from the slowest live cursor on
//     (released exactly when it passes), and the window exactly the ones below it;
//   - a push wakes exactly the consumers registered at that step, a Detach the detached one's
//     registration, the end every registration; a release wakes a refused producer;
//   - every consumer reads every step from where it (re)started exactly once, in order, and the
//     buffer is drained exactly when the last consumer confirms the end.
TEST(StepBufferScaleTest, ThousandConsumersInRandomOrderReleaseAtTheSlowestCursorAndReadOnce) {
  constexpr int64_t kConsumers = 1000;
  constexpr int64_t kSteps = 60;
  constexpr size_t kStepBytes = 100;
  constexpr int64_t kLate = 7;
  constexpr int64_t kRejoin = 100;
  constexpr int64_t kRejoinAt = 20;
  StepBuffer b({.max_bytes = 10 * kStepBytes,
                .num_consumers = kConsumers,
                .detach_unattached_after = absl::ZeroDuration(),
                .retention_bytes = kSteps * kStepBytes});
  Model model(kConsumers);
  std::mt19937 rng(20261204);
  std::vector<int64_t> gen(kConsumers, 0);
  std::vector<int64_t> detach_at(kConsumers, -1);
  for (int64_t c = 100; c < 150; ++c) detach_at[c] = 1 + static_cast<int64_t>(rng() % (kSteps - 1));
  detach_at[kRejoin] = kRejoinAt;
  for (int64_t c = 0; c < kConsumers; ++c) {
    if (c == kLate) continue;
    auto g = b.Attach(c, 0);
    ASSERT_TRUE(g.ok()) << g.status();
    gen[c] = *g;
  }
  enum class State { kReading, kDetached, kEnded };
  std::vector<State> state(kConsumers, State::kReading);
  state[kLate] = State::kDetached;  // as far as reading goes: it has not attached
  bool late_detached = false;
  bool late_joined = false;
  bool rejoined = false;
  int64_t ended = 0;
  int64_t expected_hits = 0;

  std::vector<int64_t> woken;               // wake-ups received since the last check
  std::map<int64_t, int64_t> registered;    // consumer -> the cursor it registered at
  bool space_wanted = false;                // the producer was refused and registered
  bool space_called = false;
  int64_t pushed = 0;
  bool finished = false;

  auto check_woken = [&](std::vector<int64_t> expected) {
    std::sort(expected.begin(), expected.end());
    std::sort(woken.begin(), woken.end());
    EXPECT_EQ(woken, expected);
    woken.clear();
  };

  for (int64_t round = 0; ended < kConsumers && round < 5'000'000; ++round) {
    const size_t buffered_before = b.buffered_steps();
    const bool producer_waiting = space_wanted;
    if (rng() % 20 == 0) {
      // The producer.
      if (pushed < kSteps) {
        absl::Time retry_at;
        space_called = false;
        auto ok = b.TryPush(MakeStep(pushed, kStepBytes), [&] { space_called = true; }, &retry_at);
        ASSERT_TRUE(ok.ok()) << ok.status();
        if (!late_detached && b.stats().cursors[kLate] == -1) {
          late_detached = true;  // detached as late at the first refusal
          model.Set(kLate, kDetachedCursor);
        }
        space_wanted = !*ok;
        if (!*ok) check_woken({});  // a refusal (and detaching the late one) wakes no stream
        if (*ok) {
          std::vector<int64_t> expected;
          for (auto it = registered.begin(); it != registered.end();) {
            if (it->second == pushed) {
              expected.push_back(it->first);
              it = registered.erase(it);
            } else {
              ++it;
            }
          }
          check_woken(expected);
          ++pushed;
        }
      } else if (!finished) {
        b.Finish(absl::OkStatus());
        finished = true;
        std::vector<int64_t> expected;
        for (const auto& [c, at] : registered) expected.push_back(c);
        registered.clear();
        check_woken(expected);
      }
    } else {
      const int64_t c = static_cast<int64_t>(rng() % kConsumers);
      if (c == kLate && late_detached && !late_joined && model.first_held(pushed) > 0) {
        auto g = b.Attach(c, 0);  // late: from the retention window
        ASSERT_TRUE(g.ok()) << g.status();
        gen[c] = *g;
        late_joined = true;
        state[c] = State::kReading;
        model.Set(c, 0);
        ++expected_hits;
        check_woken({});
      } else if (c == kRejoin && state[c] == State::kDetached && !rejoined &&
                 model.first_held(pushed) > kRejoinAt) {
        auto g = b.Attach(c, kRejoinAt);  // back after a Detach: from the retention window
        ASSERT_TRUE(g.ok()) << g.status();
        gen[c] = *g;
        rejoined = true;
        state[c] = State::kReading;
        model.Set(c, kRejoinAt);
        ++expected_hits;
        check_woken({});
      } else if (state[c] == State::kReading && model.cursor(c) == detach_at[c] &&
                 !(c == kRejoin && rejoined)) {
        b.Detach(c);
        state[c] = State::kDetached;
        model.Set(c, kDetachedCursor);
        if (c != kRejoin) ++ended;  // counts as ended for drained(); kRejoin comes back
        std::vector<int64_t> expected;
        if (registered.erase(c) > 0) expected.push_back(c);
        check_woken(expected);  // its superseded registration, nobody else
      } else if (state[c] == State::kReading) {
        std::vector<std::shared_ptr<const TaskStep>> steps;
        bool end = false;
        size_t max_steps = 1 + rng() % 3;
        if (detach_at[c] > model.cursor(c) && !(c == kRejoin && rejoined)) {
          max_steps = std::min<size_t>(max_steps, detach_at[c] - model.cursor(c));
        }
        absl::Status s = b.Next(c, gen[c], max_steps, size_t{1} << 30, absl::InfinitePast(),
                                &steps, &end);
        ASSERT_TRUE(s.ok()) << s;
        int64_t cursor = model.cursor(c);
        for (const auto& step : steps) {
          ASSERT_EQ(step->task_step, cursor) << "consumer " << c;
          model.read(c).push_back(cursor);
          ++cursor;
        }
        if (!steps.empty()) model.Set(c, model.cursor(c) + static_cast<int64_t>(steps.size()));
        if (end) {
          ASSERT_EQ(model.cursor(c), kSteps);
          EXPECT_FALSE(b.drained());
          b.ConfirmEnd(c, gen[c]);
          state[c] = State::kEnded;
          ++ended;
          EXPECT_EQ(b.drained(), ended == kConsumers) << ended;
        } else if (steps.empty() && !finished) {
          // Nothing for it yet: it registers for the step at its cursor, not yet pushed.
          EXPECT_EQ(model.cursor(c), pushed);
          EXPECT_TRUE(b.NotifyWhenReady(c, gen[c], [&woken, c] { woken.push_back(c); }));
          registered[c] = model.cursor(c);
        }
        EXPECT_TRUE(woken.empty());  // reading wakes no stream
        woken.clear();
      }
    }
    // Released exactly when the slowest live cursor passes; the window holds the rest.
    const int64_t first = model.first_held(pushed);
    ASSERT_EQ(static_cast<int64_t>(b.buffered_steps()), pushed - first) << "round " << round;
    if (!b.drained()) {
      ASSERT_EQ(b.retained_bytes(), static_cast<size_t>(first) * kStepBytes) << "round " << round;
    }
    if (b.buffered_steps() < buffered_before && producer_waiting && space_wanted) {
      EXPECT_TRUE(space_called) << "a release must wake the refused producer, round " << round;
      space_wanted = false;
    }
  }
  ASSERT_EQ(ended, kConsumers);
  EXPECT_TRUE(late_joined);
  EXPECT_TRUE(rejoined);
  EXPECT_TRUE(b.drained());
  EXPECT_EQ(b.stats().retention_hits, expected_hits);
  EXPECT_EQ(b.retained_bytes(), 0u);  // emptied once drained
  std::vector<int64_t> all(kSteps);
  for (int64_t i = 0; i < kSteps; ++i) all[i] = i;
  for (int64_t c = 0; c < kConsumers; ++c) {
    if (detach_at[c] >= 0 && c != kRejoin) {
      EXPECT_EQ(model.read(c), std::vector<int64_t>(all.begin(), all.begin() + detach_at[c]))
          << "consumer " << c;
    } else {
      EXPECT_EQ(model.read(c), all) << "consumer " << c;
    }
  }
}

// Work per step on the cursors: with N consumers each reading each step (checking readiness and
// registering a wake-up first, as a reactor stream does) and a producer on TryPush refused once
// per step (a budget of one step), the cursor work per step per consumer is a constant. The
// scan the buffer used to do (every cursor on each read, release and refused push) makes it
// grow with N and fails this.
TEST(StepBufferScaleTest, CursorWorkPerStepDoesNotGrowWithTheNumberOfConsumers) {
  constexpr int64_t kSteps = 32;
  for (int64_t n : {1, 10, 100, 1000}) {
    StepBuffer b({.max_bytes = 100, .num_consumers = n});
    std::vector<int64_t> gen(static_cast<size_t>(n));
    for (int64_t c = 0; c < n; ++c) {
      auto g = b.Attach(c, 0);
      ASSERT_TRUE(g.ok()) << g.status();
      gen[static_cast<size_t>(c)] = *g;
    }
    int64_t woken = 0;
    int64_t space = 0;
    const int64_t before = b.TEST_cursor_ops();
    absl::Time retry_at;
    for (int64_t step = 0; step < kSteps; ++step) {
      auto ok = b.TryPush(MakeStep(step), [&] { ++space; }, &retry_at);
      ASSERT_TRUE(ok.ok() && *ok) << step;
      EXPECT_EQ(woken, step == 0 ? 0 : n);  // every consumer registered at this step
      woken = 0;
      // The next step does not fit until every consumer has read this one.
      ok = b.TryPush(MakeStep(step + 1), [&] { ++space; }, &retry_at);
      ASSERT_TRUE(ok.ok());
      EXPECT_FALSE(*ok);
      for (int64_t c = 0; c < n; ++c) {
        EXPECT_EQ(b.buffered_steps(), 1u);  // held until the slowest (the last) reads it
        EXPECT_TRUE(b.Ready(c));
        std::vector<std::shared_ptr<const TaskStep>> steps;
        bool end = false;
        ASSERT_TRUE(b.Next(c, gen[c], 1, 1 << 20, absl::InfinitePast(), &steps, &end).ok());
        ASSERT_EQ(steps.size(), 1u);
        EXPECT_FALSE(b.Ready(c));
        EXPECT_TRUE(b.NotifyWhenReady(c, gen[c], [&] { ++woken; }));
      }
      EXPECT_EQ(b.buffered_steps(), 0u);
      EXPECT_EQ(space, step + 1);  // the last read released the step and woke the producer
      // TryPush clears the refused registration; the next iteration pushes step + 1.
      if (step + 1 == kSteps) break;
    }
    const double per = static_cast<double>(b.TEST_cursor_ops() - before) /
                       static_cast<double>(kSteps * n);
    EXPECT_LE(per, 5.0) << n << " consumers: cursor work per step per consumer";
  }
}

// The same guarantees with consumers on threads and blocking reads: 1,000 consumers on four
// threads, a producer blocked on a budget of 8 steps, 50 consumers detaching part way; every
// consumer reads every step up to its detach exactly once, in order, and the task drains.
TEST(StepBufferScaleTest, ThousandConsumersOnThreadsReadEveryStepOnce) {
  constexpr int64_t kConsumers = 1000;
  constexpr int64_t kThreads = 4;
  constexpr int64_t kSteps = 100;
  StepBuffer b({.max_bytes = 8 * 100, .num_consumers = kConsumers});
  std::vector<int64_t> gen(kConsumers);
  for (int64_t c = 0; c < kConsumers; ++c) {
    auto g = b.Attach(c, 0);
    ASSERT_TRUE(g.ok()) << g.status();
    gen[c] = *g;
  }
  auto detach_at = [](int64_t c) -> int64_t { return c % 20 == 3 ? c % kSteps : -1; };
  std::vector<std::vector<int64_t>> read(kConsumers);
  std::thread producer([&] {
    for (int64_t i = 0; i < kSteps; ++i) ASSERT_TRUE(b.Push(MakeStep(i)).ok());
    b.Finish(absl::OkStatus());
  });
  std::vector<std::thread> readers;
  for (int64_t t = 0; t < kThreads; ++t) {
    readers.emplace_back([&, t] {
      std::vector<bool> done(kConsumers, false);
      for (int64_t round = 0; round <= kSteps; ++round) {
        for (int64_t c = t; c < kConsumers; c += kThreads) {
          if (done[c]) continue;
          if (detach_at(c) == round) {
            b.Detach(c);
            done[c] = true;
            continue;
          }
          std::vector<std::shared_ptr<const TaskStep>> steps;
          bool end = false;
          for (int tries = 0; tries < 100 && steps.empty() && !end; ++tries) {
            absl::Status s = b.Next(c, gen[c], 1, 1 << 20, absl::Now() + absl::Seconds(1),
                                    &steps, &end);
            ASSERT_TRUE(s.ok()) << s;
          }
          ASSERT_TRUE(!steps.empty() || end) << "consumer " << c << " waited 100 s";
          for (const auto& s : steps) read[c].push_back(s->task_step);
          if (end) {
            b.ConfirmEnd(c, gen[c]);
            done[c] = true;
          }
        }
      }
    });
  }
  for (auto& r : readers) r.join();
  producer.join();
  EXPECT_TRUE(b.drained());
  for (int64_t c = 0; c < kConsumers; ++c) {
    const int64_t n = detach_at(c) >= 0 ? detach_at(c) : kSteps;
    std::vector<int64_t> expected(n);
    for (int64_t i = 0; i < n; ++i) expected[i] = i;
    EXPECT_EQ(read[c], expected) << "consumer " << c;
  }
}

}  // namespace
}  // namespace sluice
