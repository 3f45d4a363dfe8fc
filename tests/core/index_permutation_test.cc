// IndexPermutation: a bijection for every size and mode, determinism per (seed, epoch), block
// mode's contiguous blocks, and golden values that catch any change to the algorithm (which
// would change every seeded job's order).
#include "core/util/index_permutation.h"

#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace sluice {
namespace {

std::vector<int64_t> All(const IndexPermutation& p) {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(p.size()));
  for (int64_t i = 0; i < p.size(); ++i) out.push_back(p(i));
  return out;
}

IndexPermutation Make(int64_t n, proto::ShuffleMode mode, uint64_t seed, int64_t epoch,
                      int64_t block_size = 16) {
  absl::StatusOr<IndexPermutation> p = IndexPermutation::Create(n, mode, seed, epoch, block_size);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

void ExpectBijection(const IndexPermutation& p) {
  std::vector<bool> seen(static_cast<size_t>(p.size()), false);
  for (int64_t i = 0; i < p.size(); ++i) {
    const int64_t v = p(i);
    ASSERT_GE(v, 0) << "position " << i;
    ASSERT_LT(v, p.size()) << "position " << i;
    ASSERT_FALSE(seen[static_cast<size_t>(v)]) << "value " << v << " twice (position " << i << ")";
    seen[static_cast<size_t>(v)] = true;
  }
}

TEST(IndexPermutationTest, BijectionForManySizesAndModes) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{1000},
                    (int64_t{1} << 20) + 3}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    ExpectBijection(Make(n, proto::SHUFFLE_NONE, 1, 0));
    ExpectBijection(Make(n, proto::SHUFFLE_FULL, 42, 3));
    for (int64_t b : {int64_t{1}, int64_t{3}, int64_t{64}, int64_t{1024}, int64_t{5000}}) {
      SCOPED_TRACE(testing::Message() << "block_size=" << b);
      ExpectBijection(Make(n, proto::SHUFFLE_BLOCK, 42, 3, b));
    }
  }
}

TEST(IndexPermutationTest, BijectionForEverySmallSize) {
  for (int64_t n = 0; n <= 70; ++n) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    ExpectBijection(Make(n, proto::SHUFFLE_FULL, 9, 1));
    ExpectBijection(Make(n, proto::SHUFFLE_BLOCK, 9, 1, 4));
  }
}

TEST(IndexPermutationTest, NoneIsTheIdentityWhateverTheSeed) {
  const IndexPermutation p = Make(100, proto::SHUFFLE_NONE, 12345, 7);
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(p(i), i);
}

TEST(IndexPermutationTest, SameSeedAndEpochSameSequenceElseDifferent) {
  for (proto::ShuffleMode mode : {proto::SHUFFLE_FULL, proto::SHUFFLE_BLOCK}) {
    SCOPED_TRACE(proto::ShuffleMode_Name(mode));
    const std::vector<int64_t> a = All(Make(1000, mode, 7, 0));
    EXPECT_EQ(a, All(Make(1000, mode, 7, 0)));
    EXPECT_NE(a, All(Make(1000, mode, 7, 1)));
    EXPECT_NE(a, All(Make(1000, mode, 8, 0)));
    EXPECT_NE(All(Make(1000, mode, 7, 1)), All(Make(1000, mode, 8, 0)));
  }
}

TEST(IndexPermutationTest, FullShuffleMovesAlmostEverything) {
  const std::vector<int64_t> v = All(Make(10000, proto::SHUFFLE_FULL, 1, 0));
  int fixed = 0;
  int64_t ascending = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == static_cast<int64_t>(i)) ++fixed;
    if (i > 0 && v[i] > v[i - 1]) ++ascending;
  }
  // A random permutation has about 1 fixed point and about half its neighbours ascending.
  EXPECT_LT(fixed, 20);
  EXPECT_GT(ascending, 4500);
  EXPECT_LT(ascending, 5500);
}

// Every block is visited as one contiguous run of output positions holding exactly its
// records, the last (partial) block included, and the blocks' order is shuffled.
TEST(IndexPermutationTest, BlockModeKeepsBlocksContiguous) {
  for (int64_t n : {int64_t{1000}, int64_t{1024}, int64_t{1}, int64_t{63}, int64_t{65}}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const int64_t b = 64;
    const IndexPermutation p = Make(n, proto::SHUFFLE_BLOCK, 5, 2, b);
    std::vector<int64_t> block_order;
    std::set<int64_t> current;
    int64_t current_block = -1;
    auto close_run = [&] {
      if (current_block < 0) return;
      const int64_t first = current_block * b;
      const int64_t size = std::min(b, n - first);
      ASSERT_EQ(static_cast<int64_t>(current.size()), size) << "block " << current_block;
      EXPECT_EQ(*current.begin(), first);
      EXPECT_EQ(*current.rbegin(), first + size - 1);
    };
    for (int64_t i = 0; i < n; ++i) {
      const int64_t block = p(i) / b;
      if (block != current_block) {
        close_run();
        current.clear();
        current_block = block;
        block_order.push_back(block);
      }
      current.insert(p(i));
    }
    close_run();
    const int64_t num_blocks = (n + b - 1) / b;
    ASSERT_EQ(static_cast<int64_t>(block_order.size()), num_blocks) << "a block visited twice";
    EXPECT_EQ(std::set<int64_t>(block_order.begin(), block_order.end()).size(),
              static_cast<size_t>(num_blocks));
    if (num_blocks >= 10) {
      std::vector<int64_t> sorted = block_order;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_NE(block_order, sorted) << "blocks visited in record order";
    }
  }
}

TEST(IndexPermutationTest, BlockModeShufflesWithinBlocks) {
  const IndexPermutation p = Make(4096, proto::SHUFFLE_BLOCK, 5, 0, 1024);
  std::vector<int64_t> first_block;
  for (int64_t i = 0; i < 1024; ++i) first_block.push_back(p(i) % 1024);
  std::vector<int64_t> sorted = first_block;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(first_block, sorted);
}

TEST(IndexPermutationTest, BlockOfOneIsABlockOrderOnly) {
  // Every block holds one record: a full shuffle of the positions, still a bijection.
  const IndexPermutation p = Make(500, proto::SHUFFLE_BLOCK, 3, 0, 1);
  ExpectBijection(p);
  int fixed = 0;
  for (int64_t i = 0; i < 500; ++i) fixed += p(i) == i ? 1 : 0;
  EXPECT_LT(fixed, 20);
}

TEST(IndexPermutationTest, HugeSizesStayInRange) {
  const int64_t n = (int64_t{1} << 62) + 12345;
  const IndexPermutation p = Make(n, proto::SHUFFLE_FULL, 77, 0);
  std::set<int64_t> values;
  for (int64_t i : {int64_t{0}, int64_t{1}, n / 2, n - 1}) {
    const int64_t v = p(i);
    EXPECT_GE(v, 0);
    EXPECT_LT(v, n);
    values.insert(v);
  }
  EXPECT_EQ(values.size(), 4u);
  const IndexPermutation q = Make(n, proto::SHUFFLE_BLOCK, 77, 0, 1 << 20);
  EXPECT_LT(q(n - 1), n);
  EXPECT_GE(q(n - 1), 0);
}

TEST(IndexPermutationTest, FeistelInverseUndoesForward) {
  using index_permutation_internal::FeistelPermutation;
  for (uint64_t n : {uint64_t{2}, uint64_t{5}, uint64_t{17}, uint64_t{1000}}) {
    const FeistelPermutation f(n, 0x1234);
    for (uint64_t x = 0; x < n; ++x) EXPECT_EQ(f.Inverse(f.Forward(x)), x);
  }
}

TEST(IndexPermutationTest, BadArguments) {
  EXPECT_EQ(IndexPermutation::Create(-1, proto::SHUFFLE_FULL, 0, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IndexPermutation::Create(10, proto::SHUFFLE_BLOCK, 0, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IndexPermutation::Create(10, static_cast<proto::ShuffleMode>(9), 0, 0, 1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IndexPermutation::Create(10, proto::SHUFFLE_FULL, 0, -1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // block_size only matters to SHUFFLE_BLOCK.
  EXPECT_TRUE(IndexPermutation::Create(10, proto::SHUFFLE_FULL, 0, 0, 0).ok());
}

// Pinned values: the order of every seeded job. If this test fails, the algorithm changed;
// that changes the data every existing seed yields, so do it only on purpose (and say so in
// docs/PIPELINES.md).
TEST(IndexPermutationTest, GoldenValues) {
  const IndexPermutation full = Make(1000, proto::SHUFFLE_FULL, 42, 0);
  const IndexPermutation full_e1 = Make(1000, proto::SHUFFLE_FULL, 42, 1);
  const IndexPermutation block = Make(1000, proto::SHUFFLE_BLOCK, 42, 0, 64);
  const IndexPermutation big = Make((int64_t{1} << 40) + 7, proto::SHUFFLE_FULL, 1, 5);
  std::vector<int64_t> got;
  for (int64_t i : {0, 1, 2, 500, 999}) got.push_back(full(i));
  for (int64_t i : {0, 1, 2, 500, 999}) got.push_back(full_e1(i));
  for (int64_t i : {0, 1, 2, 500, 999}) got.push_back(block(i));
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{1} << 39}) got.push_back(big(i));
  // Also what a direct Python transcription of the algorithm in core/util/index_permutation.h gives.
  const std::vector<int64_t> want = {830, 127, 449, 533, 793,          // full, epoch 0
                                     51, 884, 205, 905, 18,            // full, epoch 1
                                     358, 353, 351, 267, 158,          // block of 64
                                     521146643702, 894646961770, 356883022788};  // 2^40 + 7
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace sluice
