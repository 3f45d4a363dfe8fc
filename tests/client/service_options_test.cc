// ServiceOptions are validated before any coordinator is contacted: a trainer launched with a
// layout that cannot work gets INVALID_ARGUMENT naming the option, not a job that waits forever.
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "sluice/service.h"
#include "sluice/strategy.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

ServiceOptions Unreachable() {
  ServiceOptions options;
  options.coordinator_address = "127.0.0.1:1";  // never dialled: validation comes first
  return options;
}

// With an empty name every process of a multi-process launch would make a job of its own: each
// waits for peers that never join. The error must say which option is missing.
TEST(ServiceOptionsTest, SeveralConsumersNeedAJobName) {
  auto strategy = MirroredStrategy::Create({"CPU:0"});
  ASSERT_TRUE(strategy.ok()) << strategy.status();
  ServiceOptions options = Unreachable();
  options.num_consumers = 2;
  options.consumer_index = 1;
  auto dist = DistributeDatasetFromService(*strategy, Dataset::Range(4).Batch(2), options);
  ASSERT_EQ(dist.status().code(), absl::StatusCode::kInvalidArgument) << dist.status();
  EXPECT_THAT(dist.status().message(), HasSubstr("job_name is required with num_consumers = 2"));
}

TEST(ServiceOptionsTest, ConsumerIndexMustBeInRange) {
  auto strategy = MirroredStrategy::Create({"CPU:0"});
  ASSERT_TRUE(strategy.ok()) << strategy.status();
  ServiceOptions options = Unreachable();
  options.job_name = "train";
  options.num_consumers = 2;
  options.consumer_index = 2;
  auto dist = DistributeDatasetFromService(*strategy, Dataset::Range(4).Batch(2), options);
  ASSERT_EQ(dist.status().code(), absl::StatusCode::kInvalidArgument) << dist.status();
  EXPECT_THAT(dist.status().message(), HasSubstr("consumer_index 2 must be in [0, num_consumers"));
}

}  // namespace
}  // namespace sluice
