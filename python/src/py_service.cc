// The service from Python: _sluice._ServiceOptions (sluice/service.h), _distribute_from_service,
// the cluster-spec resolution (sluice/cluster_spec.h) and iterator checkpoints.
// sluice/service.py gives them their Python interface.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "core/util/start_thread.h"
#include "python/src/interruptible_worker.h"
#include "python/src/py_distributed_iterator.h"
#include "python/src/py_registration.h"
#include "python/src/status_exception.h"
#include "sluice/cluster_spec.h"
#include "sluice/service.h"

namespace sluice::python {

namespace py = pybind11;

namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

template <typename C>
void DurationProperty(py::class_<ServiceOptions>& c, const char* name, C member) {
  c.def_property(
      name, [member](const ServiceOptions& o) { return Seconds(o.*member); },
      [member](ServiceOptions& o, double s) { o.*member = absl::Seconds(s); });
}

}  // namespace

void RegisterService(py::module_& m) {
  py::enum_<ServiceReadMode>(m, "ServiceReadMode")
      .value("COORDINATED", ServiceReadMode::kCoordinated)
      .value("INDEPENDENT", ServiceReadMode::kIndependent);
  py::enum_<ServiceShardingPolicy>(m, "ServiceShardingPolicy")
      .value("AUTO", ServiceShardingPolicy::kAuto)
      .value("FILE", ServiceShardingPolicy::kFile)
      .value("DATA", ServiceShardingPolicy::kData)
      .value("HINT", ServiceShardingPolicy::kHint)
      .value("OFF", ServiceShardingPolicy::kOff)
      .value("DYNAMIC", ServiceShardingPolicy::kDynamic)
      .value("RANGES", ServiceShardingPolicy::kRanges);
  py::enum_<ServiceShuffle>(m, "ServiceShuffle")
      .value("NONE", ServiceShuffle::kNone)
      .value("FULL", ServiceShuffle::kFull)
      .value("BLOCK", ServiceShuffle::kBlock);

  py::enum_<ServiceCompression>(m, "ServiceCompression")
      .value("NONE", ServiceCompression::kNone)
      .value("LZ4", ServiceCompression::kLz4)
      .value("ZSTD", ServiceCompression::kZstd);

  py::class_<ServiceOptions> options(m, "_ServiceOptions");
  options.def(py::init<>())
      .def_readwrite("coordinator_address", &ServiceOptions::coordinator_address)
      .def_readwrite("job_name", &ServiceOptions::job_name)
      .def_readwrite("consumer_index", &ServiceOptions::consumer_index)
      .def_readwrite("num_consumers", &ServiceOptions::num_consumers)
      .def_readwrite("read_mode", &ServiceOptions::read_mode)
      .def_readwrite("sharding_policy", &ServiceOptions::sharding_policy)
      .def_readwrite("num_tasks", &ServiceOptions::num_tasks)
      .def_readwrite("receive_budget_bytes", &ServiceOptions::receive_budget_bytes)
      .def_readwrite("fetch_to_device", &ServiceOptions::fetch_to_device)
      .def_readwrite("per_replica_buffer_size", &ServiceOptions::per_replica_buffer_size)
      .def_readwrite("compression", &ServiceOptions::compression)
      .def_readwrite("force_compression", &ServiceOptions::force_compression)
      .def_property(
          "tls", [](const ServiceOptions& o) { return o.security.tls; },
          [](ServiceOptions& o, bool v) { o.security.tls = v; })
      .def_property(
          "tls_ca_file", [](const ServiceOptions& o) { return o.security.tls_ca_file; },
          [](ServiceOptions& o, std::string v) { o.security.tls_ca_file = std::move(v); })
      .def_property(
          "tls_cert_file", [](const ServiceOptions& o) { return o.security.tls_cert_file; },
          [](ServiceOptions& o, std::string v) { o.security.tls_cert_file = std::move(v); })
      .def_property(
          "tls_key_file", [](const ServiceOptions& o) { return o.security.tls_key_file; },
          [](ServiceOptions& o, std::string v) { o.security.tls_key_file = std::move(v); })
      .def_property(
          "tls_server_name", [](const ServiceOptions& o) { return o.security.tls_server_name; },
          [](ServiceOptions& o, std::string v) { o.security.tls_server_name = std::move(v); })
      .def_property(
          "token", [](const ServiceOptions& o) { return o.security.token; },
          [](ServiceOptions& o, std::string v) { o.security.token = std::move(v); })
      .def_property(
          "seed", [](const ServiceOptions& o) { return o.order.seed; },
          [](ServiceOptions& o, uint64_t v) { o.order.seed = v; })
      .def_property(
          "shuffle", [](const ServiceOptions& o) { return o.order.shuffle; },
          [](ServiceOptions& o, ServiceShuffle v) { o.order.shuffle = v; })
      .def_property(
          "shuffle_block_size", [](const ServiceOptions& o) { return o.order.shuffle_block_size; },
          [](ServiceOptions& o, int64_t v) { o.order.shuffle_block_size = v; })
      .def_property(
          "num_epochs", [](const ServiceOptions& o) { return o.order.num_epochs; },
          [](ServiceOptions& o, int64_t v) { o.order.num_epochs = v; })
      .def_property(
          "range_steps", [](const ServiceOptions& o) { return o.order.range_steps; },
          [](ServiceOptions& o, int64_t v) { o.order.range_steps = v; })
      .def_property(
          "resume_from",
          [](const ServiceOptions& o) -> py::object {
            if (!o.resume_from.has_value()) return py::none();
            return py::bytes(o.resume_from->Serialize());
          },
          [](ServiceOptions& o, py::object v) {
            if (v.is_none()) {
              o.resume_from.reset();
              return;
            }
            o.resume_from = ValueOrThrow(IteratorCheckpoint::Parse(v.cast<std::string>()));
          });
  options.def_readwrite("trainer_id", &ServiceOptions::trainer_id)
      .def_property(
          "cross_trainer", [](const ServiceOptions& o) { return o.cross_trainer.enabled; },
          [](ServiceOptions& o, bool v) { o.cross_trainer.enabled = v; })
      .def_property(
          "cross_trainer_lossless",
          [](const ServiceOptions& o) { return o.cross_trainer.lossless; },
          [](ServiceOptions& o, bool v) { o.cross_trainer.lossless = v; })
      .def_property(
          "expected_trainers",
          [](const ServiceOptions& o) { return o.cross_trainer.expected_trainers; },
          [](ServiceOptions& o, int64_t v) { o.cross_trainer.expected_trainers = v; })
      .def_property(
          "max_trainers", [](const ServiceOptions& o) { return o.cross_trainer.max_trainers; },
          [](ServiceOptions& o, int64_t v) { o.cross_trainer.max_trainers = v; });
  DurationProperty(options, "rpc_deadline", &ServiceOptions::rpc_deadline);
  DurationProperty(options, "retry_deadline", &ServiceOptions::retry_deadline);
  DurationProperty(options, "heartbeat_interval", &ServiceOptions::heartbeat_interval);

  m.def(
      "_distribute_from_service",
      [](const MirroredStrategy& strategy, const Dataset& dataset, const ServiceOptions& o) {
        // Registers the dataset and creates the job: RPCs retried up to retry_deadline (while
        // no worker is there, say), so Ctrl-C must be able to interrupt the wait. The call
        // owns copies of its arguments; an interrupted one finishes alone and is dropped.
        auto result = std::make_shared<absl::StatusOr<DistributedDataset>>(
            absl::UnknownError("not run"));
        const bool finished = RunInterruptibly([result, strategy, dataset, o] {
          *result = DistributeDatasetFromService(strategy, dataset, o);
        });
        if (!finished) throw py::error_already_set();
        return PyDistributedDataset(ValueOrThrow(std::move(*result)), /*interruptible=*/true);
      });
  m.def("_waiting_calls", &WaitingCalls,
        "Python threads waiting in an interruptible call right now (for tests).");
  m.def(
      "_test_fail_thread_starts",
      [](int n, const std::string& what_contains) { TEST_FailThreadStarts(n, what_contains); },
      "Tests: the next n thread starts whose name contains what_contains fail as if the system "
      "refused them (core/util/start_thread.h); 0 clears.");

  m.def(
      "_resolve_cluster_config",
      [](std::optional<std::string> coordinator, std::optional<int64_t> consumer_index,
         std::optional<int64_t> num_consumers, std::string cluster_spec) {
        ClusterSpecSources sources = ClusterSpecSources::FromProcess();
        sources.flag_coordinator = std::move(coordinator);
        sources.flag_consumer_index = consumer_index;
        sources.flag_num_consumers = num_consumers;
        sources.spec_file = std::move(cluster_spec);
        ClusterConfig c = ValueOrThrow(ResolveClusterConfig(sources));
        py::dict d;
        d["coordinator"] = c.coordinator_address;
        d["consumer_index"] = c.consumer_index;
        d["num_consumers"] = c.num_consumers;
        d["role"] = c.role;
        d["coordinator_source"] = c.coordinator_source;
        d["consumer_index_source"] = c.consumer_index_source;
        d["num_consumers_source"] = c.num_consumers_source;
        d["description"] = c.DebugString();
        return d;
      },
      py::arg("coordinator") = py::none(), py::arg("consumer_index") = py::none(),
      py::arg("num_consumers") = py::none(), py::arg("cluster_spec") = "");

  m.def("_parse_checkpoint", [](const std::string& bytes) {
    IteratorCheckpoint c = ValueOrThrow(IteratorCheckpoint::Parse(bytes));
    py::dict d;
    d["job_key"] = c.job_key;
    d["step"] = c.step;
    d["epoch"] = c.epoch;
    d["step_in_epoch"] = c.step_in_epoch;
    return d;
  });
}

}  // namespace sluice::python
