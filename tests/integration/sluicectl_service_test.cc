// sluicectl against real service processes: `run --coordinator` prints what local mode prints
// (the seed's examples byte for byte), `status` shows the workers and jobs, independent reads
// split the batches between consumers; SparseTensor and RaggedTensor elements (literals and
// parse_example's VarLenFeature / RaggedFeature outputs) go through as local mode gives them, to
// one replica and split across several.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/io/tfrecord_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/example.pb.h"
#include "tests/examples/test_paths.h"
#include "tests/integration/process_cluster.h"
#include "tests/integration/step_model.h"

namespace sluice {
namespace {

// The seed's `__iter__` example and its for-loop example (examples/seed_iter.cc,
// examples/seed_for_loop.cc).
constexpr char kSeedIterPipeline[] = "from_tensor_slices([1, 2, 3, 4]).repeat().batch(4)";
constexpr char kSeedForLoopPipeline[] = "from_tensors(([1.],[1.])).repeat(4).batch(4)";

// A TFRecord file of tf.train.Examples under TempDir, written once per process: `ids` (int64)
// and `tags` (bytes) of every length (absent in some records), `w` (float), `lens` (row lengths
// of `ids`) and a scalar `label`.
// This process's own file: ctest runs the tests (and their tcp. twins) in parallel.
std::string ParseCompositesPath() {
  return absl::StrCat(::testing::TempDir(), "sluicectl_parse_", getpid(), ".tfrecord");
}

std::string ParseCompositesFile() {
  static const std::string* path = [] {
    auto* p = new std::string(ParseCompositesPath());
    struct Record {
      std::vector<int64_t> ids;
      std::vector<std::string> tags;
      std::vector<float> w;
      std::vector<int64_t> lens;
    };
    const std::vector<Record> records = {{{1, 2, 3}, {"a", "bc"}, {1.5, 2.5}, {2, 1}},
                                         {{4}, {}, {}, {0, 1}},
                                         {{}, {"d"}, {3.5}, {}},
                                         {{5, 6}, {"e", "f", ""}, {4.5, 5.5, 6.5}, {2}},
                                         {{7}, {"g"}, {}, {1, 0}}};
    absl::StatusOr<std::unique_ptr<TFRecordWriter>> writer = TFRecordWriter::Open(*p);
    EXPECT_TRUE(writer.ok()) << writer.status();
    if (!writer.ok()) return p;
    for (size_t i = 0; i < records.size(); ++i) {
      const Record& r = records[i];
      proto::Example ex;
      auto* features = ex.mutable_features()->mutable_feature();
      (*features)["label"].mutable_int64_list()->add_value(static_cast<int64_t>(10 + i));
      for (int64_t v : r.ids) (*features)["ids"].mutable_int64_list()->add_value(v);
      for (const std::string& t : r.tags) (*features)["tags"].mutable_bytes_list()->add_value(t);
      for (float v : r.w) (*features)["w"].mutable_float_list()->add_value(v);
      for (int64_t v : r.lens) (*features)["lens"].mutable_int64_list()->add_value(v);
      EXPECT_TRUE((*writer)->Write(ex.SerializeAsString()).ok());
    }
    EXPECT_TRUE((*writer)->Close().ok());
    return p;
  }();
  return *path;
}

// Ragged rows batched into RaggedTensors, a batched SparseTensor, and a tuple mixing a
// RaggedTensor with a dense component; each repeated so that batches cross the epochs. Then
// parse_example's composites from ParseCompositesFile(): VarLenFeature (SparseTensor) and
// RaggedFeature (RaggedTensor, ragged rank 1 and, with row lengths, 2), parsed from batches
// and parsed then batched.
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
      absl::StrCat("tf_record_dataset('", ParseCompositesFile(),
                   "').repeat(2).batch(4).map(parse_example({'ids': tf.io.VarLenFeature(tf.int64), "
                   "'tags': tf.io.VarLenFeature(tf.string), 'w': tf.io.RaggedFeature(tf.float32, "
                   "row_splits_dtype=tf.int64), 'label': tf.io.FixedLenFeature([], tf.int64)}))"),
      absl::StrCat("tf_record_dataset('", ParseCompositesFile(),
                   "').map(parse_example({'words': tf.io.RaggedFeature(tf.int64, value_key='ids', "
                   "partitions=[tf.io.RaggedFeature.RowLengths('lens')], "
                   "row_splits_dtype=tf.int64), 'tags': tf.io.VarLenFeature(tf.string)}))"
                   ".repeat(2).batch(3)"),
  };
  return *pipelines;
}

class SluicectlServiceTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { std::remove(ParseCompositesPath().c_str()); }

  void SetUp() override {
    auto cluster = ProcessCluster::Start({.num_workers = 3});
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

TEST_F(SluicectlServiceTest, RunThroughTheServicePrintsWhatLocalModePrints) {
  const std::string coordinator = "--coordinator=" + cluster_->coordinator();
  // The seed's __iter__ example: an infinite pipeline, one step; exactly the seed's output.
  auto golden = ReadFileToString(SourcePath("tests/testdata/seed/seed_iter.txt"));
  ASSERT_TRUE(golden.ok()) << golden.status();
  EXPECT_EQ(Ok({"run", coordinator, "--job=seed-iter",
                std::string("--pipeline=") + kSeedIterPipeline, "--devices=GPU:0,GPU:1",
                "--steps=1"}),
            *golden);
  // The for-loop example's pipeline, to its end, in both formats.
  for (const std::string format : {"tf", "json"}) {
    const std::string local = Ok({"run", std::string("--pipeline=") + kSeedForLoopPipeline,
                                  "--devices=GPU:0,GPU:1", "--format=" + format});
    const std::string remote = Ok({"run", coordinator, "--job=for-loop-" + format,
                                   std::string("--pipeline=") + kSeedForLoopPipeline,
                                   "--devices=GPU:0,GPU:1", "--format=" + format});
    EXPECT_EQ(remote, local) << format;
    EXPECT_FALSE(remote.empty());
  }
  // A partial last step, one consumer: the service cuts it as local mode does.
  for (const std::string pipeline : {"range(8).batch(4)", "range(12).batch(6)"}) {
    EXPECT_EQ(Ok({"run", coordinator, "--job=partial-" + pipeline, "--pipeline=" + pipeline,
                  "--devices=CPU:0,CPU:1", "--format=json", "--sharding_policy=DATA"}),
              Ok({"run", "--pipeline=" + pipeline, "--devices=CPU:0,CPU:1", "--format=json"}))
        << pipeline;
  }
  // element_spec: the seed's element_spec example, remote and local.
  const std::string spec_pipeline = "--pipeline=from_tensors(([1.],[2])).repeat(100).batch(16)";
  EXPECT_EQ(Ok({"element-spec", coordinator, spec_pipeline, "--devices=GPU:0,GPU:1"}),
            Ok({"element-spec", spec_pipeline, "--devices=GPU:0,GPU:1"}));
  // Static and unknown batch dimensions, one and two consumers: the coordinator's spec is the
  // local one with --num_workers=C (TF: multi-worker partial-batch handling makes it None).
  for (const std::string pipeline :
       {"range(64).batch(8, drop_remainder=True)", "range(10).batch(3, drop_remainder=True)",
        "from_tensors(([1.],[2])).repeat().batch(16, drop_remainder=True)"}) {
    for (const std::string consumers : {"1", "2"}) {
      EXPECT_EQ(Ok({"element-spec", coordinator, "--pipeline=" + pipeline,
                    "--devices=CPU:0,CPU:1", "--num_consumers=" + consumers, "--format=json"}),
                Ok({"element-spec", "--pipeline=" + pipeline, "--devices=CPU:0,CPU:1",
                    "--num_workers=" + consumers, "--format=json"}))
          << pipeline << " consumers " << consumers;
    }
  }
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST_F(SluicectlServiceTest, StatusListsWorkersAndJobs) {
  const std::string coordinator = "--coordinator=" + cluster_->coordinator();
  Ok({"run", coordinator, "--job=status-job", "--pipeline=range(20).batch(4)",
      "--devices=CPU:0,CPU:1", "--sharding_policy=OFF", "--format=json"});
  // The job is finished once every worker has reported its task (heartbeats): bounded wait.
  std::string table;
  for (int i = 0; i < 200; ++i) {
    table = Ok({"status", coordinator});
    if (absl::StrContains(table, "3/3")) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(absl::StrContains(table, "3 worker(s), 3 alive")) << table;
  std::vector<std::string> lines = absl::StrSplit(table, '\n');
  int worker_rows = 0;
  bool job_row = false;
  for (const std::string& line : lines) {
    for (int w = 0; w < 3; ++w) {
      if (absl::StrContains(line, cluster_->worker_address(w)) &&
          absl::StrContains(line, " yes ") && absl::StrContains(line, "s ago")) {
        ++worker_rows;
      }
    }
    if (absl::StrContains(line, "status-job")) {
      job_row = true;
      for (const char* want : {" 1 ", " 2 ", "OFF", "coordinated", "3/3", "yes"}) {
        EXPECT_TRUE(absl::StrContains(line, want)) << want << " in: " << line;
      }
    }
  }
  EXPECT_EQ(worker_rows, 3) << table;
  EXPECT_TRUE(job_row) << table;
  for (const char* header : {"WORKERS", "ADDRESS", "ALIVE", "HEARTBEAT", "TASKS", "JOBS", "NAME",
                             "CONSUMERS", "REPLICAS", "POLICY", "TASKS FINISHED", "FINISHED"}) {
    EXPECT_TRUE(absl::StrContains(table, header)) << header;
  }
  // The JSON form says the same.
  const std::string json = Ok({"status", coordinator, "--format=json"});
  EXPECT_TRUE(absl::StrContains(json, "\"job_name\": \"status-job\"")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"tasks_finished\": 3")) << json;

  // A dead worker shows as not alive.
  ASSERT_TRUE(cluster_->KillWorker(2).ok());
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST_F(SluicectlServiceTest, IndependentReadsGiveEachBatchToOneConsumer) {
  constexpr int64_t kElements = 60;
  std::vector<std::unique_ptr<Subprocess>> consumers;
  for (int c = 0; c < 2; ++c) {
    auto p = StartSluicectl({"run", "--coordinator=" + cluster_->coordinator(),
                             "--job=independent", absl::StrCat("--pipeline=range(", kElements,
                                                               ").batch(5)"),
                             "--devices=CPU:0,CPU:1", absl::StrCat("--consumer_index=", c),
                             "--num_consumers=2", "--read_mode=independent",
                             "--sharding_policy=DATA", "--format=json"});
    ASSERT_TRUE(p.ok()) << p.status();
    consumers.push_back(*std::move(p));
  }
  std::map<int64_t, int> count;
  for (auto& p : consumers) {
    auto r = p->Wait(absl::Seconds(90));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->exit_code, 0) << r->stderr_text << cluster_->Logs();
    auto steps = ParseRunJson(r->stdout_text);
    ASSERT_TRUE(steps.ok()) << steps.status();
    for (const ModelStep& step : *steps) {
      // Each step is one whole batch of 5 split over the consumer's 2 replicas: [3, 2].
      EXPECT_EQ(PieceSizes(step), (std::vector<int64_t>{3, 2}));
      for (const auto& piece : step) {
        for (int64_t v : piece) ++count[v];
      }
    }
  }
  EXPECT_EQ(count.size(), static_cast<size_t>(kElements));
  for (int64_t v = 0; v < kElements; ++v) EXPECT_EQ(count[v], 1) << v;
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

// SparseTensor and RaggedTensor elements (issue 31): the values local mode prints and the same
// SparseTensorSpec / RaggedTensorSpec.
TEST_F(SluicectlServiceTest, SparseAndRaggedElementsPrintWhatLocalModePrints) {
  const std::string coordinator = "--coordinator=" + cluster_->coordinator();
  int job = 0;
  for (const std::string& pipeline : CompositePipelines()) {
    for (const std::string format : {"tf", "json"}) {
      const std::string local =
          Ok({"run", "--pipeline=" + pipeline, "--devices=CPU:0", "--format=" + format});
      // DATA: AUTO would shard a pipeline of one file by FILE, which 3 workers cannot.
      const std::string remote = Ok({"run", coordinator, "--job=composite-" + std::to_string(job++),
                                     "--pipeline=" + pipeline, "--devices=CPU:0",
                                     "--sharding_policy=DATA", "--format=" + format});
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

// Composites split across several replicas (issue 31): through real workers, every step's
// PerReplica values and the per-replica element_spec are what local mode prints (which the TF
// goldens check: tests/client/composite_distribute_test.cc), for 2 and 3 replicas, with
// partial final steps, pieces crossing batches (DYNAMIC, as OFF in-process) and the legacy
// cut (DATA).
TEST_F(SluicectlServiceTest, SparseAndRaggedAcrossSeveralReplicasPrintWhatLocalModePrints) {
  const std::string coordinator = "--coordinator=" + cluster_->coordinator();
  int job = 0;
  for (const std::string& pipeline : CompositePipelines()) {
    for (const std::string devices : {"CPU:0,CPU:1", "CPU:0,CPU:1,CPU:2"}) {
      // {service policy, the local policy that cuts alike}: DATA's legacy cut of each batch;
      // DYNAMIC (TF's batch sizes, pieces crossing batches) as OFF.
      for (const auto& [service, in_process] :
           std::vector<std::pair<std::string, std::string>>{{"DATA", "DATA"},
                                                            {"DYNAMIC", "OFF"}}) {
        SCOPED_TRACE(pipeline + " on " + devices + ", " + service);
        const std::string local = Ok({"run", "--pipeline=" + pipeline, "--devices=" + devices,
                                      "--auto_shard_policy=" + in_process, "--format=tf"});
        const std::string remote =
            Ok({"run", coordinator, "--job=composite-replicas-" + std::to_string(job++),
                "--pipeline=" + pipeline, "--devices=" + devices,
                "--sharding_policy=" + service, "--format=tf"});
        EXPECT_EQ(remote, local) << cluster_->Logs();
        EXPECT_TRUE(absl::StrContains(remote, "PerReplica:{")) << remote;
        EXPECT_TRUE(absl::StrContains(remote, "RaggedTensor") ||
                    absl::StrContains(remote, "SparseTensor"))
            << remote;
      }
      const std::string remote_spec =
          Ok({"element-spec", coordinator, "--pipeline=" + pipeline, "--devices=" + devices});
      EXPECT_EQ(remote_spec,
                Ok({"element-spec", "--pipeline=" + pipeline, "--devices=" + devices}));
      EXPECT_TRUE(absl::StrContains(remote_spec, "PerReplicaSpec(RaggedTensorSpec") ||
                  absl::StrContains(remote_spec, "PerReplicaSpec(SparseTensorSpec"))
          << remote_spec;
    }
  }
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace sluice
