// TaskRunnerPool: the threads that drive a worker's task runners (worker/task_runner.h), shared
// by every task of the process, so that a worker running 50 tasks does not start 50 producer
// threads.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<TaskRunnerPool> pool, TaskRunnerPool::Create({.threads = 4}));
//   pool->Schedule([&] { ProduceSomeSteps(); });            // soon, on a pool thread
//   pool->ScheduleAt(absl::Now() + absl::Seconds(10), f);  // not before then
//
// A runner owns no thread: it runs as a job on this pool that produces steps for one slice (until
// its StepBuffer is full, its task ends, or the slice's time is up) and then gives the thread
// back. A full runner is rescheduled by its buffer's space notification (StepBuffer::TryPush);
// a runner whose slice ran out goes to the back of the queue, so runnable runners take turns.
//
// Blocking jobs. A runner's step can block for long inside its pipeline: a DYNAMIC task's
// GetSplit retries for up to a minute while the coordinator is away; a read from a slow or hung
// file system never returns. Such a job holds its thread, and with a fixed set of threads a few
// of them would starve every other task's runner for as long as they block. So the pool counts a
// thread that has run its current job for longer than `blocked_after` as blocked, and while jobs
// wait in the queue and fewer than `threads` threads are unblocked, it starts another thread, up
// to `max_threads` in all; threads above `threads` exit as soon as they find the queue empty.
// Hence `threads` jobs make progress at any time unless more than max_threads - threads jobs
// block at once, and the pool never runs more than `max_threads` threads, whatever the number
// of tasks. (A monitor thread, one more, does the counting and fires ScheduleAt's timers; it
// polls every blocked_after / 4 only while jobs wait in the queue.) A thread for blocked jobs
// that cannot start (core/util/start_thread.h) is logged and tried again at the next round:
// the queued jobs wait for a thread that frees up, and no task fails for it.
//
// Deadlock: jobs must not wait for other jobs of the same pool (a full pool of waiters would
// never run what they wait for). Runner jobs wait only for their pipeline's work on the
// process's ThreadPool (core/util/thread_pool.h), whose waiters run unstarted work themselves,
// never for another runner.
//
// Thread safety: every method may be called from any thread, also from a job.
#ifndef SLUICE_WORKER_TASK_RUNNER_POOL_H_
#define SLUICE_WORKER_TASK_RUNNER_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sluice {

struct TaskRunnerPoolOptions {
  // Threads that run jobs when none blocks; 0: DefaultTaskRunnerThreads().
  int threads = 0;
  // Most threads in all, counting those started for blocked jobs (not the monitor);
  // 0: threads + 32. At least `threads`.
  int max_threads = 0;
  // A job running this long counts as blocked (see the file comment).
  absl::Duration blocked_after = absl::Milliseconds(200);
};

class TaskRunnerPool {
 public:
  // The pool with its `threads` threads and its monitor started; RESOURCE_EXHAUSTED naming
  // the thread that could not start (those started are joined). The only way to make a pool.
  static absl::StatusOr<std::unique_ptr<TaskRunnerPool>> Create(TaskRunnerPoolOptions options);
  // Runs the jobs already queued, drops pending timers, joins the threads. Destroy a pool only
  // after every runner that uses it.
  ~TaskRunnerPool();
  TaskRunnerPool(const TaskRunnerPool&) = delete;
  TaskRunnerPool& operator=(const TaskRunnerPool&) = delete;

  // Runs `fn` on a pool thread, jobs in the order scheduled. Ignored once the pool is being
  // destroyed.
  void Schedule(std::function<void()> fn);
  // Schedules `fn` at `when` (at once if that has passed).
  void ScheduleAt(absl::Time when, std::function<void()> fn);

  // The threads running jobs now (idle or busy, excluding the monitor).
  int num_threads() const;
  // The most threads it has run at once.
  int peak_threads() const;
  int base_threads() const { return threads_; }
  int max_threads() const { return max_threads_; }

 private:
  struct ThreadState {
    std::thread thread;
    absl::Time job_started = absl::InfiniteFuture();  // InfiniteFuture: idle
  };

  explicit TaskRunnerPool(TaskRunnerPoolOptions options);  // nothing started: Create starts
  absl::Status Start();
  void WorkerLoop(int64_t id);
  void MonitorLoop();
  absl::Status StartThreadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void JoinExitedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int UnblockedLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int threads_;
  const int max_threads_;
  const absl::Duration blocked_after_;

  mutable absl::Mutex mu_;
  absl::CondVar work_;     // a job was queued, or stopping_
  absl::CondVar monitor_;  // the queue became non-empty, an earlier timer, or stopping_
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::multimap<absl::Time, std::function<void()>> timers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, ThreadState> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> exited_ ABSL_GUARDED_BY(mu_);  // returned; joined later
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int peak_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool start_failing_ ABSL_GUARDED_BY(mu_) = false;  // logged once per streak of failures
  std::thread monitor_thread_;
};

// max(2, NumCores()): runners mostly wait for their pipeline's reads and parallel work.
int DefaultTaskRunnerThreads();

// The process's pool that every TaskRunner uses unless TaskRunnerOptions names another: made at
// the first call with the options SetProcessTaskRunnerPoolOptions set (defaults otherwise), and
// never destroyed. RESOURCE_EXHAUSTED when its threads cannot start (Create; the task that
// needed it fails, a later call tries again). The worker starts it in main().
absl::StatusOr<TaskRunnerPool*> ProcessTaskRunnerPool();

// Sizes the process's runner pool (the worker's --task_threads). Call before the first task
// starts. INVALID_ARGUMENT for threads < 0 or max_threads below threads; FAILED_PRECONDITION
// once the pool exists.
absl::Status SetProcessTaskRunnerPoolOptions(const TaskRunnerPoolOptions& options);

}  // namespace sluice

#endif  // SLUICE_WORKER_TASK_RUNNER_POOL_H_
