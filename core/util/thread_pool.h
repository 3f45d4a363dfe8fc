// ThreadPool: a fixed set of threads running scheduled closures, and the process's one pool that
// every parallel op of every pipeline shares (parallel map), so a worker running 50 tasks does
// not start 50 times the threads.
//
//   SetProcessThreadPoolSize(8);                    // in main(), from --threads
//   ProcessThreadPool().Schedule([&] { Work(); });  // anywhere
//
// Closures must not block waiting for other closures of the same pool (a pool of N threads
// all waiting would never run the closures they wait for): ops schedule CPU work on it and keep
// blocking reads in their consumer's thread.
//
// Thread safety: every method may be called from any thread.
#ifndef SLUICE_CORE_UTIL_THREAD_POOL_H_
#define SLUICE_CORE_UTIL_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace sluice {

class ThreadPool {
 public:
  // Requires num_threads >= 1. The threads start at once.
  explicit ThreadPool(int num_threads);
  // Runs every closure already scheduled, then joins the threads.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs `fn` on one of the threads, closures in the order scheduled.
  void Schedule(std::function<void()> fn);

  int num_threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar work_;  // a closure was scheduled, or stopping_ set
  std::vector<std::thread> threads_;
};

// The number of CPU cores, at least 1.
int NumCores();

// The process's pool: created at the first call with ProcessThreadPoolSize() threads, never
// destroyed (its threads idle until the process exits).
ThreadPool& ProcessThreadPool();

// Sizes the process's pool (a worker's or sluicectl's --threads). Call before the pool is first
// used. INVALID_ARGUMENT if n < 1; FAILED_PRECONDITION if the pool already runs with another size.
absl::Status SetProcessThreadPoolSize(int n);

// The size set, or NumCores() when none was.
int ProcessThreadPoolSize();

}  // namespace sluice

#endif  // SLUICE_CORE_UTIL_THREAD_POOL_H_
