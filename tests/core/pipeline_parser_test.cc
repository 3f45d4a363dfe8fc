// Pipeline expressions in tf.data's syntax: what parses to which graph, the exact error
// messages, and that no input crashes the parser.
#include "core/data/pipeline_parser.h"

#include <random>
#include <string>
#include <vector>

#include "sluice/dataset.h"
#include "core/tensor/proto_convert.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

Dataset MustParse(const std::string& expression) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  EXPECT_TRUE(ds.ok()) << expression << ": " << ds.status();
  return ds.ok() ? *ds : Dataset::Range(0);
}

std::string ErrorOf(const std::string& expression) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  if (ds.ok()) return "OK";
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument) << expression;
  return std::string(ds.status().message());
}

void ExpectSameGraph(const std::string& expression, const Dataset& want) {
  Dataset got = MustParse(expression);
  EXPECT_TRUE(MessageDifferencer::Equals(got.def(), want.def()))
      << expression << "\n got: " << got.def().DebugString()
      << "\nwant: " << want.def().DebugString();
}

TEST(PipelineParserTest, SeedExpressions) {
  ExpectSameGraph("from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)",
                  Dataset::FromTensorSlices(Tensor::FromVector<int32_t>({1, 2, 3, 4}))
                      .Repeat()
                      .Batch(4));
  Element pair = Element::Tuple({Tensor::FromVector<float>({1}), Tensor::FromVector<float>({1})});
  ExpectSameGraph("tf.data.Dataset.from_tensors(([1.],[1.])).repeat(4).batch(4)",
                  Dataset::FromTensors(pair).Repeat(4).Batch(4));
  ExpectSameGraph("Dataset.from_tensors(([1.],[1.])).repeat(4).batch(4)",
                  Dataset::FromTensors(pair).Repeat(4).Batch(4));
  ExpectSameGraph("tf.data.Dataset.from_tensors(([2.])).repeat(100).batch(4)",
                  Dataset::FromTensors(Tensor::FromVector<float>({2})).Repeat(100).Batch(4));
}

TEST(PipelineParserTest, Sources) {
  ExpectSameGraph("range(10)", Dataset::Range(10));
  ExpectSameGraph("range(2, 10)", Dataset::Range(2, 10));
  ExpectSameGraph("range(2, 10, 3)", Dataset::Range(2, 10, 3));
  ExpectSameGraph("range(-5, -10, -1)", Dataset::Range(-5, -10, -1));
  ExpectSameGraph("from_tensors({'a': [1, 2], 'b': 3.})",
                  Dataset::FromTensors(Element::Dict(
                      {{"a", Element(Tensor::FromVector<int32_t>({1, 2}))},
                       {"b", Element(Tensor::Scalar<float>(3))}})));
  ExpectSameGraph("from_tensor_slices(([1, 2], ['x', 'y']))",
                  Dataset::FromTensorSlices(Element::Tuple(
                      {Tensor::FromVector<int32_t>({1, 2}),
                       Tensor::FromStrings({"x", "y"}, Shape({2}))})));
  ExpectSameGraph("text_line_dataset(['a.txt', \"b.txt\"])", Dataset::TextLine({"a.txt", "b.txt"}));
  ExpectSameGraph("TextLineDataset(['a.txt', \"b.txt\"])", Dataset::TextLine({"a.txt", "b.txt"}));
  ExpectSameGraph("tf.data.TextLineDataset('a.txt')", Dataset::TextLine({"a.txt"}));
  ExpectSameGraph("text_line_dataset(filenames=(b'x',))", Dataset::TextLine({"x"}));
  ExpectSameGraph("from_tensors(tensors=1)", Dataset::FromTensors(Tensor::Scalar<int32_t>(1)));
}

TEST(PipelineParserTest, OpsWithPositionalAndKeywordArguments) {
  Dataset r = Dataset::Range(10);
  ExpectSameGraph("range(10).batch(4, drop_remainder=True)", r.Batch(4, true));
  ExpectSameGraph("range(10).batch(batch_size=4)", r.Batch(4, false));
  ExpectSameGraph("range(10).batch(4, True)", r.Batch(4, true));
  ExpectSameGraph("range(10).repeat(2)", r.Repeat(2));
  ExpectSameGraph("range(10).repeat(None)", r.Repeat());
  ExpectSameGraph("range(10).repeat(count=-1)", r.Repeat());
  ExpectSameGraph("range(10).take(3).skip(1)", r.Take(3).Skip(1));
  ExpectSameGraph("range(10).shard(2, 1)", r.Shard(2, 1));
  ExpectSameGraph("range(10).shard(num_shards=2, index=0)", r.Shard(2, 0));
  ExpectSameGraph("range(10).shard(2, index=1)", r.Shard(2, 1));
  ExpectSameGraph("range(10).shard(SHARD_HINT, SHARD_HINT)", r.ShardHint());
  ExpectSameGraph(
      "range(10).shard(tf.data.experimental.SHARD_HINT, tf.data.experimental.SHARD_HINT)",
      r.ShardHint());
  ExpectSameGraph("range(10).shard(-1, -1)", r.ShardHint());  // SHARD_HINT is -1 in TF
  ExpectSameGraph("range(10).shuffle(10, seed=42)", r.Shuffle(10, 42));
  ExpectSameGraph("range(10).shuffle(10)", r.Shuffle(10));
  ExpectSameGraph("range(10).shuffle(buffer_size=8, seed=1, reshuffle_each_iteration=False)",
                  r.Shuffle(8, 1, false));
  ExpectSameGraph("range(10).shuffle(8, None, None)", r.Shuffle(8));
  ExpectSameGraph("range(10).prefetch(2)", r.Prefetch(2));
  ExpectSameGraph("range(10).prefetch(tf.data.AUTOTUNE)", r.Prefetch(-1));
  ExpectSameGraph("range(10).prefetch(AUTOTUNE)", r.Prefetch(-1));
  ExpectSameGraph("range(10).prefetch(buffer_size=tf.data.experimental.AUTOTUNE)",
                  r.Prefetch(-1));
  ExpectSameGraph("range(10).batch(4).unbatch()", r.Batch(4).Unbatch());
  ExpectSameGraph("range(10).batch(4).rebatch([2, 2])", r.Batch(4).Rebatch({2, 2}));
  ExpectSameGraph("range(10).batch(4).rebatch(2)", r.Batch(4).Rebatch({2}));
  ExpectSameGraph("range(10).batch(4).rebatch(batch_size=[3, 1], drop_remainder=False)",
                  r.Batch(4).Rebatch({3, 1}, false));
  ExpectSameGraph("range(10).batch(4).legacy_rebatch(3)", r.Batch(4).LegacyRebatch(3));
}

TEST(PipelineParserTest, WhitespaceAndTrailingCommasAnywhere) {
  ExpectSameGraph("  tf . data . Dataset . range ( 10 , ) \n . batch ( 4 ,\tdrop_remainder = True , ) ",
                  Dataset::Range(10).Batch(4, true));
  ExpectSameGraph("from_tensors( ( [ 1. , ] , ) , )",
                  Dataset::FromTensors(Element::Tuple({Tensor::FromVector<float>({1})})));
}

TEST(PipelineParserTest, SyntaxErrorsGiveColumnExpectedAndFound) {
  EXPECT_EQ(ErrorOf("range(10).batch(4 5)"),
            "pipeline expression, column 19: expected ',' or ')' to close the arguments of "
            "batch, found '5'");
  EXPECT_EQ(ErrorOf("range(10).batch(4,,)"),
            "pipeline expression, column 19: expected an argument or ')' to close the arguments "
            "of batch, found ','");
  EXPECT_EQ(ErrorOf(""),
            "pipeline expression, column 1: empty expression; expected a source such as "
            "range(10) or from_tensor_slices([1, 2, 3])");
  EXPECT_EQ(ErrorOf("   "),
            "pipeline expression, column 4: empty expression; expected a source such as "
            "range(10) or from_tensor_slices([1, 2, 3])");
  EXPECT_EQ(ErrorOf("range(10) batch(4)"),
            "pipeline expression, column 11: expected '.' and the next op, or the end of the "
            "expression, found 'batch'");
  EXPECT_EQ(ErrorOf("range(10).batch(4))"),
            "pipeline expression, column 19: expected '.' and the next op, or the end of the "
            "expression, found ')'");
  EXPECT_EQ(ErrorOf("range(10)."),
            "pipeline expression, column 11: expected an op name after '.', found end of "
            "expression");
  EXPECT_EQ(ErrorOf("range(10).batch"),
            "pipeline expression, column 16: expected '(' after batch, found end of expression");
  EXPECT_EQ(ErrorOf("range(10).batch(4"),
            "pipeline expression, column 18: expected ',' or ')' to close the arguments of "
            "batch, found end of expression");
  EXPECT_EQ(ErrorOf("text_line_dataset(['a.txt)"),
            "pipeline expression, column 20: unterminated string literal");
  EXPECT_EQ(ErrorOf("from_tensors([[1, 2], [3]])"),
            "pipeline expression, column 14: from_tensors: ragged nested list: the item at "
            "column 23 has shape (1,) but the item at column 15 has shape (2,)");
}

TEST(PipelineParserTest, NameErrorsListWhatIsKnown) {
  EXPECT_EQ(ErrorOf("range(10).frobnicate(f)"),
            "pipeline expression, column 11: unknown op 'frobnicate'; known ops: batch, repeat, "
            "take, skip, shard, shuffle, prefetch, unbatch, rebatch, legacy_rebatch, map, "
            "filter, padded_batch, cache, ignore_errors, interleave, pack, "
            "bucket_by_sequence_length, ragged_batch, save_chunks");
  EXPECT_EQ(ErrorOf("foo(1)"),
            "pipeline expression, column 1: unknown source 'foo'; known sources: range, "
            "from_tensors, from_tensor_slices, text_line_dataset, tf_record_dataset, "
            "fixed_length_record_dataset, csv_dataset, npy_dataset, webdataset_dataset, "
            "list_files, jsonl_dataset, load (or TextLineDataset)");
  EXPECT_THAT(ErrorOf("batch(4)"), HasSubstr("'batch' is an op; a pipeline starts with a source"));
  EXPECT_THAT(ErrorOf("np.range(4)"), HasSubstr("unknown source 'np.range'"));
}

TEST(PipelineParserTest, ArgumentErrorsNameTheOpAndArgument) {
  EXPECT_EQ(ErrorOf("range(10).batch(1.5)"),
            "pipeline expression, column 17: batch: batch_size must be an integer, got 1.5");
  EXPECT_EQ(ErrorOf("range(10).batch(True)"),
            "pipeline expression, column 17: batch: batch_size must be an integer, got True");
  EXPECT_EQ(ErrorOf("range(10).batch(4, drop_remainder=1)"),
            "pipeline expression, column 35: batch: drop_remainder must be True or False, got 1");
  EXPECT_EQ(ErrorOf("range(10).batch(4, foo=1)"),
            "pipeline expression, column 20: batch: unexpected keyword argument 'foo' (known: "
            "batch_size, drop_remainder)");
  EXPECT_EQ(ErrorOf("range(10).batch(4, batch_size=4)"),
            "pipeline expression, column 20: batch: argument batch_size given twice");
  EXPECT_EQ(ErrorOf("range(10).batch(drop_remainder=True, 4)"),
            "pipeline expression, column 38: batch: positional argument follows keyword "
            "argument");
  EXPECT_EQ(ErrorOf("range(10).batch(4, True, 3)"),
            "pipeline expression, column 26: batch: takes 2 arguments at most, got 3");
  EXPECT_EQ(ErrorOf("range(10).batch()"),
            "pipeline expression, column 11: batch: missing required argument batch_size");
  EXPECT_EQ(ErrorOf("range(10).unbatch(1)"),
            "pipeline expression, column 19: unbatch: takes 0 arguments at most, got 1");
  EXPECT_EQ(ErrorOf("range()"),
            "pipeline expression, column 1: range: takes 1 to 3 positional arguments ([start,] "
            "stop[, step]), got 0");
  EXPECT_EQ(ErrorOf("range(1, 2, 3, 4)"),
            "pipeline expression, column 16: range: takes 1 to 3 positional arguments ([start,] "
            "stop[, step]), got 4");
  EXPECT_THAT(ErrorOf("range(stop=3)"), HasSubstr("range: unexpected keyword argument 'stop'"));
  EXPECT_EQ(ErrorOf("range('a')"),
            "pipeline expression, column 7: range: stop must be an integer, got 'a'");
  EXPECT_EQ(ErrorOf("range(99999999999999999999)"),
            "pipeline expression, column 7: range: stop is out of range for int64, got "
            "99999999999999999999");
  EXPECT_EQ(ErrorOf("text_line_dataset([1])"),
            "pipeline expression, column 20: text_line_dataset: filenames must be strings, got 1");
  EXPECT_EQ(ErrorOf("range(3).shuffle(4, seed=1.)"),
            "pipeline expression, column 26: shuffle: seed must be an integer, got 1.");
  EXPECT_EQ(ErrorOf("range(3).batch(2).legacy_rebatch(0)"),
            "pipeline expression, column 34: legacy_rebatch: num_replicas must be positive, got 0");
  EXPECT_THAT(ErrorOf("range(3).batch(FOO)"),
              HasSubstr("batch: batch_size must be an integer, got FOO"));
}

TEST(PipelineParserTest, ValidationErrorsPointAtTheOp) {
  EXPECT_EQ(ErrorOf("range(10).repeat().batch(0)"),
            "pipeline expression, column 20: op 2 (batch): batch_size must be positive, got 0");
  EXPECT_EQ(ErrorOf("range(0, 10, 0)"),
            "pipeline expression, column 1: source (range): step must not be 0");
  EXPECT_EQ(ErrorOf("range(10).shard(2, 2)"),
            "pipeline expression, column 11: op 1 (shard): index must be in [0, 2), got 2");
  EXPECT_EQ(ErrorOf("from_tensor_slices(1)"),
            "pipeline expression, column 1: source (from_tensor_slices): component 0 is a "
            "scalar; slicing needs tensors of rank >= 1");
  EXPECT_EQ(ErrorOf("from_tensors(())"),
            "pipeline expression, column 1: source (from_tensors): the element has no "
            "components (tf.data needs at least one tensor)");
}

TEST(PipelineParserTest, ColumnsOfEachPart) {
  absl::StatusOr<ParsedPipeline> p = ParsePipelineExpression("range(3) .batch(2). take(1)");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->columns, (std::vector<int>{1, 11, 21}));
}

// Mutations of valid expressions and random text: every input gives OK or INVALID_ARGUMENT,
// never a crash, and whatever parses prints back to an expression that parses to the same graph.
TEST(PipelineParserTest, RandomAndMutatedInputsNeverCrash) {
  const std::vector<std::string> seeds = {
      "from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)",
      "tf.data.Dataset.from_tensors(([1.],[1.])).repeat(4).batch(4, drop_remainder=True)",
      "range(2, 10, 3).shard(SHARD_HINT, SHARD_HINT).shuffle(10, seed=42).prefetch(AUTOTUNE)",
      "text_line_dataset(['a.txt', \"b.txt\"]).take(3).skip(1).unbatch()",
      "from_tensors({'a': [1, 2], 'b': 3.}).batch(2).rebatch(batch_size=[3, 1])",
      "from_tensors(tf.constant([[1, 2]], dtype=tf.int64)).unbatch().batch(1).legacy_rebatch(1)",
  };
  const std::string alphabet = "()[]{},.:=_'\"\\-+ 0123456789abehinrtxTFN";
  std::mt19937_64 rng(2024);
  int parsed = 0;
  for (int i = 0; i < 30000; ++i) {
    std::string s;
    if (i % 10 == 0) {
      s.resize(rng() % 40);
      for (char& c : s) c = static_cast<char>(rng() % 256);
    } else {
      s = seeds[rng() % seeds.size()];
      int edits = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < edits && !s.empty(); ++k) {
        size_t at = rng() % s.size();
        switch (rng() % 4) {
          case 0: s.erase(at, 1 + rng() % 4); break;
          case 1: s.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
          case 2: s[at] = alphabet[rng() % alphabet.size()]; break;
          default: s.insert(at, s.substr(rng() % s.size(), rng() % 8)); break;
        }
      }
    }
    absl::StatusOr<Dataset> ds = Dataset::Parse(s);
    if (!ds.ok()) {
      ASSERT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument) << s;
      ASSERT_THAT(std::string(ds.status().message()), HasSubstr("pipeline expression, column "))
          << s;
      continue;
    }
    ++parsed;
    std::string printed = ds->ToExpression();
    absl::StatusOr<Dataset> again = Dataset::Parse(printed);
    ASSERT_TRUE(again.ok()) << s << " -> " << printed << ": " << again.status();
    ASSERT_EQ(again->Fingerprint(), ds->Fingerprint()) << s << " -> " << printed;
  }
  EXPECT_GT(parsed, 300);  // the mutations do reach the deeper layers
}

}  // namespace
}  // namespace sluice
