// The _sluice extension module: the C++ half of the `sluice` Python package (python/sluice/
// holds the Python half, which is what users import).
#include <pybind11/pybind11.h>

#include "absl/synchronization/mutex.h"

#include "python/src/py_registration.h"

PYBIND11_MODULE(_sluice, m) {
  m.doc() = "Sluice's C++ client bound for Python; import `sluice`, not this module.";
  m.attr("__version__") = SLUICE_VERSION;
  // Debian's Abseil keeps a lock-order graph on every absl::Mutex lock (it is built without
  // NDEBUG): a debugging aid that a trainer's per-step locks pay for (11-13% of sluice-worker's
  // CPU at 1 KiB steps, bench/RESULTS.md, kib1m). Off, as in sluice-worker, sluicectl and
  // sluice-coordinator; the C++ tests keep it on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  sluice::python::RegisterTensor(m);
  sluice::python::RegisterDataset(m);
  sluice::python::RegisterDistributedIterator(m);
  sluice::python::RegisterStrategy(m);
  sluice::python::RegisterService(m);
  sluice::python::RegisterSnapshot(m);
}
