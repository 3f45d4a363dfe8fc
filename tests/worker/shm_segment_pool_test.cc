// Warm segments (core/rpc/shm_segment_pool.h, core/rpc/shm_mapping_cache.h): a worker hands a
// segment whose pages are allocated back to a later stream of the same consumer process, only
// once that process says no tensor views it, never to another process (the isolation rule of
// docs/SERVICE.md "Warm segments"); kept segments are bounded, trimmed when idle and give their
// memory back to the budget. Clocks are fakes; no timing.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/rpc/shm_mapping_cache.h"
#include "core/rpc/shm_segment_pool.h"
#include "core/tensor/host_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr size_t kBytes = size_t{1} << 20;
const std::string kKeyA(16, 'a');
const std::string kKeyB(16, 'b');

struct FakeClock {
  absl::Time now = absl::UnixEpoch();
  std::function<absl::Time()> fn() {
    return [this] { return now; };
  }
};

ShmSegmentPoolOptions PoolOptions(FakeClock* clock, size_t max_bytes = size_t{64} << 20) {
  return ShmSegmentPoolOptions{.max_bytes = max_bytes,
                               .idle_ttl = absl::Seconds(30),
                               .trim_interval = absl::ZeroDuration(),
                               .now = clock->fn()};
}

// Writes a stream's bytes into a fresh segment of `key` and drops it: the pool keeps it.
uint64_t UseAndRelease(ShmSegmentPool* pool, const std::string& key, char fill) {
  absl::StatusOr<ShmSegmentPool::Lease> lease = pool->Acquire(key, {}, kBytes);
  EXPECT_TRUE(lease.ok()) << lease.status();
  std::memset(lease->segment->data(), fill, lease->segment->size());
  return lease->id;
}

TEST(ShmSegmentPoolTest, TheSameConsumerGetsItsReleasedSegmentBackWithItsPages) {
  FakeClock clock;
  ShmSegmentPool pool(PoolOptions(&clock));
  const uint64_t id = UseAndRelease(&pool, kKeyA, 'x');
  EXPECT_EQ(pool.pooled_bytes(), kBytes);

  absl::StatusOr<ShmSegmentPool::Lease> again = pool.Acquire(kKeyA, {id}, kBytes);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->warm);
  EXPECT_EQ(again->id, id);
  EXPECT_THAT(again->dropped, IsEmpty());
  // The same memory (the consumer's kept mapping of it is valid): the earlier stream's bytes.
  EXPECT_EQ(again->segment->data()[kBytes - 1], 'x');
  EXPECT_EQ(pool.pooled_bytes(), 0u);
}

TEST(ShmSegmentPoolTest, AnotherConsumerNamingThatIdGetsAFreshZeroedSegment) {
  FakeClock clock;
  ShmSegmentPool pool(PoolOptions(&clock));
  const uint64_t id = UseAndRelease(&pool, kKeyA, 'x');

  // B learned A's segment id (they are small integers): it must not get A's memory.
  absl::StatusOr<ShmSegmentPool::Lease> other = pool.Acquire(kKeyB, {id}, kBytes);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(other->warm);
  EXPECT_NE(other->id, id);
  EXPECT_THAT(other->dropped, ElementsAre(id));
  for (size_t i = 0; i < kBytes; i += 4096) ASSERT_EQ(other->segment->data()[i], 0) << i;
  EXPECT_EQ(pool.pooled_bytes(), kBytes);  // A's is still kept for A
  // An empty key (a consumer that sends none) never gets a kept segment either, and a short
  // (guessable) key's segments are not kept at all.
  absl::StatusOr<ShmSegmentPool::Lease> none = pool.Acquire("", {id}, kBytes);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->warm);
  const size_t kept = pool.pooled_bytes();
  ASSERT_TRUE(pool.Acquire("k", {}, kBytes).ok());  // its lease dropped at once
  EXPECT_EQ(pool.pooled_bytes(), kept);
}

TEST(ShmSegmentPoolTest, ASegmentStillInUseOrNotNamedIdleIsNotHandedOut) {
  FakeClock clock;
  ShmSegmentPool pool(PoolOptions(&clock));
  absl::StatusOr<ShmSegmentPool::Lease> held = pool.Acquire(kKeyA, {}, kBytes);
  ASSERT_TRUE(held.ok());
  // The worker still holds it (a step placed in it, say, or another stream of the process):
  // not handed out, and not reported dropped (the consumer keeps its mapping for later).
  absl::StatusOr<ShmSegmentPool::Lease> second = pool.Acquire(kKeyA, {held->id}, kBytes);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->warm);
  EXPECT_THAT(second->dropped, IsEmpty());
  // Another consumer naming it learns nothing of it either way: dropped, as unknown.
  absl::StatusOr<ShmSegmentPool::Lease> stranger = pool.Acquire(kKeyB, {held->id}, kBytes);
  ASSERT_TRUE(stranger.ok());
  EXPECT_FALSE(stranger->warm);
  EXPECT_THAT(stranger->dropped, ElementsAre(held->id));
  const uint64_t first_id = held->id;
  held->segment.reset();
  // Released by the worker, but the consumer did not name it idle (a tensor still views it).
  absl::StatusOr<ShmSegmentPool::Lease> third = pool.Acquire(kKeyA, {}, kBytes);
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->warm);
  EXPECT_NE(third->id, first_id);
  // Another size: not that one either.
  absl::StatusOr<ShmSegmentPool::Lease> bigger = pool.Acquire(kKeyA, {first_id}, 2 * kBytes);
  ASSERT_TRUE(bigger.ok());
  EXPECT_FALSE(bigger->warm);
}

TEST(ShmSegmentPoolTest, IdleSegmentsAreTrimmedAndGiveTheirMemoryBack) {
  FakeClock clock;
  const int64_t before = ProcessMemoryBudget().in_use();
  ShmSegmentPool pool(PoolOptions(&clock));
  const uint64_t id = UseAndRelease(&pool, kKeyA, 'x');
  EXPECT_EQ(ProcessMemoryBudget().in_use(), before + static_cast<int64_t>(kBytes))
      << "a kept segment stays charged to the memory budget";
  clock.now += absl::Seconds(29);
  pool.Trim();
  EXPECT_EQ(pool.pooled_bytes(), kBytes);
  clock.now += absl::Seconds(1);
  pool.Trim();
  EXPECT_EQ(pool.pooled_bytes(), 0u);
  EXPECT_EQ(ProcessMemoryBudget().in_use(), before);
  absl::StatusOr<ShmSegmentPool::Lease> after = pool.Acquire(kKeyA, {id}, kBytes);
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->warm);
  EXPECT_THAT(after->dropped, ElementsAre(id));
}

TEST(ShmSegmentPoolTest, KeptBytesAreBoundedOldestFirst) {
  FakeClock clock;
  ShmSegmentPool pool(PoolOptions(&clock, 2 * kBytes));
  absl::StatusOr<ShmSegmentPool::Lease> a = pool.Acquire(kKeyA, {}, kBytes);
  absl::StatusOr<ShmSegmentPool::Lease> b = pool.Acquire(kKeyA, {}, kBytes);
  absl::StatusOr<ShmSegmentPool::Lease> c = pool.Acquire(kKeyA, {}, kBytes);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const uint64_t ids[] = {a->id, b->id, c->id};
  a->segment.reset();
  clock.now += absl::Seconds(1);
  b->segment.reset();
  clock.now += absl::Seconds(1);
  c->segment.reset();
  EXPECT_EQ(pool.pooled_bytes(), 2 * kBytes);
  absl::StatusOr<ShmSegmentPool::Lease> again =
      pool.Acquire(kKeyA, {ids[0], ids[1], ids[2]}, kBytes);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->warm);
  EXPECT_EQ(again->id, ids[1]);
  EXPECT_THAT(again->dropped, ElementsAre(ids[0])) << "the oldest went over max_bytes";
}

TEST(ShmSegmentPoolTest, ALeaseOutlivingThePoolIsFreed) {
  FakeClock clock;
  const int64_t before = ProcessMemoryBudget().in_use();
  std::shared_ptr<ShmSegment> segment;
  {
    ShmSegmentPool pool(PoolOptions(&clock));
    absl::StatusOr<ShmSegmentPool::Lease> lease = pool.Acquire(kKeyA, {}, kBytes);
    ASSERT_TRUE(lease.ok());
    segment = lease->segment;
  }
  segment.reset();
  EXPECT_EQ(ProcessMemoryBudget().in_use(), before);
}

// A stream that did not end cleanly (its consumer killed, say) does not leave its segment
// kept: that consumer never names it again, and the memory must go back at once.
TEST(ShmSegmentPoolTest, ASegmentMarkedNotToKeepIsFreed) {
  FakeClock clock;
  const int64_t before = ProcessMemoryBudget().in_use();
  ShmSegmentPool pool(PoolOptions(&clock));
  absl::StatusOr<ShmSegmentPool::Lease> lease = pool.Acquire(kKeyA, {}, kBytes);
  ASSERT_TRUE(lease.ok());
  std::shared_ptr<ShmSegment> placed_step = lease->segment;  // another holder
  ShmSegmentPool::DoNotKeep(lease->segment);
  lease->segment.reset();
  placed_step.reset();
  EXPECT_EQ(pool.pooled_bytes(), 0u);
  EXPECT_EQ(ProcessMemoryBudget().in_use(), before);
  // A segment the pool did not lease: nothing happens.
  std::shared_ptr<ShmSegment> other = *ShmSegment::Create(kBytes);
  ShmSegmentPool::DoNotKeep(other);
}

std::shared_ptr<ShmSegment> NewSegment() {
  absl::StatusOr<std::shared_ptr<ShmSegment>> s = ShmSegment::Create(kBytes);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(ShmMappingCacheTest, OnlyMappingsNoTensorViewsAreOfferedBack) {
  FakeClock clock;
  ShmMappingCache cache({.max_segments = 8, .idle_ttl = absl::Seconds(60), .now = clock.fn()});
  EXPECT_EQ(cache.consumer_key().size(), 16u);
  EXPECT_NE(cache.consumer_key(), ShmMappingCache().consumer_key());
  std::shared_ptr<ShmSegment> viewed = NewSegment();
  cache.Put("w:1", "sock", 1, viewed);  // a ring or tensor still holds it
  cache.Put("w:1", "sock", 2, NewSegment());
  cache.Put("w:2", "sock2", 3, NewSegment());
  EXPECT_THAT(cache.IdleIds("w:1"), ElementsAre(2));
  EXPECT_THAT(cache.IdleIds("w:2"), ElementsAre(3));
  viewed.reset();
  EXPECT_THAT(cache.IdleIds("w:1"), ElementsAre(1, 2));

  EXPECT_NE(cache.Find("w:1", "sock", 2, kBytes), nullptr);
  EXPECT_EQ(cache.Find("w:1", "other-socket", 2, kBytes), nullptr) << "a restarted worker";
  EXPECT_EQ(cache.Find("w:1", "sock", 1, 2 * kBytes), nullptr) << "another size";
  EXPECT_THAT(cache.IdleIds("w:1"), ElementsAre(2)) << "a mismatched mapping is dropped";
  cache.Drop("w:1", {2});
  EXPECT_THAT(cache.IdleIds("w:1"), IsEmpty());
  EXPECT_EQ(cache.size(), 1u);
}

TEST(ShmMappingCacheTest, IdleMappingsAreBoundedAndExpire) {
  FakeClock clock;
  ShmMappingCache cache({.max_segments = 2, .idle_ttl = absl::Seconds(60), .now = clock.fn()});
  std::shared_ptr<ShmSegment> in_use = NewSegment();
  cache.Put("w", "s", 1, in_use);
  cache.Put("w", "s", 2, NewSegment());
  clock.now += absl::Seconds(1);
  cache.Put("w", "s", 3, NewSegment());
  // Over max_segments: the idle one used longest ago went, not the one in use.
  EXPECT_THAT(cache.IdleIds("w"), ElementsAre(3));
  EXPECT_EQ(cache.size(), 2u);
  clock.now += absl::Seconds(60);
  EXPECT_THAT(cache.IdleIds("w"), IsEmpty());
  EXPECT_EQ(cache.size(), 1u) << "the mapping in use stays";
}

}  // namespace
}  // namespace sluice
