#include "python/src/status_exception.h"

#include <pybind11/pybind11.h>

#include <string>

namespace sluice::python {

namespace py = pybind11;

void ThrowStatus(const absl::Status& status) {
  // sluice/errors.py maps each code to its class; it is a plain Python module, imported once.
  static py::object* by_code = new py::object(py::module_::import("sluice.errors").attr("_by_code"));
  py::object cls = (*by_code)(static_cast<int>(status.code()));
  py::object exc = cls(std::string(status.message()), static_cast<int>(status.code()));
  PyErr_SetObject(cls.ptr(), exc.ptr());
  throw py::error_already_set();
}

}  // namespace sluice::python
