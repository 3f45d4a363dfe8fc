// pack() through the service, exactly once with a worker killed mid-epoch: 3 real worker
// processes run jsonl_dataset(...).pack(32).batch(4) as a SHARDING_RANGES job (which falls back
// to DATA: packing is not element-wise), the consumer reads part of the epoch, one worker is
// SIGKILLed, and the rest of the epoch must still hold every token of every document exactly
// once, in order, inside its segment, with correct segment ids and positions; and the rows
// must be in-process mode's rows, in the same order.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/data/executor.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "sluice/distributed_dataset.h"
#include "sluice/service.h"
#include "sluice/strategy.h"
#include "tests/core/iterator_test_util.h"
#include "tests/core/packed_rows_check.h"
#include "tests/integration/process_cluster.h"

namespace sluice {
namespace {

constexpr int64_t kDocuments = 3000;
constexpr int64_t kLength = 32;
constexpr uint32_t kSeed = 3131;

// Document d's token k is d * 100 + k + 1 (never 0, the padding).
std::vector<int64_t> WriteDocuments(const std::string& path) {
  std::mt19937 rng(kSeed);
  std::vector<int64_t> lengths;
  std::ofstream out(path);
  for (int64_t d = 0; d < kDocuments; ++d) {
    const int64_t n = static_cast<int64_t>(rng() % 50);  // 0..49: some over kLength
    lengths.push_back(n);
    out << "{\"ids\": [";
    for (int64_t k = 0; k < n; ++k) out << (k == 0 ? "" : ", ") << d * 100 + k + 1;
    out << "]}\n";
  }
  return lengths;
}

// The rows of one batch of packed rows.
void AppendRows(const Element& batch, std::vector<testing_util::PackedRow>* rows) {
  const Tensor& ids = testing_util::DictLeaf(batch, "ids");
  const Tensor& seg = testing_util::DictLeaf(batch, "ids_segment_ids");
  const Tensor& pos = testing_util::DictLeaf(batch, "ids_positions");
  for (int64_t r = 0; r < ids.shape().dim(0); ++r) {
    auto row = [&](const Tensor& t) {
      return std::vector<int32_t>(t.data<int32_t>() + r * kLength,
                                  t.data<int32_t>() + (r + 1) * kLength);
    };
    rows->push_back({row(ids), row(seg), row(pos)});
  }
}

TEST(PackFaultTest, EveryTokenOnceInOrderWithAWorkerKilledMidEpoch) {
  std::cout << "seed " << kSeed << "\n";
  const std::string file = absl::StrCat(::testing::TempDir(), "/pack_fault_docs.jsonl");
  const std::vector<int64_t> lengths = WriteDocuments(file);
  auto ds = Dataset::Parse(absl::StrCat("jsonl_dataset('", file, "', keys={'ids': [tf.int32]})",
                                        ".pack(", kLength, ").batch(4)"));
  ASSERT_TRUE(ds.ok()) << ds.status();

  // In-process reference.
  std::vector<testing_util::PackedRow> want;
  {
    auto it = MakeIterator(*ds);
    ASSERT_TRUE(it.ok()) << it.status();
    for (int s = 0; s < 100000; ++s) {
      Element e;
      bool end = false;
      ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
      if (end) break;
      AppendRows(e, &want);
    }
  }
  const int64_t steps = static_cast<int64_t>(want.size()) / 4;
  ASSERT_GT(steps, 200);

  ProcessClusterOptions o;
  o.num_workers = 3;
  o.worker_timeout = absl::Seconds(2);  // the dead worker's task moves quickly
  o.heartbeat_interval = absl::Milliseconds(100);
  o.worker_buffer_bytes = 4096;  // a few steps ahead at most: the kill lands mid-epoch
  auto started = ProcessCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  ProcessCluster& c = **started;
  auto strategy = MirroredStrategy::Create({"CPU:0"});
  ASSERT_TRUE(strategy.ok());
  ServiceOptions options;
  options.coordinator_address = c.coordinator();
  options.job_name = "pack-worker-kill";
  options.sharding_policy = ServiceShardingPolicy::kRanges;
  options.receive_budget_bytes = 4096;
  options.retry_deadline = absl::Seconds(90);
  auto dist = DistributeDatasetFromService(*strategy, *ds, options);
  ASSERT_TRUE(dist.ok()) << dist.status();
  auto it = dist->MakeIterator();
  ASSERT_TRUE(it.ok()) << it.status();
  std::vector<testing_util::PackedRow> got;
  for (int64_t s = 0; s < steps / 4; ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    ASSERT_TRUE(x.ok()) << x.status() << c.Logs();
    AppendRows(x->values()[0], &got);
  }
  ASSERT_TRUE(c.KillWorker(0).ok());
  for (int64_t s = 0; s < 100000; ++s) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    if (!x.ok()) {
      ASSERT_EQ(x.status().code(), absl::StatusCode::kOutOfRange) << x.status() << c.Logs();
      break;
    }
    AppendRows(x->values()[0], &got);
  }
  testing_util::CheckPackedRows(lengths, kLength, got, [](int32_t token) {
    return std::pair<int64_t, int64_t>((token - 1) / 100, (token - 1) % 100);
  });
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < want.size(); ++r) {
    ASSERT_EQ(got[r].tokens, want[r].tokens) << "row " << r << " differs from in-process mode";
    ASSERT_EQ(got[r].segment_ids, want[r].segment_ids) << "row " << r;
  }
  EXPECT_TRUE(c.StopAll().ok()) << c.Logs();
}

}  // namespace
}  // namespace sluice
