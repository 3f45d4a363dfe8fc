// Element-spec inference and cardinality against TensorFlow's own answers
// (tests/testdata/graph/spec_cardinality.txt, written by tools/golden/gen_graph_golden.py), and
// the exact messages of the static checks.
#include "core/data/spec_inference.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "sluice/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

struct GoldenCase {
  std::string expression;
  std::string spec;  // "ERROR" when TF refuses the pipeline
  std::string cardinality;
};

std::vector<GoldenCase> ReadGolden() {
  std::ifstream in("tests/testdata/graph/spec_cardinality.txt");
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    if (f.size() != 3) continue;
    cases.push_back({f[0], f[1], f[2]});
  }
  return cases;
}

TEST(SpecInferenceGoldenTest, MatchesTensorFlow) {
  std::vector<GoldenCase> cases = ReadGolden();
  ASSERT_GE(cases.size(), 90u) << "golden file missing or truncated (run from the repo root)";
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.expression);
    absl::StatusOr<Dataset> ds = Dataset::Parse(c.expression);
    if (c.spec == "ERROR") {
      EXPECT_FALSE(ds.ok()) << "TF refuses this pipeline; we accepted it";
      if (!ds.ok()) {
        EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
      }
      continue;
    }
    ASSERT_TRUE(ds.ok()) << ds.status();
    absl::StatusOr<ElementSpec> spec = ds->element_spec();
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(ElementSpecToString(*spec), c.spec);
    EXPECT_EQ(std::to_string(ds->Cardinality()), c.cardinality);
  }
}

absl::Status ParseStatus(const std::string& expression) {
  return Dataset::Parse(expression).status();
}

TEST(SpecInferenceTest, SeedElementSpecs) {
  // The seed's element_spec example, before distribution.
  absl::StatusOr<Dataset> ds =
      Dataset::Parse("tf.data.Dataset.from_tensors(([1.],[2])).repeat(100).batch(16)");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ElementSpecToString(*ds->element_spec()),
            "(TensorSpec(shape=(None, 1), dtype=tf.float32, name=None), "
            "TensorSpec(shape=(None, 1), dtype=tf.int32, name=None))");
}

TEST(SpecInferenceTest, SpecsAfterEveryOp) {
  Dataset ds = Dataset::Range(10).Batch(4, true).Unbatch().Batch(2);
  absl::StatusOr<std::vector<ElementSpec>> specs = InferElementSpecs(ds.def());
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 4u);
  EXPECT_EQ((*specs)[0].leaf().shape, Shape());
  EXPECT_EQ((*specs)[1].leaf().shape, Shape({4}));
  EXPECT_EQ((*specs)[2].leaf().shape, Shape());
  EXPECT_EQ((*specs)[3].leaf().shape, Shape({kUnknownDim}));
}

TEST(SpecInferenceTest, OpErrorsNameTheOpAndItsPosition) {
  struct Case {
    Dataset ds;
    std::string message;
  };
  std::vector<Case> cases = {
      {Dataset::Range(10).Repeat().Batch(0), "op 2 (batch): batch_size must be positive, got 0"},
      {Dataset::Range(0, 10, 0), "source (range): step must not be 0"},
      {Dataset::Range(3).Repeat(-2), "op 1 (repeat): count must be -1 (forever) or >= 0, got -2"},
      {Dataset::Range(3).Take(-3), "op 1 (take): count must be -1 (all) or >= 0, got -3"},
      {Dataset::Range(3).Skip(-3), "op 1 (skip): count must be -1 (all) or >= 0, got -3"},
      {Dataset::Range(3).Shard(0, 0), "op 1 (shard): num_shards must be positive, got 0"},
      {Dataset::Range(3).Shard(2, 2), "op 1 (shard): index must be in [0, 2), got 2"},
      {Dataset::Range(3).Shard(2, -1), "op 1 (shard): index must be >= 0, got -1"},
      {Dataset::Range(3).Shuffle(0), "op 1 (shuffle): buffer_size must be positive, got 0"},
      {Dataset::Range(3).Prefetch(-2),
       "op 1 (prefetch): buffer_size must be >= 0 or -1 (AUTOTUNE), got -2"},
      {Dataset::Range(3).Unbatch(),
       "op 1 (unbatch): cannot unbatch scalar components: component 0 has shape ()"},
      {Dataset::Range(3).Batch(2).Rebatch({}), "op 2 (rebatch): batch_sizes must not be empty"},
      {Dataset::Range(3).Batch(2).Rebatch({1, -1}),
       "op 2 (rebatch): batch_sizes must be >= 0, got -1 at position 1"},
      {Dataset::Range(3).Batch(2).Rebatch({0, 0}),
       "op 2 (rebatch): batch_sizes must not all be 0"},
      {Dataset::Range(3).Rebatch({2}),
       "op 1 (rebatch): component 0 is a scalar; rebatch needs a batched input (rank >= 1)"},
      {Dataset::Range(3).Batch(2).LegacyRebatch(-1),
       "op 2 (legacy_rebatch): num_replicas must be positive, got -1"},
      {Dataset::Range(3).LegacyRebatch(2),
       "op 1 (legacy_rebatch): component 0 is a scalar; rebatch needs a batched input (rank "
       ">= 1)"},
      {Dataset::FromTensorSlices(Element(Tensor::Scalar<int32_t>(1))),
       "source (from_tensor_slices): component 0 is a scalar; slicing needs tensors of rank >= 1"},
      {Dataset::FromTensorSlices(Element::Tuple({Tensor::FromVector<int32_t>({1, 2}),
                                                 Tensor::FromVector<int32_t>({1, 2, 3})})),
       "source (from_tensor_slices): components differ in dimension 0: component 0 has 2, "
       "component 1 has 3"},
      {Dataset::FromTensors(Element::Tuple({})),
       "source (from_tensors): the element has no components (tf.data needs at least one "
       "tensor)"},
  };
  for (const Case& c : cases) {
    absl::Status s = c.ds.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(s.message(), c.message);
    int failed = -5;
    EXPECT_FALSE(InferElementSpecs(c.ds.def(), &failed).ok());
    EXPECT_GE(failed, 0) << c.message;
  }
}

TEST(SpecInferenceTest, ShardHintsSkipTheRangeChecks) {
  EXPECT_TRUE(Dataset::Range(3).ShardHint().Validate().ok());
  proto::DatasetDef def = Dataset::Range(3).def();
  proto::ShardOp* s = def.add_ops()->mutable_shard();
  s->set_num_shards_is_hint(true);
  s->set_index(5);  // any index is fine while num_shards is a hint
  EXPECT_TRUE(Dataset::FromDef(def).ok());
}

TEST(SpecInferenceTest, ListStructuresAreRefused) {
  // tf.data reads a Python list as a tensor, so a list-shaped element has no TF meaning.
  Dataset ds = Dataset::FromTensors(Element::List({Tensor::Scalar<int32_t>(1)}));
  EXPECT_THAT(std::string(ds.Validate().message()), HasSubstr("list structure"));
}

TEST(SpecInferenceTest, RebatchOfComponentsWithDifferentBatchDimsIsAnError) {
  // TF's _RebatchDataset raises ValueError here (only when drop_remainder is False).
  EXPECT_THAT(std::string(ParseStatus("from_tensors(([1, 2, 3, 4], [1., 2.])).rebatch([2])")
                              .message()),
              HasSubstr("components have different batch dimensions: component 0 has 4, "
                        "component 1 has 2"));
  EXPECT_TRUE(
      Dataset::Parse("from_tensors(([1, 2, 3, 4], [1., 2.])).rebatch([2], drop_remainder=True)")
          .ok());
}

TEST(SpecInferenceTest, ElementSpecToStringUsesTfRepr) {
  ElementSpec spec = ElementSpec::Dict(
      {{"b", ElementSpec(TensorSpec{DType::kInt32, Shape()})},
       {"a", ElementSpec::Tuple({ElementSpec(TensorSpec{DType::kString, Shape({kUnknownDim})})})}});
  EXPECT_EQ(ElementSpecToString(spec),
            "{'b': TensorSpec(shape=(), dtype=tf.int32, name=None), "
            "'a': (TensorSpec(shape=(None,), dtype=tf.string, name=None),)}");
}

TEST(SpecInferenceTest, GraphLevelErrors) {
  proto::DatasetDef def;
  EXPECT_EQ(Dataset::FromDef(def).status().message(), "dataset graph: version is not set");
  def.set_version(static_cast<proto::DatasetGraphVersion>(7));
  EXPECT_EQ(Dataset::FromDef(def).status().message(),
            "dataset graph: unknown version 7 (this build reads version 1)");
  def.set_version(proto::DATASET_GRAPH_VERSION_1);
  EXPECT_EQ(Dataset::FromDef(def).status().message(), "dataset graph: no source set");
  def = Dataset::Range(3).def();
  def.add_ops();
  EXPECT_EQ(Dataset::FromDef(def).status().message(),
            "op 1 (unset): no op set (written by a newer build?)");
}

}  // namespace
}  // namespace sluice
