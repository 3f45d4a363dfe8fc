// StartThread (core/util/start_thread.h): a thread the system refuses is RESOURCE_EXHAUSTED
// naming what it was for, never a std::system_error; a pool whose threads cannot all start is
// not made, and the process's pool is tried again at the next call.
#include "core/util/start_thread.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "core/util/thread_pool.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(StartThreadTest, StartsAThreadOrSaysWhatCouldNotStart) {
  std::atomic<bool> ran{false};
  absl::StatusOr<std::thread> t = StartThread("a test thread", [&] { ran = true; });
  ASSERT_TRUE(t.ok()) << t.status();
  t->join();
  EXPECT_TRUE(ran);

  TEST_FailThreadStarts(1, "the sender");
  absl::StatusOr<std::thread> other = StartThread("the receiver", [] {});  // not matched
  ASSERT_TRUE(other.ok()) << other.status();
  other->join();
  absl::StatusOr<std::thread> refused = StartThread("the sender of task 3", [&] { ran = false; });
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "cannot start a thread for the sender of task 3: "))
      << refused.status();
  EXPECT_TRUE(ran);  // the refused fn never ran
  EXPECT_EQ(TEST_ThreadStartsLeftToFail(), 0);
  absl::StatusOr<std::thread> again = StartThread("the sender of task 3", [] {});
  ASSERT_TRUE(again.ok()) << again.status();  // one failure was armed
  again->join();
}

TEST(StartThreadTest, APoolWhoseThreadCannotStartIsNotMadeAndJoinsTheOthers) {
  TEST_FailThreadStarts(1, "(thread 3 of 4)");
  absl::StatusOr<std::unique_ptr<ThreadPool>> pool = ThreadPool::Create(4, "a test pool");
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(pool.status().message(), "a test pool (thread 3 of 4)"))
      << pool.status();
  pool = ThreadPool::Create(4, "a test pool");
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->num_threads(), 4);
}

TEST(StartThreadTest, TheProcessPoolIsTriedAgainAfterItCouldNotStart) {
  TEST_FailThreadStarts(1, "the process's thread pool");
  absl::StatusOr<ThreadPool*> pool = ProcessThreadPool();
  if (TEST_ThreadStartsLeftToFail() == 1) {
    TEST_FailThreadStarts(0);
    GTEST_SKIP() << "the process's pool already ran (the tests share a process)";
  }
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kResourceExhausted);
  pool = ProcessThreadPool();
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->num_threads(), ProcessThreadPoolSize());
}

}  // namespace
}  // namespace sluice
