// repeat() rewinding its input at the end of an epoch (Iterator::Rewind) instead of building
// the next epoch's iterator: the same elements, and no iterator built per epoch where the input
// can rewind (from_tensors). Its own binary: quick to build alone.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/data/ops/simple_op_iterators.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/core/iterator_test_util.h"

namespace sluice {
namespace {

using ::sluice::testing_util::Drain;
using ::sluice::testing_util::RunDataset;
using ::sluice::testing_util::ScalarElements;
using ::sluice::testing_util::Scalars;
using ::sluice::testing_util::VectorIterator;
using ::testing::IsEmpty;

std::vector<int64_t> DrainScalars(Iterator* it) {
  absl::StatusOr<std::vector<Element>> out = Drain(it, 1000);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? Scalars(*out) : std::vector<int64_t>{};
}

std::vector<int64_t> RunScalars(const Dataset& ds) {
  absl::StatusOr<std::vector<Element>> out = RunDataset(ds, 1000);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? Scalars(*out) : std::vector<int64_t>{};
}

TEST(RepeatRewindTest, FromTensorsRepeatedGivesItsElementEveryEpoch) {
  const Dataset ds = Dataset::FromTensors(Element(Tensor::Scalar<int64_t>(7)));
  EXPECT_EQ(RunScalars(ds.Repeat(3)), (std::vector<int64_t>{7, 7, 7}));
  EXPECT_THAT(RunScalars(ds.Repeat(0)), IsEmpty());
  EXPECT_EQ(RunScalars(ds.Repeat(1)), (std::vector<int64_t>{7}));
  EXPECT_EQ(RunScalars(ds.Repeat().Take(5)), std::vector<int64_t>(5, 7));
  EXPECT_EQ(RunScalars(ds.Repeat(2).Repeat(3)), std::vector<int64_t>(6, 7));
}

// 0, 1, ..., n - 1, and again after each Rewind (counted in *rewinds).
class RewindableRange : public Iterator {
 public:
  RewindableRange(int64_t n, int* rewinds) : n_(n), rewinds_(rewinds) {}
  absl::Status GetNext(Element* out, bool* end_of_sequence) override {
    *end_of_sequence = next_ >= n_;
    if (!*end_of_sequence) *out = Element(Tensor::Scalar<int64_t>(next_++));
    return absl::OkStatus();
  }
  bool Rewind() override {
    ++*rewinds_;
    next_ = 0;
    return true;
  }

 private:
  const int64_t n_;
  int* const rewinds_;
  int64_t next_ = 0;
};

TEST(RepeatRewindTest, RepeatRewindsAnInputThatCanInsteadOfBuildingOnePerEpoch) {
  int builds = 0;
  int rewinds = 0;
  std::unique_ptr<Iterator> it = NewRepeatIterator(
      "op 1 (repeat)",
      [&]() -> std::unique_ptr<Iterator> {
        ++builds;
        return std::make_unique<RewindableRange>(2, &rewinds);
      },
      3);
  EXPECT_EQ(DrainScalars(it.get()), (std::vector<int64_t>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(rewinds, 2);  // not after the last epoch
}

TEST(RepeatRewindTest, RepeatBuildsAFreshInputPerEpochWhenItCannotRewind) {
  int builds = 0;
  std::unique_ptr<Iterator> it = NewRepeatIterator(
      "op 1 (repeat)",
      [&]() -> std::unique_ptr<Iterator> {
        ++builds;
        return std::make_unique<VectorIterator>(ScalarElements({4, 5}));
      },
      3);
  EXPECT_EQ(DrainScalars(it.get()), (std::vector<int64_t>{4, 5, 4, 5, 4, 5}));
  EXPECT_EQ(builds, 3);
}

}  // namespace
}  // namespace sluice
