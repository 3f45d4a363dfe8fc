// StepIterator groups per-replica pieces into steps and completes the last partial step with
// TF's size-0 dummies.
#include "core/data/step_iterator.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "sluice/dataset.h"
#include "core/data/executor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/iterator_test_util.h"

namespace sluice {
namespace {

using ::sluice::testing_util::ScalarElements;
using ::sluice::testing_util::Values;
using ::sluice::testing_util::VectorIterator;

const ElementSpec kInt64Vector = ElementSpec(TensorSpec{DType::kInt64, Shape({kUnknownDim})});

struct Step {
  std::vector<std::vector<int64_t>> pieces;
  int64_t num_real;
};

// All steps, at most `limit` of them.
std::vector<Step> AllSteps(StepIterator* it, int limit = 100) {
  std::vector<Step> steps;
  for (int i = 0; i < limit; ++i) {
    std::vector<Element> step;
    int64_t num_real = -1;
    bool end = false;
    absl::Status s = it->GetNextStep(&step, &num_real, &end);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok() || end) break;
    Step out{{}, num_real};
    for (const Element& e : step) out.pieces.push_back(Values(e.leaf()));
    steps.push_back(out);
  }
  return steps;
}

std::unique_ptr<Iterator> Pieces(const Dataset& ds) {
  auto it = MakeIterator(ds);
  EXPECT_TRUE(it.ok()) << it.status();
  return *std::move(it);
}

TEST(StepIteratorTest, LastPartialStepIsCompletedWithDummies) {
  StepIterator it(Pieces(Dataset::Range(10).Batch(4).Rebatch({2, 2})), 2, kInt64Vector);
  std::vector<Step> steps = AllSteps(&it);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].pieces, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(steps[1].pieces, (std::vector<std::vector<int64_t>>{{4, 5}, {6, 7}}));
  EXPECT_EQ(steps[2].pieces, (std::vector<std::vector<int64_t>>{{8, 9}, {}}));
  EXPECT_EQ(steps[0].num_real, 2);
  EXPECT_EQ(steps[2].num_real, 1);
}

TEST(StepIteratorTest, DummyHasShapeZeroAndTheSpecsDtype) {
  StepIterator it(Pieces(Dataset::Range(10).Batch(4).Rebatch({2, 2})), 2, kInt64Vector);
  std::vector<Element> step;
  int64_t num_real = 0;
  bool end = false;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(it.GetNextStep(&step, &num_real, &end).ok());
  ASSERT_FALSE(end);
  ASSERT_EQ(step.size(), 2u);
  EXPECT_EQ(step[1].leaf().shape(), Shape({0}));
  EXPECT_EQ(step[1].leaf().dtype(), DType::kInt64);
  ASSERT_TRUE(it.GetNextStep(&step, &num_real, &end).ok());
  EXPECT_TRUE(end);
  ASSERT_TRUE(it.GetNextStep(&step, &num_real, &end).ok());
  EXPECT_TRUE(end);
}

TEST(StepIteratorTest, ExactMultipleHasNoDummyStep) {
  StepIterator it(Pieces(Dataset::Range(8).Batch(4).Rebatch({2, 2})), 2, kInt64Vector);
  std::vector<Step> steps = AllSteps(&it);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[1].num_real, 2);
}

TEST(StepIteratorTest, EmptyInputEndsAtOnce) {
  StepIterator it(Pieces(Dataset::Range(0).Batch(4).Rebatch({2, 2})), 2, kInt64Vector);
  EXPECT_TRUE(AllSteps(&it).empty());
}

TEST(StepIteratorTest, ManyReplicasWithFewPieces) {
  // 3 pieces over 4 replicas: one step, one dummy.
  StepIterator it(Pieces(Dataset::Range(3).Batch(3).Rebatch({1})), 4, kInt64Vector);
  std::vector<Step> steps = AllSteps(&it);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].pieces, (std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {}}));
  EXPECT_EQ(steps[0].num_real, 3);
}

TEST(StepIteratorTest, ErrorsPropagateAndRepeat) {
  auto pieces = std::make_unique<VectorIterator>(ScalarElements({1, 2, 3}),
                                                 absl::DataLossError("corrupt record"));
  StepIterator it(std::move(pieces), 2, ElementSpec(TensorSpec{DType::kInt64, Shape()}));
  std::vector<Element> step;
  int64_t num_real = 0;
  bool end = false;
  ASSERT_TRUE(it.GetNextStep(&step, &num_real, &end).ok());
  absl::Status s = it.GetNextStep(&step, &num_real, &end);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(it.GetNextStep(&step, &num_real, &end), s);
}

TEST(DummyElementTest, UnknownDimsBecomeZeroKnownOnesStay) {
  ElementSpec spec = ElementSpec::Dict(
      {{"x", ElementSpec(TensorSpec{DType::kFloat32, Shape({kUnknownDim, 3})})},
       {"y", ElementSpec::Tuple({ElementSpec(TensorSpec{DType::kString, Shape({kUnknownDim})}),
                                 ElementSpec(TensorSpec{DType::kInt32, Shape()})})}});
  Element d = DummyElement(spec);
  ASSERT_EQ(d.kind(), NestKind::kDict);
  EXPECT_EQ(d.keys(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(d.children()[0].leaf().shape(), Shape({0, 3}));
  EXPECT_EQ(d.children()[0].leaf().dtype(), DType::kFloat32);
  EXPECT_EQ(d.children()[1].children()[0].leaf().shape(), Shape({0}));
  EXPECT_EQ(d.children()[1].children()[0].leaf().dtype(), DType::kString);
  EXPECT_EQ(d.children()[1].children()[1].leaf().shape(), Shape());
}

TEST(KeepShardedStepTest, DataShardingResumedAtSkipSteps) {
  // No resume: s % K == k.
  std::vector<int64_t> kept;
  for (int64_t s = 0; s < 9; ++s) {
    if (KeepShardedStep(s, 0, 3, 1)) kept.push_back(s);
  }
  EXPECT_EQ(kept, (std::vector<int64_t>{1, 4, 7}));
  // Resumed at step 5 with 2 tasks: task 0 takes 5, 7, 9; task 1 takes 6, 8; nothing before 5.
  std::vector<int64_t> t0, t1;
  for (int64_t s = 0; s < 10; ++s) {
    if (KeepShardedStep(s, 5, 2, 0)) t0.push_back(s);
    if (KeepShardedStep(s, 5, 2, 1)) t1.push_back(s);
  }
  EXPECT_EQ(t0, (std::vector<int64_t>{5, 7, 9}));
  EXPECT_EQ(t1, (std::vector<int64_t>{6, 8}));
  // Every step from skip_steps on goes to exactly one task, for any K.
  for (int64_t k = 1; k <= 4; ++k) {
    for (int64_t s = 0; s < 20; ++s) {
      int owners = 0;
      for (int64_t i = 0; i < k; ++i) owners += KeepShardedStep(s, 3, k, i) ? 1 : 0;
      EXPECT_EQ(owners, s >= 3 ? 1 : 0) << "step " << s << " K " << k;
    }
  }
}

}  // namespace
}  // namespace sluice
