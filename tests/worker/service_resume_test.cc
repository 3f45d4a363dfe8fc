// The client side of the deterministic global order (SHARDING_RANGES) and of resumable
// iterators, end to end through an in-process cluster: consumers read ranges in order, the
// sequence does not depend on the number of workers, and a checkpointed iterator resumes,
// with another number of workers, exactly where it stopped.
#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/service.h"
#include "sluice/strategy.h"
#include "tests/worker/in_process_cluster.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kN = 203;  // not a multiple of the batch: a partial last step per epoch
constexpr int64_t kB = 8;
constexpr int64_t kConsumers = 2;
constexpr int64_t kReplicas = 2;

ServiceOptions RangesOptions(const std::string& job) {
  ServiceOptions o;
  o.job_name = job;
  o.sharding_policy = ServiceShardingPolicy::kRanges;
  o.order.seed = 1234;
  o.order.shuffle = ServiceShuffle::kFull;
  o.order.num_epochs = 2;
  o.order.range_steps = 3;
  o.heartbeat_interval = absl::Milliseconds(50);
  return o;
}

// Each consumer's steps, flattened step by step: what a trainer's sequence is.
using Sequences = std::vector<std::vector<std::vector<std::vector<int64_t>>>>;

Sequences StepsOf(const std::vector<Consumed>& results) {
  Sequences out;
  for (const Consumed& r : results) out.push_back(r.steps);
  return out;
}

// The global order: step-major, then consumer, then replica.
std::vector<int64_t> GlobalOrder(const Sequences& s) {
  std::vector<int64_t> flat;
  for (size_t step = 0; step < s[0].size(); ++step) {
    for (const auto& consumer : s) {
      for (const auto& piece : consumer[step]) flat.insert(flat.end(), piece.begin(), piece.end());
    }
  }
  return flat;
}

// A consumer retires (joins and frees) each range it has read to its end while its monitor
// thread, heartbeating, may be cancelling that range's stream: with one-step ranges and a 1 ms
// heartbeat both happen at every step. The monitor now shares ownership of the tasks it works
// on (it held raw pointers the caller could free under it); the sequence stays exact.
TEST(ServiceResumeTest, RangesRetiredWhileTheMonitorHeartbeatsEveryMillisecond) {
  Cluster cluster(2);
  ServiceOptions o = RangesOptions("retire-under-monitor");
  o.order.range_steps = 1;
  o.order.num_epochs = 3;
  o.heartbeat_interval = absl::Milliseconds(1);
  auto results = ConsumeAll(cluster.address(), Dataset::Range(kN).Batch(kB), o, kConsumers,
                            kReplicas);
  for (const Consumed& r : results) ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(results[0].steps.size(), 78u);  // three epochs of 26 steps
  const std::vector<int64_t> flat = GlobalOrder(StepsOf(results));
  ASSERT_EQ(flat.size(), 3u * kN);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> one(flat.begin() + epoch * kN, flat.begin() + (epoch + 1) * kN);
    std::sort(one.begin(), one.end());
    for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(one[i], i) << "epoch " << epoch;
  }
}

TEST(ServiceResumeTest, RangesSequenceIsTheSameWithOneTwoAndFourWorkers) {
  Sequences reference;
  for (int workers : {1, 2, 4}) {
    Cluster cluster(workers);
    auto results = ConsumeAll(cluster.address(), Dataset::Range(kN).Batch(kB),
                              RangesOptions("same-order"), kConsumers, kReplicas);
    for (const Consumed& r : results) ASSERT_TRUE(r.status.ok()) << workers << ": " << r.status;
    // Two epochs of ceil(203 / 8) = 26 steps, every consumer in lockstep.
    ASSERT_EQ(results[0].steps.size(), 52u) << workers << " workers";
    ASSERT_EQ(results[1].steps.size(), 52u) << workers << " workers";
    const Sequences got = StepsOf(results);
    if (reference.empty()) {
      reference = got;
      // Each epoch holds every element once, in a shuffled order that differs between epochs.
      const std::vector<int64_t> flat = GlobalOrder(got);
      ASSERT_EQ(flat.size(), 2u * kN);
      std::vector<int64_t> first(flat.begin(), flat.begin() + kN);
      std::vector<int64_t> second(flat.begin() + kN, flat.end());
      EXPECT_NE(first, second);
      std::vector<int64_t> sorted = first;
      std::sort(sorted.begin(), sorted.end());
      for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(sorted[i], i);
      std::sort(second.begin(), second.end());
      EXPECT_EQ(second, sorted);
      std::vector<int64_t> natural(first.size());
      for (int64_t i = 0; i < kN; ++i) natural[i] = i;
      EXPECT_NE(first, natural) << "SHUFFLE_FULL left the records in order";
    } else {
      EXPECT_EQ(got, reference) << workers << " workers gave another sequence";
    }
  }
}

TEST(ServiceResumeTest, ResumedWithMoreWorkersGetsExactlyTheStepsNotYetSeen) {
  const Dataset ds = Dataset::Range(kN).Batch(kB);
  Sequences whole;
  {
    Cluster cluster(2);
    auto results = ConsumeAll(cluster.address(), ds, RangesOptions("uninterrupted"), kConsumers,
                              kReplicas);
    for (const Consumed& r : results) ASSERT_TRUE(r.status.ok()) << r.status;
    whole = StepsOf(results);
  }
  constexpr int64_t kFirst = 17;  // mid-range, mid-epoch
  Cluster cluster(1);
  auto first = ConsumeAll(cluster.address(), ds, RangesOptions("interrupted"), kConsumers,
                          kReplicas, nullptr, kFirst);
  for (const Consumed& r : first) {
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_EQ(r.steps.size(), static_cast<size_t>(kFirst));
    ASSERT_TRUE(r.checkpoint.has_value());
    EXPECT_EQ(r.checkpoint->step, kFirst);
    EXPECT_EQ(r.checkpoint->epoch, 0);
    EXPECT_EQ(r.checkpoint->step_in_epoch, kFirst);
  }
  // The checkpoint travels as bytes, as it would in a model checkpoint.
  absl::StatusOr<IteratorCheckpoint> saved =
      IteratorCheckpoint::Parse(first[0].checkpoint->Serialize());
  ASSERT_TRUE(saved.ok()) << saved.status();

  cluster.AddWorker();
  cluster.AddWorker();
  ServiceOptions resume = RangesOptions("interrupted");
  resume.resume_from = *saved;
  auto rest = ConsumeAll(cluster.address(), ds, resume, kConsumers, kReplicas);
  for (int64_t c = 0; c < kConsumers; ++c) {
    ASSERT_TRUE(rest[c].status.ok()) << rest[c].status;
    auto steps = first[c].steps;
    steps.insert(steps.end(), rest[c].steps.begin(), rest[c].steps.end());
    EXPECT_EQ(steps, whole[c]) << "consumer " << c;
    ASSERT_TRUE(rest[c].checkpoint.has_value());
    EXPECT_EQ(rest[c].checkpoint->step, 52);  // at the end: a resume would read nothing
  }
}

TEST(ServiceResumeTest, DataPolicyResumesWithAnotherNumberOfWorkers) {
  const Dataset ds = Dataset::Range(kN).Batch(kB);
  ServiceOptions options;
  options.job_name = "data-whole";
  options.sharding_policy = ServiceShardingPolicy::kData;
  Sequences whole;
  {
    Cluster cluster(3);
    auto results = ConsumeAll(cluster.address(), ds, options, kConsumers, kReplicas);
    for (const Consumed& r : results) ASSERT_TRUE(r.status.ok()) << r.status;
    whole = StepsOf(results);
  }
  Cluster cluster(2);
  options.job_name = "data-interrupted";
  auto first = ConsumeAll(cluster.address(), ds, options, kConsumers, kReplicas, nullptr, 11);
  ASSERT_TRUE(first[0].checkpoint.has_value());
  cluster.AddWorker();
  // Wait (bounded) until the third worker is registered: the resumed job gets three tasks.
  for (int i = 0; i < 2000 && !cluster.worker(2)->registered(); ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(cluster.worker(2)->registered());
  options.resume_from = first[0].checkpoint;
  auto rest = ConsumeAll(cluster.address(), ds, options, kConsumers, kReplicas);
  for (int64_t c = 0; c < kConsumers; ++c) {
    ASSERT_TRUE(rest[c].status.ok()) << rest[c].status;
    auto steps = first[c].steps;
    steps.insert(steps.end(), rest[c].steps.begin(), rest[c].steps.end());
    EXPECT_EQ(steps, whole[c]) << "consumer " << c;
  }
}

TEST(ServiceResumeTest, ACheckpointOfAnotherOrderIsRefused) {
  Cluster cluster(1);
  const Dataset ds = Dataset::Range(kN).Batch(kB);
  auto first = ConsumeAll(cluster.address(), ds, RangesOptions("seeded"), 1, 1, nullptr, 2);
  ASSERT_TRUE(first[0].checkpoint.has_value());
  ServiceOptions other = RangesOptions("seeded");
  other.order.seed = 99;
  other.resume_from = first[0].checkpoint;
  Consumed c = Consume(cluster.address(), ds, other, 1);
  EXPECT_EQ(c.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status.message(), HasSubstr("seed=1234"));
}

TEST(ServiceResumeTest, LocalAndDynamicIteratorsCannotBeCheckpointed) {
  auto strategy = MirroredStrategy::Create({"CPU:0"});
  ASSERT_TRUE(strategy.ok());
  auto dist = strategy->ExperimentalDistributeDataset(Dataset::Range(10).Batch(2));
  ASSERT_TRUE(dist.ok());
  auto it = dist->MakeIterator();
  ASSERT_TRUE(it.ok());
  EXPECT_EQ(it->Checkpoint().status().code(), absl::StatusCode::kFailedPrecondition);

  Cluster cluster(1);
  ServiceOptions dynamic;
  dynamic.sharding_policy = ServiceShardingPolicy::kDynamic;
  Consumed c = Consume(cluster.address(), Dataset::Range(10).Batch(2), dynamic, 1, nullptr, 1);
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_FALSE(c.checkpoint.has_value());
}

}  // namespace
}  // namespace sluice
