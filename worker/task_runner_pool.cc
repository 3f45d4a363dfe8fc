#include "worker/task_runner_pool.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/logging.h"
#include "core/util/start_thread.h"
#include "core/util/status_macros.h"
#include "core/util/thread_pool.h"

namespace sluice {

int DefaultTaskRunnerThreads() { return std::max(2, NumCores()); }

absl::StatusOr<std::unique_ptr<TaskRunnerPool>> TaskRunnerPool::Create(
    TaskRunnerPoolOptions options) {
  std::unique_ptr<TaskRunnerPool> pool(new TaskRunnerPool(options));
  if (absl::Status s = pool->Start(); !s.ok()) return s;  // ~ joins what started
  return pool;
}

TaskRunnerPool::TaskRunnerPool(TaskRunnerPoolOptions options)
    : threads_(options.threads > 0 ? options.threads : DefaultTaskRunnerThreads()),
      max_threads_(std::max(threads_, options.max_threads > 0 ? options.max_threads
                                                               : threads_ + 32)),
      blocked_after_(options.blocked_after) {}

absl::Status TaskRunnerPool::Start() {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < threads_; ++i) RETURN_IF_ERROR(StartThreadLocked());
  ASSIGN_OR_RETURN(monitor_thread_, StartThread("the task runner pool's monitor",
                                                [this] { MonitorLoop(); }));
  return absl::OkStatus();
}

TaskRunnerPool::~TaskRunnerPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    timers_.clear();
    work_.SignalAll();
    monitor_.SignalAll();
  }
  if (monitor_thread_.joinable()) monitor_thread_.join();  // not when Start failed
  // Workers run what is queued, then exit; each moves itself to exited_.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](absl::flat_hash_map<int64_t, ThreadState>* w) { return w->empty(); }, &workers_));
  JoinExitedLocked();
}

absl::Status TaskRunnerPool::StartThreadLocked() {
  JoinExitedLocked();
  const int64_t id = next_id_;
  absl::StatusOr<std::thread> thread =
      StartThread(absl::StrCat("a task runner (", workers_.size() + 1, " of at most ",
                               max_threads_, ", --task_threads)"),
                  [this, id] { WorkerLoop(id); });
  if (!thread.ok()) return thread.status();
  ++next_id_;
  workers_[id].thread = *std::move(thread);  // it waits for mu_ before it looks itself up
  peak_ = std::max(peak_, static_cast<int>(workers_.size()));
  return absl::OkStatus();
}

void TaskRunnerPool::JoinExitedLocked() {
  // An exited thread has released mu_ for good: it only returns from WorkerLoop.
  for (std::thread& t : exited_) t.join();
  exited_.clear();
}

void TaskRunnerPool::Schedule(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;  // a job rescheduling itself must not keep the destructor waiting
  queue_.push_back(std::move(fn));
  work_.Signal();
  if (queue_.size() == 1) monitor_.Signal();  // it starts watching for blocked threads
}

void TaskRunnerPool::ScheduleAt(absl::Time when, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  const bool earliest = timers_.empty() || when < timers_.begin()->first;
  timers_.emplace(when, std::move(fn));
  if (earliest) monitor_.Signal();
}

int TaskRunnerPool::num_threads() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(workers_.size());
}

int TaskRunnerPool::peak_threads() const {
  absl::MutexLock lock(&mu_);
  return peak_;
}

int TaskRunnerPool::UnblockedLocked(absl::Time now) const {
  int n = 0;
  for (const auto& [id, w] : workers_) {
    if (w.job_started == absl::InfiniteFuture() || now - w.job_started < blocked_after_) ++n;
  }
  return n;
}

void TaskRunnerPool::WorkerLoop(int64_t id) {
  while (true) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty() &&
             static_cast<int>(workers_.size()) <= threads_) {
        work_.Wait(&mu_);
      }
      if (queue_.empty()) {
        // Stopping, or a thread started for blocked jobs that is no longer needed.
        auto it = workers_.find(id);
        exited_.push_back(std::move(it->second.thread));
        workers_.erase(it);
        return;
      }
      fn = std::move(queue_.front());
      queue_.pop_front();
      workers_[id].job_started = absl::Now();
    }
    fn();
    fn = nullptr;  // the job's captures go before the thread counts as idle
    absl::MutexLock lock(&mu_);
    workers_[id].job_started = absl::InfiniteFuture();
  }
}

void TaskRunnerPool::MonitorLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time now = absl::Now();
    // Due timers become jobs.
    while (!timers_.empty() && timers_.begin()->first <= now) {
      queue_.push_back(std::move(timers_.begin()->second));
      timers_.erase(timers_.begin());
      work_.Signal();
    }
    // Jobs wait while blocked threads hold the pool: one more thread (at most one per round,
    // so that a burst of short jobs does not look like blocking).
    if (!queue_.empty() && UnblockedLocked(now) < threads_ &&
        static_cast<int>(workers_.size()) < max_threads_) {
      const absl::Status started = StartThreadLocked();
      if (!started.ok() && !start_failing_) {
        LogEvent(LogLevel::kWarning, "worker",
                 absl::StrCat(started.message(), "; queued tasks wait for a thread to free up"));
      }
      start_failing_ = !started.ok();
    }
    absl::Time wake = timers_.empty() ? absl::InfiniteFuture() : timers_.begin()->first;
    if (!queue_.empty()) wake = std::min(wake, now + blocked_after_ / 4);
    monitor_.WaitWithDeadline(&mu_, wake);
  }
}

namespace {

absl::Mutex process_pool_mu;
TaskRunnerPool* process_pool ABSL_GUARDED_BY(process_pool_mu) = nullptr;
std::optional<TaskRunnerPoolOptions> process_pool_options ABSL_GUARDED_BY(process_pool_mu);

}  // namespace

absl::StatusOr<TaskRunnerPool*> ProcessTaskRunnerPool() {
  absl::MutexLock lock(&process_pool_mu);
  if (process_pool == nullptr) {
    ASSIGN_OR_RETURN(std::unique_ptr<TaskRunnerPool> pool,
                     TaskRunnerPool::Create(process_pool_options.value_or(TaskRunnerPoolOptions())));
    process_pool = pool.release();
  }
  return process_pool;
}

absl::Status SetProcessTaskRunnerPoolOptions(const TaskRunnerPoolOptions& options) {
  if (options.threads < 0 || (options.max_threads != 0 && options.max_threads < options.threads)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task runner pool: threads must be >= 0 (got ", options.threads,
        ") and max_threads 0 or at least threads (got ", options.max_threads, ")"));
  }
  absl::MutexLock lock(&process_pool_mu);
  if (process_pool != nullptr) {
    return absl::FailedPreconditionError(
        "the process's task runner pool already runs; size it before the first task starts");
  }
  process_pool_options = options;
  return absl::OkStatus();
}

}  // namespace sluice
