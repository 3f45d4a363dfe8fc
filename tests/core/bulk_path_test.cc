// The bulk path (core/data/iterator.h): batch() fed whole blocks by range, from_tensor_slices,
// TFRecord and fixed-length record files, take, skip and element-wise maps (sequential and
// parallel, parse_example included) must give exactly the elements the per-element path gives
// (structure, dtypes, shapes, values, errors), checked over a seeded random set of pipelines
// with SetBulkPathsEnabled switching the path.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/data/deferred_check_blocks.h"
#include "core/data/executor.h"
#include "core/data/iterator.h"
#include "core/data/op_iterator.h"
#include "core/data/ops/batch_iterator.h"
#include "core/data/ops/map_iterator.h"
#include "core/data/ops/source_iterators.h"
#include "core/io/tfrecord_writer.h"
#include "core/tensor/host_memory.h"
#include "core/util/thread_pool.h"
#include "gtest/gtest.h"
#include "proto/example.pb.h"
#include "sluice/dataset.h"
#include "tests/core/record_test_util.h"
#include "tests/core/scoped_process_limits.h"

namespace sluice {
namespace {

// Restores the bulk switch on scope exit, so a failing test does not leak its setting.
class BulkSwitch {
 public:
  explicit BulkSwitch(bool enabled) : saved_(BulkPathsEnabled()) { SetBulkPathsEnabled(enabled); }
  ~BulkSwitch() { SetBulkPathsEnabled(saved_); }

 private:
  const bool saved_;
};

// Everything a pipeline yields: the elements, then how it ended (OK, or the error). Element
// errors are recorded in place and iteration goes on, as a consumer skipping them would.
struct PipelineRun {
  std::vector<Element> elements;
  std::vector<std::string> errors;  // "<element index>: <status>"
  absl::Status end;
};

PipelineRun RunPipeline(const std::string& expression, bool bulk) {
  BulkSwitch s(bulk);
  PipelineRun run;
  absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
  if (!ds.ok()) {
    run.end = ds.status();
    return run;
  }
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
  if (!it.ok()) {
    run.end = it.status();
    return run;
  }
  for (int i = 0; i < 200000; ++i) {
    Element e;
    bool end = false;
    absl::Status st = (*it)->GetNext(&e, &end);
    if (IsElementError(st)) {
      run.errors.push_back(absl::StrCat(run.elements.size(), ": ", st.ToString()));
      continue;
    }
    if (!st.ok() || end) {
      run.end = st;
      return run;
    }
    run.elements.push_back(std::move(e));
  }
  run.end = absl::FailedPreconditionError("did not end");
  return run;
}

// Returns how many elements the pipeline gave (so a caller can tell the cases are not vacuous).
size_t ExpectSameRun(const std::string& expression) {
  const PipelineRun bulk = RunPipeline(expression, true);
  const PipelineRun single = RunPipeline(expression, false);
  EXPECT_EQ(bulk.end, single.end) << expression;
  EXPECT_EQ(bulk.errors, single.errors) << expression;
  EXPECT_EQ(bulk.elements.size(), single.elements.size()) << expression;
  if (bulk.elements.size() != single.elements.size()) return 0;
  for (size_t i = 0; i < bulk.elements.size(); ++i) {
    const Element& a = bulk.elements[i];
    const Element& b = single.elements[i];
    EXPECT_TRUE(a.SameStructure(b)) << expression << " element " << i;
    const std::vector<Tensor> la = a.Flatten(), lb = b.Flatten();
    EXPECT_EQ(la.size(), lb.size());
    if (la.size() != lb.size()) return 0;
    for (size_t k = 0; k < la.size(); ++k) {
      // Equals compares dtype, shape and every value.
      EXPECT_TRUE(la[k].Equals(lb[k]))
          << expression << " element " << i << " leaf " << k << ": "
          << DTypeName(la[k].dtype()) << la[k].shape().ToString() << " vs "
          << DTypeName(lb[k].dtype()) << lb[k].shape().ToString();
    }
  }
  return bulk.end.ok() ? bulk.elements.size() : 0;
}

// A deterministic draw in [lo, hi] (std::mt19937_64 is specified; its distributions are not).
int64_t In(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

std::string IntList(std::mt19937_64& rng, int64_t n) {
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(absl::StrCat(In(rng, -50, 50)));
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

std::string FloatRows(std::mt19937_64& rng, int64_t n, int64_t width) {
  std::vector<std::string> rows;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<std::string> row;
    for (int64_t j = 0; j < width; ++j) row.push_back(absl::StrCat(In(rng, -99, 99), ".5"));
    rows.push_back(absl::StrCat("[", absl::StrJoin(row, ", "), "]"));
  }
  return absl::StrCat("[", absl::StrJoin(rows, ", "), "]");
}

std::string StringList(std::mt19937_64& rng, int64_t n) {
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(absl::StrCat("'s", In(rng, 0, 999), "'"));
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

// A source; *dict says whether its elements are dicts with an int64 'a' (for map keys).
std::string Source(std::mt19937_64& rng, bool* dict) {
  *dict = false;
  const int64_t n = In(rng, 0, 40);
  switch (In(rng, 0, 6)) {
    case 0:
    case 1: {
      const int64_t step = In(rng, 0, 3) == 0 ? -In(rng, 1, 4) : In(rng, 1, 4);
      const int64_t start = In(rng, -20, 20);
      return absl::StrCat("range(", start, ", ", start + step * In(rng, -2, 300), ", ", step,
                          ")");
    }
    case 2: {
      // Near the int64 limits: the value after the last one does not fit.
      if (In(rng, 0, 1) == 0) {
        return absl::StrCat("range(9223372036854775700, 9223372036854775807, ", In(rng, 1, 9),
                            ")");
      }
      return absl::StrCat("range(-9223372036854775700, -9223372036854775807, ", -In(rng, 1, 9),
                          ")");
    }
    case 3:
      return absl::StrCat("from_tensor_slices(", IntList(rng, std::max<int64_t>(n, 1)), ")");
    case 4:
      return absl::StrCat("from_tensor_slices(", FloatRows(rng, std::max<int64_t>(n, 1), 3),
                          ")");
    case 5: {
      *dict = true;
      const int64_t m = std::max<int64_t>(n, 1);
      return absl::StrCat("from_tensor_slices({'b': ", FloatRows(rng, m, 2), ", 'a': ",
                          IntList(rng, m), "})");
    }
    default: {
      const int64_t m = std::max<int64_t>(n, 1);
      return absl::StrCat("from_tensor_slices((", IntList(rng, m), ", ", StringList(rng, m),
                          "))");
    }
  }
}

std::string Cast(std::mt19937_64& rng, bool dict) {
  static const char* kTypes[] = {"tf.float32", "tf.int32", "tf.int64", "tf.float64", "tf.uint8"};
  const std::string type = kTypes[In(rng, 0, 4)];
  if (dict) return absl::StrCat("map(cast(", type, "), key='a')");
  return absl::StrCat("map(cast(", type, "), key=0)");
}

std::string ElementOp(std::mt19937_64& rng, bool dict, bool tuple_or_dict) {
  switch (In(rng, 0, 6)) {
    case 0: return absl::StrCat("take(", In(rng, -1, 60), ")");
    case 1: return absl::StrCat("skip(", In(rng, -1, 30), ")");
    case 2: {
      const int64_t shards = In(rng, 1, 4);
      return absl::StrCat("shard(", shards, ", ", In(rng, 0, shards - 1), ")");
    }
    case 3: return "repeat(2)";
    case 4: return "prefetch(2)";
    default:
      if (!tuple_or_dict) {
        static const char* kTypes[] = {"tf.float32", "tf.int32", "tf.float64", "tf.int16"};
        return absl::StrCat("map(cast(", kTypes[In(rng, 0, 3)], ")",
                            In(rng, 0, 2) == 0 ? ", num_parallel_calls=2" : "", ")");
      }
      return Cast(rng, dict);
  }
}

std::string GeneratePipeline(std::mt19937_64& rng) {
  bool dict = false;
  std::string p = Source(rng, &dict);
  const bool structured = dict || p.find("((") != std::string::npos;
  const int64_t ops = In(rng, 0, 3);
  for (int64_t i = 0; i < ops; ++i) absl::StrAppend(&p, ".", ElementOp(rng, dict, structured));
  const std::string drop = In(rng, 0, 1) == 0 ? "True" : "False";
  const int64_t b = In(rng, 1, 70);
  if (In(rng, 0, 3) == 0) {
    // Rows of width 3 (Source case 4) may be padded to a fixed width, smaller ones an error.
    const bool rows = p.rfind("from_tensor_slices([[", 0) == 0;
    const std::string shapes =
        rows && In(rng, 0, 1) == 0 ? absl::StrCat(", padded_shapes=[", In(rng, 2, 5), "]") : "";
    absl::StrAppend(&p, ".padded_batch(", b, shapes, ", drop_remainder=", drop, ")");
  } else {
    absl::StrAppend(&p, ".batch(", b, ", drop_remainder=", drop, ")");
  }
  switch (In(rng, 0, 4)) {
    case 0: absl::StrAppend(&p, ".rebatch(", In(rng, 1, 9), ")"); break;
    case 1: absl::StrAppend(&p, ".take(", In(rng, 0, 5), ")"); break;
    case 2: absl::StrAppend(&p, ".unbatch().batch(", In(rng, 1, 9), ")"); break;
    default: break;
  }
  return p;
}

TEST(BulkPathTest, RandomPipelinesGiveTheSameElementsWithAndWithoutBlocks) {
  std::mt19937_64 rng(20261203);
  int non_empty = 0;
  for (int i = 0; i < 400; ++i) {
    const std::string p = GeneratePipeline(rng);
    SCOPED_TRACE(absl::StrCat("case ", i, ": ", p));
    if (ExpectSameRun(p) > 0) ++non_empty;
    if (::testing::Test::HasFailure()) return;
  }
  // The draws are not vacuous: most pipelines run to their end and yield elements.
  EXPECT_GT(non_empty, 200);
}

TEST(BulkPathTest, ChosenPipelines) {
  for (const std::string p : {
           "range(100000).batch(4096)",
           "range(100000).batch(4096, drop_remainder=True)",
           "range(10, -7, -3).batch(2)",
           "range(0).batch(3)",
           "range(5).repeat(3).batch(4)",
           "range(100).shard(3, 2).batch(7)",
           "range(50).padded_batch(8)",
           "range(50).padded_batch(8, padded_shapes=[], drop_remainder=True)",
           "from_tensor_slices([[1, 2], [3, 4], [5, 6]]).padded_batch(2, padded_shapes=[4], padding_values=-1)",
           "from_tensor_slices([[1, 2], [3, 4], [5, 6]]).padded_batch(2, padded_shapes=[1])",
           "from_tensor_slices([[1, 2], [3, 4], [5, 6]]).padded_batch(2, padded_shapes=[None])",
           "from_tensor_slices({'a': [1, 2, 3], 'b': ['x', 'y', 'z']}).repeat(3).padded_batch(4)",
           "range(30).repeat(2).skip(5).padded_batch(7)",
           "range(100).shard(1, 0).batch(7)",
           "range(1000).shard(7, 0).skip(3).shard(2, 1).batch(9, drop_remainder=True)",
           "from_tensor_slices((['a', 'b', 'c', 'd', 'e'], [[1., 2.], [3., 4.], [5., 6.], [7., 8.], [9., 0.]])).shard(2, 1).batch(2)",
           "range(7).repeat(5).take(30).batch(4, drop_remainder=True)",
           "range(0).repeat().batch(4)",
           "range(10).shuffle(4, seed=3).repeat(2).batch(3)",
           "from_tensor_slices([1, 2, 3]).repeat(4).map(cast(tf.float64)).batch(5)",
           "range(50).skip(7).take(30).map(cast(tf.float32)).batch(8)",
           "range(9223372036854775800, 9223372036854775807, 2).batch(3)",
           "from_tensor_slices({'a': [1, 2, 3], 'b': [[1., 2.], [3., 4.], [5., 6.]]}).batch(2)",
           "from_tensor_slices(([1, 2, 3], ['x', 'y', 'z'])).skip(1).batch(5)",
           "range(1000).map(cast(tf.uint8), num_parallel_calls=4).batch(300)",
       }) {
    SCOPED_TRACE(p);
    ExpectSameRun(p);
  }
}

// SparseTensor / RaggedTensor components (issue 31): from_tensor_slices gives blocks of row
// pieces, which batch, ragged_batch, repeat, take, skip and shard carry; every pipeline gives
// exactly what stacking row by row gives, entries of an unordered SparseTensor included.
TEST(BulkPathTest, CompositeRowsInBlocks) {
  const std::string ragged = "tf.ragged.constant([[1, 2], [3], [4, 5, 6], [], [7], [8, 9]])";
  const std::string ragged2 = "tf.ragged.constant([[[1, 2], [3]], [[4]], [], [[5], [], [6]]])";
  const std::string sparse =  // entries not ordered by row
      "tf.sparse.SparseTensor(indices=[[3, 1], [0, 2], [1, 0], [0, 0], [4, 3]], "
      "values=[1., 2., 3., 4., 5.], dense_shape=[5, 4])";
  size_t elements = 0;
  for (const std::string& p : {
           "from_tensor_slices(" + ragged + ").batch(4)",
           "from_tensor_slices(" + ragged + ").ragged_batch(4, drop_remainder=True)",
           "from_tensor_slices(" + ragged + ").repeat(3).ragged_batch(5)",
           "from_tensor_slices(" + ragged2 + ").repeat(2).batch(3)",
           "from_tensor_slices(" + sparse + ").batch(2)",
           "from_tensor_slices(" + sparse + ").repeat(2).batch(3)",
           "from_tensor_slices((" + ragged + ", [1, 2, 3, 4, 5, 6])).skip(1).take(4).batch(2)",
           "from_tensor_slices({'s': " + sparse + ", 'r': tf.ragged.constant([[1], [], [2, 3], "
           "[4], [5]])}).repeat(2).shard(3, 1).batch(2)",
           "from_tensor_slices(" + ragged + ").shard(2, 0).ragged_batch(2)",
           // Batches of whole source blocks: the blocks are the source's value, joined as is.
           "from_tensor_slices(" + ragged + ").repeat(4).ragged_batch(12)",
           "from_tensor_slices(" + ragged2 + ").repeat(3).batch(8)",
           "from_tensor_slices({'s': " + sparse + ", 'r': tf.ragged.constant([[1], [], [2, 3], "
           "[4], [5]])}).repeat(3).batch(10)",
       }) {
    SCOPED_TRACE(p);
    elements += ExpectSameRun(p);
  }
  EXPECT_GT(elements, 20u);
  BulkSwitch on(true);
  absl::StatusOr<Dataset> ds = Dataset::Parse("from_tensor_slices(" + ragged + ")");
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
  ASSERT_TRUE(it.ok()) << it.status();
  EXPECT_TRUE((*it)->SupportsBlocks());
}

void WriteNpy(const std::string& path, int rows, int base, bool big_endian) {
  record_test::WriteWholeFile(path, record_test::NpyInt32Pairs(rows, base, big_endian));
}

TEST(BulkPathTest, NpyFilesInBlocks) {
  const std::string dir = ::testing::TempDir();
  for (bool big_endian : {false, true}) {
    const std::string suffix = big_endian ? "be" : "le";
    std::vector<std::string> files;
    const int rows[] = {7, 0, 13, 1};
    for (int f = 0; f < 4; ++f) {
      files.push_back(absl::StrCat(dir, "/bulk_", suffix, f, ".npy"));
      WriteNpy(files.back(), rows[f], 100 * f, big_endian);
    }
    const std::string list = absl::StrCat("['", absl::StrJoin(files, "', '"), "']");
    {
      absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat("npy_dataset(", list, ")"));
      ASSERT_TRUE(ds.ok()) << ds.status();
      absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
      ASSERT_TRUE(it.ok()) << it.status();
      EXPECT_TRUE((*it)->SupportsBlocks());
    }
    for (const std::string ops : {".batch(4)", ".batch(5, drop_remainder=True)",
                                  ".skip(3).take(12).map(cast(tf.float32)).batch(6)",
                                  ".padded_batch(3)"}) {
      const std::string p = absl::StrCat("npy_dataset(", list, ")", ops);
      SCOPED_TRACE(p);
      EXPECT_GT(ExpectSameRun(p), 0u);
    }
  }
}

TEST(BulkPathTest, SourcesTakeSkipAndElementWiseMapsOfferBlocks) {
  auto supports = [](const std::string& expression) {
    absl::StatusOr<Dataset> ds = Dataset::Parse(expression);
    EXPECT_TRUE(ds.ok()) << ds.status();
    absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
    EXPECT_TRUE(it.ok()) << it.status();
    return (*it)->SupportsBlocks();
  };
  EXPECT_TRUE(supports("range(10)"));
  EXPECT_TRUE(supports("from_tensor_slices([1, 2])"));
  EXPECT_TRUE(supports("range(10).skip(2).take(5).map(cast(tf.float32))"));
  EXPECT_TRUE(supports("range(10).map(cast(tf.float32), num_parallel_calls=-1)"));
  EXPECT_TRUE(supports("range(10).repeat(3)"));
  EXPECT_TRUE(supports("from_tensor_slices([1, 2]).repeat()"));
  EXPECT_FALSE(supports("range(10).repeat(0)"));
  EXPECT_FALSE(supports("range(10).shuffle(4, seed=1).repeat(2)"));
  EXPECT_TRUE(supports("range(10).shard(2, 0)"));
  EXPECT_FALSE(supports("range(10).prefetch(2)"));
  EXPECT_FALSE(supports("range(10).map(one_hot(3))"));
}

TEST(BulkPathTest, RangeBlocksStopAtMaxAndAtTheEnd) {
  absl::StatusOr<std::unique_ptr<Iterator>> it = NewRangeIterator("source (range)", 3, 20, 4);
  ASSERT_TRUE(it.ok());
  Element block;
  int64_t n = 0;
  bool end = false;
  ASSERT_TRUE((*it)->GetNextBlock(3, &block, &n, &end).ok());
  ASSERT_FALSE(end);
  EXPECT_EQ(n, 3);
  EXPECT_TRUE(block.leaf().Equals(Tensor::FromVector<int64_t>({3, 7, 11})));
  ASSERT_TRUE((*it)->GetNextBlock(100, &block, &n, &end).ok());
  EXPECT_EQ(n, 2);
  EXPECT_TRUE(block.leaf().Equals(Tensor::FromVector<int64_t>({15, 19})));
  ASSERT_TRUE((*it)->GetNextBlock(100, &block, &n, &end).ok());
  EXPECT_TRUE(end);
  EXPECT_EQ(n, 0);
}

// Random Examples with 'image' (bytes), 'label' (int64, sometimes missing: the default) and
// 'score' (2 floats; sometimes 3, an element error), and now and then bytes that are no Example.
std::string RandomRecord(std::mt19937_64& rng) {
  if (In(rng, 0, 30) == 0) return "\xff\xff\xff not an Example";  // 18 bytes
  proto::Example ex;
  auto& f = *ex.mutable_features()->mutable_feature();
  std::string image(static_cast<size_t>(In(rng, 0, 40)), '\0');
  for (char& c : image) c = static_cast<char>(In(rng, 0, 255));
  f["image"].mutable_bytes_list()->add_value(image);
  if (In(rng, 0, 4) != 0) f["label"].mutable_int64_list()->add_value(In(rng, -1000, 1000));
  const int64_t scores = In(rng, 0, 40) == 0 ? 3 : 2;
  for (int64_t i = 0; i < scores; ++i) {
    f["score"].mutable_float_list()->add_value(static_cast<float>(In(rng, -99, 99)) / 4);
  }
  return ex.SerializeAsString();
}

// TFRecord files of random Examples, the last one optionally cut short inside a record (a
// DATA_LOSS read error after its earlier records); parsed with a sequential or parallel map
// and batched, in blocks and element by element.
TEST(BulkPathTest, TFRecordFilesParsedInBlocksSequentialAndParallel) {
  record_test::TempDir dir;
  std::mt19937_64 rng(14);
  std::vector<std::string> files;
  for (int f = 0; f < 3; ++f) {
    files.push_back(dir.path() + "/r" + std::to_string(f) + ".tfrecord");
    auto w = TFRecordWriter::Open(files.back());
    ASSERT_TRUE(w.ok()) << w.status();
    const int64_t n = f == 1 ? 0 : In(rng, 150, 400);
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE((*w)->Write(RandomRecord(rng)).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  const std::string cut = dir.path() + "/cut.tfrecord";
  const std::string whole = record_test::ReadWholeFile(files[0]);
  record_test::WriteWholeFile(cut, whole.substr(0, whole.size() - 30));
  const std::string spec =
      "parse_example({'image': FixedLenFeature([], tf.string), "
      "'label': FixedLenFeature([], tf.int64, default_value=-1), "
      "'score': FixedLenFeature([2], tf.float32)})";
  int runs = 0;
  // buffer_size=1000: records straddle the reader's buffers, which a parallel map's reads hand
  // to its jobs as views (TFRecordReader::ReadRecordView).
  for (const auto& [corrupt, buffer] : {std::pair<bool, std::string>{false, ""},
                                        {true, ""},
                                        {false, ", buffer_size=1000"},
                                        {true, ", buffer_size=1000"}}) {
    std::vector<std::string> list = files;
    if (corrupt) list.push_back(cut);
    const std::string source =
        absl::StrCat("tf_record_dataset(['", absl::StrJoin(list, "', '"), "']", buffer, ")");
    for (const std::string parallel : {"", ", num_parallel_calls=2", ", num_parallel_calls=3",
                                       ", num_parallel_calls=-1",
                                       ", num_parallel_calls=2, deterministic=True"}) {
      for (const std::string tail : {".batch(1)", ".batch(7)", ".batch(64, drop_remainder=True)",
                                     ".batch(256)", ".take(100).batch(9)"}) {
        const std::string p = absl::StrCat(source, ".map(", spec, parallel, ")", tail);
        SCOPED_TRACE(p);
        const size_t n = ExpectSameRun(p);
        if (!corrupt) {
          EXPECT_GT(n, 0u);
        }
        ++runs;
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
  EXPECT_EQ(runs, 100);
  // Not vacuous: bad records are element errors, and the cut file ends in DATA_LOSS after the
  // records before the cut, on both paths.
  for (const bool bulk : {true, false}) {
    const std::string p = absl::StrCat("tf_record_dataset(['", files[0], "', '", cut, "']).map(",
                                       spec, ", num_parallel_calls=2).batch(1)");
    const PipelineRun run = RunPipeline(p, bulk);
    EXPECT_FALSE(run.errors.empty()) << p;
    EXPECT_EQ(run.end.code(), absl::StatusCode::kDataLoss) << p << ": " << run.end;
    EXPECT_GT(run.elements.size(), 2 * (whole.size() / 100 - run.errors.size()) / 3) << p;
  }
  // The bulk path is taken: the map over the TFRecord source offers blocks.
  absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat(
      "tf_record_dataset(['", files[0], "']).map(", spec, ", num_parallel_calls=2)"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
  ASSERT_TRUE(it.ok()) << it.status();
  EXPECT_TRUE((*it)->SupportsBlocks());
  // A VarLenFeature (a SparseTensor whose dense shape is the longest row of a batch) is not
  // element-wise: no bulk map.
  ds = Dataset::Parse(absl::StrCat("tf_record_dataset(['", files[0],
                                   "']).map(parse_example({'image': VarLenFeature(tf.string)}))"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  it = MakeIterator(*ds);
  ASSERT_TRUE(it.ok()) << it.status();
  EXPECT_FALSE((*it)->SupportsBlocks());
}

// The byte offset of record `k` of a TFRecord file's bytes (uncompressed framing).
using record_test::TFRecordOffset;

// A parallel map over a TFRecord source reads the source's blocks on the pool (pulled by pool
// jobs in turn, the consumer running queued ones itself): the same elements, order and errors
// as the per-element path, with records whose data checksum is bad (DATA_LOSS naming the file
// and byte offset, after the records before it), a bad length checksum, a file cut inside a
// record, record ranges and maps of 2, 3 and AUTOTUNE calls under several batch shapes.
TEST(BulkPathTest, TFRecordBlocksPulledOnThePoolKeepElementsOrderAndErrors) {
  record_test::TempDir dir;
  std::mt19937_64 rng(1414);
  std::vector<std::string> good;
  for (int f = 0; f < 3; ++f) {
    good.push_back(dir.path() + "/g" + std::to_string(f) + ".tfrecord");
    auto w = TFRecordWriter::Open(good.back());
    ASSERT_TRUE(w.ok()) << w.status();
    const int64_t n = In(rng, 200, 700);
    for (int64_t i = 0; i < n; ++i) ASSERT_TRUE((*w)->Write(RandomRecord(rng)).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  const std::string whole = record_test::ReadWholeFile(good[1]);
  // A flipped data byte in record 137, a flipped length byte in record 61, a cut in record 300.
  std::string bad_data = whole;
  const size_t data_at = TFRecordOffset(whole, 137);
  ASSERT_LT(data_at + 14, whole.size());
  bad_data[data_at + 13] = static_cast<char>(bad_data[data_at + 13] ^ 0x40);
  const std::string bad_data_file = dir.path() + "/bad_data.tfrecord";
  record_test::WriteWholeFile(bad_data_file, bad_data);
  std::string bad_length = whole;
  const size_t length_at = TFRecordOffset(whole, 61);
  bad_length[length_at + 9] = static_cast<char>(bad_length[length_at + 9] ^ 0x01);
  const std::string bad_length_file = dir.path() + "/bad_length.tfrecord";
  record_test::WriteWholeFile(bad_length_file, bad_length);
  const std::string cut_file = dir.path() + "/cut.tfrecord";
  record_test::WriteWholeFile(cut_file, whole.substr(0, TFRecordOffset(whole, 300) + 40));
  const std::string spec =
      "parse_example({'image': FixedLenFeature([], tf.string), "
      "'label': FixedLenFeature([], tf.int64, default_value=-1), "
      "'score': FixedLenFeature([2], tf.float32)})";
  auto list = [](const std::vector<std::string>& files) {
    return absl::StrCat("['", absl::StrJoin(files, "', '"), "']");
  };
  const std::vector<std::string> sources = {
      absl::StrCat("tf_record_dataset(", list(good), ")"),
      absl::StrCat("tf_record_dataset(", list({good[0], bad_data_file, good[2]}), ")"),
      absl::StrCat("tf_record_dataset(", list({good[0], bad_length_file}), ")"),
      absl::StrCat("tf_record_dataset(", list({good[2], cut_file}), ")"),
      absl::StrCat("tf_record_dataset(", list({good[0], bad_data_file}),
                   ", start_record=", In(rng, 1, 150), ", num_records=", In(rng, 100, 700), ")"),
      absl::StrCat("tf_record_dataset(", list(good), ", num_parallel_reads=2)"),
  };
  int runs = 0;
  for (const std::string& source : sources) {
    for (const std::string parallel : {"", ", num_parallel_calls=2", ", num_parallel_calls=3",
                                       ", num_parallel_calls=-1",
                                       ", num_parallel_calls=2, deterministic=False"}) {
      for (int shape = 0; shape < 3; ++shape) {
        const std::string tail =
            shape == 0 ? absl::StrCat(".batch(", In(rng, 1, 300), ")")
            : shape == 1
                ? absl::StrCat(".batch(", In(rng, 2, 64), ", drop_remainder=True)")
                : absl::StrCat(".take(", In(rng, 1, 900), ").batch(", In(rng, 1, 40), ")");
        const std::string p = absl::StrCat(source, ".map(", spec, parallel, ")", tail);
        SCOPED_TRACE(p);
        if (absl::StrContains(parallel, "False")) {
          // Out of order, batches may hold other rows (and take() other elements): a run ends
          // the same way and, without take(), has as many element errors.
          const PipelineRun bulk = RunPipeline(p, true);
          const PipelineRun single = RunPipeline(p, false);
          EXPECT_EQ(bulk.end.code(), single.end.code());
          if (shape != 2) {
            EXPECT_EQ(bulk.errors.size(), single.errors.size());
          }
        } else {
          ExpectSameRun(p);
        }
        ++runs;
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
  EXPECT_EQ(runs, 90);
  // Not vacuous: the corrupt files end in DATA_LOSS naming the file and the record's offset.
  const struct {
    std::string file;
    size_t offset;
    std::string what;
  } bad[] = {{bad_data_file, data_at, "data checksum mismatch"},
             {bad_length_file, length_at, "length checksum mismatch"},
             {cut_file, TFRecordOffset(whole, 300), "truncated record"}};
  for (const auto& b : bad) {
    const std::string p = absl::StrCat("tf_record_dataset(['", b.file, "']).map(", spec,
                                       ", num_parallel_calls=2).batch(32)");
    const PipelineRun run = RunPipeline(p, true);
    EXPECT_EQ(run.end.code(), absl::StatusCode::kDataLoss) << p << ": " << run.end;
    EXPECT_TRUE(absl::StrContains(run.end.message(), absl::StrCat("byte offset ", b.offset)))
        << run.end;
    EXPECT_TRUE(absl::StrContains(run.end.message(), b.file)) << run.end;
    EXPECT_TRUE(absl::StrContains(run.end.message(), b.what)) << run.end;
  }
  // The source offers pulls on the pool; the interleaved one (num_parallel_reads) does not.
  for (const bool interleaved : {false, true}) {
    absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat(
        "tf_record_dataset(", list(good), interleaved ? ", num_parallel_reads=2)" : ")"));
    ASSERT_TRUE(ds.ok()) << ds.status();
    absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
    ASSERT_TRUE(it.ok()) << it.status();
    EXPECT_EQ((*it)->BlocksPullableOnPool(), !interleaved);
  }
}

// A parallel map in input order verifies TFRecord data checksums outside its read lock
// (DeferredCheckBlockSource): the source's read goes on past a corrupted record and the check
// it hands back reports it, with the rows before it. Through the map, with several corrupted
// records (the first in a file's first row, so a block keeps none of its rows; the others in
// blocks read while later blocks are read and mapped), the run is exactly the per-element
// path's: the rows before the first bad record, then its DATA_LOSS, nothing after it.
TEST(BulkPathTest, TFRecordChecksDeferredOffTheReadLockKeepRowsAndErrors) {
  record_test::TempDir dir;
  std::mt19937_64 rng(2727);
  std::printf("seed 2727\n");
  const std::string good_file = dir.path() + "/good.tfrecord";
  auto w = TFRecordWriter::Open(good_file);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int64_t i = 0; i < 900; ++i) {
    // Valid Examples only: every row before a corrupted record is yielded.
    proto::Example ex;
    auto& f = *ex.mutable_features()->mutable_feature();
    f["image"].mutable_bytes_list()->add_value(std::string(In(rng, 1, 300), 'x'));
    f["label"].mutable_int64_list()->add_value(i);
    f["score"].mutable_float_list()->add_value(0.5f);
    f["score"].mutable_float_list()->add_value(-0.5f);
    ASSERT_TRUE((*w)->Write(ex.SerializeAsString()).ok());
  }
  ASSERT_TRUE((*w)->Close().ok());
  const std::string whole = record_test::ReadWholeFile(good_file);
  auto corrupt = [&](const std::string& name, std::vector<int64_t> records) {
    std::string bytes = whole;
    for (int64_t k : records) {
      const size_t at = TFRecordOffset(whole, k) + 13;  // the record's second data byte
      bytes[at] = static_cast<char>(bytes[at] ^ 0x20);
    }
    record_test::WriteWholeFile(dir.path() + "/" + name, bytes);
    return dir.path() + "/" + name;
  };
  const std::string first = corrupt("first.tfrecord", {0});
  const std::string two = corrupt("two.tfrecord", {517, 233});
  const std::string late = corrupt("late.tfrecord", {899});

  // The source itself: the read succeeds, the check finds record 233 (row 233 - 200 = 33).
  {
    absl::StatusOr<Dataset> ds = Dataset::Parse(absl::StrCat("tf_record_dataset(['", two, "'])"));
    ASSERT_TRUE(ds.ok()) << ds.status();
    absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
    ASSERT_TRUE(it.ok()) << it.status();
    auto* source = dynamic_cast<DeferredCheckBlockSource*>(it->get());
    ASSERT_NE(source, nullptr);
    Element block;
    int64_t n = 0;
    bool end = false;
    DeferredCheckBlockSource::BlockCheck check;
    ASSERT_TRUE(source->GetNextBlockDeferringChecks(200, &block, &n, &end, &check).ok());
    ASSERT_EQ(n, 200);
    ASSERT_NE(check, nullptr);
    int64_t good = -1;
    bool mapped = true;
    EXPECT_TRUE(check(&block, &good, nullptr, &mapped).ok());
    EXPECT_FALSE(mapped);
    ASSERT_TRUE(source->GetNextBlockDeferringChecks(200, &block, &n, &end, &check).ok());
    ASSERT_EQ(n, 200);
    ASSERT_NE(check, nullptr);
    const absl::Status s = check(&block, &good, nullptr, &mapped);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_EQ(good, 33);
    EXPECT_TRUE(absl::StrContains(
        s.message(), absl::StrCat("byte offset ", TFRecordOffset(whole, 233), " of file ", two)))
        << s;
  }

  const std::string spec =
      "parse_example({'image': FixedLenFeature([], tf.string), "
      "'label': FixedLenFeature([], tf.int64, default_value=-1), "
      "'score': FixedLenFeature([2], tf.float32)})";
  struct Case {
    std::string files;
    int64_t rows_before;  // rows the run yields before its DATA_LOSS
    size_t offset;        // of the first corrupted record
  };
  const Case cases[] = {
      {absl::StrCat("['", first, "']"), 0, 0},
      {absl::StrCat("['", good_file, "', '", first, "']"), 900, 0},
      {absl::StrCat("['", two, "']"), 233, TFRecordOffset(whole, 233)},
      {absl::StrCat("['", late, "', '", good_file, "']"), 899, TFRecordOffset(whole, 899)},
  };
  for (const Case& c : cases) {
    for (const std::string parallel : {", num_parallel_calls=2", ", num_parallel_calls=4",
                                       ", num_parallel_calls=-1"}) {
      for (const int batch : {1, 7, 64, 256}) {
        const std::string p = absl::StrCat("tf_record_dataset(", c.files, ").map(", spec,
                                           parallel, ").batch(", batch, ")");
        SCOPED_TRACE(p);
        ExpectSameRun(p);
        const PipelineRun run = RunPipeline(p, true);
        EXPECT_EQ(run.end.code(), absl::StatusCode::kDataLoss) << run.end;
        EXPECT_TRUE(absl::StrContains(run.end.message(),
                                      absl::StrCat("byte offset ", c.offset, " of file ")))
            << run.end;
        EXPECT_TRUE(run.errors.empty());
        int64_t rows = 0;
        for (const Element& e : run.elements) rows += e.Flatten()[0].shape().dim(0);
        // The error ends a partial batch (its rows are dropped, as in TF).
        EXPECT_EQ(rows, c.rows_before - c.rows_before % batch);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// A source whose blocks may be pulled on the pool, counting the blocks read.
class CountingPoolSource : public Iterator {
 public:
  explicit CountingPoolSource(std::unique_ptr<Iterator> inner) : inner_(std::move(inner)) {}
  absl::Status GetNext(Element* out, bool* end) override { return inner_->GetNext(out, end); }
  bool SupportsBlocks() const override { return true; }
  bool BlocksPullableOnPool() const override { return true; }
  absl::Status GetNextBlock(int64_t max, Element* out, int64_t* n, bool* end) override {
    blocks->fetch_add(1);
    return inner_->GetNextBlock(max, out, n, end);
  }
  // Shared, so the test reads it after the map (which owns this source) is gone.
  const std::shared_ptr<std::atomic<int64_t>> blocks = std::make_shared<std::atomic<int64_t>>(0);

 private:
  std::unique_ptr<Iterator> inner_;
};

// A parallel map over a TFRecord file copies its records out of the reader's buffers on its
// jobs, in the block's BlockCheck (TFRecordReader::ReadRecordView); when the allocator refuses
// that block (here: a block is cut a record past --max_element_bytes, so it is over it), the
// check returns the allocator's RESOURCE_EXHAUSTED naming the source with no good row (the map
// then ends with it, as after a corrupted first row), and nothing stays charged.
TEST(BulkPathTest, ARefusedViewBlockIsResourceExhaustedWithNoRows) {
  record_test::TempDir dir;
  const std::string file = dir.path() + "/big.tfrecord";
  {
    auto w = TFRecordWriter::Open(file);
    ASSERT_TRUE(w.ok()) << w.status();
    for (int i = 0; i < 400; ++i) ASSERT_TRUE((*w)->Write(std::string(2000, 'a' + i % 26)).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  const int64_t before = ProcessMemoryBudget().in_use();
  for (const int64_t element_bytes : {int64_t{30000}, int64_t{1} << 30}) {
    SCOPED_TRACE(element_bytes);
    absl::StatusOr<Dataset> ds =
        Dataset::Parse(absl::StrCat("tf_record_dataset(['", file, "'], buffer_size=8192)"));
    ASSERT_TRUE(ds.ok()) << ds.status();
    absl::StatusOr<std::unique_ptr<Iterator>> it = MakeIterator(*ds);
    ASSERT_TRUE(it.ok()) << it.status();
    auto* source = dynamic_cast<DeferredCheckBlockSource*>(it->get());
    ASSERT_NE(source, nullptr);
    ScopedProcessLimits limits({.process_bytes = int64_t{1} << 40, .element_bytes = element_bytes});
    Element block;
    int64_t n = 0;
    bool end = false;
    DeferredCheckBlockSource::BlockCheck check;
    ASSERT_TRUE(source->GetNextBlockDeferringChecks(32, &block, &n, &end, &check).ok());
    ASSERT_NE(check, nullptr);
    int64_t good = -1;
    bool mapped = true;
    const absl::Status s = check(&block, &good, nullptr, &mapped);
    EXPECT_FALSE(mapped);
    if (element_bytes == 30000) {
      EXPECT_EQ(n, 16);  // 16 x 2000 bytes: the first past 30000
      EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "tf_record_dataset")) << s;
      EXPECT_EQ(good, 0);
    } else {  // not vacuous: the same block under the default limit
      EXPECT_EQ(n, 32);
      EXPECT_TRUE(s.ok()) << s;
      ASSERT_EQ(block.leaf().num_elements(), 32);
      EXPECT_EQ(block.leaf().string_at(31), std::string(2000, 'a' + 31 % 26));
    }
  }
  EXPECT_EQ(ProcessMemoryBudget().in_use(), before);
}

// A parallel map pulling its input on the pool keeps reading ahead while its consumer is away
// (busy downstream or descheduled), up to its bound of 2 * parallelism blocks held, and no
// further; the blocks still come in order. With 2 calls and 10 rows asked, blocks of 5 rows:
// after the first call returns one, the pool reads until 4 are held (5 read in all), where
// before it read only the 2 the consumer had queued.
TEST(BulkPathTest, APoolPulledMapReadsAheadWhileItsConsumerIsAway) {
  auto source = std::make_unique<CountingPoolSource>(
      *NewRangeIterator("source (range)", 0, 100000, 1));
  const std::shared_ptr<std::atomic<int64_t>> blocks = source->blocks;
  ElementFn same = [](Element e) -> absl::StatusOr<Element> { return e; };
  std::unique_ptr<Iterator> map = NewMapIterator("op 1 (map)", std::move(source), same,
                                                 /*num_parallel_calls=*/2,
                                                 /*deterministic=*/true, same);
  Element out;
  int64_t n = 0;
  bool end = false;
  ASSERT_TRUE(map->GetNextBlock(10, &out, &n, &end).ok());
  ASSERT_EQ(n, 5);
  // Generous: the pool's threads may wait long for a core on a loaded machine.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (blocks->load() < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GE(blocks->load(), 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // The bound: 2 * 2 held or coming, plus at most 2 being read, plus the one handed out.
  EXPECT_LE(blocks->load(), 7);
  int64_t next = 5;
  for (int i = 0; i < 100000 && !end; ++i) {
    ASSERT_TRUE(map->GetNextBlock(10, &out, &n, &end).ok());
    for (int64_t k = 0; k < n; ++k) ASSERT_EQ(out.leaf().data<int64_t>()[k], next++);
  }
  EXPECT_TRUE(end);
  EXPECT_EQ(next, 100000);
}

// Returns once every closure scheduled on the process's pool before this call has returned (or
// after `timeout`): it holds each of the pool's threads in a closure of its own until all of
// them are in one, and a thread takes its next closure only once its last one has returned.
void AwaitPoolClosuresScheduledBefore(absl::Duration timeout) {
  struct Barrier {
    explicit Barrier(int threads) : threads(threads) {}
    bool AllIn() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return entered == threads; }
    const int threads;
    absl::Mutex mu;
    int entered ABSL_GUARDED_BY(mu) = 0;
    bool released ABSL_GUARDED_BY(mu) = false;
  };
  // Shared: the closures may outlive a timeout.
  const auto barrier = std::make_shared<Barrier>(ProcessThreadPool().value()->num_threads());
  for (int i = 0; i < barrier->threads; ++i) {
    ProcessThreadPool().value()->Schedule([barrier, timeout] {
      absl::MutexLock lock(&barrier->mu);
      ++barrier->entered;
      barrier->mu.AwaitWithTimeout(absl::Condition(&barrier->released), timeout);
    });
  }
  absl::MutexLock lock(&barrier->mu);
  barrier->mu.AwaitWithTimeout(absl::Condition(barrier.get(), &Barrier::AllIn), timeout);
  barrier->released = true;
}

// Once the pool's jobs have stopped reading at the bound (2 * parallelism blocks held while
// the consumer was away), a block the consumer takes frees room and the pool reads again,
// without waiting for the consumer to find no block ready. The test above failed when its
// first take came only after the jobs had stopped (4 read, none after, on a loaded machine);
// here the jobs are let stop first, every time.
TEST(BulkPathTest, APoolPulledMapReadsAgainOnceItsConsumerTakesFromAFullMap) {
  auto source = std::make_unique<CountingPoolSource>(
      *NewRangeIterator("source (range)", 0, 1000, 1));
  const std::shared_ptr<std::atomic<int64_t>> blocks = source->blocks;
  ElementFn same = [](Element e) -> absl::StatusOr<Element> { return e; };
  std::unique_ptr<Iterator> map = NewMapIterator("op 1 (map)", std::move(source), same,
                                                 /*num_parallel_calls=*/2,
                                                 /*deterministic=*/true, same);
  // What is waited out: a few reads of 5 rows on the pool, whose threads may wait long for a
  // core on a loaded machine.
  const absl::Duration timeout = absl::Seconds(60);
  const auto await_blocks = [&](int64_t at_least) {
    const absl::Time deadline = absl::Now() + timeout;
    while (blocks->load() < at_least && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    return blocks->load();
  };
  Element out;
  int64_t n = 0;
  bool end = false;
  int64_t next = 0;
  const auto take = [&](int64_t max) {
    ASSERT_TRUE(map->GetNextBlock(max, &out, &n, &end).ok());
    ASSERT_FALSE(end);
    ASSERT_EQ(n, 5);  // one whole block of ceil(10 / 2) rows
    for (int64_t k = 0; k < n; ++k) ASSERT_EQ(out.leaf().data<int64_t>()[k], next++);
  };
  ASSERT_NO_FATAL_FAILURE(take(10));
  ASSERT_GE(await_blocks(5), 5);
  // The jobs read no further now: every one queued has returned, the last finding no room.
  AwaitPoolClosuresScheduledBefore(timeout);
  const int64_t read = blocks->load();
  const int64_t held = read - 1;
  ASSERT_GE(held, 4);
  // Takes down to 3 held, every block ready, so the consumer never waits, runs or queues a
  // read for want of one; only the take's freeing of room can start the next read.
  for (int64_t i = 0; i < held - 3; ++i) ASSERT_NO_FATAL_FAILURE(take(5));
  EXPECT_GE(await_blocks(read + 1), read + 1) << "nothing read after a take left 3 held";
  for (int i = 0; i < 1000 && !end; ++i) {
    ASSERT_TRUE(map->GetNextBlock(10, &out, &n, &end).ok());
    for (int64_t k = 0; k < n; ++k) ASSERT_EQ(out.leaf().data<int64_t>()[k], next++);
  }
  EXPECT_TRUE(end);
  EXPECT_EQ(next, 1000);
}

// A source of `n` elements, each a string of `bytes` bytes holding its index, counting pulls.
class CountingBigElements : public Iterator {
 public:
  CountingBigElements(int64_t n, size_t bytes) : n_(n), bytes_(bytes) {}
  absl::Status GetNext(Element* out, bool* end) override {
    *end = pulled == n_;
    if (*end) return absl::OkStatus();
    std::string s(bytes_, 'x');
    const std::string index = std::to_string(pulled++);
    s.replace(0, index.size(), index);
    *out = Element(Tensor::StringScalar(std::move(s)));
    return absl::OkStatus();
  }
  int64_t pulled = 0;  // read by the test between GetNext calls of the map (one thread)

 private:
  const int64_t n_;
  const size_t bytes_;
};

// A parallel map of large elements (100 KiB each: batches of records, decoded images) holds a
// few of them per unit, not 32: at most 2 * parallelism units of 3 elements (256 KiB) are read
// ahead of the consumer, where 32-element units would hold 128 (12.8 MB); the output is
// unchanged, in order.
TEST(BulkPathTest, AParallelMapOfLargeElementsKeepsFewInFlight) {
  auto source = std::make_unique<CountingBigElements>(400, 100 << 10);
  CountingBigElements* counting = source.get();  // owned by the map, alive while it is
  ElementFn same = [](Element e) -> absl::StatusOr<Element> { return e; };
  std::unique_ptr<Iterator> map = NewMapIterator("op 1 (map)", std::move(source), same,
                                                 /*num_parallel_calls=*/2,
                                                 /*deterministic=*/true);
  int64_t taken = 0;
  int64_t most_ahead = 0;
  for (;;) {
    Element e;
    bool end = false;
    ASSERT_TRUE(map->GetNext(&e, &end).ok());
    if (end) break;
    ASSERT_EQ(e.leaf().string_at(0).substr(0, std::to_string(taken).size()),
              std::to_string(taken));
    ++taken;
    // Only the consumer's thread pulls the input on this path: the count is exact here.
    most_ahead = std::max(most_ahead, counting->pulled - taken);
  }
  EXPECT_EQ(taken, 400);
  EXPECT_LE(most_ahead, 2 * 2 * 3);
  EXPECT_GT(most_ahead, 0);
}

TEST(BulkPathTest, FixedLengthRecordsInBlocks) {
  record_test::TempDir dir;
  std::vector<std::string> files;
  for (int f = 0; f < 3; ++f) {
    files.push_back(dir.path() + "/f" + std::to_string(f) + ".bin");
    std::string bytes = "hdr";
    for (int i = 0; i < 8 * (f + 1); ++i) bytes.push_back(static_cast<char>(7 * i + f));
    bytes += "ft";
    record_test::WriteWholeFile(files.back(), bytes);
  }
  const std::string source = absl::StrCat("fixed_length_record_dataset(['",
                                          absl::StrJoin(files, "', '"),
                                          "'], 4, header_bytes=3, footer_bytes=2)");
  for (const std::string ops : {".batch(5)", ".skip(2).batch(3, drop_remainder=True)",
                                ".map(decode_raw(tf.int16)).batch(4)",
                                ".map(decode_raw(tf.uint8), num_parallel_calls=2).batch(7)"}) {
    const std::string p = source + ops;
    SCOPED_TRACE(p);
    EXPECT_GT(ExpectSameRun(p), 0u);
  }
}

// A map whose block fn fails goes row by row: the elements before the bad one are kept in
// their batch... and, as on the per-element path, the batch holding the failing row is lost.
TEST(BulkPathTest, AFailingBlockFallsBackToRowsWithTheSameErrors) {
  // Fails on the value 13; a block containing it fails as a whole.
  auto fn = [](Element e) -> absl::StatusOr<Element> {
    const Tensor& t = e.leaf();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      if (t.data<int64_t>()[i] == 13) {
        return MarkElementError(absl::InvalidArgumentError("unlucky"));
      }
    }
    return e;
  };
  auto run = [&](bool bulk, int64_t parallel) {
    BulkSwitch s(bulk);
    std::unique_ptr<Iterator> range = *NewRangeIterator("source (range)", 0, 30, 1);
    std::unique_ptr<Iterator> map =
        NewMapIterator("op 1 (map)", std::move(range), fn, parallel, true, fn);
    EXPECT_EQ(map->SupportsBlocks(), true);
    std::unique_ptr<Iterator> batch = *NewBatchIterator("op 2 (batch)", std::move(map), 4, false);
    std::vector<std::string> out;
    for (int i = 0; i < 100; ++i) {
      Element e;
      bool end = false;
      absl::Status st = batch->GetNext(&e, &end);
      if (end) break;
      if (!st.ok()) {
        out.push_back(st.ToString());
        continue;
      }
      std::vector<std::string> values;
      for (int64_t k = 0; k < e.leaf().num_elements(); ++k) {
        values.push_back(absl::StrCat(e.leaf().data<int64_t>()[k]));
      }
      out.push_back(absl::StrJoin(values, ","));
    }
    return out;
  };
  const std::vector<std::string> single = run(false, 1);
  // Sequential, and parallel on the pool (blocks mapped by pool threads, or by the caller).
  for (int64_t parallel : {1, 2, 3}) {
    SCOPED_TRACE(parallel);
    EXPECT_EQ(run(true, parallel), single);
    EXPECT_EQ(run(false, parallel), single);
  }
  // The batch [12, 13, 14, 15] loses 12 with the error, then goes on from 14.
  ASSERT_GE(single.size(), 5u);
  EXPECT_EQ(single[2], "8,9,10,11");
  EXPECT_NE(single[3].find("unlucky"), std::string::npos);
  EXPECT_EQ(single[4], "14,15,16,17");
}

}  // namespace
}  // namespace sluice
