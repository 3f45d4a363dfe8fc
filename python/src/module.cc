// The _sluice extension module: the C++ half of the `sluice` Python package (python/sluice/
// holds the Python half, which is what users import).
#include <pybind11/pybind11.h>

#include "core/util/mutex_deadlock_detection.h"
#include "python/src/py_registration.h"

PYBIND11_MODULE(_sluice, m) {
  m.doc() = "Sluice's C++ client bound for Python; import `sluice`, not this module.";
  m.attr("__version__") = SLUICE_VERSION;
  sluice::SkipMutexDeadlockDetection();  // core/util/mutex_deadlock_detection.h says why
  sluice::python::RegisterTensor(m);
  sluice::python::RegisterDataset(m);
  sluice::python::RegisterDistributedIterator(m);
  sluice::python::RegisterStrategy(m);
  sluice::python::RegisterService(m);
  sluice::python::RegisterSnapshot(m);
}
