// Consumers heartbeat with jitter (client/task_streams.h, ServiceStepSourceOptions::
// heartbeat_jitter) and retry with jittered backoff (core/util/backoff.h): deterministic,
// through injected random sources (core/util/jitter.h).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "client/task_streams.h"
#include "core/util/backoff.h"
#include "core/util/jitter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;

// A source that returns `values` in turn.
RandomSource Fixed(std::vector<uint64_t> values) {
  auto i = std::make_shared<size_t>(0);
  return [values, i] { return values[(*i)++ % values.size()]; };
}

TEST(HeartbeatJitterTest, AConsumersWaitsSpanTheIntervalPlusOrMinusTheJitter) {
  ServiceStepSourceOptions o;
  o.coordinator_address = "127.0.0.1:1";  // never dialled: no heartbeat is sent here
  o.heartbeat_interval = absl::Milliseconds(200);
  o.heartbeat_jitter = 0.25;
  // 150 ms + r mod (100 ms + 1 ns).
  o.random = Fixed({0, 100'000'000, 50'000'000, 100'000'001});
  TaskStreams streams(o);
  std::vector<absl::Duration> waits;
  for (int i = 0; i < 4; ++i) waits.push_back(streams.NextHeartbeatWait());
  EXPECT_THAT(waits, ElementsAre(absl::Milliseconds(150), absl::Milliseconds(250),
                                 absl::Milliseconds(200), absl::Milliseconds(150)));
  // Jitter 0: the interval itself.
  o.heartbeat_jitter = 0;
  TaskStreams fixed(o);
  EXPECT_EQ(fixed.NextHeartbeatWait(), absl::Milliseconds(200));
}

TEST(HeartbeatJitterTest, TenThousandConsumersStartedTogetherSpreadOverTheInterval) {
  // Each consumer's monitor draws its waits from its own source (seeded here, deterministic).
  // After a few heartbeats, the moments they reach the coordinator spread over the whole
  // interval: no 10 ms slot of the 200 ms gets more than twice its share.
  constexpr int kConsumers = 10000;
  constexpr int kSlots = 20;
  std::vector<int> per_slot(kSlots, 0);
  for (int c = 0; c < kConsumers; ++c) {
    RandomSource random = SeededRandomSource(static_cast<uint64_t>(c) + 1);
    absl::Duration t = absl::ZeroDuration();
    for (int beat = 0; beat < 5; ++beat) t += Jittered(absl::Milliseconds(200), 0.25, random);
    const int64_t phase = absl::ToInt64Milliseconds(t) % 200;
    ++per_slot[static_cast<size_t>(phase / 10)];
  }
  const int share = kConsumers / kSlots;
  EXPECT_LT(*std::max_element(per_slot.begin(), per_slot.end()), 2 * share);
  EXPECT_GT(*std::min_element(per_slot.begin(), per_slot.end()), share / 2);
  // Without jitter every one of them lands in the same slot.
  EXPECT_EQ(absl::ToInt64Milliseconds(5 * Jittered(absl::Milliseconds(200), 0, nullptr)) % 200,
            0);
}

TEST(HeartbeatJitterTest, RetriesBackOffWithJitterFromTheInjectedSource) {
  // Waits uniform in [d/2, d], d doubling from 20 ms to 80 ms.
  Backoff backoff(absl::Milliseconds(20), absl::Milliseconds(80), Fixed({0, 20'000'000, 7}));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(10));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(40));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(40) + absl::Nanoseconds(7));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(40)) << "capped at 80 ms: [40, 80]";
  // Two consumers with different sources that failed together retry at different moments.
  Backoff a(absl::Milliseconds(20), absl::Seconds(1), SeededRandomSource(1));
  Backoff b(absl::Milliseconds(20), absl::Seconds(1), SeededRandomSource(2));
  EXPECT_NE(a.Next(), b.Next());
}

}  // namespace
}  // namespace sluice
