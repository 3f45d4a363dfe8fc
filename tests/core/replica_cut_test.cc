#include "core/data/distribute/replica_cut.h"

#include <string>
#include <vector>

#include "core/data/executor.h"
#include "core/data/distribute/global_order.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;
using Kind = ReplicaCut::Kind;

Dataset Parse(const std::string& expr) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expr);
  EXPECT_TRUE(ds.ok()) << ds.status();
  return *ds;
}

// The pieces of `ds` after `cut`, each as its first leaf's values (numbers as int64).
std::vector<std::vector<int64_t>> Pieces(const Dataset& ds, const ReplicaCut& cut) {
  std::vector<std::vector<int64_t>> out;
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(ApplyReplicaCut(ds, cut));
  EXPECT_TRUE(it.ok()) << it.status();
  for (int i = 0; it.ok() && i < 1000; ++i) {
    Element e;
    bool end = false;
    EXPECT_TRUE((*it)->GetNext(&e, &end).ok());
    if (end) break;
    const std::vector<Tensor> leaves = e.Flatten();
    const Tensor& t = leaves[0];
    std::vector<int64_t> v;
    for (int64_t k = 0; k < t.num_elements(); ++k) v.push_back(t.data<int64_t>()[k]);
    out.push_back(v);
  }
  return out;
}

TEST(ReplicaCutTest, OneReplicaDoesNotCut) {
  absl::StatusOr<ReplicaCut> cut = ReplicaCutForWorker(Parse("range(10)"), 1, 1, 0);
  ASSERT_TRUE(cut.ok()) << cut.status();  // not even batched: no rebatch with one replica
  EXPECT_EQ(cut->kind, Kind::kNone);
  cut = ReplicaCutForJob(Parse("range(10)"), /*data_sharded=*/true, 1, 1);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->kind, Kind::kNone);
}

TEST(ReplicaCutTest, KnownBatchSizeCutsBySizesForWorker) {
  absl::StatusOr<ReplicaCut> cut = ReplicaCutForWorker(Parse("range(12).batch(9)"), 2, 2, 1);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->kind, Kind::kSizes);
  EXPECT_THAT(cut->sizes, ElementsAre(2, 2, 3, 2));  // worker 1's rotation of [3, 2, 2, 2]
}

// Issue 12: a map after the batch hides B from TF's ComputeBatchSize, so TF (and in-process
// mode) fall back to the legacy rebatch; the service failed with "global batch size must be
// non-negative, got -1".
TEST(ReplicaCutTest, MapAfterBatchFallsBackToLegacyRebatch) {
  const Dataset ds = Parse("range(10).batch(4).map(cast(tf.float32))");
  for (bool data_sharded : {false, true}) {
    for (int64_t consumers : {1, 2}) {
      absl::StatusOr<ReplicaCut> cut = ReplicaCutForJob(ds, data_sharded, consumers, 2);
      ASSERT_TRUE(cut.ok()) << cut.status();
      EXPECT_EQ(cut->kind, Kind::kLegacy);
      EXPECT_EQ(cut->num_pieces, consumers * 2);
    }
  }
  absl::StatusOr<ReplicaCut> cut = ReplicaCutForWorker(ds, 1, 2, 0);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->kind, Kind::kLegacy);
}

// Issue 12: range(12).batch(9) on 4 replicas under AUTO/DATA is TF's legacy cut
// [0 1 2] [3 4 5] [6 7 8] [] / [9] [10] [11] [], which the service did not give.
TEST(ReplicaCutTest, DataShardedJobCutsLikeInProcessData) {
  const Dataset ds = Parse("range(12).batch(9)");
  absl::StatusOr<ReplicaCut> cut = ReplicaCutForJob(ds, /*data_sharded=*/true, 1, 4);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->kind, Kind::kLegacy);
  EXPECT_THAT(Pieces(ds, *cut),
              ElementsAre(ElementsAre(0, 1, 2), ElementsAre(3, 4, 5), ElementsAre(6, 7, 8),
                          ElementsAre(), ElementsAre(9), ElementsAre(10), ElementsAre(11),
                          ElementsAre()));
  // Not data-sharded (OFF): TF's new-style rebatch, [3, 2, 2, 2].
  cut = ReplicaCutForJob(ds, /*data_sharded=*/false, 1, 4);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->kind, Kind::kSizes);
  EXPECT_THAT(cut->sizes, ElementsAre(3, 2, 2, 2));
}

TEST(ReplicaCutTest, CoordinatedConsumersShareOneGlobalBatch) {
  // Sizes: one global batch across C x R replicas, consumer c getting TF's worker c sizes.
  absl::StatusOr<ReplicaCut> sizes = ReplicaCutForJob(Parse("range(20).batch(7)"), false, 2, 2);
  ASSERT_TRUE(sizes.ok());
  EXPECT_EQ(sizes->kind, Kind::kSizes);
  EXPECT_THAT(sizes->sizes, ElementsAre(2, 2, 2, 1, 2, 1, 2, 2));  // CoordinatedPieceSizes
  // Legacy: N = C x R pieces a batch, as one worker with N replicas.
  absl::StatusOr<ReplicaCut> legacy = ReplicaCutForJob(Parse("range(20).batch(7)"), true, 2, 3);
  ASSERT_TRUE(legacy.ok());
  EXPECT_EQ(legacy->kind, Kind::kLegacy);
  EXPECT_EQ(legacy->num_pieces, 6);
}

TEST(ReplicaCutTest, DataShardingByPolicyAndSource) {
  const Dataset range = Parse("range(10).batch(2)");
  const Dataset text = Parse("text_line_dataset(['a.txt']).batch(2)");
  EXPECT_TRUE(CutsLikeDataSharding(AutoShardPolicy::kData, text));
  EXPECT_TRUE(CutsLikeDataSharding(AutoShardPolicy::kAuto, range));
  EXPECT_FALSE(CutsLikeDataSharding(AutoShardPolicy::kAuto, text));
  EXPECT_FALSE(CutsLikeDataSharding(AutoShardPolicy::kOff, range));
  EXPECT_FALSE(CutsLikeDataSharding(AutoShardPolicy::kFile, range));
  // A SHARDING_RANGES task's pipeline (a PermutedSource) cuts like its job's dataset.
  const Dataset slices = Parse("from_tensor_slices([1, 2, 3, 4, 5]).batch(2)");
  absl::StatusOr<GlobalOrderPlan> plan = PlanGlobalOrder(slices);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<Dataset> piece = GlobalOrderRange(slices, *plan, {}, 0, 0, 2);
  ASSERT_TRUE(piece.ok()) << piece.status();
  ASSERT_TRUE(piece->def().source().has_permuted());
  EXPECT_TRUE(CutsLikeDataSharding(AutoShardPolicy::kAuto, *piece));
}

TEST(ReplicaCutTest, UnbatchedDatasetIsTfsError) {
  absl::StatusOr<ReplicaCut> cut = ReplicaCutForJob(Parse("range(10)"), false, 1, 2);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(cut.status().message()), ::testing::HasSubstr("Call the `batch`"));
}

}  // namespace
}  // namespace sluice
