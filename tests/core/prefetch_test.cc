// prefetch(): order, error propagation, the queue bound and prompt shutdown.
#include "core/data/ops/prefetch_iterator.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "sluice/dataset.h"
#include "core/data/executor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/iterator_test_util.h"

namespace sluice {
namespace {

using ::sluice::testing_util::Drain;
using ::sluice::testing_util::Iota;
using ::sluice::testing_util::RunDataset;
using ::sluice::testing_util::ScalarElements;
using ::sluice::testing_util::Scalars;
using ::sluice::testing_util::VectorIterator;

TEST(PrefetchTest, PreservesOrder) {
  auto out = RunDataset(Dataset::Range(2000).Prefetch(3));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Scalars(*out), Iota(2000));
}

TEST(PrefetchTest, AutotuneAndZeroAndNestedPrefetches) {
  ExecutorOptions options;
  options.autotune_prefetch_elements = 2;
  auto out = RunDataset(Dataset::Range(100).Prefetch(-1).Batch(7).Prefetch(1).Unbatch().Prefetch(0),
                 100000, options);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Scalars(*out), Iota(100));
}

TEST(PrefetchTest, ErrorComesAfterTheElementsBeforeItAndRepeats) {
  PrefetchIterator it(std::make_unique<VectorIterator>(ScalarElements({1, 2, 3}),
                                                       absl::NotFoundError("gone")),
                      2);
  auto out = Drain(&it);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kNotFound);
  // Drain stopped at the error; the elements before it came out first, in order.
  PrefetchIterator again(std::make_unique<VectorIterator>(ScalarElements({1, 2, 3}),
                                                          absl::NotFoundError("gone")),
                         2);
  for (int64_t v : {1, 2, 3}) {
    Element e;
    bool end = true;
    ASSERT_TRUE(again.GetNext(&e, &end).ok());
    ASSERT_FALSE(end);
    EXPECT_EQ(e.leaf().data<int64_t>()[0], v);
  }
  Element e;
  bool end = false;
  absl::Status s = again.GetNext(&e, &end);
  EXPECT_EQ(s, absl::NotFoundError("gone"));
  EXPECT_EQ(again.GetNext(&e, &end), s);
}

TEST(PrefetchTest, ErrorsFromTheExecutorNameTheFailingOp) {
  auto out = RunDataset(Dataset::TextLine({"/nonexistent/sluice/x.txt"}).Prefetch(4));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(out.status().message(), ::testing::HasSubstr("source (text_line_dataset)"));
}

TEST(PrefetchTest, EndOfSequenceRepeats) {
  PrefetchIterator it(std::make_unique<VectorIterator>(ScalarElements({})), 4);
  for (int i = 0; i < 3; ++i) {
    Element e;
    bool end = false;
    ASSERT_TRUE(it.GetNext(&e, &end).ok());
    EXPECT_TRUE(end);
  }
}

TEST(PrefetchTest, NeverHoldsMoreThanBufferSizeUnconsumedElements) {
  const int64_t n = 3;
  auto input = std::make_unique<VectorIterator>(ScalarElements(Iota(200)));
  VectorIterator* counter = input.get();
  PrefetchIterator it(std::move(input), n);
  for (int64_t consumed = 1; consumed <= 50; ++consumed) {
    Element e;
    bool end = true;
    ASSERT_TRUE(it.GetNext(&e, &end).ok());
    ASSERT_FALSE(end);
    EXPECT_LE(counter->produced() - consumed, n);
  }
  // Give the producer time to fill the queue; it must stop at n ahead.
  for (int i = 0; i < 2000 && counter->produced() < 50 + n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(counter->produced(), 50 + n);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(counter->produced(), 50 + n);
  EXPECT_EQ(it.max_queued(), n);
}

TEST(PrefetchTest, DestroyMidStreamWhileTheProducerWaitsOnAFullQueue) {
  for (int64_t n : {1, 4}) {
    auto it = MakeIterator(Dataset::Range(10).Repeat().Prefetch(n).Batch(2).Prefetch(n));
    ASSERT_TRUE(it.ok());
    Element e;
    bool end = false;
    ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
    ASSERT_FALSE(end);
    // Let both producers fill their queues and block.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    it->reset();  // must return: the test hangs (and times out) otherwise
  }
}

TEST(PrefetchTest, DestroyBeforeFirstUseAndRightAfterStart) {
  { PrefetchIterator unused(std::make_unique<VectorIterator>(ScalarElements({1})), 2); }
  for (int i = 0; i < 50; ++i) {
    auto it = MakeIterator(Dataset::Range(1000000).Prefetch(8));
    ASSERT_TRUE(it.ok());
    Element e;
    bool end = false;
    ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
  }
}

// An input whose GetNext blocks until released: the destructor must wait for that call only.
class GatedIterator : public Iterator {
 public:
  explicit GatedIterator(absl::Notification* release) : release_(release) {}
  absl::Status GetNext(Element* out, bool* end_of_sequence) override {
    entered_.store(true);
    release_->WaitForNotification();
    *out = Element(Tensor::Scalar<int64_t>(0));
    *end_of_sequence = false;
    return absl::OkStatus();
  }
  std::atomic<bool> entered_{false};

 private:
  absl::Notification* release_;
};

TEST(PrefetchTest, DestructorWaitsOnlyForTheInputCallInProgress) {
  absl::Notification release;
  auto input = std::make_unique<GatedIterator>(&release);
  GatedIterator* gated = input.get();
  auto it = std::make_unique<PrefetchIterator>(std::move(input), 2);
  std::thread consumer([&] {
    Element e;
    bool end = false;
    EXPECT_TRUE(it->GetNext(&e, &end).ok());
  });
  for (int i = 0; i < 2000 && !gated->entered_.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(gated->entered_.load());
  release.Notify();
  consumer.join();
  it.reset();
}

}  // namespace
}  // namespace sluice
