// An in-process cluster on port 0: one coordinator, several workers, and consumers (trainer
// processes, here threads) reading through DistributeDatasetFromService.
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/rebatch.h"
#include "gtest/gtest.h"
#include "server/grpc_coordinator_service.h"
#include "sluice/service.h"
#include "sluice/strategy.h"
#include "worker/worker_server.h"

namespace sluice {
namespace {

void Quiet(absl::string_view) {}

class Cluster {
 public:
  explicit Cluster(int num_workers, absl::Duration worker_timeout = absl::Seconds(10),
                   size_t buffer_bytes = size_t{64} << 20) {
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

  void AddWorker(size_t buffer_bytes) {
    WorkerServerOptions w;
    w.coordinator_address = coordinator_->address();
    w.heartbeat_interval = absl::Milliseconds(100);
    w.buffer_bytes = buffer_bytes;
    w.log = Quiet;
    auto worker = WorkerServer::Start(w);
    EXPECT_TRUE(worker.ok()) << worker.status();
    workers_.push_back(*std::move(worker));
  }

  std::string address() const { return coordinator_->address(); }
  WorkerServer* worker(int i) { return workers_[i].get(); }

 private:
  std::unique_ptr<CoordinatorServer> coordinator_;
  std::vector<std::unique_ptr<WorkerServer>> workers_;
};

// What one consumer read: per step, per local replica, the int64 values.
struct Consumed {
  absl::Status status;
  std::vector<std::vector<std::vector<int64_t>>> steps;
  DistributedElementSpec spec;
};

Consumed Consume(const std::string& coordinator, const Dataset& ds, ServiceOptions options,
                 int64_t replicas, std::function<void(int64_t step)> after_step = nullptr) {
  Consumed out;
  std::vector<std::string> devices;
  for (int64_t r = 0; r < replicas; ++r) devices.push_back(absl::StrCat("CPU:", r));
  auto strategy = MirroredStrategy::Create(devices);
  if (!strategy.ok()) {
    out.status = strategy.status();
    return out;
  }
  options.coordinator_address = coordinator;
  auto dist = DistributeDatasetFromService(*strategy, ds, options);
  if (!dist.ok()) {
    out.status = dist.status();
    return out;
  }
  out.spec = dist->element_spec();
  auto it = dist->MakeIterator();
  if (!it.ok()) {
    out.status = it.status();
    return out;
  }
  for (int64_t s = 0; s < 100000; ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    if (!x.ok()) {
      if (x.status().code() != absl::StatusCode::kOutOfRange) out.status = x.status();
      break;
    }
    std::vector<std::vector<int64_t>> step;
    for (const Element& e : x->values()) {
      const Tensor& t = e.leaf();
      step.push_back(std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.num_elements()));
    }
    out.steps.push_back(std::move(step));
    if (after_step) after_step(s);
  }
  return out;
}

std::vector<Consumed> ConsumeAll(const std::string& coordinator, const Dataset& ds,
                                 ServiceOptions options, int64_t consumers, int64_t replicas,
                                 std::function<void(int64_t, int64_t)> after_step = nullptr) {
  std::vector<Consumed> results(static_cast<size_t>(consumers));
  std::vector<std::thread> threads;
  for (int64_t c = 0; c < consumers; ++c) {
    threads.emplace_back([&, c] {
      ServiceOptions o = options;
      o.consumer_index = c;
      o.num_consumers = consumers;
      std::function<void(int64_t)> hook;
      if (after_step) hook = [&, c](int64_t s) { after_step(c, s); };
      results[c] = Consume(coordinator, ds, o, replicas, hook);
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

TEST(ServiceClusterTest, CoordinatedEpochExactlyOnceInOrderWithTfSizes) {
  Cluster cluster(3);
  constexpr int64_t kN = 103, kB = 7, kC = 2, kR = 2;
  const Dataset ds = Dataset::Range(kN).Batch(kB);
  ServiceOptions options;
  options.job_name = "coordinated-epoch";
  options.sharding_policy = ServiceShardingPolicy::kData;
  auto results = ConsumeAll(cluster.address(), ds, options, kC, kR);
  for (const Consumed& r : results) ASSERT_TRUE(r.status.ok()) << r.status;
  // Every consumer sees the same number of steps: ceil(103 / 7) = 15.
  ASSERT_EQ(results[0].steps.size(), 15u);
  ASSERT_EQ(results[1].steps.size(), 15u);
  ExpectExactlyOnce(results, kN);
  // Step-major, then consumer, then replica: the single pipeline's order.
  std::vector<int64_t> flat;
  for (size_t s = 0; s < 15; ++s) {
    for (int64_t c = 0; c < kC; ++c) {
      for (const auto& piece : results[c].steps[s]) flat.insert(flat.end(), piece.begin(), piece.end());
    }
  }
  for (int64_t i = 0; i < kN; ++i) EXPECT_EQ(flat[i], i);
  // Sizes by TF's rule: consumer c's replica r at step s gets batch_sizes_for_worker(B, C, R, c)
  // cycled, for every full step; the last step holds 103 - 14 * 7 = 5 elements.
  for (int64_t c = 0; c < kC; ++c) {
    auto sizes = BatchSizesForWorker(kB, kC, kR, c);
    ASSERT_TRUE(sizes.ok());
    for (size_t s = 0; s + 1 < 15; ++s) {
      for (int64_t r = 0; r < kR; ++r) {
        EXPECT_EQ(results[c].steps[s][r].size(),
                  static_cast<size_t>((*sizes)[(s * kR + r) % sizes->size()]))
            << "consumer " << c << " step " << s << " replica " << r;
      }
    }
  }
  // element_spec over RPC equals the local experimental_distribute_dataset's for the same layout.
  for (int64_t c = 0; c < kC; ++c) {
    auto local_strategy = MirroredStrategy::Create({"CPU:0", "CPU:1"}, {kC, c});
    ASSERT_TRUE(local_strategy.ok());
    auto local = local_strategy->ExperimentalDistributeDataset(ds);
    ASSERT_TRUE(local.ok()) << local.status();
    ASSERT_TRUE(results[c].spec.SameStructure(local->element_spec()));
    EXPECT_EQ(results[c].spec.Flatten(), local->element_spec().Flatten());
  }
}

TEST(ServiceClusterTest, IndependentReadsDeliverEachBatchToOneConsumer) {
  Cluster cluster(2);
  constexpr int64_t kN = 90;
  const Dataset ds = Dataset::Range(kN).Batch(5);
  ServiceOptions options;
  options.job_name = "independent";
  options.read_mode = ServiceReadMode::kIndependent;
  options.sharding_policy = ServiceShardingPolicy::kData;
  auto results = ConsumeAll(cluster.address(), ds, options, 2, 2);
  for (const Consumed& r : results) ASSERT_TRUE(r.status.ok()) << r.status;
  ExpectExactlyOnce(results, kN);
  for (const Consumed& r : results) {
    for (const auto& step : r.steps) {
      ASSERT_EQ(step.size(), 2u);
      EXPECT_EQ(step[0].size(), 3u);  // batch_sizes_for_worker(5, 1, 2, 0) = [3, 2]
      EXPECT_EQ(step[1].size(), 2u);
    }
  }
}

// A worker stopped mid-epoch (as if its process died): the coordinator declares it dead after
// worker_timeout and hands its task to another worker, which replays the task's deterministic
// pipeline and skips the steps the consumers already have. What is guaranteed: with a
// deterministic pipeline, every element exactly once and identical step counts, as without the
// failure (docs/SERVICE.md, "Liveness and failure").
TEST(ServiceClusterTest, WorkerStoppedMidEpochJobStillCompletesExactlyOnce) {
  Cluster cluster(3, /*worker_timeout=*/absl::Milliseconds(600), /*buffer_bytes=*/512);
  constexpr int64_t kN = 600;
  const Dataset ds = Dataset::Range(kN).Batch(4);
  ServiceOptions options;
  options.job_name = "failover";
  options.sharding_policy = ServiceShardingPolicy::kData;
  options.credits_per_task = 2;
  std::atomic<bool> stopped{false};
  absl::Notification stop_done;
  auto results = ConsumeAll(cluster.address(), ds, options, 2, 2, [&](int64_t c, int64_t s) {
    if (c == 0 && s == 20 && !stopped.exchange(true)) {
      cluster.worker(1)->Stop();
      stop_done.Notify();
    }
  });
  EXPECT_TRUE(stopped);
  for (const Consumed& r : results) ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(results[0].steps.size(), 150u);
  EXPECT_EQ(results[1].steps.size(), 150u);
  ExpectExactlyOnce(results, kN);
}

TEST(ServiceClusterTest, DynamicShardingDeliversEveryElementOnce) {
  Cluster cluster(2);
  constexpr int64_t kN = 200;
  const Dataset ds = Dataset::Range(kN).Batch(4);
  ServiceOptions options;
  options.job_name = "dynamic";
  options.sharding_policy = ServiceShardingPolicy::kDynamic;
  auto results = ConsumeAll(cluster.address(), ds, options, 2, 2);
  for (const Consumed& r : results) ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(results[0].steps.size(), results[1].steps.size());
  ExpectExactlyOnce(results, kN);
}

TEST(ServiceClusterTest, PipelineErrorsReachTheConsumerNamingTheWorker) {
  Cluster cluster(1);
  const Dataset ds = Dataset::TextLine({"/nonexistent/sluice/cluster.txt"}).Batch(2);
  ServiceOptions options;
  options.job_name = "broken";
  options.sharding_policy = ServiceShardingPolicy::kOff;
  options.retry_deadline = absl::Seconds(5);
  Consumed r = Consume(cluster.address(), ds, options, 1);
  EXPECT_FALSE(r.status.ok());
  EXPECT_NE(r.status.message().find("cluster.txt"), absl::string_view::npos) << r.status;
}

TEST(ServiceClusterTest, UnreachableCoordinatorIsUnavailableNamingIt) {
  auto strategy = MirroredStrategy::Create({"CPU:0"});
  ASSERT_TRUE(strategy.ok());
  ServiceOptions options;
  options.coordinator_address = "127.0.0.1:1";
  options.retry_deadline = absl::Milliseconds(200);
  options.rpc_deadline = absl::Milliseconds(100);
  auto dist = DistributeDatasetFromService(*strategy, Dataset::Range(4).Batch(2), options);
  ASSERT_FALSE(dist.ok());
  EXPECT_NE(dist.status().message().find("127.0.0.1:1"), absl::string_view::npos) << dist.status();
}

}  // namespace
}  // namespace sluice
