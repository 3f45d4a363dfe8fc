// The Dataset graph: FromDef, cardinality (tf.data's rules), fingerprints and ToExpression.
#include "proto/dataset.pb.h"
#include "sluice/dataset.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "core/tensor/proto_convert.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

TEST(DatasetTest, FromDefAcceptsValidGraphsAndRefusesInvalidOnes) {
  Dataset ds = Dataset::Range(10).Batch(4);
  absl::StatusOr<Dataset> copy = Dataset::FromDef(ds.def());
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_TRUE(MessageDifferencer::Equals(copy->def(), ds.def()));

  absl::StatusOr<Dataset> bad = Dataset::FromDef(Dataset::Range(10).Batch(0).def());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "op 1 (batch): batch_size must be positive, got 0");
}

TEST(DatasetTest, FromDefRefusesCorruptLiteralsWithoutAllocatingThem) {
  proto::DatasetDef def = Dataset::FromTensors(Tensor::FromVector<int32_t>({1, 2})).def();
  proto::TensorProto* t = def.mutable_source()->mutable_from_tensors()->mutable_element()
                              ->mutable_tensors(0);
  t->clear_shape();
  t->add_shape(int64_t{1} << 32);
  t->add_shape(int64_t{1} << 32);  // 2^64 elements: overflows a naive product to 0
  EXPECT_THAT(std::string(Dataset::FromDef(def).status().message()),
              HasSubstr("source (from_tensors): literal component 0 claims more than"));
  t->clear_shape();
  t->add_shape(3);  // content is 8 bytes, not 12
  EXPECT_THAT(std::string(Dataset::FromDef(def).status().message()),
              HasSubstr("source (from_tensors): bad literal:"));
}

TEST(DatasetTest, CardinalityFollowsTfData) {
  Dataset r10 = Dataset::Range(10);
  Dataset text = Dataset::TextLine({"a"});
  struct Case {
    Dataset ds;
    int64_t want;
  };
  std::vector<Case> cases = {
      {r10, 10},
      {Dataset::Range(2, 10, 3), 3},
      {Dataset::Range(10, 0, -3), 4},
      {Dataset::Range(5, 0), 0},
      {Dataset::Range(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                      int64_t{1} << 62),
       4},
      {Dataset::Range(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()),
       kUnknownCardinality},  // 2^64 - 1 elements do not fit
      {Dataset::FromTensors(Tensor::FromVector<int32_t>({1, 2, 3})), 1},
      {Dataset::FromTensorSlices(Tensor::FromVector<int32_t>({1, 2, 3})), 3},
      {text, kUnknownCardinality},
      {r10.Batch(4), 3},
      {r10.Batch(4, true), 2},
      {r10.Batch(5), 2},
      {r10.Repeat(3), 30},
      {r10.Repeat(), kInfiniteCardinality},
      {r10.Repeat(0), 0},
      {Dataset::Range(0).Repeat(), 0},
      {text.Repeat(), kInfiniteCardinality},
      {text.Repeat(0), 0},
      {text.Repeat(2), kUnknownCardinality},
      {r10.Repeat().Take(3), 3},
      {r10.Repeat().Take(-1), kInfiniteCardinality},
      {r10.Take(30), 10},
      {r10.Take(-1), 10},
      {text.Take(0), kUnknownCardinality},  // as TF
      {text.Repeat().Take(5), 5},
      {r10.Skip(3), 7},
      {r10.Skip(30), 0},
      {r10.Skip(-1), 0},
      {r10.Repeat().Skip(3), kInfiniteCardinality},
      {r10.Shard(3, 0), 4},
      {r10.Shard(3, 2), 3},
      {Dataset::Range(1).Shard(4, 3), 0},
      {r10.ShardHint(), kUnknownCardinality},
      {r10.Repeat().Shard(2, 1), kInfiniteCardinality},
      {r10.Shuffle(4), 10},
      {r10.Prefetch(-1), 10},
      {r10.Batch(4, true).Unbatch(), 8},
      {r10.Batch(4).Unbatch(), kUnknownCardinality},
      {r10.Batch(4, true).Repeat().Unbatch(), kInfiniteCardinality},
      {r10.Batch(4).Rebatch({2, 2}), kUnknownCardinality},
      {r10.Batch(4).LegacyRebatch(2), kUnknownCardinality},
      {r10.Repeat(std::numeric_limits<int64_t>::max()), kUnknownCardinality},
      {r10.Batch(0), kUnknownCardinality},  // invalid graphs have no cardinality
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.ds.Cardinality(), c.want) << c.ds.ToExpression();
  }
}

std::vector<Dataset> DistinctGraphs() {
  Dataset r = Dataset::Range(10);
  return {
      r,
      Dataset::Range(11),
      Dataset::Range(1, 10),
      Dataset::Range(0, 10, 2),
      r.Batch(4),
      r.Batch(4, true),
      r.Batch(5),
      r.Repeat(),
      r.Repeat(2),
      r.Take(3),
      r.Skip(3),
      r.Take(3).Skip(1),
      r.Skip(1).Take(3),
      r.Shard(2, 0),
      r.Shard(2, 1),
      r.ShardHint(),
      r.Shuffle(8),
      r.Shuffle(8, 1),
      r.Shuffle(8, 2),
      r.Shuffle(8, 1, false),
      r.Prefetch(2),
      r.Prefetch(-1),
      r.Batch(4).Unbatch(),
      r.Batch(4).Rebatch({2, 2}),
      r.Batch(4).Rebatch({2, 2}, true),
      r.Batch(4).Rebatch({3, 1}),
      r.Batch(4).LegacyRebatch(2),
      Dataset::FromTensors(Tensor::Scalar<int32_t>(1)),
      Dataset::FromTensors(Tensor::Scalar<int64_t>(1)),
      Dataset::FromTensors(Tensor::Scalar<float>(1)),
      Dataset::FromTensors(Tensor::FromVector<int32_t>({1})),
      Dataset::FromTensorSlices(Tensor::FromVector<int32_t>({1})),
      Dataset::FromTensors(Element::Tuple({Tensor::Scalar<int32_t>(1)})),
      Dataset::FromTensors(Element::Dict({{"a", Element(Tensor::Scalar<int32_t>(1))}})),
      Dataset::FromTensors(Element::Dict({{"b", Element(Tensor::Scalar<int32_t>(1))}})),
      Dataset::TextLine({"a"}),
      Dataset::TextLine({"b"}),
      Dataset::TextLine({"a", "b"}),
  };
}

TEST(DatasetTest, FingerprintsAreEqualForEqualGraphsAndDistinctOtherwise) {
  std::set<std::string> seen;
  for (const Dataset& ds : DistinctGraphs()) {
    std::string fp = ds.Fingerprint();
    EXPECT_EQ(fp.size(), 32u);
    EXPECT_EQ(fp.find_first_not_of("0123456789abcdef"), std::string::npos) << fp;
    EXPECT_TRUE(seen.insert(fp).second) << "collision for " << ds.ToExpression();
    absl::StatusOr<Dataset> copy = Dataset::FromDef(ds.def());
    ASSERT_TRUE(copy.ok());
    EXPECT_EQ(copy->Fingerprint(), fp);
  }
  // The builder and the parser produce the same graph, hence the same fingerprint.
  EXPECT_EQ(Dataset::Parse("from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)")->Fingerprint(),
            Dataset::FromTensorSlices(Tensor::FromVector<int32_t>({1, 2, 3, 4}))
                .Repeat()
                .Batch(4)
                .Fingerprint());
}

TEST(DatasetTest, FingerprintIgnoresFieldsWithoutMeaning) {
  proto::DatasetDef def = Dataset::Range(10).Shuffle(8).def();
  def.mutable_ops(0)->mutable_shuffle()->set_seed(99);  // has_seed is false: seed is unused
  EXPECT_EQ(Dataset::FromDef(def)->Fingerprint(), Dataset::Range(10).Shuffle(8).Fingerprint());
}

TEST(DatasetTest, FingerprintIsStableAcrossProcessesAndBuilds) {
  // FNV-1a over the 16 serialized bytes, checked independently in Python. A per-process seeded
  // hash (absl::Hash) would change from run to run, and registrations from different processes
  // would stop deduplicating.
  EXPECT_EQ(Dataset::Range(10).Batch(4).Fingerprint(), "bcc5d208aeb773079c2415c45dc6cd3c");
}

TEST(DatasetTest, ToExpressionIsCanonical) {
  EXPECT_EQ(Dataset::Range(10).Batch(4).ToExpression(),
            "range(0, 10, 1).batch(4, drop_remainder=False)");
  EXPECT_EQ(Dataset::FromTensors(Element::Tuple({Tensor::FromVector<float>({1}),
                                                 Tensor::FromVector<float>({1})}))
                .Repeat(4)
                .Batch(4)
                .ToExpression(),
            "from_tensors(([1.0], [1.0])).repeat(4).batch(4, drop_remainder=False)");
  EXPECT_EQ(Dataset::Range(3)
                .Repeat()
                .Take(2)
                .Skip(1)
                .Shard(2, 1)
                .ShardHint()
                .Shuffle(8)
                .Shuffle(8, 3, false)
                .Prefetch(-1)
                .Prefetch(2)
                .ToExpression(),
            "range(0, 3, 1).repeat().take(2).skip(1).shard(2, 1).shard(SHARD_HINT, SHARD_HINT)"
            ".shuffle(8, seed=None, reshuffle_each_iteration=True)"
            ".shuffle(8, seed=3, reshuffle_each_iteration=False)"
            ".prefetch(tf.data.AUTOTUNE).prefetch(2)");
  EXPECT_EQ(Dataset::Range(8).Batch(4).Unbatch().Batch(4).Rebatch({2, 2}, true)
                .LegacyRebatch(2).ToExpression(),
            "range(0, 8, 1).batch(4, drop_remainder=False).unbatch()"
            ".batch(4, drop_remainder=False).rebatch([2, 2], drop_remainder=True)"
            ".legacy_rebatch(2)");
  EXPECT_EQ(Dataset::TextLine({"a.txt", "it's"}).ToExpression(),
            "text_line_dataset(['a.txt', 'it\\'s'])");
  EXPECT_EQ(Dataset::FromTensors(Element::Dict(
                                     {{"b", Element(Tensor::Scalar<int64_t>(3))},
                                      {"a", Element(Tensor::FromStrings({"x"}, Shape({1})))}}))
                .ToExpression(),
            "from_tensors({'b': tf.constant(3, dtype=tf.int64), 'a': ['x']})");
}

TEST(DatasetTest, ToExpressionRoundTripsThroughParse) {
  std::vector<Dataset> graphs = DistinctGraphs();
  Tensor nan = Tensor::Scalar<float>(std::nanf(""));
  graphs.push_back(Dataset::FromTensors(Element::Tuple(
      {Tensor::FromVector<float>({0.1f, -0.0f, 1e-30f, 3.4028235e38f, 1.0f / 3}),
       Tensor::FromVector<double>({0.1, 1e300, -2.5}),
       Tensor::FromVector<int64_t>({0, std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int64_t>::max()}),
       Tensor::FromVector<uint64_t>({std::numeric_limits<uint64_t>::max()}),
       Tensor::FromVector<int8_t>({-128, 127}), Tensor::FromVector<bool>({true, false}),
       Tensor::Allocate(DType::kInt32, Shape({2, 0, 3})),
       Tensor::Allocate(DType::kFloat16, Shape({2, 2})),
       Tensor::FromStrings({std::string("\xff\x00", 2), "\xc3\xa9", "'\"\\"}, Shape({3})),
       Tensor::Scalar<float>(std::numeric_limits<float>::infinity())})));
  graphs.push_back(Dataset::FromTensorSlices(Element::Dict(
      {{"z", Element(Tensor::FromVector<int32_t>({1, 2, 3, 4}, Shape({2, 2})))},
       {"a", Element::Tuple({Tensor::FromVector<uint16_t>({7, 8}),
                             Element::Dict({{"k", Element(Tensor::Allocate(DType::kBFloat16,
                                                                           Shape({2, 0})))}})})}})));
  graphs.push_back(Dataset::FromTensors(Element::Tuple({nan})).Repeat(2).Batch(2, true));
  for (const Dataset& ds : graphs) {
    std::string text = ds.ToExpression();
    absl::StatusOr<Dataset> back = Dataset::Parse(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status();
    EXPECT_TRUE(MessageDifferencer::Equals(back->def(), ds.def()))
        << text << "\n got: " << back->def().DebugString();
    EXPECT_EQ(back->Fingerprint(), ds.Fingerprint()) << text;
    EXPECT_EQ(back->ToExpression(), text);
  }
}

TEST(DatasetTest, Int64LiteralsUseTfConstantSoTheyKeepTheirDtype) {
  // Python's rules would read a plain `5` back as int32.
  Dataset ds = Dataset::FromTensorSlices(Tensor::FromVector<int64_t>({5, 6}));
  EXPECT_EQ(ds.ToExpression(), "from_tensor_slices(tf.constant([5, 6], dtype=tf.int64))");
  absl::StatusOr<Dataset> back = Dataset::Parse(ds.ToExpression());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->element_spec()->leaf().dtype, DType::kInt64);
}

TEST(DatasetTest, ElementSpecOfTheSeedPipeline) {
  absl::StatusOr<Dataset> ds =
      Dataset::Parse("from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)");
  ASSERT_TRUE(ds.ok());
  absl::StatusOr<ElementSpec> spec = ds->element_spec();
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->leaf().ToString(), "TensorSpec(shape=(None,), dtype=tf.int32, name=None)");
  EXPECT_EQ(ds->Cardinality(), kInfiniteCardinality);
  EXPECT_FALSE(Dataset::Range(3).Unbatch().element_spec().ok());
}

}  // namespace
}  // namespace sluice
