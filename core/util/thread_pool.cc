#include "core/util/thread_pool.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/start_thread.h"

namespace sluice {

absl::StatusOr<std::unique_ptr<ThreadPool>> ThreadPool::Create(int num_threads,
                                                               absl::string_view what) {
  std::unique_ptr<ThreadPool> pool(new ThreadPool());
  if (absl::Status s = pool->Start(num_threads, what); !s.ok()) return s;  // ~ joins the rest
  return pool;
}

absl::Status ThreadPool::Start(int num_threads, absl::string_view what) {
  threads_.reserve(static_cast<size_t>(num_threads));
  for (int i = 0; i < num_threads; ++i) {
    absl::StatusOr<std::thread> t = StartThread(
        absl::StrCat(what, " (thread ", i + 1, " of ", num_threads, ")"), [this] { Run(); });
    if (!t.ok()) return t.status();
    threads_.push_back(*std::move(t));
  }
  return absl::OkStatus();
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::Schedule(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(fn));
  work_.Signal();
}

namespace {
thread_local bool on_pool_thread = false;
}  // namespace

bool ThreadPool::OnPoolThread() { return on_pool_thread; }

void ThreadPool::Run() {
  on_pool_thread = true;
  while (true) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) work_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping, and nothing is left to run
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

bool PoolJobGate::Enter() {
  absl::MutexLock lock(&mu_);
  if (closed_) return false;
  ++inside_;
  return true;
}

void PoolJobGate::Leave() {
  absl::MutexLock lock(&mu_);
  --inside_;
}

void PoolJobGate::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  mu_.Await(absl::Condition(
      +[](int* inside) { return *inside == 0; }, &inside_));
}

int NumCores() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

namespace {

std::atomic<int> configured_size{0};  // 0: none set
absl::Mutex pool_mu;
ThreadPool* process_pool ABSL_GUARDED_BY(pool_mu) = nullptr;

}  // namespace

absl::StatusOr<ThreadPool*> ProcessThreadPool() {
  absl::MutexLock lock(&pool_mu);
  if (process_pool == nullptr) {
    absl::StatusOr<std::unique_ptr<ThreadPool>> pool =
        ThreadPool::Create(ProcessThreadPoolSize(), "the process's thread pool (--threads)");
    if (!pool.ok()) return pool.status();
    process_pool = pool->release();
  }
  return process_pool;
}

absl::Status SetProcessThreadPoolSize(int n) {
  if (n < 1) {
    return absl::InvalidArgumentError(absl::StrCat("the thread pool needs at least 1 thread, got ", n));
  }
  absl::MutexLock lock(&pool_mu);
  if (process_pool != nullptr && process_pool->num_threads() != n) {
    return absl::FailedPreconditionError(
        absl::StrCat("the process's thread pool already runs ", process_pool->num_threads(),
                     " threads; set its size before the first pipeline starts"));
  }
  configured_size.store(n);
  return absl::OkStatus();
}

int ProcessThreadPoolSize() {
  const int n = configured_size.load();
  return n > 0 ? n : NumCores();
}

}  // namespace sluice
