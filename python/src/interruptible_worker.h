// InterruptibleWorker: runs one blocking C++ call at a time on its own thread while the Python
// caller waits for it in bounded slices with the GIL released, running Python's signal handlers
// between slices, so that Ctrl-C interrupts a wait for the service promptly.
//
// When a signal handler raises (KeyboardInterrupt), Wait() returns false with the Python error
// set and the call keeps running: its result is kept, and the next Wait() returns it. Nothing
// fetched is ever dropped.
//
// Thread safety: Submit/Wait/busy from one Python thread at a time (the GIL held on entry);
// the destructor must be called without the GIL, and waits for a running call to finish.
#ifndef SLUICE_PYTHON_SRC_INTERRUPTIBLE_WORKER_H_
#define SLUICE_PYTHON_SRC_INTERRUPTIBLE_WORKER_H_

#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sluice::python {

class InterruptibleWorker {
 public:
  // The worker with its thread started; `slice`: how long each wait lasts before signals are
  // checked. RESOURCE_EXHAUSTED "cannot start a thread for an interruptible call's worker ..."
  // when the system refuses the thread (core/util/start_thread.h).
  static absl::StatusOr<std::unique_ptr<InterruptibleWorker>> Create(
      absl::Duration slice = absl::Milliseconds(50));
  ~InterruptibleWorker();
  InterruptibleWorker(const InterruptibleWorker&) = delete;
  InterruptibleWorker& operator=(const InterruptibleWorker&) = delete;

  // Starts `fn` on the worker thread. Requires !busy().
  void Submit(std::function<void()> fn);
  // True from Submit() until a Wait() has returned true for that call.
  bool busy() const { return busy_; }
  // Waits until the submitted call has finished (true), or a signal handler raised (false, the
  // Python error set, the call still running). Requires the GIL; releases it while waiting.
  bool Wait();

 private:
  explicit InterruptibleWorker(absl::Duration slice) : slice_(slice) {}
  void Loop();

  const absl::Duration slice_;
  bool busy_ = false;  // only the Python side touches it (under the GIL)
  absl::Mutex mu_;
  std::function<void()> job_ ABSL_GUARDED_BY(mu_);
  bool has_job_ ABSL_GUARDED_BY(mu_) = false;
  bool job_done_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // not joinable only when Create could not start it
};

// Runs `fn` on a detached thread and waits for it as InterruptibleWorker::Wait does: true when
// it finished, false (Python error set) when a signal handler raised first. An interrupted
// `fn` runs to its end on its own (it must own everything it uses: capture by value); for
// calls that cannot be resumed, such as creating a service job. Requires the GIL. When the
// system refuses the thread, `fn` does not run and the sluice.errors.ResourceExhaustedError of
// "cannot start a thread for an interruptible call ..." is raised (pybind11::error_already_set).
bool RunInterruptibly(std::function<void()> fn, absl::Duration slice = absl::Milliseconds(50));

// How many Python threads are waiting in Wait() / RunInterruptibly right now (for tests that
// must interrupt a wait, not the code before it).
int WaitingCalls();

}  // namespace sluice::python

#endif  // SLUICE_PYTHON_SRC_INTERRUPTIBLE_WORKER_H_
