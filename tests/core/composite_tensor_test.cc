// SparseTensor and RaggedTensor components (include/sluice/composite_tensor.h): building and
// checking them, their specs and printed forms against TensorFlow's
// (tests/testdata/format/composites.txt, tools/golden/gen_composite_goldens.py), literals in
// pipeline expressions, the proto round trip, hostile components, and ops that refuse them.
#include "sluice/composite_tensor.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/data/executor.h"
#include "core/data/spec_inference.h"
#include "core/format/python_literal.h"
#include "core/format/tensor_format.h"
#include "core/tensor/proto_convert.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "sluice/per_replica_format.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

Element Parse(const std::string& literal) {
  absl::StatusOr<PyValue> v = ParsePythonLiteral(literal);
  EXPECT_TRUE(v.ok()) << v.status();
  absl::StatusOr<Element> e = PyValueToElement(*v);
  EXPECT_TRUE(e.ok()) << literal << ": " << e.status();
  return e.ok() ? *e : Element();
}

absl::Status ParseError(const std::string& literal) {
  absl::StatusOr<PyValue> v = ParsePythonLiteral(literal);
  if (!v.ok()) return v.status();
  return PyValueToElement(*v).status();
}

struct GoldenCase {
  std::string name, literal, pipeline, spec, str;
  std::vector<std::string> elements;
};

// tests/testdata/format/composites.txt (format: tools/golden/gen_composite_goldens.py).
std::vector<GoldenCase> ReadGoldens() {
  std::ifstream in("tests/testdata/format/composites.txt");
  EXPECT_TRUE(in.good()) << "run from the source root";
  std::vector<GoldenCase> cases;
  std::string line;
  GoldenCase c;
  std::string* text = nullptr;  // the block being read
  while (std::getline(in, line)) {
    if (line.rfind("@case ", 0) == 0) {
      c = GoldenCase{line.substr(6), "", "", "", "", {}};
    } else if (line.rfind("@literal ", 0) == 0) {
      c.literal = line.substr(9);
    } else if (line.rfind("@pipeline ", 0) == 0) {
      c.pipeline = line.substr(10);
    } else if (line.rfind("@spec ", 0) == 0) {
      c.spec = line.substr(6);
    } else if (line == "@str") {
      text = &c.str;
    } else if (line == "@element") {
      c.elements.emplace_back();
      text = &c.elements.back();
    } else if (line == "@end") {
      text = nullptr;
      cases.push_back(c);
    } else if (text != nullptr) {
      *text += text->empty() ? line : "\n" + line;
    }
  }
  return cases;
}

std::vector<GoldenCase> LiteralGoldens() {
  std::vector<GoldenCase> out;
  for (GoldenCase& c : ReadGoldens()) {
    if (!c.literal.empty()) out.push_back(std::move(c));
  }
  return out;
}

TEST(CompositeGoldenTest, SpecsAndPrintedValuesAreTensorFlows) {
  const std::vector<GoldenCase> cases = LiteralGoldens();
  ASSERT_GE(cases.size(), 10u);
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name + ": " + c.literal);
    Element e = Parse(c.literal);
    ASSERT_TRUE(e.is_composite());
    EXPECT_TRUE(CheckComposites(e, "golden").ok());
    EXPECT_EQ(ElementSpecToString(SpecOf(e)), c.spec);
    EXPECT_EQ(FormatElement(e), c.str);
    EXPECT_EQ(FormatElementRepr(e), c.str);  // TF's str and repr agree for both kinds
  }
}

TEST(CompositeGoldenTest, ThroughAPipelineTheSpecIsTheSame) {
  for (const GoldenCase& c : LiteralGoldens()) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<Dataset> d = Dataset::Parse("from_tensors(" + c.literal + ").repeat(2)");
    ASSERT_TRUE(d.ok()) << d.status();
    absl::StatusOr<ElementSpec> spec = d->element_spec();
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(ElementSpecToString(*spec), c.spec);
    absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*d);
    ASSERT_TRUE(it.ok()) << it.status();
    int n = 0;
    for (;; ++n) {
      Element e;
      bool end = false;
      ASSERT_TRUE((*it)->GetNext(&e, &end).ok());
      if (end) break;
      EXPECT_EQ(FormatElement(e), c.str);
    }
    EXPECT_EQ(n, 2);
    // The expression prints the literal in a form that reads back to the same graph.
    absl::StatusOr<Dataset> again = Dataset::Parse(d->ToExpression());
    ASSERT_TRUE(again.ok()) << d->ToExpression() << ": " << again.status();
    EXPECT_EQ(again->Fingerprint(), d->Fingerprint()) << d->ToExpression();
  }
}

// from_tensor_slices, batch, unbatch and pass-through ops on sparse and ragged inputs: the
// element_spec and every element as TF 2.15 gives them.
TEST(CompositeGoldenTest, OpsOnCompositesGiveTensorFlowsElements) {
  int pipelines = 0;
  for (const GoldenCase& c : ReadGoldens()) {
    if (c.pipeline.empty()) continue;
    ++pipelines;
    SCOPED_TRACE(c.name + ": " + c.pipeline);
    absl::StatusOr<Dataset> d = Dataset::Parse(c.pipeline);
    ASSERT_TRUE(d.ok()) << d.status();
    absl::StatusOr<ElementSpec> spec = d->element_spec();
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(ElementSpecToString(*spec), c.spec);
    if (d->Cardinality() >= 0) {
      EXPECT_EQ(d->Cardinality(), static_cast<int64_t>(c.elements.size()));
    }
    absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*d);
    ASSERT_TRUE(it.ok()) << it.status();
    std::vector<std::string> got;
    for (;;) {
      Element e;
      bool end = false;
      absl::Status s = (*it)->GetNext(&e, &end);
      ASSERT_TRUE(s.ok()) << s;
      if (end) break;
      got.push_back(FormatElement(e));
      // Every element fits the static spec, component by component.
      EXPECT_EQ(ElementSpecToString(SpecOf(e)).substr(0, 4), c.spec.substr(0, 4));
    }
    EXPECT_EQ(got, c.elements);
  }
  EXPECT_GE(pipelines, 10);
}

TEST(CompositeSpecTest, SpecStringsForStaticShapesAsTf) {
  EXPECT_EQ(CompositeSpecToString(SparseTensorSpecOf(DType::kInt64, {kUnknownDim, 3})),
            "SparseTensorSpec(TensorShape([None, 3]), tf.int64)");
  EXPECT_EQ(CompositeSpecToString(RaggedTensorSpecOf(DType::kInt32, {2, kUnknownDim}, 1)),
            "RaggedTensorSpec(TensorShape([2, None]), tf.int32, 1, tf.int64)");
  // A dict of both, as element_spec prints it.
  ElementSpec dict = ElementSpec::Dict(
      {{"ids", SparseTensorSpecOf(DType::kInt64, {kUnknownDim})},
       {"tokens", RaggedTensorSpecOf(DType::kInt32, {kUnknownDim, kUnknownDim}, 1)}});
  EXPECT_EQ(ElementSpecToString(dict),
            "{'ids': SparseTensorSpec(TensorShape([None]), tf.int64), 'tokens': "
            "RaggedTensorSpec(TensorShape([None, None]), tf.int32, 1, tf.int64)}");
  // The components are TF's: the wire and budgets see three (or 1 + ragged_rank) dense leaves.
  std::vector<TensorSpec> leaves = SparseTensorSpecOf(DType::kFloat32, {kUnknownDim, 3}).Flatten();
  ASSERT_EQ(leaves.size(), 3u);
  EXPECT_EQ(leaves[0].ToString(), "TensorSpec(shape=(None, 2), dtype=tf.int64, name=None)");
  EXPECT_EQ(leaves[1].ToString(), "TensorSpec(shape=(None,), dtype=tf.float32, name=None)");
  EXPECT_EQ(leaves[2].ToString(), "TensorSpec(shape=(2,), dtype=tf.int64, name=None)");
  leaves = RaggedTensorSpecOf(DType::kInt32, {2, kUnknownDim, kUnknownDim}, 2).Flatten();
  ASSERT_EQ(leaves.size(), 3u);
  EXPECT_EQ(leaves[1].ToString(), "TensorSpec(shape=(3,), dtype=tf.int64, name=None)");
  EXPECT_EQ(leaves[2].ToString(), "TensorSpec(shape=(None,), dtype=tf.int64, name=None)");
}

TEST(CompositeTensorTest, HostileComponentsAreRefusedNamingTheComponent) {
  const Tensor flat = Tensor::FromVector<int32_t>({1, 2, 3});
  auto splits = [](std::vector<int64_t> s) { return Tensor::FromVector<int64_t>(s); };
  struct Case {
    absl::StatusOr<Element> made;
    std::string says;
  };
  std::vector<Case> cases;
  cases.push_back({MakeRaggedTensor(flat, {splits({0, 2, 1, 3})}), "decreases at position 2"});
  cases.push_back({MakeRaggedTensor(flat, {splits({1, 3})}), "starts at 1"});
  cases.push_back({MakeRaggedTensor(flat, {splits({0, 2})}), "ends at 2 but the level below has 3"});
  cases.push_back({MakeRaggedTensor(flat, {splits({})}), "row_splits 0 is empty"});
  cases.push_back({MakeRaggedTensor(flat, {Tensor::FromVector<int32_t>({0, 3})}),
                   "row_splits 0 must be an int64 tensor"});
  cases.push_back({MakeRaggedTensor(Tensor::Scalar<int32_t>(1), {}), "flat_values must have rank"});
  const Tensor idx = Tensor::FromVector<int64_t>({0, 0, 1, 4}, Shape({2, 2}));
  cases.push_back({MakeSparseTensor(idx, Tensor::FromVector<int32_t>({1, 2}),
                                    Tensor::FromVector<int64_t>({3, 4})),
                   "indices[1, 1] = 4 is outside dense_shape[1] = 4"});
  cases.push_back({MakeSparseTensor(Tensor::FromVector<int64_t>({0, 0, 1, 1}, Shape({2, 2})),
                                    Tensor::FromVector<int32_t>({1, 2, 3}),
                                    Tensor::FromVector<int64_t>({3, 4})),
                   "values must have shape (2,)"});
  cases.push_back({MakeSparseTensor(Tensor::FromVector<int64_t>({0, 0}, Shape({1, 2})),
                                    Tensor::FromVector<int32_t>({1}),
                                    Tensor::FromVector<int64_t>({3, 4, 5})),
                   "dense_shape has 3 entries but indices have rank 2"});
  cases.push_back({MakeSparseTensor(Tensor::FromVector<int64_t>({0, -1}, Shape({1, 2})),
                                    Tensor::FromVector<int32_t>({1}),
                                    Tensor::FromVector<int64_t>({3, 4})),
                   "indices[0, 1] = -1 is outside"});
  for (const Case& c : cases) {
    EXPECT_EQ(c.made.status().code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_THAT(c.made.status().message(), HasSubstr(c.says));
  }
}

// Components as a peer sends them: every one of these protos is refused by ElementFromProto.
TEST(CompositeTensorTest, HostileProtosAreRefused) {
  proto::ElementProto good = ElementToProto(Parse("tf.ragged.constant([[1, 2], [3]])"));
  ASSERT_TRUE(ElementFromProto(good).ok());
  {
    proto::ElementProto p = good;  // row_splits [0, 2, 3] -> [0, 3, 2]
    proto::TensorProto& s = *p.mutable_tensors(1);
    Tensor bad = Tensor::FromVector<int64_t>({0, 3, 2});
    s.set_content(std::string(static_cast<const char*>(bad.raw_data()), bad.byte_size()));
    absl::StatusOr<Element> e = ElementFromProto(p);
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(e.status().message(), HasSubstr("row_splits 0 decreases"));
  }
  {
    proto::ElementProto p = good;  // the static shape claims 5 rows
    p.mutable_structure()->set_composite_dims(0, 5);
    EXPECT_THAT(ElementFromProto(p).status().message(), HasSubstr("static shape (5, None)"));
  }
  {
    proto::ElementProto p = good;  // a component that is itself a tuple
    p.mutable_structure()->mutable_children(1)->set_kind(proto::StructureProto::TUPLE);
    EXPECT_THAT(ElementFromProto(p).status().message(), HasSubstr("component is not a tensor"));
  }
  {
    proto::ElementProto p =
        ElementToProto(Parse("tf.sparse.SparseTensor(indices=[[0, 1]], values=[1], "
                             "dense_shape=[2, 2])"));
    p.mutable_tensors(2)->set_content(std::string(16, '\0'));  // dense_shape [0, 0]
    EXPECT_THAT(ElementFromProto(p).status().message(),
                HasSubstr("indices[0, 0] = 0 is outside dense_shape[0] = 0"));
  }
  {
    proto::ElementSpecProto p = ElementSpecToProto(SparseTensorSpecOf(DType::kInt32, {3}));
    ASSERT_TRUE(ElementSpecFromProto(p).ok());
    p.mutable_specs(0)->set_dtype(proto::DT_INT32);  // indices must be int64
    EXPECT_THAT(ElementSpecFromProto(p).status().message(), HasSubstr("are not TF's"));
  }
}

TEST(CompositeTensorTest, ProtoRoundTripKeepsKindShapeAndValues) {
  Element e = Element::Tuple({Parse("tf.ragged.constant([[[1, 2], [3]], [[4]]])"),
                              Parse("tf.sparse.SparseTensor(indices=[[0, 1]], values=[2.5], "
                                    "dense_shape=[2, 3])")});
  absl::StatusOr<Element> back = ElementFromProto(ElementToProto(e));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(FormatElement(*back), FormatElement(e));
  EXPECT_EQ(ElementSpecToString(SpecOf(*back)),
            "(RaggedTensorSpec(TensorShape([2, None, None]), tf.int32, 2, tf.int64), "
            "SparseTensorSpec(TensorShape([2, 3]), tf.float32))");
  absl::StatusOr<ElementSpec> spec = ElementSpecFromProto(ElementSpecToProto(SpecOf(e)));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(ElementSpecToString(*spec), ElementSpecToString(SpecOf(e)));
}

// A PerReplica of composites prints each replica's value whole, as TF's PerReplica.__str__
// ("  %d: %s" per replica).
TEST(CompositeFormatTest, PerReplicaPrintsEachReplicasCompositeWhole) {
  PerReplica<Element> v({Parse("tf.ragged.constant([[1, 2], []])"),
                         Parse("tf.ragged.constant([[3]])")});
  EXPECT_EQ(FormatPerReplica(v),
            "PerReplica:{\n  0: <tf.RaggedTensor [[1, 2], []]>,\n  1: <tf.RaggedTensor [[3]]>\n}");
  PerReplica<Element> t({Element::Tuple({Parse("tf.ragged.constant([[1]])")}),
                         Element::Tuple({Parse("tf.ragged.constant([[2], [3, 4]])")})});
  EXPECT_EQ(FormatPerReplica(t), "(PerReplica:{\n  0: <tf.RaggedTensor [[1]]>,\n  1: "
                                 "<tf.RaggedTensor [[2], [3, 4]]>\n},)");
}

TEST(CompositeLiteralTest, BadLiteralsSayWhat) {
  EXPECT_THAT(ParseError("tf.ragged.constant([[1, [2]], [3]])").message(),
              HasSubstr("same nesting depth"));
  EXPECT_THAT(ParseError("tf.ragged.constant([[1, 2]], ragged_rank=2)").message(),
              HasSubstr("must be below the nesting depth 2"));
  EXPECT_THAT(ParseError("tf.ragged.constant([[[1], [2, 3]]], ragged_rank=1)").message(),
              HasSubstr("ragged"));
  EXPECT_THAT(ParseError("tf.ragged.constant([[1]], row_splits_dtype=tf.int32)").message(),
              HasSubstr("row_splits_dtype must be tf.int64"));
  EXPECT_THAT(ParseError("tf.sparse.SparseTensor(indices=[[0, 5]], values=[1], "
                         "dense_shape=[1, 2])").message(),
              HasSubstr("indices[0, 1] = 5 is outside dense_shape[1] = 2"));
  EXPECT_THAT(ParseError("tf.sparse.SparseTensor(indices=[[0]], values=[1])").message(),
              HasSubstr("missing argument dense_shape"));
  EXPECT_THAT(ParseError("[tf.ragged.constant([[1]])]").message(),
              HasSubstr("is not a dense tensor"));
  EXPECT_THAT(ParseError("tf.constant(tf.ragged.constant([[1]]))").message(),
              HasSubstr("value must be"));
  // An empty sparse value: indices=[] reads as (0, rank), as in TF.
  Element empty = Parse("tf.sparse.SparseTensor(indices=[], values=tf.constant([], "
                        "dtype=tf.int32), dense_shape=[2, 2])");
  EXPECT_EQ(ElementSpecToString(SpecOf(empty)),
            "SparseTensorSpec(TensorShape([2, 2]), tf.int32)");
}

// Until an op handles composites it refuses them, naming itself: it never batches, maps or
// pads a composite's components as if they were separate tensors.
TEST(CompositeOpsTest, OpsThatDoNotKnowCompositesRefuseThem) {
  const std::string source = "from_tensors(tf.ragged.constant([[1, 2], [3]]))";
  for (const std::string op : {"padded_batch(2)", "map(cast(tf.float32))", "filter(less(5))"}) {
    SCOPED_TRACE(op);
    absl::StatusOr<Dataset> d = Dataset::Parse(source + "." + op);
    absl::Status s = d.ok() ? d->element_spec().status() : d.status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("does not support SparseTensor or RaggedTensor"));
  }
  for (const std::string op : {"repeat(3)", "take(1)", "skip(0)", "shard(1, 0)", "prefetch(1)",
                               "shuffle(4, seed=1)", "cache()", "ignore_errors()",
                               "rebatch([1])"}) {
    SCOPED_TRACE(op);
    absl::StatusOr<Dataset> d = Dataset::Parse(source + "." + op);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(d->element_spec().ok()) << d->element_spec().status();
  }
}

}  // namespace
}  // namespace sluice
