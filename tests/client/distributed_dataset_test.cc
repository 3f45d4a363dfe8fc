#include "sluice/distributed_dataset.h"

#include <memory>
#include <vector>

#include "distribute_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;

// Yields `steps` steps of two replicas holding the step number, then either the end of data or
// `error`. Counts its calls in *calls.
class FakeSource : public StepSource {
 public:
  FakeSource(int steps, absl::Status error, int* calls)
      : steps_(steps), error_(std::move(error)), calls_(calls) {}
  absl::Status GetNextStep(std::vector<Element>* replicas, bool* end_of_data) override {
    ++*calls_;
    if (next_ == steps_) {
      if (!error_.ok()) return error_;
      *end_of_data = true;
      return absl::OkStatus();
    }
    replicas->clear();
    for (int r = 0; r < 2; ++r) replicas->push_back(Element(Tensor::Scalar<int64_t>(next_)));
    ++next_;
    *end_of_data = false;
    return absl::OkStatus();
  }

 private:
  int steps_;
  absl::Status error_;
  int* calls_;
  int next_ = 0;
};

DistributedElementSpec Spec() {
  TensorSpec s{DType::kInt64, Shape()};
  return DistributedElementSpec(PerReplicaSpec{{s, s}});
}

DistributedDataset Fake(int steps, absl::Status error, int* calls, int* made) {
  return DistributedDataset(Spec(), [=]() -> absl::StatusOr<std::unique_ptr<StepSource>> {
    ++*made;
    return std::unique_ptr<StepSource>(new FakeSource(steps, error, calls));
  });
}

TEST(DistributedIteratorTest, EndOfSequenceIsOutOfRangeAndRepeats) {
  int calls = 0, made = 0;
  DistributedDataset ds = Fake(2, absl::OkStatus(), &calls, &made);
  absl::StatusOr<DistributedIterator> it = ds.MakeIterator();
  ASSERT_TRUE(it.ok());
  EXPECT_TRUE(testing::SpecEquals(it->element_spec(), ds.element_spec()));
  for (int64_t s = 0; s < 2; ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    ASSERT_TRUE(x.ok());
    ASSERT_EQ(x->num_replicas(), 2u);
    EXPECT_EQ((*x)[1].leaf().data<int64_t>()[0], s);
  }
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    EXPECT_EQ(x.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(x.status().message(), "End of sequence");
  }
  EXPECT_EQ(calls, 3);  // the source is not asked again after its end
}

TEST(DistributedIteratorTest, GetNextAsOptional) {
  int calls = 0, made = 0;
  DistributedDataset ds = Fake(1, absl::OkStatus(), &calls, &made);
  absl::StatusOr<DistributedIterator> it = ds.MakeIterator();
  ASSERT_TRUE(it.ok());
  absl::StatusOr<std::optional<PerReplica<Element>>> a = it->GetNextAsOptional();
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->has_value());
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::optional<PerReplica<Element>>> b = it->GetNextAsOptional();
    ASSERT_TRUE(b.ok());
    EXPECT_FALSE(b->has_value());
  }
  EXPECT_TRUE(absl::IsOutOfRange(it->GetNext().status()));
}

TEST(DistributedIteratorTest, ErrorsPassThrough) {
  int calls = 0, made = 0;
  DistributedDataset ds = Fake(1, absl::NotFoundError("missing.txt"), &calls, &made);
  absl::StatusOr<DistributedIterator> it = ds.MakeIterator();
  ASSERT_TRUE(it.ok());
  ASSERT_TRUE(it->GetNext().ok());
  EXPECT_EQ(it->GetNext().status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(it->GetNextAsOptional().status().code(), absl::StatusCode::kNotFound);
}

TEST(DistributedDatasetTest, EachIteratorIsANewPass) {
  int calls = 0, made = 0;
  DistributedDataset ds = Fake(3, absl::OkStatus(), &calls, &made);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<int64_t> seen;
    for (const PerReplica<Element>& x : ds) seen.push_back(x[0].leaf().data<int64_t>()[0]);
    EXPECT_THAT(seen, ElementsAre(0, 1, 2));
    EXPECT_TRUE(ds.iteration_status().ok());
  }
  EXPECT_EQ(made, 2);
}

TEST(DistributedDatasetTest, RangeForStopsAtAnErrorAndReportsIt) {
  int calls = 0, made = 0;
  DistributedDataset ds = Fake(2, absl::DataLossError("corrupt record"), &calls, &made);
  int steps = 0;
  for (const PerReplica<Element>& x : ds) {
    EXPECT_EQ(x.num_replicas(), 2u);
    ++steps;
  }
  EXPECT_EQ(steps, 2);
  EXPECT_EQ(ds.iteration_status().code(), absl::StatusCode::kDataLoss);
  // A factory that fails: no iteration, its error reported.
  DistributedDataset broken(Spec(), []() -> absl::StatusOr<std::unique_ptr<StepSource>> {
    return absl::UnavailableError("no worker");
  });
  for (const PerReplica<Element>& x : broken) {
    ADD_FAILURE() << "unexpected step with " << x.num_replicas() << " replicas";
  }
  EXPECT_EQ(broken.iteration_status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(broken.MakeIterator().status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace sluice
