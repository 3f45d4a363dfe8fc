#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/input_options.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

TEST(InputContextTest, DefaultsAreOnePipelineOneReplica) {
  InputContext ctx;
  EXPECT_EQ(ctx.num_input_pipelines(), 1);
  EXPECT_EQ(ctx.input_pipeline_id(), 0);
  EXPECT_EQ(ctx.num_replicas_in_sync(), 1);
  EXPECT_EQ(*ctx.GetPerReplicaBatchSize(7), 7);
}

TEST(InputContextTest, PerReplicaBatchSizeDividesOrFails) {
  InputContext ctx(2, 1, 4);
  EXPECT_EQ(ctx.num_input_pipelines(), 2);
  EXPECT_EQ(ctx.input_pipeline_id(), 1);
  EXPECT_EQ(*ctx.GetPerReplicaBatchSize(16), 4);
  absl::StatusOr<int64_t> bad = ctx.GetPerReplicaBatchSize(10);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("10"));
  EXPECT_THAT(bad.status().message(), HasSubstr("not divisible"));
}

TEST(InputOptionsTest, DefaultsAreTfs) {
  InputOptions o;
  EXPECT_TRUE(o.experimental_fetch_to_device);
  EXPECT_EQ(o.experimental_replication_mode, InputReplicationMode::kPerWorker);
  EXPECT_FALSE(o.experimental_place_dataset_on_device);
  EXPECT_EQ(o.experimental_per_replica_buffer_size, 1);
  EXPECT_EQ(o.auto_shard_policy, AutoShardPolicy::kAuto);
}

}  // namespace
}  // namespace sluice
