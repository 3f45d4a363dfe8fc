// Distributed snapshots from Python: _sluice._save_snapshot (sluice/snapshot_save.h) and
// _sluice._load_snapshot (sluice/snapshot.h). sluice/snapshot.py gives them their Python
// interface (sluice.save, sluice.data.Dataset.load).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "python/src/interruptible_worker.h"
#include "python/src/py_registration.h"
#include "python/src/status_exception.h"
#include "sluice/snapshot.h"
#include "sluice/snapshot_save.h"

namespace sluice::python {

namespace py = pybind11;

void RegisterSnapshot(py::module_& m) {
  m.def(
      "_save_snapshot",
      [](const Dataset& dataset, const std::string& path, const ServiceOptions& service,
         const std::string& compression, bool resume, int64_t split_size) {
        SnapshotSaveOptions options;
        options.service = service;
        options.compression = compression;
        options.resume = resume;
        options.split_size = split_size;
        // The save waits for the whole job: Ctrl-C must be able to interrupt it (the call owns
        // copies of its arguments; an interrupted one finishes alone and is dropped, and a
        // later save with resume=True continues it).
        auto result = std::make_shared<absl::StatusOr<SnapshotSaveResult>>(
            absl::UnknownError("not run"));
        const bool finished = RunInterruptibly([result, dataset, path, options] {
          *result = SaveSnapshot(dataset, path, options);
        });
        if (!finished) throw py::error_already_set();
        SnapshotSaveResult r = ValueOrThrow(std::move(*result));
        py::dict d;
        d["num_chunks"] = r.num_chunks;
        d["num_elements"] = r.num_elements;
        return d;
      });
  m.def("_load_snapshot", [](const std::string& path, bool wait, double timeout_seconds,
                             int64_t num_parallel_calls) {
    SnapshotLoadOptions options;
    options.wait = wait;
    options.timeout_seconds = timeout_seconds;
    options.num_parallel_calls = num_parallel_calls;
    return ValueOrThrow(LoadSnapshot(path, options));
  });
}

}  // namespace sluice::python
