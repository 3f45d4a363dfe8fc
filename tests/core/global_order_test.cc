// Global order: any cut of an epoch's steps into ranges yields the same batches as one range
// over the epoch; SHUFFLE_NONE is the original pipeline; FULL and BLOCK visit every record once
// per epoch; pipelines that cannot have a global order are FAILED_PRECONDITION naming the op;
// the PermutedSource is validated field by field.
#include "core/data/distribute/global_order.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sluice/dataset.h"
#include "core/data/executor.h"
#include "core/io/tfrecord_writer.h"
#include "gtest/gtest.h"
#include "tests/core/iterator_test_util.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using record_test::TempDir;
using record_test::WriteWholeFile;
using testing_util::RunDataset;

Dataset Parse(const std::string& expression) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  EXPECT_TRUE(ds.ok()) << expression << ": " << ds.status();
  return ds.ok() ? *ds : Dataset::Range(0);
}

GlobalOrderPlan Plan(const Dataset& ds) {
  absl::StatusOr<GlobalOrderPlan> plan = PlanGlobalOrder(ds);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : GlobalOrderPlan();
}

// The batches of the ranges [cuts[k], cuts[k + 1]) of epoch `epoch`, concatenated.
std::vector<Element> RunCuts(const Dataset& ds, const GlobalOrderPlan& plan,
                             const GlobalOrderOptions& options, int64_t epoch,
                             const std::vector<int64_t>& cuts) {
  std::vector<Element> out;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    absl::StatusOr<Dataset> range =
        GlobalOrderRange(ds, plan, options, epoch, cuts[k], cuts[k + 1]);
    EXPECT_TRUE(range.ok()) << range.status();
    if (!range.ok()) return {};
    EXPECT_EQ(range->Cardinality(), cuts[k + 1] - cuts[k]);
    absl::StatusOr<std::vector<Element>> got = RunDataset(*range);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return {};
    EXPECT_EQ(static_cast<int64_t>(got->size()), cuts[k + 1] - cuts[k])
        << "range [" << cuts[k] << ", " << cuts[k + 1] << ")";
    for (Element& e : *got) out.push_back(std::move(e));
  }
  return out;
}

void ExpectSameElements(const std::vector<Element>& got, const std::vector<Element>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    std::vector<Tensor> g = got[i].Flatten(), w = want[i].Flatten();
    ASSERT_EQ(g.size(), w.size()) << "batch " << i;
    for (size_t k = 0; k < g.size(); ++k) {
      EXPECT_TRUE(g[k].Equals(w[k])) << "batch " << i << " leaf " << k;
    }
  }
}

// Ways to cut [0, steps): one range, every step alone, pairs, a lopsided cut and a few
// irregular ones.
std::vector<std::vector<int64_t>> Cuts(int64_t steps) {
  std::vector<std::vector<int64_t>> out;
  out.push_back({0, steps});
  for (int64_t width : {int64_t{1}, int64_t{2}, int64_t{3}}) {
    std::vector<int64_t> c;
    for (int64_t s = 0; s < steps; s += width) c.push_back(s);
    c.push_back(steps);
    out.push_back(c);
  }
  if (steps > 2) {
    out.push_back({0, 1, steps});
    out.push_back({0, steps - 1, steps});
    out.push_back({0, steps / 3, steps / 3 + 1, steps});
  }
  return out;
}

std::vector<GlobalOrderOptions> AllModes() {
  GlobalOrderOptions none;
  GlobalOrderOptions full;
  full.shuffle = proto::SHUFFLE_FULL;
  full.seed = 1234;
  GlobalOrderOptions block;
  block.shuffle = proto::SHUFFLE_BLOCK;
  block.seed = 99;
  block.block_size = 7;
  return {none, full, block};
}

void ExpectAnyCutMatchesWholeEpoch(const Dataset& ds) {
  const GlobalOrderPlan plan = Plan(ds);
  ASSERT_GT(plan.steps_per_epoch, 0);
  for (const GlobalOrderOptions& options : AllModes()) {
    SCOPED_TRACE(proto::ShuffleMode_Name(options.shuffle));
    for (int64_t epoch : {0, 1}) {
      const std::vector<Element> whole =
          RunCuts(ds, plan, options, epoch, {0, plan.steps_per_epoch});
      ASSERT_EQ(static_cast<int64_t>(whole.size()), plan.steps_per_epoch);
      for (const std::vector<int64_t>& cuts : Cuts(plan.steps_per_epoch)) {
        SCOPED_TRACE(testing::Message() << "epoch " << epoch << ", " << cuts.size() - 1
                                        << " ranges");
        ExpectSameElements(RunCuts(ds, plan, options, epoch, cuts), whole);
      }
    }
  }
}

TEST(GlobalOrderTest, PlanCountsRecordsAndSteps) {
  GlobalOrderPlan p = Plan(Parse("range(103).batch(10)"));
  EXPECT_EQ(p.num_records, 103);
  EXPECT_EQ(p.batch_size, 10);
  EXPECT_FALSE(p.drop_remainder);
  EXPECT_EQ(p.steps_per_epoch, 11);
  p = Plan(Parse("range(103).map(cast(tf.float32)).batch(10, drop_remainder=True).prefetch(2)"));
  EXPECT_TRUE(p.drop_remainder);
  EXPECT_EQ(p.steps_per_epoch, 10);
  p = Plan(Parse("range(100).batch(10)"));
  EXPECT_EQ(p.steps_per_epoch, 10);
}

TEST(GlobalOrderTest, AnyCutOfRangesGivesTheEpochsBatches) {
  ExpectAnyCutMatchesWholeEpoch(Parse("range(103).map(cast(tf.float32)).batch(10)"));
  ExpectAnyCutMatchesWholeEpoch(
      Parse("range(103).prefetch(4).batch(10, drop_remainder=True).map(cast(tf.float64))"));
}

std::vector<std::string> WriteRecords(const TempDir& dir) {
  std::vector<std::string> names;
  for (int f = 0; f < 3; ++f) {
    std::string bytes;
    for (int j = 0; j < 9 + f * 4; ++j) {
      const size_t length = static_cast<size_t>(1 + (f * 7 + j) % 5);
      AppendTFRecord(std::string(length, static_cast<char>('a' + j)), &bytes);
    }
    names.push_back(dir.File(absl::StrCat("g", f, ".tfrecord")));
    WriteWholeFile(names.back(), bytes);
  }
  return names;
}

std::string FileList(const std::vector<std::string>& files) {
  std::string out = "[";
  for (size_t i = 0; i < files.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", "'", files[i], "'");
  }
  return out + "]";
}

TEST(GlobalOrderTest, TFRecordWithPaddedBatchCutsTheSame) {
  TempDir dir;
  const std::vector<std::string> files = WriteRecords(dir);
  ExpectAnyCutMatchesWholeEpoch(Parse(absl::StrCat(
      "tf_record_dataset(", FileList(files), ").map(decode_raw(tf.uint8)).padded_batch(4)")));
}

TEST(GlobalOrderTest, ShuffleNoneIsTheOriginalPipeline) {
  TempDir dir;
  const std::vector<std::string> files = WriteRecords(dir);
  for (const std::string& expression :
       {std::string("range(103).map(cast(tf.float32)).batch(10)"),
        std::string("range(5, 300, 7).batch(8, drop_remainder=True)"),
        absl::StrCat("tf_record_dataset(", FileList(files),
                     ").map(decode_raw(tf.uint8)).padded_batch(4)")}) {
    SCOPED_TRACE(expression);
    const Dataset ds = Parse(expression);
    const GlobalOrderPlan plan = Plan(ds);
    absl::StatusOr<std::vector<Element>> original = RunDataset(ds);
    ASSERT_TRUE(original.ok()) << original.status();
    ExpectSameElements(RunCuts(ds, plan, GlobalOrderOptions(), 0, {0, plan.steps_per_epoch}),
                       *original);
    ExpectSameElements(RunCuts(ds, plan, GlobalOrderOptions(), 3, Cuts(plan.steps_per_epoch)[2]),
                       *original);
  }
}

std::vector<int64_t> Unbatched(const std::vector<Element>& batches) {
  std::vector<int64_t> out;
  for (const Element& b : batches) {
    for (int64_t v : testing_util::Values(b.leaf())) out.push_back(v);
  }
  return out;
}

TEST(GlobalOrderTest, ShuffledEpochsHoldEveryRecordOnce) {
  const Dataset ds = Parse("range(1000).batch(32)");
  const GlobalOrderPlan plan = Plan(ds);
  for (GlobalOrderOptions options : AllModes()) {
    if (options.shuffle == proto::SHUFFLE_NONE) continue;
    SCOPED_TRACE(proto::ShuffleMode_Name(options.shuffle));
    options.block_size = 50;
    const std::vector<int64_t> e0 =
        Unbatched(RunCuts(ds, plan, options, 0, {0, 5, plan.steps_per_epoch}));
    const std::vector<int64_t> e1 =
        Unbatched(RunCuts(ds, plan, options, 1, {0, plan.steps_per_epoch}));
    ASSERT_EQ(e0.size(), 1000u);
    EXPECT_NE(e0, testing_util::Iota(1000)) << "not shuffled";
    EXPECT_NE(e0, e1) << "epochs must reshuffle";
    std::vector<int64_t> sorted0 = e0, sorted1 = e1;
    std::sort(sorted0.begin(), sorted0.end());
    std::sort(sorted1.begin(), sorted1.end());
    EXPECT_EQ(sorted0, testing_util::Iota(1000));
    EXPECT_EQ(sorted1, testing_util::Iota(1000));
    // Same seed and epoch: the same order again; another seed: another order.
    EXPECT_EQ(e0, Unbatched(RunCuts(ds, plan, options, 0, {0, plan.steps_per_epoch})));
    GlobalOrderOptions other = options;
    other.seed += 1;
    EXPECT_NE(e0, Unbatched(RunCuts(ds, plan, other, 0, {0, plan.steps_per_epoch})));
  }
}

TEST(GlobalOrderTest, MapAfterTheSourceIsKept) {
  const Dataset ds = Parse("range(20).map(cast(tf.float32)).batch(4).prefetch(1)");
  const GlobalOrderPlan plan = Plan(ds);
  GlobalOrderOptions options;
  options.shuffle = proto::SHUFFLE_FULL;
  absl::StatusOr<Dataset> range = GlobalOrderRange(ds, plan, options, 0, 1, 3);
  ASSERT_TRUE(range.ok()) << range.status();
  ASSERT_EQ(range->def().ops_size(), ds.def().ops_size());
  for (int i = 0; i < ds.def().ops_size(); ++i) {
    EXPECT_EQ(range->def().ops(i).SerializeAsString(), ds.def().ops(i).SerializeAsString());
  }
  ASSERT_TRUE(range->def().source().has_permuted());
  const proto::PermutedSource& p = range->def().source().permuted();
  EXPECT_EQ(p.source().SerializeAsString(), ds.def().source().SerializeAsString());
  EXPECT_EQ(p.begin(), 4);
  EXPECT_EQ(p.end(), 12);
  EXPECT_EQ(range->element_spec()->Flatten()[0].dtype, DType::kFloat32);
  absl::StatusOr<std::vector<Element>> got = RunDataset(*range);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].leaf().dtype(), DType::kFloat32);
  EXPECT_TRUE(absl::StrContains(range->ToExpression(), "permuted(range(0, 20, 1)"))
      << range->ToExpression();
}

TEST(GlobalOrderTest, PipelinesWithoutAGlobalOrderNameTheOp) {
  struct Case {
    std::string expression;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {"range(10).filter(less(5)).batch(2)", "filter (op 1) drops elements"},
           {"range(10).map(cast(tf.float32)).shuffle(4).batch(2)",
            "shuffle (op 2) is a buffer shuffle"},
           {"range(10).batch(2).repeat(3)", "repeat (op 2)"},
           {"range(10).take(5).batch(2)", "take (op 1)"},
           {"range(10).batch(2).unbatch()", "unbatch (op 2)"},
           {"range(10).batch(2).batch(2)", "batch (op 2) is a second batch"},
           {"range(10).map(cast(tf.float32))", "no batch"},
           {"range(10).map(cast(tf.float32), num_parallel_calls=2, deterministic=False).batch(2)",
            "map (op 1) has deterministic=False"},
           {"text_line_dataset(['a.txt']).batch(2)", "text_line_dataset source has no random "
                                                     "access"},
           {"tf_record_dataset(['a.tfrecord'], compression_type='GZIP').batch(2)",
            "GZIP-compressed"}}) {
    SCOPED_TRACE(c.expression);
    const Dataset ds = Parse(c.expression);
    absl::StatusOr<GlobalOrderPlan> plan = PlanGlobalOrder(ds);
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition) << plan.status();
    EXPECT_TRUE(absl::StrContains(plan.status().message(), c.want)) << plan.status();
    EXPECT_EQ(CheckGlobalOrderShape(ds).code(), absl::StatusCode::kFailedPrecondition);
  }
}

TEST(GlobalOrderTest, OpeningErrorsAreReturnedAsTheyAre) {
  TempDir dir;
  const std::string missing = dir.File("missing.tfrecord");
  const Dataset ds = Parse(absl::StrCat("tf_record_dataset(['", missing, "']).batch(2)"));
  EXPECT_TRUE(CheckGlobalOrderShape(ds).ok());
  EXPECT_EQ(PlanGlobalOrder(ds).status().code(), absl::StatusCode::kNotFound);
}

TEST(GlobalOrderTest, BadRangeBoundsAreInvalidArgument) {
  const Dataset ds = Parse("range(10).batch(3)");
  const GlobalOrderPlan plan = Plan(ds);
  ASSERT_EQ(plan.steps_per_epoch, 4);
  GlobalOrderOptions options;
  for (auto [b, e] : std::vector<std::pair<int64_t, int64_t>>{{-1, 2}, {2, 2}, {3, 2}, {0, 5}}) {
    EXPECT_EQ(GlobalOrderRange(ds, plan, options, 0, b, e).status().code(),
              absl::StatusCode::kInvalidArgument)
        << b << ", " << e;
  }
  EXPECT_EQ(GlobalOrderRange(ds, plan, options, -1, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.shuffle = proto::SHUFFLE_BLOCK;
  options.block_size = 0;
  EXPECT_EQ(GlobalOrderRange(ds, plan, options, 0, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The last step is partial: its range ends at the last record.
  options.block_size = 4;
  absl::StatusOr<Dataset> last = GlobalOrderRange(ds, plan, options, 0, 3, 4);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->def().source().permuted().begin(), 9);
  EXPECT_EQ(last->def().source().permuted().end(), 10);
}

proto::DatasetDef PermutedDef(const proto::PermutedSource& p) {
  proto::DatasetDef def;
  def.set_version(proto::DATASET_GRAPH_VERSION_1);
  *def.mutable_source()->mutable_permuted() = p;
  return def;
}

TEST(GlobalOrderTest, PermutedSourceValidationNamesTheField) {
  proto::PermutedSource good;
  *good.mutable_source() = Dataset::Range(10).def().source();
  good.set_shuffle(proto::SHUFFLE_BLOCK);
  good.set_block_size(3);
  good.set_begin(2);
  good.set_end(7);
  absl::StatusOr<Dataset> ok = Dataset::FromDef(PermutedDef(good));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->Cardinality(), 5);
  absl::StatusOr<std::vector<Element>> got = RunDataset(*ok);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 5u);

  struct Case {
    std::function<void(proto::PermutedSource*)> mutate;
    std::string field;
  };
  for (const Case& c : std::vector<Case>{
           {[](proto::PermutedSource* p) { p->clear_source(); }, "source"},
           {[](proto::PermutedSource* p) {
              *p->mutable_source() = Dataset::TextLine({"a.txt"}).def().source();
            },
            "source"},
           {[](proto::PermutedSource* p) { p->set_block_size(0); }, "block_size"},
           {[](proto::PermutedSource* p) { p->set_shuffle(static_cast<proto::ShuffleMode>(7)); },
            "shuffle"},
           {[](proto::PermutedSource* p) { p->set_epoch(-1); }, "epoch"},
           {[](proto::PermutedSource* p) { p->set_begin(-1); }, "begin"},
           {[](proto::PermutedSource* p) { p->set_end(1); }, "end"}}) {
    proto::PermutedSource p = good;
    c.mutate(&p);
    absl::StatusOr<Dataset> bad = Dataset::FromDef(PermutedDef(p));
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_TRUE(absl::StrContains(bad.status().message(), c.field)) << bad.status();
    EXPECT_TRUE(absl::StrContains(bad.status().message(), "source (permuted)")) << bad.status();
  }
  // `end` past the source is found when the iterator opens it.
  proto::PermutedSource past = good;
  past.set_end(11);
  absl::StatusOr<Dataset> ds = Dataset::FromDef(PermutedDef(past));
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<std::vector<Element>> run = RunDataset(*ds);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(run.status().message(), "end (11)")) << run.status();
}

}  // namespace
}  // namespace sluice
