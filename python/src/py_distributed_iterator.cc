#include "python/src/py_distributed_iterator.h"

#include <unistd.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sluice/per_replica_format.h"
#include "python/src/py_element.h"
#include "python/src/py_registration.h"
#include "python/src/status_exception.h"

namespace sluice::python {

namespace py = pybind11;

namespace {

py::object OptionalClass() {
  static py::object* cls = new py::object(py::module_::import("sluice._values").attr("Optional"));
  return *cls;
}

absl::StatusOr<std::optional<PerReplica<Element>>> Produce(DistributedIterator& it,
                                                           bool padded) {
  if (padded) return it.GetNextAsOptional();
  absl::StatusOr<PerReplica<Element>> step = it.GetNext();
  if (absl::IsOutOfRange(step.status())) return std::nullopt;
  if (!step.ok()) return step.status();
  return std::optional<PerReplica<Element>>(*std::move(step));
}

}  // namespace

void CheckSameProcess(long pid, const char* what) {
  if (static_cast<long>(getpid()) == pid) return;
  ThrowStatus(absl::FailedPreconditionError(absl::StrCat(
      "this ", what, " was made in process ", pid, " and is used in process ", getpid(),
      " (a fork, such as a DataLoader worker): its threads and connections did not survive "
      "the fork. Make the dataset's iterators in the process that reads them "
      "(DataLoader(num_workers=0))")));
}

PyDistributedIterator::PyDistributedIterator(DistributedIterator it, bool interruptible)
    : it_(std::make_shared<DistributedIterator>(std::move(it))),
      interruptible_(interruptible),
      pid_(static_cast<long>(getpid())) {}

PyDistributedIterator::~PyDistributedIterator() {
  if (static_cast<long>(getpid()) != pid_) {
    // A forked child: the threads these objects would join do not exist here, and their mutexes
    // may be held by threads of the parent; leak them rather than hang.
    (void)worker_.release();
    new std::shared_ptr<DistributedIterator>(std::move(it_));
    return;
  }
  // Stopping the worker and the iterator's streams may wait for RPCs: without the GIL, so that
  // other threads (and their signal handling) run meanwhile.
  py::gil_scoped_release release;
  worker_.reset();
  it_.reset();
}

PyDistributedIterator::StepOrEnd PyDistributedIterator::Fetch(bool padded) {
  CheckSameProcess(pid_, "iterator");
  if (busy_) {
    throw std::runtime_error(
        "sluice iterator: another thread is inside next() on this iterator; an iterator "
        "serves one thread at a time (make one per thread, or lock around next())");
  }
  busy_ = true;
  struct Clear {
    bool* b;
    ~Clear() { *b = false; }
  } clear{&busy_};
  return FetchLocked(padded);
}

PyDistributedIterator::StepOrEnd PyDistributedIterator::FetchLocked(bool padded) {
  if (stash_.has_value()) {
    StepOrEnd r = *std::move(stash_);
    stash_.reset();
    return r;
  }
  if (!interruptible_) {
    StepOrEnd r;
    {
      py::gil_scoped_release release;
      r = Produce(*it_, padded);
    }
    if (PyErr_CheckSignals() != 0) {
      stash_ = std::move(r);
      throw py::error_already_set();
    }
    return r;
  }
  if (worker_ == nullptr) worker_ = ValueOrThrow(InterruptibleWorker::Create());
  if (in_flight_ == nullptr) {
    in_flight_ = std::make_shared<Call>();
    worker_->Submit([it = it_, call = in_flight_, padded] { call->result = Produce(*it, padded); });
  }
  if (!worker_->Wait()) throw py::error_already_set();  // in_flight_ kept for the next call
  StepOrEnd r = std::move(in_flight_->result);
  in_flight_.reset();
  return r;
}

py::object PyDistributedIterator::Next() {
  StepOrEnd step = Fetch(/*padded=*/false);
  if (!step.ok()) ThrowStatus(step.status());
  if (!step->has_value()) throw py::stop_iteration();
  return StepToPython(**step, it_->wrapping(), /*may_share=*/!interruptible_);
}

py::object PyDistributedIterator::GetNext() {
  StepOrEnd step = Fetch(/*padded=*/false);
  if (!step.ok()) ThrowStatus(step.status());
  if (!step->has_value()) ThrowStatus(absl::OutOfRangeError("End of sequence"));
  return StepToPython(**step, it_->wrapping(), /*may_share=*/!interruptible_);
}

py::object PyDistributedIterator::GetNextAsOptional() {
  StepOrEnd step = Fetch(/*padded=*/true);
  if (!step.ok()) ThrowStatus(step.status());
  if (!step->has_value()) return OptionalClass()(py::none(), false);
  return OptionalClass()(StepToPython(**step, it_->wrapping(), /*may_share=*/!interruptible_), true);
}

py::bytes PyDistributedIterator::Checkpoint() {
  CheckSameProcess(pid_, "iterator");
  if (busy_) {
    throw std::runtime_error("sluice iterator: checkpoint() while another thread is in next()");
  }
  if (in_flight_ != nullptr || stash_.has_value()) {
    ThrowStatus(absl::FailedPreconditionError(
        "checkpoint(): an interrupted next() holds a step that was not returned yet; call "
        "next() first"));
  }
  return py::bytes(ValueOrThrow(it_->Checkpoint()).Serialize());
}

py::object PyDistributedIterator::ElementSpec() const {
  return DistributedSpecToPython(it_->element_spec(), it_->wrapping());
}

PyDistributedDataset::PyDistributedDataset(DistributedDataset dataset, bool interruptible)
    : dataset_(std::move(dataset)),
      interruptible_(interruptible),
      pid_(static_cast<long>(getpid())) {}

std::unique_ptr<PyDistributedIterator> PyDistributedDataset::MakeIterator() const {
  CheckSameProcess(pid_, "distributed dataset");
  if (!interruptible_) {
    absl::StatusOr<DistributedIterator> it;
    {
      py::gil_scoped_release release;
      it = dataset_.MakeIterator();
    }
    return std::make_unique<PyDistributedIterator>(ValueOrThrow(std::move(it)), interruptible_);
  }
  // A service iterator connects (with retries up to the retry deadline): Ctrl-C interrupts
  // the wait; an interrupted call finishes alone and its iterator is dropped.
  auto it = std::make_shared<absl::StatusOr<DistributedIterator>>(absl::UnknownError("not run"));
  const bool finished = RunInterruptibly([it, dataset = dataset_] { *it = dataset.MakeIterator(); });
  if (!finished) throw py::error_already_set();
  return std::make_unique<PyDistributedIterator>(ValueOrThrow(std::move(*it)), interruptible_);
}

py::object PyDistributedDataset::ElementSpec() const {
  return DistributedSpecToPython(dataset_.element_spec(), dataset_.wrapping());
}

std::string PyDistributedDataset::FormatElementSpec() const {
  return FormatPerReplicaSpec(dataset_.element_spec(), dataset_.wrapping());
}

void RegisterDistributedIterator(py::module_& m) {
  py::class_<PyDistributedIterator>(m, "_DistributedIterator", R"doc(
tf.distribute.DistributedIterator: next() returns one step, the element's structure with a
PerReplica (one Tensor per local replica) at each leaf; StopIteration at the end of data.)doc")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &PyDistributedIterator::Next)
      .def("get_next", &PyDistributedIterator::GetNext,
           "The next step; OutOfRangeError at the end (as TF's get_next()).")
      .def("get_next_as_optional", &PyDistributedIterator::GetNextAsOptional,
           "A sluice.Optional: a value while any replica has data, empty at the end.")
      .def("checkpoint", &PyDistributedIterator::Checkpoint,
           "Where this iterator stands, as bytes for resume_from= (service datasets with a "
           "deterministic order); FailedPreconditionError otherwise.")
      .def_property_readonly("element_spec", &PyDistributedIterator::ElementSpec)
      .def_property_readonly("_in_flight", &PyDistributedIterator::in_flight,
                             "True while a service call is waiting or was interrupted; tests.");
  m.def("_handout_copies", &HandoutCopies,
        "Tensors copied at hand-out because another step could share their memory; tests.");

  py::class_<PyDistributedDataset>(m, "_DistributedDataset")
      // The iterator keeps its dataset alive (iter(strategy.experimental_distribute_dataset(..))).
      .def("make_iterator", &PyDistributedDataset::MakeIterator, py::keep_alive<0, 1>())
      .def_property_readonly("element_spec", &PyDistributedDataset::ElementSpec)
      .def("format_element_spec", &PyDistributedDataset::FormatElementSpec);
}

}  // namespace sluice::python
