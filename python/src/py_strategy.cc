// _sluice._MirroredStrategy, InputOptions, InputContext and the enums of tf.distribute input
// (sluice/strategy.h, sluice/input_options.h); sluice/distribute.py builds the Python
// MirroredStrategy on them.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "python/src/py_distributed_iterator.h"
#include "python/src/py_registration.h"
#include "python/src/status_exception.h"
#include "sluice/strategy.h"

namespace sluice::python {

namespace py = pybind11;

void RegisterStrategy(py::module_& m) {
  py::enum_<AutoShardPolicy>(m, "AutoShardPolicy",
                             "tf.data.experimental.AutoShardPolicy, same values.")
      .value("OFF", AutoShardPolicy::kOff)
      .value("AUTO", AutoShardPolicy::kAuto)
      .value("FILE", AutoShardPolicy::kFile)
      .value("DATA", AutoShardPolicy::kData)
      .value("HINT", AutoShardPolicy::kHint);
  py::enum_<InputReplicationMode>(m, "InputReplicationMode")
      .value("PER_WORKER", InputReplicationMode::kPerWorker)
      .value("PER_REPLICA", InputReplicationMode::kPerReplica);

  py::class_<InputOptions>(m, "InputOptions", "tf.distribute.InputOptions, plus the auto-shard policy.")
      .def(py::init([](bool fetch_to_device, InputReplicationMode mode, bool on_device,
                       int64_t buffer_size, AutoShardPolicy policy) {
             InputOptions o;
             o.experimental_fetch_to_device = fetch_to_device;
             o.experimental_replication_mode = mode;
             o.experimental_place_dataset_on_device = on_device;
             o.experimental_per_replica_buffer_size = buffer_size;
             o.auto_shard_policy = policy;
             return o;
           }),
           py::kw_only(), py::arg("experimental_fetch_to_device") = true,
           py::arg("experimental_replication_mode") = InputReplicationMode::kPerWorker,
           py::arg("experimental_place_dataset_on_device") = false,
           py::arg("experimental_per_replica_buffer_size") = 1,
           py::arg("auto_shard_policy") = AutoShardPolicy::kAuto)
      .def_readwrite("experimental_fetch_to_device", &InputOptions::experimental_fetch_to_device)
      .def_readwrite("experimental_replication_mode",
                     &InputOptions::experimental_replication_mode)
      .def_readwrite("experimental_place_dataset_on_device",
                     &InputOptions::experimental_place_dataset_on_device)
      .def_readwrite("experimental_per_replica_buffer_size",
                     &InputOptions::experimental_per_replica_buffer_size)
      .def_readwrite("auto_shard_policy", &InputOptions::auto_shard_policy);

  py::class_<InputContext>(m, "InputContext",
                           "tf.distribute.InputContext: what dataset_fn is told.")
      .def(py::init<int64_t, int64_t, int64_t>(), py::arg("num_input_pipelines") = 1,
           py::arg("input_pipeline_id") = 0, py::arg("num_replicas_in_sync") = 1)
      .def_property_readonly("num_input_pipelines", &InputContext::num_input_pipelines)
      .def_property_readonly("input_pipeline_id", &InputContext::input_pipeline_id)
      .def_property_readonly("num_replicas_in_sync", &InputContext::num_replicas_in_sync)
      .def(
          "get_per_replica_batch_size",
          [](const InputContext& c, int64_t global_batch_size) {
            return ValueOrThrow(c.GetPerReplicaBatchSize(global_batch_size));
          },
          py::arg("global_batch_size"));

  py::class_<MirroredStrategy>(m, "_MirroredStrategy")
      .def(py::init([](const std::vector<std::string>& devices, int64_t num_workers,
                       int64_t worker_index) {
             return ValueOrThrow(
                 MirroredStrategy::Create(devices, InputWorkerLayout{num_workers, worker_index}));
           }),
           py::arg("devices"), py::arg("num_workers") = 1, py::arg("worker_index") = 0)
      .def_property_readonly("devices",
                             [](const MirroredStrategy& s) {
                               std::vector<std::string> names;
                               for (const Device& d : s.devices()) names.push_back(d.name());
                               return names;
                             })
      .def_property_readonly("num_local_replicas", &MirroredStrategy::num_local_replicas)
      .def_property_readonly("num_replicas_in_sync", &MirroredStrategy::num_replicas_in_sync)
      .def_property_readonly("num_workers",
                             [](const MirroredStrategy& s) { return s.layout().num_workers; })
      .def_property_readonly("worker_index",
                             [](const MirroredStrategy& s) { return s.layout().worker_index; })
      .def("experimental_distribute_dataset",
           [](const MirroredStrategy& s, const Dataset& dataset, const InputOptions& options) {
             absl::StatusOr<DistributedDataset> dist;
             {
               py::gil_scoped_release release;
               dist = s.ExperimentalDistributeDataset(dataset, options);
             }
             return PyDistributedDataset(ValueOrThrow(std::move(dist)), false);
           })
      .def("distribute_datasets_from_function",
           [](const MirroredStrategy& s, py::function dataset_fn, const InputOptions& options) {
             // dataset_fn runs here, on this thread, with the GIL held: the C++ strategy calls
             // it once per input pipeline before returning. It returns a sluice.data.Dataset
             // (or a _Dataset); a Python exception is kept and re-raised unchanged.
             std::optional<py::error_already_set> python_error;
             auto fn = [&](const InputContext& ctx) -> absl::StatusOr<Dataset> {
               try {
                 py::object ds = dataset_fn(ctx);
                 if (py::hasattr(ds, "_ds")) ds = ds.attr("_ds");
                 return ds.cast<Dataset>();
               } catch (py::error_already_set& e) {
                 python_error.emplace(std::move(e));
                 return absl::InvalidArgumentError("dataset_fn raised");
               } catch (const py::cast_error&) {
                 return absl::InvalidArgumentError(
                     "dataset_fn must return a sluice.data.Dataset");
               }
             };
             absl::StatusOr<DistributedDataset> dist = s.DistributeDatasetsFromFunction(fn, options);
             if (python_error.has_value()) throw *python_error;
             return PyDistributedDataset(ValueOrThrow(std::move(dist)), false);
           });
}

}  // namespace sluice::python
