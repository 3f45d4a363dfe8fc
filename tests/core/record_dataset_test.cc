// tf_record_dataset / fixed_length_record_dataset as pipeline sources: syntax, specs, reading,
// record ranges, num_parallel_reads order (TF's), errors naming the op, FILE sharding, and
// map(parse_example(...)) end to end.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/data/distribute/auto_shard.h"
#include "sluice/dataset.h"
#include "core/data/executor.h"
#include "core/io/record_index.h"
#include "core/data/spec_inference.h"
#include "core/io/tfrecord_writer.h"
#include "gtest/gtest.h"
#include "tests/core/iterator_test_util.h"
#include "tests/core/record_test_util.h"

namespace sluice {
namespace {

using record_test::Fixture;
using record_test::Golden;
using record_test::HexList;
using record_test::ReadWholeFile;
using record_test::TempDir;
using record_test::WriteWholeFile;
using testing_util::RunDataset;

std::vector<std::string> Strings(const std::vector<Element>& elements) {
  std::vector<std::string> out;
  for (const Element& e : elements) out.push_back(e.leaf().string_at(0));
  return out;
}

absl::StatusOr<std::vector<std::string>> RunExpr(absl::string_view expression) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  if (!ds.ok()) return ds.status();
  absl::StatusOr<std::vector<Element>> got = RunDataset(*ds);
  if (!got.ok()) return got.status();
  return Strings(*got);
}

std::string Quoted(const std::string& s) { return "'" + s + "'"; }

// Writes files r0..r{n-1} with `per_file` records "f<i>-<j>" each; returns their names.
std::vector<std::string> WriteFiles(const TempDir& dir, int n, int per_file) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) {
    std::string bytes;
    for (int j = 0; j < per_file; ++j) {
      AppendTFRecord("f" + std::to_string(i) + "-" + std::to_string(j), &bytes);
    }
    names.push_back(dir.File("r" + std::to_string(i) + ".tfrecord"));
    WriteWholeFile(names.back(), bytes);
  }
  return names;
}

std::string PyList(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + Quoted(names[i]);
  return out + "]";
}

TEST(RecordDatasetTest, ReadsTensorFlowFixturesInEverySpelling) {
  const std::vector<std::string> expected = HexList(Golden()["basic_records"]);
  for (const std::string& expr :
       {"tf_record_dataset(" + Quoted(Fixture("plain.tfrecord")) + ")",
        "tf.data.TFRecordDataset([" + Quoted(Fixture("gzip.tfrecord.gz")) +
            "], compression_type='GZIP')",
        "TFRecordDataset(" + Quoted(Fixture("zlib.tfrecord.zlib")) + ", 'ZLIB', 1024)"}) {
    auto got = RunExpr(expr);
    ASSERT_TRUE(got.ok()) << expr << ": " << got.status();
    EXPECT_EQ(*got, expected) << expr;
  }
  auto fixed = RunExpr("tf.data.FixedLengthRecordDataset(" + Quoted(Fixture("fixed.bin")) +
                   ", 4, header_bytes=3, footer_bytes=2)");
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(*fixed, HexList(Golden()["fixed"]["fixed.bin"]["records"]));
  auto fixed_gz = RunExpr("fixed_length_record_dataset(" + Quoted(Fixture("fixed.bin.gz")) +
                      ", 4, 3, 2, compression_type='GZIP')");
  ASSERT_TRUE(fixed_gz.ok()) << fixed_gz.status();
  EXPECT_EQ(*fixed_gz, HexList(Golden()["fixed"]["fixed.bin"]["records"]));
}

TEST(RecordDatasetTest, SpecCardinalityAndExpressionRoundTrip) {
  auto ds = Dataset::Parse("tf_record_dataset(['a', 'b'], compression_type='GZIP', "
                           "num_parallel_reads=2).batch(4)");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ElementSpecToString(*ds->element_spec()),
            "TensorSpec(shape=(None,), dtype=tf.string, name=None)");
  EXPECT_EQ(ds->Cardinality(), kUnknownCardinality);
  for (const char* expr :
       {"tf_record_dataset(['a', 'b'], compression_type='GZIP', buffer_size=100, "
        "num_parallel_reads=2)",
        "tf_record_dataset(['a'], start_record=3, num_records=5)",
        "fixed_length_record_dataset(['x.bin'], 4, header_bytes=3, footer_bytes=2, "
        "compression_type='ZLIB', start_record=1, num_records=-1)"}) {
    auto parsed = Dataset::Parse(expr);
    ASSERT_TRUE(parsed.ok()) << expr << ": " << parsed.status();
    EXPECT_EQ(parsed->ToExpression(), expr);
    auto again = Dataset::Parse(parsed->ToExpression());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->Fingerprint(), parsed->Fingerprint());
  }
  EXPECT_EQ(Dataset::TFRecord({"a"}).ToExpression(), "tf_record_dataset(['a'])");
  EXPECT_EQ(Dataset::FixedLengthRecord({"a"}, 8).ToExpression(),
            "fixed_length_record_dataset(['a'], 8)");
}

TEST(RecordDatasetTest, BadArgumentsNameTheSource) {
  struct Case {
    const char* expr;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"tf_record_dataset('a', compression_type='gzip')", "unsupported compression_type"},
           {"tf_record_dataset([])", "filenames must not be empty"},
           {"tf_record_dataset(3)", "filenames must be a string or a list"},
           {"fixed_length_record_dataset('a', 0)", "record_bytes must be positive"},
           {"fixed_length_record_dataset('a')", "missing required argument record_bytes"},
           {"tf_record_dataset('a', start_record=-1)", "start_record must be >= 0"},
           {"tf_record_dataset('a', num_parallel_reads=2, start_record=1)",
            "num_parallel_reads must be unset"}}) {
    auto ds = Dataset::Parse(c.expr);
    ASSERT_FALSE(ds.ok()) << c.expr;
    EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(ds.status().message(), c.message)) << ds.status();
  }
}

TEST(RecordDatasetTest, ReadErrorsNameTheOpTheFileAndTheOffset) {
  TempDir dir;
  auto missing = RunExpr("tf_record_dataset(" + Quoted(dir.File("nope.tfrecord")) + ")");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "source (tf_record_dataset)"));
  EXPECT_TRUE(absl::StrContains(missing.status().message(), dir.File("nope.tfrecord")));
  std::string bytes = ReadWholeFile(Fixture("plain.tfrecord"));
  bytes[60 + 12 + 5] ^= 1;  // record 3's data
  WriteWholeFile(dir.File("bad.tfrecord"), bytes);
  auto bad = RunExpr("tf_record_dataset(" + Quoted(dir.File("bad.tfrecord")) + ")");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "byte offset 60"));
  EXPECT_TRUE(absl::StrContains(bad.status().message(), dir.File("bad.tfrecord")));
  auto partial = RunExpr("fixed_length_record_dataset(" + Quoted(Fixture("fixed_partial.bin")) +
                     ", 4, 3, 2)");
  EXPECT_EQ(partial.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(partial.status().message(), "not an exact multiple"));
}

TEST(RecordDatasetTest, NumParallelReadsFollowsTensorFlowsOrder) {
  std::vector<std::string> files;
  for (const JsonValue& f : Golden()["interleave_files"].items()) {
    files.push_back(Fixture(f.string_value()));
  }
  for (const char* n : {"2", "3"}) {
    auto got = RunExpr("tf_record_dataset(" + PyList(files) + ", num_parallel_reads=" + n + ")");
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<std::string> expected;
    for (const JsonValue& v : Golden()["interleave"][n].items()) {
      expected.push_back(v.string_value());
    }
    EXPECT_EQ(*got, expected) << n;
  }
  // -1 (AUTOTUNE): every file open at once.
  auto all = RunExpr("tf_record_dataset(" + PyList(files) + ", num_parallel_reads=-1)");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 10u);
  // A missing file among them ends the sequence with NOT_FOUND naming it.
  std::vector<std::string> with_missing = files;
  with_missing.insert(with_missing.begin() + 1, "/nonexistent/x.tfrecord");
  auto missing = RunExpr("tf_record_dataset(" + PyList(with_missing) + ", num_parallel_reads=2)");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "/nonexistent/x.tfrecord"))
      << missing.status();
}

TEST(RecordDatasetTest, RecordRangesAcrossFilesUseTheIndex) {
  TempDir dir;
  const std::vector<std::string> files = WriteFiles(dir, 3, 4);  // 12 records
  std::vector<std::string> all;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) all.push_back("f" + std::to_string(i) + "-" + std::to_string(j));
  }
  struct Case {
    int start;
    int count;
  };
  for (const Case& c : std::vector<Case>{{0, 12}, {0, -1}, {5, 3}, {3, 6}, {11, 5}, {12, 1},
                                         {20, -1}, {4, 0}, {7, -1}}) {
    auto got = RunExpr("tf_record_dataset(" + PyList(files) + ", start_record=" +
                   std::to_string(c.start) + ", num_records=" + std::to_string(c.count) + ")");
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<std::string> expected;
    for (int i = c.start; i < 12 && (c.count < 0 || i < c.start + c.count); ++i) {
      expected.push_back(all[static_cast<size_t>(i)]);
    }
    EXPECT_EQ(*got, expected) << c.start << " " << c.count;
  }
  // The ranges built the files' indexes next to them.
  EXPECT_TRUE(RecordIndex::Load(files[0] + ".sluice-idx").ok());
  // Compressed files: the same ranges by reading through.
  std::vector<std::string> gz;
  for (int i = 0; i < 3; ++i) {
    gz.push_back(dir.File("g" + std::to_string(i) + ".tfrecord.gz"));
    auto w = TFRecordWriter::Open(gz.back(), Compression::kGzip);
    ASSERT_TRUE(w.ok());
    for (int j = 0; j < 4; ++j) ASSERT_TRUE((*w)->Write(all[static_cast<size_t>(4 * i + j)]).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  auto got = RunExpr("tf_record_dataset(" + PyList(gz) +
                 ", compression_type='GZIP', start_record=6, num_records=4)");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::vector<std::string>(all.begin() + 6, all.begin() + 10));
  // Fixed-length ranges.
  auto fixed = RunExpr("fixed_length_record_dataset([" + Quoted(Fixture("fixed.bin")) + ", " +
                   Quoted(Fixture("fixed.bin")) + "], 4, 3, 2, start_record=4, num_records=3)");
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  std::vector<std::string> records = HexList(Golden()["fixed"]["fixed.bin"]["records"]);
  EXPECT_EQ(*fixed, (std::vector<std::string>{records[4], records[0], records[1]}));
}

TEST(RecordDatasetTest, FileShardingSplitsTheFileList) {
  TempDir dir;
  const std::vector<std::string> files = WriteFiles(dir, 5, 2);
  auto ds = Dataset::Parse("tf_record_dataset(" + PyList(files) + ").batch(2)");
  ASSERT_TRUE(ds.ok());
  EXPECT_TRUE(ReadsFiles(*ds));
  auto shard = ShardByFile(*ds, 2, 1);
  ASSERT_TRUE(shard.ok()) << shard.status();
  auto got = RunDataset(*shard);
  ASSERT_TRUE(got.ok());
  std::vector<std::string> values;
  for (const Element& e : *got) {
    for (int64_t i = 0; i < e.leaf().num_elements(); ++i) values.push_back(e.leaf().string_at(i));
  }
  EXPECT_EQ(values, (std::vector<std::string>{"f1-0", "f1-1", "f3-0", "f3-1"}));
  auto too_few = ShardByFile(*ds, 6, 0);
  EXPECT_EQ(too_few.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(too_few.status().message(), "only has 5 file(s)"));
  auto fixed = Dataset::Parse("fixed_length_record_dataset(" + PyList(files) + ", 4)");
  ASSERT_TRUE(fixed.ok());
  EXPECT_TRUE(ReadsFiles(*fixed));
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

constexpr const char* kGoldenSpec =
    "{'image': FixedLenFeature([], tf.string), "
    "'label': tf.io.FixedLenFeature([], tf.int64, default_value=-1), "
    "'scores': FixedLenFeature([2], tf.float32), 'm': FixedLenFeature([2, 3], tf.float32), "
    "'tags': VarLenFeature(tf.string), 'ids': tf.io.VarLenFeature(tf.int64)}";

TEST(RecordDatasetTest, MapParseExampleAfterBatchMatchesTensorFlow) {
  const std::string expr = "tf_record_dataset(" + Quoted(Fixture("examples.tfrecord")) +
                           ").batch(3).map(parse_example(" + kGoldenSpec +
                           ", var_len_as_dense=True))";
  auto ds = Dataset::Parse(expr);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto spec = ds->element_spec();
  ASSERT_TRUE(spec.ok());
  std::vector<std::string> tf_keys;
  for (const JsonValue& k : Golden()["parse"]["dataset_element_spec_keys"].items()) {
    tf_keys.push_back(k.string_value());
  }
  EXPECT_EQ(spec->keys(), tf_keys);
  EXPECT_TRUE(absl::StrContains(ElementSpecToString(*spec),
                                "'scores': TensorSpec(shape=(None, 2), dtype=tf.float32"));
  auto got = RunDataset(*ds);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  const Element& e = (*got)[0];
  const JsonValue& g = Golden()["parse"]["batch"];
  // ids (VarLen int64), with var_len_as_dense padded to the longest row as tf.sparse.to_dense
  // gives it (the SparseTensor form: parse_example_composites_test.cc).
  const Tensor& ids = e.children()[0].leaf();
  EXPECT_EQ(ids.shape(), Shape({3, 3}));
  EXPECT_EQ(testing_util::Values(ids), (std::vector<int64_t>{1, 2, 3, 4, 0, 0, 0, 0, 0}));
  EXPECT_EQ(g["ids"]["shape"][0].int_value(), 3);
  const Tensor& label = e.children()[3].leaf();
  EXPECT_EQ(testing_util::Values(label), (std::vector<int64_t>{7, -1, -3}));
  // And the expression round trip.
  auto again = Dataset::Parse(ds->ToExpression());
  ASSERT_TRUE(again.ok()) << ds->ToExpression() << ": " << again.status();
  EXPECT_EQ(again->Fingerprint(), ds->Fingerprint());
}

TEST(RecordDatasetTest, MapParseExampleOnScalarsAndItsErrors) {
  const std::string file = Quoted(Fixture("examples.tfrecord"));
  auto single = Dataset::Parse("TFRecordDataset(" + file +
                               ").map(parse_example({'label': FixedLenFeature([], tf.int64, "
                               "default_value=0)}), num_parallel_calls=2)");
  ASSERT_TRUE(single.ok()) << single.status();
  auto got = RunDataset(*single);
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<int64_t> labels;
  for (const Element& e : *got) labels.push_back(e.children()[0].leaf().data<int64_t>()[0]);
  EXPECT_EQ(labels, (std::vector<int64_t>{7, 0, -3}));
  // A required feature missing from Example 1: INVALID_ARGUMENT naming op and feature.
  auto required = Dataset::Parse("tf_record_dataset(" + file +
                                 ").map(parse_example({'label': FixedLenFeature([], tf.int64)}))");
  ASSERT_TRUE(required.ok());
  auto failed = RunDataset(*required);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(failed.status().message(), "op 1 (map)")) << failed.status();
  EXPECT_TRUE(absl::StrContains(failed.status().message(), "Feature: label")) << failed.status();
  // parse_example on a non-string input is refused statically.
  auto wrong = Dataset::Parse("range(3).map(parse_example({'x': VarLenFeature(tf.int64)}))");
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(absl::StrContains(wrong.status().message(), "parse_example")) << wrong.status();
}

}  // namespace
}  // namespace sluice
