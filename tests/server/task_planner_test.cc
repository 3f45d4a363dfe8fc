#include "server/task_planner.h"

#include <algorithm>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/dataset.pb.h"
#include "tests/server/server_test_util.h"

namespace sluice {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using server_test::Filenames;
using server_test::RunValues;

Dataset Files(int n) {
  std::vector<std::string> files;
  for (int i = 0; i < n; ++i) files.push_back(absl::StrCat("f", i, ".txt"));
  return Dataset::TextLine(files).Batch(2);
}

TEST(TaskPlannerTest, OffAndDataRunTheWholeDatasetDataIsStepSharded) {
  Dataset ds = Dataset::Range(10).Batch(4);
  auto off = PlanStaticTasks(ds, proto::SHARDING_OFF, 3);
  ASSERT_TRUE(off.ok()) << off.status();
  ASSERT_EQ(off->size(), 3u);
  for (const TaskPlan& p : *off) {
    EXPECT_TRUE(MessageDifferencer::Equals(p.dataset, ds.def()));
    EXPECT_FALSE(p.step_sharded);
  }
  auto data = PlanStaticTasks(ds, proto::SHARDING_DATA, 2);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->size(), 2u);
  for (const TaskPlan& p : *data) {
    EXPECT_TRUE(MessageDifferencer::Equals(p.dataset, ds.def()));
    EXPECT_TRUE(p.step_sharded);
  }
}

TEST(TaskPlannerTest, FileShardsTheFileListRoundRobin) {
  auto plans = PlanStaticTasks(Files(5), proto::SHARDING_FILE, 2);
  ASSERT_TRUE(plans.ok()) << plans.status();
  ASSERT_EQ(plans->size(), 2u);
  EXPECT_THAT(Filenames((*plans)[0].dataset), ElementsAre("f0.txt", "f2.txt", "f4.txt"));
  EXPECT_THAT(Filenames((*plans)[1].dataset), ElementsAre("f1.txt", "f3.txt"));
  EXPECT_FALSE((*plans)[0].step_sharded);
  // The ops after the source are kept.
  EXPECT_EQ((*plans)[1].dataset.ops_size(), 1);
}

TEST(TaskPlannerTest, FileWithTooFewFilesIsTfsError) {
  auto plans = PlanStaticTasks(Files(2), proto::SHARDING_FILE, 3);
  ASSERT_EQ(plans.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plans.status().message(),
              HasSubstr("Could not apply FILE based sharding: the dataset only has 2 file(s), "
                        "which is not enough for the required 3 shards/workers"));
  // FILE on a source that reads no files is an error too.
  EXPECT_EQ(PlanStaticTasks(Dataset::Range(8).Batch(2), proto::SHARDING_FILE, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TaskPlannerTest, HintBecomesTheTasksShard) {
  Dataset ds = Dataset::Range(10).ShardHint().Batch(2);
  auto plans = PlanStaticTasks(ds, proto::SHARDING_HINT, 3);
  ASSERT_TRUE(plans.ok()) << plans.status();
  for (int k = 0; k < 3; ++k) {
    const proto::ShardOp& shard = (*plans)[k].dataset.ops(0).shard();
    EXPECT_EQ(shard.num_shards(), 3);
    EXPECT_EQ(shard.index(), k);
    EXPECT_FALSE(shard.num_shards_is_hint());
    EXPECT_FALSE((*plans)[k].step_sharded);
  }
  auto values = RunValues((*plans)[1].dataset);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre(1, 4, 7));
}

TEST(TaskPlannerTest, AutoIsFileForFilesElseData) {
  auto files = PlanStaticTasks(Files(4), proto::SHARDING_AUTO, 2);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(Filenames((*files)[1].dataset), ElementsAre("f1.txt", "f3.txt"));
  EXPECT_FALSE((*files)[1].step_sharded);
  // AUTO keeps FILE's error when there are too few files (TF falls back to DATA only when it
  // finds no file reader).
  EXPECT_EQ(PlanStaticTasks(Files(1), proto::SHARDING_AUTO, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto data = PlanStaticTasks(Dataset::Range(8).Batch(2), proto::SHARDING_AUTO, 2);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_TRUE((*data)[0].step_sharded);
}

TEST(TaskPlannerTest, RejectsDynamicAndNonPositiveTaskCounts) {
  Dataset ds = Dataset::Range(8).Batch(2);
  EXPECT_EQ(PlanStaticTasks(ds, proto::SHARDING_DYNAMIC, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanStaticTasks(ds, proto::SHARDING_DATA, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TaskPlannerTest, SplitSourcesKnowTheirSize) {
  auto r = DescribeSplitSource(Dataset::Range(2, 20, 3).Batch(2));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->files);
  EXPECT_EQ(r->size, 6);  // 2, 5, 8, 11, 14, 17
  auto down = DescribeSplitSource(Dataset::Range(10, 0, -4));
  ASSERT_TRUE(down.ok());
  EXPECT_EQ(down->size, 3);  // 10, 6, 2
  auto f = DescribeSplitSource(Files(3));
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->files);
  EXPECT_EQ(f->size, 3);
  auto slices = DescribeSplitSource(
      Dataset::FromTensorSlices(Element(Tensor::FromVector<int64_t>({5, 6, 7, 8, 9}))));
  ASSERT_TRUE(slices.ok());
  EXPECT_EQ(slices->size, 5);
}

TEST(TaskPlannerTest, RangeSplitsCoverTheSourceInOrder) {
  Dataset ds = Dataset::Range(2, 20, 3).Batch(2);
  std::vector<int64_t> all;
  for (auto [b, e] : std::vector<std::pair<int, int>>{{0, 4}, {4, 6}}) {
    auto split = SplitDataset(ds, b, e);
    ASSERT_TRUE(split.ok()) << split.status();
    EXPECT_EQ(split->def().ops_size(), 1);  // batch kept
    auto v = RunValues(*split);
    ASSERT_TRUE(v.ok()) << v.status();
    all.insert(all.end(), v->begin(), v->end());
  }
  EXPECT_THAT(all, ElementsAre(2, 5, 8, 11, 14, 17));
  auto down = SplitDataset(Dataset::Range(10, 0, -4), 1, 3);
  ASSERT_TRUE(down.ok());
  EXPECT_THAT(*RunValues(*down), ElementsAre(6, 2));
}

// A range whose stop - start (or start - stop) does not fit in int64, although its length does:
// its size and split bounds are computed without overflowing (FOUND.md §2).
TEST(TaskPlannerTest, RangeSplitsOfAWideRangeDoNotOverflow) {
  const int64_t lo = -4611686018427387904;  // -2^62
  const int64_t hi = 4611686018427387903;   // 2^62 - 1
  Dataset up = Dataset::Range(lo, hi, 2);
  auto source = DescribeSplitSource(up);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->size, 4611686018427387904);  // (2^63 - 1) / 2 rounded up
  auto tail = SplitDataset(up, source->size - 2, source->size);
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_THAT(*RunValues(*tail), ElementsAre(hi - 3, hi - 1));
  auto mid = SplitDataset(up, 2305843009213693952, 2305843009213693954);  // around 0
  ASSERT_TRUE(mid.ok()) << mid.status();
  EXPECT_THAT(*RunValues(*mid), ElementsAre(0, 2));
  Dataset down = Dataset::Range(hi, lo, -2);
  auto down_source = DescribeSplitSource(down);
  ASSERT_TRUE(down_source.ok()) << down_source.status();
  EXPECT_EQ(down_source->size, 4611686018427387904);
  auto down_tail = SplitDataset(down, down_source->size - 1, down_source->size);
  ASSERT_TRUE(down_tail.ok()) << down_tail.status();
  EXPECT_THAT(*RunValues(*down_tail), ElementsAre(lo + 1));
}

TEST(TaskPlannerTest, SliceSplitsSkipAndTakeRightAfterTheSource) {
  Dataset ds = Dataset::FromTensorSlices(Element(Tensor::FromVector<int64_t>({5, 6, 7, 8, 9})))
                   .Batch(2);
  auto split = SplitDataset(ds, 1, 4);
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->def().ops_size(), 3);
  EXPECT_EQ(split->def().ops(0).skip().count(), 1);
  EXPECT_EQ(split->def().ops(1).take().count(), 3);
  EXPECT_TRUE(split->def().ops(2).has_batch());
  EXPECT_THAT(*RunValues(*split), ElementsAre(6, 7, 8));
}

TEST(TaskPlannerTest, FileSplitsKeepTheirFiles) {
  auto split = SplitDataset(Files(3), 2, 3);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_THAT(Filenames(split->def()), ElementsAre("f2.txt"));
}

TEST(TaskPlannerTest, AnyFileReaderSplitsByFile) {
  proto::DatasetDef def;
  def.set_version(proto::DATASET_GRAPH_VERSION_1);
  proto::TFRecordSource* tfr = def.mutable_source()->mutable_tf_record();
  for (const char* f : {"a.tfrecord", "b.tfrecord", "c.tfrecord"}) tfr->add_filenames(f);
  tfr->set_compression_type("GZIP");
  auto ds = Dataset::FromDef(def);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto source = DescribeSplitSource(*ds);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_TRUE(source->files);
  EXPECT_EQ(source->size, 3);
  auto split = SplitDataset(*ds, 1, 2);
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_TRUE(split->def().source().has_tf_record());
  EXPECT_THAT(split->def().source().tf_record().filenames(), ElementsAre("b.tfrecord"));
  EXPECT_EQ(split->def().source().tf_record().compression_type(), "GZIP");

  // A reader limited to a record range over all its files cannot be cut by file.
  tfr->mutable_record_range()->set_start(5);
  tfr->mutable_record_range()->set_count(10);
  auto ranged = Dataset::FromDef(def);
  ASSERT_TRUE(ranged.ok()) << ranged.status();
  auto no = DescribeSplitSource(*ranged);
  EXPECT_EQ(no.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no.status().message(), HasSubstr("tf_record"));
}

TEST(TaskPlannerTest, SplitsOutsideTheSourceAreRejected) {
  Dataset ds = Dataset::Range(5);
  EXPECT_EQ(SplitDataset(ds, 3, 6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitDataset(ds, 2, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitDataset(ds, -1, 2).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
