// parse_example against tf.io.parse_example / parse_single_example on the fixture Examples
// (tools/golden/gen_tfrecord_fixtures.py), the feature-spec syntax, and bad input.
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "core/data/ops/example_parser.h"
#include "core/data/spec_inference.h"
#include "gtest/gtest.h"
#include "proto/example.pb.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using record_test::Golden;
using record_test::HexList;

// The generator's SPEC.
constexpr absl::string_view kSpec =
    "{'image': FixedLenFeature([], tf.string), "
    "'label': tf.io.FixedLenFeature([], tf.int64, default_value=-1), "
    "'scores': FixedLenFeature([2], tf.float32), "
    "'m': FixedLenFeature([2, 3], tf.float32), "
    "'tags': VarLenFeature(tf.string), "
    "'ids': tf.io.VarLenFeature(tf.int64)}";

// The fixture goldens hold each VarLenFeature as tf.sparse.to_dense gives it: these tests
// parse with var_len_as_dense (the SparseTensor form: parse_example_composites_test.cc).
ExampleParser SpecParser(absl::string_view text = kSpec, bool var_len_as_dense = true) {
  size_t pos = 0;
  absl::StatusOr<proto::ParseExampleFn> fn = ExampleParser::ParseFeatureSpec(text, &pos);
  EXPECT_TRUE(fn.ok()) << fn.status();
  fn->set_var_len_as_dense(var_len_as_dense);
  absl::StatusOr<ExampleParser> p = ExampleParser::Create(*fn);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

// Compares a tensor to the golden's {"dtype", "shape", "values"} (strings as hex).
void ExpectTensor(const Tensor& t, const JsonValue& g, const std::string& what) {
  EXPECT_EQ(std::string(DTypeName(t.dtype())), g["dtype"].string_value()) << what;
  std::vector<int64_t> shape;
  for (const JsonValue& d : g["shape"].items()) shape.push_back(*d.int_value());
  ASSERT_EQ(t.shape().dims(), shape) << what;
  // Flatten the golden values.
  std::vector<const JsonValue*> flat;
  std::vector<const JsonValue*> stack = {&g["values"]};
  while (!stack.empty()) {
    const JsonValue* v = stack.back();
    stack.pop_back();
    if (v->is_array()) {
      for (size_t i = v->size(); i > 0; --i) stack.push_back(&(*v)[i - 1]);
    } else {
      flat.push_back(v);
    }
  }
  ASSERT_EQ(static_cast<int64_t>(flat.size()), t.num_elements()) << what;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const JsonValue& v = *flat[static_cast<size_t>(i)];
    switch (t.dtype()) {
      case DType::kString:
        EXPECT_EQ(t.string_at(i), absl::HexStringToBytes(v.string_value())) << what << " " << i;
        break;
      case DType::kInt64:
        EXPECT_EQ(t.data<int64_t>()[i], *v.int_value()) << what << " " << i;
        break;
      default:
        EXPECT_EQ(t.data<float>()[i], static_cast<float>(v.number())) << what << " " << i;
    }
  }
}

void ExpectDict(const Element& e, const JsonValue& g, const std::vector<std::string>& keys) {
  ASSERT_EQ(e.kind(), NestKind::kDict);
  EXPECT_EQ(e.keys(), keys);
  for (size_t i = 0; i < e.keys().size(); ++i) {
    ExpectTensor(e.children()[i].leaf(), g[e.keys()[i]], e.keys()[i]);
  }
}

std::vector<std::string> GoldenKeys() {
  std::vector<std::string> keys;
  for (const JsonValue& k : Golden()["parse"]["batch_keys"].items()) {
    keys.push_back(k.string_value());
  }
  return keys;
}

TEST(ExampleParserTest, BatchMatchesTensorFlow) {
  const std::vector<std::string> serialized = HexList(Golden()["examples_hex"]);
  ASSERT_EQ(serialized.size(), 3u);
  Tensor batch = Tensor::FromStrings(serialized, Shape({3}));
  auto parsed = SpecParser().Parse(batch);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // TF's key order: VarLen keys sorted, then FixedLen keys sorted.
  EXPECT_EQ(GoldenKeys(), (std::vector<std::string>{"ids", "tags", "image", "label", "m",
                                                   "scores"}));
  ExpectDict(*parsed, Golden()["parse"]["batch"], GoldenKeys());
}

TEST(ExampleParserTest, SingleMatchesTensorFlow) {
  const std::vector<std::string> serialized = HexList(Golden()["examples_hex"]);
  ExampleParser p = SpecParser();
  for (size_t i = 0; i < serialized.size(); ++i) {
    auto parsed = p.Parse(Tensor::StringScalar(serialized[i]));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    ExpectDict(*parsed, Golden()["parse"]["single"][i], GoldenKeys());
  }
}

TEST(ExampleParserTest, OutputSpecsForScalarsAndBatches) {
  ExampleParser p = SpecParser();
  auto single = p.OutputSpec(TensorSpec{DType::kString, Shape()});
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(ElementSpecToString(*single),
            "{'ids': TensorSpec(shape=(None,), dtype=tf.int64, name=None), "
            "'tags': TensorSpec(shape=(None,), dtype=tf.string, name=None), "
            "'image': TensorSpec(shape=(), dtype=tf.string, name=None), "
            "'label': TensorSpec(shape=(), dtype=tf.int64, name=None), "
            "'m': TensorSpec(shape=(2, 3), dtype=tf.float32, name=None), "
            "'scores': TensorSpec(shape=(2,), dtype=tf.float32, name=None)}");
  auto batched = p.OutputSpec(TensorSpec{DType::kString, Shape({kUnknownDim})});
  ASSERT_TRUE(batched.ok());
  EXPECT_TRUE(absl::StrContains(ElementSpecToString(*batched),
                                "'ids': TensorSpec(shape=(None, None), dtype=tf.int64"));
  EXPECT_TRUE(absl::StrContains(ElementSpecToString(*batched),
                                "'m': TensorSpec(shape=(None, 2, 3), dtype=tf.float32"));
  auto fixed = p.OutputSpec(TensorSpec{DType::kString, Shape({4})});
  ASSERT_TRUE(fixed.ok());
  EXPECT_TRUE(absl::StrContains(ElementSpecToString(*fixed),
                                "'label': TensorSpec(shape=(4,), dtype=tf.int64"));
  // Without the flag, TF's SparseTensorSpecs.
  auto sparse = SpecParser(kSpec, /*var_len_as_dense=*/false)
                    .OutputSpec(TensorSpec{DType::kString, Shape({kUnknownDim})});
  ASSERT_TRUE(sparse.ok());
  EXPECT_TRUE(absl::StrContains(ElementSpecToString(*sparse),
                                "{'ids': SparseTensorSpec(TensorShape([None, None]), tf.int64), "
                                "'tags': SparseTensorSpec(TensorShape([None, None]), tf.string), "
                                "'image': TensorSpec(shape=(None,)"))
      << ElementSpecToString(*sparse);
  EXPECT_EQ(p.OutputSpec(TensorSpec{DType::kInt64, Shape()}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.OutputSpec(TensorSpec{DType::kString, Shape({2, 2})}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(ExampleParserTest, ErrorsNameTheFeatureAsTensorFlowDoes) {
  const std::vector<std::string> serialized = HexList(Golden()["examples_hex"]);
  Tensor batch = Tensor::FromStrings(serialized, Shape({3}));
  const JsonValue& g = Golden()["parse_errors"];
  struct Case {
    const char* name;
    const char* spec;
    const char* expected;
  };
  for (const Case& c : std::vector<Case>{
           {"missing_required", "{'label': FixedLenFeature([], tf.int64)}",
            "Name: <unknown>, Feature: label (data type: int64) is required but could not be "
            "found."},
           {"wrong_type", "{'label': FixedLenFeature([], tf.float32)}",
            "Name: <unknown>, Key: label, Index: 0.  Data types don't match. Data type: int64 "
            "but expected type: float"},
           {"wrong_count", "{'scores': FixedLenFeature([3], tf.float32)}",
            "Name: <unknown>, Key: scores, Index: 0.  Number of float values != expected.  "
            "Values size: 2 but output shape: [3]"}}) {
    auto parsed = SpecParser(c.spec).Parse(batch);
    ASSERT_FALSE(parsed.ok()) << c.name;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Message(parsed.status()), c.expected) << c.name;
    EXPECT_EQ(g[c.name]["error"].string_value(), "InvalidArgumentError");
    EXPECT_TRUE(absl::StrContains(g[c.name]["message"].string_value(), c.expected)) << c.name;
  }
  // VarLen with the wrong type fails too.
  auto var = SpecParser("{'tags': VarLenFeature(tf.int64)}").Parse(batch);
  EXPECT_TRUE(absl::StrContains(Message(var.status()), "Key: tags, Index: 0.  Data types"));
}

TEST(ExampleParserTest, GarbageBytesAreInvalidArgumentNotACrash) {
  ExampleParser p = SpecParser("{'x': VarLenFeature(tf.int64)}");
  for (const std::string& bad :
       {std::string("\xff\xff\xff"), std::string("\x0a\x05\x0a\x03", 4), std::string("\x0b")}) {
    auto parsed = p.Parse(Tensor::StringScalar(bad));
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(Message(parsed.status()), "Could not parse example input"));
  }
  // The empty string is an empty Example: VarLen features are empty.
  auto empty = p.Parse(Tensor::StringScalar(""));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->children()[0].leaf().shape(), Shape({0}));
}

TEST(ExampleParserTest, ProtobufEncodingsAndMergeRulesMatchTheGeneratedParser) {
  // Built with the generated classes: unpacked int64 / float encodings, a key given twice
  // (the last wins), a feature with no list (treated as no values).
  proto::Example ex;
  auto& f = *ex.mutable_features()->mutable_feature();
  f["a"].mutable_int64_list()->add_value(-5);
  f["a"].mutable_int64_list()->add_value(int64_t{1} << 40);
  f["b"].mutable_float_list()->add_value(2.5f);
  f["c"];  // empty Feature
  std::string bytes = ex.SerializeAsString();
  ExampleParser p = SpecParser(
      "{'a': FixedLenFeature([2], tf.int64), 'b': FixedLenFeature([1], tf.float32), "
      "'c': VarLenFeature(tf.string), 'd': FixedLenFeature([2], tf.string, "
      "default_value=['p', 'q'])}");
  auto parsed = p.Parse(Tensor::StringScalar(bytes));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // Order: c (VarLen), then a, b, d.
  EXPECT_EQ(parsed->keys(), (std::vector<std::string>{"c", "a", "b", "d"}));
  const Tensor& a = parsed->children()[1].leaf();
  EXPECT_EQ(a.data<int64_t>()[0], -5);
  EXPECT_EQ(a.data<int64_t>()[1], int64_t{1} << 40);
  EXPECT_EQ(parsed->children()[2].leaf().data<float>()[0], 2.5f);
  EXPECT_EQ(parsed->children()[0].leaf().shape(), Shape({0}));
  EXPECT_EQ(parsed->children()[3].leaf().string_at(1), "q");
  // Unpacked encoding of int64 (field 1, wire type 0) and float (wire type 5) by hand:
  // Example{features{feature{key:"a" value{int64_list{value:3 value:4}}}}}.
  std::string int_list = std::string("\x08\x03\x08\x04", 4);
  std::string feature = "\x1a" + std::string(1, static_cast<char>(int_list.size())) + int_list;
  std::string entry = std::string("\x0a\x01" "a", 3) + "\x12" +
                      std::string(1, static_cast<char>(feature.size())) + feature;
  std::string features = "\x0a" + std::string(1, static_cast<char>(entry.size())) + entry;
  std::string example = "\x0a" + std::string(1, static_cast<char>(features.size())) + features;
  proto::Example check;
  ASSERT_TRUE(check.ParseFromString(example));
  ASSERT_EQ(check.features().feature().at("a").int64_list().value_size(), 2);
  auto unpacked = SpecParser("{'a': FixedLenFeature([2], tf.int64)}")
                      .Parse(Tensor::StringScalar(example));
  ASSERT_TRUE(unpacked.ok()) << unpacked.status();
  EXPECT_EQ(unpacked->children()[0].leaf().data<int64_t>()[1], 4);
  // Two serialized Examples concatenated merge (protobuf's rule): the same key twice, the
  // last entry wins.
  proto::Example e1, e2;
  (*e1.mutable_features()->mutable_feature())["a"].mutable_int64_list()->add_value(1);
  (*e1.mutable_features()->mutable_feature())["a"].mutable_int64_list()->add_value(2);
  (*e2.mutable_features()->mutable_feature())["a"].mutable_int64_list()->add_value(7);
  (*e2.mutable_features()->mutable_feature())["a"].mutable_int64_list()->add_value(8);
  const std::string merged = e1.SerializeAsString() + e2.SerializeAsString();
  ASSERT_TRUE(check.ParseFromString(merged));
  ASSERT_EQ(check.features().feature().at("a").int64_list().value(0), 7);
  auto last = SpecParser("{'a': FixedLenFeature([2], tf.int64)}")
                  .Parse(Tensor::StringScalar(merged));
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->children()[0].leaf().data<int64_t>()[0], 7);
  EXPECT_EQ(last->children()[0].leaf().data<int64_t>()[1], 8);
}

TEST(ExampleParserTest, VarLenPadsPerBatch) {
  auto make = [](std::vector<float> v) {
    proto::Example ex;
    auto* l = (*ex.mutable_features()->mutable_feature())["v"].mutable_float_list();
    for (float x : v) l->add_value(x);
    return ex.SerializeAsString();
  };
  ExampleParser p = SpecParser("{'v': VarLenFeature(tf.float32)}");
  auto parsed = p.Parse(Tensor::FromStrings({make({1, 2}), make({}), make({3, 4, 5})},
                                            Shape({3})));
  ASSERT_TRUE(parsed.ok());
  const Tensor& v = parsed->children()[0].leaf();
  EXPECT_EQ(v.shape(), Shape({3, 3}));
  std::vector<float> values(v.data<float>(), v.data<float>() + 9);
  EXPECT_EQ(values, (std::vector<float>{1, 2, 0, 0, 0, 0, 3, 4, 5}));
  // An empty batch.
  auto none = p.Parse(Tensor::FromStrings({}, Shape({0})));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->children()[0].leaf().shape(), Shape({0, 0}));
}

TEST(ExampleParserTest, FeatureSpecSyntaxErrorsAndRoundTrip) {
  for (const char* bad : {"{'x': FixedLenFeature([], tf.int32)}",
                          "{'x': FixedLenFeature([-1], tf.int64)}",
                          "{'x': FixedLenFeature([2], tf.int64, default_value=[1, 2, 3])}",
                          "{'x': FixedLenFeature([], tf.int64, default_value='a')}",
                          "{'x': SparseFeature([], tf.int64)}",
                          "{'x': VarLenFeature(tf.int64), 'x': VarLenFeature(tf.int64)}",
                          "{}", "{'x': FixedLenFeature([])}", "[1]"}) {
    size_t pos = 0;
    auto fn = ExampleParser::ParseFeatureSpec(bad, &pos);
    EXPECT_EQ(fn.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  size_t pos = 0;
  auto err = ExampleParser::ParseFeatureSpec("{'lbl': FixedLenFeature([], tf.int32)}", &pos);
  EXPECT_TRUE(absl::StrContains(err.status().message(), "'lbl'")) << err.status();
  pos = 0;
  auto fn = ExampleParser::ParseFeatureSpec(kSpec, &pos);
  ASSERT_TRUE(fn.ok());
  EXPECT_EQ(pos, kSpec.size());
  const std::string text = ExampleParser::ToExpression(*fn);
  pos = 0;
  auto again = ExampleParser::ParseFeatureSpec(text, &pos);
  ASSERT_TRUE(again.ok()) << text << ": " << again.status();
  EXPECT_EQ(again->SerializeAsString(), fn->SerializeAsString()) << text;
  // Float defaults of a float feature, ints accepted for floats, shape as an int.
  pos = 0;
  auto floats = ExampleParser::ParseFeatureSpec(
      "{'f': FixedLenFeature(2, tf.float32, default_value=[1, 2.5])}", &pos);
  ASSERT_TRUE(floats.ok()) << floats.status();
}

}  // namespace
}  // namespace sluice
