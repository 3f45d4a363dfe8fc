#include "tests/security/secure_cluster.h"

#include <utility>

#include "absl/time/clock.h"
#include "sluice/strategy.h"

namespace sluice {
namespace {
void Quiet(absl::string_view) {}
}  // namespace

absl::StatusOr<std::unique_ptr<SecureCluster>> SecureCluster::Start(SecureClusterOptions options) {
  auto cluster = std::unique_ptr<SecureCluster>(new SecureCluster());
  CoordinatorServerOptions c;
  c.coordinator.log = Quiet;
  c.security = options.coordinator_security;
  c.role_tokens = options.coordinator_roles;
  c.data_roots = options.coordinator_roots;
  c.dataset_limits = options.coordinator_limits;
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> coordinator = CoordinatorServer::Start(c);
  if (!coordinator.ok()) return coordinator.status();
  cluster->coordinator_ = *std::move(coordinator);
  for (int i = 0; i < options.num_workers; ++i) {
    WorkerServerOptions w;
    w.coordinator_address = cluster->coordinator_->address();
    w.heartbeat_interval = absl::Milliseconds(50);
    w.max_backoff = absl::Milliseconds(200);
    w.buffer_bytes = size_t{16} << 20;
    w.log = Quiet;
    w.security = options.worker_security;
    w.coordinator_security = options.worker_to_coordinator;
    w.data_roots = options.worker_roots;
    absl::StatusOr<std::unique_ptr<WorkerServer>> worker = WorkerServer::Start(w);
    if (!worker.ok()) return worker.status();
    cluster->workers_.push_back(*std::move(worker));
  }
  if (options.wait_for_workers) {
    for (int i = 0; i < 2000 && cluster->num_registered() < options.num_workers; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    if (cluster->num_registered() < options.num_workers) {
      return absl::DeadlineExceededError("workers did not register within 20 s");
    }
  }
  return cluster;
}

SecureCluster::~SecureCluster() {
  for (auto& w : workers_) w->Stop();
  if (coordinator_ != nullptr) coordinator_->Shutdown(absl::ZeroDuration());
}

int SecureCluster::num_registered() const {
  int n = 0;
  for (const auto& w : workers_) n += w->registered() ? 1 : 0;
  return n;
}

ReadResult ReadAll(const std::string& coordinator, const Dataset& dataset,
                   ServiceOptions options) {
  ReadResult out;
  absl::StatusOr<MirroredStrategy> strategy = MirroredStrategy::Create({"CPU:0"});
  if (!strategy.ok()) {
    out.status = strategy.status();
    return out;
  }
  options.coordinator_address = coordinator;
  options.fetch_to_device = false;
  absl::StatusOr<DistributedDataset> dist =
      DistributeDatasetFromService(*strategy, dataset, options);
  if (!dist.ok()) {
    out.status = dist.status();
    return out;
  }
  absl::StatusOr<DistributedIterator> it = dist->MakeIterator();
  if (!it.ok()) {
    out.status = it.status();
    return out;
  }
  for (int s = 0; s < 10000; ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    if (!x.ok()) {
      if (x.status().code() != absl::StatusCode::kOutOfRange) out.status = x.status();
      break;
    }
    ++out.steps;
    for (const Element& e : x->values()) {
      if (!e.is_leaf()) continue;
      const Tensor& t = e.leaf();
      out.elements += t.num_elements();
      if (t.dtype() != DType::kInt64) continue;
      out.values.insert(out.values.end(), t.data<int64_t>(), t.data<int64_t>() + t.num_elements());
    }
  }
  return out;
}

}  // namespace sluice
