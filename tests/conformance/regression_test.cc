// Regression tests: each failure the differential conformance test (conformance_test.cc) or the
// issue found, fixed, now a fixed case through an in-process cluster (coordinator + workers on
// port 0) compared with in-process mode. tests/conformance/FOUND.md lists them.
#include <fstream>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/conformance/pipeline_generator.h"
#include "tests/conformance/service_vs_local.h"
#include "tests/worker/in_process_cluster.h"

namespace sluice {
namespace {

class ConformanceRegressionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new Cluster(2);
    text_file_ = ::testing::TempDir() + "/sluice_regression.txt";
    std::ofstream out(text_file_, std::ios::trunc);
    for (int i = 0; i < 11; ++i) out << (i % 5 == 4 ? "" : "line" + std::to_string(i)) << "\n";
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  // Compares the case; job names are unique per test.
  static void ExpectSame(ConformanceCase c) {
    static int job = 0;
    const std::string why =
        CompareServiceWithLocal(cluster_->address(), c, "regression-" + std::to_string(job++));
    EXPECT_EQ(why, "") << c.Describe();
  }

  static ConformanceCase Case(std::string pipeline, int64_t replicas, std::string policy,
                              int64_t num_tasks = 1, int64_t consumers = 1) {
    ConformanceCase c;
    c.pipeline = std::move(pipeline);
    c.replicas = replicas;
    c.policy = policy;
    c.local_policy = (policy == "RANGES" || policy == "DYNAMIC") ? "AUTO" : policy;
    if (consumers > 1) c.local_policy = "DATA";  // one in-process worker with C x R replicas
    c.num_tasks = num_tasks;
    c.consumers = consumers;
    return c;
  }

  static Cluster* cluster_;
  static std::string text_file_;
};

Cluster* ConformanceRegressionTest::cluster_ = nullptr;
std::string ConformanceRegressionTest::text_file_;

// Issue 12: "global batch size must be non-negative, got -1" for any map after batch.
TEST_F(ConformanceRegressionTest, MapAfterBatch) {
  ExpectSame(Case("range(10).batch(4).map(cast(tf.float32))", 2, "AUTO", 2));
  ExpectSame(Case("range(10).batch(4).map(cast(tf.float32))", 2, "OFF"));
  ExpectSame(Case("range(10).batch(4).map(cast(tf.float32))", 3, "DATA", 2, 2));
}

// Issue 12: the TFRecord idiom, tf_record_dataset(files).batch(b).map(parse_example({...})).
TEST_F(ConformanceRegressionTest, TfRecordBatchThenParseExample) {
  const GeneratorOptions files = WriteConformanceFiles(::testing::TempDir());
  const std::string expr =
      "tf_record_dataset(['" + files.record_files[0] + "', '" + files.record_files[1] +
      "']).batch(4).map(parse_example({'label': FixedLenFeature([], tf.int64), "
      "'bbox': FixedLenFeature([2], tf.float32), 'name': FixedLenFeature([], tf.string)}))";
  ExpectSame(Case(expr, 3, "AUTO"));
  ExpectSame(Case(expr, 3, "DATA", 2));
  ExpectSame(Case(expr, 2, "DATA", 2, 2));
  ExpectSame(Case(expr, 4, "RANGES"));
}

// Issue 12: range(12).batch(9) on 4 replicas was cut [0 1 2] [3 4] [5 6] [7 8] by the service,
// [0 1 2] [3 4 5] [6 7 8] [] in-process (TF's legacy rebatch under AUTO/DATA).
TEST_F(ConformanceRegressionTest, BatchNotDividingReplicas) {
  ExpectSame(Case("range(12).batch(9)", 4, "AUTO", 2));
  ExpectSame(Case("range(12).batch(9)", 4, "DATA", 1));
  ExpectSame(Case("range(12).batch(9)", 4, "OFF"));
  ExpectSame(Case("range(12).batch(9)", 2, "DATA", 2, 2));
}

// FOUND.md 1: B hidden by ops after the batch (padded_batch then map, a trailing rebatch): the
// tasks failed with "global batch size must be non-negative, got -1".
TEST_F(ConformanceRegressionTest, BatchSizeHiddenAfterTheBatch) {
  ExpectSame(Case("range(21).shuffle(5, seed=484).skip(0).padded_batch(6)"
                  ".map(cast(tf.float64)).skip(1).skip(1)",
                  1, "AUTO", 2, 2));  // seed 2
  ExpectSame(Case("from_tensor_slices(([1, 11, 26], [[-47, 30, -8], [-13, 2, 49], "
                  "[39, -28, 13]])).shuffle(2, seed=600).take(19).shard(3, 1).batch(8).take(7)"
                  ".rebatch(6)",
                  4, "AUTO"));  // seed 1
}

// FOUND.md 2: DATA/AUTO/RANGES cut by TF's new-style sizes where in-process mode (TF) uses the
// legacy rebatch, also for resumed jobs and for C consumers.
TEST_F(ConformanceRegressionTest, DataShardedJobsUseTheLegacyRebatch) {
  ExpectSame(Case("from_tensor_slices([-30, 72, 92, 40, 23, -13, 95, 26, -34, -76, -38, -13, 75, "
                  "77, -25, -51, -7]).repeat(2).batch(4).prefetch(1)",
                  3, "AUTO"));  // seed 27
  ExpectSame(Case("range(5, 71, 3).batch(9).unbatch().batch(3).unbatch()"
                  ".batch(7, drop_remainder=True)",
                  3, "DATA", 3));  // seed 75
  ExpectSame(Case("from_tensors([0, 8, 0, 8]).repeat(5).batch(8)", 3, "RANGES"));  // seed 147
  ExpectSame(Case("text_line_dataset(['" + text_file_ + "']).batch(8).prefetch(1)", 2, "DATA", 2,
                  2));  // seed 13
  ConformanceCase resumed = Case(
      "from_tensor_slices({'a': [19, 12, 1, 20, 15, 26], 'b': [[-13.0, -1.0], [17.5, -4.0], "
      "[-13.0, 20.0], [7.0, 13.0], [-17.5, -10.0], [7.5, 11.0]]}).shuffle(4, seed=561)"
      ".map(cast(tf.int32), key='a').repeat(3).batch(6, drop_remainder=True).prefetch(1)",
      4, "DATA");  // seed 91
  resumed.resume_after = 2;
  ExpectSame(resumed);
}

// FOUND.md 3: a SHARDING_RANGES task's pipeline (a PermutedSource) was taken for a non-AUTO
// source and cut by sizes (a bug of this change's first version, found by seeds 52 and 139).
TEST_F(ConformanceRegressionTest, RangesTasksCutLikeTheirJobsDataset) {
  ExpectSame(Case("from_tensor_slices([2, 4, 51, -86, -14, 64, 55, 9, 93, 12, 0, 72, 86, -59, 76, "
                  "-41, -28, -29, 66, -48]).prefetch(2).batch(5)",
                  4, "RANGES", 2));  // seed 52
  ConformanceCase c = Case("range(23).map(cast(tf.int32)).batch(5)", 3, "RANGES");
  c.resume_after = 2;
  ExpectSame(c);
}

// FOUND.md 4: with one replica TF does not rebatch at all; the service rebatched to [B], which
// merged a short batch with the next one across a repeat (seed 4), and rejected unbatched
// pipelines that in-process mode runs.
TEST_F(ConformanceRegressionTest, OneReplicaIsNotRebatched) {
  ExpectSame(Case("from_tensor_slices([-56, -81, -79, 69, 62, 48, 49, 80, -33, 42, -23, -24, -25, "
                  "53, 28, 10, -29]).prefetch(2).skip(3).batch(4).take(6).repeat(2)",
                  1, "AUTO", 3));  // seed 4
  ExpectSame(Case("range(5).map(cast(tf.float32))", 1, "DATA", 2));
}

}  // namespace
}  // namespace sluice
