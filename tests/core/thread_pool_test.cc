// The shared thread pool (core/util/thread_pool.h) and what it is for: parallel maps of many
// pipelines at once start no threads of their own.
#include "core/util/thread_pool.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/data/executor.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/core/thread_count.h"

namespace sluice {
namespace {

TEST(ThreadPoolTest, RunsEveryClosureAndTheDestructorFinishesTheQueue) {
  std::atomic<int> ran{0};
  {
    const std::unique_ptr<ThreadPool> started = ThreadPool::Create(3, "a test pool").value();
    ThreadPool& pool = *started;
    EXPECT_EQ(pool.num_threads(), 3);
    for (int i = 0; i < 1000; ++i) pool.Schedule([&ran] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 1000);
}

TEST(ThreadPoolTest, ClosuresRunConcurrently) {
  // Declared before the pool so that they outlive its threads: the first closure can still be
  // inside second_ran.WaitForNotification() (woken, not yet returned) when this thread's wait
  // returns, and destroying second_ran then would race with it (found by TSan).
  absl::Notification first_started, second_ran;
  const std::unique_ptr<ThreadPool> started = ThreadPool::Create(2, "a test pool").value();
  ThreadPool& pool = *started;
  // The first closure waits for the second: with one thread this would never finish.
  pool.Schedule([&] {
    first_started.Notify();
    second_ran.WaitForNotification();
  });
  first_started.WaitForNotification();
  pool.Schedule([&] { second_ran.Notify(); });
  second_ran.WaitForNotification();
}

TEST(ThreadPoolTest, ProcessPoolSizeIsCheckedAndFixedOnceRunning) {
  EXPECT_EQ(SetProcessThreadPoolSize(0).code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<ThreadPool*> pool = ProcessThreadPool();
  ASSERT_TRUE(pool.ok()) << pool.status();
  const int size = (*pool)->num_threads();
  EXPECT_EQ(size, ProcessThreadPoolSize());
  EXPECT_TRUE(SetProcessThreadPoolSize(size).ok());
  EXPECT_EQ(SetProcessThreadPoolSize(size + 1).code(), absl::StatusCode::kFailedPrecondition);
}

// Many pipelines with AUTOTUNE maps, all open at once and each part-way through: the threads
// stay those of the one pool (the old parallel map started `cores` threads per map).
TEST(ThreadPoolTest, ManyParallelMapsShareThePoolsThreads) {
  ThreadPool& pool = *ProcessThreadPool().value();  // started before counting
  const int before = ThreadCount();
  ASSERT_GT(before, 0);
  absl::StatusOr<Dataset> ds = Dataset::Parse(
      "range(100000).map(cast(tf.float32), num_parallel_calls=AUTOTUNE)"
      ".map(cast(tf.int32), num_parallel_calls=4, deterministic=False)");
  ASSERT_TRUE(ds.ok()) << ds.status();
  ExecutorOptions options;
  options.autotune_parallel_calls = 8;  // more than the pool: the pool still bounds the threads
  std::vector<std::unique_ptr<Iterator>> iterators;
  int most = before;
  int64_t sum = 0;  // of the first pipeline's elements
  int64_t count = 0;
  for (int i = 0; i < 40; ++i) {
    absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds, options);
    ASSERT_TRUE(it.ok()) << it.status();
    iterators.push_back(*std::move(it));
    for (size_t k = 0; k < iterators.size(); ++k) {
      Element e;
      bool end = false;
      ASSERT_TRUE(iterators[k]->GetNext(&e, &end).ok());
      ASSERT_FALSE(end);
      if (k == 0) {
        sum += e.leaf().data<int32_t>()[0];
        ++count;
      }
    }
    most = std::max(most, ThreadCount());
  }
  EXPECT_LE(most, before) << "the pool has " << pool.num_threads() << " threads";
  // The first pipeline still yields every element once (the second map is not deterministic:
  // compare the count and the sum).
  while (true) {
    Element e;
    bool end = false;
    ASSERT_TRUE(iterators[0]->GetNext(&e, &end).ok());
    if (end) break;
    sum += e.leaf().data<int32_t>()[0];
    ++count;
  }
  EXPECT_EQ(count, 100000);
  EXPECT_EQ(sum, int64_t{100000} * 99999 / 2);
}

}  // namespace
}  // namespace sluice
