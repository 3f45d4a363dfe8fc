// Cooperative cancellation of a running pipeline (core/data/cancellation.h): a GetNext stuck in
// a long loop (filter's scan, shuffle's fill), also behind a prefetch or a parallel map, returns
// CANCELLED once the token is cancelled, and the work stops: the source hands out at most one
// element per thread pulling it after Cancel() returned (each op checks before each pull).
//
// No wall-clock bound is asserted: the pipelines below never end on their own (a range of 10^12
// elements that a filter rejects one by one), so without cancellation GetNext does not return at
// all, and the generous kHang (in which the pipeline pulls millions of elements) turns that into
// a failure instead of a hung test.
#include "core/data/cancellation.h"

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/data/executor.h"
#include "core/data/iterator.h"
#include "core/data/op_profile.h"
#include "core/data/ops/prefetch_iterator.h"
#include "core/util/thread_pool.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/core/scoped_process_limits.h"

namespace sluice {
namespace {

// How long a step may take to notice the cancellation before the test calls it a hang: the
// pipelines check once per element (microseconds), so this is generous by orders of magnitude
// even on a loaded machine.
constexpr absl::Duration kHang = absl::Seconds(120);
// Elements the source hands out before the test cancels: the pipeline is then mid-loop.
constexpr int64_t kPulledBeforeCancel = 20000;

// Element by element, so that the source's count is the elements pulled (a block would hand
// out thousands at once).
class CancellationTest : public ::testing::Test {
 protected:
  void SetUp() override { SetBulkPathsEnabled(false); }
  void TearDown() override { SetBulkPathsEnabled(true); }
};

int64_t SourceElements(const OpProfile& profile) {
  for (const OpProfile::OpStats& s : profile.Snapshot()) {
    if (s.position == 0) return s.elements;
  }
  return 0;
}

struct CancelOutcome {
  absl::Status status;               // what the cancelled GetNext returned
  int64_t pulled_after_cancel = 0;   // source elements handed out after Cancel() returned
  int64_t pulled_after_return = 0;   // ... and after GetNext returned, the iterator destroyed
};

// Runs GetNext of `expression` on a thread, cancels once the source has handed out
// kPulledBeforeCancel elements, and reports. Aborts the test binary when GetNext never returns
// (a hang is the bug this catches; the thread cannot be stopped otherwise).
CancelOutcome RunAndCancel(const std::string& expression) {
  CancelOutcome out;
  absl::StatusOr<Dataset> dataset = Dataset::Parse(expression);
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  if (!dataset.ok()) return out;
  auto profile = std::make_shared<OpProfile>();
  auto token = std::make_shared<CancellationToken>();
  ExecutorOptions options;
  options.profile = profile;
  options.cancellation = token;
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*dataset, options);
  EXPECT_TRUE(it.ok()) << it.status();
  if (!it.ok()) return out;

  absl::Notification returned;
  absl::Status status;
  std::thread consumer([&] {
    Element e;
    bool end = false;
    status = (*it)->GetNext(&e, &end);
    returned.Notify();
  });
  const absl::Time give_up = absl::Now() + kHang;
  while (SourceElements(*profile) < kPulledBeforeCancel && absl::Now() < give_up &&
         !returned.HasBeenNotified()) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_GE(SourceElements(*profile), kPulledBeforeCancel) << "the pipeline never got going";
  token->Cancel("the test stopped it");
  const int64_t at_cancel = SourceElements(*profile);
  if (!returned.WaitForNotificationWithTimeout(kHang)) {
    std::cerr << "FATAL: GetNext of " << expression << " did not return within "
              << absl::FormatDuration(kHang) << " of Cancel(); source elements: "
              << SourceElements(*profile) << std::endl;
    std::abort();
  }
  consumer.join();
  out.status = status;
  out.pulled_after_cancel = SourceElements(*profile) - at_cancel;
  it->reset();  // waits for pool threads still in a pull
  out.pulled_after_return = SourceElements(*profile) - at_cancel;
  std::cout << expression << ": " << status << "; pulled after cancel: "
            << out.pulled_after_return << std::endl;
  return out;
}

void ExpectCancelled(const CancelOutcome& o) {
  EXPECT_EQ(o.status.code(), absl::StatusCode::kCancelled) << o.status;
  EXPECT_TRUE(absl::StrContains(o.status.message(), "cancelled: the test stopped it")) << o.status;
}

TEST_F(CancellationTest, FilterScanStopsWithinOnePull) {
  const CancelOutcome o = RunAndCancel("range(1000000000000).filter(less(0))");
  ExpectCancelled(o);
  // The one pull that had passed its check when the flag was set, at most.
  EXPECT_LE(o.pulled_after_return, 1);
}

TEST_F(CancellationTest, ShuffleFillStopsWithinOnePull) {
  // Cancelled long before the budget would refuse the buffer (kept small here so that a
  // failure to cancel ends in RESOURCE_EXHAUSTED, not in the machine's memory).
  ScopedProcessLimits limits({.process_bytes = int64_t{512} << 20, .element_bytes = 64 << 20});
  const CancelOutcome o = RunAndCancel("range(1000000000000).shuffle(1000000000, seed=3)");
  ExpectCancelled(o);
  EXPECT_LE(o.pulled_after_return, 1);
}

TEST_F(CancellationTest, PrefetchWaitingForItsPoolThreadReturnsAndTheThreadStops) {
  // The scan runs on the pool's thread; the consumer waits in prefetch.
  const CancelOutcome o = RunAndCancel("range(1000000000000).filter(less(0)).prefetch(2)");
  ExpectCancelled(o);
  EXPECT_LE(o.pulled_after_return, 1);
}

TEST_F(CancellationTest, ParallelMapWaitingForItsWorkersReturnsAndTheyStop) {
  // The filter pulls from a parallel map whose pool jobs and consumer pull the source.
  const CancelOutcome o = RunAndCancel(
      "range(1000000000000).map(cast(tf.float32), num_parallel_calls=4).filter(less(-1.0))");
  ExpectCancelled(o);
  // One pull per thread pulling the source: the map's 4 jobs and its consumer.
  EXPECT_LE(o.pulled_after_return, 5);
}

// An input whose first element comes at once and whose second GetNext blocks until released:
// an element that takes long to compute (a slow map fn, a slow read), which no check inside the
// pipeline can interrupt.
class BlockingInput : public Iterator {
 public:
  absl::Status GetNext(Element* out, bool* end_of_sequence) override {
    if (calls_++ > 0) {
      if (!entered_.HasBeenNotified()) entered_.Notify();  // the read-ahead calls again later
      release_.WaitForNotification();
    }
    *out = Element::Leaf(Tensor::Scalar<int64_t>(1));
    *end_of_sequence = false;
    return absl::OkStatus();
  }
  absl::Notification& entered() { return entered_; }
  absl::Notification& release() { return release_; }

 private:
  int calls_ = 0;  // one caller at a time (Iterator)
  absl::Notification entered_;
  absl::Notification release_;
};

TEST_F(CancellationTest, PrefetchReturnsWithoutWaitingForTheElementInProgress) {
  auto token = std::make_shared<CancellationToken>();
  auto input = std::make_unique<BlockingInput>();
  BlockingInput* blocking = input.get();
  const std::unique_ptr<ThreadPool> started = ThreadPool::Create(1, "a test pool").value();
  ThreadPool& pool = *started;
  {
    PrefetchIterator it(std::move(input), 2, "op 1 (prefetch)", &pool, token);
    {
      Element e;
      bool end = false;
      ASSERT_TRUE(it.GetNext(&e, &end).ok());
    }
    // Taking the first element scheduled the read-ahead: the pool's thread is now inside the
    // input's second GetNext (nobody else calls it), so the consumer below waits for it.
    ASSERT_TRUE(blocking->entered().WaitForNotificationWithTimeout(kHang));
    absl::Notification returned;
    absl::Status status;
    std::thread consumer([&] {
      Element e;
      bool end = false;
      status = it.GetNext(&e, &end);
      returned.Notify();
    });
    token->Cancel("the test stopped it");
    const bool in_time = returned.WaitForNotificationWithTimeout(kHang);
    // The input is still blocked: GetNext returned without its element.
    EXPECT_FALSE(blocking->release().HasBeenNotified());
    blocking->release().Notify();
    consumer.join();
    ASSERT_TRUE(in_time);
    EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  }
}

TEST_F(CancellationTest, RepeatOfAnEmptyInputStops) {
  // repeat() of an empty dataset loops over fresh empty epochs without handing anything out.
  absl::StatusOr<Dataset> dataset = Dataset::Parse("range(0).repeat()");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  auto token = std::make_shared<CancellationToken>();
  ExecutorOptions options;
  options.cancellation = token;
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*dataset, options);
  ASSERT_TRUE(it.ok()) << it.status();
  token->Cancel("stopped before the first pull");
  Element e;
  bool end = false;
  const absl::Status s = (*it)->GetNext(&e, &end);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
}

TEST(CancellationTokenTest, WakeUpsRunOnceAndNotAfterUnregister) {
  CancellationToken token;
  EXPECT_TRUE(token.Check("op 1 (map)").ok());
  int woken = 0;
  int gone = 0;
  const int64_t id = token.OnCancel([&] { ++woken; });
  const int64_t removed = token.OnCancel([&] { ++gone; });
  token.Unregister(removed);
  token.Cancel("first");
  token.Cancel("second");
  EXPECT_EQ(woken, 1);
  EXPECT_EQ(gone, 0);
  token.Unregister(id);
  int late = 0;
  token.OnCancel([&] { ++late; });  // already cancelled: at once
  EXPECT_EQ(late, 1);
  const absl::Status s = token.Check("op 1 (map)");
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(s.message(), "op 1 (map): cancelled: first");
}

}  // namespace
}  // namespace sluice
