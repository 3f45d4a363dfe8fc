// prefetch and parallel interleave run on the process's shared thread pool
// (core/util/thread_pool.h): many pipelines start no thread of their own, and nested parallel
// ops consumed from a pool thread of a one-thread pool (where any wait for work queued behind
// it would never end) still give the in-process order. Behaviour tests: no timing (waits are
// bounded for liveness only).

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/data/executor.h"
#include "core/util/thread_pool.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/core/record_test_util.h"
#include "tests/core/thread_count.h"

namespace sluice {
namespace {

// Three files of 40 int64 records each (values f * 100 + i); their paths.
std::vector<std::string> WriteFiles(const record_test::TempDir& dir) {
  std::vector<std::string> files;
  for (int f = 0; f < 3; ++f) {
    std::string bytes;
    for (int64_t i = 0; i < 40; ++i) {
      const int64_t v = f * 100 + i;
      bytes.append(reinterpret_cast<const char*>(&v), sizeof(v));
    }
    files.push_back(dir.File(absl::StrCat("f", f, ".bin")));
    record_test::WriteWholeFile(files.back(), bytes);
  }
  return files;
}

std::string FileList(const std::vector<std::string>& files) {
  std::string out = "[";
  for (const std::string& f : files) absl::StrAppend(&out, out.size() > 1 ? ", '" : "'", f, "'");
  return out + "]";
}

// Every int64 value of every element, in order.
absl::StatusOr<std::vector<int64_t>> Values(const std::string& expression) {
  auto ds = Dataset::Parse(expression);
  if (!ds.ok()) return ds.status();
  auto it = MakeIterator(*ds);
  if (!it.ok()) return it.status();
  std::vector<int64_t> out;
  for (int i = 0; i < 100000; ++i) {
    Element e;
    bool end = false;
    absl::Status s = (*it)->GetNext(&e, &end);
    if (!s.ok()) return s;
    if (end) return out;
    for (int64_t j = 0; j < e.leaf().num_elements(); ++j) {
      out.push_back(e.leaf().data<int64_t>()[j]);
    }
  }
  return absl::InternalError("more elements than the loop's bound");
}

TEST(SharedPoolOpsTest, ManyPipelinesWithPrefetchAndParallelInterleaveStartNoThreads) {
  record_test::TempDir dir;
  const std::vector<std::string> files = WriteFiles(dir);
  auto ds = Dataset::Parse(absl::StrCat(
      "from_tensor_slices(", FileList(files),
      ").repeat().interleave(lambda f: fixed_length_record_dataset(f, 8).prefetch(2), "
      "cycle_length=3, num_parallel_calls=3).prefetch(4)"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_TRUE(ProcessThreadPool().ok());  // the shared pool's threads are there before counting
  const int before = ThreadCount();
  constexpr int kPipelines = 30;
  std::vector<std::unique_ptr<Iterator>> running;
  for (int p = 0; p < kPipelines; ++p) {
    auto it = MakeIterator(*ds);
    ASSERT_TRUE(it.ok()) << it.status();
    Element e;
    bool end = false;
    ASSERT_TRUE((*it)->GetNext(&e, &end).ok());  // every prefetch and slot reads ahead now
    ASSERT_FALSE(end);
    running.push_back(*std::move(it));
  }
  // With a thread per prefetch and per interleave slot these would be 30 x 7 more threads.
  EXPECT_LE(ThreadCount(), before + 2) << "before: " << before;
}

// Consumes `expression` on a thread of the process's pool (sized 1 here), where waiting for a
// job queued on the same pool would never end.
absl::StatusOr<std::vector<int64_t>> ValuesOnThePool(const std::string& expression) {
  absl::StatusOr<std::vector<int64_t>> out = absl::InternalError("did not run");
  absl::Notification done;
  ProcessThreadPool().value()->Schedule([&] {
    out = Values(expression);
    done.Notify();
  });
  if (!done.WaitForNotificationWithTimeout(absl::Seconds(120))) {  // liveness bound only
    return absl::DeadlineExceededError("deadlocked: the pool's only thread waits for itself");
  }
  return out;
}

TEST(SharedPoolOpsTest, NestedParallelOpsOnAOneThreadPoolDoNotDeadlock) {
  if (!SetProcessThreadPoolSize(1).ok()) {
    GTEST_SKIP() << "the process's pool already runs; run this test in its own process "
                    "(ctest does)";
  }
  record_test::TempDir dir;
  const std::vector<std::string> files = WriteFiles(dir);
  for (const bool deterministic : {true, false}) {
    const std::string det = deterministic ? "" : ", deterministic=False";
    const std::string parallel = absl::StrCat(
        "from_tensor_slices(", FileList(files),
        ").interleave(lambda f: fixed_length_record_dataset(f, 8).prefetch(2), cycle_length=2, "
        "num_parallel_calls=2", det, ").map(decode_raw(tf.int64), num_parallel_calls=2", det,
        ").prefetch(3).batch(5).map(cast(tf.int64), num_parallel_calls=-1", det, ").prefetch(1)");
    const std::string sequential = absl::StrCat(
        "from_tensor_slices(", FileList(files),
        ").interleave(lambda f: fixed_length_record_dataset(f, 8), cycle_length=2)"
        ".map(decode_raw(tf.int64)).batch(5)");
    auto want = Values(sequential);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(want->size(), 120u);
    auto got = ValuesOnThePool(parallel);
    ASSERT_TRUE(got.ok()) << got.status();
    if (!deterministic) {
      std::sort(want->begin(), want->end());
      std::sort(got->begin(), got->end());
    }
    EXPECT_EQ(*got, *want) << parallel;
  }
}

}  // namespace
}  // namespace sluice
