#include "python/src/interruptible_worker.h"

#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <utility>

#include "core/util/start_thread.h"
#include "core/util/status_macros.h"
#include "python/src/status_exception.h"

namespace sluice::python {

namespace {

std::atomic<int> waiting_calls{0};

// Counts a waiting call for WaitingCalls() while it lives.
class WaitingScope {
 public:
  WaitingScope() { waiting_calls.fetch_add(1); }
  ~WaitingScope() { waiting_calls.fetch_sub(1); }
};

}  // namespace

int WaitingCalls() { return waiting_calls.load(); }

bool RunInterruptibly(std::function<void()> fn, absl::Duration slice) {
  struct State {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
  };
  auto state = std::make_shared<State>();
  absl::StatusOr<std::thread> thread =
      StartThread("an interruptible call", [state, fn = std::move(fn)] {
        fn();
        absl::MutexLock lock(&state->mu);
        state->done = true;
      });
  if (!thread.ok()) ThrowStatus(thread.status());
  thread->detach();
  WaitingScope waiting;
  for (;;) {
    bool done;
    {
      pybind11::gil_scoped_release release;
      absl::MutexLock lock(&state->mu);
      done = state->mu.AwaitWithTimeout(absl::Condition(&state->done), slice);
    }
    if (done) return true;
    if (PyErr_CheckSignals() != 0) return false;
  }
}

absl::StatusOr<std::unique_ptr<InterruptibleWorker>> InterruptibleWorker::Create(
    absl::Duration slice) {
  std::unique_ptr<InterruptibleWorker> worker(new InterruptibleWorker(slice));
  InterruptibleWorker* raw = worker.get();
  ASSIGN_OR_RETURN(worker->thread_,
                   StartThread("an interruptible call's worker", [raw] { raw->Loop(); }));
  return worker;
}

InterruptibleWorker::~InterruptibleWorker() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();  // after the running call, if any, returns
}

void InterruptibleWorker::Submit(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  job_ = std::move(fn);
  has_job_ = true;
  job_done_ = false;
  busy_ = true;
}

bool InterruptibleWorker::Wait() {
  WaitingScope waiting;
  for (;;) {
    bool done;
    {
      pybind11::gil_scoped_release release;
      absl::MutexLock lock(&mu_);
      done = mu_.AwaitWithTimeout(absl::Condition(&job_done_), slice_);
    }
    if (done) {
      busy_ = false;
      return true;
    }
    if (PyErr_CheckSignals() != 0) return false;
  }
}

void InterruptibleWorker::Loop() {
  for (;;) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return has_job_ || stop_; };
      mu_.Await(absl::Condition(&ready));
      if (!has_job_) return;  // stop_ with nothing to run
      job = std::move(job_);
      has_job_ = false;
    }
    job();
    absl::MutexLock lock(&mu_);
    job_done_ = true;
  }
}

}  // namespace sluice::python
