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
#include "core/data/distribute/rebatch.h"
#include "gtest/gtest.h"
#include "server/grpc_coordinator_service.h"
#include "sluice/service.h"
#include "sluice/strategy.h"
#include "tests/worker/in_process_cluster.h"
#include "worker/worker_server.h"

namespace sluice {
namespace {

TEST(ServiceClusterTest, CoordinatedEpochExactlyOnceInOrderWithTfSizes) {
  Cluster cluster(3);
  constexpr int64_t kN = 103, kB = 7, kC = 2, kR = 2;
  const Dataset ds = Dataset::Range(kN).Batch(kB);
  ServiceOptions options;
  options.job_name = "coordinated-epoch";
  // OFF with one task: the new-style cut, one global batch across all C x R replicas
  // (CoordinatedPieceSizes). DATA cuts like in-process DATA instead (the legacy rebatch, see
  // tests/conformance/).
  options.sharding_policy = ServiceShardingPolicy::kOff;
  options.num_tasks = 1;
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
      // Whole: the step's two pieces are one batch of the pipeline, [5b, 5b + 5), in order.
      std::vector<int64_t> batch = step[0];
      batch.insert(batch.end(), step[1].begin(), step[1].end());
      ASSERT_FALSE(batch.empty());
      const int64_t first = batch[0];
      EXPECT_EQ(first % 5, 0) << "a step that does not start a batch: " << first;
      EXPECT_EQ(batch, (std::vector<int64_t>{first, first + 1, first + 2, first + 3, first + 4}));
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
  options.receive_budget_bytes = 512;  // about two steps per stream
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
