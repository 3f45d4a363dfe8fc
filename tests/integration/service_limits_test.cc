// Multi-process (issue 25): pipelines whose shapes a client chose, or whose image header claims
// more pixels than an image may have, end in an error naming the op and the size, in process
// (sluicectl run) and through a coordinator and two workers run with a 1 GiB memory limit:
// every worker stays alive, the next job is served, and every process exits 0 on SIGTERM.
// Before the checks, `resize([200000, 200000])` aborted both workers with std::bad_alloc, and a
// PNG literal claiming 60000 x 60000 pixels killed the worker that decoded it.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/core/crafted_images.h"
#include "tests/integration/process_cluster.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct BadPipeline {
  std::string pipeline;
  std::string message;  // a part of the error the user sees
};

std::vector<BadPipeline> BadPipelines() {
  return {
      {absl::StrCat("from_tensors(", crafted::PythonBytesLiteral(crafted::CraftedPng(60000, 60000)),
                    ").map(decode_image())"),
       "the PNG header claims 60000 x 60000 pixels (width x height: 3600000000), more than the "
       "limit of 268435456 pixels per image"},
      {absl::StrCat("from_tensors(",
                    crafted::PythonBytesLiteral(crafted::CraftedJpeg(60000, 60000)),
                    ").map(decode_jpeg(channels=3))"),
       "the JPEG header claims 60000 x 60000 pixels"},
      {"from_tensors([[[1, 2, 3]]]).repeat(4).map(resize([200000, 200000]))",
       "the resized image: a float32 tensor of shape [200000, 200000, 3] (480000000256 bytes) "
       "needs more than the memory limit of one element"},
  };
}

TEST(ServiceLimitsTest, InProcessTheErrorNamesTheOpAndTheSize) {
  for (const BadPipeline& bad : BadPipelines()) {
    SCOPED_TRACE(bad.pipeline.substr(0, 60));
    auto r = RunSluicectl(
        {"run", "--pipeline=" + bad.pipeline, "--max_element_bytes=256MiB", "--memory_limit=1GiB"});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 1) << r->Describe();
    EXPECT_THAT(r->stderr_text, HasSubstr(bad.message));
  }
}

TEST(ServiceLimitsTest, ThroughTwoWorkersEveryWorkerStaysAliveAndTheNextJobIsServed) {
  auto cluster = ProcessCluster::Start({.num_workers = 2, .worker_flags = {"--memory_limit=1GiB"}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ProcessCluster& c = **cluster;
  const std::vector<BadPipeline> bad = BadPipelines();
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE(bad[i].pipeline.substr(0, 60));
    auto r = RunSluicectl({"run", "--coordinator=" + c.coordinator(), absl::StrCat("--job=bad", i),
                           "--pipeline=" + bad[i].pipeline, "--devices=CPU:0,CPU:1", "--steps=1",
                           "--retry_deadline=30s"});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NE(r->exit_code, 0) << r->stdout_text;
    EXPECT_THAT(r->stderr_text, HasSubstr(bad[i].message)) << c.Logs();
    EXPECT_THAT(r->stderr_text, Not(HasSubstr("bad_alloc")));
    auto status = c.Status();
    ASSERT_TRUE(status.ok()) << status.status();
    ASSERT_EQ(status->workers_size(), 2);
    for (const proto::WorkerStatus& w : status->workers()) {
      EXPECT_TRUE(w.alive()) << w.address() << "\n" << c.Logs();
    }
  }
  auto good = RunSluicectl({"run", "--coordinator=" + c.coordinator(), "--job=after",
                            "--pipeline=range(8).batch(4)", "--devices=CPU:0,CPU:1",
                            "--format=json", "--retry_deadline=30s"});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->exit_code, 0) << good->stderr_text << c.Logs();
  EXPECT_THAT(good->stdout_text, HasSubstr("\"values\": [6, 7]}]}"));
  absl::Status stopped = c.StopAll();  // FAILED_PRECONDITION if a worker had died
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace sluice
