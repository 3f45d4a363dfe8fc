// Regression tests: each failure the differential conformance test (conformance_test.cc) or the
// issue found, fixed, now a fixed case through an in-process cluster (coordinator + workers on
// port 0) compared with in-process mode. tests/conformance/FOUND.md lists them.
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
  static void SetUpTestSuite() { cluster_ = new Cluster(2); }
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
    c.num_tasks = num_tasks;
    c.consumers = consumers;
    return c;
  }

  static Cluster* cluster_;
};

Cluster* ConformanceRegressionTest::cluster_ = nullptr;

// Issue 12: "global batch size must be non-negative, got -1" for any map after batch.
TEST_F(ConformanceRegressionTest, MapAfterBatch) {
  ExpectSame(Case("range(10).batch(4).map(cast(tf.float32))", 2, "AUTO", 2));
  ExpectSame(Case("range(10).batch(4).map(cast(tf.float32))", 2, "OFF"));
  ExpectSame(Case("range(10).batch(4).map(cast(tf.float32))", 3, "DATA", 2, 2));
}

// Issue 12: range(12).batch(9) on 4 replicas was cut [0 1 2] [3 4] [5 6] [7 8] by the service,
// [0 1 2] [3 4 5] [6 7 8] [] in-process (TF's legacy rebatch under AUTO/DATA).
TEST_F(ConformanceRegressionTest, BatchNotDividingReplicas) {
  ExpectSame(Case("range(12).batch(9)", 4, "AUTO", 2));
  ExpectSame(Case("range(12).batch(9)", 4, "DATA", 1));
  ExpectSame(Case("range(12).batch(9)", 4, "OFF"));
  ExpectSame(Case("range(12).batch(9)", 2, "DATA", 2, 2));
}

}  // namespace
}  // namespace sluice
