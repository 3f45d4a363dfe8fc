// sluicectl bench --coordinator against real sluice-coordinator and sluice-worker processes:
// the steps come through the service (DistributeDatasetFromService, the trainer's path), the one
// JSON line's counts follow from the pipeline and match a local run's, and a bad address or
// service flag is a clear error.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/rpc/shm_segment.h"
#include "core/util/json_value.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/process_cluster.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

class SluicectlBenchServiceTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    auto cluster = ProcessCluster::Start({.num_workers = GetParam()});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  JsonValue Bench(const std::vector<std::string>& args) {
    auto r = RunSluicectl(args);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return JsonValue();
    EXPECT_EQ(r->exit_code, 0) << absl::StrJoin(args, " ") << ": " << r->Describe() << "\n"
                               << r->stderr_text << cluster_->Logs();
    std::vector<std::string> lines = absl::StrSplit(r->stdout_text, '\n');
    EXPECT_EQ(lines.size(), 2u) << r->stdout_text;
    absl::StatusOr<JsonValue> j = ParseJson(lines[0]);
    EXPECT_TRUE(j.ok()) << j.status() << "\n" << r->stdout_text;
    return j.ok() ? *j : JsonValue();
  }

  std::unique_ptr<ProcessCluster> cluster_;
};

int64_t Int(const JsonValue& j, const char* key) {
  const JsonValue* v = j.Find(key);
  EXPECT_TRUE(v != nullptr && v->int_value().has_value()) << key << " in " << j.ToString();
  return v != nullptr ? v->int_value().value_or(-1) : -1;
}

TEST_P(SluicectlBenchServiceTest, FixedTensorsThroughTheService) {
  const std::string coordinator = "--coordinator=" + cluster_->coordinator();
  // 4 KiB float32 per element, global batch 4 over two replicas.
  const std::string pipeline =
      "from_tensors(tf.constant(0.5, dtype=tf.float32, shape=[1024])).repeat().batch(4)";
  JsonValue j = Bench({"bench", coordinator, "--pipeline=" + pipeline, "--devices=GPU:0,GPU:1",
                       "--steps=40", "--warmup_steps=2", "--job=fixed"});
  EXPECT_EQ(Int(j, "steps"), 40);
  EXPECT_EQ(Int(j, "elements"), 40 * 4);
  EXPECT_EQ(Int(j, "bytes"), 40 * 4 * 4096);
  EXPECT_FALSE(j["end_of_data"].bool_value());
  EXPECT_GT(j["steps_per_second"].number(), 0);
  EXPECT_GE(j["wait_seconds"]["p99"].number(), j["wait_seconds"]["p50"].number());
  const JsonValue& p = j["parameters"];
  EXPECT_EQ(p["mode"].string_value(), "service");
  EXPECT_EQ(p["coordinator"].string_value(), cluster_->coordinator());
  EXPECT_EQ(p["job"].string_value(), "fixed");
  // The consumer shares the workers' host: shared memory unless the environment turns it off
  // (the suite's tcp. run), and then no frame came through it.
  EXPECT_EQ(p["shared_memory"].bool_value(), SharedMemoryDefaultFromEnvironment());
  if (!SharedMemoryDefaultFromEnvironment()) {
    EXPECT_EQ(Int(p, "shared_memory_frames"), 0);
  }
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST_P(SluicectlBenchServiceTest, FiniteDatasetCountsMatchLocalMode) {
  // range(100).batch(8), DATA sharding: every element exactly once over the workers, as the
  // local run reads it (13 batches, the last one of 4).
  const std::string coordinator = "--coordinator=" + cluster_->coordinator();
  JsonValue remote = Bench({"bench", coordinator, "--pipeline=range(100).batch(8)",
                            "--devices=CPU:0,CPU:1", "--sharding_policy=DATA", "--job=finite"});
  JsonValue local = Bench({"bench", "--pipeline=range(100).batch(8)", "--devices=CPU:0,CPU:1"});
  EXPECT_EQ(Int(remote, "elements"), 100);
  EXPECT_EQ(Int(remote, "bytes"), 800);
  EXPECT_EQ(Int(remote, "elements"), Int(local, "elements"));
  EXPECT_EQ(Int(remote, "bytes"), Int(local, "bytes"));
  EXPECT_TRUE(remote["end_of_data"].bool_value());
  if (GetParam() == 1) {
    EXPECT_EQ(Int(remote, "steps"), Int(local, "steps"));
  }
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST_P(SluicectlBenchServiceTest, BadServiceFlagsAreClearErrors) {
  const std::string coordinator = "--coordinator=" + cluster_->coordinator();
  auto r = RunSluicectl({"bench", coordinator, "--pipeline=range(8).batch(2)",
                         "--devices=CPU:0", "--sharding_policy=SIDEWAYS"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->stderr_text, HasSubstr("--sharding_policy must be AUTO, FILE"));
  EXPECT_EQ(r->stdout_text, "");
  r = RunSluicectl({"bench", coordinator, "--pipeline=range(8).batch(2)", "--devices=CPU:0",
                    "--consumer_index=3", "--num_consumers=2"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->stderr_text, HasSubstr("consumer index 3 out of range for 2 consumers"));
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

// --first_step_runs against real processes whose workers heartbeat once an hour (and whose
// coordinator journals): each run's job is made after the workers' last heartbeat, so its
// tasks reach them only through their assignment watches (docs/SERVICE.md, "Assignment
// watch"); without them every run would wait an hour, and fail after --retry_deadline.
TEST(SluicectlBenchFirstStepTest, FirstStepRunsReportMediansOnHourlyHeartbeats) {
  auto cluster = ProcessCluster::Start({.num_workers = 2,
                                        .worker_timeout = absl::Hours(1),
                                        .heartbeat_interval = absl::Hours(1),
                                        .work_dir = true});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string coordinator = "--coordinator=" + (*cluster)->coordinator();
  auto r = RunSluicectl({"bench", coordinator, "--pipeline=range(10).batch(2)",
                         "--devices=CPU:0", "--steps=0", "--first_step_runs=3",
                         "--retry_deadline=30s"});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->Describe() << "\n" << r->stderr_text << (*cluster)->Logs();
  absl::StatusOr<JsonValue> j = ParseJson(std::string(absl::StripTrailingAsciiWhitespace(
      r->stdout_text)));
  ASSERT_TRUE(j.ok()) << j.status() << "\n" << r->stdout_text;
  ASSERT_TRUE((*j)["first_step_seconds"].is_number()) << j->ToString();
  ASSERT_TRUE((*j)["turnaround_seconds"].is_number()) << j->ToString();
  const double first = (*j)["first_step_seconds"].number();
  const double turnaround = (*j)["turnaround_seconds"].number();
  EXPECT_GT(first, 0);
  EXPECT_GE(turnaround, first);
  EXPECT_EQ(Int((*j)["parameters"], "first_step_runs"), 3);
  EXPECT_EQ(Int(*j, "steps"), 0);

  // Without the flag the fields are null; the flag needs one consumer.
  r = RunSluicectl({"bench", coordinator, "--pipeline=range(10).batch(2)", "--devices=CPU:0",
                    "--steps=1", "--job=plain"});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->stderr_text;
  j = ParseJson(std::string(absl::StripTrailingAsciiWhitespace(r->stdout_text)));
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_TRUE((*j)["first_step_seconds"].is_null());
  EXPECT_TRUE((*j)["turnaround_seconds"].is_null());
  r = RunSluicectl({"bench", coordinator, "--pipeline=range(10).batch(2)", "--devices=CPU:0",
                    "--first_step_runs=2", "--num_consumers=2"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->stderr_text, HasSubstr("--first_step_runs"));
  absl::Status stopped = (*cluster)->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

INSTANTIATE_TEST_SUITE_P(Workers, SluicectlBenchServiceTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 1 ? std::string("OneWorker")
                                                  : std::string("TwoWorkers");
                         });

}  // namespace
}  // namespace sluice
