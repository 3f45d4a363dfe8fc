// Issue 25 (tests/adversarial/FOUND.md §4, §6): a pipeline whose spec claims a shape that cannot
// exist (resize([2**40, 2**31 - 1]) of an image: more elements than fit in int64) is refused
// before any job exists, with an error naming the op and its shape, by the client library and
// by the coordinator (which a client registering text reaches directly); no task of it runs on
// the workers. And the client library, which now asks for the spec before it creates the job,
// still reads a good pipeline exactly.
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "server/coordinator.h"
#include "sluice/dataset.h"
#include "sluice/service.h"
#include "tests/worker/in_process_cluster.h"

namespace sluice {
namespace {

constexpr char kResizeBomb[] =
    "from_tensors(tf.constant(7, dtype=tf.uint8, shape=[8, 8, 3])).repeat(2)"
    ".map(resize([1099511627776, 2147483647])).batch(2)";
// No op of it checks its own output shape: the spec [4, 2^62] is refused by spec inference.
constexpr char kNestedBatch[] =
    "range(2).batch(4611686018427387904, drop_remainder=True).batch(4, drop_remainder=True)";

proto::GetStatusResponse CoordinatorStatus(Cluster& cluster) {
  proto::GetStatusRequest req;
  proto::GetStatusResponse resp;
  EXPECT_TRUE(cluster.coordinator().GetStatus(req, &resp).ok());
  return resp;
}

// The graph is refused by the client library as it is parsed, and by the coordinator when a
// client registers the text (sluicectl, another language's client), naming `op`; no dataset or
// job is left behind.
void ExpectRefusedBeforeAnyJob(Cluster& cluster, const std::string& pipeline,
                               const std::string& op) {
  absl::StatusOr<Dataset> parsed = Dataset::Parse(pipeline);
  ASSERT_FALSE(parsed.ok()) << pipeline;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
  EXPECT_TRUE(absl::StrContains(parsed.status().message(), op)) << parsed.status();
  EXPECT_TRUE(absl::StrContains(parsed.status().message(), "more elements than fit in int64"))
      << parsed.status();

  proto::RegisterDatasetRequest reg;
  reg.set_wire_version(proto::WIRE_VERSION_1);
  reg.set_pipeline(pipeline);
  proto::RegisterDatasetResponse reg_resp;
  absl::Status registered = cluster.coordinator().RegisterDataset(reg, &reg_resp);
  EXPECT_EQ(registered.code(), absl::StatusCode::kInvalidArgument) << registered;
  EXPECT_TRUE(absl::StrContains(registered.message(), op)) << registered;

  proto::GetStatusResponse status = CoordinatorStatus(cluster);
  EXPECT_EQ(status.num_datasets(), 0);
  EXPECT_EQ(status.jobs_size(), 0);
}

TEST(ServiceSpecErrorTest, ShapeThatCannotExistIsRefusedBeforeAnyJobNamingTheOp) {
  Cluster cluster(2);
  ExpectRefusedBeforeAnyJob(cluster, kResizeBomb, "resize: shape [1099511627776, 2147483647]");
  ExpectRefusedBeforeAnyJob(cluster, kNestedBatch, "batch(4, drop_remainder=True)");

  // The client's order (spec, then job) serves a good pipeline exactly.
  ServiceOptions options;
  options.job_name = "good";
  Consumed good = Consume(cluster.address(), Dataset::Range(10).Batch(2), options, 1);
  ASSERT_TRUE(good.status.ok()) << good.status;
  ExpectExactlyOnce({good}, 10);
  EXPECT_EQ(CoordinatorStatus(cluster).jobs_size(), 1);
}

}  // namespace
}  // namespace sluice
