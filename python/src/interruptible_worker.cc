#include "python/src/interruptible_worker.h"

#include <pybind11/pybind11.h>

#include <utility>

namespace sluice::python {

InterruptibleWorker::InterruptibleWorker(absl::Duration slice)
    : slice_(slice), thread_([this] { Loop(); }) {}

InterruptibleWorker::~InterruptibleWorker() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();  // after the running call, if any, returns
}

void InterruptibleWorker::Submit(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  job_ = std::move(fn);
  has_job_ = true;
  job_done_ = false;
  busy_ = true;
}

bool InterruptibleWorker::Wait() {
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
