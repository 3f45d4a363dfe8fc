// A late consumer through the whole service (in-process coordinator and worker, consumers
// reading through DistributeDatasetFromService): consumer 1 of a coordinated job starts only
// after consumer 0 has read the whole epoch, so the worker, its buffer full, detached it. With
// a retention window (--retention_bytes) covering the task it reads every step from the
// worker's memory: the worker's /metrics count no replay and a window hit. Without one it reads
// every step through a replay. Either way every element is read exactly once.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/obs/metrics.h"
#include "gtest/gtest.h"
#include "sluice/service.h"
#include "tests/worker/in_process_cluster.h"
#include "worker/worker_metrics.h"
#include "worker/worker_server.h"

namespace sluice {
namespace {

// The sum of a metric's samples in a Prometheus text scrape.
double Sum(const std::string& scrape, absl::string_view name) {
  double total = 0;
  for (absl::string_view line : absl::StrSplit(scrape, '\n')) {
    if (!absl::StartsWith(line, name) || line.size() == name.size()) continue;
    if (line[name.size()] != '{' && line[name.size()] != ' ') continue;  // a longer name
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) total += v;
  }
  return total;
}

struct LateRun {
  std::vector<Consumed> consumed;  // consumer 0's, then consumer 1's
  std::string metrics_between;     // the worker's /metrics after consumer 0, the task alive
  std::string metrics;             // the worker's /metrics after both
};

constexpr int64_t kElements = 2000;  // 250 steps of 8, 64 bytes each

LateRun ReadLate(size_t retention_bytes) {
  LateRun run;
  Cluster cluster(1, absl::Seconds(10), /*buffer_bytes=*/512,
                  [retention_bytes](WorkerServerOptions* w) {
                    w->detach_unattached_after = absl::ZeroDuration();
                    w->retention_bytes = retention_bytes;
                  });
  MetricsRegistry registry;
  WorkerMetrics metrics(cluster.worker(0), &registry);
  const Dataset ds = Dataset::Range(kElements).Batch(8);
  ServiceOptions options;
  options.job_name = "late";
  options.num_consumers = 2;
  options.sharding_policy = ServiceShardingPolicy::kOff;
  options.num_tasks = 1;
  for (int64_t c = 0; c < 2; ++c) {
    options.consumer_index = c;
    run.consumed.push_back(Consume(cluster.address(), ds, options, /*replicas=*/1));
    if (c == 0) run.metrics_between = registry.Scrape();
  }
  run.metrics = registry.Scrape();
  return run;
}

void ExpectEveryStepOfTheEpoch(const LateRun& run) {
  ASSERT_EQ(run.consumed.size(), 2u);
  for (const Consumed& c : run.consumed) {
    ASSERT_TRUE(c.status.ok()) << c.status;
    EXPECT_EQ(c.steps.size(), static_cast<size_t>(kElements / 8));
  }
  ExpectExactlyOnce(run.consumed, kElements);
  // Each consumer's half of step s: elements 8s..8s+3 for consumer 0, 8s+4..8s+7 for 1.
  for (int64_t c = 0; c < 2; ++c) {
    for (size_t s = 0; s < run.consumed[c].steps.size(); ++s) {
      const int64_t first = static_cast<int64_t>(8 * s) + 4 * c;
      EXPECT_EQ(run.consumed[c].steps[s][0],
                (std::vector<int64_t>{first, first + 1, first + 2, first + 3}))
          << "consumer " << c << ", step " << s;
    }
  }
}

TEST(ServiceLateConsumerTest, WithinTheRetentionWindowNoReplay) {
  LateRun run = ReadLate(/*retention_bytes=*/1 << 20);
  ExpectEveryStepOfTheEpoch(run);
  EXPECT_EQ(Sum(run.metrics, "sluice_worker_task_replays_total"), 0) << run.metrics;
  EXPECT_GE(Sum(run.metrics, "sluice_worker_retention_hits_total"), 1) << run.metrics;
  // A gauge of the live task: read while consumer 1 still needs the task (after both have read
  // it the worker may already have dropped the task and, with it, its series).
  EXPECT_EQ(Sum(run.metrics_between, "sluice_worker_retention_capacity_bytes"), 1 << 20)
      << run.metrics_between;
}

TEST(ServiceLateConsumerTest, WithoutAWindowItReplays) {
  LateRun run = ReadLate(/*retention_bytes=*/0);
  ExpectEveryStepOfTheEpoch(run);
  EXPECT_GE(Sum(run.metrics, "sluice_worker_task_replays_total"), 1) << run.metrics;
  EXPECT_EQ(Sum(run.metrics, "sluice_worker_retention_hits_total"), 0) << run.metrics;
}

}  // namespace
}  // namespace sluice
