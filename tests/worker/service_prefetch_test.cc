// Device prefetch over the service: a dataset read through DistributeDatasetFromService on GPU
// devices reaches the trainer in (here host-backed) device buffers, with the same values as on
// CPU devices; fetch_to_device = false and buffer size 0 keep host tensors.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/device/device_memory.h"
#include "gtest/gtest.h"
#include "server/grpc_coordinator_service.h"
#include "sluice/service.h"
#include "sluice/strategy.h"
#include "worker/worker_server.h"

namespace sluice {
namespace {

void Quiet(absl::string_view) {}

// A coordinator and one worker on port 0.
class OneWorkerCluster {
 public:
  OneWorkerCluster() {
    CoordinatorServerOptions c;
    c.coordinator.log = Quiet;
    auto coordinator = CoordinatorServer::Start(c);
    EXPECT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    WorkerServerOptions w;
    w.coordinator_address = coordinator_->address();
    w.heartbeat_interval = absl::Milliseconds(100);
    w.log = Quiet;
    auto worker = WorkerServer::Start(w);
    EXPECT_TRUE(worker.ok()) << worker.status();
    worker_ = *std::move(worker);
    for (int i = 0; i < 10000 && !worker_->registered(); ++i) absl::SleepFor(absl::Milliseconds(5));
    EXPECT_TRUE(worker_->registered());
  }
  std::string address() const { return coordinator_->address(); }

 private:
  std::unique_ptr<CoordinatorServer> coordinator_;
  std::unique_ptr<WorkerServer> worker_;
};

struct Read {
  std::vector<std::vector<std::vector<int64_t>>> values;  // [step][replica]
  int device_tensors = 0;                                 // tensors in DeviceTensorBuffers
  int host_tensors = 0;
};

Read ReadAll(const std::string& coordinator, const std::vector<std::string>& devices,
             ServiceOptions options) {
  Read out;
  auto strategy = MirroredStrategy::Create(devices);
  EXPECT_TRUE(strategy.ok()) << strategy.status();
  auto ds = Dataset::Parse("range(16).batch(4)");
  EXPECT_TRUE(ds.ok());
  options.coordinator_address = coordinator;
  auto dist = DistributeDatasetFromService(*strategy, *ds, options);
  EXPECT_TRUE(dist.ok()) << dist.status();
  if (!dist.ok()) return out;
  auto it = dist->MakeIterator();
  EXPECT_TRUE(it.ok()) << it.status();
  if (!it.ok()) return out;
  for (int s = 0; s < 100; ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    if (!x.ok()) {
      EXPECT_TRUE(absl::IsOutOfRange(x.status())) << x.status();
      break;
    }
    std::vector<std::vector<int64_t>> step;
    for (size_t r = 0; r < x->values().size(); ++r) {
      const Tensor& t = x->values()[r].leaf();
      if (const DeviceTensorBuffer* d = DeviceBufferOf(t)) {
        ++out.device_tensors;
        EXPECT_EQ(d->ordinal(), static_cast<int>(r));
        EXPECT_TRUE(d->ReadyEvent() == nullptr || d->ReadyEvent()->IsReady());
      } else {
        ++out.host_tensors;
      }
      absl::StatusOr<Tensor> host = CopyTensorToHost(t);
      EXPECT_TRUE(host.ok());
      step.emplace_back(host->data<int64_t>(), host->data<int64_t>() + host->num_elements());
    }
    out.values.push_back(std::move(step));
  }
  return out;
}

TEST(ServicePrefetchTest, GpuReplicasGetDeviceBuffersWithTheValuesCpuReplicasGet) {
  OneWorkerCluster cluster;
  ServiceOptions options;
  options.per_replica_buffer_size = 2;
  options.job_name = "gpu";
  Read gpu = ReadAll(cluster.address(), {"GPU:0", "GPU:1"}, options);
  options.job_name = "cpu";
  Read cpu = ReadAll(cluster.address(), {"CPU:0", "CPU:1"}, options);
  ASSERT_EQ(gpu.values.size(), 4u);
  EXPECT_EQ(gpu.values, cpu.values);
  EXPECT_EQ(gpu.values[0], (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(gpu.device_tensors, 8);
  EXPECT_EQ(cpu.device_tensors, 0);
}

TEST(ServicePrefetchTest, FetchToDeviceFalseAndBufferSizeZeroKeepHostTensors) {
  OneWorkerCluster cluster;
  ServiceOptions host_only;
  host_only.fetch_to_device = false;
  host_only.job_name = "host";
  Read a = ReadAll(cluster.address(), {"GPU:0", "GPU:1"}, host_only);
  ServiceOptions off;
  off.per_replica_buffer_size = 0;
  off.job_name = "off";
  Read b = ReadAll(cluster.address(), {"GPU:0", "GPU:1"}, off);
  EXPECT_EQ(a.values.size(), 4u);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.device_tensors + b.device_tensors, 0);
}

TEST(ServicePrefetchTest, NegativeBufferSizeIsInvalid) {
  OneWorkerCluster cluster;
  auto strategy = MirroredStrategy::Create({"GPU:0"});
  ASSERT_TRUE(strategy.ok());
  auto ds = Dataset::Parse("range(4).batch(2)");
  ASSERT_TRUE(ds.ok());
  ServiceOptions options;
  options.coordinator_address = cluster.address();
  options.per_replica_buffer_size = -1;
  auto dist = DistributeDatasetFromService(*strategy, *ds, options);
  EXPECT_TRUE(absl::IsInvalidArgument(dist.status())) << dist.status();
}

}  // namespace
}  // namespace sluice
