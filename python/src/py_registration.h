// The parts of the _sluice extension module, each registered by its own file (module.cc calls
// them in order).
#ifndef SLUICE_PYTHON_SRC_PY_REGISTRATION_H_
#define SLUICE_PYTHON_SRC_PY_REGISTRATION_H_

#include <pybind11/pybind11.h>

namespace sluice::python {

void RegisterTensor(pybind11::module_& m);              // py_tensor.cc: Tensor, constant
void RegisterDataset(pybind11::module_& m);             // py_dataset.cc
void RegisterDistributedIterator(pybind11::module_& m);  // py_distributed_iterator.cc
void RegisterStrategy(pybind11::module_& m);            // py_strategy.cc
void RegisterService(pybind11::module_& m);             // py_service.cc
void RegisterSnapshot(pybind11::module_& m);            // py_snapshot.cc

}  // namespace sluice::python

#endif  // SLUICE_PYTHON_SRC_PY_REGISTRATION_H_
