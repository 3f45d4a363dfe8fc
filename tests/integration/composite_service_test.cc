// SparseTensor and RaggedTensor elements through real coordinator and worker processes
// (issue 31): `sluicectl run --coordinator` prints the values local mode prints and
// `element-spec` the same SparseTensorSpec / RaggedTensorSpec; a job that would rebatch them
// across several replicas is refused before it starts, naming the composites.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/process_cluster.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

// Ragged rows batched into RaggedTensors, a batched SparseTensor, and a tuple mixing a
// RaggedTensor with a dense component; each repeated so that batches cross the epochs.
const std::vector<std::string>& CompositePipelines() {
  static const auto* pipelines = new std::vector<std::string>{
      "from_tensor_slices(tf.ragged.constant([[1, 2], [3], [4, 5, 6], []])).repeat(3)"
      ".ragged_batch(4)",
      "from_tensor_slices(tf.ragged.constant([[1.5], [2.5, 3.5], [], [4.5, 5.5, 6.5], [7.5]]))"
      ".repeat(2).ragged_batch(3)",
      "from_tensors(tf.sparse.SparseTensor(indices=[[0, 1], [1, 2]], values=[1., 2.], "
      "dense_shape=[2, 3])).repeat(6).batch(4)",
      "from_tensor_slices((tf.ragged.constant([[1], [2, 3], [4, 5, 6]]), [7, 8, 9])).repeat(2)"
      ".ragged_batch(2)",
  };
  return *pipelines;
}

class CompositeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = ProcessCluster::Start({.num_workers = 2});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  // `sluicectl ARGS` must succeed; its stdout.
  std::string Ok(const std::vector<std::string>& args) {
    auto r = RunSluicectl(args);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return "";
    EXPECT_EQ(r->exit_code, 0) << absl::StrJoin(args, " ") << ": " << r->Describe() << "\n"
                               << r->stderr_text << cluster_->Logs();
    return r->stdout_text;
  }

  std::unique_ptr<ProcessCluster> cluster_;
};

TEST_F(CompositeServiceTest, RunThroughTheServicePrintsWhatLocalModePrints) {
  const std::string coordinator = "--coordinator=" + cluster_->coordinator();
  int job = 0;
  for (const std::string& pipeline : CompositePipelines()) {
    for (const std::string format : {"tf", "json"}) {
      const std::string local =
          Ok({"run", "--pipeline=" + pipeline, "--devices=CPU:0", "--format=" + format});
      const std::string remote = Ok({"run", coordinator, "--job=composite-" + std::to_string(job++),
                                     "--pipeline=" + pipeline, "--devices=CPU:0",
                                     "--format=" + format});
      EXPECT_EQ(remote, local) << pipeline << " " << format;
      EXPECT_FALSE(remote.empty()) << pipeline;
      if (format == "tf") {
        // The values went through as composites, not densified.
        EXPECT_TRUE(absl::StrContains(remote, "RaggedTensor") ||
                    absl::StrContains(remote, "SparseTensor"))
            << remote;
      }
    }
    const std::string remote_spec =
        Ok({"element-spec", coordinator, "--pipeline=" + pipeline, "--devices=CPU:0"});
    EXPECT_EQ(remote_spec, Ok({"element-spec", "--pipeline=" + pipeline, "--devices=CPU:0"}))
        << pipeline;
    EXPECT_TRUE(absl::StrContains(remote_spec, "RaggedTensorSpec") ||
                absl::StrContains(remote_spec, "SparseTensorSpec"))
        << remote_spec;
  }
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

// Rebatching composites across replicas is not implemented: the coordinator refuses the job
// when it is created (nothing printed), with an error naming the composites, as local mode does.
TEST_F(CompositeServiceTest, SeveralReplicasAreRefusedBeforeTheJobStarts) {
  const std::string coordinator = "--coordinator=" + cluster_->coordinator();
  const std::string pipeline = "--pipeline=" + CompositePipelines()[0];
  for (const bool remote : {false, true}) {
    std::vector<std::string> args = {"run", pipeline, "--devices=CPU:0,CPU:1"};
    if (remote) {
      args.push_back(coordinator);
      args.push_back("--job=composite-replicas");
    }
    auto r = RunSluicectl(args);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NE(r->exit_code, 0) << r->stdout_text;
    EXPECT_EQ(r->stdout_text, "") << "remote " << remote;
    EXPECT_THAT(r->stderr_text, HasSubstr("SparseTensor or RaggedTensor components across 2 "
                                          "replicas"))
        << "remote " << remote << cluster_->Logs();
  }
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace sluice
