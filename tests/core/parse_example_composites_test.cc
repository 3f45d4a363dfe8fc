// parse_example with VarLenFeature (SparseTensor) and RaggedFeature (RaggedTensor) against
// TensorFlow 2.15 (tests/testdata/format/parse_composites.txt, tools/golden/gen_composite_goldens.py):
// pipelines on TFRecord files this test writes, their element_spec and printed elements; the
// var_len_as_dense flag; the C++ builder; feature-spec errors; hostile records.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/data/executor.h"
#include "core/data/memory_budget.h"
#include "core/data/ops/example_parser.h"
#include "core/data/ops/ragged_feature.h"
#include "core/data/spec_inference.h"
#include "core/format/tensor_format.h"
#include "core/io/tfrecord_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/example.pb.h"
#include "sluice/dataset.h"
#include "tests/core/golden_blocks.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

struct ParseGoldens {
  // "'{records}'" (as the pipelines write it) -> the path of the file this test wrote.
  std::vector<std::pair<std::string, std::string>> files;
  std::vector<golden::Block> cases;
};

// Reads parse_composites.txt and writes each record set as a TFRecord file under TempDir.
ParseGoldens ReadParseGoldens() {
  golden::File file = golden::ReadFile("tests/testdata/format/parse_composites.txt");
  EXPECT_TRUE(file.read) << "run from the source root";
  ParseGoldens g;
  g.cases = std::move(file.blocks);
  for (const auto& [name, records] : file.record_sets) {
    const std::string path = absl::StrCat(::testing::TempDir(), "/parse_composites_", name,
                                          ".tfrecord");
    absl::StatusOr<std::unique_ptr<TFRecordWriter>> w = TFRecordWriter::Open(path);
    EXPECT_TRUE(w.ok()) << w.status();
    for (const std::string& r : records) EXPECT_TRUE((*w)->Write(r).ok());
    EXPECT_TRUE((*w)->Close().ok());
    g.files.emplace_back(absl::StrCat("'{", name, "}'"), absl::StrCat("'", path, "'"));
  }
  return g;
}

struct PipelineRun {
  absl::Status spec_status;
  std::string spec;
  std::vector<std::string> elements;
  absl::Status end;
};

PipelineRun RunPipeline(const std::string& expression) {
  PipelineRun run;
  absl::StatusOr<Dataset> d = Dataset::Parse(expression);
  if (!d.ok()) {
    run.spec_status = d.status();
    return run;
  }
  absl::StatusOr<ElementSpec> spec = d->element_spec();
  if (!spec.ok()) {
    run.spec_status = spec.status();
    return run;
  }
  run.spec = ElementSpecToString(*spec);
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*d);
  if (!it.ok()) {
    run.end = it.status();
    return run;
  }
  for (int guard = 0; guard < 1000; ++guard) {
    Element e;
    bool end = false;
    run.end = (*it)->GetNext(&e, &end);
    if (!run.end.ok() || end) break;
    run.elements.push_back(FormatElement(e));
  }
  return run;
}

TEST(ParseCompositesGoldenTest, PipelinesOnTfRecordFilesGiveTensorFlowsElements) {
  const ParseGoldens g = ReadParseGoldens();
  int pipelines = 0;
  int errors = 0;
  for (const golden::Block& c : g.cases) {
    SCOPED_TRACE(c.Field("case") + ": " + c.Field("pipeline"));
    const std::string expression = absl::StrReplaceAll(c.Field("pipeline"), g.files);
    const PipelineRun run = RunPipeline(expression);
    ASSERT_TRUE(run.spec_status.ok()) << run.spec_status;
    if (!c.Field("error").empty()) {
      ++errors;
      EXPECT_EQ(run.end.code(), absl::StatusCode::kInvalidArgument) << run.end;
      EXPECT_THAT(std::string(run.end.message()), HasSubstr(c.Field("error")));
      continue;
    }
    ++pipelines;
    ASSERT_TRUE(run.end.ok()) << run.end;
    EXPECT_EQ(run.spec, c.Field("spec"));
    EXPECT_EQ(run.elements, c.elements);
    // The expression reads back to the same graph (RaggedFeature and the flag print).
    absl::StatusOr<Dataset> d = Dataset::Parse(expression);
    absl::StatusOr<Dataset> again = Dataset::Parse(d->ToExpression());
    ASSERT_TRUE(again.ok()) << d->ToExpression() << ": " << again.status();
    EXPECT_EQ(again->Fingerprint(), d->Fingerprint()) << d->ToExpression();
  }
  EXPECT_GE(pipelines, 16);
  EXPECT_GE(errors, 4);
}

std::string ExampleBytes(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& int_features,
    const std::vector<std::pair<std::string, std::vector<float>>>& float_features = {}) {
  proto::Example ex;
  auto* map = ex.mutable_features()->mutable_feature();
  for (const auto& [key, values] : int_features) {
    for (int64_t v : values) (*map)[key].mutable_int64_list()->add_value(v);
    if (values.empty()) (*map)[key].mutable_int64_list();
  }
  for (const auto& [key, values] : float_features) {
    for (float v : values) (*map)[key].mutable_float_list()->add_value(v);
  }
  return ex.SerializeAsString();
}

ExampleParser ParserOf(const proto::ParseExampleFn& fn) {
  absl::StatusOr<ExampleParser> p = ExampleParser::Create(fn);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

ExampleParser ParserOf(absl::string_view text) {
  size_t pos = 0;
  absl::StatusOr<proto::ParseExampleFn> fn = ExampleParser::ParseFeatureSpec(text, &pos);
  EXPECT_TRUE(fn.ok()) << fn.status();
  return ParserOf(*fn);
}

// The C++ builder gives the parser the expression gives.
TEST(ParseCompositesTest, BuilderAndExpressionParseAlike) {
  proto::ParseExampleFn built;
  *built.add_features() = RaggedFeatureSpec("words", DType::kInt64, "ids",
                                            {RowLengthsPartition("lens")});
  *built.add_features() = RaggedFeatureSpec("pairs", DType::kFloat32, "w",
                                            {UniformRowLengthPartition(2)});
  *built.add_features() = VarLenFeatureSpec("v", DType::kInt64);
  const ExampleParser from_builder = ParserOf(built);
  const ExampleParser from_text = ParserOf(
      "{'words': tf.io.RaggedFeature(tf.int64, 'ids', [tf.io.RaggedFeature.RowLengths(key="
      "'lens')], tf.int64), 'pairs': RaggedFeature(tf.float32, value_key='w', partitions=["
      "RaggedFeature.UniformRowLength(length=2)], row_splits_dtype=tf.int64), "
      "'v': VarLenFeature(tf.int64)}");
  const std::string a = ExampleBytes({{"ids", {1, 2, 3}}, {"lens", {1, 2}}, {"v", {7}}},
                                     {{"w", {1, 2, 3, 4}}});
  const std::string b = ExampleBytes({{"ids", {4}}, {"lens", {0, 1}}}, {{"w", {5, 6}}});
  absl::StatusOr<Element> x = from_builder.ParseBatch({a, b});
  absl::StatusOr<Element> y = from_text.ParseBatch({a, b});
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(FormatElement(*x), FormatElement(*y));
  // What TF 2.15 prints for tf.io.parse_example([a, b], <the same spec>).
  EXPECT_EQ(FormatElement(*x),
            "{'v': SparseTensor(indices=tf.Tensor([[0 0]], shape=(1, 2), dtype=int64), "
            "values=tf.Tensor([7], shape=(1,), dtype=int64), dense_shape=tf.Tensor([2 1], "
            "shape=(2,), dtype=int64)), 'pairs': <tf.RaggedTensor [[[1.0, 2.0],\n  [3.0, 4.0]], "
            "[[5.0, 6.0]]]>, 'words': <tf.RaggedTensor [[[1], [2, 3]],\n [[], [4]]]>}");
}

absl::Status SpecError(absl::string_view text) {
  size_t pos = 0;
  return ExampleParser::ParseFeatureSpec(text, &pos).status();
}

TEST(ParseCompositesTest, BadRaggedSpecsSayWhat) {
  // TF's default row_splits_dtype is int32, whose spec prints differently: asked for.
  absl::Status s = SpecError("{'r': RaggedFeature(tf.int64)}");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("row_splits_dtype=tf.int64"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("feature 'r'"));
  s = SpecError("{'r': RaggedFeature(tf.int64, row_splits_dtype=tf.int32)}");
  EXPECT_THAT(std::string(s.message()), HasSubstr("row_splits_dtype must be tf.int64"));
  s = SpecError("{'r': RaggedFeature(tf.int64, partitions=[RaggedFeature.UniformRowLength(2), "
                "RaggedFeature.RowLengths('l')], row_splits_dtype=tf.int64)}");
  EXPECT_THAT(std::string(s.message()), HasSubstr("may not follow a UniformRowLength"));
  s = SpecError("{'r': RaggedFeature(tf.int64, partitions=[RaggedFeature.UniformRowLength(0)], "
                "row_splits_dtype=tf.int64)}");
  EXPECT_THAT(std::string(s.message()), HasSubstr("UniformRowLength(0) must be positive"));
  s = SpecError("{'r': RaggedFeature(tf.int64, partitions=[RaggedFeature.RowIds('i')], "
                "row_splits_dtype=tf.int64)}");
  EXPECT_THAT(std::string(s.message()), HasSubstr("got 'RowIds'"));
  s = SpecError("{'r': RaggedFeature(tf.int64, partitions=[RaggedFeature.UniformRowLength(2), "
                "RaggedFeature.ValueRowIds('i')], row_splits_dtype=tf.int64)}");
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("a ValueRowIds partition may not follow a UniformRowLength"));
  s = SpecError("{'r': RaggedFeature(tf.int64, value_key='v', row_splits_dtype=tf.int64), "
                "'v': VarLenFeature(tf.int64)}");
  EXPECT_THAT(std::string(s.message()), HasSubstr("reads 'v', which is a VarLenFeature too"));
  s = SpecError("{'r': RaggedFeature(tf.int64, partitions=[RaggedFeature.RowLengths('n')], "
                "row_splits_dtype=tf.int64), 'n': FixedLenFeature([], tf.int64)}");
  EXPECT_THAT(std::string(s.message()), HasSubstr("reads 'n', which is a FixedLenFeature too"));
  absl::StatusOr<Dataset> flag = Dataset::Parse(
      "from_tensors(b'').map(parse_example({'v': VarLenFeature(tf.int64)}, "
      "var_len_as_dense=maybe))");
  EXPECT_THAT(std::string(flag.status().message()), HasSubstr("True or False"));
}

struct Bad {
  std::string record;
  std::string message;
};

// `parser` refuses each bad record, parsed after `good` (so as record 1), with INVALID_ARGUMENT
// naming feature 'x' and its message.
void ExpectRefused(const ExampleParser& parser, const std::string& good,
                   const std::vector<Bad>& bad) {
  for (const Bad& b : bad) {
    absl::StatusOr<Element> e = parser.ParseBatch({good, b.record});
    ASSERT_FALSE(e.ok()) << b.message;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(e.status().message()), HasSubstr("RaggedFeature 'x', " + b.message));
  }
}

// Hostile records: lengths and splits that do not fit, huge counts. Element errors naming the
// feature and the record (its index in the batch), never a crash or a huge allocation.
TEST(ParseCompositesTest, HostileRecordsAreErrorsNamingFeatureAndRecord) {
  const ExampleParser p = ParserOf(
      "{'x': RaggedFeature(tf.int64, value_key='ids', partitions=["
      "RaggedFeature.RowLengths('outer'), RaggedFeature.RowSplits('inner')], "
      "row_splits_dtype=tf.int64)}");
  const std::string good = ExampleBytes({{"ids", {1, 2, 3}}, {"inner", {0, 1, 3}},
                                         {"outer", {2}}});
  ASSERT_TRUE(p.ParseBatch({good, good}).ok());
  const int64_t huge = int64_t{1} << 62;
  const std::vector<Bad> bad = {
      {ExampleBytes({{"ids", {1, 2, 3}}, {"inner", {0, 1, 3}}, {"outer", {huge, huge}}}),
       "record 1: the row lengths of 'outer' sum to more than the 2 rows of the level below "
       "(the partition 'inner')"},
      {ExampleBytes({{"ids", {1, 2, 3}}, {"inner", {0, 1, 3}}, {"outer", {2, -1}}}),
       "record 1: row length -1 of 'outer' at position 1 is negative"},
      {ExampleBytes({{"ids", {1, 2, 3}}, {"inner", {0, huge, 3}}, {"outer", {2}}}),
       "record 1: the row splits of 'inner' decrease at position 2"},
      {ExampleBytes({{"ids", {1, 2, 3}}, {"inner", {0, 1, huge}}, {"outer", {2}}}),
       "record 1: the row splits of 'inner' end at 4611686018427387904 but the level below has "
       "3 rows (the values of 'ids')"},
      {ExampleBytes({{"ids", {1, 2, 3}}, {"inner", {}}, {"outer", {}}}),
       "record 1: the row splits of 'inner' are empty"},
      {ExampleBytes({{"ids", {1, 2, 3}}, {"inner", {1, 3}}, {"outer", {1}}}),
       "record 1: the row splits of 'inner' start at 1, not 0"},
  };
  ExpectRefused(p, good, bad);
  // RowStarts, RowLimits and ValueRowIds (outermost first, over the splits of 'inner'): huge
  // starts, limits and row ids are refused before anything is allocated for them.
  const ExampleParser q = ParserOf(
      "{'x': RaggedFeature(tf.int64, value_key='ids', partitions=["
      "RaggedFeature.ValueRowIds('ids2'), RaggedFeature.RowStarts('st'), "
      "RaggedFeature.RowLimits('li')], row_splits_dtype=tf.int64)}");
  const std::string fits = ExampleBytes({{"ids", {1, 2, 3}}, {"li", {1, 3}}, {"st", {0, 1, 2}},
                                         {"ids2", {0, 0, 1}}});
  absl::StatusOr<Element> parsed = q.ParseBatch({fits, fits});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // What TF 2.15 prints for tf.io.parse_example([fits, fits], <the same spec>).
  EXPECT_EQ(FormatElement(*parsed), "{'x': <tf.RaggedTensor [[[[[1]], [[2, 3]]], [[]]],\n"
                                    " [[[[1]], [[2, 3]]], [[]]]]>}");
  const int64_t max_empty = RaggedRows::kMaxEmptyRowsPerRecord;
  const std::vector<Bad> bad_keyed = {
      {ExampleBytes({{"ids", {1, 2, 3}}, {"li", {1, huge}}, {"st", {0, 1, 2}},
                     {"ids2", {0, 0, 1}}}),
       "record 1: the row limits of 'li' end at 4611686018427387904 but the level below has 3 "
       "rows (the values of 'ids')"},
      {ExampleBytes({{"ids", {1, 2, 3}}, {"li", {-1, 3}}, {"st", {0, 1, 2}},
                     {"ids2", {0, 0, 1}}}),
       "record 1: the row limits of 'li' decrease at position 0 (-1 after 0)"},
      {ExampleBytes({{"ids", {1, 2, 3}}, {"li", {1, 3}}, {"st", {0, huge, 2}},
                     {"ids2", {0, 0, 1}}}),
       "record 1: row start 4611686018427387904 of 'st' at position 1 is past the 2 rows of the "
       "level below (the partition 'li')"},
      {ExampleBytes({{"ids", {1, 2, 3}}, {"li", {1, 3}}, {"st", {}}, {"ids2", {}}}),
       "record 1: the row starts of 'st' are empty but the level below has 2 rows (the "
       "partition 'li')"},
      {ExampleBytes({{"ids", {1, 2, 3}}, {"li", {1, 3}}, {"st", {0, 1, 2}},
                     {"ids2", {0, 0, huge}}}),
       "record 1: value row id 4611686018427387904 of 'ids2' at position 2 leaves more than "
       "1048576 empty rows before it"},
      {ExampleBytes({{"ids", {1, 2, 3}}, {"li", {1, 3}}, {"st", {0, 1, 2}},
                     {"ids2", {0, max_empty}}}),
       "record 1: 'ids2' has 2 value row ids but the level below has 3 rows (the partition "
       "'st')"},
  };
  ExpectRefused(q, fits, bad_keyed);
  // At the bound (rows 1 .. max_empty empty), the empty rows are made; one more is refused.
  const std::string many_empty = ExampleBytes(
      {{"ids", {1, 2, 3}}, {"li", {1, 3}}, {"st", {0, 1, 2}}, {"ids2", {0, 0, max_empty + 1}}});
  absl::StatusOr<Element> wide = q.ParseBatch({many_empty});
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->children()[0].children()[2].leaf().num_elements(), max_empty + 3);
  ExpectRefused(q, fits, {{ExampleBytes({{"ids", {1, 2, 3}}, {"li", {1, 3}}, {"st", {0, 1, 2}},
                                         {"ids2", {0, 0, max_empty + 2}}}),
                           "record 1: value row id 1048578 of 'ids2' at position 2 leaves more "
                           "than 1048576 empty rows before it"}});
  // A float list where the lengths go: TF's message, naming the key and the record.
  absl::StatusOr<Element> e = p.ParseBatch({good, ExampleBytes({{"ids", {1}}}, {{"outer", {1}}})});
  EXPECT_THAT(std::string(e.status().message()),
              HasSubstr("Key: outer, Index: 1.  Data types don't match. Expected type: int64, "
                        "Actual type: float"));
}

// Through a pipeline the error is the element's (the map op names itself), and the outputs go
// through the memory budget: a batch whose values pass the element limit is RESOURCE_EXHAUSTED
// naming the feature, and the process goes on.
TEST(ParseCompositesTest, OutputsAreChargedToTheMemoryBudget) {
  const std::string path = ::testing::TempDir() + "/parse_composites_budget.tfrecord";
  {
    absl::StatusOr<std::unique_ptr<TFRecordWriter>> w = TFRecordWriter::Open(path);
    ASSERT_TRUE(w.ok()) << w.status();
    std::vector<int64_t> ids(50000, 7);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE((*w)->Write(ExampleBytes({{"ids", ids}})).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  MemoryBudget& budget = ProcessMemoryBudget();
  const MemoryLimits saved = budget.limits();
  MemoryLimits small = saved;
  small.element_bytes = 300000;  // a batch's 100000 int64 values are 800000 bytes
  budget.SetLimits(small);
  const PipelineRun sparse = RunPipeline(absl::StrCat(
      "tf_record_dataset('", path, "').batch(2).map(parse_example({'v': VarLenFeature(tf.int64)"
      ", 'ids': RaggedFeature(tf.int64, row_splits_dtype=tf.int64)}))"));
  budget.SetLimits(saved);
  EXPECT_EQ(sparse.end.code(), absl::StatusCode::kResourceExhausted) << sparse.end;
  EXPECT_THAT(std::string(sparse.end.message()), HasSubstr("feature 'ids'"));
  const PipelineRun fits = RunPipeline(absl::StrCat(
      "tf_record_dataset('", path, "').batch(2).map(parse_example({'ids': "
      "RaggedFeature(tf.int64, row_splits_dtype=tf.int64)}))"));
  EXPECT_TRUE(fits.end.ok()) << fits.end;
  EXPECT_EQ(fits.elements.size(), 2u);
}

// var_len_as_dense=True keeps the dense form (what tf.sparse.to_dense gives), for pipelines
// written before VarLenFeature gave SparseTensors; without it the spec is TF's.
TEST(ParseCompositesTest, VarLenAsDenseFlagKeepsTheDenseForm) {
  const std::string a = ExampleBytes({{"v", {1, 2, 3}}});
  const std::string b = ExampleBytes({{"v", {4}}});
  proto::ParseExampleFn fn;
  *fn.add_features() = VarLenFeatureSpec("v", DType::kInt64);
  const ExampleParser sparse = ParserOf(fn);
  fn.set_var_len_as_dense(true);
  const ExampleParser dense = ParserOf(fn);
  absl::StatusOr<Element> s = sparse.ParseBatch({a, b});
  absl::StatusOr<Element> d = dense.ParseBatch({a, b});
  ASSERT_TRUE(s.ok() && d.ok());
  EXPECT_TRUE(s->children()[0].is_composite());
  ASSERT_TRUE(d->children()[0].is_leaf());
  const Tensor& t = d->children()[0].leaf();
  EXPECT_EQ(t.shape().dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + 6),
            (std::vector<int64_t>{1, 2, 3, 4, 0, 0}));
  absl::StatusOr<Element> one = dense.ParseSingle(a);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->children()[0].leaf().shape().dims(), (std::vector<int64_t>{3}));
  absl::StatusOr<ElementSpec> spec = sparse.OutputSpec(TensorSpec{DType::kString, Shape({4})});
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(ElementSpecToString(*spec),
            "{'v': SparseTensorSpec(TensorShape([None, None]), tf.int64)}");  // TF's, also for a
                                                                       // static batch
  spec = dense.OutputSpec(TensorSpec{DType::kString, Shape({4})});
  EXPECT_EQ(ElementSpecToString(*spec),
            "{'v': TensorSpec(shape=(None, None), dtype=tf.int64, name=None)}");
}

}  // namespace
}  // namespace sluice
