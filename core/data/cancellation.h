// CancellationToken: tells a running pipeline to stop. The executor hands one token
// (ExecutorOptions::cancellation) to every iterator of a graph, nested pipelines (interleave's)
// included; whoever owns the pipeline (a worker's task runner, a trainer shutting down) calls
// Cancel() from any thread, and the pipeline's GetNext returns CANCELLED instead of finishing
// the work it is in.
//
// Cancellation is cooperative, and where it is checked bounds how long a cancelled GetNext
// takes:
//  - every op iterator (core/data/op_iterator.h) checks before each GetNext / GetNextBlock, so
//    an op that loops over its input (shuffle's fill, filter's scan, batch, repeat of an empty
//    input, interleave) stops within one pull of its input once the token is cancelled;
//  - ops that wait for other threads (prefetch, parallel map) register a wake-up (OnCancel)
//    and return CANCELLED without waiting for the element being computed, which their threads
//    then drop;
//  - what one element costs inside an op (one map function call, one record read) is not
//    interrupted.
//
//   auto token = std::make_shared<CancellationToken>();
//   options.cancellation = token;
//   auto it = MakeIterator(dataset, options);   // GetNext on some thread...
//   token->Cancel("task 7 stopped");            // ... returns CANCELLED "...: task 7 stopped"
//
// Thread safety: thread-safe. Cancel() is one-way: a token never becomes uncancelled.
#ifndef SLUICE_CORE_DATA_CANCELLATION_H_
#define SLUICE_CORE_DATA_CANCELLATION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace sluice {

class CancellationToken {
 public:
  CancellationToken() = default;
  CancellationToken(const CancellationToken&) = delete;
  CancellationToken& operator=(const CancellationToken&) = delete;

  // Cancels (the first call's `reason` is kept; later calls do nothing) and runs every wake-up
  // registered, on this thread, before it returns. Must not be called from a wake-up.
  void Cancel(absl::string_view reason);

  // One relaxed atomic load: cheap enough to check per element.
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // CANCELLED "<what>: cancelled: <reason>" once cancelled; OK before. Takes no lock, so an
  // op may call it under the lock its wake-up takes.
  absl::Status Check(absl::string_view what) const;

  // Registers `wake`, run once by Cancel() (at once, here, when the token is already
  // cancelled). A wake-up must be quick and must not block on anything that waits for the
  // token; it typically locks an op's mutex and signals its condition variable. Returns an id
  // for Unregister. Must not be called with a lock held that a wake-up takes.
  int64_t OnCancel(std::function<void()> wake) ABSL_LOCKS_EXCLUDED(mu_);
  // After it returns, the wake-up of `id` is not running and never will. Same locking rule.
  void Unregister(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  std::atomic<bool> cancelled_{false};
  // Written once, under mu_, before cancelled_ is set (release); read only after cancelled()
  // returned true (acquire), so read without the lock.
  std::string reason_;
  mutable absl::Mutex mu_;  // held while wake-ups run, so Unregister waits for a running one
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<int64_t, std::function<void()>> wakes_ ABSL_GUARDED_BY(mu_);
};

// The token of the pipeline being built or pulled on this thread (null when none): the
// executor sets it around building a graph's iterators (MakeIterator), and every op iterator
// around its own GetNext, so that an iterator built then (the next epoch's input under
// repeat(), a nested pipeline) takes its pipeline's token without any factory carrying it.
// OpIterator's constructor reads it.
const std::shared_ptr<CancellationToken>& CurrentCancellation();

// Makes `token` the thread's CurrentCancellation() for the life of the scope (scopes nest).
// `token` must outlive the scope.
class ScopedCancellationContext {
 public:
  explicit ScopedCancellationContext(const std::shared_ptr<CancellationToken>& token);
  ~ScopedCancellationContext();
  ScopedCancellationContext(const ScopedCancellationContext&) = delete;
  ScopedCancellationContext& operator=(const ScopedCancellationContext&) = delete;

 private:
  const std::shared_ptr<CancellationToken>* const previous_;
};

// Registers a wake-up for the life of a scope (an op's iterator): nothing when `token` is null.
class ScopedCancelWake {
 public:
  // `token` (may be null) must outlive this.
  ScopedCancelWake(CancellationToken* token, std::function<void()> wake)
      : token_(token), id_(token != nullptr ? token->OnCancel(std::move(wake)) : 0) {}
  ~ScopedCancelWake() {
    if (token_ != nullptr) token_->Unregister(id_);
  }
  ScopedCancelWake(const ScopedCancelWake&) = delete;
  ScopedCancelWake& operator=(const ScopedCancelWake&) = delete;

 private:
  CancellationToken* const token_;
  const int64_t id_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_CANCELLATION_H_
