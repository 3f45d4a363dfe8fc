// ThreadPool: a fixed set of threads running scheduled closures, and the process's one pool that
// every parallel op of every pipeline shares (parallel map, prefetch, parallel interleave), so a
// worker running 50 tasks does not start 50 times the threads.
//
//   SetProcessThreadPoolSize(8);                     // in main(), from --threads
//   ASSIGN_OR_RETURN(ThreadPool* pool, ProcessThreadPool());
//   pool->Schedule([&] { Work(); });                 // anywhere
//
// Closures must not block waiting for other closures of the same pool that have not started (a
// pool of N threads all waiting would never run the closures they wait for): whoever needs the
// result of a closure still queued does its work itself instead (the parallel map maps a unit,
// prefetch pulls an element), and waits only for closures already running. A closure may block
// on I/O (a prefetch reading ahead); that only costs the pool a thread while it reads. An
// object whose closures are queued does not wait for them either when it is destroyed: it
// closes its PoolJobGate, which waits only for the closures running.
//
// Thread safety: every method may be called from any thread.
#ifndef SLUICE_CORE_UTIL_THREAD_POOL_H_
#define SLUICE_CORE_UTIL_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace sluice {

class ThreadPool {
 public:
  // Requires num_threads >= 1. The threads start at once; RESOURCE_EXHAUSTED naming `what`
  // when one cannot (core/util/start_thread.h; those started are joined). The only way to make
  // a pool: a server's pools start in its Create, which returns this error.
  static absl::StatusOr<std::unique_ptr<ThreadPool>> Create(int num_threads,
                                                            absl::string_view what);
  // Runs every closure already scheduled, then joins the threads.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs `fn` on one of the threads, closures in the order scheduled.
  void Schedule(std::function<void()> fn);

  int num_threads() const { return static_cast<int>(threads_.size()); }

  // True when the caller runs on a thread of some ThreadPool (a closure), where waiting for a
  // closure still queued could wait for itself.
  static bool OnPoolThread();

 private:
  ThreadPool() = default;
  absl::Status Start(int num_threads, absl::string_view what);
  void Run();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar work_;  // a closure was scheduled, or stopping_ set
  std::vector<std::thread> threads_;
};

// What keeps an object's queued closures from outliving it without making its destructor wait
// for them: each closure (holding the gate by shared_ptr) calls Enter() before it touches the
// object and, if that returned true, Leave() after; the destructor calls Close(), which makes
// later Enter() calls return false and waits for the closures inside to Leave(). Thread-safe.
class PoolJobGate {
 public:
  bool Enter();
  void Leave();
  void Close();

 private:
  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int inside_ ABSL_GUARDED_BY(mu_) = 0;
};

// The number of CPU cores, at least 1.
int NumCores();

// The process's pool: created at the first call with ProcessThreadPoolSize() threads, never
// destroyed (its threads idle until the process exits). RESOURCE_EXHAUSTED when its threads
// cannot start (ThreadPool::Create; the pipeline that needed it fails, a later call tries
// again). A server starts it in main(), so that no input's pipeline pays for the start.
absl::StatusOr<ThreadPool*> ProcessThreadPool();

// Sizes the process's pool (a worker's or sluicectl's --threads). Call before the pool is first
// used. INVALID_ARGUMENT if n < 1; FAILED_PRECONDITION if the pool already runs with another size.
absl::Status SetProcessThreadPoolSize(int n);

// The size set, or NumCores() when none was.
int ProcessThreadPoolSize();

}  // namespace sluice

#endif  // SLUICE_CORE_UTIL_THREAD_POOL_H_
