// The shuffle draws (core/data/ops/shuffle_iterator.h) are a function of the seed alone, on every
// platform: std::mt19937_64's output is fixed by the C++ standard, and UniformBelow's rejection
// sampling is ours (std::uniform_int_distribution is each standard library's own). The values
// below were taken once and must never change: a change would reorder every seeded shuffle and
// list_files(shuffle=True) users have pinned.
#include <cstdint>
#include <random>
#include <vector>

#include "core/data/ops/shuffle_iterator.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(ShuffleDrawsTest, TheGeneratorIsTheStandardsOne) {
  std::mt19937_64 gen;  // default seed 5489
  gen.discard(9999);
  EXPECT_EQ(gen(), uint64_t{9981545732273789042u});  // [rand.predef]: the 10000th output
}

TEST(ShuffleDrawsTest, UniformBelowIsPinned) {
  std::mt19937_64 gen(ShuffleIterationSeed(7, 0));
  std::vector<uint64_t> draws;
  for (uint64_t n : std::vector<uint64_t>{2, 3, 10, 1000, uint64_t{1} << 31, 7}) draws.push_back(UniformBelow(gen, n));
  EXPECT_EQ(draws, (std::vector<uint64_t>{1, 1, 7, 966, 368336631, 5}));
  EXPECT_EQ(ShuffleIterationSeed(7, 0), uint64_t{18408462611173474513u});
  EXPECT_EQ(ShuffleIterationSeed(7, 1), uint64_t{15520249658297735794u});
}

TEST(ShuffleDrawsTest, UniformBelowCoversTheRangeEvenly) {
  std::mt19937_64 gen(1);
  std::vector<int> count(6, 0);
  for (int i = 0; i < 60000; ++i) ++count[UniformBelow(gen, 6)];
  for (int c : count) {
    EXPECT_GT(c, 9500);
    EXPECT_LT(c, 10500);
  }
  EXPECT_EQ(UniformBelow(gen, 1), 0u);
}

}  // namespace
}  // namespace sluice
