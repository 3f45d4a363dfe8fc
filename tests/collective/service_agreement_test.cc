// EndOfDataAgreement wired into DistributeDatasetFromService (ServiceOptions.
// end_of_data_collective): an in-process cluster on port 0 (a coordinator, two workers) and two
// consumers reading independently, each with its own CpuCollective. Independent reads hand out
// whole batches first come first served, so the consumers get different numbers of batches;
// with the agreement both see the same number of steps, the one with less data padding with
// size-0 dummies, and every element still arrives exactly once.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/cpu_collective.h"
#include "gtest/gtest.h"
#include "server/grpc_coordinator_service.h"
#include "sluice/service.h"
#include "sluice/strategy.h"
#include "worker/worker_server.h"

namespace sluice {
namespace {

void Quiet(absl::string_view) {}

struct Read {
  absl::Status status;
  std::vector<std::vector<int64_t>> steps;  // one replica per consumer: its values per step
};

TEST(ServiceEndOfDataAgreementTest, IndependentConsumersEndAtTheSameStep) {
  CoordinatorServerOptions c;
  c.coordinator.log = Quiet;
  auto coordinator = CoordinatorServer::Start(c);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  std::vector<std::unique_ptr<WorkerServer>> workers;
  for (int i = 0; i < 2; ++i) {
    WorkerServerOptions w;
    w.coordinator_address = (*coordinator)->address();
    w.heartbeat_interval = absl::Milliseconds(100);
    w.log = Quiet;
    auto worker = WorkerServer::Start(w);
    ASSERT_TRUE(worker.ok()) << worker.status();
    workers.push_back(*std::move(worker));
  }
  for (int i = 0; i < 10000; ++i) {
    if (std::all_of(workers.begin(), workers.end(), [](const auto& w) { return w->registered(); }))
      break;
    absl::SleepFor(absl::Milliseconds(5));
  }

  constexpr int kConsumers = 2;
  // range(53).batch(5): 11 batches, the last of 3. An odd count cannot split evenly, so without
  // the agreement the two consumers would always see different numbers of steps.
  constexpr int64_t kN = 53;
  std::vector<Read> reads(kConsumers);
  absl::Notification listening;
  int port = 0;
  std::vector<std::thread> threads;
  for (int consumer = 0; consumer < kConsumers; ++consumer) {
    threads.emplace_back([&, consumer] {
      Read& out = reads[consumer];
      CpuCollectiveOptions co;
      co.rank = consumer;
      co.size = kConsumers;
      if (consumer == 0) {
        co.address = "127.0.0.1:0";
        co.on_listening = [&](int p) {
          port = p;
          listening.Notify();
        };
      } else {
        if (!listening.WaitForNotificationWithTimeout(absl::Seconds(60))) {
          out.status = absl::DeadlineExceededError("rank 0 never listened");
          return;
        }
        co.address = absl::StrCat("127.0.0.1:", port);
      }
      auto collective = CpuCollective::Create(co);
      if (!collective.ok()) {
        out.status = collective.status();
        return;
      }
      auto strategy = MirroredStrategy::Create({"CPU:0"});
      ServiceOptions options;
      options.coordinator_address = (*coordinator)->address();
      options.job_name = "independent-agreement";
      options.read_mode = ServiceReadMode::kIndependent;
      options.sharding_policy = ServiceShardingPolicy::kData;
      options.consumer_index = consumer;
      options.num_consumers = kConsumers;
      options.end_of_data_collective = collective->get();
      auto dist = DistributeDatasetFromService(*strategy, Dataset::Range(kN).Batch(5), options);
      if (!dist.ok()) {
        out.status = dist.status();
        return;
      }
      auto it = dist->MakeIterator();
      if (!it.ok()) {
        out.status = it.status();
        return;
      }
      for (int s = 0; s < 1000; ++s) {
        absl::StatusOr<PerReplica<Element>> x = it->GetNext();
        if (!x.ok()) {
          if (x.status().code() != absl::StatusCode::kOutOfRange) out.status = x.status();
          return;
        }
        const Tensor& t = x->values()[0].leaf();
        out.steps.push_back(
            std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.num_elements()));
      }
    });
  }
  for (std::thread& t : threads) t.join();

  std::map<int64_t, int> count;
  for (int consumer = 0; consumer < kConsumers; ++consumer) {
    ASSERT_TRUE(reads[consumer].status.ok()) << consumer << ": " << reads[consumer].status;
    for (const auto& step : reads[consumer].steps) {
      for (int64_t v : step) ++count[v];
    }
  }
  // Exactly once overall.
  EXPECT_EQ(count.size(), static_cast<size_t>(kN));
  for (int64_t i = 0; i < kN; ++i) EXPECT_EQ(count[i], 1) << "element " << i;
  // The same number of steps everywhere: the larger share of the 11 batches, padded with
  // size-0 dummies (only at the end) on the consumer that had fewer.
  ASSERT_EQ(reads[0].steps.size(), reads[1].steps.size());
  size_t real[kConsumers] = {0, 0};
  for (int consumer = 0; consumer < kConsumers; ++consumer) {
    bool dummies_started = false;
    for (const auto& step : reads[consumer].steps) {
      if (step.empty()) {
        dummies_started = true;
      } else {
        EXPECT_FALSE(dummies_started) << "consumer " << consumer << ": data after a dummy";
        ++real[consumer];
      }
    }
  }
  EXPECT_EQ(real[0] + real[1], 11u);
  EXPECT_EQ(reads[0].steps.size(), std::max(real[0], real[1]));
}

}  // namespace
}  // namespace sluice
