// Task runners on a shared pool (worker/task_runner_pool.h): many runners share a few threads,
// a blocked runner does not starve the others, the pool's thread count stays within its bound,
// runners whose pipelines nest parallel ops do not deadlock on a one-thread pool, and a full
// runner closes at once. Behaviour tests: no timing (waits are bounded for liveness only).
#include "worker/task_runner_pool.h"

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/util/thread_pool.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/core/record_test_util.h"
#include "worker/task_runner.h"

namespace sluice {
namespace {

// Liveness bound only.
constexpr absl::Duration kStuck = absl::Seconds(120);

// A latch: Wait() returns once Open() was called (or after kStuck, reported as false).
class Latch {
 public:
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  bool Wait() {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&open_), kStuck);
  }

 private:
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
};

proto::TaskDef MakeTask(int64_t id, const Dataset& ds) {
  proto::TaskDef t;
  t.set_task_id(id);
  t.set_job_id(id);
  t.set_num_tasks(1);
  *t.mutable_dataset() = ds.def();
  t.mutable_job()->set_num_consumers(1);
  t.mutable_job()->set_replicas_per_consumer(1);
  t.mutable_job()->set_sharding_policy(proto::SHARDING_OFF);
  return t;
}

// A step of one piece holding `value`.
void FillStep(TaskStep* step, int64_t task_step, int64_t value) {
  step->task_step = task_step;
  step->num_real_pieces = 1;
  step->pieces = {{Tensor::Scalar<int64_t>(value)}};
  step->bytes = 8;
}

// Reads consumer 0's steps to the end; the first leaf of each step's piece.
absl::Status ReadAll(TaskRunner* runner, std::vector<int64_t>* values) {
  auto reader = runner->OpenReader(0, 0);
  if (!reader.ok()) return reader.status();
  for (int i = 0; i < 100000; ++i) {
    std::vector<std::shared_ptr<const TaskStep>> steps;
    bool end = false;
    absl::Status s = (*reader)->Next(4, size_t{1} << 30, absl::Now() + kStuck, &steps, &end);
    if (!s.ok()) return s;
    if (end) {
      (*reader)->ConfirmEnd();
      return absl::OkStatus();
    }
    if (steps.empty()) return absl::DeadlineExceededError("no step within the liveness bound");
    for (const auto& step : steps) {
      const Tensor& t = step->pieces[0][0];
      for (int64_t j = 0; j < t.num_elements(); ++j) values->push_back(t.data<int64_t>()[j]);
    }
  }
  return absl::InternalError("more steps than the loop's bound");
}

TEST(TaskRunnerPoolTest, RunsJobsAndTimers) {
  const std::unique_ptr<TaskRunnerPool> started = TaskRunnerPool::Create({.threads = 2}).value();
  TaskRunnerPool& pool = *started;
  Latch job, past, later;
  pool.Schedule([&] { job.Open(); });
  pool.ScheduleAt(absl::InfinitePast(), [&] { past.Open(); });
  pool.ScheduleAt(absl::Now() + absl::Milliseconds(1), [&] { later.Open(); });
  EXPECT_TRUE(job.Wait());
  EXPECT_TRUE(past.Wait());
  EXPECT_TRUE(later.Wait());
  EXPECT_EQ(pool.base_threads(), 2);
}

TEST(TaskRunnerPoolTest, AddsThreadsForBlockedJobsUpToItsBound) {
  const std::unique_ptr<TaskRunnerPool> started = TaskRunnerPool::Create(
      {.threads = 1, .max_threads = 3, .blocked_after = absl::Milliseconds(1)}).value();
  TaskRunnerPool& pool = *started;
  Latch release;
  Latch blocked_started[2];
  // Two jobs that block until released hold two threads; a third job still runs meanwhile, on
  // a thread the pool adds for the blocked ones.
  for (Latch& started : blocked_started) {
    pool.Schedule([&] {
      started.Open();
      release.Wait();
    });
  }
  for (Latch& started : blocked_started) ASSERT_TRUE(started.Wait());
  Latch ran;
  pool.Schedule([&] { ran.Open(); });
  EXPECT_TRUE(ran.Wait());
  // More blocked jobs than the bound: the pool never exceeds max_threads.
  Latch more_started[4];
  for (Latch& started : more_started) {
    pool.Schedule([&] {
      started.Open();
      release.Wait();
    });
  }
  ASSERT_TRUE(more_started[0].Wait());
  EXPECT_LE(pool.num_threads(), 3);
  release.Open();
  for (Latch& started : more_started) EXPECT_TRUE(started.Wait());
  EXPECT_LE(pool.peak_threads(), 3);
  EXPECT_GE(pool.peak_threads(), 2);
}

TEST(TaskRunnerPoolTest, ManyRunnersShareThePoolsThreads) {
  const std::unique_ptr<TaskRunnerPool> started = TaskRunnerPool::Create(
      {.threads = 2, .max_threads = 2}).value();
  TaskRunnerPool& pool = *started;
  constexpr int kRunners = 50;
  constexpr int64_t kSteps = 20;
  absl::Mutex mu;
  absl::flat_hash_set<std::thread::id> threads;
  std::vector<std::shared_ptr<TaskRunner>> runners;
  TaskRunnerOptions options;
  options.pool = &pool;
  options.buffer_bytes = 16;  // two steps: every runner fills its buffer and is woken again
  for (int r = 0; r < kRunners; ++r) {
    auto produced = std::make_shared<int64_t>(0);
    runners.push_back(TaskRunner::StartWith(
        MakeTask(r + 1, Dataset::Range(1)), options,
        [&, r, produced](TaskStep* step, bool* end) {
          {
            absl::MutexLock lock(&mu);
            threads.insert(std::this_thread::get_id());
          }
          *end = *produced == kSteps;
          if (!*end) FillStep(step, *produced, r * 1000 + *produced), ++*produced;
          return absl::OkStatus();
        }));
  }
  for (int r = 0; r < kRunners; ++r) {
    std::vector<int64_t> got;
    ASSERT_TRUE(ReadAll(runners[r].get(), &got).ok());
    ASSERT_EQ(got.size(), static_cast<size_t>(kSteps));
    for (int64_t i = 0; i < kSteps; ++i) EXPECT_EQ(got[i], r * 1000 + i);
    EXPECT_TRUE(runners[r]->finished());
  }
  absl::MutexLock lock(&mu);
  EXPECT_LE(threads.size(), 2u);
  EXPECT_LE(pool.peak_threads(), 2);
}

TEST(TaskRunnerPoolTest, ABlockedRunnerDoesNotStarveTheOthers) {
  // One base thread: the blocked runner holds it, and the other runner goes on on a thread the
  // pool adds.
  const std::unique_ptr<TaskRunnerPool> started = TaskRunnerPool::Create(
      {.threads = 1, .max_threads = 2, .blocked_after = absl::Milliseconds(1)}).value();
  TaskRunnerPool& pool = *started;
  TaskRunnerOptions options;
  options.pool = &pool;
  Latch release;
  Latch blocking;
  auto blocked = TaskRunner::StartWith(MakeTask(1, Dataset::Range(1)), options,
                                       [&](TaskStep*, bool* end) {
                                         blocking.Open();
                                         release.Wait();  // a hung read
                                         *end = true;
                                         return absl::OkStatus();
                                       });
  ASSERT_TRUE(blocking.Wait());
  auto produced = std::make_shared<int64_t>(0);
  auto other = TaskRunner::StartWith(MakeTask(2, Dataset::Range(1)), options,
                                     [produced](TaskStep* step, bool* end) {
                                       *end = *produced == 100;
                                       if (!*end) FillStep(step, *produced, *produced), ++*produced;
                                       return absl::OkStatus();
                                     });
  std::vector<int64_t> got;
  ASSERT_TRUE(ReadAll(other.get(), &got).ok());
  EXPECT_EQ(got.size(), 100u);
  release.Open();
  std::vector<int64_t> none;
  ASSERT_TRUE(ReadAll(blocked.get(), &none).ok());
  EXPECT_TRUE(none.empty());
}

TEST(TaskRunnerPoolTest, AFullRunnerClosesAtOnceAndProducesNoMore) {
  const std::unique_ptr<TaskRunnerPool> started = TaskRunnerPool::Create(
      {.threads = 1, .max_threads = 1}).value();
  TaskRunnerPool& pool = *started;
  TaskRunnerOptions options;
  options.pool = &pool;
  options.buffer_bytes = 8;  // one step
  auto calls = std::make_shared<absl::Mutex>();
  auto count = std::make_shared<int64_t>(0);
  Latch full;
  auto runner = TaskRunner::StartWith(MakeTask(1, Dataset::Range(1)), options,
                                      [calls, count, &full](TaskStep* step, bool* end) {
                                        absl::MutexLock lock(calls.get());
                                        FillStep(step, *count, *count);
                                        ++*count;
                                        if (*count == 2) full.Open();  // one buffered, one held
                                        *end = false;
                                        return absl::OkStatus();
                                      });
  ASSERT_TRUE(full.Wait());
  runner.reset();  // no consumer ever reads: the runner waits for space without a thread
  // The pool's only thread is free: another runner on it runs to its end.
  auto produced = std::make_shared<int64_t>(0);
  auto other = TaskRunner::StartWith(MakeTask(2, Dataset::Range(1)), options,
                                     [produced](TaskStep* step, bool* end) {
                                       *end = *produced == 3;
                                       if (!*end) FillStep(step, *produced, 7), ++*produced;
                                       return absl::OkStatus();
                                     });
  std::vector<int64_t> got;
  ASSERT_TRUE(ReadAll(other.get(), &got).ok());
  EXPECT_EQ(got, (std::vector<int64_t>{7, 7, 7}));
  absl::MutexLock lock(calls.get());
  EXPECT_EQ(*count, 2);  // none after the close
}

// The backstop behind the allocator that can refuse: a pipeline step that throws
// std::bad_alloc (memory the budget does not see) fails its task with RESOURCE_EXHAUSTED after
// the steps it made; the worker process, and the next task on the same pool thread, go on.
TEST(TaskRunnerPoolTest, AStepThatThrowsBadAllocFailsItsTaskNotTheProcess) {
  const std::unique_ptr<TaskRunnerPool> started = TaskRunnerPool::Create(
      {.threads = 1, .max_threads = 1}).value();
  TaskRunnerPool& pool = *started;
  TaskRunnerOptions options;
  options.pool = &pool;
  auto made = std::make_shared<int64_t>(0);
  auto runner = TaskRunner::StartWith(MakeTask(1, Dataset::Range(1)), options,
                                      [made](TaskStep* step, bool* end) -> absl::Status {
                                        if (*made == 2) throw std::bad_alloc();
                                        FillStep(step, *made, 5);
                                        ++*made;
                                        *end = false;
                                        return absl::OkStatus();
                                      });
  std::vector<int64_t> got;
  absl::Status s = ReadAll(runner.get(), &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("std::bad_alloc"), absl::string_view::npos) << s;
  EXPECT_EQ(got, (std::vector<int64_t>{5, 5}));
  auto produced = std::make_shared<int64_t>(0);
  auto other = TaskRunner::StartWith(MakeTask(2, Dataset::Range(1)), options,
                                     [produced](TaskStep* step, bool* end) {
                                       *end = *produced == 2;
                                       if (!*end) FillStep(step, *produced, 7), ++*produced;
                                       return absl::OkStatus();
                                     });
  got.clear();
  ASSERT_TRUE(ReadAll(other.get(), &got).ok());
  EXPECT_EQ(got, (std::vector<int64_t>{7, 7}));
}

// Runners whose pipelines nest parallel interleave, parallel map and prefetch, on a runner pool
// of one thread that never grows and a process pool of one thread: nothing waits for work
// queued behind it, so every task runs to its end.
TEST(TaskRunnerPoolTest, NestedParallelPipelinesOnOneThreadDoNotDeadlock) {
  if (!SetProcessThreadPoolSize(1).ok()) {
    GTEST_SKIP() << "the process's pool already runs; run this test in its own process "
                    "(ctest does)";
  }
  record_test::TempDir dir;
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
  const std::string expression = absl::StrCat(
      "from_tensor_slices(['", files[0], "', '", files[1], "', '", files[2],
      "']).interleave(lambda f: fixed_length_record_dataset(f, 8).prefetch(2), cycle_length=2, "
      "num_parallel_calls=2).map(decode_raw(tf.int64), num_parallel_calls=2).prefetch(3)"
      ".batch(5).map(cast(tf.int64), num_parallel_calls=-1).prefetch(1)");
  auto ds = Dataset::Parse(expression);
  ASSERT_TRUE(ds.ok()) << ds.status();
  // What the pipeline gives in process.
  std::vector<int64_t> want;
  {
    auto it = MakeIterator(*ds);
    ASSERT_TRUE(it.ok()) << it.status();
    for (int i = 0; i < 1000; ++i) {
      Element e;
      bool end = false;
      ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
      if (end) break;
      for (int64_t j = 0; j < e.leaf().num_elements(); ++j) {
        want.push_back(e.leaf().data<int64_t>()[j]);
      }
    }
  }
  ASSERT_EQ(want.size(), 120u);

  const std::unique_ptr<TaskRunnerPool> started = TaskRunnerPool::Create(
      {.threads = 1, .max_threads = 1}).value();
  TaskRunnerPool& pool = *started;
  TaskRunnerOptions options;
  options.pool = &pool;
  options.buffer_bytes = 64;  // about one step: runners fill up and are woken many times
  constexpr int kTasks = 12;
  std::vector<std::shared_ptr<TaskRunner>> runners;
  for (int t = 0; t < kTasks; ++t) {
    auto runner = TaskRunner::Start(MakeTask(t + 1, *ds), options);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runners.push_back(*std::move(runner));
  }
  std::vector<std::vector<int64_t>> got(kTasks);
  std::vector<absl::Status> status(kTasks);
  std::vector<std::thread> readers;
  for (int t = 0; t < kTasks; ++t) {
    readers.emplace_back([&, t] { status[t] = ReadAll(runners[t].get(), &got[t]); });
  }
  for (std::thread& r : readers) r.join();
  for (int t = 0; t < kTasks; ++t) {
    EXPECT_TRUE(status[t].ok()) << status[t];
    EXPECT_EQ(got[t], want) << "task " << t;
  }
  EXPECT_EQ(pool.peak_threads(), 1);
}

}  // namespace
}  // namespace sluice
