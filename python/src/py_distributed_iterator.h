// The Python side of a DistributedDataset and its iterators (sluice.DistributedDataset wraps
// PyDistributedDataset; iter() of it is a PyDistributedIterator).
//
// next() returns the step as TF does (py_element.h: PerReplica leaves), raises StopIteration at
// the end and sluice.errors.* on errors. The GIL is released while C++ produces the step. For
// local pipelines the call runs on the caller's thread and Ctrl-C is seen when the step is
// ready; for the service (interruptible) it runs on the iterator's own thread and Ctrl-C
// interrupts the wait at once (interruptible_worker.h). Either way a step fetched when the
// KeyboardInterrupt came is kept and returned by the next call.
//
// get_next() is TF's: OutOfRangeError at the end (next() raises StopIteration).
//
// Thread safety: one Python thread per iterator at a time (as TF's); a second thread calling
// into an iterator while a call is in progress gets RuntimeError (never a crash). Datasets may
// be shared. Iterators and datasets belong to the process that made them: used in a forked
// child (a DataLoader worker) they raise FailedPreconditionError; make them in the child.
// Teardown releases the GIL while the iterator's threads and streams stop.
#ifndef SLUICE_PYTHON_SRC_PY_DISTRIBUTED_ITERATOR_H_
#define SLUICE_PYTHON_SRC_PY_DISTRIBUTED_ITERATOR_H_

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "python/src/interruptible_worker.h"
#include "sluice/distributed_dataset.h"

namespace sluice::python {

class PyDistributedIterator {
 public:
  PyDistributedIterator(DistributedIterator it, bool interruptible);
  ~PyDistributedIterator();

  // __next__: the step, or StopIteration at the end.
  pybind11::object Next();
  // get_next(): the step, or OutOfRangeError at the end.
  pybind11::object GetNext();
  // get_next_as_optional(): a sluice.Optional.
  pybind11::object GetNextAsOptional();
  // The step after the last one returned, serialised (IteratorCheckpoint::Serialize()).
  pybind11::bytes Checkpoint();
  pybind11::object ElementSpec() const;
  // True while a call interrupted by a signal (or still waiting) has not returned its step.
  bool in_flight() const { return in_flight_ != nullptr; }

 private:
  using StepOrEnd = absl::StatusOr<std::optional<PerReplica<Element>>>;
  struct Call {
    StepOrEnd result = std::nullopt;
  };
  // The next step (nullopt at the end); padded: GetNextAsOptional's kind of step. RuntimeError
  // while another thread is inside a call; FailedPreconditionError in a forked child.
  StepOrEnd Fetch(bool padded);
  StepOrEnd FetchLocked(bool padded);

  std::shared_ptr<DistributedIterator> it_;
  const bool interruptible_;  // a service iterator (see StepToPython's may_share)
  std::unique_ptr<InterruptibleWorker> worker_;  // interruptible only
  std::shared_ptr<Call> in_flight_;              // submitted to worker_, not yet returned
  std::optional<StepOrEnd> stash_;               // fetched, not returned (interrupted)
  bool busy_ = false;  // a call is in progress (read and written under the GIL)
  const long pid_;     // the process that made the iterator
};

// FailedPreconditionError (raised) when called in a process other than `pid` (a fork).
void CheckSameProcess(long pid, const char* what);

class PyDistributedDataset {
 public:
  PyDistributedDataset(DistributedDataset dataset, bool interruptible);

  std::unique_ptr<PyDistributedIterator> MakeIterator() const;
  pybind11::object ElementSpec() const;
  // The seed's multi-line layout of element_spec (include/sluice/per_replica_format.h).
  std::string FormatElementSpec() const;

 private:
  DistributedDataset dataset_;
  bool interruptible_;
  long pid_;
};

}  // namespace sluice::python

#endif  // SLUICE_PYTHON_SRC_PY_DISTRIBUTED_ITERATOR_H_
