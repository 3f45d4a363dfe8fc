// bucket_by_sequence_length against TensorFlow: every case of
// tests/testdata/text/bucket_goldens.json (tools/golden/gen_bucket_goldens.py, tensorflow-cpu
// 2.15.1) runs on the same int64 vectors (written as JSON Lines {"x": [...]}) and must give TF's
// batches, padded values and element_spec shape, or contain TF's error message.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_iterator.h"
#include "core/util/json_value.h"
#include "gtest/gtest.h"
#include "iterator_test_util.h"
#include "record_test_util.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

std::string IntList(const JsonValue& v) {
  std::vector<std::string> parts;
  for (const JsonValue& x : v.items()) parts.push_back(absl::StrCat(*x.int_value()));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

// The Sluice expression for a case's arguments, over `file`.
std::string Expression(const std::string& file, const JsonValue& args) {
  std::string out = absl::StrCat("jsonl_dataset('", file, "', keys={'x': [tf.int64]})",
                                 ".bucket_by_sequence_length(length('x'), ",
                                 IntList(args["bucket_boundaries"]), ", ",
                                 IntList(args["bucket_batch_sizes"]));
  if (const JsonValue* s = args.Find("padded_shapes")) {
    absl::StrAppend(&out, ", padded_shapes={'x': ", IntList(*s), "}");
  }
  if (const JsonValue* v = args.Find("padding_values")) {
    absl::StrAppend(&out, ", padding_values={'x': tf.constant(", *v->int_value(), ", tf.int64)}");
  }
  for (const char* flag : {"pad_to_bucket_boundary", "drop_remainder"}) {
    if (const JsonValue* b = args.Find(flag); b != nullptr && b->bool_value()) {
      absl::StrAppend(&out, ", ", flag, "=True");
    }
  }
  return out + ")";
}

class BucketGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BucketGoldenTest, MatchesTensorFlow) {
  absl::StatusOr<JsonValue> goldens =
      ParseJson(record_test::ReadWholeFile("tests/testdata/text/bucket_goldens.json"));
  ASSERT_TRUE(goldens.ok()) << goldens.status();
  const JsonValue& c = (*goldens)["cases"][GetParam()];
  std::string lines;
  for (const JsonValue& v : c["data"].items()) absl::StrAppend(&lines, "{\"x\": ", IntList(v), "}\n");
  const std::string file = absl::StrCat(::testing::TempDir(), "/bucket_", GetParam(), ".jsonl");
  std::ofstream(file) << lines;
  const std::string expr = Expression(file, c["args"]);
  SCOPED_TRACE(expr);
  absl::StatusOr<Dataset> ds = Dataset::Parse(expr);
  absl::StatusOr<ElementSpec> spec = ds.ok() ? ds->element_spec() : ds.status();
  if (const JsonValue* error = c.Find("error"); error != nullptr && !c.Find("spec_shape")) {
    ASSERT_FALSE(spec.ok());
    EXPECT_NE(spec.status().message().find(error->string_value()), std::string::npos)
        << spec.status() << "\nTF: " << error->string_value();
    return;
  }
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ds.ok());
  std::vector<int64_t> want_shape;
  for (const JsonValue& d : c["spec_shape"].items()) want_shape.push_back(*d.int_value());
  EXPECT_EQ(spec->children()[0].leaf().shape, Shape(want_shape));
  auto it = MakeIterator(*ds);
  ASSERT_TRUE(it.ok()) << it.status();
  std::vector<std::string> got;
  absl::Status final_status;
  for (int i = 0; i < 1000; ++i) {
    Element e;
    bool end = false;
    final_status = (*it)->GetNext(&e, &end);
    if (!final_status.ok() || end) break;
    const Tensor& t = e.children()[0].leaf();
    std::vector<std::string> rows;
    for (int64_t r = 0; r < t.shape().dim(0); ++r) {
      std::vector<int64_t> row(t.data<int64_t>() + r * t.shape().dim(1),
                               t.data<int64_t>() + (r + 1) * t.shape().dim(1));
      rows.push_back(absl::StrCat("[", absl::StrJoin(row, ", "), "]"));
    }
    got.push_back(absl::StrCat("[", absl::StrJoin(rows, ", "), "]"));
  }
  if (const JsonValue* error = c.Find("error")) {
    // TF's message starts with its function-node prefix; Sluice's holds the assertion.
    const std::string tf = error->string_value();
    const std::string assertion = tf.substr(tf.find("assertion failed"));
    ASSERT_FALSE(final_status.ok()) << "TF failed with " << tf;
    EXPECT_NE(std::string(final_status.message()).find(assertion.substr(0, 80)), std::string::npos)
        << final_status;
    return;
  }
  ASSERT_TRUE(final_status.ok()) << final_status;
  std::vector<std::string> want;
  for (const JsonValue& b : c["batches"].items()) {
    std::vector<std::string> rows;
    for (const JsonValue& r : b.items()) rows.push_back(IntList(r));
    want.push_back(absl::StrCat("[", absl::StrJoin(rows, ", "), "]"));
  }
  EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(Goldens, BucketGoldenTest,
                         ::testing::Values("basic", "one_boundary_big_batches", "drop_remainder",
                                           "pad_to_bucket_boundary", "padded_shapes_and_values",
                                           "pad_to_boundary_too_long",
                                           "wrong_number_of_batch_sizes"));

TEST(BucketBySequenceLengthTest, ExpressionRoundTripsAndLengthFuncForms) {
  for (const char* expr :
       {"from_tensors({'a': [1, 2]}).bucket_by_sequence_length(length('a'), [2, 4], [1, 1, 3], "
        "padded_shapes={'a': [None]}, padding_values={'a': 7}, pad_to_bucket_boundary=True, "
        "drop_remainder=True)",
        "from_tensors(([1, 2], 'x')).bucket_by_sequence_length(length(0), [3], [2, 2], "
        "no_padding=True)",
        "from_tensors([1, 2]).bucket_by_sequence_length(length(), [3], [2, 2])"}) {
    auto ds = Dataset::Parse(expr);
    ASSERT_TRUE(ds.ok()) << expr << ": " << ds.status();
    ASSERT_TRUE(ds->element_spec().ok()) << expr << ": " << ds->element_spec().status();
    auto again = Dataset::Parse(ds->ToExpression());
    ASSERT_TRUE(again.ok()) << ds->ToExpression() << ": " << again.status();
    EXPECT_EQ(again->ToExpression(), ds->ToExpression());
    auto rows = testing_util::RunDataset(*ds);
    ASSERT_TRUE(rows.ok()) << expr << ": " << rows.status();
    EXPECT_EQ(rows->size(), 1u) << expr;
  }
}

TEST(BucketBySequenceLengthTest, StaticErrors) {
  for (const char* expr :
       {"from_tensors({'a': [1]}).bucket_by_sequence_length(length('b'), [2], [1, 1])",
        "from_tensors({'a': 1}).bucket_by_sequence_length(length('a'), [2], [1, 1])",
        "from_tensors({'a': [1]}).bucket_by_sequence_length(length('a'), [2], [1, 0])",
        "from_tensors({'a': [1]}).bucket_by_sequence_length(length('a'), [2], [1, 1], "
        "padded_shapes={'a': [None, 2]})"}) {
    auto ds = Dataset::Parse(expr);
    absl::Status s = ds.ok() ? ds->element_spec().status() : ds.status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << expr << ": " << s;
  }
  auto bad = Dataset::Parse("range(3).bucket_by_sequence_length(size('a'), [2], [1, 1])");
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace sluice
