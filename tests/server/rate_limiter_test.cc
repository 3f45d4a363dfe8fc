// RateLimiter (token buckets per caller identity) and CallerIdentity's peer parsing. A fake
// clock: no wall-clock waits.
#include "server/rate_limiter.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/util/clock.h"
#include "gtest/gtest.h"
#include "server/caller_identity.h"

namespace sluice {
namespace {

TEST(RateLimiterTest, EachKeyGetsItsBurstThenItsRate) {
  FakeClock clock;
  RateLimiter limiter({.per_second = 2, .burst = 4, .max_keys = 100, .clock = &clock});
  int admitted = 0;
  for (int i = 0; i < 50; ++i) admitted += limiter.Admit("greedy") ? 1 : 0;
  EXPECT_EQ(admitted, 4);  // the burst, then nothing until time passes
  EXPECT_TRUE(limiter.Admit("other")) << "another key has its own bucket";
  clock.Advance(absl::Seconds(1));  // two tokens back
  EXPECT_TRUE(limiter.Admit("greedy"));
  EXPECT_TRUE(limiter.Admit("greedy"));
  EXPECT_FALSE(limiter.Admit("greedy"));
  clock.Advance(absl::Hours(1));  // refills to the burst, not beyond
  admitted = 0;
  for (int i = 0; i < 50; ++i) admitted += limiter.Admit("greedy") ? 1 : 0;
  EXPECT_EQ(admitted, 4);
}

TEST(RateLimiterTest, NoRateMeansNoLimit) {
  RateLimiter limiter({.per_second = 0});
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(limiter.Admit("k"));
  EXPECT_EQ(limiter.size(), 0u);
}

// Many identities cannot grow the table past max_keys, nor escape the limit: beyond it they
// share one overflow bucket; buckets that refilled are dropped to make room.
TEST(RateLimiterTest, TheTableIsBoundedAndOverflowSharesOneBucket) {
  FakeClock clock;
  RateLimiter limiter({.per_second = 1, .burst = 2, .max_keys = 8, .clock = &clock});
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(limiter.Admit(absl::StrCat("k", i)));
  int overflow_admitted = 0;
  for (int i = 8; i < 1000; ++i) overflow_admitted += limiter.Admit(absl::StrCat("k", i)) ? 1 : 0;
  EXPECT_EQ(overflow_admitted, 2);  // the overflow bucket's burst, shared by all of them
  EXPECT_EQ(limiter.size(), 8u);
  clock.Advance(absl::Seconds(10));  // every bucket refilled: dropped to make room
  EXPECT_TRUE(limiter.Admit("new"));
  EXPECT_LE(limiter.size(), 8u);
}

TEST(CallerIdentityTest, PeerHostIsTheAddressWithoutItsPort) {
  EXPECT_EQ(PeerHost("ipv4:127.0.0.1:50051"), "127.0.0.1");
  EXPECT_EQ(PeerHost("ipv6:[::1]:50051"), "::1");
  EXPECT_EQ(PeerHost("ipv6:[2001:db8::7]:1"), "2001:db8::7");
  EXPECT_EQ(PeerHost("unix:/tmp/sock"), "unix:/tmp/sock");
  EXPECT_EQ(PeerHost(""), "unknown");
}

}  // namespace
}  // namespace sluice
