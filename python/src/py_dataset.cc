// _sluice._Dataset: sluice::Dataset (include/sluice/dataset.h) for sluice/data.py, which gives it
// tf.data's Python interface.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/data_roots.h"
#include "sluice/dataset.h"
#include "python/src/py_element.h"
#include "python/src/py_registration.h"
#include "python/src/status_exception.h"

namespace sluice::python {

namespace py = pybind11;

void RegisterDataset(py::module_& m) {
  py::class_<Dataset>(m, "_Dataset")
      .def_static(
          "range", [](int64_t start, int64_t stop, int64_t step) {
            return Dataset::Range(start, stop, step);
          })
      .def_static("from_tensors",
                  [](py::handle value) { return Dataset::FromTensors(ElementFromPython(value)); })
      .def_static("from_tensor_slices",
                  [](py::handle value) {
                    return Dataset::FromTensorSlices(ElementFromPython(value));
                  })
      .def_static("text_line", &Dataset::TextLine)
      .def_static("tf_record", &Dataset::TFRecord)
      .def_static("fixed_length_record", &Dataset::FixedLengthRecord)
      .def_static(
          "parse",
          [](const std::string& expression) { return ValueOrThrow(Dataset::Parse(expression)); },
          "A dataset from a pipeline expression in tf.data's syntax (docs/PIPELINES.md).")
      .def("batch", &Dataset::Batch)
      .def("repeat", &Dataset::Repeat)
      .def("take", &Dataset::Take)
      .def("skip", &Dataset::Skip)
      .def("shard", &Dataset::Shard)
      .def("shard_hint", &Dataset::ShardHint)
      .def("shuffle", &Dataset::Shuffle)
      .def("prefetch", &Dataset::Prefetch)
      .def("unbatch", &Dataset::Unbatch)
      .def("rebatch", &Dataset::Rebatch)
      .def("legacy_rebatch", &Dataset::LegacyRebatch)
      .def(
          "validate", [](const Dataset& d) { ThrowIfError(d.Validate()); })
      .def("element_spec",
           [](const Dataset& d) { return SpecToPython(ValueOrThrow(d.element_spec())); })
      .def("cardinality", &Dataset::Cardinality)
      .def("fingerprint", &Dataset::Fingerprint)
      .def("expression", &Dataset::ToExpression);
  m.def(
      "_set_data_roots",
      [](const std::vector<std::string>& roots) {
        ThrowIfError(InstallProcessDataRoots(ValueOrThrow(DataRoots::Create(roots))));
      },
      "Limits what pipelines run in this process read, as a server's --data_root "
      "(core/data/data_roots.h, InstallProcessDataRoots).");
}

}  // namespace sluice::python
