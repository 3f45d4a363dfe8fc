// Multi-process: the real sluice-coordinator, 3 sluice-workers and 2 consumer processes
// (`sluicectl run --format=json`, 2 replicas each) read a finite epoch in coordinated mode under
// every sharding policy. What users rely on (README "Guarantees", docs/SERVICE.md):
//  - every element delivered exactly once across all replicas (OFF: once per task, i.e. per
//    worker copy: each of the K = 3 tasks produces the whole dataset);
//  - both consumers read the same number of steps and see the end of data together;
//  - the per-step piece sizes follow TF's rebatching rule, written here from TF's
//    distribute.batch_sizes_for_worker (TF_SEMANTICS.md) and not taken from the code under test,
//    partial steps filled in order and padded with size-0 pieces; and where the cut is the legacy
//    one (DATA, AUTO on a range, a map after the batch), the consumers print, between them,
//    exactly TF's legacy rebatch of the single pipeline (_LegacyRebatchDataset's rule, written
//    here) and what in-process mode prints with all C x R replicas under DATA;
//  - for the static policies, the exact values of every step of every replica, as the
//    round-robin schedule of docs/SERVICE.md gives them;
//  - element_spec over RPC (`sluicectl element-spec --coordinator`) equals the local one.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/integration/process_cluster.h"
#include "tests/integration/step_model.h"

namespace sluice {
namespace {

constexpr int kWorkers = 3;    // K = 3 tasks: one per worker registered when the job is made
constexpr int64_t kConsumers = 2;
constexpr int64_t kReplicas = 2;
constexpr int64_t kN = kConsumers * kReplicas;
constexpr int64_t kBatch = 7;  // not a multiple of N: sizes rotate ([2,2,2,1], [2,1,2,2])
constexpr int64_t kRangeSize = 103;
// FILE: files of these lengths; file f holds the lines f*100, f*100+1, ...
const std::vector<int64_t> kFileLengths = {9, 11, 7, 6};

struct PolicyCase {
  std::string name;    // test name suffix
  std::string policy;  // --sharding_policy
  // The pipeline, given the data files.
  std::function<std::string(const std::vector<std::string>& files)> pipeline;
  // Each task's element stream, in task order; empty for DYNAMIC (timing-dependent).
  std::function<std::vector<std::vector<int64_t>>()> task_elements;
  int copies = 1;  // how many times each element is delivered in the epoch
  // DATA-like (legacy cut, core/data/distribute/replica_cut.h): consumer c must print replicas c*R .. c*R+R-1
  // of what in-process `sluicectl run --devices=<C x R devices> --auto_shard_policy=DATA`
  // prints (one global batch cut across all C x R replicas, docs/SERVICE.md).
  bool equals_local_data = false;
};

// The oracle, written from TensorFlow and not from Sluice's code (core/data/distribute/rebatch.h
// and replica_cut.h are what is under test).
//
// TF's python/data/experimental/ops/distribute.py batch_sizes_for_worker: N = W x R sizes,
// floor + 1 for the first B - N * floor, rotated left by worker_index * R.
std::vector<int64_t> TfBatchSizesForWorker(int64_t global_batch, int64_t num_workers,
                                           int64_t replicas, int64_t worker_index) {
  const int64_t n = num_workers * replicas;
  const int64_t floor = global_batch / n;
  const int64_t num_ceil = global_batch - n * floor;
  std::vector<int64_t> worker0;
  for (int64_t i = 0; i < n; ++i) worker0.push_back(i < num_ceil ? floor + 1 : floor);
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < n; ++i) sizes.push_back(worker0[(worker_index * replicas + i) % n]);
  return sizes;
}

// TF's multi-worker rebatching with the consumers as its workers: worker c's dataset is
// rebatched with sizes cycling through TfBatchSizesForWorker(B, C, R, c), its R replicas taking
// R consecutive pieces a step. One row per step for N steps (a whole number of periods),
// pieces in global order c * R + r.
std::vector<int64_t> TfCoordinatedPeriod() {
  std::vector<int64_t> period;
  for (int64_t s = 0; s < kN; ++s) {
    for (int64_t c = 0; c < kConsumers; ++c) {
      const std::vector<int64_t> sizes = TfBatchSizesForWorker(kBatch, kConsumers, kReplicas, c);
      for (int64_t r = 0; r < kReplicas; ++r) period.push_back(sizes[(s * kReplicas + r) % kN]);
    }
  }
  return period;
}

// TF's legacy rebatch (kernels/data/experimental/rebatch_dataset_op.cc, _LegacyRebatchDataset):
// each input batch of b elements is cut into N pieces of ceil(b / N), the last ones shorter or
// empty: range(8).batch(4) over 3 replicas gives [0 1] [2 3] [], [4 5] [6 7] [].
std::vector<ModelStep> TfLegacyRebatch(const std::vector<int64_t>& elements, int64_t batch,
                                       int64_t n) {
  std::vector<ModelStep> steps;
  for (size_t start = 0; start < elements.size(); start += batch) {
    const int64_t b = std::min<int64_t>(batch, static_cast<int64_t>(elements.size() - start));
    const int64_t slice = (b + n - 1) / n;
    ModelStep step;
    for (int64_t r = 0; r < n; ++r) {
      std::vector<int64_t> piece;
      for (int64_t i = r * slice; i < std::min(b, (r + 1) * slice); ++i) {
        piece.push_back(elements[start + i]);
      }
      step.push_back(std::move(piece));
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

std::vector<int64_t> FileValues(size_t f) {
  std::vector<int64_t> v;
  for (int64_t j = 0; j < kFileLengths[f]; ++j) v.push_back(static_cast<int64_t>(f) * 100 + j);
  return v;
}

std::vector<int64_t> AllFileValues() {
  std::vector<int64_t> all;
  for (size_t f = 0; f < kFileLengths.size(); ++f) {
    for (int64_t v : FileValues(f)) all.push_back(v);
  }
  return all;
}

// FILE: task k reads files k, k+K, ...
std::vector<std::vector<int64_t>> FileTasks() {
  std::vector<std::vector<int64_t>> tasks(kWorkers);
  for (size_t f = 0; f < kFileLengths.size(); ++f) {
    for (int64_t v : FileValues(f)) tasks[f % kWorkers].push_back(v);
  }
  return tasks;
}

std::string RangePipeline(const std::vector<std::string>&) {
  return absl::StrCat("range(", kRangeSize, ").batch(", kBatch, ")");
}

std::string FilePipeline(const std::vector<std::string>& files) {
  std::vector<std::string> quoted;
  for (const std::string& f : files) quoted.push_back(absl::StrCat("'", f, "'"));
  return absl::StrCat("text_line_dataset([", absl::StrJoin(quoted, ", "), "]).batch(", kBatch,
                      ")");
}

std::vector<PolicyCase> Cases() {
  // DATA (and AUTO on a non-file source): task k keeps global steps s % K == k of the single
  // pipeline, so the job's step sequence is the single pipeline's: model it as one task.
  auto single = [] { return std::vector<std::vector<int64_t>>{Iota(kRangeSize)}; };
  return {
      {"Off", "OFF", RangePipeline,
       [] { return std::vector<std::vector<int64_t>>(kWorkers, Iota(kRangeSize)); }, kWorkers},
      {"AutoRange", "AUTO", RangePipeline, single, 1, true},
      {"AutoFiles", "AUTO", FilePipeline, FileTasks},
      {"File", "FILE", FilePipeline, FileTasks},
      {"Data", "DATA", RangePipeline, single, 1, true},
      // Issue 12: a map after the batch made every task fail ("global batch size must be
      // non-negative, got -1"); TF and in-process mode use the legacy rebatch.
      {"MapAfterBatch", "AUTO",
       [](const std::vector<std::string>&) {
         return absl::StrCat("range(", kRangeSize, ").batch(", kBatch, ").map(cast(tf.int64))");
       },
       single, 1, true},
      {"Hint", "HINT",
       [](const std::vector<std::string>&) {
         return absl::StrCat("range(", kRangeSize, ").shard(SHARD_HINT, SHARD_HINT).batch(",
                             kBatch, ")");
       },
       [] {
         std::vector<std::vector<int64_t>> tasks(kWorkers);
         for (int64_t i = 0; i < kRangeSize; ++i) tasks[i % kWorkers].push_back(i);
         return tasks;
       }},
      {"Dynamic", "DYNAMIC", RangePipeline, nullptr},
  };
}

// Test names (CTest lists each case by its printed parameter).
void PrintTo(const PolicyCase& c, std::ostream* os) { *os << c.name; }

class ServicePolicyTest : public ::testing::TestWithParam<PolicyCase> {};

TEST_P(ServicePolicyTest, FiniteEpochExactlyOnceInLockstepWithTfSizes) {
  const PolicyCase& pc = GetParam();
  auto cluster_or = ProcessCluster::Start({.num_workers = kWorkers});
  ASSERT_TRUE(cluster_or.ok()) << cluster_or.status();
  ProcessCluster& cluster = **cluster_or;

  std::vector<std::string> files;
  for (size_t f = 0; f < kFileLengths.size(); ++f) {
    files.push_back(absl::StrCat(cluster.temp_dir(), "/part-", f, ".txt"));
    std::ofstream out(files.back());
    for (int64_t v : FileValues(f)) out << v << "\n";
    ASSERT_TRUE(out.good()) << files.back();
  }
  const std::string pipeline = pc.pipeline(files);
  const std::string job = absl::StrCat("policy-", pc.name);

  // Two consumer processes side by side.
  std::vector<std::unique_ptr<Subprocess>> consumers;
  for (int64_t c = 0; c < kConsumers; ++c) {
    auto p = StartSluicectl({"run", "--coordinator=" + cluster.coordinator(), "--job=" + job,
                             "--pipeline=" + pipeline, "--devices=CPU:0,CPU:1",
                             absl::StrCat("--consumer_index=", c),
                             absl::StrCat("--num_consumers=", kConsumers),
                             "--sharding_policy=" + pc.policy, "--format=json",
                             "--retry_deadline=30s"});
    ASSERT_TRUE(p.ok()) << p.status();
    consumers.push_back(*std::move(p));
  }
  std::vector<std::vector<ModelStep>> views;
  for (int64_t c = 0; c < kConsumers; ++c) {
    auto r = consumers[c]->Wait(absl::Seconds(90));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->exit_code, 0) << "consumer " << c << ": " << r->Describe() << "\n"
                               << r->stderr_text << cluster.Logs();
    auto steps = ParseRunJson(r->stdout_text);
    ASSERT_TRUE(steps.ok()) << steps.status();
    views.push_back(*std::move(steps));
  }

  // Identical step counts: every consumer sees the end of data at the same step.
  auto global_or = JoinConsumers(views);
  ASSERT_TRUE(global_or.ok()) << global_or.status();
  const std::vector<ModelStep>& global = *global_or;
  ASSERT_FALSE(global.empty());
  for (const auto& view : views) {
    for (const ModelStep& step : view) ASSERT_EQ(step.size(), static_cast<size_t>(kReplicas));
  }

  // Every element exactly once (OFF: once per task).
  std::map<int64_t, int> count;
  for (const ModelStep& step : global) {
    for (const auto& piece : step) {
      for (int64_t v : piece) ++count[v];
    }
  }
  const std::vector<int64_t> all = pc.policy == "FILE" || pc.name == "AutoFiles"
                                       ? AllFileValues()
                                       : Iota(kRangeSize);
  EXPECT_EQ(count.size(), all.size());
  for (int64_t v : all) EXPECT_EQ(count[v], pc.copies) << "element " << v;

  // Sizes by TF's rule (written above from TF, not taken from rebatch.h), and for static
  // policies the exact schedule.
  const std::vector<int64_t> period = TfCoordinatedPeriod();
  for (size_t s = 0; s < global.size() && !pc.equals_local_data; ++s) {
    EXPECT_TRUE(FollowsTfRule(PieceSizes(global[s]), period, kN))
        << "step " << s << ": " << DescribeSteps({global[s]});
  }
  if (pc.equals_local_data) {
    // TF's legacy cut of the single pipeline, then in-process mode (which shares replica_cut.h
    // with the service, so it alone could not catch a wrong cut).
    const std::vector<ModelStep> tf_legacy = TfLegacyRebatch(Iota(kRangeSize), kBatch, kN);
    EXPECT_EQ(global, tf_legacy) << "got:  " << DescribeSteps(global)
                                 << "\nTF's legacy rebatch: " << DescribeSteps(tf_legacy);
    auto local = RunSluicectl({"run", "--pipeline=" + pipeline,
                               "--devices=CPU:0,CPU:1,CPU:2,CPU:3", "--auto_shard_policy=DATA",
                               "--format=json"});
    ASSERT_TRUE(local.ok()) << local.status();
    ASSERT_EQ(local->exit_code, 0) << local->stderr_text;
    auto local_steps = ParseRunJson(local->stdout_text);
    ASSERT_TRUE(local_steps.ok()) << local_steps.status();
    for (int64_t c = 0; c < kConsumers; ++c) {
      EXPECT_EQ(views[c], ConsumerView(*local_steps, c, kReplicas))
          << "consumer " << c << ": " << DescribeSteps(views[c]) << "\nin-process: "
          << DescribeSteps(*local_steps);
    }
  } else if (pc.task_elements) {
    std::vector<std::vector<ModelStep>> tasks;
    for (const auto& elements : pc.task_elements()) {
      tasks.push_back(TaskSteps(elements, period, kN));
    }
    const std::vector<ModelStep> want = RoundRobin(tasks);
    EXPECT_EQ(global, want) << "got:  " << DescribeSteps(global) << "\nwant: "
                            << DescribeSteps(want);
    // What each consumer printed, exactly.
    for (int64_t c = 0; c < kConsumers; ++c) {
      EXPECT_EQ(views[c], ConsumerView(want, c, kReplicas)) << "consumer " << c;
    }
  } else {
    // DYNAMIC: the order depends on which worker asks first; at most one partial step a task.
    int partial = 0;
    for (const ModelStep& step : global) {
      int64_t total = 0;
      for (int64_t size : PieceSizes(step)) total += size;
      partial += total < kBatch ? 1 : 0;
    }
    EXPECT_LE(partial, kWorkers);
  }

  // The coordinator agrees: the job has one task per worker and finishes.
  bool finished = false;
  for (int i = 0; i < 300 && !finished; ++i) {
    auto status = cluster.Status();
    ASSERT_TRUE(status.ok()) << status.status();
    for (const proto::JobStatus& j : status->jobs()) {
      if (j.job_name() != job) continue;
      EXPECT_EQ(j.tasks_size(), kWorkers);
      finished = j.finished();
    }
    if (!finished) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(finished) << "job " << job << " not finished\n" << cluster.Logs();

  // element_spec over RPC equals the local one (JSON and TF's repr).
  for (const std::string format : {"json", "tf"}) {
    auto remote = RunSluicectl({"element-spec", "--coordinator=" + cluster.coordinator(),
                                "--pipeline=" + pipeline, "--devices=CPU:0,CPU:1",
                                absl::StrCat("--num_consumers=", kConsumers),
                                "--sharding_policy=" + pc.policy, "--format=" + format});
    std::string local_policy = pc.policy == "DYNAMIC" ? "OFF" : pc.policy;
    auto local = RunSluicectl({"element-spec", "--pipeline=" + pipeline, "--devices=CPU:0,CPU:1",
                               absl::StrCat("--num_workers=", kConsumers),
                               "--auto_shard_policy=" + local_policy, "--format=" + format});
    ASSERT_TRUE(remote.ok() && local.ok());
    ASSERT_EQ(remote->exit_code, 0) << remote->stderr_text;
    ASSERT_EQ(local->exit_code, 0) << local->stderr_text;
    EXPECT_EQ(remote->stdout_text, local->stdout_text) << format;
    EXPECT_NE(remote->stdout_text.find(format == "tf" ? "PerReplicaSpec" : "per_replica"),
              std::string::npos)
        << remote->stdout_text;
  }

  absl::Status stopped = cluster.StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

INSTANTIATE_TEST_SUITE_P(Policies, ServicePolicyTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<PolicyCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace sluice
