#include "tests/worker/in_process_cluster.h"

#include <algorithm>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sluice/strategy.h"

namespace sluice {

namespace {

void Quiet(absl::string_view) {}

}  // namespace

Cluster::Cluster(int num_workers, absl::Duration worker_timeout, size_t buffer_bytes,
                 std::function<void(WorkerServerOptions*)> tune)
    : tune_(std::move(tune)) {
  CoordinatorServerOptions c;
  c.coordinator.worker_timeout = worker_timeout;
  c.coordinator.log = Quiet;
  auto coordinator = CoordinatorServer::Start(c);
  EXPECT_TRUE(coordinator.ok()) << coordinator.status();
  coordinator_ = *std::move(coordinator);
  for (int i = 0; i < num_workers; ++i) AddWorker(buffer_bytes);
  // Every worker registered before a job is made: the job gets one task per worker.
  for (int i = 0; i < 10000; ++i) {
    if (std::all_of(workers_.begin(), workers_.end(),
                    [](const auto& w) { return w->registered(); })) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  for (const auto& w : workers_) EXPECT_TRUE(w->registered());
}

void Cluster::AddWorker(size_t buffer_bytes) {
  WorkerServerOptions w;
  w.coordinator_address = coordinator_->address();
  w.heartbeat_interval = absl::Milliseconds(100);
  w.buffer_bytes = buffer_bytes;
  w.log = Quiet;
  if (tune_) tune_(&w);
  auto worker = WorkerServer::Start(w);
  EXPECT_TRUE(worker.ok()) << worker.status();
  workers_.push_back(*std::move(worker));
}

absl::Status ForEachStep(const std::string& coordinator, const Dataset& ds,
                         ServiceOptions options, int64_t replicas,
                         const std::function<void(int64_t, const PerReplica<Element>&)>& fn,
                         int64_t max_steps, DistributedElementSpec* spec,
                         std::optional<IteratorCheckpoint>* checkpoint) {
  std::vector<std::string> devices;
  for (int64_t r = 0; r < replicas; ++r) devices.push_back(absl::StrCat("CPU:", r));
  auto strategy = MirroredStrategy::Create(devices);
  if (!strategy.ok()) return strategy.status();
  options.coordinator_address = coordinator;
  auto dist = DistributeDatasetFromService(*strategy, ds, options);
  if (!dist.ok()) return dist.status();
  if (spec != nullptr) *spec = dist->element_spec();
  auto it = dist->MakeIterator();
  if (!it.ok()) return it.status();
  absl::Status status;
  for (int64_t s = 0; s < 100000 && (max_steps < 0 || s < max_steps); ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    if (!x.ok()) {
      if (x.status().code() != absl::StatusCode::kOutOfRange) status = x.status();
      break;
    }
    fn(s, *x);
  }
  if (checkpoint != nullptr) {
    if (absl::StatusOr<IteratorCheckpoint> c = it->Checkpoint(); c.ok()) *checkpoint = *c;
  }
  return status;
}

Consumed Consume(const std::string& coordinator, const Dataset& ds, ServiceOptions options,
                 int64_t replicas, std::function<void(int64_t step)> after_step,
                 int64_t max_steps) {
  Consumed out;
  out.status = ForEachStep(
      coordinator, ds, std::move(options), replicas,
      [&](int64_t s, const PerReplica<Element>& x) {
        std::vector<std::vector<int64_t>> step;
        for (const Element& e : x.values()) {
          const Tensor& t = e.leaf();
          step.push_back(
              std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.num_elements()));
        }
        out.steps.push_back(std::move(step));
        if (after_step) after_step(s);
      },
      max_steps, &out.spec, &out.checkpoint);
  return out;
}

std::vector<Consumed> ConsumeAll(const std::string& coordinator, const Dataset& ds,
                                 ServiceOptions options, int64_t consumers, int64_t replicas,
                                 std::function<void(int64_t, int64_t)> after_step,
                                 int64_t max_steps) {
  std::vector<Consumed> results(static_cast<size_t>(consumers));
  std::vector<std::thread> threads;
  for (int64_t c = 0; c < consumers; ++c) {
    threads.emplace_back([&, c] {
      ServiceOptions o = options;
      o.consumer_index = c;
      o.num_consumers = consumers;
      std::function<void(int64_t)> hook;
      if (after_step) hook = [&, c](int64_t s) { after_step(c, s); };
      results[c] = Consume(coordinator, ds, o, replicas, hook, max_steps);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// Every element of range(n) exactly once across all consumers and replicas.
void ExpectExactlyOnce(const std::vector<Consumed>& results, int64_t n) {
  std::map<int64_t, int> count;
  for (const Consumed& r : results) {
    for (const auto& step : r.steps) {
      for (const auto& piece : step) {
        for (int64_t v : piece) ++count[v];
      }
    }
  }
  EXPECT_EQ(count.size(), static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(count[i], 1) << "element " << i;
}

}  // namespace sluice
